package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/trace"
)

// lockedBuf is a trace writer the ranks' goroutines share.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMark: at level 1 each rank's World.Mark writes one line naming the
// rank, with the stamp, the user's text and the wall clock; at level 0 it
// writes nothing. (The prefix's rank is the process's, "?" unless an
// earlier test's Init named it.)
func TestMark(t *testing.T) {
	for _, l := range []trace.Level{trace.Error, trace.Rare} {
		var buf lockedBuf
		restore := trace.Redirect(&buf, l)
		err := Run(2, func(c *Comm) error {
			if err := c.Barrier(); err != nil {
				return err
			}
			c.World().Mark("phase %d of %s", 2, "solve")
			return nil
		})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		marks := regexp.MustCompile(`(?m)^weft\[(?:\?|\d+)\] \d+\.\d{6} mark (\d): phase 2 of solve \(wall \d\d:\d\d:\d\d\.\d{6}\)$`).FindAllStringSubmatch(buf.String(), -1)
		if l < trace.Rare {
			if len(marks) != 0 || strings.Contains(buf.String(), "mark") {
				t.Errorf("level 0: marks written:\n%s", &buf)
			}
			continue
		}
		if len(marks) != 2 || marks[0][1] == marks[1][1] {
			t.Errorf("level 1: want one mark from each of ranks 0 and 1, got %q in:\n%s", marks, &buf)
		}
	}
}

