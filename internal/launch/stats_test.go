package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/trace"
)

// tracestatsBin is testdata/tracestats' binary.
var tracestatsBin = testProgram("tracestats")

// TestLevelSignalsAgree: the signals gorun forwards are those the ranks
// handle (launch does not import internal/trace).
func TestLevelSignalsAgree(t *testing.T) {
	if levelSignals != [2]syscall.Signal{trace.RaiseSignal, trace.LowerSignal} {
		t.Errorf("gorun forwards %v, the ranks change their level on %v and %v", levelSignals, trace.RaiseSignal, trace.LowerSignal)
	}
}

// statsRows parses gorun's --stats table out of its stderr: the row of
// each rank (or "all") and layer, by column name.
func statsRows(t *testing.T, stderr string) map[string]map[string]string {
	t.Helper()
	var heads []string
	rows := map[string]map[string]string{}
	for _, line := range strings.Split(stderr, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[0] == "RANK":
			heads = f
		case heads != nil && len(f) == len(heads):
			row := map[string]string{}
			for i, h := range heads {
				row[h] = f[i]
			}
			rows[f[0]+" "+f[1]] = row
		default:
			if heads != nil {
				return rows
			}
		}
	}
	if heads == nil {
		t.Fatalf("no --stats table in:\n%s", stderr)
	}
	return rows
}

func num(t *testing.T, row map[string]string, col string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(row[col], 10, 64)
	if err != nil {
		t.Fatalf("column %s of %v: %v", col, row, err)
	}
	return n
}

