package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// exchange is what the MPI bootstrap does: put my address, fence, read
// everyone's. It also checks a long value with bytes PMI servers lose.
func exchange(c Client) error {
	r, n := c.Rank(), c.Size()
	long := strings.Repeat(fmt.Sprintf("rank %d; ", r), 300)
	if err := c.Put("addr-"+strconv.Itoa(r), fmt.Sprintf("tcp://127.0.0.1:%d", 40000+r)); err != nil {
		return err
	}
	if err := c.Put("card-"+strconv.Itoa(r), long); err != nil {
		return err
	}
	if err := c.Fence(); err != nil {
		return err
	}
	for p := range n {
		got, err := c.Get("addr-" + strconv.Itoa(p))
		if err != nil {
			return err
		}
		if want := fmt.Sprintf("tcp://127.0.0.1:%d", 40000+p); got != want {
			return fmt.Errorf("rank %d read addr-%d = %q, want %q", r, p, got, want)
		}
		card, err := c.Get("card-" + strconv.Itoa(p))
		if err != nil {
			return err
		}
		if want := strings.Repeat(fmt.Sprintf("rank %d; ", p), 300); card != want {
			return fmt.Errorf("rank %d read a wrong card of rank %d (%d bytes)", r, p, len(card))
		}
	}
	if _, err := c.Get("no-such-key"); !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("missing key: %v, want ErrNotFound", err)
	}
	return c.Finalize()
}

func TestServerPMI1AndPMI2(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run("pmi"+strconv.Itoa(version), func(t *testing.T) {
			const n = 4
			j := newTestJob(t, n)
			clients := make([]Client, n)
			for r := range n {
				if version == 1 {
					clients[r] = j.pmi1(t, r)
				} else {
					clients[r] = j.pmi2(t, r)
				}
			}
			for r, c := range clients {
				in := c.Info()
				if c.Rank() != r || c.Size() != n || in.JobID != "kvs_test" || in.Node != 0 || len(in.LocalRanks) != n || in.AppNum != 0 {
					t.Errorf("rank %d: Rank %d Size %d Info %+v", r, c.Rank(), c.Size(), in)
				}
			}
			for r, err := range parallel(n, func(r int) error { return exchange(clients[r]) }) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			for _, st := range j.srv.States() {
				if st.Phase != PhaseFinalized || st.Fences != 1 {
					t.Errorf("rank %d state %+v, want finalized after 1 fence", st.Rank, st)
				}
			}
			if err := clients[0].Put("k", "v"); !errors.Is(err, ErrClosed) {
				t.Errorf("Put after Finalize: %v, want ErrClosed", err)
			}
		})
	}
}

// TestServerPortMode: remote ranks reach the server over TCP with PMI_PORT
// and PMI_ID and learn rank and size from initack (PMI-1) or fullinit (PMI-2).
func TestServerPortMode(t *testing.T) {
	const n = 3
	j := newTestJob(t, n)
	addr, err := j.srv.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := parallel(n, func(r int) error {
		env := map[string]string{"PMI_PORT": addr.String(), "PMI_ID": strconv.Itoa(r)}
		if r == 2 {
			env["WEFT_PMI"] = "2"
		}
		c, err := discover(envOf(env), 0)
		if err != nil {
			return err
		}
		if c.Rank() != r || c.Size() != n {
			return fmt.Errorf("PMI_ID=%d got rank %d of %d", r, c.Rank(), c.Size())
		}
		return exchange(c)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// A second connection claiming a taken rank is refused.
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "cmd=initack pmiid=1\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, "rc=-1") {
		t.Errorf("duplicate PMI_ID answered %q, want an rc=-1 reply", line)
	}
	j.waitEvent(t, EventProtocol, -1)
}

// TestFenceWaitsForAll: no rank leaves a fence before every rank entered it.
func TestFenceWaitsForAll(t *testing.T) {
	const n = 4
	j := newTestJob(t, n)
	clients := make([]Client, n)
	for r := range n {
		clients[r] = j.pmi1(t, r)
	}
	done := make([]chan error, n)
	for r := range n - 1 {
		done[r] = make(chan error, 1)
		go func() { done[r] <- clients[r].Fence() }()
	}
	for r := range n - 1 {
		j.waitEvent(t, EventFence, r)
	}
	for r := range n - 1 {
		select {
		case err := <-done[r]:
			t.Fatalf("rank %d left the fence (%v) before rank %d entered it", r, err, n-1)
		default:
		}
	}
	if err := clients[n-1].Fence(); err != nil {
		t.Fatal(err)
	}
	for r := range n - 1 {
		select {
		case err := <-done[r]:
			if err != nil {
				t.Errorf("rank %d fence: %v", r, err)
			}
		case <-time.After(testWait):
			t.Fatalf("rank %d still in the fence after all entered", r)
		}
	}
}

// TestLostRankBreaksFence: a rank that disconnects without finalize is
// reported, and ranks waiting in a fence for it get an error, not a hang.
func TestLostRankBreaksFence(t *testing.T) {
	j := newTestJob(t, 3)
	c0, c1 := j.pmi1(t, 0), j.pmi2(t, 1)
	raw := j.conn(t, 2)
	fmt.Fprint(raw, "cmd=init pmi_version=1 pmi_subversion=1\n")
	j.waitEvent(t, EventInit, 2)
	errs := make(chan error, 2)
	go func() { errs <- c0.Fence() }()
	go func() { errs <- c1.Fence() }()
	j.waitEvent(t, EventFence, 0)
	j.waitEvent(t, EventFence, 1)
	raw.Close()
	e := j.waitEvent(t, EventLost, 2)
	if !strings.Contains(e.Err.Error(), "before finalize") {
		t.Errorf("lost event says %v", e.Err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 2") {
				t.Errorf("fence with a lost rank: %v, want ErrRejected naming rank 2", err)
			}
		case <-time.After(testWait):
			t.Fatal("fence still waiting for a rank that disconnected")
		}
	}
	if st := j.srv.States()[2]; st.Phase != PhaseLost {
		t.Errorf("rank 2 phase %v, want %v", st.Phase, PhaseLost)
	}
}

