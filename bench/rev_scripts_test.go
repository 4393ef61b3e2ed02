package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
	out, code := runBash(t, dir, "out=$PWD\n"+line)
	if code != 0 || !strings.Contains(out, "median 2") {
		t.Errorf("loads 1,1,3,3: %q (exit %d); want median 2", out, code)
	}
}
