package shm

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// The two-process tests run this test binary again as rank 1 (the helper):
// TestMain sees helperEnv and serves frames instead of running tests. The
// parent is rank 0. They exchange addresses over the helper's stdin and
// stdout, then talk only through the device.
const helperEnv = "WEFT_SHM_TEST_HELPER" // "<job key hex> <spin> <busy> <ring bytes> <cells>"

// Operations, in the first byte of each frame's upper-layer header (8
// bytes: op, 3 zero bytes, a little-endian u32 argument).
const (
	opPing     = 'P' // reply with opPong of the same size
	opPong     = 'p'
	opStream   = 'S' // copy the payload into the sink; arg 1: check its content
	opAck      = 'A' // reply opAcked: bytes streamed and content errors since the last opAck
	opAcked    = 'a'
	opCheckBuf = 'C' // arg: seed; check the buffer the parent wrote with CMA, reply opChecked
	opChecked  = 'c'
	opQuit     = 'Q'
	upperLen   = 8
)

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		os.Exit(helperMain(v))
	}
	code := m.Run()
	for _, s := range segments() {
		if drawn(s) {
			fmt.Fprintf(os.Stderr, "FAIL: the tests left %s behind\n", s)
			os.Remove(s)
			code = 1
		}
	}
	os.Exit(code)
}

// segments lists the shm device's segment files, of every job.
func segments() []string {
	s, _ := filepath.Glob(filepath.Join(DefaultDir, "weft-*-shm*"))
	return s
}

// helperBufLen is the helper's CMA buffer: large enough for the 4 MiB
// bandwidth runs.
const helperBufLen = 4 << 20

// bufPattern is the content of the helper's buffer for a seed.
func bufPattern(b []byte, seed uint32) {
	for i := range b {
		b[i] = byte(uint32(i)*13 + seed)
	}
}

// helperMain is rank 1 of a two-process job: it opens its device, prints
// "ready <addr> <buffer address> <buffer length>", reads rank 0's address,
// and serves frames until opQuit.
func helperMain(arg string) int {
	var keyHex string
	var spin time.Duration
	var busy bool // poll without ever calling Wait
	var ringBytes, cells int
	_, err := fmt.Sscan(arg, &keyHex, &spin, &busy, &ringBytes, &cells)
	if err == nil {
		err = helperRun(keyHex, busy, Options{Spin: spin, RingBytes: ringBytes, Cells: cells})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shm helper:", err)
		return 2
	}
	return 0
}

func helperRun(keyHex string, busy bool, opts Options) error {
	key, err := strconv.ParseUint(keyHex, 16, 64)
	if err != nil {
		return err
	}
	d, err := Open(hal.Config{JobKey: key, Rank: 1, Size: 2}, opts)
	if err != nil {
		return err
	}
	defer d.Close()
	buf := make([]byte, helperBufLen)
	bufPattern(buf, 0)
	fmt.Printf("ready %s %#x %d\n", d.Addr(), bufAddr(buf), len(buf))
	peerAddr, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return err
	}
	if err := errors.Join(d.Connect(0, strings.TrimSpace(peerAddr)), d.Connect(1, d.Addr())); err != nil {
		return err
	}
	return serve(d, key, busy, buf)
}

