package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// A -size (or -count) beyond what Go can allocate makes netbench panic
// with "makeslice: len out of range" after it has opened its device and
// exchanged addresses, instead of refusing the flag with a message that
// names it, as run does for a negative -size.
func TestRevUDPHugeSizeIsAnError(t *testing.T) {
	for _, c := range []struct {
		role        string
		size, count int
	}{
		{"dev-ping", 1 << 62, 1},
		{"am-send", 1 << 62, 1},
		{"am-recv", 1, 1 << 62},
	} {
		cfg := &config{role: c.role, bind: "127.0.0.1", size: c.size, iters: 1, rounds: 1,
			count: c.count, inflight: 1, jobKey: 1, timeout: 5 * time.Second}
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			// Port 9 (discard) on loopback: the role fails before it sends.
			err = run(cfg, strings.NewReader("udp:127.0.0.1:9\n"), io.Discard)
		}()
		if err == nil || strings.HasPrefix(err.Error(), "panic") {
			t.Errorf("-role %s -size %d -count %d: %v; want an error naming the flag", c.role, c.size, c.count, err)
		}
	}
}
