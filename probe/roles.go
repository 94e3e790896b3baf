package probe

// PatternScores are one head's attention-pattern scores that need no task, each in [0, 1] (NaN
// where the sequences cannot show it), on sequences of random tokens repeated once
// (RepeatedTokens), where every one of them can show; see RepeatedScores.
type PatternScores struct {
	Layer, Head int
	// PrevToken is PrevToken with k = 1: the mean weight on the previous token.
	PrevToken float64
	// Induction is PrefixMatching: the weight on the token after the earlier copy of the
	// query's token (Olsson et al.'s induction heads).
	Induction float64
	// Duplicate is DuplicateToken: the weight on the earlier copy of the query's own token.
	Duplicate float64
	// FirstToken is FirstToken: the weight on position 0, an attention sink.
	FirstToken float64
	// Position is the mean weight at the head's strongest fixed offset Offset = j − t
	// (OffsetProfile), leaving out −1 (PrevToken) and the offsets of the copies, −n and 1 − n.
	Position float64
	Offset   int
	// Broad is the mean row entropy (Entropy) over the mean log of the keys a row may see
	// under the model's masks (nn.Config.LayerVisibleKeys: causal, window, patterns): 1 for a head
	// that spreads its weight evenly over them.
	Broad float64
}