// TestRankExitedBreaksFence: the launcher's word that a process is gone
// releases a fence even if the connection stays open (inherited by a child).
func TestRankExitedBreaksFence(t *testing.T) {
	j := newTestJob(t, 2)
	c0 := j.pmi1(t, 0)
	_ = j.pmi1(t, 1)
	errc := make(chan error, 1)
	go func() { errc <- c0.Fence() }()
	j.waitEvent(t, EventFence, 0)
	j.srv.RankExited(1)
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "rank 1 exited") {
			t.Errorf("fence: %v, want rank 1 exited", err)
		}
	case <-time.After(testWait):
		t.Fatal("fence still waiting for an exited rank")
	}
	if err := c0.Fence(); err == nil {
		t.Error("a later fence succeeded without rank 1")
	}
}

func TestAbortEvent(t *testing.T) {
	j := newTestJob(t, 2)
	if err := j.pmi1(t, 0).Abort(7, "test abort"); err != nil {
		t.Fatal(err)
	}
	if e := j.waitEvent(t, EventAbort, 0); e.Code != 7 {
		t.Errorf("abort code %d, want 7", e.Code)
	}
	if err := j.pmi2(t, 1).Abort(9, "pmi2 abort; with semicolon"); err != nil {
		t.Fatal(err)
	}
	if e := j.waitEvent(t, EventAbort, 1); e.Code != 9 || !strings.Contains(e.Msg, "pmi2 abort, with semicolon") {
		t.Errorf("abort event %+v", e)
	}
}

// TestAbortDuringFence: Client.Abort works while another goroutine of the
// rank waits in a fence (as under Hydra, which reads every connection all
// the time): the server hears of it at once, and the fence it breaks fails
// for the other ranks, naming the rank.
func TestAbortDuringFence(t *testing.T) {
	for _, proto := range []string{"pmi1", "pmi2"} {
		t.Run(proto, func(t *testing.T) {
			j := newTestJob(t, 2)
			var c0 Client
			if proto == "pmi1" {
				c0 = j.pmi1(t, 0)
			} else {
				c0 = j.pmi2(t, 0)
			}
			c1 := j.pmi1(t, 1) // enters the fence only after the abort
			go c0.Fence()
			j.waitEvent(t, EventFence, 0)
			if err := c0.Abort(7, "fatal error seen by another goroutine"); err != nil {
				t.Fatal(err)
			}
			if e := j.waitEvent(t, EventAbort, 0); e.Code != 7 {
				t.Errorf("abort code %d, want 7", e.Code)
			}
			if err := c1.Fence(); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 0 already aborted") {
				t.Errorf("fence after rank 0 aborted: %v, want ErrRejected naming rank 0", err)
			}
			if st := j.srv.States()[0]; st.Phase != PhaseAborted {
				t.Errorf("rank 0 phase %v, want %v", st.Phase, PhaseAborted)
			}
		})
	}
}

