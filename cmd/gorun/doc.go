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
package main
