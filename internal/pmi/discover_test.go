package pmi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestDiscoverSingleton(t *testing.T) {
	c, err := discover(envOf(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind() != "singleton" || c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("got %s rank %d size %d", c.Kind(), c.Rank(), c.Size())
	}
	if err := c.Put("k", "v w"); err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get("k"); v != "v w" || err != nil {
		t.Errorf("Get = %q, %v", v, err)
	}
	if _, err := c.Get("x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
}

func TestDiscoverErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want error
		says string
	}{
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}, ErrNoKVS, "gorun --wrap"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}, ErrNoKVS, "--mpi=pmi2"},
		{map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}, ErrEnv, "SLURM_STEP_NUM_TASKS"},
		{map[string]string{"PMIX_RANK": "0"}, ErrNoKVS, "PMIx"},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"}, ErrEnv, "OMPI_COMM_WORLD_RANK"},
		{map[string]string{"PMI_FD": "x"}, ErrEnv, "PMI_FD"},
		{map[string]string{"PMI_FD": "999"}, ErrEnv, "PMI_FD=999"},
		{map[string]string{"PMI_PORT": "127.0.0.1:1"}, ErrEnv, "PMI_ID"},
		{map[string]string{"PMI_FD": "3", "WEFT_PMI": "3"}, ErrEnv, "WEFT_PMI"},
	} {
		_, err := discover(envOf(tc.env), 0)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("env %v: %v; want %v saying %q", tc.env, err, tc.want, tc.says)
		}
	}
	// mpirun -n 1 without a rendezvous is just a singleton.
	c, err := discover(envOf(map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}), 0)
	if err != nil || c.Kind() != "singleton" {
		t.Errorf("mpirun -n 1: %v, %v", c, err)
	}
}

// TestDiscoverFD: the PMI_FD path a rank of gorun, Hydra or srun takes,
// with the version chosen as on each launcher.
func TestDiscoverFD(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		kind string
	}{
		{map[string]string{}, "pmi1"},                   // gorun, Hydra
		{map[string]string{"WEFT_PMI": "2"}, "pmi2"},    // forced
		{map[string]string{"PMI_JOBID": "7.0"}, "pmi2"}, // Slurm
		{map[string]string{"PMI_JOBID": "7.0", "WEFT_PMI": "1"}, "pmi1"},
	} {
		j := newTestJob(t, 1)
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		go j.srv.Serve(0, fileConn(t, fds[0]))
		tc.env["PMI_FD"] = strconv.Itoa(fds[1])
		tc.env["PMI_RANK"], tc.env["PMI_SIZE"] = "0", "1"
		c, err := discover(envOf(tc.env), 0)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if c.Kind() != tc.kind {
			t.Errorf("%v: kind %s, want %s", tc.env, c.Kind(), tc.kind)
		}
		if err := exchange(c); err != nil {
			t.Errorf("%v: %v", tc.env, err)
		}
	}
}

func TestKVSRendezvous(t *testing.T) {
	srv, err := ListenKVS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 3
	errs := parallel(n, func(r int) error {
		c, err := discover(envOf(map[string]string{
			"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": strconv.Itoa(n),
			"GORUN_KVS": srv.Addr().String(),
		}), 0)
		if err != nil {
			return err
		}
		if c.Kind() != "kvs" {
			return fmt.Errorf("kind %s", c.Kind())
		}
		if in := c.Info(); in.Node != 0 || len(in.LocalRanks) != n {
			return fmt.Errorf("info %+v: all ranks run on this host", in)
		}
		return exchange(c)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestKVSFenceAfterPeerFinalized: under gorun --wrap, a rank that has
// finalized (sent bye) can never enter a fence again, as under gorun's own
// server. A fence the others then enter fails at once naming that rank,
// not after the whole PMI wait with a guess at the cause.
func TestKVSFenceAfterPeerFinalized(t *testing.T) {
	srv, err := ListenKVS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 2
	clients := make([]Client, n)
	errs := parallel(n, func(r int) (err error) {
		clients[r], err = discover(envOf(map[string]string{
			"SLURM_PROCID": strconv.Itoa(r), "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": strconv.Itoa(n),
			"GORUN_KVS": srv.Addr().String(),
		}), testWait)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := clients[1].Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := clients[0].Fence(); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 1 already finalized") {
		t.Errorf("fence with a finalized peer: %v; want ErrRejected naming rank 1", err)
	}
}

// TestBatchScriptIsSingleton: a program started directly by a Slurm batch
// script (sbatch -n 4) sees SLURM_PROCID=0 and the allocation's
// SLURM_NTASKS=4 but, not being in an srun step, no SLURM_STEP_ID (the
// environment as slurm-wlm 22.05 sets it). It runs as a singleton, as an
// MPICH program does, not as rank 0 of 4 waiting for a rendezvous.
func TestBatchScriptIsSingleton(t *testing.T) {
	batch := map[string]string{
		"SLURM_JOB_ID": "18", "SLURM_JOBID": "18", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
		"SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_PROCID": "0", "SLURM_TASK_PID": "10276",
		"SLURM_JOB_NUM_NODES": "1", "SLURM_TASKS_PER_NODE": "4",
	}
	c, err := discover(envOf(batch), testWait)
	if err != nil {
		t.Fatalf("a program run from a batch script: %v; want a singleton", err)
	}
	if c.Kind() != "singleton" || c.Size() != 1 {
		t.Errorf("kind %s size %d, want a singleton", c.Kind(), c.Size())
	}
}

func TestJobKey(t *testing.T) {
	t.Setenv("WEFT_JOBKEY", "")
	const n = 3
	j := newTestJob(t, n)
	clients := make([]Client, n)
	for r := range n {
		clients[r] = j.pmi1(t, r)
	}
	keys := make([]uint64, n)
	for r, err := range parallel(n, func(r int) (err error) { keys[r], err = JobKey(clients[r]); return }) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if keys[0] == 0 || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Errorf("derived keys %x differ or are zero", keys)
	}
	t.Setenv("WEFT_JOBKEY", "00ff00ff00ff00ff")
	if k, err := JobKey(clients[0]); err != nil || k != 0x00ff00ff00ff00ff {
		t.Errorf("JobKey from WEFT_JOBKEY = %x, %v", k, err)
	}
	t.Setenv("WEFT_JOBKEY", "zz")
	if _, err := JobKey(clients[0]); !errors.Is(err, ErrEnv) {
		t.Errorf("bad WEFT_JOBKEY: %v", err)
	}
}