// TestConnectionLostDuringFence: a rank whose connection closes while it
// waits in a fence (its process died) is reported lost at once, not only
// when the fence is over, which may be never: the launcher needs the event
// to end the job.
func TestConnectionLostDuringFence(t *testing.T) {
	j := newTestJob(t, 2)
	conn := j.conn(t, 0)
	c0, err := newPMI1(newWireConn(conn, "test", testWait), 0, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = j.pmi1(t, 1) // never enters the fence
	go c0.Fence()
	j.waitEvent(t, EventFence, 0)
	conn.Close()
	if e := j.waitEvent(t, EventLost, 0); !strings.Contains(e.Err.Error(), "before finalize") {
		t.Errorf("lost event says %v", e.Err)
	}
}

// TestUndecodableValueKeepsClient: a Get whose reply arrived whole and in
// step, but whose value weft's codec did not write (put by another
// program, or cut by a server), fails that Get with ErrBadValue and
// leaves the client usable: a rank that cannot finalize after it is
// treated as failed by Hydra and gorun.
func TestUndecodableValueKeepsClient(t *testing.T) {
	j := newTestJob(t, 1)
	c := j.pmi1(t, 0)
	j.srv.mu.Lock()
	j.srv.kv["foreign"] = "(vector,(0,1,1))"
	j.srv.mu.Unlock()
	if _, err := c.Get("foreign"); !errors.Is(err, ErrBadValue) || errors.Is(err, ErrProtocol) {
		t.Errorf("Get of a value weft did not encode: %v, want ErrBadValue", err)
	}
	if err := c.Put("a", "b"); err != nil {
		t.Errorf("Put after a Get of an undecodable value: %v", err)
	}
	if err := c.Finalize(); err != nil {
		t.Errorf("Finalize after a Get of an undecodable value: %v", err)
	}
}

// TestPredefinedKeyIsCallers: a caller's key equal to one the server
// predefines (PMI_process_mapping) names the caller's own value, never
// the server's, on both protocols; the client still reads the server's
// mapping into Info.
func TestPredefinedKeyIsCallers(t *testing.T) {
	for _, proto := range []string{"pmi1", "pmi2"} {
		t.Run(proto, func(t *testing.T) {
			j := newTestJob(t, 1)
			var c Client
			if proto == "pmi1" {
				c = j.pmi1(t, 0)
			} else {
				c = j.pmi2(t, 0)
			}
			if in := c.Info(); in.Node != 0 || len(in.LocalRanks) != 1 {
				t.Errorf("info %+v, want node 0 from the server's mapping", in)
			}
			if v, err := c.Get("PMI_process_mapping"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get of a predefined key never put: %q, %v; want ErrNotFound", v, err)
			}
			if err := c.Put("PMI_process_mapping", "mine"); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get("PMI_process_mapping"); v != "mine" || err != nil {
				t.Errorf("Get = %q, %v; want the value put", v, err)
			}
		})
	}
}

// TestServerMalformed: garbage gets an error reply and an event, the
// connection stays usable where the stream is still in sync, and nothing
// panics.
func TestServerMalformed(t *testing.T) {
	j := newTestJob(t, 1)
	c := j.conn(t, 0)
	r := bufio.NewReader(c)
	ask := func(line string) string {
		t.Helper()
		fmt.Fprint(c, line)
		_ = c.SetReadDeadline(time.Now().Add(testWait))
		reply, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no reply to %q: %v", line, err)
		}
		return reply
	}
	for _, bad := range []string{"cmd=init junk\n", "cmd=frobnicate\n", "cmd=init pmi_version=7\n", "cmd=put kvsname=kvs_test key=" + strings.Repeat("k", 70) + " value=x\n"} {
		if reply := ask(bad); !strings.Contains(reply, "rc=-1") {
			t.Errorf("%q answered %q, want rc=-1", bad, reply)
		}
		if e := j.waitEvent(t, EventProtocol, 0); e.Err == nil && !strings.Contains(bad, "put") {
			t.Errorf("no cause in protocol event for %q", bad)
		}
	}
	if reply := ask("cmd=get kvsname=kvs_test key=PMI_process_mapping\n"); !strings.Contains(reply, "value=(vector,(0,1,1))") {
		t.Errorf("connection unusable after garbage: %q", reply)
	}
	// A PMI-2 frame with a bad length desynchronises the stream: the
	// server drops the connection and says why.
	fmt.Fprint(c, "zzzzzz")
	if e := j.waitEvent(t, EventProtocol, 0); !errors.Is(e.Err, ErrProtocol) || !strings.Contains(e.Err.Error(), "length") {
		t.Errorf("protocol event cause %v, want ErrProtocol about the length field", e.Err)
	}
}

