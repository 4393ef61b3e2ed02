package mpi

import (
	"context"
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
	"github.com/weft-hpc/weft/internal/profile"
	"github.com/weft-hpc/weft/internal/sysmon"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/stripe"
	"github.com/weft-hpc/weft/transport/shm"
	"github.com/weft-hpc/weft/transport/udp"
	"github.com/weft-hpc/weft/transport/verbs"
)

// Init bootstraps this process into its job from the environment: gorun or
// MPICH Hydra (PMI-1), Slurm's srun --mpi=pmi2 (PMI-2), Open MPI's mpirun
// (its variables, with gorun's rendezvous), or a singleton of size 1. The
// job key and every device address travel through the process manager;
// every socket binds port 0.
//
// Init is InitWith the Options of the environment (OptionsFromEnv): a
// variable not of its form fails Init with an error naming it.
func Init() (*World, error) {
	opts, err := OptionsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	return InitWith(opts)
}

// InitWith is Init configured by opts instead of the environment's
// tuning variables; the environment still carries the job (the process
// manager's variables), WEFT_TRACE, WEFT_PROFILE and WEFT_FAULTS.
// opts.Transport picks the device: auto (the default) uses shared memory
// when every rank is on this node, kernel UDP sockets when no other rank
// is, and otherwise both under a route (package route): shared memory
// toward this node's ranks, UDP toward the others; shm and udp force one
// (shm only when every rank is here); verbs puts every rank on an RDMA
// device (openVerbs), and in a binary built without -tags verbs fails
// with an error that says how to build it. With two or more
// opts.NICs the UDP device is a stripe of one per NIC (openNet). A field
// out of its range fails with an error wrapping ErrArg that names it.
func InitWith(opts Options) (*World, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	if err := trace.FromEnv(); err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	cl, err := pmi.Discover()
	if err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	w, err := initWith(cl, opts)
	if err != nil {
		cl.Abort(1, err.Error())
		return nil, err
	}
	return w, nil
}

