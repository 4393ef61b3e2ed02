package launch

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/internal/cpubind"
)

// TestGorunBindTo runs ranks that print the CPUs they may run on and
// WEFT_NODE_CPUS: with more ranks than gorun's CPUs, auto binds each to
// one CPU, in blocks of consecutive ranks, and tells it how many the
// ranks share; with fewer, it gives each its own run of CPUs; a single
// rank is left alone, as none leaves them all; core binds each rank to
// one CPU.
func TestGorunBindTo(t *testing.T) {
	allowed, err := cpubind.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status here: %v", err)
	}
	all := string(regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`).FindSubmatch(status)[1])
	const (
		unbound = iota
		oneCPU  // assign's one CPU each
		share   // assign's runs of CPUs (TestAssign checks the sharing)
	)
	type want struct {
		bindTo string
		n      int
		kind   int
	}
	cases := []want{{"auto", len(allowed) + 1, oneCPU}, {"none", len(allowed) + 1, unbound}, {"core", 2, oneCPU}, {"auto", 1, unbound}}
	if len(allowed) >= 2 {
		cases = append(cases, want{"auto", 2, share}, want{"none", 2, unbound})
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
				if want := map[bool]string{true: strconv.Itoa(len(allowed)), false: "unset"}[c.kind != unbound]; m[2] != want {
					t.Errorf("--bind-to %s -n %d: rank %s has WEFT_NODE_CPUS %s, want %s", c.bindTo, c.n, m[1], m[2], want)
				}
				continue
			}
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("--bind-to %s: unexpected line %q", c.bindTo, l)
			}
			rank, _ := strconv.Atoi(m[1])
			want := all
			if c.kind != unbound {
				want = cpubind.List(cpubind.Assign(allowed, c.kind == oneCPU, c.n)[rank])
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
