package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/internal/cpubind"
	"github.com/weft-hpc/weft/internal/profile"
)

// Sentinel errors of the launcher, for errors.Is.
var (
	// ErrUsage: bad flags or arguments; gorun exits 2.
	ErrUsage = errors.New("usage")
	// ErrSlots: more ranks than slots without --oversubscribe.
	ErrSlots = errors.New("not enough slots")
	// ErrProgram: the program is missing, not executable, or does not build.
	ErrProgram = errors.New("program")
	// ErrHost: a host cannot be used (no route, no address, bad hostfile).
	ErrHost = errors.New("host")
)

// Options is a parsed gorun command line.
type Options struct {
	N             int               // ranks
	Hosts         []Host            // -H and --hostfile; empty: this host only
	Rsh           []string          // command that reaches a host, split on spaces
	Oversubscribe bool              // allow more ranks than slots
	Transport     string            // WEFT_TRANSPORT for every rank: auto, shm, udp or verbs
	NICs          string            // --nics LIST: WEFT_NICS for the ranks of every host ("": not set)
	HostNICs      map[string]string // --nics HOST=LIST: WEFT_NICS for HOST's ranks, over NICs
	transportFrom string            // where Transport came from, for messages
	TagOutput     bool              // prefix lines with [rank]
	Timeout       time.Duration     // 0: none
	Trace         int               // -1: not set
	Profile       string            // "", cpu, mem, block, mutex
	Stats         bool              // --stats: the ranks' counters, one table at the end (stats.go)
	SnapshotDir   string            // --snapshot-dir: where the ranks' state snapshots go ("": a new directory in TMPDIR) (snapshot.go)
	BindTo        string            // auto, core, none: see bind.go
	Env           []string          // -x NAME=VALUE, in order
	Wrap          bool              // --wrap: run a foreign launcher with a rendezvous
	Program       string            // package directory or binary (or launcher with --wrap)
	Args          []string          // program arguments

	// KillGrace is how long ranks get between SIGTERM and SIGKILL when the
	// job is stopped.
	KillGrace time.Duration
}

