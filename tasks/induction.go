package tasks

import (
	"fmt"
	"math/rand/v2"
)

// newInduction builds induction: BOS, n distinct tokens, the same n tokens again, PAD.
func newInduction(cfg Config) (*task, error) {
	seqLen := orDefault(cfg.SeqLen, 32)
	if err := checkRange("SeqLen", seqLen, 4, MaxSeqLen); err != nil {
		return nil, err
	}
	hi := seqLen / 2 // the range of n, the length of the first copy
	lo := max(2, (hi+1)/2)
	v := orDefault(cfg.Vocab, max(32, hi+2))
	if err := checkRange("Vocab", v, hi+2, MaxVocab); err != nil {
		return nil, fmt.Errorf("%w (BOS, PAD and at least SeqLen/2 content tokens, so that the repeated ones are distinct)", err)
	}
	bos, pad := v-2, v-1
	return &task{
		name: "induction",
		describe: fmt.Sprintf("induction: BOS, %d to %d distinct tokens from %d, the same tokens again; predict the repeat",
			lo, hi, bos),
		vocab:  v,
		seqLen: seqLen,
		symbol: func(id int) string {
			switch id {
			case bos:
				return "BOS"
			case pad:
				return "PAD"
			}
			return number(id)
		},
		fill: func(r *rand.Rand, s sequence) {
			n := lo + r.IntN(hi-lo+1)
			xs := distinct(r, n, bos)
			text := make([]int, 0, seqLen+1)
			text = append(append(append(text, bos), xs...), xs...)
			for len(text) <= seqLen {
				text = append(text, pad)
			}
			s.shift(text)
			for t := n + 1; t <= 2*n-1; t++ {
				s.attend(t, t-n+1, 1) // t holds x_{t−n−1}, first seen at t−n; the target x_{t−n} follows it
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
