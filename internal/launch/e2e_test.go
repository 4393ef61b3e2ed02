package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bins are the programs TestMain builds once: gorun itself (for tests that
// signal it or run it elsewhere) and pmiprog, the test rank.
var bins struct{ dir, gorun, pmiprog, pi, collcheck, mismatch, deadlock, pairping string }

// jobWait bounds every job a test runs: a hang fails with a cause.
const jobWait = 60 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(jobShellEnv) != "" {
		os.Exit(jobShell(os.Args[1:])) // a terminal's shell for TestWrapTerminalSignals
	}
	dir, err := os.MkdirTemp("", "gorun-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	snapshotParent = dir // the snapshots of jobs without --snapshot-dir go with the binaries
	bins.gorun = filepath.Join(dir, "gorun")
	bins.pmiprog = filepath.Join(dir, "pmiprog")
	bins.pi = filepath.Join(dir, "pi")
	bins.collcheck = filepath.Join(dir, "collcheck")
	bins.mismatch = filepath.Join(dir, "mismatch")
	bins.deadlock = filepath.Join(dir, "deadlock")
	bins.pairping = filepath.Join(dir, "pairping")
	for out, pkg := range map[string]string{bins.gorun: "../../cmd/gorun", bins.pmiprog: "./testdata/pmiprog",
		bins.pi: "../../examples/pi", bins.collcheck: "./testdata/collcheck", bins.mismatch: "./testdata/mismatch",
		bins.deadlock: "./testdata/deadlock", bins.pairping: "./testdata/pairping"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, b)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is a finished job.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// gorun runs gorun in this process with args.
func gorun(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- run(args, &out, &errb) }()
	select {
	case code := <-done:
		return result{out.String(), errb.String(), code, time.Since(start)}
	case <-time.After(jobWait):
		t.Fatalf("gorun %q still running after %v; stderr so far:\n%s", args, jobWait, errb.String())
	}
	return result{}
}

// command runs an external command (a foreign launcher, or the gorun
// binary) with a deadline.
func command(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q still running after %v; stderr:\n%s", name, args, jobWait, errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", name, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode(), time.Since(start)}
}

// startGorunBinary starts the gorun binary with args and extra environment,
// its stdout and stderr read line by line into the returned channels
// (closed at EOF). The process is killed at the end of the test.
func startGorunBinary(t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string, <-chan string) {
	t.Helper()
	cmd := exec.Command(bins.gorun, args...)
	cmd.Env = append(os.Environ(), env...)
	outPipe, _ := cmd.StdoutPipe()
	errPipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := func(r io.Reader) <-chan string {
		ch := make(chan string, 1<<16)
		go func() {
			defer close(ch)
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				ch <- sc.Text()
			}
		}()
		return ch
	}
	return cmd, lines(outPipe), lines(errPipe)
}

// collect reads out and errs to their ends and waits for cmd.
func collect(cmd *exec.Cmd, out, errs <-chan string) (stdout, stderr string) {
	var o, e strings.Builder
	for l := range out {
		o.WriteString(l + "\n")
	}
	for l := range errs {
		e.WriteString(l + "\n")
	}
	cmd.Wait()
	return o.String(), e.String()
}

// waitExit is collect bounded by jobWait.
func waitExit(t *testing.T, cmd *exec.Cmd, out, errs <-chan string) (stdout, stderr string) {
	t.Helper()
	done := make(chan struct{})
	go func() { stdout, stderr = collect(cmd, out, errs); close(done) }()
	select {
	case <-done:
		return stdout, stderr
	case <-time.After(jobWait):
		t.Fatalf("gorun still running after %v", jobWait)
	}
	return "", ""
}

var rankLine = regexp.MustCompile(`^rank (\d+)/(\d+) kind=(\S+) key=([0-9a-f]{16}) sum=([0-9a-f]{8}) local=\[([\d ]*)\] port=(true|false)$`)

// rankInfo is one rank's summary line.
type rankInfo struct {
	kind, key, sum, local string
	port                  bool
}

// checkJob checks that the job ran n ranks that all agree on the job key
// and the checksum of every rank's card, and returns their lines by rank.
func checkJob(t *testing.T, r result, n int) []rankInfo {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	got := make([]rankInfo, n)
	seen := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		m := rankLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		if size, _ := strconv.Atoi(m[2]); size != n || id >= n || got[id].kind != "" {
			t.Fatalf("unexpected line %q", line)
		}
		got[id] = rankInfo{kind: m[3], key: m[4], sum: m[5], local: m[6], port: m[7] == "true"}
		seen++
	}
	if seen != n {
		t.Fatalf("%d rank lines, want %d\nstdout:\n%s\nstderr:\n%s", seen, n, r.stdout, r.stderr)
	}
	for id, ri := range got {
		if ri.key != got[0].key || ri.sum != got[0].sum {
			t.Errorf("rank %d disagrees: key %s sum %s, rank 0 has %s %s", id, ri.key, ri.sum, got[0].key, got[0].sum)
		}
	}
	return got
}

