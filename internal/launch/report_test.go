package launch

import (
	"regexp"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/internal/pmi"
)

// checkWaitReport checks gorun's report at --timeout for the deadlock
// program on ranks 0 and 1 (where names the rank's process, as a regexp):
// per rank the MPI call it is blocked in, with peer, tag and communicator.
func checkWaitReport(t *testing.T, r result, where string) {
	t.Helper()
	if r.code != exitTimeout {
		t.Errorf("status %d, want %d", r.code, exitTimeout)
	}
	for _, want := range []string{
		`rank 0 \(` + where + `\): running; waits in Recv from rank 1, tag 7, communicator 0;`,
		`rank 1 \(` + where + `\): running; waits in Barrier[^;]* from rank 0, tag \d+, communicator 0 \(collective\);`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stderr) {
			t.Errorf("report does not match %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr+r.stdout, pmi.AnswerPrefix) {
		t.Errorf("a rank's answer line was passed through as output:\n%s\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "timeout: the job ran") {
		t.Errorf("no timeout report:\n%s", r.stderr)
	}
}

// TestGorunTimeoutSaysWhatRanksWait: at --timeout gorun reports, per rank,
// the MPI call it is blocked in (a Recv naming peer and tag, a Barrier),
// that a rank is in no MPI call, or that one did not answer, and exits 124.
func TestGorunTimeoutSaysWhatRanksWait(t *testing.T) {
	r := gorun(t, "-n", "4", "--oversubscribe", "--timeout", "2s", bins.deadlock)
	checkWaitReport(t, r, `pid \d+`)
	for _, want := range []string{
		`rank 2 \(pid \d+\): running; not blocked in an MPI call;`,
		`rank 3 \(pid \d+\): running; no answer within 2s \(not in MPI, or stuck outside it\);`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stderr) {
			t.Errorf("report does not match %q:\n%s", want, r.stderr)
		}
	}
	assertNoRankLeft(t)
}

// TestGorunTimeoutAsksRemoteRanks: remote ranks (through the fake rsh and
// the wrapper on their host) are asked and answer as local ones do.
func TestGorunTimeoutAsksRemoteRanks(t *testing.T) {
	r := gorun(t, "-n", "2", "-H", "127.0.0.2:2", "--rsh", fakeRsh(t), "--timeout", "2s", bins.deadlock)
	checkWaitReport(t, r, `on 127\.0\.0\.2, ssh pid \d+`)
	assertNoRankLeft(t)
}

// TestMultiHostNetnsTimeoutReport: across the namespace hosts, over ssh,
// gorun's report says what each rank waits for.
func TestMultiHostNetnsTimeoutReport(t *testing.T) {
	rsh := netnsHosts(t)
	r := command(t, "", nil, bins.gorun, "-n", "2", "-H", "host1,host2", "--rsh", rsh, "--timeout", "3s", bins.deadlock)
	if r.code != exitTimeout {
		t.Errorf("status %d, want %d", r.code, exitTimeout)
	}
	for _, want := range []string{
		`rank 0 \(on host1, ssh pid \d+\): running; waits in Recv from rank 1, tag 7, communicator 0;`,
		`rank 1 \(on host2, ssh pid \d+\): running; waits in Barrier[^;]* from rank 0, tag \d+, communicator 0 \(collective\);`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stderr) {
			t.Errorf("report does not match %q:\n%s", want, r.stderr)
		}
	}
	assertNoRankLeft(t)
}

// TestTimeoutHelp: gorun -h says what the --timeout report gives.
func TestTimeoutHelp(t *testing.T) {
	var out, errb lockedBuffer
	run([]string{"-h"}, &out, &errb)
	help := out.String() + errb.String()
	i := strings.Index(help, "-timeout")
	if i < 0 {
		t.Fatalf("no --timeout in the help:\n%s", help)
	}
	for _, want := range []string{"MPI call it is blocked in", "operation, peer, tag, communicator", "did not answer", "124"} {
		if !strings.Contains(help[i:], want) {
			t.Errorf("--timeout's help does not say %q:\n%s", want, help[i:])
		}
	}
}

// TestOutputTakesAnswers: a rank's answer line is taken out of its stderr
// and passed on, output of the rank's own before it on the line (no
// newline yet) is kept as a line, and stdout is left alone.
func TestOutputTakesAnswers(t *testing.T) {
	var out, errb strings.Builder
	m := &outputMux{stdout: &out, stderr: &errb, answers: make(chan answer, 4)}
	text := "before\npartial" + pmi.AnswerPrefix + "Recv from rank 1, tag 7, communicator 0\n" + pmi.AnswerPrefix + "\nafter\n"
	m.copyLines(strings.NewReader(text), 3, true, nil)
	m.copyLines(strings.NewReader(pmi.AnswerPrefix+"on stdout\n"), 3, false, nil)
	if want := "before\npartial\nafter\n"; errb.String() != want {
		t.Errorf("stderr %q, want %q", errb.String(), want)
	}
	if want := pmi.AnswerPrefix + "on stdout\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	for _, want := range []answer{{3, "Recv from rank 1, tag 7, communicator 0"}, {3, ""}} {
		select {
		case a := <-m.answers:
			if a != want {
				t.Errorf("answer %+v, want %+v", a, want)
			}
		default:
			t.Fatalf("answer %+v not passed on", want)
		}
	}
}
