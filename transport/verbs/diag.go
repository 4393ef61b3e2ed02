package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The errors below are for the person starting the job: each names what is
// wrong (a file, a limit, a port) and the command that fixes it. They are
// built from files alone (sysfs, /dev), so they are tested without RDMA
// hardware, on fake directory trees.

// ErrNoDevice: no usable RDMA device (none in the kernel, none reachable
// from this process, or none with an active port). The error wrapping it
// says which and how to fix it.
var ErrNoDevice = errors.New("verbs: no RDMA device")

// ErrPortNotActive: the chosen port is not ACTIVE (its link is down, or an
// InfiniBand subnet manager has not configured it yet).
var ErrPortNotActive = errors.New("verbs: port not active")

// ErrPeerLost: the reliable connection that carries frames to a peer
// could not be made within Options.ConnectTimeout, or broke (the peer's
// adapter stopped acknowledging: the process or its host is gone). Send
// toward that peer returns it, wrapped with the cause, from then on; lapi
// then declares the peer failed.
var ErrPeerLost = errors.New("verbs: reliable connection to the peer lost")

// ErrNotBuilt: this binary was built without the verbs device (Open's
// error then; errors.Is(err, errors.ErrUnsupported) holds too).
var ErrNotBuilt = fmt.Errorf("verbs: this build has no verbs device: build with -tags verbs and libibverbs-dev (cgo, Linux): %w", errors.ErrUnsupported)

// Where the kernel shows RDMA devices; tests point them at fake trees.
const (
	sysClassDir = "/sys/class/infiniband"
	devDir      = "/dev/infiniband"
)

// rxeHint is how to make an RDMA device on a host without one.
const rxeHint = "on a host without an RDMA NIC, add a soft-RoCE device over an Ethernet interface: " +
	"`modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE` (rdma is in iproute2), then check with `ibv_devices`; " +
	"if modprobe finds no rdma_rxe, this kernel was built without RDMA (CONFIG_RDMA_RXE): use another kernel or a VM"

// noDeviceError explains an empty device list from libibverbs, looking at
// what the kernel shows in sysDir (/sys/class/infiniband) and devDir
// (/dev/infiniband).
func noDeviceError(sysDir, devDir string) error {
	devs := dirNames(sysDir, "")
	cdevs := dirNames(devDir, "uverbs")
	switch {
	case len(devs) == 0:
		return fmt.Errorf("%w: the kernel has none (%s is empty or missing); %s", ErrNoDevice, sysDir, rxeHint)
	case len(cdevs) == 0:
		return fmt.Errorf("%w: the kernel has %s but there is no %s/uverbs*: load the verbs module "+
			"(`modprobe ib_uverbs`), or in a container pass the device files in (docker run --device %s/uverbs0 ...)",
			ErrNoDevice, strings.Join(devs, ", "), devDir, devDir)
	default:
		return fmt.Errorf("%w: the kernel has %s and %s, but libibverbs lists none: "+
			"install the user-space provider for this adapter (Debian/Ubuntu: apt-get install ibverbs-providers; "+
			"RHEL: dnf install libibverbs)",
			ErrNoDevice, strings.Join(devs, ", "), strings.Join(prefixed(devDir, cdevs), ", "))
	}
}

// missingFileError explains a device the kernel has whose device file is
// missing (a container without it, or a /dev without udev).
func missingFileError(dev, path string) error {
	return fmt.Errorf("verbs: cannot open %s for device %s: the file does not exist: in a container, pass it in "+
		"(docker run --device %s); otherwise create it (udev does, from the ib_uverbs module's "+
		"/sys/class/infiniband_verbs/*/dev numbers)", path, dev, path)
}

// permissionError explains a device file this process may not open.
func permissionError(dev, path string, err error) error {
	fix := "make it accessible: add your user to the group that owns it (`sudo usermod -aG GROUP $USER`, then log in again), " +
		"or install a udev rule such as `KERNEL==\"uverbs*\", MODE=\"0666\"` in /etc/udev/rules.d/ and run `udevadm trigger`"
	g := fileGroup(path)
	if g == "" || g == "root" {
		g = "rdma" // rdma-core's udev rules give uverbs to group rdma where they restrict it
	}
	fix = strings.Replace(fix, "GROUP", g, 1)
	mode := ""
	if fi, serr := os.Stat(path); serr == nil {
		mode = fmt.Sprintf(" (mode %04o)", fi.Mode().Perm())
	}
	return fmt.Errorf("verbs: cannot open %s%s for device %s: %v: %s", path, mode, dev, err, fix)
}

// memlockError explains a RLIMIT_MEMLOCK too low for the rings: limit is
// the soft limit in bytes, need what the rings register.
func memlockError(limit, need uint64) error {
	kib := (need + 1023) / 1024
	return fmt.Errorf("verbs: RLIMIT_MEMLOCK is %d bytes (ulimit -l %d) but this device registers %d bytes of "+
		"send and receive buffers, which the kernel locks in memory: raise the limit before starting the job, "+
		"`ulimit -l %d` or `ulimit -l unlimited` (for every login: `* - memlock unlimited` in "+
		"/etc/security/limits.conf; for a systemd service: LimitMEMLOCK=infinity), or lower Options.SendRing/RecvRing",
		limit, limit/1024, need, kib)
}

// portError explains a port that is not ACTIVE. netdev is the Ethernet
// interface under a RoCE port ("" when unknown).
func portError(dev string, port int, state string, netdev string) error {
	fix := "check the cable and the subnet manager (`ibstat`)"
	if netdev != "" {
		fix = fmt.Sprintf("bring up its network interface (`ip link set %s up`) and check that it has a carrier (`ip link show %s`)", netdev, netdev)
	}
	return fmt.Errorf("%w: %s port %d is %s, not ACTIVE: %s; `rdma link show %s/%d` shows its state",
		ErrPortNotActive, dev, port, strings.ToUpper(state), fix, dev, port)
}

// netdevOf names the Ethernet interface under a RoCE device: rxe says it in
// its "parent" attribute, PCI adapters list it under device/net.
func netdevOf(sysDir, dev string) string {
	if b, err := os.ReadFile(filepath.Join(sysDir, dev, "parent")); err == nil {
		return strings.TrimSpace(string(b))
	}
	if n := dirNames(filepath.Join(sysDir, dev, "device", "net"), ""); len(n) > 0 {
		return n[0]
	}
	return ""
}

// dirNames lists the names in dir that start with prefix, sorted; none if
// dir cannot be read.
func dirNames(dir, prefix string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

func prefixed(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(dir, n)
	}
	return out
}

// isPermission reports whether err is a refusal to open a file.
func isPermission(err error) bool { return errors.Is(err, fs.ErrPermission) }
