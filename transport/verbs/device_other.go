//go:build !(verbs && linux && cgo)

package verbs

import "github.com/weft-hpc/weft/hal"

// Built reports whether this binary has the verbs device.
const Built = false

// Device is the verbs device. This build has none: Open always fails, so no
// Device exists.
type Device struct{ hal.Device }

// Open reports ErrNotBuilt (errors.Is(err, errors.ErrUnsupported) holds).
func Open(hal.Config, Options) (*Device, error) { return nil, ErrNotBuilt }

// Name is the RDMA device in use; there is none in this build.
func (d *Device) Name() string { return "" }

// Port is the port in use; there is none in this build.
func (d *Device) Port() int { return 0 }

// GIDIndex is the source GID's index; there is none in this build.
func (d *Device) GIDIndex() int { return 0 }
