package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// errUsage marks a bad command line: main prints it with the usage hint and
// exits 2, as flag does.
var errUsage = errors.New("usage")

// maxSize caps -max: the buffers are allocated whole (alltoall needs
// Size()×size bytes per rank), so a typo like -max 4T must fail at parse
// time, not as an out-of-memory kill halfway through a run.
const maxSize = 1 << 30

// maxIters caps -iters and -warmup: the loops run warmup+iters times,
// which must not overflow (it would run them zero times and time nothing),
// and a billion iterations of even the fastest call take minutes.
const maxIters = 1_000_000_000

// options is a parsed benchmark command line.
type options struct {
	bench  *benchmark
	min    int    // smallest message size, bytes
	max    int    // largest message size, bytes
	iters  int    // timed iterations per size; 0: the OSU schedule
	warmup int    // untimed iterations per size; -1: the OSU schedule
	csv    string // write the table as CSV to this file
	plot   string // draw the table to this .svg or .png file
	label  string // series name in the CSV and the plot
	// decimals is how many decimals the table's values have.
	decimals int
	// blocks, for latency, is how many round trips each per-block figure
	// covers (0: none; see count.blocks).
	blocks int
	// partner, for the point-to-point benchmarks, is the rank that plays
	// rank 1's part opposite rank 0 (-pair 0,N; 0: the default, rank 1).
	partner int
}

const usageText = `usage: bench BENCHMARK [flags]      (start it with gorun: gorun -n 2 ./bench latency)
       bench compare [-plot FILE] A.csv B.csv ...
       bench merge [-label L] [-bench B] -o OUT.csv ROUND.txt ...
       bench linestate [-d DURATION] [-cpus A,B]   (ns one way of a cache line between two CPUs)

Benchmarks, measured as the OSU micro-benchmarks measure them:
  latency    ping-pong between ranks 0 and 1, half the round trip (us)
  bw         rank 0 streams windows of 64 Isends to rank 1, which acks each window (MB/s, MB = 1e6 B)
  bibw       ranks 0 and 1 both post 64 Irecvs and 64 Isends per window (MB/s, both directions)
             (these three: -pair 0,N puts rank N in rank 1's place; the other ranks idle)
  allreduce  float32 sum over all ranks (us per call: avg, min, max over ranks)
  bcast      bytes from rank 0 to all ranks (us per call)
  barrier    (us per call)
  alltoall   bytes per peer (us per call)
  allgather  bytes per rank, gathered at every rank (us per call)
  iallreduce float32 sum, computing between Iallreduce and Wait for the pure call's time
             (overall, compute, pure us and the overlap %, averages over ranks)
  put_bw       rank 0 puts windows of 64 (32 above 8K) into rank 1's window under a shared lock, a Flush per window (MB/s)
  get_latency  rank 0 gets from rank 1's window under a shared lock, a Flush per Get (us per Get)
  acc_latency  rank 0 locks rank 1's window, accumulates int8 (Sum), unlocks (us per Lock+Accumulate+Unlock)
               (these three: rank 1 makes no call while rank 0 times; -pair 0,N as above)

Flags:
`

