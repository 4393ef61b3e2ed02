//go:build unix

package verbs

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// fileGroup names the group that owns path, or "".
func fileGroup(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	gid := strconv.FormatUint(uint64(st.Gid), 10)
	if g, err := user.LookupGroupId(gid); err == nil {
		return g.Name
	}
	return gid
}
