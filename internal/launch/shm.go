package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weft-hpc/weft/internal/pmi"
)

// Shared-memory segments of a job are named /dev/shm/weft-<key>-*
// (pmi.SegmentPrefix). gorun removes the job's segments when the job ends,
// however it ends. In case gorun itself dies (SIGKILL, OOM) it leaves an
// owner file weft-<key>-gorun holding its pid and start time; every gorun
// first sweeps the segments of jobs whose owner is no longer alive. Jobs of
// foreign launchers have no owner file and are never touched.

// shmDir is where segments live; a variable for tests.
var shmDir = "/dev/shm"

const ownerSuffix = "gorun"

func segmentPrefix(key uint64) string { return pmi.SegmentPrefix(key) }

// writeOwner records this gorun as the owner of key's segments.
func writeOwner(dir string, key uint64) error {
	start, err := procStartTime(os.Getpid())
	if err != nil {
		return err
	}
	path := filepath.Join(dir, segmentPrefix(key)+ownerSuffix)
	return os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o600)
}

// removeSegments deletes every file of key's job in dir, the owner file
// included, and returns how many it removed.
func removeSegments(dir string, key uint64) (int, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, segmentPrefix(key)+"*"))
	n := 0
	var first error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			if first == nil {
				first = err
			}
			continue
		}
		n++
	}
	return n, first
}

// sweepStale removes the segments of jobs whose gorun is dead and returns
// the keys it cleaned.
func sweepStale(dir string) []uint64 {
	owners, _ := filepath.Glob(filepath.Join(dir, "weft-*-"+ownerSuffix))
	var swept []uint64
	for _, path := range owners {
		hex := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "weft-"), "-"+ownerSuffix)
		key, err := strconv.ParseUint(hex, 16, 64)
		if err != nil || segmentPrefix(key) != "weft-"+hex+"-" {
			continue // not ours
		}
		if ownerAlive(path) {
			continue
		}
		if _, err := removeSegments(dir, key); err == nil {
			swept = append(swept, key)
		}
	}
	return swept
}

// ownerAlive reports whether the gorun recorded in an owner file still runs
// (same pid and same start time, so a reused pid does not count). An owner
// file it cannot read counts as alive: never remove what might be in use.
func ownerAlive(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(string(data), &pid, &start); err != nil {
		return true
	}
	now, err := procStartTime(pid)
	return err == nil && now == start
}

// procStartTime is the start time of a process in clock ticks since boot
// (field 22 of /proc/PID/stat).
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and ')': split after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22 is the 20th after the name
}
