package shm

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// A peer process that dies leaves its rings and its state word as they
// were: nothing in the segment says it is gone, frames toward it fill its
// ring and then meet hal.ErrNoResource for ever, and a rank waiting for
// its frames would wait for ever (shm is Reliable: lapi keeps no timer
// toward it). So Connect opens a pidfd on the peer's process, and the
// device looks at it when a ring toward the peer is full, before and
// after a cross-memory transfer, and from Wait every lossLook: a dead peer
// is reported through hal.PeerLoss (Wait returns so that the caller
// looks), and Sends toward it, once its ring is full, fail with
// hal.ErrUnknownPeer.

// lossLook is how often Wait looks at the peers' pidfds, on the periodic
// wake-up of its sleep or spin (a system call per look).
const lossLook = maxSleep

var _ hal.PeerLoss = (*Device)(nil)

// lossState is the device's side of hal.PeerLoss.
type lossState struct {
	count   atomic.Uint64 // peers found dead
	waiting atomic.Bool   // a loss Wait has not returned for yet
	next    atomic.Int64  // when Wait looks next, in Unix nanoseconds
	watched atomic.Bool   // some peer has a pidfd
	mu      sync.Mutex
	list    []hal.LostPeer // found and not yet taken by LostPeers
}

// watch opens a pidfd on peer p's process, pid, at Connect. A kernel
// without pidfds (before 5.3) leaves the peer unwatched, as before; a
// process already gone is lost at once.
func (d *Device) watch(p *peer, pid int) {
	if p == d.me || pid == os.Getpid() || p.pidfd.Load() != 0 {
		return // itself, this process (OpenLocal), or already watched (a restarted rank cannot join)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == unix.ESRCH:
		d.lose(p, pid)
		return
	case err != nil:
		trace.Printf(trace.Setup, "shm: rank %d: no pidfd for rank %d (pid %d), its death will go unnoticed: %v", d.rank, p.rank, pid, err)
		return
	}
	p.pidfd.Store(int32(fd) + 1)
	d.loss.watched.Store(true)
}

// dead reports whether p's process is known dead, looking at its pidfd
// (which polls readable once the process has exited) if it was alive last
// time. Callers are inside the device, or in Wait: the release closes the
// pidfds only after both.
func (d *Device) dead(p *peer) bool {
	if p.lost.Load() != nil {
		return true
	}
	fd := p.pidfd.Load() - 1
	if fd < 0 {
		return false
	}
	fds := [1]unix.PollFd{{Fd: fd, Events: unix.POLLIN}}
	n, err := unix.Poll(fds[:], 0)
	if err != nil || n == 0 || fds[0].Revents == 0 {
		return false
	}
	d.lose(p, int(p.connPid.Load()))
	return true
}

// lose records p's process, pid, dead, once: its error, the report for
// PeersLost and LostPeers, and a wake-up of a Wait in progress.
func (d *Device) lose(p *peer, pid int) {
	err := fmt.Errorf("shm: rank %d (pid %d) died: %w", p.rank, pid, hal.ErrUnknownPeer)
	if !p.lost.CompareAndSwap(nil, &err) {
		return
	}
	trace.Printf(trace.Rare, "shm: rank %d: %v", d.rank, err)
	l := &d.loss
	l.mu.Lock()
	l.list = append(l.list, hal.LostPeer{Peer: p.rank, Err: err})
	l.mu.Unlock()
	l.count.Add(1)
	l.waiting.Store(true)
	wake(d.me)
}

// lostErr is the error of a send toward p, whose ring is full: why p is
// lost when it is, else err.
func (d *Device) lostErr(p *peer, err error) error {
	if d.dead(p) {
		return *p.lost.Load()
	}
	return err
}

// lookDue reports whether Wait should look at the peers now, at most once
// per lossLook among all Waits.
func (d *Device) lookDue() bool {
	l := &d.loss
	if !l.watched.Load() {
		return false
	}
	now := time.Now().UnixNano()
	next := l.next.Load()
	return now >= next && l.next.CompareAndSwap(next, now+int64(lossLook))
}

// lookAtPeers looks at every peer's pidfd and reports whether a loss
// waits for Wait to return (hal.PeerLoss).
func (d *Device) lookAtPeers() bool {
	for i := range d.peers {
		d.dead(&d.peers[i])
	}
	return d.loss.waiting.Load() && d.loss.waiting.CompareAndSwap(true, false)
}

// PeersLost counts the peers whose process this device found dead
// (hal.PeerLoss).
func (d *Device) PeersLost() uint64 { return d.loss.count.Load() }

// LostPeers appends the peers found dead since the last call, each with
// an error wrapping hal.ErrUnknownPeer (hal.PeerLoss).
func (d *Device) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	l := &d.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	dst = append(dst, l.list...)
	clear(l.list)
	l.list = l.list[:0]
	return dst
}

// unwatch closes the pidfds, at the release.
func (d *Device) unwatch() {
	for i := range d.peers {
		if fd := d.peers[i].pidfd.Swap(0) - 1; fd >= 0 {
			_ = unix.Close(int(fd))
		}
	}
}
