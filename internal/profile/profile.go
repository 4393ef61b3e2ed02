package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	pprofile "github.com/pkg/profile"
)

// EnvVar names the kind of profile a rank writes.
const EnvVar = "WEFT_PROFILE"

// Kinds are the profiles WEFT_PROFILE may ask for.
var Kinds = []string{"cpu", "mem", "block", "mutex"}

// StartFromEnv starts the profile WEFT_PROFILE asks for, for this rank, and
// returns the function that stops it and writes the file. Without
// WEFT_PROFILE it does nothing and stop is a no-op. An unknown kind is
// refused before this by whoever parses the environment (mpi's
// OptionsFromEnv, gorun); an unusable WEFT_PROFILE_DIR, found only when the
// file is made, is said on stderr and the job runs unprofiled: a profile
// is never worth failing a job that is already running for.
func StartFromEnv(rank int) (stop func()) {
	stop, err := start(rank, os.Getenv(EnvVar), os.Getenv("WEFT_PROFILE_DIR"))
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
		return func() {}, fmt.Errorf("%s=%q: want one of %s", EnvVar, kind, strings.Join(Kinds, ", "))
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
