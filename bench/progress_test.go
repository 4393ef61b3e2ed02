package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p := newProgress(f); p != nil {
		t.Error("a progress line on a plain file; want none off a terminal")
	}
	var nilProgress *progress
	nilProgress.step("latency", 0, 1, 1) // must not panic
	nilProgress.clear()

	var b strings.Builder
	p := &progress{w: &b, start: time.Now()}
	p.step("bw", 2, 23, 64<<10)
	p.clear()
	if got := b.String(); !strings.Contains(got, "bench bw: size 64K (3/23)") || !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("progress wrote %q; want the size and count, then an erased line", got)
	}
}
