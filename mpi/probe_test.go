package mpi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultCases are the networks the tests of probe.go, waitany.go, op.go,
// scan.go and vcoll.go run over: the clean in-process device, and one
// that loses, reorders, duplicates and corrupts frames.
var faultCases = []string{"", "loss=0.05,reorder=0.1,dup=0.02,corrupt=0.01,seed=11"}

// faultTally sums, over the Runs of a test under WEFT_FAULTS, what lapi
// repaired and what the devices dropped as corrupted, so that the test can
// show the faults it names bit (check) rather than pass vacuously.
type faultTally struct {
	mu                     sync.Mutex
	frames, repaired, crcs uint64
}

// body is fn, adding the rank's counters to the tally once fn returns.
func (f *faultTally) body(fn func(*Comm) error) func(*Comm) error {
	return func(c *Comm) error {
		err := fn(c)
		st := c.World().Stats()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.repaired += st.Retransmits + st.Duplicates + st.Redrives + st.Stale
		for _, d := range st.Devices {
			f.frames += d.FramesSent
			f.crcs += d.DropReasons["crc"]
		}
		return err
	}
}

// check fails t if, under faults (not ""), lapi repaired nothing or no
// device dropped a corrupted frame.
func (f *faultTally) check(t *testing.T, faults string) {
	t.Helper()
	if faults == "" {
		return
	}
	t.Logf("under %q: %d frames sent, %d repaired, %d dropped for their CRC", faults, f.frames, f.repaired, f.crcs)
	if f.repaired == 0 || f.crcs == 0 {
		t.Errorf("under %q: %d repaired, %d CRC drops in %d frames: a fault named never bit", faults, f.repaired, f.crcs, f.frames)
	}
}

// iprobeFaults is faultCases with corruption at 10%: TestIprobe sends
// about 130 frames in all, too few to meet 1%.
var iprobeFaults = []string{faultCases[0], "loss=0.05,reorder=0.1,dup=0.02,corrupt=0.1,seed=11"}

// TestIprobe: every rank but 0 sends rank 0 one message, eager or by
// rendezvous; rank 0 polls Iprobe with wildcards until it has seen each,
// checks what Iprobe says of it (source, tag, bytes), and receives
// exactly that message. A tag nobody sends is never found.
func TestIprobe(t *testing.T) {
	for _, faults := range iprobeFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "60s")
			var tally faultTally
			for n := 1; n <= 9; n++ {
				if faults != "" && n%2 == 0 {
					continue
				}
				if err := Run(n, tally.body(iprobeCase)); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
			tally.check(t, faults)
		})
	}
}

// iprobeLen is rank r's message length in int32s: odd, and from rank 3
// on, above the eager limit.
func iprobeLen(r int) int { return 1 + 7*r + (r/3)*40_001 }

func iprobeCase(c *Comm) error {
	if c.Rank() != 0 {
		msg := make([]int32, iprobeLen(c.Rank()))
		for i := range msg {
			msg[i] = int32(c.Rank()*1000 + i)
		}
		return Send(c, msg, 0, 10+c.Rank())
	}
	if found, _, err := c.Iprobe(AnySource, 99); found || err != nil {
		return fmt.Errorf("Iprobe of tag 99, which nobody sends: found %v, %v", found, err)
	}
	seen := make([]bool, c.Size())
	for left := c.Size() - 1; left > 0; {
		found, st, err := c.Iprobe(AnySource, AnyTag)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		src := st.Source
		if src <= 0 || src >= c.Size() || seen[src] {
			return fmt.Errorf("Iprobe: %+v", st)
		}
		want := iprobeLen(src)
		if st.Tag != 10+src || st.Count != 4*want {
			return fmt.Errorf("Iprobe: %+v, want tag %d and %d bytes", st, 10+src, 4*want)
		}
		// A named source and tag find the same message again.
		if found, st2, err := c.Iprobe(src, st.Tag); !found || err != nil || st2 != st {
			return fmt.Errorf("Iprobe(%d, %d) after %+v: %v %+v %v", src, st.Tag, st, found, st2, err)
		}
		buf := make([]int32, st.Count/4)
		if _, err := Recv(c, buf, src, st.Tag); err != nil {
			return err
		}
		for i, v := range buf {
			if v != int32(src*1000+i) {
				return fmt.Errorf("from %d: [%d] = %d", src, i, v)
			}
		}
		seen[src] = true
		left--
	}
	return nil
}

