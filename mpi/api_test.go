package mpi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSendRecvObj(t *testing.T) {
	type particle struct {
		ID   int
		Pos  [3]float64
		Tags map[string]string
	}
	err := Run(3, func(c *Comm) error {
		if c.Rank() != 0 {
			p := particle{ID: c.Rank(), Pos: [3]float64{1, 2, float64(c.Rank())}, Tags: map[string]string{"from": strings.Repeat("x", 100000*c.Rank())}}
			return c.SendObj(p, 0, 5)
		}
		for i := 0; i < 2; i++ {
			var p particle
			st, err := c.RecvObj(&p, AnySource, 5)
			if err != nil {
				return err
			}
			if p.ID != st.Source || p.Pos[2] != float64(st.Source) || len(p.Tags["from"]) != 100000*st.Source {
				t.Errorf("got %+v (len %d) from %d", p.Pos, len(p.Tags["from"]), st.Source)
			}
			if st.Count != 1 || st.Tag != 5 {
				t.Errorf("status %+v, want tag 5 and count 1 (one value)", st)
			}
		}
		var bad chan int // gob cannot encode channels
		if err := c.SendObj(bad, 1, 0); err == nil {
			t.Error("SendObj of a channel succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// staleObj has a field that is zero at the root: gob does not send it.
type staleObj struct {
	A, B int
	M    map[string]int
}

// TestBcastObjReplaces: BcastObj "broadcasts root's *v into every rank's
// v". A rank whose v held something before must end with root's value,
// not a merge of the two: gob leaves fields it does not send (zero at the
// root) and map keys it does not name as they were.
func TestBcastObjReplaces(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(3, func(c *Comm) error {
		v := staleObj{A: 0, B: 2, M: map[string]int{"root": 1}}
		if c.Rank() != 0 {
			v = staleObj{A: 99, B: 99, M: map[string]int{"stale": 99}}
		}
		if err := c.BcastObj(&v, 0); err != nil {
			return err
		}
		if v.A != 0 || v.B != 2 || !maps.Equal(v.M, map[string]int{"root": 1}) {
			return fmt.Errorf("rank %d: BcastObj gave %+v, want root's {A:0 B:2 M:map[root:1]}", c.Rank(), v)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestRecvObjReplaces: RecvObj into a value that held something before,
// as BcastObj; one that cannot be decoded into it leaves it as it was.
func TestRecvObjReplaces(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 1 {
			if err := c.SendObj(staleObj{A: 0, B: 2}, 0, 3); err != nil {
				return err
			}
			return c.SendObj("not a staleObj", 0, 4)
		}
		v := staleObj{A: 99, B: 99, M: map[string]int{"stale": 99}}
		if _, err := c.RecvObj(&v, AnySource, AnyTag); err != nil {
			return err
		}
		if v.A != 0 || v.B != 2 || len(v.M) != 0 {
			return fmt.Errorf("RecvObj gave %+v, want the sent {A:0 B:2 M:map[]}", v)
		}
		// A value of another type fails, and leaves v as it was.
		v.A = 7
		if _, err := c.RecvObj(&v, 1, 4); err == nil {
			return fmt.Errorf("RecvObj of a string into %T succeeded: %+v", v, v)
		}
		if v.A != 7 || v.B != 2 {
			return fmt.Errorf("RecvObj that failed changed v to %+v", v)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func TestErrors(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		buf := make([]int32, 4)
		if err := Send(c, buf, 2, 0); !errors.Is(err, ErrRank) {
			t.Errorf("send to rank 2 of 2: %v", err)
		}
		if _, err := Recv(c, buf, -5, 0); !errors.Is(err, ErrRank) {
			t.Errorf("recv from -5: %v", err)
		}
		if err := Send(c, buf, 0, -3); !errors.Is(err, ErrArg) {
			t.Errorf("negative tag: %v", err)
		}
		if err := Bcast(c, buf, 7); !errors.Is(err, ErrRank) {
			t.Errorf("bcast root 7: %v", err)
		}
		if err := Allreduce(c, []complex64{1}, []complex64{0}, Max); !errors.Is(err, ErrArg) {
			t.Errorf("max of complex: %v", err)
		}
		if err := Allreduce(c, buf, buf[:2], Sum); !errors.Is(err, ErrArg) {
			t.Errorf("allreduce of mismatched lengths: %v", err)
		}
		// Truncation, eager and rendezvous: the buffer holds the first part.
		for _, n := range []int{10, 100000} {
			if c.Rank() == 0 {
				msg := make([]int32, n)
				for i := range msg {
					msg[i] = int32(i + 1)
				}
				if err := Send(c, msg, 1, 9); err != nil {
					return err
				}
				continue
			}
			small := make([]int32, 4)
			st, err := Recv(c, small, 0, 9)
			if !errors.Is(err, ErrTruncate) || small[3] != 4 || st.Count != 4 {
				t.Errorf("n=%d: truncated receive: %v, %v, status %+v", n, err, small, st)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTimeoutReport: a receive nobody answers fails with ErrTimeout and
// says what it was waiting for.
func TestTimeoutReport(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "200ms")
	err := Run(2, func(c *Comm) error {
		// Rank 0 returns at once (not a failure): rank 1's receive can only
		// time out. Any blocking call on rank 0 would race the same timeout.
		if c.Rank() == 1 {
			buf := make([]byte, 1)
			_, err := Recv(c, buf, 0, 42)
			if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "Recv from rank 0, tag 42") {
				t.Errorf("timeout error: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An explicit context wins over WEFT_TIMEOUT and is reported the same way.
	err = Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			r, err := Irecv(c, make([]byte, 1), 1, 1)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := r.WaitContext(ctx); !errors.Is(err, ErrTimeout) {
				t.Errorf("WaitContext: %v", err)
			}
			if done, _, _ := r.Test(); done {
				t.Error("request done with no message")
			}
			return Send(c, []byte{1}, 1, 2)
		}
		_, err := Recv(c, make([]byte, 1), 0, 2)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDupSplitProbe(t *testing.T) {
	err := Run(6, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		// Traffic on the dup never matches receives on the original.
		if c.Rank() == 0 {
			if err := Send(d, []int{1}, 1, 0); err != nil {
				return err
			}
			if err := Send(c, []int{2}, 1, 0); err != nil {
				return err
			}
		} else if c.Rank() == 1 {
			v := []int{0}
			if _, err := Recv(c, v, 0, AnyTag); err != nil || v[0] != 2 {
				t.Errorf("world recv got %v, %v", v, err)
			}
			st, err := d.Probe(AnySource, AnyTag)
			if err != nil || st.Source != 0 || st.Count != 8 {
				t.Errorf("probe on dup: %+v %v", st, err)
			}
			if _, err := Recv(d, v, 0, 0); err != nil || v[0] != 1 {
				t.Errorf("dup recv got %v, %v", v, err)
			}
		}
		// Split into evens and odds, reversed by key; rank 5 opts out.
		color := c.Rank() % 2
		if c.Rank() == 5 {
			color = -1
		}
		s, err := c.Split(color, -c.Rank())
		if err != nil {
			return err
		}
		if c.Rank() == 5 {
			if s != nil {
				t.Error("rank 5 got a communicator with a negative color")
			}
			return nil
		}
		want := map[int]int{0: 2, 2: 1, 4: 0, 1: 1, 3: 0}
		wantSize := map[int]int{0: 3, 1: 2}[color]
		if s.Rank() != want[c.Rank()] || s.Size() != wantSize {
			t.Errorf("world %d: split rank %d of %d, want %d of %d", c.Rank(), s.Rank(), s.Size(), want[c.Rank()], wantSize)
		}
		v := []int{c.Rank()}
		if err := Allreduce(s, v, v, Sum); err != nil {
			return err
		}
		if want := map[int]int{0: 6, 1: 4}[color]; v[0] != want {
			t.Errorf("world %d: allreduce over its part = %d, want %d", c.Rank(), v[0], want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFreedComm: every kind of call on a communicator after its Free
// fails with ErrArg naming the freed communicator, instead of sending on
// a context no rank listens on.
func TestFreedComm(t *testing.T) {
	err := Run(3, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		peer := (c.Rank() + 1) % c.Size()
		v := []int32{1}
		calls := map[string]error{
			"Send":      Send(d, v, peer, 0),
			"Barrier":   d.Barrier(),
			"Bcast":     Bcast(d, v, 0),
			"Allreduce": Allreduce(d, v, make([]int32, 1), Sum),
		}
		_, calls["Recv"] = Recv(d, v, peer, 0)
		_, calls["Isend"] = Isend(d, v, peer, 0)
		_, _, calls["Iprobe"] = d.Iprobe(AnySource, AnyTag)
		_, calls["Iallreduce"] = Iallreduce(d, v, make([]int32, 1), Sum)
		_, calls["Dup"] = d.Dup()
		_, calls["NewWin"] = NewWin(d, make([]int32, 4))
		for name, err := range calls {
			if !errors.Is(err, ErrArg) || !strings.Contains(fmt.Sprint(err), "was freed") {
				return fmt.Errorf("%s on a freed communicator: %v, want ErrArg saying it was freed", name, err)
			}
		}
		// The communicator it came from still works.
		return Allreduce(c, v, v, Sum)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPanicNamesRank(t *testing.T) {
	err := Run(3, func(c *Comm) error {
		if c.Rank() == 2 {
			var m map[int]int
			m[1] = 1
		}
		_, err := Recv(c, make([]byte, 1), 2, 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "rank 2 panicked") {
		t.Fatalf("Run = %v, want a panic naming rank 2", err)
	}
}

// TestSmallMessagesAllocateNothing: a blocking send of 8 bytes, or of 4
// KiB (eager, too large for a shared-memory cell), and the receive for
// it, allocate nothing once warm, in process and over shared memory,
// whether the receive was posted first or the message waited for it. One
// goroutine plays both ranks.
func TestSmallMessagesAllocateNothing(t *testing.T) {
	for _, dev := range []string{"inproc", "shm"} {
		t.Run(dev, func(t *testing.T) {
			worlds := devWorlds(t, dev, 2)
			c0, c1 := worlds[0].comm, worlds[1].comm
			for _, n := range []int{1, 512} {
				buf := make([]float64, n)
				step := func() {
					r, err := c1.irecv(asBytes(buf), 8, 0, 3, c1.ctx) // Recv's first half
					if err != nil {
						t.Fatal(err)
					}
					if err := Send(c0, buf, 1, 3); err != nil {
						t.Fatal(err)
					}
					if _, err := r.waitRecycle(); err != nil {
						t.Fatal(err)
					}
				}
				if a := testing.AllocsPerRun(1000, step); a != 0 {
					t.Errorf("%d bytes: %v allocations per message", 8*n, a)
				}
				unexpected := func() { // sent before the receive is posted: kept aside
					if err := Send(c0, buf, 1, 3); err != nil {
						t.Fatal(err)
					}
					worlds[1].lc.Progress()
					if _, err := Recv(c1, buf, 0, 3); err != nil {
						t.Fatal(err)
					}
				}
				if a := testing.AllocsPerRun(1000, unexpected); a != 0 {
					t.Errorf("%d bytes, unexpected: %v allocations per message", 8*n, a)
				}
			}
		})
	}
}

// TestRequestHandle checks what a Request promises once its operation is
// given back: Wait and Test report the same status again, even after
// later operations have reused the state behind it.
func TestRequestHandle(t *testing.T) {
	worlds := devWorlds(t, "shm", 2)
	c0, c1 := worlds[0].comm, worlds[1].comm
	buf := []int32{0, 0, 0}
	q, err := Irecv(c1, buf, 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := Send(c0, []int32{1, 2}, 1, 7); err != nil {
		t.Fatal(err)
	}
	want := Status{Source: 0, Tag: 7, Count: 2}
	if st, err := q.Wait(); err != nil || st != want {
		t.Fatalf("Wait: %+v, %v; want %+v", st, err, want)
	}
	// Reuse the state: a posted receive that never completes here, and
	// a blocking exchange.
	later, err := Irecv(c1, buf, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := Send(c0, []int32{5, 6, 7}, 1, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := Recv(c1, buf, 0, 9); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if st, err := q.Wait(); err != nil || st != want {
			t.Errorf("Wait again: %+v, %v; want %+v", st, err, want)
		}
		if done, st, err := q.Test(); !done || err != nil || st != want {
			t.Errorf("Test again: %v, %+v, %v; want done, %+v", done, st, err, want)
		}
	}
	if done, _, _ := later.Test(); done {
		t.Error("a receive nothing was sent to completed")
	}
	if err := Send(c0, []int32{3}, 1, 8); err != nil {
		t.Fatal(err)
	}
	if st, err := later.Wait(); err != nil || st.Tag != 8 || st.Count != 1 {
		t.Errorf("later receive: %+v, %v", st, err)
	}
}

// TestWindowAllocations counts what a window of small Isends and Irecvs
// allocates: nothing for a send lapi copies, one small handle for a
// receive, whose operation state is reused once it has been waited for.
func TestWindowAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race (sync.Pool drops items)")
	}
	worlds := devWorlds(t, "shm", 2)
	c0, c1 := worlds[0].comm, worlds[1].comm
	const window = 16
	buf := make([]byte, 256)
	sends, recvs := make([]*Request, window), make([]*Request, window)
	step := func() {
		for i := range recvs {
			var err error
			if recvs[i], err = Irecv(c1, buf, 0, 4); err != nil {
				t.Fatal(err)
			}
		}
		for i := range sends {
			var err error
			if sends[i], err = Isend(c0, buf, 1, 4); err != nil {
				t.Fatal(err)
			}
		}
		if err := WaitAll(sends...); err != nil {
			t.Fatal(err)
		}
		if err := WaitAll(recvs...); err != nil {
			t.Fatal(err)
		}
	}
	step() // warm the pools
	sendAllocs := testing.AllocsPerRun(200, func() {
		for i := range sends {
			var err error
			if sends[i], err = Isend(c0, buf, 1, 4); err != nil {
				t.Fatal(err)
			}
		}
		for range sends {
			if _, err := Recv(c1, buf, 0, 4); err != nil {
				t.Fatal(err)
			}
		}
	})
	if sendAllocs != 0 {
		t.Errorf("%v allocations per window of %d copied Isends", sendAllocs, window)
	}
	recvAllocs := testing.AllocsPerRun(200, step)
	if recvAllocs > window {
		t.Errorf("%v allocations per window of %d Irecvs (and Isends): want at most one handle each", recvAllocs, window)
	}
	// The handle is all an Irecv allocates: a few words (a 64-byte size
	// class), not the operation's state (about 200 bytes more). The
	// count is process-wide, so the job's own goroutines (timers, the
	// progress engine) add a few bytes now and then: the least of five
	// batches is taken, and the bound leaves a quarter of a handle for
	// them, far below what the operation's state would add.
	per := math.Inf(1)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 100
		for range runs {
			step()
		}
		runtime.ReadMemStats(&after)
		per = min(per, float64(after.TotalAlloc-before.TotalAlloc)/(runs*window))
	}
	if per > 80 {
		t.Errorf("%.1f bytes allocated per Irecv, want at most 80 (a 64-byte handle)", per)
	}
}

// TestRequestInto runs windows of IsendInto and IrecvInto through arrays
// of Requests reused from one window to the next: every message arrives
// whole with its status, small and rendezvous alike; a Request still in
// use, the shared handle of copied Isends and nil are refused with
// ErrArg and change nothing; and outside the race detector a window of
// small messages allocates nothing.
func TestRequestInto(t *testing.T) {
	worlds := devWorlds(t, "shm", 2)
	c0, c1 := worlds[0].comm, worlds[1].comm
	const window = 8
	var sends, recvs [window]Request
	sendPtrs := make([]*Request, window)
	for i := range sends {
		sendPtrs[i] = &sends[i]
	}
	for _, n := range []int{8, 3000, 300 << 10} { // copied, eager, rendezvous
		for round := range 2 {
			out := make([][]int32, window)
			in := make([][]int32, window)
			for i := range window {
				out[i], in[i] = fill[int32](round, i, n/4), make([]int32, n/4)
				if err := IrecvInto(&recvs[i], c1, in[i], 0, i); err != nil {
					t.Fatalf("%d bytes, round %d: IrecvInto %d: %v", n, round, i, err)
				}
			}
			for i := range window {
				if err := IsendInto(&sends[i], c0, out[i], 1, i); err != nil {
					t.Fatalf("%d bytes, round %d: IsendInto %d: %v", n, round, i, err)
				}
			}
			// Each world progresses only in its own waits, and a
			// rendezvous needs both: the sends are waited for aside.
			sent := make(chan error, 1)
			go func() { sent <- WaitAll(sendPtrs...) }()
			for i := range window {
				st, err := recvs[i].Wait()
				if err != nil || st.Source != 0 || st.Tag != i || st.Count != n/4 || !slices.Equal(in[i], out[i]) {
					t.Errorf("%d bytes, round %d: receive %d: %+v, %v, data equal %v", n, round, i, st, err, slices.Equal(in[i], out[i]))
				}
			}
			if err := <-sent; err != nil {
				t.Fatalf("%d bytes, round %d: sends: %v", n, round, err)
			}
		}
	}

	buf := make([]byte, 8)
	if err := IrecvInto(&recvs[0], c1, buf, 0, 99); err != nil {
		t.Fatal(err)
	}
	if err := IrecvInto(&recvs[0], c1, buf, 0, 98); !errors.Is(err, ErrArg) {
		t.Errorf("IrecvInto a Request still in use: %v, want ErrArg", err)
	}
	if err := Send(c0, []byte("pending!"), 1, 99); err != nil {
		t.Fatal(err)
	}
	if st, err := recvs[0].Wait(); err != nil || st.Tag != 99 || string(buf) != "pending!" {
		t.Errorf("the Request refused a second receive, then: %+v, %v, %q", st, err, buf)
	}
	shared, err := Isend(c0, buf, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := IsendInto(shared, c0, buf, 1, 5); !errors.Is(err, ErrArg) {
		t.Errorf("IsendInto the shared handle of a copied Isend: %v, want ErrArg", err)
	}
	if err := IsendInto(nil, c0, buf, 1, 5); !errors.Is(err, ErrArg) {
		t.Errorf("IsendInto a nil Request: %v, want ErrArg", err)
	}
	if _, err := Recv(c1, buf, 0, 5); err != nil {
		t.Fatal(err)
	}

	if raceEnabled {
		return // sync.Pool drops items under -race
	}
	small := make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		for i := range recvs {
			if err := IrecvInto(&recvs[i], c1, small, 0, 4); err != nil {
				t.Fatal(err)
			}
		}
		for i := range sends {
			if err := IsendInto(&sends[i], c0, small, 1, 4); err != nil {
				t.Fatal(err)
			}
		}
		for i := range window {
			sends[i].Wait()
			if _, err := recvs[i].Wait(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per window of %d IsendInto and IrecvInto, want 0", allocs, window)
	}
}

// TestArgumentEdges: a tag above MaxTag fails with ErrArg (it was written
// as an int32: 1<<31 came out negative, was dropped by the receiver and
// held back every later message of the pair; 1<<32+5 matched tag 5); a
// Sendrecv with a bad source fails before it sends, and one whose send
// fails leaves no receive posted; Split orders extreme keys (their
// difference overflowed); Free of Split's nil communicator fails with
// ErrArg instead of crashing.
func TestArgumentEdges(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		me, other := c.Rank(), 1-c.Rank()
		for _, tag := range []int{MaxTag + 1, 1<<32 + 5} {
			if err := Send(c, []int32{1}, other, tag); !errors.Is(err, ErrArg) {
				return fmt.Errorf("Send with tag %d: %v, want ErrArg", tag, err)
			}
			if _, err := Irecv(c, make([]int32, 1), other, tag); !errors.Is(err, ErrArg) {
				return fmt.Errorf("Irecv with tag %d: %v, want ErrArg", tag, err)
			}
		}
		// A bad source, eager and rendezvous: nothing is sent.
		for _, n := range []int{1, 100 << 10} {
			if _, err := Sendrecv(c, make([]int32, n), other, 3, make([]int32, n), 9, 3); !errors.Is(err, ErrRank) {
				return fmt.Errorf("Sendrecv of %d from rank 9: %v, want ErrRank", n, err)
			}
		}
		// A rendezvous-size send to a bad rank: the receive it posted first
		// is gone, and the message of tag 7 goes to the next receive.
		if _, err := Sendrecv(c, make([]int32, 100<<10), 5, 1, make([]int32, 1), other, 7); !errors.Is(err, ErrRank) {
			return fmt.Errorf("Sendrecv to rank 5: %v, want ErrRank", err)
		}
		if err := Send(c, []int32{int32(40 + me)}, other, 7); err != nil {
			return err
		}
		got := make([]int32, 1)
		if _, err := Recv(c, got, other, 7); err != nil || got[0] != int32(40+other) {
			return fmt.Errorf("receive of tag 7 after the failed Sendrecv: %v %v", got, err)
		}
		// Nothing of tag 3 was sent by the failed calls.
		if found, _, err := c.Iprobe(other, 3); err != nil || found {
			return fmt.Errorf("a failed Sendrecv's message arrived: found %v, %v", found, err)
		}
		// Extreme keys keep their order: rank 0 has the smaller.
		key := math.MinInt
		if me == 1 {
			key = math.MaxInt
		}
		s, err := c.Split(0, key)
		if err != nil || s.Rank() != me {
			return fmt.Errorf("Split with key %d: rank %v, %v; want %d", key, s.Rank(), err, me)
		}
		if err := s.Free(); err != nil {
			return err
		}
		var none *Comm
		if err := none.Free(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Free of a nil communicator: %v, want ErrArg", err)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCountPartialElement: a message of 6 bytes received into []int32 is
// one and a half elements. MPI_Get_count gives MPI_UNDEFINED for it, and
// so Count is -1 (a Count of 1 would say 4 bytes came when 6 did). Eager
// and rendezvous sizes, through Recv, Irecv, Mrecv, Imrecv and Sendrecv;
// a whole number of elements still counts them.
func TestCountPartialElement(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, nbytes := range []int{6, 1<<20 + 2, 8} {
		want := -1
		if nbytes%4 == 0 {
			want = nbytes / 4
		}
		err := Run(2, func(c *Comm) error {
			msg := make([]byte, nbytes)
			buf := make([]int32, nbytes/4+1)
			if c.Rank() == 1 {
				for tag := range 4 {
					if err := Send(c, msg, 0, tag); err != nil {
						return err
					}
				}
				_, err := Sendrecv(c, msg, 0, 4, []byte{}, 0, 5)
				return err
			}
			check := func(how string, st Status, err error) error {
				if err != nil || st.Count != want {
					return fmt.Errorf("%s of %d bytes into []int32: Count %d, %v; want Count %d, no error",
						how, nbytes, st.Count, err, want)
				}
				return nil
			}
			st, err := Recv(c, buf, AnySource, 0)
			if e := check("Recv", st, err); e != nil {
				return e
			}
			r, err := Irecv(c, buf, 1, AnyTag)
			if err != nil {
				return err
			}
			st, err = r.Wait()
			if e := check("Irecv", st, err); e != nil {
				return e
			}
			m, _, err := c.Mprobe(AnySource, AnyTag)
			if err != nil {
				return err
			}
			st, err = Mrecv(m, buf)
			if e := check("Mrecv", st, err); e != nil {
				return e
			}
			if m, _, err = c.Mprobe(1, 3); err != nil {
				return err
			}
			if r, err = Imrecv(m, buf); err != nil {
				return err
			}
			st, err = r.Wait()
			if e := check("Imrecv", st, err); e != nil {
				return e
			}
			st, err = Sendrecv(c, []int32{}, 1, 5, buf, 1, 4)
			return check("Sendrecv", st, err)
		})
		if err != nil {
			t.Errorf("%d bytes: %v", nbytes, err)
		}
	}
}

// TestSendrecvSameBuffer: two ranks swap a buffer with Sendrecv, the
// send and receive buffer being one slice (what MPI_Sendrecv_replace
// does), or overlapping (the send a slice one element further on). Each
// must end with the other's data, never with a mix of the two; eager,
// rendezvous and split sizes.
func TestSendrecvSameBuffer(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, n := range []int{8, 4 << 10, 64 << 10, 1 << 20} {
		for _, shift := range []int{0, 1} {
			err := Run(2, func(c *Comm) error {
				peer := 1 - c.Rank()
				buf := make([]int64, n)
				for i := range buf {
					buf[i] = int64(c.Rank()*1_000_000_000 + i)
				}
				if _, err := Sendrecv(c, buf[shift:], peer, 7, buf[:n-shift], peer, 7); err != nil {
					return err
				}
				for i, v := range buf[:n-shift] {
					if want := int64(peer*1_000_000_000 + i + shift); v != want {
						return fmt.Errorf("rank %d: buf[%d] = %d after Sendrecv in place, want %d (the peer's)", c.Rank(), i, v, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("%d int64s, send shifted by %d: %v", n, shift, err)
			}
		}
	}
}