// serve is rank 1 of the tests' two-rank jobs, in the helper process or
// in a goroutine: it answers rank 0's frames (see the op constants) until
// opQuit. buf is the memory rank 0 reads and writes with CMA.
func serve(d *Device, key uint64, busy bool, buf []byte) error {
	sink := make([]byte, helperBufLen)
	var (
		off, streamed, bad uint64
		quit               bool
		replies            []reply // what the callback asks to send, sent after Poll
		want               []byte
	)
	// pong is a reply header, its length patched for each ping.
	pong := make([]byte, hal.HeaderLen+upperLen)
	hal.EncodeHeader(pong, &hal.Header{Type: hal.FrameData, JobKey: key, Src: 1, Dst: 0})
	pong[hal.HeaderLen] = opPong
	fn := func(h *hal.Header, p []byte) {
		if len(p) < upperLen {
			bad++
			return
		}
		arg := binary.LittleEndian.Uint32(p[4:])
		switch p[0] {
		case opPing:
			// Echo from inside the callback, straight from the inbound
			// ring to the outbound one, as a lean ping-pong server would.
			binary.LittleEndian.PutUint16(pong[10:], h.Len) // hal's length field
			if d.Send(pong, p[upperLen:]) != nil {
				replies = append(replies, reply{opPong, 0, len(p) - upperLen})
			}
		case opStream:
			data := p[upperLen:]
			if off+uint64(len(data)) > uint64(len(sink)) {
				off = 0
			}
			copy(sink[off:], data)
			if arg == 1 {
				want = append(want[:0], data...)
				fill(want, streamed)
				if !slices.Equal(data, want) {
					bad++
				}
			}
			off += uint64(len(data))
			streamed += uint64(len(data))
		case opAck:
			replies = append(replies, reply{opAcked, 0, 16})
		case opCheckBuf:
			w := make([]byte, len(buf))
			bufPattern(w, arg)
			ok := uint32(0)
			if slices.Equal(buf, w) {
				ok = 1
			}
			replies = append(replies, reply{opChecked, ok, 0})
		case opQuit:
			quit = true
		default:
			bad++
		}
	}
	hdr := make([]byte, hal.HeaderLen+upperLen)
	payload := make([]byte, hal.MaxPayload)
	ctx := context.Background()
	for !quit {
		n, err := d.Poll(fn)
		if err != nil {
			return err
		}
		for _, r := range replies {
			p := payload[:r.size]
			if r.op == opAcked {
				binary.LittleEndian.PutUint64(p, streamed)
				binary.LittleEndian.PutUint64(p[8:], bad)
				streamed, bad = 0, 0
			}
			encodeOp(hdr, key, 1, 0, r.op, r.arg, len(p))
			if err := sendRetry(d, hdr, p); err != nil {
				return err
			}
		}
		replies = replies[:0]
		if n == 0 && !busy {
			if err := d.Wait(ctx); err != nil {
				return err
			}
		}
	}
	runtime.KeepAlive(buf)
	return nil
}

// reply is a frame the helper owes rank 0.
type reply struct {
	op   byte
	arg  uint32
	size int
}

// encodeOp encodes into hdr (hal.HeaderLen+upperLen bytes) the header of a
// frame of op from src to dst with a payload of n bytes after it.
func encodeOp(hdr []byte, key uint64, src, dst hal.Rank, op byte, arg uint32, n int) {
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(upperLen + n), JobKey: key, Src: src, Dst: dst})
	clear(hdr[hal.HeaderLen:])
	hdr[hal.HeaderLen] = op
	binary.LittleEndian.PutUint32(hdr[hal.HeaderLen+4:], arg)
}

// sendRetry sends a frame, retrying while the ring is full (the receiver
// is polling elsewhere).
func sendRetry(d *Device, hdr, payload []byte) error {
	for {
		err := d.Send(hdr, payload)
		if !errors.Is(err, hal.ErrNoResource) {
			return err
		}
		runtime.Gosched()
	}
}

// peerProc is rank 0's side of a two-rank job whose rank 1 runs serve, in
// a helper process or in a goroutine.
type peerProc struct {
	t       testing.TB
	cmd     *exec.Cmd  // the helper process, or nil
	served  chan error // serve's result when it runs in a goroutine
	stdin   io.WriteCloser
	dev     *Device
	key     uint64
	buf     uintptr // the helper's buffer
	bufLen  int
	hdr     []byte
	got     []byte // payload of the last frame await saw
	gotOp   byte
	gotArg  uint32
	onFrame func(*hal.Header, []byte)
}

