package profile

import (
	"fmt"
	"os"
	"path/filepath"

	pprofile "github.com/pkg/profile"
)

// StartFromEnv starts the profile WEFT_PROFILE asks for, for this rank, and
// returns the function that stops it and writes the file. Without
// WEFT_PROFILE it does nothing and stop is a no-op. A profile is never worth
// failing a job for: an unknown kind or an unusable directory (gorun checks
// both, so only a hand-set environment gets there) is said on stderr and
// the job runs unprofiled.
func StartFromEnv(rank int) (stop func()) {
	stop, err := start(rank, os.Getenv("WEFT_PROFILE"), os.Getenv("WEFT_PROFILE_DIR"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "weft: rank %d: no profile: %v\n", rank, err)
	}
	return stop
}

func start(rank int, kind, dir string) (stop func(), err error) {
	if kind == "" {
		return func() {}, nil
	}
	mode := map[string]func(*pprofile.Profile){
		"cpu":   pprofile.CPUProfile,
		"mem":   pprofile.MemProfile,
		"block": pprofile.BlockProfile,
		"mutex": pprofile.MutexProfile,
	}[kind]
	if mode == nil {
		return func() {}, fmt.Errorf("WEFT_PROFILE=%q: want cpu, mem, block or mutex", kind)
	}
	if dir == "" {
		dir = "."
	}
	// pkg/profile writes a fixed name (cpu.pprof...) into a directory; each
	// rank gets its own scratch directory, and the file is renamed to carry
	// the rank when the profile stops.
	tmp, err := os.MkdirTemp(dir, fmt.Sprintf(".weft-profile-rank%d-", rank))
	if err != nil {
		return func() {}, fmt.Errorf("WEFT_PROFILE_DIR: %w", err)
	}
	p := pprofile.Start(mode, pprofile.ProfilePath(tmp), pprofile.Quiet, pprofile.NoShutdownHook)
	return func() {
		p.Stop()
		final := filepath.Join(dir, fmt.Sprintf("%s-rank%d.pprof", kind, rank))
		if err := os.Rename(filepath.Join(tmp, kind+".pprof"), final); err != nil {
			fmt.Fprintf(os.Stderr, "weft: rank %d: keeping the %s profile: %v\n", rank, kind, err)
		}
		os.RemoveAll(tmp)
	}, nil
}
