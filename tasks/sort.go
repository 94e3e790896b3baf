package tasks

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// newSort builds sort: n values, SEP, the values sorted.
func newSort(cfg Config) (*task, error) {
	n := orDefault(cfg.SeqLen, 16)
	v := orDefault(cfg.Vocab, 11)
	if err := checkRange("SeqLen", n, 2, MaxSeqLen); err != nil {
		return nil, err
	}
	if n%2 != 0 {
		return nil, fmt.Errorf("SeqLen is %d, want an even number (n values, SEP, n−1 sorted values)", n)
	}
	if err := checkRange("Vocab", v, 3, MaxVocab); err != nil {
		return nil, err
	}
	half, sep := n/2, v-1
	return &task{
		name:     "sort",
		describe: fmt.Sprintf("sort: %d values from 0 to %d, SEP, then the values in ascending order", half, sep-1),
		vocab:    v,
		seqLen:   n,
		symbol: func(id int) string {
			if id == sep {
				return "SEP"
			}
			return number(id)
		},
		fill: func(r *rand.Rand, s sequence) {
			text := make([]int, 0, n+1)
			for range half {
				text = append(text, r.IntN(sep))
			}
			values := text[:half]
			sorted := slices.Sorted(slices.Values(values))
			text = append(append(text, sep), sorted...)
			s.shift(text)
			for i, want := range sorted {
				for j, x := range values {
					if x == want {
						s.attend(half+i, j, 1)
					}
				}
			}
		},
	}, nil
}
