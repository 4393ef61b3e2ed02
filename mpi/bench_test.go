package mpi

import (
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/shm"
)

// BenchmarkSendRecv is an MPI ping-pong between two goroutine ranks over
// the in-process device; us/one-way is half the round trip, to compare
// with lapi's BenchmarkAMLatency beneath it.
func BenchmarkSendRecv(b *testing.B) {
	for _, size := range []int{8, 1024, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.ReportAllocs()
			err := Run(2, func(c *Comm) error {
				buf := make([]byte, size)
				if c.Rank() == 0 {
					b.SetBytes(int64(size))
					b.ResetTimer()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						if err := Send(c, buf, 1, 0); err != nil {
							return err
						}
						if _, err := Recv(c, buf, 1, 0); err != nil {
							return err
						}
					}
					b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/2000, "us/one-way")
					b.StopTimer()
					return nil
				}
				for i := 0; i < b.N; i++ {
					if _, err := Recv(c, buf, 0, 0); err != nil {
						return err
					}
					if err := Send(c, buf, 0, 0); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkAllreduce8B times an 8-byte Allreduce on n goroutine ranks.
func BenchmarkAllreduce8B(b *testing.B) {
	for _, n := range []int{2, 4, 64, 1024} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			v := make([][]float64, n)
			benchRanks(b, n, func(c *Comm) error {
				v[c.Rank()] = []float64{1}
				return nil
			}, func(c *Comm) error { return Allreduce(c, v[c.Rank()], v[c.Rank()], Sum) })
		})
	}
}

// BenchmarkBcast8B times an 8-byte Bcast from root 1 (from 0 on 2 ranks)
// on n goroutine ranks, by messages and through the shared block.
func BenchmarkBcast8B(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, shm := range []string{"on", "off"} {
			b.Run(fmt.Sprintf("n=%d/shm=%s", n, shm), func(b *testing.B) {
				b.Setenv("WEFT_SHMCOLL", shm)
				v := make([][]float64, n)
				benchRanks(b, n, func(c *Comm) error {
					v[c.Rank()] = []float64{1}
					return nil
				}, func(c *Comm) error { return Bcast(c, v[c.Rank()], 1%n) })
			})
		}
	}
}

// BenchmarkAllreduceLarge times a 16 MiB float64 Allreduce on n goroutine
// ranks, reduced by half-RDMA accumulate and by the two-sided ring
// (receive a block, then reduce it).
func BenchmarkAllreduceLarge(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, mode := range []string{"half-rdma", "ring"} {
			b.Run(fmt.Sprintf("n=%d/%s/16MiB", n, mode), func(b *testing.B) {
				if mode == "ring" {
					b.Setenv("WEFT_ACCUMULATE", "0")
				}
				const count = 2 << 20
				b.SetBytes(8 * count)
				v := make([][]float64, n)
				benchRanks(b, n, func(c *Comm) error {
					v[c.Rank()] = make([]float64, count)
					return nil
				}, func(c *Comm) error { return Allreduce(c, v[c.Rank()], v[c.Rank()], Sum) })
			})
		}
	}
}

// BenchmarkHier times collectives on 4 goroutine ranks pretending to run
// on two nodes of two ({0,0,2,2}), node-aware (hier.go) and flat (the
// message algorithms over the whole communicator, as before), and on one
// node (the shared block, as before, for reference).
func BenchmarkHier(b *testing.B) {
	colls := []struct {
		name  string
		bytes int
		op    func(c *Comm, v []float64) error
	}{
		{"Barrier", 0, func(c *Comm, _ []float64) error { return c.Barrier() }},
		{"Allreduce", 8, func(c *Comm, v []float64) error { return Allreduce(c, v, v, Sum) }},
		{"Allreduce", 2 << 10, func(c *Comm, v []float64) error { return Allreduce(c, v, v, Sum) }},
		{"Allreduce", 1 << 20, func(c *Comm, v []float64) error { return Allreduce(c, v, v, Sum) }},
		{"Bcast", 8, func(c *Comm, v []float64) error { return Bcast(c, v, 1) }},
		{"Bcast", 1 << 20, func(c *Comm, v []float64) error { return Bcast(c, v, 1) }},
		{"Allgather", 8, func(c *Comm, v []float64) error { return Allgather(c, v[:len(v)/4], v) }},
	}
	for _, cl := range colls {
		for _, mode := range []string{"hier", "flat", "onenode"} {
			b.Run(fmt.Sprintf("%s/%dB/%s", cl.name, cl.bytes, mode), func(b *testing.B) {
				nodes := []int{0, 0, 2, 2}
				if mode == "onenode" {
					nodes = nil
				}
				v := make([][]float64, 4)
				benchNodes(b, 4, nodes, func(c *Comm) error {
					if mode == "flat" {
						c.hier = nil
					}
					v[c.Rank()] = make([]float64, max(4, cl.bytes/8))
					return nil
				}, func(c *Comm) error { return cl.op(c, v[c.Rank()]) })
			})
		}
	}
}

