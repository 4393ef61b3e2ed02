package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/lapi"
)

// siteAbove is "track_test.go:N", N the line above the caller's: the
// call whose site a leak report must give.
func siteAbove() string {
	_, _, l, _ := runtime.Caller(1)
	return fmt.Sprintf("track_test.go:%d", l-1)
}

// TestTrackLeaks: with Options.Track, a rank that leaves one of each
// resource behind (an Irecv and a rendezvous Isend never waited for, an
// Iallreduce never waited for, a window not freed, communicators from Dup
// and Split not freed, a registration not deregistered) has Finalize
// name every one, in the order they were made, with this file's line of
// the call that made it; what it waited for and freed is not named.
func TestTrackLeaks(t *testing.T) {
	reports := make([]string, 2)
	wants := make([]string, 2)
	err := RunWith(2, Options{Track: true}, func(c *Comm) error {
		me, peer := c.Rank(), 1-c.Rank()
		var want []string
		leak := func(what, site string) { want = append(want, what+" created at "+site) }

		// Settled: not named.
		q, err := Irecv(c, make([]int32, 1), peer, 1)
		if err != nil {
			return err
		}
		if err := Send(c, []int32{1}, peer, 1); err != nil {
			return err
		}
		if _, err := q.Wait(); err != nil {
			return err
		}
		d, err := c.Dup()
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if err := d.Free(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("second Free: %v, want ErrArg", err)
		}
		if err := c.Free(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Free of the world's communicator: %v, want ErrArg", err)
		}

		_, err = Irecv(c, make([]int32, 4), peer, 7)
		leak("Irecv request (from rank "+fmt.Sprint(peer)+" tag 7)", siteAbove())
		if err != nil {
			return err
		}
		// Rendezvous (beyond the eager limit): the peer never receives it.
		_, err = Isend(c, make([]byte, 1<<20), peer, 8)
		leak("Isend request (to rank "+fmt.Sprint(peer)+" tag 8)", siteAbove())
		if err != nil {
			return err
		}
		v := []int64{1}
		_, err = Iallreduce(c, v, v, Sum)
		leak("Iallreduce request (communicator 0)", siteAbove())
		if err != nil {
			return err
		}
		_, err = NewWin(c, make([]int32, 100))
		leak("window of 100 int32", siteAbove())
		if err != nil {
			return err
		}
		d, err = c.Dup()
		leak(fmt.Sprintf("communicator %d from Dup (2 ranks)", d.ctx/2), siteAbove())
		if err != nil {
			return err
		}
		s, err := c.Split(me, 0)
		leak(fmt.Sprintf("communicator %d from Split (color %d, 1 of 2 ranks)", s.ctx/2, me), siteAbove())
		if err != nil {
			return err
		}
		// Irecv on a communicator other than the world's says which.
		_, err = Irecv(d, make([]int32, 1), AnySource, AnyTag)
		leak(fmt.Sprintf("Irecv request (from any source any tag, communicator %d)", d.ctx/2), siteAbove())
		if err != nil {
			return err
		}
		_, err = c.World().lc.TPT().Register(make([]byte, 4096), lapi.AccessRead)
		leak("registration of 4096 bytes", siteAbove())
		if err != nil {
			return err
		}
		wants[me] = fmt.Sprintf("mpi: finalize: %d resources leaked: %s", len(want), strings.Join(want, "; "))
		if err := c.World().Finalize(); err != nil {
			reports[me] = err.Error()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range reports {
		if reports[r] != wants[r] {
			t.Errorf("rank %d: Finalize reported\n%s\nwant\n%s", r, reports[r], wants[r])
		}
	}
}

// TestTrackOff: without Options.Track nothing is recorded (no registry
// anywhere), Finalize's report of requests never waited for (a
// rendezvous Isend, an Irecv) is the count of them, and a nonblocking
// ping-pong through the caller's Requests (IsendInto, IrecvInto, Wait)
// allocates nothing, as the blocking Send and Recv do not.
func TestTrackOff(t *testing.T) {
	err := RunWith(2, Options{}, func(c *Comm) error {
		w := c.World()
		if w.trk != nil || w.lc.Tracker() != nil {
			return fmt.Errorf("tracking off, yet a registry: %p %p", w.trk, w.lc.Tracker())
		}
		peer := 1 - c.Rank()
		buf := make([]int64, 1)
		big := make([]int64, 512) // 4 KiB: an unexpected one fits the buffer an arrival keeps
		var sq, rq Request
		step := func() {
			for _, b := range [][]int64{buf, big} {
				if err := IrecvInto(&rq, c, b, peer, 3); err != nil {
					t.Error(err)
				}
				if err := IsendInto(&sq, c, b, peer, 3); err != nil {
					t.Error(err)
				}
				if _, err := sq.Wait(); err != nil {
					t.Error(err)
				}
				if _, err := rq.Wait(); err != nil {
					t.Error(err)
				}
			}
			if err := Send(c, buf, peer, 4); err != nil {
				t.Error(err)
			}
			if _, err := Recv(c, buf, peer, 4); err != nil {
				t.Error(err)
			}
		}
		step() // warm
		if a := testing.AllocsPerRun(200, step); a != 0 && !raceEnabled {
			return fmt.Errorf("rank %d: %v allocations per step", c.Rank(), a)
		}
		if _, err := Isend(c, make([]byte, 1<<20), peer, 9); err != nil { // rendezvous, never received
			return err
		}
		if _, err := Irecv(c, buf, peer, 10); err != nil { // never matched
			return err
		}
		if err := w.Finalize(); err == nil || err.Error() != "mpi: finalize: 2 requests still outstanding (never waited for; WEFT_TRACK=1 names them and where they were made)" {
			return fmt.Errorf("Finalize with an Isend and an Irecv left: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTrack is a nonblocking exchange of 8 bytes (IrecvInto, a
// blocking Send, Wait: one tracked request per message) with tracking
// off and on. One goroutine plays both ranks, so that the figure is the
// calls' own cost and not a wait for the other core: off is what every
// program pays, to compare across commits (go test -bench Track -count
// 10, before and after); on is what WEFT_TRACK=1 adds (each request's
// stack and description).
func BenchmarkTrack(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			b.ReportAllocs()
			worlds, err := openInproc(2, Options{Track: on}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, w := range worlds {
					w.lc.Close()
				}
			}()
			c0, c1 := worlds[0].comm, worlds[1].comm
			buf := make([]int64, 1)
			var q Request
			for b.Loop() {
				if err := IrecvInto(&q, c1, buf, 0, 3); err != nil {
					b.Fatal(err)
				}
				if err := Send(c0, buf, 1, 3); err != nil {
					b.Fatal(err)
				}
				if _, err := q.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			if n := worlds[1].trk.Len(); n != 0 {
				b.Fatalf("%d requests still recorded", n)
			}
		})
	}
}

// TestTrackProcesses runs testdata/leaks under gorun on 2 ranks over the
// shared-memory device and over UDP, with WEFT_TRACK=1 and without: each
// rank leaves a window, an Irecv, a rendezvous Isend and a communicator
// behind and checks that Finalize names each with the program's own
// main.go line (frames outside weft, in a program, not a test), or
// counts the two requests. The shared-memory segment, closed by
// Finalize, is not named.
func TestTrackProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gorun jobs")
	}
	dir := t.TempDir()
	gorun, prog := filepath.Join(dir, "gorun"), filepath.Join(dir, "leaks")
	for bin, pkg := range map[string]string{gorun: "../cmd/gorun", prog: "./testdata/leaks"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for _, transport := range []string{"shm", "udp"} {
		for _, trk := range []string{"1", ""} {
			t.Run(fmt.Sprintf("%s/WEFT_TRACK=%s", transport, trk), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, gorun, "-n", "2", "--transport", transport, prog)
				cmd.Env = append(os.Environ(), "WEFT_TRACK="+trk)
				out, err := cmd.CombinedOutput()
				if err != nil || strings.Count(string(out), ": ok: mpi: finalize: ") != 2 {
					t.Fatalf("gorun -n 2 --transport %s leaks: %v\n%s", transport, err, out)
				}
				if named := strings.Contains(string(out), "created at main.go:"); named != (trk == "1") {
					t.Errorf("sites named: %v, want %v\n%s", named, trk == "1", out)
				}
			})
		}
	}
}
