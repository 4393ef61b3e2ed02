package pmi

import "syscall"

// When gorun's --timeout expires it asks each rank what it is blocked on
// before stopping the job: it sends the rank AskSignal (to a remote rank
// through the wrapper on its host), and the rank writes one line to its
// standard error, AnswerPrefix followed by what it waits for (empty when
// it is not blocked in an MPI call), which gorun takes out of the rank's
// output and puts in its report. The line travels the way the rank's
// output does, so the question works over ssh as it does here.
const (
	// AskEnv is "1" in the environment of ranks that gorun --timeout
	// started: only they answer AskSignal (mpi.Init sets the handler up;
	// mpi.Run and singletons do not).
	AskEnv = "WEFT_GORUN_ASK"

	// AskSignal is SIGWINCH because its default action is to ignore it:
	// a rank that has no handler (before mpi.Init, after Finalize, not a
	// weft program) and whatever a rank started (gorun signals the rank's
	// process group) are left unharmed, where SIGUSR1 would kill them.
	AskSignal = syscall.SIGWINCH

	// AnswerPrefix starts a rank's answer line.
	AnswerPrefix = "weft-gorun-answer: "
)
