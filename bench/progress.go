package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress is rank 0's one-line status on standard error while a run
// goes: which size, how many are done, for how long. It is drawn only on
// a terminal, so that logs and pipes (gorun's, CI's) stay clean. A nil
// *progress shows nothing.
type progress struct {
	w     io.Writer
	start time.Time
}

// newProgress returns a progress line on f when f is a terminal, else nil.
func newProgress(f *os.File) *progress {
	if !isTerminal(f) {
		return nil
	}
	return &progress{w: f, start: time.Now()}
}

// step shows that size, the i-th of n, is starting.
func (p *progress) step(bench string, i, n, size int) {
	if p == nil {
		return
	}
	// \r and erase-line redraw the line in place.
	fmt.Fprintf(p.w, "\r\x1b[Kbench %s: size %s (%d/%d), %s elapsed", bench, formatSize(size), i+1, n,
		time.Since(p.start).Round(time.Second))
}

// clear erases the line, leaving the terminal as it was: before a table
// row is printed, since stdout is often the same terminal.
func (p *progress) clear() {
	if p == nil {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
}
