package lapi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/internal/trace"
)

// traceTo sends trace output to a buffer at level l for the rest of the
// test. The level and writer are process-wide: tests that use it must not
// run in parallel (nor beside an allocation test).
func traceTo(t *testing.T, l trace.Level) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	t.Cleanup(trace.Redirect(&buf, l))
	return &buf
}

// traceRecoveryJob runs 3 reintegrating ranks over the seeded lossy
// simulated network: they join, each sends active messages to the others
// (one of 128 KiB, by rendezvous) and Puts 256 KiB (by RDMA) to the next
// rank. It returns the trace
// written at level l, and fails unless packets were retransmitted and
// RDMA chunks redriven (so the trace has something to show).
func traceRecoveryJob(t *testing.T, l trace.Level) string {
	buf := traceTo(t, l)
	const n = 3
	spec := faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Delay: 200 * time.Microsecond, Seed: 5}
	j := openSimJob(t, n, spec, func(c *Config) {
		c.Reintegrate, c.Epoch = true, uint64(c.Rank)+1
		c.AMRendezvous = 64 << 10
	})
	defer j.close()
	j.run(time.Second, nil, func() bool {
		for _, c := range j.ctxs {
			for p := range n {
				if !c.RDMAReady(hal.Rank(p)) {
					return false
				}
			}
		}
		return true
	})

	checkers := make([]*checker, n)
	var h HandlerID
	mem := make([][]byte, n)
	region := make([]hal.PVO, n)
	for r, c := range j.ctxs {
		checkers[r] = &checker{t: t, me: hal.Rank(r), seen: map[[2]uint32]bool{}}
		h = c.RegisterHandler(checkers[r])
		mem[r] = make([]byte, 256<<10)
		region[r], _ = c.TPT().Register(mem[r], hal.AccessWrite)
	}
	const msgs = 20
	size := func(i int) int {
		if i == msgs/2 {
			return 128 << 10
		}
		return 1000
	}
	puts := make([]*Counter, n)
	for r, c := range j.ctxs {
		for i := range msgs {
			var u [12]byte
			binary.LittleEndian.PutUint32(u[:], uint32(r))
			binary.LittleEndian.PutUint32(u[4:], uint32(i))
			binary.LittleEndian.PutUint32(u[8:], uint32(i*100))
			if err := c.Amsend(hal.Rank((r+1+i%(n-1))%n), h, u[:], pattern[i*100:i*100+size(i)], SendOpts{}); err != nil {
				t.Fatal(err)
			}
		}
		puts[r] = c.NewCounter()
		tgt := (r + 1) % n
		if err := c.Put(hal.Rank(tgt), region[tgt], pattern[:256<<10], SendOpts{Completion: puts[r]}); err != nil {
			t.Fatal(err)
		}
	}
	j.run(time.Minute, nil, func() bool {
		got := 0
		for r, k := range checkers {
			if k.err != nil {
				t.Fatal(k.err)
			}
			if !settled(puts[r], 1) {
				return false
			}
			got += k.got
		}
		return got == n*msgs
	})
	var rtx, redrives uint64
	for _, c := range j.ctxs {
		rtx += c.Stats().Retransmits
		redrives += c.RDMAStats().Redrives
	}
	if rtx == 0 || redrives == 0 {
		t.Fatalf("seed %d: %d retransmits, %d redrives: the faults did not exercise recovery", spec.Seed, rtx, redrives)
	}
	return buf.String()
}

// Lines the recovery trace must have at level 3 and above, and must not
// below.
var recoveryLines = []struct {
	what string
	re   *regexp.Regexp
}{
	{"retransmit timeout with the new RTO", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: retransmit timeout to rank \d: seq \d+ resent \(try \d+\), rto now [0-9.]+[µm]?s \(backoff \d+\)$`)},
	{"redrive with the new tid", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: rdma redrive to rank \d: write rcxt \d+, 262144 bytes, new tid \d+ \(drive \d+\), timeout now [0-9.]+[µm]?s$`)},
	{"BOOTING sent", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: reint: booting sent to rank \d \(epoch 0x\d\)$`)},
	{"BOOTING received", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: reint: booting received from rank \d \(epoch 0x\d\)$`)},
	{"RDMA_READY", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: reint: rdma-ready sent to rank \d \(epoch 0x\d, answer asked\)$`)},
	{"rendezvous started", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: rendezvous \d+ to rank \d: RTS for 131072 bytes sent \(err <nil>\)$`)},
	{"rendezvous read", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: rendezvous \d+ from rank \d: RTS for 131072 bytes, reading 131072$`)},
	{"rendezvous finished", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: rendezvous \d+ to rank \d: FIN received, finished \(err <nil>\)$`)},
	{"joined", regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: reint: every peer accounted for: RDMA enabled here \(epoch 0x\d\)$`)},
}

// Lines of the per-packet levels.
var (
	dropLine  = regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: drop packet from rank \d: duplicate or beyond the window \(seq \d+\)$`)
	ackLine   = regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: ack from rank \d: cum \d+, \d+ released`)
	frameLine = regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: (send|recv) `)
)

