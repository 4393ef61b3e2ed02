package shm

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// closeChildEnv makes the test binary, run again by a test below, play the
// part that may crash, so that a fault fails the parent test instead of
// killing the whole run.
const closeChildEnv = "WEFT_SHM_CLOSE_CHILD"

// runCloseChild runs this test binary again with only test name, as the
// child that does what, and fails t when the child does not exit cleanly.
func runCloseChild(t *testing.T, name, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), closeChildEnv+"="+what, "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 3000 {
			out = out[:3000]
		}
		t.Fatalf("child %q: %v\n%s", what, err, out)
	}
	if !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("child %q did not pass:\n%s", what, out)
	}
}

// hal.Device: "Close may be called at any time, from any goroutine" (route
// and stripe say the same of theirs, and close their shm member from any
// goroutine): a Close while another goroutine is inside Poll must not unmap
// the segment under that Poll (life_linux.go). The child closes rank 1 while a
// goroutine polls it (and sends to it from rank 0); with one P the Close
// runs while the poller is preempted inside Poll.
func TestCloseDuringPoll(t *testing.T) {
	if os.Getenv(closeChildEnv) == "poll" {
		closeDuring(t, true)
		return
	}
	runCloseChild(t, "TestCloseDuringPoll", "poll")
}

// As TestCloseDuringPoll, with the goroutine in Send toward rank 0
// from the device being closed.
func TestCloseDuringSend(t *testing.T) {
	if os.Getenv(closeChildEnv) == "send" {
		closeDuring(t, false)
		return
	}
	runCloseChild(t, "TestCloseDuringSend", "send")
}

func closeDuring(t *testing.T, poll bool) {
	t.Logf("GOMAXPROCS %d", runtime.GOMAXPROCS(0))
	for range 400 {
		key := newJobKey()
		devs, err := OpenLocal(key, 2, Options{})
		if err != nil {
			t.Fatal(err)
		}
		started, done := make(chan struct{}, 1), make(chan struct{})
		payload := make([]byte, 1000)
		go func() {
			defer close(done)
			toMe := header(key, 0, 1, len(payload))
			toPeer := header(key, 1, 0, len(payload))
			for i := 0; ; i++ {
				var err error
				if poll {
					_ = devs[0].Send(toMe, payload)
					_, err = devs[1].Poll(ignore)
				} else {
					err = devs[1].Send(toPeer, payload)
					if errors.Is(err, hal.ErrNoResource) {
						_, _ = devs[0].Poll(ignore)
						err = nil
					}
				}
				if errors.Is(err, hal.ErrClosed) {
					return
				}
				if i == 0 {
					started <- struct{}{}
				}
			}
		}()
		<-started
		if err := devs[1].Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		_ = devs[0].Close()
	}
}

// A Poll whose callback closes the device: Close returns at once (the
// Poll is inside), the Poll delivers nothing more and returns, and the
// device is then released: its calls return hal.ErrClosed, and a peer's
// Send finds it closed.
func TestCloseInPollCallback(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	payload := make([]byte, 8)
	for range 3 {
		if err := devs[0].Send(header(key, 0, 1, len(payload)), payload); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	var cerr error
	n, err := devs[1].Poll(func(*hal.Header, []byte) {
		calls++
		cerr = devs[1].Close()
	})
	if cerr != nil || err != nil || n != 1 || calls != 1 {
		t.Fatalf("Poll closing in its callback: Close %v, Poll (%d, %v) after %d calls; want nil, (1, nil), 1", cerr, n, err, calls)
	}
	if _, err := devs[1].Poll(ignore); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Poll after Close: %v, want hal.ErrClosed", err)
	}
	if err := devs[1].Close(); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("second Close: %v, want hal.ErrClosed", err)
	}
	if err := devs[0].Send(header(key, 0, 1, len(payload)), payload); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Send to the closed rank: %v, want hal.ErrUnknownPeer (its device released)", err)
	}
}
