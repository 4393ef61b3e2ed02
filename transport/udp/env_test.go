package udp

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

func TestOpenFromEnv(t *testing.T) {
	cfg := hal.Config{JobKey: testJobKey, Size: 1}
	t.Setenv(faults.EnvVar, "")
	t.Setenv(GSOEnvVar, "")
	d, err := OpenFromEnv(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if ud, ok := d.(*Device); !ok {
		t.Errorf("without %s: got %T, want *udp.Device", faults.EnvVar, d)
	} else if !ud.Options().GSO {
		t.Errorf("without %s: GSO off, want on by default", GSOEnvVar)
	}
	for v, want := range map[string]bool{"0": false, "off": false, "1": true, "on": true} {
		t.Setenv(GSOEnvVar, v)
		d, err := OpenFromEnv(cfg, Options{GSO: !want})
		if err != nil {
			t.Fatalf("%s=%s: %v", GSOEnvVar, v, err)
		}
		d.Close()
		if got := d.(*Device).Options().GSO; got != want {
			t.Errorf("%s=%s: GSO %v, want %v", GSOEnvVar, v, got, want)
		}
	}
	t.Setenv(GSOEnvVar, "maybe")
	if d, err := OpenFromEnv(cfg, Options{}); err == nil {
		d.Close()
		t.Errorf("malformed %s accepted", GSOEnvVar)
	}
	t.Setenv(GSOEnvVar, "")

	t.Setenv(faults.EnvVar, "loss=0.5,seed=7")
	d, err = OpenFromEnv(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, ok := d.(*faults.Device); !ok || d.Caps().Reliable {
		t.Errorf("with %s: got %T (caps %+v), want a fault-injecting device", faults.EnvVar, d, d.Caps())
	}

	t.Setenv(faults.EnvVar, "loss=lots")
	if d, err := OpenFromEnv(cfg, Options{}); err == nil {
		d.Close()
		t.Error("malformed WEFT_FAULTS accepted")
	}
}
