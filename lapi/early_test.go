package lapi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestEarlyPackets: rank 0 registers its handler and sends before rank 1
// has registered any, as a peer that finished starting first does. Over a
// lossy, reordering network (whose reliability acknowledges the packets
// before a handler is looked up) and over a reliable device, every
// message, of one packet or several, is kept and delivered exactly once,
// intact, when rank 1 registers the handler, and none is counted bad.
// Before, each was dropped as malformed after it was acknowledged: lost.
func TestEarlyPackets(t *testing.T) {
	const msgs = 40
	// One packet to several at the 16 KiB MTU; 300 KiB goes by
	// rendezvous over the reliable device: its RTS is kept for the
	// handler it names.
	sizes := []int{0, 8, 1000, 5000, 40 << 10, 300 << 10}
	send := func(t *testing.T, c *Context, h HandlerID, origin *Counter) {
		for i := range msgs {
			size := sizes[i%len(sizes)]
			off := (i * 7919) % (len(pattern) - size)
			var u [12]byte
			binary.LittleEndian.PutUint32(u[4:], uint32(i))
			binary.LittleEndian.PutUint32(u[8:], uint32(off))
			if err := c.Amsend(1, h, u[:], pattern[off:off+size], SendOpts{Origin: origin}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	check := func(t *testing.T, c *Context, k *checker) {
		t.Helper()
		if k.err != nil {
			t.Fatal(k.err)
		}
		if k.got != msgs {
			t.Fatalf("rank 1 received %d of %d messages after registering its handler", k.got, msgs)
		}
		if s := c.Stats(); s.BadPackets != 0 || s.EarlyPackets == 0 {
			t.Fatalf("rank 1: %d packets counted bad, %d kept early; want none bad, some kept", s.BadPackets, s.EarlyPackets)
		}
	}

	t.Run("unreliable", func(t *testing.T) {
		spec := faults.Spec{Loss: 0.1, Reorder: 0.2, Dup: 0.05, Seed: 17}
		j := openSimJob(t, 2, spec, nil, simnet.WithMTU(16<<10))
		defer j.close()
		h := j.ctxs[0].RegisterHandler(&checker{t: t, me: 0, seen: map[[2]uint32]bool{}})
		origin := j.ctxs[0].NewCounter()
		send(t, j.ctxs[0], h, origin)
		// Every packet is acknowledged (a dropped one would never come
		// again), within the run's minute. A copied message's origin
		// counter fires when it is sent, so the counter alone does not
		// say so.
		inFlight := func() int {
			j.ctxs[0].mu.Lock()
			defer j.ctxs[0].mu.Unlock()
			return j.ctxs[0].rel.links[1].inFlight() + j.ctxs[0].rel.queues[1].n
		}
		j.run(time.Minute, nil, func() bool { return origin.Value() == msgs && inFlight() == 0 })
		k := &checker{t: t, me: 1, seen: map[[2]uint32]bool{}}
		if got := j.ctxs[1].RegisterHandler(k); got != h {
			t.Fatalf("rank 1 registered ID %d, rank 0 %d", got, h)
		}
		j.run(time.Minute, nil, func() bool { return k.got == msgs || k.err != nil })
		check(t, j.ctxs[1], k)
	})

	t.Run("reliable", func(t *testing.T) {
		ctxs := openInprocJob(t, 2, faults.Spec{})
		h := ctxs[0].RegisterHandler(&checker{t: t, me: 0, seen: map[[2]uint32]bool{}})
		origin := ctxs[0].NewCounter()
		send(t, ctxs[0], h, origin)
		for range 1000 {
			ctxs[0].Progress()
			ctxs[1].Progress()
		}
		k := &checker{t: t, me: 1, seen: map[[2]uint32]bool{}}
		ctxs[1].RegisterHandler(k)
		for i := 0; i < 1000 && k.got < msgs; i++ {
			ctxs[0].Progress()
			ctxs[1].Progress()
		}
		check(t, ctxs[1], k)
	})
}

// TestEarlyPacketsPastTheBound: over an unreliable device, a message
// larger than what is kept for an unregistered handler (6 MiB against
// earlyMaxBytes) loses nothing: the packets past the bound are not
// acknowledged, so the sender sends them again, and the whole message
// arrives once the handler is registered.
func TestEarlyPacketsPastTheBound(t *testing.T) {
	j := openSimJob(t, 2, faults.Spec{Seed: 5}, nil, simnet.WithMTU(16<<10))
	defer j.close()
	h := j.ctxs[0].RegisterHandler(&checker{t: t, me: 0, seen: map[[2]uint32]bool{}})
	big := make([]byte, 6<<20)
	for i := range big {
		big[i] = pattern[i%len(pattern)]
	}
	origin := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Amsend(1, h, make([]byte, 12), big, SendOpts{Origin: origin}); err != nil {
		t.Fatal(err)
	}
	// Until rank 1 has kept what it may and rank 0 has sent the rest
	// again a few times (not for PeerTimeout, after which rank 0 would
	// give rank 1 up).
	j.run(time.Minute, nil, func() bool {
		return j.ctxs[1].Stats().EarlyPackets >= earlyMaxBytes/(16<<10)-1 && j.ctxs[0].Stats().Retransmits >= 20
	})
	if s := j.ctxs[1].Stats(); s.BadPackets != 0 {
		t.Fatalf("before registration: %d bad, %d kept", s.BadPackets, s.EarlyPackets)
	}
	var got []byte
	rec := &wholeRecorder{}
	j.ctxs[1].RegisterHandler(rec)
	j.run(10*time.Minute, nil, func() bool { return rec.completes == 1 })
	got = rec.buf
	if !bytes.Equal(got, big) {
		t.Fatalf("the 6 MiB message arrived with %d bytes, equal %v", len(got), bytes.Equal(got, big))
	}
	if s := j.ctxs[1].Stats(); s.BadPackets != 0 {
		t.Fatalf("%d packets counted bad", s.BadPackets)
	}
}

// TestEarlyPacketsBounded: over a reliable device, packets for a handler
// that is never registered are kept up to earlyMax, then counted bad;
// registering other handlers delivers none of them.
func TestEarlyPacketsBounded(t *testing.T) {
	c := openInprocJob(t, 2, faults.Spec{})[1]
	good := hal.Header{Type: hal.FrameData, Src: 0, Dst: 1}
	for i := range earlyMax + 10 {
		c.mu.Lock()
		c.am.onFrame(&good, tinyPacket(HandlerID(500), nil, []byte(fmt.Sprint(i))))
		c.mu.Unlock()
	}
	rec := &wholeRecorder{}
	c.RegisterHandler(rec)
	if s := c.Stats(); s.EarlyPackets != earlyMax || s.BadPackets != 10 || rec.whole != 0 {
		t.Fatalf("%d kept, %d bad, %d delivered to another handler; want %d, 10, 0", s.EarlyPackets, s.BadPackets, rec.whole, earlyMax)
	}
}

// TestEarlyFIFO: a PutToFIFO (several chunks, over a lossy network and
// fire-and-forget, and with completion over a reliable one) into a FIFO
// the target registers only after the origin saw it complete: the target's
// handler takes every byte at registration, none is counted bad.
func TestEarlyFIFO(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec faults.Spec
		mod  func(*Config)
		none bool
	}{
		{"reliable", faults.Spec{Seed: 3}, func(c *Config) { c.Device = nodeDevice{c.Device} }, false},
		{"lossy, fire-and-forget", faults.Spec{Loss: 0.1, Reorder: 0.1, Seed: 4}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newRDMAJobCfg(t, 2, tc.spec, tc.mod)
			defer j.close()
			org, tgt := j.ctxs[0], j.ctxs[1]
			const n = 3*rdmaChunk - 7
			src, dst := make([]byte, n), make([]byte, n)
			fill(src, 9)
			dpvo, _ := tgt.TPT().Register(dst, hal.AccessWrite)
			spvo, _ := org.TPT().Register(src, hal.AccessRead)
			org.Half().RegisterFIFO(&fifoRecorder{})
			k := org.NewCounter()
			if err := org.Half().PutToFIFO(1, dpvo, spvo, n, 0, SendOpts{Origin: k, NoCompletion: tc.none}); err != nil {
				t.Fatal(err)
			}
			j.run(time.Minute, nil, func() bool { return k.Value() >= 1 })
			for range 200 {
				j.step() // what is still in flight lands
			}
			rec := &fifoRecorder{}
			if id := tgt.Half().RegisterFIFO(rec); id != 0 {
				t.Fatalf("FIFO ID %d, want 0", id)
			}
			if !bytes.Equal(dst, src) || len(rec.calls) == 0 {
				t.Fatalf("after registration the FIFO took %d packets and the region matches: %v", len(rec.calls), bytes.Equal(dst, src))
			}
			if s := tgt.Stats(); s.BadPackets != 0 || s.EarlyPackets == 0 {
				t.Fatalf("target: %d bad, %d kept; want none bad, some kept", s.BadPackets, s.EarlyPackets)
			}
		})
	}
}

// TestEarlyPacketsOfAFailedPeer: packets kept from a peer that then
// failed are forgotten, not delivered to the handler registered later.
func TestEarlyPacketsOfAFailedPeer(t *testing.T) {
	c := openInprocJob(t, 2, faults.Spec{})[1]
	good := hal.Header{Type: hal.FrameData, Src: 0, Dst: 1}
	c.mu.Lock()
	for i := range 5 {
		c.am.onFrame(&good, tinyPacket(firstUserHandler, nil, []byte(fmt.Sprint(i))))
	}
	c.rel.dropPeer(0, ErrPeerFailed)
	c.mu.Unlock()
	rec := &wholeRecorder{}
	c.RegisterHandler(rec)
	if rec.whole+rec.headers != 0 || len(c.am.early) != 0 || c.am.earlyBytes != 0 {
		t.Fatalf("a failed peer's kept packets: %d delivered, %d still kept (%d bytes)", rec.whole+rec.headers, len(c.am.early), c.am.earlyBytes)
	}
}
