package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBash runs script with bash in dir and returns its combined output and
// exit status.
func runBash(t *testing.T, dir, script string, env ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestCompareRunReportsStatus runs compare.sh's run() on a command that
// fails and on one its time limit stops: each is reported with its own
// status, and the comparison is marked failed.
func TestCompareRunReportsStatus(t *testing.T) {
	script, err := filepath.Abs("compare.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raw"), 0o755); err != nil {
		t.Fatal(err)
	}
	fixture := `set -uo pipefail
eval "$(sed -n '/^run() {/,/^}/p' "$SCRIPT")"
linestate() { :; }
out=$PWD cap=1 failed=0
run weft-udp latency 1 bash -c 'exit 3'
run weft-udp latency 2 sleep 5
echo "failed=$failed"
`
	out, _ := runBash(t, dir, fixture, "SCRIPT="+script)
	for _, want := range []string{"failed (exit 3)", "timed out after 1 s", "failed=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare.sh run(): output\n%s\nwant it to say %q", out, want)
		}
	}
}

// TestCompareRefusesBadCounts: compare.sh refuses a -rounds or -np that is
// not a positive number with status 2, naming the flag, before it builds
// anything (a go that records being called stands in for the build).
func TestCompareRefusesBadCounts(t *testing.T) {
	script, err := filepath.Abs("compare.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stubs := filepath.Join(dir, "stubs")
	if err := os.MkdirAll(stubs, 0o755); err != nil {
		t.Fatal(err)
	}
	// A go that records that it was asked to build, and fails.
	stub := "#!/bin/sh\necho called >>\"" + filepath.Join(dir, "go.called") + "\"\nexit 1\n"
	if err := os.WriteFile(filepath.Join(stubs, "go"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, value string }{
		{"-rounds", "0"}, {"-rounds", "abc"}, {"-rounds", "-1"}, {"-np", "0"}, {"-np", "2x"},
	} {
		os.Remove(filepath.Join(dir, "go.called"))
		out, code := runBash(t, dir, `bash "$SCRIPT" `+c.flag+` `+c.value+` -out "$PWD/out" latency`,
			"SCRIPT="+script, "PATH="+stubs+":"+os.Getenv("PATH"), "TMPDIR="+dir)
		_, statErr := os.Stat(filepath.Join(dir, "go.called"))
		if code != 2 || statErr == nil || !strings.Contains(out, c.flag+" '"+c.value+"'") {
			t.Errorf("compare.sh %s %s: exit %d, built anything: %v, output:\n%s\nwant exit 2 naming %s before building", c.flag, c.value, code, statErr == nil, out, c.flag)
		}
	}
}

// TestHostsLoadMedian runs hosts.sh's load_summary on recorded load
// averages: an even count's median is the mean of the middle two, as
// median() takes it for the figures, not the lower one.
func TestHostsLoadMedian(t *testing.T) {
	script, err := filepath.Abs("hosts.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		loads []string
		want  string
	}{
		{[]string{"1.00", "3.00", "1.00", "3.00"}, "1.00-3.00, median 2.000, over 4 runs"},
		{[]string{"0.50", "2.50", "1.25"}, "0.50-2.50, median 1.250, over 3 runs"},
		{nil, "not recorded"},
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "raw"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, v := range c.loads {
			if err := os.WriteFile(filepath.Join(dir, "raw", fmt.Sprintf("weft.lat.%d.load", i+1)), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fixture := `eval "$(sed -n -e '/^median() {/,/^}/p' -e '/^load_summary() {/,/^}/p' "$SCRIPT")"
out=$PWD
load_summary
`
		out, code := runBash(t, dir, fixture, "SCRIPT="+script)
		if code != 0 || !strings.HasPrefix(out, c.want) {
			t.Errorf("hosts.sh load_summary of %v: %q (exit %d); want it to begin %q", c.loads, out, code, c.want)
		}
	}
}
