//go:build !linux

package shm

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Device is the shared-memory device; it is implemented on Linux only
// (futexes, /dev/shm, process_vm_readv), and Open fails elsewhere, so no
// Device exists there.
type Device struct{ hal.Device }

var errUnsupported = fmt.Errorf("shm: device needs Linux: %w", errors.ErrUnsupported)

// Open reports errors.ErrUnsupported on this system.
func Open(hal.Config, Options) (*Device, error) { return nil, errUnsupported }

// OpenLocal reports errors.ErrUnsupported on this system.
func OpenLocal(uint64, int, Options) ([]*Device, error) { return nil, errUnsupported }

// Options returns the zero Options.
func (d *Device) Options() Options { return Options{} }

// SharedBlock returns nil.
func (d *Device) SharedBlock() []byte { return nil }

// CMA reports false.
func (d *Device) CMA() bool { return false }

// ReadFrom reports errors.ErrUnsupported.
func (d *Device) ReadFrom(hal.Rank, uintptr, []byte) error { return errUnsupported }

// WriteTo reports errors.ErrUnsupported.
func (d *Device) WriteTo(hal.Rank, uintptr, []byte) error { return errUnsupported }
