package main

import (
	"io"
	"testing"
)

// maxSize caps -max so that a typo fails at parse time rather than as an
// out-of-memory kill; but put_bw's window holds rmaWindow(max) messages of
// max bytes (rmaBuffers), so the -max 1G it accepts allocates 32 GiB per
// rank before the first Put.
func TestRevPutBWMaxBoundsItsWindow(t *testing.T) {
	o, err := parseOptions("put_bw", []string{"-max", "1G"}, io.Discard)
	if err != nil {
		return
	}
	if need := rmaWindow(o.max) * o.max; need > maxSize {
		t.Errorf("bench put_bw -max 1G accepted: its window memory is %d bytes per rank (%d GiB), beyond the %s -max limit", need, need>>30, formatSize(maxSize))
	}
}
