package launch

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gorun's own signals: those it stops the job for at any time (SIGINT and
// SIGTERM, during the build too, and SIGHUP), and SIGPIPE, which must not
// kill it. The forwarding of SIGINT to running ranks is in e2e_test.go.

// TestGorunInterruptDuringBuild: Ctrl-C (or SIGTERM) while gorun builds the
// package directory stops the build (the go command's whole process group)
// and removes gorun's temporary directory, and gorun exits 128+N: gorun
// handles its signals from its start, not only once the ranks run (else it
// dies of the signal, leaving TMPDIR/gorun-NNN behind and `go build`
// running, orphaned). The go command here is a stand-in that blocks until
// killed, so the signal surely comes during the build.
func TestGorunInterruptDuringBuild(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp, bin := t.TempDir(), t.TempDir()
			pidFile := filepath.Join(t.TempDir(), "go.pid")
			fakeGo := "#!/bin/sh\necho $$ > " + shellQuote(pidFile) + ".tmp && mv " + shellQuote(pidFile+".tmp") + " " + shellQuote(pidFile) + "\nexec sleep 120\n"
			if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd, out, errs := startGorunBinary(t, []string{"TMPDIR=" + tmp, "PATH=" + bin + ":" + os.Getenv("PATH")},
				"-n", "1", "./testdata/pmiprog")
			var goPid int
			for deadline := time.Now().Add(jobWait); goPid == 0; {
				if b, err := os.ReadFile(pidFile); err == nil {
					goPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
				if time.Now().After(deadline) {
					t.Fatal("the stand-in go command never started")
				}
				time.Sleep(10 * time.Millisecond) // polling for a file, not hiding a race
			}
			t.Cleanup(func() { syscall.Kill(goPid, syscall.SIGKILL) })
			cmd.Process.Signal(sig)
			_, stderr := waitExit(t, cmd, out, errs)
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				t.Errorf("gorun died of %v during the build instead of stopping it and cleaning up; stderr:\n%s", ws.Signal(), stderr)
			} else if code := ws.ExitStatus(); code != 128+int(sig) {
				t.Errorf("status %d, want %d; stderr:\n%s", code, 128+int(sig), stderr)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "gorun-*")); len(left) > 0 {
				t.Errorf("temporary build directory left behind: %v", left)
			}
			if syscall.Kill(goPid, 0) == nil {
				// A zombie counts as gone: its parent (gorun) has exited
				// and init reaps it.
				if st, err := os.ReadFile("/proc/" + strconv.Itoa(goPid) + "/stat"); err == nil && !regexp.MustCompile(`\) Z `).Match(st) {
					t.Errorf("the build (pid %d) is still running after gorun exited", goPid)
				}
			}
		})
	}
}

// leftBehind lists what a job left: gorun-* directories in tmp and the
// shared-memory files of prefix (/dev/shm/weft-KEY-).
func leftBehind(tmp, prefix string) []string {
	left, _ := filepath.Glob(filepath.Join(tmp, "gorun-*"))
	if prefix != "" {
		segs, _ := filepath.Glob(prefix + "*")
		left = append(left, segs...)
	}
	return left
}

var segmentLine = regexp.MustCompile(`segment (/\S+-)rank\d+`)

// TestGorunClosedStdout: `gorun ... | head -1`. Once the reader of gorun's
// stdout is gone, gorun still sees the job to its end (copyLines drops
// what it cannot write) and cleans up. gorun handles SIGPIPE for that: by
// Go's default for fd 1 and 2 the first write to the broken pipe kills it,
// its ranks die of Pdeathsig, and the built binary's temporary directory
// and the job's /dev/shm segments stay.
func TestGorunClosedStdout(t *testing.T) {
	tmp := t.TempDir()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.gorun, "-n", "2", "-x", "PMIPROG_SEGMENT=1", "./testdata/pmiprog", "-card", "10", "-lines", "100000")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout = pw
	errPipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	first, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close() // as head -1 exits
	if err != nil {
		t.Fatalf("no first line: %v", err)
	}
	m := segmentLine.FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("first line %q is not a segment line", first)
	}
	stderr, _ := io.ReadAll(errPipe)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(jobWait):
		t.Fatalf("gorun still running %v after its stdout closed", jobWait)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	t.Logf("gorun: %v; stderr:\n%s", cmd.ProcessState, stderr)
	if left := leftBehind(tmp, m[1]); len(left) > 0 {
		t.Errorf("gorun (%v, signalled=%v) left behind after its stdout closed: %v", cmd.ProcessState, ws.Signaled(), left)
	}
	for _, p := range leftBehind(tmp, m[1]) {
		os.RemoveAll(p)
	}
	assertNoRankLeft(t)
}

// TestGorunSIGHUP: a hangup (the terminal or ssh session running gorun
// closes) stops the job as SIGTERM does (the ranks get SIGTERM), and gorun
// cleans up and exits 128+1. Were SIGHUP not handled, gorun would die of it at
// once: its ranks of Pdeathsig, the built binary's temporary directory and
// the job's /dev/shm segments left behind.
func TestGorunSIGHUP(t *testing.T) {
	tmp := t.TempDir()
	cmd, out, errs := startGorunBinary(t, []string{"TMPDIR=" + tmp}, "-n", "2", "-x", "PMIPROG_SEGMENT=1",
		"./testdata/pmiprog", "-card", "10", "-fail-rank", "-2", "-fail", "hang")
	var prefix string
	var stdout strings.Builder
	for hanging := 0; hanging < 2; {
		select {
		case l, ok := <-out:
			if !ok {
				t.Fatalf("gorun's stdout ended early:\n%s", stdout.String())
			}
			stdout.WriteString(l + "\n")
			if m := segmentLine.FindStringSubmatch(l); m != nil {
				prefix = m[1]
			}
			if strings.HasSuffix(l, "hanging") {
				hanging++
			}
		case <-time.After(jobWait):
			t.Fatalf("ranks did not start:\n%s", stdout.String())
		}
	}
	cmd.Process.Signal(syscall.SIGHUP)
	_, stderr := waitExit(t, cmd, out, errs)
	t.Logf("gorun: %v; stderr:\n%s", cmd.ProcessState, stderr)
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != 128+int(syscall.SIGHUP) {
		t.Errorf("gorun: %v, want status %d after stopping the job", cmd.ProcessState, 128+int(syscall.SIGHUP))
	}
	if left := leftBehind(tmp, prefix); len(left) > 0 {
		t.Errorf("left behind after SIGHUP: %v", left)
	}
	for _, p := range leftBehind(tmp, prefix) {
		os.RemoveAll(p)
	}
	assertNoRankLeft(t)
}
