package devices

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/stripe"
	"github.com/weft-hpc/weft/transport/shm"
	"github.com/weft-hpc/weft/transport/udp"
	"github.com/weft-hpc/weft/transport/verbs"
)

// open opens the devices opts.Transport names. auto picks shared
// memory when every rank is on this node, UDP when no other rank is, and
// otherwise both: shared memory toward the ranks of this node, UDP toward
// the others. The errors name WEFT_TRANSPORT, where users set it.
func open(cl pmi.Client, cfg hal.Config, opts Config) (Set, error) {
	t := opts.Transport
	local := cl.Info().LocalRanks
	oneNode := local != nil && len(local) == cfg.Size
	var dev hal.Device
	var err error
	switch t {
	case "", "auto":
		switch {
		case oneNode && cfg.Size > 1:
			t = "shm"
		case len(local) > 1:
			return openRoute(cl, cfg, opts)
		default:
			if dev, err = autoVerbs(cl, cfg, opts, 0); dev != nil || err != nil {
				return one(dev, err)
			}
			t = "udp"
		}
	case "shm":
		if !oneNode {
			return Set{}, fmt.Errorf("mpi: init: WEFT_TRANSPORT=shm, but the ranks are not all on this node (%d of %d here): use auto or udp", len(local), cfg.Size)
		}
	case "udp":
	case "verbs":
		return one(openVerbs(cl, cfg, opts))
	default:
		return Set{}, fmt.Errorf("mpi: init: WEFT_TRANSPORT=%q: want auto, shm, udp or verbs", t)
	}
	if t == "shm" {
		return one(openShm(cl, cfg, opts, nil))
	}
	var o udp.Options
	if opts.Multicast {
		o.Multicast = udp.JobGroup(cfg.JobKey) // every rank of the job joins the same group
	}
	return one(openNet(cl, cfg, opts, o))
}

// one is the set of the one device dev, which reaches every rank.
func one(dev hal.Device, err error) (Set, error) {
	if err != nil {
		return Set{}, err
	}
	return Set{Members: []hal.Device{dev}}, nil
}

// openShm opens the shared-memory device toward ranks (nil: every rank).
func openShm(cl pmi.Client, cfg hal.Config, opts Config, ranks []hal.Rank) (hal.Device, error) {
	o := shm.Options{Ranks: ranks}
	if Oversubscribed(cl, opts.NodeCPUs) {
		o.Spin = -1
	}
	dev, err := shm.Open(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("mpi: init: open shared-memory device: %w", err)
	}
	return wrapFaults(dev)
}

// openVerbs opens the RDMA device (package transport/verbs) for every
// peer, this node's ranks too (the adapter loops their frames back): the
// device in Config.VerbsDevices at this rank's place on the node, or the
// first with an active port. The errors name WEFT_TRANSPORT and, for a
// device that cannot be opened, the device and what to do (verbs' own
// errors: a missing device, a port down, the device file, the memlock
// limit); a binary built without -tags verbs says how to build it.
func openVerbs(cl pmi.Client, cfg hal.Config, opts Config) (hal.Device, error) {
	o := verbsOptions(cl, opts, 0)
	dev, err := verbs.Open(cfg, o)
	if err != nil {
		on := ""
		if o.Device != "" {
			on = " " + o.Device + " (WEFT_VERBS_DEVICE)"
		}
		return nil, fmt.Errorf("mpi: init: WEFT_TRANSPORT=verbs: open RDMA device%s: %w", on, err)
	}
	trace.Printf(trace.Setup, "mpi: rank %d verbs device %s port %d GID index %d MTU %d", cfg.Rank, dev.Name(), dev.Port(), dev.GIDIndex(), dev.Caps().MTU)
	return wrapFaults(dev)
}

// verbsOptions are the verbs device's options from opts: the device at
// this rank's place on the node among Config.VerbsDevices, the port, the
// GID index, and spin for Wait (blocking at once where the node is
// oversubscribed: as on shm, spinning delays the rank that would answer).
func verbsOptions(cl pmi.Client, opts Config, spin time.Duration) verbs.Options {
	o := verbs.Options{Port: opts.VerbsPort, GIDIndex: opts.VerbsGID, Spin: spin}
	if Oversubscribed(cl, opts.NodeCPUs) {
		o.Spin = -1
	}
	if n := len(opts.VerbsDevices); n > 0 {
		o.Device = opts.VerbsDevices[localIndex(cl)%n]
	}
	return o
}

