package lapi

import (
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// armTimer makes sure a waiter wakes by t, a new deadline (unreliable
// devices only).
func (r *rdmaState) armTimer(t time.Time) {
	c := r.c
	if r.foldTimer(t) && c.pr.blocking {
		c.pr.wakeLocked() // it set its deadline before this timer existed
	}
}

// foldTimer brings nextTick forward to t if t is sooner, and reports
// whether it did.
func (r *rdmaState) foldTimer(t time.Time) bool {
	c := r.c
	if c.reliable || !c.rel.nextTick.IsZero() && !t.Before(c.rel.nextTick) {
		return false
	}
	c.rel.nextTick = t
	return true
}

// rdmaTick redrives transfers whose completion is overdue and folds the
// next deadline into nextTick (c.mu held; unreliable devices).
func (r *rdmaState) rdmaTick(now time.Time) {
	c := r.c
	if r.groups == 0 {
		return
	}
	for _, op := range r.ops {
		if op == nil || !op.sentAll || op.rto == 0 { // (rto 0: a reliable device toward the peer)
			continue
		}
		if d := r.timerStart(op).Add(op.rto); d.After(op.deadline) {
			op.deadline = d // the drives ahead of it were done late
		}
		if now.Before(op.deadline) {
			// A known deadline: a blocked waiter already sleeps until
			// it (or sooner), so it is folded in, not woken for.
			r.foldTimer(op.deadline)
			continue
		}
		if op.t == hal.FrameRDMAReadReq {
			if left := r.eng.ReadLeft(op.g.peer, op.rc); left != 0 && (op.left == 0 || left < op.left) {
				op.left, op.lastGood = left, now // still arriving
				op.deadline = now.Add(op.rto)
				r.foldTimer(op.deadline) // later than the one it replaces
				continue
			}
		}
		if now.Sub(op.lastGood) > c.cfg.PeerTimeout {
			c.rel.failPeer(op.g.peer, fmt.Sprintf("RDMA transfer unanswered for %v", c.cfg.PeerTimeout))
			continue
		}
		r.redrive(op, now)
	}
}

// timerStart is when op's redrive timer runs from: when its drive's last
// packet went to the device, or, if later, when the latest drive toward
// the peer sent before it completed. A drive queued behind others on the
// way (in the device, the network, the peer's receive queue) cannot be
// answered before them, so its timer starts once they are done: its
// timeout is then one drive's service time and a round trip, whatever
// the queue ahead of it.
func (r *rdmaState) timerStart(op *rdmaOp) time.Time {
	p := op.g.peer
	if op.seq > r.doneSeq[p] && r.doneAt[p].After(op.sentAt) {
		return r.doneAt[p]
	}
	return op.sentAt
}

// redriveMissing drives a write again under a new tid with the segments
// its target reported missing (bitmap rep from offset off), ahead of the
// chunks queued after it: the report came a round trip after the loss,
// and the timeout stays as it was.
func (r *rdmaState) redriveMissing(op *rdmaOp, off uint64, rep []byte) {
	c := r.c
	tid := op.rc.Tid() + 1
	if op.stream.RestartMissing(tid, off, rep) == 0 {
		r.stats.StaleCompletions++ // names none of its segments
		return
	}
	op.rc.Redrive()
	r.countRedrive(op, tid, true)
	r.stats.Reports++
	op.probed = false
	op.lastGood = c.pr.pollNow
	r.queueStreamFront(outStream{s: &op.stream, op: op})
}

// reread asks again, under tid, for what a read still lacks: this rank
// places a read's data, so it knows what is missing. The segments missing
// when the engine reports (an unreliable device), else the range from the
// first to the last.
func (r *rdmaState) reread(op *rdmaOp, tid uint32) {
	if off, bm := r.eng.ReadMissing(op.g.peer, op.rc); len(bm) > 0 {
		op.stream.RestartReadMissing(tid, off, bm)
	} else {
		off, n := r.eng.MissingRange(op.g.peer, op.rc)
		op.stream.RestartRange(tid, off, n)
	}
	op.h.Tid = tid
	op.left = 0
	r.eng.ExpectRead(op.g.peer, op.rc, &op.h)
}

// rereadMissing asks again at once for the segments a read's drive lost
// (its last packet came with segments missing), ahead of the chunks
// queued after it; the timeout stays as it was.
func (r *rdmaState) rereadMissing(op *rdmaOp) {
	c := r.c
	tid := op.rc.Redrive()
	r.countRedrive(op, tid, true)
	r.stats.Reports++
	op.lastGood = c.pr.pollNow
	r.reread(op, tid)
	r.queueStreamFront(outStream{s: &op.stream, op: op})
}

// countRedrive counts a drive after a chunk's first, and cuts the window
// toward its peer once per chunk (its later drives are the same loss) when
// loss is known: not for a probe, which a late completion may answer.
func (r *rdmaState) countRedrive(op *rdmaOp, tid uint32, lost bool) {
	c := r.c
	if lost && !op.cut {
		r.shrink(op.g.peer)
		op.cut = true
	}
	op.drives++
	r.stats.Redrives++
	c.peerStats[op.g.peer].Redrives++
	if trace.On(trace.Internal) {
		c.tr.traceRedrive(op, tid)
	}
	op.stream.Hdr.DstEp = c.ri.dstEpoch(op.g.peer)
}

// queueStreamFront queues o behind the stream being pushed and the
// streams queued so before it, in the order they came: a redrive's few
// packets, which the peer is waiting for, and the answer to a peer's
// read, whose timer is running, do not wait behind a window of new
// chunks. (In the order they came: served last first, a peer's later
// reads overtook its earlier ones, whose timers then ran out.)
func (r *rdmaState) queueStreamFront(o outStream) {
	o.ahead = true
	r.queueStream(o)
	q := r.queue
	i := 1
	for i < len(q)-1 && q[i].ahead {
		i++
	}
	if n := len(q); i < n-1 {
		copy(q[i+1:], q[i:n-1])
		q[i] = o
	}
}

// redrive sends a transfer again under a new tid after a timeout, with a
// doubled timeout: a write's last packet alone (a probe, which its target
// answers with the completion or a report of what is missing) unless the
// last timeout probed already, else the whole chunk; a read's missing
// range.
func (r *rdmaState) redrive(op *rdmaOp, now time.Time) {
	c := r.c
	tid := op.rc.Redrive()
	r.countRedrive(op, tid, op.t == hal.FrameRDMAReadReq || op.probed)
	op.rto = min(2*op.rto, c.cfg.MaxRTO)
	if op.t == hal.FrameRDMAReadReq {
		r.reread(op, tid)
	} else if !op.probed {
		op.stream.RestartTail(tid)
		op.probed = true
		r.stats.Probes++
	} else {
		op.stream.Restart(tid)
		op.probed = false
	}
	r.queueStreamFront(outStream{s: &op.stream, op: op})
	r.pushRDMA(now)
}

// dropRDMA fails every transfer with peer, and stops serving its reads
// (c.mu held): it failed or restarted.
func (r *rdmaState) dropRDMA(peer hal.Rank, err error) {
	for _, op := range r.ops {
		if op != nil && op.g.peer == peer {
			r.finishOp(op, err)
		}
	}
	var keep []*rdmaOp
	for _, op := range r.waiting {
		if op.g.peer == peer {
			r.finishOp(op, err)
		} else {
			keep = append(keep, op)
		}
	}
	r.waiting, r.nwait[peer] = keep, 0
	for k, s := range r.serving {
		if k.peer == peer {
			r.unqueue(s)
			delete(r.serving, k)
			r.eng.ReleaseStream(s)
		}
	}
}
