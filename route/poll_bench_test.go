package route_test

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
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
