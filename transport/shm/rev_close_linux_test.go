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

// revChildEnv makes the test binary, run again by a test below, play the
// part that may crash, so that a fault fails the parent test instead of
// killing the whole run.
const revChildEnv = "WEFT_SHM_REV_CHILD"

// runRevChild runs this test binary again with only test name, as the
// child that does what, and fails t when the child does not exit cleanly.
func runRevChild(t *testing.T, name, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), revChildEnv+"="+what, "GOMAXPROCS=1")
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
// goroutine): a Close while another goroutine is inside Poll must not make
// that Poll touch the unmapped segment. The child closes rank 1 while a
// goroutine polls it (and sends to it from rank 0); with one P the Close
// runs while the poller is preempted inside Poll.
func TestRevShmCloseDuringPoll(t *testing.T) {
	if os.Getenv(revChildEnv) == "poll" {
		revCloseDuring(t, true)
		return
	}
	runRevChild(t, "TestRevShmCloseDuringPoll", "poll")
}

// As TestRevShmCloseDuringPoll, with the goroutine in Send toward rank 0
// from the device being closed.
func TestRevShmCloseDuringSend(t *testing.T) {
	if os.Getenv(revChildEnv) == "send" {
		revCloseDuring(t, false)
		return
	}
	runRevChild(t, "TestRevShmCloseDuringSend", "send")
}

func revCloseDuring(t *testing.T, poll bool) {
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
