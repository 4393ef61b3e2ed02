package mpi

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/internal/cpubind"
	"github.com/weft-hpc/weft/internal/profile"
	"github.com/weft-hpc/weft/internal/trace"
)

// Options configures a world: the device Init opens and the thresholds
// and policies its calls follow. The zero value of every field means its
// default, so Options{} is the default configuration. A byte threshold
// that can be turned off is turned off by a negative value. Each field
// names the environment variable OptionsFromEnv reads it from;
// docs/tuning.md says what each is for.
type Options struct {
	// Transport picks the device Init opens (WEFT_TRANSPORT): "auto" or
	// "" uses shared memory when every rank is on this node, kernel UDP
	// sockets when no other rank is, and otherwise both under a route
	// (shared memory toward this node's ranks, UDP toward the others);
	// "shm" and "udp" force one; "verbs" puts every rank on an RDMA
	// device (package transport/verbs, in binaries built with -tags
	// verbs; without the tag Init fails saying so). In a binary built
	// with the tag, auto puts the ranks of other nodes on verbs instead
	// of UDP when every rank opens its RDMA device (one more PMI fence
	// decides it), and keeps UDP otherwise. Run ignores it: its ranks
	// share the in-process device.
	Transport string

	// Bind is the local address of the UDP device (WEFT_BIND); "" means
	// loopback when every rank is on this node, else the address this
	// host's name resolves to. Init only.
	Bind string

	// NICs are the network interfaces the UDP device stripes over
	// (WEFT_NICS, which gorun --nics sets): interface names, each
	// resolved on the rank's host to that interface's IPv4 address, or
	// local addresses. With two or more, Init opens one UDP device per NIC
	// and joins them in a stripe (package stripe), which it uses wherever
	// it would have used the single UDP device: alone, or toward the other
	// hosts under a route. One NIC is the single device bound there.
	// Empty (the default) is one NIC, chosen as Bind says; setting both
	// Bind and NICs is an error. A NIC that does not exist, or has no IPv4
	// address, fails Init with an error naming it. Init only.
	NICs []string

	// VerbsDevices are the RDMA devices the verbs device may open
	// (WEFT_VERBS_DEVICE, names as ibv_devices lists them, joined by
	// ','): with one, every rank opens it; with several, this node's
	// ranks take them in turn by their place on the node (the node's
	// i-th rank opens device i mod len). Empty means the first device
	// with an active port. Init with Transport verbs only.
	VerbsDevices []string

	// VerbsPort is the port on the RDMA device, from 1
	// (WEFT_VERBS_PORT); 0 means the device's first active port.
	VerbsPort int

	// VerbsGID is the index of the source GID in the port's GID table
	// (WEFT_VERBS_GID, 1-255); 0 means the port's RoCE v2 GID holding
	// an IPv4 address (on InfiniBand, index 0).
	VerbsGID int

	// NodeCPUs is how many CPUs this node's ranks share (WEFT_NODE_CPUS,
	// which gorun sets when it binds ranks to cores); 0 means the CPUs
	// this process may run on. More ranks than that on the node makes
	// waiting ranks yield their core instead of spinning. Init only.
	NodeCPUs int

	// BindTo binds this rank to its share of the node's CPUs in Init
	// (WEFT_BIND_TO, which gorun sets for the ranks it starts on other
	// hosts; those on its own it binds itself): "auto" gives each of the
	// node's ranks its own share of the CPUs this process may run on, one
	// CPU each when they outnumber them; "core" one CPU each; "" and
	// "none" leave the rank alone, as does a rank on the launcher's own
	// machine (WEFT_LAUNCHER_BOOT, which gorun sets: hosts that are
	// network namespaces of one machine share its CPUs). The rank's place
	// among the node's ranks comes from the process manager. Binding also
	// sets NodeCPUs, when it is 0, to the CPUs shared, and GOMAXPROCS,
	// unless the environment sets it, to the rank's share. Init only.
	BindTo string

	// Yield is how long a waiting rank polls with sched_yield before it
	// sleeps (WEFT_YIELD). 0 means the default: 1ms when the node runs
	// more ranks than NodeCPUs, else none; negative means none. Init only.
	Yield time.Duration

	// Timeout bounds every blocking call (WEFT_TIMEOUT): one that waits
	// longer fails with ErrTimeout and a report of what the rank waits
	// for. 0 means no bound (Init then still gives the peers a minute to
	// join).
	Timeout time.Duration

	// Eager is the largest message sent eagerly, copied through the
	// device; larger ones go by rendezvous (WEFT_EAGER). 0 means 64 KiB,
	// or one byte less than the single-copy size when that is smaller.
	Eager int

	// SingleCopy is the size from which rendezvous messages and
	// one-sided transfers between ranks of one node are one copy (shm
	// with cross-memory attach, or Run's goroutines) (WEFT_SINGLECOPY).
	// 0 means lapi's default (64 KiB on shm, 16 KiB between goroutines);
	// negative turns single copies off.
	SingleCopy int

	// Split is the rendezvous size from which both ends copy, half each
	// (WEFT_SPLIT). 0 means 256 KiB, and where single copies are on,
	// twice the single-copy size but at least 128 KiB, so that each half
	// is one copy; negative turns splitting off.
	Split int

	// Direct is the Allreduce size from which ranks of one node with
	// single-copy reads reduce by reading each other's buffers
	// (WEFT_DIRECT). 0 means 128 KiB; negative turns it off.
	Direct int

	// Accumulate is the size from which the other Allreduces reduce by
	// half-RDMA accumulate (WEFT_ACCUMULATE). 0 means 1 MiB; negative
	// turns it off.
	Accumulate int

	// BcastRDMA is the Bcast size from which more than two ranks
	// broadcast by lapi's broadcast RDMA, a pipelined tree of
	// conditional RDMA Puts (WEFT_BCAST_RDMA). 0 means 128 KiB; negative
	// turns it off.
	BcastRDMA int

	// AllgatherRDMA is the Allgather block (bytes per rank) from which
	// each rank Puts its block straight into every other rank's receive
	// buffer, instead of passing blocks round a ring of messages
	// (WEFT_ALLGATHER_RDMA). 0 means 64 KiB; negative turns it off. From
	// 1 MiB only where single copies reach the members or the members
	// span hosts.
	AllgatherRDMA int

	// AlltoallRDMA is the Alltoall block (bytes per peer) from which each
	// rank Puts its blocks straight into the peers' receive buffers,
	// instead of exchanging them pairwise by messages
	// (WEFT_ALLTOALL_RDMA). 0 means 64 KiB; negative turns it off. From
	// 1 MiB only where single copies reach the members or the members
	// span hosts.
	AlltoallRDMA int

	// NoGSO turns off generic segmentation offload on the UDP devices
	// (WEFT_GSO off): with it, a run of equal-size frames to one peer goes
	// to the kernel as one segmented send (UDP_SEGMENT) and may arrive as
	// one buffer (UDP_GRO), which at an Ethernet MTU is most of the network
	// path's bandwidth; a kernel or route that cannot segment is detected
	// at the first send and the device falls back. false means the
	// default: on. Init only.
	NoGSO bool

	// UDPBatch is how many frames one sendmmsg carries, and datagrams one
	// recvmmsg takes, on the UDP devices (WEFT_UDP_BATCH), 1-1024; with
	// GSO a run of frames to one peer is cut at the batch's end as well as
	// at 64 KiB. 0 means the device's default, 264. Init only.
	UDPBatch int

	// UDPMcast has a UDP device join the job's IP multicast group
	// ("on") or not ("off") whatever BcastMcast asks (WEFT_UDP_MCAST); a
	// device that cannot join opens without it. "" means as BcastMcast
	// asks, and never for the UDP device under a route. Init only.
	UDPMcast string

	// BcastMcast has the Bcasts that go by broadcast RDMA (BcastRDMA)
	// go by the network's multicast instead, where every rank's device
	// is one UDP device that joined the job's multicast group
	// (WEFT_BCAST_MCAST on): the data crosses the link once, and each
	// rank reads by RDMA what it lost (lapi.Multicast). Where some rank's
	// link does not pass multicast, every rank keeps the tree. false
	// means the default: off.
	BcastMcast bool

	// NoShmColl keeps small collectives on messages where the ranks
	// share memory, instead of the device's shared block (WEFT_SHMCOLL
	// off). false means the default: the shared block.
	NoShmColl bool

	// Sysmon is what Init or Run does with the Go runtime's monitor
	// thread (WEFT_SYSMON): "batch" moves it to SCHED_BATCH, so that its
	// wake-ups do not preempt a polling rank (internal/sysmon); "normal"
	// leaves it. "" means batch in Init, whose process is a rank, and
	// normal in Run, whose process (a user's test, say) is not only ranks.
	Sysmon string

	// AsyncProgress gives the progress goroutine of the nonblocking
	// collectives a processor of its own (WEFT_ASYNC_PROGRESS, as
	// MPICH_ASYNC_PROGRESS): Init raises GOMAXPROCS to 2 when it is 1, as
	// it is for a rank bound to one core. Without it such a rank's
	// collective moves only while the rank calls MPI; with it, the
	// progress goroutine shares the core with the computation, which the
	// kernel's scheduler preempts for it when a frame comes. Init only.
	AsyncProgress bool

	// Stats makes Finalize write this rank's counters (World.Stats) to
	// standard error, one line per layer and device, each starting
	// "weft-stats: " (WEFT_STATS, which gorun --stats sets; gorun takes
	// the lines out of the ranks' output and prints one table). Init only.
	Stats bool

	// Track records where each request, window, communicator, memory
	// registration, RDMA context and shared-memory segment was made
	// (WEFT_TRACK), so that Finalize names every one still live with the
	// file:line of the call that made it. false means off: nothing is
	// recorded, and a call pays one pointer test.
	Track bool

	// SnapshotDir is the directory each rank writes its state snapshot
	// to, as weft-snapshot-rankN.txt (WEFT_SNAPSHOT_DIR): on a fatal
	// error (a peer declared failed), on its first timeout (Timeout), and
	// when it receives SIGWINCH (pmi.AskSignal). It must exist. "" means
	// no file; under gorun the ranks send their snapshots to gorun all the
	// same, which writes them to its --snapshot-dir.
	SnapshotDir string
}

