package main

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func latTable(label string, values map[int]float64) *table {
	t := &table{bench: "latency", label: label}
	for _, s := range []int{1, 2, 4, 8} {
		if v, ok := values[s]; ok {
			t.rows = append(t.rows, row{size: s, value: v, min: math.NaN(), max: math.NaN(), iters: 10})
		}
	}
	return t
}

func TestRatios(t *testing.T) {
	weft := latTable("weft", map[int]float64{1: 6, 2: 9, 4: 3, 8: 5})
	ompi := latTable("openmpi", map[int]float64{1: 2, 2: 3, 8: 0})
	got := ratios(weft, ompi)
	want := []float64{3, 3, math.NaN(), math.NaN()} // 4: openmpi lacks it; 8: division by 0
	if len(got) != len(want) {
		t.Fatalf("ratios = %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Errorf("size %d: ratio %v; want %v", weft.rows[i].size, got[i], want[i])
		}
	}
}

func TestWriteComparisonGolden(t *testing.T) {
	weft := latTable("weft-udp", map[int]float64{1: 6, 2: 9, 4: 3, 8: 5})
	ompi := latTable("openmpi", map[int]float64{1: 2, 2: 3, 8: 0})
	mpich := latTable("mpich", map[int]float64{1: 3, 2: 4.5, 4: 1.5, 8: 2.5})
	var buf bytes.Buffer
	if err := writeComparison(&buf, []*table{weft, ompi, mpich}, precision); err != nil {
		t.Fatal(err)
	}
	golden(t, "compare.txt", buf.Bytes())
}

// With three decimals, 0.1354 against 0.1346 is a ratio of 1.006, not the
// 0.14/0.13 = 1.077 of OSU's two.
func TestWriteComparisonDecimals(t *testing.T) {
	weft := latTable("weft-shm", map[int]float64{8: 0.1354})
	ompi := latTable("openmpi", map[int]float64{8: 0.1346})
	var buf bytes.Buffer
	if err := writeComparison(&buf, []*table{weft, ompi}, 3); err != nil {
		t.Fatal(err)
	}
	want := []string{"8", "0.135", "0.135", "1.006"}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if got := strings.Fields(lines[len(lines)-1]); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("row %q; want %q", got, want)
	}
}

func TestMedianTable(t *testing.T) {
	r := func(size int, v, mn, mx float64, it int) row {
		return row{size: size, value: v, min: mn, max: mx, iters: it}
	}
	rounds := []*table{
		{bench: "allreduce", label: "a", rows: []row{r(4, 10, 1, 20, 100), r(8, 5, 1, 9, 100)}},
		{bench: "allreduce", label: "b", rows: []row{r(4, 30, 3, 40, 100), r(8, 7, 2, 8, 100), r(16, 1, 1, 1, 50)}},
		{bench: "allreduce", label: "c", rows: []row{r(8, 6, 3, 7, 100), r(4, 20, 2, 30, 100)}},
	}
	m := medianTable(rounds)
	want := []row{r(4, 20, 2, 30, 100), r(8, 6, 2, 8, 100), r(16, 1, 1, 1, 50)}
	if m.label != "a" || m.bench != "allreduce" || len(m.rows) != len(want) {
		t.Fatalf("median table %+v", m)
	}
	for i := range want {
		if m.rows[i] != want[i] {
			t.Errorf("row %d: %+v; want %+v", i, m.rows[i], want[i])
		}
	}
	if v := median([]float64{4, 1, 3, 2}); v != 2.5 {
		t.Errorf("median of 1..4 = %v; want 2.5", v)
	}
	if v := median(nil); !math.IsNaN(v) {
		t.Errorf("median of nothing = %v; want NaN", v)
	}
	// Point-to-point rows have no min and max: they stay NaN.
	p := medianTable([]*table{latTable("w", map[int]float64{1: 1}), latTable("w", map[int]float64{1: 3})})
	if p.rows[0].value != 2 || !math.IsNaN(p.rows[0].min) {
		t.Errorf("latency median row %+v; want value 2, min NaN", p.rows[0])
	}
}

