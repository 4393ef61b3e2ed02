package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/udp"
)

// config is the command line.
type config struct {
	role       string
	bind       string
	mtu        int
	gso        bool
	size       int
	iters      int // ping-pong round trips per round
	rounds     int
	count      int // stream messages
	inflight   int
	verify     bool // check each streamed message's content
	jobKey     uint64
	timeout    time.Duration
	minRTO     time.Duration // lapi.Config.MinRTO
	cpuprofile string
}

// Result is what a side prints when it is done, as one JSON line.
type Result struct {
	Role string `json:"role"`
	MTU  int    `json:"mtu"` // frame payload limit of the device
	GSO  bool   `json:"gso"`
	// OneWayUS is each ping-pong round's mean one-way latency in µs, and
	// MedianUS their median.
	OneWayUS []float64 `json:"one_way_us,omitempty"`
	MedianUS float64   `json:"median_us,omitempty"`
	// Messages and Bytes were streamed in Seconds: GBps is goodput
	// (message data only, 1e9 bytes per second).
	Messages int     `json:"messages,omitempty"`
	Bytes    int64   `json:"bytes,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"`
	GBps     float64 `json:"gbps,omitempty"`
	// Lapi's protocol counters and the device's, as they print, and the
	// UDP device's own statistics (system calls, kernel drops).
	Lapi        string `json:"lapi,omitempty"`
	Device      string `json:"device"`
	DeviceStats any    `json:"device_stats,omitempty"`
	// Retransmits and Duplicates are lapi's, for tests to check.
	Retransmits uint64 `json:"retransmits"`
	Duplicates  uint64 `json:"duplicates"`
}

// role is one side of a measurement.
type role struct {
	rank hal.Rank
	run  func(ctx context.Context, cfg *config, d hal.Device, res *Result) error
	// maxSize is the largest -size: a frame's payload for the device
	// roles, a lapi message for the others.
	maxSize int
}

var roles = map[string]role{
	"dev-ping": {0, devPing, hal.MaxPayload},
	"dev-echo": {1, devEcho, hal.MaxPayload},
	"am-ping":  {0, amPing, maxMessage},
	"am-echo":  {1, amEcho, maxMessage},
	"am-send":  {0, amSend, maxMessage},
	"am-recv":  {1, amRecv, maxMessage},
}

// Caps on the flags that size what a side allocates before it measures
// (a message buffer, am-recv's record of the messages seen), so that a
// typo is refused rather than exhausting memory.
const (
	maxMessage = 1 << 30
	maxCount   = 100_000_000
)

// check refuses a flag out of range for role r, naming it.
func (cfg *config) check(r role) error {
	if cfg.size < 0 || cfg.size > r.maxSize {
		return fmt.Errorf("-size %d: want 0 to %d for -role %s", cfg.size, r.maxSize, cfg.role)
	}
	if cfg.count < 1 || cfg.count > maxCount {
		return fmt.Errorf("-count %d: want 1 to %d", cfg.count, maxCount)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"-iters", cfg.iters}, {"-rounds", cfg.rounds}, {"-inflight", cfg.inflight}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want 1 or more", f.name, f.v)
		}
	}
	return nil
}

func main() {
	var cfg config
	flag.StringVar(&cfg.role, "role", "", "side to run: "+strings.Join(slices.Sorted(maps.Keys(roles)), ", "))
	flag.StringVar(&cfg.bind, "bind", udp.DefaultBind, "local address or interface for the device (udp.Options.Bind)")
	flag.IntVar(&cfg.mtu, "mtu", 0, "frame payload limit; 0 derives it from the interface MTU")
	flag.BoolVar(&cfg.gso, "gso", true, "send runs of frames with UDP_SEGMENT, receive with UDP_GRO (on, as for a rank: WEFT_GSO)")
	flag.IntVar(&cfg.size, "size", 1, "message size in bytes (at most a frame's payload for dev-*, 1 GiB for am-*)")
	flag.IntVar(&cfg.iters, "iters", 10000, "ping-pong round trips per round")
	flag.IntVar(&cfg.rounds, "rounds", 5, "ping-pong rounds (the result has each one and their median)")
	flag.IntVar(&cfg.count, "count", 1000, "messages to stream (at most 100000000)")
	flag.IntVar(&cfg.inflight, "inflight", 8, "stream messages in flight")
	flag.BoolVar(&cfg.verify, "verify", true, "am-recv: compare each message's content with what was sent (costs a read of every byte)")
	flag.Uint64Var(&cfg.jobKey, "key", 0x6e65_7462_656e_6368, "job key (both sides must agree)")
	flag.DurationVar(&cfg.minRTO, "min-rto", 0, "lapi's smallest retransmission timeout (0: lapi's default)")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up after this long")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the measurement to this file")
	flag.Parse()
	if err := run(&cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "netbench %s: %v\n", cfg.role, err)
		os.Exit(1)
	}
}

// run opens the device, exchanges addresses over in and out, runs the role
// and prints its result.
func run(cfg *config, in io.Reader, out io.Writer) error {
	r, ok := roles[cfg.role]
	if !ok {
		return fmt.Errorf("unknown role %q (see -h)", cfg.role)
	}
	if err := cfg.check(r); err != nil {
		return err
	}
	d, err := udp.OpenFromEnv(hal.Config{JobKey: cfg.jobKey, Rank: r.rank, Size: 2},
		udp.Options{Bind: cfg.bind, MTU: cfg.mtu, GSO: cfg.gso})
	if err != nil {
		return err
	}
	// A lapi context owns the device and closes it; closing twice only
	// returns hal.ErrClosed.
	defer d.Close()
	if _, err := fmt.Fprintln(out, d.Addr()); err != nil {
		return fmt.Errorf("publishing the address: %w", err)
	}
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return fmt.Errorf("no peer address on stdin (%v)", sc.Err())
	}
	if err := d.Connect(1-r.rank, strings.TrimSpace(sc.Text())); err != nil {
		return err
	}
	// EOF on stdin is the stop signal.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	go func() {
		for sc.Scan() {
		}
		cancel()
	}()
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res := Result{Role: cfg.role, MTU: d.Caps().MTU, GSO: cfg.gso}
	if err := r.run(ctx, cfg, d, &res); err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("stopped by EOF on stdin: %w", err)
		}
		return fmt.Errorf("%w (device %v, %+v)", err, d.Counters(), deviceStats(d))
	}
	res.Device, res.DeviceStats = d.Counters().String(), deviceStats(d)
	return json.NewEncoder(out).Encode(&res)
}

// deviceStats are the UDP device's own statistics, if d is one (not
// wrapped by WEFT_FAULTS).
func deviceStats(d hal.Device) any {
	if u, ok := d.(*udp.Device); ok {
		return u.Stats()
	}
	return nil
}

// pingRounds runs cfg.rounds timed rounds of cfg.iters round trips (after
// one untimed round to warm caches and the peer) and records each round's
// one-way latency.
func pingRounds(cfg *config, res *Result, roundTrip func() error) error {
	for r := -1; r < cfg.rounds; r++ {
		start := time.Now()
		for range cfg.iters {
			if err := roundTrip(); err != nil {
				return err
			}
		}
		if r >= 0 {
			res.OneWayUS = append(res.OneWayUS, float64(time.Since(start).Nanoseconds())/float64(cfg.iters)/2/1e3)
		}
	}
	res.MedianUS = median(res.OneWayUS)
	return nil
}

// median of xs (which it sorts a copy of).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