// parseOptions parses a benchmark's arguments (those after its name). Flag
// errors come back wrapping errUsage; -h comes back as flag.ErrHelp.
func parseOptions(name string, args []string, stderr io.Writer) (*options, error) {
	b := lookup(name)
	if b == nil {
		return nil, fmt.Errorf("%w: unknown benchmark %q (want one of %s, or compare, merge, linestate)", errUsage, name, strings.Join(benchNames(), ", "))
	}
	fs := newFlagSet("bench "+name, usageText, stderr)
	o := &options{bench: b}
	minS := fs.String("min", formatSize(b.defMin), "smallest message size in bytes (K, M, G suffixes: 64K, 4M)")
	maxS := fs.String("max", formatSize(b.defMax), "largest message size in bytes")
	fs.IntVar(&o.iters, "iters", 0, "timed iterations per size (0: OSU's counts, fewer for large sizes)")
	fs.IntVar(&o.warmup, "warmup", -1, "untimed warm-up iterations per size (-1: OSU's counts)")
	fs.StringVar(&o.csv, "csv", "", "also write the results as CSV to `FILE`")
	fs.StringVar(&o.plot, "plot", "", "also draw the results to `FILE`.svg or FILE.png")
	fs.StringVar(&o.label, "label", "weft", "series name in the CSV and the plot")
	fs.IntVar(&o.decimals, "decimals", precision, "decimals of the printed values (OSU prints 2)")
	fs.IntVar(&o.blocks, "blocks", 0, "latency: also print the latency of every `N` round trips, on a '#' line after each size's row (to see the levels a run moves between)")
	pairS := fs.String("pair", "0,1", "latency, bw, bibw: the two ranks that talk, `0,N` (rank 0 times and prints; the others idle)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	pairSet := false
	fs.Visit(func(f *flag.Flag) { pairSet = pairSet || f.Name == "pair" })
	if pairSet {
		if b.kind != kindLatency && b.kind != kindBandwidth {
			return nil, fmt.Errorf("%w: -pair: point-to-point benchmarks only (latency, bw, bibw); bench %s runs over every rank", errUsage, name)
		}
		p, err := parsePair(*pairS)
		if err != nil {
			return nil, fmt.Errorf("%w: -pair: %v", errUsage, err)
		}
		o.partner = p
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: bench %s: unexpected argument %q", errUsage, name, fs.Arg(0))
	}
	if err := checkDecimals(o.decimals); err != nil {
		return nil, err
	}
	var err error
	if o.min, err = parseSize(*minS); err != nil {
		return nil, fmt.Errorf("%w: -min: %v", errUsage, err)
	}
	if o.max, err = parseSize(*maxS); err != nil {
		return nil, fmt.Errorf("%w: -max: %v", errUsage, err)
	}
	if err := checkWhole(b, "-min", *minS, o.min); err != nil {
		return nil, err
	}
	if err := checkWhole(b, "-max", *maxS, o.max); err != nil {
		return nil, err
	}
	switch {
	case o.min > o.max:
		return nil, fmt.Errorf("%w: -min %s is larger than -max %s", errUsage, *minS, *maxS)
	case o.iters < 0 || o.iters > maxIters:
		return nil, fmt.Errorf("%w: -iters %d: want 0 (OSU's counts) to %d", errUsage, o.iters, maxIters)
	case o.warmup < -1 || o.warmup > maxIters:
		return nil, fmt.Errorf("%w: -warmup %d: want -1 (OSU's counts), or 0 to %d", errUsage, o.warmup, maxIters)
	case o.blocks < 0:
		return nil, fmt.Errorf("%w: -blocks %d: want 0 (none) or more", errUsage, o.blocks)
	case b.windowed && rmaWindow(o.max)*o.max > maxSize:
		return nil, fmt.Errorf("%w: -max %s: bench %s's window holds %d messages of -max bytes, %s per rank, beyond the %s limit (want -max %s or less)",
			errUsage, *maxS, name, rmaWindow(o.max), formatSize(rmaWindow(o.max)*o.max), formatSize(maxSize), formatSize(maxSize/rmaWindow(o.max)))
	case o.blocks > 0 && !b.blocks:
		return nil, fmt.Errorf("%w: -blocks: latency only (bench %s times its iterations together)", errUsage, name)
	case strings.ContainsAny(o.label, ",\"\n"):
		return nil, fmt.Errorf("%w: -label %q: no commas, quotes or newlines", errUsage, o.label)
	}
	if o.plot != "" {
		if err := checkPlotName(o.plot); err != nil {
			return nil, fmt.Errorf("%w: -plot: %v", errUsage, err)
		}
		if b.kind == kindBarrier {
			return nil, fmt.Errorf("%w: -plot: a barrier has no message sizes to plot (use -csv)", errUsage)
		}
	}
	for _, f := range []struct{ flag, file string }{{"-csv", o.csv}, {"-plot", o.plot}} {
		if err := checkDir(f.file); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errUsage, f.flag, err)
		}
	}
	return o, nil
}

