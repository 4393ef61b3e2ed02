//go:build !linux

package sysmon

func batch() (int, error) { return 0, ErrUnsupported }

func unbatch(int) (int, error) { return 0, nil }
