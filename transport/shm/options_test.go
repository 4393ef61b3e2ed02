package shm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestDefaultCellSize: small jobs get cells that hold messages of up to
// about 2 KiB; the size² rings' cells stay within cellBudget as jobs grow,
// down to the 128-byte floor.
func TestDefaultCellSize(t *testing.T) {
	for _, c := range []struct{ size, want int }{{1, 2048}, {2, 2048}, {22, 2048}, {23, 1024}, {32, 1024}, {33, 512}, {45, 512}, {46, 256}, {64, 256}, {65, 128}, {512, 128}} {
		got := DefaultCellSize(c.size, DefaultCells)
		if got != c.want {
			t.Errorf("DefaultCellSize(%d, %d) = %d, want %d", c.size, DefaultCells, got, c.want)
		}
		if got > 128 && c.size*c.size*DefaultCells*got > cellBudget {
			t.Errorf("%d ranks: cells of %d bytes take %d MiB, over the budget", c.size, got, c.size*c.size*DefaultCells*got>>20)
		}
	}
}

// TestCellSizeFromLine: cells start on cache lines, so a cell smaller than
// the machine's line is refused, and the default never is.
func TestCellSizeFromLine(t *testing.T) {
	if _, err := (Options{CellSize: 64}).withDefaults(2, 128); err == nil || !strings.Contains(err.Error(), "cache line") {
		t.Errorf("64-byte cells with 128-byte lines: %v, want an error naming the cache line", err)
	}
	for _, size := range []int{2, 64, 256} {
		o, err := Options{}.withDefaults(size, 128)
		if err != nil || o.CellSize < 128 {
			t.Errorf("defaults for %d ranks with 128-byte lines: cell size %d, %v", size, o.CellSize, err)
		}
	}
}

// TestSharedBytes: the shared block's size per rank defaults, can be
// turned off, and is refused when misaligned or too large.
func TestSharedBytes(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, DefaultSharedBytes}, {-1, 0}, {8, 8}, {maxSharedBytes, maxSharedBytes}} {
		o, err := Options{SharedBytes: c.in}.withDefaults(4, 64)
		if err != nil || o.SharedBytes != c.want {
			t.Errorf("SharedBytes %d: got %d, %v; want %d", c.in, o.SharedBytes, err, c.want)
		}
	}
	for _, bad := range []int{4, 12, maxSharedBytes + 8} {
		if _, err := (Options{SharedBytes: bad}).withDefaults(4, 64); err == nil || !strings.Contains(err.Error(), "shared block") {
			t.Errorf("SharedBytes %d: %v, want an error naming the shared block", bad, err)
		}
	}
}

// TestMembers: Ranks nil is the whole job; given, it must be ascending,
// unique, within the job and hold this rank, and the device gets a copy.
func TestMembers(t *testing.T) {
	ranks, slot, err := Options{}.members(3, 2)
	if err != nil || !slices.Equal(ranks, []hal.Rank{0, 1, 2}) || slot != 2 {
		t.Errorf("nil Ranks, rank 2 of 3: %v slot %d, %v; want [0 1 2] slot 2", ranks, slot, err)
	}
	given := []hal.Rank{1, 4, 6}
	ranks, slot, err = Options{Ranks: given}.members(MaxRanks+10, 4)
	if err != nil || !slices.Equal(ranks, given) || slot != 1 {
		t.Errorf("Ranks %v, rank 4: %v slot %d, %v; want slot 1", given, ranks, slot, err)
	}
	if given[0] = 9; ranks[0] != 1 {
		t.Errorf("members shares the caller's slice")
	}
	many := make([]hal.Rank, MaxRanks+1)
	for i := range many {
		many[i] = hal.Rank(i)
	}
	for _, c := range []struct {
		ranks []hal.Rank
		size  int
		rank  hal.Rank
		want  string
	}{
		{[]hal.Rank{}, 5, 0, "has 0 ranks"},
		{[]hal.Rank{0, 2, 1}, 5, 0, "not ascending"},
		{[]hal.Rank{0, 2, 2}, 5, 0, "not ascending"},
		{[]hal.Rank{0, 2, 5}, 5, 0, "rank 5, outside the job's 0..4"},
		{[]hal.Rank{1, 3}, 5, 2, "rank 2 is not in Options.Ranks"},
		{[]hal.Rank{1, 3}, 5, 7, "rank 7 of 5"},
		{many, MaxRanks + 1, 0, fmt.Sprintf("has %d ranks", MaxRanks+1)},
		{[]hal.Rank{0}, maxJobRanks + 1, 0, "job size"},
		{nil, MaxRanks + 1, 0, "job size"},
		{nil, 0, 0, "job size"},
	} {
		_, _, err := Options{Ranks: c.ranks}.members(c.size, c.rank)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Ranks %v, rank %d of %d: %v, want an error saying %q", c.ranks, c.rank, c.size, err, c.want)
		}
	}
}
