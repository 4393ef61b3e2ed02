package mpi

import (
	"sync"
	"testing"
)

// TestRevFaultCasesObserved runs the bodies of tests that loop over
// faultCases (TestBcastRDMA, TestIprobe, TestWaitAny, TestTestAll,
// TestWinAccOps) under faultCases[1], at the rank counts the faulty
// variant of each test uses (sums over them), and prints what lapi
// repaired and what the devices dropped for corruption: those tests assert
// nothing about the faults, so a body that sends too little to be hit would
// pass vacuously under "faults".
func TestRevFaultCasesObserved(t *testing.T) {
	t.Setenv("WEFT_FAULTS", faultCases[1])
	t.Setenv("WEFT_TIMEOUT", "120s")
	odd, third := []int{1, 3, 5, 7, 9}, []int{3, 6, 9}
	waitAnyNs := []int{}
	for n := 1; n <= 9; n += 1 + len(faultCases[1])%2 {
		waitAnyNs = append(waitAnyNs, n)
	}
	for _, tc := range []struct {
		name string
		fn   func(*Comm) error
		ns   []int
	}{{"bcastRDMA", bcastRDMACase, third}, {"iprobe", iprobeCase, odd}, {"waitAny", waitAnyCase, waitAnyNs}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var repaired, frames uint64
			drops := map[string]uint64{}
			for _, n := range tc.ns {
				err := Run(n, func(c *Comm) error {
					err := tc.fn(c)
					st := c.World().Stats()
					mu.Lock()
					defer mu.Unlock()
					repaired += st.Retransmits + st.Duplicates + st.Redrives + st.Stale
					for _, d := range st.Devices {
						frames += d.FramesSent
						for k, v := range d.DropReasons {
							drops[k] += v
						}
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s at %v ranks: frames sent %d, repaired %d, device drops %v", tc.name, tc.ns, frames, repaired, drops)
			if repaired == 0 || drops["crc"] == 0 {
				t.Errorf("%s under %q: repaired %d, crc drops %d: a fault named never bit", tc.name, faultCases[1], repaired, drops["crc"])
			}
		})
	}
}
