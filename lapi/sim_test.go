package lapi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// hostile is the fault mix of the reliability tests.
var hostile = faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Delay: 200 * time.Microsecond}

// rough is hostile with rates high enough that a test of a few dozen
// frames meets every fault (checkFaults).
var rough = faults.Spec{Loss: 0.2, Reorder: 0.2, Dup: 0.1, Corrupt: 0.1, Delay: 200 * time.Microsecond}

// simJob is n lapi contexts over a simulated network, driven by one
// goroutine in virtual time: every run of a seed is the same run.
type simJob struct {
	t    *testing.T
	net  *simnet.Network
	node *simnet.Network // a mixed job's lossless network within nodes (mixed_test.go); nil
	ctxs []*Context
	// allFaults: close requires every fault the spec names to have
	// happened, however little traffic there was (requireFaults).
	allFaults bool
}

// nextEvent is the earliest delivery on the job's networks.
func (j *simJob) nextEvent() (time.Time, bool) {
	next, ok := j.net.NextEvent()
	if j.node != nil {
		if t, ok2 := j.node.NextEvent(); ok2 && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	return next, ok
}

// advance moves every network's clock by d: they stay equal.
func (j *simJob) advance(d time.Duration) {
	j.net.Advance(d)
	if j.node != nil {
		j.node.Advance(d)
	}
}

func newSimJob(t *testing.T, n int, spec faults.Spec, opts ...simnet.Option) *simJob {
	t.Helper()
	return openSimJob(t, n, spec, nil, opts...)
}

// openSimJob is newSimJob with mod (if not nil) applied to each rank's
// Config before it opens.
func openSimJob(t *testing.T, n int, spec faults.Spec, mod func(*Config), opts ...simnet.Option) *simJob {
	t.Helper()
	net, err := simnet.New(n, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	j := &simJob{t: t, net: net}
	for r := 0; r < n; r++ {
		cfg := Config{Device: net.Device(hal.Rank(r)), Rank: hal.Rank(r), Size: n,
			JobKey: simnet.DefaultJobKey, Clock: net.Now, PeerTimeout: time.Minute}
		if mod != nil {
			mod(&cfg)
		}
		c, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		j.ctxs = append(j.ctxs, c)
	}
	return j
}

// run drives every context and the network until done reports true,
// stepping virtual time to the next delivery or timer when nothing is
// ready. It fails the test on a stall or after limit of virtual time.
func (j *simJob) run(limit time.Duration, step func(), done func() bool) {
	start := j.net.Now()
	for !done() {
		if step != nil {
			step()
		}
		for _, c := range j.ctxs {
			c.Progress()
		}
		if done() {
			return
		}
		now := j.net.Now()
		next, ok := j.nextEvent()
		for _, c := range j.ctxs {
			c.mu.Lock()
			if t := c.rel.nextTick; !t.IsZero() && (!ok || t.Before(next)) {
				next, ok = t, true
			}
			c.mu.Unlock()
		}
		if !ok {
			j.t.Fatalf("stalled at %v: nothing in flight, no timer, not done\n%s", now.Sub(start), j.dump())
		}
		if now.Sub(start) > limit {
			j.t.Fatalf("not done after %v of virtual time", limit)
		}
		j.advance(next.Sub(now))
	}
}

// dump describes every context's protocol state, for stall reports.
func (j *simJob) dump() string {
	var b bytes.Buffer
	for r, c := range j.ctxs {
		c.mu.Lock()
		fmt.Fprintf(&b, "rank %d: active %v reasm %d done %d stats %+v\n", r, c.rel.active, len(c.am.reasm), len(c.am.done), c.stats)
		if c.ri.reint != nil {
			fmt.Fprintf(&b, "  reint: %+v\n", *c.ri.reint)
		}
		fmt.Fprintf(&b, "  rdma: groups %d waiting %d queued %d serving %d stats %+v engine %+v\n",
			c.rd.groups, len(c.rd.waiting), len(c.rd.queue), len(c.rd.serving), c.rd.stats, c.rd.eng.Stats())
		for _, op := range c.rd.ops {
			if op != nil {
				fmt.Fprintf(&b, "    op rcxt %d type %v peer %d total %d queued %v sent %v deadline %v drives %d\n",
					op.rc.ID, op.t, op.g.peer, op.h.Total, op.queued, op.sentAll, op.deadline.Sub(simnet.Epoch), op.drives)
			}
		}
		for p := range c.rel.links {
			l := &c.rel.links[p]
			q := 0
			for x := c.rel.queues[p].head; x != nil; x = x.next {
				q++
			}
			if l.inFlight() > 0 || q > 0 || l.ackOwed > 0 || !l.ackDue.IsZero() {
				fmt.Fprintf(&b, "  link %d: next %d una %d inflight %d queued %d credit %d | cum %d sack %x owed %d due %v now %v\n",
					p, l.nextSeq, l.una, l.inFlight(), q, l.peerCredit, l.cum, l.sack, l.ackOwed, l.ackDue, l.ackNow)
			}
		}
		c.mu.Unlock()
	}
	return b.String()
}

// step makes one progress pass on every context and moves virtual time to
// the next delivery or timer.
func (j *simJob) step() {
	for _, c := range j.ctxs {
		c.Progress()
	}
	next, ok := j.nextEvent()
	for _, c := range j.ctxs {
		c.mu.Lock()
		if t := c.rel.nextTick; !t.IsZero() && (!ok || t.Before(next)) {
			next, ok = t, true
		}
		c.mu.Unlock()
	}
	if ok {
		j.advance(next.Sub(j.net.Now()))
	}
}

// close closes every context and, unless the test already failed, checks
// that the faults the network's spec names happened (checkFaults).
func (j *simJob) close() {
	for _, c := range j.ctxs {
		c.Close()
	}
	if !j.t.Failed() {
		j.checkFaults()
	}
}

// requireFaults makes close require every fault the spec names, however
// little traffic the job had: for a test that says it runs under them.
func (j *simJob) requireFaults() { j.allFaults = true }

// minExpected is the expected count of a fault (frames offered times its
// rate) from which checkFaults requires it to have happened at least once:
// a fair chance, e^-5 < 1% that a seed misses it.
const minExpected = 5

// checkFaults fails the test if a fault that j.net's spec asks for never
// happened although the job's traffic made it expected minExpected times
// (or at all, after requireFaults): such a test would pass vacuously.
func (j *simJob) checkFaults() {
	j.t.Helper()
	for _, m := range j.faultsMissing(j.allFaults) {
		j.t.Errorf("%s: the test does not exercise it", m)
	}
}

// faultsMissing describes each fault j.net's spec asks for that has not
// happened, though expected minExpected times by now (any number if all).
// Loss, duplication and reordering count at the network; corruption counts
// where it must be caught, as DropCRC at a receiver.
func (j *simJob) faultsMissing(all bool) []string {
	spec, ns := j.net.Spec(), j.net.Stats()
	offered := float64(ns.Offered.Load())
	kept := offered * (1 - spec.Loss)
	var crc uint64
	for r := range j.ctxs {
		if d := j.net.Device(hal.Rank(r)); d != nil {
			crc += d.Counters().Drops[hal.DropCRC].Load()
		}
	}
	var missing []string
	for _, f := range []struct {
		name     string
		rate     float64
		expected float64
		seen     uint64
	}{
		{"loss", spec.Loss, offered * spec.Loss, ns.Dropped.Load()},
		{"dup", spec.Dup, kept * spec.Dup, ns.Duplicated.Load()},
		{"reorder", spec.Reorder, kept * spec.Reorder, ns.Delayed.Load()},
		{"corrupt (DropCRC at a receiver)", spec.Corrupt, kept * spec.Corrupt, crc},
	} {
		if f.seen == 0 && f.rate > 0 && (all || f.expected >= minExpected) {
			missing = append(missing, fmt.Sprintf("spec %v: no %s in %.0f frames offered (%.1f expected)",
				spec, f.name, offered, f.expected))
		}
	}
	return missing
}

// stir sends active messages of up to 2 KiB from every rank to the next,
// each checked to arrive once and intact, until j's network has shown
// every fault its spec names (faultsMissing), and fails the test if limit
// messages per rank do not get there. It is for a test whose own traffic is
// a handful of frames: its flows then run over links, and lapi state, that
// have been through every fault.
func (j *simJob) stir(limit int) {
	j.t.Helper()
	n := len(j.ctxs)
	k := &checker{t: j.t, me: hal.Rank(n), seen: map[[2]uint32]bool{}}
	var h HandlerID
	for _, c := range j.ctxs {
		h = c.RegisterHandler(k)
	}
	rng := rand.New(rand.NewPCG(j.net.Spec().Seed, 7))
	sent := 0
	for sent < limit && len(j.faultsMissing(true)) > 0 {
		for r, c := range j.ctxs {
			size := rng.IntN(2 << 10)
			off := rng.IntN(len(pattern) - size)
			var u [12]byte
			binary.LittleEndian.PutUint32(u[:], uint32(r))
			binary.LittleEndian.PutUint32(u[4:], uint32(sent))
			binary.LittleEndian.PutUint32(u[8:], uint32(off))
			if err := c.Amsend(hal.Rank((r+1)%n), h, u[:], pattern[off:off+size], SendOpts{}); err != nil {
				j.t.Fatalf("stir: rank %d message %d: %v", r, sent, err)
			}
		}
		sent++
		j.run(time.Minute, nil, func() bool { return k.err != nil || k.got == sent*n })
		if k.err != nil {
			j.t.Fatalf("stir: %v", k.err)
		}
	}
	if m := j.faultsMissing(true); len(m) > 0 {
		j.t.Fatalf("stir: %d messages per rank, and still %s", limit, strings.Join(m, "; "))
	}
	j.t.Logf("stir: %d messages per rank until every fault happened", sent)
}

// pattern is the source of every test message's bytes: message data is
// pattern[off:off+size], so a receiver can check it without a copy.
var pattern = func() []byte {
	b := make([]byte, 2<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// checker is an AM handler that checks content and counts each message
// exactly once.
type checker struct {
	t    *testing.T
	me   hal.Rank
	seen map[[2]uint32]bool
	got  int
	sum  uint64 // order-independent digest of what arrived
	err  error
}

type checkMsg struct {
	src, idx, off uint32
	buf           []byte
}

func (k *checker) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	m := &checkMsg{src: binary.LittleEndian.Uint32(uhdr), idx: binary.LittleEndian.Uint32(uhdr[4:]),
		off: binary.LittleEndian.Uint32(uhdr[8:]), buf: make([]byte, n)}
	if hal.Rank(m.src) != src && k.err == nil {
		k.err = fmt.Errorf("rank %d: header says source %d, frame says %d", k.me, m.src, src)
	}
	return m.buf, m
}

func (k *checker) OnComplete(src hal.Rank, cookie any) {
	m := cookie.(*checkMsg)
	key := [2]uint32{m.src, m.idx}
	switch {
	case k.seen[key]:
		k.err = fmt.Errorf("rank %d: message %d from %d delivered twice", k.me, m.idx, m.src)
	case !bytes.Equal(m.buf, pattern[m.off:int(m.off)+len(m.buf)]):
		k.err = fmt.Errorf("rank %d: message %d from %d (%d bytes) corrupted", k.me, m.idx, m.src, len(m.buf))
	}
	k.seen[key] = true
	k.got++
	k.sum += uint64(m.src)<<40 ^ uint64(m.idx)<<20 ^ uint64(len(m.buf))
}

// amStorm sends msgs active messages of random sizes (log-uniform from 0 B
// to maxSize, some empty) from every rank to random ranks, at most window
// outstanding per rank, and checks each arrives once, intact. It returns a
// digest of the run (virtual time taken and network statistics) for
// reproducibility checks.
func amStorm(t *testing.T, seed uint64, n, msgs, maxSize int, spec faults.Spec) string {
	spec.Seed = seed
	return amStormOn(t, newSimJob(t, n, spec, simnet.WithMTU(16<<10)), seed, msgs, maxSize, spec)
}

// amStormOn is amStorm on the job j, whose network j.net injects spec.
func amStormOn(t *testing.T, j *simJob, seed uint64, msgs, maxSize int, spec faults.Spec) string {
	n := len(j.ctxs)
	defer j.close()
	checkers := make([]*checker, n)
	origin := make([]*Counter, n)
	var h HandlerID
	for r, c := range j.ctxs {
		checkers[r] = &checker{t: t, me: hal.Rank(r), seen: map[[2]uint32]bool{}}
		h = c.RegisterHandler(checkers[r])
		origin[r] = c.NewCounter()
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	sent := make([]int, n)
	perRank := msgs / n
	const window = 16
	step := func() {
		for r, c := range j.ctxs {
			for sent[r] < perRank && int64(sent[r])-origin[r].Value() < window {
				size := 0
				if rng.IntN(10) != 0 {
					size = int(math.Exp(rng.Float64() * math.Log(float64(maxSize))))
				}
				off := rng.IntN(len(pattern) - size)
				var u [12]byte
				binary.LittleEndian.PutUint32(u[:], uint32(r))
				binary.LittleEndian.PutUint32(u[4:], uint32(sent[r]))
				binary.LittleEndian.PutUint32(u[8:], uint32(off))
				tgt := hal.Rank(rng.IntN(n))
				if err := c.Amsend(tgt, h, u[:], pattern[off:off+size], SendOpts{Origin: origin[r]}); err != nil {
					t.Fatalf("rank %d send %d: %v", r, sent[r], err)
				}
				sent[r]++
			}
		}
	}
	start := j.net.Now()
	j.run(10*time.Minute, step, func() bool {
		got := 0
		for _, k := range checkers {
			if k.err != nil {
				t.Fatal(k.err)
			}
			got += k.got
		}
		return got == perRank*n
	})
	var st Stats
	for _, c := range j.ctxs {
		s := c.Stats()
		st.Retransmits += s.Retransmits
		st.Duplicates += s.Duplicates
		st.PacketsSent += s.PacketsSent
	}
	ns := j.net.Stats()
	if spec.Loss > 0 && (st.Retransmits == 0 || ns.Dropped.Load() == 0) {
		t.Fatalf("seed %d: no loss repaired (retransmits %d, network drops %d): faults not injected", seed, st.Retransmits, ns.Dropped.Load())
	}
	h64 := fnv.New64a()
	for _, k := range checkers {
		fmt.Fprint(h64, k.sum, k.got)
	}
	return fmt.Sprintf("virtual %v, %d packets, %d retransmits, %d duplicates discarded; net: %d dropped %d duplicated %d corrupted %d reordered; digest %x",
		j.net.Now().Sub(start), st.PacketsSent, st.Retransmits, st.Duplicates,
		ns.Dropped.Load(), ns.Duplicated.Load(), ns.Corrupted.Load(), ns.Delayed.Load(), h64.Sum64())
}

// TestAMExactlyOnceHostile: 10,000 active messages of 0 B to 1 MiB among 4
// ranks under 20% loss, 10% reordering, 5% duplication and 1% corruption
// are each delivered exactly once, intact, for 20 seeds.
func TestAMExactlyOnceHostile(t *testing.T) {
	seeds, msgs := 20, 10000
	if testing.Short() {
		seeds, msgs = 3, 2000
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Log(amStorm(t, seed, 4, msgs, 1<<20, hostile))
		})
	}
}

// TestAMReproducible: the same seed gives the same run, packet for packet.
func TestAMReproducible(t *testing.T) {
	a := amStorm(t, 7, 4, 400, 256<<10, hostile)
	b := amStorm(t, 7, 4, 400, 256<<10, hostile)
	if a != b {
		t.Fatalf("seed 7 ran differently:\n%s\n%s", a, b)
	}
	if c := amStorm(t, 8, 4, 400, 256<<10, hostile); c == a {
		t.Fatalf("seeds 7 and 8 ran identically: the seed is not used")
	}
}

// TestStormCorruptionReachesCRC: in the AM storm corrupted copies are
// counted as DropCRC by their receivers, and no frame is dropped for any
// other reason (a corruption never shows as another drop).
func TestStormCorruptionReachesCRC(t *testing.T) {
	spec := hostile
	spec.Seed = 1
	j := newSimJob(t, 4, spec, simnet.WithMTU(16<<10))
	t.Log(amStormOn(t, j, 1, 2000, 1<<20, spec))
	for j.net.Step() {
	}
	var crc, other uint64
	for r := range 4 {
		c := j.net.Device(hal.Rank(r)).Counters()
		crc += c.Drops[hal.DropCRC].Load()
		other += c.Dropped() - c.Drops[hal.DropCRC].Load()
	}
	ns := j.net.Stats()
	t.Logf("corrupted %d, DropCRC %d, other drops %d, dead %d", ns.Corrupted.Load(), crc, other, ns.Dead.Load())
	if crc == 0 || other != 0 {
		t.Errorf("corrupted %d copies, receivers counted %d as DropCRC and %d otherwise", ns.Corrupted.Load(), crc, other)
	}
}

// allReached reports whether every counter of ks has reached v.
func allReached(ks []*Counter, v int64) bool {
	for _, k := range ks {
		if k.Value() < v {
			return false
		}
	}
	return true
}
