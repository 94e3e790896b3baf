package tasks

import (
	"fmt"
	"math/rand/v2"
)

// newPrevToken builds prev-token: copy the token K positions back.
func newPrevToken(cfg Config) (*task, error) {
	n := orDefault(cfg.SeqLen, 32)
	v := orDefault(cfg.Vocab, 16)
	k := orDefault(cfg.K, 1)
	if err := checkRange("SeqLen", n, 2, MaxSeqLen); err != nil {
		return nil, err
	}
	if err := checkRange("Vocab", v, 2, MaxVocab); err != nil {
		return nil, err
	}
	if err := checkRange("K", k, 1, n-1); err != nil {
		return nil, fmt.Errorf("%w (below SeqLen %d)", err, n)
	}
	return &task{
		name:     "prev-token",
		describe: fmt.Sprintf("previous-token copy: predict the token %d back; %d random tokens from %d", k, n, v),
		vocab:    v,
		seqLen:   n,
		symbol:   number,
		fill: func(r *rand.Rand, s sequence) {
			for t := range s.tokens {
				s.tokens[t] = r.IntN(v)
			}
			for t := k; t < n; t++ {
				s.targets[t] = s.tokens[t-k]
				s.attend(t, t-k, 1)
			}
		},
	}, nil
}
