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

// job is one parallel call: the batch, its ranges of items, which are taken and the count of
// ranges still running.
type job struct {
	l       *Layer
	b       gdnsimd.Batch // a copy: the caller's Batch stays on its stack
	bounds  []int         // range r is items [bounds[r], bounds[r+1])
	w       int           // the goroutines taking part: the caller is 0, the pool's tasks 1…w−1
	taken   []atomic.Bool // range r is taken (claimed by one goroutine)
	pending atomic.Int32
	refs    atomic.Int32  // the tasks of the job that a pool goroutine may still hold
	done    chan struct{} // receives once when pending reaches 0
}

// jobs holds the jobs of returned calls: a call allocates nothing with Workers 1, and a new job
// per parallel call (1.3 KiB: the batch's copy) cost more than the allocation — a span now and
// then needed fresh pages, ~20 µs on a VM, in a quarter of the B = 1 calls on a Zen 5. A job is
// reused only when no task of it is left anywhere (refs = 0): a pool goroutine that takes its
// task late still reads its bounds and taken. A goroutine holds one task at a time, so the list
// holds at most the calls running at once plus the pool's goroutines. (Not a sync.Pool: its
// objects are per P and dropped by the GC, so a call would allocate now and then.)
var jobs struct {
	mu   sync.Mutex
	free []*job
}

// getJob returns a job no goroutine holds, recycled or new.
func getJob() *job {
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	f := jobs.free
	for i := len(f) - 1; i >= 0; i-- {
		if j := f[i]; j.refs.Load() == 0 {
			f[i] = f[len(f)-1]
			jobs.free = f[:len(f)-1]
			select {
			case <-j.done: // its call's, if that call returned on seeing pending 0
			default:
			}
			return j
		}
	}
	return &job{done: make(chan struct{}, 1)}
}

// putJob keeps j for a later call.
func putJob(j *job) {
	jobs.mu.Lock()
	jobs.free = append(jobs.free, j)
	jobs.mu.Unlock()
}

// task asks a pool goroutine to take ranges of a job as its goroutine p until none is left.
type task struct {
	j *job
	p int
}

var pool struct {
	mu      sync.Mutex
	started int
	tasks   chan task
}

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
		t.j.work(t.p)
		t.j.refs.Add(-1) // the last touch of the job
	}
}

// work runs ranges of the job as its goroutine p until none is left: first its own, the p-th
// of w consecutive blocks of them (ranges of about equal cost), then any left of the others',
// from the last. The goroutine finishing the last range signals the job.
//
// Own blocks first keep a head's state on one core from call to call while the calls have the
// same shape and the same goroutines take part (one pool goroutine serves Workers 2): with
// ranges taken in turn from a shared counter the heads moved between the cores' caches (B = 1
// decode with Workers 2 on a Zen 5: kv-f32 44.7 → 39.5 µs, vk-f32 31.5 → 26.7).
func (j *job) work(p int) {
	n := len(j.bounds) - 1
	lo, hi := p*n/j.w, (p+1)*n/j.w
	for r := lo; r < hi; r++ {
		j.run(r)
	}
	for r := n - 1; r >= 0; r-- {
		if r < lo || r >= hi {
			j.run(r)
		}
	}
}

// run runs range r unless another goroutine took it.
func (j *job) run(r int) {
	if j.taken[r].Swap(true) {
		return
	}
	j.l.runRange(&j.b, j.bounds[r], j.bounds[r+1])
	if j.pending.Add(-1) == 0 {
		j.done <- struct{}{}
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

// rangesPerWorker is how many ranges a parallel call is cut into per worker: a worker the OS
// deschedules holds up half its share, not all of it, while the others take the rest. (4 cost
// B = 1 Workers 2 13–26% on an idle machine — each range pays a scratch and a driver set-up —
// and bought nothing measurable with another process busy on one core: 53–55 µs either way,
// against 37 µs with Workers 1 and 53–64 µs before ranges were stolen.)
const rangesPerWorker = 2

// parallel cuts the items into about rangesPerWorker·w ranges of equal cost (head-tokens), hands
// w−1 pool goroutines a task to take ranges from, takes ranges itself until none is left, and
// returns when all are done. The job is recycled only when no task of it is left (job.refs): a
// pool goroutine that takes its task late (after the call returned) finds no range left in it,
// and no other call's ranges either.
func (l *Layer) parallel(b *gdnsimd.Batch, w int) {
	ensureWorkers(w - 1)
	j := getJob()
	j.l, j.b = l, *b
	j.bounds = splitCost(j.bounds[:0], b, min(b.Items(), rangesPerWorker*w))
	n := len(j.bounds) - 1
	if cap(j.taken) < n {
		j.taken = make([]atomic.Bool, n) // once per job and size
	}
	j.taken = j.taken[:n]
	for r := range j.taken {
		j.taken[r].Store(false)
	}
	j.w = w
	j.pending.Store(int32(n))
	j.refs.Store(int32(w - 1))
	for p := 1; p < w; p++ {
		pool.tasks <- task{j, p}
	}
	j.work(0)
	// Tasks no pool goroutine has taken yet would find no range left: take them off the queue
	// (running whatever ranges another call's task still offers).
	for {
		select {
		case t := <-pool.tasks:
			if t.j != j {
				t.j.work(t.p)
			}
			t.j.refs.Add(-1)
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
	if j.pending.Load() != 0 {
		<-j.done
	}
	// Every range's writes happen before pending's last decrement, which the load or the receive
	// observed. No goroutine reads the job's batch any more (one taking its task late reads only
	// bounds and taken), so it is dropped now; the job is reused once refs is 0.
	j.l, j.b = nil, gdnsimd.Batch{} // keep no caller's slices alive
	putJob(j)
}

// splitCost appends to bounds the boundaries of r ranges of b's items of about equal cost (every
// item costing at least 1, so padding and empty sequences are spread too): bounds[0] = 0,
// bounds[r] = b.Items(), strictly increasing.
func splitCost(bounds []int, b *gdnsimd.Batch, r int) []int {
	items := b.Items()
	total := 0
	for n := 0; n < b.N; n++ {
		total += b.VHeads * itemCost(b, n)
	}
	bounds = append(bounds, 0)
	cum, k := 0, 1
	for n := 0; n < b.N && k < r; n++ {
		c := itemCost(b, n)
		for k < r {
			target := total * k / r // the k-th boundary: the first item whose start cost ≥ target
			if target >= cum+b.VHeads*c {
				break
			}
			w := n*b.VHeads + max(0, (target-cum+c-1)/c)
			if w > bounds[len(bounds)-1] && w < items {
				bounds = append(bounds, w)
			}
			k++
		}
		cum += b.VHeads * c
	}
	return append(bounds, items)
}

// itemCost is the cost of one item of sequence n: its tokens, at least 1.
func itemCost(b *gdnsimd.Batch, n int) int { return max(1, b.Cost(n*b.VHeads, n*b.VHeads+1)) }