func initWith(cl pmi.Client, opts Options) (*World, error) {
	rank, size := cl.Rank(), cl.Size()
	trace.SetRank(rank)
	if err := batchSysmon(opts.Sysmon, "batch"); err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	if opts.AsyncProgress && runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	key, err := pmi.JobKey(cl)
	if err != nil {
		return nil, fmt.Errorf("mpi: init: job key: %w", err)
	}
	trk := newTracker(opts) // nil unless Options.Track (track.go)
	cfg := hal.Config{JobKey: key, Rank: lapi.Rank(rank), Size: size, Track: trk}
	dev, err := openDevice(cl, cfg, opts)
	if err != nil {
		return nil, err
	}
	nodes, mcast, err := exchangeAddrs(cl, dev, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	// Every process joins by reintegration: a rank that is restarted
	// (same rank, new process) never receives RDMA meant for its earlier
	// life, and peers' replicas of its TPT start afresh.
	lcfg := lapi.Config{Device: dev, Rank: lapi.Rank(rank), Size: size, JobKey: key, Reintegrate: true,
		SingleCopyThreshold: opts.SingleCopy, Track: trk}
	oversub := oversubscribed(cl, opts.NodeCPUs)
	if oversub {
		// More ranks than cores here: spinning only delays the rank that
		// would answer, so give it the processor at once.
		lcfg.Spin, lcfg.Yield = -1, time.Millisecond
	}
	if opts.Yield != 0 {
		lcfg.Yield = max(opts.Yield, 0)
	}
	lc, err := lapi.Open(lcfg)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	lc.SetMulticast(mcast) // only with WEFT_BCAST_MCAST, and where every rank's device broadcasts
	if opts.BcastMcast {
		trace.Printf(trace.Setup, "mpi %d: large Bcasts by multicast: %v (every rank's device broadcasts: %v)", rank, mcast && lc.CanMulticast(), mcast)
	}
	// Handlers first: waiting makes progress, and a fast peer's first
	// messages may already be here.
	w, err := newWorldLayout(lc, opts, layout{nodes: nodes})
	if err != nil {
		lc.Close()
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	w.oversub = oversub
	if err := waitJoined(lc, opts.Timeout); err != nil {
		lc.Close()
		return nil, err
	}
	w.closeAtFinalize(cl, opts)
	trace.Printf(2, "mpi %d: init: rank %d of %d via %s, device %s", rank, rank, size, cl.Kind(), dev.Addr())
	return w, nil
}

// exchangeAddrs publishes this rank's node and device address (and, with
// Options.BcastMcast, whether its device broadcasts) through PMI, passes
// the fence, and connects the device to every rank's address. It returns
// each rank's node and whether every rank's device broadcasts.
func exchangeAddrs(cl pmi.Client, dev hal.Device, opts Options) (nodes []int, mcast bool, err error) {
	rank, size := cl.Rank(), cl.Size()
	// Each rank publishes its node (the lowest rank there, which every
	// rank of the node knows from the launcher) with its address: the
	// collectives go by node (hier.go).
	if err := cl.Put(addrKey(rank), strconv.Itoa(nodeOf(cl))+"@"+dev.Addr()); err != nil {
		return nil, false, fmt.Errorf("mpi: init: publish address: %w", err)
	}
	if opts.BcastMcast {
		// Whether this rank's device broadcasts: every rank must choose
		// multicast alike (bcast_rdma.go).
		can := "0"
		if _, ok := dev.(hal.Broadcaster); ok && dev.Caps().Broadcast {
			can = "1"
		}
		if err := cl.Put(mcastKey(rank), can); err != nil {
			return nil, false, fmt.Errorf("mpi: init: publish multicast: %w", err)
		}
	}
	if err := cl.Fence(); err != nil {
		return nil, false, fmt.Errorf("mpi: init: fence: %w", err)
	}
	mcast = opts.BcastMcast
	for r := 0; mcast && r < size; r++ {
		v, err := cl.Get(mcastKey(r))
		mcast = err == nil && v == "1"
	}
	nodes = make([]int, size)
	for r := 0; r < size; r++ {
		v, err := cl.Get(addrKey(r))
		if err == nil {
			nodes[r], v, err = parseAddr(v, size)
		}
		if err == nil {
			err = dev.Connect(lapi.Rank(r), v)
		}
		if err != nil {
			return nil, false, fmt.Errorf("mpi: init: address of rank %d: %w", r, err)
		}
	}
	return nodes, mcast, nil
}

// closeAtFinalize starts what a launched rank runs beside the job (the
// profile, gorun's questions, the trace signals) and queues, in order,
// what Finalize undoes.
func (w *World) closeAtFinalize(cl pmi.Client, opts Options) {
	rank := cl.Rank()
	stop := profile.StartFromEnv(rank)
	w.onClose = append(w.onClose, w.answerGorun()) // gorun --timeout asks what the rank waits for (report.go)
	w.onClose = append(w.onClose, w.traceAtInit()) // SIGUSR1/SIGUSR2 change the trace level (trace.go)
	w.onClose = append(w.onClose,
		func() error { stop(); return nil },
		func() error { traceDevices(rank, w.lc); return nil },
		w.lc.Close,
		w.statsAtFinalize(opts.Stats), // WEFT_STATS (stats.go), after Close has brought the device's counters up to date
		cl.Finalize)
}

// waitJoined waits until RDMA is enabled toward every peer: each has
// answered this rank's BOOTING and announced it is ready itself (bounded by
// timeout, Options.Timeout, or when that is 0 a minute: the peers passed
// the same PMI fence, so they are up).
func waitJoined(lc *lapi.Context, timeout time.Duration) error {
	d := time.Minute
	if timeout > 0 {
		d = timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for p := range lc.Size() {
		if err := lc.WaitRDMAReady(ctx, lapi.Rank(p)); err != nil {
			return fmt.Errorf("mpi: init: rank %d did not join (reintegration): %w", p, err)
		}
	}
	return nil
}

// traceDevices says, at trace level 2, what each of the rank's devices
// carried: over a route, which ranks each member reaches and its
// counters, so that a job can show which way its pairs went; over a
// stripe (alone or a route's member), each NIC's share and state too.
func traceDevices(rank int, lc *lapi.Context) {
	if !trace.On(trace.Setup) {
		return
	}
	devs := lc.Devices()
	for _, d := range devs {
		if len(devs) == 1 {
			trace.Printf(trace.Setup, "mpi: rank %d device %s: %v", rank, d.Addr, d.Counters)
		} else {
			trace.Printf(trace.Setup, "mpi: rank %d device %s toward ranks %v: %v", rank, d.Name, d.Peers, d.Counters)
		}
		for _, m := range d.Stripe {
			trace.Printf(trace.Setup, "mpi: rank %d stripe %s", rank, m)
		}
	}
}

// nodeOf is this rank's node as the job's ranks name it: the lowest rank
// on it.
func nodeOf(cl pmi.Client) int {
	if l := cl.Info().LocalRanks; len(l) > 0 {
		return l[0]
	}
	return cl.Rank() // a launcher that does not say: a node of its own
}

// parseAddr splits a rank's published "node@address" (not ';', which
// PMI-2 servers drop from values).
func parseAddr(v string, size int) (node int, addr string, err error) {
	n, addr, ok := strings.Cut(v, "@")
	node, err = strconv.Atoi(n)
	if !ok || err != nil || node < 0 || node >= size {
		return 0, "", fmt.Errorf("published %q, want node@address", v)
	}
	return node, addr, nil
}

// openDevice opens the device opts.Transport names. auto picks shared
// memory when every rank is on this node, UDP when no other rank is, and
// otherwise both under a route: shared memory toward the ranks of this
// node, UDP toward the others. The errors name WEFT_TRANSPORT, where
// users set it.
func openDevice(cl pmi.Client, cfg hal.Config, opts Options) (hal.Device, error) {
	t := opts.Transport
	local := cl.Info().LocalRanks
	oneNode := local != nil && len(local) == cfg.Size
	switch t {
	case "", "auto":
		switch {
		case oneNode && cfg.Size > 1:
			t = "shm"
		case len(local) > 1:
			return openRoute(cl, cfg, opts)
		default:
			if dev, err := autoVerbs(cl, cfg, opts, 0); dev != nil || err != nil {
				return dev, err
			}
			t = "udp"
		}
	case "shm":
		if !oneNode {
			return nil, fmt.Errorf("mpi: init: WEFT_TRANSPORT=shm, but the ranks are not all on this node (%d of %d here): use auto or udp", len(cl.Info().LocalRanks), cfg.Size)
		}
	case "udp":
	case "verbs":
		return openVerbs(cl, cfg, opts)
	default:
		return nil, fmt.Errorf("mpi: init: WEFT_TRANSPORT=%q: want auto, shm, udp or verbs", t)
	}
	if t == "shm" {
		return openShm(cl, cfg, opts, nil)
	}
	var o udp.Options
	if opts.BcastMcast {
		o.Multicast = udp.JobGroup(cfg.JobKey) // every rank of the job joins the same group
	}
	return openNet(cl, cfg, opts, o)
}

// openShm opens the shared-memory device toward ranks (nil: every rank).
func openShm(cl pmi.Client, cfg hal.Config, opts Options, ranks []lapi.Rank) (hal.Device, error) {
	o := shm.Options{Ranks: ranks}
	if oversubscribed(cl, opts.NodeCPUs) {
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
// device in Options.VerbsDevices at this rank's place on the node, or the
// first with an active port. The errors name WEFT_TRANSPORT and, for a
// device that cannot be opened, the device and what to do (verbs' own
// errors: a missing device, a port down, the device file, the memlock
// limit); a binary built without -tags verbs says how to build it.
func openVerbs(cl pmi.Client, cfg hal.Config, opts Options) (hal.Device, error) {
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
// this rank's place on the node among Options.VerbsDevices, the port, the
// GID index, and spin for Wait (blocking at once where the node is
// oversubscribed: as on shm, spinning delays the rank that would answer).
func verbsOptions(cl pmi.Client, opts Options, spin time.Duration) verbs.Options {
	o := verbs.Options{Port: opts.VerbsPort, GIDIndex: opts.VerbsGID, Spin: spin}
	if oversubscribed(cl, opts.NodeCPUs) {
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
// Options.NICs the network is the NICs' stripe, and verbs is not tried.
func autoVerbs(cl pmi.Client, cfg hal.Config, opts Options, spin time.Duration) (hal.Device, error) {
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
// toward the others, under one route (package route).
func openRoute(cl pmi.Client, cfg hal.Config, opts Options) (hal.Device, error) {
	local := cl.Info().LocalRanks
	ranks := make([]lapi.Rank, len(local))
	via := make([]int, cfg.Size)
	for i := range via {
		via[i] = 1
	}
	for i, r := range local {
		if r < 0 || r >= cfg.Size {
			return nil, fmt.Errorf("mpi: init: the launcher puts rank %d on this node, of a job of %d", r, cfg.Size)
		}
		ranks[i], via[r] = lapi.Rank(r), 0
	}
	sm, err := openShm(cl, cfg, opts, ranks)
	if err != nil {
		return nil, err
	}
	// Under a route the network device (UDP, each NIC's under a stripe,
	// or verbs) is waited on by the route's watcher only: its Wait blocks
	// at once, leaving the spinning to lapi's waiter, which polls both
	// devices.
	net, err := autoVerbs(cl, cfg, opts, -1)
	if net == nil && err == nil {
		net, err = openNet(cl, cfg, opts, udp.Options{Spin: -1})
	}
	if err != nil {
		sm.Close()
		return nil, err
	}
	dev, err := route.New([]hal.Device{sm, net}, via, route.Options{})
	if err != nil {
		sm.Close()
		net.Close()
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	return dev, nil
}

// openNet opens the network device: one UDP device on the address ranks on
// other hosts reach (openUDP), or, with two or more Options.NICs, one per
// NIC striped into one device (package stripe) whose address is the
// members' joined, so that a peer's member i reaches this rank's member i.
func openNet(cl pmi.Client, cfg hal.Config, opts Options, o udp.Options) (hal.Device, error) {
	switch len(opts.NICs) {
	case 0:
		bind, err := bindAddr(cl, opts.Bind)
		if err != nil {
			return nil, err
		}
		return openUDP(cfg, o, bind, "")
	case 1:
		bind, err := nicAddr(opts.NICs[0])
		if err != nil {
			return nil, err
		}
		return openUDP(cfg, o, bind, opts.NICs[0])
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
			if dev, err = openUDP(c, o, bind, nic); err == nil {
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

// openUDP opens a UDP device bound to bind; nic is the Options.NICs entry
// that named it, if any, for the error.
func openUDP(cfg hal.Config, o udp.Options, bind, nic string) (hal.Device, error) {
	o.Bind = bind
	dev, err := udp.OpenFromEnv(cfg, o)
	switch {
	case err != nil && nic != "" && nic != bind:
		return nil, fmt.Errorf("mpi: init: open udp device on NIC %s (%s): %w", nic, bind, err)
	case err != nil:
		return nil, fmt.Errorf("mpi: init: open udp device on %s: %w", bind, err)
	}
	return dev, nil
}

// nicAddr is the address a UDP device binds for an Options.NICs entry: the
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

// oversubscribed reports whether this node runs more ranks than it has
// cores, so that waiting ranks must yield their core rather than spin.
// nodeCPUs is Options.NodeCPUs: when gorun bound each rank to a share of
// the node's CPUs, how many they share; 0: the CPUs this process may run
// on.
func oversubscribed(cl pmi.Client, nodeCPUs int) bool {
	cpus := runtime.NumCPU()
	if nodeCPUs > 0 {
		cpus = nodeCPUs
	}
	return len(cl.Info().LocalRanks) > cpus
}

// sysmonBatch is sysmon.Batch; tests replace it to see whether it is
// called.
var sysmonBatch = sysmon.Batch

// batchSysmon applies Options.Sysmon (mode; "" means def): batch moves the
// Go runtime's monitor thread to SCHED_BATCH, so that its wake-ups do not
// preempt the polling ranks (internal/sysmon says why); normal leaves it.
// A thread that cannot be found is left alone and said so at trace level
// 2.
func batchSysmon(mode, def string) error {
	if mode == "" {
		mode = def
	}
	switch mode {
	case "batch":
		tid, err := sysmonBatch()
		if err != nil {
			trace.Printf(2, "mpi: sysmon left as it was: %v", err)
			return nil
		}
		trace.Printf(2, "mpi: sysmon (thread %d) on SCHED_BATCH", tid)
	case "normal":
	default:
		return fmt.Errorf("Options.Sysmon %q: want %s: %w", mode, sysmonForm, ErrArg)
	}
	return nil
}

func addrKey(rank int) string { return "weft-addr-" + strconv.Itoa(rank) }

// mcastKey is the PMI key of whether a rank's device broadcasts ("1" or
// "0"; Options.BcastMcast).
func mcastKey(rank int) string { return "weft-mcast-" + strconv.Itoa(rank) }

// bindAddr chooses the local address for the device: bind
// (Options.Bind) if set; loopback when every rank is on this node;
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
