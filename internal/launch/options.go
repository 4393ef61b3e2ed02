package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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
	N             int           // ranks
	Hosts         []Host        // -H and --hostfile; empty: this host only
	Rsh           []string      // command that reaches a host, split on spaces
	Oversubscribe bool          // allow more ranks than slots
	Transport     string        // WEFT_TRANSPORT
	NICs          string        // WEFT_NICS
	TagOutput     bool          // prefix lines with [rank]
	Timeout       time.Duration // 0: none
	Trace         int           // -1: not set
	Profile       string        // "", cpu, mem, block, mutex
	BindTo        string        // auto, core, none: see bind.go
	Env           []string      // -x NAME=VALUE, in order
	Wrap          bool          // --wrap: run a foreign launcher with a rendezvous
	Program       string        // package directory or binary (or launcher with --wrap)
	Args          []string      // program arguments

	// KillGrace is how long ranks get between SIGTERM and SIGKILL when the
	// job is stopped.
	KillGrace time.Duration
}

// defaultRsh reaches hosts when --rsh is not given: BatchMode so that a
// password prompt fails instead of hanging, ConnectTimeout so that an
// unreachable host fails in seconds, -x for no X11 forwarding (mpirun's).
var defaultRsh = []string{"ssh", "-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}

var transports = []string{"auto", "shm", "udp", "verbs", "inproc-test"}

var profiles = []string{"cpu", "mem", "block", "mutex"}

var bindings = []string{"auto", "core", "none"}

const usageText = `usage: gorun [flags] PACKAGE-DIR|BINARY [args...]
       gorun --wrap [--] LAUNCHER [launcher args...]

Starts N ranks of a weft program: builds a Go package directory once (or
takes a binary), serves PMI-1 to the ranks, passes their output through,
forwards SIGINT/SIGTERM, and exits with the status of the first rank that
failed after stopping the rest.

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
	var hostList, xs stringList
	var hostfile, rsh, trace string
	fs.IntVar(&o.N, "n", 1, "number of ranks")
	fs.IntVar(&o.N, "np", 1, "same as -n")
	fs.Var(&hostList, "H", "hosts as host[:slots],... (repeatable); ranks go to hosts by slot")
	fs.StringVar(&hostfile, "hostfile", "", "file with one host[:slots] (or 'host slots=N') per line")
	fs.StringVar(&rsh, "rsh", "", "command that reaches a host (default: ssh -x -o BatchMode=yes -o ConnectTimeout=10)")
	fs.BoolVar(&o.Oversubscribe, "oversubscribe", false, "allow more ranks than slots")
	fs.StringVar(&o.Transport, "transport", "auto", "auto | shm | udp | verbs | inproc-test")
	fs.StringVar(&o.NICs, "nics", "", "devices to stripe across, a,b (default: all usable)")
	fs.BoolVar(&o.TagOutput, "tag-output", false, "prefix each output line with [rank]")
	fs.DurationVar(&o.Timeout, "timeout", 0, "stop the job after this long, with a report of each rank's state")
	fs.StringVar(&trace, "trace", "", "trace level 0-9 for the ranks (WEFT_TRACE); 4 and up also trace gorun's PMI wire")
	fs.StringVar(&o.Profile, "profile", "", "cpu | mem | block | mutex: each rank writes KIND-rankN.pprof in the current directory")
	fs.StringVar(&o.BindTo, "bind-to", "auto", "auto | core | none: bind local ranks to cores (auto: each rank its own share of this machine's cores, one core each when they outnumber them)")
	fs.Var(&xs, "x", "NAME=VALUE (or NAME, taken from gorun's environment) for the ranks; repeatable")
	fs.BoolVar(&o.Wrap, "wrap", false, "run a foreign launcher (mpirun, srun) with a GORUN_KVS rendezvous server")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
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
	if !slices.Contains(transports, o.Transport) {
		return nil, fmt.Errorf("%w: --transport %q: want one of %s", ErrUsage, o.Transport, strings.Join(transports, ", "))
	}
	if !slices.Contains(bindings, o.BindTo) {
		return nil, fmt.Errorf("%w: --bind-to %q: want one of %s", ErrUsage, o.BindTo, strings.Join(bindings, ", "))
	}
	if o.Profile != "" && !slices.Contains(profiles, o.Profile) {
		return nil, fmt.Errorf("%w: --profile %q: want one of %s", ErrUsage, o.Profile, strings.Join(profiles, ", "))
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
	for _, x := range xs {
		name, _, hasValue := strings.Cut(x, "=")
		if name == "" || strings.ContainsAny(name, " \t\n") {
			return nil, fmt.Errorf("%w: -x %q: want NAME=VALUE or NAME", ErrUsage, x)
		}
		if !hasValue {
			x = name + "=" + os.Getenv(name)
		}
		o.Env = append(o.Env, x)
	}
	o.Rsh = defaultRsh
	if rsh != "" {
		o.Rsh = strings.Fields(rsh)
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
	return o, nil
}
