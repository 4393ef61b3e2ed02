package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func TestRemoveSegments(t *testing.T) {
	dir := t.TempDir()
	const key, other = 0x1234, 0xabcdef
	for _, name := range []string{segmentPrefix(key) + "a", segmentPrefix(key) + "b", segmentPrefix(other) + "a", "weft-other"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o600)
	}
	n, err := removeSegments(dir, key)
	if err != nil || n != 2 {
		t.Errorf("removed %d, %v; want 2", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 2 {
		t.Errorf("left %v, want the other job's segment and the stranger", left)
	}
}

// TestSweepStale: segments of a job whose gorun died are removed; a live
// owner's, and a foreign launcher's job without owner file, are kept.
func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	const dead, alive, foreign = 0x1, 0x2, 0x3
	// A process that has exited: its pid is no longer that process.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, segmentPrefix(dead)+ownerSuffix), fmt.Appendf(nil, "%d 12345\n", cmd.Process.Pid), 0o600)
	if err := writeOwner(dir, alive); err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint64{dead, alive, foreign} {
		os.WriteFile(filepath.Join(dir, segmentPrefix(k)+"seg"), nil, 0o600)
	}
	if swept := sweepStale(dir); !slices.Equal(swept, []uint64{dead}) {
		t.Errorf("swept %x, want only the dead job", swept)
	}
	for k, want := range map[uint64]bool{dead: false, alive: true, foreign: true} {
		_, err := os.Stat(filepath.Join(dir, segmentPrefix(k)+"seg"))
		if (err == nil) != want {
			t.Errorf("job %x segment present=%v, want %v", k, err == nil, want)
		}
	}
}
