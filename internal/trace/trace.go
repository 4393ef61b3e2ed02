package trace

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Level is a trace level: 0 (errors) to 9 (the most detailed dumps).
type Level int32

// The named levels. Levels 6 to 9 are all dumps, Dump being the least verbose.
const (
	// Off is below every level: SetLevel(Off) silences even errors.
	Off Level = -1
	// Error reports errors the runtime cannot return to a caller.
	Error Level = 0
	// Rare reports rare events: a peer failed, reintegration gave up on one.
	Rare Level = 1
	// Setup reports entry to and exit from setup and teardown.
	Setup Level = 2
	// Internal reports recovery and protocol steps off the per-packet
	// path: retransmission timeouts, redrives, reintegration, protection
	// faults, rendezvous.
	Internal Level = 3
	// Hot reports per-packet events: drops, acknowledgements, RDMA
	// transfers.
	Hot Level = 4
	// HotDetail reports every frame sent and received.
	HotDetail Level = 5
	// Dump writes frames, tables and queues; 7 to 9 add detail.
	Dump Level = 6
	// Max is the most detailed level.
	Max Level = 9
)

// EnvVar is the environment variable the starting level is read from.
const EnvVar = "WEFT_TRACE"

// level is the current level. It is the only state On reads, so that a
// disabled message costs one atomic load.
var level atomic.Int32

// start is when the process started, as near as this package can tell (its
// initialisation, before main): line stamps count from it on the monotonic
// clock.
var start = time.Now()

// out serialises writes and holds what a line needs besides its text.
var out struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	line   []byte // reused under mu: writing a line does not allocate
}

// msgBufs holds buffers for formatting a message before out.mu is taken, so
// that an argument whose String method traces does not deadlock.
var msgBufs = sync.Pool{New: func() any { return new([]byte) }}

func init() {
	out.w = os.Stderr
	out.prefix = "weft[?] "
	// A malformed WEFT_TRACE leaves level 0 and is not printed here: the
	// rank's entry point refuses it with its other variables (mpi.Init and
	// mpi.Run, through mpi.OptionsFromEnv), and printing it here as well
	// said it twice.
	_ = FromEnv()
}

// On reports whether messages of level l are written. It is meant to guard
// the work of building a message on a hot path.
func On(l Level) bool { return int32(l) <= level.Load() }

// Get returns the current level.
func Get() Level { return Level(level.Load()) }

// SetLevel makes l the current level and returns the previous one. Levels
// outside Off..Max are clamped into that range rather than rejected, since a
// caller asking for more (or less) than exists means all (or nothing).
func SetLevel(l Level) Level {
	l = min(max(l, Off), Max)
	return Level(level.Swap(int32(l)))
}

// ParseLevel parses a level as WEFT_TRACE and gorun --trace write it: a
// number from 0 to 9, or "off". Surrounding spaces are ignored.
func ParseLevel(s string) (Level, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return Off, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < int(Error) || n > int(Max) {
		return Error, fmt.Errorf("trace: bad level %q: %s", s, wantLevel)
	}
	return Level(n), nil
}

// wantLevel is what a malformed level is told to be.
const wantLevel = `want a number from 0 to 9, or "off"`

// FromEnv sets the level from WEFT_TRACE. An unset or empty variable sets
// level 0. A malformed one leaves the level unchanged and returns an error
// that names the variable and its value.
func FromEnv() error {
	s, ok := os.LookupEnv(EnvVar)
	if !ok || strings.TrimSpace(s) == "" {
		SetLevel(Error)
		return nil
	}
	l, err := ParseLevel(s)
	if err != nil {
		return fmt.Errorf("trace: %s=%q: %s; tracing stays at level %d", EnvVar, s, wantLevel, Get())
	}
	SetLevel(l)
	return nil
}

// SetWriter makes w the trace writer and returns the previous one. A nil w
// restores standard error.
func SetWriter(w io.Writer) io.Writer {
	if w == nil {
		w = os.Stderr
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	prev := out.w
	out.w = w
	return prev
}

// Redirect sends trace output to w at level l, and returns what puts the
// previous writer and level back (a test's cleanup, typically). Both are
// process-wide: code that redirects must not run beside other tracing.
func Redirect(w io.Writer, l Level) (restore func()) {
	prevW, prevL := SetWriter(w), SetLevel(l)
	return func() {
		SetWriter(prevW)
		SetLevel(prevL)
	}
}

// SetRank makes every later line start with "weft[rank] ". A negative rank
// (not yet known) gives "weft[?] ".
func SetRank(rank int) {
	p := "weft[?] "
	if rank >= 0 {
		p = "weft[" + strconv.Itoa(rank) + "] "
	}
	out.mu.Lock()
	out.prefix = p
	out.mu.Unlock()
}

// Printf writes one line, formatted as fmt.Sprintf does, when level l is on.
// A newline is added unless the message ends with one; a message with
// newlines inside (a dump) carries the prefix on its first line only. Write
// errors are ignored: tracing must never fail the traced operation.
func Printf(l Level, format string, args ...any) {
	if !On(l) {
		return
	}
	bp := msgBufs.Get().(*[]byte)
	msg := fmt.Appendf((*bp)[:0], format, args...)
	if len(msg) == 0 || msg[len(msg)-1] != '\n' {
		msg = append(msg, '\n')
	}

	write(msg)
	if cap(msg) <= maxKeep {
		*bp = msg
		msgBufs.Put(bp)
	}
}

// maxKeep is the largest buffer kept for reuse: a dump can make a large
// one, and keeping it would pin the memory.
const maxKeep = 64 << 10

// write sends the prefix, the time since the process started and msg to
// the trace writer in one Write call. The time is read under the lock, so
// that the stamps of the lines written never go backwards.
func write(msg []byte) {
	out.mu.Lock()
	defer out.mu.Unlock() // a panicking writer must not leave tracing locked
	out.line = appendStamp(append(out.line[:0], out.prefix...), time.Since(start))
	out.line = append(append(out.line, ' '), msg...)
	_, _ = out.w.Write(out.line)
	if cap(out.line) > maxKeep {
		out.line = nil
	}
}

// appendStamp appends d as seconds with six decimals (microseconds), the
// form of a line's stamp: "12.000345".
func appendStamp(b []byte, d time.Duration) []byte {
	us := d.Microseconds()
	b = strconv.AppendInt(b, us/1e6, 10)
	frac := us % 1e6
	b = append(b, '.')
	for div := int64(1e5); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}
