package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// row is one message size's result.
type row struct {
	size  int
	value float64 // latency (us), bandwidth (MB/s), or a collective's average over ranks (us)
	min   float64 // collectives: the fastest rank's us; NaN for point-to-point
	max   float64 // collectives: the slowest rank's us; NaN for point-to-point
	iters int     // timed iterations
	// pure is an overlap benchmark's pure communication time (us); its
	// value is the overlap (%), min the overall time, max the compute
	// time. Not in the CSV.
	pure float64
}

// table is one run (or the median of several) of one benchmark.
type table struct {
	bench string // benchmark name: latency, bw, ...
	label string // series name: weft-udp, openmpi, ...
	rows  []row
}

// version is the bench output format's version, printed in the title line
// as OSU prints its own.
const version = "v1"

// OSU's column layout (osu_util.h): a 10-wide left-aligned size, values
// 18 wide with 2 decimals, a 12-wide iteration count. -decimals changes
// the decimals, up to maxDecimals: at 0.13 µs two decimals are a step of
// 8%, more than the differences compare.sh is asked to show.
const (
	sizeWidth   = 10
	fieldWidth  = 18
	iterWidth   = 12
	precision   = 2
	maxDecimals = 6
)

// metric names what a benchmark's value column holds, as OSU's header
// says it.
func metric(k kind) string {
	switch k {
	case kindBandwidth:
		return "Bandwidth (MB/s)"
	case kindOverlap:
		return "Overlap (%)"
	}
	return "Latency (us)"
}

// higherIsBetter says which way a benchmark's figures improve.
func higherIsBetter(k kind) bool { return k == kindBandwidth || k == kindOverlap }

