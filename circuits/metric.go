package circuits

import (
	"fmt"

	"github.com/mhalab/mha/nn"
)

// Metric is the logit difference LD = logit(Target) − logit(Foil) at one position of one
// sequence: the measure of a behaviour that patching and attribution explain.
type Metric struct {
	// Target and Foil are token ids in [0, Vocab).
	Target, Foil int
	// Position is the position whose logits the metric reads, in [0, T).
	Position int
}

// check returns an error unless the metric fits model m and sequences of length t.
func (mt Metric) check(m *nn.Model, t int) error {
	v := m.Config().Vocab
	switch {
	case mt.Target < 0 || mt.Target >= v:
		return fmt.Errorf("circuits: target token %d is outside the vocabulary [0, %d)", mt.Target, v)
	case mt.Foil < 0 || mt.Foil >= v:
		return fmt.Errorf("circuits: foil token %d is outside the vocabulary [0, %d)", mt.Foil, v)
	case mt.Position < 0 || mt.Position >= t:
		return fmt.Errorf("circuits: metric position %d is outside the sequence's %d positions", mt.Position, t)
	}
	return nil
}

// ld returns the metric on logits [B, T, Vocab] for sequence b of length t.
func (mt Metric) ld(logits []float32, b, t, vocab int) float64 {
	row := logits[(b*t+mt.Position)*vocab:][:vocab]
	return float64(row[mt.Target]) - float64(row[mt.Foil])
}
