package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
)

// session is a lapi context of a two-rank job with the handlers of every
// lapi role, registered in the same order on both sides so that their IDs
// agree.
type session struct {
	c                      *lapi.Context
	peer                   hal.Rank
	echo, sink, stop, data lapi.HandlerID
	echoer                 *echoHandler
	stopped                atomic.Bool
}

// openSession starts lapi over d as rank; stream is the receiving side's
// message checker (nil on the other roles, which never receive a stream).
// It returns once the peer has registered its handlers too: a message that
// arrives for a handler not registered yet is dropped, and lapi, having
// acknowledged its packets, never sends it again.
func openSession(ctx context.Context, cfg *config, d hal.Device, rank hal.Rank, stream *streamCheck) (*session, error) {
	c, err := lapi.Open(lapi.Config{Device: d, Rank: rank, Size: 2, JobKey: cfg.jobKey, MinRTO: cfg.minRTO})
	if err != nil {
		return nil, err
	}
	s := &session{c: c, peer: 1 - rank}
	scratch := &scratchSink{buf: make([]byte, cfg.size)}
	s.echoer = &echoHandler{c: c, scratch: scratch}
	s.echo = c.RegisterHandler(s.echoer)
	s.sink = c.RegisterHandler(scratch)
	s.echoer.reply = s.sink
	s.stop = c.RegisterHandler(stopHandler{&s.stopped})
	if stream == nil {
		stream = &streamCheck{}
	}
	s.data = c.RegisterHandler(stream)
	if _, err := c.AddressInit(ctx, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("opening barrier: %w", err)
	}
	return s, nil
}

// wait makes progress until cond holds, failing if the peer does.
func (s *session) wait(ctx context.Context, what string, cond func() bool) error {
	err := s.c.Wait(ctx, func() (bool, error) { return cond(), s.c.PeerErr(s.peer) })
	if err != nil {
		return fmt.Errorf("%s: %w; lapi %+v", what, err, s.c.Stats())
	}
	return nil
}

// finish ends a lapi role so that neither side leaves while the other still
// needs it: Fence waits until this side's messages are acknowledged, and the
// address exchange that follows is a barrier; Close then drains, so the
// barrier's own last packets and acknowledgements are not lost with the
// side that leaves first (which once failed the other with "no
// acknowledgement for 30s" under 1% loss).
func (s *session) finish(ctx context.Context, res *Result) error {
	if err := s.c.Fence(ctx); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if _, err := s.c.AddressInit(ctx, nil); err != nil {
		return fmt.Errorf("closing barrier: %w", err)
	}
	st := s.c.Stats()
	res.Lapi = fmt.Sprintf("%+v", st)
	res.Retransmits, res.Duplicates = st.Retransmits, st.Duplicates
	return nil
}

// amPing sends -size bytes to am-echo's echo handler, which answers with as
// many, and waits for the answer: lapi's small-message latency.
func amPing(ctx context.Context, cfg *config, d hal.Device, res *Result) error {
	s, err := openSession(ctx, cfg, d, 0, nil)
	if err != nil {
		return err
	}
	defer s.c.Close()
	got := s.c.NewCounter()
	// The echo handler answers to the counter named in the user header.
	var u [4]byte
	binary.LittleEndian.PutUint32(u[:], got.ID())
	data := make([]byte, cfg.size)
	var sent int64
	err = pingRounds(cfg, res, func() error {
		if err := s.c.Amsend(1, s.echo, u[:], data, lapi.SendOpts{}); err != nil {
			return err
		}
		sent++
		return s.wait(ctx, "waiting for the echo", func() bool { return got.Value() >= sent })
	})
	if err != nil {
		return err
	}
	if err := s.c.Amsend(1, s.stop, nil, nil, lapi.SendOpts{}); err != nil {
		return err
	}
	return s.finish(ctx, res)
}

// amEcho answers am-ping until told to stop.
func amEcho(ctx context.Context, cfg *config, d hal.Device, res *Result) error {
	s, err := openSession(ctx, cfg, d, 1, nil)
	if err != nil {
		return err
	}
	defer s.c.Close()
	if err := s.wait(ctx, "echoing", func() bool { return s.stopped.Load() || s.echoer.err.Load() != nil }); err != nil {
		return err
	}
	if p := s.echoer.err.Load(); p != nil {
		return fmt.Errorf("echo: %w", *p)
	}
	return s.finish(ctx, res)
}

// echoHandler answers a message with as much data to the reply handler,
// bumping the origin's counter named in the user header.
type echoHandler struct {
	c       *lapi.Context
	scratch *scratchSink
	reply   lapi.HandlerID
	err     atomic.Pointer[error] // the first failed answer
}

// OnHeader takes the data into the scratch buffer; the cookie is the
// counter to answer to.
func (e *echoHandler) OnHeader(_ hal.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != 4 {
		return nil, uint32(0)
	}
	return e.scratch.buf[:min(n, len(e.scratch.buf))], binary.LittleEndian.Uint32(uhdr)
}

// OnComplete sends the answer.
func (e *echoHandler) OnComplete(src hal.Rank, cookie any) {
	id, _ := cookie.(uint32)
	if err := e.c.Amsend(src, e.reply, nil, e.scratch.buf, lapi.SendOpts{Target: id}); err != nil {
		e.err.CompareAndSwap(nil, &err)
		e.c.Wake()
	}
}

// scratchSink takes data into one reused buffer.
type scratchSink struct{ buf []byte }

// OnHeader takes the data into the buffer, truncated to its size.
func (s *scratchSink) OnHeader(_ hal.Rank, _ []byte, n int) ([]byte, any) {
	return s.buf[:min(n, len(s.buf))], nil
}

// OnComplete has nothing to do: the sender's target counter says it all.
func (s *scratchSink) OnComplete(hal.Rank, any) {}

// stopHandler raises a flag.
type stopHandler struct{ stopped *atomic.Bool }

// OnHeader takes no data.
func (stopHandler) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }

// OnComplete raises the flag.
func (s stopHandler) OnComplete(hal.Rank, any) { s.stopped.Store(true) }
