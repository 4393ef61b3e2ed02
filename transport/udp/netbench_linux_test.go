package udp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The namespace tests run each side in its own process, inside its own
// namespace, as two ranks on two hosts would: cmd/netbench, built once
// per test binary, is that process (it is also the tool for measuring by
// hand). A test package cannot re-execute itself into another namespace
// with lapi on top, since the device's own tests may not import lapi.

// netbenchBuild is the netbench binary built for this test binary.
var netbenchBuild struct {
	once      sync.Once
	dir, path string
	skip, err error
}

// netbenchPath builds cmd/netbench (once) and returns the binary. It
// skips the test if the go command is not there to build it.
func netbenchPath(t testing.TB) string {
	t.Helper()
	b := &netbenchBuild
	b.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
			if _, serr := os.Stat(goTool); serr != nil {
				b.skip = fmt.Errorf("needs the go command to build cmd/netbench: %w", err)
				return
			}
		}
		if b.dir, b.err = os.MkdirTemp("", "weft-netbench-"); b.err != nil {
			return
		}
		afterTests = append(afterTests, func() { os.RemoveAll(b.dir) })
		b.path = filepath.Join(b.dir, "netbench")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", b.path, "github.com/weft-hpc/weft/cmd/netbench")
		// In the module, wherever the test binary runs from.
		if _, src, _, ok := runtime.Caller(0); ok {
			cmd.Dir = filepath.Dir(src)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build cmd/netbench: %w\n%s", err, out)
		}
	})
	if b.skip != nil {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// benchResult is netbench's result line (cmd/netbench's Result).
type benchResult struct {
	Role        string    `json:"role"`
	MTU         int       `json:"mtu"`
	GSO         bool      `json:"gso"`
	OneWayUS    []float64 `json:"one_way_us"`
	MedianUS    float64   `json:"median_us"`
	Messages    int       `json:"messages"`
	Bytes       int64     `json:"bytes"`
	Seconds     float64   `json:"seconds"`
	GBps        float64   `json:"gbps"`
	Lapi        string    `json:"lapi"`
	Device      string    `json:"device"`
	Retransmits uint64    `json:"retransmits"`
	Duplicates  uint64    `json:"duplicates"`
}

// benchSide is one running netbench process.
type benchSide struct {
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	waited bool
}

// benchPair is a running pair of netbench sides: role a in namespace a,
// role b in namespace b.
type benchPair struct {
	t      testing.TB
	a, b   *benchSide
	cancel context.CancelFunc
}

// netbenchTimeout bounds a pair's run: the namespace tests must each end
// within about a minute.
const netbenchTimeout = 55 * time.Second

// startNetbench starts roleA in p.a and roleB in p.b with the same
// arguments (besides -role and -bind), exchanges their addresses and
// returns while they run. The processes are killed when the test ends if
// they are still running.
func startNetbench(t testing.TB, p *netnsPair, roleA, roleB string, args ...string) *benchPair {
	t.Helper()
	bin := netbenchPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), netbenchTimeout)
	r := &benchPair{t: t, cancel: cancel}
	start := func(h netnsHost, role string) *benchSide {
		s := &benchSide{role: role}
		argv := append([]string{"netns", "exec", h.ns, bin, "-role", role, "-bind", h.addr,
			"-timeout", netbenchTimeout.String()}, args...)
		s.cmd = exec.CommandContext(ctx, "ip", argv...)
		s.cmd.Stderr = &s.stderr
		var err error
		if s.stdin, err = s.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := s.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		s.stdout = bufio.NewReader(out)
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("starting netbench %s: %v", role, err)
		}
		return s
	}
	t.Cleanup(r.stop)
	r.a = start(p.a, roleA)
	r.b = start(p.b, roleB)
	addrA, addrB := r.line(r.a), r.line(r.b)
	for _, x := range []struct {
		s    *benchSide
		addr string
	}{{r.a, addrB}, {r.b, addrA}} {
		if _, err := io.WriteString(x.s.stdin, x.addr); err != nil {
			r.fail("giving %s its peer's address: %v", x.s.role, err)
		}
	}
	return r
}

// line reads s's next output line, failing the test if s ends first.
func (r *benchPair) line(s *benchSide) string {
	r.t.Helper()
	l, err := s.stdout.ReadString('\n')
	if err != nil {
		r.fail("netbench %s ended early: %v", s.role, err)
	}
	return l
}

// result reads s's result line.
func (r *benchPair) result(s *benchSide) benchResult {
	r.t.Helper()
	var res benchResult
	if l := r.line(s); json.Unmarshal([]byte(l), &res) != nil {
		r.fail("netbench %s printed %q, not a result", s.role, l)
	}
	return res
}

// wait returns both sides' results once they are done. dev-echo, which
// serves until told to stop, is stopped by closing its stdin once its peer
// is done; the lapi roles end by themselves, after a closing barrier that
// the side finishing first must not cut short.
func (r *benchPair) wait() (a, b benchResult) {
	r.t.Helper()
	a = r.result(r.a)
	if r.b.role == "dev-echo" {
		r.b.stdin.Close()
	}
	b = r.result(r.b)
	r.stop()
	for _, s := range []*benchSide{r.a, r.b} {
		if !s.cmd.ProcessState.Success() {
			r.fail("netbench %s: %v", s.role, s.cmd.ProcessState)
		}
	}
	return a, b
}

// stop closes both sides' stdin (their stop signal) and reaps them; the
// context kills them if they do not stop by the deadline.
func (r *benchPair) stop() {
	for _, s := range []*benchSide{r.a, r.b} {
		if s == nil || s.waited {
			continue
		}
		s.stdin.Close()
		s.cmd.Wait() // the status is read from ProcessState
		s.waited = true
	}
	r.cancel()
}

// fail stops the pair and fails the test with both sides' stderr.
func (r *benchPair) fail(format string, args ...any) {
	r.t.Helper()
	r.stop()
	var b strings.Builder
	fmt.Fprintf(&b, format, args...)
	for _, s := range []*benchSide{r.a, r.b} {
		if s != nil && s.stderr.Len() > 0 {
			fmt.Fprintf(&b, "\n%s stderr:\n%s", s.role, s.stderr.String())
		}
	}
	r.t.Fatal(b.String())
}
