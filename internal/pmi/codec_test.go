package pmi

import (
	"errors"
	"strings"
	"testing"
)

// hydraStore behaves like Hydra 4.0.2 (evidence/hydra-pmi1-limits.txt):
// values cut at the first space, keys over 63 and values over 1023 bytes
// silently truncated. It also fails the test on bytes no server passes.
type hydraStore struct {
	t  *testing.T
	kv map[string]string
}

func (h *hydraStore) putRaw(key, value string) error {
	if strings.ContainsAny(key+value, " ;\n\r\t=") {
		h.t.Errorf("wire value %q holds a byte servers lose", clip(value))
	}
	if len(key) > wireKeyMax || len(value) > wireValMax {
		h.t.Errorf("wire key %q (%d) / value (%d) over the limits", clip(key), len(key), len(value))
	}
	value, _, _ = strings.Cut(value, " ")
	h.kv[key[:min(len(key), wireKeyMax)]] = value[:min(len(value), wireValMax)]
	return nil
}

// room is what a PMI-1 client with a 25-byte kvsname gets.
func (h *hydraStore) room() int { return 907 }

func (h *hydraStore) getRaw(key string) (string, error) {
	v, ok := h.kv[key]
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}

func TestCodecRoundTrip(t *testing.T) {
	h := &hydraStore{t: t, kv: map[string]string{}}
	binary := string([]byte{0, 1, 2, 255, 254, ' ', ';', '\n', '='})
	values := map[string]string{
		"addr-0":                                "tcp://127.0.0.1:40000",
		"spaces":                                "a b  c ",
		"semicolon":                             "a;b;;c",
		"newline":                               "line1\nline2\n",
		"binary":                                binary,
		"empty":                                 "",
		"long-1500":                             strings.Repeat("x", 1500),
		"long-binary":                           strings.Repeat(binary, 3000),
		strings.Repeat("k", 200):                "long key",
		"key with spaces; and =":                "odd key",
		"~notliteral":                           "tilde key",
		"exactly-56-" + strings.Repeat("k", 45): "boundary key",
	}
	for k, v := range values {
		if err := putValue(h, k, v); err != nil {
			t.Fatalf("put %q: %v", clip(k), err)
		}
	}
	for k, want := range values {
		got, err := getValue(h, k)
		if err != nil || got != want {
			t.Errorf("get %q = %q, %v; want %q", clip(k), clip(got), err, clip(want))
		}
	}
	if _, err := getValue(h, "never-put"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v, want ErrNotFound", err)
	}
	if err := putValue(h, "huge", strings.Repeat("x", MaxValueLen+1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("over-long value: %v, want ErrTooLong", err)
	}
	// Readable addresses stay readable on the wire.
	if got := h.kv["addr-0"]; got != "rtcp://127.0.0.1:40000" {
		t.Errorf("wire form of an address = %q", got)
	}
}

func TestDecodeForeignValue(t *testing.T) {
	for _, v := range []string{"", "x", "b!!!", "c0", "cx"} {
		h := &hydraStore{t: t, kv: map[string]string{"k": v}}
		if _, err := getValue(h, "k"); !errors.Is(err, ErrBadValue) {
			t.Errorf("stored %q: %v, want ErrBadValue", v, err)
		}
	}
	h := &hydraStore{t: t, kv: map[string]string{"k": "c2", "k#0": "rab"}}
	if _, err := getValue(h, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing chunk: %v, want ErrNotFound", err)
	}
}

func FuzzCodec(f *testing.F) {
	f.Add("k", "tcp://1.2.3.4:5")
	f.Add("a b", "x;y\nz")
	f.Add(strings.Repeat("k", 70), strings.Repeat("\xff", 2000))
	f.Fuzz(func(t *testing.T, key, value string) {
		h := &hydraStore{t: t, kv: map[string]string{}}
		if err := putValue(h, key, value); err != nil {
			t.Fatal(err)
		}
		got, err := getValue(h, key)
		if err != nil || got != value {
			t.Fatalf("round trip of %q: %q, %v", clip(value), clip(got), err)
		}
	})
}
