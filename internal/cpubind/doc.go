// Package cpubind shares a node's CPUs among its ranks and binds a rank
// to its share (--bind-to, WEFT_BIND_TO).
//
// With more ranks on a node than the CPUs they may run on, each rank is
// bound to one CPU, consecutive ranks together. Then every rank yields
// its CPU whenever it waits, and the kernel's load balancing left to
// itself spreads Go processes unevenly: their runtime threads wake now
// and then and count as load, and a rank that shares its CPU with two
// others arrives late at every step.
//
// With no more ranks than CPUs, each rank gets its own share of them, the
// same number each (give or take one): two ranks on two CPUs get one
// each, two on 64 get 32 each, and a rank's goroutines still spread over
// its share (GOMAXPROCS follows it). Unbound, the kernel sometimes starts
// two polling ranks on one CPU and leaves them there for milliseconds,
// each spinning through the other's turn, while another CPU idles.
//
// gorun binds the ranks it starts on its own host before they run
// (BindThread around the start: a process inherits the starting thread's
// mask). A rank it starts on another host binds itself in mpi.Init
// (BindProcess, every thread of the process), from WEFT_BIND_TO and its
// place among its host's ranks, unless that host is the launcher's own
// machine (LauncherBootEnv): network namespaces standing for hosts share
// its CPUs, and their shares would overlap.
//
// cpubind may import the standard library and golang.org/x/sys/unix.
package cpubind
