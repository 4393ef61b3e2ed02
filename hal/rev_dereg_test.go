package hal

import (
	"testing"
)

// TestRevPlacementAfterDeregister: once TPT.Deregister has returned, the
// region is its owner's again (Deregister: "later accesses with its PVO
// fail the key check"; TPT.Copy holds the table's lock during its copy so
// that "nothing lands in memory its owner has taken back"). The engine
// checks the region (Removals) and then copies without the lock, so a
// packet being placed while another goroutine deregisters (lapi's
// Context.Deregister takes no progress lock) lands after Deregister
// returned: here the owner's write just after Deregister is overwritten by
// the engine.
func TestRevPlacementAfterDeregister(t *testing.T) {
	const seg = 4 << 20
	data := make([]byte, seg)
	for i := range data {
		data[i] = 0xAA
	}
	for iter := range 200 {
		tpt := NewTPT()
		mem := make([]byte, 2*seg)
		p, _ := tpt.Register(mem, AccessWrite)
		e := NewRDMAEngine(tpt)
		h := RDMAHdr{RCxt: 0, Key: 5, Tid: 1, Base: 1, Total: 2 * seg, Seg: seg, PVO: p}
		pkt := func(off uint64) []byte {
			h.Offset = off
			b := make([]byte, RDMAHdrLen, RDMAHdrLen+seg)
			EncodeRDMA(b, FrameRDMAWrite, &h)
			return append(b, data...)
		}
		first, second := pkt(0), pkt(seg)
		e.Handle(0, FrameRDMAWrite, first) // admits the transfer: its region is cached
		start, done := make(chan struct{}), make(chan struct{})
		go func() {
			close(start)
			e.Handle(0, FrameRDMAWrite, second)
			close(done)
		}()
		<-start
		if err := tpt.Deregister(p); err != nil {
			t.Fatal(err)
		}
		mem[2*seg-1] = 0x55 // the owner's memory again
		<-done
		if mem[2*seg-1] != 0x55 {
			t.Fatalf("iteration %d: the engine wrote into the region after Deregister returned (faults %d)",
				iter, e.Stats().Faults)
		}
	}
}
