package lapi

import (
	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// reasmKey names a message being reassembled.
type reasmKey struct {
	src   hal.Rank
	msgID uint32
}

// inMsg is a multi-packet message whose packets are still arriving.
type inMsg struct {
	buf    []byte
	cookie any
	left   int // data bytes not yet arrived
}

// completion is a message whose data has all been placed; its handler's
// OnComplete and counters run outside the progress lock.
type completion struct {
	notify Completer // set for a Completer call instead of a handler
	err    error
	h      AMHandler
	src    hal.Rank
	cookie any
	tcntr  uint32
	ccntr  uint32
}

// onFrame is the device's Poll callback: one arriving frame.
func (c *Context) onFrame(h *hal.Header, payload []byte) {
	if trace.On(trace.HotDetail) {
		c.traceRecv(h, payload)
	}
	if h.Type == hal.FrameData && len(payload) >= tinyHdrLen && payload[0] == kindAMTiny && c.reliableTo(h.Src) {
		c.onTiny(h, payload)
		return
	}
	if c.reint != nil && isReintFrame(h.Type) && int(h.Src) < c.cfg.Size {
		c.reintIdle = false // its timers may run again
		if trace.On(trace.Internal) {
			c.traceReintRecv(h.Src, h.Type, payload)
		}
		c.applyReint(c.reint.Handle(h.Src, h.Type, payload, c.now()))
		return
	}
	if h.Type == hal.FrameTPTUpdate && int(h.Src) < c.cfg.Size && h.Dst == c.rank {
		c.onTPTUpdate(h.Src, payload)
		return
	}
	if hal.IsRDMAFrame(h.Type) && int(h.Src) < c.cfg.Size && h.Dst == c.rank {
		c.onRDMA(h, payload)
		return
	}
	if h.Type == hal.FrameMcast && int(h.Src) < c.cfg.Size && h.Dst == hal.BroadcastRank {
		c.onMcast(h.Src, payload)
		return
	}
	if h.Type != hal.FrameData || int(h.Src) >= c.cfg.Size || h.Dst != c.rank {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop %v frame from rank %d to rank %d: not for lapi here", c.rank, h.Type, h.Src, h.Dst)
		}
		return
	}
	var ph pktHdr
	uhdr, data, err := decodePkt(payload, &ph)
	if err != nil {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: %v", c.rank, h.Src, err)
		}
		return
	}
	if !c.admit(h.Src, ph.dstEp) {
		return
	}
	if !c.reliableTo(h.Src) {
		c.clock()
		if ph.flags&flagSeq == 0 {
			c.stats.BadPackets++
			if trace.On(trace.Hot) {
				c.traceDrop(h.Src, "no sequence number over an unreliable device", ph.seq)
			}
			return
		}
		l := &c.links[h.Src]
		backoff := l.backoff
		if n := l.onAck(ph.ackCum, ph.sack, ph.credit, c.pollNow, c.releaseFn); n > 0 {
			if backoff != 0 && l.backoff == 0 && trace.On(trace.Internal) {
				c.traceRTO(h.Src)
			}
			if trace.On(trace.Hot) {
				c.traceAck(h.Src, &ph, n)
			}
			if c.queues[h.Src].head != nil {
				c.pushLocked(h.Src, c.pollNow) // the window opened
			}
		}
		if ph.kind == kindAck {
			return
		}
		fresh := l.onData(ph.seq, c.pollNow, &c.timing)
		c.activate(h.Src) // an acknowledgement is owed
		if !fresh {
			c.stats.Duplicates++
			c.peerStats[h.Src].Duplicates++
			if trace.On(trace.Hot) {
				c.traceDrop(h.Src, "duplicate or beyond the window", ph.seq)
			}
			return
		}
	} else if ph.kind != kindAM {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			c.traceDrop(h.Src, "not an active message over a reliable device", ph.seq)
		}
		return
	}
	c.deliver(h.Src, &ph, uhdr, data)
}

// onTiny takes a tiny packet, a small message's on a reliable device: the
// checks of onFrame, decodePkt and deliver for this layout alone, in
// their order and with their counts, and the handler called on the
// packet's own fields. Decoding into a packet header first took a sixth
// of the time from a ping-pong's arrival to its reply.
func (c *Context) onTiny(h *hal.Header, b []byte) {
	handler, dstEp, uhdr, data, ok := decodeTiny(b)
	if !ok || int(h.Src) >= c.cfg.Size || h.Dst != c.rank {
		c.stats.BadPackets++
		return
	}
	if !c.admit(h.Src, dstEp) {
		return
	}
	if e := c.handler(handler); e != nil {
		c.deliverWhole(e, h.Src, uhdr, data, 0, 0) // a tiny packet has no counters
	}
}

