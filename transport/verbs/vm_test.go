//go:build !verbs

package verbs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVM runs vmtest.sh: the verbs build of this package's tests inside
// the soft-RoCE VM. It needs what the script needs, and skips saying what
// is missing (vmScript). -short skips it (a VM boot takes ~15 s).
func TestVM(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the VM run takes ~15-20 s")
	}
	if os.Getenv("RXE_DEVS") != "" {
		t.Skip("already inside the VM")
	}
	script, rxeRun := vmScript(t, "vmtest.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := vmCommand(ctx, script, "-test.v")
	cmd.Env = append(os.Environ(), "RXE_RUN="+rxeRun)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("vmtest.sh (%v):\n%s", time.Since(start).Round(time.Second), out.Bytes())
	if err != nil {
		t.Fatalf("vmtest.sh: %v", err)
	}
}

// TestVMMPI runs mpitest.sh: MPI jobs of 2 and 3 ranks started by gorun
// --transport verbs inside the soft-RoCE VM (one boot), on rxe0 alone and
// across rxe0 and rxe1. The script checks each job; this test checks again
// the results it must print, and that every rank's verbs device said, at
// trace level 2, that it sent and received frames. It needs what TestVM
// needs and skips alike.
func TestVMMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the VM run takes ~45 s")
	}
	if os.Getenv("RXE_DEVS") != "" {
		t.Skip("already inside the VM")
	}
	script, rxeRun := vmScript(t, "mpitest.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := vmCommand(ctx, script)
	cmd.Env = append(os.Environ(), "RXE_RUN="+rxeRun)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("mpitest.sh (%v):\n%s", time.Since(start).Round(time.Second), out.Bytes())
	if err != nil {
		t.Fatalf("mpitest.sh: %v", err)
	}
	for _, want := range []string{
		"\ncollcheck ok: 60 rounds on 2 ranks\n",
		"\ncollcheck ok: 60 rounds on 3 ranks\n",
		"mpitest: all jobs passed",
	} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("mpitest.sh did not print %q", strings.TrimSpace(want))
		}
	}
	// pi to the 12 digits printed (the midpoint rule's error with 10^7
	// intervals is ~1e-13; the error's own digits depend on the order of
	// the sums).
	for _, n := range []string{"2", "3"} {
		pi := regexp.MustCompile(`(?m)^pi ≈ 3\.141592653590, error [0-9.e-]+, 10000000 intervals on ` + n + ` ranks$`)
		if !pi.Match(out.Bytes()) {
			t.Errorf("mpitest.sh did not print pi ≈ 3.141592653590 on %s ranks", n)
		}
	}
	// Finalize's trace line of each rank of the four jobs (2+2+3+3).
	carried := regexp.MustCompile(`mpi: rank \d device verbs:[0-9a-f]{32}:\d+:[0-9a-f]{8}:0: sent=[1-9]\d*/\d+B recv=[1-9]\d*/`)
	if n := len(carried.FindAll(out.Bytes(), -1)); n != 10 {
		t.Errorf("%d ranks' verbs devices said they carried frames, want 10", n)
	}
}

// benchLock is the lock that benchmarks and VM runs on this host take
// (flock): the VM takes both cores.
const benchLock = "/tmp/weft-bench.lock"

// benchLockHeld, set to 1, says the tests run under benchLock already
// (`WEFT_BENCH_LOCK_HELD=1 flock /tmp/weft-bench.lock bash .ci/run`):
// taking it again from a child would wait for the parent for ever.
const benchLockHeld = "WEFT_BENCH_LOCK_HELD"

// vmCommand runs script with args under flock benchLock, when flock is
// on PATH and benchLockHeld is not set.
func vmCommand(ctx context.Context, script string, args ...string) *exec.Cmd {
	argv := append([]string{"bash", script}, args...)
	if _, err := exec.LookPath("flock"); err == nil && os.Getenv(benchLockHeld) != "1" {
		argv = append([]string{"flock", benchLock}, argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// vmScript is the path of a script that runs tests in the rxe VM, and of
// rxe-run; it skips the test, naming what is missing, unless this host
// can run it: root (rxe-run installs qemu and builds its image with
// apt-get), qemu-system-x86_64 or apt-get, gcc and libibverbs-dev for the
// cgo build, go, and rxe-run itself.
func vmScript(t *testing.T, name string) (script, rxeRun string) {
	t.Helper()
	script, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	rxeRun = os.Getenv("RXE_RUN")
	if rxeRun == "" {
		rxeRun = filepath.Join(filepath.Dir(script), "..", "..", "..", "shared", "rxe-vm", "rxe-run")
	}
	var missing []string
	if _, err := os.Stat(rxeRun); err != nil {
		missing = append(missing, "rxe-run (set RXE_RUN to its path)")
	}
	if os.Getuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if _, err := exec.LookPath("apt-get"); err != nil {
			missing = append(missing, "qemu-system-x86")
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		missing = append(missing, "gcc")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		missing = append(missing, "libibverbs-dev (apt-get install -y libibverbs-dev)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		missing = append(missing, "go on PATH")
	}
	if len(missing) > 0 {
		t.Skipf("the rxe VM test needs %v", missing)
	}
	return script, rxeRun
}
