package route_test

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/udp"
)

// BenchmarkEmptyPoll is one Poll that finds nothing: of a route whose
// network member is parked (the same-node spin of a job across nodes),
// and of its node member alone, for what the route adds to every pass of
// a waiter's spin.
func BenchmarkEmptyPoll(b *testing.B) {
	devs := job(b, 4, func(r int) int { return r / 2 })
	fn := func(*hal.Header, []byte) {}
	d := devs[0]
	for range 200000 { // past parkSilence: the udp member parks
		d.Poll(fn)
	}
	b.Run("route", func(b *testing.B) {
		for b.Loop() {
			d.Poll(fn)
		}
	})
	b.Run("member", func(b *testing.B) {
		m := d.Members()[0]
		for b.Loop() {
			m.Poll(fn)
		}
	})
}

// countingPolls is a member that counts its polls.
type countingPolls struct {
	hal.Device
	polls int
}

func (c *countingPolls) Poll(fn func(*hal.Header, []byte)) (int, error) {
	c.polls++
	return c.Device.Poll(fn)
}

// TestSilentMemberPolledSparsely: a network member that finds nothing 16
// times in a row is polled every 8th pass until it parks, not on every
// pass: a same-node exchange right after traffic across nodes would pay a
// system call per pass.
func TestSilentMemberPolledSparsely(t *testing.T) {
	fab := inproc.NewFabric(4, jobKey)
	node, err := fab.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	net, err := udp.Open(hal.Config{JobKey: jobKey, Rank: 0, Size: 4}, udp.Options{Bind: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cp := &countingPolls{Device: net}
	d, err := route.New([]hal.Device{node, cp}, []int{0, 0, 1, 1}, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fn := func(*hal.Header, []byte) {}
	const passes = 160
	for range passes {
		d.Poll(fn)
	}
	// 16 polls, then one every 8th of the other 144 passes (it cannot
	// park before its 64th empty poll).
	if cp.polls < 30 || cp.polls > 40 {
		t.Errorf("%d passes polled the silent network member %d times, want 16 + 144/8 = 34", passes, cp.polls)
	}
}
