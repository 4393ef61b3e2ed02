//go:build verbs && linux && cgo

package verbs

/*
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

// weft_rc_wc is one completion of the RC queue pairs' CQ.
typedef struct {
	uint64_t wr_id;
	int32_t  status;
	uint32_t qp_num;
} weft_rc_wc;

struct ibv_qp *weft_create_rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t send_wr) {
	struct ibv_qp_init_attr a = {0};
	a.send_cq = cq;
	a.recv_cq = cq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_recv_wr = 1; // nothing is ever received: only one-sided operations
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	return ibv_create_qp(pd, &a);
}

int weft_rc_init(struct ibv_qp *qp, uint8_t port) {
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// weft_rc_connect moves an INIT queue pair to RTR toward the remote queue
// pair dqpn (whose first PSN is rq_psn) at dgid, then to RTS with sq_psn.
int weft_rc_connect(struct ibv_qp *qp, uint8_t port, uint8_t sgid_index, const uint8_t *dgid, uint16_t dlid,
                    uint32_t dqpn, uint32_t rq_psn, uint32_t sq_psn, int mtu, uint8_t rd_atomic, uint8_t timeout,
                    uint8_t retry) {
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = port;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc) return rc;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = 7;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// weft_post_rdma posts an RDMA Write (write != 0) or Read of len bytes as
// pieces of at most max_msg bytes, each signaled with wr_id, max_wr pieces
// at most; it returns how many it posted in *posted.
int weft_post_rdma(struct ibv_qp *qp, uint64_t wr_id, int write, uint64_t laddr, uint64_t len, uint32_t lkey,
                   uint64_t raddr, uint32_t rkey, uint64_t max_msg, int max_wr, int *posted) {
	enum { N = 32 };
	struct ibv_send_wr wr[N], *bad = NULL;
	struct ibv_sge sge[N];
	int n = 0, total = 0;
	*posted = 0;
	for (uint64_t off = 0; off < len && total < max_wr;) {
		uint64_t l = len - off < max_msg ? len - off : max_msg;
		sge[n].addr = laddr + off;
		sge[n].length = (uint32_t)l;
		sge[n].lkey = lkey;
		wr[n] = (struct ibv_send_wr){0};
		wr[n].wr_id = wr_id;
		wr[n].sg_list = &sge[n];
		wr[n].num_sge = 1;
		wr[n].opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
		wr[n].send_flags = IBV_SEND_SIGNALED;
		wr[n].wr.rdma.remote_addr = raddr + off;
		wr[n].wr.rdma.rkey = rkey;
		off += l;
		n++;
		total++;
		if (n == N || off == len || total == max_wr) {
			for (int i = 0; i < n; i++) wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
			int rc = ibv_post_send(qp, wr, &bad);
			if (rc) {
				*posted += (int)(bad - wr);
				return rc;
			}
			*posted += n;
			n = 0;
		}
	}
	return 0;
}

int weft_req_notify(struct ibv_cq *cq);

int weft_poll_rc(struct ibv_cq *cq, weft_rc_wc *out, int n) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].qp_num = wc[i].qp_num;
	}
	return got;
}

struct ibv_mr *weft_reg_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int write, int read); // cverbs.go
*/
import "C"

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// helloResend is how long a device waits for a peer's answer to its hello
// before OneSidedReady sends another (hellos are datagrams, and may be
// lost).
const helloResend = 20 * time.Millisecond

// rcState is where one peer's RC queue pair is.
type rcState uint8

const (
	rcNone      rcState = iota // no queue pair
	rcInit                     // created, in INIT: a hello went out, no answer yet
	rcConnected                // RTS toward the peer's queue pair
	rcBroken                   // an operation failed: the queue pair is in error, destroyed when its work has drained
)

// rcPeer is the reliable connection toward one peer.
type rcPeer struct {
	qp        *C.struct_ibv_qp
	qpn, psn  uint32
	state     rcState
	remoteQPN uint32 // connected: the peer's queue pair
	ready     bool   // connected, and the peer said it is connected to this one
	lastHello time.Time
	helloDue  bool // over reliable connections: connLoop sends a hello
	inflight  int  // work requests posted and not completed
}

// rcOp is one Write or Read in flight: the caller's id, how many of its
// work requests are posted and not completed, and what is left to post of
// one that needs more work requests than the queues had room for.
type rcOp struct {
	id    uint64
	peer  hal.Rank
	parts int
	err   error
	used  bool
	write bool
	qpn   uint32 // the queue pair its first part went on: the rest go on it too
	lkey  uint32
	rkey  uint32
	laddr uint64 // where the part not yet posted begins, locally
	raddr uint64 // and at the peer
	left  uint64 // bytes not yet posted
}

