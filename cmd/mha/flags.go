package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mhalab/mha/internal/atomicfile"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
	"github.com/spf13/pflag"
)

// maxThreads bounds --workers and mha bench's --threads. Every worker has its own scratch
// memory, and a bench thread its own OS thread, so that a count such as 100000000 used to
// exhaust the memory or the threads and crash; 1024 is more than the cores of any machine
// these run on.
const maxThreads = 1024

// workersValue is the value of a --workers flag: a goroutine count from 0 to maxThreads, 0
// meaning GOMAXPROCS.
type workersValue int

// workersVar defines --workers on fl, stored in p, for every command that has it: a count
// outside [0, maxThreads] is a flag error, before the command runs.
func workersVar(fl *pflag.FlagSet, p *int, usage string) {
	fl.Var((*workersValue)(p), "workers", fmt.Sprintf("%s; at most %d", usage, maxThreads))
}

// Set parses s, refusing what is not an integer from 0 to maxThreads.
func (w *workersValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New("want a goroutine count ≥ 0 (0: GOMAXPROCS)")
	}
	if n > maxThreads {
		return fmt.Errorf("want a goroutine count ≤ %d (0: GOMAXPROCS)", maxThreads)
	}
	*w = workersValue(n)
	return nil
}

// String formats the count.
func (w *workersValue) String() string { return strconv.Itoa(int(*w)) }

// Type names the value in the help text.
func (w *workersValue) Type() string { return "int" }

// checkOutFile returns an error unless the file named by flag (such as --out) at path can be
// written: path must name a regular file or nothing (not a directory, device, FIFO or socket,
// which atomicfile.Write refuses to replace), and its directory must exist and take a new file
// (which checkOutFile creates and removes). Commands call it before they compute, so that a bad name
// fails at once rather than after the work.
func checkOutFile(flag, path string) error {
	if err := atomicfile.Check(path); err != nil {
		return fmt.Errorf("%s %w", flag, err)
	}
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return fmt.Errorf("%s %s: its directory %s does not exist; create it first", flag, path, dir)
	}
	check, err := os.CreateTemp(dir, ".mha-write-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write in its directory: %w", flag, path, err)
	}
	check.Close()
	return os.Remove(check.Name())
}

// allowNonFiniteUsage is the help of --allow-nonfinite, on every command that loads weights.
const allowNonFiniteUsage = "load weights that hold NaN or ±Inf (refused otherwise: they make every output NaN)"

// withNonFiniteHint returns err, with how to load the weights anyway added when err reports a
// tensor that is not finite (a *tensor.NonFiniteError).
func withNonFiniteHint(err error) error {
	if _, ok := errors.AsType[*tensor.NonFiniteError](err); ok {
		return fmt.Errorf("%w; pass --allow-nonfinite to use them anyway", err)
	}
	return err
}

// checkFinite returns t.CheckFinite(name) for t, tensor name of f converted to float32, saying
// when the first value that is not finite was finite in the file (an F64 beyond float32's
// range, which the conversion rounds to ±Inf).
func checkFinite(f *safetensors.File, name string, t *tensor.Tensor) error {
	err := t.CheckFinite(name)
	nf, ok := errors.AsType[*tensor.NonFiniteError](err)
	if !ok {
		return err
	}
	if stored, _, e := f.Float64(name); e == nil && nf.Index < len(stored) && !math.IsInf(stored[nf.Index], 0) && !math.IsNaN(stored[nf.Index]) {
		return fmt.Errorf("%w: the file holds %g there, beyond float32's range (±3.4e38)", err, stored[nf.Index])
	}
	return err
}

// checkBias returns an error when t, an additive mask or bias called name, holds NaN or +Inf:
// −Inf masks a pair, but either of those makes its row's outputs NaN.
func checkBias(name string, t *tensor.Tensor) error {
	first, count := -1, 0
	for i, v := range t.Data {
		if v != v || math.IsInf(float64(v), 1) {
			if first < 0 {
				first = i
			}
			count++
		}
	}
	if count == 0 {
		return nil
	}
	verb := "are"
	if count == 1 {
		verb = "is"
	}
	return fmt.Errorf("tensor %q %v: %d of %d values %s NaN or +Inf, the first %v at index %d (−Inf masks a pair; these make their rows NaN)",
		name, t.Shape, count, len(t.Data), verb, t.Data[first], first)
}

// nonFiniteWarning returns the warning line that source holds what err, a tensor's CheckFinite
// error, reports. Commands print it on stderr once they have succeeded, so that a failing command
// still prints one line.
func nonFiniteWarning(source string, err error) string {
	return fmt.Sprintf("mha: warning: %s: %v; the outputs will not be finite", source, err)
}
