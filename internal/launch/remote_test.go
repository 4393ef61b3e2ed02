package launch

import (
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
	"syscall"
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
		code, ok := waitWrapper(cmd)
		if !ok {
			t.Fatal("remote wrapper did not end")
		}
		return code
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

	// The rank starts with SIGINT and SIGQUIT at their defaults (a shell's
	// background start would ignore them), so that gorun's forwarded Ctrl-C
	// stops it. The rank reports its SigIgn mask, then waits in sleep
	// (which inherits the mask) for the INT.
	line := remoteCommand(dir, nil, filepath.Join(dir, "weft-x-"), "sh", []string{"-c", `grep '^SigIgn:' /proc/$$/status; exec sleep 30`})
	cmd = exec.Command("sh", "-c", line)
	in, _ = cmd.StdinPipe()
	defer in.Close()
	rankOut, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ign uint64
	if _, err := fmt.Fscanf(rankOut, "SigIgn:\t%x\n", &ign); err != nil {
		t.Errorf("rank's SigIgn line not read: %v", err)
	}
	if ign&(1<<(2-1)|1<<(3-1)) != 0 {
		t.Errorf("rank starts with SigIgn %016x: SIGINT or SIGQUIT ignored", ign)
	}
	io.WriteString(in, "INT\n")
	if code := wait(cmd); code != 128+2 {
		t.Errorf("after INT: status %d, want 130", code)
	}
}

// TestRemoteScriptSignalAtStart: a signal that arrives while the wrapper
// is still starting the rank reaches the rank's whole process group, its
// children too, so nothing of the rank is left holding the wrapper's
// output (which would keep ssh, and gorun's wait for it, open). A
// wrapper that signals the pid alone fails it at every try (the rank's
// background child lives on). Before, the rank's group came into being
// only after its pid was published, and a TERM in between went to the
// pid alone; that window is too short to hit here (1,200 tries of the old
// wrapper under CPU hogs passed), so these tries guard the group, not the
// window.
func TestRemoteScriptSignalAtStart(t *testing.T) {
	dir := t.TempDir()
	tries := 200
	if testing.Short() {
		tries = 40
	}
	for i := range tries {
		// The rank writes its pid, its process group's under setsid, so
		// that a failed try can stop what it left behind.
		pidFile := filepath.Join(dir, fmt.Sprintf("pid%d", i))
		line := remoteCommand(dir, nil, filepath.Join(dir, "weft-x-"), "sh", []string{"-c", "echo $$ >" + shellQuote(pidFile) + "; sleep 30 & wait"})
		cmd := exec.Command("sh", "-c", line)
		in, _ := cmd.StdinPipe()
		var out strings.Builder
		cmd.Stdout = &out // Wait waits for every holder of the pipe to close it
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(in, "TERM\n")
		_, ok := waitWrapper(cmd)
		in.Close()
		if !ok {
			if b, err := os.ReadFile(pidFile); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
					syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("try %d: a TERM at the rank's start left its child holding the output (10 s)", i)
		}
	}
}

// waitWrapper waits up to 10 s for a wrapper started as ssh would start
// it, and for its output to be closed by everything holding it; it kills
// the wrapper if that takes longer (ok false).
func waitWrapper(cmd *exec.Cmd) (code int, ok bool) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), true
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return -1, false
	}
}

// fakeRsh writes an rsh that runs the command on this machine, as ssh to
// another host would: it takes the host and the command line, and runs the
// line with sh -c (the remote login shell), stdin and all, in the
// environment of a fresh login rather than gorun's and in a session of its
// own (what gorun does to the ssh process does not reach the remote side;
// only the end of its stdin does).
func fakeRsh(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "fake-rsh")
	os.WriteFile(path, []byte("#!/bin/sh\n# fake-rsh HOST LINE\nexec setsid -w env -i HOME=\"$HOME\" PATH=/usr/local/bin:/usr/bin:/bin sh -c \"$2\"\n"), 0o755)
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

