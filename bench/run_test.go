package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

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
			back, err := readOSU(strings.NewReader(out))
			if err != nil || back.bench != b.name || len(back.rows) != len(want) {
				t.Errorf("printed table reads back as %+v, %v", back, err)
			}
		})
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
