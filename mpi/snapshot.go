package mpi

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/lapi"
)

// A rank's state snapshot (issue 32) says what it was doing when something
// went wrong: the call it is blocked in, its communicators and how many
// collectives each has begun, its posted receives and the sends waiting
// for their peer, the unexpected messages, lapi's state toward each peer
// (unacknowledged packets, timeout, window, RDMA in flight, reintegration)
// and its counters, in internal/pmi's text format. It is written on a
// fatal error (a peer declared failed), on a timeout (Options.Timeout),
// and when the rank receives pmi.AskSignal (SIGWINCH, which gorun sends at
// --timeout, on a rank's failure and on its own SIGQUIT): to
// Options.SnapshotDir, and under gorun to gorun, which writes the ranks'
// into one directory and says what they wait for, and on whom.

// snapState is a world's snapshot configuration and what it wrote.
type snapState struct {
	dir   string // Options.SnapshotDir; "": no file
	gorun bool   // send them to gorun too (pmi.SnapshotEnv)
	// auto: a fatal error or a timeout wrote one. Only the first does:
	// it shows the state when things went wrong, which the errors that
	// follow from it (a peer's timeout failing this rank's calls) would
	// overwrite, and a program that goes on does not write one per call.
	auto atomic.Bool
}

// on reports whether snapshots go anywhere.
func (s *snapState) on() bool { return s.dir != "" || s.gorun }

// snapTimeout writes the snapshot of a wait for r that timed out, unless
// one was written automatically already (waitErr): under Options.Timeout, not a deadline of the caller's
// own alone.
func (w *World) snapTimeout(r *request) {
	if w.timeout <= 0 || !w.snap.on() || w.snap.auto.Swap(true) {
		return
	}
	n := r.note()
	w.writeSnapshot(w.snapshot("timeout: waited "+w.timeout.String()+" in "+w.describeNote(n), n), "")
}

// snapFailedWait writes the snapshot of a wait for r that failed with err
// because a peer failed, unless one was written automatically already: a
// rank told of the failure by another member (a collective's abort)
// rather than by its own lapi, which would have called snapFatal.
func (w *World) snapFailedWait(r *request, err error) {
	if !w.snap.on() || w.snap.auto.Swap(true) {
		return
	}
	n := r.note()
	w.writeSnapshot(w.snapshot("fatal: "+w.describeNote(n)+" failed: "+err.Error(), n), "")
}

// snapFatal writes the snapshot of a peer's failure, unless one was
// written automatically already (under
// lapi's lock: peerFailed's, before it fails the requests, so that they
// are seen pending). A failure found once Finalize's barrier has passed
// writes none: every rank was in Finalize, and a peer that finished first
// and exited is seen dead by the devices that watch its process (shm),
// which is the normal end of a job, not something that went wrong.
func (w *World) snapFatal(tx *lapi.Tx, peer lapi.Rank, err error) {
	if !w.snap.on() || w.closed.Load() || w.snap.auto.Swap(true) {
		return
	}
	w.writeSnapshot(w.snapshotLocked(tx, fmt.Sprintf("fatal: rank %d failed: %v", peer, err), nil), "")
}

// snapshot is the rank's snapshot, for reason; note is what it waits for
// when the waiter is the caller (nil: World.waiting).
func (w *World) snapshot(reason string, note *waitNote) []byte {
	var b []byte
	w.lc.Atomically(func(tx *lapi.Tx) { b = w.snapshotLocked(tx, reason, note) })
	return b
}

