//go:build !linux

package udp

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Device is the UDP device; it is implemented on Linux only (sendmmsg,
// recvmmsg, eventfd), and Open fails elsewhere, so no Device exists there.
type Device struct{ hal.Device }

// Open reports errors.ErrUnsupported on this system.
func Open(hal.Config, Options) (*Device, error) {
	return nil, fmt.Errorf("udp: device needs Linux: %w", errors.ErrUnsupported)
}

// Options returns the zero Options.
func (d *Device) Options() Options { return Options{} }

// Stats returns zero Stats.
func (d *Device) Stats() Stats { return Stats{} }

// SyncDrops reports errors.ErrUnsupported.
func (d *Device) SyncDrops() error { return errors.ErrUnsupported }
