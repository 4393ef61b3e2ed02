package main

import (
	"fmt"
	"io"

	"github.com/weft-hpc/weft/mpi"
)

// kind is how a benchmark reports: it decides the header, the columns and
// the unit.
type kind int

const (
	kindLatency    kind = iota // one time per size, us (rank 0's)
	kindBandwidth              // one rate per size, MB/s (rank 0's)
	kindCollective             // per-call time per size, us: average, min and max over ranks
	kindBarrier                // like kindCollective, without a size
	kindOverlap                // a nonblocking collective's overlap (%) per size, with its times (us)
)

// count is how many times one size is run.
type count struct {
	iters  int // timed
	warmup int // run first and not timed, so that connections, registration caches and page faults settle
	blocks int // latency: time every blocks timed iterations too (0: only the whole)
	// partner: point-to-point, the rank opposite rank 0 (0: rank 1).
	partner int
}

// role is a rank's part in a point-to-point benchmark between rank 0 and
// n's partner: 0 for rank 0 (it times), 1 for the partner, -1 for the
// ranks that only join the barriers. peer is the rank opposite.
func (n count) role(me int) (role, peer int) {
	partner := n.partner
	if partner == 0 {
		partner = 1
	}
	switch me {
	case 0:
		return 0, partner
	case partner:
		return 1, 0
	}
	return -1, -1
}

// benchmark is one subcommand: what it measures and how often.
type benchmark struct {
	name     string
	title    string // OSU's test name, after "# weft "
	kind     kind
	defMin   int
	defMax   int
	minRanks int
	elem     int  // smallest meaningful size: one element of the operation's type
	floats   bool // buffers hold float32 (allreduce sums floats, as OSU does)
	perPeer  bool // buffers hold Size() blocks of the message size (alltoall)
	blocks   bool // -blocks applies: rank 0 also times each block of round trips (latency)
	windowed bool // the window holds rmaWindow(max) messages of max bytes (put_bw)
	schedule func(size int) count
	measure  func(c *mpi.Comm, size int, n count, buf *buffers) (row, error)
}

// The iteration counts are OSU's (osu_latency, osu_bw, osu_coll.h) with
// large latency messages cut to 100, as the reference figures were
// measured (anchors/perf/RESULTS.md). bench/c/osu.h repeats this schedule so
// that both sides of compare.sh run the same counts: change both together.
const largeMessage = 8 << 10 // OSU's LARGE_MESSAGE_SIZE

func latencySchedule(size int) count {
	switch {
	case size <= largeMessage:
		return count{iters: 10000, warmup: 100}
	case size <= 256<<10:
		return count{iters: 1000, warmup: 10}
	}
	return count{iters: 100, warmup: 10}
}

func bandwidthSchedule(size int) count {
	if size <= largeMessage {
		return count{iters: 100, warmup: 10}
	}
	return count{iters: 20, warmup: 2}
}

func collectiveSchedule(size int) count {
	if size <= largeMessage {
		return count{iters: 1000, warmup: 200}
	}
	return count{iters: 100, warmup: 10}
}

// benchmarks is every subcommand, in the order the usage lists them.
var benchmarks = []*benchmark{
	{name: "latency", title: "MPI Latency Test", kind: kindLatency, defMin: 0, defMax: 4 << 20,
		minRanks: 2, elem: 0, blocks: true, schedule: latencySchedule, measure: latency},
	{name: "bw", title: "MPI Bandwidth Test", kind: kindBandwidth, defMin: 1, defMax: 4 << 20,
		minRanks: 2, elem: 0, schedule: bandwidthSchedule, measure: bandwidth},
	{name: "bibw", title: "MPI Bi-Directional Bandwidth Test", kind: kindBandwidth, defMin: 1, defMax: 4 << 20,
		minRanks: 2, elem: 0, schedule: bandwidthSchedule, measure: bibandwidth},
	{name: "allreduce", title: "MPI Allreduce Latency Test", kind: kindCollective, defMin: 4, defMax: 1 << 20,
		minRanks: 1, elem: 4, floats: true, schedule: collectiveSchedule, measure: allreduce},
	{name: "bcast", title: "MPI Broadcast Latency Test", kind: kindCollective, defMin: 1, defMax: 1 << 20,
		minRanks: 1, elem: 1, schedule: collectiveSchedule, measure: bcast},
	{name: "barrier", title: "MPI Barrier Latency Test", kind: kindBarrier, defMin: 0, defMax: 0,
		minRanks: 1, elem: 0, schedule: collectiveSchedule, measure: barrier},
	{name: "alltoall", title: "MPI All-to-All Personalized Exchange Latency Test", kind: kindCollective, defMin: 1, defMax: 1 << 20,
		minRanks: 1, elem: 1, perPeer: true, schedule: collectiveSchedule, measure: alltoall},
	{name: "allgather", title: "MPI Allgather Latency Test", kind: kindCollective, defMin: 1, defMax: 1 << 20,
		minRanks: 1, elem: 1, perPeer: true, schedule: collectiveSchedule, measure: allgather},
	{name: "iallreduce", title: "MPI Iallreduce Overlap Test", kind: kindOverlap, defMin: 4, defMax: 1 << 20,
		minRanks: 1, elem: 4, floats: true, schedule: collectiveSchedule, measure: iallreduce},
	{name: "put_bw", title: "MPI Put Bandwidth Test", kind: kindBandwidth, defMin: 1, defMax: 4 << 20,
		minRanks: 2, elem: 1, windowed: true, schedule: bandwidthSchedule, measure: putBandwidth},
	{name: "get_latency", title: "MPI Get Latency Test", kind: kindLatency, defMin: 1, defMax: 4 << 20,
		minRanks: 2, elem: 1, schedule: latencySchedule, measure: getLatency},
	{name: "acc_latency", title: "MPI Accumulate Latency Test", kind: kindLatency, defMin: 1, defMax: 4 << 20,
		minRanks: 2, elem: 1, schedule: latencySchedule, measure: accLatency},
}

