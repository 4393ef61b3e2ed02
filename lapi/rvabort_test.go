package lapi

import (
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// abortRec records an AbortHandler's calls.
type abortRec struct {
	completed, aborted int
	err                error
}

func (a *abortRec) OnHeader(_ hal.Rank, _ []byte, n int) ([]byte, any) { return make([]byte, n), a }
func (a *abortRec) OnComplete(hal.Rank, any)                           { a.completed++ }
func (a *abortRec) OnAbort(_ hal.Rank, _ any, err error)               { a.aborted++; a.err = err }

// TestRendezvousReadFailsAborts: a message sent by rendezvous whose read
// fails at the target (the sender's buffer deregistered before the read:
// the key check refuses it) is aborted at the target, OnAbort with the
// read's error, instead of neither OnComplete nor OnAbort ever coming (a
// receive above it waited for ever), and the sender hears the failure.
func TestRendezvousReadFailsAborts(t *testing.T) {
	j := openSimJob(t, 2, faults.Spec{}, func(c *Config) { c.AMRendezvous = 1024 })
	defer j.close()
	rec := &abortRec{}
	id := j.ctxs[0].RegisterHandler(rec)
	j.ctxs[1].RegisterHandler(rec)
	k := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Amsend(1, id, nil, make([]byte, 8192), SendOpts{Origin: k}); err != nil {
		t.Fatal(err)
	}
	for _, e := range j.ctxs[0].TPT().Entries() { // the rendezvous' registration of the data
		if err := j.ctxs[0].TPT().Deregister(hal.PVO{Entry: e.Entry, Key: e.Key}); err != nil {
			t.Fatal(err)
		}
	}
	j.run(time.Minute, nil, func() bool { return rec.aborted+rec.completed > 0 && k.err != nil })
	if rec.aborted != 1 || rec.completed != 0 || !errors.Is(rec.err, ErrProtection) {
		t.Fatalf("target: OnAbort %d times (err %v), OnComplete %d times; want one abort with a protection error", rec.aborted, rec.err, rec.completed)
	}
}
