package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
)

// amSend streams -count messages of -size bytes to am-recv with at most
// -inflight whose buffers lapi still holds, and times them until the
// receiver has completed the last one.
func amSend(ctx context.Context, cfg *config, d hal.Device, res *Result) error {
	s, err := openSession(ctx, cfg, d, 0, nil)
	if err != nil {
		return err
	}
	defer s.c.Close()
	pat := newPattern(cfg.size)
	origin, done := s.c.NewCounter(), s.c.NewCounter()
	var u [4]byte
	start := time.Now()
	for i := range cfg.count {
		if i >= cfg.inflight {
			if err := origin.Wait(ctx, 1); err != nil {
				return fmt.Errorf("message %d: waiting for a buffer: %w", i, err)
			}
		}
		binary.LittleEndian.PutUint32(u[:], uint32(i))
		if err := s.c.Amsend(1, s.data, u[:], pat.message(i), lapi.SendOpts{Origin: origin, Completion: done}); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	// s.wait rather than done.Wait: the error then says how far it got
	// and carries lapi's counters.
	if err := s.wait(ctx, "waiting for the receiver's completions", func() bool { return done.Value() >= int64(cfg.count) }); err != nil {
		return fmt.Errorf("%w (%d of %d completed)", err, done.Value(), cfg.count)
	}
	setRate(res, cfg.count, cfg.size, time.Since(start))
	return s.finish(ctx, res)
}

// amRecv receives am-send's stream and checks it: every message exactly
// once, with the content its index says (unless -verify=false).
func amRecv(ctx context.Context, cfg *config, d hal.Device, res *Result) error {
	k := &streamCheck{pat: newPattern(cfg.size), verify: cfg.verify, seen: make([]bool, cfg.count)}
	s, err := openSession(ctx, cfg, d, 1, k)
	if err != nil {
		return err
	}
	defer s.c.Close()
	var got int
	var checkErr error
	err = s.wait(ctx, "receiving", func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		got, checkErr = k.got, k.err
		return got == cfg.count || checkErr != nil
	})
	if err == nil {
		err = checkErr
	}
	if err != nil {
		return fmt.Errorf("after %d of %d messages: %w", got, cfg.count, err)
	}
	setRate(res, cfg.count, cfg.size, k.last.Sub(k.first))
	return s.finish(ctx, res)
}

func setRate(res *Result, count, size int, took time.Duration) {
	res.Messages, res.Bytes, res.Seconds = count, int64(count)*int64(size), took.Seconds()
	res.GBps = float64(res.Bytes) / took.Seconds() / 1e9
}

// pattern is the stream's content: message i is a window of a fixed
// pseudo-random buffer at an offset derived from i, so the receiver can
// tell a misplaced or damaged message from the right one without any
// message carrying its own checksum.
type pattern struct {
	buf  []byte
	size int
}

// patternPeriod is the number of distinct message offsets (a prime, so
// that consecutive messages differ).
const patternPeriod = 4099

func newPattern(size int) *pattern {
	p := &pattern{buf: make([]byte, patternPeriod+size), size: size}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p.buf {
		p.buf[i] = byte(rng.Uint32())
	}
	return p
}

// message is message i's content.
func (p *pattern) message(i int) []byte {
	off := (i * 1031) % patternPeriod
	return p.buf[off : off+p.size]
}

// streamCheck is the receiver's handler: it gives each message a buffer
// and checks it on completion. OnHeader runs under lapi's progress lock and
// OnComplete outside it, possibly on lapi's timer goroutine, hence mu.
type streamCheck struct {
	pat    *pattern
	verify bool // compare contents, not only indices

	mu          sync.Mutex
	free        [][]byte
	seen        []bool
	got         int
	first, last time.Time
	err         error
}

// inbound is one message being received.
type inbound struct {
	idx int
	buf []byte
}

// OnHeader gives the message a buffer; the cookie is the message.
func (k *streamCheck) OnHeader(_ hal.Rank, uhdr []byte, n int) ([]byte, any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.first.IsZero() {
		k.first = time.Now()
	}
	if k.pat == nil || len(uhdr) != 4 || n != k.pat.size {
		// (pat is nil on the roles that do not receive a stream.)
		k.fail(fmt.Errorf("unexpected stream message: %d-byte user header, %d bytes", len(uhdr), n))
		return nil, nil
	}
	m := &inbound{idx: int(binary.LittleEndian.Uint32(uhdr))}
	if l := len(k.free); l > 0 {
		m.buf, k.free = k.free[l-1], k.free[:l-1]
	} else {
		m.buf = make([]byte, n)
	}
	return m.buf, m
}

// OnComplete checks the message: its index new, its content as sent.
func (k *streamCheck) OnComplete(_ hal.Rank, cookie any) {
	m, _ := cookie.(*inbound)
	k.mu.Lock()
	defer k.mu.Unlock()
	if m == nil {
		return // rejected in OnHeader
	}
	switch {
	case m.idx >= len(k.seen):
		k.fail(fmt.Errorf("message %d: index beyond the %d sent", m.idx, len(k.seen)))
	case k.seen[m.idx]:
		k.fail(fmt.Errorf("message %d delivered twice", m.idx))
	case k.verify && !bytes.Equal(m.buf, k.pat.message(m.idx)):
		k.fail(fmt.Errorf("message %d: content differs from what was sent", m.idx))
	default:
		k.seen[m.idx] = true
		k.got++
		k.last = time.Now()
	}
	k.free = append(k.free, m.buf)
}

// fail records the first error; k.mu is held.
func (k *streamCheck) fail(err error) {
	if k.err == nil {
		k.err = err
	}
}