// defaultRsh reaches hosts when --rsh is not given: BatchMode so that a
// password prompt fails instead of hanging, ConnectTimeout so that an
// unreachable host fails in seconds, -x for no X11 forwarding (mpirun's).
var defaultRsh = []string{"ssh", "-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}

// transports are the devices a gorun job can run on (WEFT_TRANSPORT).
var transports = []string{"auto", "shm", "udp", "verbs"}

// notYet says why a device name the design promises cannot be used yet.
var notYet = map[string]string{
	"inproc-test": "the in-process device runs ranks as goroutines of one test program (mpi.Run), not as processes gorun starts",
}

// hiddenFlags are accepted only to be refused with why (see ParseArgs):
// they name features that do not exist yet, so the help does not list them.
var hiddenFlags = map[string]bool{}

// maxNICs is how many NICs a rank may stripe over (package stripe's bound).
const maxNICs = 16

const usageText = `usage: gorun [flags] PACKAGE-DIR|BINARY [args...]
       gorun --wrap [--] LAUNCHER [launcher args...]

Starts N ranks of a weft program: builds a Go package directory once (or
takes a binary), serves PMI-1 and PMI-2 to the ranks (Hydra's wire
protocol: unmodified MPICH programs run too), passes their output through,
forwards SIGINT/SIGTERM, and exits with the status of the first rank that
failed after stopping the rest (130 after Ctrl-C).

SIGUSR1 and SIGUSR2 sent to gorun are forwarded to every rank: each raises
(lowers) the ranks' trace level by one while they run (see --trace).

SIGQUIT (Ctrl-\) sent to gorun asks every rank for its state snapshot and
prints a summary of what each waits for, on whom; the job goes on (see
--snapshot-dir).

Remote hosts (-H, --hostfile) are reached with --rsh. A package directory
is built here and the binary copied to each remote host (into its TMPDIR,
removed when the job ends); a BINARY must exist at the same path on every
host. gorun's WEFT_* variables and those -x names reach every rank.

`

// stringList is a repeatable flag.
type stringList []string

// String implements flag.Value.
func (s *stringList) String() string { return strings.Join(*s, ",") }

// Set implements flag.Value: each use of the flag adds one value.
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// ParseArgs parses gorun's arguments (without the program name). Flags stop
// at the first non-flag argument, the program; the rest are its arguments.
// Flags may be written with one dash or two (-n 4, --tag-output).
func ParseArgs(args []string, stderr io.Writer) (*Options, error) {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &Options{Trace: -1, KillGrace: 2 * time.Second}
	var hostList, xs, nics stringList
	var hostfile, rsh, trace string
	fs.IntVar(&o.N, "n", 1, "number of ranks")
	fs.IntVar(&o.N, "np", 1, "same as -n")
	fs.Var(&hostList, "H", "hosts as host[:slots],... (repeatable); ranks go to hosts by slot")
	fs.StringVar(&hostfile, "hostfile", "", "file with one host[:slots] (or 'host slots=N') per line")
	fs.StringVar(&rsh, "rsh", "", "command that reaches a host (default: ssh -x -o BatchMode=yes -o ConnectTimeout=10)")
	fs.BoolVar(&o.Oversubscribe, "oversubscribe", false, "allow more ranks than slots")
	fs.StringVar(&o.Transport, "transport", "auto", "auto | shm | udp | verbs (auto: shm within one host, udp across hosts; verbs: RDMA for every rank, in programs built with -tags verbs, which gorun adds when it builds a package directory; when not given, WEFT_TRANSPORT if set)")
	fs.Var(&nics, "nics", "NICs each rank stripes its network traffic over (WEFT_NICS): a,b for every host, or HOST=a,b for one host's ranks (repeatable); interface names, resolved on each rank's host, or addresses (default: one NIC, the address the host's name resolves to)")
	fs.BoolVar(&o.TagOutput, "tag-output", false, "prefix each output line with [rank]")
	fs.DurationVar(&o.Timeout, "timeout", 0, "stop the job after this long (exit status 124), first reporting per rank the MPI call it is blocked in (operation, peer, tag, communicator; asked with SIGWINCH, answers awaited 2s), or that it is in none or did not answer, and its PMI state")
	fs.StringVar(&trace, "trace", "", "trace level 0-9 for the ranks (WEFT_TRACE), changed while they run by SIGUSR1 (one up) and SIGUSR2 (one down) sent to gorun, which forwards them to every rank, or to one rank; 4 and up also trace gorun's PMI wire")
	fs.BoolVar(&o.Stats, "stats", false, "print at the end one table of every rank's counters at its Finalize: per rank its reliable layer (lapi: messages, packets, retransmits, RDMA redrives, single-copy bytes, drops by reason) and each device (peers, frames, bytes, drops by reason) (WEFT_STATS=1 for the ranks)")
	fs.StringVar(&o.SnapshotDir, "snapshot-dir", "", "directory for the ranks' state snapshots, weft-snapshot-rankN.txt (default: a new directory in TMPDIR, made at the first one); a rank sends one at a fatal error and its first timeout (WEFT_TIMEOUT), and every running rank when asked (SIGWINCH) at --timeout, when a rank fails, and when gorun receives SIGQUIT (Ctrl-\\: the job goes on); gorun prints a summary naming what each rank waits for, the cycle when ranks wait on each other, the ranks a collective waits for, and the ranks not in MPI")
	fs.StringVar(&o.Profile, "profile", "", "cpu | mem | block | mutex: each rank writes KIND-rankN.pprof in the current directory")
	fs.StringVar(&o.BindTo, "bind-to", "auto", "auto | core | none: bind ranks to cores on every host (auto: each rank its own share of its host's cores, one core each when they outnumber them; a rank on another host binds itself when it starts, through WEFT_BIND_TO, unless that host is a namespace of this machine; when not given, WEFT_BIND_TO if set; -x WEFT_BIND_TO wins)")
	fs.Var(&xs, "x", "NAME=VALUE (or NAME, taken from gorun's environment) for the ranks; repeatable")
	fs.BoolVar(&o.Wrap, "wrap", false, "run a foreign launcher (mpirun, srun) with a GORUN_KVS rendezvous server")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		shown := flag.NewFlagSet("gorun", flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if !hiddenFlags[f.Name] {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		shown.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	rest := fs.Args()
	if o.Wrap && len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("%w: no program given (gorun [flags] PACKAGE-DIR|BINARY [args...])", ErrUsage)
	}
	o.Program, o.Args = rest[0], rest[1:]

	if o.N < 1 {
		return nil, fmt.Errorf("%w: -n %d: need at least one rank", ErrUsage, o.N)
	}
	if o.Profile != "" && !slices.Contains(profile.Kinds, o.Profile) {
		return nil, fmt.Errorf("%w: --profile %q: want one of %s", ErrUsage, o.Profile, strings.Join(profile.Kinds, ", "))
	}
	if trace != "" {
		n, err := strconv.Atoi(trace)
		if err != nil || n < 0 || n > 9 {
			return nil, fmt.Errorf("%w: --trace %q: want a level 0-9", ErrUsage, trace)
		}
		o.Trace = n
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: --timeout %v is negative", ErrUsage, o.Timeout)
	}
	if o.SnapshotDir != "" {
		if fi, err := os.Stat(o.SnapshotDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: --snapshot-dir %q: want an existing directory", ErrUsage, o.SnapshotDir)
		}
		if abs, err := filepath.Abs(o.SnapshotDir); err == nil {
			o.SnapshotDir = abs // the summary names it wherever gorun was started
		}
	}
	for _, x := range xs {
		name, _, hasValue := strings.Cut(x, "=")
		if name == "" || strings.ContainsAny(name, " \t\n") {
			return nil, fmt.Errorf("%w: -x %q: want NAME=VALUE or NAME", ErrUsage, x)
		}
		if !hasValue {
			v, set := os.LookupEnv(name)
			if !set {
				return nil, fmt.Errorf("%w: -x %s: %s is not set in gorun's environment (-x NAME=VALUE gives it a value)", ErrUsage, name, name)
			}
			x = name + "=" + v
		}
		o.Env = append(o.Env, x)
	}
	if err := o.resolveTransport(fs); err != nil {
		return nil, err
	}
	if err := o.resolveBindTo(fs); err != nil {
		return nil, err
	}
	o.Rsh = defaultRsh
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "rsh" {
			o.Rsh = strings.Fields(rsh)
		}
	})
	if len(o.Rsh) == 0 {
		return nil, fmt.Errorf("%w: --rsh %q: want a command that reaches a host, such as ssh", ErrUsage, rsh)
	}
	for _, h := range hostList {
		hs, err := ParseHostList(h)
		if err != nil {
			return nil, err
		}
		o.Hosts = append(o.Hosts, hs...)
	}
	if hostfile != "" {
		hs, err := ReadHostfile(hostfile)
		if err != nil {
			return nil, err
		}
		o.Hosts = append(o.Hosts, hs...)
	}
	if err := o.parseNICs(nics); err != nil {
		return nil, err
	}
	return o, nil
}

