package main

import (
	"strings"
	"testing"
)

// The one-sided benchmarks run with the target elsewhere than rank 1
// (-pair 0,2), the third rank idle but making and freeing each window with
// the others.
func TestRMAPair(t *testing.T) {
	for _, name := range []string{"put_bw", "get_latency", "acc_latency"} {
		t.Run(name, func(t *testing.T) {
			o := &options{bench: lookup(name), min: 1, max: 16 << 10, iters: 4, warmup: 1, label: "weft", partner: 2}
			tb, _, err := runInProcess(t, 3, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(tb.rows) != 15 {
				t.Fatalf("%d rows, want 15 (1 B to 16 KiB)", len(tb.rows))
			}
			for _, r := range tb.rows {
				if !(r.value > 0) {
					t.Errorf("size %d: value %v, want a positive one", r.size, r.value)
				}
			}
		})
	}
}

// OSU's own one-sided titles, and the C programs', read back as the
// benchmarks that measure the same thing.
func TestRMATitles(t *testing.T) {
	for title, want := range map[string]string{
		"# OSU MPI_Put Bandwidth Test v7.2":       "put_bw",
		"# OSU MPI_Get latency Test v7.2":         "get_latency",
		"# OSU MPI_Accumulate latency Test v7.2":  "acc_latency",
		"# weft-c MPI Put Bandwidth Test v1":      "put_bw",
		"# weft-c MPI Get Latency Test v1":        "get_latency",
		"# weft-c MPI Accumulate Latency Test v1": "acc_latency",
		"# weft MPI Bandwidth Test v1":            "bw",
		"# weft MPI Latency Test v1":              "latency",
	} {
		tb, err := readOSU(strings.NewReader(title+"\n# Size  x\n8  1.5\n"), "")
		if err != nil || tb.bench != want {
			t.Errorf("%q reads back as %v, %v; want %s", title, tb, err, want)
		}
	}
}