// The accepted values of Options' string fields, also WEFT_TRANSPORT's,
// WEFT_SYSMON's and WEFT_SHMCOLL's.
const (
	transportForm = "auto, shm, udp or verbs"
	sysmonForm    = "batch or normal"
	shmcollForm   = "on or off"
	udpMcastForm  = "on or off"
	udpBatchForm  = "a number of frames 1-1024"
)

// maxUDPBatch is transport/udp's MaxBatch, the most frames one system call
// carries (the kernel's UIO_MAXIOV); mpi may not import transport/udp, so
// a test checks that the two agree.
const maxUDPBatch = 1024

// check reports the first field that is out of its range, naming it and
// what it accepts.
func (o Options) check() error {
	bad := func(field string, v any, form string) error {
		return fmt.Errorf("mpi: Options.%s %#v: want %s: %w", field, v, form, ErrArg)
	}
	switch {
	case !slices.Contains([]string{"", "auto", "shm", "udp", "verbs"}, o.Transport):
		return bad("Transport", o.Transport, transportForm)
	case !slices.Contains([]string{"", "batch", "normal"}, o.Sysmon):
		return bad("Sysmon", o.Sysmon, sysmonForm)
	case o.BindTo != "" && !slices.Contains(cpubind.Modes, o.BindTo):
		return bad("BindTo", o.BindTo, bindToForm)
	case o.NodeCPUs < 0:
		return bad("NodeCPUs", o.NodeCPUs, "0 or more")
	case o.Timeout < 0:
		return bad("Timeout", o.Timeout, "0 or more")
	case o.Eager < 0:
		return bad("Eager", o.Eager, "0 or more bytes")
	case o.UDPBatch < 0 || o.UDPBatch > maxUDPBatch:
		return bad("UDPBatch", o.UDPBatch, udpBatchForm+" (0: the default)")
	case !slices.Contains([]string{"", "on", "off"}, o.UDPMcast):
		return bad("UDPMcast", o.UDPMcast, udpMcastForm)
	case o.VerbsPort < 0 || o.VerbsPort > 255:
		return bad("VerbsPort", o.VerbsPort, verbsPortForm)
	case o.VerbsGID < 0 || o.VerbsGID > 255:
		return bad("VerbsGID", o.VerbsGID, verbsGIDForm)
	case o.SnapshotDir != "" && !isDir(o.SnapshotDir):
		return bad("SnapshotDir", o.SnapshotDir, snapshotDirForm)
	case len(o.NICs) > 0 && o.Bind != "":
		return fmt.Errorf("mpi: Options.Bind %q and Options.NICs %q: set one (WEFT_BIND or WEFT_NICS): %w", o.Bind, o.NICs, ErrArg)
	}
	if !validNICs(o.NICs) {
		return bad("NICs", o.NICs, nicsForm)
	}
	if !validVerbsDevices(o.VerbsDevices) {
		return bad("VerbsDevices", o.VerbsDevices, verbsDevicesForm)
	}
	return nil
}

