// Package tasks generates synthetic sequence tasks whose correct attention is known, for training
// small causal transformer decoders and checking which heads learned what.
//
// A Task makes batches of B sequences of length T. Tokens[b, t] is the model's input and
// Targets[b, t] what it must predict at position t having read Tokens[b, 0..t]; Scored[b, t] says
// whether position t counts for loss and accuracy; Attn[b, t, :] is the ground-truth attention D,
// 1 at each key position ≤ t that a correct model reads to make that prediction (several where
// the answer sits at each of them, or needs all of them) and 0 elsewhere. D's row is all zero
// exactly where the position is not scored. Targets holds a valid token id at every
// position, but only scored ones mean anything.
//
// Sequence i of a batch depends only on the seed and i: it is drawn from a ChaCha8 generator keyed
// with both, so batches are the same on every platform, a batch of 4 is the first 4 sequences of a
// batch of 8 with the same seed, and different seeds give independent batches.
//
// Token ids number a task's content symbols first and its special tokens after them. Config fields
// left 0 take the defaults given below; Task.Symbol prints an id.
//
// # prev-token
//
// Previous-token copy. Tokens are uniform over [0, Vocab). The target at t is Tokens[t−K], scored
// for t ≥ K, and D[t, t−K] = 1. Defaults: SeqLen 32, Vocab 16, K 1.
//
// # induction
//
// Repeated random tokens, after Olsson et al. (2022). Position 0 holds BOS (id Vocab−2), positions
// 1…n hold n distinct content tokens x_0 … x_{n−1} drawn from [0, Vocab−2), positions n+1…2n
// repeat them, and PAD (id Vocab−1) fills the rest. Targets are the next token. Scored are the
// repeated positions whose next token is repeated too, t = n+1 … 2n−1, where the target is
// x_{t−n} and D[t, t−n+1] = 1: the token after the earlier occurrence of the current token (which
// occurs once before, as the x are distinct). The first half is not scored: its next token is
// random. The last repeated token x_{n−1} is the target at 2n−1 and, when 2n = T, lies just past
// the input.
//
// n is drawn per sequence, uniformly from max(2, ⌈m/2⌉) … m with m = ⌊SeqLen/2⌋, so the copy's
// offset varies: only matching content (a previous-token head feeding an induction head) solves
// the task, not attending a fixed distance back. BOS gives heads with nothing to do a place to
// rest, as in Olsson et al.'s repeated random tokens; padding comes after every scored position,
// so a causal model never sees it before a prediction. Defaults: SeqLen 32 (n from 8 to 16),
// Vocab max(32, m+2); Vocab must leave at least m content tokens.
//
// # sort
//
// With n = SeqLen/2: positions 0…n−1 hold x_0 … x_{n−1} uniform over [0, Vocab−1), position n
// holds the separator SEP (id Vocab−1), positions n+1…2n−1 hold the sorted values s_0 … s_{n−2}
// (ascending, duplicates kept); s_{n−1} is only a target. Targets are the next token: at t = n+i
// the target is s_i, scored for t = n … 2n−1. D[n+i, j] = 1 for each of the input positions
// j < n with x_j = s_i. SeqLen must be even. Defaults: SeqLen 16, Vocab 11 (values 0–9 and SEP).
//
// # brackets
//
// Balanced brackets of k = Vocab/2 types: the opener of type i is id i and its closer id k+i,
// printed ( ) [ ] { } < > for the first four types and (i )i after them. The text is one balanced
// string of T+1 tokens rounded up to even length, drawn left to right: open when nothing is open,
// close when the open brackets fill the rest of the string, otherwise open or close with
// probability ½ each, each opener's type uniform. Tokens is its first T tokens and Targets the
// next token, so every prefix is valid and no padding is needed. Scored are the positions whose
// next token is a closer: which closer is then determined, the one of the innermost open
// bracket, and D puts 1 on that opener's position. Vocab must be even. Defaults: SeqLen 32,
// Vocab 6.
//
// # modadd
//
// Modular addition, after Power et al. (2022) and Nanda et al. (2023). Tokens are a, b and "="
// (id p) with a and b uniform over [0, p) and p = Vocab−1 prime; the target at position 2 is
// (a+b) mod p, scored only there, and D[2, 0] = D[2, 1] = 1. Pairs are drawn with replacement
// from all p² of them, so no pair is held out. SeqLen is 3. Defaults: Vocab 54 (p = 53).
package tasks
