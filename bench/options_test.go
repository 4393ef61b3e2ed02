package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := map[string]int{
		"0": 0, "1": 1, "512": 512, "64K": 64 << 10, "64k": 64 << 10, "4M": 4 << 20,
		"4MB": 4 << 20, "4MiB": 4 << 20, "1G": 1 << 30, "512B": 512, " 8K ": 8 << 10,
	}
	for in, want := range good {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                     "empty",
		"4X":                   "not a whole number",
		"-1":                   "not a whole number",
		"1.5M":                 "not a whole number",
		"M":                    "not a whole number",
		"4 M":                  "not a whole number",
		"2G":                   "larger than the 1G limit",
		"99999999999999999999": "too large",
		"9999999999999G":       "too large",
	}
	for in, why := range bad {
		_, err := parseSize(in)
		if err == nil {
			t.Errorf("parseSize(%q) succeeded; want an error", in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, why) || !strings.Contains(msg, "want a byte count like") {
			t.Errorf("parseSize(%q) error %q: want it to say %q and what a size looks like", in, msg, why)
		}
	}
}

func TestFormatSizeRoundTrips(t *testing.T) {
	for _, n := range []int{0, 1, 3, 1000, 1024, 1536, 64 << 10, 4 << 20, 1 << 30} {
		got, err := parseSize(formatSize(n))
		if err != nil || got != n {
			t.Errorf("parseSize(formatSize(%d) = %q) = %d, %v", n, formatSize(n), got, err)
		}
	}
}

func TestSizes(t *testing.T) {
	cases := []struct {
		min, max int
		want     []int
	}{
		{0, 4, []int{0, 1, 2, 4}},
		{1, 1, []int{1}},
		{4, 33, []int{4, 8, 16, 32}},
		{3, 12, []int{3, 6, 12}}, // OSU doubles from -min, whatever it is
	}
	for _, c := range cases {
		if got := sizes(c.min, c.max); !slices.Equal(got, c.want) {
			t.Errorf("sizes(%d, %d) = %v; want %v", c.min, c.max, got, c.want)
		}
	}
	if got := lookup("allreduce").sizesFor(0, 16); !slices.Equal(got, []int{4, 8, 16}) {
		t.Errorf("allreduce sizes 0..16 = %v; want those holding a float32: [4 8 16]", got)
	}
	if got := lookup("barrier").sizesFor(1, 1<<20); !slices.Equal(got, []int{0}) {
		t.Errorf("barrier sizes = %v; want one run, [0]", got)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions("latency", nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.min != 0 || o.max != 4<<20 || o.iters != 0 || o.warmup != -1 || o.label != "weft" || o.decimals != 2 {
		t.Errorf("latency defaults: %+v; want 0..4M, OSU's counts, label weft", *o)
	}
	if n := o.countFor(1); n != (count{iters: 10000, warmup: 100}) {
		t.Errorf("latency 1 B count %+v; want OSU's 10000 + 100 warm-up", n)
	}
	if n := o.countFor(1 << 20); n != (count{iters: 100, warmup: 10}) {
		t.Errorf("latency 1 MiB count %+v; want 100 + 10", n)
	}

	o, err = parseOptions("bw", []string{"-min", "64K", "-max", "4M", "-iters", "5", "-warmup", "0",
		"-csv", "x.csv", "-plot", "x.PNG", "-label", "weft-udp", "-decimals", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.bench.name != "bw" || o.min != 64<<10 || o.max != 4<<20 || o.csv != "x.csv" || o.plot != "x.PNG" || o.label != "weft-udp" || o.decimals != 3 {
		t.Errorf("parsed %+v", *o)
	}
	if n := o.countFor(1 << 20); n != (count{iters: 5, warmup: 0}) {
		t.Errorf("-iters 5 -warmup 0 gave %+v for every size; want {5 0}", n)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"pingpong", nil, `unknown benchmark "pingpong"`},
		{"latency", []string{"-max", "4X"}, `-max: bad size "4X"`},
		{"latency", []string{"-min", "1M", "-max", "64K"}, "-min 1M is larger than -max 64K"},
		{"latency", []string{"-iters", "-3"}, "-iters -3"},
		{"latency", []string{"-warmup", "-2"}, "-warmup -2"},
		// warmup+iters would overflow, run no iteration and time nothing.
		{"latency", []string{"-iters", "9223372036854775807"}, "-iters 9223372036854775807: want 0 (OSU's counts) to 1000000000"},
		{"latency", []string{"-iters", "1", "-warmup", "9223372036854775807"}, "-warmup 9223372036854775807: want -1 (OSU's counts), or 0 to 1000000000"},
		{"latency", []string{"-decimals", "-1"}, "-decimals -1: want 0 to 6"},
		{"latency", []string{"-decimals", "7"}, "-decimals 7: want 0 to 6"},
		{"latency", []string{"-plot", "out.jpg"}, "ending in .svg or .png"},
		{"latency", []string{"-label", "a,b"}, "-label"},
		{"barrier", []string{"-plot", "b.png"}, "no message sizes to plot"},
		{"latency", []string{"-csv", "/nonexistent/dir/x.csv"}, "directory /nonexistent/dir does not exist"},
		{"latency", []string{"-plot", "/nonexistent/x.svg"}, "-plot"},
		{"latency", []string{"-bogus"}, "flag provided but not defined: -bogus"},
		{"latency", []string{"-blocks", "-1"}, "-blocks -1"},
		{"bw", []string{"-blocks", "100"}, "-blocks: latency only"},
		{"get_latency", []string{"-blocks", "10"}, "-blocks: latency only"},
		{"allreduce", []string{"-min", "6", "-max", "48"}, "-min 6: bench allreduce reduces float32s of 4 bytes; want a multiple of 4"},
		{"iallreduce", []string{"-min", "1"}, "-min 1: bench iallreduce reduces float32s"},
		{"allreduce", []string{"-min", "4", "-max", "1022"}, "-max 1022"},
		{"put_bw", []string{"-max", "1G"}, "-max 1G: bench put_bw's window holds 32 messages of -max bytes, 32G per rank, beyond the 1G limit (want -max 32M or less)"},
		{"put_bw", []string{"-max", "64M"}, "want -max 32M or less"},
		{"acc_latency", []string{"-blocks", "10"}, "-blocks: latency only"},
		{"latency", []string{"extra"}, `unexpected argument "extra"`},
	}
	for _, c := range bad {
		_, err := parseOptions(c.name, c.args, io.Discard)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseOptions(%s %q) = %v; want a usage error saying %q", c.name, c.args, err, c.want)
		}
	}
	if _, err := parseOptions("latency", []string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h gave %v; want flag.ErrHelp", err)
	}
}

func TestExitStatus(t *testing.T) {
	var b strings.Builder
	if s := exitStatus(&b, "bench", nil); s != 0 || b.Len() != 0 {
		t.Errorf("nil error: status %d, printed %q", s, b.String())
	}
	if s := exitStatus(&b, "bench", flag.ErrHelp); s != 0 {
		t.Errorf("-h: status %d; want 0", s)
	}
	if s := exitStatus(&b, "bench", errUsage); s != 2 {
		t.Errorf("usage error: status %d; want 2", s)
	}
	if s := exitStatus(&b, "bench", errors.New("boom")); s != 1 || !strings.Contains(b.String(), "bench: boom") {
		t.Errorf("failure: status %d, printed %q; want 1 and the error", s, b.String())
	}
}
