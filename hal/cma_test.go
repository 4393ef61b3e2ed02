package hal

import (
	"bytes"
	"errors"
	"testing"
)

func TestTPTUpdateRoundTrip(t *testing.T) {
	es := []TPTEntry{
		{Entry: 1, Key: 2, Addr: 3, Len: 4, Access: AccessRead},
		{Entry: 5, Removed: 6},
		{Entry: 7, Key: 8, Addr: 1 << 40, Len: 1 << 20, Access: AccessRead | AccessWrite, RKey: 0xdeadbeef},
	}
	b := make([]byte, 2+len(es)*tptEntryLen)
	if n := EncodeTPTUpdate(b, es); n != len(b) {
		t.Fatalf("encoded %d bytes, want %d", n, len(b))
	}
	got, err := DecodeTPTUpdate(b, nil)
	if err != nil || len(got) != len(es) {
		t.Fatalf("decode: %v, %d entries", err, len(got))
	}
	for i := range es {
		if got[i] != es[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], es[i])
		}
	}
	for _, bad := range [][]byte{nil, {1}, b[:len(b)-1], append(b, 0)} {
		if _, err := DecodeTPTUpdate(bad, nil); !errors.Is(err, ErrBadTPTUpdate) {
			t.Errorf("%d bytes: %v, want ErrBadTPTUpdate", len(bad), err)
		}
	}
	// A removal names the key it removed and no region: one without the
	// key, or with a length, access or rkey, is refused.
	const rm = 2 + tptEntryLen // the removal's fields
	for name, field := range map[string]int{"removed key": rm + 12, "len": rm + 20, "access": rm + 28, "rkey": rm + 29} {
		bad := bytes.Clone(b)
		if field == rm+12 {
			clear(bad[field : field+8])
		} else {
			bad[field] = 1
		}
		if _, err := DecodeTPTUpdate(bad, nil); !errors.Is(err, ErrBadTPTUpdate) {
			t.Errorf("removal with bad %s: %v, want ErrBadTPTUpdate", name, err)
		}
	}
}

func FuzzDecodeTPTUpdate(f *testing.F) {
	b := make([]byte, 2+3*tptEntryLen)
	EncodeTPTUpdate(b, []TPTEntry{{Entry: 1, Key: 2, Addr: 3, Len: 4, Access: AccessRead},
		{Entry: 5, Key: 6, Addr: 7, Len: 8, Access: AccessWrite, RKey: 9}, {Entry: 1, Removed: 2}})
	f.Add(b)
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := DecodeTPTUpdate(b, nil)
		if err != nil {
			if !errors.Is(err, ErrBadTPTUpdate) {
				t.Fatalf("error %v does not wrap ErrBadTPTUpdate", err)
			}
			return
		}
		c := make([]byte, len(b))
		EncodeTPTUpdate(c, es)
		if string(c) != string(b) {
			t.Fatalf("re-encoded % x, was % x", c, b)
		}
	})
}

// TestReplica: a replica kept from a TPT's watcher checks accesses as the
// TPT itself would, and answers with the address in the owner's memory.
func TestReplica(t *testing.T) {
	tpt := NewTPT()
	var rep Replica
	tpt.Watch(rep.Apply)
	mem := make([]byte, 1000)
	p, _ := tpt.Register(mem, AccessWrite)
	local, _ := tpt.RegisterLocal(make([]byte, 10), AccessWrite)
	if rep.Has(local) {
		t.Fatal("a local registration reached the replica")
	}
	if !rep.Has(p) || rep.Has(PVO{p.Entry, 0, p.Key + 1}) {
		t.Fatal("Has must hold p's entry under p's key alone")
	}
	addr, err := rep.Check(p.Add(10), 990, AccessWrite)
	if err != nil || addr != uintptr(addrOf(mem))+10 {
		t.Fatalf("check: %#x, %v", addr, err)
	}
	for _, tc := range []struct {
		check string
		p     PVO
		n     uint64
		acc   Access
	}{
		{"key", PVO{p.Entry, 0, p.Key + 1}, 1, AccessWrite},
		{"bounds", p.Add(10), 991, AccessWrite},
		{"access", p, 1, AccessRead},
		{"entry", PVO{Entry: 42, Key: p.Key}, 1, AccessWrite},
	} {
		var pe *ProtectionError
		if _, err := rep.Check(tc.p, tc.n, tc.acc); !errors.As(err, &pe) || pe.Check != tc.check {
			t.Errorf("%s: %v", tc.check, err)
		}
	}
	tpt.Deregister(p)
	if rep.Has(p) {
		t.Fatal("deregistration did not reach the replica")
	}
	if got := len(tpt.Entries()); got != 0 {
		t.Fatalf("Entries lists %d entries (local ones are not listed)", got)
	}
}

// TestReplicaRemovalAfterReuse: the watcher may tell a deregistration
// after the registration that took the freed entry next; the replica
// keeps the new registration, and still applies a removal in order.
func TestReplicaRemovalAfterReuse(t *testing.T) {
	tpt := NewTPT()
	var calls []TPTEntry
	tpt.Watch(func(e TPTEntry) { calls = append(calls, e) })
	w, _ := tpt.Register(make([]byte, 100), AccessRead)
	if err := tpt.Deregister(w); err != nil {
		t.Fatal(err)
	}
	x, _ := tpt.Register(make([]byte, 200), AccessWrite)
	if x.Entry != w.Entry || len(calls) != 3 || calls[1].Key != 0 || calls[1].Removed != w.Key {
		t.Fatalf("X at entry %d (W's %d), watcher calls %+v: want W's removal naming its key", x.Entry, w.Entry, calls)
	}
	addW, rmW, addX := calls[0], calls[1], calls[2]

	var rep Replica
	for _, e := range []TPTEntry{addW, addX, rmW} { // W's removal told last
		rep.Apply(e)
	}
	if !rep.Has(x) || rep.Has(w) {
		t.Fatalf("after W's removal came late: holds X %v (want true), W %v (want false)", rep.Has(x), rep.Has(w))
	}
	if _, err := rep.Check(x, 200, AccessWrite); err != nil {
		t.Fatalf("X: %v", err)
	}

	var inOrder Replica
	for _, e := range []TPTEntry{addW, rmW} {
		inOrder.Apply(e)
	}
	if inOrder.Has(w) {
		t.Fatal("W's removal in order did not remove it")
	}
	inOrder.Apply(addX)
	if err := tpt.Deregister(x); err != nil {
		t.Fatal(err)
	}
	inOrder.Apply(calls[3])
	rep.Apply(calls[3])
	if inOrder.Has(x) || rep.Has(x) {
		t.Fatal("X's own removal did not remove it")
	}
}
