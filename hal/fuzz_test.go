package hal_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite hal/testdata/fuzz/FuzzCheck from fuzzSeeds")

// seedDir is where go test finds FuzzCheck's seed corpus; plain `go test`
// runs every file in it as a test case.
const seedDir = "testdata/fuzz/FuzzCheck"

// fuzzSeed is one committed seed: a frame and the needCRC argument.
type fuzzSeed struct {
	name    string
	frame   []byte
	needCRC bool
}

// fuzzSeeds are valid sealed frames of every type and several sizes, an
// unsealed one, frames of another job, and truncated and corrupted frames,
// so the fuzzer starts from inputs that reach every branch of Check.
func fuzzSeeds() []fuzzSeed {
	sealed := func(t hal.FrameType, n int) []byte {
		h := sampleHeader(t, n)
		return buildFrame(&h, payloadOf(n), true)
	}
	var seeds []fuzzSeed
	add := func(name string, frame []byte, needCRC bool) {
		seeds = append(seeds, fuzzSeed{name, frame, needCRC})
	}
	for _, n := range []int{0, 1, 64, 1500, 4096} {
		add(fmt.Sprintf("sealed-data-%d", n), sealed(hal.FrameData, n), true)
	}
	sizes := map[hal.FrameType]int{hal.FrameRDMAWrite: 1024, hal.FrameRDMAReadReq: 24,
		hal.FrameRDMAReadResp: 512, hal.FrameTPTUpdate: 96}
	for _, t := range allTypes()[1:] {
		add(fmt.Sprintf("sealed-%v-%d", t, sizes[t]), sealed(t, sizes[t]), true)
	}

	h := sampleHeader(hal.FrameData, 64)
	add("unsealed-data-64", buildFrame(&h, payloadOf(64), false), false)
	add("unsealed-data-64-needcrc", buildFrame(&h, payloadOf(64), false), true)
	h.JobKey = 1
	add("sealed-other-job", buildFrame(&h, payloadOf(64), true), true)

	whole := sealed(hal.FrameData, 64)
	for _, n := range []int{0, 1, 2, 3, 12, 16, hal.HeaderLen - 1, hal.HeaderLen, len(whole) - 1} {
		add(fmt.Sprintf("truncated-%d", n), whole[:n], true)
	}
	flipped := bytes.Clone(whole)
	flipped[hal.HeaderLen+10] ^= 4
	add("payload-bit-flip", flipped, true)
	return seeds
}

// corpusFile is the text of a seed in go test's corpus format ("%q" is how
// the fuzzer itself writes a []byte).
func corpusFile(s fuzzSeed) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nbool(%t)\n", s.frame, s.needCRC)
}

