package mpi

import (
	"github.com/weft-hpc/weft/internal/trace"
)

// mpi's trace points, by level (WEFT_TRACE; see internal/trace), each line
// naming this world's rank ("mpi 2: ..."), since the ranks of Run share a
// process and its prefix:
//
//	1 marks (World.Mark)
//	2 Init and Finalize: the device, its counters at the end
//
// Every call site on a path a message takes is guarded by trace.On, so
// that a level that is off costs one atomic load.

// Mark writes a marker line to the trace at level 1 and up (WEFT_TRACE,
// gorun --trace; SIGUSR1 raises the level while the rank runs): "mark
// RANK: TEXT (wall HH:MM:SS.UUUUUU)", text formatted as fmt.Sprintf does,
// with the line's stamp (seconds since the process started) and the wall
// clock in UTC. Put one in your code where you want to find your place in
// a trace; marks every rank writes just after a Barrier line the ranks'
// traces up with each other. At level 0, the default, it writes nothing
// and costs one atomic load.
func (w *World) Mark(format string, args ...any) {
	if trace.On(trace.Rare) {
		trace.Mark(w.rank, format, args...)
	}
}

// traceAtInit sets up what Init's world does for tracing while it runs:
// SIGUSR1 and SIGUSR2 raise and lower the trace level (trace.HandleSignals),
// until Finalize, which is given the function that stops it (and says so at
// level 2).
func (w *World) traceAtInit() func() error {
	stop := trace.HandleSignals()
	return func() error {
		if trace.On(trace.Setup) {
			trace.Printf(trace.Setup, "mpi %d: finalize: trace-level signals no longer handled", w.rank)
		}
		stop()
		return nil
	}
}