// TestStatsLines: after rank 0 sends 10 messages of 20000 bytes to rank 1,
// each rank's counter lines are one for lapi and one for its device, whose
// fields are the values World.Stats gives; the device carried at least the
// bytes sent, and named its peer.
func TestStatsLines(t *testing.T) {
	const n, size = 10, 20000
	var mu sync.Mutex
	lines := map[int][]string{}
	stats := map[int]Stats{}
	err := Run(2, func(c *Comm) error {
		buf := make([]byte, size)
		for range n {
			var err error
			if c.Rank() == 0 {
				err = Send(c, buf, 1, 3)
			} else {
				_, err = Recv(c, buf, 0, 3)
			}
			if err != nil {
				return err
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		s := c.World().Stats()
		mu.Lock()
		defer mu.Unlock()
		stats[c.Rank()], lines[c.Rank()] = s, statsLines(c.Rank(), s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		ls, s := lines[r], stats[r]
		if len(ls) != 3 {
			t.Fatalf("rank %d: %d lines, want lapi, lapi toward the peer, and inproc: %q", r, len(ls), ls)
		}
		lapi, peer, dev := fields(t, ls[0]), fields(t, ls[1]), fields(t, ls[2])
		ps := s.Peers[1-r]
		want := map[string]string{"rank": strconv.Itoa(r), "layer": "lapi>" + strconv.Itoa(1-r),
			"messages_sent": u(ps.MessagesSent), "messages_recv": u(ps.MessagesIn),
			"packets_sent": u(ps.PacketsSent), "packets_recv": u(ps.PacketsRecv), "bytes_sent": u(ps.BytesSent),
			"retransmits": "0", "redrives": "0", "singlecopy_bytes": u(ps.SingleCopyBytes), "drops": "-"}
		if !equalFields(peer, want) || ps.MessagesSent != s.MessagesSent || ps.PacketsRecv != s.PacketsRecv {
			t.Errorf("rank %d: peer line %q, want the fields %v, and all the rank's traffic (%+v)", r, ls[1], want, s)
		}
		want = map[string]string{"rank": strconv.Itoa(r), "layer": "lapi",
			"messages_sent": u(s.MessagesSent), "messages_recv": u(s.MessagesIn),
			"packets_sent": u(s.PacketsSent), "packets_recv": u(s.PacketsRecv),
			"retransmits": "0", "redrives": "0", "singlecopy_bytes": u(s.SingleCopyBytes), "drops": "-"}
		if !equalFields(lapi, want) {
			t.Errorf("rank %d: lapi line %q, want the fields %v", r, ls[0], want)
		}
		d := s.Devices[0]
		want = map[string]string{"rank": strconv.Itoa(r), "layer": "inproc", "peers": strconv.Itoa(1 - r),
			"frames_sent": u(d.FramesSent), "frames_recv": u(d.FramesRecv),
			"bytes_sent": u(d.BytesSent), "bytes_recv": u(d.BytesRecv), "drops": "-"}
		if !equalFields(dev, want) {
			t.Errorf("rank %d: device line %q, want the fields %v", r, ls[2], want)
		}
	}
	// Between goroutines a message from 16 KiB is one copy, not frames.
	if s := stats[1]; s.Devices[0].BytesRecv+s.SingleCopyBytes+stats[0].SingleCopyBytes < n*size {
		t.Errorf("rank 1 received %d bytes through its device and ranks copied %d+%d; rank 0 sent %d",
			s.Devices[0].BytesRecv, stats[0].SingleCopyBytes, s.SingleCopyBytes, n*size)
	}
	if got := dropList(map[string]uint64{"peer": 2, "crc": 1, "queue-full": 0}); got != "crc:1,peer:2" {
		t.Errorf("dropList = %q, want crc:1,peer:2", got)
	}
}

// TestStatsAtFinalize: with Options.Stats, Finalize's hook writes the
// rank's lines, each starting pmi.StatsPrefix, to standard error; without
// it, nothing.
func TestStatsAtFinalize(t *testing.T) {
	for _, on := range []bool{false, true} {
		var out string
		err := Run(1, func(c *Comm) error {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			stderr := os.Stderr
			os.Stderr = w
			err = c.World().statsAtFinalize(on)()
			os.Stderr = stderr
			w.Close()
			var b bytes.Buffer
			b.ReadFrom(r)
			r.Close()
			out = b.String()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(pmi.StatsPrefix) + `rank=0 layer=lapi messages_sent=\d+ .*\n` +
			regexp.QuoteMeta(pmi.StatsPrefix) + `rank=0 layer=inproc peers=- frames_sent=\d+ .*\n$`)
		if on != re.MatchString(out) || !on && out != "" {
			t.Errorf("Stats %v: wrote %q", on, out)
		}
	}
}

// fields parses a counter line's NAME=VALUE fields.
func fields(t *testing.T, line string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("field %q of %q is not NAME=VALUE", f, line)
		}
		m[k] = v
	}
	return m
}

func equalFields(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

// TestTraceCollective: at level 3 each rank writes a collective's begin and
// end, numbered alike on every rank, and the end says the error of one that
// failed; at level 2 neither is written.
func TestTraceCollective(t *testing.T) {
	for _, l := range []trace.Level{trace.Setup, trace.Internal} {
		var buf lockedBuf
		restore := trace.Redirect(&buf, l)
		err := Run(2, func(c *Comm) error {
			if err := c.Barrier(); err != nil {
				return err
			}
			x := []float64{1, 2, 3}
			if err := Allreduce(c, x, x, Sum); err != nil {
				return err
			}
			if err := Bcast(c, x, 5); err == nil {
				return errors.New("Bcast from root 5 of 2 ranks succeeded")
			}
			return nil
		})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if l < trace.Internal {
			if strings.Contains(out, " begins on ") {
				t.Errorf("level 2: collectives traced:\n%s", out)
			}
			continue
		}
		for r := range 2 {
			for _, re := range []string{
				`mpi %d: barrier #(\d+) begins on communicator \d+ \(2 ranks\): 0 bytes per rank, root 0`,
				`mpi %d: barrier #(\d+) ends after [0-9.]+[nµm]?s: ok`,
				`mpi %d: allreduce #(\d+) begins on communicator \d+ \(2 ranks\): 24 bytes per rank, root 0`,
				`mpi %d: allreduce #(\d+) ends after [0-9.]+[nµm]?s: ok`,
				`mpi %d: bcast #(\d+) begins on communicator \d+ \(2 ranks\): 24 bytes per rank, root 5`,
				`mpi %d: bcast #(\d+) ends after [0-9.]+[nµm]?s: mpi: bcast: .*root 5 in a communicator of 2: `,
			} {
				full := regexp.MustCompile(`(?m)^weft\[(?:\?|\d+)\] \d+\.\d{6} ` + fmt.Sprintf(re, r))
				if !full.MatchString(out) {
					t.Errorf("rank %d: no line matching %s in:\n%s", r, full, out)
				}
			}
		}
		// The same collective has the same number on both ranks.
		nums := regexp.MustCompile(`(?m)mpi (\d): allreduce #(\d+) begins`).FindAllStringSubmatch(out, -1)
		if len(nums) != 2 || nums[0][2] != nums[1][2] {
			t.Errorf("allreduce numbered %q on the two ranks", nums)
		}
	}
}

// TestTraceMatching: at level 4 rank 1 traces a receive posted before its
// message, that message matching it, a message that came before its
// receive queued as unexpected, and the receive that took it; at level 3
// none of them.
func TestTraceMatching(t *testing.T) {
	for _, l := range []trace.Level{trace.Internal, trace.Hot} {
		var buf lockedBuf
		restore := trace.Redirect(&buf, l)
		err := Run(2, func(c *Comm) error {
			x := []uint64{7}
			if c.Rank() == 0 {
				// Tag 1 once rank 1 says its receive is posted; tag 2
				// before rank 1 receives it, tag 3 after it.
				if _, err := Recv(c, x, 1, 9); err != nil {
					return err
				}
				for _, tag := range []int{1, 2, 3} {
					if err := Send(c, x, 1, tag); err != nil {
						return err
					}
				}
				return nil
			}
			q, err := Irecv(c, x, 0, 1)
			if err != nil {
				return err
			}
			if err := Send(c, x, 0, 9); err != nil {
				return err
			}
			if _, err := q.Wait(); err != nil {
				return err
			}
			// Tag 3 arrives after tag 2, which then waits as unexpected.
			if _, err := Recv(c, x, 0, 3); err != nil {
				return err
			}
			_, err = Recv(c, x, 0, 2)
			return err
		})
		restore()
		if err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		want := []string{
			`mpi 1: receive \(context \d+, source 0, tag 1\) posted: no message for it yet`,
			`mpi 1: message \d+ from rank 0 \(context \d+, source 0, tag 1, 8 bytes\) matched a posted receive`,
			`mpi 1: message (\d+) from rank 0 \(context \d+, source 0, tag 2, 8 bytes\) queued as unexpected: no receive posted for it`,
			`mpi 1: receive \(context \d+, source 0, tag 2\) took the unexpected message \d+ from rank 0`,
		}
		for _, re := range want {
			found := regexp.MustCompile(`(?m)^weft\[(?:\?|\d+)\] \d+\.\d{6} ` + re + `$`).MatchString(out)
			if found != (l >= trace.Hot) {
				t.Errorf("level %d: line matching %s written %v, want %v; trace:\n%s", l, re, found, l >= trace.Hot, out)
			}
		}
	}
}
