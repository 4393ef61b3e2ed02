package verbs

import (
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Options tune a Device. The zero value opens the first RDMA device with an
// active port, on its RoCE v2 IPv4 GID, with the ring sizes below.
type Options struct {
	// Device is the RDMA device's name as ibv_devices lists it ("rxe0",
	// "mlx5_0"). Empty means the first device that has an active port.
	Device string
	// Port is the port number on Device, from 1. 0 means the device's
	// first active port.
	Port int
	// GIDIndex is the index in the port's GID table of the GID frames are
	// sent from. 0 scans the table: on a RoCE port the first RoCE v2 GID
	// holding an IPv4 address (an IPv4-mapped IPv6 address), which routes
	// over IP like UDP and needs no lossless Ethernet; on an InfiniBand
	// port index 0. Index 0 cannot be chosen explicitly on a RoCE port: it
	// is the link-local GID, which the scan never picks.
	GIDIndex int
	// Datagrams sends frames as unreliable datagrams on the UD queue pair,
	// with lapi's reliability (sequence numbers, acknowledgements,
	// retransmission, CRC) above, as the device did before frames went
	// over reliable connections; kept to compare the two. By default
	// (false) frames go over a reliable-connected queue pair per peer and
	// the device reports itself reliable and ordered.
	Datagrams bool
	// MTU lowers the largest frame payload (hal.Caps.MTU) below the
	// default: FrameSlot less hal.HeaderLen over reliable connections, the
	// port's active MTU less hal.HeaderLen with Datagrams. 0 takes the
	// default.
	MTU int
	// SendRing is how many frames may be queued or in flight from this
	// device at once; Send returns hal.ErrNoResource beyond. 0 means
	// DefaultSendRing.
	SendRing int
	// RecvRing is how many receive buffers are posted. Over reliable
	// connections they are shared by all peers (a shared receive queue)
	// and a sender finding none waits (the adapter retries: receive not
	// ready); with Datagrams a frame arriving when all are full is dropped
	// by the adapter and is not counted here. 0 means DefaultRecvRing (or
	// DefaultDatagramRecvRing with Datagrams); at most MaxRing (the
	// receive completion queue must hold one entry per buffer, and
	// adapters cap its size: rxe at 32767).
	RecvRing int
	// Spin is how long Wait polls the receive completion queue before it
	// arms the queue's notification and blocks: a blocked thread costs a
	// wake-up (tens of microseconds, more on a VM) per message of a
	// ping-pong. 0 means DefaultSpin; negative blocks at once (mpi sets
	// it for more ranks than cores, where spinning delays the peer).
	Spin time.Duration
	// RCQueue bounds the RDMA Write and Read work requests in flight over
	// all reliable-connected queue pairs (the size of their completion
	// queue); with none free, Write and Read return hal.ErrNoResource. A
	// transfer needing more (one per port's max_msg_sz) goes in parts as
	// completions free room. 0 means DefaultRCQueue.
	RCQueue int
	// ConnectTimeout bounds how long a Send toward a peer waits for the
	// reliable connection Connect started toward it (the peer's device
	// must answer); beyond, Send returns an error wrapping ErrPeerLost.
	// 0 means DefaultConnectTimeout; negative is refused. Unused with
	// Datagrams.
	ConnectTimeout time.Duration
	// PeerTimeout is how long a connected peer may stay silent (its
	// device answers nothing, not even the hellos this device sends it
	// to ask) before it is declared lost without a send toward it
	// (hal.PeerLoss): a rank that only waits for a dead peer learns of
	// it. 0 means DefaultPeerTimeout; negative never declares a silent
	// peer lost (only a send finds a dead peer). Unused with Datagrams.
	PeerTimeout time.Duration

	// skipMemlockCheck skips the RLIMIT_MEMLOCK check before registration,
	// so a test can see how a failing ibv_reg_mr is reported.
	skipMemlockCheck bool
	// noBye closes the device without telling its peers, so that a
	// test sees, in one process, what a peer whose process died sees.
	noBye bool
}

// Defaults used for zero Options fields.
const (
	DefaultSendRing = 256
	// DefaultRecvRing is for frames over reliable connections, whose
	// buffers are FrameSlot bytes (4 MiB in all).
	DefaultRecvRing = 512
	// DefaultDatagramRecvRing is for Datagrams, whose buffers are the
	// port's MTU.
	DefaultDatagramRecvRing = 1024
	// FrameSlot is the size of a send or receive buffer for frames over
	// reliable connections: a frame is one RC SEND, which the adapter
	// cuts into packets of the port's MTU, so frames may be larger than
	// a packet; fewer frames per message mean fewer work requests and
	// completions.
	FrameSlot = 8192
	// DefaultConnectTimeout: see Options.ConnectTimeout.
	DefaultConnectTimeout = 20 * time.Second
	// DefaultPeerTimeout: see Options.PeerTimeout. Longer than the
	// frames' own retries (about 2 s), so that a send, when there is
	// one, finds the loss first, with the adapter's word for it.
	DefaultPeerTimeout = 5 * time.Second
	// DefaultSpin outlasts, with the 50 µs lapi spins polling the device
	// before it calls Wait, a round trip of a few hundred microseconds
	// (a 4 KiB frame's on soft-RoCE): a Wait that blocks pays the
	// wake-up from the completion channel on every message. Past 20 µs
	// the spin yields the processor now and then, and mpi sets Spin
	// negative where ranks outnumber cores.
	DefaultSpin    = 200 * time.Microsecond
	DefaultRCQueue = 1024
	// MaxRing bounds SendRing, RecvRing and RCQueue.
	MaxRing = 32767
)

// withDefaults fills zero fields and rejects impossible values.
func (o Options) withDefaults() (Options, error) {
	if o.Port < 0 || o.Port > 255 {
		return o, fmt.Errorf("verbs: Port %d outside 1..255 (0 picks the first active port)", o.Port)
	}
	if o.GIDIndex < 0 {
		return o, fmt.Errorf("verbs: GIDIndex %d is negative (0 scans for the RoCE v2 IPv4 GID)", o.GIDIndex)
	}
	if o.MTU < 0 || o.MTU > hal.MaxPayload {
		return o, fmt.Errorf("verbs: MTU %d outside 0..%d", o.MTU, hal.MaxPayload)
	}
	if o.ConnectTimeout < 0 {
		return o, fmt.Errorf("verbs: ConnectTimeout %v is negative (0 means %v)", o.ConnectTimeout, DefaultConnectTimeout)
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	if o.SendRing == 0 {
		o.SendRing = DefaultSendRing
	}
	if o.RecvRing == 0 {
		o.RecvRing = DefaultRecvRing
		if o.Datagrams {
			o.RecvRing = DefaultDatagramRecvRing
		}
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.PeerTimeout == 0 {
		o.PeerTimeout = DefaultPeerTimeout
	}
	if o.RCQueue == 0 {
		o.RCQueue = DefaultRCQueue
	}
	if o.SendRing < 1 || o.SendRing > MaxRing || o.RecvRing < 1 || o.RecvRing > MaxRing || o.RCQueue < 1 || o.RCQueue > MaxRing {
		return o, fmt.Errorf("verbs: SendRing %d, RecvRing %d and RCQueue %d must be in 1..%d", o.SendRing, o.RecvRing, o.RCQueue, MaxRing)
	}
	return o, nil
}
