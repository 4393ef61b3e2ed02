package udp

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

func TestOpenFromEnv(t *testing.T) {
	cfg := hal.Config{JobKey: testJobKey, Size: 1}
	t.Setenv(faults.EnvVar, "")
	d, err := OpenFromEnv(cfg, Options{Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if ud, ok := d.(*Device); !ok {
		t.Errorf("without %s: got %T, want *udp.Device", faults.EnvVar, d)
	} else if o := ud.Options(); o.GSO || o.Batch != 5 {
		t.Errorf("OpenFromEnv(GSO off, Batch 5): GSO %v, batch %d; want the caller's options", o.GSO, o.Batch)
	}

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
