package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// An -iters or -warmup so large that warmup+iters overflows int makes
// the timing loop (for i := range n.warmup + n.iters) run zero times, and
// the row is computed from an unset start time: bench prints a latency of
// -4.6e15 us (or +4.6e15) with no error. parseOptions must refuse such a
// count (or measure must fail), not report nonsense.
func TestRevUDPHugeItersRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-min", "8", "-max", "8", "-iters", "9223372036854775807"},
		{"-min", "8", "-max", "8", "-iters", "1", "-warmup", "9223372036854775807"},
	} {
		o, err := parseOptions("latency", args, io.Discard)
		if err != nil {
			if !errors.Is(err, errUsage) {
				t.Errorf("%q: %v; want a usage error", args, err)
			}
			continue
		}
		tb, out, err := runInProcess(t, 2, o)
		if err != nil {
			continue // refused at run time: fine
		}
		for _, r := range tb.rows {
			if !(r.value > 0 && r.value < 1e9) {
				t.Errorf("%q: accepted, and the run reported a latency of %v us with no error:\n%s", args, r.value, out)
			}
		}
	}
}

// merge's -bench is documented as the "benchmark name, when the inputs'
// titles do not say it", but readOSU refuses a file whose title names no
// benchmark before -bench is looked at, so the flag cannot do what it says.
func TestRevUDPMergeBenchNamesUntitledInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "round.txt")
	if err := os.WriteFile(in, []byte("# my ping-pong v1\n# Size          Time (us)\n1    10.00\n2    12.00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")
	if err := mergeMain([]string{"-bench", "latency", "-o", out, in}, io.Discard); err != nil {
		t.Fatalf("merge -bench latency of a file whose title names no benchmark: %v", err)
	}
	tb, err := readTable(out)
	if err != nil || tb.bench != "latency" || len(tb.rows) != 2 {
		t.Fatalf("merged table %+v, %v; want latency with 2 rows", tb, err)
	}
}
