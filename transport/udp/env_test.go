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

	t.Setenv(BatchEnvVar, "")
	if d, err := OpenFromEnv(cfg, Options{Batch: 5}); err != nil {
		t.Fatal(err)
	} else if d.Close(); d.(*Device).Options().Batch != 5 {
		t.Errorf("without %s: batch %d, want the caller's 5", BatchEnvVar, d.(*Device).Options().Batch)
	}
	t.Setenv(BatchEnvVar, "64")
	if d, err := OpenFromEnv(cfg, Options{Batch: 5}); err != nil {
		t.Fatal(err)
	} else if d.Close(); d.(*Device).Options().Batch != 64 {
		t.Errorf("%s=64: batch %d", BatchEnvVar, d.(*Device).Options().Batch)
	}
	for _, v := range []string{"0", "-3", "many", "1025"} {
		t.Setenv(BatchEnvVar, v)
		if d, err := OpenFromEnv(cfg, Options{}); err == nil {
			d.Close()
			t.Errorf("malformed %s=%s accepted", BatchEnvVar, v)
		}
	}
	t.Setenv(BatchEnvVar, "")

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
