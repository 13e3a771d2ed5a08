package gdn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gdnsimd/gdnsimd"
)

// The worker pool. A Step with w > 1 workers runs its first range of heads on the caller's
// goroutine and hands the other w−1 ranges to pool goroutines. A goroutine per range per Step
// costs too much: a goroutine woken from sleep started tens of microseconds later on the
// virtualised machine this was measured on — as long as a whole B = 1 step of the Qwen3-Next
// layer. So the pool's goroutines, once started, live as long as the process; the pool grows on
// demand to the most extra workers any Step has used (at most GOMAXPROCS−1) and never shrinks.
//
//   - After each task a pool goroutine polls for the next one for up to spinFor, yielding its P
//     between polls (runtime.Gosched), then parks on the task channel.
//   - The caller, once its own range is done, runs every range of the queue that no pool goroutine
//     has taken yet (one may still be waking up, or be queued behind the caller on the same P), so
//     a parallel Step is never much slower than its ranges one after another.
//   - It then waits for the ranges being run elsewhere by polling without yielding for up to
//     spinFor — a yielding caller goes to the global run queue, which wakes no idle P, and could
//     end up taking turns with a worker on one P — and finally blocks on the job's channel.

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
		t.run()
	}
}

// run computes the task's range and signals its job when it was the last one.
func (t task) run() {
	t.j.l.runRange(&t.j.st, t.lo, t.hi)
	if t.j.pending.Add(-1) == 0 {
		t.j.done <- struct{}{}
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

// spinPause burns a few hundred nanoseconds without giving up the processor.
func spinPause() {
	for i := 0; i < 64; i++ {
		spinSink.Add(0)
	}
}

var spinSink atomic.Int32

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
	// Ranges no pool goroutine has taken yet (it may still be waking up, or waiting for this very
	// P) are run here: a parallel Step is never slower than running its ranges one after another.
	for j.pending.Load() != 0 {
		select {
		case t := <-pool.tasks:
			t.run()
			continue
		default:
		}
		break
	}
	deadline := time.Now().Add(spinFor)
	for i := 0; j.pending.Load() != 0; i++ {
		if i%16 == 15 && time.Now().After(deadline) {
			break
		}
		spinPause()
	}
	<-j.done // happens after every range's writes
	j.l, j.st = nil, gdnsimd.Step{}
	jobs.Put(j)
}
