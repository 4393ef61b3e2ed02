package launch

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/pmi"
)

// The ranks' state snapshots (issue 32). Every rank gorun starts sends its
// snapshots to gorun (pmi.SnapshotEnv): the ones it writes by itself, at a
// fatal error or its first timeout, and the ones gorun asks for with
// pmi.AskSignal, at --timeout, when a rank fails and on gorun's own
// SIGQUIT. gorun takes their lines out of the rank's stderr, writes each
// whole snapshot to --snapshot-dir (by default a new directory in TMPDIR)
// and prints a summary of the latest of each rank: what each waits for,
// the cycle when ranks wait on each other, the ranks a collective waits
// for that are not in it, and the ranks not in MPI.

// snapshotSignal, sent to gorun, asks every rank for its snapshot and
// brings a summary; the job goes on. SIGQUIT, because a person at the
// terminal can send it (Ctrl-\) and it means "say where you are" (a Go
// program's goroutine dump, a JVM's thread dump); the ranks are in process
// groups of their own, so the terminal's SIGQUIT reaches gorun alone.
const snapshotSignal = unix.SIGQUIT

// snapshotParent is where a job without --snapshot-dir makes its
// snapshot directory: "" for TMPDIR. Tests point it into their own
// directory, which they remove.
var snapshotParent = ""

// summaryRows caps the per-rank lines of a summary (one screen); the
// lines on cycles, collectives and ranks not in MPI name every rank.
const summaryRows = 16

// snapshots gathers the ranks' snapshots as they arrive.
type snapshots struct {
	mu       sync.Mutex
	dir      string // --snapshot-dir; "": a new directory in TMPDIR, made at the first snapshot
	made     bool   // dir exists (made or given)
	building map[int][]byte
	got      map[int]*rankSnap // the latest whole snapshot of each rank
	fresh    int               // snapshots completed since the last summary
	err      error             // the first failure to write one, said in the summary
}

func newSnapshots(dir string) *snapshots {
	return &snapshots{dir: dir, made: dir != "", building: map[int][]byte{}, got: map[int]*rankSnap{}}
}

// take records rank's snapshot line if line holds one, and returns what
// precedes it on the line (output of the rank's own that had no newline
// yet when the snapshot was written). The snapshot's "end" line completes
// it: it is written to its file and becomes the rank's latest.
func (s *snapshots) take(line []byte, rank int) []byte {
	i := bytes.Index(line, []byte(pmi.SnapshotPrefix))
	if i < 0 {
		return line
	}
	rec := line[i+len(pmi.SnapshotPrefix):]
	kind, _ := pmi.ParseRecord(string(rec))
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == "snapshot" {
		s.building[rank] = nil
	}
	b := append(s.building[rank], rec...)
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	s.building[rank] = b
	if kind == "end" {
		delete(s.building, rank)
		snap := parseSnapshot(rank, b)
		snap.path = s.writeLocked(rank, b)
		snap.at = time.Now()
		s.got[rank] = snap
		s.fresh++
	}
	return line[:i]
}

// writeLocked writes rank's snapshot text to its file and returns its
// path ("" when it could not be written: the error is kept for the
// summary).
func (s *snapshots) writeLocked(rank int, text []byte) string {
	if !s.made {
		dir, err := os.MkdirTemp(snapshotParent, "weft-snapshots-")
		if err != nil {
			s.err = firstErr(s.err, err)
			return ""
		}
		s.dir, s.made = dir, true
	}
	path := filepath.Join(s.dir, pmi.SnapshotFile(rank))
	if err := os.WriteFile(path, text, 0o644); err != nil {
		s.err = firstErr(s.err, err)
		return ""
	}
	return path
}

// firstErr is the first of two errors.
func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// latest returns the latest snapshot of each rank and where they went, and
// marks them summed up.
func (s *snapshots) latest() (map[int]*rankSnap, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fresh = 0
	return maps.Clone(s.got), s.dir, s.err
}

// unsummed reports whether snapshots came since the last summary.
func (s *snapshots) unsummed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh > 0
}

