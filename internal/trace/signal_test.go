package trace

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a trace writer that a test may read while another
// goroutine (the signal handler's) writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureSync is capture with a buffer safe to read while signals arrive.
func captureSync(t *testing.T, l Level) *syncBuffer {
	t.Helper()
	buf := new(syncBuffer)
	restore := Redirect(buf, l)
	t.Cleanup(func() {
		restore()
		SetRank(-1)
	})
	return buf
}

// signalSelf sends sig to this process and waits until the level is want.
func signalSelf(t *testing.T, sig syscall.Signal, want Level) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); Get() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v the level is %v, want %v", sig, Get(), want)
		}
	}
}

// TestSignals: SIGUSR1 raises the level by one and SIGUSR2 lowers it, each
// change said in a line; a level-3 line appears once the signals have
// raised the level to 3, carrying the rank, a stamp and its component,
// and not once they have lowered it again. Two overlapping HandleSignals
// handle each signal once, and the handler lasts until both have stopped.
func TestSignals(t *testing.T) {
	buf := captureSync(t, Rare)
	SetRank(2)
	stop1 := HandleSignals()
	stop2 := HandleSignals()
	defer stop1()

	signalSelf(t, RaiseSignal, Setup)
	stop2() // the first call's handler goes on
	stop2() // a second stop of the same call changes nothing
	signalSelf(t, RaiseSignal, Internal)
	Printf(Internal, "lapi 2: retransmit timeout to rank 1: seq 7 resent (try 1), rto now 2ms (backoff 1)")
	signalSelf(t, LowerSignal, Setup)
	Printf(Internal, "lapi 2: written at level 2: must not appear")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^weft\[2\] \d+\.\d{6} trace: level 2 \(was 1\): user defined signal 1$`),
		regexp.MustCompile(`^weft\[2\] \d+\.\d{6} trace: level 3 \(was 2\): user defined signal 1$`),
		regexp.MustCompile(`^weft\[2\] \d+\.\d{6} lapi 2: retransmit timeout to rank 1: seq 7 resent \(try 1\), rto now 2ms \(backoff 1\)$`),
		regexp.MustCompile(`^weft\[2\] \d+\.\d{6} trace: level 2 \(was 3\): user defined signal 2$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
}

// TestShift: a shift is clamped to Off..Max and always said, also when it
// turns tracing off.
func TestShift(t *testing.T) {
	buf := capture(t, Max)
	if got := Shift(5, "test"); got != Max {
		t.Errorf("Shift(5) at Max gave %v", got)
	}
	SetLevel(Error)
	if got := Shift(-3, "test"); got != Off {
		t.Errorf("Shift(-3) at 0 gave %v", got)
	}
	want := "weft[?] trace: level 9 (was 9): test\nweft[?] trace: level off (was 0): test\n"
	if got := unstamp(buf.String()); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestMark: a mark is written from level 1, naming the rank, with its
// text and the wall clock; at level 0 it is not.
func TestMark(t *testing.T) {
	buf := capture(t, Error)
	Mark(3, "hidden %d", 1)
	SetLevel(Rare)
	SetRank(3)
	before := time.Now().UTC()
	Mark(3, "phase %d of %s", 2, "solve")
	out := buf.String()
	m := regexp.MustCompile(`^weft\[3\] \d+\.\d{6} mark 3: phase 2 of solve \(wall (\d\d:\d\d:\d\d\.\d{6})\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q is not one mark line", out)
	}
	wall, err := time.Parse("15:04:05.000000", m[1])
	if err != nil {
		t.Fatal(err)
	}
	// The wall clock's time of day, within a second of the call (mod a day).
	day := 24 * time.Hour
	sinceMidnight := before.Sub(before.Truncate(day))
	if d := (wall.Sub(wall.Truncate(day)) - sinceMidnight + day) % day; d > time.Second {
		t.Errorf("mark's wall clock %s is %v after the call's %s", m[1], d, before.Format("15:04:05.000000"))
	}
}

// TestStamps: each line's stamp is the time since the process started,
// in microseconds, within the bounds read around the write, and stamps
// never go backwards.
func TestStamps(t *testing.T) {
	buf := capture(t, Error)
	lo := time.Since(start)
	for i := range 100 {
		Printf(Error, "line %d", i)
	}
	hi := time.Since(start)
	re := regexp.MustCompile(`(?m)^weft\[\?\] (\d+)\.(\d{6}) line \d+$`)
	ms := re.FindAllStringSubmatch(buf.String(), -1)
	if len(ms) != 100 {
		t.Fatalf("%d stamped lines, want 100:\n%s", len(ms), buf)
	}
	prev := time.Duration(0)
	for _, m := range ms {
		s, _ := strconv.ParseInt(m[1], 10, 64)
		us, _ := strconv.ParseInt(m[2], 10, 64)
		d := time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond
		if d < lo.Truncate(time.Microsecond) || d > hi || d < prev {
			t.Fatalf("stamp %v outside [%v, %v] or before the previous %v", d, lo, hi, prev)
		}
		prev = d
	}
	if got := string(appendStamp(nil, 3*time.Second+45*time.Microsecond)); got != "3.000045" {
		t.Errorf("appendStamp(3.000045s) = %q", got)
	}
}
