//go:build !(verbs && linux && cgo)

package verbs

import (
	"errors"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestNotBuilt: without the tag, Open says how to get the device.
func TestNotBuilt(t *testing.T) {
	d, err := Open(hal.Config{Size: 1}, Options{})
	if d != nil || !errors.Is(err, ErrNotBuilt) || !errors.Is(err, errors.ErrUnsupported) ||
		!strings.Contains(err.Error(), "-tags verbs and libibverbs-dev") || Built {
		t.Fatalf("Open: %v, %v (Built %v): want ErrNotBuilt naming the tag and package", d, err, Built)
	}
}
