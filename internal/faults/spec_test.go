package faults

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Spec
	}{
		{"", Spec{}},
		{"loss=0.2,reorder=0.1,dup=0.05,corrupt=0.01,seed=7", Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Seed: 7}},
		{" loss = 1 , delay=2ms, ", Spec{Loss: 1, Delay: 2 * time.Millisecond}},
		{"seed=0x10", Spec{Seed: 16}},
		{"corrupt=0", Spec{}},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, mention string }{
		{"loss=1.5", "loss"},
		{"dup=-0.1", "dup"},
		{"reorder=NaN", "reorder"},
		{"corrupt=x", "corrupt"},
		{"delay=0", "delay"},
		{"delay=-1ms", "delay"},
		{"delay=soon", "delay"},
		{"seed=-1", "seed"},
		{"jitter=0.1", "jitter"},
		{"loss", "loss"},
		{"loss=0.1,loss=0.2", "twice"},
	} {
		_, err := Parse(c.in)
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("Parse(%q) = %v; want an ErrSpec naming %q", c.in, err, c.mention)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, s := range []Spec{{}, {Loss: 0.25, Seed: 1 << 63}, {Reorder: 1.0 / 3, Delay: 1500 * time.Microsecond, Dup: 1e-9, Corrupt: 1}} {
		got, err := Parse(s.String())
		if err != nil || got != s {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s.String(), got, err, s)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := (Spec{Loss: 2}).Validate(); !errors.Is(err, ErrSpec) {
		t.Errorf("Validate of loss=2: %v", err)
	}
	if err := (Spec{Delay: -1}).Validate(); !errors.Is(err, ErrSpec) {
		t.Errorf("Validate of a negative delay: %v", err)
	}
}

func TestEnabled(t *testing.T) {
	if (Spec{Seed: 3, Delay: time.Second}).Enabled() {
		t.Errorf("a Spec with no rates is enabled")
	}
	if !(Spec{Corrupt: 0.001}).Enabled() {
		t.Errorf("a Spec with a corruption rate is not enabled")
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	if _, ok, err := FromEnv(); ok || err != nil {
		t.Errorf("FromEnv with WEFT_FAULTS empty: ok=%v err=%v", ok, err)
	}
	t.Setenv(EnvVar, "loss=0.5,seed=9")
	if s, ok, err := FromEnv(); !ok || err != nil || s != (Spec{Loss: 0.5, Seed: 9}) {
		t.Errorf("FromEnv = %+v, %v, %v", s, ok, err)
	}
	t.Setenv(EnvVar, "loss=5")
	if _, ok, err := FromEnv(); ok || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), EnvVar) {
		t.Errorf("FromEnv with a bad value: ok=%v err=%v", ok, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("loss=0.2,reorder=0.1,dup=0.05,corrupt=0.01,seed=7")
	f.Add("delay=2ms")
	f.Add("loss=,=,,")
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted an invalid %+v: %v", s, spec, err)
		}
		if again, err := Parse(spec.String()); err != nil || again != spec {
			t.Fatalf("round trip of %q: %+v, %v", spec.String(), again, err)
		}
	})
}