// rankSnap is what a summary reads of one rank's snapshot.
type rankSnap struct {
	rank       int
	head       map[string]string // the "snapshot" record: reason, pid...
	waiting    map[string]string // nil: not blocked in an MPI call
	comms      map[string]snapComm
	pending    []map[string]string
	unexpected []map[string]string
	more       map[string]int
	links      []map[string]string
	path       string
	at         time.Time // when gorun had it whole
	// old, when not "", says the snapshot came before the question the
	// summary answers: the rank did not answer this one.
	old string
}

// snapComm is a communicator as one rank saw it.
type snapComm struct {
	calls int   // collectives begun
	group []int // world ranks
}

// parseSnapshot reads a snapshot's records.
func parseSnapshot(rank int, text []byte) *rankSnap {
	s := &rankSnap{rank: rank, comms: map[string]snapComm{}, more: map[string]int{}}
	for line := range strings.Lines(string(text)) {
		kind, f := pmi.ParseRecord(line)
		switch kind {
		case "snapshot":
			s.head = f
		case "waiting":
			s.waiting = f
		case "comm":
			c := snapComm{calls: atoi(f["calls"])}
			for _, g := range strings.Split(f["group"], ",") {
				if n, err := strconv.Atoi(g); err == nil {
					c.group = append(c.group, n)
				}
			}
			s.comms[f["id"]] = c
		case "pending":
			s.pending = append(s.pending, f)
		case "unexpected":
			s.unexpected = append(s.unexpected, f)
		case "more":
			s.more[f["kind"]] += atoi(f["n"])
		case "link":
			s.links = append(s.links, f)
		}
	}
	return s
}

