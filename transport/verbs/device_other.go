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
