package verbs

import (
	"bytes"
	"errors"
	"testing"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{Want: true, JobKey: testKey, Src: 1, Dst: 0, QPN: 17, PSN: 0xabcdef},
		{JobKey: testKey, Src: 0, Dst: 1, QPN: 1<<24 - 1, PSN: 0, PeerQPN: 17},
		{Want: true, Frames: true, JobKey: testKey, Src: 2, Dst: 1, QPN: 99, PSN: 3, PeerQPN: 4},
		{Frames: true, Bye: true, JobKey: testKey, Src: 1, Dst: 2, QPN: 4, PSN: 7, PeerQPN: 99},
	} {
		b := appendHello(nil, &h)
		if !isHello(b) {
			t.Errorf("%+v: isHello false", h)
		}
		var g hello
		if err := decodeHello(b, &g); err != nil || g != h {
			t.Errorf("decode(encode(%+v)) = %+v, %v", h, g, err)
		}
		for i := range b {
			c := bytes.Clone(b)
			c[i] ^= 0x10
			if err := decodeHello(c, &g); !errors.Is(err, errBadHello) {
				t.Errorf("%+v with byte %d flipped: %v, want errBadHello", h, i, err)
			}
		}
	}
}

// testKey is a job key for wire tests.
const testKey = 0x0123_4567_89ab_cdef

func FuzzDecodeHello(f *testing.F) {
	f.Add(appendHello(nil, &hello{Want: true, JobKey: testKey, Src: 1, QPN: 17, PSN: 5}))
	f.Add(appendHello(nil, &hello{JobKey: testKey, Dst: 1, QPN: 18, PSN: 1<<24 - 1, PeerQPN: 17}))
	f.Add([]byte("WR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h hello
		if decodeHello(b, &h) != nil {
			return
		}
		if got := appendHello(nil, &h); !bytes.Equal(got, b) {
			t.Fatalf("decode then encode: %x, want %x", got, b)
		}
	})
}
