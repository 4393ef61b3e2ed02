//go:build linux

package lapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/udp"
)

// modSizes are TestNetnsModalities' transfer lengths: a byte, a few odd
// KiB (several packets), and a few MiB (several RDMA chunks).
var modSizes = []int{1, 5001, 3<<20 + 5}

// TestNetnsModalities: lapi's RDMA modalities beyond Put and Get over UDP
// devices in two namespace hosts on a bridge, ranks 0-1 on host a and
// 2-3 on host b, with nftables dropping 5% of the UDP datagrams that
// arrive at host b, in real time: third-party RDMA (a write and a read at
// once), broadcast RDMA (a chain and a pulled binomial tree at once), a
// chain of conditional Puts crossing between the hosts, the four
// half-RDMA modes and fire-and-forget Put and Accumulate, each of 1 B,
// 5001 B and 3 MiB. Every byte lands exact, every counter at every
// party reaches exactly its value (and is still there once every rank
// has fenced), and nothing fails. Each rank's user waits only on its own
// counters; a rank that does not wait (a third-party carrier, a
// triggered forwarder) progresses by lapi's own background goroutine.
func TestNetnsModalities(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time namespace test")
	}
	ha, hb := netnsHosts(t)
	j := openModJob(t, ha, hb)
	dropUDPAt(t, hb, 5)
	for _, m := range []struct {
		name string
		run  func(context.Context, *testing.T, *modJob, int)
	}{
		{"thirdparty", modThirdParty},
		{"broadcast", modBroadcast},
		{"trigger", modTrigger},
		{"half", modHalf},
		{"none", modNone},
	} {
		for _, size := range modSizes {
			t.Run(fmt.Sprintf("%s/%dB", m.name, size), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				m.run(ctx, t, j, size)
			})
		}
	}
	var rexmit, redrives uint64
	for r, c := range j.ctxs {
		s, rs := c.Stats(), c.RDMAStats()
		rexmit += s.Retransmits
		redrives += rs.Redrives
		t.Logf("rank %d: %d packets sent, %d retransmitted, %d RDMA redrives", r, s.PacketsSent, s.Retransmits, rs.Redrives)
	}
	if rexmit+redrives == 0 {
		t.Errorf("nothing retransmitted or redriven: the loss did not bite")
	}
}

// modJob is TestNetnsModalities' four ranks, with the FIFO handler and
// FIFO source each registered (ID 0).
type modJob struct {
	ctxs  []*lapi.Context
	takes []*fifoTake
	srcs  []*fifoServe
	ids   atomic.Uint64 // broadcast IDs
}

// openModJob opens the four ranks' UDP devices in namespaces a and b
// and a lapi context on each.
func openModJob(t *testing.T, a, b string) *modJob {
	const n, key = 4, 0x6d6f_6461_6c
	devs := connectDevs(t, hostUDPs(t, a, b, n, key, udp.Options{}), false, key)
	j := &modJob{}
	for r, d := range devs {
		c, err := lapi.Open(lapi.Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		take, src := &fifoTake{}, &fifoServe{mem: pattern(4<<20, uint64(1000+r))}
		if c.Half().RegisterFIFO(take) != 0 || c.Half().RegisterFIFOSource(src) != 0 {
			t.Fatal("the first FIFO handler or source is not ID 0")
		}
		j.ctxs, j.takes, j.srcs = append(j.ctxs, c), append(j.takes, take), append(j.srcs, src)
	}
	return j
}

// pattern is n bytes drawn from seed.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n+7)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

// unlike changes every byte of dst equal to src's: a transfer that does
// not happen cannot pass for one that did.
func unlike(dst, src []byte) {
	for k := range dst {
		if dst[k] == src[k] {
			dst[k] ^= 0xff
		}
	}
}

// region registers a region of rank r of n bytes drawn from seed, for
// reads and writes, until the subtest ends.
func (j *modJob) region(t *testing.T, r, n int, seed uint64) ([]byte, hal.PVO) {
	t.Helper()
	b := pattern(n, seed)
	p, err := j.ctxs[r].TPT().Register(b, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.ctxs[r].TPT().Deregister(p) })
	return b, p
}

// count is a counter of a rank's and the value it must reach, exactly.
type count struct {
	name string
	rank int
	k    *lapi.Counter
	n    int64
}

