package udp

import (
	"fmt"
	"sync"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/lifecycle"
	"github.com/weft-hpc/weft/internal/trace"
	"golang.org/x/sys/unix"
)

// Device is a hal.Device over one kernel UDP socket. Its methods follow the
// hal.Device contract: only Caps, Counters, Stats and Close may be called
// concurrently with the others (Close wakes a blocked Wait).
type Device struct {
	cfg   hal.Config
	opts  Options
	caps  hal.Caps
	sock  socketInfo
	addr  string
	efd   int // eventfd that wakes a Wait blocked in ppoll
	peers []*sockaddr

	tx  txQueue
	gso bool // coalesce runs with UDP_SEGMENT (Options.GSO where the kernel has it, until a send is refused)
	rx  rxRing
	// rxMu guards the receive ring and the drop counter's last value:
	// Poll holds it, and Wait, which hal lets run beside a Poll in
	// another goroutine, only tries it (receiving ahead while spinning is
	// an optimisation it skips when someone is polling).
	rxMu  sync.Mutex
	rxHdr hal.Header // passed to Poll's callback; reused so delivery does not allocate

	// lastDrops is the kernel drop counter already folded into the drop
	// counts; touched only by the progress caller (Poll, Wait, SyncDrops).
	lastDrops uint32
	meminfo   [unix.SK_MEMINFO_VARS]uint32
	// pollfds are the socket, the eventfd, and the group's socket if
	// there is one (nfds of them).
	pollfds [3]unix.PollFd
	nfds    int

	// mc is the job's multicast group's socket (mcast_linux.go), under
	// rxMu like rx.
	mc     mcastSocket
	efdBuf [8]byte

	counters hal.Counters
	stats    stats
	life     lifecycle.Guard

	// blockHook, if set (by tests), runs just before Wait blocks in ppoll.
	blockHook func()
}

var _ hal.Device = (*Device)(nil)

// Preallocated errors for the hot path, so that a full queue costs no
// allocation; they wrap hal's sentinels for errors.Is.
var (
	errClosed         = fmt.Errorf("udp: %w", hal.ErrClosed)
	errBatchFull      = fmt.Errorf("udp: send batch full, flush first: %w", hal.ErrNoResource)
	errSocketFull     = fmt.Errorf("udp: socket send buffer full: %w", hal.ErrNoResource)
	errShortHeader    = fmt.Errorf("udp: send: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
	errLengthMismatch = fmt.Errorf("udp: send: header length field disagrees with the frame body: %w", hal.ErrBadFrame)
)

// Open creates a device for this rank: a UDP socket bound to opts.Bind with
// a kernel-chosen port. Peers learn its address from Addr (through PMI) and
// this device learns theirs through Connect.
func Open(cfg hal.Config, opts Options) (*Device, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ep, err := resolveBind(o.Bind)
	if err != nil {
		return nil, err
	}
	if o.MTU == 0 {
		o.MTU = payloadMTU(ep.linkMTU, ep.addr.Is6())
	}
	si, err := openSocket(ep, o)
	if err != nil {
		return nil, err
	}
	slot := o.MTU + hal.HeaderLen
	slots := min(o.Batch, max(MaxGROSlots, maxRxRing/slot))
	if si.gro {
		// A datagram coalesced by UDP_GRO may be as large as any datagram.
		slot, slots = maxDatagram, min(o.Batch, MaxGROSlots)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(si.fd)
		return nil, fmt.Errorf("udp: eventfd: %w", err)
	}
	mc := mcastSocket{fd: -1}
	if o.Multicast.IsValid() {
		mfd, err := openGroup(si.fd, ep, o, si.gro)
		if err != nil {
			mc.off = fmt.Errorf("udp: multicast off: %w", err)
		} else {
			mc.fd, mc.addr, mc.rx = mfd, o.Multicast, newRxRing(slots, slot)
			mc.group = new(sockaddr)
			_ = mc.group.setAddr(unix.AF_INET, o.Multicast) // an IPv4 address: openGroup checked
		}
	}
	d := &Device{
		cfg:   cfg,
		opts:  o,
		mc:    mc,
		caps:  hal.Caps{MTU: o.MTU, Broadcast: mc.fd >= 0},
		sock:  si,
		addr:  FormatAddr(si.local),
		efd:   efd,
		peers: make([]*sockaddr, max(cfg.Size, 0)),
		tx:    newTxQueue(o.Batch, si.segment),
		gso:   si.segment,
		rx:    newRxRing(slots, slot),
	}
	d.life.Release = d.release
	d.pollfds[0] = unix.PollFd{Fd: int32(si.fd), Events: unix.POLLIN}
	d.pollfds[1] = unix.PollFd{Fd: int32(efd), Events: unix.POLLIN}
	d.nfds = 2
	if mc.fd >= 0 {
		d.pollfds[2] = unix.PollFd{Fd: int32(mc.fd), Events: unix.POLLIN}
		d.nfds = 3
	}
	if trace.On(trace.Setup) {
		trace.Printf(trace.Setup, "udp %d: %s, MTU %d, batch %d, %s", cfg.Rank, d.addr, o.MTU, o.Batch, offloadMode(o, si))
	}
	return d, nil
}

// offloadMode says how a device with socket si sends and receives runs
// of frames, for the Setup trace.
func offloadMode(o Options, si socketInfo) string {
	if !o.GSO {
		return "GSO off (one datagram per frame each way)"
	}
	send, recv := "segmented sends (UDP_SEGMENT)", "coalesced receives (UDP_GRO)"
	if !si.segment {
		send = fmt.Sprintf("no segmented sends (%v)", si.noSegment)
	}
	if !si.gro {
		recv = fmt.Sprintf("no coalesced receives (%v)", si.noGRO)
	}
	return send + ", " + recv
}

// Caps reports an unreliable, unordered device: the kernel may drop
// datagrams on a full buffer and, across a network, reorder them. It
// broadcasts (SendBroadcast) when it joined a multicast group.
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is the published address, e.g. "udp:127.0.0.1:45678".
func (d *Device) Addr() string { return d.addr }

// Options returns the options in force, defaults filled in (MTU included);
// GSO is as asked, whatever the kernel supports of it (Options.GSO).
func (d *Device) Options() Options { return d.opts }

// Counters are the device's hal counters. Bytes count whole frames, header
// included. Receive buffers the kernel dropped on this device's sockets
// count as hal.DropQueue, one each: a frame, or with GSO on (UDP_GRO) up
// to 64 frames, whose number the kernel does not keep (Stats.KernelDrops).
func (d *Device) Counters() *hal.Counters { return &d.counters }

// Connect records where peer's device listens. Connecting a rank again
// replaces its address; frames already queued go to the old one.
func (d *Device) Connect(peer hal.Rank, addr string) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if d.cfg.Size > 0 && int(peer) >= d.cfg.Size {
		return fmt.Errorf("udp: connect rank %d: job has %d ranks: %w", peer, d.cfg.Size, hal.ErrUnknownPeer)
	}
	ap, err := ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("udp: connect rank %d: %w", peer, err)
	}
	sa := new(sockaddr)
	if err := sa.setAddr(d.sock.family, ap); err != nil {
		return fmt.Errorf("udp: connect rank %d: %w: %v", peer, ErrBadAddress, err)
	}
	if int(peer) >= len(d.peers) {
		d.peers = append(d.peers, make([]*sockaddr, int(peer)+1-len(d.peers))...)
	}
	// A fresh value, not an overwrite: queued messages still point at the
	// old one until Flush.
	d.peers[peer] = sa
	return nil
}