// benchRanks runs setup, then b.N times op, on n goroutine ranks; rank 0
// keeps the time, from a barrier after setup.
func benchRanks(b *testing.B, n int, setup, op func(c *Comm) error) {
	benchNodes(b, n, nil, setup, op)
}

// benchNodes is benchRanks on ranks pretending to be on nodes (runNodes).
func benchNodes(b *testing.B, n int, nodes []int, setup, op func(c *Comm) error) {
	opts, err := OptionsFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	err = runNodes(n, opts, nodes, func(c *Comm) error {
		if err := setup(c); err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			b.ResetTimer()
		}
		for i := 0; i < b.N; i++ {
			if err := op(c); err != nil {
				return err
			}
		}
		if c.Rank() == 0 {
			b.StopTimer()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSendRecvCPU is BenchmarkSendRecv/8B's work without its waiting:
// one goroutine plays both ranks (post the receive, send, poll it in), so
// ns/op is the processor time of one round trip, free of the cross-core
// hand-offs that make the ping-pong noisy on a shared machine. Compare
// with lapi's BenchmarkAMLatencyCPU. The shm series runs the ranks as
// gorun does (reintegration on), over the shared-memory rings.
func BenchmarkSendRecvCPU(b *testing.B) {
	for _, dev := range []string{"inproc", "shm"} {
		b.Run(dev, func(b *testing.B) {
			worlds := devWorlds(b, dev, 2)
			c0, c1 := worlds[0].comm, worlds[1].comm
			buf := make([]byte, 8)
			hop := func(from, to *Comm) {
				r, err := to.irecv(buf, 1, from.rank, 0, to.ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := Send(from, buf, to.rank, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := r.waitRecycle(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				hop(c0, c1)
				hop(c1, c0)
			}
		})
	}
}

// devWorlds opens n worlds in this process over the named device,
// "inproc", "shm" or "udp" (inprocWorlds, shmWorlds, udpWorlds).
func devWorlds(tb testing.TB, dev string, n int) []*World {
	switch dev {
	case "shm":
		return shmWorlds(tb, n)
	case "udp":
		return udpWorlds(tb, n)
	}
	return inprocWorlds(tb, n)
}

// shmWorlds opens n worlds over the shared-memory device in this process,
// with reintegration as mpi.Init has it, closed when the test ends. It
// skips where the device is unsupported.
func shmWorlds(tb testing.TB, n int) []*World {
	tb.Helper()
	key := uint64(time.Now().UnixNano())
	devs, err := shm.OpenLocal(key, n, shm.Options{})
	if err != nil {
		tb.Skipf("shm device unavailable: %v", err)
	}
	worlds := make([]*World, n)
	lcs := make([]*lapi.Context, n)
	for r, d := range devs {
		for p, q := range devs {
			if err := d.Connect(lapi.Rank(p), q.Addr()); err != nil {
				tb.Fatal(err)
			}
		}
		lc, err := lapi.Open(lapi.Config{Device: d, Rank: lapi.Rank(r), Size: n, JobKey: key, Reintegrate: true})
		if err != nil {
			tb.Fatal(err)
		}
		lcs[r] = lc
		if worlds[r], err = newWorld(lc, envOptions(tb), nil); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, lc := range lcs {
			lc.Close()
		}
	})
	for joined := false; !joined; {
		joined = true
		for _, lc := range lcs {
			lc.Progress()
			for p := range n {
				joined = joined && lc.RDMAReady(lapi.Rank(p))
			}
		}
	}
	return worlds
}

// inprocWorlds opens n worlds over one in-process fabric, closed when the
// test ends: for tests that drive ranks from one goroutine.
func inprocWorlds(tb testing.TB, n int) []*World {
	tb.Helper()
	worlds, err := openInproc(n, envOptions(tb), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, w := range worlds {
			w.lc.Close()
		}
	})
	return worlds
}