// counter makes a counter of rank r's that must reach n, and lists it.
func (j *modJob) counter(cs *[]count, name string, r int, n int64) *lapi.Counter {
	k := j.ctxs[r].NewCounter()
	*cs = append(*cs, count{name, r, k, n})
	return k
}

// reach waits, one goroutine per counter as each rank's user would, until
// every counter of cs has reached its value (none is consumed), and fails
// t for one that failed, fell short when ctx ended, or went past.
func (j *modJob) reach(ctx context.Context, t *testing.T, cs ...count) {
	t.Helper()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			err := j.ctxs[c.rank].Wait(ctx, func() (bool, error) { return c.k.Value() >= c.n, nil })
			if kerr := c.k.Wait(context.Background(), 0); kerr != nil { // its failure, if any
				err = kerr
			}
			switch v := c.k.Value(); {
			case err != nil:
				errs[i] = fmt.Errorf("%s at rank %d: %w (at %d of %d)", c.name, c.rank, err, v, c.n)
			case v != c.n:
				errs[i] = fmt.Errorf("%s at rank %d reached %d, want %d", c.name, c.rank, v, c.n)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// settle has every rank fence, then checks that every counter of cs is
// still at its value: nothing late counted twice.
func (j *modJob) settle(ctx context.Context, t *testing.T, cs []count) {
	t.Helper()
	errs := make([]error, len(j.ctxs))
	var wg sync.WaitGroup
	for r, c := range j.ctxs {
		wg.Go(func() {
			if err := c.Fence(ctx); err != nil {
				errs[r] = fmt.Errorf("rank %d: fence: %w", r, err)
			}
		})
	}
	wg.Wait()
	for _, c := range cs {
		if v := c.k.Value(); v != c.n {
			errs = append(errs, fmt.Errorf("%s at rank %d: %d once every rank fenced, want %d", c.name, c.rank, v, c.n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// modThirdParty: an asker has a carrier write its region into the other
// rank's and read the other rank's into another of its own, both in
// flight at once, from host a through host b and back.
func modThirdParty(ctx context.Context, t *testing.T, j *modJob, size int) {
	var cs []count
	type check struct{ got, want []byte }
	var checks []check
	for i, tc := range []struct{ asker, by, other int }{{0, 2, 1}, {3, 1, 2}} {
		seed := uint64(100*size + 10*i)
		bySrc, bySrcP := j.region(t, tc.by, size, seed)
		byDst, byDstP := j.region(t, tc.by, size, seed+1)
		otherDst, otherDstP := j.region(t, tc.other, size, seed+2)
		otherSrc, otherSrcP := j.region(t, tc.other, size, seed+3)
		unlike(otherDst, bySrc)
		unlike(byDst, otherSrc)
		for _, write := range []bool{true, false} {
			op, local, remote := "read", byDstP, otherSrcP
			var wantOther int64
			if write {
				op, local, remote, wantOther = "write", bySrcP, otherDstP, 1
			}
			o := lapi.ThirdPartyOpts{
				Completion:  j.counter(&cs, fmt.Sprintf("%d's %s: completion", tc.asker, op), tc.asker, 1),
				ByTarget:    j.counter(&cs, fmt.Sprintf("%d's %s: carrier", tc.asker, op), tc.by, 1).ID(),
				OtherTarget: j.counter(&cs, fmt.Sprintf("%d's %s: other", tc.asker, op), tc.other, wantOther).ID(),
			}
			if err := j.ctxs[tc.asker].ThirdParty(hal.Rank(tc.by), local, hal.Rank(tc.other), remote, uint64(size), write, o); err != nil {
				t.Fatal(err)
			}
		}
		checks = append(checks, check{otherDst, bytes.Clone(bySrc)}, check{byDst, bytes.Clone(otherSrc)})
	}
	j.reach(ctx, t, cs...)
	for i, c := range checks {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("transfer %d (%s): the region differs", i, []string{"write", "read"}[i%2])
		}
	}
	j.settle(ctx, t, cs)
}

// modBroadcast: two broadcasts among the four ranks at once, along a
// chain from rank 0 and, pulled, along a binomial tree from rank 3.
func modBroadcast(ctx context.Context, t *testing.T, j *modJob, size int) {
	var cs []count
	type member struct {
		buf, want []byte
	}
	var members []member
	for i, bc := range []struct {
		group []hal.Rank
		tree  lapi.BcastTree
		pull  bool
	}{
		{[]hal.Rank{0, 1, 2, 3}, lapi.BcastChain, false},
		{[]hal.Rank{3, 1, 0, 2}, lapi.BcastBinomial, true},
	} {
		id := j.ids.Add(1)
		want := pattern(size, uint64(size+i))
		for g, r := range bc.group {
			buf := pattern(size, uint64(size+i+10*(g+1)))
			landed, all := int64(1), int64(0)
			unlike(buf, want)
			if g == 0 {
				copy(buf, want)
				landed, all = 0, 1
			}
			name := fmt.Sprintf("broadcast %d ", id)
			o := lapi.BcastOpts{Tree: bc.tree, Pull: bc.pull,
				Landed: j.counter(&cs, name+"Landed", int(r), landed),
				Done:   j.counter(&cs, name+"Done", int(r), 1),
				All:    j.counter(&cs, name+"All", int(r), all)}
			if err := j.ctxs[r].Broadcast(bc.group, 0, id, buf, o); err != nil {
				t.Fatalf("broadcast %d at rank %d: %v", id, r, err)
			}
			members = append(members, member{buf, want})
		}
	}
	j.reach(ctx, t, cs...)
	for i, m := range members {
		if !bytes.Equal(m.buf, m.want) {
			t.Errorf("broadcast %d member %d: the buffer differs", i/4, i%4)
		}
	}
	j.settle(ctx, t, cs)
}

// modTrigger: rank 0 puts the chunks of a buffer into rank 2's, each
// with a target counter of its own; ranks 2 and 1 armed, before,
// a Put of each chunk to the next rank of the chain 0 → 2 → 1 → 3 when
// it has landed. Until every chunk is at rank 3, no rank but 3 waits:
// the forwards start in lapi's own progress.
func modTrigger(ctx context.Context, t *testing.T, j *modJob, size int) {
	chain := []int{0, 2, 1, 3}
	chunks := min(4, size)
	at := func(i int) int { return i * size / chunks }
	var cs, last []count
	bufs := make([][]byte, len(chain))
	pvos := make([]hal.PVO, len(chain))
	landed := make([][]*lapi.Counter, len(chain))
	for pos, r := range chain {
		bufs[pos], pvos[pos] = j.region(t, r, size, uint64(size+pos))
		unlike(bufs[pos], bufs[0])
		for i := range chunks {
			name := fmt.Sprintf("chunk %d landed", i)
			if pos == len(chain)-1 {
				landed[pos] = append(landed[pos], j.counter(&last, name, r, 1))
			} else if pos > 0 {
				landed[pos] = append(landed[pos], j.counter(&cs, name, r, 1))
			}
		}
	}
	for pos := 1; pos < len(chain)-1; pos++ {
		r, next := chain[pos], chain[pos+1]
		for i := range chunks {
			o := lapi.SendOpts{Target: landed[pos+1][i].ID(), Completion: j.counter(&cs, fmt.Sprintf("chunk %d forwarded", i), r, 1)}
			if err := j.ctxs[r].PutWhen(landed[pos][i], 1, hal.Rank(next), pvos[pos+1].Add(uint64(at(i))), bufs[pos][at(i):at(i+1)], o); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range chunks {
		o := lapi.SendOpts{Target: landed[1][i].ID(), Completion: j.counter(&cs, fmt.Sprintf("chunk %d sent", i), 0, 1)}
		if err := j.ctxs[0].Put(hal.Rank(chain[1]), pvos[1].Add(uint64(at(i))), bufs[0][at(i):at(i+1)], o); err != nil {
			t.Fatal(err)
		}
	}
	j.reach(ctx, t, last...)
	j.reach(ctx, t, cs...)
	for pos := 1; pos < len(chain); pos++ {
		if !bytes.Equal(bufs[pos], bufs[0]) {
			t.Errorf("rank %d's buffer differs from rank 0's", chain[pos])
		}
	}
	j.settle(ctx, t, append(cs, last...))
}

// fifoTake is a FIFO handler: a rank's for PutToFIFO, which copies each
// packet into the slice of the region it is addressed to, or a
// GetToFIFO's, which copies it into buf at its offset; it counts, by
// origin, the packets at each offset and the bytes.
type fifoTake struct {
	buf   []byte
	mu    sync.Mutex
	hits  map[hal.Rank]map[uint64]int
	bytes map[hal.Rank]int
	bad   bool // a read's packet past buf
}

func (f *fifoTake) OnFIFO(src hal.Rank, off uint64, dst, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case dst != nil:
		copy(dst, data)
	case off+uint64(len(data)) > uint64(len(f.buf)):
		f.bad = true
	default:
		copy(f.buf[off:], data)
	}
	if f.hits == nil {
		f.hits, f.bytes = make(map[hal.Rank]map[uint64]int), make(map[hal.Rank]int)
	}
	if f.hits[src] == nil {
		f.hits[src] = make(map[uint64]int)
	}
	f.hits[src][off]++
	f.bytes[src] += len(data)
}

// took checks that the packets from src, since the last look, were n
// bytes, each offset once, and forgets them.
func (f *fifoTake) took(src hal.Rank, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	hits, got := f.hits[src], f.bytes[src]
	delete(f.hits, src)
	delete(f.bytes, src)
	if f.bad {
		return errors.New("a packet past the read's end")
	}
	for off, k := range hits {
		if k != 1 {
			return fmt.Errorf("offset %d handed up %d times", off, k)
		}
	}
	if got != n {
		return fmt.Errorf("%d bytes handed up, want %d", got, n)
	}
	return nil
}

// fifoServe is a rank's GetFromFIFO source: it answers with a copy of mem
// at the offset arg names, and counts its answers out and back.
type fifoServe struct {
	mem             []byte
	reads, released atomic.Int64
}

func (s *fifoServe) OnRead(_ hal.Rank, arg uint32, n uint64) ([]byte, error) {
	if uint64(arg)+n > uint64(len(s.mem)) {
		return nil, errors.New("read past the source")
	}
	s.reads.Add(1)
	return bytes.Clone(s.mem[arg : uint64(arg)+n]), nil
}

func (s *fifoServe) Released([]byte) { s.released.Add(1) }

// modHalf: the four half-RDMA modes at once, from host a to host b and
// back: PutFromFIFO, PutToFIFO into the target's FIFO handler, GetToFIFO
// into the origin's, and GetFromFIFO from the target's FIFO source.
func modHalf(ctx context.Context, t *testing.T, j *modJob, size int) {
	var cs []count
	type check struct {
		name      string
		got, want []byte
	}
	var checks []check
	sinks := make([]*fifoTake, 2)
	pairs := []struct{ org, tgt int }{{0, 2}, {3, 1}}
	for i, p := range pairs {
		c, tgt, seed := j.ctxs[p.org], hal.Rank(p.tgt), uint64(size+10*i)
		ws := func(mode string, target bool) lapi.SendOpts {
			o := lapi.SendOpts{Origin: j.counter(&cs, mode+" origin", p.org, 1)}
			if target {
				o.Completion = j.counter(&cs, mode+" completion", p.org, 1)
				o.Target = j.counter(&cs, mode+" target", p.tgt, 1).ID()
			}
			return o
		}
		data := pattern(size, seed)
		dst, dstP := j.region(t, p.tgt, size, seed+1)
		unlike(dst, data)
		if err := c.Half().PutFromFIFO(tgt, dstP, data, ws("PutFromFIFO", true)); err != nil {
			t.Fatal(err)
		}
		src, srcP := j.region(t, p.org, size, seed+2)
		fdst, fdstP := j.region(t, p.tgt, size, seed+3)
		unlike(fdst, src)
		if err := c.Half().PutToFIFO(tgt, fdstP, srcP, uint64(size), 0, ws("PutToFIFO", true)); err != nil {
			t.Fatal(err)
		}
		far, farP := j.region(t, p.tgt, size, seed+4)
		sinkBuf := make([]byte, size)
		unlike(sinkBuf, far)
		sinks[i] = &fifoTake{buf: sinkBuf}
		if err := c.Half().GetToFIFO(tgt, farP, uint64(size), sinks[i], ws("GetToFIFO", false)); err != nil {
			t.Fatal(err)
		}
		near, nearP := j.region(t, p.org, size, seed+5)
		arg := uint32(13 + size%7 + i)
		unlike(near, j.srcs[p.tgt].mem[arg:])
		if err := c.Half().GetFromFIFO(tgt, nearP, uint64(size), 0, arg, ws("GetFromFIFO", false)); err != nil {
			t.Fatal(err)
		}
		checks = append(checks, check{"PutFromFIFO", dst, data}, check{"PutToFIFO", fdst, bytes.Clone(src)},
			check{"GetToFIFO", sinkBuf, bytes.Clone(far)},
			check{"GetFromFIFO", near, bytes.Clone(j.srcs[p.tgt].mem[arg : int(arg)+size])})
	}
	j.reach(ctx, t, cs...)
	for i, p := range pairs {
		if err := j.takes[p.tgt].took(hal.Rank(p.org), size); err != nil {
			t.Errorf("PutToFIFO from %d: %v", p.org, err)
		}
		if err := sinks[i].took(hal.Rank(p.tgt), size); err != nil {
			t.Errorf("GetToFIFO from %d: %v", p.tgt, err)
		}
		s := j.srcs[p.tgt]
		err := j.ctxs[p.tgt].Wait(ctx, func() (bool, error) { return s.released.Load() == s.reads.Load(), nil })
		if err != nil {
			t.Errorf("rank %d's FIFO source: %d answers, %d given back: %v", p.tgt, s.reads.Load(), s.released.Load(), err)
		}
	}
	for i, c := range checks {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s %d: the bytes differ", c.name, i/4)
		}
	}
	j.settle(ctx, t, cs)
}

// modNone: fire-and-forget Put and two Accumulates (Int32 sums), from
// host a to host b and back, then the origin fences and puts a flag
// with a target counter: once the flag is there, so are the data and
// the target counters of everything sent before the fence.
func modNone(ctx context.Context, t *testing.T, j *modJob, size int) {
	var cs, flags []count
	type check struct {
		name      string
		got, want []byte
	}
	var checks []check
	var early []count // target counters that must be there with the flag
	pairs := []struct{ org, tgt int }{{0, 3}, {2, 1}}
	elems := max(1, size/4)
	for i, p := range pairs {
		c, tgt, seed := j.ctxs[p.org], hal.Rank(p.tgt), uint64(size+10*i)
		data := pattern(size, seed)
		dst, dstP := j.region(t, p.tgt, size, seed+1)
		unlike(dst, data)
		put := lapi.SendOpts{NoCompletion: true, Origin: j.counter(&cs, "Put origin", p.org, 1),
			Target: j.counter(&early, "Put target", p.tgt, 1).ID()}
		if err := c.Put(tgt, dstP, data, put); err != nil {
			t.Fatal(err)
		}
		acc, accP := j.region(t, p.tgt, 4*elems, seed+2)
		add := pattern(4*elems, seed+3)
		want := bytes.Clone(acc)
		for e := range elems {
			v := int32(binary.NativeEndian.Uint32(want[4*e:])) + 2*int32(binary.NativeEndian.Uint32(add[4*e:]))
			binary.NativeEndian.PutUint32(want[4*e:], uint32(v))
		}
		o := lapi.SendOpts{NoCompletion: true, Origin: j.counter(&cs, "Accumulate origin", p.org, 2),
			Target: j.counter(&early, "Accumulate target", p.tgt, 2).ID()}
		for range 2 {
			if err := c.Accumulate(tgt, accP, add, lapi.AccSum, lapi.Int32, o); err != nil {
				t.Fatal(err)
			}
		}
		checks = append(checks, check{"Put", dst, data}, check{"Accumulate", acc, want})
	}
	for _, p := range pairs {
		if err := j.ctxs[p.org].Fence(ctx); err != nil {
			t.Fatalf("rank %d: fence: %v", p.org, err)
		}
		_, flagP := j.region(t, p.tgt, 1, 0)
		o := lapi.SendOpts{Target: j.counter(&flags, "flag target", p.tgt, 1).ID()}
		if err := j.ctxs[p.org].Put(hal.Rank(p.tgt), flagP, []byte{1}, o); err != nil {
			t.Fatal(err)
		}
	}
	j.reach(ctx, t, flags...)
	for _, c := range early {
		if v := c.k.Value(); v != c.n {
			t.Errorf("%s at rank %d: %d when the later flag was there, want %d", c.name, c.rank, v, c.n)
		}
	}
	for i, c := range checks {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s %d: the bytes differ when the later flag was there", c.name, i/2)
		}
	}
	cs = append(append(cs, early...), flags...)
	j.reach(ctx, t, cs...)
	j.settle(ctx, t, cs)
}
