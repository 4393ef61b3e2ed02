package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/pmi"
)

// Main is gorun: it parses args (os.Args, program name first), runs the job
// and returns the exit status for os.Exit.
func Main(args []string) int {
	if len(args) == 0 {
		args = []string{"gorun"}
	}
	return run(args[1:], os.Stdout, os.Stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := ParseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return exitUsage
	}
	if opts.Wrap {
		return wrap(opts, stdout, stderr)
	}
	place, err := Plan(opts)
	switch {
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return exitFailure
	}
	return Run(opts, place, stdout, stderr)
}

// wrap runs a foreign launcher (opts.Program with opts.Args) with a
// GORUN_KVS rendezvous server in its environment, forwards SIGINT/SIGTERM
// (and SIGUSR1/SIGUSR2, which mpirun passes on to its ranks) to it, and
// returns its exit status. The server binds port 0 on
// GORUN_KVS_BIND's address if set, else on the address toward the first -H
// host, else on loopback.
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
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, levelSignals[0], levelSignals[1])
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "gorun: --wrap: starting %s: %v\n", opts.Program, err)
		return exitFailure
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig) // the launcher forwards it to its ranks
		case <-waited:
			code, _ := exitOf(cmd.ProcessState)
			return code
		}
	}
}
