package udp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// rawSender sends arbitrary datagrams to d from a plain socket, as a buggy
// or hostile process on the host could.
func rawSender(t *testing.T, d *Device) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(d.Stats().Local))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wire is f as one datagram.
func (f *frame) wire() []byte { return append(f.hdr[:], f.payload...) }

func TestMalformedDatagrams(t *testing.T) {
	d := openRank(t, 1, 2, Options{MTU: 100})
	raw := rawSender(t, d)

	type bad struct {
		name   string
		data   []byte
		reason hal.DropReason
	}
	var cases []bad
	add := func(name string, reason hal.DropReason, data []byte) {
		cases = append(cases, bad{name, data, reason})
	}
	add("empty", hal.DropShort, nil)
	add("short", hal.DropShort, []byte("weft?"))
	add("garbage", hal.DropMagic, bytes.Repeat([]byte{0xaa}, 64))
	f := newFrame(0, 1, []byte("v"))
	f.hdr[2] = hal.Version + 1
	add("version", hal.DropVersion, f.wire())
	f = newFrame(0, 1, []byte("t"))
	f.hdr[3] = 200
	add("type", hal.DropType, f.wire())
	f = newFrame(0, 1, []byte("length"))
	add("length", hal.DropLength, f.wire()[:hal.HeaderLen+3])
	f = unsealed(0, 1, []byte("key"))
	binary.LittleEndian.PutUint64(f.hdr[16:], testJobKey+1)
	hal.Seal(f.hdr[:], f.payload)
	add("job key", hal.DropJobKey, f.wire())
	f = newFrame(0, 1, []byte("crc"))
	f.payload[1] ^= 0x10
	add("bad crc", hal.DropCRC, f.wire())
	add("no crc", hal.DropCRC, unsealed(0, 1, []byte("unsealed")).wire())
	add("truncated", hal.DropLength, newFrame(0, 1, make([]byte, 500)).wire())
	add("wrong rank", hal.DropPeer, newFrame(0, 0, []byte("to rank 0")).wire())

	var want [hal.NumDropReasons]uint64
	for _, c := range cases {
		if _, err := raw.Write(c.data); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want[c.reason]++
	}
	// Random bytes, and valid frames with one byte changed: CRC32C (or a
	// field check before it) catches every single-byte change.
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 200)
	const random = 500
	for i := range random {
		var data []byte
		if i%2 == 0 {
			data = buf[:rng.IntN(len(buf))]
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
		} else {
			data = newFrame(0, 1, bytes.Repeat([]byte{byte(i)}, rng.IntN(60))).wire()
			data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
		}
		if _, err := raw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback keeps one socket's datagrams in order, so once this one is
	// delivered every datagram above has been judged.
	if _, err := raw.Write(newFrame(0, 1, []byte("last")).wire()); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, d, 1)
	if string(got[0].payload) != "last" {
		t.Fatalf("delivered %q, want only the final good frame", got[0].payload)
	}
	c := d.Counters()
	if c.FramesRecv.Load() != 1 {
		t.Errorf("delivered %d frames, want 1", c.FramesRecv.Load())
	}
	for r := range hal.NumDropReasons {
		if n := c.Drops[r].Load(); n < want[r] {
			t.Errorf("drop.%v = %d, want at least %d", r, n, want[r])
		}
	}
	if total := c.Dropped(); total != uint64(len(cases)+random) {
		t.Errorf("dropped %d, want %d (%v)", total, len(cases)+random, c)
	}
}
