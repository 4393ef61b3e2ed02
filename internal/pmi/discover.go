package pmi

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Discover connects to whatever started this process, in this order:
//
//  1. PMI_FD or PMI_PORT (gorun, Hydra, srun --mpi=pmi2): PMI-1, or PMI-2
//     when WEFT_PMI=2, or when PMI_JOBID is set (Slurm) unless WEFT_PMI=1.
//  2. OMPI_COMM_WORLD_RANK (Open MPI mpirun), SLURM_PROCID with
//     SLURM_STEP_ID (a task of an srun step without --mpi=pmi2; the size is
//     SLURM_STEP_NUM_TASKS, else SLURM_NTASKS), PMIX_RANK: rank and size
//     from the environment and the key value store of the rendezvous named
//     by GORUN_KVS; without GORUN_KVS, an error wrapping ErrNoKVS that says
//     how to launch instead (a job of size 1 becomes a singleton).
//  3. Nothing, or a Slurm batch script's own environment (SLURM_PROCID
//     but no SLURM_STEP_ID): a singleton (rank 0 of 1, in-memory store).
//
// Every reply is awaited at most wait; 0 (or less) means DefaultWait. The
// caller reads the bound where it reads its other settings (mpi.Init passes
// mpi.Options.Timeout, WEFT_TIMEOUT), so that one parse decides what the
// variable means. PMI_TRACE=1 writes the wire traffic to stderr.
func Discover(wait time.Duration) (Client, error) { return discover(os.Getenv, wait) }

func discover(getenv func(string) string, wait time.Duration) (Client, error) {
	if wait <= 0 {
		wait = DefaultWait
	}
	var (
		c   *client
		err error
	)
	switch {
	case getenv("PMI_FD") != "" || getenv("PMI_PORT") != "":
		c, err = discoverPMI(getenv, wait)
	case getenv("OMPI_COMM_WORLD_RANK") != "":
		c, err = discoverEnv(getenv, wait, "Open MPI's mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
			"mpirun offers PMIx only, which weft does not speak: run the job with gorun, or wrap mpirun: "+
				"gorun --wrap -- mpirun -x GORUN_KVS ...")
	case getenv("SLURM_PROCID") != "" && getenv("SLURM_STEP_ID") != "":
		// A task of an srun step. A batch script also has SLURM_PROCID=0
		// and the allocation's SLURM_NTASKS but no step: a program it
		// starts directly is a singleton, as an MPICH program is there.
		sizeVar := "SLURM_STEP_NUM_TASKS"
		if getenv(sizeVar) == "" {
			sizeVar = "SLURM_NTASKS"
		}
		c, err = discoverEnv(getenv, wait, "srun without PMI", "SLURM_PROCID", sizeVar,
			"run it with srun --mpi=pmi2 (weft speaks PMI-1 and PMI-2), or wrap srun: gorun --wrap -- srun ...")
	case getenv("PMIX_RANK") != "":
		return nil, fmt.Errorf("%w: started by a PMIx launcher (PMIX_RANK=%s), which weft does not speak: "+
			"run the job with gorun, with srun --mpi=pmi2, or wrap the launcher with gorun --wrap",
			ErrNoKVS, getenv("PMIX_RANK"))
	default:
		return newSingleton(), nil
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// discoverPMI connects over PMI_FD or PMI_PORT and picks the version.
func discoverPMI(getenv func(string) string, wait time.Duration) (*client, error) {
	version := getenv("WEFT_PMI")
	switch version {
	case "":
		// Slurm's mpi/pmi2 plugin is native PMI-2 (it answers PMI-1 too).
		version = "1"
		if getenv("PMI_JOBID") != "" {
			version = "2"
		}
	case "1", "2":
	default:
		return nil, fmt.Errorf("%w: WEFT_PMI=%q, want 1 or 2", ErrEnv, version)
	}
	var (
		conn  net.Conn
		where string
		id    = getenv("PMI_ID")
	)
	if fdText := getenv("PMI_FD"); fdText != "" {
		fd, err := strconv.Atoi(fdText)
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("%w: PMI_FD=%q is not a file descriptor", ErrEnv, fdText)
		}
		where = "PMI_FD=" + fdText
		f := os.NewFile(uintptr(fd), where)
		conn, err = net.FileConn(f)
		f.Close() // FileConn holds its own duplicate (close-on-exec)
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not a usable socket: %v", ErrEnv, where, err)
		}
		id = "" // initack is for PMI_PORT connections only
	} else {
		port := getenv("PMI_PORT")
		where = "PMI_PORT=" + port
		if id == "" {
			return nil, fmt.Errorf("%w: PMI_PORT=%s without PMI_ID", ErrEnv, port)
		}
		var err error
		if conn, err = net.DialTimeout("tcp", port, wait); err != nil {
			return nil, fmt.Errorf("%w: connecting to the PMI server at %s: %v", ErrClosed, port, err)
		}
	}
	w := newWireConn(conn, where, wait)
	if getenv("PMI_TRACE") == "1" {
		w.trace = os.Stderr
	}
	var (
		c   *client
		err error
	)
	if version == "2" {
		pmirank := id
		if pmirank == "" {
			pmirank = getenv("PMI_RANK")
		}
		c, err = newPMI2(w, pmirank, getenv("PMI_JOBID"))
	} else {
		rank, size := -1, -1
		if id == "" {
			if rank, size, err = envRankSize(getenv, "PMI_RANK", "PMI_SIZE"); err != nil {
				conn.Close()
				return nil, err
			}
		}
		c, err = newPMI1(w, rank, size, id)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// discoverEnv takes rank and size from a foreign launcher's variables and
// joins the GORUN_KVS rendezvous.
func discoverEnv(getenv func(string) string, wait time.Duration, launcher, rankVar, sizeVar, advice string) (*client, error) {
	rank, size, err := envRankSize(getenv, rankVar, sizeVar)
	if err != nil {
		return nil, err
	}
	addr := getenv("GORUN_KVS")
	if addr == "" {
		if size == 1 {
			return newSingleton(), nil
		}
		return nil, fmt.Errorf("%w: started by %s as rank %d of %d and GORUN_KVS is not set: %s",
			ErrNoKVS, launcher, rank, size, advice)
	}
	conn, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to the rendezvous GORUN_KVS=%s: %v", ErrClosed, addr, err)
	}
	w := newWireConn(conn, "GORUN_KVS="+addr, wait)
	if getenv("PMI_TRACE") == "1" {
		w.trace = os.Stderr
	}
	c, err := newKVSClient(w, rank, size)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// envRankSize reads and checks a rank and a size variable.
func envRankSize(getenv func(string) string, rankVar, sizeVar string) (rank, size int, err error) {
	rank, err1 := strconv.Atoi(getenv(rankVar))
	size, err2 := strconv.Atoi(getenv(sizeVar))
	if err1 != nil || err2 != nil || size <= 0 || rank < 0 || rank >= size {
		return 0, 0, fmt.Errorf("%w: %s=%q and %s=%q are not a rank and a size", ErrEnv,
			rankVar, getenv(rankVar), sizeVar, getenv(sizeVar))
	}
	return rank, size, nil
}