func TestGorunRunsRanks(t *testing.T) {
	r := gorun(t, "-n", "4", "--oversubscribe", bins.pmiprog)
	for id, ri := range checkJob(t, r, 4) {
		if ri.kind != "pmi1" || ri.port || ri.local != "0 1 2 3" {
			t.Errorf("rank %d: %+v, want pmi1 over PMI_FD, all ranks local", id, ri)
		}
	}
	t.Logf("4 ranks in %v", r.took)
}

func TestGorunBuildsPackage(t *testing.T) {
	checkJob(t, gorun(t, "-n", "2", "./testdata/pmiprog", "-card", "10"), 2)
}

func TestGorunProgramErrors(t *testing.T) {
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "go.mod"), []byte("module broken\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(broken, "main.go"), []byte("package main\n\nfunc main() { undefinedThing() }\n"), 0o644)
	plain := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(plain, []byte("text"), 0o644)
	for _, tc := range []struct {
		prog string
		says []string
	}{
		{"./no/such/dir", []string{"not found", "Go package directory"}},
		{broken, []string{"building", "undefined: undefinedThing"}},
		{plain, []string{"not an executable"}},
		// go build -o writes a library package's archive, which would
		// fail to start with "permission denied", naming no cause.
		{"../pmi", []string{"../pmi is package pmi, not a main package"}},
	} {
		r := gorun(t, tc.prog)
		if r.code != exitFailure {
			t.Errorf("%s: status %d, want %d", tc.prog, r.code, exitFailure)
		}
		for _, s := range tc.says {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("%s: stderr %q does not say %q", tc.prog, r.stderr, s)
			}
		}
		if strings.Contains(r.stderr, "permission denied") {
			t.Errorf("%s: stderr %q blames a permission", tc.prog, r.stderr)
		}
	}
	if r := gorun(t, "-n", "3", bins.pmiprog); r.code != exitFailure || !strings.Contains(r.stderr, "--oversubscribe") {
		t.Logf("(this host has more than 2 cores?) status %d: %s", r.code, r.stderr)
	}
}

// TestGorunRankKilled: a rank that SIGKILLs itself ends the job within 2 s,
// gorun names it and exits 128+9, and no rank is left running.
func TestGorunRankKilled(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	r := gorun(t, "-n", "4", "--oversubscribe", bins.pmiprog, "-fail-rank", "1", "-fail", "kill")
	if time.Now().After(deadline) {
		t.Errorf("gorun took %v to end a job whose rank 1 died", r.took)
	}
	if r.code != 128+9 {
		t.Errorf("status %d, want %d", r.code, 128+9)
	}
	if !regexp.MustCompile(`gorun: rank 1 \(pid \d+\) was killed by signal 9`).MatchString(r.stderr) {
		t.Errorf("stderr does not name rank 1 and signal 9:\n%s", r.stderr)
	}
	assertNoRankLeft(t)
}

// assertNoRankLeft checks that no test rank process is left on the
// machine (tests of this package run one job at a time).
func assertNoRankLeft(t *testing.T) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && bytes.HasPrefix(cmdline, []byte(bins.pmiprog+"\x00")) {
			t.Errorf("rank process %s is still alive after gorun exited: %q", filepath.Dir(p), cmdline)
		}
	}
}

func TestGorunFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"exit", []string{"-fail-rank", "0", "-fail", "exit"}, 3, "rank 0 (pid"},
		{"abort", []string{"-fail-rank", "2", "-fail", "abort"}, 7, "called PMI abort with exit code 7"},
		{"no finalize", []string{"-fail-rank", "1", "-fail", "nofinalize"}, exitFailure, "rank 1 (pid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-n", "3", "--oversubscribe", bins.pmiprog}, tc.args...)
			r := gorun(t, args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("status %d, want %d; stderr does not say %q?\n%s", r.code, tc.code, tc.says, r.stderr)
			}
			assertNoRankLeft(t)
		})
	}
}