// Close releases the device. It may be called while another goroutine is
// blocked in Wait, which then returns hal.ErrClosed, or from a Poll
// callback; the descriptors are closed as soon as no call is using them.
func (d *Device) Close() error {
	if !d.life.Close(d.wake) {
		return errClosed
	}
	return nil
}

// release closes the descriptors; lifecycle runs it once, when the device
// is closed and no call is inside. It leaves the send queue alone: Send
// may still be queueing (it holds no guard), and the frames queued go with
// the device.
func (d *Device) release() {
	// Errors from close(2) on a socket or an eventfd leave nothing to do.
	_ = unix.Close(d.sock.fd)
	_ = unix.Close(d.efd)
	if d.mc.fd >= 0 {
		_ = unix.Close(d.mc.fd)
	}
}

// wake makes a ppoll in Wait return. Writing an eventfd never blocks here:
// it only fails if the counter would overflow, which means it is already
// readable.
func (d *Device) wake() {
	var one = [8]byte{1}
	_, _ = unix.Write(d.efd, one[:])
}

// Stats returns a snapshot of the device's own statistics.
func (d *Device) Stats() Stats {
	return Stats{
		KernelDrops:  d.stats.kernelDrops.Load(),
		SendErrors:   d.stats.sendErrors.Load(),
		GSOFallbacks: d.stats.gsoFallbacks.Load(),
		SendCalls:    d.stats.sendCalls.Load(),
		RecvCalls:    d.stats.recvCalls.Load(),
		RecvBuffer:   d.sock.recvBuf,
		SendBuffer:   d.sock.sendBuf,
		Local:        d.sock.local,
	}
}

// noteDrops folds the kernel's drop counter v of a socket into the
// counts; last is the value already folded in for that socket. v may be
// stale (attached to an older datagram than the last reading), so only an
// increase counts; the uint32 wraps, hence the signed difference.
func (d *Device) noteDrops(last *uint32, v uint32) {
	if delta := int32(v - *last); delta > 0 {
		*last = v
		d.counters.Drops[hal.DropQueue].Add(uint64(delta))
		d.stats.kernelDrops.Add(uint64(delta))
	}
}

// SyncDrops reads the socket's kernel drop counter now. Received datagrams
// carry it, but drops after the last one received are only seen this way;
// Wait calls it before blocking, so an idle device's counts are complete.
// Like Poll, it must not run concurrently with the other methods.
func (d *Device) SyncDrops() error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	return d.syncDrops()
}

func (d *Device) syncDrops() error {
	v, err := socketDrops(d.sock.fd, &d.meminfo)
	if err != nil {
		return fmt.Errorf("udp: SO_MEMINFO: %w", err)
	}
	d.noteDrops(&d.lastDrops, v)
	if d.mc.fd >= 0 {
		if v, err = socketDrops(d.mc.fd, &d.meminfo); err != nil {
			return fmt.Errorf("udp: SO_MEMINFO of the group's socket: %w", err)
		}
		d.noteDrops(&d.mc.lastDrops, v)
	}
	return nil
}
