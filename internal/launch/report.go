package launch

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// reportRows caps the per-rank lines of a report; the summary lines still
// list every rank.
const reportRows = 64

// report says, when --timeout expires, where every rank is: running or
// how it ended, and its PMI phase (not connected, in a fence, finalized...),
// then which ranks were still running and which had not reached finalize.
func (j *job) report() {
	j.out.say(fmt.Sprintf("timeout: the job ran %v (--timeout %v); stopping it. Rank states:",
		time.Since(j.start).Round(time.Millisecond), j.opts.Timeout))
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
		j.out.say(fmt.Sprintf("  rank %d (%s): %s; PMI: %s", r.id, r.where(), proc, pmiText))
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