// TestGorunRemoteEnv: gorun's WEFT_* variables and -x reach remote ranks,
// whose environment is otherwise the remote login's, as they reach local
// ones; gorun's other variables stay behind on remote hosts.
func TestGorunRemoteEnv(t *testing.T) {
	t.Setenv("WEFT_TESTVAR", "from gorun's environment")
	t.Setenv("WEFT_TIMEOUT", "45s")
	t.Setenv("NOT_WEFT", "local only")
	r := gorun(t, "-n", "2", "-H", "localhost:1,127.0.0.2:1", "--rsh", fakeRsh(t), "-x", "XVAR=x value",
		bins.pmiprog, "-env", "WEFT_TESTVAR,WEFT_TIMEOUT,XVAR,NOT_WEFT")
	checkJob(t, r, 2)
	for rank := range 2 {
		for _, want := range []string{"WEFT_TESTVAR=from gorun's environment", "WEFT_TIMEOUT=45s", "XVAR=x value"} {
			if !strings.Contains(r.stdout, fmt.Sprintf("rank %d env %s\n", rank, want)) {
				t.Errorf("rank %d did not get %s:\n%s", rank, want, r.stdout)
			}
		}
	}
	if !strings.Contains(r.stdout, "rank 0 env NOT_WEFT=local only") || !strings.Contains(r.stdout, "rank 1 env NOT_WEFT unset") {
		t.Errorf("NOT_WEFT should reach the local rank only:\n%s", r.stdout)
	}
}

// TestGorunRemoteInterrupt: Ctrl-C at gorun stops remote ranks too, and
// gorun exits 130; ranks that ignore SIGINT go at the second Ctrl-C, and
// gorun still exits 130.
func TestGorunRemoteInterrupt(t *testing.T) {
	rsh := fakeRsh(t)
	// Remote ranks only: a local rank's death would stop them with SIGTERM.
	interruptRemote(t, "127.0.0.2:2", rsh, "")
}

// interruptRemote runs 2 hanging ranks on hosts through rsh and checks
// that one Ctrl-C stops them, that a second stops ranks that ignore the
// first, each time with status 130 and no rank left behind, and that the
// first job's report says want (if not empty).
func interruptRemote(t *testing.T, hosts, rsh, want string) {
	t.Helper()
	code, stderr := interruptJob(t, 2, 1, "-n", "2", "-H", hosts, "--rsh", rsh, bins.pmiprog, "-fail-rank", "-2", "-fail", "hang")
	if code != 128+2 || !strings.Contains(stderr, want) {
		t.Errorf("Ctrl-C: status %d, want 130 saying %q; stderr:\n%s", code, want, stderr)
	}
	assertNoRankLeft(t)
	code, stderr = interruptJob(t, 2, 2, "-n", "2", "-H", hosts, "--rsh", rsh, "--trace", "1", bins.pmiprog, "-ignore-int", "-fail-rank", "-2", "-fail", "hang")
	if code != 128+2 {
		t.Errorf("second Ctrl-C: status %d, want 130; stderr:\n%s", code, stderr)
	}
	assertNoRankLeft(t)
}

