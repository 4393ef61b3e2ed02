package mpi

import (
	"strconv"

	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/lapi"
)

// arrival is a message that has begun to arrive: matched to a receive or
// waiting in the unexpected queue (or held back because an earlier message
// from the same sender has not arrived yet).
type arrival struct {
	env      envelope
	from     lapi.Rank // sender's world rank
	data     []byte    // where the eager data lands: the receive's buffer, or a temporary
	inPlace  bool      // data is the matched receive's own buffer
	complete bool      // all data has arrived, or never will (failed)
	failed   error     // its sender failed before all its data came
	req      *request  // matched receive, or nil
	next     *arrival
	// own is a temporary buffer kept across the arrival's reuse (up to
	// ownMax bytes), so that a small unexpected message costs no
	// allocation.
	own []byte
}

// ownMax is the largest temporary an arrival keeps when it is recycled.
const ownMax = 4 << 10

// temp returns a temporary buffer of n bytes for the arrival's data,
// reusing the one it kept.
func (a *arrival) temp(n int) []byte {
	if cap(a.own) < n {
		b := make([]byte, n)
		if n <= ownMax {
			a.own = b
		}
		return b
	}
	return a.own[:n]
}

// keep returns a copy of data, which must outlive the packet it came in,
// in a temporary buffer.
func (a *arrival) keep(data []byte) []byte {
	b := a.temp(len(data))
	copy(b, data)
	return b
}

// arrivalQueue is a FIFO of arrivals.
type arrivalQueue struct{ head, tail *arrival }

func (q *arrivalQueue) push(a *arrival) {
	a.next = nil
	if q.tail == nil {
		q.head = a
	} else {
		q.tail.next = a
	}
	q.tail = a
}

// take removes and returns the first arrival for which ok is true.
func (q *arrivalQueue) take(ok func(*arrival) bool) *arrival {
	var prev *arrival
	for a := q.head; a != nil; prev, a = a, a.next {
		if !ok(a) {
			continue
		}
		if prev == nil {
			q.head = a.next
		} else {
			prev.next = a.next
		}
		if q.tail == a {
			q.tail = prev
		}
		a.next = nil
		return a
	}
	return nil
}

func (q *arrivalQueue) find(ok func(*arrival) bool) *arrival {
	for a := q.head; a != nil; a = a.next {
		if ok(a) {
			return a
		}
	}
	return nil
}

// requestQueue is a FIFO of posted receives.
type requestQueue struct{ head, tail *request }

func (q *requestQueue) push(r *request) {
	r.next = nil
	if q.tail == nil {
		q.head = r
	} else {
		q.tail.next = r
	}
	q.tail = r
}

func (q *requestQueue) take(ok func(*request) bool) *request {
	var prev *request
	for r := q.head; r != nil; prev, r = r, r.next {
		if !ok(r) {
			continue
		}
		if prev == nil {
			q.head = r.next
		} else {
			prev.next = r.next
		}
		if q.tail == r {
			q.tail = prev
		}
		r.next = nil
		return r
	}
	return nil
}

// heldKey names a message that arrived before its predecessor.
type heldKey struct {
	from lapi.Rank
	seq  uint32
}

// matcher is MPI's matching state: posted receives, unexpected messages,
// and the per-sender sequence that keeps matching in send order. It does no
// I/O; the World calls it under lapi's progress lock (Context.Lock), which
// the message handlers that call it most hold already, and acts on what it
// returns. The arrivals it queues are the World's (w.mu): their
// OnComplete runs outside lapi's lock.
type matcher struct {
	rank       int // this world's rank, for trace lines
	posted     requestQueue
	unexpected arrivalQueue
	expect     []uint32 // per sender world rank: next sequence number to match
	held       map[heldKey]*arrival
}

func (m *matcher) init(rank, size int) {
	m.rank = rank
	m.expect = make([]uint32, size)
	m.held = make(map[heldKey]*arrival)
}

// arrive takes a message's first packet. It returns the arrivals that
// became matchable in sequence order (a, then any held successors), each
// either matched to a posted receive (a.req set) or queued as unexpected;
// an arrival ahead of its turn is held and nothing is returned for it.
// The caller decides where each arrival's data goes via place.
func (m *matcher) arrive(a *arrival, place func(*arrival)) {
	if a.env.seq != m.expect[a.from] {
		m.held[heldKey{a.from, a.env.seq}] = a
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "mpi %d: message %d from rank %d held back: message %d from it has not arrived", m.rank, a.env.seq, a.from, m.expect[a.from])
		}
		return
	}
	for {
		m.expect[a.from]++
		m.match(a)
		place(a)
		if len(m.held) == 0 {
			return
		}
		k := heldKey{a.from, m.expect[a.from]}
		next := m.held[k]
		if next == nil {
			return
		}
		delete(m.held, k)
		a = next
	}
}

// matchNext is arrive for a message that needs no arrival: next in its
// sender's order, with nothing held back that it would release. It
// returns the posted receive the message matches, or nil (the caller then
// queues it as unexpected); ok is false, and nothing has changed, when the
// message does not qualify and must go through arrive.
func (m *matcher) matchNext(env *envelope, from lapi.Rank) (r *request, ok bool) {
	if env.seq != m.expect[from] || len(m.held) > 0 {
		return nil, false
	}
	m.expect[from]++
	r = m.posted.take(func(r *request) bool { return env.matches(r.ctx, r.src, r.tag) })
	if trace.On(trace.Hot) {
		m.traceArrival(env, from, r != nil)
	}
	return r, true
}

func (m *matcher) match(a *arrival) {
	a.req = m.posted.take(func(r *request) bool { return a.env.matches(r.ctx, r.src, r.tag) })
	if a.req == nil {
		m.unexpected.push(a)
	}
	if trace.On(trace.Hot) {
		m.traceArrival(&a.env, a.from, a.req != nil)
	}
}

// traceArrival says, at level 4, whether a message that arrived in its
// turn matched a posted receive or waits as unexpected.
func (m *matcher) traceArrival(env *envelope, from lapi.Rank, matched bool) {
	what := "queued as unexpected: no receive posted for it"
	if matched {
		what = "matched a posted receive"
	}
	trace.Printf(trace.Hot, "mpi %d: message %d from rank %d (context %d, source %d, tag %d, %d bytes) %s",
		m.rank, env.seq, from, env.ctx, env.src, env.tag, env.size, what)
}

// post matches a new receive against the unexpected queue; it returns the
// arrival it takes, whose req the caller sets (under w.mu), or queues the
// receive and returns nil.
func (m *matcher) post(r *request) *arrival {
	a := m.unexpected.take(func(a *arrival) bool { return a.env.matches(r.ctx, r.src, r.tag) })
	if a == nil {
		m.posted.push(r)
	}
	if trace.On(trace.Hot) {
		what := "posted: no message for it yet"
		if a != nil {
			what = "took the unexpected message " + strconv.FormatUint(uint64(a.env.seq), 10) + " from rank " + strconv.Itoa(int(a.from))
		}
		trace.Printf(trace.Hot, "mpi %d: receive (context %d, source %d, tag %d) %s", m.rank, r.ctx, r.src, r.tag, what)
	}
	return a
}

// probe returns the first unexpected arrival a receive would take.
func (m *matcher) probe(ctx uint32, src, tag int) *arrival {
	return m.unexpected.find(func(a *arrival) bool { return a.env.matches(ctx, src, tag) })
}

// cancelPosted removes r from the posted queue; it reports whether r was there.
func (m *matcher) cancelPosted(r *request) bool {
	return m.posted.take(func(x *request) bool { return x == r }) != nil
}