// autoVerbs is auto's choice of the network device in a binary built
// with -tags verbs: every rank tries to open its RDMA device (as
// Transport verbs would, with spin for the device's Wait) and publishes
// whether it could; if every rank could, the RDMA device is this rank's
// network device, else each closes its own and the caller opens UDP. The
// ranks agree through one PMI fence, which binaries without the tag (the
// same binary on every rank) skip: they return (nil, nil) at once. With
// Config.NICs the network is the NICs' stripe, and verbs is not tried.
func autoVerbs(cl pmi.Client, cfg hal.Config, opts Config, spin time.Duration) (hal.Device, error) {
	if !verbs.Built || len(opts.NICs) > 0 {
		return nil, nil
	}
	dev, openErr := verbs.Open(cfg, verbsOptions(cl, opts, spin))
	can := "1"
	if openErr != nil {
		can = "0"
	}
	closeDev := func() {
		if openErr == nil {
			dev.Close()
		}
	}
	rank := cl.Rank()
	if err := cl.Put(verbsKey(rank), can); err != nil {
		closeDev()
		return nil, fmt.Errorf("mpi: init: publish whether verbs opened: %w", err)
	}
	if err := cl.Fence(); err != nil {
		closeDev()
		return nil, fmt.Errorf("mpi: init: fence (verbs): %w", err)
	}
	for r := range cfg.Size {
		if v, err := cl.Get(verbsKey(r)); err != nil || v != "1" {
			closeDev()
			if openErr != nil {
				trace.Printf(trace.Setup, "mpi: rank %d: auto keeps UDP: this rank's RDMA device: %v", rank, openErr)
			} else {
				trace.Printf(trace.Setup, "mpi: rank %d: auto keeps UDP: rank %d has no usable RDMA device", rank, r)
			}
			return nil, nil
		}
	}
	trace.Printf(trace.Setup, "mpi: rank %d auto picked verbs device %s port %d GID index %d MTU %d", cfg.Rank, dev.Name(), dev.Port(), dev.GIDIndex(), dev.Caps().MTU)
	return wrapFaults(dev)
}

// verbsKey is the PMI key of whether a rank opened its RDMA device ("1"
// or "0"; auto in a build with -tags verbs).
func verbsKey(rank int) string { return "weft-verbs-" + strconv.Itoa(rank) }

// localIndex is this rank's place among the ranks of its node (its rank
// when the launcher does not say).
func localIndex(cl pmi.Client) int {
	for i, r := range cl.Info().LocalRanks {
		if r == cl.Rank() {
			return i
		}
	}
	return cl.Rank()
}

// openRoute opens shared memory toward the ranks of this node and UDP
// toward the others: a set of two, which lapi drives under one route
// (package route).
func openRoute(cl pmi.Client, cfg hal.Config, opts Config) (Set, error) {
	local := cl.Info().LocalRanks
	ranks := make([]hal.Rank, len(local))
	via := make([]int, cfg.Size)
	for i := range via {
		via[i] = 1
	}
	for i, r := range local {
		if r < 0 || r >= cfg.Size {
			return Set{}, fmt.Errorf("mpi: init: the launcher puts rank %d on this node, of a job of %d", r, cfg.Size)
		}
		ranks[i], via[r] = hal.Rank(r), 0
	}
	sm, err := openShm(cl, cfg, opts, ranks)
	if err != nil {
		return Set{}, err
	}
	// Under a route the network device (UDP, each NIC's under a stripe,
	// or verbs) is waited on by the route's watcher only: its Wait blocks
	// at once, leaving the spinning to lapi's waiter, which polls both
	// devices.
	net, err := autoVerbs(cl, cfg, opts, -1)
	if net == nil && err == nil {
		// No multicast group here, whatever Config.Multicast says: a
		// broadcast would reach this host's other ranks through the
		// loopback too, where the hierarchy's Bcast reaches them
		// through shared memory, much sooner. (Multicast among the
		// nodes' leaders alone is not built.)
		net, err = openNet(cl, cfg, opts, udp.Options{Spin: -1})
	}
	if err != nil {
		sm.Close()
		return Set{}, err
	}
	return Set{Members: []hal.Device{sm, net}, Route: via}, nil
}

