package launch

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Striping over NICs (gorun --nics, WEFT_NICS, mpi.Options.NICs): gorun
// hands each rank its host's list, Init opens one UDP device per NIC under
// a stripe. The tests on one host stripe over two loopback addresses; those
// across the namespace hosts (netnsHosts) over eth0 and eth1, with the
// interfaces' byte counters to show which NIC carried what.

// pingcheck builds testdata/pingcheck once (TestMain builds the programs
// every test uses; this one only these).
var pingcheck = sync.OnceValues(func() (string, error) {
	out := filepath.Join(bins.dir, "pingcheck")
	b, err := exec.Command("go", "build", "-o", out, "./testdata/pingcheck").CombinedOutput()
	if err != nil {
		return "", &buildError{err, string(b)}
	}
	return out, nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "building testdata/pingcheck: " + e.err.Error() + "\n" + e.out
}

func pingcheckBin(t *testing.T) string {
	t.Helper()
	p, err := pingcheck()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// memberLine is what a rank's stripe says of each member at trace level 2
// when it finalizes (mpi's traceStripe, stripe.MemberStats.String).
var memberLine = regexp.MustCompile(`mpi: rank (\d+) stripe member (\d+) (\S+) (in|out\(\S+\)): sent=(\d+)/(\d+)B recv=(\d+)/(\d+)B .* outs=(\d+) ins=(\d+)`)

// memberStats is one member's line, parsed.
type memberStats struct {
	addr, state          string
	sentBytes, recvBytes int
	outs, ins            int
}

// stripeMembers parses the member lines of a job's trace: per rank, its
// members in order.
func stripeMembers(stderr string) map[int][]memberStats {
	out := map[int][]memberStats{}
	for _, m := range memberLine.FindAllStringSubmatch(stderr, -1) {
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		r, i := n(1), n(2)
		for len(out[r]) <= i {
			out[r] = append(out[r], memberStats{})
		}
		out[r][i] = memberStats{addr: m[3], state: m[4], sentBytes: n(6), recvBytes: n(8), outs: n(9), ins: n(10)}
	}
	return out
}

// TestNICsLocal: on one host, --nics reaches every rank as WEFT_NICS
// (HOST=LIST overriding the list for every host); a job striped over two
// loopback addresses gives exact results with both members carrying half
// the data; a NIC that does not exist fails Init naming it.
func TestNICsLocal(t *testing.T) {
	r := gorun(t, "-n", "2", "--nics", "lo,127.0.0.1", bins.pmiprog, "-env", "WEFT_NICS")
	checkJob(t, r, 2)
	for _, want := range []string{"rank 0 env WEFT_NICS=lo,127.0.0.1\n", "rank 1 env WEFT_NICS=lo,127.0.0.1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output does not say %q:\n%s", want, r.stdout)
		}
	}
	r = gorun(t, "-n", "2", "-H", "localhost:2", "--nics", "eth9", "--nics", "localhost=lo", bins.pmiprog, "-env", "WEFT_NICS")
	checkJob(t, r, 2)
	if !strings.Contains(r.stdout, "rank 1 env WEFT_NICS=lo\n") {
		t.Errorf("--nics localhost=lo did not override --nics eth9:\n%s", r.stdout)
	}

	r = gorun(t, "-n", "2", "--transport", "udp", "--nics", "lo,127.0.0.1", "--trace", "2", "-x", "WEFT_TIMEOUT=30s",
		pingcheckBin(t), "-n", "4", "-size", "4194304")
	if r.code != 0 || !strings.Contains(r.stdout, "pingcheck ok: 4 round trips of 4194304 bytes") {
		t.Fatalf("pingcheck over two loopback NICs: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for rank, ms := range stripeMembers(r.stderr) {
		if len(ms) != 2 {
			t.Errorf("rank %d: %d stripe members, want 2", rank, len(ms))
			continue
		}
		for i, m := range ms {
			if m.sentBytes < 4*4194304/4 || m.state != "in" {
				t.Errorf("rank %d member %d (%s) %s sent %d bytes: want in, and at least a quarter of the 16 MiB sent", rank, i, m.addr, m.state, m.sentBytes)
			}
		}
	}
	if len(stripeMembers(r.stderr)) != 2 {
		t.Errorf("no stripe member lines from both ranks:\n%s", r.stderr)
	}

	r = gorun(t, "-n", "2", "--transport", "udp", "--nics", "lo,nosuchnic9", bins.pi)
	if r.code == 0 || !strings.Contains(r.stderr, `NIC "nosuchnic9" (WEFT_NICS): no interface of that name`) {
		t.Errorf("a NIC that does not exist: status %d, want a failure naming it\n%s", r.code, r.stderr)
	}
}

// nicCounter reads one byte counter of a namespace host's interface
// (/sys/class/net/NIC/statistics/{tx,rx}_bytes inside its namespace).
func nicCounter(t *testing.T, host, nic, dir string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", host, "cat", "/sys/class/net/"+nic+"/statistics/"+dir+"_bytes").Output()
	if err != nil {
		t.Fatalf("%s's %s %s bytes: %v", host, nic, dir, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s's %s %s bytes: %q", host, nic, dir, out)
	}
	return n
}

// nicTraffic is the bytes each NIC of each host sent and received: by
// "host/nic".
type nicTraffic map[string]int

func readTraffic(t *testing.T) nicTraffic {
	t.Helper()
	out := nicTraffic{}
	for _, h := range []string{"host1", "host2"} {
		for _, nic := range []string{"eth0", "eth1"} {
			out[h+"/"+nic] = nicCounter(t, h, nic, "tx") + nicCounter(t, h, nic, "rx")
		}
	}
	return out
}

// since is what each NIC carried between before and t.
func (t nicTraffic) since(before nicTraffic) nicTraffic {
	out := nicTraffic{}
	for k, v := range t {
		out[k] = v - before[k]
	}
	return out
}

// netnsNICs is the namespace hosts with both NICs up (a test before may
// have left one down), and gorun's arguments for a job of one rank on
// each, striped over eth0 and eth1.
func netnsNICs(t *testing.T) []string {
	t.Helper()
	rsh := netnsHosts(t)
	for _, h := range []string{"host1", "host2"} {
		if _, err := exec.Command("ip", "netns", "exec", h, "test", "-e", "/sys/class/net/eth1").CombinedOutput(); err != nil {
			t.Skipf("%s has no eth1: the test hosts were brought up with one NIC (NICS=1); take them down (shared/launchers/netns-hosts/down.sh)", h)
		}
		setLink(t, h, "eth1", "up")
	}
	return []string{"-n", "2", "-H", "host1,host2", "--rsh", rsh, "--nics", "eth0,eth1"}
}

// setLink sets a namespace host's interface up or down.
func setLink(t *testing.T, host, nic, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", host, "link", "set", nic, state).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s link set %s %s: %v\n%s", host, nic, state, err, out)
	}
}