// compare and merge as commands: files in, text and files out, usage errors
// for bad command lines.
func TestCompareAndMergeCommands(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r1 := write("r1.txt", "# weft MPI Latency Test v1\n# Size          Latency (us)\n1    10.00\n2    12.00\n")
	r2 := write("r2.txt", "# weft MPI Latency Test v1\n# Size          Latency (us)\n1    20.00\n2    14.00\n")
	r3 := write("r3.txt", "# weft MPI Latency Test v1\n# Size          Latency (us)\n1    30.00\n2    16.00\n")
	weft := filepath.Join(dir, "weft.csv")
	if err := mergeMain([]string{"-label", "weft-udp", "-o", weft, r1, r2, r3}, io.Discard); err != nil {
		t.Fatal(err)
	}
	ompi := write("openmpi.txt", "# weft-c MPI Latency Test v1 (Open MPI)\n# Size          Latency (us)\n1    0.20\n2    0.25\n")
	png := filepath.Join(dir, "cmp.png")
	var out bytes.Buffer
	if err := compareMain([]string{"-plot", png, weft, ompi}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"weft-udp/openmpi", "20.00", "0.20", "100.00", "56.00"} {
		if !strings.Contains(text, want) {
			t.Errorf("compare output lacks %q:\n%s", want, text)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("compare -plot wrote no chart: %v", err)
	}

	bw := write("bw.txt", "# weft MPI Bandwidth Test v1\n# Size      Bandwidth (MB/s)\n1    0.13\n")
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{weft}, true, "at least two files"},
		{[]string{"-plot", "x.gif", weft, ompi}, true, ".svg or .png"},
		{[]string{weft, bw}, false, "compare one benchmark at a time"},
		{[]string{weft, filepath.Join(dir, "none.csv")}, false, "none.csv"},
	} {
		err := compareMain(c.args, io.Discard, io.Discard)
		if err == nil || errors.Is(err, errUsage) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("compare %q = %v; want an error saying %q (usage error: %v)", c.args, err, c.want, c.usage)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{r1}, "needs -o FILE"},
		{[]string{"-o", weft}, "needs -o FILE"},
		{[]string{"-bench", "nope", "-o", weft, r1}, `-bench "nope"`},
		{[]string{"-o", weft, r1, bw}, "merge rounds of one benchmark"},
		{[]string{"-bench", "latency", "-o", weft, r1, bw}, `"# weft MPI Bandwidth Test v1": a bw table, not latency`},
		{[]string{"-bench", "bw", "-o", filepath.Join(dir, "out.csv"), weft}, "a latency table, not bw"},
	} {
		if err := mergeMain(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("merge %q = %v; want an error saying %q", c.args, err, c.want)
		}
	}
}

// merge's -bench names the benchmark of inputs whose titles do not: an
// untitled file (here a timing tool's own title, then OSU's column
// header) reads as that benchmark, its column header ("Avg Latency")
// not taken for a title naming latency.
func TestMergeBenchNamesUntitledInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		bench, text string
		rows        int
	}{
		{"latency", "# my ping-pong v1\n# Size          Time (us)\n1    10.00\n2    12.00\n", 2},
		{"allreduce", "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n4    1.5  1.0  2.0  100\n", 1},
	} {
		in := filepath.Join(dir, c.bench+".txt")
		if err := os.WriteFile(in, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, c.bench+".csv")
		if err := mergeMain([]string{"-bench", c.bench, "-o", out, in}, io.Discard); err != nil {
			t.Fatalf("merge -bench %s of a file whose title names no benchmark: %v", c.bench, err)
		}
		tb, err := readTable(out, "")
		if err != nil || tb.bench != c.bench || len(tb.rows) != c.rows {
			t.Errorf("merged table %+v, %v; want %s with %d rows", tb, err, c.bench, c.rows)
		}
	}
}
