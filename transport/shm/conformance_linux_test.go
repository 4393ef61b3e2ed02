package shm

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
)

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		// Sleeps at once in Wait, so that the futex path runs the suite.
		{"nospin", Options{Spin: -1}},
		// Small rings (the suite sends up to 20 frames, 160 KiB, before it
		// polls): the flood fills the cells, and the data area wraps.
		{"small", Options{Cells: 32, CellSize: cacheLine(), RingBytes: 256 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			haltest.Run(t, func(t *testing.T, size int) haltest.Net {
				devs, key := openLocal(t, size, tc.opts)
				n := haltest.Net{JobKey: key}
				for _, d := range devs {
					n.Devs = append(n.Devs, hal.Device(d))
				}
				return n
			})
		})
	}
}

// TestConformanceMembers runs the suite over a segment that holds only the
// odd ranks of a job twice its size and more (Options.Ranks), so that no
// slot is its rank: suite rank i is job rank 2i+1, through a wrapper that
// translates the ranks (see members). The suite's unknown peer, rank
// size, is then a rank of the job that does not share the segment.
func TestConformanceMembers(t *testing.T) {
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		ranks := make([]hal.Rank, size)
		for i := range ranks {
			ranks[i] = hal.Rank(2*i + 1)
		}
		key := newJobKey()
		devs := openMembers(t, key, 2*size+2, Options{Ranks: ranks})
		n := haltest.Net{JobKey: key}
		for _, d := range devs {
			n.Devs = append(n.Devs, &members{Device: d, ranks: ranks})
		}
		return n
	})
}

// members shows a device whose segment holds ranks (Options.Ranks) as a
// device of a job of len(ranks) ranks, member i being rank i: it
// translates the ranks in headers, Connect and PrepareSend, each way. The
// rank after the last member is the job rank after it, which does not
// share the segment; the ranks beyond it stay as they are. SendShort,
// ReadFrom and WriteTo, which the suite does not use, are the device's
// own, in job ranks.
type members struct {
	*Device
	ranks []hal.Rank
	hdr   []byte     // Send's copy of the caller's hdr
	h     hal.Header // the header Poll delivers
	fn    func(*hal.Header, []byte)
	up    func(*hal.Header, []byte) // deliver, bound once
}

var (
	_ hal.Device       = (*members)(nil)
	_ hal.SharedMemory = (*members)(nil)
	_ hal.SendPreparer = (*members)(nil)
)

// job is the job rank of the suite's rank i.
func (m *members) job(i hal.Rank) hal.Rank {
	switch n := hal.Rank(len(m.ranks)); {
	case i < n:
		return m.ranks[i]
	case i == n:
		return m.ranks[n-1] + 1
	}
	return i
}

// suite is the suite's rank of job rank r; a rank that is no member maps
// to one the suite never uses.
func (m *members) suite(r hal.Rank) hal.Rank {
	if i := slices.Index(m.ranks, r); i >= 0 {
		return hal.Rank(i)
	}
	return 1<<31 - 1
}

func (m *members) Connect(peer hal.Rank, addr string) error {
	return m.Device.Connect(m.job(peer), addr)
}

func (m *members) Send(hdr, payload []byte) error {
	if len(hdr) >= hal.HeaderLen {
		m.hdr = append(m.hdr[:0], hdr...)
		le := binary.LittleEndian
		le.PutUint32(m.hdr[24:], uint32(m.job(hal.Rank(le.Uint32(hdr[24:])))))
		le.PutUint32(m.hdr[28:], uint32(m.job(hal.Rank(le.Uint32(hdr[28:])))))
		hdr = m.hdr
	}
	return m.Device.Send(hdr, payload)
}

func (m *members) Poll(fn func(*hal.Header, []byte)) (int, error) {
	if m.up == nil {
		m.up = m.deliver
	}
	m.fn = fn
	return m.Device.Poll(m.up)
}

func (m *members) deliver(h *hal.Header, payload []byte) {
	m.h = *h
	m.h.Src, m.h.Dst = m.suite(h.Src), m.suite(h.Dst)
	m.fn(&m.h, payload)
}

func (m *members) PrepareSend(dst hal.Rank) { m.Device.PrepareSend(m.job(dst)) }