// bindToForm is what BindTo and WEFT_BIND_TO take.
const bindToForm = "auto, core or none"

// The forms of the verbs device's variables.
const (
	verbsDevicesForm = "RDMA device names (as ibv_devices lists them), distinct, joined by ','"
	verbsPortForm    = "a port number 1-255 (0: the first active port)"
	verbsGIDForm     = "a GID table index 1-255 (unset: the RoCE v2 IPv4 GID)"
)

// validVerbsDevices reports whether devs are device names Init can take:
// none empty, repeated or holding a space, ',' or '/'.
func validVerbsDevices(devs []string) bool {
	for i, d := range devs {
		if d == "" || strings.ContainsAny(d, " \t\n,/") || slices.Contains(devs[:i], d) {
			return false
		}
	}
	return true
}

// nicsForm is what Options.NICs and WEFT_NICS accept; maxNICs is
// stripe's bound on its members.
const (
	nicsForm = "at most 16 distinct interface names or addresses, joined by ','"
	maxNICs  = 16
)

// validNICs reports whether nics is a list Init can stripe over: at most
// maxNICs, none empty, repeated or holding a space or ','.
func validNICs(nics []string) bool {
	if len(nics) > maxNICs {
		return false
	}
	for i, n := range nics {
		if n == "" || strings.ContainsAny(n, " \t\n,") || slices.Contains(nics[:i], n) {
			return false
		}
	}
	return true
}

