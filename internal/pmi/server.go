package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
)

// ServerConfig describes the job a Server serves.
type ServerConfig struct {
	// Size is the number of ranks; required.
	Size int
	// KVSName is the job's key-value space name, answered to
	// get_my_kvsname and job-getid. Default "weft_kvs".
	KVSName string
	// ProcessMapping is the PMI_process_mapping value (see
	// FormatProcessMapping). Default: every rank on node 0.
	ProcessMapping string
	// OnEvent, if set, is called for every Event, from the goroutine serving
	// the rank's connection. It must not block for long.
	OnEvent func(Event)
	// Trace, if set, receives every wire message (dir "->" for requests,
	// "<-" for replies) for debugging a foreign PMI client.
	Trace func(rank int, dir, message string)
}

// EventKind says what happened to a rank's PMI connection.
type EventKind int

// Event kinds.
const (
	// EventInit: the rank sent init; from now on it must finalize.
	EventInit EventKind = iota
	// EventFence: the rank entered a fence (barrier_in / kvs-fence).
	EventFence
	// EventFinalize: the rank finalized cleanly.
	EventFinalize
	// EventAbort: the rank asked to kill the job with exit code Code.
	EventAbort
	// EventLost: the connection closed, or failed, before finalize.
	EventLost
	// EventProtocol: the rank sent a message the server could not serve
	// (malformed or unsupported); it got an error reply. Err says why.
	EventProtocol
)

// String names the kind for reports.
func (k EventKind) String() string {
	switch k {
	case EventInit:
		return "init"
	case EventFence:
		return "fence"
	case EventFinalize:
		return "finalize"
	case EventAbort:
		return "abort"
	case EventLost:
		return "lost"
	case EventProtocol:
		return "protocol-error"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is something a rank did on its PMI connection. Rank is -1 when the
// connection had not yet said which rank it is.
type Event struct {
	Kind EventKind
	Rank int
	Code int    // EventAbort: requested exit code
	Msg  string // EventAbort: message (PMI-2 only)
	Err  error  // EventLost, EventProtocol: cause
}

// Phase is where a rank is in the PMI life cycle, for reports.
type Phase int

// Phases, in life-cycle order.
const (
	PhaseNotConnected Phase = iota
	PhaseConnected
	PhaseInitialized
	PhaseInFence
	PhaseFinalized
	PhaseAborted
	PhaseLost
	PhaseExited
)

// String describes the phase for reports.
func (p Phase) String() string {
	return [...]string{"not connected", "connected", "initialized", "in fence",
		"finalized", "aborted", "connection lost before finalize",
		"exited before finalize"}[p]
}

// RankState is a rank's PMI state, for the launcher's reports.
type RankState struct {
	Rank    int
	Phase   Phase
	Fences  int    // fences completed
	LastCmd string // last command received
}

// Server is the PMI-1 server gorun runs for its ranks: one key-value space,
// fences over all ranks, PMI_process_mapping, and the life-cycle events the
// launcher needs (finalize, abort, lost connection). Local ranks connect
// through an inherited socketpair (Serve, PMI_FD mode); remote ranks over TCP
// (Listen, PMI_PORT+PMI_ID mode). It also answers the PMI-2 subset weft's
// client uses, so WEFT_PMI=2 works under gorun too.
type Server struct {
	cfg     ServerConfig
	barrier *barrier

	mu        sync.Mutex
	kv        map[string]string
	nodeAttr  map[string]string
	ranks     []RankState
	claimed   []bool // a connection has said it is this rank
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	closed    bool

	wg sync.WaitGroup
}

// NewServer returns a server for cfg.Size ranks.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Size <= 0 {
		return nil, fmt.Errorf("pmi: server for %d ranks: size must be positive", cfg.Size)
	}
	if cfg.KVSName == "" {
		cfg.KVSName = "weft_kvs"
	}
	if cfg.ProcessMapping == "" {
		cfg.ProcessMapping = FormatProcessMapping(make([]int, cfg.Size))
	}
	s := &Server{
		cfg:      cfg,
		barrier:  newBarrier(cfg.Size),
		kv:       make(map[string]string),
		nodeAttr: make(map[string]string),
		ranks:    make([]RankState, cfg.Size),
		claimed:  make([]bool, cfg.Size),
		conns:    make(map[net.Conn]struct{}),
	}
	for i := range s.ranks {
		s.ranks[i].Rank = i
	}
	return s, nil
}

