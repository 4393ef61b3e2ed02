package lapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestSlabPool: a slab is the smallest power of two from 2 KiB that
// holds the request, none above 128 KiB; it is kept for reuse only when
// the last packet pointing into it lets go.
func TestSlabPool(t *testing.T) {
	var sp slabPool
	for _, tc := range []struct{ n, want int }{
		{1, 2 << 10}, {2 << 10, 2 << 10}, {2<<10 + 1, 4 << 10}, {70000, 128 << 10}, {128 << 10, 128 << 10},
		{128<<10 + 1, 0}, {0, 0},
	} {
		s := sp.get(tc.n)
		switch {
		case tc.want == 0 && s != nil:
			t.Errorf("get(%d): a slab of %d bytes, want none", tc.n, len(s.b))
		case tc.want != 0 && (s == nil || len(s.b) != tc.want):
			t.Errorf("get(%d): %v, want a slab of %d bytes", tc.n, s, tc.want)
		}
	}
	s := sp.get(5000)
	s.refs = 2
	sp.put(s)
	if again := sp.get(5000); again == s {
		t.Fatal("a slab one packet still points into was handed out again")
	}
	sp.put(s)
	if again := sp.get(5000); again != s {
		t.Fatal("a slab no packet points into was not reused")
	}
}

// frameLog is a device that notes where each frame's header and payload
// lie in memory.
type frameLog struct {
	hal.Device
	frames []loggedFrame
}

type loggedFrame struct {
	hdr, payload    uintptr
	hdrLen, dataLen int
	typ             hal.FrameType
}

// withData is the logged frames of type typ that carry data.
func (d *frameLog) withData(typ hal.FrameType) []loggedFrame {
	var fs []loggedFrame
	for _, f := range d.frames {
		if f.typ == typ && f.dataLen > 0 {
			fs = append(fs, f)
		}
	}
	return fs
}

// backToBack counts the frames whose payload follows their header in
// memory (joined), and those whose header follows the frame before
// (adjacent).
func backToBack(fs []loggedFrame) (joined, adjacent int) {
	for x, f := range fs {
		if f.payload == f.hdr+uintptr(f.hdrLen) {
			joined++
		}
		if x > 0 && fs[x-1].payload+uintptr(fs[x-1].dataLen) == f.hdr {
			adjacent++
		}
	}
	return joined, adjacent
}

func (d *frameLog) Send(hdr, payload []byte) error {
	f := loggedFrame{hdr: uintptr(unsafe.Pointer(&hdr[0])), hdrLen: len(hdr), dataLen: len(payload), typ: hal.FrameType(hdr[3])}
	if len(payload) > 0 {
		f.payload = uintptr(unsafe.Pointer(&payload[0]))
	}
	d.frames = append(d.frames, f)
	return d.Device.Send(hdr, payload)
}

// TestCopiedMessageBackToBack: over an unreliable device, the packets of
// a copied message reach the device back to back, each packet's payload
// right after its headers and the next packet's headers right after that
// payload (what lets the UDP device send a run as one piece of memory);
// the message arrives intact under loss, and once acknowledged its slab
// is free for the next. A message too large for any slab is copied packet
// by packet, and arrives intact too.
func TestCopiedMessageBackToBack(t *testing.T) {
	spec := faults.Spec{Loss: 0.1, Seed: 3}
	var flog *frameLog
	j := openSimJob(t, 2, spec, func(c *Config) {
		c.CopyThreshold = 256 << 10
		if c.Rank == 0 {
			flog = &frameLog{Device: c.Device}
			c.Device = flog
		}
	}, simnet.WithMTU(1500))
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	k := &checker{t: t, me: 1, seen: map[[2]uint32]bool{}}
	h := c0.RegisterHandler(&checker{t: t, seen: map[[2]uint32]bool{}})
	c1.RegisterHandler(k)
	for i, size := range []int{10 << 10, 200 << 10} {
		flog.frames = flog.frames[:0]
		var u [12]byte
		binary.LittleEndian.PutUint32(u[4:], uint32(i))
		if err := c0.Amsend(1, h, u[:], pattern[:size], SendOpts{}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return k.got == i+1 && c0.rel.links[1].inFlight() == 0 })
		if k.err != nil {
			t.Fatal(k.err)
		}
		data := flog.withData(hal.FrameData)
		room := c0.mtuOf(1) - pktHdrLen - len(u)
		if want := (size + room - 1) / room; len(data) < want {
			t.Fatalf("%d bytes: %d data frames sent, want at least %d", size, len(data), want)
		}
		joined, adjacent := backToBack(data)
		joined += adjacent
		if size <= 128<<10 {
			// The first transmissions come in order, back to back; a
			// retransmission starts a run of its own.
			first := (size + room - 1) / room
			if joined < 2*first-1 {
				t.Errorf("%d bytes: %d of the %d joins of a copied message's %d packets were back to back", size, joined, 2*first-1, first)
			}
			kept := false
			for _, f := range c0.rel.slabs.free {
				kept = kept || f != nil
			}
			if !kept {
				t.Errorf("%d bytes: its slab was not kept for reuse once acknowledged", size)
			}
		} else if joined != 0 {
			t.Errorf("%d bytes, more than a slab holds: %d frames were back to back, want none (copied packet by packet)", size, joined)
		}
	}
	if c0.Stats().Retransmits == 0 {
		t.Error("no retransmission: the loss did not test slab packets sent again")
	}
}

// TestRDMAWriteBackToBack: over an unreliable device with an Ethernet MTU,
// each RDMA write packet's data reaches the device right after its
// header, and the packets of a flush follow one another, so that the UDP
// device sends a run as one piece of memory; the Put arrives intact under
// loss. Where packets are larger than rdmaStageMax (a jumbo MTU) the data
// goes from the caller's buffer as before.
func TestRDMAWriteBackToBack(t *testing.T) {
	for _, tc := range []struct {
		mtu   int
		stage bool
	}{{1500, true}, {9000, false}} {
		var flog *frameLog
		j := newRDMAJobCfg(t, 2, faults.Spec{Loss: 0.05, Seed: 5}, func(c *Config) {
			if c.Rank == 0 {
				flog = &frameLog{Device: c.Device}
				c.Device = flog
			}
		}, simnet.WithMTU(tc.mtu))
		dst := make([]byte, 300_000)
		region, err := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		src := make([]byte, len(dst))
		fill(src, 9)
		k := j.ctxs[0].NewCounter()
		if err := j.ctxs[0].Put(1, region, src, SendOpts{Completion: k}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return k.Value() >= 1 })
		if err := k.Wait(context.Background(), 1); err != nil {
			t.Fatalf("MTU %d: %v", tc.mtu, err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("MTU %d: the Put did not arrive intact", tc.mtu)
		}
		writes := flog.withData(hal.FrameRDMAWrite)
		joined, adjacent := backToBack(writes)
		t.Logf("MTU %d: %d write packets, %d with data after their header, %d after the packet before", tc.mtu, len(writes), joined, adjacent)
		switch {
		case tc.stage && (joined != len(writes) || adjacent < len(writes)/2):
			t.Errorf("MTU %d: of %d write packets %d had their data after their header (want all) and %d followed the one before (want most)",
				tc.mtu, len(writes), joined, adjacent)
		case !tc.stage && joined != 0:
			t.Errorf("MTU %d: %d write packets had their data copied after their header, want none (packets above rdmaStageMax)", tc.mtu, joined)
		}
		j.close()
	}
}