// TestIprobeArgs: a source outside the communicator is ErrRank, a
// negative tag other than AnyTag ErrArg.
func TestIprobeArgs(t *testing.T) {
	err := Run(3, func(c *Comm) error {
		if _, _, err := c.Iprobe(3, 0); !errors.Is(err, ErrRank) {
			return fmt.Errorf("Iprobe from rank 3 of 3: %v", err)
		}
		if _, _, err := c.Iprobe(-2, 0); !errors.Is(err, ErrRank) {
			return fmt.Errorf("Iprobe from rank -2: %v", err)
		}
		if _, _, err := c.Iprobe(0, -5); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Iprobe of tag -5: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWaitAny: rank 0 posts a receive from every other rank, which send
// in turn, the highest rank first (each after the one above it has been
// received); WaitAny returns each receive once, in that order, with its
// status and data. A completed request is reported again; a list of nil
// requests gives index -1.
func TestWaitAny(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "60s")
			var tally faultTally
			for n := 1; n <= 9; n += 1 + len(faults)%2 {
				if err := Run(n, tally.body(waitAnyCase)); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
			tally.check(t, faults)
		})
	}
}

func waitAnyCase(c *Comm) error {
	p := c.Size()
	if c.Rank() != 0 {
		// Wait for the go-ahead: rank p-1 at once, the others after the
		// rank above them.
		if c.Rank() < p-1 {
			if _, err := Recv(c, make([]byte, 1), 0, 1); err != nil {
				return err
			}
		}
		msg := make([]float64, iprobeLen(c.Rank()))
		for i := range msg {
			msg[i] = float64(c.Rank()) + float64(i)/4
		}
		return Send(c, msg, 0, 2)
	}
	reqs := make([]*Request, p)
	bufs := make([][]float64, p)
	for r := 1; r < p; r++ {
		bufs[r] = make([]float64, iprobeLen(r))
		q, err := Irecv(c, bufs[r], r, 2)
		if err != nil {
			return err
		}
		reqs[r] = q
	}
	for want := p - 1; want >= 1; want-- {
		i, st, err := WaitAny(reqs...)
		if err != nil {
			return err
		}
		if i != want || st.Source != want || st.Tag != 2 || st.Count != iprobeLen(want) {
			return fmt.Errorf("WaitAny: index %d, %+v; want index and source %d", i, st, want)
		}
		for k, v := range bufs[i] {
			if v != float64(i)+float64(k)/4 {
				return fmt.Errorf("from %d: [%d] = %v", i, k, v)
			}
		}
		// Done, it is reported again, by WaitAny and by Wait.
		if j, st2, err := WaitAny(nil, reqs[i]); j != 1 || st2 != st || err != nil {
			return fmt.Errorf("WaitAny of a completed request: %d %+v %v", j, st2, err)
		}
		reqs[i] = nil
		if want > 1 {
			if err := Send(c, []byte{1}, want-1, 1); err != nil {
				return err
			}
		}
	}
	if i, st, err := WaitAny(reqs...); i != -1 || st != (Status{}) || err != nil {
		return fmt.Errorf("WaitAny of nil requests: %d %+v %v", i, st, err)
	}
	if i, _, err := WaitAny(); i != -1 || err != nil {
		return fmt.Errorf("WaitAny of none: %d %v", i, err)
	}
	return nil
}

