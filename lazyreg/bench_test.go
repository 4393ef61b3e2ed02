package lazyreg

import (
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// lockingTPT registers in the rank's TPT the way a NIC's registration
// costs: it first locks the pages in memory with mlock, which faults in
// and pins every page as ibv_reg_mr's get_user_pages does, and unlocks
// them on deregistration. Where mlock is refused (RLIMIT_MEMLOCK) it reads
// every page instead, the least a registration does.
type lockingTPT struct {
	tpt    *hal.TPT
	plain  bool // register in the TPT only, as lapi and mpi do: no pinning
	mu     sync.Mutex
	locked map[uint32][]byte
	sum    byte
}

func (r *lockingTPT) Register(mem []byte, acc hal.Access) (hal.PVO, error) {
	locked := mem // what Deregister unlocks: nil when nothing was locked
	if r.plain {
		locked = nil
	} else if err := syscall.Mlock(mem); err != nil {
		for i := 0; i < len(mem); i += 4096 {
			r.sum += mem[i]
		}
		locked = nil
	}
	p, err := r.tpt.Register(mem, acc)
	if err != nil {
		return p, err
	}
	r.mu.Lock()
	r.locked[p.Entry] = locked
	r.mu.Unlock()
	return p, nil
}

func (r *lockingTPT) Deregister(p hal.PVO) error {
	r.mu.Lock()
	mem := r.locked[p.Entry]
	delete(r.locked, p.Entry)
	r.mu.Unlock()
	if mem != nil {
		_ = syscall.Munlock(mem)
	}
	return r.tpt.Deregister(p)
}

// BenchmarkCache sends from the same buffer again and again: each send
// registers its source (through the cache, or directly), lets the software
// RDMA engine read it through its PVO into the destination, and releases
// (or deregisters) it. MB/s is the send bandwidth; hit-rate and regs/op
// count what the cache saved. The pinned cases lock the pages as a NIC's
// registration does; the tpt cases register in the TPT alone, which is
// what lapi's and mpi's software RDMA path pays per message.
func BenchmarkCache(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		src, dst := make([]byte, size), make([]byte, size)
		for _, plain := range []bool{false, true} {
			for _, cached := range []bool{true, false} {
				kind := "pinned"
				if plain {
					kind = "tpt"
				}
				name := fmt.Sprintf("%dKiB/%s/nocache", size>>10, kind)
				if cached {
					name = fmt.Sprintf("%dKiB/%s/cache", size>>10, kind)
				}
				b.Run(name, func(b *testing.B) {
					reg := &lockingTPT{tpt: hal.NewTPT(), locked: map[uint32][]byte{}, plain: plain}
					b.SetBytes(int64(size))
					b.ReportAllocs()
					if !cached {
						sends := 0
						for b.Loop() {
							p, err := reg.Register(src, hal.AccessRead|hal.AccessWrite)
							if err != nil {
								b.Fatal(err)
							}
							if err := reg.tpt.Copy(p, dst, hal.AccessRead); err != nil {
								b.Fatal(err)
							}
							if err := reg.Deregister(p); err != nil {
								b.Fatal(err)
							}
							sends++
						}
						b.ReportMetric(0, "hit-rate")
						b.ReportMetric(1, "regs/op")
						return
					}
					c, err := New[hal.PVO](reg, Options{})
					if err != nil {
						b.Fatal(err)
					}
					sends := 0
					for b.Loop() {
						r, err := c.Acquire(src)
						if err != nil {
							b.Fatal(err)
						}
						if err := reg.tpt.Copy(r.Key.Add(r.Offset), dst, hal.AccessRead); err != nil {
							b.Fatal(err)
						}
						if err := c.Release(r); err != nil {
							b.Fatal(err)
						}
						sends++
					}
					s := c.Stats()
					b.ReportMetric(s.HitRate(), "hit-rate")
					b.ReportMetric(float64(s.Registrations)/float64(sends), "regs/op")
					if err := c.Close(); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}
