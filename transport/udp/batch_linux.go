package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// txQueue is the send batch: msgs[head:tail] are queued frames, each
// message pointing at two iovecs (header, payload) that reference the
// caller's buffers, so queuing copies nothing; one iovec when the payload
// follows the header in memory. The iovecs of consecutive frames are
// adjacent, so a run of frames can also go out as one message whose iovec
// list spans them all: that is how GSO sends a run.
type txQueue struct {
	msgs       []unix.Mmsghdr
	iovs       []unix.Iovec
	head, tail int

	// With GSO, wire[k] is one message carrying runs[k] consecutive frames,
	// with a UDP_SEGMENT control message in ctrl when it carries several.
	// A run's iovecs are gathered into wiov[:nwiov], those that continue
	// one another in memory merged: the kernel's cost of a send grows
	// with the iovecs, not only with the bytes (the copy into its buffers
	// is set up afresh for each).
	wire  []unix.Mmsghdr
	runs  []int
	ctrl  []byte
	wiov  []unix.Iovec
	nwiov int
}

// GSO limits. The kernel refuses more than UDP_MAX_SEGMENTS segments (64
// on older kernels) or a datagram larger than an IPv4 packet can carry.
const (
	gsoMaxSegments = 64
	gsoMaxBytes    = 65507
)

// gsoCtrlLen fits one UDP_SEGMENT control message (a uint16).
var gsoCtrlLen = unix.CmsgSpace(2)

func newTxQueue(n int, gso bool) txQueue {
	q := txQueue{msgs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, 2*n)}
	for i := range q.msgs {
		q.msgs[i].Hdr.Iov = &q.iovs[2*i]
	}
	if gso {
		q.wire = make([]unix.Mmsghdr, n)
		q.runs = make([]int, n)
		q.ctrl = make([]byte, n*gsoCtrlLen)
		q.wiov = make([]unix.Iovec, 2*n)
		for k := range q.wire {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&q.ctrl[k*gsoCtrlLen]))
			h.Level = unix.SOL_UDP
			h.Type = unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
		}
	}
	return q
}

// push queues one frame to dst; the caller has checked there is room.
func (q *txQueue) push(dst *sockaddr, hdr, payload []byte) {
	i := q.tail
	q.tail++
	m := &q.msgs[i].Hdr
	m.Name = dst.ptr()
	m.Namelen = dst.len
	setIov(&q.iovs[2*i], hdr)
	if len(payload) == 0 || continues(q.iovs[2*i], &payload[0]) {
		// One iovec for both (the caller keeps payload alive until
		// Flush). The second is empty, not absent: a GSO run's iovec
		// list steps over it.
		q.iovs[2*i].SetLen(len(hdr) + len(payload))
		q.iovs[2*i+1] = unix.Iovec{}
		m.SetIovlen(1)
		return
	}
	setIov(&q.iovs[2*i+1], payload)
	m.SetIovlen(2)
}

// release forgets the frames msgs[from:to] after they were sent or dropped,
// so the queue does not keep the caller's buffers alive for the GC.
func (q *txQueue) release(from, to int) {
	for i := from; i < to; i++ {
		q.msgs[i].Hdr.Name = nil
		q.iovs[2*i] = unix.Iovec{}
		q.iovs[2*i+1] = unix.Iovec{}
	}
	if to == q.tail {
		q.head, q.tail = 0, 0
		clear(q.wiov[:q.nwiov])
		q.nwiov = 0
	}
}

// continues reports whether next is where v's bytes end in memory.
func continues(v unix.Iovec, next *byte) bool {
	return uintptr(unsafe.Pointer(v.Base))+uintptr(v.Len) == uintptr(unsafe.Pointer(next))
}

// frameLen is the size on the wire of queued message i.
func (q *txQueue) frameLen(i int) int {
	n := int(q.iovs[2*i].Len)
	if q.msgs[i].Hdr.Iovlen == 2 {
		n += int(q.iovs[2*i+1].Len)
	}
	return n
}

// coalesce builds wire messages for the queued frames: each run of frames
// to one peer with one size (the last may be shorter, as UDP_SEGMENT
// allows) becomes one message that the kernel cuts into datagrams of that
// size, so the whole run crosses the network stack once. It returns the
// number of wire messages.
func (q *txQueue) coalesce() int {
	k, nw := 0, 0
	for i := q.head; i < q.tail; k++ {
		seg := q.frameLen(i)
		name := q.msgs[i].Hdr.Name
		j, total := i+1, seg
		for j < q.tail && j-i < gsoMaxSegments && q.msgs[j].Hdr.Name == name {
			n := q.frameLen(j)
			if n > seg || total+n > gsoMaxBytes {
				break
			}
			total += n
			j++
			if n < seg {
				break // a shorter segment can only end a run
			}
		}
		w := &q.wire[k].Hdr
		*w = q.msgs[i].Hdr
		q.runs[k] = j - i
		if j-i > 1 {
			first := nw
			for _, v := range q.iovs[2*i : 2*j] {
				switch {
				case v.Len == 0:
				case nw > first && continues(q.wiov[nw-1], v.Base):
					q.wiov[nw-1].Len += v.Len
				default:
					q.wiov[nw] = v
					nw++
				}
			}
			w.Iov = &q.wiov[first]
			w.SetIovlen(nw - first)
			c := q.ctrl[k*gsoCtrlLen:]
			*(*uint16)(unsafe.Pointer(&c[unix.SizeofCmsghdr])) = uint16(seg)
			w.Control = &c[0]
			w.SetControllen(gsoCtrlLen)
		}
		i = j
	}
	q.nwiov = max(q.nwiov, nw)
	return k
}
