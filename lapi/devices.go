package lapi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/stripe"
)

// setDevice makes Device the one device the context drives: Devices'
// route, or their one member. It checks first what would make Open fail
// after the route is built, so that a failed Open leaves the devices to
// the caller.
func (cfg *Config) setDevice() error {
	switch {
	case cfg.Device != nil && len(cfg.Devices) > 0:
		return errors.New("lapi: open: both Device and Devices set")
	case cfg.Device != nil:
		return nil
	case len(cfg.Devices) == 0:
		return errors.New("lapi: open: no device")
	case len(cfg.Devices) == 1 && cfg.Route == nil:
		cfg.Device = cfg.Devices[0]
		return nil
	case len(cfg.Route) != cfg.Size:
		return fmt.Errorf("lapi: open: a route of %d ranks for a job of %d", len(cfg.Route), cfg.Size)
	}
	for i, d := range cfg.Devices {
		if d != nil && d.Caps().MTU < pktHdrLen+64 {
			return fmt.Errorf("lapi: open: device %d (%s) MTU %d too small (need %d)", i, d.Addr(), d.Caps().MTU, pktHdrLen+64)
		}
	}
	// A simulation (Clock set) drives the devices in virtual time, where
	// a watcher goroutine's view of readiness would race the driver.
	rt, err := route.New(cfg.Devices, cfg.Route, route.Options{PollAll: cfg.Clock != nil})
	if err != nil {
		return fmt.Errorf("lapi: open: %w", err)
	}
	cfg.Device = rt
	return nil
}

// DeviceInfo describes one of the rank's devices: over a route each
// member, else the one device.
type DeviceInfo struct {
	// Name is the kind of device, its address's scheme ("shm", "udp",
	// "verbs", "stripe"); Addr its whole address.
	Name, Addr string
	// Peers are the other ranks it reaches.
	Peers []int
	// Counters are its frame counters, live.
	Counters *DeviceCounters
	// Stripe describes each member of a stripe (stripe.MemberStats), nil
	// for other devices.
	Stripe []string
}

// Drops are the frames the device dropped, by reason (only the reasons
// with some); nil when none.
func (d DeviceInfo) Drops() map[string]uint64 {
	var out map[string]uint64
	for r := range hal.NumDropReasons {
		if n := d.Counters.Drops[r].Load(); n > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[r.String()] = n
		}
	}
	return out
}

// Devices is the rank's devices as the context drives them.
func (c *Context) Devices() Devices { return Devices{dev: c.dev, rank: int(c.rank), size: c.cfg.Size} }

// Devices is a context's devices: one, or the members of a route
// (Config.Devices, or a route given as Config.Device).
type Devices struct {
	dev        hal.Device
	rank, size int
}

// Device is the device the context drives: the one device, or the route.
func (d Devices) Device() hal.Device { return d.dev }

// Info describes each member of the route with the ranks it reaches,
// else the one device, which reaches every other rank.
func (d Devices) Info() []DeviceInfo {
	members := []hal.Device{d.dev}
	r, isRoute := d.dev.(*route.Device)
	if isRoute {
		members = r.Members()
	}
	out := make([]DeviceInfo, 0, len(members))
	for _, m := range members {
		di := DeviceInfo{Addr: m.Addr(), Counters: m.Counters()}
		di.Name, _, _ = strings.Cut(di.Addr, ":")
		for p := range d.size {
			if p != d.rank && (!isRoute || r.Route(hal.Rank(p)) == m) {
				di.Peers = append(di.Peers, p)
			}
		}
		if st, ok := m.(*stripe.Device); ok {
			for _, ms := range st.Members() {
				di.Stripe = append(di.Stripe, fmt.Sprint(ms))
			}
		}
		out = append(out, di)
	}
	return out
}

// SharedBlock is the block of memory the device maps in every rank of
// this node (hal.SharedMemory: the shm device's segment, over a route
// its shm member's, the in-process device's), or nil when it has none:
// what the layer above runs its shared-memory collectives on.
func (d Devices) SharedBlock() []byte {
	if sm, ok := d.dev.(hal.SharedMemory); ok {
		return sm.SharedBlock()
	}
	return nil
}