// TestGorunStats: gorun --stats over 2 ranks, rank 0 sending 10 messages
// of 30000 bytes to rank 1, prints one table: for each rank its lapi row,
// its lapi row toward the other rank, and its device's, and a sum row per
// layer. The ranks' counter lines are
// taken out of their output. Rank 0's lapi sent the 10 messages and rank
// 1's received them; rank 0's device sent at least the 300000 bytes (plus
// headers and setup), and over shared memory rank 1's device received
// exactly what rank 0's sent.
func TestGorunStats(t *testing.T) {
	prog := tracestatsBin(t)
	const sent = 10 * 30000
	for _, tr := range []string{"shm", "udp"} {
		t.Run(tr, func(t *testing.T) {
			r := gorun(t, "-n", "2", "--stats", "--transport", tr, prog, "-msgs", "10", "-bytes", "30000")
			if r.code != 0 {
				t.Fatalf("status %d\nstderr:\n%s", r.code, r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, pmi.StatsPrefix) {
				t.Errorf("counter lines left in the output:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr, "gorun: --stats: each rank's counters at its Finalize") {
				t.Errorf("no table heading in:\n%s", r.stderr)
			}
			rows := statsRows(t, r.stderr)
			var keys []string
			for k := range rows {
				keys = append(keys, k)
			}
			want := []string{"0 lapi", "0 lapi>1", "0 " + tr, "1 lapi", "1 lapi>0", "1 " + tr, "all lapi", "all " + tr}
			if len(keys) != len(want) {
				t.Fatalf("rows %q, want %q:\n%s", keys, want, r.stderr)
			}
			for _, k := range want {
				if rows[k] == nil {
					t.Fatalf("no row %q:\n%s", k, r.stderr)
				}
			}
			// Everything rank 0 sent went to rank 1, the program's bytes
			// among it.
			if n, m := num(t, rows["0 lapi>1"], "MESSAGES_SENT"), num(t, rows["0 lapi"], "MESSAGES_SENT"); n != m {
				t.Errorf("rank 0 sent %d messages to rank 1 and %d in all", n, m)
			}
			if n := num(t, rows["0 lapi>1"], "BYTES_SENT"); n < sent {
				t.Errorf("rank 0's lapi sent rank 1 %d bytes, want at least %d", n, sent)
			}
			if n := num(t, rows["0 lapi"], "MESSAGES_SENT"); n < 10 {
				t.Errorf("rank 0's lapi sent %d messages, want at least 10", n)
			}
			if n := num(t, rows["1 lapi"], "MESSAGES_RECV"); n < 10 {
				t.Errorf("rank 1's lapi received %d messages, want at least 10", n)
			}
			out, in := num(t, rows["0 "+tr], "BYTES_SENT"), num(t, rows["1 "+tr], "BYTES_RECV")
			// Headers and setup, plus what lapi sent again over udp (a
			// loaded machine delays acknowledgements past the timeout):
			// at most a 64 KiB frame each.
			resent := num(t, rows["0 lapi"], "RETRANSMITS")
			if out < sent || out > sent+sent/20+16<<10+resent*64<<10 {
				t.Errorf("rank 0's %s device sent %d bytes for the program's %d (%d packets sent again)", tr, out, sent, resent)
			}
			if in < sent || tr == "shm" && in != out {
				t.Errorf("rank 1's %s device received %d bytes; rank 0's sent %d (the program %d)", tr, in, out, sent)
			}
			if rows["0 "+tr]["PEERS"] != "1" || rows["1 "+tr]["PEERS"] != "0" {
				t.Errorf("peers %s and %s, want 1 and 0", rows["0 "+tr]["PEERS"], rows["1 "+tr]["PEERS"])
			}
			if all := num(t, rows["all "+tr], "BYTES_SENT"); all != out+num(t, rows["1 "+tr], "BYTES_SENT") {
				t.Errorf("the sum row's %d bytes sent is not the ranks' sum", all)
			}
		})
	}
}

// TestStatsTable: the table from counter lines, one of them after output
// of the rank's own without a newline (which is passed on), and a rank
// that sent none.
func TestStatsTable(t *testing.T) {
	st := newStatsTable(true)
	if rest := st.take([]byte("partial "+pmi.StatsPrefix+"rank=1 layer=lapi messages_sent=3 messages_recv=4 packets_sent=5 packets_recv=6 retransmits=7 redrives=8 singlecopy_bytes=9 drops=duplicate:2\n"), 1); string(rest) != "partial " {
		t.Errorf("take left %q, want the rank's own output", rest)
	}
	st.take([]byte(pmi.StatsPrefix+"rank=1 layer=udp peers=0,2 frames_sent=10 frames_recv=11 bytes_sent=1200 bytes_recv=1300 drops=crc:1,peer:2\n"), 1)
	st.take([]byte(pmi.StatsPrefix+"rank=0 layer=udp peers=1,2 frames_sent=20 frames_recv=21 bytes_sent=2200 bytes_recv=2300 drops=crc:3\n"), 0)
	st.take([]byte(pmi.StatsPrefix+"rank=0 layer=lapi messages_sent=1 messages_recv=1 packets_sent=1 packets_recv=1 retransmits=0 redrives=0 singlecopy_bytes=0 drops=-\n"), 0)
	if rest := st.take([]byte("not counters\n"), 0); string(rest) != "not counters\n" {
		t.Errorf("take changed a plain line to %q", rest)
	}
	var out bytes.Buffer
	st.print(&outputMux{stderr: &out}, 3)
	want := `gorun: --stats: each rank's counters at its Finalize (SENT and RECV: lapi's packets, a device's frames; lapi>P: toward rank P)
RANK  LAYER  PEERS  MESSAGES_SENT  MESSAGES_RECV  SENT  RECV  BYTES_SENT  BYTES_RECV  RETRANSMITS  REDRIVES  SINGLECOPY_BYTES  DROPS
0     lapi   -      1              1              1     1     -           -           0            0         0                 -
0     udp    1,2    -              -              20    21    2200        2300        -            -         -                 crc:3
1     lapi   -      3              4              5     6     -           -           7            8         9                 duplicate:2
1     udp    0,2    -              -              10    11    1200        1300        -            -         -                 crc:1,peer:2
all   lapi   -      4              5              6     7     -           -           7            8         9                 duplicate:2
all   udp    -      -              -              30    32    3400        3600        -            -         -                 crc:4,peer:2
gorun: --stats: no counters from rank(s) 2 (ended before the end of Finalize, or not weft programs)
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", &out, want)
	}
}

// TestGorunForwardsTraceLevel: SIGUSR1 sent three times to gorun reaches
// every rank, locally and through the remote wrapper: each says its level
// went 0→1→2→3, then (waiting for level 3) writes its mark and the
// level-3 begin and end of its Barrier, each line with the rank, a stamp
// and the component.
func TestGorunForwardsTraceLevel(t *testing.T) {
	prog := tracestatsBin(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"local", []string{"-n", "2"}},
		{"remote", []string{"-n", "2", "-H", "127.0.0.2:2", "--rsh", fakeRsh(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), jobWait)
			defer cancel()
			cmd := exec.CommandContext(ctx, bins.gorun, append(c.args, prog, "-wait-level", "3", "-msgs", "1")...)
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			for ready := 0; ready < 2; {
				if !sc.Scan() {
					cmd.Wait()
					t.Fatalf("gorun ended before both ranks were ready; stderr:\n%s", stderr.String())
				}
				if strings.HasPrefix(sc.Text(), "ready ") {
					ready++
				}
			}
			// One signal at a time, the next once both ranks have said
			// their new level: two pending at once are one.
			for level := 1; level <= 3; level++ {
				cmd.Process.Signal(syscall.SIGUSR1)
				said := fmt.Sprintf("trace: level %d (was %d): user defined signal 1", level, level-1)
				if !stderr.wait(ctx, func(out string) bool { return strings.Count(out, said) == 2 }) {
					t.Fatalf("the ranks did not both say %q; stderr:\n%s", said, stderr.String())
				}
			}
			for sc.Scan() {
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("gorun: %v; stderr:\n%s", err, stderr.String())
			}
			out := stderr.String()
			if n := strings.Count(out, "gorun: user defined signal 1: trace level up by one on 2 running rank(s)\n"); n != 3 {
				t.Errorf("gorun said it forwarded SIGUSR1 %d times, want 3:\n%s", n, out)
			}
			for r := range 2 {
				line := func(re string) *regexp.Regexp {
					return regexp.MustCompile(`(?m)^weft\[` + strconv.Itoa(r) + `\] \d+\.\d{6} ` + re + `$`)
				}
				want := []*regexp.Regexp{
					line(`trace: level 1 \(was 0\): user defined signal 1`),
					line(`trace: level 2 \(was 1\): user defined signal 1`),
					line(`trace: level 3 \(was 2\): user defined signal 1`),
					line(`mark ` + strconv.Itoa(r) + `: level 3 reached \(wall \d\d:\d\d:\d\d\.\d{6}\)`),
					line(`mpi ` + strconv.Itoa(r) + `: barrier #\d+ begins on communicator 0 \(2 ranks\): 0 bytes per rank, root 0`),
					line(`mpi ` + strconv.Itoa(r) + `: barrier #\d+ ends after \S+: ok`),
				}
				at := 0
				for _, re := range want {
					loc := re.FindStringIndex(out[at:])
					if loc == nil {
						t.Errorf("rank %d: no line matching %s after offset %d in:\n%s", r, re, at, out)
						break
					}
					at += loc[1]
				}
			}
		})
	}
}

// TestRemoteScriptLevelSignal: the remote wrapper passes USR1 to the rank
// alone, not its process group: a process the rank started (here a sleep,
// which USR1 would kill) lives on.
func TestRemoteScriptLevelSignal(t *testing.T) {
	dir := t.TempDir()
	rank := `sleep 30 & c=$!; trap 'kill -0 $c && echo child-alive; kill $c; exit 0' USR1; echo ready; wait`
	cmd := exec.Command("sh", "-c", remoteCommand(dir, nil, filepath.Join(dir, "weft-x-"), "sh", []string{"-c", rank}))
	in, _ := cmd.StdinPipe()
	defer in.Close()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("rank did not start: %q", sc.Text())
	}
	in.Write([]byte("USR1\n"))
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	if err := cmd.Wait(); err != nil || !slices.Equal(rest, []string{"child-alive"}) {
		t.Errorf("after USR1: %v, rank printed %q; want status 0 and child-alive", err, rest)
	}
}
