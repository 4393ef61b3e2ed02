package pmi

import (
	"bufio"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want msg
	}{
		// Hydra puts rc last, Slurm first: both must parse the same.
		{"cmd=get_result rc=0 msg=success value=tcp://127.0.0.1:40000", msg{"cmd": "get_result", "rc": "0", "msg": "success", "value": "tcp://127.0.0.1:40000"}},
		{"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1", msg{"cmd": "response_to_init", "rc": "0", "pmi_version": "1", "pmi_subversion": "1"}},
		{"cmd=get_result rc=0 msg=success value=a=b", msg{"cmd": "get_result", "rc": "0", "msg": "success", "value": "a=b"}},
		{"cmd=barrier_out\r", msg{"cmd": "barrier_out"}},
		{"mcmd=spawn", msg{"mcmd": "spawn"}},
		{"cmd=put kvsname=k key=x value=", msg{"cmd": "put", "kvsname": "k", "key": "x", "value": ""}},
	} {
		got, err := parseLine(tc.line)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("parseLine(%q) = %v, %v; want %v", tc.line, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "   ", "garbage", "cmd=x novalue", "=x cmd=y", "rc=0 msg=ok", "cmd=a cmd=b"} {
		if m, err := parseLine(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseLine(%q) = %v, %v; want ErrProtocol", bad, m, err)
		}
	}
}

func TestParseFrame(t *testing.T) {
	got, err := parseFrame("cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;")
	want := msg{"cmd": "kvs-get-response", "rc": "0", "found": "TRUE", "value": "a;b"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("parseFrame = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", ";", "found=TRUE;", "cmd=x;junk;", "cmd=x;cmd=y;"} {
		if _, err := parseFrame(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseFrame(%q): %v, want ErrProtocol", bad, err)
		}
	}
}

func TestFormatFrameMatchesTrace(t *testing.T) {
	// evidence/slurm-pmi2-trace.txt: '51    cmd=fullinit;pmijobid=7.0;pmirank=0;threaded=FALSE;'
	got := formatFrame("fullinit", "pmijobid", "7.0", "pmirank", "0", "threaded", "FALSE")
	if want := "51    cmd=fullinit;pmijobid=7.0;pmirank=0;threaded=FALSE;"; got != want {
		t.Errorf("formatFrame = %q, want %q", got, want)
	}
	r := bufio.NewReader(strings.NewReader(got))
	body, err := readFrame(r)
	if err != nil || body != got[6:] {
		t.Errorf("readFrame = %q, %v", body, err)
	}
}

func TestReadLimits(t *testing.T) {
	long := strings.Repeat("x", maxLine+10) + "\n"
	if _, err := readLine(bufio.NewReader(strings.NewReader(long))); !errors.Is(err, ErrProtocol) {
		t.Errorf("over-long line: %v, want ErrProtocol", err)
	}
	if _, err := readLine(bufio.NewReader(strings.NewReader("cmd=x"))); !errors.Is(err, ErrProtocol) {
		t.Errorf("line cut by EOF: %v, want ErrProtocol", err)
	}
	for _, bad := range []string{"abcdef", "99999999", "-1    x", "0     ", "12    short"} {
		if _, err := readFrame(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("readFrame(%q) succeeded", bad)
		}
	}
}

// FuzzParseLine: no input panics, and whatever parses survives a format and
// parse round trip unchanged.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"cmd=init pmi_version=1 pmi_subversion=1",
		"cmd=get_result rc=-1 msg=key_no-such-key_not_found value=unknown",
		"cmd=set size=4", "mcmd=spawn", "cmd= =", "cmd=a b=c=d", "\x00cmd=\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := parseLine(line)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if strings.ContainsAny(line, "\n") {
			return // a line never contains its terminator
		}
		var kv []string
		for k, v := range m {
			if k != "cmd" {
				kv = append(kv, k, v)
			}
		}
		if m["cmd"] == "" {
			return // mcmd form
		}
		again, err := parseLine(strings.TrimSuffix(formatLine(m["cmd"], kv...), "\n"))
		if err != nil || !maps.Equal(again, m) {
			t.Fatalf("round trip of %q: %v, %v; want %v", line, again, err, m)
		}
	})
}

// FuzzReadFrame: arbitrary bytes on a PMI-2 connection never panic.
func FuzzReadFrame(f *testing.F) {
	f.Add("14    cmd=kvs-fence;")
	f.Add("5     cmd=x")
	f.Add("2     ;;")
	f.Fuzz(func(t *testing.T, data string) {
		r := bufio.NewReader(strings.NewReader(data))
		for {
			body, err := readFrame(r)
			if err != nil {
				return
			}
			if _, err := parseFrame(body); err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
		}
	})
}

// TestOutOfStepAfterTimeout: a Get that timed out leaves its reply in
// flight, and neither PMI-1's get_result nor PMI-2's kvs-get-response names
// its key; the next Get must fail, wrapping the first failure, never take
// the stale reply (a's value) as b's.
func TestOutOfStepAfterTimeout(t *testing.T) {
	for _, tc := range []struct {
		kind           string
		proto          func(w *wireConn) proto
		read           func(r *bufio.Reader)
		replyA, replyB string
	}{
		{"pmi1", func(w *wireConn) proto { return &pmi1{w: w, kvs: "kvs_test"} },
			func(r *bufio.Reader) { r.ReadString('\n') },
			"cmd=get_result rc=0 msg=success value=rvalue-of-a\n",
			"cmd=get_result rc=0 msg=success value=rvalue-of-b\n"},
		{"pmi2", func(w *wireConn) proto { return &pmi2{w: w, jobid: "1"} },
			func(r *bufio.Reader) { readFrame(r) },
			formatFrame("kvs-get-response", "rc", "0", "found", "TRUE", "value", "rvalue-of-a"),
			formatFrame("kvs-get-response", "rc", "0", "found", "TRUE", "value", "rvalue-of-b")},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			mine, theirs := socketpair(t)
			timedOut := make(chan struct{})
			go func() {
				r := bufio.NewReader(theirs)
				tc.read(r) // get a
				<-timedOut
				theirs.Write([]byte(tc.replyA))
				tc.read(r) // get b, if the client sends it
				theirs.Write([]byte(tc.replyB))
			}()
			c := &client{p: tc.proto(newWireConn(mine, "test", 200*time.Millisecond)), kind: tc.kind, rank: 0, size: 2}
			if _, err := c.Get("a"); !errors.Is(err, ErrTimeout) {
				t.Fatalf("Get(a) = %v, want ErrTimeout", err)
			}
			close(timedOut)
			v, err := c.Get("b")
			if err == nil {
				t.Fatalf("Get(b) = %q, nil after Get(a) timed out: want an error naming that failure", v)
			}
			if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "get") {
				t.Errorf("Get(b) = %v; want the first failure (ErrTimeout) wrapped", err)
			}
			if err := c.Fence(); !errors.Is(err, ErrTimeout) {
				t.Errorf("Fence after the timeout = %v; want ErrTimeout wrapped", err)
			}
		})
	}
}