// rcSide is the device's one-sided half: a queue pair per peer, created
// when either side first wants one, and one completion queue for all.
type rcSide struct {
	// connMu guards the connection state of peers (and of the frame
	// connections, Device.fc): over reliable connections connLoop takes
	// hellos beside the caller's Write, Read and PollOneSided.
	connMu sync.Mutex

	cq       *C.struct_ibv_cq
	cqSize   int
	depth    int    // work requests one queue pair may have in flight
	maxMsg   uint64 // the most bytes one work request carries
	rdAtomic uint8
	mtu      C.int // the port's active MTU (enum ibv_mtu)
	peers    []rcPeer
	byQPN    map[uint32]hal.Rank
	inflight int          // work requests in flight over all queue pairs (at most cqSize)
	busy     atomic.Int64 // inflight, for Wait (which may run beside the caller)
	ops      []rcOp
	free     []uint32
	// partial is the op (an index into ops) with bytes left to post, if
	// hasPartial: PollOneSided posts more of it as completions free room,
	// and Write and Read return hal.ErrNoResource until all of it is
	// posted, so that transfers go on the queue pairs in order.
	partial    uint32
	hasPartial bool
	// posted is where weft_post_rdma says how many work requests it
	// posted (connMu held).
	posted C.int

	// mu guards the completion queue and wc, completions taken from it
	// but not yet reported (wc[next:n]): PollOneSided holds it; Wait,
	// which may run beside, only tries it, to look for completions
	// before it sleeps.
	mu       sync.Mutex
	wc       [batch]C.weft_rc_wc
	next, n  int
	armed    atomic.Bool // the CQ will signal the channel on its next completion
	hello    hello
	helloBuf []byte

	mrMu   sync.Mutex
	mrs    map[uint64]*C.struct_ibv_mr
	nextMR uint64
}

// openRC prepares the one-sided half (Open): the completion queue; queue
// pairs come later, one per peer.
func (d *Device) openRC(attr *C.struct_ibv_port_attr) error {
	var da C.struct_ibv_device_attr
	if rc := C.ibv_query_device(d.ctx, &da); rc != 0 {
		return fmt.Errorf("verbs: %s: ibv_query_device: %v", d.devName, syscall.Errno(rc))
	}
	r := &d.rc
	r.cqSize = min(d.opts.RCQueue, int(da.max_cqe))
	r.depth = min(rcDepth, r.cqSize, int(da.max_qp_wr))
	r.rdAtomic = uint8(max(1, min(16, int(da.max_qp_rd_atom), int(da.max_qp_init_rd_atom))))
	r.maxMsg = min(uint64(attr.max_msg_sz), 1<<30)
	r.mtu = C.int(attr.active_mtu)
	// On the receive CQ's channel: a Wait wakes for a completion too.
	if r.cq = C.ibv_create_cq(d.ctx, C.int(r.cqSize), nil, d.ch, 0); r.cq == nil {
		return d.verbErr("ibv_create_cq (RC)")
	}
	r.peers = make([]rcPeer, len(d.peers))
	r.byQPN = make(map[uint32]hal.Rank)
	r.mrs = make(map[uint64]*C.struct_ibv_mr)
	r.helloBuf = make([]byte, 0, helloLen)
	return nil
}

// rcDepth bounds the work requests one RC queue pair has in flight.
const rcDepth = 256

// rdmaTimeout is the RDMA queue pairs' local ACK timeout exponent
// (4.096 µs × 2^14 ≈ 67 ms), rdmaRetry their retry count (7: rxe retries
// for ever; other adapters 7 times).
const (
	rdmaTimeout = 14
	rdmaRetry   = 7
)

// releaseRC frees the queue pairs, registrations and completion queue
// (release, before the protection domain goes).
func (d *Device) releaseRC() {
	r := &d.rc
	for i := range r.peers {
		if r.peers[i].qp != nil {
			C.ibv_destroy_qp(r.peers[i].qp)
		}
	}
	r.mrMu.Lock()
	for _, mr := range r.mrs {
		C.ibv_dereg_mr(mr)
	}
	r.mrs = nil
	r.mrMu.Unlock()
	if r.cq != nil {
		C.ibv_destroy_cq(r.cq)
	}
}

