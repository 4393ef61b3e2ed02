package hal_test

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// exchange delivers msgs from one device to the other, and what that
// answers back, until nothing is left to send (a lossless wire).
func exchange(t *testing.T, devs [2]*hal.Reintegration, from int, msgs []hal.ReintMsg, now time.Time) {
	t.Helper()
	type pending struct {
		from int
		m    hal.ReintMsg
	}
	var q []pending
	for _, m := range msgs {
		q = append(q, pending{from, m})
	}
	for n := 0; len(q) > 0; n++ {
		if n > 100 {
			t.Fatal("the exchange does not end")
		}
		p := q[0]
		q = q[1:]
		var b [hal.ReintPayloadLen]byte
		hal.EncodeReint(b[:], p.m)
		to := 1 - p.from
		out, _ := devs[to].Handle(hal.Rank(p.from), p.m.Type, b[:], now)
		for _, m := range out {
			q = append(q, pending{to, m})
		}
	}
}

// Two stripe members (Joined, as package stripe makes them). Rank 0's
// member rejoins rank 1 once; then rank 1 restarts as a whole (a new
// process: its member is Joined afresh under a new incarnation, and
// announces it to nobody) and rank 0's member rejoins it again. Both
// rejoins must end (Rejoining false, RDMATo true) on a lossless wire.
func TestRevRejoinAfterPeerRestart(t *testing.T) {
	now := time.Unix(1, 0)
	cfg := hal.ReintConfig{Retry: time.Millisecond, MaxTries: 20}
	a := hal.NewReintegration(0, 2, 0x10, cfg)
	a.Joined()
	b := hal.NewReintegration(1, 2, 0x21, cfg)
	b.Joined()
	devs := [2]*hal.Reintegration{a, b}
	msgs, _ := a.Rejoin(1, 0x30, now)
	exchange(t, devs, 0, msgs, now)
	if a.Rejoining(1) || !a.RDMATo(1) {
		t.Fatalf("first rejoin did not end: rejoining %v, RDMA to rank 1 %v", a.Rejoining(1), a.RDMATo(1))
	}
	// Rank 1 restarts.
	b = hal.NewReintegration(1, 2, 0x41, cfg)
	b.Joined()
	devs[1] = b
	msgs, _ = a.Rejoin(1, 0x50, now)
	exchange(t, devs, 0, msgs, now)
	for range 5 { // the timers too, on a lossless wire
		now = now.Add(time.Second)
		msgs, _, _ := a.Tick(now)
		exchange(t, devs, 0, msgs, now)
	}
	if a.Rejoining(1) || !a.RDMATo(1) {
		t.Errorf("rejoin toward the restarted rank 1 never ends: rejoining %v, RDMA to it %v; rank 0 holds its incarnation %#x, it is %#x",
			a.Rejoining(1), a.RDMATo(1), a.PeerEpoch(1), b.Epoch())
	}
}
