package trace

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// capture sends trace output to a buffer at level l for the rest of the test
// and restores the process-wide settings afterwards. Tests that use it must
// not run in parallel: the settings are shared.
func capture(t testing.TB, l Level) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	restore := Redirect(&buf, l)
	t.Cleanup(func() {
		restore()
		SetRank(-1)
	})
	return &buf
}

// stamp is a line's prefix: the rank, then the seconds since the process
// started, to the microsecond.
var stamp = regexp.MustCompile(`(?m)^(weft\[(?:\?|\d+)\]) \d+\.\d{6} `)

// unstamp removes the stamps from trace output, for tests that compare
// the rest of each line.
func unstamp(s string) string { return stamp.ReplaceAllString(s, "$1 ") }

func TestParseLevel(t *testing.T) {
	good := map[string]Level{"0": 0, "1": 1, "5": 5, "9": 9, " 3\n": 3, "off": Off, "OFF": Off}
	for s, want := range good {
		got, err := ParseLevel(s)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, nil", s, got, err, want)
		}
	}
	for _, s := range []string{"", " ", "x", "10", "-1", "3.5", "0x3", "４", "1e1"} {
		_, err := ParseLevel(s)
		if err == nil {
			t.Errorf("ParseLevel(%q) accepted a bad level", s)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", strings.TrimSpace(s))) || !strings.Contains(msg, "0 to 9") {
			t.Errorf("ParseLevel(%q) error %q does not quote the value and the valid range", s, msg)
		}
	}
}

func TestFromEnv(t *testing.T) {
	capture(t, Error)
	t.Setenv(EnvVar, "7")
	if err := FromEnv(); err != nil || Get() != 7 {
		t.Fatalf("WEFT_TRACE=7: level %v, err %v", Get(), err)
	}

	t.Setenv(EnvVar, "verbose")
	err := FromEnv()
	if err == nil {
		t.Fatal("WEFT_TRACE=verbose accepted")
	}
	for _, want := range []string{EnvVar, `"verbose"`, "0 to 9", "stays at level 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if Get() != 7 {
		t.Errorf("a bad WEFT_TRACE changed the level to %v", Get())
	}

	t.Setenv(EnvVar, "")
	if err := FromEnv(); err != nil || Get() != Error {
		t.Errorf("WEFT_TRACE empty: level %v, err %v; want 0, nil", Get(), err)
	}
	os.Unsetenv(EnvVar) // t.Setenv restores the original value at cleanup
	SetLevel(Max)
	if err := FromEnv(); err != nil || Get() != Error {
		t.Errorf("WEFT_TRACE unset: level %v, err %v; want 0, nil", Get(), err)
	}
}

// TestStartWithBadEnv runs this test binary again with a malformed WEFT_TRACE:
// the package's init carries on at level 0 and prints nothing, since mpi.Init
// and mpi.Run refuse the value (mpi.OptionsFromEnv) and the init's own
// message made it said twice.
func TestStartWithBadEnv(t *testing.T) {
	if os.Getenv("TRACE_TEST_CHILD") == "1" {
		fmt.Printf("level=%d\n", Get())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartWithBadEnv$")
	cmd.Env = append(os.Environ(), "TRACE_TEST_CHILD=1", EnvVar+"=lots")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child failed: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), "level=0") {
		t.Errorf("child did not run at level 0:\n%s", &stdout)
	}
	if strings.Contains(stderr.String(), EnvVar) {
		t.Errorf("package init printed %q", stderr.String())
	}
}

func TestOnAndSetLevel(t *testing.T) {
	capture(t, 3)
	for l := Error; l <= Max; l++ {
		if got, want := On(l), l <= 3; got != want {
			t.Errorf("level 3: On(%d) = %v", l, got)
		}
	}
	if prev := SetLevel(Off); prev != 3 {
		t.Errorf("SetLevel returned %v, want the previous level 3", prev)
	}
	if On(Error) {
		t.Error("On(Error) at level Off")
	}
	// Out-of-range levels are clamped, not rejected.
	SetLevel(42)
	if Get() != Max || !On(Max) {
		t.Errorf("SetLevel(42) gave %v, want %v", Get(), Max)
	}
	SetLevel(-7)
	if Get() != Off {
		t.Errorf("SetLevel(-7) gave %v, want %v", Get(), Off)
	}
}