// writeHeader writes OSU's two header lines: the title and the column
// names.
func writeHeader(w io.Writer, b *benchmark) error {
	var s strings.Builder
	fmt.Fprintf(&s, "# weft %s %s\n", b.title, version)
	switch b.kind {
	case kindLatency, kindBandwidth:
		fmt.Fprintf(&s, "%-*s%*s\n", sizeWidth, "# Size", fieldWidth, metric(b.kind))
	case kindCollective:
		fmt.Fprintf(&s, "%-*s%*s%*s%*s%*s\n", sizeWidth, "# Size", fieldWidth, "Avg Latency(us)",
			fieldWidth, "Min Latency(us)", fieldWidth, "Max Latency(us)", iterWidth, "Iterations")
	case kindOverlap:
		fmt.Fprintf(&s, "%-*s%*s%*s%*s%*s\n", sizeWidth, "# Size", fieldWidth, "Overall(us)",
			fieldWidth, "Compute(us)", fieldWidth, "Pure Comm.(us)", fieldWidth, "Overlap(%)")
	case kindBarrier:
		// osu_barrier has no size column; its first header starts at the
		// left margin, so its numbers are one column narrower.
		fmt.Fprintf(&s, "# Avg Latency(us)%*s%*s%*s\n", fieldWidth, "Min Latency(us)",
			fieldWidth, "Max Latency(us)", iterWidth, "Iterations")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// writeBlocks writes a latency size's per-block figures (-blocks), if any,
// as a comment line after the row: "# SIZE: per N round trips: v1 v2 ...".
// OSU readers, readOSU among them, skip it.
func writeBlocks(w io.Writer, size int, blocks []float64, per, decimals int) error {
	if len(blocks) == 0 {
		return nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %d: per %d round trips:", size, per)
	for _, v := range blocks {
		fmt.Fprintf(&sb, " %.*f", decimals, v)
	}
	sb.WriteByte('\n')
	_, err := io.WriteString(w, sb.String())
	return err
}

// writeRow writes one size's line of the OSU table, its values with
// decimals decimals.
func writeRow(w io.Writer, b *benchmark, r row, decimals int) error {
	var err error
	switch b.kind {
	case kindLatency, kindBandwidth:
		_, err = fmt.Fprintf(w, "%-*d%*.*f\n", sizeWidth, r.size, fieldWidth, decimals, r.value)
	case kindCollective:
		_, err = fmt.Fprintf(w, "%-*d%*.*f%*.*f%*.*f%*d\n", sizeWidth, r.size,
			fieldWidth, decimals, r.value, fieldWidth, decimals, r.min,
			fieldWidth, decimals, r.max, iterWidth, r.iters)
	case kindOverlap:
		_, err = fmt.Fprintf(w, "%-*d%*.*f%*.*f%*.*f%*.*f\n", sizeWidth, r.size,
			fieldWidth, decimals, r.min, fieldWidth, decimals, r.max,
			fieldWidth, decimals, r.pure, fieldWidth, decimals, r.value)
	case kindBarrier:
		_, err = fmt.Fprintf(w, "%*.*f%*.*f%*.*f%*d\n", fieldWidth-1, decimals, r.value,
			fieldWidth, decimals, r.min, fieldWidth, decimals, r.max, iterWidth, r.iters)
	}
	return err
}

// csvHeader is the CSV layout: one row per size. min and max are empty for
// point-to-point benchmarks.
var csvHeader = []string{"label", "bench", "size", "value", "min", "max", "iterations"}

// writeCSV writes t as CSV.
func writeCSV(w io.Writer, t *table) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range t.rows {
		rec := []string{t.label, t.bench, strconv.Itoa(r.size), formatFloat(r.value),
			formatFloat(r.min), formatFloat(r.max), strconv.Itoa(r.iters)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// formatFloat keeps four decimals (a thousandth of the printed precision
// is plenty for nanosecond timers) and writes NaN as nothing.
func formatFloat(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// readCSV reads a table written by writeCSV. Every row must name the same
// benchmark; the label is the first row's.
func readCSV(r io.Reader) (*table, error) {
	cr := csv.NewReader(r)
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, errors.New("empty CSV: want a header line " + strings.Join(csvHeader, ","))
	}
	if strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
		return nil, fmt.Errorf("CSV header %q: want %q", strings.Join(recs[0], ","), strings.Join(csvHeader, ","))
	}
	t := &table{}
	for i, rec := range recs[1:] {
		line := i + 2
		if t.bench == "" {
			t.label, t.bench = rec[0], rec[1]
			if lookup(t.bench) == nil {
				return nil, fmt.Errorf("line %d: unknown benchmark %q", line, t.bench)
			}
		} else if rec[1] != t.bench {
			return nil, fmt.Errorf("line %d: benchmark %q in a %s table", line, rec[1], t.bench)
		}
		var r row
		var errs [5]error
		r.size, errs[0] = strconv.Atoi(rec[2])
		r.value, errs[1] = parseFloat(rec[3])
		r.min, errs[2] = parseFloat(rec[4])
		r.max, errs[3] = parseFloat(rec[5])
		r.iters, errs[4] = strconv.Atoi(rec[6])
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.rows = append(t.rows, r)
	}
	if len(t.rows) == 0 {
		return nil, errors.New("CSV has a header and no rows")
	}
	return t, nil
}

// parseFloat reads what formatFloat writes: empty is NaN.
func parseFloat(s string) (float64, error) {
	if s == "" {
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// titleKeys map words of an OSU title line to the benchmark, most specific
// first ("Bi-Directional Bandwidth" before "Bandwidth"; OSU's
// "Non-blocking Allreduce" before "Allreduce"). An empty bench marks a
// title of a benchmark bench has none of: OSU's other non-blocking
// collectives, whose titles name a blocking one's words.
var titleKeys = []struct{ key, bench string }{
	{"non-blocking allreduce", "iallreduce"},
	{"non-blocking", ""},
	{"bi-directional bandwidth", "bibw"},
	{"put bandwidth", "put_bw"}, // OSU's "MPI_Put Bandwidth" too
	{"get latency", "get_latency"},
	{"accumulate latency", "acc_latency"},
	{"bandwidth", "bw"},
	{"iallreduce", "iallreduce"},
	{"allreduce", "allreduce"},
	{"broadcast", "bcast"},
	{"bcast", "bcast"},
	{"barrier", "barrier"},
	{"all-to-all", "alltoall"},
	{"alltoall", "alltoall"},
	{"allgather", "allgather"},
	{"latency", "latency"},
}

// readOSU reads a table in the OSU layout, as bench and the C programs in
// bench/c print it (and as OSU's own osu_latency, osu_bw, osu_allreduce,
// ... do). The benchmark is recognised from the title line, a comment
// line before the first row; a column header ("# Size  Latency (us)")
// names a metric, not a benchmark, and is not taken for one. Without a
// title naming one, the benchmark is assume, if not empty; a title naming
// another than assume is an error.
func readOSU(r io.Reader, assume string) (*table, error) {
	sc := bufio.NewScanner(r)
	t := &table{}
	var b *benchmark
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, "#") {
			if b == nil && !isColumnHeader(text) {
				low := strings.ToLower(text)
				for _, k := range titleKeys {
					if !strings.Contains(low, k.key) {
						continue
					}
					switch {
					case k.bench == "":
						return nil, fmt.Errorf("line %d: %q: a benchmark bench has no counterpart of", line, text)
					case assume != "" && k.bench != assume:
						return nil, fmt.Errorf("line %d: %q: a %s table, not %s", line, text, k.bench, assume)
					}
					t.bench = k.bench
					b = lookup(k.bench)
					break
				}
			}
			continue
		}
		if b == nil && assume != "" {
			t.bench, b = assume, lookup(assume)
		}
		if b == nil {
			return nil, fmt.Errorf("line %d: a row before an OSU title line naming the benchmark (# ... Latency Test)", line)
		}
		r, err := parseOSURow(b.kind, strings.Fields(text))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.rows = append(t.rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if b == nil && assume != "" {
		t.bench, b = assume, lookup(assume)
	}
	if b == nil {
		return nil, errors.New("no OSU title line naming the benchmark (# ... Latency Test)")
	}
	return t, nil
}

// isColumnHeader says whether comment line text is an OSU table's column
// header, which starts with the first column's name: "# Size", or "# Avg"
// for osu_barrier's.
func isColumnHeader(text string) bool {
	f := strings.Fields(strings.TrimPrefix(text, "#"))
	return len(f) > 0 && (strings.EqualFold(f[0], "Size") || strings.EqualFold(f[0], "Avg"))
}

// parseOSURow reads one data line. Collectives may come without the
// min/max/iterations columns (OSU without -f).
func parseOSURow(k kind, f []string) (row, error) {
	r := row{min: math.NaN(), max: math.NaN()}
	if k != kindBarrier {
		if len(f) == 0 {
			return r, errors.New("empty row")
		}
		var err error
		if r.size, err = strconv.Atoi(f[0]); err != nil {
			return r, fmt.Errorf("size %q: %w", f[0], err)
		}
		f = f[1:]
	}
	want := 1
	if (k == kindCollective || k == kindBarrier) && len(f) > 1 {
		want = 4
	}
	if k == kindOverlap {
		// Overall, compute, pure, overlap: as overlapRow keeps them.
		if len(f) != 4 {
			return r, fmt.Errorf("%d values, want 4", len(f))
		}
		var v [4]float64
		for i, s := range f {
			var err error
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				return r, fmt.Errorf("value %q: %w", s, err)
			}
		}
		r = row{size: r.size, value: v[3], min: v[0], max: v[1], pure: v[2]}
		return r, nil
	}
	if len(f) != want {
		return r, fmt.Errorf("%d values, want %d", len(f), want)
	}
	dst := []*float64{&r.value, &r.min, &r.max}
	for i, s := range f {
		var err error
		if i == 3 {
			r.iters, err = strconv.Atoi(s)
		} else {
			*dst[i], err = strconv.ParseFloat(s, 64)
		}
		if err != nil {
			return r, fmt.Errorf("value %q: %w", s, err)
		}
	}
	return r, nil
}

// readTable reads a CSV written by bench or an OSU-layout text file,
// telling them apart by the first character. A table without a label is
// named after its file. assume, if not empty, is the benchmark of a text
// file whose title names none (readOSU); a file that names another is an
// error.
func readTable(path, assume string) (*table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t *table
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("#")) {
		t, err = readOSU(bytes.NewReader(data), assume)
	} else if t, err = readCSV(bytes.NewReader(data)); err == nil && assume != "" && t.bench != assume {
		err = fmt.Errorf("a %s table, not %s", t.bench, assume)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.label == "" {
		t.label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return t, nil
}

// writeFile writes to a new file with write and reports the first error,
// the close's included (a full disk shows up there).
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
