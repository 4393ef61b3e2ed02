package mpi

import (
	"os"
	"os/signal"

	"github.com/weft-hpc/weft/internal/pmi"
)

// answerGorun makes this rank answer pmi.AskSignal (SIGWINCH), which
// gorun sends at --timeout, when a rank fails and on its own SIGQUIT, and a
// user may send a rank: when snapshots are on (Options.SnapshotDir, or
// gorun's pmi.SnapshotEnv) the rank writes its snapshot (snapshot.go);
// when gorun said so through AskEnv it answers gorun's question of what it
// waits for: pmi.AnswerPrefix and waitingCall() (empty when it is not
// blocked in an MPI call) as one line to its standard error, which gorun
// reads, after the snapshot's lines and in the same write. It returns
// what stops answering, for Finalize; after it the signal is ignored
// again (its default), and gorun reports no answer.
//
// What the rank waits for is read from the answering goroutine, as tests
// read Waiting from theirs: the request it names stays as it is for as
// long as the rank is blocked on it, which is when the answer matters.
func (w *World) answerGorun() func() error {
	ask := os.Getenv(pmi.AskEnv) == "1"
	w.snap.gorun = os.Getenv(pmi.SnapshotEnv) == "1"
	if !ask && !w.snap.on() {
		return func() error { return nil }
	}
	asks := make(chan os.Signal, 1)
	signal.Notify(asks, pmi.AskSignal)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range asks {
			var snap []byte
			if w.snap.on() {
				snap = w.snapshot("signal: SIGWINCH", nil) // pmi.AskSignal
			}
			answer := ""
			if ask {
				answer = pmi.AnswerPrefix + w.waitingCall() + "\n"
			}
			w.writeSnapshot(snap, answer)
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
	return w.describeNote(r)
}

// describeNote is waitingCall for the wait r notes.
func (w *World) describeNote(r *waitNote) string {
	what := r.describe()
	if c := r.comm; r.ctx&1 != 0 && c != nil && (r.op == "Send" || r.op == "Recv") {
		if w0, w1, ok := c.coll.sig(c.coll.seq.Load()); ok {
			what = describeSig(w0, w1) + ", step " + what
		}
	}
	return what
}
