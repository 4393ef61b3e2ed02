//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// dropCaps removes caps from this thread's effective capabilities. The
// caller has locked its goroutine to the thread (capabilities are
// per-thread) and must not unlock it: the runtime then retires the thread
// with the goroutine, and no other goroutine runs with fewer rights.
func dropCaps(t *testing.T, caps ...uint) {
	t.Helper()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatalf("capget: %v", err)
	}
	for _, c := range caps {
		data[c/32].Effective &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Fatalf("capset: %v", err)
	}
}

// memlockChild marks the child process TestMemlock starts.
const memlockChild = "WEFT_VERBS_MEMLOCK_CHILD"

// TestMemlock: with RLIMIT_MEMLOCK below what the rings need, and without
// CAP_IPC_LOCK (which lifts the limit, and root has), Open says to raise
// `ulimit -l` and by how much: from its own check, and when ibv_reg_mr
// itself fails. The limit is the process's, so a child process runs it.
func TestMemlock(t *testing.T) {
	dev := rxeDevs(t)[0]
	if os.Getenv(memlockChild) == "1" {
		memlockInChild(t, dev)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemlock$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), memlockChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestMemlock") {
		t.Fatal("the child did not pass TestMemlock")
	}
}

func memlockInChild(t *testing.T, dev string) {
	const limit = 64 << 10
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		dropCaps(t, capIPCLock)
		for _, skip := range []bool{false, true} {
			_, err := Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{Device: dev, skipMemlockCheck: skip})
			t.Logf("Open (skipMemlockCheck %v): %v", skip, err)
			if err == nil || !strings.Contains(err.Error(), "ulimit -l") || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK is 65536 bytes") {
				t.Errorf("Open with RLIMIT_MEMLOCK %d, skipMemlockCheck %v: %v, want an error naming the limit and `ulimit -l`", limit, skip, err)
			}
		}
	}()
	<-done
}

// TestPermission: a device file this process may not open is named, with
// its mode and the fix. Root opens any file, so the test drops
// CAP_DAC_OVERRIDE on its thread and takes the file's permissions away
// for the time of one Open.
func TestPermission(t *testing.T) {
	dev := rxeDevs(t)[0]
	path := devDir + "/" + uverbsOf(t, dev)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(path, fi.Mode().Perm())
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		dropCaps(t, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH)
		_, err := Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{Device: dev})
		done <- err
	}()
	err = <-done
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "cannot open "+path) || !strings.Contains(err.Error(), "usermod -aG") {
		t.Errorf("Open of %s without access to %s: %v, want the file and the fix", dev, path, err)
	}
}

// uverbsOf names the device file of an RDMA device ("uverbs0").
func uverbsOf(t *testing.T, dev string) string {
	t.Helper()
	for _, u := range dirNames("/sys/class/infiniband_verbs", "uverbs") {
		b, err := os.ReadFile("/sys/class/infiniband_verbs/" + u + "/ibdev")
		if err == nil && strings.TrimSpace(string(b)) == dev {
			return u
		}
	}
	t.Fatalf("no uverbs device file for %s", dev)
	return ""
}

// TestPortDown: a port that is not ACTIVE is named with its state and the
// interface to bring up. It takes the second device's link down, and waits
// for the port to be active again before it returns.
func TestPortDown(t *testing.T) {
	names := rxeDevs(t)
	if len(names) < 2 {
		t.Skip("needs a second device to take down")
	}
	dev := names[1]
	netdev := netdevOf(sysClassDir, dev)
	if netdev == "" {
		t.Fatalf("no network interface found under %s", dev)
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	ip("link", "set", netdev, "down")
	var err error
	for range 100 { // the port follows the link within milliseconds
		if _, err = Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{Device: dev}); err != nil {
			break
		}
	}
	ip("link", "set", netdev, "up")
	for i := 0; ; i++ {
		d, err := Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{Device: dev})
		if err == nil {
			d.Close()
			break
		}
		if i == 1000 {
			t.Fatalf("%s not back after `ip link set %s up`: %v", dev, netdev, err)
		}
		time.Sleep(10 * time.Millisecond) // the kernel's link watch, not this package, brings the port back
	}
	t.Log(err)
	if !errors.Is(err, ErrPortNotActive) || !strings.Contains(err.Error(), dev+" port 1 is DOWN") ||
		!strings.Contains(err.Error(), "ip link set "+netdev+" up") {
		t.Errorf("Open of %s with %s down: %v, want ErrPortNotActive naming the port, its state and the interface", dev, netdev, err)
	}
}