// TestNonPMIRankBreaksFence: a rank that never speaks PMI (a plain program
// under gorun) closes quietly, but fences cannot wait for it.
func TestNonPMIRankBreaksFence(t *testing.T) {
	j := newTestJob(t, 2)
	c0 := j.pmi1(t, 0)
	j.conn(t, 1).Close()
	if err := c0.Fence(); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("fence: %v, want an error naming rank 1", err)
	}
	if st := j.srv.States()[1]; st.Phase != PhaseConnected {
		t.Errorf("rank 1 phase %v, want %v", st.Phase, PhaseConnected)
	}
	select {
	case e := <-j.events:
		if e.Kind == EventLost {
			t.Errorf("lost event for a rank that never used PMI: %+v", e)
		}
	default:
	}
}

// scriptedServer answers each request line with reply(line), as a foreign
// server would (field order, rc values), for client robustness tests.
func scriptedServer(t *testing.T, reply func(line string) string) net.Conn {
	a, b := socketpair(t)
	go func() {
		r := bufio.NewReader(a)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if out := reply(strings.TrimSuffix(line, "\n")); out != "" {
				if _, err := io.WriteString(a, out); err != nil {
					return
				}
			}
		}
	}()
	return b
}

// TestClientSlurmReplies: Slurm's reply order (rc first) and its rc=1 for a
// missing key (evidence/slurm-pmi1-trace.txt).
func TestClientSlurmReplies(t *testing.T) {
	kv := map[string]string{}
	conn := scriptedServer(t, func(line string) string {
		if len(line)+1 > 1024 {
			// Slurm splits it and answers the rest as a bad request.
			t.Errorf("request line of %d bytes: Slurm takes at most 1024", len(line)+1)
		}
		m, _ := parseLine(line)
		switch m.cmd() {
		case "init":
			return "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
		case "get_maxes":
			return "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"
		case "get_appnum":
			return "cmd=appnum rc=0 appnum=-1\n"
		case "get_my_kvsname":
			return "cmd=my_kvsname rc=0 kvsname=8.0\n"
		case "put":
			kv[m["key"]] = m["value"]
			return "cmd=put_result rc=0\n"
		case "barrier_in":
			return "cmd=barrier_out rc=0\n"
		case "get":
			if m["key"] == "PMI_process_mapping" {
				return "cmd=get_result rc=0 value=(vector,(0,1,3))\n"
			}
			if v, ok := kv[m["key"]]; ok {
				return "cmd=get_result rc=0 value=" + v + "\n"
			}
			return "cmd=get_result rc=1\n"
		case "finalize":
			return "cmd=finalize_ack rc=0\n"
		}
		return "cmd=unknown rc=1\n"
	})
	c, err := newPMI1(newWireConn(conn, "scripted", testWait), 1, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	if in := c.Info(); in.AppNum != -1 || in.JobID != "8.0" || len(in.LocalRanks) != 3 {
		t.Errorf("Info %+v", in)
	}
	long := strings.Repeat("z", 5000)
	if err := c.Put("a", "b c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(strings.Repeat("k", 63), long); err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get("a"); v != "b c" || err != nil {
		t.Errorf("Get = %q, %v", v, err)
	}
	if v, err := c.Get(strings.Repeat("k", 63)); v != long || err != nil {
		t.Errorf("Get of a long value = %d bytes, %v", len(v), err)
	}
	if _, err := c.Get("zz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
	if err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
}

// TestClientBadServer: malformed or wrong replies give clear errors, a
// silent server a timeout naming the request, a vanished one ErrClosed.
func TestClientBadServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		want  error
	}{
		{"garbage", "garbage\n", ErrProtocol},
		{"wrong cmd", "cmd=maxes\n", ErrProtocol},
		{"refused", "cmd=response_to_init rc=-1 msg=no\n", ErrRejected},
		{"silent", "", ErrTimeout},
		{"hangs up", "close", ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := socketpair(t)
			go func() {
				line, _ := bufio.NewReader(a).ReadString('\n')
				_ = line
				if tc.reply == "close" {
					a.Close()
					return
				}
				io.WriteString(a, tc.reply)
			}()
			_, err := newPMI1(newWireConn(b, "PMI_FD=9", 200*time.Millisecond), 0, 1, "")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "PMI_FD=9") {
				t.Errorf("got %v, want %v naming the server", err, tc.want)
			}
		})
	}
}
