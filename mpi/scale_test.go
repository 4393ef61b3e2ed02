package mpi

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"
)

// TestRun1024 runs Barrier, Bcast and Allreduce on 1024 goroutine ranks and
// counts the messages each rank sends: the algorithms are logarithmic, so
// the most any rank sends grows as log2(n), not n. The signatures ranks
// send to compare a call that has kept them waiting (agree.go: member 0
// to every other, once a wait has blocked 100 ms, which a loaded machine
// sees) are not the algorithm's, and are not counted. The algorithms are the
// message-based ones: shared-memory collectives (up to 16 ranks) send
// nothing but nudges, and are tested in shmcoll_test.go.
func TestRun1024(t *testing.T) {
	t.Setenv("WEFT_SHMCOLL", "off")
	sizes := []int{16, 64, 256, 1024}
	if testing.Short() || raceEnabled {
		// 1024 ranks under the race detector take tens of seconds.
		sizes = []int{16, 64, 256}
	}
	for _, n := range sizes {
		counts := map[string]uint64{}
		for _, coll := range []string{"barrier", "bcast", "allreduce"} {
			var mu sync.Mutex
			var most uint64
			err := Run(n, func(c *Comm) error {
				w := c.World()
				before := w.lc.Stats().MessagesSent - w.agreeSent.Load()
				var err error
				switch coll {
				case "barrier":
					err = c.Barrier()
				case "bcast":
					b := []int64{int64(c.Rank())}
					err = Bcast(c, b, 0)
					if err == nil && b[0] != 0 {
						err = fmt.Errorf("bcast gave %d", b[0])
					}
				case "allreduce":
					v := []int64{1}
					err = Allreduce(c, v, v, Sum)
					if err == nil && v[0] != int64(n) {
						err = fmt.Errorf("allreduce gave %d, want %d", v[0], n)
					}
				}
				sent := w.lc.Stats().MessagesSent - w.agreeSent.Load() - before
				mu.Lock()
				most = max(most, sent)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Fatalf("n=%d %s: %v", n, coll, err)
			}
			counts[coll] = most
			log2 := uint64(bits.Len(uint(n - 1)))
			// Dissemination and recursive doubling send one message per
			// round; a binomial root sends one per level. Anything that
			// grew with n would blow far past this bound.
			if most > log2+2 {
				t.Errorf("n=%d %s: a rank sent %d messages, more than log2(n)+2 = %d", n, coll, most, log2+2)
			}
		}
		t.Logf("n=%4d log2=%2d most messages sent by one rank: barrier %d, bcast %d, allreduce %d",
			n, bits.Len(uint(n-1)), counts["barrier"], counts["bcast"], counts["allreduce"])
	}
}
