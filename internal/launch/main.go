package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