// Serve serves one rank's connection (PMI_FD mode: the rank is known from
// the socket it was given) until it closes, then closes it.
func (s *Server) Serve(rank int, c net.Conn) {
	if rank < 0 || rank >= s.cfg.Size {
		c.Close()
		s.event(Event{Kind: EventProtocol, Rank: rank, Err: fmt.Errorf("%w: no rank %d in a job of %d", ErrProtocol, rank, s.cfg.Size)})
		return
	}
	if !s.track(c) {
		return
	}
	ss := &session{s: s, c: c, r: bufio.NewReader(c), rank: -1}
	if err := ss.claim(rank); err != nil {
		s.untrack(c)
		s.event(Event{Kind: EventProtocol, Rank: rank, Err: err})
		return
	}
	ss.run()
}

// Listen accepts ranks over TCP (PMI_PORT mode) on address, which should
// name port 0 so that the kernel picks a free port. It returns the bound
// address to publish in PMI_PORT. Call it once per address ranks reach this
// host by.
func (s *Server) Listen(network, address string) (net.Addr, error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("pmi: server listening on %s: %w", address, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil, fmt.Errorf("pmi: server listening on %s: %w", address, net.ErrClosed)
	}
	s.listeners = append(s.listeners, l)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed by Close
			}
			if !s.track(c) {
				return
			}
			go (&session{s: s, c: c, r: bufio.NewReader(c), rank: -1}).run()
		}
	}()
	return l.Addr(), nil
}

// RankExited tells the server that rank's process is gone. If it had not
// finalized, fences that wait for it fail instead of hanging.
func (s *Server) RankExited(rank int) {
	s.mu.Lock()
	if rank < 0 || rank >= len(s.ranks) {
		s.mu.Unlock()
		return
	}
	st := &s.ranks[rank]
	gone := st.Phase < PhaseFinalized
	inFence := st.Phase == PhaseInFence
	if gone {
		st.Phase = PhaseExited
	}
	s.mu.Unlock()
	if gone {
		s.barrier.breakWith(fmt.Errorf("rank %d exited before finalize", rank), inFence)
	}
}

// States returns every rank's PMI state.
func (s *Server) States() []RankState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RankState(nil), s.ranks...)
}

// Close stops listening, closes every connection and waits for the
// goroutines serving them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	ls, cs := s.listeners, s.conns
	s.listeners, s.conns = nil, map[net.Conn]struct{}{}
	s.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	for c := range cs {
		c.Close()
	}
	s.barrier.breakWith(errors.New("PMI server shut down"), false)
	s.wg.Wait()
	return errors.Join(errs...)
}

// track registers a connection so that Close can end it; every tracked
// connection is untracked exactly once, by the goroutine serving it.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
	s.wg.Done()
}

func (s *Server) event(e Event) {
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(e)
	}
}

// setPhase records a rank's new phase (and last command).
func (s *Server) setPhase(rank int, p Phase, cmd string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.ranks[rank]
	if cmd != "" {
		st.LastCmd = cmd
	}
	if p == PhaseInitialized && st.Phase == PhaseInFence {
		st.Fences++
	}
	if p >= 0 && (st.Phase < PhaseFinalized || p > st.Phase) {
		st.Phase = p
	}
}

// session serves one connection. run owns its state and makes every
// write; readLoop only reads and parses, so that the connection is read
// while the rank waits in a fence: another goroutine of the rank may abort
// then (Client.Abort), and a connection that closes mid-fence must break
// the fence for the others at once, not once the fence is over.
type session struct {
	s    *Server
	c    net.Conn
	r    *bufio.Reader // read by readLoop only
	rank int           // -1 until the connection says (initack, fullinit) or Serve knew
	done bool

	// fence is the barrier round the rank waits in, nil outside a fence;
	// fenceFramed says whether it asked in PMI-2 (kvs-fence), which the
	// reply must match.
	fence       *round
	fenceFramed bool
}