// envVar is one environment variable OptionsFromEnv reads: set stores a
// non-empty value v in o, or reports that v is not of the accepted form.
type envVar struct {
	name, form string
	set        func(o *Options, v string) bool
}

// envVars are every variable Options are read from, in the order of the
// fields.
var envVars = []envVar{
	{"WEFT_TRANSPORT", transportForm, func(o *Options, v string) bool {
		o.Transport = v
		return slices.Contains([]string{"auto", "shm", "udp", "verbs"}, v)
	}},
	{"WEFT_BIND", "a local address", func(o *Options, v string) bool {
		o.Bind = v
		return true
	}},
	{"WEFT_NICS", nicsForm, func(o *Options, v string) bool {
		o.NICs = strings.Split(v, ",")
		for i := range o.NICs {
			o.NICs[i] = strings.TrimSpace(o.NICs[i])
		}
		return validNICs(o.NICs)
	}},
	{"WEFT_VERBS_DEVICE", verbsDevicesForm, func(o *Options, v string) bool {
		o.VerbsDevices = strings.Split(v, ",")
		for i := range o.VerbsDevices {
			o.VerbsDevices[i] = strings.TrimSpace(o.VerbsDevices[i])
		}
		return validVerbsDevices(o.VerbsDevices)
	}},
	{"WEFT_VERBS_PORT", "a port number 1-255", func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.VerbsPort = n
		return err == nil && n >= 1 && n <= 255
	}},
	{"WEFT_VERBS_GID", "a GID table index 1-255", func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.VerbsGID = n
		return err == nil && n >= 1 && n <= 255
	}},
	{"WEFT_NODE_CPUS", "a positive number of CPUs", func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.NodeCPUs = n
		return err == nil && n > 0
	}},
	{"WEFT_BIND_TO", bindToForm, func(o *Options, v string) bool {
		o.BindTo = v
		return slices.Contains(cpubind.Modes, v)
	}},
	{"WEFT_YIELD", "a duration such as 1ms, or 0 for none", func(o *Options, v string) bool {
		d, err := time.ParseDuration(v)
		o.Yield = d
		if d == 0 {
			o.Yield = -1
		}
		return err == nil && d >= 0
	}},
	{"WEFT_TIMEOUT", "a duration such as 30s, or 0 for none", func(o *Options, v string) bool {
		d, err := time.ParseDuration(v)
		o.Timeout = d
		return err == nil && d >= 0
	}},
	{"WEFT_EAGER", "a positive number of bytes", func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.Eager = n
		return err == nil && n > 0
	}},
	{"WEFT_SINGLECOPY", "a number of bytes (0: the default, negative: off)", func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.SingleCopy = n
		return err == nil
	}},
	{"WEFT_SPLIT", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.Split })},
	{"WEFT_DIRECT", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.Direct })},
	{"WEFT_ACCUMULATE", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.Accumulate })},
	{"WEFT_BCAST_RDMA", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.BcastRDMA })},
	{"WEFT_ALLGATHER_RDMA", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.AllgatherRDMA })},
	{"WEFT_ALLTOALL_RDMA", "a number of bytes, or 0 for off", offBytes(func(o *Options) *int { return &o.AlltoallRDMA })},
	{"WEFT_GSO", "1 or on for segmentation offload on the UDP devices (the default), 0 or off not to", func(o *Options, v string) bool {
		o.NoGSO = v == "0" || v == "off"
		return slices.Contains([]string{"0", "1", "on", "off"}, v)
	}},
	{"WEFT_UDP_BATCH", udpBatchForm, func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		o.UDPBatch = n
		return err == nil && n >= 1 && n <= maxUDPBatch
	}},
	{"WEFT_UDP_MCAST", "1 or on to join the job's multicast group on the UDP devices, 0 or off not to", func(o *Options, v string) bool {
		switch v {
		case "1", "on":
			o.UDPMcast = "on"
		case "0", "off":
			o.UDPMcast = "off"
		default:
			return false
		}
		return true
	}},
	{"WEFT_BCAST_MCAST", "1 or on to broadcast large Bcasts by IP multicast over udp, 0 or off not to", func(o *Options, v string) bool {
		o.BcastMcast = v == "1" || v == "on"
		return slices.Contains([]string{"0", "1", "on", "off"}, v)
	}},
	{"WEFT_SHMCOLL", shmcollForm, func(o *Options, v string) bool {
		o.NoShmColl = v == "off"
		return slices.Contains([]string{"on", "off"}, v)
	}},
	{"WEFT_SYSMON", sysmonForm, func(o *Options, v string) bool {
		o.Sysmon = v
		return slices.Contains([]string{"batch", "normal"}, v)
	}},
	{"WEFT_ASYNC_PROGRESS", "1 or on to give the progress goroutine a processor, 0 or off not to", func(o *Options, v string) bool {
		o.AsyncProgress = v == "1" || v == "on"
		return slices.Contains([]string{"0", "1", "on", "off"}, v)
	}},
	{"WEFT_STATS", "1 or on to write the counters at Finalize, 0 or off not to", func(o *Options, v string) bool {
		o.Stats = v == "1" || v == "on"
		return slices.Contains([]string{"0", "1", "on", "off"}, v)
	}},
	{"WEFT_TRACK", "1 or on to record where resources are made and name the leaked ones at Finalize, 0 or off not to", func(o *Options, v string) bool {
		o.Track = v == "1" || v == "on"
		return slices.Contains([]string{"0", "1", "on", "off"}, v)
	}},
	{"WEFT_SNAPSHOT_DIR", snapshotDirForm, func(o *Options, v string) bool {
		o.SnapshotDir = v
		return isDir(v)
	}},
}

