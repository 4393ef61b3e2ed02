package udp

import (
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// OpenFromEnv opens a device like Open, wrapped with fault injection
// (internal/faults) when WEFT_FAULTS asks for it, which also makes it
// report itself unreliable whatever the rates; a malformed WEFT_FAULTS is
// an error. It is how the bootstrap and netbench open UDP devices. The
// device's other settings (GSO, Batch, Multicast) are the caller's:
// a rank's come from mpi.Options (WEFT_GSO, WEFT_UDP_BATCH,
// WEFT_UDP_MCAST), read and checked with the rank's other variables, and
// reach Options through internal/devices.
func OpenFromEnv(cfg hal.Config, opts Options) (hal.Device, error) {
	spec, ok, err := faults.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	d, err := Open(cfg, opts)
	if err != nil {
		return nil, err
	}
	if !ok {
		return d, nil
	}
	return faults.Wrap(d, spec, nil), nil
}
