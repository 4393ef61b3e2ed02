package faults_test

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/inproc"
)

// revDropped sends frames 0..n-1 from rank 0 to rank 1 through a Wrap'd
// inproc device whose inbox holds queueLen frames, polling the receiver
// after every pollEvery sends, retrying a refused Send after a poll. It
// returns the ids the injector dropped (never delivered, no corruption on).
func revDropped(t *testing.T, spec faults.Spec, n, queueLen, pollEvery int) []uint32 {
	t.Helper()
	f := inproc.NewFabric(2, jobKey)
	f.SetQueueLen(queueLen)
	inner, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	a := faults.Wrap(inner, spec, nil)
	defer a.Close()
	defer b.Close()
	got := make(map[uint32]bool)
	poll := func() {
		b.Poll(func(_ *hal.Header, p []byte) { got[binary.LittleEndian.Uint32(p)] = true })
	}
	refused := 0
	for i := range n {
		payload := make([]byte, 4)
		binary.LittleEndian.PutUint32(payload, uint32(i))
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: 4, JobKey: jobKey, Src: 0, Dst: 1})
		hal.Seal(hdr, payload)
		for {
			err := a.Send(hdr, payload)
			if err == nil {
				break
			}
			if !errors.Is(err, hal.ErrNoResource) {
				t.Fatal(err)
			}
			refused++
			poll() // the receiver catches up; the caller retries, as lapi does
		}
		if i%pollEvery == pollEvery-1 {
			poll()
		}
	}
	poll()
	t.Logf("queue %d, poll every %d: %d sends refused and retried", queueLen, pollEvery, refused)
	var lost []uint32
	for i := range uint32(n) {
		if !got[i] {
			lost = append(lost, i)
		}
	}
	return lost
}

// TestRevWrapVerdictsIndependentOfReceiver: doc.go promises "the n-th
// frame a device sends always gets the same verdict for a given seed,
// whatever the other ranks do". Which frames are lost must then not depend
// on how fast the receiver polls. It does: a Send the inner device refuses
// (a full inbox, hal.ErrNoResource) has already consumed a verdict, so every
// later frame's verdict shifts by one per refusal.
func TestRevWrapVerdictsIndependentOfReceiver(t *testing.T) {
	spec := faults.Spec{Loss: 0.2, Seed: 42}
	fast := revDropped(t, spec, 400, 1024, 1) // never refused
	slow := revDropped(t, spec, 400, 4, 8)    // receiver lags: refusals
	if !slices.Equal(fast, slow) {
		t.Errorf("seed %d: a fast receiver saw frames %v lost, a slow one %v: the verdicts depend on the receiver",
			spec.Seed, head(fast), head(slow))
	}
}

func head(s []uint32) []uint32 { return s[:min(len(s), 8)] }

// TestRevWrapRejectsBadSpec: Parse and simnet.New refuse a rate out of
// [0, 1], but Wrap takes any Spec and silently runs loss=1.5 as 1, loss=-1
// and loss=NaN as 0. A Spec built in code (stripe and lapi tests do) is
// never validated. Send should refuse with ErrSpec (Wrap has no error).
func TestRevWrapRejectsBadSpec(t *testing.T) {
	for _, spec := range []faults.Spec{{Loss: 1.5}, {Dup: -1}, {Corrupt: math.NaN()}, {Reorder: 0.5, Delay: -1}} {
		f := inproc.NewFabric(2, jobKey)
		inner, _ := f.Open(0)
		b, _ := f.Open(1)
		a := faults.Wrap(inner, spec, nil)
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, JobKey: jobKey, Src: 0, Dst: 1})
		hal.Seal(hdr, nil)
		if err := a.Send(hdr, nil); !errors.Is(err, faults.ErrSpec) {
			t.Errorf("Wrap with %+v (Validate: %v): Send = %v, want an ErrSpec", spec, spec.Validate(), err)
		}
		a.Close()
		b.Close()
	}
}

// TestRevRatesPerFrame: Spec says "Dup is the probability that a frame is
// sent twice", "Corrupt is the probability that one bit of a frame is
// flipped", "Reorder is the probability that a frame is held back". The
// Decider draws them only for frames it did not drop, so each is applied
// at rate*(1-Loss) per frame: loss=0.5,dup=0.2 duplicates 10% of frames.
// Measured over 200,000 frames with a fixed seed.
func TestRevRatesPerFrame(t *testing.T) {
	spec := faults.Spec{Loss: 0.5, Dup: 0.2, Corrupt: 0.2, Reorder: 0.2, Seed: 3}
	d := faults.NewDecider(spec, faults.Stream(0, 0))
	var s faults.Stats
	const n = 200_000
	for range n {
		s.Count(d.Decide(200))
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"loss", float64(s.Dropped.Load()) / n, spec.Loss},
		{"dup", float64(s.Duplicated.Load()) / n, spec.Dup},
		{"reorder", float64(s.Delayed.Load()) / n, spec.Reorder},
	} {
		if tol := 5 * math.Sqrt(c.want*(1-c.want)/n); math.Abs(c.got-c.want) > tol {
			t.Errorf("%s=%v: %.4f of %d frames, want %.4f ± %.4f", c.name, c.want, c.got, n, c.want, tol)
		}
	}
}
