//go:build verbs && linux && cgo

package verbs

/*
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

typedef struct { uint32_t slot; uint32_t len; int32_t status; uint32_t pad; } weft_rx; // cverbs.go
int weft_poll_rx(struct ibv_cq *cq, weft_rx *out, int n);
int weft_post_recv(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len, const uint32_t *slots, int n);
void weft_recv_chain(struct ibv_recv_wr *wr, struct ibv_sge *sge, uint64_t base, uint32_t lkey,
                     uint32_t slot_len, const uint32_t *slots, int n);
int weft_get_event(struct ibv_comp_channel *ch);
int weft_req_notify(struct ibv_cq *cq);
int weft_rc_init(struct ibv_qp *qp, uint8_t port);
int weft_rc_connect(struct ibv_qp *qp, uint8_t port, uint8_t sgid_index, const uint8_t *dgid, uint16_t dlid,
                    uint32_t dqpn, uint32_t rq_psn, uint32_t sq_psn, int mtu, uint8_t rd_atomic, uint8_t timeout,
                    uint8_t retry);

typedef struct { struct ibv_ah *ah; uint64_t wr_id; uint32_t slot; uint32_t len; uint32_t qpn; uint32_t qkey; uint32_t signaled; uint32_t pad; } weft_tx; // cverbs.go
int weft_post_send(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len, const weft_tx *tx, int n, uint32_t inline_len, int *posted);
typedef struct { uint64_t wr_id; int32_t status; uint32_t qp_num; } weft_rc_wc; // rc_linux.go
int weft_poll_rc(struct ibv_cq *cq, weft_rc_wc *out, int n);

struct ibv_srq *weft_create_srq(struct ibv_pd *pd, uint32_t wr) {
	struct ibv_srq_init_attr a = {0};
	a.attr.max_wr = wr;
	a.attr.max_sge = 1;
	return ibv_create_srq(pd, &a);
}

// weft_create_frame_qp makes an RC queue pair whose receives come from
// the shared receive queue srq.
struct ibv_qp *weft_create_frame_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
                                    uint32_t send_wr, uint32_t inline_len) {
	struct ibv_qp_init_attr a = {0};
	a.cap.max_inline_data = inline_len;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_send_sge = 1;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	return ibv_create_qp(pd, &a);
}

int weft_post_srq_recv(struct ibv_srq *srq, uint64_t base, uint32_t lkey, uint32_t slot_len,
                       const uint32_t *slots, int n) {
	struct ibv_recv_wr wr[32], *bad;
	struct ibv_sge sge[32];
	if (n > 32) n = 32;
	weft_recv_chain(wr, sge, base, lkey, slot_len, slots, n);
	return ibv_post_srq_recv(srq, wr, &bad);
}

*/
import "C"

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// Frames over reliable connections (the default; Options.Datagrams turns
// it off). Each peer has an RC queue pair for frames, separate from the
// one for RDMA so that a refused RDMA access, which puts its queue pair in
// error and is recovered by lapi, never loses a frame. Their receives come
// from one shared receive queue. The connections are made by a goroutine
// of the device's own (connLoop), which owns the UD queue pair and answers
// hellos whether or not the device's user is polling: a peer's connection
// must come up while this rank is busy elsewhere.

// helloRing is the number of UD send and receive slots when the UD queue
// pair carries hellos only.
const helloRing = 64

// frameTimeout is the frame queue pairs' local ACK timeout exponent
// (4.096 µs × 2^16 ≈ 268 ms; with frameRetry retries a silent peer is
// declared lost after about 2 s). Longer than the RDMA queue pairs' 14: a
// false loss fails the peer, where a broken RDMA queue pair is rebuilt.
// frameRetry is 6, not 7: rxe takes 7 as "retry for ever", and a send
// toward a dead peer would then never complete.
const (
	frameTimeout = 16
	frameRetry   = 6
)

// fconn is the reliable connection that carries frames to one peer. The
// connection fields (qp to bye) belong to connLoop and change
// under rc.connMu; qp is read by the sender once ready is set and never
// changes after. The send fields (fifo to unsig) belong to the caller
// (Send, Flush).
type fconn struct {
	qp        *C.struct_ibv_qp
	qpn, psn  uint32
	state     rcState
	remoteQPN uint32
	asked     bool // Connect was called: connLoop connects
	lastHello time.Time
	heard     time.Time // the last hello from the peer's queue pair (watchPeers)
	pinged    time.Time // the last hello asking it to answer (watchPeers)
	bye       bool      // the peer said its device is closing

	ready  atomic.Bool
	failed atomic.Pointer[error]

	fifo         []uint32 // send slots posted on qp, in order: fifo[pos%len]
	posted, done uint64   // positions posted, completed
	unsig        int      // unsignaled work requests since the last signaled one
}

