package launch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A program gorun built from a package directory lives in a temporary
// directory of this machine, which remote hosts do not have. gorun copies
// it to each remote host over the rsh command, one session per host that
// stays open for the job: the remote side (copyScript) makes a private
// temporary directory, stores the binary there, prints its path, and
// removes the directory when its stdin ends, whether gorun closes it at the
// end of the job or gorun and its ssh die.

// copyScript runs on the remote host as `sh -c copyScript weft-copy NAME
// SIZE`, with the binary's SIZE bytes on stdin.
const copyScript = `d=$(mktemp -d "${TMPDIR:-/tmp}/gorun-XXXXXX") || exit 1
f="$d/$1"
if head -c "$2" >"$f" && [ "$(wc -c <"$f")" -eq "$2" ] && chmod 700 "$f"; then
echo "$f"
else
echo "cannot store the program in $d (disk full?)" >&2; rm -rf "$d"; exit 1
fi
cat >/dev/null
rm -rf "$d"`

// copyWait bounds a copy: connecting (ssh's ConnectTimeout is 10 s) and
// sending the binary.
const copyWait = 60 * time.Second

// remoteCopy is the session that holds a copy of the program on one host.
type remoteCopy struct {
	host  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	path  string        // where the copy is on the host
	done  chan struct{} // closed when the session has exited
}

// copyProgram copies the built program to every remote host of the job,
// in parallel, and records where it is on each (j.copies). Cancelling ctx
// stops the waits for the hosts; endCopies ends the sessions.
func (j *job) copyProgram(ctx context.Context) error {
	st, err := os.Stat(j.prog.Path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProgram, err)
	}
	var hosts []string
	for node, h := range j.place.Hosts {
		if !h.Local && j.place.Uses(node) {
			hosts = append(hosts, h.Name)
		}
	}
	j.copies = map[string]*remoteCopy{}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, host := range hosts {
		wg.Go(func() {
			c, err := j.copyTo(ctx, host, st.Size())
			if c != nil {
				mu.Lock()
				j.copies[host] = c
				mu.Unlock()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// copyTo starts the copy session to host and returns once the host has
// stored the binary (or failed to). A session that started is returned
// even with an error, so that endCopies ends it.
func (j *job) copyTo(ctx context.Context, host string, size int64) (*remoteCopy, error) {
	line := "sh -c " + shellQuote(copyScript) + " weft-copy " + shellQuote(filepath.Base(j.prog.Path)) + " " + strconv.FormatInt(size, 10)
	cmd := exec.Command(j.opts.Rsh[0], append(append([]string{}, j.opts.Rsh[1:]...), host, line)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr lockedTail
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: copying the program to %s: %v", ErrHost, host, err)
	}
	c := &remoteCopy{host: host, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	paths := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		paths <- strings.TrimSpace(line)
		io.Copy(io.Discard, stdout) // Wait closes it after exit
		cmd.Wait()
		close(c.done)
	}()
	go func() {
		f, err := os.Open(j.prog.Path)
		if err != nil {
			stdin.Close()
			return
		}
		defer f.Close()
		io.Copy(stdin, f) // the stdin stays open: its end removes the copy
	}()
	timer := time.NewTimer(copyWait)
	defer timer.Stop()
	select {
	case c.path = <-paths:
		if strings.HasPrefix(c.path, "/") {
			if j.opts.Trace >= 2 {
				j.out.say(fmt.Sprintf("copied %s to %s:%s", j.prog.Path, host, c.path))
			}
			return c, nil
		}
		<-c.done // the session failed: its status and message say why
		code, _ := exitOf(cmd.ProcessState)
		return c, fmt.Errorf("%w: copying the program to %s: %s exited with status %d%s",
			ErrHost, host, j.opts.Rsh[0], code, tailText(stderr.lines()))
	case <-timer.C:
		return c, fmt.Errorf("%w: copying the program to %s: no answer in %v%s", ErrHost, host, copyWait, tailText(stderr.lines()))
	case <-ctx.Done():
		return c, fmt.Errorf("%w: copying the program to %s: %v", ErrHost, host, context.Cause(ctx))
	}
}

// endCopies ends every copy session, which removes the copies, and waits,
// bounded by drainWait, for the hosts to have done so.
func (j *job) endCopies() {
	for _, c := range j.copies {
		c.stdin.Close()
	}
	deadline := time.NewTimer(drainWait)
	defer deadline.Stop()
	for _, c := range j.copies {
		select {
		case <-c.done:
		case <-deadline.C:
			deadline.Reset(0)
			j.out.say(fmt.Sprintf("%s did not confirm removing %s; it may be left there", c.host, c.path))
			_ = unix.Kill(-c.cmd.Process.Pid, unix.SIGKILL)
		}
	}
}

// programOn is the path of the program on host: the copy there, or the
// program's own path (a binary every host must have at that path).
func (j *job) programOn(host string) string {
	if c, ok := j.copies[host]; ok {
		return c.path
	}
	return j.prog.Path
}

// lockedTail keeps the last lines written to it, for error messages.
type lockedTail struct {
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (l *lockedTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 4096 {
		l.buf = l.buf[len(l.buf)-4096:]
	}
	return len(p), nil
}

func (l *lockedTail) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(string(l.buf))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