// TestMultiHostNetnsNICs: one rank on each namespace host, striped over
// eth0 and eth1 (gorun --nics eth0,eth1): every collective and
// point-to-point size class, and 16 MiB messages back and forth, are
// exact, and both NICs of both hosts carry a share of the data (the
// interfaces' counters, and each stripe member's at trace level 2).
func TestMultiHostNetnsNICs(t *testing.T) {
	hosts := netnsNICs(t)
	r := command(t, "", nil, bins.gorun, append(hosts, "-x", "WEFT_TIMEOUT=60s",
		bins.collcheck, "-rounds", "20", "-p2p", "1", "-large", "2")...)
	if r.code != 0 || !strings.Contains(r.stdout, "collcheck ok: 20 rounds on 2 ranks") {
		t.Fatalf("collcheck over two NICs: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	const rounds, size = 8, 16 << 20
	before := readTraffic(t)
	r = command(t, "", nil, bins.gorun, append(hosts, "--trace", "2", "-x", "WEFT_TIMEOUT=60s",
		pingcheckBin(t), "-n", strconv.Itoa(rounds), "-size", strconv.Itoa(size))...)
	if r.code != 0 || !strings.Contains(r.stdout, "pingcheck ok: 8 round trips of 16777216 bytes") {
		t.Fatalf("pingcheck over two NICs: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	carried := readTraffic(t).since(before)
	t.Logf("bytes carried (tx+rx) by the hosts' NICs: %v", carried)
	// Each host sends and receives 8 × 16 MiB: a fair share is half of
	// that 2 × 128 MiB per NIC; want at least a quarter.
	for k, v := range carried {
		if v < 2*rounds*size/4 {
			t.Errorf("%s carried %d bytes, want at least %d (a quarter of the job's data)", k, v, 2*rounds*size/4)
		}
	}
	members := stripeMembers(r.stderr)
	for rank := range 2 {
		ms := members[rank]
		if len(ms) != 2 {
			t.Errorf("rank %d: %d stripe members in the trace, want 2:\n%s", rank, len(ms), r.stderr)
			continue
		}
		for i, m := range ms {
			if m.state != "in" || m.sentBytes < rounds*size/4 {
				t.Errorf("rank %d member %d (%s): %s, sent %d bytes; want in, at least %d", rank, i, m.addr, m.state, m.sentBytes, rounds*size/4)
			}
		}
		if !strings.HasPrefix(ms[0].addr, "udp:10.98.0.") || !strings.HasPrefix(ms[1].addr, "udp:10.98.1.") {
			t.Errorf("rank %d's members are %s and %s, want eth0's and eth1's addresses", rank, ms[0].addr, ms[1].addr)
		}
	}
	assertNoRankLeft(t)
}

// TestMultiHostNetnsNICDown: 16 MiB messages go back and forth, each
// checked, for 14 s while host2's eth1 goes down for 3 s and comes back
// (ip link set inside its namespace): every message is exact, the stripe
// took eth1 out and re-admitted it (its members' outs and ins at trace
// level 2), and eth1 carries traffic again after it came back (its
// counters). The test logs what the failure cost (the longest round trip
// against the usual one) and how soon eth1 carried data again.
func TestMultiHostNetnsNICDown(t *testing.T) {
	hosts := netnsNICs(t)
	t.Cleanup(func() { exec.Command("ip", "-n", "host2", "link", "set", "eth1", "up").Run() })
	ctx, cancel := context.WithTimeout(context.Background(), jobWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.gorun, append(hosts, "--trace", "2", "-x", "WEFT_TIMEOUT=50s",
		pingcheckBin(t), "-for", "14s", "-v")...)
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Wait for the transfer to run (the job starts over ssh), then cut.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "round 3 ") {
		if time.Now().After(deadline) {
			t.Fatalf("no round trip after 20 s:\n%s\n%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	down := time.Now()
	setLink(t, "host2", "eth1", "down")
	time.Sleep(3 * time.Second)
	setLink(t, "host2", "eth1", "up")
	up := time.Now()
	// Sample eth1's counter until it carries data again: 1 MiB in 50 ms.
	var back time.Duration = -1
	last := nicCounter(t, "host2", "eth1", "tx")
	for time.Since(up) < 5*time.Second {
		time.Sleep(50 * time.Millisecond)
		n := nicCounter(t, "host2", "eth1", "tx")
		if n-last >= 1<<20 {
			back = time.Since(up)
			break
		}
		last = n
	}
	afterUp := readTraffic(t)
	err := <-done
	if ctx.Err() != nil || err != nil || !strings.Contains(out.String(), "pingcheck ok: ") {
		t.Fatalf("pingcheck with eth1 down for 3 s: %v\n%s\n%s", err, out.String(), errb.String())
	}
	carried := readTraffic(t).since(afterUp)
	if back < 0 {
		t.Errorf("host2's eth1 carried no MiB in any 50 ms in the 5 s after it came up")
	}
	if carried["host2/eth1"] < 16<<20 {
		t.Errorf("host2's eth1 carried %d bytes after it came up (and 5 s of sampling), want at least 16 MiB", carried["host2/eth1"])
	}
	for rank, ms := range stripeMembers(errb.String()) {
		if len(ms) != 2 || ms[1].outs < 1 || ms[1].ins < 1 || ms[1].state != "in" {
			t.Errorf("rank %d's members %+v: want eth1's taken out and re-admitted, in at the end", rank, ms)
		}
	}

	// What the failure cost: round trips by when they ended.
	var usual, worst time.Duration
	var durs []time.Duration
	for _, m := range roundLine.FindAllStringSubmatch(out.String(), -1) {
		end, _ := strconv.ParseInt(m[1], 10, 64)
		d, _ := time.ParseDuration(m[2])
		if time.Unix(0, end).Before(down) {
			durs = append(durs, d)
		}
		if e := time.Unix(0, end); e.After(down) && e.Add(-d).Before(down.Add(time.Second)) {
			worst = max(worst, d)
		}
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		usual = durs[len(durs)/2]
	}
	t.Logf("round trip of 2 × 16 MiB: %v usually before the cut, %v at worst across it (the cut's cost); eth1 carried a MiB in 50 ms again %v after it came up; eth1 carried %d bytes after", usual, worst, back, carried["host2/eth1"])
	t.Logf("%s", strings.Join(memberLine.FindAllString(errb.String(), -1), "\n"))
	assertNoRankLeft(t)
}

// roundLine is pingcheck -v's line per round trip.
var roundLine = regexp.MustCompile(`(?m)^round \d+ end (\d+) took (\S+)$`)

// TestMultiHostNetnsNICLoss: with nftables dropping 5% of what arrives on
// eth1 only, on both hosts, a job striped over eth0 and eth1 gives exact
// collectives, point-to-point messages and 16 MiB transfers (lapi's
// retransmission recovers what eth1 loses; 5% is not silence, so the
// stripe keeps eth1 in).
func TestMultiHostNetnsNICLoss(t *testing.T) {
	hosts := netnsNICs(t)
	needTool(t, "nft", "nftables")
	for _, host := range []string{"host1", "host2"} {
		rules := `table ip weft_nics_test {
	chain in { type filter hook input priority 0; iifname "eth1" udp dport != 22 numgen random mod 100 < 5 counter drop; }
}`
		cmd := exec.Command("ip", "netns", "exec", host, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("nftables in %s: %v\n%s (install nftables)", host, err, out)
		}
		t.Cleanup(func() {
			exec.Command("ip", "netns", "exec", host, "nft", "delete", "table", "ip", "weft_nics_test").Run()
		})
	}
	r := command(t, "", nil, bins.gorun, append(hosts, "-x", "WEFT_TIMEOUT=50s",
		bins.collcheck, "-rounds", "20", "-p2p", "1", "-large", "2")...)
	if r.code != 0 || !strings.Contains(r.stdout, "collcheck ok: 20 rounds on 2 ranks") {
		t.Fatalf("collcheck with 5%% loss on eth1: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = command(t, "", nil, bins.gorun, append(hosts, "--trace", "2", "-x", "WEFT_TIMEOUT=50s",
		pingcheckBin(t), "-n", "4", "-v")...)
	if r.code != 0 || !strings.Contains(r.stdout, "pingcheck ok: 4 round trips of 16777216 bytes") {
		t.Fatalf("pingcheck with 5%% loss on eth1: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	dropped := 0
	packets := regexp.MustCompile(`counter packets (\d+)`)
	for _, host := range []string{"host1", "host2"} {
		out, _ := exec.Command("ip", "netns", "exec", host, "nft", "list", "table", "ip", "weft_nics_test").Output()
		if m := packets.FindSubmatch(out); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			dropped += n
		}
	}
	if dropped == 0 {
		t.Errorf("nftables dropped nothing on eth1: no fault injected")
	}
	t.Logf("nftables dropped %d packets on eth1; round trips:\n%s\n%s", dropped,
		strings.Join(roundLine.FindAllString(r.stdout, -1), "\n"), strings.Join(memberLine.FindAllString(r.stderr, -1), "\n"))
	assertNoRankLeft(t)
}
