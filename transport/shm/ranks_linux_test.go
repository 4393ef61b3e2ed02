package shm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// Two nodes of a job of 5 ranks, {0, 2, 4} and {1, 3}, opened in one
// process on one /dev/shm as two hosts' network namespaces would be.
var (
	nodeA = []hal.Rank{0, 2, 4}
	nodeB = []hal.Rank{1, 3}
)

const twoNodesSize = 5

// openTwoNodes opens both nodes of one job, every member connected to the
// others of its node.
func openTwoNodes(t *testing.T, opts Options) (a, b []*Device, key uint64) {
	t.Helper()
	key = newJobKey()
	oa, ob := opts, opts
	oa.Ranks, ob.Ranks = nodeA, nodeB
	return openMembers(t, key, twoNodesSize, oa), openMembers(t, key, twoNodesSize, ob), key
}

// TestRanksSegments: each node has a segment of its own, named after its
// lowest rank, sized for its members, the same for all of them; the
// addresses carry job ranks.
func TestRanksSegments(t *testing.T) {
	a, b, key := openTwoNodes(t, Options{SharedBytes: 64})
	for _, node := range []struct {
		devs  []*Device
		ranks []hal.Rank
	}{{a, nodeA}, {b, nodeB}} {
		want := NodeSegmentName(key, 0, node.ranks[0])
		for i, d := range node.devs {
			if d.rank != node.ranks[i] || d.slot != i {
				t.Errorf("device %d of node %v: rank %d slot %d, want rank %d slot %d", i, node.ranks, d.rank, d.slot, node.ranks[i], i)
			}
			if d.seg.name != want {
				t.Errorf("rank %d: segment %s, want %s", d.rank, d.seg.name, want)
			}
			if d.g.size != len(node.ranks) {
				t.Errorf("rank %d: segment for %d ranks, want %d", d.rank, d.g.size, len(node.ranks))
			}
			name, rank, _, _, err := parseAddr(d.Addr())
			if err != nil || name != want || rank != d.rank {
				t.Errorf("rank %d: Addr %q is rank %d of %s (%v)", d.rank, d.Addr(), rank, name, err)
			}
			if got := d.Options().Ranks; !slices.Equal(got, node.ranks) {
				t.Errorf("rank %d: Options().Ranks %v, want %v", d.rank, got, node.ranks)
			}
			if n := len(d.SharedBlock()); n != 64*len(node.ranks) {
				t.Errorf("rank %d: shared block of %d bytes, want 64 per member, %d", d.rank, n, 64*len(node.ranks))
			}
		}
	}
	if a[0].seg.name == b[0].seg.name {
		t.Fatalf("both nodes share segment %s", a[0].seg.name)
	}
	// The shared blocks: what a member writes, the others of its node
	// read, and the other node does not.
	a[0].SharedBlock()[0] = 0xa
	b[0].SharedBlock()[0] = 0xb
	for _, d := range a {
		if v := d.SharedBlock()[0]; v != 0xa {
			t.Errorf("rank %d reads %#x in its node's shared block, where rank 0 wrote 0xa", d.rank, v)
		}
	}
	for _, d := range b {
		if v := d.SharedBlock()[0]; v != 0xb {
			t.Errorf("rank %d reads %#x in its node's shared block, where rank 1 wrote 0xb", d.rank, v)
		}
	}
}

// TestRanksFrames: frames between the members of a node, whole, short
// and compact, inline, over cells and in the data area, carry job ranks
// both ways.
func TestRanksFrames(t *testing.T) {
	a, b, key := openTwoNodes(t, Options{})
	for _, node := range [][]*Device{a, b} {
		for _, src := range node {
			for _, dst := range node {
				for _, size := range []int{0, 8, 3000, 60000} {
					p := pattern(size, src.rank, dst.rank)
					if err := src.Send(header(key, src.rank, dst.rank, size), p); err != nil {
						t.Fatalf("Send %d bytes from rank %d to rank %d: %v", size, src.rank, dst.rank, err)
					}
					expect(t, dst, src.rank, hal.FrameData, p)
				}
				p := pattern(16, src.rank, dst.rank)
				if err := src.SendShort(dst.rank, hal.FrameData, p[:4], p[4:]); err != nil {
					t.Fatalf("SendShort from rank %d to rank %d: %v", src.rank, dst.rank, err)
				}
				expect(t, dst, src.rank, hal.FrameData, p)
			}
		}
	}
}

// pattern is a payload of n bytes that names its sender and receiver.
func pattern(n int, src, dst hal.Rank) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(int(src)*37 + int(dst)*11 + i)
	}
	return p
}

// expect polls d until one frame comes, and checks it: from job rank src
// to d's rank, of type typ, with payload p.
func expect(t *testing.T, d *Device, src hal.Rank, typ hal.FrameType, p []byte) {
	t.Helper()
	var got []hal.Header
	var payload []byte
	for len(got) == 0 {
		if _, err := d.Poll(func(h *hal.Header, b []byte) {
			got = append(got, *h)
			payload = append(payload[:0], b...)
		}); err != nil {
			t.Fatalf("rank %d: Poll: %v", d.rank, err)
		}
	}
	h := got[0]
	if len(got) != 1 || h.Src != src || h.Dst != d.rank || h.Type != typ || int(h.Len) != len(p) || !bytes.Equal(payload, p) {
		t.Fatalf("rank %d: got %d frames, the first %+v with %d bytes (equal: %v); want one %v frame from rank %d to rank %d with %d bytes",
			d.rank, len(got), h, len(payload), bytes.Equal(payload, p), typ, src, d.rank, len(p))
	}
}

