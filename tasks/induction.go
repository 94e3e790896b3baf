package tasks

import (
	"fmt"
	"math/rand/v2"
)

// newInduction builds induction: BOS, then n distinct tokens repeated until the sequence ends.
func newInduction(cfg Config) (*task, error) {
	seqLen := orDefault(cfg.SeqLen, 32)
	if err := checkRange("SeqLen", seqLen, 4, MaxSeqLen); err != nil {
		return nil, err
	}
	hi := max(2, seqLen/3) // the range of n, the length of one copy: at least three copies
	lo := max(2, (hi+1)/2)
	v := orDefault(cfg.Vocab, max(32, hi+1))
	if err := checkRange("Vocab", v, hi+1, MaxVocab); err != nil {
		return nil, fmt.Errorf("%w (BOS and at least max(2, SeqLen/3) content tokens, so that the repeated ones are distinct)", err)
	}
	bos := v - 1
	return &task{
		name: "induction",
		describe: fmt.Sprintf("induction: BOS, then %d to %d distinct tokens from %d repeated to the end; predict the repeats",
			lo, hi, bos),
		vocab:  v,
		seqLen: seqLen,
		symbol: func(id int) string {
			if id == bos {
				return "BOS"
			}
			return number(id)
		},
		fill: func(r *rand.Rand, s sequence) {
			n := lo + r.IntN(hi-lo+1)
			xs := distinct(r, n, bos)
			text := make([]int, 1, seqLen+1)
			text[0] = bos
			for len(text) <= seqLen {
				text = append(text, xs[(len(text)-1)%n])
			}
			s.shift(text)
			// Position t ≥ n+1 holds a token seen before at t−n, t−2n, …; each of those was
			// followed by the target, at t−n+1, t−2n+1, …
			for t := n + 1; t < seqLen; t++ {
				for j := t - n + 1; j >= 2; j -= n {
					s.attend(t, j, 1)
				}
			}
		},
	}, nil
}

// distinct returns n distinct values drawn uniformly from [0, m), in random order. n ≤ m.
func distinct(r *rand.Rand, n, m int) []int {
	xs := make([]int, 0, n)
	seen := make(map[int]bool, n)
	for len(xs) < n {
		if x := r.IntN(m); !seen[x] {
			seen[x] = true
			xs = append(xs, x)
		}
	}
	return xs
}
