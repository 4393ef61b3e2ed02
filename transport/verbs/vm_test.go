//go:build !verbs

package verbs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestVM runs vmtest.sh: the verbs build of this package's tests inside
// the soft-RoCE VM. It needs what the script needs, and skips saying what
// is missing: root (rxe-run installs qemu and builds its image with
// apt-get), qemu-system-x86_64 or apt-get, gcc and libibverbs-dev for the
// cgo build, and rxe-run itself. -short skips it (a VM boot takes ~15 s).
func TestVM(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the VM run takes ~15-20 s")
	}
	if os.Getenv("RXE_DEVS") != "" {
		t.Skip("already inside the VM")
	}
	script, err := filepath.Abs("vmtest.sh")
	if err != nil {
		t.Fatal(err)
	}
	rxeRun := os.Getenv("RXE_RUN")
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "-test.v")
	cmd.Env = append(os.Environ(), "RXE_RUN="+rxeRun)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("vmtest.sh (%v):\n%s", time.Since(start).Round(time.Second), out.Bytes())
	if err != nil {
		t.Fatalf("vmtest.sh: %v", err)
	}
}