// lookup finds a benchmark by name, or returns nil.
func lookup(name string) *benchmark {
	for _, b := range benchmarks {
		if b.name == name {
			return b
		}
	}
	return nil
}

func benchNames() []string {
	var out []string
	for _, b := range benchmarks {
		out = append(out, b.name)
	}
	return out
}

// sizesFor lists the sizes b runs between min and max. A barrier has no
// size: it runs once, as size 0. Sizes smaller than one element are left
// out (an allreduce of 2 bytes of float32 is no operation at all).
func (b *benchmark) sizesFor(min, max int) []int {
	if b.kind == kindBarrier {
		return []int{0}
	}
	var out []int
	for _, s := range sizes(min, max) {
		if s >= b.elem {
			out = append(out, s)
		}
	}
	return out
}

// buffers are a run's message buffers, allocated once for the largest size
// and sliced for each, as OSU does: a runtime with a registration cache sees
// the same memory every time, and page faults stay out of the timing.
type buffers struct {
	send, recv   []byte
	fsend, frecv []float32
	// blocks: latency -blocks on rank 0, the latency of each block of
	// round trips of the size just measured, in order (a trailing partial
	// block is left out).
	blocks []float64
}

func newBuffers(b *benchmark, max, ranks int) *buffers {
	if b.perPeer {
		max *= ranks
	}
	if b.floats {
		buf := &buffers{fsend: make([]float32, max/4), frecv: make([]float32, max/4)}
		for i := range buf.fsend {
			buf.fsend[i] = 1
		}
		return buf
	}
	buf := &buffers{send: make([]byte, max), recv: make([]byte, max)}
	for i := range buf.send {
		buf.send[i] = 'a' // OSU's fill: it also touches every page
		buf.recv[i] = 'b'
	}
	return buf
}

// countFor is the iteration count for one size: the flags where given,
// else the benchmark's schedule.
func (o *options) countFor(size int) count {
	n := o.bench.schedule(size)
	if o.iters > 0 {
		n.iters = o.iters
	}
	if o.warmup >= 0 {
		n.warmup = o.warmup
	}
	n.blocks = o.blocks
	n.partner = o.partner
	return n
}

// measure runs o's benchmark on c for every size. Every rank of c must
// call it with the same options. Rank 0 writes the OSU table to out as the
// rows come (nil: no table) and returns the table; the other ranks return
// an empty one. pr shows progress (nil: none).
func measure(c *mpi.Comm, o *options, out io.Writer, pr *progress) (*table, error) {
	b := o.bench
	if c.Size() < b.minRanks {
		return nil, fmt.Errorf("%s needs at least %d ranks, this job has %d (start it with gorun -n %d)", b.name, b.minRanks, c.Size(), b.minRanks)
	}
	if o.partner >= c.Size() {
		return nil, fmt.Errorf("%s -pair 0,%d: this job has %d ranks (start it with gorun -n %d or more)", b.name, o.partner, c.Size(), o.partner+1)
	}
	list := b.sizesFor(o.min, o.max)
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: no sizes between -min %d and -max %d (the smallest %s size is %d)", b.name, o.min, o.max, b.name, b.elem)
	}
	t := &table{bench: b.name, label: o.label}
	lead := c.Rank() == 0
	if lead && out != nil {
		if err := writeHeader(out, b); err != nil {
			return nil, err
		}
	}
	buf := newBuffers(b, list[len(list)-1], c.Size())
	for i, size := range list {
		if lead {
			pr.step(b.name, i, len(list), size)
		}
		// Start every size together, so that no rank's timing includes
		// waiting for a slower rank to finish the previous size.
		if err := c.Barrier(); err != nil {
			return nil, fmt.Errorf("%s: barrier before size %d: %w", b.name, size, err)
		}
		r, err := b.measure(c, size, o.countFor(size), buf)
		if err != nil {
			return nil, fmt.Errorf("%s: size %d: %w", b.name, size, err)
		}
		if !lead {
			continue
		}
		t.rows = append(t.rows, r)
		pr.clear()
		if out != nil {
			if err := writeRow(out, b, r, o.decimals); err != nil {
				return nil, err
			}
			if err := writeBlocks(out, r.size, buf.blocks, o.blocks, o.decimals); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}
