package udp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/internal/trace"
)

// A datagram too short to hold a header (or with a bad magic, version,
// type or length) is traced at level 4 with the type and source rank of
// the frame the device accepted before it: hal.DecodeHeader returns before
// it writes them, and deliver reuses d.rxHdr. The line then blames a rank
// (and names a frame type) that the dropped datagram never said.
func TestRevUDPTraceDropDoesNotBlameThePreviousSender(t *testing.T) {
	var buf bytes.Buffer
	restore := trace.Redirect(&buf, trace.Hot)
	defer restore()
	d := openRank(t, 1, 3, Options{})
	raw := rawSender(t, d)
	for _, data := range [][]byte{
		newFrame(2, 1, []byte("from rank 2")).wire(), // accepted: fills d.rxHdr
		[]byte("weft?"), // 5 bytes: no header at all
		newFrame(0, 1, []byte("last")).wire(),
	} {
		if _, err := raw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	recvN(t, d, 2)
	restore()
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "of 5 bytes") && strings.Contains(line, "from rank 2") {
			t.Errorf("a 5-byte datagram is traced as sent by rank 2, the previous frame's sender:\n%s", line)
		}
	}
}
