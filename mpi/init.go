package mpi

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/internal/devices"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/profile"
	"github.com/weft-hpc/weft/internal/sysmon"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/lapi"
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
// device, and in a binary built without -tags verbs fails with an error
// that says how to build it. With two or more opts.NICs the UDP device is
// a stripe of one per NIC. (internal/devices opens the devices; lapi
// routes them.) A field out of its range fails with an error wrapping
// ErrArg that names it. The fields by which collectives choose their
// algorithms (Direct, Accumulate, BcastRDMA, AllgatherRDMA, AlltoallRDMA,
// whether SingleCopy is on, NoShmColl) must be the same at every rank:
// the members of a communicator must choose alike, so Init fails, with
// an error wrapping ErrArg naming the variable, at a rank whose differ
// from rank 0's.
func InitWith(opts Options) (*World, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	if err := trace.FromEnv(); err != nil {
		return nil, fmt.Errorf("mpi: init: %w", err)
	}
	cl, err := pmi.Discover(opts.Timeout) // WEFT_TIMEOUT bounds every PMI reply too; 0: pmi.DefaultWait
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
	if err := bindRank(cl, &opts); err != nil {
		return nil, err
	}
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
	set, err := devices.Open(cl, devices.Config{JobKey: key, Track: trk, Transport: opts.Transport,
		Bind: opts.Bind, NICs: opts.NICs, VerbsDevices: opts.VerbsDevices, VerbsPort: opts.VerbsPort,
		VerbsGID: opts.VerbsGID, NodeCPUs: opts.NodeCPUs, Multicast: opts.BcastMcast,
		UDPMcast: opts.UDPMcast, NoGSO: opts.NoGSO, UDPBatch: opts.UDPBatch})
	if err != nil {
		return nil, err
	}
	oversub := devices.Oversubscribed(cl, opts.NodeCPUs)
	nodes, oversubAt, mcast, err := exchangeAddrs(cl, set, opts, oversub)
	if err != nil {
		set.Close()
		return nil, err
	}
	// Every process joins by reintegration: a rank that is restarted
	// (same rank, new process) never receives RDMA meant for its earlier
	// life, and peers' replicas of its TPT start afresh.
	lcfg := lapi.Config{Devices: set.Members, Route: set.Route, Rank: lapi.Rank(rank), Size: size, JobKey: key, Reintegrate: true,
		SingleCopyThreshold: opts.SingleCopy, Track: trk}
	// One rank per process: a spinning waiter holds up no other rank's
	// goroutine, and runtime.Gosched every few microseconds (lapi's
	// default, for mpi.Run's goroutine ranks) only woke idle runtime
	// threads that took cores from the peers it waited for. (With
	// GOMAXPROCS 1 the rank's own helpers, the route's watchers and
	// lapi's timer goroutine, then run within a millisecond, or when it
	// blocks; the route polls its parked members itself meanwhile.)
	lcfg.Gosched = time.Millisecond
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
		set.Close()
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
	w.agreeOversub(oversubAt)
	if err := waitJoined(lc, opts.Timeout); err != nil {
		lc.Close()
		return nil, err
	}
	w.closeAtFinalize(cl, opts)
	trace.Printf(2, "mpi %d: init: rank %d of %d via %s, device %s", rank, rank, size, cl.Kind(), set.Addr())
	return w, nil
}