// TestGorunExitAfterOutput: what a rank wrote before it exited reaches
// gorun before its exit is judged (a failure's summary reads the rank's
// own snapshot there). gorun's stderr takes the rank's first line only
// once the rank has exited, so the rest of what it wrote, 60 KB and its
// last words, is still in the pipe then.
func TestGorunExitAfterOutput(t *testing.T) {
	// Without the wait, gorun's word came first in about 7 runs of 10:
	// three runs make a miss unlikely.
	for range 3 {
		pidFile := filepath.Join(t.TempDir(), "pid")
		errb := &exitGate{t: t, pidFile: pidFile}
		script := `echo $$ > ` + pidFile + `; echo first >&2; head -c 60000 /dev/zero | tr '\0' x | fold -w 99 >&2; echo >&2; echo last-words >&2; exit 3`
		var out lockedBuffer
		code := run([]string{"-n", "1", "/bin/sh", "-c", script}, &out, errb)
		stderr := errb.String()
		if code != 3 {
			t.Errorf("status %d, want 3", code)
		}
		last := strings.Index(stderr, "last-words")
		exit := strings.Index(stderr, "gorun: rank 0 (pid")
		if last < 0 || exit < 0 || exit < last {
			t.Fatalf("the rank's last line (at %d) does not come before gorun's word of its exit (at %d):\n%s",
				last, exit, stderr[max(0, min(last, exit)-200):])
		}
	}
}

// exitGate is a stderr for gorun whose first write of a line "first"
// returns only once the process whose pid is in pidFile has exited.
type exitGate struct {
	lockedBuffer
	t       *testing.T
	pidFile string
	once    sync.Once
}

func (g *exitGate) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("first")) {
		g.once.Do(g.awaitExit)
	}
	return g.lockedBuffer.Write(p)
}

func (g *exitGate) awaitExit() {
	b, err := os.ReadFile(g.pidFile)
	if err != nil {
		g.t.Error(err)
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		g.t.Error(err)
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // exited and reaped already
	}
	if err != nil {
		g.t.Error(err)
		return
	}
	defer unix.Close(fd)
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(jobWait.Milliseconds())); err != nil {
		g.t.Error(err)
	}
}

func TestGorunTimeoutReport(t *testing.T) {
	r := gorun(t, "-n", "2", "--timeout", "300ms", bins.pmiprog, "-fail-rank", "0", "-fail", "hang")
	if r.code != exitTimeout {
		t.Errorf("status %d, want %d", r.code, exitTimeout)
	}
	for _, s := range []string{"timeout: the job ran", "rank 1 (pid", "in fence", "ranks still running: 0,1",
		"ranks that had not reached PMI finalize: 0,1"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("report does not say %q:\n%s", s, r.stderr)
		}
	}
}