// Register registers mem with the adapter for local access and the remote
// access acc allows (hal.OneSided). Safe from any goroutine.
func (d *Device) Register(mem []byte, acc hal.Access) (hal.MR, error) {
	if len(mem) == 0 {
		return hal.MR{}, fmt.Errorf("verbs: register: empty region")
	}
	if !d.life.Enter() {
		return hal.MR{}, errClosed
	}
	defer d.life.Leave()
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	var w, rd C.int
	if acc&hal.AccessWrite != 0 {
		w = 1
	}
	if acc&hal.AccessRead != 0 {
		rd = 1
	}
	mr, err := C.weft_reg_mr(d.pd, C.uint64_t(addr), C.size_t(len(mem)), w, rd)
	if mr == nil {
		if lim := currentMemlock(); (errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EPERM)) &&
			lim != unix.RLIM_INFINITY {
			return hal.MR{}, fmt.Errorf("verbs: %s: ibv_reg_mr of %d bytes for RDMA: %v: RLIMIT_MEMLOCK is %d bytes and the kernel "+
				"locks registered memory: raise it before starting the job (`ulimit -l unlimited`)", d.devName, len(mem), err, lim)
		}
		return hal.MR{}, fmt.Errorf("verbs: %s: ibv_reg_mr of %d bytes at %#x: %v", d.devName, len(mem), addr, err)
	}
	r := &d.rc
	r.mrMu.Lock()
	defer r.mrMu.Unlock()
	if r.mrs == nil { // closed meanwhile
		C.ibv_dereg_mr(mr)
		return hal.MR{}, errClosed
	}
	r.nextMR++
	r.mrs[r.nextMR] = mr
	return hal.MR{Addr: addr, Len: uint64(len(mem)), LKey: uint32(mr.lkey), RKey: uint32(mr.rkey), ID: r.nextMR}, nil
}

// Deregister undoes one Register (hal.OneSided): after it the adapter
// refuses the registration's keys.
func (d *Device) Deregister(m hal.MR) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	r := &d.rc
	r.mrMu.Lock()
	mr, ok := r.mrs[m.ID]
	delete(r.mrs, m.ID)
	r.mrMu.Unlock()
	if !ok {
		return fmt.Errorf("verbs: deregister: no registration %d", m.ID)
	}
	if rc := C.ibv_dereg_mr(mr); rc != 0 {
		return fmt.Errorf("verbs: %s: ibv_dereg_mr: %v", d.devName, syscall.Errno(rc))
	}
	return nil
}

// OneSidedReady reports whether Write and Read toward peer may be posted;
// if not, it starts the connection (a hello) or, when the last hello has
// gone unanswered for a while, sends another (hal.OneSided).
func (d *Device) OneSidedReady(peer hal.Rank) bool {
	r := &d.rc
	if int(peer) >= len(r.peers) || peer == d.cfg.Rank {
		return false
	}
	r.connMu.Lock()
	defer r.connMu.Unlock()
	p := &r.peers[peer]
	if p.ready {
		return true
	}
	if !d.life.Enter() {
		return false
	}
	defer d.life.Leave()
	switch p.state {
	case rcBroken:
		d.drainBroken(peer)
		return false
	case rcNone:
		if err := d.newRCQP(peer); err != nil {
			return false
		}
	}
	if now := time.Now(); now.Sub(p.lastHello) >= helloResend {
		p.lastHello = now
		if d.fc != nil {
			p.helloDue = true // the UD queue pair is connLoop's
			d.kickConn()
		} else {
			d.sendHello(peer, true)
		}
	}
	return false
}