// TestRanksUnknownPeer: every call toward a rank of the other node, or
// outside the job, fails with hal.ErrUnknownPeer naming the rank, and
// sends nothing; a frame from a rank that does not share the segment is
// dropped.
func TestRanksUnknownPeer(t *testing.T) {
	a, b, key := openTwoNodes(t, Options{})
	d := a[1] // rank 2
	for _, r := range []hal.Rank{1, 3, twoNodesSize, 1 << 31} {
		p := []byte("12345678")
		name := fmt.Sprintf("rank %d", r)
		for what, err := range map[string]error{
			"Send":      d.Send(header(key, d.rank, r, len(p)), p),
			"SendShort": d.SendShort(r, hal.FrameData, nil, p),
			"Connect":   d.Connect(r, b[0].Addr()),
			"ReadFrom":  d.ReadFrom(r, bufAddr(p), p),
			"WriteTo":   d.WriteTo(r, bufAddr(p), p),
		} {
			if !errors.Is(err, hal.ErrUnknownPeer) || !strings.Contains(err.Error(), name) {
				t.Errorf("%s toward rank %d: %v, want hal.ErrUnknownPeer naming %s", what, r, err, name)
			}
		}
		d.PrepareSend(r) // a no-op, which must not panic
	}
	// A node's address is refused by the other node, even for a rank
	// that shares its own segment.
	if err := a[0].Connect(2, b[0].Addr()); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("rank 0: Connect(2, rank 1's address): %v, want hal.ErrUnknownPeer", err)
	}
	// Rank 0 sends rank 2 a frame that claims to come from rank 1, of the
	// other node: rank 2 drops it, then gets the good one after it.
	p := []byte("87654321")
	if err := a[0].Send(header(key, 1, 2, len(p)), p); err != nil {
		t.Fatal(err)
	}
	if err := a[0].Send(header(key, 0, 2, len(p)), p); err != nil {
		t.Fatal(err)
	}
	expect(t, d, 0, hal.FrameData, p)
	if n := d.counters.Drops[hal.DropPeer].Load(); n != 1 {
		t.Errorf("rank 2 counted %d frames dropped for their peer, want 1", n)
	}
	for _, o := range b {
		if n, err := o.Poll(ignore); n != 0 || err != nil {
			t.Errorf("rank %d, on the other node, polled %d frames (%v)", o.rank, n, err)
		}
	}
}

// TestRanksCMA: ReadFrom and WriteTo take job ranks, and need Connect.
func TestRanksCMA(t *testing.T) {
	key := newJobKey()
	devs, err := OpenLocal(key, twoNodesSize, Options{Ranks: nodeA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	d := devs[0]
	if !d.CMA() {
		t.Skipf("cross-memory attach refused: %s", *d.cma.why.Load())
	}
	if err := d.Connect(4, devs[2].Addr()); err != nil {
		t.Fatal(err)
	}
	src, dst := []byte("cross-memory"), make([]byte, 12)
	if err := d.ReadFrom(4, bufAddr(src), dst); err != nil || !bytes.Equal(dst, src) {
		t.Errorf("ReadFrom(4): %q, %v; want %q", dst, err, src)
	}
	if err := d.WriteTo(4, bufAddr(dst), []byte("CROSS")); err != nil || string(dst[:5]) != "CROSS" {
		t.Errorf("WriteTo(4): %q, %v", dst, err)
	}
	// Rank 2 shares the segment but was not connected.
	if err := d.ReadFrom(2, bufAddr(src), dst); !errors.Is(err, hal.ErrUnknownPeer) || !strings.Contains(err.Error(), "before Connect") {
		t.Errorf("ReadFrom(2) before Connect: %v, want hal.ErrUnknownPeer", err)
	}
}

// TestRanksAttach: the segment's name goes once every member, not every
// rank of the job, has attached.
func TestRanksAttach(t *testing.T) {
	key := newJobKey()
	path := filepath.Join(DefaultDir, NodeSegmentName(key, 0, 1))
	opts := Options{Ranks: nodeB}
	mustOpen(t, key, 3, twoNodesSize, opts)
	if !exists(t, path) {
		t.Fatalf("segment %s unlinked with rank 1 still to come", path)
	}
	mustOpen(t, key, 1, twoNodesSize, opts)
	if exists(t, path) {
		t.Errorf("segment %s still there after both members attached", path)
	}
}

// TestRanksMismatch: members that disagree on Ranks, or on the job's size,
// are refused with ErrMismatch, saying what differs.
func TestRanksMismatch(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, then Options
		size        int
		want        string
	}{
		{"ranks", Options{Ranks: []hal.Rank{0, 2, 4}}, Options{Ranks: []hal.Rank{0, 2, 3}}, 5, "Options.Ranks"},
		{"count", Options{Ranks: []hal.Rank{0, 2, 4}}, Options{Ranks: []hal.Rank{0, 2}}, 5, "Ranks"},
		{"job size", Options{Ranks: []hal.Rank{0, 2, 4}}, Options{Ranks: []hal.Rank{0, 2, 4}}, 6, "job size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := newJobKey()
			t.Cleanup(func() { os.Remove(filepath.Join(DefaultDir, NodeSegmentName(key, 0, 0))) })
			mustOpen(t, key, 0, 5, c.first)
			_, err := openRank(t, key, 2, c.size, c.then)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("rank 2 opened with %v of %d: %v, want ErrMismatch naming %s", c.then.Ranks, c.size, err, c.want)
			}
		})
	}
}