// inbound is one message readLoop read, or why reading stopped.
type inbound struct {
	m      msg
	framed bool
	text   string // the message as read, for the trace
	bad    error  // malformed: answered with an error reply, then serving goes on
	err    error  // the connection closed or failed; nothing follows
}

// claim binds the session to rank; each rank connects once.
func (ss *session) claim(rank int) error {
	s := ss.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.cfg.Size {
		return fmt.Errorf("%w: no rank %d in a job of %d", ErrProtocol, rank, s.cfg.Size)
	}
	if s.claimed[rank] {
		return fmt.Errorf("%w: a second connection claims rank %d", ErrProtocol, rank)
	}
	s.claimed[rank] = true
	s.ranks[rank].Phase = max(s.ranks[rank].Phase, PhaseConnected)
	ss.rank = rank
	return nil
}

// run serves requests as they come, those that come while the rank waits
// in a fence too (as Hydra does), answers the fence when its round ends,
// and returns once the rank has finalized or aborted or its connection
// ended.
func (ss *session) run() {
	in := make(chan inbound)
	quit := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		ss.readLoop(in, quit)
	}()
	defer func() {
		close(quit)
		ss.c.Close() // ends a read in progress
		<-readerDone
		ss.s.untrack(ss.c)
	}()
	for !ss.done {
		var fenced <-chan struct{}
		if ss.fence != nil {
			fenced = ss.fence.done
		}
		var reply string
		select {
		case <-fenced:
			reply = ss.fenceOver()
		case m := <-in:
			if m.err != nil {
				if errors.Is(m.err, ErrProtocol) {
					ss.protocolError(m.err)
				}
				ss.lost(m.err)
				return
			}
			ss.trace("->", m.text)
			switch {
			case m.bad != nil:
				ss.protocolError(m.bad)
				reply = formatLine("error", "rc", "-1", "msg", "malformed_line")
				if m.framed {
					reply = formatFrame("error-response", "rc", "-1", "errmsg", "malformed_message")
				}
			case m.framed:
				reply = ss.handle2(m.m)
			default:
				reply = ss.handle1(m.m)
			}
		}
		if reply != "" {
			if err := ss.write(reply); err != nil {
				ss.lost(err)
				return
			}
		}
	}
}

// readLoop hands run every message of the connection, then the error that
// ended it, until run quits.
func (ss *session) readLoop(in chan<- inbound, quit <-chan struct{}) {
	for {
		m := ss.read()
		select {
		case in <- m:
		case <-quit:
			return
		}
		if m.err != nil {
			return
		}
	}
}

// read reads and parses the next message.
func (ss *session) read() inbound {
	head, err := ss.r.Peek(4)
	if err != nil {
		if len(head) > 0 && err == io.EOF {
			err = fmt.Errorf("%w: connection closed after %d stray bytes", ErrProtocol, len(head))
		}
		return inbound{err: err}
	}
	in := inbound{framed: string(head) != "cmd=" && string(head) != "mcmd"}
	if in.framed {
		in.text, err = readFrame(ss.r)
	} else {
		in.text, err = readLine(ss.r)
	}
	if err != nil {
		in.err = err
		return in
	}
	if in.framed {
		in.m, in.bad = parseFrame(in.text)
	} else {
		in.m, in.bad = parseLine(in.text)
	}
	if in.bad == nil && in.m.cmd() == "spawn" && !in.framed {
		// mcmd=spawn ... endcmd: skip to the end of the multi-line command.
		for text := in.text; text != "endcmd"; {
			if text, err = readLine(ss.r); err != nil {
				in.err = err
				return in
			}
		}
	}
	return in
}

func (ss *session) write(s string) error {
	ss.trace("<-", s)
	_, err := io.WriteString(ss.c, s)
	return err
}

func (ss *session) trace(dir, text string) {
	if ss.s.cfg.Trace != nil {
		ss.s.cfg.Trace(ss.rank, dir, strings.TrimSuffix(text, "\n"))
	}
}

func (ss *session) protocolError(err error) {
	ss.s.event(Event{Kind: EventProtocol, Rank: ss.rank, Err: err})
}