// atoi is a field's number, -1 when it is not one.
func atoi(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// call is the collective a rank waits in: communicator and number.
type call struct {
	comm string
	n    int
}

// collective returns the collective s waits in, if it waits in one.
func (s *rankSnap) collective() (call, bool) {
	if s == nil || s.waiting == nil || atoi(s.waiting["call"]) <= 0 {
		return call{}, false
	}
	return call{s.waiting["comm"], atoi(s.waiting["call"])}, true
}

// rankState is what gorun knows of a rank besides its snapshot.
type rankState struct {
	where  string // its process, for messages
	exited string // how it ended; "": running
}

// waitGraph is who waits for whom, from the snapshots.
type waitGraph struct {
	snaps map[int]*rankSnap
	n     int
	out   map[int][]int // by waiting rank, in rank order
	// absent are, per collective waited in, the members not in it (not
	// yet at its number), and in the members that wait in it.
	absent  map[call][]int
	waiters map[call][]int
}

// newWaitGraph draws the graph: a rank blocked in a point-to-point call
// waits for its peer (not for any source: any rank would do); a rank
// blocked in a collective waits for each member of the communicator that
// has not begun that collective (by the member's own count of the
// communicator's collectives), or sent no snapshot.
func newWaitGraph(snaps map[int]*rankSnap, n int) *waitGraph {
	g := &waitGraph{snaps: snaps, n: n, out: map[int][]int{}, absent: map[call][]int{}, waiters: map[call][]int{}}
	for r := range n {
		s := snaps[r]
		if s == nil || s.waiting == nil {
			continue
		}
		k, ok := s.collective()
		if !ok {
			if p := atoi(s.waiting["peer"]); p >= 0 && p < n && p != r {
				g.out[r] = []int{p}
			}
			continue
		}
		g.waiters[k] = append(g.waiters[k], r)
		for _, m := range s.comms[k.comm].group {
			if m == r || m < 0 || m >= n {
				continue
			}
			ms := snaps[m]
			if c, ok := ms.commOf(k.comm); ok && c.calls >= k.n {
				continue // in it, or past it
			}
			g.out[r] = append(g.out[r], m)
			if !slices.Contains(g.absent[k], m) {
				g.absent[k] = append(g.absent[k], m)
			}
		}
	}
	for k := range g.absent {
		slices.Sort(g.absent[k])
	}
	return g
}

// commOf is communicator id as s saw it.
func (s *rankSnap) commOf(id string) (snapComm, bool) {
	if s == nil {
		return snapComm{}, false
	}
	c, ok := s.comms[id]
	return c, ok
}

// cycle returns the first cycle of ranks that wait on each other,
// starting from its lowest rank, or nil.
func (g *waitGraph) cycle() []int {
	state := make([]uint8, g.n) // 0 unseen, 1 on the path, 2 done
	var path []int
	var found []int
	var visit func(r int) bool
	visit = func(r int) bool {
		state[r] = 1
		path = append(path, r)
		for _, p := range g.out[r] {
			switch state[p] {
			case 1:
				found = slices.Clone(path[slices.Index(path, p):])
				return true
			case 0:
				if visit(p) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[r] = 2
		return false
	}
	for r := range g.n {
		if state[r] == 0 && visit(r) {
			break
		}
	}
	if found == nil {
		return nil
	}
	low := slices.Index(found, slices.Min(found))
	return append(found[low:], found[:low]...)
}

// waitText says what s waits for: a collective by name and number, a
// point-to-point call as mpi describes it.
func (s *rankSnap) waitText() string {
	if k, ok := s.collective(); ok {
		name := s.waiting["collective"]
		if name == "" {
			name = "a collective"
		}
		return fmt.Sprintf("%s (collective #%d on communicator %s)", name, k.n, k.comm)
	}
	return s.waiting["what"]
}

// stateText says where rank r is: what it waits in, in no MPI call, or
// why gorun has no snapshot of it.
func stateText(r int, s *rankSnap, st rankState) string {
	switch {
	case s == nil && st.exited != "":
		return "exited (" + st.exited + "), no snapshot"
	case s == nil:
		return "no snapshot: not in MPI, or stuck outside it"
	case s.waiting == nil:
		return "in no MPI call"
	}
	return "waits in " + s.waitText()
}

// summary is the lines gorun prints of the snapshots: a heading (why they
// were taken and where they are), one line per rank (up to summaryRows),
// then the cycle of ranks waiting on each other if there is one, each
// collective's absent members, and the ranks not in MPI.
func summary(why, dir string, snaps map[int]*rankSnap, ranks []rankState) []string {
	n := len(ranks)
	var have []int
	for r := range n {
		if snaps[r] != nil {
			have = append(have, r)
		}
	}
	head := fmt.Sprintf("snapshots (%s): %d of %d ranks", why, len(have), n)
	if len(have) > 0 {
		head += fmt.Sprintf(", in %s (%s)", dir, pmi.SnapshotFile(have[0]))
	}
	lines := []string{head + ":"}
	g := newWaitGraph(snaps, n)
	for r := range min(n, summaryRows) {
		s := snaps[r]
		text := fmt.Sprintf("  rank %d (%s): %s", r, ranks[r].where, stateText(r, s, ranks[r]))
		if s != nil {
			if _, ok := s.collective(); ok && len(g.out[r]) > 0 {
				text += " for " + ranksText(g.out[r]) + ", not in it"
			}
			text += s.queuesText()
			if why := s.head["reason"]; why != "" && !strings.HasPrefix(why, "signal") {
				text += "; snapshot of " + why
			}
			if s.old != "" {
				text += "; " + s.old
			}
			if ranks[r].exited != "" {
				text += "; since exited (" + ranks[r].exited + ")"
			}
		}
		lines = append(lines, text)
	}
	if n > summaryRows {
		lines = append(lines, fmt.Sprintf("  ... %d more ranks (in their files)", n-summaryRows))
	}
	if c := g.cycle(); c != nil {
		var steps, path []string
		for i, r := range c {
			next := c[(i+1)%len(c)]
			step := fmt.Sprintf("rank %d waits in %s", r, snaps[r].waitText())
			if _, ok := snaps[r].collective(); ok {
				step += fmt.Sprintf(" for rank %d", next)
			}
			steps = append(steps, step)
			path = append(path, strconv.Itoa(r))
		}
		path = append(path, strconv.Itoa(c[0]))
		if len(steps) > listMax {
			steps = append(steps[:listMax], fmt.Sprintf("and %d more", len(c)-listMax))
		}
		lines = append(lines, "deadlock: ranks wait on each other in a cycle "+strings.Join(path, " → ")+": "+strings.Join(steps, "; "))
	}
	for _, k := range slices.SortedFunc(maps.Keys(g.absent), func(a, b call) int {
		return cmp.Or(cmp.Compare(a.comm, b.comm), cmp.Compare(a.n, b.n))
	}) {
		if len(lines) >= summaryRows+listMax {
			lines = append(lines, "... more collectives wait for members not in them (in the files)")
			break
		}
		w := snaps[g.waiters[k][0]]
		var who []string
		for _, m := range g.absent[k] {
			who = append(who, fmt.Sprintf("rank %d (%s)", m, stateText(m, snaps[m], ranks[m])))
		}
		lines = append(lines, fmt.Sprintf("not in %s, which rank(s) %s wait in: %s",
			w.waitText(), spans(g.waiters[k]), capList(who)))
	}
	var out []string
	for r := range n {
		if ranks[r].exited == "" && (snaps[r] == nil || snaps[r].waiting == nil) {
			out = append(out, fmt.Sprintf("rank %d (%s)", r, stateText(r, snaps[r], ranks[r])))
		}
	}
	if len(out) > 0 {
		lines = append(lines, "not in MPI: "+capList(out))
	}
	return lines
}

// listMax caps the items of a summary's list, and its steps of a cycle.
const listMax = 8

// capList joins items, the first listMax of them and a count of the rest.
func capList(items []string) string {
	if len(items) <= listMax {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:listMax], ", ") + fmt.Sprintf(" and %d more", len(items)-listMax)
}

// spans writes ascending ids with runs of three or more as first-last:
// "0-2,5,7".
func spans(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(ids[k]))
			}
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ranksText is "rank N" for one rank, "ranks N,M,..." for more.
func ranksText(ids []int) string {
	if len(ids) == 1 {
		return "rank " + strconv.Itoa(ids[0])
	}
	return "ranks " + spans(ids)
}

// queuesText says what s holds besides its wait: posted receives and
// waiting sends, unexpected messages (the first named), and links with
// packets unacknowledged or a peer declared failed.
func (s *rankSnap) queuesText() string {
	var parts []string
	if n := len(s.pending) + s.more["pending"]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", n))
	}
	if n := len(s.unexpected) + s.more["unexpected"]; n > 0 {
		u := s.unexpected[0]
		parts = append(parts, fmt.Sprintf("%d unexpected (first from rank %s, tag %s, communicator %s, %s bytes)",
			n, u["source"], u["tag"], u["comm"], u["bytes"]))
	}
	for _, l := range s.links {
		switch {
		case l["failed"] != "":
			parts = append(parts, "rank "+l["peer"]+" failed")
		case atoi(l["unacked"]) > 0:
			parts = append(parts, fmt.Sprintf("toward rank %s %s packets unacknowledged (oldest %s, resent %s times)",
				l["peer"], l["unacked"], l["oldest_age"], l["retries"]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// summarize prints the summary of the latest snapshots, why naming what
// brought them, asked when (a snapshot from before it is said to be).
func (j *job) summarize(why string, asked time.Time) {
	snaps, dir, err := j.out.snaps.latest()
	if len(snaps) == 0 {
		j.out.say(fmt.Sprintf("snapshots (%s): none came (no rank past mpi.Init answered)", why))
		return
	}
	for r, s := range snaps {
		if s.at.Before(asked) {
			c := *s
			c.old = fmt.Sprintf("snapshot %v older than the question, not answered since", asked.Sub(s.at).Round(time.Millisecond))
			snaps[r] = &c
		}
	}
	ranks := make([]rankState, len(j.ranks))
	for i, r := range j.ranks {
		ranks[i].where = r.where()
		if !r.running {
			ranks[i].exited = "not started"
			if r.state != nil {
				ranks[i].exited = r.state.String()
			}
		}
	}
	for _, l := range summary(why, dir, snaps, ranks) {
		j.out.say(l)
	}
	if err != nil {
		j.out.say("snapshots: " + err.Error())
	}
}