// admit counts a decoded packet from src naming the destination epoch
// dstEp as received, and reports whether it is to be delivered: not for
// an earlier life of this rank, nor from a failed peer (c.mu held).
func (c *Context) admit(src hal.Rank, dstEp uint32) bool {
	c.stats.PacketsRecv++
	if int(src) < len(c.peerStats) {
		c.peerStats[src].PacketsRecv++
	}
	if c.staleEpoch(dstEp) {
		c.stats.Stale++ // for an earlier life of this rank: its sender will learn
		if trace.On(trace.Hot) {
			c.traceStale(src, dstEp)
		}
		return false
	}
	if c.peerErr[src] != nil {
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: it was declared failed", c.rank, src)
		}
		return false // a failed peer's late packets are ignored
	}
	return true
}

// handler is the registered handler id names, or nil, counted as a bad
// packet.
func (c *Context) handler(id uint16) *handlerEntry {
	if int(id) >= len(c.handlers) || c.handlers[id].h == nil {
		c.stats.BadPackets++
		return nil
	}
	return &c.handlers[id]
}

// deliver places one packet of an active message.
func (c *Context) deliver(src hal.Rank, ph *pktHdr, uhdr, data []byte) {
	e := c.handler(ph.handler)
	if e == nil {
		return
	}
	hd := e.h
	if ph.offset == 0 && len(data) == int(ph.total) {
		c.deliverWhole(e, src, uhdr, data, ph.tcntr, ph.ccntr)
		return
	}
	key := reasmKey{src, ph.msgID}
	m := c.reasm[key]
	if m == nil {
		buf, cookie := hd.OnHeader(src, uhdr, int(ph.total))
		m = &inMsg{buf: buf, cookie: cookie, left: int(ph.total)}
		c.reasm[key] = m
	}
	if int(ph.offset) < len(m.buf) {
		copy(m.buf[ph.offset:], data)
	}
	m.left -= len(data)
	if m.left <= 0 {
		delete(c.reasm, key)
		c.complete(hd, src, m.cookie, ph.tcntr, ph.ccntr)
	}
}

// deliverWhole places a message that came in one packet, with its
// target and completion counters.
func (c *Context) deliverWhole(e *handlerEntry, src hal.Rank, uhdr, data []byte, tcntr, ccntr uint32) {
	if wh := e.whole; wh != nil && tcntr == 0 && ccntr == 0 && wh.OnWhole(src, uhdr, data) {
		c.stats.MessagesIn++
		c.peerStats[src].MessagesIn++
		return
	}
	buf, cookie := e.h.OnHeader(src, uhdr, len(data))
	copy(buf, data)
	c.complete(e.h, src, cookie, tcntr, ccntr)
}

func (c *Context) complete(h AMHandler, src hal.Rank, cookie any, tcntr, ccntr uint32) {
	c.stats.MessagesIn++
	c.peerStats[src].MessagesIn++
	c.done = append(c.done, completion{h: h, src: src, cookie: cookie, tcntr: tcntr, ccntr: ccntr})
}

// runCompletions runs queued completion handlers and Completer calls
// outside the progress lock, so that they may call back into the context
// (send a reply, start a get), then bumps target counters and tells origins
// that asked.
func (c *Context) runCompletions() bool {
	// The queue is swapped out whole rather than copied: completions hold
	// pointers, and copying them costs write barriers and clearing. A
	// handler may call back in here; the nested call finds c.spare taken
	// and its batch is left to the garbage collector.
	ran := false
	var batch []completion
	for {
		c.mu.Lock()
		if c.trigDue.Load() {
			c.fireTriggers() // a completion of the last batch reached one
		}
		if batch != nil && c.spare == nil {
			c.spare = batch[:0]
		}
		batch = c.done
		if len(batch) == 0 {
			if ran {
				c.wakeLocked()
			}
			c.mu.Unlock()
			return ran
		}
		c.done, c.spare = c.spare, nil
		c.mu.Unlock()
		ran = true
		for i := range batch {
			x := &batch[i]
			if x.notify != nil {
				x.notify.Complete(x.err)
				*x = completion{}
				continue
			}
			x.h.OnComplete(x.src, x.cookie)
			if x.tcntr != 0 || x.ccntr != 0 {
				c.mu.Lock()
				if k := c.counter(x.tcntr); k != nil {
					k.incr()
				}
				if x.ccntr != 0 {
					c.notifyLocked(x.src, x.ccntr)
				}
				c.mu.Unlock()
			}
			*x = completion{}
		}
	}
}
