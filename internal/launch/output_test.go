package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer that records each Write separately, so a
// test can see what one Write carried.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	changed chan struct{} // closed at the next write (wait)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes++
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

// wait blocks until cond holds for what has been written, or ctx ends
// (false).
func (b *lockedBuffer) wait(ctx context.Context, cond func(string) bool) bool {
	for {
		b.mu.Lock()
		if cond(b.buf.String()) {
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOutputNoMidLineInterleave: ranks writing lines in tiny pieces at the
// same time still come out one whole line at a time, tagged.
func TestOutputNoMidLineInterleave(t *testing.T) {
	const ranks, lines = 4, 300
	out := &lockedBuffer{}
	m := &outputMux{stdout: out, stderr: io.Discard, tag: true}
	var wg sync.WaitGroup
	for r := range ranks {
		pr, pw := io.Pipe()
		wg.Go(func() { m.copyLines(pr, r, false, nil) })
		go func() {
			for i := range lines {
				// One byte-ish piece at a time: the worst case for mixing.
				for _, piece := range []string{fmt.Sprintf("rank %d ", r), "line ", fmt.Sprint(i), " ", strings.Repeat("x", 40), " end\n"} {
					io.WriteString(pw, piece)
				}
			}
			io.WriteString(pw, "no newline at the end")
			pw.Close()
		}()
	}
	wg.Wait()
	re := regexp.MustCompile(`^\[(\d)\] (rank (\d) line \d+ x{40} end|no newline at the end)$`)
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != ranks*(lines+1) {
		t.Fatalf("%d lines, want %d", len(got), ranks*(lines+1))
	}
	for _, line := range got {
		m := re.FindStringSubmatch(line)
		if m == nil || (m[3] != "" && m[1] != m[3]) {
			t.Fatalf("mixed or mistagged line %q", line)
		}
	}
}

func TestOutputLongLineAndTail(t *testing.T) {
	out := &lockedBuffer{}
	m := &outputMux{stdout: io.Discard, stderr: out}
	var tail tailLines
	long := strings.Repeat("y", maxOutLine+100) // two pieces
	input := "first\n" + long + "\n" + strings.Repeat("line\n", tailKeep) + "last"
	m.copyLines(strings.NewReader(input), 0, true, &tail)
	if got := out.String(); strings.Count(got, "\n") != 4+tailKeep || !strings.HasSuffix(got, "last\n") {
		t.Errorf("output has %d lines, ends %q", strings.Count(got, "\n"), got[max(0, len(got)-10):])
	}
	if tl := tail.get(); len(tl) != tailKeep || tl[len(tl)-1] != "last" {
		t.Errorf("tail %q", tl)
	}
}
