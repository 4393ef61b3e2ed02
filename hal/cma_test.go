package hal

import (
	"errors"
	"testing"
)

func TestTPTUpdateRoundTrip(t *testing.T) {
	es := []TPTEntry{{1, 2, 3, 4, AccessRead, 0}, {5, 0, 0, 0, 0, 0}, {7, 8, 1 << 40, 1 << 20, AccessRead | AccessWrite, 0xdeadbeef}}
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
}

func FuzzDecodeTPTUpdate(f *testing.F) {
	b := make([]byte, 2+2*tptEntryLen)
	EncodeTPTUpdate(b, []TPTEntry{{1, 2, 3, 4, AccessRead, 0}, {5, 6, 7, 8, AccessWrite, 9}})
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
