// Command bench measures weft with the OSU micro-benchmarks' methods and
// prints their tables, so that the scripts that read OSU output read it and
// the figures sit beside Open MPI's and MPICH's:
//
//	gorun -n 2 ./bench latency -max 64K
//	gorun -n 4 ./bench allreduce -csv ar.csv -plot ar.png
//	bench compare -plot lat.png weft.csv openmpi.csv mpich.csv
//
// bench/compare.sh runs weft, Open MPI and MPICH side by side and prints
// the ratios; see its header.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command: it returns the exit status (0, 1 for a failed run,
// 2 for a bad command line).
func run(args []string, stdout, stderr *os.File) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		fmt.Fprintln(stdout, "  (run bench BENCHMARK -h for the flags)")
		return 0
	case "compare":
		return exitStatus(stderr, "bench compare", compareMain(args[1:], stdout, stderr))
	case "merge":
		return exitStatus(stderr, "bench merge", mergeMain(args[1:], stderr))
	case "linestate":
		return exitStatus(stderr, "bench linestate", lineStateMain(args[1:], stdout, stderr))
	}
	// Every rank parses the same command line; flag's complaints are held
	// back so that only rank 0 shows them.
	var flagOut bytes.Buffer
	o, perr := parseOptions(args[0], args[1:], &flagOut)
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	c := w.Comm()
	lead := c.Rank() == 0
	if perr != nil {
		status := exitStatus(io.Discard, "", perr)
		if lead {
			io.Copy(stderr, &flagOut)
			exitStatus(stderr, "bench", perr)
		}
		// Finalize's barrier keeps every rank alive until rank 0 has
		// spoken: gorun stops the job at the first rank that exits non-zero.
		w.Finalize()
		return status
	}
	out := io.Discard
	var pr *progress
	if lead {
		out = stdout
		pr = newProgress(stderr)
	}
	t, err := measure(c, o, out, pr)
	if err != nil {
		// No Finalize: a peer may be gone, and its barrier would hang.
		// Every rank that fails says so: the first failure is the cause.
		fmt.Fprintf(stderr, "bench: rank %d: %v\n", c.Rank(), err)
		return 1
	}
	status := 0
	if lead {
		if err := save(o, t); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			status = 1
		}
	}
	if err := w.Finalize(); err != nil {
		fmt.Fprintf(stderr, "bench: rank %d: finalize: %v\n", c.Rank(), err)
		return 1
	}
	return status
}

// save writes the CSV and the plot the options ask for.
func save(o *options, t *table) error {
	if o.csv != "" {
		if err := writeFile(o.csv, func(w io.Writer) error { return writeCSV(w, t) }); err != nil {
			return fmt.Errorf("-csv: %w", err)
		}
	}
	if o.plot != "" {
		title := fmt.Sprintf("weft %s (%s)", o.bench.title, t.label)
		if err := plotTables(o.plot, title, []*table{t}); err != nil {
			return fmt.Errorf("-plot %s: %w", o.plot, err)
		}
	}
	return nil
}

// exitStatus reports err to w under name and maps it to an exit status:
// 0 for none or -h, 2 for a bad command line, 1 otherwise.
func exitStatus(w io.Writer, name string, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(w, "%s: %v\n(run bench -h for help)\n", name, err)
		return 2
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	return 1
}
