package launch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The same test rank under the foreign launchers weft must run under, and an
// unmodified MPICH program under gorun. Each test skips, saying which Debian
// package to install, when its tool is missing.

const (
	slurmSetup    = "../../../shared/launchers/slurm-local/setup.sh"
	slurmTeardown = "../../../shared/launchers/slurm-local/teardown.sh"
)

func needTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s not installed: apt-get install %s", tool, pkg)
	}
	return path
}

// TestGorunServesMPICH: gorun's PMI-1 server runs a program built with
// MPICH's mpicc, whose MPI_Init speaks PMI-1 as it does under Hydra.
func TestGorunServesMPICH(t *testing.T) {
	mpicc := needTool(t, "mpicc.mpich", "mpich (with libmpich-dev)")
	hello := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command(mpicc, "-o", hello, "testdata/mpihello/hello.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	r := gorun(t, "-n", "3", "--oversubscribe", hello)
	if r.code != 0 {
		t.Fatalf("status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 3 {
		if !regexp.MustCompile(`(?m)^hello from rank ` + string(rune('0'+rank)) + ` of 3 on \S+, sum of ranks 3$`).MatchString(r.stdout) {
			t.Errorf("no hello from rank %d:\n%s", rank, r.stdout)
		}
	}
}

// TestUnderHydra: MPICH's mpiexec.hydra starts the test rank, which speaks
// PMI-1 or PMI-2, over PMI_FD or (-pmi-port) TCP.
func TestUnderHydra(t *testing.T) {
	hydra := needTool(t, "mpiexec.hydra", "mpich")
	for _, tc := range []struct {
		name string
		args []string
		kind string
	}{
		{"pmi1-fd", nil, "pmi1"},
		{"pmi2-fd", []string{"-genv", "WEFT_PMI", "2"}, "pmi2"},
		{"pmi1-port", []string{"-pmi-port"}, "pmi1"},
		{"pmi2-port", []string{"-pmi-port", "-genv", "WEFT_PMI", "2"}, "pmi2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, tc.args...), "-n", "3"), bins.pmiprog)
			for id, ri := range checkJob(t, command(t, "", nil, hydra, args...), 3) {
				if ri.kind != tc.kind || ri.local != "0 1 2" {
					t.Errorf("rank %d: %+v, want kind %s and all ranks local", id, ri, tc.kind)
				}
			}
		})
	}
	t.Run("abort", func(t *testing.T) {
		r := command(t, "", nil, hydra, "-n", "2", bins.pmiprog, "-fail-rank", "1", "-fail", "abort")
		if r.code != 7 {
			t.Errorf("status %d, want 7 (Hydra exits with the abort code)\n%s", r.code, r.stderr)
		}
	})
}

// slurmUp makes sure the single-node Slurm of shared/launchers/slurm-local
// answers, starting it (as root) if it does not, and stopping it after the
// test if it started it; it says why not otherwise.
func slurmUp(t *testing.T) {
	t.Helper()
	needTool(t, "srun", "slurm-wlm munge")
	idle := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T").Output()
		return err == nil && regexp.MustCompile(`idle|mixed|allocated`).Match(out)
	}
	if idle() {
		return
	}
	if os.Getuid() != 0 {
		t.Skipf("Slurm is not running and starting it needs root: run %s", slurmSetup)
	}
	if _, err := os.Stat(slurmSetup); err != nil {
		t.Skipf("Slurm is not running and %s is missing: start slurmctld and slurmd", slurmSetup)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, slurmSetup).CombinedOutput()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, slurmTeardown).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", slurmTeardown, err, out)
		}
	})
	if err != nil || !idle() {
		t.Fatalf("%s: %v\n%s", slurmSetup, err, out)
	}
}

// TestUnderSlurm: srun --mpi=pmi2 starts the test rank, which speaks PMI-2
// there by default and PMI-1 with WEFT_PMI=1; a bare srun offers no key-value
// store and gets a clear error, unless gorun --wrap provides one.
func TestUnderSlurm(t *testing.T) {
	slurmUp(t)
	for _, tc := range []struct {
		name string
		env  []string
		kind string
	}{
		{"pmi2", nil, "pmi2"},
		{"pmi1", []string{"WEFT_PMI=1"}, "pmi1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := command(t, "", tc.env, "srun", "-n", "4", "--mpi=pmi2", bins.pmiprog)
			for id, ri := range checkJob(t, r, 4) {
				if ri.kind != tc.kind || ri.local != "0 1 2 3" {
					t.Errorf("rank %d: %+v, want kind %s and all ranks local", id, ri, tc.kind)
				}
			}
		})
	}
	t.Run("no-pmi", func(t *testing.T) {
		r := command(t, "", nil, "srun", "-n", "2", bins.pmiprog)
		if r.code == 0 || !strings.Contains(r.stderr, "srun --mpi=pmi2") {
			t.Errorf("status %d, stderr does not advise --mpi=pmi2:\n%s", r.code, r.stderr)
		}
	})
	t.Run("wrap", func(t *testing.T) {
		r := command(t, "", nil, bins.gorun, "--wrap", "--", "srun", "-n", "3", bins.pmiprog)
		for id, ri := range checkJob(t, r, 3) {
			if ri.kind != "kvs" {
				t.Errorf("rank %d: kind %s, want kvs (GORUN_KVS rendezvous)", id, ri.kind)
			}
		}
	})
	t.Run("abort", func(t *testing.T) {
		r := command(t, "", nil, "srun", "-n", "2", "--mpi=pmi2", bins.pmiprog, "-fail-rank", "1", "-fail", "abort")
		if r.code == 0 {
			t.Errorf("status 0 after a PMI abort\n%s", r.stderr)
		}
	})
}
