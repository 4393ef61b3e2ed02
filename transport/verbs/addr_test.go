package verbs

import (
	"strings"
	"testing"
)

func TestAddressRoundTrip(t *testing.T) {
	a := Address{QPN: 0xabcdef, QKey: 0x1234abcd, LID: 7}
	copy(a.GID[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1})
	s := a.String()
	if want := "verbs:00000000000000000000ffffc0000201:11259375:1234abcd:7"; s != want {
		t.Errorf("String() = %q, want %q", s, want)
	}
	if strings.ContainsAny(s, " ;,|") {
		t.Errorf("%q has a character PMI or gorun would split on", s)
	}
	b, err := ParseAddress(s)
	if err != nil || b != a {
		t.Errorf("ParseAddress(%q) = %+v, %v; want %+v", s, b, err, a)
	}
}

func TestParseAddressErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"udp:127.0.0.1:5000",
		"verbs:00000000000000000000ffffc0000201:17:1a2b3c4d",         // no LID
		"verbs:00000000000000000000ffffc00002:17:1a2b3c4d:0",         // short GID
		"verbs:0000000000000000000zffffc0000201:17:1a2b3c4d:0",       // not hex
		"verbs:00000000000000000000ffffc0000201:16777216:1a2b3c4d:0", // QPN over 24 bits
		"verbs:00000000000000000000ffffc0000201:17:1a2b3c:0",         // short QKey
		"verbs:00000000000000000000ffffc0000201:17:1a2b3c4d:65536",   // LID over 16 bits
		"verbs:00000000000000000000ffffc0000201:-1:1a2b3c4d:0",
	} {
		if a, err := ParseAddress(s); err == nil {
			t.Errorf("ParseAddress(%q) = %+v, want an error", s, a)
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	f.Add("verbs:00000000000000000000ffffc0000201:17:1a2b3c4d:0")
	f.Add("verbs:fe800000000000000000000000000001:0:00000000:65535")
	f.Add("verbs::::")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		b, err := ParseAddress(a.String())
		if err != nil || b != a {
			t.Fatalf("%q parsed to %+v, whose String %q parses to %+v, %v", s, a, a.String(), b, err)
		}
	})
}

func TestQKeyUnprivileged(t *testing.T) {
	for _, k := range []uint64{0, 1, ^uint64(0), 0x8000000080000000, 0x5eed_f00d_cafe_0029} {
		if q := qkeyFor(k); q&0x80000000 != 0 {
			t.Errorf("qkeyFor(%#x) = %#x: the top bit makes it a privileged queue key", k, q)
		}
	}
	if qkeyFor(1) == qkeyFor(2) {
		t.Error("jobs 1 and 2 share a queue key")
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.SendRing != DefaultSendRing || o.RecvRing != DefaultRecvRing {
		t.Errorf("zero Options: %+v, %v", o, err)
	}
	for _, bad := range []Options{{Port: -1}, {Port: 256}, {GIDIndex: -1}, {MTU: -1}, {RecvRing: MaxRing + 1}, {SendRing: -1}, {ConnectTimeout: -1}} {
		if _, err := bad.withDefaults(); err == nil || !strings.HasPrefix(err.Error(), "verbs: ") {
			t.Errorf("%+v: %v, want an error", bad, err)
		}
	}
	if _, err := (Options{ConnectTimeout: -1}).withDefaults(); err == nil || !strings.Contains(err.Error(), "ConnectTimeout") {
		t.Errorf("a negative ConnectTimeout: %v, want an error naming it", err)
	}
}
