package launch

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/pmi"
)

// wrap runs a foreign launcher (opts.Program with opts.Args) with a
// GORUN_KVS rendezvous server in its environment, forwards SIGINT/SIGTERM
// (and SIGUSR1/SIGUSR2, which mpirun passes on to its ranks) to it, and
// returns its exit status. The server binds port 0 on
// GORUN_KVS_BIND's address if set, else on the address toward the first -H
// host, else on loopback.
//
// Started in the foreground of a terminal, gorun gives the terminal to the
// launcher: the launcher runs in a process group of its own, the
// terminal's foreground, so that a Ctrl-C reaches it once, from the
// terminal, and not a second time forwarded by gorun (srun takes a second
// Ctrl-C within a second as "abort the job", mpirun as "kill it at once").
// gorun then forwards only the signals sent to it alone. A Ctrl-Z stops the
// launcher; gorun takes the terminal back and stops too, and when the shell
// continues it in the foreground (fg), hands the terminal back and
// continues the launcher (jobControl).
func wrap(opts *Options, stdout, stderr io.Writer) int {
	bind := os.Getenv("GORUN_KVS_BIND")
	if bind == "" {
		bind = "127.0.0.1:0"
		if len(opts.Hosts) > 0 {
			ip, err := localAddrToward(context.Background(), opts.Hosts[0].Name, opts.Rsh)
			if err != nil {
				fmt.Fprintf(stderr, "gorun: --wrap: %v\n", err)
				return exitFailure
			}
			bind = net.JoinHostPort(ip.String(), "0")
		}
	}
	srv, err := pmi.ListenKVS(bind)
	if err != nil {
		fmt.Fprintf(stderr, "gorun: --wrap: %v\n", err)
		return exitFailure
	}
	defer srv.Close()
	cmd := exec.Command(opts.Program, opts.Args...)
	cmd.Env = append(os.Environ(), "GORUN_KVS="+srv.Addr().String())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	tty := inForeground(0)
	if tty {
		cmd.SysProcAttr = &syscall.SysProcAttr{Foreground: true, Ctty: 0} // Foreground implies Setpgid
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, levelSignals[0], levelSignals[1])
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "gorun: --wrap: starting %s: %v\n", opts.Program, err)
		return exitFailure
	}
	waited := make(chan error, 1)
	go func() {
		if tty {
			jobControl(cmd.Process.Pid)
		}
		waited <- cmd.Wait()
	}()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig) // the launcher forwards it to its ranks
		case <-waited:
			if tty {
				setForeground(0, unix.Getpgrp())
			}
			code, _ := exitOf(cmd.ProcessState)
			return code
		}
	}
}

// inForeground reports whether fd is a terminal whose foreground process
// group is this process's.
func inForeground(fd int) bool {
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// setForeground makes process group pg the foreground of the terminal fd,
// from the background too (where the kernel would stop the caller with
// SIGTTOU but for the signal being ignored meanwhile).
func setForeground(fd, pg int) {
	signal.Ignore(unix.SIGTTOU)
	defer signal.Reset(unix.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pg)
}

// cldStopped is siginfo's si_code for a child stopped by a signal
// (CLD_STOPPED, <signal.h>; x/sys/unix does not name it).
const cldStopped = 5

// waitStop waits until child pid stops or exits, and reports whether it
// stopped (the stop's report taken). An exit is left for exec.Cmd.Wait to
// collect (WNOWAIT); an error reports false too.
func waitStop(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return false
		}
	}
	if info.Code != cldStopped {
		return false
	}
	// Take the stop's report (it is not an exit: nothing is reaped).
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED, nil)
		if err != unix.EINTR {
			return err == nil
		}
	}
}

// jobControl follows the launcher pid, leader of its own process group and
// the terminal's foreground, until it exits, leaving its exit to be
// collected: when it stops (a Ctrl-Z), gorun takes the terminal back and
// stops itself, so that the shell sees the job stopped; when the shell
// continues gorun, the launcher's group is continued too, and gets the
// terminal again if gorun got it (fg, not bg).
func jobControl(pid int) {
	for waitStop(pid) {
		setForeground(0, unix.Getpgrp())
		_ = unix.Kill(unix.Getpid(), unix.SIGTSTP) // returns once the shell continues gorun
		if inForeground(0) {
			setForeground(0, pid)
		}
		_ = unix.Kill(-pid, unix.SIGCONT)
	}
}
