package launch

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestGorunBindTo runs ranks that print the CPUs they may run on and
// WEFT_NODE_CPUS: with more ranks than gorun's CPUs, auto binds each to
// one CPU, in blocks of consecutive ranks, and tells it how many the
// ranks share; none leaves them all; core binds even a rank per CPU; and
// auto with no more ranks than CPUs binds nothing.
func TestGorunBindTo(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status here: %v", err)
	}
	all := regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`).FindSubmatch(status)[1]
	type want struct {
		bindTo string
		n      int
		bound  bool
	}
	cases := []want{{"auto", len(allowed) + 1, true}, {"none", len(allowed) + 1, false}, {"core", 2, true}}
	if len(allowed) >= 2 {
		cases = append(cases, want{"auto", 2, false})
	}
	line := regexp.MustCompile(`^\[(\d+)\] Cpus_allowed_list:\s*(\S+)$`)
	nodeCPUs := regexp.MustCompile(`^\[(\d+)\] node cpus (\S+)$`)
	for _, c := range cases {
		r := gorun(t, "-n", strconv.Itoa(c.n), "--tag-output", "--bind-to", c.bindTo,
			"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; echo node cpus ${WEFT_NODE_CPUS:-unset}")
		if r.code != 0 {
			t.Fatalf("--bind-to %s -n %d: status %d: %s", c.bindTo, c.n, r.code, r.stderr)
		}
		seen := 0
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if m := nodeCPUs.FindStringSubmatch(l); m != nil {
				// A bound rank learns how many CPUs the node's ranks share.
				if want := map[bool]string{true: strconv.Itoa(len(allowed)), false: "unset"}[c.bound]; m[2] != want {
					t.Errorf("--bind-to %s -n %d: rank %s has WEFT_NODE_CPUS %s, want %s", c.bindTo, c.n, m[1], m[2], want)
				}
				continue
			}
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("--bind-to %s: unexpected line %q", c.bindTo, l)
			}
			rank, _ := strconv.Atoi(m[1])
			want := string(all)
			if c.bound {
				want = strconv.Itoa(allowed[rank*len(allowed)/c.n])
			}
			if m[2] != want {
				t.Errorf("--bind-to %s -n %d: rank %d may run on %s, want %s", c.bindTo, c.n, rank, m[2], want)
			}
			seen++
		}
		if seen != c.n {
			t.Errorf("--bind-to %s -n %d: %d ranks reported", c.bindTo, c.n, seen)
		}
	}
}