// parseNICs takes the --nics values: one LIST for every host, and
// HOST=LIST for the ranks of HOST, a host of -H or --hostfile. A LIST is
// at most maxNICs distinct interface names or addresses joined by ','; the
// ranks resolve names on their own host (mpi.Options.NICs), so one list
// of names serves hosts whose addresses differ. -x WEFT_NICS beside
// --nics is refused: one of them would be ignored.
func (o *Options) parseNICs(values []string) error {
	if len(values) == 0 {
		return nil
	}
	for _, kv := range o.Env {
		if strings.HasPrefix(kv, "WEFT_NICS=") {
			return fmt.Errorf("%w: --nics and -x WEFT_NICS both given: use one", ErrUsage)
		}
	}
	for _, v := range values {
		host, list, perHost := strings.Cut(v, "=")
		if !perHost {
			host, list = "", v
		}
		if err := checkNICList(list); err != nil {
			return fmt.Errorf("%w: --nics %q: %v", ErrUsage, v, err)
		}
		switch {
		case !perHost && o.NICs != "":
			return fmt.Errorf("%w: --nics %q and --nics %q: one list for every host; HOST=LIST for one host's", ErrUsage, o.NICs, v)
		case !perHost:
			o.NICs = list
			continue
		case !slices.ContainsFunc(o.Hosts, func(h Host) bool { return h.Name == host }):
			return fmt.Errorf("%w: --nics %q: %q is not a host of -H or --hostfile", ErrUsage, v, host)
		case o.HostNICs[host] != "":
			return fmt.Errorf("%w: --nics %q: host %s's NICs already given (%s)", ErrUsage, v, host, o.HostNICs[host])
		}
		if o.HostNICs == nil {
			o.HostNICs = map[string]string{}
		}
		o.HostNICs[host] = list
	}
	return nil
}