// ftxRing is the frame send side over reliable connections: registered
// slots taken from free by Send, queued in pend until Flush posts them
// on their peer's queue pair, and given back when a completion on that
// queue pair covers them (per queue pair in order; across them in any).
type ftxRing struct {
	slotLen int
	buf     []byte
	mr      *C.struct_ibv_mr
	free    []uint32
	pend    []pendFrame
	bytes   uint64
	wc      *[batch]C.weft_rc_wc // these three in the device's scratch (C memory)
	tx      *[batch]C.weft_tx
	nposted *C.int // weft_post_send's count
	inline  int    // frames up to this long are sent inline
	flushes uint   // Flushes since the last look at send completions
}

// frameInline is how many bytes of a frame are sent inline at most
// (perftest's ib_send_lat sends its small messages inline too).
const frameInline = 256

// pendFrame is a frame copied into a slot, not yet posted.
type pendFrame struct {
	peer hal.Rank
	slot uint32
	len  uint32
}

// openFrames makes the reliable-frame half (open, after the UD queue pair
// and before openRC): the shared receive queue and its buffers, the
// frames' completion queues, the send slots and the connection to this
// rank itself.
func (d *Device) openFrames(slot int) error {
	var err error
	n := d.opts.SendRing
	if d.fscq = C.ibv_create_cq(d.ctx, C.int(n), nil, d.ch, 0); d.fscq == nil {
		return d.verbErr("ibv_create_cq (frame send)")
	}
	if d.fcq = C.ibv_create_cq(d.ctx, C.int(d.opts.RecvRing), nil, d.ch, 0); d.fcq == nil {
		return d.verbErr("ibv_create_cq (frame receive)")
	}
	if d.srq = C.weft_create_srq(d.pd, C.uint32_t(d.opts.RecvRing)); d.srq == nil {
		return d.verbErr("ibv_create_srq")
	}
	t := &d.ftx
	t.slotLen, t.inline = slot, frameInline
	sendBytes, recvBytes := pageRound(slot*n), pageRound(slot*d.opts.RecvRing)
	if t.buf, err = unix.Mmap(-1, 0, sendBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("verbs: frame send ring of %d bytes: %w", sendBytes, err)
	}
	if d.frbuf, err = unix.Mmap(-1, 0, recvBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("verbs: frame receive ring of %d bytes: %w", recvBytes, err)
	}
	need := uint64(sendBytes + recvBytes + len(d.sbuf) + len(d.rbuf))
	if t.mr, err = d.register(t.buf, need); err != nil {
		return err
	}
	if d.frmr, err = d.register(d.frbuf, need); err != nil {
		return err
	}
	t.free = make([]uint32, n)
	for i := range t.free {
		t.free[i] = uint32(n - 1 - i)
	}
	t.pend = make([]pendFrame, 0, n)
	d.fc = make([]fconn, len(d.peers))
	for i := range d.fc {
		d.fc[i].fifo = make([]uint32, n)
	}
	d.rx.slotLen, d.rx.grh, d.rx.cq, d.rx.buf, d.rx.mr = slot, 0, d.fcq, d.frbuf, d.frmr
	d.rx.least = min(batch/2, max(1, d.opts.RecvRing/2))
	for s := 0; s < d.opts.RecvRing; s++ {
		d.rx.repost[d.rx.nrepost] = C.uint32_t(s)
		d.rx.nrepost++
		if d.rx.nrepost == batch {
			if err := d.postRecv(); err != nil {
				return err
			}
		}
	}
	return d.postRecv()
}

