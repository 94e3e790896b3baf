package tasks

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Limits on what a Config or a batch may ask for, so that an absurd size is refused with an error
// instead of exhausting memory.
const (
	MaxSeqLen = 4096
	MaxVocab  = 1 << 16
	// MaxBatchAttn bounds B·T·T, the length of Batch.Attn (1 GiB of float32).
	MaxBatchAttn = 1 << 28
)

// Batch is B sequences of length T. Every slice is row-major.
type Batch struct {
	B, T int
	// Tokens [B, T] is the model's input, ids in [0, Vocab).
	Tokens []int
	// Targets [B, T] is the id the model must predict at each position, in [0, Vocab); it means
	// something only where Scored.
	Targets []int
	// Scored [B, T] marks the positions that count for loss and accuracy.
	Scored []bool
	// Attn [B, T, T] is the ground-truth attention D: row (b, t) holds 1 at each key position
	// ≤ t that query t should attend where Scored[b, t] (several where the answer sits at each
	// of them, or needs all of them), and is all zero elsewhere. The fraction of a head's
	// attention that falls on the 1s is its ground-truth score.
	Attn []float32
}

// Task generates batches of one synthetic task. The package documentation describes each task's
// format. A Task is immutable and safe for concurrent use.
type Task interface {
	// Name is the task's name, one of Names().
	Name() string
	// Vocab is the number of token ids, content and special.
	Vocab() int
	// SeqLen is T, the length of every sequence.
	SeqLen() int
	// Describe says in one line what the task asks, with its parameters.
	Describe() string
	// Symbol returns the printable form of a token id: a number, a bracket, "=", "SEP", "BOS",
	// "PAD". Ids outside [0, Vocab) print as "?" and the id.
	Symbol(id int) string
	// Batch returns b sequences drawn from seed (see the package documentation). It returns an
	// error when b is below 1 or b·T·T exceeds MaxBatchAttn.
	Batch(seed uint64, b int) (Batch, error)
}

// Config sets a task's sizes. A zero field takes the task's default.
type Config struct {
	SeqLen int // T
	Vocab  int // number of token ids
	K      int // prev-token's offset (default 1); the other tasks take none
}

// registry lists the tasks by name, sorted.
var registry = []struct {
	name  string
	build func(Config) (*task, error)
}{
	{"brackets", newBrackets},
	{"induction", newInduction},
	{"modadd", newModAdd},
	{"prev-token", newPrevToken},
	{"sort", newSort},
}

// Names returns the task names, sorted.
func Names() []string {
	names := make([]string, len(registry))
	for i, r := range registry {
		names[i] = r.name
	}
	return names
}

// New returns the named task with the sizes in cfg. It returns an error when the name is unknown
// (listing the valid ones) or cfg does not suit the task (saying what it allows).
func New(name string, cfg Config) (Task, error) {
	for _, r := range registry {
		if r.name != name {
			continue
		}
		if cfg.K != 0 && name != "prev-token" {
			return nil, fmt.Errorf("tasks: %s: K is %d, want 0 (K is prev-token's offset)", name, cfg.K)
		}
		t, err := r.build(cfg)
		if err != nil {
			return nil, fmt.Errorf("tasks: %s: %w", name, err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("tasks: unknown task %q, want one of %s", name, strings.Join(Names(), ", "))
}

// task is the one implementation of Task: sizes, a description and the two functions in which
// the tasks differ.
type task struct {
	name, describe string
	vocab, seqLen  int
	symbol         func(id int) string // called with id in [0, vocab)
	fill           func(r *rand.Rand, s sequence)
}

func (t *task) Name() string     { return t.name }
func (t *task) Vocab() int       { return t.vocab }
func (t *task) SeqLen() int      { return t.seqLen }
func (t *task) Describe() string { return t.describe }

func (t *task) Symbol(id int) string {
	if id < 0 || id >= t.vocab {
		return fmt.Sprintf("?%d", id)
	}
	return t.symbol(id)
}

func (t *task) Batch(seed uint64, b int) (Batch, error) {
	n := t.seqLen
	if maxB := MaxBatchAttn / (n * n); b < 1 || b > maxB {
		return Batch{}, fmt.Errorf("tasks: %s: batch size is %d, want 1 to %d (B·T·T ≤ %d with T = %d)",
			t.name, b, maxB, MaxBatchAttn, n)
	}
	out := Batch{
		B:       b,
		T:       n,
		Tokens:  make([]int, b*n),
		Targets: make([]int, b*n),
		Scored:  make([]bool, b*n),
		Attn:    make([]float32, b*n*n),
	}
	for i := range b {
		t.fill(newRand(seed, i), sequence{
			tokens:  out.Tokens[i*n : (i+1)*n],
			targets: out.Targets[i*n : (i+1)*n],
			scored:  out.Scored[i*n : (i+1)*n],
			attn:    out.Attn[i*n*n : (i+1)*n*n],
		})
	}
	return out, nil
}

// newRand returns the generator of sequence i of the batch drawn from seed: ChaCha8 keyed with
// both, so every (seed, i) has its own independent stream.
func newRand(seed uint64, i int) *rand.Rand {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(i))
	copy(key[16:], "mhalab/mha/tasks")
	return rand.New(rand.NewChaCha8(key))
}

// sequence is one row of a batch being filled: Tokens, Targets and Scored [T] and Attn [T, T].
// It arrives zeroed.
type sequence struct {
	tokens, targets []int
	scored          []bool
	attn            []float32
}

// shift sets the sequence to next-token prediction over text, which holds T+1 tokens:
// Tokens = text[:T], Targets = text[1:].
func (s sequence) shift(text []int) {
	copy(s.tokens, text)
	copy(s.targets, text[1:])
}

// attend scores query position q and puts weight w on key position k ≤ q of its D row.
func (s sequence) attend(q, k int, w float32) {
	if k > q {
		panic(fmt.Sprintf("tasks: query %d attends later key %d", q, k))
	}
	s.scored[q] = true
	s.attn[q*len(s.tokens)+k] += w
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// checkRange returns an error when the field's value v lies outside [lo, hi].
func checkRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s is %d, want %d to %d", field, v, lo, hi)
	}
	return nil
}

// number prints a content token as its id.
func number(id int) string { return fmt.Sprint(id) }
