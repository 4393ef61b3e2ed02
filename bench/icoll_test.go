package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestOverlapRow: OSU's overlap formula, floored at 0, and none for a
// pure time of 0.
func TestOverlapRow(t *testing.T) {
	for _, c := range []struct{ overall, compute, pure, want float64 }{
		{100, 100, 100, 100}, // all of it hidden
		{200, 100, 100, 0},   // none
		{130, 100, 100, 70},
		{400, 100, 100, 0}, // worse than none: 0, as OSU prints
		{10, 5, 0, 0},
	} {
		if got := overlapRow(8, 1, c.overall, c.compute, c.pure).value; math.Abs(got-c.want) > 1e-9 {
			t.Errorf("overall %v, compute %v, pure %v: overlap %v, want %v", c.overall, c.compute, c.pure, got, c.want)
		}
	}
}

// TestOverlapTable: iallreduce's table reads back as written, whether
// bench or bench/c/iallreduce.c printed it.
func TestOverlapTable(t *testing.T) {
	b := lookup("iallreduce")
	var buf bytes.Buffer
	if err := writeHeader(&buf, b); err != nil {
		t.Fatal(err)
	}
	rows := []row{overlapRow(4, 1000, 30, 20, 25), overlapRow(1<<20, 100, 1500.5, 900.25, 1000)}
	for _, r := range rows {
		if err := writeRow(&buf, b, r, 2); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(buf.String(), "Overlap(%)") {
		t.Fatalf("header: %q", buf.String())
	}
	got, err := readOSU(&buf, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.bench != "iallreduce" || len(got.rows) != 2 {
		t.Fatalf("read back %q with %d rows:\n%s", got.bench, len(got.rows), buf.String())
	}
	for i, r := range got.rows {
		w := rows[i]
		if r.size != w.size || math.Abs(r.value-w.value) > 0.01 || math.Abs(r.min-w.min) > 0.01 ||
			math.Abs(r.max-w.max) > 0.01 || math.Abs(r.pure-w.pure) > 0.01 {
			t.Errorf("row %d: read %+v, wrote %+v", i, r, w)
		}
	}
}
