package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/transport/shm"
)

// TestPlanRefusesWhatTheDeviceCannotRun: a job shared memory cannot carry
// (more ranks on one host than the shm device takes, or several hosts with
// --transport shm) is refused with the limit and what to do instead; udp
// is not limited, nor auto with at most that many ranks on each host (under
// auto a host's ranks reach each other through shared memory whether or
// not the job spans hosts: more on one of them failed in Init).
func TestPlanRefusesWhatTheDeviceCannotRun(t *testing.T) {
	if shmMaxRanks != shm.MaxRanks {
		t.Fatalf("shmMaxRanks %d, transport/shm.MaxRanks %d: update shmMaxRanks", shmMaxRanks, shm.MaxRanks)
	}
	two := []Host{{Name: "h1", Slots: 300}, {Name: "h2", Slots: 300}}
	for _, tc := range []struct {
		o    Options
		says string // "" for a job Plan accepts
	}{
		{Options{N: 257, Transport: "auto"}, "257 ranks on host localhost: the shared-memory device (what auto picks within a host) takes at most 256; use --transport udp"},
		{Options{N: 1000, Transport: "shm"}, "at most 256"},
		{Options{N: 1000, Transport: "auto", Hosts: []Host{{Name: "h1", Slots: 1000}}}, "at most 256"},
		{Options{N: 2, Transport: "shm", Hosts: two, Oversubscribe: true}, ""},
		{Options{N: 301, Transport: "shm", Hosts: two}, "--transport shm: the ranks are on 2 hosts"},
		{Options{N: 256, Transport: "auto"}, ""},
		{Options{N: 1000, Transport: "udp"}, ""},
		{Options{N: 600, Transport: "auto", Hosts: two}, "300 ranks on host h1: the shared-memory device"},
		{Options{N: 301, Transport: "auto", Hosts: []Host{{Name: "h1", Slots: 300}, {Name: "h2", Slots: 1}}}, "300 ranks on host h1"},
		{Options{N: 512, Transport: "auto", Hosts: []Host{{Name: "h1", Slots: 256}, {Name: "h2", Slots: 256}}}, ""},
	} {
		if tc.o.transportFrom == "" {
			tc.o.transportFrom = "--transport"
		}
		_, err := Plan(&tc.o)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("-n %d --transport %s on %v: %v", tc.o.N, tc.o.Transport, tc.o.Hosts, err)
		case tc.says != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("-n %d --transport %s on %v: %v, want it refused saying %q", tc.o.N, tc.o.Transport, tc.o.Hosts, err, tc.says)
		}
	}
}

// TestGorunRefusesLargeShmJob: gorun -n 1000 on one host says at once, in
// one line, what the limit is and what to use, and starts nothing.
func TestGorunRefusesLargeShmJob(t *testing.T) {
	r := gorun(t, "-n", "1000", bins.pmiprog)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != exitUsage || r.stdout != "" || len(lines) != 1 || !strings.Contains(r.stderr, "at most 256; use --transport udp") {
		t.Errorf("status %d, want %d; one line of stderr with the limit, no rank output:\nstdout: %.300s\nstderr: %.300s", r.code, exitUsage, r.stdout, r.stderr)
	}
}
