// Package parallel runs loops of independent tasks on a bounded set of long-lived goroutines,
// without allocating per loop, so that a layer's Forward can use every core and still make no
// heap allocation in steady state.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Job is a loop body: Do runs task number task on behalf of worker number worker. Within one
// Run, worker numbers are distinct between goroutines running at the same time and lie in
// [0, workers), so a Job can give each worker its own scratch memory.
type Job interface {
	Do(worker, task int)
}

// Pool is a set of helper goroutines shared by the Runs that use it, including Runs from
// several goroutines at once. The zero value is ready to use; Close stops the helpers and waits
// for them to end.
type Pool struct {
	mu      sync.Mutex
	helpers int        // helper goroutines running
	loops   chan *Loop // loops that want help, one message per helper asked
	closed  bool
	stopped sync.WaitGroup // one count per helper running
}

// Loop is the state of one Run. Keep it with the caller's other reusable memory: a Loop must not
// be copied, and must not be used by two Runs at once.
type Loop struct {
	job     Job
	tasks   int
	next    atomic.Int64 // next task to claim
	workers atomic.Int32 // next worker number to hand out
	done    sync.WaitGroup
}

// Run calls job.Do(worker, task) once for every task in [0, tasks) and returns when all are done.
// It runs on at most workers goroutines: the caller's own and up to workers−1 of the pool's
// helpers, started on first use. Tasks are claimed one at a time, so uneven tasks balance out.
// Run panics if workers < 1 or the pool is closed.
func (p *Pool) Run(l *Loop, workers, tasks int, job Job) {
	if workers < 1 {
		panic("parallel: Run with fewer than one worker")
	}
	if tasks <= 0 {
		return
	}
	l.job, l.tasks = job, tasks
	l.next.Store(0)
	l.workers.Store(1) // the caller is worker 0
	help := min(workers, tasks) - 1
	if help > 0 {
		loops := p.grow(help)
		l.done.Add(help)
		for range help {
			loops <- l
		}
	}
	l.work(0, help+1)
	l.done.Wait()
	l.job = nil
}

// work claims and runs tasks until none is left. Run's caller passes the workers it asked for:
// a helper that had stopped polling (next) and blocked is woken onto the caller's own
// processor, and while the others are busy (with other pools' helpers polling, say) it would
// join only once the caller had run every task; a polling one may also wait its turn behind
// them. So after its first task, if not every helper has joined, the caller yields its
// processor once. A 1.24B model's decode step, 226 loops, ran 10–20% faster for it: its
// helper had joined each loop ~60 µs late (BENCHMARKS.md, v26).
func (l *Loop) work(worker, workers int) {
	yield := workers > 1
	for {
		t := int(l.next.Add(1) - 1)
		if t >= l.tasks {
			return
		}
		l.job.Do(worker, t)
		if yield && l.workers.Load() < int32(workers) {
			runtime.Gosched()
		}
		yield = false
	}
}

// grow starts helpers until there are at least n and returns the queue they serve.
func (p *Pool) grow(n int) chan<- *Loop {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		panic("parallel: Run on a closed Pool")
	}
	if p.loops == nil {
		p.loops = make(chan *Loop, queue)
	}
	for ; p.helpers < n; p.helpers++ {
		p.stopped.Add(1)
		go p.help(p.loops)
	}
	return p.loops
}

// queue is how many requests for help may wait before a Run's send blocks; a blocked send only
// waits for a helper to finish its current loop.
const queue = 256

// help serves loops until the channel closes, then leaves the count of running helpers.
func (p *Pool) help(loops <-chan *Loop) {
	defer p.stopped.Done()
	for {
		l, ok := next(loops)
		if !ok {
			break
		}
		l.work(int(l.workers.Add(1)-1), 0)
		l.done.Done()
	}
	p.mu.Lock()
	p.helpers--
	p.mu.Unlock()
}

// Close stops the pool's helpers and returns once every one of them has ended. It must not be
// called while a Run is in progress, and a closed Pool must not be used again; a second Close
// does nothing.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed && p.loops != nil {
		close(p.loops)
	}
	p.closed = true
	p.mu.Unlock()
	p.stopped.Wait()
}

// next returns the next loop from loops, and false once loops is closed. It polls for a while
// before it blocks: a Run that follows another within microseconds (a decode step's dozens of
// small products) then finds its helpers awake, where a parked one takes tens of microseconds
// to wake, as long as the loop itself.
func next(loops <-chan *Loop) (*Loop, bool) {
	for range spinPolls {
		select {
		case l, ok := <-loops:
			return l, ok
		default:
			runtime.Gosched()
		}
	}
	l, ok := <-loops
	return l, ok
}

// spinPolls is how many times a helper polls for a loop before it blocks.
const spinPolls = 2000
