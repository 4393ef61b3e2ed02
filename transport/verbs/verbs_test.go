//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
)

// testJobKey is the job key every test device uses.
const testJobKey = 0x5eed_f00d_cafe_0029

// rxeDevs are the soft-RoCE devices rxe-run sets up in its VM (RXE_DEVS);
// tests that need a device skip without them.
func rxeDevs(t testing.TB) []string {
	t.Helper()
	devs := strings.Fields(os.Getenv("RXE_DEVS"))
	if len(devs) == 0 {
		t.Skip("no RDMA devices named in RXE_DEVS: run this test binary inside the rxe VM (transport/verbs/vmtest.sh)")
	}
	return devs
}

// rxePairs are the device pairs a two-rank test runs on: one device
// (rxe's loopback), and the first two across the wire when RXE_DEVS names
// two.
func rxePairs(t testing.TB) [][2]string {
	t.Helper()
	names := rxeDevs(t)
	pairs := [][2]string{{names[0], names[0]}}
	if len(names) > 1 {
		pairs = append(pairs, [2]string{names[0], names[1]})
	}
	return pairs
}

func openRank(t testing.TB, rank hal.Rank, size int, opts Options) *Device {
	t.Helper()
	d, err := Open(hal.Config{JobKey: testJobKey, Rank: rank, Size: size}, opts)
	if err != nil {
		t.Fatalf("Open rank %d on %q: %v", rank, opts.Device, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestConformance runs the shared hal.Device suite with every rank on the
// first device (rxe loops frames between queue pairs of one device back).
func TestConformance(t *testing.T) {
	dev := rxeDevs(t)[0]
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		devs := make([]hal.Device, size)
		for r := range devs {
			devs[r] = openRank(t, hal.Rank(r), size, Options{Device: dev})
		}
		return haltest.Net{Devs: devs, JobKey: testJobKey}
	})
}

// TestConformanceTwoDevices runs the suite with ranks alternating between
// two devices, so frames cross the wire between them (rxe0 <-> rxe1 over
// the VM's veth pair).
func TestConformanceTwoDevices(t *testing.T) {
	names := rxeDevs(t)
	if len(names) < 2 {
		t.Skipf("RXE_DEVS names %d device(s), want 2", len(names))
	}
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		devs := make([]hal.Device, size)
		for r := range devs {
			devs[r] = openRank(t, hal.Rank(r), size, Options{Device: names[r%2]})
		}
		return haltest.Net{Devs: devs, JobKey: testJobKey}
	})
}

// TestConformanceDatagrams runs the suite over the UD queue pair
// (Options.Datagrams), on one device and across two.
func TestConformanceDatagrams(t *testing.T) {
	for _, p := range rxePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			haltest.Run(t, func(t *testing.T, size int) haltest.Net {
				devs := make([]hal.Device, size)
				for r := range devs {
					devs[r] = openRank(t, hal.Rank(r), size, Options{Device: p[r%2], Datagrams: true})
				}
				return haltest.Net{Devs: devs, JobKey: testJobKey}
			})
		})
	}
}

// TestOpenDefaults: the zero Options find an active device, the RoCE v2
// IPv4 GID the VM reports, reliable frames of FrameSlot bytes (with
// Datagrams: unreliable, an MTU from the port).
func TestOpenDefaults(t *testing.T) {
	names := rxeDevs(t)
	d := openRank(t, 0, 1, Options{})
	if d.Name() != names[0] || d.Port() != 1 {
		t.Errorf("opened %s port %d, want %s port 1", d.Name(), d.Port(), names[0])
	}
	if want := os.Getenv("RXE0_GID_INDEX"); want != "" && want != itoa(d.GIDIndex()) {
		t.Errorf("GID index %d, want %s (RXE0_GID_INDEX)", d.GIDIndex(), want)
	}
	c := d.Caps()
	if !c.Reliable || !c.Ordered || c.MTU != FrameSlot-hal.HeaderLen {
		t.Errorf("Caps %+v: want reliable, ordered, MTU FrameSlot less the frame header", c)
	}
	dg := openRank(t, 0, 1, Options{Datagrams: true}).Caps()
	if dg.Reliable || dg.Ordered || dg.MTU <= 0 || (dg.MTU+hal.HeaderLen)&(dg.MTU+hal.HeaderLen-1) != 0 {
		t.Errorf("Caps with Datagrams %+v: want unreliable, unordered, MTU a power of two less the frame header", dg)
	}
	a, err := ParseAddress(d.Addr())
	if err != nil || !isIPv4Mapped(a.GID) || a.QKey != qkeyFor(testJobKey) {
		t.Errorf("Addr %q: %+v, %v: want an IPv4 GID and the job's queue key", d.Addr(), a, err)
	}
	t.Logf("%s port %d GID index %d MTU %d addr %s", d.Name(), d.Port(), d.GIDIndex(), c.MTU, d.Addr())
}

// TestUnknownDevice: a device name that does not exist lists those that do.
func TestUnknownDevice(t *testing.T) {
	names := rxeDevs(t)
	_, err := Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{Device: "nosuch0"})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), names[0]) {
		t.Errorf("Open(nosuch0): %v, want ErrNoDevice naming %s", err, names[0])
	}
}

// TestNoDevice runs where the kernel has no RDMA device (the host, not the
// VM): the error says how to add a soft-RoCE device.
func TestNoDevice(t *testing.T) {
	if len(dirNames(sysClassDir, "")) > 0 {
		t.Skipf("this host has RDMA devices (%v)", dirNames(sysClassDir, ""))
	}
	_, err := Open(hal.Config{JobKey: testJobKey, Size: 1}, Options{})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "rdma link add rxe0 type rxe netdev") {
		t.Fatalf("Open with no device: %v, want ErrNoDevice saying how to add rxe", err)
	}
	t.Log(err)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
