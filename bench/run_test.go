package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// runInProcess measures o on n goroutine ranks and returns rank 0's table
// and printed output.
func runInProcess(t *testing.T, n int, o *options) (*table, string, error) {
	t.Helper()
	var out bytes.Buffer
	var got *table
	err := mpi.Run(n, func(c *mpi.Comm) error {
		var w io.Writer
		if c.Rank() == 0 {
			w = &out
		}
		tb, err := measure(c, o, w, nil)
		if c.Rank() == 0 {
			got = tb
		}
		return err
	})
	return got, out.String(), err
}

// Every benchmark runs end to end over the in-process device: the table has
// one row per size, the numbers are positive and consistent, and the
// printed OSU table reads back. Speed is not asserted.
func TestBenchmarksInProcess(t *testing.T) {
	for _, b := range benchmarks {
		t.Run(b.name, func(t *testing.T) {
			o := &options{bench: b, min: 4, max: 8, iters: 3, warmup: 1, label: "weft"}
			tb, out, err := runInProcess(t, 2, o)
			if err != nil {
				t.Fatal(err)
			}
			want := []int{4, 8}
			if b.kind == kindBarrier {
				want = []int{0}
			}
			var got []int
			for _, r := range tb.rows {
				got = append(got, r.size)
				if b.kind == kindOverlap {
					// An overlap may be 0; its times may not.
					if !(r.value >= 0 && r.value <= 100 && r.min > 0 && r.max > 0 && r.pure > 0) || r.iters != 3 {
						t.Errorf("size %d: overlap %v%%, overall %v, compute %v, pure %v us, %d iterations", r.size, r.value, r.min, r.max, r.pure, r.iters)
					}
					continue
				}
				if !(r.value > 0) || r.iters != 3 {
					t.Errorf("size %d: value %v, %d iterations; want a positive value over 3", r.size, r.value, r.iters)
				}
				if (b.kind == kindCollective || b.kind == kindBarrier) && !(r.min > 0 && r.min <= r.value && r.value <= r.max) {
					t.Errorf("size %d: min %v avg %v max %v; want 0 < min <= avg <= max", r.size, r.min, r.value, r.max)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("sizes %v; want %v", got, want)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2+len(want) || !strings.HasPrefix(lines[0], "# weft MPI ") || !strings.HasPrefix(lines[1], "# ") {
				t.Errorf("printed table:\n%s\nwant a title, a header and %d rows", out, len(want))
			}
			back, err := readOSU(strings.NewReader(out), "")
			if err != nil || back.bench != b.name || len(back.rows) != len(want) {
				t.Errorf("printed table reads back as %+v, %v", back, err)
			}
		})
	}
}

// latency -blocks times every block of round trips too: one figure per
// whole block (the partial one at the end left out), each a positive
// latency, printed on a '#' line that OSU readers skip.
func TestLatencyBlocks(t *testing.T) {
	for _, c := range []struct{ iters, per, want int }{{12, 4, 3}, {14, 4, 3}, {3, 4, 0}} {
		o := &options{bench: lookup("latency"), min: 8, max: 16, iters: c.iters, warmup: 2, label: "weft", decimals: 3, blocks: c.per}
		_, out, err := runInProcess(t, 2, o)
		if err != nil {
			t.Fatal(err)
		}
		checkBlocks(t, out, c.iters, c.per, c.want)
	}
}

// checkBlocks checks the output of a latency run over sizes 8 and 16 with
// -iters iters -blocks per: want figures on each size's block line (none:
// no line), and a table that still reads back.
func checkBlocks(t *testing.T, out string, iters, per, want int) {
	t.Helper()
	for _, size := range []string{"8", "16"} {
		prefix := fmt.Sprintf("# %s: per %d round trips:", size, per)
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
			}
		}
		if want == 0 {
			if line != "" {
				t.Errorf("-iters %d -blocks %d printed %q; want no block line", iters, per, line)
			}
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, prefix))
		if len(f) != want {
			t.Errorf("-iters %d -blocks %d, size %s: blocks %q; want %d figures in:\n%s", iters, per, size, f, want, out)
		}
		for _, v := range f {
			if x, err := strconv.ParseFloat(v, 64); err != nil || !(x > 0) {
				t.Errorf("size %s: block figure %q; want a positive latency", size, v)
			}
		}
	}
	back, err := readOSU(strings.NewReader(out), "")
	if err != nil || len(back.rows) != 2 {
		t.Errorf("output with block lines reads back as %+v, %v; want 2 rows", back, err)
	}
}

// TestCLatencyBlocks runs bench/c/latency.c, built with MPICH, with the
// same -blocks cases as TestLatencyBlocks: compare.sh reads both alike.
func TestCLatencyBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an MPI program")
	}
	var tools []string
	for _, tool := range []string{"mpicc.mpich", "mpiexec.mpich"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not installed: apt-get install mpich libmpich-dev", tool)
		}
		tools = append(tools, p)
	}
	bin := filepath.Join(t.TempDir(), "latency")
	if out, err := exec.Command(tools[0], "-O2", "-o", bin, filepath.Join("c", "latency.c")).CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich latency.c: %v\n%s", err, out)
	}
	for _, c := range []struct{ iters, per, want int }{{12, 4, 3}, {14, 4, 3}, {3, 4, 0}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, tools[1], "-n", "2", bin, "-min", "8", "-max", "16",
			"-iters", strconv.Itoa(c.iters), "-warmup", "2", "-blocks", strconv.Itoa(c.per), "-decimals", "3").Output()
		cancel()
		if err != nil {
			t.Fatalf("latency -iters %d -blocks %d: %v\n%s", c.iters, c.per, err, out)
		}
		checkBlocks(t, string(out), c.iters, c.per, c.want)
	}
}

// Point-to-point benchmarks leave ranks above 1 idle, and alltoall sends a
// block to each of more than two ranks.
func TestBenchmarksThreeRanks(t *testing.T) {
	for _, name := range []string{"latency", "alltoall"} {
		o := &options{bench: lookup(name), min: 1, max: 2, iters: 2, warmup: 0, label: "weft"}
		tb, _, err := runInProcess(t, 3, o)
		if err != nil {
			t.Fatalf("%s on 3 ranks: %v", name, err)
		}
		if len(tb.rows) != 2 {
			t.Errorf("%s on 3 ranks: %d rows; want 2", name, len(tb.rows))
		}
	}
}

func TestMeasureRejectsTooFewRanks(t *testing.T) {
	o := &options{bench: lookup("latency"), min: 1, max: 1, iters: 1, label: "weft"}
	_, _, err := runInProcess(t, 1, o)
	if err == nil || !strings.Contains(err.Error(), "needs at least 2 ranks") {
		t.Errorf("latency on 1 rank: %v; want an error saying it needs 2", err)
	}
	o = &options{bench: lookup("allreduce"), min: 1, max: 2, iters: 1, label: "weft"}
	_, _, err = runInProcess(t, 1, o)
	if err == nil || !strings.Contains(err.Error(), "no sizes") {
		t.Errorf("allreduce of 1..2 bytes: %v; want an error saying there are no sizes", err)
	}
}