// openNet opens the network device: one UDP device on the address ranks on
// other hosts reach (openUDP), or, with two or more Config.NICs, one per
// NIC striped into one device (package stripe) whose address is the
// members' joined, so that a peer's member i reaches this rank's member i.
func openNet(cl pmi.Client, cfg hal.Config, opts Config, o udp.Options) (hal.Device, error) {
	switch len(opts.NICs) {
	case 0:
		bind, err := bindAddr(cl, opts.Bind)
		if err != nil {
			return nil, err
		}
		return openUDP(cfg, opts, o, bind, "")
	case 1:
		bind, err := nicAddr(opts.NICs[0])
		if err != nil {
			return nil, err
		}
		return openUDP(cfg, opts, o, bind, opts.NICs[0])
	}
	devs := make([]hal.Device, 0, len(opts.NICs))
	closeAll := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	for i, nic := range opts.NICs {
		bind, err := nicAddr(nic)
		if err == nil {
			c := cfg
			c.Index = uint8(i)
			var dev hal.Device
			if dev, err = openUDP(c, opts, o, bind, nic); err == nil {
				devs = append(devs, dev)
			}
		}
		if err != nil {
			closeAll()
			return nil, err
		}
	}
	st, err := stripe.New(devs, stripe.Options{Rank: cfg.Rank, JobKey: cfg.JobKey})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("mpi: init: stripe over NICs %s: %w", strings.Join(opts.NICs, ","), err)
	}
	return st, nil
}

// openUDP opens a UDP device bound to bind, with opts' GSO, batch and
// multicast choice over o's; nic is the Config.NICs entry that named it,
// if any, for the error.
func openUDP(cfg hal.Config, opts Config, o udp.Options, bind, nic string) (hal.Device, error) {
	o.Bind = bind
	o.GSO = !opts.NoGSO
	if opts.UDPBatch != 0 {
		o.Batch = opts.UDPBatch
	}
	switch opts.UDPMcast {
	case "on":
		o.Multicast = udp.JobGroup(cfg.JobKey)
	case "off":
		o.Multicast = netip.AddrPort{}
	}
	dev, err := udp.OpenFromEnv(cfg, o)
	switch {
	case err != nil && nic != "" && nic != bind:
		return nil, fmt.Errorf("mpi: init: open udp device on NIC %s (%s): %w", nic, bind, err)
	case err != nil:
		return nil, fmt.Errorf("mpi: init: open udp device on %s: %w", bind, err)
	}
	return dev, nil
}

// nicAddr is the address a UDP device binds for an Config.NICs entry: the
// entry itself if it is an IP address, else the first IPv4 address of the
// interface of that name on this host. The errors name the NIC and
// WEFT_NICS, where users set it.
func nicAddr(nic string) (string, error) {
	if a, err := netip.ParseAddr(nic); err == nil {
		return a.String(), nil
	}
	host, _ := os.Hostname()
	ifi, err := net.InterfaceByName(nic)
	if err != nil {
		return "", fmt.Errorf("mpi: init: NIC %q (WEFT_NICS): no interface of that name on host %s: %w", nic, host, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", fmt.Errorf("mpi: init: NIC %q (WEFT_NICS) on host %s: its addresses: %w", nic, host, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.To4().String(), nil
		}
	}
	return "", fmt.Errorf("mpi: init: NIC %q (WEFT_NICS) on host %s has no IPv4 address", nic, host)
}

// wrapFaults applies WEFT_FAULTS to a device, as inproc and udp do for
// themselves, so user code can be tested under a hostile network on any
// device.
func wrapFaults(dev hal.Device) (hal.Device, error) {
	spec, ok, err := faults.FromEnv()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	if !ok {
		return dev, nil
	}
	return faults.Wrap(dev, spec, time.Now), nil
}

// Oversubscribed reports whether this node runs more ranks than it has
// cores, so that waiting ranks must yield their core rather than spin.
// nodeCPUs is Config.NodeCPUs: when gorun bound each rank to a share of
// the node's CPUs, how many they share; 0: the CPUs this process may run
// on.
func Oversubscribed(cl pmi.Client, nodeCPUs int) bool {
	cpus := runtime.NumCPU()
	if nodeCPUs > 0 {
		cpus = nodeCPUs
	}
	return len(cl.Info().LocalRanks) > cpus
}

// bindAddr chooses the local address for the device: bind
// (Config.Bind) if set; loopback when every rank is on this node;
// otherwise the address this host's name resolves to, which is how the
// other hosts reach it.
func bindAddr(cl pmi.Client, bind string) (string, error) {
	if bind != "" {
		return bind, nil
	}
	if info := cl.Info(); info.LocalRanks == nil || len(info.LocalRanks) == cl.Size() {
		return "127.0.0.1", nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("mpi: init: host name: %w", err)
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return "", fmt.Errorf("mpi: init: ranks span hosts, but this host's name %q does not resolve (%w): set WEFT_BIND to this host's address", host, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() && ip.To4() != nil {
			return ip.String(), nil
		}
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return ip.String(), nil
		}
	}
	return "", errors.New("mpi: init: ranks span hosts, but this host's name resolves only to loopback: set WEFT_BIND to this host's address")
}
