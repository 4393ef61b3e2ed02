package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: its master, and its slave for a child's
// standard files and controlling terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here (/dev/ptmx: %v): the terminal's signals cannot be tested", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// ttyOutput collects what a pseudo-terminal's master reads.
type ttyOutput struct {
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{} // a read added something
}

func readTTY(m *os.File) *ttyOutput {
	o := &ttyOutput{more: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := m.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			o.mu.Unlock()
			select {
			case o.more <- struct{}{}:
			default:
			}
			if err != nil {
				return // EIO once every slave is closed
			}
		}
	}()
	return o
}

func (o *ttyOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits up to 20 s for a match of re in the output, returns it,
// and fails the test if none comes.
func (o *ttyOutput) waitFor(t *testing.T, re string) string {
	t.Helper()
	r := regexp.MustCompile(re)
	deadline := time.After(20 * time.Second)
	for {
		if m := r.FindString(o.String()); m != "" {
			return m
		}
		select {
		case <-o.more:
		case <-deadline:
			t.Fatalf("no %q on the terminal in 20 s; it shows:\n%s", re, o.String())
		}
	}
}

// jobShellEnv makes the test binary jobShell.
const jobShellEnv = "LAUNCH_TEST_JOB_SHELL"

// jobShell is the part of a shell that TestWrapTerminalSignals needs: the
// leader of the terminal's session (fd 0), it runs args as a job in a
// process group of its own, the terminal's foreground; when the job stops
// it says so on the terminal and continues it in the foreground (fg). It
// returns the job's exit status. (The test cannot be the shell: a process
// group whose parent is outside its session is orphaned, and the kernel
// ignores a Ctrl-Z's stop there.)
func jobShell(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Foreground: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		fmt.Println("shell:", err)
		return 127
	}
	pid := cmd.Process.Pid
	for waitStop(pid) {
		fmt.Println("shell: job stopped")
		setForeground(0, pid)
		unix.Kill(-pid, unix.SIGCONT)
	}
	cmd.Wait()
	setForeground(0, unix.Getpgrp())
	return cmd.ProcessState.ExitCode()
}

// TestWrapTerminalSignals: gorun --wrap started by a shell in the
// foreground of a terminal gives the terminal to the launcher. A Ctrl-C
// typed there reaches the launcher once (not a second time forwarded by
// gorun, which srun would take as "abort"); a Ctrl-Z stops the launcher
// and gorun with it, so that the shell sees its job stopped, and the
// shell's fg continues both, the launcher in the foreground again. The
// launcher is a script that counts its SIGINTs and, at each, asks for a
// SIGUSR1 through gorun (which forwards it after any SIGINT it forwarded),
// on which it prints the count and exits.
func TestWrapTerminalSignals(t *testing.T) {
	launcher := filepath.Join(t.TempDir(), "launcher")
	script := `#!/bin/sh
n=0
trap 'n=$((n+1)); kill -USR1 $PPID' INT
trap 'kill $s 2>/dev/null; echo "interrupts $n"; exit 0' USR1
echo ready
while :; do sleep 1000 & s=$!; wait $s; done
`
	if err := os.WriteFile(launcher, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctrl-z=%v", stop), func(t *testing.T) {
			m, s := openPTY(t)
			out := readTTY(m)
			cmd := exec.Command(os.Args[0], bins.gorun, "--wrap", "--", launcher)
			cmd.Env = append(os.Environ(), jobShellEnv+"=1")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			defer func() {
				select {
				case <-waited:
				default:
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the shell's group; gorun and the launcher have their own
					cmd.Process.Kill()
				}
			}()
			out.waitFor(t, "ready")
			if stop {
				m.Write([]byte{0x1a}) // Ctrl-Z
				out.waitFor(t, "shell: job stopped")
			}
			m.Write([]byte{0x03}) // Ctrl-C
			got := out.waitFor(t, `interrupts \d+\r\n`)
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("the shell running gorun --wrap: %v; the terminal shows:\n%s", err, out.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("gorun --wrap did not end after its launcher did (20 s); the terminal shows:\n%s", out.String())
			}
			if got != "interrupts 1\r\n" {
				t.Errorf("the launcher saw %q Ctrl-C, want one; the terminal shows:\n%s", strings.TrimSpace(got), out.String())
			}
		})
	}
}
