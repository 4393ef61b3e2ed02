// Package pmi is how a weft rank finds its place in a job: its rank, the job
// size, and a key-value store shared by all ranks (put, fence, get) through
// which ranks publish the addresses they listen on.
//
// A rank calls Discover, which picks the process-manager interface offered by
// whatever started it:
//
//   - PMI-1 over PMI_FD (gorun, MPICH Hydra, Slurm --mpi=pmi2) or over
//     PMI_PORT+PMI_ID (Hydra -pmi-port, remote ranks of gorun);
//   - PMI-2 on the same connection when WEFT_PMI=2, or by default under Slurm
//     (PMI_JOBID set), because Slurm's pmi2 plugin is native PMI-2;
//   - Open MPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE) or a bare srun step
//     (SLURM_PROCID, SLURM_STEP_ID, SLURM_STEP_NUM_TASKS): rank and size from
//     the environment and the key-value store of a gorun --wrap rendezvous
//     server named by GORUN_KVS;
//   - nothing, or a Slurm batch script itself (SLURM_PROCID but no step): a
//     singleton of size 1 with an in-memory store.
//
// A launcher that is told of a rank's death may or may not end the job:
// gorun and Hydra do, but srun by default lets the other tasks run on, and
// they wait for the dead one (in a fence, or in MPI calls) until the PMI
// wait (DefaultWait, or WEFT_TIMEOUT under mpi.Init) runs out. Run weft
// jobs as srun -K (--kill-on-bad-exit) to have Slurm end the step at once.
//
// Values are encoded so that they survive every server seen in practice:
// Hydra 4.0.2 cuts values at the first space and silently truncates keys over
// 63 bytes and values over 1023 bytes, and neither Hydra nor Slurm round-trips
// ';' in PMI-2. See codec.go for the encoding; callers put and get arbitrary
// strings of any length up to MaxValueLen and never see it.
//
// The package also holds the PMI-1 server that gorun runs for its ranks
// (Server). It speaks the same wire protocol as Hydra, including the PMI-2
// subset weft's own client uses, so that an unmodified MPICH program runs
// under gorun and a weft program runs under Hydra, Slurm or gorun alike.
//
// pmi may import only the standard library: it sits under mpi (bootstrap)
// and internal/launch, and must not drag anything into every rank.
package pmi