// checkNICList checks one --nics LIST.
func checkNICList(list string) error {
	nics := strings.Split(list, ",")
	if len(nics) > maxNICs {
		return fmt.Errorf("%d NICs, at most %d", len(nics), maxNICs)
	}
	for i, n := range nics {
		switch {
		case n == "":
			return errors.New("want interface names or addresses joined by ',', without empty ones")
		case strings.ContainsAny(n, " \t\n=;'\"$`\\"):
			return fmt.Errorf("%q is not an interface name or address", n)
		case slices.Contains(nics[:i], n):
			return fmt.Errorf("%s given twice", n)
		}
	}
	return nil
}

// nicsFor is WEFT_NICS for the ranks of host: its own list, else the one
// for every host, else "" (the ranks' default, one NIC).
func (o *Options) nicsFor(host string) string {
	if l, ok := o.HostNICs[host]; ok {
		return l
	}
	return o.NICs
}

// buildTags are the build tags a program built from a package directory
// needs for the ranks' device: verbs for the verbs device.
func (o *Options) buildTags() []string {
	if o.Transport == "verbs" {
		return []string{"verbs"}
	}
	return nil
}

// fromSources sets *value, which the flag named flagName holds, from the
// last -x VAR=VALUE, else from the flag when given, else from VAR in
// gorun's environment, and says which it came from, for messages.
func (o *Options) fromSources(fs *flag.FlagSet, flagName, envVar string, value *string) string {
	source := "--" + flagName
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == flagName })
	if v := strings.TrimSpace(os.Getenv(envVar)); !given && v != "" {
		*value, source = v, envVar+" (gorun's environment)"
	}
	for _, kv := range o.Env {
		if v, ok := strings.CutPrefix(kv, envVar+"="); ok {
			*value, source = strings.TrimSpace(v), "-x "+envVar
		}
	}
	return source
}

// resolveBindTo settles BindTo as the ranks will see it, like
// resolveTransport: -x WEFT_BIND_TO wins, then --bind-to, then
// WEFT_BIND_TO in gorun's environment (which gorun does not pass on as
// is: it binds its own ranks and sets the variable for the others); the
// error names where a value not among cpubind's modes came from.
func (o *Options) resolveBindTo(fs *flag.FlagSet) error {
	source := o.fromSources(fs, "bind-to", "WEFT_BIND_TO", &o.BindTo)
	if !slices.Contains(cpubind.Modes, o.BindTo) {
		return fmt.Errorf("%w: %s %q: want one of %s", ErrUsage, source, o.BindTo, strings.Join(cpubind.Modes, ", "))
	}
	return nil
}

// resolveTransport decides the ranks' WEFT_TRANSPORT as they will see it:
// -x WEFT_TRANSPORT=... (set last), else --transport when given, else
// WEFT_TRANSPORT from gorun's environment, else auto. gorun checks it here
// so that a device that cannot run the job is refused before anything
// starts, naming where the value came from.
func (o *Options) resolveTransport(fs *flag.FlagSet) error {
	source := o.fromSources(fs, "transport", "WEFT_TRANSPORT", &o.Transport)
	o.transportFrom = source
	if slices.Contains(transports, o.Transport) {
		return nil
	}
	if why, ok := notYet[o.Transport]; ok {
		return fmt.Errorf("%w: %s %q: %s; use %s", ErrUsage, source, o.Transport, why, strings.Join(transports, ", "))
	}
	return fmt.Errorf("%w: %s %q: want one of %s", ErrUsage, source, o.Transport, strings.Join(transports, ", "))
}
