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
//	            giving up on a peer that never answered, a stripe's member
//	            taken out (and why) and back in; the user's marks
//	2 Setup     entry and exit of setup and teardown (Init, Open, Finalize),
//	            each device with its counters at the end
//	3 Internal  recovery and protocol steps, off the per-packet path:
//	            retransmission timeouts with the new RTO, hole repairs, the
//	            RTO back after a back-off, RDMA redrives with the new tid and
//	            timeout, protection faults with the check that failed,
//	            reintegration steps (BOOTING, BOOT_ACK, RDMA_READY sent and
//	            received, a peer's state cleared, RDMA enabled), rendezvous
//	            start and finish; each MPI collective's begin and end (its
//	            number on the communicator, bytes, root, time, error)
//	4 Hot       per packet: packets dropped (duplicate, stale epoch or tid,
//	            bad CRC, malformed), acknowledgements sent and received,
//	            RDMA transfers started and finished; MPI matching (a
//	            message matched, queued as unexpected or held back, a
//	            receive posted or taking an unexpected message)
//	5 HotDetail every frame sent and received
//	6-9 Dump    dumps: frames, tables, queues, in growing detail
//
// A hang is usually diagnosed at 3 (is anything being resent, to whom, and
// is the timeout growing? which collective has a rank begun and not
// ended?), a slow run at 3 or 4; 5 is for a few frames. lapi's, mpi's and
// the devices' lines name the rank that wrote them ("lapi 2: ..."), since
// the ranks of mpi.Run share a process and so its prefix.
//
// The level starts from the WEFT_TRACE environment variable (a number 0-9,
// or "off"; unset means 0, errors only) and can be changed while the program
// runs with SetLevel. A malformed WEFT_TRACE leaves the level at 0, and is
// not printed: mpi.Init and mpi.Run refuse it (mpi.OptionsFromEnv), and
// FromEnv returns the error for any other caller that wants to fail on it.
//
// # Changing the level of a running job
//
// From mpi.Init to Finalize a rank handles two signals (HandleSignals):
// SIGUSR1 raises its level by one, SIGUSR2 lowers it by one (to "off"
// below 0), as ntpd's debug level is changed, and each change is said in a
// line written whatever the level: "trace: level 3 (was 2): user defined
// signal 1". So
//
//	kill -USR1 PID            one rank, one level up
//	kill -USR1 GORUN_PID      every rank of the job, one level up
//
// since gorun forwards SIGUSR1 and SIGUSR2 to every rank it started, over
// ssh too (as mpirun does), to the rank's process alone: a process the rank
// started, not a Go program, would die of them. Each signal is one step;
// to go from 0 to 4, send four, a moment apart (signals sent at once may
// arrive as one). A Go program ignores both signals while it does not
// handle them, so a rank before Init or after Finalize is left as it was
// (and keeps its level); a rank that is not a Go program dies of them.
//
// # Marks
//
// Mark writes "mark RANK: TEXT (wall HH:MM:SS.UUUUUU)" at level 1 and up,
// the text the user's, the wall clock in UTC: a place in the user's code
// found in the trace (mpi's World.Mark is the user's way to it). The wall
// clock lines up the traces of processes started at different times or on
// different hosts, whose stamps count from their own starts.
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
// writer (standard error unless SetWriter says otherwise), of the form
//
//	weft[RANK] SECONDS COMPONENT[ RANK]: TEXT
//	weft[2] 12.004517 lapi 2: retransmit timeout to rank 1: seq 7 resent (try 1), rto now 2ms (backoff 1)
//
// RANK is the process's rank once SetRank has named it ("?" before, and in
// a process that runs several ranks as goroutines, mpi.Run's). SECONDS is
// the time since the process started, on the monotonic clock, to the
// microsecond: it never goes backwards from line to line, and a clock
// step does not move it. COMPONENT is the first word of the message, which
// every trace point writes: the layer or device that traced, and when it
// may run beside other ranks in one process, the rank it traced for:
//
//	mpi     package mpi (Init, Finalize, collectives, matching)
//	lapi    the reliable layer, RDMA, rendezvous, reintegration
//	shm udp inproc verbs stripe route
//	        the devices (hal's implementations)
//	trace   this package (a level changed by a signal)
//	mark    a user's mark
//
// so that grep " lapi " picks one layer out. Lines from concurrent
// goroutines do not interleave.
//
// The level, writer and rank are process-wide: tracing is a property of the
// process, like the standard log package's default logger, and a level that
// had to be passed down every call chain would not be switched on when it is
// needed.
package trace
