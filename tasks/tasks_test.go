package tasks

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// configs are the task configurations the property tests run: each task's defaults, its smallest
// sizes and some odd ones.
var configs = []struct {
	name string
	cfg  Config
}{
	{"prev-token", Config{}},
	{"prev-token", Config{SeqLen: 9, Vocab: 3, K: 4}},
	{"prev-token", Config{SeqLen: 2, Vocab: 2}},
	{"induction", Config{}},
	{"induction", Config{SeqLen: 4, Vocab: 4}},
	{"induction", Config{SeqLen: 41, Vocab: 22}},
	{"sort", Config{}},
	{"sort", Config{SeqLen: 2, Vocab: 3}},
	{"sort", Config{SeqLen: 30, Vocab: 4}},
	{"brackets", Config{}},
	{"brackets", Config{SeqLen: 2, Vocab: 2}},
	{"brackets", Config{SeqLen: 41, Vocab: 12}},
	{"modadd", Config{}},
	{"modadd", Config{Vocab: 3}},
}

// seq is one sequence of a batch, as the checkers read it.
type seq struct {
	tokens, targets []int
	scored          []bool
	d               []float32 // [T, T]
}

func (s seq) row(t int) []float32 { n := len(s.tokens); return s.d[t*n : (t+1)*n] }

func sequences(b Batch) []seq {
	out := make([]seq, b.B)
	n := b.T
	for i := range out {
		out[i] = seq{b.Tokens[i*n : (i+1)*n], b.Targets[i*n : (i+1)*n], b.Scored[i*n : (i+1)*n], b.Attn[i*n*n : (i+1)*n*n]}
	}
	return out
}

// checkShape checks what every task promises: sizes, ids in range, and D rows of causal 0/1
// marks, some where scored and none elsewhere.
func checkShape(tk Task, b Batch) error {
	n, v := tk.SeqLen(), tk.Vocab()
	if b.T != n || len(b.Tokens) != b.B*n || len(b.Targets) != b.B*n || len(b.Scored) != b.B*n || len(b.Attn) != b.B*n*n {
		return fmt.Errorf("batch B=%d T=%d has %d tokens, %d targets, %d scored, %d attn; want T=%d",
			b.B, b.T, len(b.Tokens), len(b.Targets), len(b.Scored), len(b.Attn), n)
	}
	for i, s := range sequences(b) {
		for t := range n {
			if x, y := s.tokens[t], s.targets[t]; x < 0 || x >= v || y < 0 || y >= v {
				return fmt.Errorf("sequence %d position %d: token %d, target %d, want ids in [0, %d)", i, t, x, y, v)
			}
			marked := 0
			for k, w := range s.row(t) {
				if w != 0 && w != 1 || k > t && w != 0 {
					return fmt.Errorf("sequence %d: D[%d, %d] = %v, want 0 or 1, and 0 past the query", i, t, k, w)
				}
				if w == 1 {
					marked++
				}
			}
			if (marked > 0) != s.scored[t] {
				return fmt.Errorf("sequence %d: D row %d marks %d keys with scored %v, want some exactly where scored", i, t, marked, s.scored[t])
			}
		}
	}
	return nil
}

// oneHot reports whether row is 1 at k and 0 elsewhere.
func oneHot(row []float32, k int) bool {
	for j, w := range row {
		if w != map[bool]float32{true: 1, false: 0}[j == k] {
			return false
		}
	}
	return true
}

