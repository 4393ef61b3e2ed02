package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// devPing bounces a frame of -size bytes off dev-echo, straight over the
// device: the floor under lapi's latency.
func devPing(ctx context.Context, cfg *config, d hal.Device, res *Result) error {
	payload := make([]byte, cfg.size)
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: cfg.jobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, payload)
	var got int
	count := func(*hal.Header, []byte) { got++ }
	return pingRounds(cfg, res, func() error {
		if err := send(d, hdr, payload); err != nil {
			return err
		}
		// Wait before Poll: the answer cannot be there yet, and a Wait
		// that receives it leaves it in the ring, so Poll delivers it
		// without another system call.
		for want := got + 1; got < want; {
			if err := d.Wait(ctx); err != nil {
				return fmt.Errorf("waiting for the echo: %w", err)
			}
			if _, err := d.Poll(count); err != nil {
				return err
			}
		}
		return nil
	})
}

// devEcho returns every frame to its sender until stdin closes.
func devEcho(ctx context.Context, cfg *config, d hal.Device, _ *Result) error {
	hdr := make([]byte, hal.HeaderLen)
	buf := make([]byte, d.Caps().MTU)
	var err error
	reply := func(h *hal.Header, p []byte) {
		r := *h
		r.Src, r.Dst, r.Flags = h.Dst, h.Src, 0
		hal.EncodeHeader(hdr, &r)
		payload := buf[:copy(buf, p)]
		hal.Seal(hdr, payload)
		// One frame at a time: the reply must leave before the buffers
		// are reused for the next one.
		err = errors.Join(err, send(d, hdr, payload))
	}
	for {
		if _, perr := d.Poll(reply); perr != nil || err != nil {
			return errors.Join(perr, err)
		}
		if werr := d.Wait(ctx); werr != nil {
			if errors.Is(werr, context.Canceled) {
				return nil // stdin closed: the measurement is over
			}
			return werr
		}
	}
}

// send queues one frame and flushes it to the wire, retrying while the
// device reports no resource.
func send(d hal.Device, hdr, payload []byte) error {
	for {
		err := d.Send(hdr, payload)
		if err == nil {
			break
		}
		if !errors.Is(err, hal.ErrNoResource) {
			return fmt.Errorf("send: %w", err)
		}
		if err := d.Flush(); err != nil && !errors.Is(err, hal.ErrNoResource) {
			return fmt.Errorf("flush: %w", err)
		}
	}
	for {
		err := d.Flush()
		if !errors.Is(err, hal.ErrNoResource) {
			if err != nil {
				return fmt.Errorf("flush: %w", err)
			}
			return nil
		}
	}
}