func newPeerProc(t testing.TB, dev *Device, key uint64) *peerProc {
	p := &peerProc{t: t, dev: dev, key: key, hdr: make([]byte, hal.HeaderLen+upperLen)}
	p.onFrame = func(h *hal.Header, b []byte) {
		p.gotOp, p.gotArg = b[0], binary.LittleEndian.Uint32(b[4:])
		p.got = append(p.got[:0], b[upperLen:]...)
	}
	return p
}

// startPeer opens rank 0 and starts the helper as rank 1. helperSpin is
// the helper's Options.Spin; a busy helper polls without ever waiting.
func startPeer(t testing.TB, helperSpin time.Duration, busy bool) *peerProc {
	return startPeerWith(t, helperSpin, busy, Options{})
}

// startPeerWith is startPeer with geometry Options (RingBytes and Cells)
// for both ranks.
func startPeerWith(t testing.TB, helperSpin time.Duration, busy bool, geo Options) *peerProc {
	t.Helper()
	key := newJobKey()
	dev, err := Open(hal.Config{JobKey: key, Rank: 0, Size: 2}, Options{RingBytes: geo.RingBytes, Cells: geo.Cells})
	if err != nil {
		t.Fatal(err)
	}
	p := newPeerProc(t, dev, key)
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x %d %v %d %d", helperEnv, key, helperSpin, busy, geo.RingBytes, geo.Cells))
	p.cmd.Stderr = os.Stderr
	p.stdin, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	if err := p.cmd.Start(); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	var addr string
	if err == nil {
		_, err = fmt.Sscanf(line, "ready %s %v %d", &addr, &p.buf, &p.bufLen)
	}
	if err != nil {
		t.Fatalf("helper's ready line %q: %v", line, err)
	}
	if err := errors.Join(dev.Connect(1, addr), dev.Connect(0, dev.Addr())); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(p.stdin, dev.Addr()); err != nil {
		t.Fatal(err)
	}
	return p
}

// startLocal opens a two-rank job in this process and runs serve as rank 1
// in a goroutine.
func startLocal(t testing.TB, busy bool) *peerProc {
	devs, key := openLocal(t, 2, Options{})
	p := newPeerProc(t, devs[0], key)
	p.served = make(chan error, 1)
	buf := make([]byte, helperBufLen)
	p.buf, p.bufLen = bufAddr(buf), len(buf)
	go func() { p.served <- serve(devs[1], key, busy, buf) }()
	t.Cleanup(p.stop)
	return p
}

// send sends one frame of op with payload to the helper, retrying while
// its ring is full.
func (p *peerProc) send(op byte, arg uint32, payload []byte) {
	encodeOp(p.hdr, p.key, 0, 1, op, arg, len(payload))
	if err := sendRetry(p.dev, p.hdr, payload); err != nil {
		p.t.Fatalf("Send to the helper: %v", err)
	}
}

// await polls until a frame of op arrives, sleeping in Wait between polls
// unless spin.
func (p *peerProc) await(op byte, spin bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		p.gotOp = 0
		if _, err := p.dev.Poll(p.onFrame); err != nil {
			p.t.Fatalf("Poll: %v", err)
		}
		if p.gotOp == op {
			return
		}
		if p.gotOp != 0 {
			p.t.Fatalf("got op %q from the helper, want %q", p.gotOp, op)
		}
		if spin {
			continue
		}
		if err := p.dev.Wait(ctx); err != nil {
			p.t.Fatalf("waiting for %q from the helper: %v", op, err)
		}
	}
}

// stop ends the helper and checks that it exited cleanly and that the
// segment is gone.
func (p *peerProc) stop() {
	if p.dev.isClosed() {
		return
	}
	path := p.dev.seg.path
	p.send(opQuit, 0, nil)
	done := p.served
	if p.cmd != nil {
		done = make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
	}
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("helper: %v", err)
		}
	case <-time.After(20 * time.Second):
		if p.cmd != nil {
			p.cmd.Process.Kill()
		}
		p.t.Errorf("helper did not quit")
		<-done
	}
	p.dev.Close()
	if p.cmd != nil {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			p.t.Errorf("segment %s left behind by two processes (stat: %v)", path, err)
		}
	}
}

