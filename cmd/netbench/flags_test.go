package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// A flag out of range is refused before the device opens, with an error
// naming it: a -size or -count too large to allocate (which panicked in
// makeslice once the sides had exchanged addresses), a -size above a
// frame's payload for the device roles, a count below one.
func TestRunRefusesFlagsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		role        string
		size, count int
		want        string
	}{
		{"dev-ping", 1 << 62, 1, "-size 4611686018427387904: want 0 to"},
		{"dev-echo", hal.MaxPayload + 1, 1, fmt.Sprintf("-size %d: want 0 to %d for -role dev-echo", hal.MaxPayload+1, hal.MaxPayload)},
		{"am-send", 1 << 62, 1, "-size 4611686018427387904: want 0 to 1073741824 for -role am-send"},
		{"am-recv", 1, 1 << 62, "-count 4611686018427387904: want 1 to 100000000"},
		{"am-recv", -1, 1, "-size -1"},
		{"am-send", 1, 0, "-count 0"},
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
			// Port 9 (discard) on loopback: should the flags pass, the role
			// fails (or panics) without a peer.
			err = run(cfg, strings.NewReader("udp:127.0.0.1:9\n"), io.Discard)
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("-role %s -size %d -count %d: %v; want an error saying %q", c.role, c.size, c.count, err, c.want)
		}
	}
}
