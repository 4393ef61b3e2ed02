package route_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/shm"
)

const closeChildEnv = "WEFT_ROUTE_CLOSE_CHILD"

// route.Device says Close is safe anywhere (and hal.Device that Close may
// be called at any time, from any goroutine): a Close while another
// goroutine is in Poll closes the shm member under that Poll, which then
// reads the unmapped segment. The child does it with one P, so that the
// Close runs while the poller is preempted inside Poll; a fault kills it.
func TestCloseDuringPoll(t *testing.T) {
	if os.Getenv(closeChildEnv) == "1" {
		closeDuringPoll(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCloseDuringPoll$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), closeChildEnv+"=1", "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS")) {
		if len(out) > 3000 {
			out = out[:3000]
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func closeDuringPoll(t *testing.T) {
	for i := range 400 {
		key := uint64(0x70c105e000 + i)
		devs, err := shm.OpenLocal(key, 2, shm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := route.New([]hal.Device{devs[1]}, []int{0, 0}, route.Options{})
		if err != nil {
			t.Fatal(err)
		}
		started, done := make(chan struct{}, 1), make(chan struct{})
		go func() {
			defer close(done)
			for n := 0; ; n++ {
				if _, err := rt.Poll(func(*hal.Header, []byte) {}); errors.Is(err, hal.ErrClosed) {
					return
				}
				if n == 0 {
					started <- struct{}{}
				}
			}
		}()
		<-started
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		_ = devs[0].Close()
	}
}
