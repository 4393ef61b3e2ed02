package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// gatedWriter is a stdout that takes nothing until open is closed, as
// `gorun ... | less` before the user scrolls: each Write blocks until then.
type gatedWriter struct {
	open chan struct{}
	buf  lockedBuffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	return g.buf.Write(p)
}

// TestGorunSlowStdoutKeepsOutput: when gorun's own stdout is slow (a
// pager, a slow pipe), the ranks' last output is still in their pipes when
// they exit, longer than drainWait; gorun passes it all on. drain closes a
// pipe only when its copy waits for input drainWait after the SIGKILL of
// the rank's group, not while the copy is writing: closing it at drainWait
// would drop what is still in the pipe (up to its 64 KiB) without a word.
func TestGorunSlowStdoutKeepsOutput(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	rank := filepath.Join(dir, "talker")
	const lines = 1500 // about 45 KB: less than a pipe holds (gorun takes the first line, then blocks), so the rank can end
	os.WriteFile(rank, []byte("#!/bin/sh\ni=0\nwhile [ $i -lt "+strconv.Itoa(lines)+" ]; do echo \"line $i of the rank's output\"; i=$((i+1)); done\ntouch "+shellQuote(done)+"\n"), 0o755)
	out := &gatedWriter{open: make(chan struct{})}
	var errb lockedBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"-n", "1", rank}, out, &errb) }()
	// Hold gorun's stdout until the rank has written everything and
	// exited, and for 3 drainWait more: a pager whose user looks away.
	for deadline := time.Now().Add(jobWait); ; {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			close(out.open)
			t.Fatalf("the rank did not finish; stderr:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // polling for a file
	}
	time.Sleep(3 * drainWait) // the slow reader, not a race being hidden
	close(out.open)
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("status %d; stderr:\n%s", c, errb.String())
		}
	case <-time.After(jobWait):
		t.Fatalf("gorun did not end; stderr:\n%s", errb.String())
	}
	got := strings.Count(out.buf.String(), "\n")
	if got != lines {
		last := out.buf.String()
		if i := strings.LastIndexByte(strings.TrimSuffix(last, "\n"), '\n'); i >= 0 {
			last = last[i+1:]
		}
		t.Errorf("%d lines of the rank's %d reached gorun's stdout (the last: %q); stderr:\n%s", got, lines, last, errb.String())
	}
}

// TestGorunDrainClosesPipeHeldOutsideGroup: a process that left its rank's
// process group (setsid) and holds the rank's output open does not keep the
// job open: the SIGKILL of the group does not reach it, so drain closes the
// pipe once its copy has waited for input drainWait more, says so, and the
// job ends with the rank's output and status.
func TestGorunDrainClosesPipeHeldOutsideGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escaped.pid")
	rank := filepath.Join(dir, "escaper")
	os.WriteFile(rank, []byte("#!/bin/sh\nsetsid sleep 300 &\necho $! > "+shellQuote(pidFile)+"\necho rank done\n"), 0o755)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	var out, errb lockedBuffer
	code := make(chan int, 1)
	go func() { code <- run([]string{"-n", "1", "--trace", "1", rank}, &out, &errb) }()
	select {
	case c := <-code:
		if c != 0 || !strings.Contains(out.String(), "rank done") {
			t.Errorf("status %d, stdout %q; stderr:\n%s", c, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), "a process that left the group holds it") {
			t.Errorf("gorun did not say why it closed the rank's output; stderr:\n%s", errb.String())
		}
	case <-time.After(jobWait):
		t.Fatalf("gorun still running %v after its only rank exited; stderr:\n%s", jobWait, errb.String())
	}
}
