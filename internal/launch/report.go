package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// reportRows caps the per-rank lines of a report; the summary lines still
// list every rank.
const reportRows = 64

// answerWait bounds how long gorun waits, at the timeout, for the ranks'
// answers to its question of what they wait for.
const answerWait = 2 * time.Second

// asking is gorun's question to the ranks, until the answers are in.
type asking struct {
	asked   time.Time
	timer   *time.Timer    // answerWait from the question
	answers map[int]string // by rank: what it waits for, "" for nothing
	awaited []int          // the ranks whose answer the report waits for
	why     string         // what the snapshots' summary says brought them
	stop    bool           // stop the job once the answers are in
}

// ask asks every running rank what it waits for and for its state
// snapshot (pmi.AskSignal: to a remote rank through the wrapper on its
// host): when --timeout expires, when a rank fails, and when gorun
// receives SIGQUIT. The report (at the timeout) and the snapshots'
// summary follow once the ranks that can answer have (answered), or after
// answerWait, and then the stop if stop. Those that can answer are those
// whose mpi.Init is past its PMI fence and that have not finalized: the
// others have no handler, and ignore the signal. A question already open
// takes on why and stop instead.
func (j *job) ask(why string, stop bool) {
	if a := j.asking; a != nil {
		a.why, a.stop = why, a.stop || stop
		return
	}
	a := &asking{asked: time.Now(), answers: map[int]string{}, why: why, stop: stop}
	states := j.srv.States()
	for _, r := range j.ranks {
		if !r.running {
			continue
		}
		r.signal(pmi.AskSignal)
		if st := states[r.id]; st.Phase == pmi.PhaseInitialized && st.Fences > 0 {
			a.awaited = append(a.awaited, r.id)
		}
	}
	a.timer = time.NewTimer(answerWait)
	j.asking = a
	if j.allAnswered() {
		j.endAsk()
	}
}

// answered records a rank's answer; the last one awaited brings the report.
func (j *job) answered(a answer) {
	if j.asking == nil {
		return // an answer to no question of this gorun's, or too late
	}
	j.asking.answers[a.rank] = a.waiting
	if j.allAnswered() {
		j.endAsk()
	}
}

// allAnswered reports whether every awaited rank still running answered.
func (j *job) allAnswered() bool {
	for _, id := range j.asking.awaited {
		if _, ok := j.asking.answers[id]; !ok && j.ranks[id].running {
			return false
		}
	}
	return true
}

// endAsk ends the question, if one is open: the report at the timeout,
// the snapshots' summary, then the stop if the question asked for it.
func (j *job) endAsk() {
	a := j.asking
	if a == nil {
		return
	}
	a.timer.Stop()
	if j.timedOut {
		j.report()
	}
	j.summarize(a.why, a.asked)
	j.asking = nil
	if a.stop {
		j.stop()
	}
}

// canAnswer reports whether a running rank other than except could answer
// gorun's question: its mpi.Init is past its PMI fence, and it has not
// finalized.
func (j *job) canAnswer(except int) bool {
	states := j.srv.States()
	for _, r := range j.ranks {
		if st := states[r.id]; r.running && r.id != except && st.Phase == pmi.PhaseInitialized && st.Fences > 0 {
			return true
		}
	}
	return false
}

// waitText is the part of a rank's report line that says what it waits
// for in MPI, from its answer to gorun's question.
func (j *job) waitText(r *rank) string {
	if !r.running {
		return ""
	}
	w, ok := j.asking.answers[r.id]
	switch {
	case !ok && !slices.Contains(j.asking.awaited, r.id):
		return "in no MPI call (not past mpi.Init's PMI fence, or finalized); "
	case !ok && r.remote:
		return fmt.Sprintf("no answer from %s within %v (not in MPI, stuck outside it, or the host is slow to reach); ", r.host.Name, answerWait)
	case !ok:
		return fmt.Sprintf("no answer within %v (not in MPI, or stuck outside it); ", answerWait)
	case w == "":
		return "not blocked in an MPI call; "
	}
	return "waits in " + w + "; "
}

// report says, when --timeout expires, where every rank is: running or
// how it ended, what it waits for in MPI (its answer to gorun's question:
// operation, peer, tag, communicator) and its PMI phase (not connected, in
// a fence, finalized...), then which ranks were still running and which
// had not reached finalize.
func (j *job) report() {
	j.out.say(fmt.Sprintf("timeout: the job ran %v (--timeout %v); stopping it. What each rank waits for:",
		j.asking.asked.Sub(j.start).Round(time.Millisecond), j.opts.Timeout))
	states := j.srv.States()
	var running, unfinalized []int
	for i, r := range j.ranks {
		st := states[i]
		if r.running {
			running = append(running, r.id)
		}
		if st.Phase != pmi.PhaseFinalized {
			unfinalized = append(unfinalized, r.id)
		}
		if i >= reportRows {
			continue
		}
		proc := "running"
		switch {
		case r.cmd == nil || r.cmd.Process == nil:
			proc = "never started"
		case !r.running:
			proc = "exited"
			if ps := r.state; ps != nil {
				proc = "exited: " + ps.String()
			}
		}
		pmiText := st.Phase.String()
		if st.Phase != pmi.PhaseNotConnected {
			pmiText += fmt.Sprintf(", %d fence(s) done", st.Fences)
			if st.LastCmd != "" {
				pmiText += ", last request " + st.LastCmd
			}
		}
		j.out.say(fmt.Sprintf("  rank %d (%s): %s; %sPMI: %s", r.id, r.where(), proc, j.waitText(r), pmiText))
	}
	if len(j.ranks) > reportRows {
		j.out.say(fmt.Sprintf("  ... %d more ranks", len(j.ranks)-reportRows))
	}
	j.out.say("ranks still running: " + rankList(running))
	j.out.say("ranks that had not reached PMI finalize: " + rankList(unfinalized))
}

func rankList(ids []int) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}
