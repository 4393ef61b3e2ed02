package shm

import "testing"

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