// TestFuzzSeeds keeps the committed seed corpus equal to fuzzSeeds; run
// `go test ./hal -run TestFuzzSeeds -update-seeds` after changing either.
func TestFuzzSeeds(t *testing.T) {
	seeds := fuzzSeeds()
	if *updateSeeds {
		if err := os.MkdirAll(seedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			if err := os.WriteFile(filepath.Join(seedDir, s.name), corpusFile(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range seeds {
		got, err := os.ReadFile(filepath.Join(seedDir, s.name))
		if err != nil {
			t.Errorf("seed %s: %v (run with -update-seeds)", s.name, err)
		} else if !bytes.Equal(got, corpusFile(s)) {
			t.Errorf("seed %s differs from fuzzSeeds (run with -update-seeds)", s.name)
		}
	}
}

// FuzzCheck feeds arbitrary bytes to Check. It must never panic; what it
// accepts must survive a re-encode and re-seal unchanged; what it rejects
// must carry one of the reasons Check documents.
func FuzzCheck(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte, needCRC bool) {
		checkFrame(t, frame, testJobKey, needCRC)
		// The mutator rarely keeps the job key intact; checking against the
		// frame's own key as well takes it past the key to the CRC path.
		var h hal.Header
		if hal.DecodeHeader(frame, &h) == nil && h.JobKey != testJobKey {
			checkFrame(t, frame, h.JobKey, needCRC)
		}
	})
}

// checkFrame runs Check on frame and asserts FuzzCheck's properties.
func checkFrame(t *testing.T, frame []byte, jobKey uint64, needCRC bool) {
	orig := bytes.Clone(frame)
	var h hal.Header
	payload, err := hal.Check(frame, jobKey, needCRC, &h)
	if !bytes.Equal(frame, orig) {
		t.Fatal("Check modified its input")
	}
	if err != nil {
		var fe *hal.FrameError
		if !errors.As(err, &fe) {
			t.Fatalf("rejection %T %v is not a *hal.FrameError", err, err)
		}
		if !slices.Contains(checkReasons, fe.Reason) {
			t.Fatalf("rejection reason %v is not one Check gives", fe.Reason)
		}
		if payload != nil {
			t.Fatal("rejected frame returned a payload")
		}
		var c hal.Counters
		c.DropErr(err)
		if c.Drops[fe.Reason].Load() != 1 || c.Dropped() != 1 {
			t.Fatalf("DropErr(%v) counted %v", err, &c)
		}
		return
	}

	if len(frame) != hal.HeaderLen+len(payload) || int(h.Len) != len(payload) {
		t.Fatalf("accepted %d-byte frame: header says %d, payload %d bytes", len(frame), h.Len, len(payload))
	}
	if h.JobKey != jobKey {
		t.Fatalf("accepted job key %#x, want %#x", h.JobKey, jobKey)
	}
	if needCRC && h.Flags&hal.FlagCRC == 0 {
		t.Fatal("accepted an unsealed frame although a CRC was required")
	}

	re := make([]byte, len(frame))
	hal.EncodeHeader(re, &h)
	copy(re[hal.HeaderLen:], payload)
	hal.Seal(re[:hal.HeaderLen], re[hal.HeaderLen:])
	var h2 hal.Header
	p2, err := hal.Check(re, jobKey, true, &h2)
	if err != nil {
		t.Fatalf("re-sealed frame rejected: %v\nheader %+v", err, h)
	}
	want := h
	want.Flags |= hal.FlagCRC // Seal adds it to a frame that lacked it
	if h2 != want || !bytes.Equal(p2, payload) {
		t.Fatalf("re-sealed frame decodes to %+v, want %+v", h2, want)
	}
	// A frame that was sealed already comes back bit for bit: the header
	// carries every byte.
	if h.Flags&hal.FlagCRC != 0 && !bytes.Equal(re, frame) {
		t.Fatalf("re-sealed frame differs:\n got % x\nwant % x", re[:hal.HeaderLen], frame[:hal.HeaderLen])
	}
}

// FuzzSealCheck: a frame sealed as a device's caller seals it (the frame
// header, then any upper-layer header in hdr, then the payload) passes
// Check with its body intact, and no single flipped bit passes.
func FuzzSealCheck(f *testing.F) {
	f.Add(uint8(1), []byte{}, []byte("x"), uint32(0))
	f.Add(uint8(2), make([]byte, 72), make([]byte, 1000), uint32(77))
	f.Add(uint8(11), make([]byte, 40), make([]byte, 63), uint32(12345))
	types := allTypes()
	f.Fuzz(func(t *testing.T, typ uint8, extra, payload []byte, flip uint32) {
		if len(extra)+len(payload) > hal.MaxPayload {
			return
		}
		h := hal.Header{Type: types[int(typ)%len(types)], JobKey: testJobKey, Src: 3, Dst: 4,
			Len: uint16(len(extra) + len(payload)), Life: uint32(typ) * 0x10101 & hal.MaxLife}
		hdr := make([]byte, hal.HeaderLen+len(extra))
		hal.EncodeHeader(hdr, &h)
		copy(hdr[hal.HeaderLen:], extra)
		hal.Seal(hdr, payload)
		frame := append(bytes.Clone(hdr), payload...)
		var got hal.Header
		body, err := hal.Check(frame, testJobKey, true, &got)
		if err != nil {
			t.Fatalf("sealed frame refused: %v", err)
		}
		if !bytes.Equal(body, frame[hal.HeaderLen:]) || got.Type != h.Type || got.Len != h.Len ||
			got.Src != 3 || got.Dst != 4 || got.Life != h.Life {
			t.Fatalf("decoded %+v, want %+v", got, h)
		}
		bit := int(flip % uint32(8*len(frame)))
		frame[bit/8] ^= 1 << (bit % 8)
		if _, err := hal.Check(frame, testJobKey, true, &got); err == nil {
			t.Fatalf("frame with bit %d flipped accepted", bit)
		}
	})
}