// checkers check each sequence of a task by brute force from its tokens, independently of the
// generator: the scored positions, their targets and D. They return the first violation.
var checkers = map[string]func(tk Task, cfg Config, s seq) error{
	"prev-token": func(tk Task, cfg Config, s seq) error {
		k := max(cfg.K, 1)
		for t := range s.tokens {
			if s.scored[t] != (t >= k) {
				return fmt.Errorf("position %d scored %v, want %v (K %d)", t, s.scored[t], t >= k, k)
			}
			if t >= k && (s.targets[t] != s.tokens[t-k] || !oneHot(s.row(t), t-k)) {
				return fmt.Errorf("position %d: target %d, D %v; want token %d and D on %d", t, s.targets[t], s.row(t), s.tokens[t-k], t-k)
			}
		}
		return nil
	},
	"induction": func(tk Task, _ Config, s seq) error {
		bos, pad, T := tk.Vocab()-2, tk.Vocab()-1, len(s.tokens)
		if s.tokens[0] != bos {
			return fmt.Errorf("tokens start %v, want BOS %d", s.tokens[0], bos)
		}
		n := 0 // length of the first copy: the first repeat is at n+1
		for p := 2; p < T && n == 0; p++ {
			if slices.Contains(s.tokens[1:p], s.tokens[p]) {
				n = p - 1
			}
		}
		if n < 2 {
			return fmt.Errorf("tokens %v: no repeat after a first copy of at least 2", s.tokens)
		}
		for t := 1; t < T; t++ {
			switch x := s.tokens[t]; {
			case t <= n && x >= bos:
				return fmt.Errorf("first copy holds %d at %d, want a content token below %d", x, t, bos)
			case t > n && t <= 2*n && x != s.tokens[t-n]:
				return fmt.Errorf("repeat holds %d at %d, want %d", x, t, s.tokens[t-n])
			case t > 2*n && x != pad:
				return fmt.Errorf("position %d past the repeat holds %d, want PAD %d", t, x, pad)
			}
			if t+1 < T && s.targets[t] != s.tokens[t+1] {
				return fmt.Errorf("target at %d is %d, want the next token %d", t, s.targets[t], s.tokens[t+1])
			}
			if want := t > n && t < 2*n; s.scored[t] != want {
				return fmt.Errorf("first copy of %d: position %d scored %v, want %v", n, t, s.scored[t], want)
			}
			if !s.scored[t] {
				continue
			}
			var earlier []int // earlier occurrences of the current token
			for j := range t {
				if s.tokens[j] == s.tokens[t] {
					earlier = append(earlier, j)
				}
			}
			if len(earlier) != 1 {
				return fmt.Errorf("token %d at %d occurs earlier at %v, want once", s.tokens[t], t, earlier)
			}
			if j := earlier[0]; s.targets[t] != s.tokens[j+1] || !oneHot(s.row(t), j+1) {
				return fmt.Errorf("position %d: target %d, D %v; want token %d and D on %d", t, s.targets[t], s.row(t), s.tokens[j+1], j+1)
			}
		}
		return nil
	},
	"sort": func(tk Task, _ Config, s seq) error {
		sep, T := tk.Vocab()-1, len(s.tokens)
		n := T / 2
		counts := make([]int, sep)
		for _, x := range s.tokens[:n] {
			if x >= sep {
				return fmt.Errorf("input %v holds an id ≥ SEP %d", s.tokens[:n], sep)
			}
			counts[x]++
		}
		var sorted []int // counting sort
		for x, c := range counts {
			for range c {
				sorted = append(sorted, x)
			}
		}
		if s.tokens[n] != sep || !slices.Equal(s.tokens[n+1:], sorted[:n-1]) {
			return fmt.Errorf("tokens %v, want the input, SEP %d, then %v", s.tokens, sep, sorted[:n-1])
		}
		for t := range T {
			if s.scored[t] != (t >= n) {
				return fmt.Errorf("position %d scored %v, want %v", t, s.scored[t], t >= n)
			}
			if t < n {
				continue
			}
			want := sorted[t-n]
			if s.targets[t] != want {
				return fmt.Errorf("position %d: target %d, want %d", t, s.targets[t], want)
			}
			for j, w := range s.row(t) {
				var d float32
				if j < n && s.tokens[j] == want {
					d = 1
				}
				if w != d {
					return fmt.Errorf("D[%d, %d] = %v, want %v", t, j, w, d)
				}
			}
		}
		return nil
	},
	"brackets": func(tk Task, _ Config, s seq) error {
		types, T := tk.Vocab()/2, len(s.tokens)
		var open []int
		for t, x := range s.tokens {
			if x < types {
				open = append(open, t)
			} else if len(open) == 0 || s.tokens[open[len(open)-1]]+types != x {
				return fmt.Errorf("prefix %v is not valid: closer %d at %d matches no open bracket", s.tokens[:t+1], x, t)
			} else {
				open = open[:len(open)-1]
			}
			next := s.targets[t]
			if t+1 < T && next != s.tokens[t+1] {
				return fmt.Errorf("target at %d is %d, want the next token %d", t, next, s.tokens[t+1])
			}
			if s.scored[t] != (next >= types) {
				return fmt.Errorf("position %d scored %v with next token %d, want %v", t, s.scored[t], next, next >= types)
			}
			if !s.scored[t] {
				continue
			}
			if len(open) == 0 {
				return fmt.Errorf("position %d: next token %d closes nothing", t, next)
			}
			if j := open[len(open)-1]; next != s.tokens[j]+types || !oneHot(s.row(t), j) {
				return fmt.Errorf("position %d: target %d, D %v; want the closer of %d at %d", t, next, s.row(t), s.tokens[j], j)
			}
		}
		return nil
	},
	"modadd": func(tk Task, _ Config, s seq) error {
		p := tk.Vocab() - 1
		a, b := s.tokens[0], s.tokens[1]
		if a >= p || b >= p || s.tokens[2] != p {
			return fmt.Errorf("tokens %v, want a b = with a, b < %d and = %d", s.tokens, p, p)
		}
		sum := a // a+b mod p by counting
		for range b {
			if sum++; sum == p {
				sum = 0
			}
		}
		if !slices.Equal(s.scored, []bool{false, false, true}) || s.targets[2] != sum ||
			!slices.Equal(s.row(2), []float32{1, 1, 0}) {
			return fmt.Errorf("scored %v, target %d, D %v; want position 2 only, %d, [1 1 0]", s.scored, s.targets[2], s.row(2), sum)
		}
		return nil
	},
}

