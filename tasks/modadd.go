package tasks

import (
	"fmt"
	"math/rand/v2"
)

// newModAdd builds modadd: a b = → (a+b) mod p.
func newModAdd(cfg Config) (*task, error) {
	n := orDefault(cfg.SeqLen, 3)
	v := orDefault(cfg.Vocab, 54)
	if n != 3 {
		return nil, fmt.Errorf("SeqLen is %d, want 3 (a b =)", n)
	}
	if err := checkRange("Vocab", v, 3, MaxVocab); err != nil {
		return nil, err
	}
	p := v - 1
	if !prime(p) {
		return nil, fmt.Errorf("Vocab %d makes the modulus %d, want a prime (Vocab = p+1, e.g. 54 for p = 53)", v, p)
	}
	return &task{
		name:     "modadd",
		describe: fmt.Sprintf("modular addition: a b = → (a+b) mod %d", p),
		vocab:    v,
		seqLen:   n,
		symbol: func(id int) string {
			if id == p {
				return "="
			}
			return number(id)
		},
		fill: func(r *rand.Rand, s sequence) {
			a, b := r.IntN(p), r.IntN(p)
			s.shift([]int{a, b, p, (a + b) % p})
			s.attend(2, 0, 1)
			s.attend(2, 1, 1)
		},
	}, nil
}

// prime reports whether p is a prime.
func prime(p int) bool {
	if p < 2 {
		return false
	}
	for d := 2; d*d <= p; d++ {
		if p%d == 0 {
			return false
		}
	}
	return true
}
