package udp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// The benchmarks talk to a peer in another process, as two ranks would:
// the test binary re-executes itself with helperEnv naming a role, and
// TestMain runs that role instead of the tests. The parent and the helper
// exchange device addresses over the helper's stdin and stdout (standing in
// for PMI); closing stdin stops the helper.
const (
	helperEnv     = "WEFT_UDP_TEST_HELPER"
	helperModeEnv = "WEFT_UDP_TEST_HELPER_MODE" // a key of sendModes
	roleEcho      = "echo"                      // send every frame back to rank 0
	roleSink      = "sink"                      // count frames, acknowledge counts to rank 0
	// sinkAckEvery is how many frames the sink receives between acks.
	sinkAckEvery = 64
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		if err := runHelper(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "udp helper %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	os.Exit(code)
}

// afterTests run when every test is done: they release what tests share
// (the netbench binary the namespace tests build).
var afterTests []func()

// runHelper is the child process: rank 1 of a two-rank job.
func runHelper(role string, in io.Reader, out io.Writer) error {
	opts := sendModes[os.Getenv(helperModeEnv)]
	opts.Bind = loopback
	d, err := Open(hal.Config{JobKey: testJobKey, Rank: 1, Size: 2}, opts)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintln(out, d.Addr())
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return fmt.Errorf("no peer address: %v", sc.Err())
	}
	if err := d.Connect(0, sc.Text()); err != nil {
		return err
	}
	// EOF on stdin (the parent is done, or gone) cancels the context, which
	// wakes Wait.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for sc.Scan() {
		}
		cancel()
	}()
	switch role {
	case roleEcho:
		err = echo(ctx, d)
	case roleSink:
		err = sink(ctx, d)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// sendRetry queues a frame, flushing while the batch is full.
func sendRetry(d *Device, hdr, payload []byte) error {
	for {
		err := d.Send(hdr, payload)
		if !errors.Is(err, hal.ErrNoResource) {
			return err
		}
		if err := d.Flush(); err != nil && !errors.Is(err, hal.ErrNoResource) {
			return err
		}
	}
}

// flushAll flushes until the queue is empty.
func flushAll(d *Device) error {
	for {
		err := d.Flush()
		if !errors.Is(err, hal.ErrNoResource) {
			return err
		}
	}
}

// echo returns every frame to its sender with the same payload.
func echo(ctx context.Context, d *Device) error {
	batch := d.Options().Batch
	hdrs := make([][hal.HeaderLen]byte, batch)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, d.Caps().MTU)
	}
	var queued int
	var err error
	reply := func(h *hal.Header, p []byte) {
		if queued == batch {
			if err = flushAll(d); err != nil {
				return
			}
			queued = 0
		}
		r := *h
		r.Src, r.Dst, r.Flags = h.Dst, h.Src, 0
		hal.EncodeHeader(hdrs[queued][:], &r)
		payload := bufs[queued][:copy(bufs[queued], p)]
		hal.Seal(hdrs[queued][:], payload)
		if e := sendRetry(d, hdrs[queued][:], payload); e != nil && err == nil {
			err = e
		}
		queued++
	}
	for {
		n, perr := d.Poll(reply)
		if err = errors.Join(err, perr); err != nil {
			return err
		}
		if queued > 0 {
			if err := flushAll(d); err != nil {
				return err
			}
			queued = 0
		}
		if n == 0 {
			if err := d.Wait(ctx); err != nil {
				return err
			}
		}
	}
}

// sink counts frames and acknowledges to rank 0, every sinkAckEvery frames
// and whenever it goes idle, how many it has received and how many the
// kernel dropped: the sender's credits.
func sink(ctx context.Context, d *Device) error {
	var hdr [hal.HeaderLen]byte
	var payload [16]byte
	var got, acked uint64
	ack := func() error {
		c := d.Counters()
		binary.LittleEndian.PutUint64(payload[0:], c.FramesRecv.Load())
		binary.LittleEndian.PutUint64(payload[8:], c.Dropped())
		hal.EncodeHeader(hdr[:], &hal.Header{Type: hal.FrameData, Len: 16, JobKey: testJobKey, Src: 1, Dst: 0})
		hal.Seal(hdr[:], payload[:])
		acked = got
		if err := sendRetry(d, hdr[:], payload[:]); err != nil {
			return err
		}
		return flushAll(d)
	}
	count := func(*hal.Header, []byte) { got++ }
	for {
		n, err := d.Poll(count)
		if err != nil {
			return err
		}
		if got-acked >= sinkAckEvery {
			if err := ack(); err != nil {
				return err
			}
		}
		if n > 0 {
			continue
		}
		// Idle: read the drop counter and report, so the sender's
		// credits come back even for frames the kernel dropped.
		if err := d.SyncDrops(); err != nil {
			return err
		}
		if err := ack(); err != nil {
			return err
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
	}
}

// helper is a running helper process and this process's device (rank 0)
// connected to it.
type helper struct {
	dev *Device
	cmd *exec.Cmd
}

// startHelper starts a helper process in role and connects dev (rank 0 of
// two) with it; both use the send mode named (a key of sendModes). The
// helper stops when the benchmark ends.
func startHelper(tb testing.TB, role, mode string) *helper {
	tb.Helper()
	dev := openRank(tb, 0, 2, sendModes[mode])
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, helperModeEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("helper %s: %v", role, err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			tb.Errorf("helper %s did not stop", role)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("helper address: %v", err)
	}
	connect(tb, dev, 1, line[:len(line)-1])
	if _, err := fmt.Fprintln(stdin, dev.Addr()); err != nil {
		tb.Fatal(err)
	}
	return &helper{dev: dev, cmd: cmd}
}
