package main

import (
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestLineState measures a real transfer between two CPUs: a figure that
// is not a positive number of ns under a hundred microseconds is a broken
// bounce (a peer that echoed nothing, or a division gone wrong).
func TestLineState(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linestate pins threads, which bench does on Linux only")
	}
	if runtime.NumCPU() < 2 {
		t.Skipf("linestate needs two CPUs; this process may use %d", runtime.NumCPU())
	}
	ns, a, b, err := lineState(nil, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("bounced between CPU %d and itself", a)
	}
	if math.IsNaN(ns) || ns <= 1 || ns >= 1e5 {
		t.Errorf("%v ns one way between CPUs %d and %d: want 1-100000", ns, a, b)
	}
	t.Logf("%.1f ns one way between CPUs %d and %d", ns, a, b)
}

// TestLineStateErrors: a bad command line is a usage error, a CPU the
// process may not use an error naming it; neither hangs.
func TestLineStateErrors(t *testing.T) {
	for _, args := range [][]string{{"-cpus", "0,0"}, {"-cpus", "1"}, {"-cpus", "x,1"}, {"-cpus", "-1,2"}, {"-d", "0"}, {"extra"}} {
		err := lineStateMain(args, io.Discard, io.Discard)
		if !errors.Is(err, errUsage) {
			t.Errorf("bench linestate %q: %v, want a usage error", args, err)
		}
	}
	if runtime.GOOS != "linux" {
		return
	}
	_, _, _, err := lineState([]int{0, 4095}, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "CPU 4095") {
		t.Errorf("lineState on CPU 4095: %v, want an error naming it", err)
	}
}
