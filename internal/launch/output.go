package launch

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// Output of the ranks. Each rank's stdout and stderr arrive on pipes and are
// copied line by line, each line in one Write under one lock shared by all
// ranks and both streams, so that lines of different ranks never mix in the
// middle. A line longer than maxOutLine is passed on in pieces of that size,
// each ended by a newline (a rank printing megabytes without a newline must
// not make gorun hold it all). A last line without a newline gets one, so
// that the next line starts on its own.

const maxOutLine = 64 << 10

// rankPipe is the read end of a rank's stdout or stderr. It records since
// when its copy has been waiting for input, which tells drain a pipe that a
// process holds open without writing (its copy waits) from one whose copy
// is slow because gorun's own stdout is (its copy is writing).
type rankPipe struct {
	*os.File
	stream    string       // "stdout" or "stderr", for messages
	readSince atomic.Int64 // UnixNano when the pending Read began; 0: none pending
	closed    bool         // closed by drain (only drain touches it)
}

// Read implements io.Reader, recording when it waits.
func (p *rankPipe) Read(b []byte) (int, error) {
	p.readSince.Store(time.Now().UnixNano())
	n, err := p.File.Read(b)
	p.readSince.Store(0)
	return n, err
}

// waited is how long the pending Read has been waiting since t or since it
// began, whichever is later; 0 when no Read is pending.
func (p *rankPipe) waited(t time.Time) time.Duration {
	since := p.readSince.Load()
	if since == 0 {
		return 0
	}
	return time.Duration(time.Now().UnixNano() - max(since, t.UnixNano()))
}

// outputMux serialises whole lines onto gorun's stdout and stderr.
type outputMux struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	tag    bool
	// answers, when not nil, receives the ranks' answers to gorun's
	// question of what they wait for (report.go), which are taken out of
	// their stderr; one that finds it full is dropped (gorun reads it
	// until the ranks have exited, and asks once).
	answers chan answer
	// stats, when not nil (--stats), receives the ranks' counter lines,
	// which are taken out of their stderr (stats.go).
	stats *statsTable
	// snaps, when not nil, receives the ranks' state snapshots, which
	// are taken out of their stderr (snapshot.go).
	snaps *snapshots
}

// answer is a rank's answer to gorun's question: what World.Waiting said,
// "" when the rank was not blocked in an MPI call.
type answer struct {
	rank    int
	waiting string
}

// tailLines keeps a rank's last stderr lines for failure reports (an ssh
// error, a panic's first line).
type tailLines struct {
	mu    sync.Mutex
	lines []string
}

const tailKeep = 8

func (t *tailLines) add(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == tailKeep {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, string(line))
}

func (t *tailLines) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// copyLines copies r to the mux until EOF (or a read error), as rank's
// stdout (stderr=false) or stderr; stderr lines also go to tail if non-nil.
func (m *outputMux) copyLines(r io.Reader, rank int, stderr bool, tail *tailLines) {
	w := m.stdout
	if stderr {
		w = m.stderr
	}
	var prefix []byte
	if m.tag {
		prefix = []byte("[" + strconv.Itoa(rank) + "] ")
	}
	br := bufio.NewReaderSize(r, maxOutLine)
	buf := make([]byte, 0, 256)
	for {
		chunk, err := br.ReadSlice('\n')
		if stderr && m.snaps != nil {
			chunk = m.snaps.take(chunk, rank)
		}
		if stderr && m.answers != nil {
			chunk = m.takeAnswer(chunk, rank)
		}
		if stderr && m.stats != nil {
			chunk = m.stats.take(chunk, rank)
		}
		if len(chunk) > 0 {
			buf = append(append(buf[:0], prefix...), chunk...)
			if buf[len(buf)-1] != '\n' {
				buf = append(buf, '\n') // a piece of a long line, or a last line without newline
			}
			m.mu.Lock()
			_, _ = w.Write(buf) // gorun's own stdout closed: nothing to do but go on draining
			m.mu.Unlock()
			if tail != nil {
				tail.add(buf[len(prefix) : len(buf)-1])
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// takeAnswer passes on rank's answer if line holds one, and returns what
// precedes it on the line: output of the rank's own that had no newline
// yet when the answer was written.
func (m *outputMux) takeAnswer(line []byte, rank int) []byte {
	i := bytes.Index(line, []byte(pmi.AnswerPrefix))
	if i < 0 {
		return line
	}
	a := answer{rank: rank, waiting: strings.TrimSuffix(string(line[i+len(pmi.AnswerPrefix):]), "\n")}
	select {
	case m.answers <- a:
	default:
	}
	return line[:i]
}

// say writes one of gorun's own messages to stderr, whole.
func (m *outputMux) say(line string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = io.WriteString(m.stderr, "gorun: "+line+"\n")
}