func TestGorunTagOutput(t *testing.T) {
	r := gorun(t, "-n", "4", "--oversubscribe", "--tag-output", bins.pmiprog, "-lines", "200", "-card", "10")
	if r.code != 0 {
		t.Fatalf("status %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] rank (\d)(/4 kind=| line \d+ x{50} end$)`)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4*201 {
		t.Errorf("%d lines, want %d", len(lines), 4*201)
	}
	for _, l := range lines {
		if m := re.FindStringSubmatch(l); m == nil || m[1] != m[2] {
			t.Fatalf("mixed or mistagged line %q", l)
		}
	}
}

// TestGorunForwardsSIGINT: Ctrl-C at gorun reaches every rank, and gorun
// exits 128+2 naming the rank.
func TestGorunForwardsSIGINT(t *testing.T) {
	code, stderr := interruptJob(t, 2, 1, "-n", "2", bins.pmiprog, "-fail-rank", "-2", "-fail", "hang")
	if code != 128+2 {
		t.Errorf("status %d, want 130", code)
	}
	if !regexp.MustCompile(`rank \d \(pid \d+\) was killed by signal 2 \(interrupt\) after gorun forwarded interrupt`).MatchString(stderr) {
		t.Errorf("stderr:\n%s", stderr)
	}
	assertNoRankLeft(t)
}

// interruptJob runs the gorun binary with args (ranks that print "hanging"
// and block), waits for hanging such lines, sends gorun SIGINT ints times,
// and returns its exit status and standard error once it has exited, which
// it must within 5 s. Before each further SIGINT it waits for gorun to say
// it forwarded the first (args must include --trace 1): two signals sent
// at once may reach it as one.
func interruptJob(t *testing.T, hanging, ints int, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bins.gorun, args...)
	var errb lockedBuffer
	errPipe, _ := cmd.StderrPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	forwarded := make(chan struct{}, 1)
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			fmt.Fprintln(&errb, sc.Text())
			if strings.Contains(sc.Text(), "forwarding interrupt to every rank") {
				forwarded <- struct{}{}
			}
		}
	}()
	started, outDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(outDone)
		sc := bufio.NewScanner(out)
		for n := 0; sc.Scan(); {
			if strings.HasSuffix(sc.Text(), "hanging") {
				if n++; n == hanging {
					close(started)
				}
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(jobWait):
		t.Fatalf("ranks did not start; stderr:\n%s", errb.String())
	}
	for i := range ints {
		if i > 0 {
			select {
			case <-forwarded:
			case <-time.After(jobWait):
				t.Fatalf("gorun did not say it forwarded the first SIGINT; stderr:\n%s", errb.String())
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
	}
	waited := make(chan struct{})
	go func() { <-errDone; <-outDone; cmd.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatalf("gorun still running 5s after %d SIGINT; stderr:\n%s", ints, errb.String())
	}
	return cmd.ProcessState.ExitCode(), errb.String()
}

// TestGorunSecondInterrupt: ranks that ignore SIGINT are killed by a
// second Ctrl-C, and gorun still exits 130: the job was interrupted.
func TestGorunSecondInterrupt(t *testing.T) {
	code, stderr := interruptJob(t, 2, 2, "-n", "2", "--trace", "1", bins.pmiprog, "-ignore-int", "-fail-rank", "-2", "-fail", "hang")
	if code != 128+2 || !strings.Contains(stderr, "interrupt again: killing every rank") {
		t.Errorf("status %d, want 130; stderr:\n%s", code, stderr)
	}
	assertNoRankLeft(t)
}

func TestGorunProfile(t *testing.T) {
	dir := t.TempDir()
	r := command(t, dir, nil, bins.gorun, "-n", "2", "--profile", "cpu", bins.pmiprog, "-card", "10")
	checkJob(t, r, 2)
	for rank := range 2 {
		st, err := os.Stat(filepath.Join(dir, fmt.Sprintf("cpu-rank%d.pprof", rank)))
		if err != nil || st.Size() == 0 {
			t.Errorf("profile of rank %d: %v", rank, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".weft-profile-*")); len(left) != 0 {
		t.Errorf("scratch directories left: %v", left)
	}
}

// TestGorunRemovesSegments: whatever a rank left in /dev/shm under the
// job's prefix is gone when gorun returns, after success and failure.
func TestGorunRemovesSegments(t *testing.T) {
	if _, err := os.Stat(shmDir); err != nil {
		t.Skipf("no %s on this machine", shmDir)
	}
	// Only this job's names count: tests of other packages, running at
	// the same time, make and remove segments of their own.
	made := regexp.MustCompile(`segment (/\S+)rank\d+`)
	for _, fail := range []string{"", "kill"} {
		r := gorun(t, "-n", "2", "-x", "PMIPROG_SEGMENT=1", bins.pmiprog, "-fail-rank", "0", "-fail", fail)
		if fail == "" && r.code != 0 {
			t.Fatalf("status %d: %s", r.code, r.stderr)
		}
		m := made.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Errorf("fail=%q: no rank made a segment:\n%s", fail, r.stdout)
			continue
		}
		left, _ := filepath.Glob(m[1] + "*")
		for _, p := range left {
			t.Errorf("fail=%q: %s left behind", fail, p)
		}
	}
}

// TestGorunVerbsBuild: with --transport verbs gorun builds a package
// directory with -tags verbs and cgo on (a file constrained by `verbs &&
// cgo` is compiled in, even when gorun's environment has CGO_ENABLED=0);
// and a binary built without the tag fails at every rank saying how to
// build it.
func TestGorunVerbsBuild(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tagged\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nvar tags = \"none\"\n\nfunc main() { println(tags) }\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "verbs.go"), []byte("//go:build verbs && cgo\n\npackage main\n\nfunc init() { tags = \"verbs,cgo\" }\n"), 0o644)
	t.Setenv("CGO_ENABLED", "0")
	for _, tc := range []struct {
		tags []string
		want string
	}{{nil, "none"}, {[]string{"verbs"}, "verbs,cgo"}} {
		p, err := ResolveProgram(context.Background(), dir, tc.tags...)
		if err != nil {
			t.Fatalf("ResolveProgram tags %v: %v", tc.tags, err)
		}
		out, err := exec.Command(p.Path).CombinedOutput()
		p.Remove()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("built with tags %v: %q, %v; want %q", tc.tags, got, err, tc.want)
		}
	}

	r := gorun(t, "-n", "2", "--transport", "verbs", bins.pi, "-n", "1000")
	if r.code == 0 || !strings.Contains(r.stderr, "WEFT_TRANSPORT=verbs") || !strings.Contains(r.stderr, "build with -tags verbs and libibverbs-dev") {
		t.Errorf("gorun --transport verbs with a binary built without the tag: status %d, stderr:\n%s", r.code, r.stderr)
	}
}