// lost handles the end of the connection without finalize. A rank that
// never sent init (a program that does not use PMI, run under gorun) only
// closes quietly; one that did is reported. Either way it can never enter a
// fence again, so fences waiting for it fail.
func (ss *session) lost(err error) {
	if ss.done || ss.rank < 0 {
		if ss.rank < 0 && err != io.EOF {
			ss.protocolError(fmt.Errorf("unidentified connection from %s: %w", ss.c.RemoteAddr(), err))
		}
		return
	}
	s := ss.s
	s.mu.Lock()
	st := &s.ranks[ss.rank]
	wasInFence := st.Phase == PhaseInFence
	used := st.Phase >= PhaseInitialized && st.Phase < PhaseFinalized
	if used {
		st.Phase = PhaseLost
	}
	s.mu.Unlock()
	if err == io.EOF {
		err = errors.New("closed its PMI connection before finalize")
	} else {
		err = fmt.Errorf("PMI connection failed before finalize: %w", err)
	}
	if used {
		// The event first: a launcher must learn of the loss before any
		// rank can fail because of the broken fence.
		s.event(Event{Kind: EventLost, Rank: ss.rank, Err: err})
	}
	s.barrier.breakWith(fmt.Errorf("rank %d %v", ss.rank, err), wasInFence)
}

// enterFence enters the rank in the barrier; run answers once the round
// ends (fenceOver). It returns "" or, for a second fence while one waits,
// the error reply.
func (ss *session) enterFence(framed bool) string {
	s := ss.s
	if ss.fence != nil {
		err := fmt.Errorf("%w: a second fence while rank %d waits in one", ErrProtocol, ss.rank)
		if framed {
			return ss.reject2("kvs-fence", err)
		}
		return ss.reject1("barrier_in", err)
	}
	s.setPhase(ss.rank, PhaseInFence, "")
	s.event(Event{Kind: EventFence, Rank: ss.rank})
	ss.fence, ss.fenceFramed = s.barrier.enter(), framed
	return ""
}

// fenceOver returns the reply to the fence whose round has ended.
func (ss *session) fenceOver() string {
	r := ss.fence
	ss.fence = nil
	ss.s.setPhase(ss.rank, PhaseInitialized, "")
	switch {
	case ss.fenceFramed && r.err != nil:
		return formatFrame("kvs-fence-response", "rc", "-1", "errmsg", r.err.Error())
	case ss.fenceFramed:
		return formatFrame("kvs-fence-response", "rc", "0")
	case r.err != nil:
		return formatLine("barrier_out", "rc", "-1", "msg", safe(r.err.Error()))
	}
	return formatLine("barrier_out")
}

// finish records finalize or abort and ends the session.
func (ss *session) finish(p Phase, e Event) {
	s := ss.s
	s.setPhase(ss.rank, p, "")
	ss.done = true
	why := "finalized"
	if p == PhaseAborted {
		why = "aborted"
	}
	// The event first: the launcher must hear of an abort before any rank
	// can fail because of the fence it breaks.
	s.event(e)
	s.barrier.breakWith(fmt.Errorf("rank %d already %s", ss.rank, why), false)
}

// lookup returns a key's value, or the predefined job attribute.
func (s *Server) lookup(key string) (string, bool) {
	if key == "PMI_process_mapping" {
		return s.cfg.ProcessMapping, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	return v, ok
}

// put checks a put request against the limits the server announces (where
// Hydra would truncate silently) and stores it in kv. It returns "" or the
// reason for refusing, which is also reported as a protocol event.
func (ss *session) put(kv map[string]string, m msg) string {
	key, value := m["key"], m["value"]
	why := ""
	switch {
	case key == "":
		why = "missing_key"
	case len(key) > wireKeyMax:
		why = "key_too_long"
	case len(value) > wireValMax:
		why = "value_too_long"
	}
	if why != "" {
		ss.protocolError(fmt.Errorf("%w: put of key %q refused: %s", ErrProtocol, clip(key), why))
		return why
	}
	s := ss.s
	s.mu.Lock()
	defer s.mu.Unlock()
	kv[key] = value
	return ""
}

// safe makes text usable as a PMI-1 reply value (no spaces).
func safe(text string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == ';' || r == '=' {
			return '_'
		}
		return r
	}, text)
}
