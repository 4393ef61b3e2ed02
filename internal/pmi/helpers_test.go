package pmi

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// testWait bounds every wait in the tests: a hang fails the test with a
// cause instead of running into go test's global timeout.
const testWait = 10 * time.Second

// socketpair returns the two ends of a connected UNIX stream socketpair,
// what a launcher hands a rank as PMI_FD.
func socketpair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fileConn(t, fds[0]), fileConn(t, fds[1])
}

func fileConn(t testing.TB, fd int) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "socketpair")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testJob is a Server with its events captured.
type testJob struct {
	srv     *Server
	events  chan Event
	backlog []Event // received but not yet waited for
}

func newTestJob(t testing.TB, size int) *testJob {
	t.Helper()
	j := &testJob{events: make(chan Event, 1024)}
	srv, err := NewServer(ServerConfig{Size: size, KVSName: "kvs_test", OnEvent: func(e Event) { j.events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	j.srv = srv
	t.Cleanup(func() { srv.Close() })
	return j
}

// conn connects rank to the server over a socketpair, as gorun does, and
// returns the rank's end.
func (j *testJob) conn(t testing.TB, rank int) net.Conn {
	t.Helper()
	a, b := socketpair(t)
	go j.srv.Serve(rank, a)
	return b
}

func (j *testJob) pmi1(t testing.TB, rank int) Client {
	t.Helper()
	c, err := newPMI1(newWireConn(j.conn(t, rank), "test", testWait), rank, j.srv.cfg.Size, "")
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	return c
}

func (j *testJob) pmi2(t testing.TB, rank int) Client {
	t.Helper()
	c, err := newPMI2(newWireConn(j.conn(t, rank), "test", testWait), strconv.Itoa(rank), "")
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	return c
}

// waitEvent returns the first event of kind for rank, keeping others for
// later waits.
func (j *testJob) waitEvent(t testing.TB, kind EventKind, rank int) Event {
	t.Helper()
	for i, e := range j.backlog {
		if e.Kind == kind && e.Rank == rank {
			j.backlog = append(j.backlog[:i], j.backlog[i+1:]...)
			return e
		}
	}
	deadline := time.After(testWait)
	for {
		select {
		case e := <-j.events:
			if e.Kind == kind && e.Rank == rank {
				return e
			}
			j.backlog = append(j.backlog, e)
		case <-deadline:
			t.Fatalf("no %v event for rank %d within %v", kind, rank, testWait)
		}
	}
}

// envOf turns a map into a getenv function.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// parallel runs f for ranks 0..n-1 concurrently and returns their errors.
func parallel(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	done := make(chan struct{})
	for r := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[r] = f(r)
		}()
	}
	for range n {
		<-done
	}
	return errs
}
