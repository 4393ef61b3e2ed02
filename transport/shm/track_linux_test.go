package shm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/track"
)

// TestTrackSegment: with hal.Config.Track, each rank's mapping of the
// segment is recorded from Open, with the caller's line, until Close
// unmaps it.
func TestTrackSegment(t *testing.T) {
	reg := track.New()
	key, dir := newJobKey(), t.TempDir()
	var devs [2]*Device
	var lines [2]int
	for r := range devs {
		d, err := Open(hal.Config{JobKey: key, Rank: hal.Rank(r), Size: 2, Track: reg}, Options{Dir: dir})
		_, _, lines[r], _ = runtime.Caller(0)
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
	}
	leaks := reg.Leaks()
	if len(leaks) != 2 {
		t.Fatalf("2 ranks open: %d recorded: %s", len(leaks), track.Report(leaks))
	}
	for r, l := range leaks {
		want := fmt.Sprintf("created at track_linux_test.go:%d", lines[r]-1)
		if !strings.HasPrefix(l.What, "shm segment "+devs[r].seg.path+" (") || !strings.HasSuffix(l.String(), want) {
			t.Errorf("rank %d: %q, want the segment %s %s", r, l, devs[r].seg.path, want)
		}
	}
	devs[0].Close()
	if n := reg.Len(); n != 1 {
		t.Errorf("one rank closed: %d recorded", n)
	}
	devs[1].Close()
	if n := reg.Len(); n != 0 {
		t.Errorf("both closed: %s", track.Report(reg.Leaks()))
	}
}