// TestGorunCopiesBuiltProgram: a package directory is built in gorun's
// TMPDIR, which a remote host does not have (here: a tmpfs mounted over it
// in the "remote" mount namespace); gorun copies the binary to the host's
// own TMPDIR, the ranks run the copy, and the copy is gone when gorun
// returns.
func TestGorunCopiesBuiltProgram(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to hide gorun's TMPDIR from the fake remote host (unshare --mount, from util-linux)")
	}
	needTool(t, "unshare", "util-linux")
	local, remote := t.TempDir(), t.TempDir()
	rsh := filepath.Join(t.TempDir(), "hiding-rsh")
	os.WriteFile(rsh, []byte(`#!/bin/sh
# hiding-rsh HOST LINE: runs LINE as fake-rsh does, on a "host" where
# gorun's TMPDIR is an empty tmpfs and TMPDIR is another directory.
exec setsid -w unshare --mount --propagation private sh -c 'mount -t tmpfs none "$1" &&
  exec env -i HOME="$HOME" TMPDIR="$2" PATH=/usr/local/bin:/usr/bin:/bin sh -c "$3"' hiding-rsh `+
		shellQuote(local)+" "+shellQuote(remote)+` "$2"
`), 0o755)
	t.Setenv("TMPDIR", local)
	r := gorun(t, "-n", "2", "-H", "127.0.0.2:2", "--rsh", rsh, "./testdata/pmiprog", "-card", "10", "-exe")
	checkJob(t, r, 2)
	for rank := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d exe %s/gorun-\w+/pmiprog$`, rank, regexp.QuoteMeta(remote))).MatchString(r.stdout) {
			t.Errorf("rank %d did not run a copy in the remote TMPDIR %s:\n%s", rank, remote, r.stdout)
		}
	}
	if left, _ := os.ReadDir(remote); len(left) != 0 {
		t.Errorf("copy left on the remote host: %s/%s", remote, left[0].Name())
	}
}

// TestHostIPWithoutRsh: Options built without ParseArgs may have no rsh
// command; a name the resolver does not know is then an error, not an
// index out of range.
func TestHostIPWithoutRsh(t *testing.T) {
	if _, err := hostIP(context.Background(), "no-such-host.invalid", nil); !errors.Is(err, ErrUsage) {
		t.Errorf("hostIP(unresolvable, no rsh) = %v; want ErrUsage", err)
	}
}

// TestGorunUnusedHostNotResolved: a host of -H (or the hostfile) that gets
// no rank does not matter: 1 rank on localhost:1 with a second host that
// cannot be resolved runs. Only hosts with ranks get a PMI listener
// (listenForRemote) and a copy of the program (copyProgram), so only they
// are resolved.
func TestGorunUnusedHostNotResolved(t *testing.T) {
	r := gorun(t, "-n", "1", "-H", "localhost:1,no-such-host.invalid:1", "--rsh", fakeRsh(t), bins.pmiprog, "-card", "10")
	checkJob(t, r, 1)
}

// sshLikeRsh writes an rsh that runs the command on this machine as
// fakeRsh does, but ends as ssh does: only once every process holding the
// remote command's output has closed it (sshd keeps the channel open
// until its stdout and stderr reach EOF, not only until the command exits:
// `ssh host 'sleep 100 &'` takes 100 s).
func sshLikeRsh(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "ssh-like")
	os.WriteFile(path, []byte(`#!/bin/bash
# ssh-like HOST LINE
setsid -w env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin sh -c "$2" | cat
exit ${PIPESTATUS[0]}
`), 0o755)
	return path
}

// TestGorunRankBackgroundChild: a rank that leaves a child running behind
// it (which holds its output) and exits 0 does not keep the job open: for
// a local rank, gorun's drain kills the rank's process group after
// drainWait; for a remote rank, the wrapper (remoteScript) kills it once
// the rank has exited. Were the remote group left alone, the child would
// keep ssh's output open, ssh would never exit, and gorun would wait for
// that rank for ever.
func TestGorunRankBackgroundChild(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	rank := filepath.Join(dir, "bgrank")
	os.WriteFile(rank, []byte("#!/bin/sh\nsleep 300 &\necho $! > "+shellQuote(pidFile)+"\necho rank done\nexit 0\n"), 0o755)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, hosts := range []string{"localhost:1", "127.0.0.2:1"} {
		os.Remove(pidFile)
		cmd, out, errs := startGorunBinary(t, nil, "-n", "1", "-H", hosts, "--rsh", sshLikeRsh(t), "--trace", "2", rank)
		done := make(chan struct{})
		var stdout, stderr string
		go func() { stdout, stderr = collect(cmd, out, errs); close(done) }()
		select {
		case <-done:
			if cmd.ProcessState.ExitCode() != 0 || !strings.Contains(stdout, "rank done") {
				t.Errorf("-H %s: %v; stdout:\n%s\nstderr:\n%s", hosts, cmd.ProcessState, stdout, stderr)
			}
		case <-time.After(10 * drainWait):
			// Unblock it for the cleanup: kill the child.
			if b, err := os.ReadFile(pidFile); err == nil {
				if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			<-done
			t.Errorf("-H %s: gorun still waiting %v after its only rank exited 0 (a child of the rank holds its output); stderr:\n%s",
				hosts, 10*drainWait, stderr)
		}
	}
}
