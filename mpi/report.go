package mpi

import (
	"os"
	"os/signal"

	"github.com/weft-hpc/weft/internal/pmi"
)

// answerGorun makes this rank answer gorun's question of what it waits
// for, asked when gorun --timeout expires (internal/pmi's AskSignal, set
// up only when gorun said so through AskEnv): on each question the rank
// writes pmi.AnswerPrefix and waitingCall() (empty when it is not blocked
// in an MPI call) as one line, in one write, to its standard error, which
// gorun reads. It returns what stops answering, for Finalize; after it
// the signal is ignored again (its default), and gorun reports no answer.
//
// What the rank waits for is read from the answering goroutine, as tests
// read Waiting from theirs: the request it names stays as it is for as
// long as the rank is blocked on it, which is when the answer matters.
func (w *World) answerGorun() func() error {
	if os.Getenv(pmi.AskEnv) != "1" {
		return func() error { return nil }
	}
	asks := make(chan os.Signal, 1)
	signal.Notify(asks, pmi.AskSignal)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range asks {
			// Nothing to do on a failed write: gorun, the only reader,
			// is gone or has stopped listening.
			_, _ = os.Stderr.WriteString(pmi.AnswerPrefix + w.waitingCall() + "\n")
		}
	}()
	return func() error {
		signal.Stop(asks) // no delivery to asks once it returns
		close(asks)
		<-done
		return nil
	}
}

// waitingCall is Waiting, and for a step of a collective sent as messages
// (a Send or Recv of the collective's context) the collective it is a step
// of, from its signature (agree.go): "Barrier, step Recv from rank 0, tag
// 257, communicator 0 (collective)". A wait through shared memory names
// its collective already.
func (w *World) waitingCall() string {
	r := w.waiting.Load()
	if r == nil {
		return ""
	}
	what := r.describe()
	if c := r.comm; r.ctx&1 != 0 && c != nil && (r.op == "Send" || r.op == "Recv") {
		if w0, w1, ok := c.coll.sig(c.coll.seq.Load()); ok {
			what = describeSig(w0, w1) + ", step " + what
		}
	}
	return what
}
