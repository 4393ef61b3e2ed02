package lapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/shm"
)

// shmLossChildEnv makes the test binary, run again by
// TestShmPeerKilledWhileWaiting, rank 1 of the job: the value is the job
// key in hex.
const shmLossChildEnv = "WEFT_LAPI_SHMLOSS_CHILD"

// TestShmPeerKilledWhileWaiting: a rank that waits for a same-node peer
// whose process is killed learns of it from the shm device (hal.PeerLoss,
// by the peer's pidfd) and fails the peer, instead of waiting for ever:
// shm is Reliable, so lapi keeps no timer toward the peer.
func TestShmPeerKilledWhileWaiting(t *testing.T) {
	if v := os.Getenv(shmLossChildEnv); v != "" {
		shmLossChild(t, v)
		return
	}
	key := uint64(time.Now().UnixNano())
	dev, err := shm.Open(hal.Config{JobKey: key, Rank: 0, Size: 2}, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmPeerKilledWhileWaiting$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x", shmLossChildEnv, key))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewScanner(outp)
	line := func() string {
		if !out.Scan() {
			t.Fatalf("rank 1 said nothing: %v", out.Err())
		}
		return out.Text()
	}
	if err := errors.Join(dev.Connect(1, line()), dev.Connect(0, dev.Addr())); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	fmt.Fprintln(in, dev.Addr())
	c, err := Open(Config{Device: dev, Rank: 0, Size: 2, JobKey: key})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	defer c.Close()
	if got := line(); got != "ready" {
		t.Fatalf("rank 1 said %q, want ready", got)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Wait(ctx, func() (bool, error) { return false, c.PeerErr(1) })
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, ErrPeerFailed) || !strings.Contains(pe.Cause, "died") {
		t.Fatalf("waiting on rank 1 after its process was killed: %v, want its PeerError saying it died", err)
	}
}

// shmLossChild is rank 1: it joins the job over shm, says ready, and
// waits to be killed.
func shmLossChild(t *testing.T, hexKey string) {
	key, err := strconv.ParseUint(hexKey, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := shm.Open(hal.Config{JobKey: key, Rank: 1, Size: 2}, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(dev.Addr())
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() {
		t.Fatalf("no address from rank 0: %v", sc.Err())
	}
	if err := errors.Join(dev.Connect(0, sc.Text()), dev.Connect(1, dev.Addr())); err != nil {
		t.Fatal(err)
	}
	c, err := Open(Config{Device: dev, Rank: 1, Size: 2, JobKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed, or rank 0 is done
}
