package mpi

import (
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/weft-hpc/weft/internal/cpubind"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/trace"
)

// bindRank binds this process, every thread of it, to the rank's share
// of its node's CPUs (Options.BindTo), before the devices start their
// goroutines: gorun binds the ranks it starts on its own host itself, and
// asks those it starts on others to, whose CPUs only they can see.
// Unbound, two polling ranks of a node sometimes share a CPU for many
// milliseconds while another idles. A rank on the launcher's own machine
// (a network namespace standing for a host: cpubind.LauncherBootEnv) is
// left alone. It fills in opts.NodeCPUs and, unless
// the environment sets GOMAXPROCS, sets it to the rank's share as the
// runtime would have had the rank started bound.
func bindRank(cl pmi.Client, opts *Options) error {
	if opts.BindTo == "" || opts.BindTo == "none" {
		return nil
	}
	if id := os.Getenv(cpubind.LauncherBootEnv); id != "" && id == cpubind.BootID() {
		trace.Printf(trace.Setup, "mpi %d: not bound (WEFT_BIND_TO=%s): this host is the launcher's machine, whose CPUs every such host shares",
			cl.Rank(), opts.BindTo)
		return nil
	}
	local := cl.Info().LocalRanks
	id := slices.Index(local, cl.Rank())
	if id < 0 {
		return fmt.Errorf("mpi: init: binding (WEFT_BIND_TO=%s): rank %d is not among its node's ranks %v", opts.BindTo, cl.Rank(), local)
	}
	sets, shared, err := cpubind.For(opts.BindTo, len(local))
	if err != nil {
		return fmt.Errorf("mpi: init: WEFT_BIND_TO=%s: %w", opts.BindTo, err)
	}
	if sets == nil {
		return nil // a lone rank under auto: its share is every CPU
	}
	if err := cpubind.BindProcess(sets[id]); err != nil {
		return fmt.Errorf("mpi: init: WEFT_BIND_TO=%s: %w", opts.BindTo, err)
	}
	if opts.NodeCPUs == 0 {
		opts.NodeCPUs = shared
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
	}
	trace.Printf(trace.Setup, "mpi %d: bound to CPUs %s (WEFT_BIND_TO=%s: rank %d of %d on this node, %d CPUs shared; GOMAXPROCS %d)",
		cl.Rank(), cpubind.List(sets[id]), opts.BindTo, id, len(local), shared, runtime.GOMAXPROCS(0))
	return nil
}
