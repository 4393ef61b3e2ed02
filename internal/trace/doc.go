// Package trace is weft's leveled tracing: the serviceability switch that
// lets a user or a developer see what the runtime does without rebuilding it.
//
// # Levels
//
// A message has a level from 0 to 9 and is written when the current level is
// at least that high:
//
//	0 Error     errors the runtime cannot return to a caller
//	1 Rare      rare events: a peer declared failed (and why), reintegration
//	            giving up on a peer that never answered
//	2 Setup     entry and exit of setup and teardown (Init, Open, Finalize)
//	3 Internal  recovery and protocol steps, off the per-packet path:
//	            retransmission timeouts with the new RTO, hole repairs, the
//	            RTO back after a back-off, RDMA redrives with the new tid and
//	            timeout, protection faults with the check that failed,
//	            reintegration steps (BOOTING, BOOT_ACK, RDMA_READY sent and
//	            received, a peer's state cleared, RDMA enabled), rendezvous
//	            start and finish
//	4 Hot       per packet: packets dropped (duplicate, stale epoch or tid,
//	            bad CRC, malformed), acknowledgements sent and received,
//	            RDMA transfers started and finished
//	5 HotDetail every frame sent and received
//	6-9 Dump    dumps: frames, tables, queues, in growing detail
//
// A hang is usually diagnosed at 3 (is anything being resent, to whom, and
// is the timeout growing?), a slow run at 3 or 4; 5 is for a few frames.
// lapi's lines name the rank that wrote them ("lapi 2: ..."), since the
// ranks of mpi.Run share a process and so its prefix.
//
// The level starts from the WEFT_TRACE environment variable (a number 0-9,
// or "off"; unset means 0, errors only) and can be changed while the program
// runs with SetLevel. A malformed WEFT_TRACE is reported on the trace writer
// and leaves the level at 0; FromEnv returns the same error as a value for a
// caller (mpi.Init, gorun) that wants to fail on it.
//
// # Cost
//
// On is inlined into its caller and costs exactly one atomic load, so a hot
// path guards each message with it:
//
//	if trace.On(trace.Hot) {
//		trace.Printf(trace.Hot, "send %d bytes to %d", n, dst)
//	}
//
// The guard matters: the arguments of an unguarded Printf are converted to
// interfaces (and may be allocated) before Printf can look at the level.
//
// # Output
//
// Each message is one line, written with a single Write call to the trace
// writer (standard error unless SetWriter says otherwise), prefixed with
// "weft[RANK] " once SetRank has named this process's rank ("weft[?] "
// before). Lines from concurrent goroutines do not interleave.
//
// The level, writer and rank are process-wide: tracing is a property of the
// process, like the standard log package's default logger, and a level that
// had to be passed down every call chain would not be switched on when it is
// needed.
package trace
