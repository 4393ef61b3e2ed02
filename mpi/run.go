package mpi

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/internal/devices"
	"github.com/weft-hpc/weft/lapi"
)

// Run starts n ranks as goroutines in this process, over the in-process
// device, calls fn on each with its world communicator, and returns the
// first error any rank returned (a panic becomes an error naming the rank).
// When a rank fails, the others' pending calls toward it fail with
// ErrPeerFailed instead of hanging. A rank whose fn has returned goes on
// making progress until every rank's has, so that what it sent still
// arrives. With WEFT_FAULTS set, the device drops,
// reorders, duplicates and corrupts frames and lapi's reliability repairs
// it: results must not change. Run is RunWith the Options of the
// environment (OptionsFromEnv): a variable not of its form fails Run with
// an error naming it.
func Run(n int, fn func(c *Comm) error) error {
	opts, err := OptionsFromEnv()
	if err != nil {
		return fmt.Errorf("mpi: run: %w", err)
	}
	return RunWith(n, opts, fn)
}

// RunWith is Run configured by opts instead of the environment's tuning
// variables. Its ranks share the in-process device, so opts.Transport,
// Bind, NodeCPUs and Yield do not apply; unless opts.Sysmon says batch,
// the Go runtime's threads are left as they are. A field out of its range
// fails with an error wrapping ErrArg that names it.
func RunWith(n int, opts Options, fn func(c *Comm) error) error {
	return runNodes(n, opts, nil, fn)
}

// runNodes is RunWith with the ranks pretending to run on nodes (nodes[r]
// is rank r's, named by its lowest rank; nil: one node), so that the
// node-aware collectives (hier.go) run over the in-process device. Its
// one shared block is every rank's, indexed by world rank as on one node,
// and a rank's communicators use it only with the ranks of its node.
func runNodes(n int, opts Options, nodes []int, fn func(c *Comm) error) error {
	if n < 1 {
		return fmt.Errorf("mpi: run %d ranks: %w", n, ErrArg)
	}
	if err := opts.check(); err != nil {
		return fmt.Errorf("mpi: run: %w", err)
	}
	if err := batchSysmon(opts.Sysmon, "normal"); err != nil {
		return fmt.Errorf("mpi: run: %w", err)
	}
	worlds, err := openInproc(n, opts, nodes)
	if err != nil {
		return err
	}
	return runWorlds(worlds, fn)
}

// runWorlds runs fn as each world's rank on a goroutine of its own and
// closes the worlds' contexts once every rank is done: a rank that fails
// (or panics) is failed at the others, and the first error is returned.
func runWorlds(worlds []*World, fn func(c *Comm) error) error {
	n := len(worlds)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(r int, err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		for q, w := range worlds {
			if q != r {
				w.lc.FailPeer(lapi.Rank(r), err.Error())
			}
		}
	}
	// A rank whose fn has returned keeps making progress until every
	// rank's has: a small send is complete once lapi has copied it, but
	// lapi may only have queued it (the device toward a slower rank was
	// full), and only this rank's progress hands it on. A rank that
	// stopped there, the root of a loop of Bcasts or a leaf of a loop of
	// Reduces, left the others waiting for ever for its last messages.
	// Once every fn has returned, no rank waits for anything.
	all, allDone := context.WithCancel(context.Background())
	defer allDone()
	var running atomic.Int32
	running.Store(int32(n))
	wg.Add(n)
	for r := range n {
		go func() {
			defer wg.Done()
			err := runRank(r, worlds[r].comm, fn)
			if err != nil {
				fail(r, err)
			}
			if running.Add(-1) == 0 {
				allDone()
			}
			if err == nil {
				// Ends when all is done (or the context is closed).
				_ = worlds[r].lc.Wait(all, func() (bool, error) { return false, nil })
			}
		}()
	}
	wg.Wait()
	for _, w := range worlds {
		w.lc.Close()
	}
	return first
}

// runRank calls fn as rank r: a panic becomes an error naming the rank,
// as does an error that does not name it already.
func runRank(r int, c *Comm, fn func(c *Comm) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("mpi: rank %d panicked: %v\n%s", r, p, debug.Stack())
		}
	}()
	if err = fn(c); err != nil && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
		err = fmt.Errorf("rank %d: %w", r, err)
	}
	return err
}

// openInproc makes n worlds joined by one in-process fabric, configured
// by opts, on nodes as runNodes says.
func openInproc(n int, opts Options, nodes []int) ([]*World, error) {
	var kb [8]byte
	_, _ = crand.Read(kb[:])
	key := binary.LittleEndian.Uint64(kb[:])
	devs, err := devices.Inproc(n, key)
	if err != nil {
		return nil, err
	}
	spin := lapiDefaultSpin
	if n > runtime.GOMAXPROCS(0) {
		spin = -1 // more ranks than cores: spinning only delays the rank that would answer
	}
	worlds := make([]*World, n)
	// closeRest closes the worlds of ranks below r and the devices no
	// context has taken, from rank from on.
	closeRest := func(r, from int) {
		for _, o := range worlds[:r] {
			o.lc.Close()
		}
		for _, d := range devs[from:] {
			d.Close()
		}
	}
	for r := range n {
		lc, err := lapi.Open(lapi.Config{Device: devs[r], Rank: lapi.Rank(r), Size: n, JobKey: key, Spin: spin,
			SingleCopyThreshold: opts.SingleCopy, Track: newTracker(opts)})
		if err != nil {
			closeRest(r, r)
			return nil, fmt.Errorf("mpi: run: rank %d: %w", r, err)
		}
		l := layout{nodes: nodes}
		if nodes != nil {
			l = pretendLayout(nodes, r)
		}
		w, err := newWorldLayout(lc, opts, l)
		if err != nil {
			lc.Close()
			closeRest(r, r+1)
			return nil, fmt.Errorf("mpi: run: %w", err)
		}
		w.oversub = spin < 0
		worlds[r] = w
	}
	return worlds, nil
}

// lapiDefaultSpin: 0 selects lapi's default.
const lapiDefaultSpin time.Duration = 0

// pretendLayout is rank r's layout of a job whose ranks pretend to be on
// nodes, each rank's device its own: a node's ranks find each other in the
// shared block by world rank.
func pretendLayout(nodes []int, r int) layout {
	l := layout{nodes: nodes, slots: make([]int, len(nodes)), nslots: len(nodes)}
	for q := range nodes {
		l.slots[q] = -1
		if nodes[q] == nodes[r] {
			l.slots[q] = q
		}
	}
	return l
}