// Two processes exchange frames of every size, stream checked data, wake
// each other from the futex, and read and write each other's memory.
func TestTwoProcesses(t *testing.T) {
	for _, mode := range []struct {
		name string
		spin time.Duration
	}{{"spin", 0}, {"futex", -1}} {
		t.Run(mode.name, func(t *testing.T) {
			p := startPeer(t, mode.spin, false)
			t.Run("ping", func(t *testing.T) {
				for _, size := range []int{0, 1, 8, 100, 4000, hal.MaxPayload - upperLen} {
					p.send(opPing, 0, make([]byte, size))
					p.await(opPong, false)
					if len(p.got) != size {
						t.Errorf("pong of %d bytes to a ping of %d", len(p.got), size)
					}
				}
			})
			t.Run("stream", func(t *testing.T) {
				var total uint64
				chunk := make([]byte, hal.MaxPayload-upperLen)
				for i := range 200 {
					c := chunk[:(i*7919)%len(chunk)]
					fill(c, total)
					p.send(opStream, 1, c)
					total += uint64(len(c))
				}
				p.send(opAck, 0, nil)
				p.await(opAcked, false)
				if got, bad := binary.LittleEndian.Uint64(p.got), binary.LittleEndian.Uint64(p.got[8:]); got != total || bad != 0 {
					t.Errorf("helper received %d bytes with %d bad frames, want %d and 0", got, bad, total)
				}
			})
			t.Run("cma", func(t *testing.T) { testCMA(t, p) })
		})
	}
}

func testCMA(t *testing.T, p *peerProc) {
	if !p.dev.CMA() {
		t.Skipf("cross-memory attach refused by this kernel: %s", *p.dev.cma.why.Load())
	}
	got := make([]byte, p.bufLen)
	if err := p.dev.ReadFrom(1, p.buf, got); err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	want := make([]byte, p.bufLen)
	bufPattern(want, 0)
	if !slices.Equal(got, want) {
		t.Fatalf("ReadFrom of the helper's buffer: crc %#x, want %#x", crc32.ChecksumIEEE(got), crc32.ChecksumIEEE(want))
	}
	bufPattern(want, 77)
	if err := p.dev.WriteTo(1, p.buf, want); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	p.send(opCheckBuf, 77, nil)
	p.await(opChecked, false)
	if p.gotArg != 1 {
		t.Errorf("the helper's buffer does not hold what WriteTo wrote")
	}
	// Restore the pattern for the next run.
	bufPattern(want, 0)
	if err := p.dev.WriteTo(1, p.buf, want); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	// An address not mapped in the helper fails cleanly.
	if err := p.dev.ReadFrom(1, 8, got[:8]); err == nil {
		t.Errorf("ReadFrom at address 8 succeeded")
	} else {
		t.Log(err)
	}
}

// CMA inside one process (every rank has the same pid): the probe, and the
// errors when it is off or the peer is unknown.
func TestCMALocal(t *testing.T) {
	devs, _ := openLocal(t, 2, Options{})
	d := devs[0]
	if !d.CMA() {
		t.Skipf("cross-memory attach refused by this kernel: %s", *d.cma.why.Load())
	}
	src := []byte("cross-memory attach")
	dst := make([]byte, len(src))
	if err := d.ReadFrom(1, bufAddr(src), dst); err != nil || !slices.Equal(dst, src) {
		t.Fatalf("ReadFrom: %q, %v", dst, err)
	}
	if err := d.WriteTo(1, bufAddr(dst), []byte("CROSS")); err != nil || string(dst[:5]) != "CROSS" {
		t.Fatalf("WriteTo: %q, %v", dst, err)
	}
	if err := d.ReadFrom(2, bufAddr(src), dst); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("ReadFrom rank 2 of 2: %v, want hal.ErrUnknownPeer", err)
	}
	allocs := testing.AllocsPerRun(100, func() { d.ReadFrom(1, bufAddr(src), dst) })
	if allocs != 0 {
		t.Errorf("ReadFrom: %v allocations, want 0", allocs)
	}

	off, _ := openLocal(t, 2, Options{NoCMA: true})
	if off[0].CMA() {
		t.Errorf("CMA() with Options.NoCMA")
	}
	if err := off[0].ReadFrom(1, bufAddr(src), dst); !errors.Is(err, ErrNoCMA) {
		t.Errorf("ReadFrom with Options.NoCMA: %v, want ErrNoCMA", err)
	}
	key := newJobKey()
	lone, err := Open(hal.Config{JobKey: key, Rank: 0, Size: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	if err := lone.ReadFrom(1, bufAddr(src), dst); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("ReadFrom before Connect: %v, want hal.ErrUnknownPeer", err)
	}
}

