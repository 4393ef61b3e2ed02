package udp

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// revudpOldKernelEnv makes the test binary, re-executed by
// TestRevUDPGSOOnKernelWithoutUDPGRO, refuse UDP_GRO as a kernel older than
// 5.0 does (ENOPROTOOPT), through a seccomp filter on setsockopt.
const revudpOldKernelEnv = "WEFT_REVUDP_NO_UDP_GRO"

// noUDPGRO installs, on every thread of the process, a seccomp filter that
// fails setsockopt(SOL_UDP, UDP_GRO) with ENOPROTOOPT, as Linux < 5.0
// (no UDP_GRO) and < 4.18 (no UDP_SEGMENT either) do.
func noUDPGRO(t *testing.T) {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	prog := []unix.SockFilter{
		{Code: ld, K: 4}, // arch
		{Code: jeq, K: unix.AUDIT_ARCH_X86_64, Jt: 0, Jf: 7},
		{Code: ld, K: 0}, // syscall number
		{Code: jeq, K: unix.SYS_SETSOCKOPT, Jt: 0, Jf: 5},
		{Code: ld, K: 16 + 8*1}, // level (low 32 bits of args[1])
		{Code: jeq, K: unix.SOL_UDP, Jt: 0, Jf: 3},
		{Code: ld, K: 16 + 8*2}, // optname
		{Code: jeq, K: unix.UDP_GRO, Jt: 0, Jf: 1},
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
}

// Options.GSO (on by default for a rank: WEFT_GSO) is documented to fall
// back to plain sends where the kernel cannot segment ("Linux < 4.18"),
// and docs/tuning.md says a kernel that cannot is detected at the first
// send. But Open turns UDP_GRO on first and fails when the kernel refuses
// it, which every kernel before 5.0 does: on those, Open (and so mpi.Init
// over UDP) fails with "udp: UDP_GRO: protocol not available" instead of
// opening a device without GSO/GRO.
func TestRevUDPGSOOnKernelWithoutUDPGRO(t *testing.T) {
	if os.Getenv(revudpOldKernelEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRevUDPGSOOnKernelWithoutUDPGRO$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), revudpOldKernelEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("under a kernel without UDP_GRO: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	noUDPGRO(t)
	a, err := Open(hal.Config{JobKey: testJobKey, Rank: 0, Size: 2}, Options{Bind: loopback, GSO: true})
	if err != nil {
		t.Fatalf("Open with GSO on a kernel without UDP_GRO: %v; want a device that falls back", err)
	}
	defer a.Close()
	b := openRank(t, 1, 2, Options{})
	connect(t, a, 1, b.Addr())
	for range 3 {
		sendNow(t, a, newFrame(0, 1, make([]byte, 100)))
	}
	recvN(t, b, 3)
}
