package udp

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
	"golang.org/x/sys/unix"
)

// oldKernelEnv, set in a test binary that TestGSOOnKernelsWithoutOffload
// re-executes, names the kernel the child imitates (a key of oldKernels).
const oldKernelEnv = "WEFT_UDP_TEST_OLD_KERNEL"

// oldKernels are the kernels TestGSOOnKernelsWithoutOffload imitates: what
// each lacks, and so what a GSO device opened on it must still do.
var oldKernels = map[string]struct {
	noSegment bool // Linux < 4.18: no UDP_SEGMENT (nor UDP_GRO)
	mode      string
}{
	"4.18": {false, "segmented sends (UDP_SEGMENT), no coalesced receives (UDP_GRO: protocol not available)"},
	"4.17": {true, "no segmented sends (UDP_SEGMENT: protocol not available), no coalesced receives (UDP_GRO: protocol not available)"},
}

// refuseOffload installs, on every thread of the process, a seccomp filter
// that refuses setsockopt(SOL_UDP, UDP_GRO) with ENOPROTOOPT, as Linux <
// 5.0 does, and if noSegment getsockopt(SOL_UDP, UDP_SEGMENT) too, as
// Linux < 4.18 does.
func refuseOffload(t *testing.T, noSegment bool) {
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		arch  = 4
		nr    = 0
		level = 16 + 8*1 // low 32 bits of args[1]
		opt   = 16 + 8*2
	)
	getsockopt := uint32(unix.SYS_GETSOCKOPT)
	if !noSegment {
		getsockopt = ^uint32(0) // no system call's number
	}
	// Instructions 13 and 14 refuse and allow; a jump's offset counts
	// from the next instruction.
	to := func(pc, target int) uint8 { return uint8(target - pc - 1) }
	prog := []unix.SockFilter{
		{Code: ld, K: arch},
		{Code: jeq, K: unix.AUDIT_ARCH_X86_64, Jf: to(1, 14)},
		{Code: ld, K: nr},
		{Code: jeq, K: unix.SYS_SETSOCKOPT, Jf: to(3, 8)},
		{Code: ld, K: level},
		{Code: jeq, K: unix.SOL_UDP, Jf: to(5, 14)},
		{Code: ld, K: opt},
		{Code: jeq, K: unix.UDP_GRO, Jt: to(7, 13), Jf: to(7, 14)},
		{Code: jeq, K: getsockopt, Jf: to(8, 14)},
		{Code: ld, K: level},
		{Code: jeq, K: unix.SOL_UDP, Jf: to(10, 14)},
		{Code: ld, K: opt},
		{Code: jeq, K: unix.UDP_SEGMENT, Jt: to(12, 13), Jf: to(12, 14)},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOPROTOOPT)},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Skipf("no_new_privs: %v", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		t.Skipf("seccomp: %v", e)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != unix.ENOPROTOOPT {
		t.Fatalf("filter not in force: setsockopt(UDP_GRO) = %v", err)
	}
	if _, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT); (err == unix.ENOPROTOOPT) != noSegment {
		t.Fatalf("filter not as asked: getsockopt(UDP_SEGMENT) = %v", err)
	}
}

// Options.GSO is on by default for a rank (WEFT_GSO), so a device must
// open with it on a kernel that has only part of it, or none: one without
// UDP_GRO (Linux < 5.0) keeps segmented sends and receives into slots of
// one frame each; one without UDP_SEGMENT (Linux < 4.18, which would
// ignore the control message and send a run as one oversized datagram)
// sends plain datagrams from the start. The Setup trace says which. Each
// case runs in a child process, which a seccomp filter makes refuse the
// socket options as that kernel does.
func TestGSOOnKernelsWithoutOffload(t *testing.T) {
	kernel := os.Getenv(oldKernelEnv)
	if kernel == "" {
		for k := range oldKernels {
			t.Run("linux-"+k, func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestGSOOnKernelsWithoutOffload$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), oldKernelEnv+"="+k)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("under a kernel like Linux %s: %v\n%s", k, err, out)
				}
				if bytes.Contains(out, []byte("--- SKIP")) {
					t.Skipf("under a kernel like Linux %s: the child skipped:\n%s", k, out)
				}
				t.Logf("%s", out)
			})
		}
		return
	}
	want := oldKernels[kernel]
	refuseOffload(t, want.noSegment)
	var buf bytes.Buffer
	restore := trace.Redirect(&buf, trace.Setup)
	a, err := Open(hal.Config{JobKey: testJobKey, Rank: 0, Size: 2}, Options{Bind: loopback, GSO: true})
	restore()
	if err != nil {
		t.Fatalf("Open with GSO: %v; want a device that falls back", err)
	}
	defer a.Close()
	if !strings.Contains(buf.String(), want.mode) {
		t.Errorf("Setup trace %q does not say %q", buf.String(), want.mode)
	}
	if a.gso != !want.noSegment {
		t.Errorf("segmented sends %v, want %v", a.gso, !want.noSegment)
	}
	// (A plain ring at the loopback's MTU: 32 slots, 2 MiB at most.)
	if slot := a.Caps().MTU + hal.HeaderLen; a.rx.slot != slot || len(a.rx.msgs) != MaxGROSlots {
		t.Errorf("receive ring of %d slots of %d bytes, want %d of %d (no UDP_GRO)", len(a.rx.msgs), a.rx.slot, MaxGROSlots, slot)
	}
	b := openRank(t, 1, 2, Options{GSO: true})
	connect(t, a, 1, b.Addr())
	var frames [][]byte
	for i := range 3 {
		f := newFrame(0, 1, bytes.Repeat([]byte{byte(i)}, 100))
		frames = append(frames, f.payload)
		if err := a.Send(f.hdr[:], f.payload); err != nil {
			t.Fatal(err)
		}
	}
	if !want.noSegment {
		if runs := a.tx.runs[:a.tx.coalesce()]; len(runs) != 1 || runs[0] != 3 {
			t.Errorf("runs %v, want one of 3 frames", runs)
		}
	}
	flushOrFail(t, a, nil)
	if s := a.Stats(); s.SendCalls != 1 || s.GSOFallbacks != 0 {
		t.Errorf("stats %+v, want one sendmmsg and no fallback", s)
	}
	for i, r := range recvN(t, b, 3) {
		if !bytes.Equal(r.payload, frames[i]) {
			t.Errorf("frame %d: payload %v, want %v", i, r.payload, frames[i])
		}
	}
}
