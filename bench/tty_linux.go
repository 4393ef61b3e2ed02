package main

import (
	"os"
	"syscall"
	"unsafe"
)

// isTerminal reports whether f is a terminal: whether it answers the
// TCGETS ioctl, as isatty(3) asks. bench may import only the standard
// library, mpi and gonum (deps_test.go), so this is the syscall package's
// spelling of golang.org/x/term.IsTerminal.
func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
