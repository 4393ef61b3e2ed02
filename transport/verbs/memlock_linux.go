//go:build verbs && linux && cgo

package verbs

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capIPCLock is CAP_IPC_LOCK's bit: with it the kernel lets a process lock
// memory beyond RLIMIT_MEMLOCK.
const capIPCLock = 14

// checkMemlock fails, naming `ulimit -l` and the bytes needed, when
// registering need more bytes would exceed RLIMIT_MEMLOCK: the kernel pins
// registered memory and counts it against that limit, and ibv_reg_mr's own
// failure (ENOMEM) does not say why. Memory this process has pinned or
// locked already counts too.
func checkMemlock(need uint64) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return nil
	}
	capEff, used := threadStatus()
	if capEff&(1<<capIPCLock) != 0 {
		return nil
	}
	if used+need > rl.Cur {
		return memlockError(rl.Cur, used+need)
	}
	return nil
}

// threadStatus reads this thread's effective capabilities (they are
// per-thread) and the memory the process has pinned or locked, in bytes.
func threadStatus() (capEff, locked uint64) {
	f, err := os.Open("/proc/thread-self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "CapEff":
			capEff, _ = strconv.ParseUint(v, 16, 64)
		case "VmLck", "VmPin":
			kb, _ := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
			locked += kb * 1024
		}
	}
	return capEff, locked
}

// currentMemlock is RLIMIT_MEMLOCK's soft limit (RLIM_INFINITY if it
// cannot be read).
func currentMemlock() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) != nil {
		return unix.RLIM_INFINITY
	}
	return rl.Cur
}
