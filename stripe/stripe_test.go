package stripe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/transport/inproc"
)

// fabric is several simulated networks on one clock: simnet models one
// device per rank, so member i of every rank's stripe is that rank's device
// on nets[i], as NIC i of every host is cabled to switch i.
type fabric struct {
	nets []*simnet.Network
}

// newFabric makes one network per spec, of size ranks each.
func newFabric(t *testing.T, size int, specs []faults.Spec, opts ...simnet.Option) *fabric {
	t.Helper()
	f := &fabric{}
	for i, spec := range specs {
		n, err := simnet.New(size, spec, opts...)
		if err != nil {
			t.Fatalf("network %d: %v", i, err)
		}
		f.nets = append(f.nets, n)
	}
	return f
}

// now is the fabric's clock (every network's: they move together).
func (f *fabric) now() time.Time { return f.nets[0].Now() }

// advance moves every network's clock by d.
func (f *fabric) advance(d time.Duration) {
	for _, n := range f.nets {
		n.Advance(d)
	}
}

// step moves the clock to the earliest delivery on any network, and
// reports whether there was one.
func (f *fabric) step() bool {
	var at time.Time
	found := false
	for _, n := range f.nets {
		if t, ok := n.NextEvent(); ok && (!found || t.Before(at)) {
			at, found = t, true
		}
	}
	if !found {
		return false
	}
	f.advance(at.Sub(f.now()))
	return true
}

// stripes makes every rank's stripe over its devices, connected to each
// other, closed at the end of the test.
func (f *fabric) stripes(t *testing.T, opts Options) []*Device {
	t.Helper()
	return f.stripesOver(t, opts, nil)
}