// check runs checkShape and the task's checker on every sequence of b.
func check(tk Task, cfg Config, b Batch) error {
	if err := checkShape(tk, b); err != nil {
		return err
	}
	for i, s := range sequences(b) {
		if err := checkers[tk.Name()](tk, cfg, s); err != nil {
			return fmt.Errorf("sequence %d: %w", i, err)
		}
	}
	return nil
}

func mustNew(t *testing.T, name string, cfg Config) Task {
	t.Helper()
	tk, err := New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func mustBatch(t *testing.T, tk Task, seed uint64, b int) Batch {
	t.Helper()
	out, err := tk.Batch(seed, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBatchesAreCorrect(t *testing.T) {
	for _, c := range configs {
		tk := mustNew(t, c.name, c.cfg)
		for seed := range uint64(3) {
			if err := check(tk, c.cfg, mustBatch(t, tk, seed, 24)); err != nil {
				t.Errorf("%s %+v seed %d: %v", c.name, c.cfg, seed, err)
			}
		}
	}
}

// oracles predict a scored position from the tokens and its D row alone, as the task defines:
// read the token D points to (the argmax) and transform it; modadd adds the tokens D covers.
var oracles = map[string]func(v int, tokens []int, d []float32) int{
	"prev-token": readArgmax,
	"induction":  readArgmax,
	"sort":       readArgmax,
	"brackets":   func(v int, tokens []int, d []float32) int { return readArgmax(v, tokens, d) + v/2 },
	"modadd": func(v int, tokens []int, d []float32) int {
		sum := 0
		for k, w := range d {
			if w > 0 {
				sum += tokens[k]
			}
		}
		return sum % (v - 1)
	},
}

func readArgmax(_ int, tokens []int, d []float32) int {
	best := 0
	for k, w := range d {
		if w > d[best] {
			best = k
		}
	}
	return tokens[best]
}

func TestOracleReadingDIsPerfect(t *testing.T) {
	for _, c := range configs {
		tk := mustNew(t, c.name, c.cfg)
		correct, counted := 0, 0
		for _, s := range sequences(mustBatch(t, tk, 11, 64)) {
			for i, scored := range s.scored {
				if scored {
					counted++
					if oracles[c.name](tk.Vocab(), s.tokens, s.row(i)) == s.targets[i] {
						correct++
					}
				}
			}
		}
		if counted == 0 || correct != counted {
			t.Errorf("%s %+v: oracle got %d of %d scored positions, want all of at least one", c.name, c.cfg, correct, counted)
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, c := range configs {
		tk := mustNew(t, c.name, c.cfg)
		b := mustBatch(t, tk, 5, 8)
		if again := mustBatch(t, tk, 5, 8); !reflect.DeepEqual(b, again) {
			t.Errorf("%s %+v: two batches from seed 5 differ", c.name, c.cfg)
		}
		// A smaller batch is a prefix of a larger one.
		small, n := mustBatch(t, tk, 5, 3), tk.SeqLen()
		if !slices.Equal(small.Tokens, b.Tokens[:3*n]) || !slices.Equal(small.Targets, b.Targets[:3*n]) ||
			!slices.Equal(small.Scored, b.Scored[:3*n]) || !slices.Equal(small.Attn, b.Attn[:3*n*n]) {
			t.Errorf("%s %+v: batch of 3 from seed 5 is not the start of the batch of 8", c.name, c.cfg)
		}
		if other := mustBatch(t, tk, 6, 8); slices.Equal(b.Tokens, other.Tokens) {
			t.Errorf("%s %+v: seeds 5 and 6 give the same tokens %v", c.name, c.cfg, b.Tokens)
		}
	}
}

// TestSeedsIndependent checks prev-token's uniform tokens: distinct seeds give distinct
// sequences, every id comes about equally often, and tokens of different seeds, and of
// neighbouring sequences, agree at the chance rate 1/V.
func TestSeedsIndependent(t *testing.T) {
	tk := mustNew(t, "prev-token", Config{})
	v := tk.Vocab()
	first := map[string]uint64{} // the first sequence of each seed's batch, printed
	for _, seed := range []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 1 << 32, 1 << 63, math.MaxUint64} {
		key := fmt.Sprint(mustBatch(t, tk, seed, 1).Tokens)
		if other, ok := first[key]; ok {
			t.Errorf("seeds %d and %d give the same sequence %s", other, seed, key)
		}
		first[key] = seed
	}
	a, b := mustBatch(t, tk, 1, 256), mustBatch(t, tk, 2, 256)
	counts := make([]int, v)
	for _, x := range a.Tokens {
		counts[x]++
	}
	want := float64(len(a.Tokens)) / float64(v) // 512, standard deviation about 22
	for id, c := range counts {
		if math.Abs(float64(c)-want) > 0.2*want {
			t.Errorf("id %d drawn %d times in %d tokens, want about %.0f", id, c, len(a.Tokens), want)
		}
	}
	agree := func(x, y []int) float64 {
		same := 0
		for i := range x {
			if x[i] == y[i] {
				same++
			}
		}
		return float64(same) / float64(len(x))
	}
	n := len(a.Tokens)
	for what, rate := range map[string]float64{
		"seeds 1 and 2":               agree(a.Tokens, b.Tokens),
		"sequences i and i+1, seed 1": agree(a.Tokens[:n-a.T], a.Tokens[a.T:]),
	} {
		// Chance is 1/16 = 0.0625 with a standard deviation of about 0.0027.
		if rate < 0.05 || rate > 0.075 {
			t.Errorf("tokens of %s agree at rate %.4f, want about %.4f", what, rate, 1/float64(v))
		}
	}
}

// TestInductionOffsetsVary checks that the copy length n varies within its range, so the task
// cannot be solved by attending a fixed distance back.
func TestInductionOffsetsVary(t *testing.T) {
	tk := mustNew(t, "induction", Config{})
	seen := map[int]bool{}
	for _, s := range sequences(mustBatch(t, tk, 3, 200)) {
		first := slices.Index(s.scored, true) // n+1
		seen[first-1] = true
	}
	for n := 8; n <= 16; n++ {
		if !seen[n] {
			t.Errorf("no sequence in 200 has a first copy of %d tokens; saw %v, want every n in 8..16", n, seen)
		}
	}
	if len(seen) != 9 {
		t.Errorf("first copies of lengths %v, want exactly 8..16", seen)
	}
}

// TestCoverage checks that default batches hold the cases that make the tasks hard: brackets
// whose matching opener is not the current token, every bracket type, and sort inputs with
// repeated values, whose D marks several positions.
func TestCoverage(t *testing.T) {
	br := mustNew(t, "brackets", Config{})
	far, types := 0, map[int]bool{}
	for _, s := range sequences(mustBatch(t, br, 1, 16)) {
		for q, scored := range s.scored {
			types[s.tokens[q]%3] = true
			if scored && s.row(q)[q] == 0 {
				far++
			}
		}
	}
	if far == 0 || len(types) != 3 {
		t.Errorf("brackets: %d closers match an earlier opener than the current token, types %v; want some and all 3", far, types)
	}
	srt := mustNew(t, "sort", Config{})
	several := 0
	for _, s := range sequences(mustBatch(t, srt, 1, 16)) {
		for q, scored := range s.scored {
			ones := 0
			for _, w := range s.row(q) {
				if w == 1 {
					ones++
				}
			}
			if scored && ones > 1 {
				several++
			}
		}
	}
	if several == 0 {
		t.Error("sort: no scored position has D on several repeated values, want some")
	}
}

func TestDefaultsAndSymbols(t *testing.T) {
	for _, c := range []struct {
		name          string
		cfg           Config
		vocab, seqLen int
		symbols       map[int]string
	}{
		{"prev-token", Config{}, 16, 32, map[int]string{0: "0", 15: "15", 16: "?16", -1: "?-1"}},
		{"induction", Config{}, 32, 32, map[int]string{29: "29", 30: "BOS", 31: "PAD"}},
		{"induction", Config{SeqLen: 100}, 52, 100, map[int]string{50: "BOS", 51: "PAD"}},
		{"sort", Config{}, 11, 16, map[int]string{9: "9", 10: "SEP"}},
		{"brackets", Config{}, 6, 32, map[int]string{0: "(", 1: "[", 2: "{", 3: ")", 4: "]", 5: "}", 6: "?6"}},
		{"brackets", Config{Vocab: 10}, 10, 32, map[int]string{3: "<", 4: "(4", 8: ">", 9: ")4"}},
		{"modadd", Config{}, 54, 3, map[int]string{0: "0", 52: "52", 53: "=", 54: "?54"}},
	} {
		tk := mustNew(t, c.name, c.cfg)
		if tk.Name() != c.name || tk.Vocab() != c.vocab || tk.SeqLen() != c.seqLen || tk.Describe() == "" {
			t.Errorf("%s %+v: name %q, vocab %d, seqLen %d, describe %q; want %s, %d, %d, a description",
				c.name, c.cfg, tk.Name(), tk.Vocab(), tk.SeqLen(), tk.Describe(), c.name, c.vocab, c.seqLen)
		}
		for id, want := range c.symbols {
			if got := tk.Symbol(id); got != want {
				t.Errorf("%s %+v: Symbol(%d) = %q, want %q", c.name, c.cfg, id, got, want)
			}
		}
	}
	if got := Names(); !slices.Equal(got, []string{"brackets", "induction", "modadd", "prev-token", "sort"}) {
		t.Errorf("Names() = %v, want the five tasks sorted", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nope", Config{}, `tasks: unknown task "nope", want one of brackets, induction, modadd, prev-token, sort`},
		{"prev-token", Config{SeqLen: 1}, "tasks: prev-token: SeqLen is 1, want 2 to 4096"},
		{"prev-token", Config{SeqLen: -3}, "tasks: prev-token: SeqLen is -3, want 2 to 4096"},
		{"prev-token", Config{SeqLen: 5000}, "tasks: prev-token: SeqLen is 5000, want 2 to 4096"},
		{"prev-token", Config{Vocab: 1}, "tasks: prev-token: Vocab is 1, want 2 to 65536"},
		{"prev-token", Config{K: 32}, "tasks: prev-token: K is 32, want 1 to 31 (below SeqLen 32)"},
		{"prev-token", Config{K: -1}, "tasks: prev-token: K is -1, want 1 to 31 (below SeqLen 32)"},
		{"induction", Config{K: 2}, "tasks: induction: K is 2, want 0 (K is prev-token's offset)"},
		{"induction", Config{SeqLen: 3}, "tasks: induction: SeqLen is 3, want 4 to 4096"},
		{"induction", Config{SeqLen: 40, Vocab: 21}, "tasks: induction: Vocab is 21, want 22 to 65536 (BOS, PAD and"},
		{"sort", Config{SeqLen: 9}, "tasks: sort: SeqLen is 9, want an even number"},
		{"sort", Config{Vocab: 2}, "tasks: sort: Vocab is 2, want 3 to 65536"},
		{"brackets", Config{Vocab: 7}, "tasks: brackets: Vocab is 7, want an even number"},
		{"brackets", Config{Vocab: 1 << 20}, "tasks: brackets: Vocab is 1048576, want 2 to 65536"},
		{"brackets", Config{SeqLen: 1}, "tasks: brackets: SeqLen is 1, want 2 to 4096"},
		{"modadd", Config{SeqLen: 4}, "tasks: modadd: SeqLen is 4, want 3 (a b =)"},
		{"modadd", Config{Vocab: 21}, "tasks: modadd: Vocab 21 makes the modulus 20, want a prime"},
		{"modadd", Config{Vocab: 2}, "tasks: modadd: Vocab is 2, want 3 to 65536"},
	} {
		tk, err := New(c.name, c.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("New(%q, %+v) = %v, %v; want error %q", c.name, c.cfg, tk, err, c.want)
		}
	}
}

func TestBatchSizeErrors(t *testing.T) {
	tk := mustNew(t, "prev-token", Config{})
	for _, b := range []int{0, -1, 1<<18 + 1} {
		want := fmt.Sprintf("tasks: prev-token: batch size is %d, want 1 to 262144 (B·T·T ≤ 268435456 with T = 32)", b)
		if _, err := tk.Batch(1, b); err == nil || err.Error() != want {
			t.Errorf("Batch(1, %d) error %v, want %q", b, err, want)
		}
	}
}

func TestPrime(t *testing.T) {
	var got []int
	for p := -2; p < 60; p++ {
		if prime(p) {
			got = append(got, p)
		}
	}
	if want := []int{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59}; !slices.Equal(got, want) {
		t.Errorf("primes below 60: %v, want %v", got, want)
	}
}

// FuzzNew builds tasks from arbitrary configurations: New must answer with a task or an error,
// never panic, and every task it builds must make correct batches.
func FuzzNew(f *testing.F) {
	for _, c := range configs {
		f.Add(c.name, c.cfg.SeqLen, c.cfg.Vocab, c.cfg.K, uint64(1))
	}
	f.Add("modadd", 3, 128, 0, uint64(2))
	f.Fuzz(func(t *testing.T, name string, seqLen, vocab, k int, seed uint64) {
		cfg := Config{SeqLen: seqLen, Vocab: vocab, K: k}
		tk, err := New(name, cfg)
		if err != nil {
			return
		}
		if tk.SeqLen() > 256 {
			t.Skip("long sequences make slow batches")
		}
		b, err := tk.Batch(seed, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(tk, cfg, b); err != nil {
			t.Fatalf("%s %+v seed %d: %v", name, cfg, seed, err)
		}
	})
}
