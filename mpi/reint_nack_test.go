package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/inproc"
)

// TestInitRefusedWhileClosing: a rank restarted while a peer is closing
// gets, from what Init runs after opening its context (newWorld, then
// waitJoined), an error that names the refusing rank and BOOT_NACK and
// wraps ErrPeerFailed, at once instead of after the join's timeout. The
// closing rank's lapi answers the joiner's BOOTING with BOOT_NACK while
// it drains (the device is unreliable, as under WEFT_FAULTS, so Close
// drains). Whether the restarted rank's BOOTING reaches rank 1 before or
// after its Close began is a race: a join before it succeeds, so the
// scenario is run again, up to 20 times; the test fails if none was
// refused, or a refused join's error does not say so.
func TestInitRefusedWhileClosing(t *testing.T) {
	t.Setenv("WEFT_FAULTS", "seed=5") // no faults, but unreliable: Close drains
	const joinWait = 3 * time.Second  // Init's bound (WEFT_TIMEOUT); a refusal comes at once
	var outcomes []string
	for try := range 20 {
		err := refusedJoin(t, uint64(0x7ac0+try), joinWait)
		if err == nil {
			outcomes = append(outcomes, "joined (before rank 1 began closing)")
			continue
		}
		if !errors.Is(err, ErrPeerFailed) || !strings.Contains(err.Error(), "BOOT_NACK") {
			outcomes = append(outcomes, err.Error())
			continue
		}
		if !strings.Contains(err.Error(), "rank 1 did not join") || errors.Is(err, ErrTimeout) {
			t.Fatalf("refused join: %v; want it to name rank 1", err)
		}
		t.Logf("try %d: %v (earlier tries: %q)", try, err, outcomes)
		return
	}
	t.Fatalf("no restarted rank was refused with BOOT_NACK in 20 tries: %q", outcomes)
}

// refusedJoin runs one scenario: three ranks join, rank 2 stops, rank 1
// begins closing, and rank 2 restarts (a new device and context, a new
// epoch) and joins as Init does. It returns the restarted rank's join
// error.
func refusedJoin(t *testing.T, key uint64, joinWait time.Duration) error {
	t.Helper()
	fab := inproc.NewFabric(3, key)
	open := func(r int, epoch uint64) *lapi.Context {
		dev, err := fab.Open(lapi.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		lc, err := lapi.Open(lapi.Config{Device: dev, Rank: lapi.Rank(r), Size: 3, JobKey: key, Reintegrate: true, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newWorld(lc, envOptions(t), nil); err != nil {
			t.Fatal(err)
		}
		return lc
	}
	lcs := make([]*lapi.Context, 3)
	for r := range lcs {
		lcs[r] = open(r, uint64(r+1))
	}
	defer lcs[0].Close()
	for r, lc := range lcs {
		if err := waitJoined(lc, joinWait); err != nil {
			t.Fatalf("rank %d's first join: %v", r, err)
		}
	}
	lcs[2].Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		lcs[1].Close()
	}()
	defer func() { <-closed }()
	lc := open(2, 99)
	defer lc.Close()
	err := waitJoined(lc, joinWait)
	if err != nil && !strings.Contains(err.Error(), "BOOT_NACK") && !errors.Is(err, ErrPeerFailed) {
		return fmt.Errorf("not a peer's failure: %w", err)
	}
	return err
}
