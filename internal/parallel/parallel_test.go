package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// record marks each task it runs and checks the worker numbers it is given.
type record struct {
	t       *testing.T
	workers int
	hits    []atomic.Int32
	busy    []atomic.Int32 // per worker: goroutines inside Do with that number
}

func (r *record) Do(worker, task int) {
	if worker < 0 || worker >= r.workers {
		r.t.Errorf("worker %d outside [0, %d)", worker, r.workers)
		return
	}
	if r.busy[worker].Add(1) != 1 {
		r.t.Errorf("worker number %d used by two goroutines at once", worker)
	}
	r.hits[task].Add(1)
	runtime.Gosched()
	r.busy[worker].Add(-1)
}

func TestRunEveryTaskOnce(t *testing.T) {
	var p Pool
	defer p.Close()
	var l Loop
	for _, workers := range []int{1, 2, 3, 8} {
		for _, tasks := range []int{0, 1, 2, 7, 100} {
			r := &record{t: t, workers: workers, hits: make([]atomic.Int32, tasks), busy: make([]atomic.Int32, workers)}
			p.Run(&l, workers, tasks, r)
			for i := range r.hits {
				if n := r.hits[i].Load(); n != 1 {
					t.Fatalf("workers %d tasks %d: task %d ran %d times", workers, tasks, i, n)
				}
			}
		}
	}
}

func TestRunConcurrentCallers(t *testing.T) {
	var p Pool
	defer p.Close()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			var l Loop
			for range 20 {
				r := &record{t: t, workers: 3, hits: make([]atomic.Int32, 50), busy: make([]atomic.Int32, 3)}
				p.Run(&l, 3, 50, r)
				for i := range r.hits {
					if n := r.hits[i].Load(); n != 1 {
						t.Errorf("task %d ran %d times", i, n)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

type nop struct{}

func (nop) Do(int, int) {}

func TestRunAllocatesNothing(t *testing.T) {
	var p Pool
	defer p.Close()
	var l Loop
	p.Run(&l, 4, 16, nop{})
	if n := testing.AllocsPerRun(100, func() { p.Run(&l, 4, 16, nop{}) }); n != 0 {
		t.Errorf("Run allocates %v times per call, want 0", n)
	}
}

// Close returns only after every helper has ended: the count of running helpers, which each
// helper lowers as it leaves, is 0 when Close returns, with no waiting in the test.
func TestCloseStopsHelpers(t *testing.T) {
	var p Pool
	var l Loop
	p.Run(&l, 5, 10, nop{})
	p.mu.Lock()
	started := p.helpers
	p.mu.Unlock()
	if started != 4 {
		t.Fatalf("%d helpers running after a Run on 5 workers, want 4", started)
	}
	p.Close()
	p.mu.Lock()
	running := p.helpers
	p.mu.Unlock()
	if running != 0 {
		t.Errorf("%d helpers still running after Close, want 0", running)
	}
	p.Close() // a second Close does nothing
}

// ranBy records which worker ran each task.
type ranBy []int

func (r ranBy) Do(worker, task int) { r[task] = worker }

// TestRunWakesBlockedHelper checks that a helper just started, or one that has stopped polling
// and blocked, joins a loop while tasks are left, even with one processor, where it waits on
// the caller's own and runs only when the caller yields it. (The scheduler takes from its
// global queue first one time in 61, and then the caller runs on: so most rounds, not all.)
func TestRunWakesBlockedHelper(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var p Pool
	defer p.Close()
	var l Loop
	const rounds = 10
	joined := 0
	for range rounds {
		w := make(ranBy, 64)
		p.Run(&l, 2, len(w), w)
		for _, v := range w {
			if v == 1 {
				joined++
				break
			}
		}
		for range 4 * spinPolls { // let the helper poll its fill and block
			runtime.Gosched()
		}
	}
	if joined < rounds*7/10 {
		t.Fatalf("the helper joined %d of %d loops; the caller ran the others alone", joined, rounds)
	}
}
