package launch

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"plain", "with space", "it's", `"dq" $HOME ; rm -rf / # \`, ""} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) came back as %q (%v)", s, out, err)
		}
	}
}

// TestRemoteScript runs the remote wrapper as ssh would (sh -c LINE) and
// drives it through its stdin as gorun does: environment and arguments
// arrive intact, a signal name is delivered to the rank, and EOF on stdin
// (gorun gone) kills it.
func TestRemoteScript(t *testing.T) {
	dir := t.TempDir()
	start := func(args ...string) (*exec.Cmd, io.WriteCloser, *strings.Builder) {
		line := remoteCommand(dir, []string{"GREETING=hello world", "QUOTE=it's"}, filepath.Join(dir, "weft-x-"), "sh", args)
		cmd := exec.Command("sh", "-c", line)
		in, _ := cmd.StdinPipe()
		var out strings.Builder
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, in, &out
	}
	wait := func(cmd *exec.Cmd) int {
		t.Helper()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("remote wrapper did not end")
		}
		return cmd.ProcessState.ExitCode()
	}

	cmd, in, out := start("-c", `echo "$GREETING|$QUOTE|$1|$(pwd)"; exit 3`, "arg0", "two words")
	defer in.Close()
	if code := wait(cmd); code != 3 {
		t.Errorf("status %d, want the rank's 3", code)
	}
	if want := "hello world|it's|two words|" + dir + "\n"; out.String() != want {
		t.Errorf("rank saw %q, want %q", out.String(), want)
	}

	// A failed rank's segments on its host are removed by the wrapper.
	seg := filepath.Join(dir, "weft-x-seg")
	os.WriteFile(seg, nil, 0o600)
	cmd, in, _ = start("-c", `echo ready; sleep 30`)
	io.WriteString(in, "TERM\n")
	if code := wait(cmd); code != 128+15 {
		t.Errorf("after TERM: status %d, want 143", code)
	}
	if _, err := os.Stat(seg); err == nil {
		t.Error("segment of the failed rank left on its host")
	}

	cmd, in, _ = start("-c", `sleep 30`)
	in.Close()
	if code := wait(cmd); code != 128+9 {
		t.Errorf("after EOF: status %d, want 137", code)
	}
}

// fakeRsh writes an rsh that runs the command on this machine, as ssh to
// another host would: it takes the host and the command line, and runs the
// line with sh -c (the remote login shell), stdin and all.
func fakeRsh(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "fake-rsh")
	os.WriteFile(path, []byte("#!/bin/sh\n# fake-rsh HOST LINE\nexec sh -c \"$2\"\n"), 0o755)
	return path
}

// TestGorunRemoteRanks: ranks on a "remote" host (127.0.0.2: not this
// machine's interface address, reached through the fake rsh) use PMI_PORT
// over TCP, next to a local rank on PMI_FD, in one job.
func TestGorunRemoteRanks(t *testing.T) {
	rsh := fakeRsh(t)
	r := gorun(t, "-n", "3", "-H", "localhost:1,127.0.0.2:2", "--rsh", rsh, "--trace", "2", bins.pmiprog)
	got := checkJob(t, r, 3)
	for id, want := range []bool{false, true, true} {
		if got[id].port != want {
			t.Errorf("rank %d: PMI_PORT used = %v, want %v", id, got[id].port, want)
		}
	}
	if got[0].local != "0" || got[1].local != "1 2" {
		t.Errorf("local ranks %q and %q: PMI_process_mapping wrong", got[0].local, got[1].local)
	}
	if !strings.Contains(r.stderr, "PMI server for remote ranks listening on 127.0.0.") {
		t.Errorf("no listening address in the trace:\n%s", r.stderr)
	}

	// A remote rank killed by a signal: its status comes back through the
	// wrapper as 128+9, and gorun names the host.
	r = gorun(t, "-n", "2", "-H", "127.0.0.2:2", "--rsh", rsh, bins.pmiprog, "-fail-rank", "1", "-fail", "kill")
	if r.code != 137 || !strings.Contains(r.stderr, "rank 1 (on 127.0.0.2") || !strings.Contains(r.stderr, "killed by signal 9 there") {
		t.Errorf("status %d, stderr:\n%s", r.code, r.stderr)
	}
	assertNoRankLeft(t)
}

// TestGorunSSHRefused: a host whose ssh cannot connect fails the job with
// ssh's own message.
func TestGorunSSHRefused(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh not installed (Debian package openssh-client)")
	}
	// Nothing listens on port 1 of 127.0.0.3.
	r := gorun(t, "-n", "1", "-H", "127.0.0.3", "--rsh", "ssh -p 1 -o BatchMode=yes -o ConnectTimeout=5", bins.pmiprog)
	if r.code != 255 || !strings.Contains(r.stderr, "could not be started on 127.0.0.3: ssh exited with status 255") ||
		!strings.Contains(r.stderr, "Connection refused") {
		t.Errorf("status %d, stderr:\n%s", r.code, r.stderr)
	}
}