// TestCMAToClosedPeer: a rank that closes its device marks its block
// closed, and Sends to it fail with hal.ErrUnknownPeer; ReadFrom and
// WriteTo toward it must fail the same way and leave its memory alone,
// since what the caller validated the access against (its registrations)
// went with its device.
func TestCMAToClosedPeer(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	d := devs[0]
	if !d.CMA() {
		t.Skip("cross-memory attach refused by this kernel")
	}
	mem := make([]byte, 8)
	if err := devs[1].Close(); err != nil {
		t.Fatal(err)
	}
	serr := d.Send(header(key, 0, 1, 8), make([]byte, 8))
	werr := d.WriteTo(1, bufAddr(mem), []byte("written!"))
	rerr := d.ReadFrom(1, bufAddr(mem), make([]byte, 8))
	if !errors.Is(serr, hal.ErrUnknownPeer) || !errors.Is(werr, hal.ErrUnknownPeer) || !errors.Is(rerr, hal.ErrUnknownPeer) {
		t.Errorf("rank 1 closed: Send = %v, WriteTo = %v, ReadFrom = %v; want hal.ErrUnknownPeer from each", serr, werr, rerr)
	}
	if string(mem) != "\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("WriteTo a closed rank wrote its memory: %q", mem)
	}
}

// A peer whose probe reads back wrong (another process behind the pid, or
// a pid that is not the one in the segment) turns CMA off, said once at
// trace level 2.
func TestCMARefused(t *testing.T) {
	var log strings.Builder
	defer trace.SetWriter(trace.SetWriter(&log))
	defer trace.SetLevel(trace.SetLevel(trace.Setup))
	for _, tc := range []struct {
		name    string
		corrupt func(devs []*Device) string // returns the address to connect to
	}{
		{"probe value", func(devs []*Device) string {
			atomic.AddUint64(devs[0].peers[1].probeV, 1)
			return devs[1].Addr()
		}},
		{"pid", func(devs []*Device) string {
			return fmt.Sprintf("shm:%s:1:%d:%016x", devs[1].seg.name, os.Getpid()+1, devs[1].seg.nonce)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.Reset()
			key := newJobKey()
			devs, err := OpenLocal(key, 2, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, d := range devs {
					d.Close()
				}
			}()
			if !devs[0].CMA() {
				t.Skip("cross-memory attach refused by this kernel")
			}
			addr := tc.corrupt(devs)
			for range 2 {
				if err := devs[0].Connect(1, addr); err != nil {
					t.Fatal(err)
				}
			}
			if devs[0].CMA() {
				t.Errorf("CMA() after a failed probe")
			}
			b := make([]byte, 8)
			if err := devs[0].ReadFrom(1, bufAddr(b), b); !errors.Is(err, ErrNoCMA) {
				t.Errorf("ReadFrom after a failed probe: %v, want ErrNoCMA", err)
			}
			if n := strings.Count(log.String(), "cross-memory attach to rank 1 refused"); n != 1 {
				t.Errorf("the refusal was traced %d times, want once:\n%s", n, log.String())
			}
		})
	}
}