// newFrameQP creates a frame queue pair in INIT, with a random first PSN.
// It asks for ftx.inline bytes of inline data (the frame copied into the
// work request: the adapter need not fetch it).
func (d *Device) newFrameQP() (*C.struct_ibv_qp, uint32, error) {
	qp := C.weft_create_frame_qp(d.pd, d.fscq, d.fcq, d.srq, C.uint32_t(d.opts.SendRing), C.uint32_t(d.ftx.inline))
	if qp == nil {
		return nil, 0, d.verbErr("ibv_create_qp (RC, frames)")
	}
	if rc := C.weft_rc_init(qp, C.uint8_t(d.port)); rc != 0 {
		C.ibv_destroy_qp(qp)
		return nil, 0, fmt.Errorf("verbs: %s: frame queue pair to INIT: %v", d.devName, syscall.Errno(rc))
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return qp, binary.LittleEndian.Uint32(b[:]) & 0xffffff, nil
}

// rcConnect moves qp (INIT) to RTS toward the queue pair dqpn at a.
func (d *Device) rcConnect(qp *C.struct_ibv_qp, a Address, dqpn, dpsn, psn uint32, timeout, retry uint8) C.int {
	return C.weft_rc_connect(qp, C.uint8_t(d.port), C.uint8_t(d.gidIndex), (*C.uint8_t)(unsafe.Pointer(&a.GID[0])),
		C.uint16_t(a.LID), C.uint32_t(dqpn), C.uint32_t(dpsn), C.uint32_t(psn), d.rc.mtu, C.uint8_t(d.rc.rdAtomic), C.uint8_t(timeout), C.uint8_t(retry))
}

// connectSelf connects this rank's frames to itself (Open): two queue
// pairs connected to each other, the first sending, the second receiving
// into the shared receive queue.
func (d *Device) connectSelf() error {
	a, b := &d.fc[d.cfg.Rank], &d.selfRecv
	var err error
	if a.qp, a.psn, err = d.newFrameQP(); err != nil {
		// An adapter without inline data: do without (decided here,
		// before connLoop makes the others).
		d.ftx.inline = 0
		if a.qp, a.psn, err = d.newFrameQP(); err != nil {
			return err
		}
	}
	if b.qp, b.psn, err = d.newFrameQP(); err != nil {
		return err
	}
	a.qpn, b.qpn = uint32(a.qp.qp_num), uint32(b.qp.qp_num)
	if rc := d.rcConnect(a.qp, d.local, b.qpn, b.psn, a.psn, frameTimeout, frameRetry); rc != 0 {
		return fmt.Errorf("verbs: %s: frame queue pair to itself: %v", d.devName, syscall.Errno(rc))
	}
	if rc := d.rcConnect(b.qp, d.local, a.qpn, a.psn, b.psn, frameTimeout, frameRetry); rc != 0 {
		return fmt.Errorf("verbs: %s: frame queue pair to itself: %v", d.devName, syscall.Errno(rc))
	}
	a.state, b.state = rcConnected, rcConnected
	a.ready.Store(true)
	return nil
}

// startFrames marks peer's frame connection wanted and wakes connLoop,
// which makes it (Connect).
func (d *Device) startFrames(peer hal.Rank) {
	if peer == d.cfg.Rank {
		return
	}
	d.rc.connMu.Lock()
	d.fc[peer].asked = true
	d.connPending = true
	d.rc.connMu.Unlock()
	d.kickConn()
}

// kickConn wakes connLoop.
func (d *Device) kickConn() {
	var one = [8]byte{1}
	_, _ = unix.Write(d.connEfd, one[:])
}

// connLoop runs from Open to Close over reliable connections: it takes
// the hellos that come on the UD queue pair (frames' and RDMA's), makes
// and connects queue pairs, and sends hellos, again every helloResend
// while a connection is unanswered. It holds a call inside the device's
// guard, so the device is released only after it returns.
func (d *Device) connLoop() {
	defer d.life.Leave()
	defer d.sayBye()
	fds := [2]unix.PollFd{{Fd: int32(d.chUD.fd), Events: unix.POLLIN}, {Fd: int32(d.connEfd), Events: unix.POLLIN}}
	var cqe [batch]C.weft_rx
	var repost [batch]C.uint32_t
	for !d.life.Closed() {
		// Take the hellos, then arm the queue and look once more: a
		// completion before the arming raises no event.
		for armed := false; ; {
			got := C.weft_poll_rx(d.rcq, &cqe[0], batch)
			nre := 0
			for i := 0; i < int(got); i++ {
				c := cqe[i]
				off := int(c.slot) * d.udSlot
				if c.status == C.IBV_WC_SUCCESS && int(c.len) >= grhLen && int(c.len) <= d.udSlot {
					if b := d.rbuf[off+grhLen : off+int(c.len)]; isHello(b) {
						d.rc.connMu.Lock()
						d.onHello(b)
						d.rc.connMu.Unlock()
					} else {
						d.counters.Drop(hal.DropPeer) // a datagram frame: the peer runs with Datagrams
					}
				}
				repost[nre] = c.slot
				nre++
			}
			if nre > 0 {
				base := C.uint64_t(uintptr(unsafe.Pointer(&d.rbuf[0])))
				_ = C.weft_post_recv(d.qp, base, d.rmr.lkey, C.uint32_t(d.udSlot), &repost[0], C.int(nre))
			}
			if got > 0 {
				continue
			}
			if armed {
				break
			}
			_ = C.weft_req_notify(d.rcq)
			armed = true
		}
		timeout := d.connTick()
		ts := unix.NsecToTimespec(int64(timeout))
		f := fds
		if _, err := unix.Ppoll(f[:], &ts, nil); err != nil && err != unix.EINTR {
			return
		}
		if f[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(d.connEfd, b[:])
		}
		if f[0].Revents != 0 {
			_ = C.weft_get_event(d.chUD)
		}
	}
}

// connTick makes the queue pairs Connect asked for and sends the hellos
// that are due; it returns how long connLoop may sleep.
func (d *Device) connTick() time.Duration {
	r := &d.rc
	r.connMu.Lock()
	defer r.connMu.Unlock()
	now := time.Now()
	if d.connPending {
		pending := false
		for i := range d.fc {
			p := &d.fc[i]
			if !p.asked || p.ready.Load() || p.failed.Load() != nil {
				continue
			}
			if p.state == rcNone {
				qp, psn, err := d.newFrameQP()
				if err != nil {
					d.failConn(hal.Rank(i), fmt.Errorf("verbs: %s: toward rank %d: %w: %w", d.devName, i, err, ErrPeerLost))
					continue
				}
				p.qp, p.qpn, p.psn, p.state = qp, uint32(qp.qp_num), psn, rcInit
				r.byQPN[p.qpn] = hal.Rank(i)
			}
			pending = true
			if now.Sub(p.lastHello) >= helloResend {
				p.lastHello = now
				d.sendFrameHello(hal.Rank(i), true, false)
			}
		}
		d.connPending = pending
	}
	for i := range r.peers {
		if p := &r.peers[i]; p.helloDue {
			p.helloDue = false
			d.sendHello(hal.Rank(i), true)
		}
	}
	next := d.watchPeers(now)
	if d.connPending {
		next = min(next, helloResend)
	}
	return next
}

// sendFrameHello sends peer a hello about the frame queue pair toward it
// (connLoop, rc.connMu held).
func (d *Device) sendFrameHello(peer hal.Rank, want, bye bool) {
	r := &d.rc
	p := &d.fc[peer]
	r.hello = hello{Want: want, Frames: true, Bye: bye, JobKey: d.cfg.JobKey, Src: uint32(d.cfg.Rank), Dst: uint32(peer), QPN: p.qpn, PSN: p.psn}
	if p.state == rcConnected {
		r.hello.PeerQPN = p.remoteQPN
	}
	r.helloBuf = appendHello(r.helloBuf[:0], &r.hello)
	if d.queueRaw(peer, r.helloBuf) == nil {
		_ = d.flushUD()
	}
}

// onFrameHello handles a hello about a frame queue pair (connLoop,
// rc.connMu held): it connects this side's queue pair toward the peer's,
// marks the connection ready once the peer says it is connected to this
// side's, and answers.
func (d *Device) onFrameHello(h *hello) {
	peer := hal.Rank(h.Src)
	p := &d.fc[peer]
	if p.failed.Load() != nil {
		return
	}
	if p.state == rcConnected && p.remoteQPN != h.QPN {
		// A new queue pair on the peer's side: it restarted, and frames
		// sent to the old one may be lost. Reliable means no silent loss.
		d.failConn(peer, fmt.Errorf("verbs: %s: rank %d made a new connection (it restarted): %w", d.devName, peer, ErrPeerLost))
		return
	}
	if p.state == rcNone {
		return // Connect has not been called for it yet; the peer sends again
	}
	if h.Bye {
		if p.state == rcConnected && p.remoteQPN == h.QPN {
			p.bye = true
		}
		return
	}
	if p.state == rcInit {
		a, ok := d.peerAddr(peer)
		if !ok {
			return
		}
		if rc := d.rcConnect(p.qp, a, h.QPN, h.PSN, p.psn, frameTimeout, frameRetry); rc != 0 {
			d.failConn(peer, fmt.Errorf("verbs: %s: frame queue pair toward rank %d to RTR/RTS: %v: %w", d.devName, peer, syscall.Errno(rc), ErrPeerLost))
			return
		}
		p.state, p.remoteQPN = rcConnected, h.QPN
	}
	p.heard = time.Now()
	if h.PeerQPN == p.qpn && !p.ready.Load() {
		p.ready.Store(true)
	}
	if ready := p.ready.Load(); h.Want || !ready {
		d.sendFrameHello(peer, !ready, false)
	}
}

// awaitConn waits, for at most Options.ConnectTimeout, for the frame
// connection toward peer that Connect started (Send, the first frame
// toward a peer only).
func (d *Device) awaitConn(peer hal.Rank) error {
	p := &d.fc[peer]
	if _, ok := d.peerAddr(peer); !ok {
		return fmt.Errorf("verbs: send to rank %d (not connected): %w", peer, hal.ErrUnknownPeer)
	}
	start := time.Now()
	for nap := time.Microsecond; !p.ready.Load(); nap = min(2*nap, time.Millisecond) {
		if e := p.failed.Load(); e != nil {
			return *e
		}
		if d.life.Closed() {
			return errClosed
		}
		if time.Since(start) > d.opts.ConnectTimeout {
			err := fmt.Errorf("verbs: %s: rank %d did not answer the connection request for %v (is it running, with the same device options?): %w",
				d.devName, peer, d.opts.ConnectTimeout, ErrPeerLost)
			d.failConn(peer, err)
			return *p.failed.Load()
		}
		time.Sleep(nap)
	}
	return nil
}

// sendFrame copies a frame toward dst into a free slot and queues it
// (Send, over reliable connections).
func (d *Device) sendFrame(dst hal.Rank, hdr, payload []byte) error {
	if uint64(dst) >= uint64(len(d.fc)) {
		return fmt.Errorf("verbs: send to rank %d of %d: %w", dst, len(d.fc), hal.ErrUnknownPeer)
	}
	p := &d.fc[dst]
	if !p.ready.Load() {
		if err := d.awaitConn(dst); err != nil {
			return err
		}
	}
	if e := p.failed.Load(); e != nil {
		return *e
	}
	t := &d.ftx
	if len(t.free) == 0 {
		d.reapFrames()
		if len(t.free) == 0 {
			d.starved.Store(true)
			d.counters.NoResource.Add(1)
			return hal.ErrNoResource
		}
	}
	slot := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	off := int(slot) * t.slotLen
	n := copy(t.buf[off:], hdr)
	n += copy(t.buf[off+n:], payload)
	t.pend = append(t.pend, pendFrame{peer: dst, slot: slot, len: uint32(n)})
	t.bytes += uint64(n)
	return nil
}

// flushFrames posts the queued frames, consecutive frames to one peer in
// one ibv_post_send of up to 32; the last of each and every 32nd on a
// queue pair ask for a completion. A frame toward a lost peer is dropped
// (its Send, and the next, report the loss); a full send queue leaves
// the rest queued and returns hal.ErrNoResource.
func (d *Device) flushFrames() error {
	t := &d.ftx
	base := C.uint64_t(uintptr(unsafe.Pointer(&t.buf[0])))
	tx := t.tx
	i := 0
	for i < len(t.pend) {
		peer := t.pend[i].peer
		p := &d.fc[peer]
		k := 0
		for ; k < batch && i+k < len(t.pend) && t.pend[i+k].peer == peer; k++ {
			f := t.pend[i+k]
			pos := p.posted + uint64(k)
			p.unsig++
			sig := C.uint32_t(0)
			if p.unsig == batch || k == batch-1 || i+k+1 == len(t.pend) || t.pend[i+k+1].peer != peer {
				sig, p.unsig = 1, 0
			}
			tx[k] = C.weft_tx{wr_id: C.uint64_t(uint64(peer)<<32 | uint64(uint32(pos))), slot: C.uint32_t(f.slot), len: C.uint32_t(f.len), signaled: sig}
		}
		if p.failed.Load() != nil {
			for j := range k {
				t.free = append(t.free, t.pend[i+j].slot)
			}
			i += k
			continue
		}
		rc := C.weft_post_send(p.qp, base, t.mr.lkey, C.uint32_t(t.slotLen), &tx[0], C.int(k), C.uint32_t(t.inline), t.nposted)
		posted := *t.nposted
		var bytes uint64
		for j := range int(posted) {
			p.fifo[p.posted%uint64(len(p.fifo))] = t.pend[i+j].slot
			p.posted++
			bytes += uint64(t.pend[i+j].len)
		}
		d.counters.FramesSent.Add(uint64(posted))
		d.counters.BytesSent.Add(bytes)
		i += int(posted)
		if rc == 0 {
			continue
		}
		p.unsig = batch - 1 // the next frame asks for a completion
		if rc == C.int(syscall.ENOMEM) {
			t.pend = t.pend[:copy(t.pend, t.pend[i:])]
			d.counters.NoResource.Add(1)
			_ = d.reapFrames()
			return hal.ErrNoResource
		}
		d.failConn(peer, fmt.Errorf("verbs: %s: ibv_post_send (frames) toward rank %d: %v: %w", d.devName, peer, syscall.Errno(rc), ErrPeerLost))
		for j := int(posted); j < k; j++ {
			t.free = append(t.free, t.pend[i+j-int(posted)].slot)
		}
		i += k - int(posted)
	}
	t.pend = t.pend[:0]
	// Completions are looked for when half the slots are in flight, and
	// every 16th Flush so that a lost peer is noticed: not on every
	// Flush, one call to the adapter per message less.
	if t.flushes++; len(t.free) < cap(t.free)/2 || t.flushes%16 == 0 {
		return d.reapFrames()
	}
	return nil
}

// reapFrames takes frame send completions and gives back the slots they
// cover; a failed one marks its peer lost.
func (d *Device) reapFrames() error {
	t := &d.ftx
	for {
		got := C.weft_poll_rc(d.fscq, &t.wc[0], batch)
		if got < 0 {
			return fmt.Errorf("verbs: %s: ibv_poll_cq (frame send): %v", d.devName, syscall.Errno(-got))
		}
		for i := range int(got) {
			wc := t.wc[i]
			peer := hal.Rank(uint64(wc.wr_id) >> 32)
			if int(peer) >= len(d.fc) {
				continue
			}
			p := &d.fc[peer]
			last := p.posted - uint64(uint32(p.posted)-uint32(wc.wr_id))
			for ; p.done <= last && p.done < p.posted; p.done++ {
				t.free = append(t.free, p.fifo[p.done%uint64(len(p.fifo))])
			}
			if wc.status != C.IBV_WC_SUCCESS {
				d.failConn(peer, d.frameError(peer, wc.status))
			}
		}
		if got > 0 {
			d.starved.Store(false)
		}
		if got < batch {
			return nil
		}
	}
}

// frameError says why a frame send toward peer failed.
func (d *Device) frameError(peer hal.Rank, st C.int32_t) error {
	msg := C.GoString(C.ibv_wc_status_str(uint32(st)))
	switch uint32(st) {
	case C.IBV_WC_RETRY_EXC_ERR:
		return fmt.Errorf("verbs: %s: frames toward rank %d: %s: its adapter stopped acknowledging (the process or its host is gone, or the link is down): %w",
			d.devName, peer, msg, ErrPeerLost)
	case C.IBV_WC_RNR_RETRY_EXC_ERR:
		return fmt.Errorf("verbs: %s: frames toward rank %d: %s: it posted no receive buffer in time (it stopped polling): %w",
			d.devName, peer, msg, ErrPeerLost)
	}
	return fmt.Errorf("verbs: %s: frames toward rank %d: %s: %w", d.devName, peer, msg, ErrPeerLost)
}

// releaseFrames frees the frame queue pairs, shared receive queue,
// completion queues and rings (release, before the protection domain).
func (d *Device) releaseFrames() {
	for i := range d.fc {
		if d.fc[i].qp != nil {
			C.ibv_destroy_qp(d.fc[i].qp)
		}
	}
	if d.selfRecv.qp != nil {
		C.ibv_destroy_qp(d.selfRecv.qp)
	}
	if d.srq != nil {
		C.ibv_destroy_srq(d.srq)
	}
	if d.ftx.mr != nil {
		C.ibv_dereg_mr(d.ftx.mr)
	}
	if d.frmr != nil {
		C.ibv_dereg_mr(d.frmr)
	}
	if d.fscq != nil {
		C.ibv_destroy_cq(d.fscq)
	}
	if d.fcq != nil {
		C.ibv_destroy_cq(d.fcq)
	}
	if d.ftx.buf != nil {
		_ = unix.Munmap(d.ftx.buf)
	}
	if d.frbuf != nil {
		_ = unix.Munmap(d.frbuf)
	}
}
