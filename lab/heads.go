package lab

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/mhalab/mha/probe"
)

// Task-wide measurements run on taskBatch sequences drawn from probe.EvalSeed, far from the
// seeds training draws from. The previous-token, prefix-matching and ground-truth scores are
// probe.Evaluate's with its default sizes, which `mha eval` reports too.
const (
	taskSeed  = probe.EvalSeed
	taskBatch = 64
)

// headsRequest is the body of /api/heads.
type headsRequest struct {
	Model string `json:"model"`
}

// taskMeasurement is the answer of /api/heads: the head metrics on taskBatch sequences of the
// model's task, with every head's importance, and the pruning curve on the same sequences; the
// pattern scores as `mha eval` measures them (see About).
type taskMeasurement struct {
	measurement
	// Pruning is probe.Prune's curve: the score with 0, 1, … L·H heads zero-ablated, least
	// important first; absent for a model without a task.
	Pruning []probe.PrunePoint `json:"pruning,omitempty"`
}

// heads answers POST /api/heads: the head metrics of a model on taskBatch sequences of its task,
// or of a model without a task on repeated random tokens.
func (s *Server) heads(w http.ResponseWriter, r *http.Request) error {
	var req headsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	m, err := s.model(req.Model)
	if err != nil {
		return err
	}
	meas, err := m.taskMeasurement(r.Context(), s.opt.Workers)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, meas)
}

// taskMeasurement returns the model's metrics and pruning curve on its task, or its metrics on
// repeated random tokens without a task, computing them on the first call.
func (m *model) taskMeasurement(ctx context.Context, workers int) (*taskMeasurement, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wide != nil {
		return m.wide, nil
	}
	if m.task == nil {
		wide, err := m.repeatedMeasurement(ctx, workers)
		if err != nil {
			return nil, err
		}
		m.wide = wide
		return wide, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := m.task.Batch(taskSeed, taskBatch)
	if err != nil {
		return nil, err
	}
	c, err := probe.Record(m.net, b.Tokens, b.B, b.T, &probe.RecordOptions{Workers: workers})
	if err != nil {
		return nil, err
	}
	meas, err := measure(c, b.Attn)
	if err != nil {
		return nil, err
	}
	// The pattern scores have one definition and one function, probe.Evaluate's, so that the
	// page shows what `mha eval` prints for the same model.
	ev := probe.EvalConfig{Seed: taskSeed, Workers: workers}
	rep, err := probe.Evaluate(m.net, m.task, ev)
	if err != nil {
		return nil, err
	}
	for i, h := range rep.Heads {
		meas.Heads[i].PrevToken, meas.Heads[i].GroundTruth = h.PrevToken, h.GroundTruth
		meas.Heads[i].PrefixMatching = number(math.NaN())
		if h.PrefixMatching != nil {
			meas.Heads[i].PrefixMatching = *h.PrefixMatching
		}
	}
	meas.About = fmt.Sprintf("Prev-token and prefix-matching: on %d sequences of random tokens repeated once "+
		"(Olsson et al.); ground truth: on %d sequences of the task; both as mha eval measures them. "+
		"The other metrics, importance and pruning: on %d sequences of the task.", rep.Sequences, rep.Sequences, taskBatch)
	// The same sequences: Importance and Prune draw batch i from Seed + i.
	cfg := probe.EvalConfig{Batches: 1, Batch: taskBatch, Seed: taskSeed, Workers: workers}
	imp, err := probe.Importance(m.net, m.task, cfg)
	if err != nil {
		return nil, err
	}
	for i := range meas.Heads {
		h := &meas.Heads[i]
		h.Importance = number(imp[h.Layer][h.Head])
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	curve, err := probe.Prune(m.net, m.task, imp, cfg)
	if err != nil {
		return nil, err
	}
	m.wide = &taskMeasurement{measurement: *meas, Pruning: curve}
	return m.wide, nil
}
