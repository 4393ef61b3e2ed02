package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/devices"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/lapi"
)

// Collectives on communicators whose members are on hosts that differ:
// every member must choose the same algorithm, so none may choose by a
// property of its own host alone.

// TestAllreduceMixedOversub: in a job of three nodes of which only node 0
// runs more ranks than cores, Allreduces of 128 KiB (where an
// oversubscribed communicator keeps recursive doubling and another takes
// the ring) give exact results on the world (its leaders' step spans the
// nodes), on one rank per node, on each node alone and on the two nodes
// that are not oversubscribed; each member reads the same
// oversubscription of its communicator. Direct reads are off, as they
// are between hosts.
func TestAllreduceMixedOversub(t *testing.T) {
	t.Setenv("WEFT_DIRECT", "0")
	t.Setenv("WEFT_TIMEOUT", "20s")
	nodes := []int{0, 0, 2, 2, 4, 4}
	over := make([]bool, len(nodes))
	for r, n := range nodes {
		over[r] = n == 0
	}
	err := runLayout(t, nodes, false, func(c *Comm) error {
		c.w.agreeOversub(over) // as Init does with what every rank published
		me := c.Rank()
		alone, err := c.Split(nodes[me], me) // each node's ranks
		if err != nil {
			return err
		}
		perNode, err := c.Split(me%2, me) // one rank per node, flat
		if err != nil {
			return err
		}
		rest, err := c.Split(map[bool]int{true: 0, false: 1}[nodes[me] == 0], me) // nodes 2 and 4
		if err != nil {
			return err
		}
		comms := []struct {
			name string
			c    *Comm
			over bool
		}{{"world", c, true}, {"one per node", perNode, true}, {"one node", alone, over[me]}, {"two nodes", rest, over[me]}}
		for _, k := range comms {
			if got := k.c.oversubscribed(); got != k.over {
				return fmt.Errorf("%s: oversubscribed %v, want %v", k.name, got, k.over)
			}
			const m = 16 << 10 // 128 KiB of float64
			v := make([]float64, m)
			for e := range v {
				v[e] = float64(k.c.Rank()*3 + e%7)
			}
			if err := Allreduce(k.c, v, v, Sum); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
			q := k.c.Size()
			for e, x := range v {
				if want := float64(3*q*(q-1)/2 + q*(e%7)); x != want {
					return fmt.Errorf("%s: element %d = %v, want %v", k.name, e, x, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgreeOversub: a world keeps the ranks' oversubscription only when
// the nodes differ in it.
func TestAgreeOversub(t *testing.T) {
	w := &World{rank: 1}
	w.agreeOversub([]bool{true, true})
	if !w.oversub || w.oversubAt != nil {
		t.Errorf("all oversubscribed: oversub %v, oversubAt %v; want true, nil", w.oversub, w.oversubAt)
	}
	w.agreeOversub([]bool{true, false})
	if w.oversub || w.oversubAt == nil {
		t.Errorf("rank 0's node only: oversub %v, oversubAt %v; want false, both", w.oversub, w.oversubAt)
	}
}

// TestParseAddr: what a rank publishes at Init is read back, and a
// record not of its form is refused naming it.
func TestParseAddr(t *testing.T) {
	for _, over := range []bool{false, true} {
		node, o, addr, err := parseAddr(formatAddr(2, over, "10.0.0.1:5@x"), 4)
		if err != nil || node != 2 || o != over || addr != "10.0.0.1:5@x" {
			t.Errorf("oversub %v: got %d %v %q %v", over, node, o, addr, err)
		}
	}
	for _, v := range []string{"2@addr", "2,2@addr", "4,0@addr", "-1,0@addr", "x,1@addr", "2,0"} {
		if _, _, _, err := parseAddr(v, 4); err == nil {
			t.Errorf("parseAddr(%q) accepted", v)
		}
	}
}

// runSingleCopy is runNodes with lapi's single-copy threshold given per
// rank (0: the default, negative: none), as Init opens shm under a route
// on a host of several ranks and plain UDP, without single copies, on a
// host of one.
func runSingleCopy(t *testing.T, nodes, singleCopy []int, fn func(c *Comm) error) error {
	t.Helper()
	n := len(nodes)
	opts := envOptions(t)
	opts.Timeout = 10 * time.Second
	const key = 0x7e5f
	devs, err := devices.Inproc(n, key)
	if err != nil {
		t.Fatal(err)
	}
	worlds := make([]*World, n)
	for r := range n {
		lc, err := lapi.Open(lapi.Config{Device: devs[r], Rank: lapi.Rank(r), Size: n, JobKey: key, Spin: -1,
			SingleCopyThreshold: singleCopy[r]})
		if err != nil {
			t.Fatal(err)
		}
		l := pretendLayout(nodes, r)
		if worlds[r], err = newWorldLayout(lc, opts, l); err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
	}
	// A rank that is done keeps making progress until every rank is.
	all, allDone := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, n)
	var left sync.WaitGroup
	left.Add(n)
	go func() { left.Wait(); allDone() }()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(worlds[r].comm); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
			left.Done()
			_ = worlds[r].lc.Wait(all, func() (bool, error) { return false, nil })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// hostVal is rank r's element e.
func hostVal(r, e int) int64 { return int64((r*31+e*7)%11 - 5) }

// checkVals reports the first element of got that is not want's.
func checkVals(what string, got []int64, want func(e int) int64) error {
	for e, v := range got {
		if w := want(e); v != w {
			return fmt.Errorf("%s: element %d = %d, want %d", what, e, v, w)
		}
	}
	return nil
}

// TestPutCollsMixedSingleCopy: a job of 4 ranks on three hosts, 2+1+1,
// where the ranks alone on their host have no single copy. An Allgather
// of 512 KiB per rank (the leaders' blocks are 1 MiB, from where Puts
// depend on how the members are reached) and an Alltoall of 1 MiB blocks
// on one rank per host give exact results, without a hang: every member
// takes Puts, as across hosts.
func TestPutCollsMixedSingleCopy(t *testing.T) {
	nodes := []int{0, 0, 2, 3}
	sc := []int{0, 0, -1, -1}
	err := runSingleCopy(t, nodes, sc, func(c *Comm) error {
		if got := c.w.lc.SingleCopy() > 0; got != (sc[c.Rank()] == 0) {
			return fmt.Errorf("single copy %v", got)
		}
		me := c.Rank()
		const m = 64 << 10
		send, all := make([]int64, m), make([]int64, c.Size()*m)
		for e := range send {
			send[e] = hostVal(me, e)
		}
		if err := Allgather(c, send, all); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		if err := checkVals("allgather", all, func(i int) int64 { return hostVal(i/m, i%m) }); err != nil {
			return err
		}
		if l := c.hier.leaders; l != nil && !l.allgatherPut(2*m*8) {
			return fmt.Errorf("the leaders' blocks of %d bytes did not go by Puts", 2*m*8)
		}
		s, err := c.Split(map[bool]int{true: 1, false: 0}[me == 1], me) // {0, 2, 3}: one rank per host
		if err != nil || me == 1 {
			return err
		}
		const b = 128 << 10 // 1 MiB blocks
		p := s.Size()
		a2, r2 := make([]int64, p*b), make([]int64, p*b)
		for i := range a2 {
			a2[i] = hostVal(s.Rank()*p+i/b, i%b)
		}
		if err := Alltoall(s, a2, r2); err != nil {
			return fmt.Errorf("alltoall: %w", err)
		}
		if err := checkVals("alltoall", r2, func(i int) int64 { return hostVal((i/b)*p+s.Rank(), i%b) }); err != nil {
			return err
		}
		if !s.alltoallPut(b * 8) {
			return fmt.Errorf("one rank per host: blocks of %d bytes did not go by Puts", b*8)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckSettings: a rank whose settings by which collectives choose
// differ from rank 0's fails naming the first that differs; a setting
// left to its default and one set to the default agree.
func TestCheckSettings(t *testing.T) {
	rank0 := strings.Join(collSettings(Options{Direct: directLarge}), ",")
	if err := checkSettings(collSettings(Options{}), rank0); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, c := range []struct {
		o    Options
		name string
	}{
		{Options{Direct: -1}, "WEFT_DIRECT=0 here, WEFT_DIRECT=131072 at rank 0"},
		{Options{AlltoallRDMA: 1 << 20}, "WEFT_ALLTOALL_RDMA=1048576 here"},
		{Options{SingleCopy: -1}, "WEFT_SINGLECOPY=off here, WEFT_SINGLECOPY=on at rank 0"},
		{Options{NoShmColl: true}, "WEFT_SHMCOLL=off here"},
	} {
		err := checkSettings(collSettings(c.o), rank0)
		if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: %v, want ErrArg naming %q", c.o, err, c.name)
		}
	}
	if err := checkSettings(collSettings(Options{}), "WEFT_DIRECT=131072"); !errors.Is(err, ErrArg) {
		t.Errorf("rank 0 published fewer: %v, want ErrArg", err)
	}
}

// kvsJob is an in-process PMI job of n ranks, each on a node of its own:
// its clients share one key-value space, and Fence is a barrier.
type kvsJob struct {
	mu      sync.Mutex
	cond    *sync.Cond
	kv      map[string]string
	n       int
	arrived int
	round   int
}

// kvsClient is rank's client of job.
type kvsClient struct {
	pmi.Client
	job  *kvsJob
	rank int
}

func (c kvsClient) Rank() int      { return c.rank }
func (c kvsClient) Size() int      { return c.job.n }
func (c kvsClient) Kind() string   { return "test" }
func (c kvsClient) Info() pmi.Info { return pmi.Info{Node: c.rank, LocalRanks: []int{c.rank}} }

func (c kvsClient) Put(k, v string) error {
	c.job.mu.Lock()
	defer c.job.mu.Unlock()
	c.job.kv[k] = v
	return nil
}

func (c kvsClient) Get(k string) (string, error) {
	c.job.mu.Lock()
	defer c.job.mu.Unlock()
	v, ok := c.job.kv[k]
	if !ok {
		return "", fmt.Errorf("%s: %w", k, pmi.ErrNotFound)
	}
	return v, nil
}

func (c kvsClient) Fence() error {
	j := c.job
	j.mu.Lock()
	defer j.mu.Unlock()
	round := j.round
	if j.arrived++; j.arrived == j.n {
		j.arrived, j.round = 0, round+1
		j.cond.Broadcast()
	}
	for j.round == round {
		j.cond.Wait()
	}
	return nil
}

// TestExchangeAddrsAgrees: Init's exchange gives every rank each rank's
// node and oversubscription, and fails at a rank whose settings by which
// collectives choose differ from rank 0's, naming the setting.
func TestExchangeAddrsAgrees(t *testing.T) {
	const n = 3
	job := &kvsJob{kv: make(map[string]string), n: n}
	job.cond = sync.NewCond(&job.mu)
	over := []bool{false, true, false}
	opts := []Options{{}, {Direct: directLarge}, {Direct: -1}}
	type result struct {
		nodes     []int
		oversubAt []bool
		err       error
	}
	res := make([]result, n)
	var wg sync.WaitGroup
	for r := range n {
		cl := kvsClient{job: job, rank: r}
		set, err := devices.Open(cl, devices.Config{JobKey: 0x7e5f, Transport: "udp", Bind: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var x result
			x.nodes, x.oversubAt, _, x.err = exchangeAddrs(cl, set, opts[r], over[r])
			res[r] = x
		}()
	}
	wg.Wait()
	for r, x := range res[:2] {
		if x.err != nil || !slices.Equal(x.nodes, []int{0, 1, 2}) || !slices.Equal(x.oversubAt, over) {
			t.Errorf("rank %d: nodes %v, oversubscribed %v, %v; want [0 1 2], %v", r, x.nodes, x.oversubAt, x.err, over)
		}
	}
	if err := res[2].err; !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "WEFT_DIRECT=0 here, WEFT_DIRECT=131072 at rank 0") {
		t.Errorf("rank 2 with WEFT_DIRECT off: %v, want ErrArg naming WEFT_DIRECT", err)
	}
}
