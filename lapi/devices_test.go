package lapi

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/inproc"
)

// TestOpenDevices: Config.Devices with one member and no Route drives
// that member; a set with both Device and Devices, none at all, or a
// Route not of the job's size fails Open with an error saying which, and
// leaves the devices open (they are still the caller's).
func TestOpenDevices(t *testing.T) {
	fab := inproc.NewFabric(2, 7)
	dev, err := fab.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Device: dev, Devices: []hal.Device{dev}}, "both Device and Devices"},
		{Config{}, "no device"},
		{Config{Devices: []hal.Device{dev, dev}, Route: []int{0}}, "a route of 1 ranks for a job of 2"},
		{Config{Devices: []hal.Device{dev, dev}, Route: []int{0, 0}}, "member 1 reaches no rank"},
	} {
		c.cfg.Size = 2
		if _, err := Open(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%d devices, route %v): %v; want an error saying %q", len(c.cfg.Devices), c.cfg.Route, err, c.want)
		}
	}
	if err := dev.Connect(1, "nowhere"); errors.Is(err, hal.ErrClosed) {
		t.Fatalf("a failed Open closed the caller's device: %v", err)
	}
	c, err := Open(Config{Devices: []hal.Device{dev}, Size: 2, JobKey: 7})
	if err != nil {
		t.Fatal(err)
	}
	if c.Devices().Device() != dev || len(c.Devices().Info()) != 1 || c.Devices().Info()[0].Addr != dev.Addr() {
		t.Errorf("one member: the context drives %v (%d devices), want the member itself", c.Devices().Device(), len(c.Devices().Info()))
	}
	if !slices.Equal(c.Devices().Info()[0].Peers, []int{1}) {
		t.Errorf("the one device reaches %v, want [1]", c.Devices().Info()[0].Peers)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}
