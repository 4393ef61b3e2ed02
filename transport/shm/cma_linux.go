package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// Per-peer CMA states.
const (
	cmaUnknown int32 = iota // not probed (the peer was not attached at Connect)
	cmaOK
	cmaRefused
)

// cmaState is what a device knows about cross-memory attach.
type cmaState struct {
	ok     atomic.Bool // the kernel lets this process use CMA with its peers
	why    atomic.Pointer[string]
	traced atomic.Bool
	// probe is a word of this process's memory that peers read at Connect
	// to prove they can, and that the pid they have is really ours.
	probe *uint64
}

// yamaScope is where Yama's ptrace policy lives; absent without Yama.
const yamaScope = "/proc/sys/kernel/yama/ptrace_scope"

// capSysPtrace is CAP_SYS_PTRACE's bit in /proc/self/status CapEff.
const capSysPtrace = 19

// init finds out whether this process may use CMA: the Yama policy (which
// process_vm_readv obeys as ptrace does), then a read of its own memory,
// which fails where seccomp or the kernel forbids the system call.
func (c *cmaState) init(off bool, probe uint64) {
	c.probe = new(uint64)
	*c.probe = probe
	why := ""
	switch {
	case off:
		why = "turned off by Options.NoCMA"
	default:
		why = ptracePolicy()
	}
	if why == "" {
		var got [8]byte
		if err := cmaCopy(os.Getpid(), addrOf(c.probe), got[:], false); err != nil {
			why = fmt.Sprintf("process_vm_readv refused even on this process: %v", err)
		} else if binary.NativeEndian.Uint64(got[:]) != probe {
			why = "process_vm_readv of this process read the wrong value"
		}
	}
	if why != "" {
		c.why.Store(&why)
		return
	}
	c.ok.Store(true)
}

// ptracePolicy returns why Yama forbids CMA between the job's processes,
// or "" when it allows it. Under scope 1 (only a process's ancestors may
// attach) it lets any process of this user attach to this one, as Open MPI
// does: the ranks are siblings.
func ptracePolicy() string {
	b, err := os.ReadFile(yamaScope)
	if err != nil {
		return "" // no Yama: ordinary same-user permission checks
	}
	scope, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return fmt.Sprintf("cannot read %s: %q", yamaScope, b)
	}
	switch scope {
	case 0:
		return ""
	case 1:
		if err := unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0); err != nil {
			return fmt.Sprintf("%s is 1 and prctl(PR_SET_PTRACER) failed: %v", yamaScope, err)
		}
		return ""
	case 2:
		if hasCap(capSysPtrace) {
			return ""
		}
		return yamaScope + " is 2 and this process lacks CAP_SYS_PTRACE"
	default:
		return fmt.Sprintf("%s is %d: ptrace attach is disabled", yamaScope, scope)
	}
}

// hasCap reports whether capability bit c is in this process's effective
// set.
func hasCap(c uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range bytes.Lines(b) {
		if hex, ok := bytes.CutPrefix(line, []byte("CapEff:")); ok {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(hex)), 16, 64)
			return err == nil && v&(1<<c) != 0
		}
	}
	return false
}

func (c *cmaState) probeAddr() uintptr { return addrOf(c.probe) }

// refuse turns CMA off for the device.
func (c *cmaState) refuse(why string) {
	c.why.Store(&why)
	c.ok.Store(false)
}

// report says once, at trace level 2, that CMA is off and why; peer is a
// rank, or -1 for the device as a whole.
func (c *cmaState) report(peer int) {
	if c.ok.Load() || !c.traced.CompareAndSwap(false, true) {
		return
	}
	why := "unknown"
	if p := c.why.Load(); p != nil {
		why = *p
	}
	if peer < 0 {
		trace.Printf(trace.Setup, "shm: cross-memory attach unavailable, large transfers will go through the rings: %s", why)
	} else {
		trace.Printf(trace.Setup, "shm: cross-memory attach to rank %d refused, large transfers will go through the rings: %s", peer, why)
	}
}

// probe checks, at Connect, that CMA reaches peer: its pid in the segment
// matches its address, and reading its probe word gives the value it
// published. A failure turns CMA off for the device.
func (d *Device) probe(peer hal.Rank, p *peer) {
	if !d.cma.ok.Load() || atomic.LoadUint32(p.state) != stateAttached {
		return
	}
	pid := int(p.connPid.Load())
	if seg := int(atomic.LoadUint32(p.pid)); seg != pid {
		p.cma.Store(cmaRefused)
		d.cma.refuse(fmt.Sprintf("rank %d's address has pid %d, the segment %d", peer, pid, seg))
		d.cma.report(int(peer))
		return
	}
	addr, want := uintptr(atomic.LoadUint64(p.probeAddr)), atomic.LoadUint64(p.probeV)
	var got [8]byte
	err := cmaCopy(pid, addr, got[:], false)
	if err == nil && binary.NativeEndian.Uint64(got[:]) != want {
		err = errors.New("read another value than the one it published (another process with that pid?)")
	}
	if err != nil {
		p.cma.Store(cmaRefused)
		d.cma.refuse(fmt.Sprintf("probing rank %d (pid %d): %v", peer, pid, err))
		d.cma.report(int(peer))
		return
	}
	p.cma.Store(cmaOK)
}

