//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device: off Linux bench does
// not ask the terminal driver, and a character device that is not a
// terminal (/dev/null) only costs a progress line nobody sees.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
