package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

const compareUsage = `usage: bench compare [-plot FILE.svg|png] [-title T] A.csv B.csv ...

Prints the tables side by side with the ratio first/other per size. Files are CSVs
written by bench -csv or bench merge, or OSU-layout text; a series is named by the
CSV's label column, or else by its file name.

`

const mergeUsage = `usage: bench merge -o OUT.csv [-label L] [-bench B] ROUND.txt|ROUND.csv ...

Writes, per size, the median over the rounds of each column.

`

// compareMain is `bench compare [-plot FILE] A B ...`: the tables side by
// side, the ratio of the first to each other at every size, and optionally
// one chart of them all. Files are bench CSVs or OSU-layout text.
func compareMain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench compare", compareUsage, stderr)
	plotFile := fs.String("plot", "", "draw every table on one chart to `FILE`.svg or FILE.png")
	title := fs.String("title", "", "chart title (default: the benchmark and the labels)")
	decimals := fs.Int("decimals", precision, "decimals of the values and ratios")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkDecimals(*decimals); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return fmt.Errorf("%w: bench compare needs at least two files, got %d", errUsage, fs.NArg())
	}
	if *plotFile != "" {
		if err := checkPlotName(*plotFile); err != nil {
			return fmt.Errorf("%w: -plot: %v", errUsage, err)
		}
	}
	var tables []*table
	for _, path := range fs.Args() {
		t, err := readTable(path, "")
		if err != nil {
			return err
		}
		if len(tables) > 0 && t.bench != tables[0].bench {
			return fmt.Errorf("%s holds %s results and %s holds %s: compare one benchmark at a time",
				fs.Arg(0), tables[0].bench, path, t.bench)
		}
		tables = append(tables, t)
	}
	if err := writeComparison(stdout, tables, *decimals); err != nil {
		return err
	}
	if *plotFile == "" {
		return nil
	}
	t := *title
	if t == "" {
		var names []string
		for _, tb := range tables {
			names = append(names, tb.label)
		}
		t = fmt.Sprintf("%s: %s", tables[0].bench, strings.Join(names, " vs "))
	}
	return plotTables(*plotFile, t, tables)
}

// ratios divides base's value by other's at each of base's sizes. A size
// other lacks, or where other's value is 0, gives NaN.
func ratios(base, other *table) []float64 {
	byValue := make(map[int]float64, len(other.rows))
	for _, r := range other.rows {
		byValue[r.size] = r.value
	}
	out := make([]float64, len(base.rows))
	for i, r := range base.rows {
		v, ok := byValue[r.size]
		if !ok || v == 0 {
			out[i] = math.NaN()
			continue
		}
		out[i] = r.value / v
	}
	return out
}

// writeComparison prints the tables' values per size (the first table's
// sizes) and the ratio of the first to each other, in OSU-like columns,
// with decimals decimals.
func writeComparison(w io.Writer, tables []*table, decimals int) error {
	base := tables[0]
	b := lookup(base.bench)
	if b == nil {
		return fmt.Errorf("unknown benchmark %q", base.bench)
	}
	better := "lower is better"
	if higherIsBetter(b.kind) {
		better = "higher is better"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# weft compare %s: %s, %s, %s; ratio = %s / other\n", version, base.bench, metric(b.kind), better, base.label)
	width := func(name string) int { return max(fieldWidth, len(name)+2) }
	fmt.Fprintf(&s, "%-*s", sizeWidth, "# Size")
	for _, t := range tables {
		fmt.Fprintf(&s, "%*s", width(t.label), t.label)
	}
	var cols [][]float64
	for _, t := range tables[1:] {
		name := base.label + "/" + t.label
		fmt.Fprintf(&s, "%*s", width(name), name)
		cols = append(cols, ratios(base, t))
	}
	s.WriteString("\n")
	values := make([]map[int]float64, len(tables))
	for i, t := range tables {
		values[i] = make(map[int]float64, len(t.rows))
		for _, r := range t.rows {
			values[i][r.size] = r.value
		}
	}
	for i, r := range base.rows {
		fmt.Fprintf(&s, "%-*d", sizeWidth, r.size)
		for j, t := range tables {
			v, ok := values[j][r.size]
			writeCell(&s, width(t.label), v, ok, decimals)
		}
		for j, t := range tables[1:] {
			v := cols[j][i]
			writeCell(&s, width(base.label+"/"+t.label), v, !math.IsNaN(v), decimals)
		}
		s.WriteString("\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// writeCell writes a right-aligned value, or "-" when there is none.
func writeCell(s *strings.Builder, width int, v float64, ok bool, decimals int) {
	if !ok {
		fmt.Fprintf(s, "%*s", width, "-")
		return
	}
	fmt.Fprintf(s, "%*.*f", width, decimals, v)
}

// mergeMain is `bench merge -o OUT.csv ROUND...`: the median, per size, of
// several runs of one benchmark (OSU text or CSV), as one CSV. compare.sh
// runs each implementation a few times, interleaved, and merges the rounds
// so that one unlucky run on a shared machine does not decide a ratio.
func mergeMain(args []string, stderr io.Writer) error {
	fs := newFlagSet("bench merge", mergeUsage, stderr)
	out := fs.String("o", "", "write the merged CSV to `FILE` (required)")
	label := fs.String("label", "", "series name (default: the first input's)")
	benchName := fs.String("bench", "", "benchmark name, for inputs whose titles do not say it (an input that names another is an error)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("%w: bench merge needs -o FILE and at least one input", errUsage)
	}
	if *benchName != "" && lookup(*benchName) == nil {
		return fmt.Errorf("%w: -bench %q: want one of %s", errUsage, *benchName, strings.Join(benchNames(), ", "))
	}
	var rounds []*table
	for _, path := range fs.Args() {
		t, err := readTable(path, *benchName)
		if err != nil {
			return err
		}
		if len(rounds) > 0 && t.bench != rounds[0].bench {
			return fmt.Errorf("%s holds %s results, %s holds %s: merge rounds of one benchmark", fs.Arg(0), rounds[0].bench, path, t.bench)
		}
		rounds = append(rounds, t)
	}
	m := medianTable(rounds)
	if *label != "" {
		m.label = *label
	}
	return writeFile(*out, func(w io.Writer) error { return writeCSV(w, m) })
}

// medianTable is, for every size any round has, the median of each column
// over the rounds that have that size; NaNs (point-to-point min and max)
// stay NaN. Sizes come out in ascending order.
func medianTable(rounds []*table) *table {
	m := &table{bench: rounds[0].bench, label: rounds[0].label}
	bySize := map[int][]row{}
	for _, t := range rounds {
		for _, r := range t.rows {
			bySize[r.size] = append(bySize[r.size], r)
		}
	}
	var list []int
	for s := range bySize {
		list = append(list, s)
	}
	slices.Sort(list)
	for _, s := range list {
		rs := bySize[s]
		col := func(f func(row) float64) float64 {
			var v []float64
			for _, r := range rs {
				if x := f(r); !math.IsNaN(x) {
					v = append(v, x)
				}
			}
			return median(v)
		}
		m.rows = append(m.rows, row{
			size:  s,
			value: col(func(r row) float64 { return r.value }),
			min:   col(func(r row) float64 { return r.min }),
			max:   col(func(r row) float64 { return r.max }),
			iters: int(col(func(r row) float64 { return float64(r.iters) })),
		})
	}
	return m
}

// median of v (which it sorts); NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
