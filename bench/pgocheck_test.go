package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPGOCheck runs pgocheck.sh on a scratch repository: silent while the
// profile is the newest change to the hot path (tests are not part of
// it), a warning once the hot path changes after it, and another for an
// uncommitted change to it.
func TestPGOCheck(t *testing.T) {
	for _, tool := range []string{"git", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("pgocheck.sh needs %s (apt-get install %s)", tool, tool)
		}
	}
	script, err := filepath.Abs("pgocheck.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) { run("git", "add", "-A"); run("git", "commit", "-q", "-m", msg) }
	check := func() string { return run("bash", script, dir) }

	run("git", "init", "-q")
	write("lapi/a.go", "package lapi\n")
	write("bench/default.pgo", "profile 1")
	commit("code and its profile")
	if out := check(); out != "" {
		t.Errorf("profile committed with the code: %q, want silence", out)
	}
	write("README.md", "not the hot path\n")
	write("lapi/a_test.go", "package lapi\n")
	commit("docs and a test")
	if out := check(); out != "" {
		t.Errorf("after a change outside the hot path: %q, want silence", out)
	}
	write("lapi/a.go", "package lapi\n\nfunc f() {}\n")
	commit("hot path")
	if out := check(); !strings.Contains(out, "predates a change to the hot path") {
		t.Errorf("after a change to lapi: %q, want the stale-profile warning", out)
	}
	write("bench/default.pgo", "profile 2")
	commit("refreshed")
	if out := check(); out != "" {
		t.Errorf("after the refresh: %q, want silence", out)
	}
	write("transport/shm/b.go", "package shm\n")
	if out := check(); !strings.Contains(out, "uncommitted changes") {
		t.Errorf("with an uncommitted change to transport/shm: %q, want the uncommitted warning", out)
	}
}
