// Command gorun launches the ranks of a weft program. All of its logic lives
// in internal/launch; see `gorun -h` and shared/API.md.
//
// # Tracing a running job
//
// --trace LEVEL starts every rank at trace level LEVEL (WEFT_TRACE; levels
// in internal/trace). While the job runs, SIGUSR1 sent to gorun raises
// every rank's level by one and SIGUSR2 lowers it by one: gorun forwards
// them to each rank it started, locally and over ssh, to the rank's
// process alone (not what the rank started), as mpirun does, and says
// "gorun: user defined signal 1: trace level up by one on N running
// rank(s)"; each rank then says its new level. To change one rank's level,
// send the signal to that rank's process. One signal is one step: to go
// from 0 to 3, send three, a moment apart. gorun's own messages (its PMI
// wire from --trace 4) stay at --trace's level.
//
//	gorun -n 4 ./solver &
//	kill -USR1 %1; sleep 0.2; kill -USR1 %1; sleep 0.2; kill -USR1 %1   # level 3: recovery steps, collectives
//	kill -USR2 %1                                                       # back to 2
//
// A trace line reads "weft[RANK] SECONDS COMPONENT ...: TEXT", SECONDS since
// that rank's process started; mpi's World.Mark writes the user's markers
// (level 1 and up) with the wall clock, to line the ranks' traces up.
//
// # Counters
//
// --stats prints, once the job has ended, one table of every rank's
// counters as its Finalize left them (the ranks write them when WEFT_STATS=1,
// which --stats sets, and gorun takes the lines out of their output): per
// rank, a row for its reliable layer, lapi (messages and packets sent and
// received, retransmits, RDMA redrives, bytes moved by single copies,
// packets dropped by reason), and one per device (the ranks it reaches,
// frames and bytes sent and received, frames dropped by reason), then a
// row per layer summing the ranks. A rank that did not reach the end of
// Finalize is named as having sent none.
//
// # State snapshots
//
// A rank's snapshot is its state in text, one record a line: the call it
// is blocked in (operation, peer, tag, communicator, and for a collective
// its name and number on the communicator), each communicator with the
// collectives it has begun, the posted receives and the sends waiting for
// their peer, the unexpected messages (source, tag, communicator, bytes),
// lapi's link toward each peer (packets unacknowledged and queued, window,
// RTO and back-off, the oldest packet's age and resends, RDMA in flight,
// reintegration), and its counters (internal/pmi's SnapshotPrefix
// describes the records). A rank writes one at its first fatal error (a
// peer declared failed) or timeout (WEFT_TIMEOUT), and whenever it
// receives SIGWINCH, to WEFT_SNAPSHOT_DIR if that is set and, under gorun,
// to gorun. gorun asks every running rank for one (with SIGWINCH) when
// --timeout expires, when a rank fails (before it stops the others), and
// when gorun itself receives SIGQUIT (Ctrl-\), after which the job goes
// on. It writes them to --snapshot-dir (by default a new directory in
// TMPDIR), weft-snapshot-rankN.txt, and prints a summary: per rank what it
// waits in, or that it is in no MPI call or sent no snapshot; the cycle
// when ranks wait on each other (a rank in a point-to-point call waits for
// its peer, a rank in a collective for the members that have not begun
// it); for each collective ranks wait in, the members not in it and where
// they are, the usual culprit; and the ranks not in MPI.
//
//	gorun -n 4 --timeout 1m ./solver
//	...
//	gorun: deadlock: ranks wait on each other in a cycle 0 → 3 → 0: rank 0 waits in Barrier (collective #1 on communicator 0) for rank 3; rank 3 waits in Recv from rank 0, tag 7, communicator 0
//	gorun: not in Barrier (collective #1 on communicator 0), which rank(s) 0,1,2 wait in: rank 3 (waits in Recv from rank 0, tag 7, communicator 0)
package main
