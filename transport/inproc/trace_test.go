package inproc_test

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// TestTraceDrop: a frame whose CRC does not match is dropped with a line
// at trace level 4 naming the reason, and with none at level 3.
func TestTraceDrop(t *testing.T) {
	for _, l := range []trace.Level{trace.Internal, trace.Hot} {
		var buf bytes.Buffer
		restore := trace.Redirect(&buf, l)
		devs := openAll(t, 2)
		payload := []byte("corrupted on the way")
		hdr := header(0, 1, len(payload))
		hal.Seal(hdr, payload)
		payload[0] ^= 1
		if err := devs[0].Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
		devs[0].Flush()
		n, err := devs[1].Poll(func(*hal.Header, []byte) {})
		restore()
		if n != 0 || err != nil {
			t.Fatalf("level %d: corrupted frame delivered (%d, %v)", l, n, err)
		}
		want := "weft[?] inproc 1: drop data frame of 52 bytes (header says from rank 0): hal: bad frame: crc\n"
		if l < trace.Hot {
			want = ""
		}
		// The line's stamp (seconds since the process started) varies.
		got := regexp.MustCompile(`^weft\[\?\] \d+\.\d{6} `).ReplaceAllString(buf.String(), "weft[?] ")
		if got != want {
			t.Errorf("level %d: trace %q, want %q", l, got, want)
		}
	}
}