// checkedVars are variables OptionsFromEnv checks though they are not
// fields of Options (their packages read them), so that Init and Run refuse
// a malformed one as they do the others, and it is said once.
var checkedVars = []envVar{
	{trace.EnvVar, `a level from 0 to 9, or "off"`, func(_ *Options, v string) bool {
		_, err := trace.ParseLevel(v)
		return err == nil
	}},
	{profile.EnvVar, "one of " + strings.Join(profile.Kinds, ", "), func(_ *Options, v string) bool {
		return slices.Contains(profile.Kinds, v)
	}},
}

// snapshotDirForm is what Options.SnapshotDir and WEFT_SNAPSHOT_DIR
// accept.
const snapshotDirForm = "an existing directory"

// isDir reports whether path names a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// offBytes parses a threshold whose variable turns it off with 0 and whose
// field does so with a negative value.
func offBytes(field func(*Options) *int) func(*Options, string) bool {
	return func(o *Options, v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return false
		}
		if n == 0 {
			n = -1
		}
		*field(o) = n
		return true
	}
}

// OptionsFromEnv reads Options from the WEFT_* variables of the
// environment (docs/tuning.md lists them); an unset or empty variable
// leaves its field at the default. A value not of its variable's form is
// an error wrapping ErrArg that names the variable and the form; with
// several, the error joins one for each. WEFT_TRACE and WEFT_PROFILE, which
// are not fields, are checked the same way.
func OptionsFromEnv() (Options, error) {
	var o Options
	var errs []error
	for _, e := range slices.Concat(envVars, checkedVars) {
		v := strings.TrimSpace(os.Getenv(e.name))
		if v == "" {
			continue
		}
		if !e.set(&o, v) {
			errs = append(errs, fmt.Errorf("mpi: %s=%q: want %s: %w", e.name, v, e.form, ErrArg))
		}
	}
	if len(errs) > 0 {
		return Options{}, errors.Join(errs...)
	}
	return o, nil
}

// orDefault is a threshold from a field: def when it is 0, 0 (never) when
// it is negative.
func orDefault(field, def int) int {
	switch {
	case field == 0:
		return def
	case field < 0:
		return 0
	}
	return field
}