// newRCQP creates peer's queue pair and moves it to INIT.
func (d *Device) newRCQP(peer hal.Rank) error {
	r := &d.rc
	p := &r.peers[peer]
	qp := C.weft_create_rc_qp(d.pd, r.cq, C.uint32_t(r.depth))
	if qp == nil {
		return d.verbErr("ibv_create_qp (RC)")
	}
	if rc := C.weft_rc_init(qp, C.uint8_t(d.port)); rc != 0 {
		C.ibv_destroy_qp(qp)
		return fmt.Errorf("verbs: %s: RC queue pair to INIT: %v", d.devName, syscall.Errno(rc))
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	*p = rcPeer{qp: qp, qpn: uint32(qp.qp_num), psn: binary.LittleEndian.Uint32(b[:]) & 0xffffff, state: rcInit}
	r.byQPN[p.qpn] = peer
	return nil
}

// destroyRCQP destroys peer's queue pair, which has no work in flight.
func (d *Device) destroyRCQP(peer hal.Rank) {
	r := &d.rc
	p := &r.peers[peer]
	if p.qp != nil {
		delete(r.byQPN, p.qpn)
		C.ibv_destroy_qp(p.qp)
	}
	*p = rcPeer{}
}

// drainBroken destroys a broken queue pair once its work has drained, so
// that the next OneSidedReady connects afresh.
func (d *Device) drainBroken(peer hal.Rank) {
	if p := &d.rc.peers[peer]; p.state == rcBroken && p.inflight == 0 {
		d.destroyRCQP(peer)
	}
}

// sendHello sends peer a hello describing this device's queue pair toward
// it; want asks for an answer. A full send ring drops it (the sender of a
// hello that is not answered sends another).
func (d *Device) sendHello(peer hal.Rank, want bool) {
	r := &d.rc
	p := &r.peers[peer]
	r.hello = hello{Want: want, JobKey: d.cfg.JobKey, Src: uint32(d.cfg.Rank), Dst: uint32(peer), QPN: p.qpn, PSN: p.psn}
	if p.state == rcConnected {
		r.hello.PeerQPN = p.remoteQPN
	}
	r.helloBuf = appendHello(r.helloBuf[:0], &r.hello)
	if d.queueRaw(peer, r.helloBuf) == nil {
		_ = d.flushUD()
	}
}

// onHello handles a hello that came on the UD queue pair (Poll, or
// connLoop over reliable connections; rc.connMu held).
func (d *Device) onHello(b []byte) {
	r := &d.rc
	var h hello
	switch err := decodeHello(b, &h); {
	case err != nil:
		d.counters.Drop(hal.DropCRC)
		return
	case h.JobKey != d.cfg.JobKey:
		d.counters.Drop(hal.DropJobKey)
		return
	case h.Dst != uint32(d.cfg.Rank) || int(h.Src) >= len(r.peers) || h.Src == uint32(d.cfg.Rank):
		d.counters.Drop(hal.DropPeer)
		return
	}
	if h.Frames {
		if d.fc == nil {
			d.counters.Drop(hal.DropPeer) // the peer sends frames over RC, this device datagrams
			return
		}
		d.onFrameHello(&h)
		return
	}
	peer := hal.Rank(h.Src)
	p := &r.peers[peer]
	if p.state == rcConnected && p.remoteQPN != h.QPN || p.state == rcBroken {
		// The peer has a new queue pair (it restarted, or its old one
		// broke): this one goes too, once its work has drained.
		if p.inflight > 0 {
			p.state, p.ready = rcBroken, false
			return
		}
		d.destroyRCQP(peer)
	}
	if p.state == rcNone {
		if d.newRCQP(peer) != nil {
			return
		}
	}
	if p.state == rcInit {
		a, ok := d.peerAddr(peer)
		if !ok {
			return
		}
		if rc := d.rcConnect(p.qp, a, h.QPN, h.PSN, p.psn, rdmaTimeout, rdmaRetry); rc != 0 {
			// Left in INIT or RTR: start again at the next hello.
			d.destroyRCQP(peer)
			return
		}
		p.state, p.remoteQPN = rcConnected, h.QPN
	}
	if h.PeerQPN == p.qpn {
		p.ready = true
	}
	if h.Want || !p.ready {
		d.sendHello(peer, !p.ready)
	}
}

// peerAddr is the address Connect was given for peer.
func (d *Device) peerAddr(peer hal.Rank) (Address, bool) {
	if int(peer) >= len(d.addrs) {
		return Address{}, false
	}
	a := d.addrs[peer].Load()
	if a == nil {
		return Address{}, false
	}
	return *a, true
}

// Write posts an RDMA Write of local to raddr at peer (hal.OneSided).
func (d *Device) Write(peer hal.Rank, id uint64, local []byte, mr hal.MR, raddr uint64, rkey uint32) error {
	return d.postRDMA(peer, id, true, local, mr, raddr, rkey)
}

// Read posts an RDMA Read from raddr at peer into local (hal.OneSided).
func (d *Device) Read(peer hal.Rank, id uint64, local []byte, mr hal.MR, raddr uint64, rkey uint32) error {
	return d.postRDMA(peer, id, false, local, mr, raddr, rkey)
}

func (d *Device) postRDMA(peer hal.Rank, id uint64, write bool, local []byte, mr hal.MR, raddr uint64, rkey uint32) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	r := &d.rc
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if int(peer) >= len(r.peers) || !r.peers[peer].ready {
		return fmt.Errorf("verbs: RDMA toward rank %d: %w", peer, hal.ErrNotConnected)
	}
	if len(local) == 0 {
		// Nothing to post: a work request of no bytes would complete,
		// but its completion would tell the caller nothing.
		return fmt.Errorf("verbs: RDMA of 0 bytes toward rank %d: a Write or Read moves at least one byte", peer)
	}
	if !mr.Contains(local) {
		return fmt.Errorf("verbs: RDMA of %d bytes outside registration %d (%d bytes at %#x)", len(local), mr.ID, mr.Len, mr.Addr)
	}
	p := &r.peers[peer]
	room := min(r.depth-p.inflight, r.cqSize-r.inflight)
	if room <= 0 || r.hasPartial {
		d.counters.NoResource.Add(1)
		return hal.ErrNoResource
	}
	var slot uint32
	if n := len(r.free); n > 0 {
		slot = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		slot = uint32(len(r.ops))
		r.ops = append(r.ops, rcOp{})
	}
	op := &r.ops[slot]
	*op = rcOp{id: id, peer: peer, used: true, write: write, qpn: p.qpn, lkey: mr.LKey, rkey: rkey,
		laddr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(local)))), raddr: raddr, left: uint64(len(local))}
	rc := d.postMore(slot, room)
	if rc == 0 {
		if op.left > 0 {
			// More work requests than the queues have room for: the
			// rest goes as completions free room (PollOneSided).
			r.partial, r.hasPartial = slot, true
		}
		return nil
	}
	err := fmt.Errorf("verbs: %s: ibv_post_send (RDMA) toward rank %d: %v", d.devName, peer, syscall.Errno(rc))
	if op.parts == 0 {
		*op = rcOp{}
		r.free = append(r.free, slot)
		if rc == C.int(syscall.ENOMEM) {
			d.counters.NoResource.Add(1)
			return hal.ErrNoResource
		}
		return err
	}
	// Part of it went: its completion reports the failure.
	op.err, op.left = err, 0
	return nil
}