// TestWaitAnyTimeout: under WEFT_TIMEOUT a WaitAny nobody answers fails
// with ErrTimeout naming what it waits for, and leaves its requests
// pending: they complete later.
func TestWaitAnyTimeout(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "200ms")
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 1 {
			// A deadline of its own: WEFT_TIMEOUT would end this wait too.
			q, err := Irecv(c, make([]byte, 1), 0, 3)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := q.WaitContext(ctx); err != nil {
				return err
			}
			return Send(c, []int16{7}, 0, 4)
		}
		buf := make([]int16, 1)
		q, err := Irecv(c, buf, 1, 4)
		if err != nil {
			return err
		}
		_, _, err = WaitAny(nil, q)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "WaitAny of 2 requests, the first a Recv from rank 1, tag 4") {
			return fmt.Errorf("WaitAny with no message: %v", err)
		}
		if err := Send(c, []byte{1}, 1, 3); err != nil {
			return err
		}
		if i, st, err := WaitAny(q); i != 0 || err != nil || st.Count != 1 || buf[0] != 7 {
			return fmt.Errorf("WaitAny after the timeout: %d %+v %v %v", i, st, err, buf)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTestAll: TestAll is false, and settles nothing, while any receive
// waits for a message the senders hold back until a barrier; after it,
// TestAll becomes true with every buffer filled; nil and completed
// requests count as done.
func TestTestAll(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "60s")
			for _, n := range []int{1, 2, 3, 5, 8, 9} {
				if err := Run(n, testAllCase); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

func testAllCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	// Every rank receives from every other; the sends wait for the barrier.
	reqs := []*Request{nil}
	bufs := make([][]uint16, p)
	for r := range p {
		if r == me {
			continue
		}
		bufs[r] = make([]uint16, iprobeLen(r))
		q, err := Irecv(c, bufs[r], r, 5)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	if p > 1 {
		for range 10 {
			if done, err := TestAll(reqs...); done || err != nil {
				return fmt.Errorf("TestAll before any send: %v %v", done, err)
			}
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	var sends []*Request
	for r := range p {
		if r == me {
			continue
		}
		msg := make([]uint16, iprobeLen(me))
		for i := range msg {
			msg[i] = uint16(me*100 + i)
		}
		q, err := Isend(c, msg, r, 5)
		if err != nil {
			return err
		}
		sends = append(sends, q)
	}
	for {
		done, err := TestAll(append(reqs, sends...)...)
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	for r, b := range bufs {
		for i, v := range b {
			if v != uint16(r*100+i) {
				return fmt.Errorf("rank %d from %d: [%d] = %d", me, r, i, v)
			}
		}
	}
	if done, err := TestAll(reqs...); !done || err != nil {
		return fmt.Errorf("TestAll again: %v %v", done, err)
	}
	return nil
}

// TestSenderFailsMidMessage: rank 1 starts a 190 KiB eager message over
// a lossy device and fails before all of it has come. Rank 0's wildcard
// receive, posted before rank 1 starts, or posted once a probe shows the
// message (complete, or never to be), either gets the whole message or
// fails with ErrPeerFailed: matched before the failure it used to wait
// for ever (out of reach of it), and matched after, return nil with part
// of the data.
func TestSenderFailsMidMessage(t *testing.T) {
	const n = 190 << 10
	checked := 0
	for _, posted := range []bool{true, false} {
		for seed := 1; seed <= 12; seed++ {
			t.Setenv("WEFT_FAULTS", fmt.Sprintf("loss=0.3,seed=%d", seed))
			var recvErr error
			var got []byte
			probed := posted
			_ = RunWith(2, Options{Eager: 200 << 10, Timeout: 20 * time.Second}, func(c *Comm) error {
				if c.Rank() == 1 {
					if _, err := Recv(c, make([]byte, 1), 0, 9); err != nil {
						return err
					}
					msg := make([]byte, n)
					for i := range msg {
						msg[i] = byte(i%251 + 1)
					}
					if _, err := Isend(c, msg, 0, 4); err != nil {
						return err
					}
					return errors.New("rank 1 fails mid-message")
				}
				got = make([]byte, n)
				var q *Request
				var err error
				if posted {
					if q, err = Irecv(c, got, AnySource, 4); err != nil {
						return err
					}
				}
				if err := Send(c, []byte{1}, 1, 9); err != nil {
					return err
				}
				if !posted {
					// Until the message shows (whole, or failed), or rank 1
					// is known failed with nothing of it here.
					for found := false; !found && c.w.lc.PeerErr(1) == nil; {
						found, _, _ = c.Iprobe(AnySource, 4)
					}
					found, _, _ := c.Iprobe(AnySource, 4)
					if probed = found; !found {
						return nil
					}
					if q, err = Irecv(c, got, AnySource, 4); err != nil {
						recvErr = err
						return nil
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, recvErr = q.WaitContext(ctx)
				return nil
			})
			if !probed {
				continue // nothing of the message reached rank 0's matching
			}
			checked++
			switch {
			case recvErr == nil:
				for i, b := range got {
					if b != byte(i%251+1) {
						t.Fatalf("posted %v, seed %d: the receive returned nil with byte %d = %d: part of the message", posted, seed, i, b)
					}
				}
			case !errors.Is(recvErr, ErrPeerFailed):
				t.Fatalf("posted %v, seed %d: %v, want the whole message or ErrPeerFailed", posted, seed, recvErr)
			}
		}
	}
	if checked < 12 {
		t.Errorf("only %d of 24 runs had the message reach rank 0", checked)
	}
}
