//go:build !linux

package sysmon

func batch() (int, error) { return 0, ErrUnsupported }