// postMore posts up to room more work requests of the op in slot, from
// where the last left off, and returns ibv_post_send's error (rc.connMu
// held).
func (d *Device) postMore(slot uint32, room int) C.int {
	r := &d.rc
	op := &r.ops[slot]
	p := &r.peers[op.peer]
	var w C.int
	if op.write {
		w = 1
	}
	// (r.posted, not a local: a local's address handed to C escapes, an
	// allocation per post.)
	rc := C.weft_post_rdma(p.qp, C.uint64_t(slot), w, C.uint64_t(op.laddr), C.uint64_t(op.left), C.uint32_t(op.lkey),
		C.uint64_t(op.raddr), C.uint32_t(op.rkey), C.uint64_t(r.maxMsg), C.int(room), &r.posted)
	posted := r.posted
	// Every piece but the last is maxMsg bytes long.
	n := min(op.left, uint64(posted)*r.maxMsg)
	op.laddr += n
	op.raddr += n
	op.left -= n
	op.parts += int(posted)
	p.inflight += int(posted)
	r.inflight += int(posted)
	r.busy.Store(int64(r.inflight))
	return rc
}

// continuePartial posts more of the op with bytes left to post, as far as
// the queues have room (PollOneSided, rc.mu held). A failed post or a
// broken connection ends the op once its posted parts have completed; if
// none is in flight, it reports the op to fn at once and returns true.
func (d *Device) continuePartial(fn func(id uint64, err error)) bool {
	r := &d.rc
	r.connMu.Lock()
	slot := r.partial
	op := &r.ops[slot]
	p := &r.peers[op.peer]
	switch {
	case op.err != nil:
		op.left = 0
	case !p.ready || p.qpn != op.qpn:
		op.err = fmt.Errorf("verbs: %s: RDMA toward rank %d: the connection broke with %d bytes not yet posted: %w",
			d.devName, op.peer, op.left, hal.ErrNotConnected)
		op.left = 0
	default:
		if room := min(r.depth-p.inflight, r.cqSize-r.inflight); room > 0 {
			if rc := d.postMore(slot, room); rc != 0 {
				op.err = fmt.Errorf("verbs: %s: ibv_post_send (RDMA) toward rank %d: %v", d.devName, op.peer, syscall.Errno(rc))
				op.left = 0
			}
		}
	}
	if op.left > 0 || op.parts > 0 {
		// More to post, or the last completion reports it.
		r.hasPartial = op.left > 0
		r.connMu.Unlock()
		return false
	}
	r.hasPartial = false
	id, err := op.id, op.err
	*op = rcOp{}
	r.free = append(r.free, slot)
	r.connMu.Unlock() // not around fn, which may post again
	fn(id, err)
	return true
}