// checkWhole refuses a size flag that is not a whole number of b's float32
// elements: the row's label would name bytes the call never reduces. As
// OSU does, float benchmarks walk whole element counts.
func checkWhole(b *benchmark, flag, arg string, size int) error {
	if !b.floats || size%b.elem == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s %s: bench %s reduces float32s of %d bytes; want a multiple of %d (e.g. %d)",
		errUsage, flag, arg, b.name, b.elem, b.elem, size/b.elem*b.elem+b.elem)
}

// parsePair reads -pair's "0,N" and returns N. The first rank must be 0:
// it is the one that times and prints the table.
func parsePair(s string) (int, error) {
	a, b, ok := strings.Cut(s, ",")
	bad := func(why string) error { return fmt.Errorf("%q: %s; want 0,N with N > 0, e.g. 0,2", s, why) }
	if !ok {
		return 0, bad("not two ranks")
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	second, err2 := strconv.Atoi(strings.TrimSpace(b))
	switch {
	case err1 != nil || err2 != nil:
		return 0, bad("not two rank numbers")
	case first != 0:
		return 0, bad("the first rank must be 0 (rank 0 times and prints)")
	case second <= 0:
		return 0, bad("the second rank must be above 0")
	}
	return second, nil
}

// checkDecimals refuses a -decimals out of 0..maxDecimals.
func checkDecimals(n int) error {
	if n < 0 || n > maxDecimals {
		return fmt.Errorf("%w: -decimals %d: want 0 to %d", errUsage, n, maxDecimals)
	}
	return nil
}

// checkDir fails when file's directory does not exist, so that a typo in
// -csv or -plot is reported before the run rather than after it.
func checkDir(file string) error {
	if file == "" {
		return nil
	}
	dir := filepath.Dir(file)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%q: directory %s does not exist", file, dir)
	}
	return nil
}

// newFlagSet is a flag set that returns its errors (main decides the exit
// status) and prints usage, then the flags, on -h or a bad flag.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs: -h comes back as flag.ErrHelp, any other
// complaint wrapping errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}

// checkPlotName rejects a plot file gonum cannot write, before a run that
// may take minutes rather than after it.
func checkPlotName(file string) error {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("%q: want a file name ending in .svg or .png", file)
}

// parseSize reads a byte count: digits with an optional binary suffix K, M
// or G (case-insensitive, optionally followed by B or iB): 512, 64K, 4M,
// 1GiB.
func parseSize(s string) (int, error) {
	bad := func(why string) error {
		return fmt.Errorf("bad size %q: %s; want a byte count like 512, 64K, 4M or 1G", s, why)
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, bad("empty")
	}
	upper := strings.ToUpper(t)
	upper = strings.TrimSuffix(upper, "IB")
	if len(upper) == len(t) {
		upper = strings.TrimSuffix(upper, "B")
	}
	shift := 0
	if n := len(upper); n > 0 {
		switch upper[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		}
		if shift > 0 {
			upper = upper[:n-1]
		}
	}
	if upper == "" || strings.IndexFunc(upper, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, bad("not a whole number of bytes")
	}
	v, err := strconv.ParseInt(upper, 10, 64)
	if err != nil || v > math.MaxInt64>>shift {
		return 0, bad("too large")
	}
	v <<= shift
	if v > maxSize {
		return 0, bad(fmt.Sprintf("larger than the %s limit", formatSize(maxSize)))
	}
	return int(v), nil
}

// formatSize writes n the way parseSize reads it, with the largest suffix
// that divides it evenly.
func formatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "G"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// sizes lists the message sizes from min to max as OSU walks them: min,
// then doubling; a zero min is followed by 1.
func sizes(min, max int) []int {
	var out []int
	for s := min; s <= max; {
		out = append(out, s)
		if s == 0 {
			s = 1
		} else {
			s *= 2
		}
	}
	return out
}
