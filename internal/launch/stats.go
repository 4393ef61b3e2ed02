package launch

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/pmi"
)

// levelSignals change the ranks' trace level by one, up and down: gorun
// forwards them to every rank (internal/trace's RaiseSignal and
// LowerSignal, which launch does not import; a test checks they agree).
var levelSignals = [2]unix.Signal{unix.SIGUSR1, unix.SIGUSR2}

// isLevelSignal reports whether sig is one of levelSignals.
func isLevelSignal(sig os.Signal) bool { return sig == levelSignals[0] || sig == levelSignals[1] }

// forwardLevel passes a trace-level signal gorun received to every running
// rank (to a remote one through the wrapper on its host), and says so: the
// ranks then each say their new level. A rank not yet in mpi.Init, or
// past Finalize, ignores it.
func (j *job) forwardLevel(sig unix.Signal) {
	way := "up"
	if sig == levelSignals[1] {
		way = "down"
	}
	n := 0
	for _, r := range j.ranks {
		if r.running {
			r.signal(sig)
			n++
		}
	}
	j.out.say(fmt.Sprintf("%v: trace level %s by one on %d running rank(s)", sig, way, n))
}

// statsTable gathers the ranks' counter lines (pmi.StatsPrefix, written by
// each rank's Finalize under --stats) for the table gorun prints at the
// end of the job.
type statsTable struct {
	mu   sync.Mutex
	rows []statsRow
}

// statsRow is one counter line: a rank's reliable layer, or one device.
type statsRow struct {
	rank   int               // the rank whose output it came in
	layer  string            // lapi, or a device's kind
	fields map[string]string // NAME=VALUE
}

// newStatsTable is the table for --stats, nil without it.
func newStatsTable(on bool) *statsTable {
	if !on {
		return nil
	}
	return &statsTable{}
}

// take records rank's counter line if line holds one, and returns what
// precedes it on the line (output of the rank's own that had no newline
// yet when the counters were written).
func (t *statsTable) take(line []byte, rank int) []byte {
	i := bytes.Index(line, []byte(pmi.StatsPrefix))
	if i < 0 {
		return line
	}
	row := statsRow{rank: rank, fields: map[string]string{}}
	for _, f := range strings.Fields(string(line[i+len(pmi.StatsPrefix):])) {
		if k, v, ok := strings.Cut(f, "="); ok {
			row.fields[k] = v
		}
	}
	row.layer = row.fields["layer"]
	t.mu.Lock()
	t.rows = append(t.rows, row)
	t.mu.Unlock()
	return line[:i]
}

// statsColumns are the table's columns after RANK and LAYER, each with the
// fields it shows: a lapi row's packets and a device row's frames share
// SENT and RECV.
var statsColumns = []struct {
	head   string
	fields []string
}{
	{"PEERS", []string{"peers"}},
	{"MESSAGES_SENT", []string{"messages_sent"}},
	{"MESSAGES_RECV", []string{"messages_recv"}},
	{"SENT", []string{"packets_sent", "frames_sent"}},
	{"RECV", []string{"packets_recv", "frames_recv"}},
	{"BYTES_SENT", []string{"bytes_sent"}},
	{"BYTES_RECV", []string{"bytes_recv"}},
	{"RETRANSMITS", []string{"retransmits"}},
	{"REDRIVES", []string{"redrives"}},
	{"SINGLECOPY_BYTES", []string{"singlecopy_bytes"}},
	{"DROPS", []string{"drops"}},
}

// print writes the table to the mux's stderr once the ranks' output is
// drained: a heading, one row per rank and layer (lapi first, then the
// devices as the rank listed them), a row per layer summing the ranks
// ("all"), and a line naming the ranks of the n that sent no counters.
func (t *statsTable) print(m *outputMux, n int) {
	t.mu.Lock()
	rows := slices.Clone(t.rows)
	t.mu.Unlock()
	slices.SortStableFunc(rows, func(a, b statsRow) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return boolInt(b.layer == "lapi") - boolInt(a.layer == "lapi")
	})

	var buf bytes.Buffer
	buf.WriteString("gorun: --stats: each rank's counters at its Finalize (SENT and RECV: lapi's packets, a device's frames; lapi>P: toward rank P)\n")
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	heads := []string{"RANK", "LAYER"}
	for _, c := range statsColumns {
		heads = append(heads, c.head)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	reported := map[int]bool{}
	var layers []string
	sums := map[string]map[string]uint64{}
	for _, r := range rows {
		reported[r.rank] = true
		if sums[r.layer] == nil {
			layers = append(layers, r.layer)
			sums[r.layer] = map[string]uint64{}
		}
		cells := []string{strconv.Itoa(r.rank), r.layer}
		for _, c := range statsColumns {
			cells = append(cells, cell(r.fields, c.fields))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		addRow(sums[r.layer], r.fields)
	}
	if len(reported) > 1 {
		for _, l := range layers {
			if strings.Contains(l, ">") {
				continue // toward one peer: summed in the rank's lapi row
			}
			cells := []string{"all", l}
			for _, c := range statsColumns {
				cells = append(cells, sumCell(sums[l], c.fields))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	tw.Flush()
	var missing []int
	for id := range n {
		if !reported[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(&buf, "gorun: --stats: no counters from rank(s) %s (ended before the end of Finalize, or not weft programs)\n", rankList(missing))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.stderr.Write(buf.Bytes())
}

// cell is the first of names that fields has, "-" for none.
func cell(fields map[string]string, names []string) string {
	for _, n := range names {
		if v, ok := fields[n]; ok {
			return v
		}
	}
	return "-"
}

// addRow adds a row's numbers to sum, and its drops by reason as
// "drops/REASON".
func addRow(sum map[string]uint64, fields map[string]string) {
	for k, v := range fields {
		if k == "drops" {
			for _, item := range strings.Split(v, ",") {
				if why, n, ok := strings.Cut(item, ":"); ok {
					c, _ := strconv.ParseUint(n, 10, 64)
					sum["drops/"+why] += c
				}
			}
			continue
		}
		if c, err := strconv.ParseUint(v, 10, 64); err == nil && k != "rank" && k != "peers" {
			sum[k] += c
		}
	}
	sum["rows"]++
}

// sumCell is a column's cell in a sum row: the sum of the first of names
// the rows had, the drops merged by reason, "-" for none.
func sumCell(sum map[string]uint64, names []string) string {
	if names[0] == "drops" {
		var items []string
		for _, k := range slices.Sorted(maps.Keys(sum)) {
			if why, ok := strings.CutPrefix(k, "drops/"); ok && sum[k] > 0 {
				items = append(items, why+":"+strconv.FormatUint(sum[k], 10))
			}
		}
		if len(items) == 0 {
			return "-"
		}
		return strings.Join(items, ",")
	}
	for _, n := range names {
		if v, ok := sum[n]; ok {
			return strconv.FormatUint(v, 10)
		}
	}
	return "-"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
