package tasks

import (
	"fmt"
	"math/rand/v2"
)

// newBrackets builds brackets: a balanced string of several bracket types.
func newBrackets(cfg Config) (*task, error) {
	n := orDefault(cfg.SeqLen, 32)
	v := orDefault(cfg.Vocab, 6)
	if err := checkRange("SeqLen", n, 2, MaxSeqLen); err != nil {
		return nil, err
	}
	if err := checkRange("Vocab", v, 2, MaxVocab); err != nil {
		return nil, err
	}
	if v%2 != 0 {
		return nil, fmt.Errorf("Vocab is %d, want an even number (an opener and a closer per type)", v)
	}
	types := v / 2
	length := n + 1 + n%2 // T+1 rounded up to even
	return &task{
		name:     "brackets",
		describe: fmt.Sprintf("brackets: balanced strings of %d bracket types; predict each closer", types),
		vocab:    v,
		seqLen:   n,
		symbol: func(id int) string {
			kind, side := id%types, id/types // side 0 opens, 1 closes
			if kind < 4 {
				return "([{<)]}>"[kind+4*side : kind+4*side+1]
			}
			return fmt.Sprintf("%c%d", "()"[side], kind)
		},
		fill: func(r *rand.Rand, s sequence) {
			text := make([]int, length)
			var open []int // positions of the open brackets, innermost last
			for i := range text {
				if left := length - i; len(open) == 0 || len(open) < left && r.IntN(2) == 0 {
					text[i] = r.IntN(types)
					open = append(open, i)
					continue
				}
				opener := open[len(open)-1]
				open = open[:len(open)-1]
				text[i] = types + text[opener]
				if i <= n { // position i−1 predicts this closer; it is in the input
					s.attend(i-1, opener, 1)
				}
			}
			s.shift(text)
		},
	}, nil
}
