package shm

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// newJobKey draws a key for one test's job, so that concurrent test runs
// (and leftovers of crashed ones) never share a segment. TestMain checks
// for leftovers of these keys' jobs only: other packages' tests (gorun's
// jobs) may create and remove segments in the same directory meanwhile.
func newJobKey() uint64 {
	k := rand.Uint64()
	drawnKeys.Store(k, true)
	return k
}

// drawnKeys holds every key newJobKey returned.
var drawnKeys sync.Map

// drawn reports whether a segment file's name (weft-<key>-...) is of a
// job whose key newJobKey returned.
func drawn(path string) bool {
	hex, ok := strings.CutPrefix(filepath.Base(path), "weft-")
	if !ok || len(hex) < 16 {
		return false
	}
	k, err := strconv.ParseUint(hex[:16], 16, 64)
	_, seen := drawnKeys.Load(k)
	return err == nil && seen
}

// openLocal opens a job of size ranks in this process, connects every pair,
// and at cleanup closes them and checks that the segment is gone.
func openLocal(t testing.TB, size int, opts Options) ([]*Device, uint64) {
	t.Helper()
	key := newJobKey()
	return openMembers(t, key, size, opts), key
}

// openMembers is openLocal for a job with this key, whose ranks might not
// all share the segment (opts.Ranks): it opens the segment's members, in
// slot order.
func openMembers(t testing.TB, key uint64, size int, opts Options) []*Device {
	t.Helper()
	devs, err := OpenLocal(key, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	name := SegmentName(key, 0)
	if opts.Ranks != nil {
		name = NodeSegmentName(key, 0, opts.Ranks[0])
	}
	path := filepath.Join(devs[0].Options().Dir, name)
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("segment %s left behind after every rank closed (stat: %v)", path, err)
			_ = os.Remove(path)
		}
	})
	for _, d := range devs {
		for _, p := range devs {
			if err := d.Connect(p.rank, p.Addr()); err != nil {
				t.Fatalf("rank %d: Connect(%d, %q): %v", d.rank, p.rank, p.Addr(), err)
			}
		}
	}
	return devs
}

// header encodes a data frame header from src to dst with a payload (upper
// header included) of n bytes.
func header(key uint64, src, dst hal.Rank, n int) []byte {
	b := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Len: uint16(n), JobKey: key, Src: src, Dst: dst})
	return b
}

// ignore is a Poll callback that drops what it gets.
func ignore(*hal.Header, []byte) {}

// TestDrawn: the leftover check covers the segments of this binary's jobs,
// a node's partial ones too, and no other job's.
func TestDrawn(t *testing.T) {
	key := newJobKey()
	for _, name := range []string{SegmentName(key, 0), NodeSegmentName(key, 1, 3)} {
		if !drawn(filepath.Join(DefaultDir, name)) {
			t.Errorf("drawn(%s) = false, want true", name)
		}
	}
	if other := SegmentName(^key, 0); drawn(filepath.Join(DefaultDir, other)) {
		t.Errorf("drawn(%s) = true for a key never drawn", other)
	}
}
