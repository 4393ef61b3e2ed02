package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A hello is the control datagram by which two devices connect their
// reliable-connected queue pairs to each other. It travels on the UD queue
// pair like a frame but starts with another magic ("WR"), so Poll consumes
// it before the frame checks and the layer above never sees it. Layout,
// little-endian:
//
//	 0 magic     u16  'W','R'
//	 2 version   u8   1
//	 3 flags     u8   helloWant: answer me; helloFrames: about the queue
//	                  pair that carries frames, not the one for RDMA;
//	                  helloBye: the sender's device is closing (a peer
//	                  that stops answering after it is not lost)
//	 4 job key   u64
//	12 src       u32  sending rank
//	16 dst       u32  receiving rank
//	20 qpn       u32  the sender's RC queue pair toward dst
//	24 psn       u32  its first packet sequence number (24 bits)
//	28 peer qpn  u32  the queue pair of dst the sender's is connected to, 0 if none
//	32 crc       u32  CRC32C of bytes 0..31
//
// These values are part of the wire protocol.
type hello struct {
	Want    bool
	Frames  bool
	Bye     bool
	JobKey  uint64
	Src     uint32
	Dst     uint32
	QPN     uint32
	PSN     uint32
	PeerQPN uint32
}

const (
	helloMagic   uint16 = 'W' | 'R'<<8
	helloVersion        = 1
	helloWant           = 1
	helloFrames         = 2
	helloBye            = 4
	helloLen            = 36
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errBadHello is wrapped by every hello decoding failure.
var errBadHello = errors.New("verbs: malformed hello")

// isHello reports whether a datagram is a hello rather than a frame.
func isHello(b []byte) bool {
	return len(b) >= 2 && binary.LittleEndian.Uint16(b) == helloMagic
}

// appendHello encodes h onto b.
func appendHello(b []byte, h *hello) []byte {
	le := binary.LittleEndian
	o := len(b)
	b = append(b, make([]byte, helloLen)...)
	p := b[o:]
	le.PutUint16(p, helloMagic)
	p[2] = helloVersion
	if h.Want {
		p[3] |= helloWant
	}
	if h.Frames {
		p[3] |= helloFrames
	}
	if h.Bye {
		p[3] |= helloBye
	}
	le.PutUint64(p[4:], h.JobKey)
	le.PutUint32(p[12:], h.Src)
	le.PutUint32(p[16:], h.Dst)
	le.PutUint32(p[20:], h.QPN)
	le.PutUint32(p[24:], h.PSN)
	le.PutUint32(p[28:], h.PeerQPN)
	le.PutUint32(p[32:], crc32.Checksum(p[:32], crcTable))
	return b
}

// decodeHello parses a hello; it fails on anything but exactly one intact
// hello of this version.
func decodeHello(b []byte, h *hello) error {
	le := binary.LittleEndian
	switch {
	case len(b) != helloLen:
		return fmt.Errorf("%w: %d bytes", errBadHello, len(b))
	case le.Uint16(b) != helloMagic || b[2] != helloVersion:
		return fmt.Errorf("%w: magic %#04x version %d", errBadHello, le.Uint16(b), b[2])
	case b[3]&^(helloWant|helloFrames|helloBye) != 0:
		return fmt.Errorf("%w: flags %#x", errBadHello, b[3])
	case le.Uint32(b[32:]) != crc32.Checksum(b[:32], crcTable):
		return fmt.Errorf("%w: bad CRC", errBadHello)
	}
	*h = hello{Want: b[3]&helloWant != 0, Frames: b[3]&helloFrames != 0, Bye: b[3]&helloBye != 0, JobKey: le.Uint64(b[4:]), Src: le.Uint32(b[12:]), Dst: le.Uint32(b[16:]),
		QPN: le.Uint32(b[20:]), PSN: le.Uint32(b[24:]), PeerQPN: le.Uint32(b[28:])}
	if h.QPN == 0 || h.QPN >= 1<<24 || h.PSN >= 1<<24 || h.PeerQPN >= 1<<24 {
		return fmt.Errorf("%w: qpn %d psn %d peer qpn %d", errBadHello, h.QPN, h.PSN, h.PeerQPN)
	}
	return nil
}
