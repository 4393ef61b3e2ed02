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
