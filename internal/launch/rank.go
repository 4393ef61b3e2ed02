package launch

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/cpubind"
)

// rank is one process of the job, local or remote (then the process is the
// ssh client that started it).
type rank struct {
	id     int
	host   Host
	cmd    *exec.Cmd
	remote bool
	cpus   []int // the CPUs a local rank is bound to, nil for none (bind.go)
	// control is the stdin of the remote wrapper script: it reads signal
	// names from it and kills the rank on EOF (see remoteScript).
	control io.WriteCloser
	pipes   []*rankPipe   // read ends of stdout and stderr
	drained chan struct{} // closed when both are drained
	tail    tailLines     // last stderr lines, for failure reports

	running bool
	state   *os.ProcessState
}

func (r *rank) pid() int {
	if r.cmd != nil && r.cmd.Process != nil {
		return r.cmd.Process.Pid
	}
	return 0
}

// where names the rank's process for messages.
func (r *rank) where() string {
	if r.remote {
		return fmt.Sprintf("on %s, ssh pid %d", r.host.Name, r.pid())
	}
	return fmt.Sprintf("pid %d", r.pid())
}

// startLocal forks the rank with one end of a socketpair as PMI_FD=3; the
// other end is served by the PMI server.
func (j *job) startLocal(r *rank, env []string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair for PMI: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "pmi-server")
	theirs := os.NewFile(uintptr(fds[1]), "pmi-rank")
	defer theirs.Close()
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return fmt.Errorf("socketpair for PMI: %w", err)
	}
	r.cmd = exec.Command(j.prog.Path, j.opts.Args...)
	r.cmd.Env = append(env, "PMI_FD=3") // ExtraFiles[0] is fd 3 in the child
	r.cmd.ExtraFiles = []*os.File{theirs}
	if err := j.startProcess(r); err != nil {
		conn.Close()
		return err
	}
	go j.srv.Serve(r.id, conn)
	return nil
}

// startRemote starts the rank on its host through the rsh command; the rank
// reaches the PMI server over TCP at pmiPort with PMI_ID = its rank.
func (j *job) startRemote(r *rank, env []string, pmiPort string) error {
	if len(j.opts.Rsh) == 0 {
		return fmt.Errorf("%w: no --rsh command to reach %s", ErrUsage, r.host.Name)
	}
	env = append(env, "PMI_PORT="+pmiPort, "PMI_ID="+strconv.Itoa(r.id))
	cwd, _ := os.Getwd()
	line := remoteCommand(cwd, env, pmiSegmentPrefix(j.key), j.programOn(r.host.Name), j.opts.Args)
	argv := append(append([]string{}, j.opts.Rsh[1:]...), r.host.Name, line)
	r.cmd = exec.Command(j.opts.Rsh[0], argv...)
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ctlR.Close()
	r.cmd.Stdin = ctlR
	r.control = ctlW
	r.remote = true
	if err := j.startProcess(r); err != nil {
		ctlW.Close()
		return err
	}
	return nil
}

// startProcess starts r.cmd in its own process group (so that gorun can
// signal the rank and whatever it started, and a Ctrl-C at the terminal
// reaches ranks only through gorun), dying with gorun, its output copied to
// the mux, and its exit reported to the monitor.
func (j *job) startProcess(r *rank) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	r.cmd.Stdout, r.cmd.Stderr = outW, errW
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if r.cpus != nil {
		restore, err := cpubind.BindThread(r.cpus)
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return err
		}
		defer restore()
	}
	err = r.cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	r.running = true
	stdout, stderr := &rankPipe{File: outR, stream: "stdout"}, &rankPipe{File: errR, stream: "stderr"}
	r.pipes = []*rankPipe{stdout, stderr}
	r.drained = make(chan struct{})
	streams := make(chan struct{}, 2)
	go func() { j.out.copyLines(stdout, r.id, false, nil); streams <- struct{}{} }()
	go func() { j.out.copyLines(stderr, r.id, true, &r.tail); streams <- struct{}{} }()
	go func() { <-streams; <-streams; close(r.drained) }()
	go func() {
		_ = r.cmd.Wait() // the state says how it ended
		// What the rank wrote before it exited (its own snapshot, its
		// last words) is taken before its end is judged: a failure's
		// summary would otherwise miss them. A pipe something the rank
		// started holds open is waited for exitOutputWait at most.
		t := time.NewTimer(exitOutputWait)
		select {
		case <-r.drained:
		case <-t.C:
		}
		t.Stop()
		j.exits <- r
	}()
	return nil
}

// signal sends sig to the rank: to its process group locally, through the
// wrapper's control pipe remotely. A trace-level signal (levelSignals)
// goes to the rank's process alone, locally and remotely (remoteScript):
// what the rank started, not a Go program, would die of it.
func (r *rank) signal(sig unix.Signal) {
	if !r.running {
		return
	}
	if isLevelSignal(sig) && !r.remote {
		_ = unix.Kill(r.pid(), sig)
		return
	}
	if r.remote {
		_, err := io.WriteString(r.control, signalName(sig)+"\n")
		if sig == unix.SIGKILL {
			// The wrapper kills the rank on EOF too, then exits, and
			// ssh with it: its exit confirms the rank is gone.
			r.control.Close()
		}
		if err != nil {
			r.abandon()
		}
		return
	}
	_ = unix.Kill(-r.pid(), sig)
}

// abandon kills a remote rank's ssh client (its process group), for when
// the wrapper at the other end cannot be told or does not answer: the rank
// is then stopped only if the wrapper sees the connection end.
func (r *rank) abandon() {
	r.control.Close()
	_ = unix.Kill(-r.pid(), unix.SIGKILL)
}

// signalName is the name kill -s takes.
func signalName(sig unix.Signal) string {
	return strings.TrimPrefix(unix.SignalName(sig), "SIG")
}

// pmiSegmentPrefix is the glob remote wrappers clean on failure.
func pmiSegmentPrefix(key uint64) string { return shmDir + "/" + segmentPrefix(key) }

// exitOf returns how a process ended: its exit status, or the signal that
// killed it (sig != 0).
func exitOf(ps *os.ProcessState) (code int, sig syscall.Signal) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return ps.ExitCode(), 0
}