// CMA reports whether cross-memory attach works for this device: the kernel
// allows it, and every peer probed at Connect answered.
func (d *Device) CMA() bool { return d.cma.ok.Load() }

// ReadFrom copies len(dst) bytes at addr in peer's address space into dst
// with process_vm_readv. The caller must have validated the access against
// its replica of peer's TPT (see CrossMemory).
func (d *Device) ReadFrom(peer hal.Rank, addr uintptr, dst []byte) error {
	return d.transfer(peer, addr, dst, false)
}

// WriteTo copies src to addr in peer's address space with
// process_vm_writev. The caller must have validated the access against its
// replica of peer's TPT (see CrossMemory).
func (d *Device) WriteTo(peer hal.Rank, addr uintptr, src []byte) error {
	return d.transfer(peer, addr, src, true)
}

// transfer copies with process_vm_readv or writev, the peer's pidfd
// guarding against the reuse of its pid: a peer found dead before the copy
// is not touched, and one found dead after it fails the transfer, since
// its pid may have named another process during the copy (a process still
// alive after the copy was alive all through it). A peer whose device is
// closed is refused the same way, before and after the copy, as Send
// refuses it: its memory may no longer be the registered buffers the
// caller validated the access against.
func (d *Device) transfer(peer hal.Rank, addr uintptr, buf []byte, write bool) error {
	if !d.enter() {
		return errClosed
	}
	defer d.leave()
	pid, p, err := d.cmaPeer(peer)
	if err != nil {
		return err
	}
	if d.dead(p) {
		return *p.lost.Load()
	}
	err = cmaCopy(pid, addr, buf, write)
	if d.dead(p) {
		err = *p.lost.Load()
	} else if atomic.LoadUint32(p.state) == stateClosed {
		err = closedPeer("cross-memory attach to", peer)
	}
	if err != nil {
		verb := "read"
		if write {
			verb = "write"
		}
		return fmt.Errorf("shm: %s %d bytes at %#x of rank %d: %w", verb, len(buf), addr, peer, err)
	}
	return nil
}

// cmaPeer is the pid to use for peer and its block, or why CMA cannot
// reach it.
func (d *Device) cmaPeer(peer hal.Rank) (int, *peer, error) {
	s := d.slotOf(peer)
	if s < 0 {
		return 0, nil, d.notMember("cross-memory attach to", peer)
	}
	p := &d.peers[s]
	pid := int(p.connPid.Load())
	switch {
	case pid == 0:
		return 0, nil, fmt.Errorf("shm: cross-memory attach to rank %d before Connect: %w", peer, hal.ErrUnknownPeer)
	case atomic.LoadUint32(p.state) == stateClosed:
		return 0, nil, closedPeer("cross-memory attach to", peer)
	case !d.cma.ok.Load() || p.cma.Load() == cmaRefused:
		why := "refused"
		if w := d.cma.why.Load(); w != nil {
			why = *w
		}
		return 0, nil, fmt.Errorf("shm: cross-memory attach to rank %d: %s: %w", peer, why, ErrNoCMA)
	}
	return pid, p, nil
}

// cmaCopy moves buf to or from addr in process pid, looping over partial
// transfers (the kernel stops at a page it cannot reach, or at its
// per-call limit).
func cmaCopy(pid int, addr uintptr, buf []byte, write bool) error {
	for len(buf) > 0 {
		local := [1]unix.Iovec{{Base: &buf[0]}}
		local[0].SetLen(len(buf))
		remote := [1]unix.RemoteIovec{{Base: addr, Len: len(buf)}}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, local[:], remote[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local[:], remote[:], 0)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EPERM || err == unix.EACCES || err == unix.ENOSYS:
			return fmt.Errorf("pid %d: %w (%w)", pid, ErrNoCMA, err)
		case err == unix.ESRCH:
			return fmt.Errorf("pid %d is gone: %w (%w)", pid, hal.ErrUnknownPeer, err)
		case err != nil:
			return fmt.Errorf("pid %d: %w", pid, err)
		case n <= 0:
			return fmt.Errorf("pid %d: no progress at %#x: %w", pid, addr, unix.EFAULT)
		}
		buf = buf[n:]
		addr += uintptr(n)
	}
	return nil
}