func TestPrintf(t *testing.T) {
	buf := capture(t, Hot)
	Printf(Hot, "send %d bytes to %d", 64, 1)
	Printf(HotDetail, "frame") // above the level: not written
	SetRank(3)
	Printf(Error, "already ends in a newline\n")
	Printf(Setup, "")
	SetRank(-1)
	Printf(Rare, "rank %s", "unknown")

	want := "weft[?] send 64 bytes to 1\n" +
		"weft[3] already ends in a newline\n" +
		"weft[3] \n" +
		"weft[?] rank unknown\n"
	if got := unstamp(buf.String()); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestSetWriter(t *testing.T) {
	buf := capture(t, Error)
	if prev := SetWriter(nil); prev != io.Writer(buf) {
		t.Errorf("SetWriter returned %v, want the previous writer", prev)
	}
	if prev := SetWriter(buf); prev != io.Writer(os.Stderr) {
		t.Errorf("SetWriter(nil) installed %v, want os.Stderr", prev)
	}
}

// selfTracing traces from its String method, as a type with a trace-heavy
// accessor might; formatting it must not deadlock Printf.
type selfTracing struct{}

func (selfTracing) String() string {
	Printf(Error, "inner")
	return "outer"
}

func TestPrintfReentrant(t *testing.T) {
	buf := capture(t, Error)
	Printf(Error, "%v", selfTracing{})
	if got, want := unstamp(buf.String()), "weft[?] inner\nweft[?] outer\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestConcurrent writes from many goroutines while the level and rank
// change; every line must come out whole. Run it with -race.
func TestConcurrent(t *testing.T) {
	buf := capture(t, Max)
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			// One line at a level that stays on, so that output is never
			// empty: the changer may keep Hot off for a writer's whole run.
			Printf(Error, "goroutine %d line %d ", g, lines)
			for i := range lines {
				if On(Hot) {
					Printf(Hot, "goroutine %d line %d %s", g, i, strings.Repeat("x", i%50))
				}
			}
		})
	}
	wg.Go(func() {
		for i := range lines {
			SetLevel(Level(i%3) + Setup) // Setup, Internal, Hot
			SetRank(i % 4)
		}
		SetLevel(Max)
	})
	wg.Wait()

	re := regexp.MustCompile(`^weft\[(\?|[0-3])\] \d+\.\d{6} goroutine [0-7] line [0-9]+ x*$`)
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) < writers || len(got) > writers*(lines+1) {
		t.Fatalf("%d lines, want %d to %d", len(got), writers, writers*(lines+1))
	}
	for _, line := range got {
		if !re.MatchString(line) {
			t.Fatalf("torn or malformed line %q", line)
		}
	}
}

// TestDisabledAllocs pins the promise the hot path relies on: a disabled
// level allocates nothing.
func TestDisabledAllocs(t *testing.T) {
	capture(t, Error)
	n := 1000
	allocs := testing.AllocsPerRun(100, func() {
		if On(Hot) {
			Printf(Hot, "send %d bytes", n)
		}
		Printf(Dump, "no arguments")
	})
	if allocs != 0 {
		t.Errorf("disabled trace: %v allocs per call, want 0", allocs)
	}
}

// TestOnInlines asks the compiler whether On is inlined: the one-atomic-load
// promise holds only if callers do not pay for a call as well.
func TestOnInlines(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\S+trace\.go:\d+:\d+: can inline On$`).Match(out) {
		t.Errorf("the compiler does not inline On:\n%s", out)
	}
}

var sink int

// The two disabled-level benchmarks count with b.N rather than b.Loop: on
// this code b.Loop's own bookkeeping (about 1.7 ns an iteration on a 2.5 GHz
// Xeon) is several times the atomic load being measured.

func BenchmarkOnDisabled(b *testing.B) {
	capture(b, Error)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if On(Hot) {
			sink++
		}
	}
}

// BenchmarkPrintfDisabledGuarded is the recommended hot-path form.
func BenchmarkPrintfDisabledGuarded(b *testing.B) {
	capture(b, Error)
	b.ReportAllocs()
	n, dst := 4096, 3
	for i := 0; i < b.N; i++ {
		if On(Hot) {
			Printf(Hot, "send %d bytes to %d", n, dst)
		}
	}
}

// BenchmarkPrintfDisabledUnguarded shows why the guard matters: the
// arguments are boxed before Printf sees the level.
func BenchmarkPrintfDisabledUnguarded(b *testing.B) {
	capture(b, Error)
	b.ReportAllocs()
	n, dst := 4096, 3
	for b.Loop() {
		Printf(Hot, "send %d bytes to %d", n, dst)
	}
}

func BenchmarkPrintfEnabled(b *testing.B) {
	capture(b, Hot)
	SetWriter(io.Discard)
	b.ReportAllocs()
	n, dst := 4096, 3
	for b.Loop() {
		if On(Hot) {
			Printf(Hot, "send %d bytes to %d", n, dst)
		}
	}
}
