//go:build verbs && linux && cgo

package verbs

/*
#include <infiniband/verbs.h>
#include <stdlib.h>

// From cverbs.go (one preamble may not define what another file's uses,
// so they are declared again here).
typedef struct { uint32_t slot; uint32_t len; int32_t status; uint32_t pad; } weft_rx;
typedef struct { struct ibv_ah *ah; uint64_t wr_id; uint32_t slot; uint32_t len; uint32_t qpn; uint32_t qkey; uint32_t signaled; uint32_t pad; } weft_tx;
int weft_poll_rx(struct ibv_cq *cq, weft_rx *out, int n);
int weft_poll_tx(struct ibv_cq *cq, uint64_t *last, int *bad);
int weft_post_recv(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len, const uint32_t *slots, int n);
int weft_post_send(struct ibv_qp *qp, uint64_t base, uint32_t lkey, uint32_t slot_len, const weft_tx *tx, int n, uint32_t inline_len, int *posted);
int weft_get_event(struct ibv_comp_channel *ch);
int weft_req_notify(struct ibv_cq *cq);
int weft_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int weft_query_gid(struct ibv_context *ctx, uint8_t port, uint32_t index, struct ibv_gid_entry *e);
int weft_qp_init(struct ibv_qp *qp, uint8_t port, uint32_t qkey);
int weft_qp_rtr_rts(struct ibv_qp *qp);
struct ibv_qp *weft_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t send_wr, uint32_t recv_wr);
struct ibv_ah *weft_create_ah(struct ibv_pd *pd, uint8_t port, uint8_t sgid_index, const uint8_t *dgid, uint16_t dlid);
struct ibv_device *weft_dev_at(struct ibv_device **list, int i);
struct ibv_mr *weft_reg_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int write, int read);
int weft_post_srq_recv(struct ibv_srq *srq, uint64_t base, uint32_t lkey, uint32_t slot_len, const uint32_t *slots, int n);
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/lifecycle"
	"golang.org/x/sys/unix"
)

// Built reports whether this binary has the verbs device.
const Built = true

// grhLen is the Global Route Header the adapter writes in front of every
// datagram it receives on a UD queue pair (for RoCE v2 over IPv4, the IPv4
// header sits in its last 20 bytes).
const grhLen = 40

// batch is how many work requests or completions one C call handles
// (WEFT_BATCH in cverbs.go).
const batch = 32

var (
	errClosed = fmt.Errorf("verbs: %w", hal.ErrClosed)
	errShort  = fmt.Errorf("verbs: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
)

// Device is a hal.Device over rdma-core: frames over a reliable-connected
// queue pair per peer (or, with Options.Datagrams, over one
// unreliable-datagram queue pair). Its methods follow the hal.Device contract: Send, Flush and Poll are
// serialised by the caller; Wait may run beside them; Close, Caps, Addr and
// Counters may be called at any time.
type Device struct {
	cfg      hal.Config
	opts     Options
	caps     hal.Caps
	local    Address
	addr     string
	devName  string
	port     uint8
	gidIndex uint8
	counters hal.Counters
	life     lifecycle.Guard

	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	ch   *C.struct_ibv_comp_channel
	scq  *C.struct_ibv_cq
	rcq  *C.struct_ibv_cq
	qp   *C.struct_ibv_qp
	smr  *C.struct_ibv_mr
	rmr  *C.struct_ibv_mr
	efd  int // eventfd: Close and context cancellation wake a blocked Wait
	sbuf []byte
	rbuf []byte

	// Frames over reliable connections (frames_linux.go); all nil with
	// Options.Datagrams. The UD queue pair (qp, scq, rcq, sbuf, rbuf)
	// then carries hellos only and belongs to connLoop, whose completion
	// channel is chUD and whose wake-up is connEfd.
	fc          []fconn // per peer
	selfRecv    fconn   // the queue pair this rank's frames to itself arrive on
	ftx         ftxRing
	fscq, fcq   *C.struct_ibv_cq
	srq         *C.struct_ibv_srq
	frbuf       []byte
	frmr        *C.struct_ibv_mr
	chUD        *C.struct_ibv_comp_channel
	connEfd     int
	connPending bool        // a frame connection Connect asked for is not up (rc.connMu)
	starved     atomic.Bool // Send found no free slot: Wait wakes for send completions too
	// Peers found lost (peerloss_linux.go): lossNew not yet taken by
	// LostPeers, nlost counting them all, lossSeen the count Wait last
	// returned for.
	lossMu   sync.Mutex
	lossNew  []hal.LostPeer
	nlost    atomic.Uint64
	lossSeen atomic.Uint64
	udSlot   int // the UD receive slot's length

	// peers[r] is how to reach rank r; set by Connect (and Open for this
	// rank itself). Replaced address handles are kept in retired until
	// Close: a frame queued before the replacement may still use one.
	peers   []atomic.Pointer[peer]
	addrs   []atomic.Pointer[Address] // what Connect was given, for the RC queue pairs
	peersMu sync.Mutex
	retired []*C.struct_ibv_ah

	// rc is the one-sided half (rc_linux.go): reliable-connected queue
	// pairs for hardware RDMA Write and Read.
	rc rcSide

	tx txRing

	// scratch holds the batches the rings hand C (C memory, freed by
	// release).
	scratch *scratch

	// rxMu guards rx: Poll holds it; Wait, which may run beside a Poll,
	// only tries it, to look for completions before it sleeps.
	rxMu  sync.Mutex
	rx    rxRing
	armed atomic.Bool // the receive CQ will signal the channel on its next completion
}

// peer is a destination: address handle, queue pair and queue key.
type peer struct {
	ah   *C.struct_ibv_ah
	qpn  uint32
	qkey uint32
}

// txRing is the send side: registered slots used in order. Frames from
// head back to posted are queued (copied, not yet handed to the adapter),
// from posted back to tail in flight. Positions count up forever; slot =
// position % len(desc).
type txRing struct {
	slotLen            int
	head, posted, tail uint64
	desc               []C.weft_tx
	bytes              uint64 // queued bytes, counted as sent at Flush
	// flushUD's batch and the counts weft_post_send and weft_poll_tx
	// return, in the device's scratch (C memory: see scratch).
	batch   *[batch]C.weft_tx
	nposted *C.int
	last    *C.uint64_t
	bad     *C.int
}

// rxRing is the receive side: completions taken from the CQ but not yet
// delivered (Wait may take some), and buffers to post again. Over
// reliable connections cq is the frame CQ and the buffers are the shared
// receive queue's; with Datagrams the UD queue pair's, each beginning with
// the grh bytes of the Global Route Header.
type rxRing struct {
	slotLen int
	grh     int
	cq      *C.struct_ibv_cq
	buf     []byte
	mr      *C.struct_ibv_mr
	cqe     *[batch]C.weft_rx // in the device's scratch, as repost
	next, n int
	repost  *[2 * batch]C.uint32_t
	nrepost int
	// least is how many buffers Poll collects before it posts them again:
	// 1 with Datagrams; over reliable connections half a batch, or half
	// the ring when that is smaller, so that a small ring still has
	// buffers posted while Poll collects the others.
	least   int
	hdr     hal.Header // passed to Poll's callback; reused so delivery does not allocate
	pollfds [2]unix.PollFd
}

// Open opens the device opts names (or the first with an active port) for
// one rank of a job: a UD queue pair, its completion queues and channel,
// and send and receive rings registered once. The errors say what to do
// when the host has no usable device, the device file is not accessible, a
// port is down, or RLIMIT_MEMLOCK is too low for the rings.
func Open(cfg hal.Config, opts Options) (*Device, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Device{cfg: cfg, opts: opts, efd: -1, connEfd: -1, scratch: newScratch()}
	sc := d.scratch
	d.tx.batch, d.tx.nposted, d.tx.last, d.tx.bad = &sc.utx, &sc.uposted, &sc.last, &sc.bad
	d.ftx.tx, d.ftx.wc, d.ftx.nposted = &sc.ftx, &sc.fwc, &sc.fposted
	d.life.Release = d.release
	if err := d.open(); err != nil {
		d.release()
		return nil, err
	}
	if d.fc != nil {
		d.life.Enter() // connLoop's, left when it returns
		go d.connLoop()
	}
	return d, nil
}

// open does Open's work; on error, release frees what it made.
func (d *Device) open() error {
	if err := d.openContext(); err != nil {
		return err
	}
	var attr C.struct_ibv_port_attr
	if rc := C.weft_query_port(d.ctx, C.uint8_t(d.port), &attr); rc != 0 {
		return fmt.Errorf("verbs: %s port %d: ibv_query_port: %v", d.devName, d.port, syscall.Errno(rc))
	}
	if err := d.pickGID(&attr); err != nil {
		return err
	}
	var err error
	activeMTU := 128 << int(attr.active_mtu) // IBV_MTU_256 is 1
	rcFrames := !d.opts.Datagrams
	udSend, udRecv := d.opts.SendRing, d.opts.RecvRing
	d.caps = hal.Caps{MTU: min(activeMTU-hal.HeaderLen, hal.MaxPayload)}
	if rcFrames {
		udSend, udRecv = helloRing, helloRing
		d.caps = hal.Caps{MTU: FrameSlot - hal.HeaderLen, Reliable: true, Ordered: true}
	}
	if d.opts.MTU > 0 {
		d.caps.MTU = min(d.caps.MTU, d.opts.MTU)
	}
	d.tx.slotLen = roundUp(activeMTU, 64)
	d.udSlot = roundUp(grhLen+activeMTU, 64)
	sendBytes := pageRound(d.tx.slotLen * udSend)
	recvBytes := pageRound(d.udSlot * udRecv)
	need := uint64(sendBytes + recvBytes)
	if rcFrames {
		need += uint64(pageRound(FrameSlot*d.opts.SendRing) + pageRound(FrameSlot*d.opts.RecvRing))
	}
	if !d.opts.skipMemlockCheck {
		if err := checkMemlock(need); err != nil {
			return err
		}
	}

	if d.pd = C.ibv_alloc_pd(d.ctx); d.pd == nil {
		return d.verbErr("ibv_alloc_pd")
	}
	if d.ch = C.ibv_create_comp_channel(d.ctx); d.ch == nil {
		return d.verbErr("ibv_create_comp_channel")
	}
	if err := unix.SetNonblock(int(d.ch.fd), true); err != nil {
		return fmt.Errorf("verbs: completion channel: %w", err)
	}
	// With Datagrams only receives wake a Wait, so only the receive CQ
	// has the channel; over reliable connections the UD receive CQ has
	// connLoop's.
	udch := d.ch
	if rcFrames {
		if d.chUD = C.ibv_create_comp_channel(d.ctx); d.chUD == nil {
			return d.verbErr("ibv_create_comp_channel (hellos)")
		}
		if err := unix.SetNonblock(int(d.chUD.fd), true); err != nil {
			return fmt.Errorf("verbs: completion channel: %w", err)
		}
		udch = d.chUD
		if d.connEfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return fmt.Errorf("verbs: eventfd: %w", err)
		}
	}
	if d.scq = C.ibv_create_cq(d.ctx, C.int(udSend), nil, nil, 0); d.scq == nil {
		return d.verbErr("ibv_create_cq (send)")
	}
	if d.rcq = C.ibv_create_cq(d.ctx, C.int(udRecv), nil, udch, 0); d.rcq == nil {
		return d.verbErr("ibv_create_cq (receive)")
	}
	if d.qp = C.weft_create_qp(d.pd, d.scq, d.rcq, C.uint32_t(udSend), C.uint32_t(udRecv)); d.qp == nil {
		return d.verbErr("ibv_create_qp (UD)")
	}
	d.local.QKey = qkeyFor(d.cfg.JobKey)
	d.local.QPN = uint32(d.qp.qp_num)
	d.local.LID = uint16(attr.lid)
	if rc := C.weft_qp_init(d.qp, C.uint8_t(d.port), C.uint32_t(d.local.QKey)); rc != 0 {
		return fmt.Errorf("verbs: %s: queue pair to INIT: %v", d.devName, syscall.Errno(rc))
	}
	if rc := C.weft_qp_rtr_rts(d.qp); rc != 0 {
		return fmt.Errorf("verbs: %s: queue pair to RTR/RTS: %v", d.devName, syscall.Errno(rc))
	}

	// The rings live outside the Go heap, in anonymous mappings: their
	// lifetime is the device's, registration pins whole pages (so no Go
	// object may share one), and the garbage collector neither scans nor
	// moves them. runtime.Pinner would do for memory the caller owns
	// (lazyreg's job), not for buffers the device owns from Open to Close.
	if d.sbuf, err = unix.Mmap(-1, 0, sendBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("verbs: send ring of %d bytes: %w", sendBytes, err)
	}
	if d.rbuf, err = unix.Mmap(-1, 0, recvBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("verbs: receive ring of %d bytes: %w", recvBytes, err)
	}
	if d.smr, err = d.register(d.sbuf, need); err != nil {
		return err
	}
	if d.rmr, err = d.register(d.rbuf, need); err != nil {
		return err
	}
	d.tx.desc = make([]C.weft_tx, udSend)
	d.rx = rxRing{slotLen: d.udSlot, grh: grhLen, cq: d.rcq, buf: d.rbuf, mr: d.rmr, cqe: &d.scratch.cqe, repost: &d.scratch.repost, least: 1}
	for s := 0; s < udRecv; s++ {
		d.rx.repost[d.rx.nrepost] = C.uint32_t(s)
		d.rx.nrepost++
		if d.rx.nrepost == batch {
			if err := d.postRecv(); err != nil {
				return err
			}
		}
	}
	if err := d.postRecv(); err != nil {
		return err
	}

	if d.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("verbs: eventfd: %w", err)
	}
	d.rx.pollfds = [2]unix.PollFd{{Fd: int32(d.ch.fd), Events: unix.POLLIN}, {Fd: int32(d.efd), Events: unix.POLLIN}}
	d.addr = d.local.String()
	d.peers = make([]atomic.Pointer[peer], max(d.cfg.Size, int(d.cfg.Rank)+1))
	d.addrs = make([]atomic.Pointer[Address], len(d.peers))
	if err := d.openRC(&attr); err != nil {
		return err
	}
	if rcFrames {
		if err := d.openFrames(FrameSlot); err != nil {
			return err
		}
		if err := d.connectSelf(); err != nil {
			return err
		}
	}
	// Frames to this rank itself go through the adapter's loopback.
	return d.connect(d.cfg.Rank, d.local)
}

// openContext finds the device and port and opens the device.
func (d *Device) openContext() error {
	var n C.int
	list := C.ibv_get_device_list(&n)
	if list == nil || n == 0 {
		if list != nil {
			C.ibv_free_device_list(list)
		}
		return noDeviceError(sysClassDir, devDir)
	}
	defer C.ibv_free_device_list(list)
	var names, states []string
	for i := 0; i < int(n); i++ {
		dev := C.weft_dev_at(list, C.int(i))
		name := C.GoString(C.ibv_get_device_name(dev))
		names = append(names, name)
		if d.opts.Device != "" && name != d.opts.Device {
			continue
		}
		ctx, err := C.ibv_open_device(dev)
		if ctx == nil {
			return openError(name, devDir+"/"+C.GoString(&dev.dev_name[0]), err)
		}
		port, state, err := firstActivePort(ctx, name, d.opts.Port)
		if err != nil {
			C.ibv_close_device(ctx)
			return err
		}
		if port == 0 {
			C.ibv_close_device(ctx)
			if d.opts.Device != "" || d.opts.Port != 0 {
				p := max(d.opts.Port, 1)
				return portError(name, p, state, netdevOf(sysClassDir, name))
			}
			states = append(states, fmt.Sprintf("%s port 1 is %s", name, state))
			continue
		}
		d.ctx, d.devName, d.port = ctx, name, uint8(port)
		return nil
	}
	if d.opts.Device != "" {
		return fmt.Errorf("%w: no device named %q (there are: %v; `ibv_devices` lists them)", ErrNoDevice, d.opts.Device, names)
	}
	if len(names) == 1 {
		return portError(names[0], 1, stateOf(states[0]), netdevOf(sysClassDir, names[0]))
	}
	return fmt.Errorf("%w: no device has an active port (%v): bring up the network interface under one "+
		"(`ip link set IFACE up`), or choose one with Options.Device", ErrPortNotActive, states)
}

// openError explains a failed ibv_open_device. libibverbs falls back to
// other ways of reaching the device when open(2) fails, and reports the
// last failure, so the file is opened here again to see why.
func openError(name, path string, err error) error {
	fd, oerr := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if oerr == nil {
		unix.Close(fd)
	}
	switch {
	case isPermission(oerr):
		return permissionError(name, path, oerr)
	case errors.Is(oerr, syscall.ENOENT):
		return missingFileError(name, path)
	}
	if err == nil {
		err = syscall.EIO
	}
	return fmt.Errorf("verbs: cannot open device %s (%s): %w", name, path, err)
}

// stateOf takes the state back out of "dev port 1 is STATE".
func stateOf(s string) string {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ' ' {
			return s[i+1:]
		}
	}
	return s
}

// firstActivePort returns want if it is active (0 and its state if not),
// or for want 0 the device's first active port (0 and the first port's
// state if none).
func firstActivePort(ctx *C.struct_ibv_context, name string, want int) (port int, state string, err error) {
	var da C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &da); rc != 0 {
		return 0, "", fmt.Errorf("verbs: %s: ibv_query_device: %v", name, syscall.Errno(rc))
	}
	ports := int(da.phys_port_cnt)
	if want > ports {
		return 0, "", fmt.Errorf("%w: %s has %d port(s), no port %d", ErrNoDevice, name, ports, want)
	}
	for p := 1; p <= ports; p++ {
		if want != 0 && p != want {
			continue
		}
		var a C.struct_ibv_port_attr
		if rc := C.weft_query_port(ctx, C.uint8_t(p), &a); rc != 0 {
			return 0, "", fmt.Errorf("verbs: %s port %d: ibv_query_port: %v", name, p, syscall.Errno(rc))
		}
		st := C.GoString(C.ibv_port_state_str(a.state))
		if a.state == C.IBV_PORT_ACTIVE {
			return p, st, nil
		}
		if state == "" {
			state = st
		}
	}
	return 0, state, nil
}

// pickGID chooses the source GID (Options.GIDIndex, or a scan).
func (d *Device) pickGID(attr *C.struct_ibv_port_attr) error {
	var e C.struct_ibv_gid_entry
	if d.opts.GIDIndex > 0 {
		if d.opts.GIDIndex >= int(attr.gid_tbl_len) || d.opts.GIDIndex > 255 {
			return fmt.Errorf("verbs: %s port %d: GID index %d outside its table of %d", d.devName, d.port, d.opts.GIDIndex, attr.gid_tbl_len)
		}
		if rc := C.weft_query_gid(d.ctx, C.uint8_t(d.port), C.uint32_t(d.opts.GIDIndex), &e); rc != 0 {
			return fmt.Errorf("verbs: %s port %d: GID index %d: %v (`ibv_devinfo -v` lists the table)", d.devName, d.port, d.opts.GIDIndex, syscall.Errno(-rc))
		}
		d.setGID(&e)
		return nil
	}
	if attr.link_layer != C.IBV_LINK_LAYER_ETHERNET {
		if rc := C.weft_query_gid(d.ctx, C.uint8_t(d.port), 0, &e); rc != 0 {
			return fmt.Errorf("verbs: %s port %d: GID index 0: %v", d.devName, d.port, syscall.Errno(-rc))
		}
		d.setGID(&e)
		return nil
	}
	for i := 0; i < int(attr.gid_tbl_len) && i < 256; i++ {
		if C.weft_query_gid(d.ctx, C.uint8_t(d.port), C.uint32_t(i), &e) != 0 {
			continue // an empty entry
		}
		g := gidBytes(&e)
		if e.gid_type == C.IBV_GID_TYPE_ROCE_V2 && isIPv4Mapped(g) {
			d.setGID(&e)
			return nil
		}
	}
	nd := netdevOf(sysClassDir, d.devName)
	if nd == "" {
		nd = "IFACE"
	}
	return fmt.Errorf("%w: %s port %d has no RoCE v2 GID with an IPv4 address: give its interface one "+
		"(`ip addr add ADDR/PREFIX dev %s`), or choose a GID with Options.GIDIndex (`ibv_devinfo -v` lists the table)",
		ErrNoDevice, d.devName, d.port, nd)
}

func (d *Device) setGID(e *C.struct_ibv_gid_entry) {
	d.local.GID = gidBytes(e)
	d.gidIndex = uint8(e.gid_index)
}

func gidBytes(e *C.struct_ibv_gid_entry) (g [16]byte) {
	copy(g[:], unsafe.Slice((*byte)(unsafe.Pointer(&e.gid)), 16))
	return g
}

// isIPv4Mapped reports whether g is ::ffff:a.b.c.d.
func isIPv4Mapped(g [16]byte) bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// register registers buf for local access; need is what all rings take,
// for the error when the kernel refuses to lock it.
func (d *Device) register(buf []byte, need uint64) (*C.struct_ibv_mr, error) {
	mr, err := C.weft_reg_mr(d.pd, C.uint64_t(uintptr(unsafe.Pointer(&buf[0]))), C.size_t(len(buf)), 0, 0)
	if mr != nil {
		return mr, nil
	}
	if errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EPERM) {
		if lim := currentMemlock(); lim != unix.RLIM_INFINITY {
			return nil, fmt.Errorf("%w (ibv_reg_mr of %d bytes: %v)", memlockError(lim, need), len(buf), err)
		}
	}
	return nil, fmt.Errorf("verbs: %s: ibv_reg_mr of %d bytes: %v", d.devName, len(buf), err)
}

// verbErr describes a failed verb that sets errno.
func (d *Device) verbErr(verb string) error {
	return fmt.Errorf("verbs: %s: %s failed", d.devName, verb)
}

// postRecv posts the buffers collected in rx.repost, to the shared
// receive queue over reliable connections, else to the UD queue pair.
func (d *Device) postRecv() error { return d.postRecvFrom(1) }

// postRecvFrom posts the buffers collected in rx.repost when there are at
// least least (1 or more) of them. Over reliable connections Poll gives
// back fewer than rx.least later (the shared receive queue has the
// others): one call to the adapter per message less on the latency path.
func (d *Device) postRecvFrom(least int) error {
	if d.rx.nrepost < least {
		return nil
	}
	base := C.uint64_t(uintptr(unsafe.Pointer(&d.rx.buf[0])))
	for i := 0; i < d.rx.nrepost; i += batch {
		n := C.int(min(batch, d.rx.nrepost-i))
		var rc C.int
		if d.srq != nil {
			rc = C.weft_post_srq_recv(d.srq, base, d.rx.mr.lkey, C.uint32_t(d.rx.slotLen), &d.rx.repost[i], n)
		} else {
			rc = C.weft_post_recv(d.qp, base, d.rx.mr.lkey, C.uint32_t(d.rx.slotLen), &d.rx.repost[i], n)
		}
		if rc != 0 {
			d.rx.nrepost = copy(d.rx.repost[:], d.rx.repost[i:d.rx.nrepost])
			return fmt.Errorf("verbs: %s: ibv_post_recv: %v", d.devName, syscall.Errno(rc))
		}
	}
	d.rx.nrepost = 0
	return nil
}

// Caps reports a reliable, ordered device whose MTU is FrameSlot less the
// frame header; with Options.Datagrams an unreliable, unordered one whose
// MTU comes from the port's active MTU.
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is this device's Address in its printed form.
func (d *Device) Addr() string { return d.addr }

// Counters are the device's statistics. Byte counts are whole frames,
// header included. Frames the adapter drops for want of a posted receive
// buffer are not counted (the adapter does not report them per queue pair).
func (d *Device) Counters() *hal.Counters { return &d.counters }

// Name is the RDMA device in use ("rxe0").
func (d *Device) Name() string { return d.devName }

// Port is the port number in use on the device.
func (d *Device) Port() int { return int(d.port) }

// GIDIndex is the index of the source GID in the port's GID table.
func (d *Device) GIDIndex() int { return int(d.gidIndex) }

// Connect makes the address handle toward peer's device and, over
// reliable connections, starts connecting the frames' queue pair toward
// it (in the background: a Send toward peer waits for it).
func (d *Device) Connect(peer hal.Rank, addr string) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	a, err := ParseAddress(addr)
	if err != nil {
		return err
	}
	if err := d.connect(peer, a); err != nil {
		return err
	}
	if d.fc != nil {
		d.startFrames(peer)
	}
	return nil
}

func (d *Device) connect(r hal.Rank, a Address) error {
	if int(r) >= len(d.peers) {
		return fmt.Errorf("verbs: connect rank %d of %d: %w", r, len(d.peers), hal.ErrUnknownPeer)
	}
	ah := C.weft_create_ah(d.pd, C.uint8_t(d.port), C.uint8_t(d.gidIndex), (*C.uint8_t)(unsafe.Pointer(&a.GID[0])), C.uint16_t(a.LID))
	if ah == nil {
		return fmt.Errorf("verbs: %s: ibv_create_ah toward rank %d at %v failed (is its GID reachable from GID index %d?)", d.devName, r, a, d.gidIndex)
	}
	d.peersMu.Lock()
	defer d.peersMu.Unlock()
	d.addrs[r].Store(&a)
	if old := d.peers[r].Swap(&peer{ah: ah, qpn: a.QPN, qkey: a.QKey}); old != nil {
		d.retired = append(d.retired, old.ah)
	}
	return nil
}

// Send copies the frame into the next registered send slot and queues it;
// Flush posts what is queued (one ibv_post_send per 32 frames). It returns
// hal.ErrNoResource, without blocking, when every slot is queued or in
// flight: a slot comes back when the adapter reports its send complete,
// which Send and Flush look for.
func (d *Device) Send(hdr, payload []byte) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if len(hdr) < hal.HeaderLen {
		return errShort
	}
	n := len(hdr) + len(payload)
	if n-hal.HeaderLen > d.caps.MTU {
		return fmt.Errorf("verbs: frame payload of %d bytes, MTU %d: %w", n-hal.HeaderLen, d.caps.MTU, hal.ErrTooLarge)
	}
	dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:]))
	if d.fc != nil {
		return d.sendFrame(dst, hdr, payload)
	}
	return d.queue(dst, hdr, payload)
}

// queueRaw queues a datagram of the device's own (a hello) to dst.
func (d *Device) queueRaw(dst hal.Rank, b []byte) error { return d.queue(dst, b, nil) }

// queue copies hdr and payload, one datagram, into the next send slot.
func (d *Device) queue(dst hal.Rank, hdr, payload []byte) error {
	n := len(hdr) + len(payload)
	if uint64(dst) >= uint64(len(d.peers)) {
		return fmt.Errorf("verbs: send to rank %d of %d: %w", dst, len(d.peers), hal.ErrUnknownPeer)
	}
	p := d.peers[dst].Load()
	if p == nil {
		return fmt.Errorf("verbs: send to rank %d (not connected): %w", dst, hal.ErrUnknownPeer)
	}
	t := &d.tx
	size := uint64(len(t.desc))
	if t.head-t.tail == size {
		if err := d.reap(); err != nil {
			return err
		}
		if t.head-t.tail == size {
			d.counters.NoResource.Add(1)
			return hal.ErrNoResource
		}
	}
	slot := t.head % size
	off := int(slot) * t.slotLen
	copy(d.sbuf[off+copy(d.sbuf[off:], hdr):], payload)
	t.desc[slot] = C.weft_tx{ah: p.ah, wr_id: C.uint64_t(t.head), slot: C.uint32_t(slot), len: C.uint32_t(n), qpn: C.uint32_t(p.qpn), qkey: C.uint32_t(p.qkey)}
	t.head++
	t.bytes += uint64(n)
	return nil
}

// Flush posts the queued frames. Every 32nd frame and the last of each
// Flush ask for a completion, which frees the slots up to it.
func (d *Device) Flush() error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if d.fc != nil {
		return d.flushFrames()
	}
	return d.flushUD()
}

// flushUD is Flush of the UD queue pair inside the device's lifecycle
// guard.
func (d *Device) flushUD() error {
	t := &d.tx
	size := uint64(len(t.desc))
	base := C.uint64_t(uintptr(unsafe.Pointer(&d.sbuf[0])))
	tx := t.batch
	for t.posted < t.head {
		k := 0
		for ; k < batch && t.posted+uint64(k) < t.head; k++ {
			pos := t.posted + uint64(k)
			tx[k] = t.desc[pos%size]
			if pos%batch == batch-1 || pos == t.head-1 {
				tx[k].signaled = 1
			}
		}
		rc := C.weft_post_send(d.qp, base, d.smr.lkey, C.uint32_t(t.slotLen), &tx[0], C.int(k), 0, t.nposted)
		posted := *t.nposted
		var bytes uint64
		for i := range int(posted) {
			bytes += uint64(tx[i].len)
		}
		t.posted += uint64(posted)
		if d.fc == nil { // over reliable connections the UD queue pair carries hellos only, not frames
			d.counters.FramesSent.Add(uint64(posted))
			d.counters.BytesSent.Add(bytes)
		}
		if rc != 0 {
			if rc == C.int(syscall.ENOMEM) {
				d.counters.NoResource.Add(1)
				return hal.ErrNoResource
			}
			return fmt.Errorf("verbs: %s: ibv_post_send: %v", d.devName, syscall.Errno(rc))
		}
	}
	return d.reap()
}

// reap takes send completions and frees the slots they cover.
func (d *Device) reap() error {
	if d.tx.tail == d.tx.posted {
		return nil
	}
	t := &d.tx
	*t.last = C.uint64_t(t.tail)
	n := C.weft_poll_tx(d.scq, t.last, t.bad)
	if n < 0 {
		return fmt.Errorf("verbs: %s: ibv_poll_cq (send): %v", d.devName, syscall.Errno(-n))
	}
	if n > 0 {
		t.tail = uint64(*t.last) + 1
	}
	if bad := *t.bad; bad != 0 {
		return fmt.Errorf("verbs: %s: send completed with %s", d.devName, C.GoString(C.ibv_wc_status_str(uint32(bad))))
	}
	return nil
}

// Poll delivers what the receive CQ holds, checking each frame (job key,
// CRC required, destination rank) and counting what it drops, and posts
// the buffers again after each batch of up to 32.
func (d *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if !d.life.Enter() {
		return 0, errClosed
	}
	defer d.life.Leave()
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	rx := &d.rx
	var frames, bytes uint64
	var err error
	// One pass over the ring at most, so a steady stream cannot keep Poll
	// from returning; and no second look at a queue the last look
	// drained (one call to the adapter less per message delivered).
	drained := false
	for budget := d.opts.RecvRing; budget > 0 && err == nil; {
		if rx.next == rx.n {
			if drained {
				break
			}
			// (A batch adds at most batch buffers to rx.repost.)
			if err = d.postRecvFrom(batch); err != nil {
				break
			}
			want := min(batch, budget)
			got := C.weft_poll_rx(rx.cq, &rx.cqe[0], C.int(want))
			if got < 0 {
				err = fmt.Errorf("verbs: %s: ibv_poll_cq (receive): %v", d.devName, syscall.Errno(-got))
				break
			}
			if got == 0 {
				break
			}
			drained = int(got) < want
			rx.next, rx.n = 0, int(got)
			budget -= int(got)
		}
		for ; rx.next < rx.n; rx.next++ {
			c := rx.cqe[rx.next]
			off := int(c.slot) * rx.slotLen
			end := off + int(c.len)
			if c.status != C.IBV_WC_SUCCESS {
				if d.srq == nil {
					err = fmt.Errorf("verbs: %s: receive completed with %s", d.devName, C.GoString(C.ibv_wc_status_str(uint32(c.status))))
					rx.next++
					break
				}
				// A connection broke with a frame half received: the
				// sender learns it from its own completion.
				d.counters.Drop(hal.DropPeer)
			} else if int(c.len) < rx.grh || int(c.len) > rx.slotLen {
				d.counters.Drop(hal.DropShort)
			} else if frame := rx.buf[off+rx.grh : end]; rx.grh > 0 && isHello(frame) {
				d.rc.connMu.Lock()
				d.onHello(frame)
				d.rc.connMu.Unlock()
			} else if d.accept(frame) {
				frames++
				bytes += uint64(len(frame))
				fn(&rx.hdr, frame[hal.HeaderLen:])
			}
			rx.repost[rx.nrepost] = c.slot
			rx.nrepost++
		}
	}
	if perr := d.postRecvFrom(rx.least); err == nil {
		err = perr
	}
	d.counters.FramesRecv.Add(frames)
	d.counters.BytesRecv.Add(bytes)
	return int(frames), err
}

// accept decodes frame into rx.hdr and reports whether it may be
// delivered; if not, it counts the drop under its reason.
func (d *Device) accept(frame []byte) bool {
	if _, err := hal.Check(frame, d.cfg.JobKey, !d.caps.Reliable, &d.rx.hdr); err != nil {
		d.counters.DropErr(err)
		return false
	}
	if d.rx.hdr.Dst != d.cfg.Rank || (d.cfg.Size > 0 && int(d.rx.hdr.Src) >= d.cfg.Size) {
		d.counters.Drop(hal.DropPeer)
		return false
	}
	return true
}

// Close releases the queue pair, completion queues and channel, address
// handles, registrations and rings. A Wait in progress returns
// hal.ErrClosed; calls inside another goroutine finish first (the last one
// out releases).
func (d *Device) Close() error {
	if !d.life.Close(d.wake) {
		return errClosed
	}
	return nil
}

// wake writes the eventfd, waking a Wait blocked in ppoll.
func (d *Device) wake() {
	var one = [8]byte{1}
	if d.efd >= 0 {
		_, _ = unix.Write(d.efd, one[:])
	}
	if d.connEfd >= 0 {
		_, _ = unix.Write(d.connEfd, one[:])
	}
}

// release frees everything Open made, in dependency order; it tolerates a
// partly opened device.
func (d *Device) release() {
	defer freeScratch(d.scratch)
	d.releaseFrames()
	d.releaseRC()
	if d.qp != nil {
		C.ibv_destroy_qp(d.qp)
	}
	for i := range d.peers {
		if p := d.peers[i].Load(); p != nil {
			C.ibv_destroy_ah(p.ah)
		}
	}
	for _, ah := range d.retired {
		C.ibv_destroy_ah(ah)
	}
	if d.smr != nil {
		C.ibv_dereg_mr(d.smr)
	}
	if d.rmr != nil {
		C.ibv_dereg_mr(d.rmr)
	}
	if d.scq != nil {
		C.ibv_destroy_cq(d.scq)
	}
	if d.rcq != nil {
		C.ibv_destroy_cq(d.rcq)
	}
	if d.ch != nil {
		C.ibv_destroy_comp_channel(d.ch)
	}
	if d.chUD != nil {
		C.ibv_destroy_comp_channel(d.chUD)
	}
	if d.pd != nil {
		C.ibv_dealloc_pd(d.pd)
	}
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
	}
	if d.sbuf != nil {
		_ = unix.Munmap(d.sbuf)
	}
	if d.rbuf != nil {
		_ = unix.Munmap(d.rbuf)
	}
	if d.efd >= 0 {
		_ = unix.Close(d.efd)
	}
	if d.connEfd >= 0 {
		_ = unix.Close(d.connEfd)
	}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func pageRound(n int) int { return roundUp(n, unix.Getpagesize()) }
