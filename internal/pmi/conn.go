package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// DefaultWait is how long a client waits for any reply, a fence included,
// before failing with ErrTimeout, unless Discover is given another bound
// (mpi.Init passes WEFT_TIMEOUT's, which bounds every blocking call of the
// runtime). A fence waits for the slowest rank to arrive, so the limit is
// generous. gorun and Hydra end the job as soon as a rank dies; srun does
// only when run with -K (--kill-on-bad-exit), and otherwise the others wait
// here for the dead rank until the limit.
const DefaultWait = 5 * time.Minute

// wireConn is a client's connection to a PMI server: one request at a time,
// every wait bounded, every failure saying which server and which request.
type wireConn struct {
	c     net.Conn
	r     *bufio.Reader
	where string        // how the server was reached, e.g. "PMI_FD=3"
	wait  time.Duration // limit on every reply
	trace io.Writer     // wire trace (PMI_TRACE=1), or nil
	tag   string        // trace prefix
}

func newWireConn(c net.Conn, where string, wait time.Duration) *wireConn {
	if wait <= 0 {
		wait = DefaultWait
	}
	return &wireConn{c: c, r: bufio.NewReaderSize(c, 4096), where: where, wait: wait}
}

// send writes one complete message.
func (w *wireConn) send(s string) error {
	w.tracef("-> %s", strings.TrimSuffix(s, "\n"))
	_ = w.c.SetWriteDeadline(time.Now().Add(w.wait))
	if _, err := io.WriteString(w.c, s); err != nil {
		return w.ioErr("sending", firstWord(s), err)
	}
	return nil
}

// recvRaw reads one reply line to the request named what, unparsed.
func (w *wireConn) recvRaw(what string) (string, error) {
	_ = w.c.SetReadDeadline(time.Now().Add(w.wait))
	line, err := readLine(w.r)
	if err != nil {
		return "", w.ioErr("waiting for the reply to", what, err)
	}
	w.tracef("<- %s", line)
	return line, nil
}

// recvLine reads one PMI-1 reply to the request named what.
func (w *wireConn) recvLine(what string) (msg, error) {
	line, err := w.recvRaw(what)
	if err != nil {
		return nil, err
	}
	m, err := parseLine(line)
	if err != nil {
		return nil, fmt.Errorf("reply to %s from %s: %w", what, w.where, err)
	}
	return m, nil
}

// recvFrame reads one PMI-2 reply to the request named what.
func (w *wireConn) recvFrame(what string) (msg, error) {
	_ = w.c.SetReadDeadline(time.Now().Add(w.wait))
	body, err := readFrame(w.r)
	if err != nil {
		return nil, w.ioErr("waiting for the reply to", what, err)
	}
	w.tracef("<- %s", body)
	m, err := parseFrame(body)
	if err != nil {
		return nil, fmt.Errorf("reply to %s from %s: %w", what, w.where, err)
	}
	return m, nil
}

// ioErr turns a connection error into one of the package's sentinels with
// the request and server named.
func (w *wireConn) ioErr(doing, what string, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		hint := ""
		if what == "barrier_in" || what == "kvs-fence" || what == "fence" {
			hint = " (not every rank has reached the fence: one may be stuck before it, or dead)"
		}
		return fmt.Errorf("%w: %s %s from the PMI server (%s): nothing within %v%s",
			ErrTimeout, doing, what, w.where, w.wait, hint)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrClosed):
		return fmt.Errorf("%w: the PMI server (%s) closed the connection while %s %s",
			ErrClosed, w.where, doing, what)
	case errors.Is(err, ErrProtocol):
		return fmt.Errorf("%s %s from %s: %w", doing, what, w.where, err)
	}
	return fmt.Errorf("%w: %s %s (%s): %v", ErrClosed, doing, what, w.where, err)
}

func (w *wireConn) tracef(format string, a ...any) {
	if w.trace != nil {
		fmt.Fprintf(w.trace, "[pmi %s] "+format+"\n", append([]any{w.tag}, a...)...)
	}
}

func (w *wireConn) close() error { return w.c.Close() }

// firstWord names a message by its command for error messages.
func firstWord(s string) string {
	s = strings.TrimLeft(s, "0123456789 ")
	s = strings.TrimPrefix(s, "cmd=")
	if i := strings.IndexAny(s, " ;\n"); i >= 0 {
		s = s[:i]
	}
	return s
}
