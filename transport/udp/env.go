package udp

import (
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// OpenFromEnv opens a device like Open and, when WEFT_FAULTS is set, wraps
// it with fault injection (internal/faults), which also makes it report
// itself unreliable whatever the rates. It is how the bootstrap opens UDP
// devices, so that a user can test a program under a hostile network
// without changing it. A malformed WEFT_FAULTS is an error, not ignored.
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