// PollOneSided reports the Writes and Reads that have completed
// (hal.OneSided).
func (d *Device) PollOneSided(fn func(id uint64, err error)) (int, error) {
	r := &d.rc
	if r.inflight == 0 {
		return 0, nil
	}
	if !d.life.Enter() {
		return 0, errClosed
	}
	defer d.life.Leave()
	r.mu.Lock()
	defer r.mu.Unlock()
	done := 0
	for r.inflight > 0 {
		if r.next == r.n {
			got := C.weft_poll_rc(r.cq, &r.wc[0], batch)
			if got < 0 {
				return done, fmt.Errorf("verbs: %s: ibv_poll_cq (RC): %v", d.devName, syscall.Errno(-got))
			}
			if got == 0 {
				break
			}
			r.next, r.n = 0, int(got)
		}
		for ; r.next < r.n; r.next++ {
			wc := r.wc[r.next]
			slot := uint32(wc.wr_id)
			if int(slot) >= len(r.ops) || !r.ops[slot].used {
				continue
			}
			op := &r.ops[slot]
			r.connMu.Lock() // not around fn, which may post again
			p := &r.peers[op.peer]
			p.inflight--
			r.inflight--
			op.parts--
			if wc.status != C.IBV_WC_SUCCESS {
				if op.err == nil {
					op.err = d.wcError(op.peer, wc.status)
				}
				op.left = 0 // nothing more of it is posted
				// The queue pair is in error now: what is still posted
				// on it completes flushed, and it is replaced.
				p.state, p.ready = rcBroken, false
			}
			r.connMu.Unlock()
			if op.parts > 0 || op.left > 0 {
				continue // more to complete, or to post
			}
			if r.hasPartial && r.partial == slot {
				r.hasPartial = false
			}
			id, err := op.id, op.err
			*op = rcOp{}
			r.free = append(r.free, slot)
			done++
			fn(id, err)
		}
	}
	if r.hasPartial && d.continuePartial(fn) {
		done++
	}
	r.busy.Store(int64(r.inflight))
	return done, nil
}

// peekRC arms the RC completion queue if needed and reports whether
// completions wait for PollOneSided, taking them from the queue when none
// are held (Wait, before it sleeps).
func (d *Device) peekRC() (bool, error) {
	r := &d.rc
	if !r.mu.TryLock() {
		return true, nil // PollOneSided is at work: it reports what came
	}
	defer r.mu.Unlock()
	if r.next < r.n {
		return true, nil
	}
	if !r.armed.Load() {
		if rc := C.weft_req_notify(r.cq); rc != 0 {
			return false, fmt.Errorf("verbs: %s: ibv_req_notify_cq (RC): %v", d.devName, syscall.Errno(rc))
		}
		r.armed.Store(true)
	}
	got := C.weft_poll_rc(r.cq, &r.wc[0], batch)
	if got < 0 {
		return false, fmt.Errorf("verbs: %s: ibv_poll_cq (RC): %v", d.devName, syscall.Errno(-got))
	}
	r.next, r.n = 0, int(got)
	return got > 0, nil
}

// wcError describes a failed RC completion; the peer's adapter refusing
// the access wraps hal.ErrRemoteAccess.
func (d *Device) wcError(peer hal.Rank, st C.int32_t) error {
	msg := C.GoString(C.ibv_wc_status_str(uint32(st)))
	switch uint32(st) {
	case C.IBV_WC_REM_ACCESS_ERR, C.IBV_WC_REM_INV_REQ_ERR:
		return fmt.Errorf("verbs: %s: RDMA toward rank %d: %s: %w", d.devName, peer, msg, hal.ErrRemoteAccess)
	case C.IBV_WC_WR_FLUSH_ERR:
		return fmt.Errorf("verbs: %s: RDMA toward rank %d: %s (the queue pair broke on an earlier request): %w",
			d.devName, peer, msg, hal.ErrNotConnected)
	}
	return fmt.Errorf("verbs: %s: RDMA toward rank %d completed with %s", d.devName, peer, msg)
}

// oneSidedBusy reports whether Writes or Reads are in flight, whose
// completions Wait must look for too.
func (d *Device) oneSidedBusy() bool { return d.rc.busy.Load() > 0 }
