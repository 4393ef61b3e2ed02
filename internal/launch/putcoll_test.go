package launch

import (
	"strings"
	"testing"
)

// TestPutCollectivesAcrossProcesses runs testdata/collcheck with every
// Allgather and Alltoall block (4 bytes and more) by RDMA Puts (mpi's
// allgather_rdma.go, alltoall_rdma.go), across processes: over shm with
// the shared block off (it would carry the small ones), over udp, and
// over shm under WEFT_FAULTS. collcheck checks every element.
func TestPutCollectivesAcrossProcesses(t *testing.T) {
	for _, c := range []struct {
		name, ranks string
		args        []string
	}{
		{"shm", "4", []string{"--transport", "shm", "-x", "WEFT_SHMCOLL=off"}},
		{"udp", "3", []string{"--transport", "udp"}},
		{"shm-faults", "3", []string{"--transport", "shm", "-x", "WEFT_SHMCOLL=off",
			"-x", "WEFT_FAULTS=loss=0.05,reorder=0.1,dup=0.05,corrupt=0.02,seed=4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-n", c.ranks, "--oversubscribe", "-x", "WEFT_TIMEOUT=30s",
				"-x", "WEFT_ALLGATHER_RDMA=4", "-x", "WEFT_ALLTOALL_RDMA=4"}, c.args...)
			r := gorun(t, append(args, bins.collcheck, "-rounds", "20", "-p2p", "1", "-large", "2", "-nb", "2")...)
			if want := "collcheck ok: 20 rounds on " + c.ranks + " ranks"; r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Fatalf("status %d, output %q, want %q\nstderr: %s", r.code, r.stdout, want, r.stderr)
			}
		})
	}
}
