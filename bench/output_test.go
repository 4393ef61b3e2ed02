package main

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

// sampleTables are fixed results of each kind, for the printer and the
// readers.
func sampleTables() map[string]*table {
	nan := math.NaN()
	return map[string]*table{
		"latency": {bench: "latency", label: "weft", rows: []row{
			{size: 0, value: 15.912, min: nan, max: nan, iters: 10000},
			{size: 1, value: 9.0149, min: nan, max: nan, iters: 10000},
			{size: 4194304, value: 1234.5678, min: nan, max: nan, iters: 100},
		}},
		"bw": {bench: "bw", label: "weft", rows: []row{
			{size: 1, value: 0.13, min: nan, max: nan, iters: 100},
			{size: 65536, value: 9071.5912, min: nan, max: nan, iters: 20},
		}},
		"allreduce": {bench: "allreduce", label: "weft", rows: []row{
			{size: 4, value: 5.2712, min: 4.4631, max: 7.1634, iters: 1000},
			{size: 1048576, value: 145.1040, min: 136.0430, max: 150.0170, iters: 100},
		}},
		"barrier": {bench: "barrier", label: "weft", rows: []row{
			{size: 0, value: 0.4720, min: 0.1650, max: 0.4970, iters: 1000},
		}},
	}
}

func TestOSUPrinterGolden(t *testing.T) {
	for name, tb := range sampleTables() {
		var buf bytes.Buffer
		b := lookup(name)
		if err := writeHeader(&buf, b); err != nil {
			t.Fatal(err)
		}
		for _, r := range tb.rows {
			if err := writeRow(&buf, b, r, precision); err != nil {
				t.Fatal(err)
			}
		}
		golden(t, name+".osu", buf.Bytes())
	}
}

// The printed table reads back as the same rows to the printed precision,
// OSU's two decimals or more (-decimals): the OSU layout is what
// compare.sh merges, so the reader must accept what the printer writes.
func TestOSURoundTrip(t *testing.T) {
	for _, decimals := range []int{precision, 4} {
		tol := 0.6 * math.Pow(10, -float64(decimals))
		for name, tb := range sampleTables() {
			var buf bytes.Buffer
			b := lookup(name)
			writeHeader(&buf, b)
			for _, r := range tb.rows {
				writeRow(&buf, b, r, decimals)
			}
			got, err := readOSU(&buf, "")
			if err != nil {
				t.Fatalf("%s, %d decimals: %v", name, decimals, err)
			}
			if got.bench != name || len(got.rows) != len(tb.rows) {
				t.Fatalf("%s read back as %s with %d rows; want %d", name, got.bench, len(got.rows), len(tb.rows))
			}
			for i, r := range got.rows {
				w := tb.rows[i]
				if r.size != w.size || math.Abs(r.value-w.value) > tol {
					t.Errorf("%s, %d decimals, row %d: %+v; want %+v", name, decimals, i, r, w)
				}
				if b.kind == kindCollective || b.kind == kindBarrier {
					if math.Abs(r.min-w.min) > tol || math.Abs(r.max-w.max) > tol || r.iters != w.iters {
						t.Errorf("%s, %d decimals, row %d: %+v; want %+v", name, decimals, i, r, w)
					}
				}
			}
		}
	}
}

// Real OSU output (7.x, from its documentation), with its extra comment
// line and without -f, reads too.
func TestReadOSUForeign(t *testing.T) {
	in := "# OSU MPI Broadcast Latency Test v7.0\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n1                      86.56\n2                      87.98\n"
	got, err := readOSU(strings.NewReader(in), "")
	if err != nil {
		t.Fatal(err)
	}
	if got.bench != "bcast" || len(got.rows) != 2 || got.rows[1].size != 2 || got.rows[1].value != 87.98 || !math.IsNaN(got.rows[1].min) {
		t.Errorf("read %+v", got)
	}
	// osu_iallreduce's title names Allreduce too (OSU 5.6.3's output).
	in = "# OSU MPI Non-blocking Allreduce Latency Test v5.6.3\n# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n" +
		"# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n" +
		"4                       8.77              5.32              4.43             22.08\n"
	got, err = readOSU(strings.NewReader(in), "")
	if err != nil {
		t.Fatalf("osu_iallreduce's table: %v", err)
	}
	if want := (row{size: 4, value: 22.08, min: 8.77, max: 5.32, pure: 4.43}); got.bench != "iallreduce" || len(got.rows) != 1 || got.rows[0] != want {
		t.Errorf("osu_iallreduce's table read as %s %+v; want iallreduce [%+v]", got.bench, got.rows, want)
	}
	for _, bad := range []string{
		"# OSU MPI Non-blocking Broadcast Latency Test v5.6.3\n4 1 2 3 4\n", // no counterpart
		"1 2.0\n",                                   // no title
		"# OSU MPI Latency Test\n1 x\n",             // not a number
		"# OSU MPI Latency Test\n1 2.0 3.0\n",       // too many columns
		"# OSU MPI Allreduce Latency Test\n4 1 2\n", // neither 1 nor 4 values
		"# something else\n",
	} {
		if _, err := readOSU(strings.NewReader(bad), ""); err == nil {
			t.Errorf("readOSU(%q) succeeded; want an error", bad)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	for name, tb := range sampleTables() {
		var buf bytes.Buffer
		if err := writeCSV(&buf, tb); err != nil {
			t.Fatal(err)
		}
		if name == "latency" {
			golden(t, "latency.csv", buf.Bytes())
		}
		got, err := readCSV(&buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.bench != tb.bench || got.label != tb.label || len(got.rows) != len(tb.rows) {
			t.Fatalf("%s: read back %+v", name, got)
		}
		for i, r := range got.rows {
			w := tb.rows[i]
			same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
			if r.size != w.size || r.iters != w.iters || !same(r.value, w.value) || !same(r.min, w.min) || !same(r.max, w.max) {
				t.Errorf("%s row %d: %+v; want %+v", name, i, r, w)
			}
		}
	}
}

func TestReadCSVErrors(t *testing.T) {
	head := strings.Join(csvHeader, ",") + "\n"
	for in, want := range map[string]string{
		"":                            "empty CSV",
		"size,value\n1,2\n":           "CSV header",
		head:                          "no rows",
		head + "w,pingpong,1,2,,,3\n": `unknown benchmark "pingpong"`,
		head + "w,latency,x,2,,,3\n":  "line 2",
		head + "w,latency,1,2,,,3\nw,bw,2,2,,,3\n": `benchmark "bw" in a latency table`,
		head + "w,latency,1,2\n":                   "wrong number of fields",
	} {
		_, err := readCSV(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readCSV(%q) = %v; want an error saying %q", in, err, want)
		}
	}
}

func TestReadTableNamesByFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "openmpi.latency.txt")
	os.WriteFile(path, []byte("# OSU MPI Latency Test v7.0\n# Size          Latency (us)\n1                       0.15\n"), 0o644)
	tb, err := readTable(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if tb.label != "openmpi.latency" || tb.bench != "latency" {
		t.Errorf("label %q bench %q; want the file's name and latency", tb.label, tb.bench)
	}
	if _, err := readTable(filepath.Join(dir, "missing.csv"), ""); err == nil {
		t.Error("a missing file read without error")
	}
}
