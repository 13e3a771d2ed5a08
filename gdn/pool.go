package gdn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdnsimd/gdnsimd"
)

// The worker pool. A Step with w > 1 workers runs its first range of heads on the caller's
// goroutine and hands the other w−1 ranges to pool goroutines. Starting a goroutine per Step
// costs too much here: a goroutine woken from sleep starts tens of microseconds later on a
// virtualised machine, as long as a whole B = 1 step of the Qwen3-Next layer. So the pool's
// goroutines, once started, live as long as the process: after each task a pool goroutine polls
// for the next one for up to spinFor (yielding the processor between polls), then parks on a
// channel until a Step needs it. The pool grows on demand to the largest number of extra workers
// any Step has used (at most the number of flattened heads of that Step), and never shrinks.
// The caller likewise polls for up to spinFor for the ranges it handed out before it blocks.

// spinFor is how long a pool goroutine (or a Step waiting for its ranges) polls before it parks.
const spinFor = 50 * time.Microsecond

// job is one parallel Step: the data, and the count of ranges still running.
type job struct {
	l       *Layer
	st      gdnsimd.Step
	pending atomic.Int32
	done    chan struct{} // receives once when pending reaches 0
}

// task is one range of heads of a job.
type task struct {
	j      *job
	lo, hi int
}

var pool struct {
	mu      sync.Mutex
	started int
	tasks   chan task
}

var jobs = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// ensureWorkers starts pool goroutines until there are at least n.
func ensureWorkers(n int) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.tasks == nil {
		pool.tasks = make(chan task, 256)
	}
	for ; pool.started < n; pool.started++ {
		go poolWorker(pool.tasks)
	}
}

func poolWorker(tasks <-chan task) {
	for {
		t, ok := poll(tasks)
		if !ok {
			t = <-tasks
		}
		t.j.l.runRange(&t.j.st, t.lo, t.hi)
		if t.j.pending.Add(-1) == 0 {
			t.j.done <- struct{}{}
		}
	}
}

// poll receives a task if one arrives within spinFor.
func poll(tasks <-chan task) (task, bool) {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		select {
		case t := <-tasks:
			return t, true
		default:
		}
		if i%16 == 15 && time.Now().After(deadline) {
			return task{}, false
		}
		runtime.Gosched()
	}
}

// parallel splits the flattened heads into w contiguous ranges (as the seed's SPMD grid shards
// BH), runs the first on the caller's goroutine and the others on the pool, and returns when all
// are done.
func (l *Layer) parallel(st gdnsimd.Step, heads, w int) {
	ensureWorkers(w - 1)
	j := jobs.Get().(*job)
	j.l, j.st = l, st
	j.pending.Store(int32(w - 1))
	for i := 1; i < w; i++ {
		pool.tasks <- task{j, i * heads / w, (i + 1) * heads / w}
	}
	l.runRange(&j.st, 0, heads/w)
	deadline := time.Now().Add(spinFor)
	for i := 0; j.pending.Load() != 0; i++ {
		if i%16 == 15 && time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	<-j.done // happens after every range's writes
	j.l, j.st = nil, gdnsimd.Step{}
	jobs.Put(j)
}
