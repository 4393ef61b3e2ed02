//go:build verbs && linux && cgo

package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/verbs"
)

// lapiPair opens a two-rank lapi job over verbs devices dev0 and dev1
// (with opts, Device aside).
func lapiPair(t *testing.T, dev0, dev1 string, opts verbs.Options) (c0, c1 *lapi.Context) {
	t.Helper()
	const key = 0x1a91_0029
	var ds [2]*verbs.Device
	for r, name := range []string{dev0, dev1} {
		o := opts
		o.Device = name
		d, err := verbs.Open(hal.Config{JobKey: key, Rank: hal.Rank(r), Size: 2}, o)
		if err != nil {
			t.Fatal(err)
		}
		ds[r] = d
	}
	for _, d := range ds {
		for q, e := range ds {
			if err := d.Connect(hal.Rank(q), e.Addr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	var cs [2]*lapi.Context
	for r, d := range ds {
		c, err := lapi.Open(lapi.Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key})
		if err != nil {
			t.Fatal(err)
		}
		cs[r] = c
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs[0], cs[1]
}

// serve makes progress on c in a goroutine until the returned stop is
// called: the target of one-sided transfers must answer hellos, fences
// and the software engine's packets.
func serve(c *lapi.Context) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Wait(context.Background(), func() (bool, error) { return done.Load(), nil })
	}()
	return func() {
		done.Store(true)
		c.Wake()
		wg.Wait()
	}
}

// TestLapiOneSided: lapi's Put and Get over verbs devices (one device,
// and rxe0 to rxe1) go by hardware RDMA Write and Read once the RC
// connection is up and the target's TPT update (with its rkey) has
// arrived, the software engine before; data is exact either way, the
// target counter hears of each Put, repeated transfers from one buffer
// hit the registration cache, and a deregistered region is refused.
func TestLapiOneSided(t *testing.T) {
	for _, c := range verbs.RxePairs(t) {
		t.Run(c[0]+"-"+c[1], func(t *testing.T) { testLapiOneSided(t, c[0], c[1]) })
	}
}

func testLapiOneSided(t *testing.T, dev0, dev1 string) {
	c0, c1 := lapiPair(t, dev0, dev1, verbs.Options{})
	stop := serve(c1)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const size = 1<<20 + 77
	mem := make([]byte, size)
	p, err := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	src, back := make([]byte, size), make([]byte, size)
	tk := c1.NewCounter()
	puts := 0
	for i := 1; ; i++ {
		if i > 200 {
			t.Fatalf("after 200 rounds still not by hardware RDMA: %+v", c0.OneSidedStats())
		}
		for j := range src {
			src[j] = byte(i*7 + j*13)
		}
		k := c0.NewCounter()
		if err := c0.Put(1, p, src, lapi.SendOpts{Completion: k, Target: tk.ID()}); err != nil {
			t.Fatal("put:", err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal("put:", err)
		}
		puts++
		if !bytes.Equal(mem, src) {
			t.Fatalf("round %d: Put: memory differs (%+v)", i, c0.OneSidedStats())
		}
		clear(back)
		k = c0.NewCounter()
		if err := c0.Get(1, p, back, lapi.SendOpts{Origin: k}); err != nil {
			t.Fatal("get:", err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal("get:", err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("round %d: Get: data differs (%+v)", i, c0.OneSidedStats())
		}
		if s := c0.OneSidedStats(); s.Writes >= 3 && s.Reads >= 3 {
			break
		}
	}
	if err := tk.Wait(ctx, int64(puts)); err != nil {
		t.Fatalf("target counter: %v", err)
	}
	s := c0.OneSidedStats()
	t.Logf("%d rounds: %+v", puts, s)
	if s.Cache.Hits == 0 {
		t.Errorf("repeated transfers from one buffer never hit the registration cache: %+v", s.Cache)
	}

	// Deregistered: once the removal has reached c0 (a fence from c1,
	// which c0 answers, carries it ahead), the region is refused and
	// memory is untouched. (Before, the registration cache may still
	// honour the rkey, as cross-memory attach honours any address: lapi's
	// doc, native.go.)
	if err := c1.TPT().Deregister(p); err != nil {
		t.Fatal(err)
	}
	stop0 := serve(c0)
	if err := c1.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	stop0()
	clear(mem)
	k := c0.NewCounter()
	if err := c0.Put(1, p, src, lapi.SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); !errors.Is(err, lapi.ErrProtection) {
		t.Fatalf("Put to a deregistered region: %v, want ErrProtection", err)
	}
	if !bytes.Equal(mem, make([]byte, size)) {
		t.Fatal("Put to a deregistered region changed its memory")
	}
}

// TestLapiOneSidedQueue: with room for one RDMA work request in the
// device (Options.RCQueue 4), many Puts at once wait for room in lapi
// and all land, exact, by the adapter.
func TestLapiOneSidedQueue(t *testing.T) {
	names := verbs.RxeDevs(t)
	c0, c1 := lapiPair(t, names[0], names[len(names)-1], verbs.Options{RCQueue: 4})
	stop := serve(c1)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n, size = 8, 128 << 10
	mem := make([]byte, n*size)
	p, err := c1.TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	// c1 sends its TPT changes to c0 before its next message to c0, and
	// Puts alone have it send none: a fence (which c0 answers) does.
	stop0 := serve(c0)
	if err := c1.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	stop0()
	src := make([]byte, n*size)
	for round := 1; ; round++ {
		if round > 100 {
			t.Fatalf("after 100 rounds no Put waited for room: %+v", c0.OneSidedStats())
		}
		for j := range src {
			src[j] = byte(round + j*7)
		}
		k := c0.NewCounter()
		for i := range n {
			if err := c0.Put(1, p.Add(uint64(i*size)), src[i*size:(i+1)*size], lapi.SendOpts{Completion: k}); err != nil {
				t.Fatal(err)
			}
		}
		if err := k.Wait(ctx, n); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mem, src) {
			t.Fatalf("round %d: memory differs (%+v)", round, c0.OneSidedStats())
		}
		if s := c0.OneSidedStats(); s.Queued > 0 && s.Writes >= n {
			t.Logf("%d rounds: %+v", round, s)
			return
		}
	}
}

// TestLapiPutLargerThanQueue: with Options.RCQueue 4 (four RDMA work
// requests of the port's max_msg_sz, 8 MiB on rxe, in flight at most), a
// Put of more than 32 MiB goes by hardware RDMA in parts and lands exact:
// the device no longer refuses a transfer that could never fit (which
// lapi kept queued for room for ever).
func TestLapiPutLargerThanQueue(t *testing.T) {
	names := verbs.RxeDevs(t)
	c0, c1 := lapiPair(t, names[0], names[0], verbs.Options{RCQueue: 4})
	stop := serve(c1)
	defer stop()
	const small, big = 1 << 20, 32<<20 + 4096
	mem := make([]byte, big)
	p, err := c1.TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop0 := serve(c0)
	if err := c1.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	stop0()
	// Small Puts until one went by hardware RDMA: the connection is up.
	src := make([]byte, big)
	for round := 1; c0.OneSidedStats().Writes == 0; round++ {
		if round > 100 {
			t.Fatalf("after 100 rounds no Put by hardware RDMA: %+v", c0.OneSidedStats())
		}
		k := c0.NewCounter()
		if err := c0.Put(1, p, src[:small], lapi.SendOpts{Completion: k}); err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	for j := range src {
		src[j] = byte(j*7 + 1)
	}
	before := c0.OneSidedStats()
	k := c0.NewCounter()
	if err := c0.Put(1, p, src, lapi.SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); err != nil {
		t.Fatalf("Put of %d bytes with RCQueue 4: %v (%+v)", big, err, c0.OneSidedStats())
	}
	if !bytes.Equal(mem, src) {
		t.Fatal("memory differs after the Put")
	}
	if s := c0.OneSidedStats(); s.Writes != before.Writes+1 || s.Fallbacks != before.Fallbacks || s.Retries != before.Retries {
		t.Fatalf("the Put did not go by hardware RDMA alone: before %+v, after %+v", before, s)
	}
}
