package udp

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// TestTraceDrop: a datagram whose CRC does not match is dropped with a
// line at trace level 4 naming the reason, and with none at level 3.
func TestTraceDrop(t *testing.T) {
	for _, l := range []trace.Level{trace.Internal, trace.Hot} {
		d := openRank(t, 1, 2, Options{})
		raw := rawSender(t, d)
		var buf bytes.Buffer
		restore := trace.Redirect(&buf, l)
		f := newFrame(0, 1, []byte("crc"))
		f.payload[1] ^= 0x10
		for _, data := range [][]byte{f.wire(), newFrame(0, 1, []byte("last")).wire()} {
			if _, err := raw.Write(data); err != nil {
				t.Fatal(err)
			}
		}
		// Loopback keeps one socket's datagrams in order: once the last
		// is delivered, the corrupted one has been judged.
		recvN(t, d, 1)
		restore()
		want := "weft[?] udp 1: drop data frame of 35 bytes (header says from rank 0): hal: bad frame: crc\n"
		if l < trace.Hot {
			want = ""
		}
		// The line's stamp (seconds since the process started) varies.
		got := regexp.MustCompile(`^weft\[\?\] \d+\.\d{6} `).ReplaceAllString(buf.String(), "weft[?] ")
		if got != want {
			t.Errorf("level %d: trace %q, want %q", l, got, want)
		}
		if n := d.Counters().Drops[hal.DropCRC].Load(); n != 1 {
			t.Errorf("level %d: %d CRC drops counted, want 1", l, n)
		}
	}
}

// A datagram whose header does not decode (here too short to hold one) is
// traced without a type or a sender: the device's decoded header still
// holds the previous frame's, which the line must not blame.
func TestTraceDropOfUnreadableHeader(t *testing.T) {
	d := openRank(t, 1, 3, Options{})
	raw := rawSender(t, d)
	var buf bytes.Buffer
	restore := trace.Redirect(&buf, trace.Hot)
	defer restore()
	for _, data := range [][]byte{
		newFrame(2, 1, []byte("from rank 2")).wire(), // accepted: its header is decoded
		[]byte("weft?"), // no header at all
		newFrame(0, 1, []byte("last")).wire(),
	} {
		if _, err := raw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	recvN(t, d, 2)
	restore()
	want := "weft[?] udp 1: drop frame of 5 bytes (header unreadable): hal: bad frame: short\n"
	got := regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} `).ReplaceAllString(buf.String(), "weft[?] ")
	if got != want {
		t.Errorf("trace %q, want %q", got, want)
	}
}