// snapshotLocked is snapshot under lapi's lock, which the matcher's
// queues are under; the arrivals' fields and the request table are
// w.mu's, taken after it as peerFailed does.
func (w *World) snapshotLocked(tx *lapi.Tx, reason string, note *waitNote) []byte {
	b := []byte("snapshot")
	b = pmi.AppendField(b, "rank", strconv.Itoa(w.rank))
	b = pmi.AppendField(b, "size", strconv.Itoa(w.size))
	b = pmi.AppendField(b, "pid", strconv.Itoa(os.Getpid()))
	b = pmi.AppendField(b, "reason", reason)
	b = pmi.AppendField(b, "time", time.Now().UTC().Format(time.RFC3339Nano))
	b = append(b, '\n')

	if note == nil {
		note = w.waiting.Load()
	}
	if note != nil {
		b = w.appendWaiting(b, note)
	}
	w.commsMu.Lock()
	comms := make([]*Comm, 0, len(w.comms))
	for _, ctx := range slices.Sorted(maps.Keys(w.comms)) {
		comms = append(comms, w.comms[ctx])
	}
	w.commsMu.Unlock()
	for _, c := range comms {
		b = append(b, "comm"...)
		b = pmi.AppendField(b, "id", strconv.FormatUint(uint64(c.ctx), 10))
		b = pmi.AppendField(b, "rank", strconv.Itoa(c.rank))
		b = pmi.AppendField(b, "size", strconv.Itoa(c.size))
		b = pmi.AppendField(b, "calls", strconv.FormatUint(uint64(c.coll.seq.Load()), 10))
		b = pmi.AppendField(b, "group", intList(c.group))
		b = append(b, '\n')
	}

	w.mu.Lock()
	n := 0
	for r := w.m.posted.head; r != nil; r = r.next {
		if n++; n <= pmi.SnapshotMax {
			b = appendPending(b, r, worldPeer(r.comm, r.src))
		}
	}
	w.reqs.each(func(r *request) {
		if n++; n <= pmi.SnapshotMax {
			b = appendPending(b, r, r.peer)
		}
	})
	b = appendMore(b, "pending", n)
	n = 0
	for a := w.m.unexpected.head; a != nil; a = a.next {
		if n++; n > pmi.SnapshotMax {
			continue
		}
		b = append(b, "unexpected"...)
		b = pmi.AppendField(b, "source", strconv.Itoa(int(a.from)))
		b = pmi.AppendField(b, "tag", strconv.Itoa(a.env.tag))
		b = pmi.AppendField(b, "comm", commName(a.env.ctx))
		b = pmi.AppendField(b, "bytes", strconv.FormatUint(a.env.size, 10))
		b = pmi.AppendField(b, "complete", strconv.FormatBool(a.complete))
		b = append(b, '\n')
	}
	b = appendMore(b, "unexpected", n)
	if len(w.m.held) > 0 {
		b = append(pmi.AppendField(append(b, "held"...), "count", strconv.Itoa(len(w.m.held))), '\n')
	}
	w.mu.Unlock()

	ls := tx.Snapshot()
	b = appendLapi(b, &ls)
	for _, l := range statsLines(w.rank, w.statsFrom(ls.Stats, ls.RDMAStats)) {
		b = append(append(append(b, "stats "...), l...), '\n')
	}
	return append(b, "end\n"...)
}

// appendWaiting appends the "waiting" record of the call n describes.
func (w *World) appendWaiting(b []byte, n *waitNote) []byte {
	b = append(b, "waiting"...)
	b = pmi.AppendField(b, "op", n.op)
	b = pmi.AppendField(b, "peer", strconv.Itoa(worldPeer(n.comm, n.src)))
	b = pmi.AppendField(b, "tag", strconv.Itoa(n.tag))
	b = pmi.AppendField(b, "comm", commName(n.ctx))
	call, coll := callOf(n)
	b = pmi.AppendField(b, "call", strconv.FormatUint(uint64(call), 10))
	b = pmi.AppendField(b, "collective", coll)
	b = pmi.AppendField(b, "what", w.describeNote(n))
	return append(b, '\n')
}

// callOf is the collective a wait on a collective context belongs to (its
// number on the communicator, and its name from its signature, or from the
// wait's operation when the signature is gone), or 0 and "".
func callOf(n *waitNote) (uint32, string) {
	c := n.comm
	if n.ctx&1 == 0 || c == nil {
		return 0, ""
	}
	k := c.coll.blocked.Load() // the call a blocked wait watches: a nonblocking one may be older
	if k == 0 {
		k = c.coll.seq.Load()
	}
	if w0, _, ok := c.coll.sig(k); ok {
		if kind := uint8(w0 >> 8); int(kind) < len(collNames) && kind != 0 {
			return k, collNames[kind]
		}
	}
	name, _, _ := strings.Cut(n.op, " ")
	return k, name
}

// appendPending appends a "pending" record for r, whose peer is world
// rank peer.
func appendPending(b []byte, r *request, peer int) []byte {
	b = append(b, "pending"...)
	b = pmi.AppendField(b, "op", r.op)
	b = pmi.AppendField(b, "peer", strconv.Itoa(peer))
	b = pmi.AppendField(b, "tag", strconv.Itoa(r.tag))
	b = pmi.AppendField(b, "comm", commName(r.ctx))
	b = pmi.AppendField(b, "bytes", strconv.Itoa(len(r.buf)))
	return append(b, '\n')
}

// appendMore appends the "more" record of kind when n entries were more
// than listed.
func appendMore(b []byte, kind string, n int) []byte {
	if n <= pmi.SnapshotMax {
		return b
	}
	b = pmi.AppendField(append(b, "more"...), "kind", kind)
	return append(pmi.AppendField(b, "n", strconv.Itoa(n-pmi.SnapshotMax)), '\n')
}