// exchangeAddrs publishes this rank's node, whether the node is
// oversubscribed and its device address (and, with Options.BcastMcast,
// whether its device broadcasts) through PMI, passes the fence, and
// connects the device to every rank's address. It returns each rank's
// node and whether that node is oversubscribed, and whether every rank's
// device broadcasts.
func exchangeAddrs(cl pmi.Client, set devices.Set, opts Options, oversub bool) (nodes []int, oversubAt []bool, mcast bool, err error) {
	rank, size := cl.Rank(), cl.Size()
	// Each rank publishes its node (the lowest rank there, which every
	// rank of the node knows from the launcher) with its address: the
	// collectives go by node (hier.go). Whether its node runs more ranks
	// than cores goes with them: collectives choose by it, and the
	// members of one on several nodes must choose alike (coll.go).
	if err := cl.Put(addrKey(rank), formatAddr(nodeOf(cl), oversub, set.Addr())); err != nil {
		return nil, nil, false, fmt.Errorf("mpi: init: publish address: %w", err)
	}
	if rank == 0 {
		// The settings by which collectives choose, for every rank to
		// compare with its own (checkSettings).
		if err := cl.Put(settingsKey, strings.Join(collSettings(opts), ",")); err != nil {
			return nil, nil, false, fmt.Errorf("mpi: init: publish settings: %w", err)
		}
	}
	if opts.BcastMcast {
		// Whether this rank's device broadcasts: every rank must choose
		// multicast alike (bcast_rdma.go).
		can := "0"
		if set.Broadcasts() {
			can = "1"
		}
		if err := cl.Put(mcastKey(rank), can); err != nil {
			return nil, nil, false, fmt.Errorf("mpi: init: publish multicast: %w", err)
		}
	}
	if err := cl.Fence(); err != nil {
		return nil, nil, false, fmt.Errorf("mpi: init: fence: %w", err)
	}
	if rank != 0 {
		v, err := cl.Get(settingsKey)
		if err == nil {
			err = checkSettings(collSettings(opts), v)
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("mpi: init: %w", err)
		}
	}
	mcast = opts.BcastMcast
	for r := 0; mcast && r < size; r++ {
		v, err := cl.Get(mcastKey(r))
		mcast = err == nil && v == "1"
	}
	nodes, oversubAt = make([]int, size), make([]bool, size)
	for r := 0; r < size; r++ {
		v, err := cl.Get(addrKey(r))
		if err == nil {
			nodes[r], oversubAt[r], v, err = parseAddr(v, size)
		}
		if err == nil {
			err = set.Connect(r, v)
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("mpi: init: address of rank %d: %w", r, err)
		}
	}
	return nodes, oversubAt, mcast, nil
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
	devs := lc.Devices().Info()
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

// formatAddr is a rank's published "node,oversub@address": its node,
// 1 if the node runs more ranks than cores, else 0, and its device's
// address (not ';', which PMI-2 servers drop from values).
func formatAddr(node int, oversub bool, addr string) string {
	o := ",0@"
	if oversub {
		o = ",1@"
	}
	return strconv.Itoa(node) + o + addr
}

// parseAddr splits a rank's published formatAddr.
func parseAddr(v string, size int) (node int, oversub bool, addr string, err error) {
	head, addr, ok := strings.Cut(v, "@")
	n, o, ok2 := strings.Cut(head, ",")
	node, err = strconv.Atoi(n)
	if !ok || !ok2 || err != nil || node < 0 || node >= size || (o != "0" && o != "1") {
		return 0, false, "", fmt.Errorf("published %q, want node,oversub@address", v)
	}
	return node, o == "1", addr, nil
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

// settingsKey is the PMI key of rank 0's collSettings.
const settingsKey = "weft-coll-settings"

// collSettings are the Options by which collectives choose their
// algorithms, as "WEFT_NAME=value" with defaults filled in. Each rank
// reads them from its own environment, but every member of a
// communicator must choose as the others do, so every rank of the job
// must have the same (checkSettings).
func collSettings(o Options) []string {
	onOff := map[bool]string{true: "on", false: "off"}
	return []string{
		"WEFT_DIRECT=" + strconv.Itoa(orDefault(o.Direct, directLarge)),
		"WEFT_ACCUMULATE=" + strconv.Itoa(orDefault(o.Accumulate, accumulateLarge)),
		"WEFT_BCAST_RDMA=" + strconv.Itoa(orDefault(o.BcastRDMA, bcastRDMALarge)),
		"WEFT_ALLGATHER_RDMA=" + strconv.Itoa(orDefault(o.AllgatherRDMA, allgatherRDMALarge)),
		"WEFT_ALLTOALL_RDMA=" + strconv.Itoa(orDefault(o.AlltoallRDMA, alltoallRDMALarge)),
		"WEFT_SINGLECOPY=" + onOff[o.SingleCopy >= 0], // on or off decides; the size is point-to-point's
		"WEFT_SHMCOLL=" + onOff[!o.NoShmColl],
	}
}

// checkSettings compares this rank's collSettings, mine, with rank 0's
// as published (joined by commas), and names the first that differs.
func checkSettings(mine []string, rank0 string) error {
	theirs := strings.Split(rank0, ",")
	for i, s := range mine {
		if i >= len(theirs) || theirs[i] != s {
			t := "none"
			if i < len(theirs) {
				t = theirs[i]
			}
			return fmt.Errorf("%s here, %s at rank 0: collectives choose their algorithms by it, so every rank must have the same: %w", s, t, ErrArg)
		}
	}
	return nil
}

// mcastKey is the PMI key of whether a rank's device broadcasts ("1" or
// "0"; Options.BcastMcast).
func mcastKey(rank int) string { return "weft-mcast-" + strconv.Itoa(rank) }
