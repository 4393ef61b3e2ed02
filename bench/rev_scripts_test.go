package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// revBash runs script with bash in dir and returns its combined output and
// exit status.
func revBash(t *testing.T, dir, script string, env ...string) (string, int) {
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

// compare.sh's run() reads the failed command's status with `local rc=$?`
// after `if timeout ...; then ...; fi`: an if whose condition failed and
// that has no else has status 0, so every failure is reported as
// "failed (exit 0)" and a run stopped by timeout is never called one.
func TestRevCompareRunReportsStatus(t *testing.T) {
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
	out, _ := revBash(t, dir, fixture, "SCRIPT="+script)
	for _, want := range []string{"failed (exit 3)", "timed out after 1 s", "failed=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare.sh run(): output\n%s\nwant it to say %q", out, want)
		}
	}
}

// compare.sh takes -rounds (and -np) unchecked: -rounds 0 or a word
// builds everything, measures nothing, and exits 0 with no figure.
// hosts.sh refuses the same -rounds with status 2 before doing anything.
func TestRevCompareRefusesBadRounds(t *testing.T) {
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
	for _, rounds := range []string{"0", "abc"} {
		os.Remove(filepath.Join(dir, "go.called"))
		out, code := revBash(t, dir, `bash "$SCRIPT" -rounds `+rounds+` -out "$PWD/out" latency`,
			"SCRIPT="+script, "PATH="+stubs+":"+os.Getenv("PATH"), "TMPDIR="+dir)
		_, statErr := os.Stat(filepath.Join(dir, "go.called"))
		if code != 2 || statErr == nil || !strings.Contains(out, "-rounds") {
			t.Errorf("compare.sh -rounds %s: exit %d, built anything: %v, output:\n%s\nwant exit 2 naming -rounds before building", rounds, code, statErr == nil, out)
		}
	}
}

// hosts.sh's summary calls v[int((NR+1)/2)] of the sorted load averages
// "median": with an even number of runs that is the lower middle one, not
// the mean of the two middle ones that its median() computes for figures.
func TestRevHostsLoadMedian(t *testing.T) {
	script, err := os.ReadFile("hosts.sh")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(script), "\n") {
		if strings.Contains(l, `*.load`) && strings.Contains(l, "median %s") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatal("hosts.sh: the load-average summary line is gone")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raw"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"1.00", "3.00", "1.00", "3.00"} {
		if err := os.WriteFile(filepath.Join(dir, "raw", "weft.lat."+string(rune('1'+i))+".load"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := revBash(t, dir, "out=$PWD\n"+line)
	if code != 0 || !strings.Contains(out, "median 2") {
		t.Errorf("loads 1,1,3,3: %q (exit %d); want median 2", out, code)
	}
}
