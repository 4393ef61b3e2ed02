// Package launch is gorun: it starts the ranks of a weft job and sees them
// to the end. It builds the program once (or takes a binary), places ranks on
// hosts by slot (mpirun semantics), serves PMI-1 and PMI-2 to them
// (internal/pmi), forks local ranks with a socketpair as PMI_FD and starts
// remote ones over ssh with
// PMI_PORT/PMI_ID (each bound to its share of its host's cores, --bind-to,
// internal/cpubind: local ones by gorun, remote ones by themselves in
// mpi.Init through WEFT_BIND_TO, unless their host is a namespace of
// gorun's machine; a built program copied to each remote host
// first: copy.go; every
// rank gets gorun's WEFT_* variables and -x), refuses at once a job its
// device cannot run (Plan), passes their output through line by line (optionally
// tagged with the rank; a closed stdout only drops it, and a slow one
// loses none of it), forwards SIGINT/SIGTERM, and SIGTERM for SIGHUP (a
// second one kills; gorun then exits 128+N; one before the ranks start
// stops the build or the copies, and gorun cleans up and exits 128+N),
// and when a rank fails kills the others and exits with
// the failed rank's status, saying which rank failed and how; at --timeout
// it asks each rank what MPI call it is blocked in and reports it
// (report.go, mpi/report.go). It forwards SIGUSR1/SIGUSR2 to every rank
// alone, which raise and lower the ranks' trace level, and with --stats
// gathers the counters each rank writes at Finalize into one table
// (stats.go). It removes the job's shared-memory segments at the end and
// those of jobs whose gorun died.
//
// `gorun --wrap -- LAUNCHER ...` instead runs a foreign launcher (Open MPI's
// mpirun, a bare srun) with a GORUN_KVS rendezvous server, for launchers whose
// own key-value store weft cannot speak; in the foreground of a terminal
// it gives the launcher the terminal, so that a Ctrl-C reaches it once
// and a Ctrl-Z stops the job (wrap.go).
//
// cmd/gorun is a thin main around Main. launch may import internal/pmi,
// github.com/pkg/profile (through internal/profile, for the rank side of
// --profile) and golang.org/x/sys/unix, besides the standard library.
package launch
