package lapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/shm"
)

// TestTinySendKeepsMTU: a message that fits the device's short frame but
// not one packet of its MTU still goes in packets of the MTU, through
// OnHeader and OnComplete, as a device's MTU promises.
func TestTinySendKeepsMTU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm needs Linux")
	}
	const key = 0xc3b
	devs, err := shm.OpenLocal(key, 2, shm.Options{MTU: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctxs := make([]*Context, 2)
	for r, d := range devs {
		for q, e := range devs {
			if err := d.Connect(hal.Rank(q), e.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	c0, c1 := ctxs[0], ctxs[1]
	f0, f1 := &flagWhole{}, &flagWhole{}
	h := c0.RegisterHandler(f0)
	c1.RegisterHandler(f1)
	if err := c0.Amsend(1, h, nil, make([]byte, 600), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c1.Wait(ctx, func() (bool, error) { return f1.got.Load(), nil }); err != nil {
		t.Fatal(err)
	}
	if s := c0.Stats(); s.PacketsSent < 5 {
		t.Errorf("600 bytes under an MTU of 128 went in %d packets, want 5 or more", s.PacketsSent)
	}
}

// preparing records the hints and sends its device is given, and whether
// the progress lock was held for each hint.
type preparing struct {
	hal.Device
	c      *Context
	events []string
}

func (p *preparing) PrepareSend(dst hal.Rank) {
	ev := fmt.Sprintf("prepare %d", dst)
	if p.c.mu.TryLock() {
		p.c.mu.Unlock()
		ev += " (unlocked)"
	}
	p.events = append(p.events, ev)
}

func (p *preparing) Send(hdr, payload []byte) error {
	if len(hdr) >= hal.HeaderLen && hal.FrameType(hdr[3]) == hal.FrameData {
		p.events = append(p.events, fmt.Sprintf("send %d", binary.LittleEndian.Uint32(hdr[28:])))
	}
	return p.Device.Send(hdr, payload)
}

// TestPrepareSend: a device that takes hints of sends to come
// (hal.SendPreparer) is given one, under the progress lock, right before
// each message toward a peer goes out, whatever its size, and none for a
// message to self, which never reaches the device.
func TestPrepareSend(t *testing.T) {
	const key = 0xc3c
	fab := inproc.NewFabric(2, key)
	ctxs := make([]*Context, 2)
	var p *preparing
	for r := range ctxs {
		d, err := fab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		if r == 0 {
			p = &preparing{Device: d}
			d = p
		}
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key}); err != nil {
			t.Fatal(err)
		}
		defer ctxs[r].Close()
	}
	c0, c1 := ctxs[0], ctxs[1]
	p.c = c0
	f0, f1 := &flagWhole{}, &flagWhole{}
	h := c0.RegisterHandler(f0)
	c1.RegisterHandler(f1)
	mtu := c0.mtu
	for _, m := range []struct {
		tgt hal.Rank
		n   int
	}{{1, 8}, {0, 8}, {1, 2*mtu + 1}} {
		if err := c0.Amsend(m.tgt, h, nil, make([]byte, m.n), SendOpts{}); err != nil {
			t.Fatalf("Amsend of %d bytes to %d: %v", m.n, m.tgt, err)
		}
	}
	c0.Progress()
	want := []string{"prepare 1", "send 1", "prepare 1", "send 1", "send 1", "send 1"}
	if !slices.Equal(p.events, want) {
		t.Errorf("hints and sends toward the device:\n got %q\nwant %q", p.events, want)
	}
	if !f0.got.Load() {
		t.Errorf("the message to self was not delivered")
	}
}

// notified counts the completions it is told of.
type notified struct{ n atomic.Int32 }

func (k *notified) Complete(err error) {
	if err == nil {
		k.n.Add(1)
	}
}

// TestTxAmsend: code run by Atomically sends with Tx.Amsend, and the
// completions its sends queue run when Atomically returns, not
// under the lock; a message of rendezvous size, whose registration takes
// the TPT's lock and the watcher's after the progress lock, goes too. Open
// keeps CopyThreshold below AMRendezvous, since a message rendezvous reads
// is not copied.
func TestTxAmsend(t *testing.T) {
	const key, rv = 0xa10c, 4096
	fab := inproc.NewFabric(2, key)
	ctxs := make([]*Context, 2)
	for r := range ctxs {
		d, err := fab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key, AMRendezvous: rv}); err != nil {
			t.Fatal(err)
		}
		defer ctxs[r].Close()
	}
	c0, c1 := ctxs[0], ctxs[1]
	if got := c0.CopyThreshold(); got != rv-1 {
		t.Errorf("CopyThreshold %d with AMRendezvous %d, want %d", got, rv, rv-1)
	}
	f0, f1 := &flagWhole{}, &flagWhole{}
	h := c0.RegisterHandler(f0)
	c1.RegisterHandler(f1)

	var self notified
	var (
		held int32
		err  error
	)
	c0.Atomically(func(tx *Tx) {
		err = tx.Amsend(0, h, nil, make([]byte, 8), SendOpts{Notify: &self})
		held = self.n.Load()
	})
	if err != nil {
		t.Fatalf("Tx.Amsend to self: %v", err)
	}
	if held != 0 || self.n.Load() != 1 || !f0.got.Load() {
		t.Errorf("send to self: %d completions inside Atomically, %d after, delivered %v; want 0, 1, true", held, self.n.Load(), f0.got.Load())
	}

	var big notified
	c0.Atomically(func(tx *Tx) { err = tx.Amsend(1, h, nil, make([]byte, 4*rv), SendOpts{Notify: &big}) })
	if err != nil {
		t.Fatalf("Tx.Amsend of %d bytes: %v", 4*rv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- c1.Wait(ctx, func() (bool, error) { return f1.got.Load(), nil }) }()
	if err := c0.Wait(ctx, func() (bool, error) { return big.n.Load() == 1, nil }); err != nil {
		t.Errorf("rendezvous send's completion: %v", err)
	}
	if err := <-errs; err != nil {
		t.Errorf("rendezvous message at the target: %v", err)
	}
}