// stripesOver is stripes with rank r's member i made wrap(r, i, device)
// when wrap is not nil.
func (f *fabric) stripesOver(t *testing.T, opts Options, wrap func(r hal.Rank, i int, d hal.Device) hal.Device) []*Device {
	t.Helper()
	size := f.nets[0].Size()
	out := make([]*Device, size)
	for r := range out {
		var devs []hal.Device
		for i, n := range f.nets {
			d := n.Device(hal.Rank(r))
			if wrap != nil {
				d = wrap(hal.Rank(r), i, d)
			}
			devs = append(devs, d)
		}
		o := opts
		o.Rank, o.JobKey, o.Now = hal.Rank(r), simnet.DefaultJobKey, f.now
		s, err := New(devs, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[r] = s
	}
	connect(t, out)
	return out
}

// connect connects every pair, as the bootstrap does through PMI.
func connect(t *testing.T, s []*Device) {
	t.Helper()
	for i := range s {
		for j := range s {
			if i != j {
				if err := s[i].Connect(hal.Rank(j), s[j].Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestConformanceSimnet(t *testing.T) {
	for _, members := range []int{2, 3} {
		t.Run(fmt.Sprintf("simnet-x%d", members), func(t *testing.T) {
			haltest.Run(t, func(t *testing.T, size int) haltest.Net {
				f := newFabric(t, size, make([]faults.Spec, members))
				devs := make([]hal.Device, size)
				for r, s := range f.stripes(t, Options{}) {
					devs[r] = s
				}
				return haltest.Net{Devs: devs, JobKey: simnet.DefaultJobKey, Advance: f.step}
			})
		})
	}
}

// Over reliable in-process devices on real time: Wait beside Poll and the
// lossless flood run for real.
func TestConformanceInproc(t *testing.T) {
	const key = 0x57_52_49_50_45
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		fabs := []*inproc.Fabric{inproc.NewFabric(size, key), inproc.NewFabric(size, key)}
		devs := make([]hal.Device, size)
		for r := range devs {
			var members []hal.Device
			for _, f := range fabs {
				d, err := f.Open(hal.Rank(r))
				if err != nil {
					t.Fatal(err)
				}
				members = append(members, d)
			}
			s, err := New(members, Options{Rank: hal.Rank(r), JobKey: key})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			devs[r] = s
		}
		return haltest.Net{Devs: devs, JobKey: key}
	})
}

func TestNewErrors(t *testing.T) {
	f := newFabric(t, 2, make([]faults.Spec, 2))
	a, b := f.nets[0].Device(0), f.nets[1].Device(0)
	for name, c := range map[string]struct {
		members []hal.Device
		opts    Options
		want    string
	}{
		"none":          {nil, Options{}, "no member"},
		"nil":           {[]hal.Device{a, nil}, Options{}, "member 1 is nil"},
		"twice":         {[]hal.Device{a, a}, Options{}, "same device"},
		"silence":       {[]hal.Device{a, b}, Options{Silence: -1}, "Options.Silence"},
		"probe>silence": {[]hal.Device{a, b}, Options{Probe: time.Second}, "Options.Probe"},
	} {
		if _, err := New(c.members, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error naming %q", name, err, c.want)
		}
	}
}

func TestAddr(t *testing.T) {
	f := newFabric(t, 2, make([]faults.Spec, 2))
	s := f.stripes(t, Options{})
	if got, want := s[1].Addr(), "stripe:simnet:1,simnet:1"; got != want {
		t.Errorf("Addr = %q, want %q", got, want)
	}
	for _, bad := range []string{"simnet:1", "stripe:simnet:1", "stripe:simnet:1,simnet:1,simnet:1", "stripe:simnet:1,", ""} {
		err := s[0].Connect(1, bad)
		if !errors.Is(err, ErrBadAddress) || !errors.Is(err, hal.ErrUnknownPeer) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Connect(1, %q): %v, want ErrBadAddress and hal.ErrUnknownPeer naming the address", bad, err)
		}
	}
	if err := s[0].Connect(1, "stripe:simnet:1,simnet:0"); !errors.Is(err, hal.ErrUnknownPeer) || !strings.Contains(err.Error(), "member 1") {
		t.Errorf("Connect with a wrong member address: %v, want hal.ErrUnknownPeer naming member 1", err)
	}
	c := s[0].Caps()
	if c.MTU != simnet.DefaultMTU || c.Reliable || c.Ordered || c.NativeRDMA {
		t.Errorf("Caps = %+v over two unreliable simnet devices", c)
	}
}

// msg is a test frame: a data frame from src to dst whose payload starts
// with a 64-bit id.
func msg(src, dst hal.Rank, id uint64, size int) (hdr, payload []byte) {
	payload = make([]byte, max(size, 8))
	binary.LittleEndian.PutUint64(payload, id)
	hdr = make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: simnet.DefaultJobKey, Src: src, Dst: dst})
	hal.Seal(hdr, payload)
	return hdr, payload
}

// sendOK sends a frame and flushes, failing the test on anything but a
// full queue; it reports whether the frame went.
func sendOK(t *testing.T, s *Device, hdr, payload []byte) bool {
	t.Helper()
	err := s.Send(hdr, payload)
	if err != nil && !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("Send: %v", err)
	}
	if ferr := s.Flush(); ferr != nil && !errors.Is(ferr, hal.ErrNoResource) {
		t.Fatalf("Flush: %v", ferr)
	}
	return err == nil
}

// pollIDs polls s and returns the ids of the data frames it delivered.
func pollIDs(t *testing.T, s *Device) []uint64 {
	t.Helper()
	var ids []uint64
	if _, err := s.Poll(func(h *hal.Header, p []byte) {
		ids = append(ids, binary.LittleEndian.Uint64(p))
	}); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	return ids
}

// Sending and polling allocate nothing in the steady state (probes, which
// are rare, do).
func TestAllocs(t *testing.T) {
	f := newFabric(t, 2, make([]faults.Spec, 2))
	s := f.stripes(t, Options{Probe: -1})
	hdr, payload := msg(0, 1, 1, 300)
	fn := func(*hal.Header, []byte) {}
	step := func() {
		s[0].Send(hdr, payload)
		s[0].Flush()
		f.advance(100 * time.Microsecond)
		s[1].Poll(fn)
	}
	for range 1000 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Errorf("%v allocations per frame, want 0", a)
	}
}
