package mpi

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// TestAnswerGorun: a rank set up to answer gorun (pmi.AskEnv) writes, on
// pmi.AskSignal, one line to its stderr naming the call it is blocked in;
// a step of a collective names the collective. Rank 1 asks while rank 0 is
// blocked, then releases it. Rank 1 looks at rank 0's wait only while rank
// 0 is in the call looked for (after left, for the Barrier): a request
// is reused once its call returns, and Waiting may name it until then.
func TestAnswerGorun(t *testing.T) {
	t.Setenv(pmi.AskEnv, "1")
	t.Setenv("WEFT_SHMCOLL", "off") // Barrier by messages, whose steps are Recv and Send
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	stderr := os.Stderr
	os.Stderr = pw // the answer's way to gorun
	defer func() { os.Stderr = stderr; pw.Close() }()
	lines := bufio.NewReader(pr)

	var w0 atomic.Pointer[World]
	left := make(chan struct{}) // rank 0's Recv returned
	// blocked waits until rank 0 is blocked in a call whose description
	// contains want, and returns the description.
	blocked := func(want string) (string, error) {
		for start := time.Now(); ; runtime.Gosched() {
			if w := w0.Load(); w != nil {
				if s := w.waitingCall(); strings.Contains(s, want) {
					return s, nil
				}
			}
			if time.Since(start) > 20*time.Second {
				return "", errors.New("rank 0 not blocked in " + want + " after 20s")
			}
		}
	}
	err = Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			stop := c.w.answerGorun()
			defer stop()
			w0.Store(c.w)
			buf := make([]byte, 8)
			_, err := Recv(c, buf, 1, 7)
			close(left)
			if err != nil {
				return err
			}
			return c.Barrier()
		}
		if _, err := blocked("Recv"); err != nil {
			return err
		}
		if err := syscall.Kill(os.Getpid(), pmi.AskSignal); err != nil {
			return err
		}
		line, err := lines.ReadString('\n')
		if want := pmi.AnswerPrefix + "Recv from rank 1, tag 7, communicator 0\n"; err != nil || line != want {
			t.Errorf("answer %q (%v), want %q", line, err, want)
		}
		if err := Send(c, make([]byte, 8), 0, 7); err != nil {
			return err
		}
		<-left
		what, err := blocked("Barrier")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(what, "Barrier, step ") || !strings.HasSuffix(what, "communicator 0 (collective)") {
			t.Errorf("rank 0 in Barrier is said to wait in %q", what)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}
