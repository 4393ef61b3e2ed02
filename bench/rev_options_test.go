package main

import (
	"io"
	"testing"
)

// allreduce and iallreduce reduce size/4 float32s but label the row with
// size: -min 6 runs 4, 8, 16 ... bytes under the labels 6, 12, 24 (OSU
// walks the element count and prints count*sizeof(float)).
func TestRevFloatSizesAreWholeElements(t *testing.T) {
	for _, name := range []string{"allreduce", "iallreduce"} {
		o, err := parseOptions(name, []string{"-min", "6", "-max", "48"}, io.Discard)
		if err != nil {
			continue // refusing a size that is not a whole number of floats is a fix too
		}
		for _, s := range o.bench.sizesFor(o.min, o.max) {
			if s%o.bench.elem != 0 {
				t.Errorf("bench %s -min 6: row labelled %d bytes reduces %d bytes (%d floats)", name, s, s/4*4, s/4)
			}
		}
	}
}

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
