package mpi

import (
	"time"

	"github.com/weft-hpc/weft/internal/trace"
)

// mpi's trace points, by level (WEFT_TRACE; see internal/trace), each line
// naming this world's rank ("mpi 2: ..."), since the ranks of Run share a
// process and its prefix:
//
//	1 marks (World.Mark)
//	2 Init and Finalize: the device, its counters at the end
//	3 each collective's begin and end: call, bytes per rank, root,
//	  communicator (context and size), its number on the communicator,
//	  how long it took and its error
//	4 matching (match.go): a message matched to a posted receive, queued
//	  as unexpected, or held back behind an earlier one from its sender;
//	  a receive posted, or taking an unexpected message
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

// traceCollective is collective (agree.go) with its begin and end traced
// at level 3. Each collective's entry point calls it instead when
// trace.On(trace.Internal), so that tracing off costs that one load:
//
//	mpi 2: barrier #7 begins on communicator 0 (4 ranks): 0 bytes per rank, root 0
//	mpi 2: barrier #7 ends after 41µs: ok
//
// The number is the collective's on its communicator (the same on every
// member), which pairs one rank's lines with another's.
func (c *Comm) traceCollective(name string, kind uint8, op Op, root, n int, body func() error) error {
	seq := c.coll.seq.Load() + 1
	trace.Printf(trace.Internal, "mpi %d: %s #%d begins on communicator %d (%d ranks): %d bytes per rank, root %d",
		c.w.rank, name, seq, c.ctx, c.size, n, root)
	start := time.Now()
	err := c.collective(name, kind, op, root, n, body)
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	trace.Printf(trace.Internal, "mpi %d: %s #%d ends after %v: %s", c.w.rank, name, seq, time.Since(start), result)
	return err
}
