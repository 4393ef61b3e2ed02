package lapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/udp"
)

// helperEnv makes the test binary a helper process instead of running
// tests: rank 1 of a two-rank job over UDP on loopback.
const helperEnv = "WEFT_LAPI_HELPER"

const procJobKey = 0x9e57a27

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		if err := runTarget(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "lapi helper: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runTarget is the helper: it joins the job by reintegration, registers a
// region and says its PVO, then answers "sum" with how many bytes of the
// region are not zero, until its input ends.
func runTarget(in io.Reader, out io.Writer) error {
	d, err := udp.Open(hal.Config{JobKey: procJobKey, Rank: 1, Size: 2}, udp.Options{Bind: "127.0.0.1"})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, d.Addr())
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return fmt.Errorf("no peer address: %v", sc.Err())
	}
	if err := d.Connect(0, sc.Text()); err != nil {
		return err
	}
	c, err := Open(Config{Device: d, Rank: 1, Size: 2, JobKey: procJobKey, Reintegrate: true})
	if err != nil {
		return err
	}
	defer c.Close()
	mem := make([]byte, 1<<20)
	p, err := c.TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d %d %d\n", p.Entry, p.Offset, p.Key)
	// Progress runs here while the parent writes; commands are read by
	// another goroutine and answered from inside the progress lock, where
	// RDMA placement also happens.
	cmds := make(chan string, 1)
	go func() {
		for sc.Scan() {
			cmds <- sc.Text()
			c.Wake() // the condition depends on the channel, not on progress
		}
		close(cmds)
		c.Wake()
	}()
	for {
		var cmd string
		var ok bool
		c.Wait(context.Background(), func() (bool, error) {
			select {
			case cmd, ok = <-cmds:
				if ok && cmd == "sum" {
					fmt.Fprintln(out, len(mem)-bytes.Count(mem, []byte{0}))
				}
				return true, nil
			default:
				return false, nil
			}
		})
		if !ok {
			return nil
		}
	}
}

// child is a running helper process.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	pvo hal.PVO
}

func startChild(t *testing.T, dev *udp.Device) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=target")
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, in: in, out: bufio.NewScanner(outp)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	addr := ch.line(t)
	if err := dev.Connect(1, addr); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, dev.Addr())
	if _, err := fmt.Sscan(ch.line(t), &ch.pvo.Entry, &ch.pvo.Offset, &ch.pvo.Key); err != nil {
		t.Fatal(err)
	}
	return ch
}

func (ch *child) line(t *testing.T) string {
	t.Helper()
	if !ch.out.Scan() {
		t.Fatalf("helper said nothing: %v", ch.out.Err())
	}
	return ch.out.Text()
}

// nonZero asks the helper how many bytes of its region are written.
func (ch *child) nonZero(t *testing.T) int {
	t.Helper()
	fmt.Fprintln(ch.in, "sum")
	var n int
	if _, err := fmt.Sscan(ch.line(t), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRestartAcrossProcesses is the reintegration test of the shm issue
// across real processes over UDP: rank 1 is killed and started again (new
// process, new port, new TPT keys, new memory) while rank 0 keeps writing
// 256 KiB by RDMA with the keys of its earlier life. None of those writes
// lands in the new process's memory (it says how many of its bytes are
// written); each fails as refused while it rejoins, abandoned by the
// restart, or by the key check; then writes with its new keys land.
func TestRestartAcrossProcesses(t *testing.T) {
	dev, err := udp.Open(hal.Config{JobKey: procJobKey, Rank: 0, Size: 2}, udp.Options{Bind: "127.0.0.1"})
	if err != nil {
		t.Skipf("no UDP socket on loopback: %v", err)
	}
	first := startChild(t, dev)
	c, err := Open(Config{Device: dev, Rank: 0, Size: 2, JobKey: procJobKey, Reintegrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitRDMAReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xab}, 256<<10)
	put := func(p hal.PVO) error {
		k := c.NewCounter()
		if err := c.Put(1, p, data, SendOpts{Completion: k}); err != nil {
			return err
		}
		return k.Wait(ctx, 1)
	}
	if err := put(first.pvo); err != nil {
		t.Fatalf("put before the restart: %v", err)
	}
	if n := first.nonZero(t); n != len(data) {
		t.Fatalf("before the restart the target has %d bytes written, want %d", n, len(data))
	}

	first.cmd.Process.Kill()
	first.cmd.Wait()
	second := startChild(t, dev)
	var refused, restarted, keyFails int
	for keyFails < 2 {
		if ctx.Err() != nil {
			t.Fatalf("no key-check failure in time (refused %d, restarted %d)", refused, restarted)
		}
		err := put(first.pvo)
		switch {
		case err == nil:
			t.Fatal("a write with the earlier life's key succeeded")
		case errors.Is(err, ErrNotReady):
			refused++
			c.Wait(ctx, func() (bool, error) { return c.ri.rdmaCheck(1) == nil, nil }) // runs locked
		case errors.Is(err, ErrPeerRestarted):
			restarted++
		case errors.Is(err, ErrProtection) && strings.Contains(err.Error(), "key check failed"):
			keyFails++
		default:
			t.Fatalf("stale write failed with %v", err)
		}
	}
	if n := second.nonZero(t); n != 0 {
		t.Fatalf("%d bytes of stale writes landed in the restarted process", n)
	}
	if err := put(second.pvo); err != nil {
		t.Fatalf("put with the new keys: %v", err)
	}
	if n := second.nonZero(t); n != len(data) {
		t.Fatalf("after the restart the target has %d bytes written, want %d", n, len(data))
	}
	s := c.RDMAStats()
	t.Logf("stale writes: %d refused while rejoining, %d abandoned by the restart, %d refused by the key check; RDMA writes %d, redrives %d",
		refused, restarted, keyFails, s.Writes, s.Redrives)
}
