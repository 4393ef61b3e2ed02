package verbs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree makes files (name → content) under a temporary directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func wantErr(t *testing.T, err error, target error, parts ...string) {
	t.Helper()
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%v: want errors.Is %v", err, target)
	}
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%v: want it to say %q", err, p)
		}
	}
}

func TestNoDeviceError(t *testing.T) {
	t.Run("kernel has none", func(t *testing.T) {
		sys, dev := tree(t, nil), tree(t, nil)
		wantErr(t, noDeviceError(filepath.Join(sys, "missing"), dev), ErrNoDevice,
			"the kernel has none", "rdma link add rxe0 type rxe netdev IFACE", "modprobe rdma_rxe")
	})
	t.Run("no device files", func(t *testing.T) {
		sys := tree(t, map[string]string{"rxe0/parent": "veth0\n"})
		wantErr(t, noDeviceError(sys, tree(t, nil)), ErrNoDevice, "rxe0", "uverbs*", "modprobe ib_uverbs", "--device")
	})
	t.Run("no provider", func(t *testing.T) {
		sys := tree(t, map[string]string{"mlx5_0/x": ""})
		dev := tree(t, map[string]string{"uverbs0": ""})
		wantErr(t, noDeviceError(sys, dev), ErrNoDevice, "mlx5_0", filepath.Join(dev, "uverbs0"), "ibverbs-providers")
	})
}

func TestPermissionError(t *testing.T) {
	dev := tree(t, map[string]string{"uverbs0": ""})
	path := filepath.Join(dev, "uverbs0")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	err := permissionError("rxe0", path, fs.ErrPermission)
	wantErr(t, err, nil, "cannot open "+path, "(mode 0600)", "rxe0", "usermod -aG", "udev rule")
	if !isPermission(fs.ErrPermission) {
		t.Error("isPermission(fs.ErrPermission) is false")
	}
}

func TestMissingFileError(t *testing.T) {
	wantErr(t, missingFileError("rxe0", "/dev/infiniband/uverbs0"), nil,
		"/dev/infiniband/uverbs0", "does not exist", "--device /dev/infiniband/uverbs0")
}

func TestMemlockError(t *testing.T) {
	wantErr(t, memlockError(64<<10, 1376256), nil,
		"RLIMIT_MEMLOCK is 65536 bytes", "1376256 bytes", "`ulimit -l 1344`", "ulimit -l unlimited", "LimitMEMLOCK")
}

func TestPortError(t *testing.T) {
	wantErr(t, portError("rxe1", 1, "down", "veth1"), ErrPortNotActive,
		"rxe1 port 1 is DOWN", "ip link set veth1 up", "rdma link show rxe1/1")
	wantErr(t, portError("mlx5_0", 2, "init", ""), ErrPortNotActive, "mlx5_0 port 2 is INIT", "subnet manager")
}

func TestNetdevOf(t *testing.T) {
	sys := tree(t, map[string]string{"rxe0/parent": "veth0\n", "mlx5_0/device/net/eth2/x": ""})
	for dev, want := range map[string]string{"rxe0": "veth0", "mlx5_0": "eth2", "nosuch": ""} {
		if got := netdevOf(sys, dev); got != want {
			t.Errorf("netdevOf(%s) = %q, want %q", dev, got, want)
		}
	}
}
