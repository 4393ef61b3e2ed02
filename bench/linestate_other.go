//go:build !linux

package main

import (
	"errors"
	"time"
)

// lineState needs to pin threads to CPUs, which bench does on Linux only.
func lineState(cpus []int, d time.Duration) (float64, int, int, error) {
	return 0, 0, 0, errors.New("pinning threads to CPUs is implemented on Linux only")
}
