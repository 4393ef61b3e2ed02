package pmi

import "sync"

// barrier is the server side of a fence: a reusable barrier over n ranks
// that can be broken. Once a rank can never arrive again (it finalized,
// aborted, lost its connection or exited), waiting ranks are released with
// the reason instead of hanging until the launcher's timeout.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	cur     *round
	broken  error
}

// round is one use of the barrier. done is closed when it completes or
// breaks; err is then set (nil on completion).
type round struct {
	done chan struct{}
	err  error
}

func newBarrier(n int) *barrier {
	return &barrier{n: n, cur: &round{done: make(chan struct{})}}
}

// enter counts one arrival and returns the round to wait on.
func (b *barrier) enter() *round {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.cur
	if b.broken != nil {
		return failedRound(b.broken)
	}
	b.arrived++
	if b.arrived >= b.n {
		close(r.done)
		b.arrived = 0
		b.cur = &round{done: make(chan struct{})}
	}
	return r
}

// breakWith makes every later round fail with err. The current round fails
// too unless stillComplete: a rank that had already arrived in it when it
// left still lets it complete.
func (b *barrier) breakWith(err error, stillComplete bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken == nil {
		b.broken = err
	}
	if !stillComplete && b.arrived > 0 {
		b.cur.err = err
		close(b.cur.done)
		b.arrived = 0
		b.cur = &round{done: make(chan struct{})}
	}
}

func failedRound(err error) *round {
	r := &round{done: make(chan struct{}), err: err}
	close(r.done)
	return r
}