// appendLapi appends the "lapi" record and a "link" one per other rank.
func appendLapi(b []byte, s *lapi.Snapshot) []byte {
	b = append(b, "lapi"...)
	b = pmi.AppendField(b, "reliable", strconv.FormatBool(s.Reliable))
	b = pmi.AppendField(b, "reintegrates", strconv.FormatBool(s.Reintegrates))
	b = pmi.AppendField(b, "epoch", strconv.FormatUint(s.Epoch, 16))
	b = pmi.AppendField(b, "ready", strconv.FormatBool(s.Ready))
	for _, f := range []struct {
		name string
		v    int
	}{{"rcxts", s.RCxtsInUse}, {"transfers", s.Transfers}, {"chunks_waiting", s.ChunksWaiting},
		{"serving", s.Serving}, {"reassembling", s.Reassembling}, {"outstanding", s.Outstanding}} {
		b = pmi.AppendField(b, f.name, strconv.Itoa(f.v))
	}
	b = append(b, '\n')
	for _, p := range s.Peers {
		if p.Peer == s.Rank {
			continue
		}
		b = append(b, "link"...)
		b = pmi.AppendField(b, "peer", strconv.Itoa(int(p.Peer)))
		b = pmi.AppendField(b, "failed", p.Failed)
		for _, f := range []struct {
			name string
			v    int
		}{{"unacked", p.Unacked}, {"queued", p.Queued}, {"window", p.Window}} {
			b = pmi.AppendField(b, f.name, strconv.Itoa(f.v))
		}
		b = pmi.AppendField(b, "rto", p.RTO.String())
		b = pmi.AppendField(b, "srtt", p.SRTT.String())
		b = pmi.AppendField(b, "backoff", strconv.Itoa(p.Backoff))
		b = pmi.AppendField(b, "oldest_age", p.OldestAge.String())
		b = pmi.AppendField(b, "retries", strconv.Itoa(p.Retries))
		b = pmi.AppendField(b, "ack_owed", strconv.Itoa(p.AckOwed))
		b = pmi.AppendField(b, "rdma_ready", strconv.FormatBool(p.RDMAReady))
		b = pmi.AppendField(b, "peer_epoch", strconv.FormatUint(p.PeerEpoch, 16))
		b = pmi.AppendField(b, "rdma_bytes", strconv.Itoa(p.RDMABytes))
		b = pmi.AppendField(b, "rdma_window", strconv.Itoa(p.RDMAWindow))
		b = pmi.AppendField(b, "rdma_waiting", strconv.Itoa(p.RDMAWaiting))
		b = append(b, '\n')
	}
	return b
}

// writeSnapshot writes snapshot text to Options.SnapshotDir and, under
// gorun, to standard error after pmi.SnapshotPrefix, then answer (a line
// of gorun's question, or ""), in one write: gorun has the snapshot when
// it has the answer. A failure to write is said at trace level 1 and
// otherwise ignored: the snapshot is a report, and the rank goes on.
func (w *World) writeSnapshot(text []byte, answer string) {
	if w.snap.dir != "" {
		path := filepath.Join(w.snap.dir, pmi.SnapshotFile(w.rank))
		if err := os.WriteFile(path, text, 0o644); err != nil {
			trace.Printf(trace.Rare, "mpi %d: snapshot: %v", w.rank, err)
		}
	}
	var out []byte
	if w.snap.gorun {
		out = make([]byte, 0, len(text)+32*strings.Count(string(text), "\n")+len(answer))
		for line := range strings.Lines(string(text)) {
			out = append(append(out, pmi.SnapshotPrefix...), line...)
		}
	}
	out = append(out, answer...)
	if len(out) > 0 {
		// Nothing to do on a failed write: gorun, the only reader, is
		// gone or has stopped listening.
		_, _ = os.Stderr.Write(out)
	}
}

// worldPeer is the world rank of member src of c; -1 for any source or
// none.
func worldPeer(c *Comm, src int) int {
	if c == nil || src < 0 || src >= len(c.group) {
		return -1
	}
	return c.group[src]
}

// commName is a context's communicator id: its point-to-point context,
// and for a part of a hierarchical communicator (hier.go) its parent's,
// whose call the part's steps are of.
func commName(ctx uint32) string { return strconv.FormatUint(uint64(userCtx(ctx)), 10) }

// userCtx is the point-to-point context of the communicator a user holds
// that ctx belongs to: a part's id is hierCtxBit | parent<<1, with bit 1
// telling the node's part from the leaders'.
func userCtx(ctx uint32) uint32 {
	ctx &^= 1
	if ctx&hierCtxBit != 0 {
		ctx = (ctx &^ hierCtxBit &^ 2) >> 1
	}
	return ctx
}

// intList is ids joined by ',', "-" when empty.
func intList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return orDash(strings.Join(s, ","))
}
