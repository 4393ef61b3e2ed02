package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSplitRendezvous: a large message is copied by both ends, the
// receiver reading the lower part and the sender writing the upper part
// (one copy each over inproc), and lands intact; a receive into a buffer
// shorter than the message splits what fits and reports ErrTruncate; and
// with WEFT_SPLIT=0 the receiver reads it all.
func TestSplitRendezvous(t *testing.T) {
	for _, split := range []string{"", "0"} {
		t.Run("WEFT_SPLIT="+split, func(t *testing.T) {
			if split != "" {
				t.Setenv("WEFT_SPLIT", split)
			}
			const n = 3<<20 + 12345 // not a page multiple
			var worlds [2]*World
			err := Run(2, func(c *Comm) error {
				worlds[c.Rank()] = c.World()
				if err := c.Barrier(); err != nil {
					return err
				}
				msg := make([]byte, n)
				for i := range msg {
					msg[i] = byte(i * 7)
				}
				for round := range 4 {
					if c.Rank() == 0 {
						var unseen error
						if round == 3 {
							// The receiver waits before the header
							// comes: the split starts from its wait.
							// (If its wait is never named, the send
							// still goes, to end the receive.)
							for start := time.Now(); worlds[1].Waiting() == ""; runtime.Gosched() {
								if time.Since(start) > 20*time.Second {
									unseen = errors.New("round 3: rank 1's receive never showed in Waiting in 20s")
									break
								}
							}
						}
						if err := Send(c, msg, 1, round); err != nil {
							return err
						}
						if unseen != nil {
							return unseen
						}
						continue
					}
					got := make([]byte, n)
					if round == 2 {
						got = got[:n-200_001] // truncated: what fits is split
					}
					st, err := Recv(c, got, 0, round)
					switch {
					case round == 2 && !errors.Is(err, ErrTruncate):
						return fmt.Errorf("round %d: truncated receive: %v", round, err)
					case round != 2 && err != nil:
						return fmt.Errorf("round %d: %w", round, err)
					case st.Count != len(got) || !bytes.Equal(got, msg[:len(got)]):
						return fmt.Errorf("round %d: %d bytes, differ from what was sent", round, st.Count)
					}
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				// The sender's Puts are its parts: one per message, or none.
				puts := c.World().lc.RDMAStats().CMAWrites
				if c.Rank() == 0 && (split == "" && puts != 4 || split == "0" && puts != 0) {
					return fmt.Errorf("WEFT_SPLIT=%q: the sender wrote %d parts", split, puts)
				}
				if live := c.World().reqs.live(); live != 0 {
					return fmt.Errorf("rank %d: %d requests left in the table", c.Rank(), live)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestThresholds: between ranks with single-copy transfers a rendezvous
// splits from twice the single-copy size, 128 KiB at least, so that each
// half is one copy; and a rendezvous read, one copy, takes over from eager
// sends at the single-copy size (64 KiB over shm, 16 KiB inproc), since
// eager through the rings loses there in the VM's slow line state (see
// the single-copy clamp in newWorld). WEFT_SINGLECOPY moves both;
// WEFT_SPLIT and WEFT_EAGER win.
func TestThresholds(t *testing.T) {
	for _, tc := range []struct {
		dev          string
		env          []string // NAME=value
		eager, split int
	}{
		{"shm", nil, 64<<10 - 1, 128 << 10},
		{"inproc", nil, 16<<10 - 1, 128 << 10},
		{"inproc", []string{"WEFT_SINGLECOPY=262144"}, 64 << 10, 512 << 10},
		{"inproc", []string{"WEFT_SPLIT=100000"}, 16<<10 - 1, 100000},
		{"inproc", []string{"WEFT_EAGER=100000"}, 100000, 128 << 10},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.dev, strings.Join(tc.env, ",")), func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			w := devWorlds(t, tc.dev, 2)[0]
			if w.lc.SingleCopy() == 0 {
				t.Skip("no single-copy transfers here (cross-memory attach refused)")
			}
			if w.eagerLimit != tc.eager || w.splitMin != tc.split {
				t.Errorf("eagerLimit %d, splitMin %d with single-copy size %d; want %d, %d",
					w.eagerLimit, w.splitMin, w.lc.SingleCopy(), tc.eager, tc.split)
			}
		})
	}
}

// TestWriteRendezvous: with writeRendezvous (what Init sets over hardware
// RDMA) every rendezvous offers the receiver's whole buffer and the sender
// writes it all: messages from just above the eager limit to a few MiB,
// and one truncated, land exactly as before, and the receiver reads
// nothing from the sender (no Get of its own), over the in-process device
// (one copy) and UDP (the software RDMA engine).
func TestWriteRendezvous(t *testing.T) {
	for _, dev := range []string{"inproc", "udp"} {
		t.Run(dev, func(t *testing.T) {
			worlds := devWorlds(t, dev, 2)
			for _, w := range worlds {
				w.writeRendezvous, w.splitMin = true, w.eagerLimit+1
			}
			sizes := []int{worlds[0].eagerLimit + 1, 200<<10 + 3, 3<<20 + 12345}
			err := runWorlds(worlds, func(c *Comm) error {
				for _, n := range sizes {
					msg := make([]byte, n)
					for i := range msg {
						msg[i] = byte(i*7 + n)
					}
					if c.Rank() == 0 {
						if err := Send(c, msg, 1, 5); err != nil {
							return err
						}
						continue
					}
					got := make([]byte, n)
					if _, err := Recv(c, got, 0, 5); err != nil {
						return err
					}
					if !bytes.Equal(got, msg) {
						return fmt.Errorf("%d bytes: the message arrived changed", n)
					}
				}
				// Truncated: what fits lands, and the receive says so.
				if c.Rank() == 0 {
					return Send(c, make([]byte, 1<<20), 1, 6)
				}
				short := make([]byte, 300<<10)
				if _, err := Recv(c, short, 0, 6); !errors.Is(err, ErrTruncate) {
					return fmt.Errorf("1 MiB into 300 KiB: %v, want ErrTruncate", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			recv, send := worlds[1].lc.RDMAStats(), worlds[0].lc.RDMAStats()
			if reads := recv.Reads + recv.CMAReads; reads != 0 {
				t.Errorf("the receiver read %d times from the sender, want 0: a write rendezvous reads nothing", reads)
			}
			if writes := send.Writes + send.CMAWrites; writes < uint64(len(sizes)) {
				t.Errorf("the sender wrote %d times, want at least %d", writes, len(sizes))
			}
		})
	}
}

// TestNilComm: Split gives a rank of negative color nil, MPI's
// MPI_COMM_NULL. Every call on it fails with ErrArg naming the call and
// the nil communicator (MPI gives MPI_ERR_COMM), none panics; Rank is -1
// and Size 0, as of no member.
func TestNilComm(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	b := []int32{1, 2}
	one := []int{1}
	calls := []struct {
		name string
		f    func(c *Comm) error
	}{
		{"Barrier", func(c *Comm) error { return c.Barrier() }},
		{"Dup", func(c *Comm) error { _, err := c.Dup(); return err }},
		{"Split", func(c *Comm) error { _, err := c.Split(0, 0); return err }},
		{"Send", func(c *Comm) error { return Send(c, b, 0, 0) }},
		{"Recv", func(c *Comm) error { _, err := Recv(c, b, 0, 0); return err }},
		{"Isend", func(c *Comm) error { _, err := Isend(c, b, 0, 0); return err }},
		{"Irecv", func(c *Comm) error { _, err := Irecv(c, b, 0, 0); return err }},
		{"IsendInto", func(c *Comm) error { return IsendInto(new(Request), c, b, 0, 0) }},
		{"IrecvInto", func(c *Comm) error { return IrecvInto(new(Request), c, b, 0, 0) }},
		{"Sendrecv", func(c *Comm) error { _, err := Sendrecv(c, b, 0, 0, b, 0, 0); return err }},
		{"Probe", func(c *Comm) error { _, err := c.Probe(AnySource, AnyTag); return err }},
		{"Iprobe", func(c *Comm) error { _, _, err := c.Iprobe(AnySource, AnyTag); return err }},
		{"Mprobe", func(c *Comm) error { _, _, err := c.Mprobe(AnySource, AnyTag); return err }},
		{"Improbe", func(c *Comm) error { _, _, _, err := c.Improbe(AnySource, AnyTag); return err }},
		{"SendObj", func(c *Comm) error { return c.SendObj(1, 0, 0) }},
		{"RecvObj", func(c *Comm) error { var v int; _, err := c.RecvObj(&v, 0, 0); return err }},
		{"BcastObj", func(c *Comm) error { var v int; return c.BcastObj(&v, 0) }},
		{"Bcast", func(c *Comm) error { return Bcast(c, b, 0) }},
		{"Reduce", func(c *Comm) error { return Reduce(c, b, b, Sum, 0) }},
		{"Allreduce", func(c *Comm) error { return Allreduce(c, b, b, Sum) }},
		{"Gather", func(c *Comm) error { return Gather(c, b, b, 0) }},
		{"Scatter", func(c *Comm) error { return Scatter(c, b, b, 0) }},
		{"Allgather", func(c *Comm) error { return Allgather(c, b, b) }},
		{"Alltoall", func(c *Comm) error { return Alltoall(c, b, b) }},
		{"Scan", func(c *Comm) error { return Scan(c, b, b, Sum) }},
		{"Exscan", func(c *Comm) error { return Exscan(c, b, b, Sum) }},
		{"ReduceScatterBlock", func(c *Comm) error { return ReduceScatterBlock(c, b, b, Sum) }},
		{"Gatherv", func(c *Comm) error { return Gatherv(c, b, b, one, one, 0) }},
		{"Scatterv", func(c *Comm) error { return Scatterv(c, b, one, one, b, 0) }},
		{"Allgatherv", func(c *Comm) error { return Allgatherv(c, b, b, one, one) }},
		{"Alltoallv", func(c *Comm) error { return Alltoallv(c, b, one, one, b, one, one) }},
		{"Ibarrier", func(c *Comm) error { _, err := c.Ibarrier(); return err }},
		{"Ibcast", func(c *Comm) error { _, err := Ibcast(c, b, 0); return err }},
		{"Ireduce", func(c *Comm) error { _, err := Ireduce(c, b, b, Sum, 0); return err }},
		{"Iallreduce", func(c *Comm) error { _, err := Iallreduce(c, b, b, Sum); return err }},
		{"Igather", func(c *Comm) error { _, err := Igather(c, b, b, 0); return err }},
		{"Iscatter", func(c *Comm) error { _, err := Iscatter(c, b, b, 0); return err }},
		{"Iallgather", func(c *Comm) error { _, err := Iallgather(c, b, b); return err }},
		{"Ialltoall", func(c *Comm) error { _, err := Ialltoall(c, b, b); return err }},
		{"NewWin", func(c *Comm) error { _, err := NewWin(c, b); return err }},
		{"free", func(c *Comm) error { return c.Free() }},
	}
	err := Run(2, func(c *Comm) error {
		d, err := c.Split(-1, 0)
		if err != nil || d != nil {
			return fmt.Errorf("Split(-1): %v, %v", d, err)
		}
		if d.Rank() != -1 || d.Size() != 0 || d.World() != nil {
			return fmt.Errorf("nil communicator: Rank %d, Size %d, World %v; want -1, 0, nil", d.Rank(), d.Size(), d.World())
		}
		for _, call := range calls {
			err := call.f(d)
			if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "mpi: "+call.name+": a nil communicator") {
				return fmt.Errorf("%s on the nil communicator: %v, want ErrArg naming the call and the nil communicator", call.name, err)
			}
		}
		return c.Barrier() // the world is as it was
	})
	if err != nil {
		t.Error(err)
	}
}