// TestTraceRecovery: at WEFT_TRACE=3 a lossy run's trace shows each
// retransmission timeout with the new RTO, each redrive with its new tid
// and timeout, and the reintegration steps, naming the peers; at level 2
// none of them, and per-packet lines only from level 4 (drops,
// acknowledgements) and 5 (every frame).
func TestTraceRecovery(t *testing.T) {
	t.Run("level3", func(t *testing.T) {
		out := traceRecoveryJob(t, trace.Internal)
		for _, l := range recoveryLines {
			if !l.re.MatchString(out) {
				t.Errorf("no %s line at level 3", l.what)
			}
		}
		for _, re := range []*regexp.Regexp{dropLine, ackLine, frameLine} {
			if m := re.FindString(out); m != "" {
				t.Errorf("a line of a higher level at level 3: %q", m)
			}
		}
		if t.Failed() {
			t.Logf("trace:\n%s", head(out, 60))
		}
	})
	t.Run("level2", func(t *testing.T) {
		out := traceRecoveryJob(t, trace.Setup)
		for _, l := range recoveryLines {
			if m := l.re.FindString(out); m != "" {
				t.Errorf("%s at level 2: %q", l.what, m)
			}
		}
		if strings.Contains(out, "lapi ") {
			t.Errorf("lapi traced at level 2:\n%s", head(out, 20))
		}
	})
	t.Run("level4", func(t *testing.T) {
		out := traceRecoveryJob(t, trace.Hot)
		if !dropLine.MatchString(out) || !ackLine.MatchString(out) {
			t.Errorf("level 4 lacks a duplicate drop or an ack line:\n%s", head(out, 60))
		}
		if m := frameLine.FindString(out); m != "" {
			t.Errorf("a level-5 line at level 4: %q", m)
		}
	})
	t.Run("level5", func(t *testing.T) {
		out := traceRecoveryJob(t, trace.HotDetail)
		for _, re := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: send packet to rank \d: seq \d+, \d+ data bytes$`),
			regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: recv data from rank \d: \d+ bytes, seq \d+`),
			regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi \d: send rdma-write to rank \d: rcxt \d+ tid \d+ offset \d+, \d+ bytes$`),
		} {
			if !re.MatchString(out) {
				t.Errorf("level 5 lacks %v", re)
			}
		}
	})
}

// TestTraceGaveUp: a rank that never opens is given up on after
// BOOTING's tries, at level 1, and the line is not written at level 0.
func TestTraceGaveUp(t *testing.T) {
	gaveUp := regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} lapi [01]: reint: gave up on rank 2: BOOTING never answered`)
	for _, l := range []trace.Level{trace.Error, trace.Rare} {
		t.Run(fmt.Sprint("level", l), func(t *testing.T) {
			buf := traceTo(t, l)
			net, err := simnet.New(3, faults.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			j := &simJob{t: t, net: net}
			for r := range 2 { // rank 2 never opens
				c, err := Open(Config{Device: net.Device(hal.Rank(r)), Rank: hal.Rank(r), Size: 3, JobKey: simnet.DefaultJobKey,
					Clock: net.Now, PeerTimeout: time.Minute, Reintegrate: true, Epoch: uint64(r) + 1})
				if err != nil {
					t.Fatal(err)
				}
				j.ctxs = append(j.ctxs, c)
			}
			defer j.close()
			j.run(time.Second, nil, func() bool { return j.ctxs[0].RDMAReady(0) && j.ctxs[1].RDMAReady(1) })
			if got := gaveUp.MatchString(buf.String()); got != (l >= trace.Rare) {
				t.Errorf("level %d: gave-up line written %v, want %v:\n%s", l, got, l >= trace.Rare, head(buf.String(), 20))
			}
		})
	}
}

// TestTraceOffAllocs: with tracing below lapi's levels, the hot path
// (active messages sent, acknowledged and delivered over an unreliable
// device, and an RDMA Put, with trace points at every frame) allocates
// nothing once warm. The same exchange at level 5 writes lines from those
// trace points, so the measured path does pass them.
func TestTraceOffAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts: this runs without -race (go test ./lapi)")
	}
	buf := traceTo(t, trace.Setup)
	j := newSimJob(t, 2, faults.Spec{})
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	got := c0.NewCounter()
	put := c0.NewCounter()
	hSink := c0.RegisterHandler(&sink{buf: make([]byte, 1024)})
	c1.RegisterHandler(&sink{})
	e := &echo{c: c1, reply: hSink, tcntr: got.ID()}
	hEcho := c1.RegisterHandler(e)
	c0.RegisterHandler(e)
	mem := make([]byte, 128<<10)
	region, _ := c1.TPT().Register(mem, hal.AccessWrite)
	data := make([]byte, 64)
	run := func() {
		if err := c0.Amsend(1, hEcho, nil, data, SendOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := c0.Put(1, region, mem, SendOpts{Completion: put}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Second, nil, func() bool { return got.Value() >= 1 && put.Value() >= 1 })
		got.v.Add(-1)
		put.v.Add(-1)
	}
	for range 300 {
		// Warm up the free lists and the simulated network's packets, and
		// take sequence numbers and tids past 255: Go boxes smaller
		// integers without allocating, so an unguarded trace point's
		// arguments would go unnoticed below it.
		run()
	}
	if n := testing.AllocsPerRun(50, run); n != 0 {
		t.Errorf("trace at level 2: %v allocations per exchange, want 0", n)
	}
	if buf.Len() != 0 {
		t.Errorf("trace at level 2 wrote:\n%s", head(buf.String(), 10))
	}
	trace.SetLevel(trace.HotDetail)
	run()
	for _, what := range []string{"lapi 0: send packet to rank 1", "lapi 1: recv data from rank 0", "lapi 0: rdma write to rank 1",
		"lapi 0: send rdma-write to rank 1", "lapi 0: ack from rank 1"} {
		if !strings.Contains(buf.String(), what) {
			t.Errorf("the measured exchange passes no %q trace point:\n%s", what, head(buf.String(), 20))
		}
	}
}

// head is the first n lines of s.
func head(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("... (%d lines more)\n", len(lines)-n)
}
