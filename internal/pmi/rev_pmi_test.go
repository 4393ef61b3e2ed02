package pmi

import (
	"bufio"
	"errors"
	"testing"
	"time"
)

// A PMI-1 Get that timed out leaves its reply in flight; the next Get
// must not take that stale reply as its own answer (get_result does not
// name the key). It should fail (the connection is out of step) or get b's
// value, never a's.
func TestRevStaleReplyAfterTimeout(t *testing.T) {
	mine, theirs := socketpair(t)
	timedOut := make(chan struct{})
	go func() {
		r := bufio.NewReader(theirs)
		r.ReadString('\n') // get key=a
		<-timedOut
		theirs.Write([]byte("cmd=get_result rc=0 msg=success value=rvalue-of-a\n"))
		r.ReadString('\n') // get key=b
		theirs.Write([]byte("cmd=get_result rc=0 msg=success value=rvalue-of-b\n"))
	}()
	p := &pmi1{w: newWireConn(mine, "test", 200*time.Millisecond), kvs: "kvs_test"}
	c := &client{p: p, kind: "pmi1", rank: 0, size: 2}
	if _, err := c.Get("a"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Get(a) = %v, want ErrTimeout", err)
	}
	close(timedOut)
	v, err := c.Get("b")
	if err == nil && v != "value-of-b" {
		t.Fatalf("Get(b) = %q, nil: the stale reply to Get(a) was taken as b's value", v)
	}
}
