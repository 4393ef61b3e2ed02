package launch

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// deviceLine is what a rank's route says of each member at trace level 2
// when it finalizes (mpi's traceDevices).
var deviceLine = regexp.MustCompile(`mpi: rank (\d+) device (\w+) toward ranks \[([\d ]*)\]: sent=(\d+)/`)

// devicesUsed parses the device lines of a job's trace: per rank, per
// device scheme, the ranks it reaches and the frames it sent.
func devicesUsed(stderr string) map[int]map[string]struct {
	peers string
	sent  int
} {
	out := map[int]map[string]struct {
		peers string
		sent  int
	}{}
	for _, m := range deviceLine.FindAllStringSubmatch(stderr, -1) {
		r, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[4])
		if out[r] == nil {
			out[r] = map[string]struct {
				peers string
				sent  int
			}{}
		}
		out[r][m[2]] = struct {
			peers string
			sent  int
		}{m[3], n}
	}
	return out
}

// nftLoss makes each namespace host drop pct % of the packets arriving on
// eth0 and duplicate dup % of those leaving it (nftables numgen: this
// kernel has no netem), until the test ends. It returns a function that
// counts the packets dropped and duplicated so far.
func nftLoss(t *testing.T, pct, dup int) func() (dropped, duplicated int) {
	t.Helper()
	for i, host := range []string{"host1", "host2"} {
		peer := fmt.Sprintf("10.98.0.%d", 2-i)
		rules := fmt.Sprintf(`table ip weft_route_test {
	chain in { type filter hook input priority 0; iifname "eth0" udp dport != 22 numgen random mod 100 < %d counter drop; }
	chain out { type filter hook output priority 0; oifname "eth0" udp sport != 22 numgen random mod 100 < %d counter dup to %s device "eth0"; }
}`, pct, dup, peer)
		cmd := exec.Command("ip", "netns", "exec", host, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("nftables in %s: %v\n%s (install nftables)", host, err, out)
		}
		t.Cleanup(func() {
			exec.Command("ip", "netns", "exec", host, "nft", "delete", "table", "ip", "weft_route_test").Run()
		})
	}
	packets := regexp.MustCompile(`counter packets (\d+)`)
	return func() (dropped, duplicated int) {
		for _, host := range []string{"host1", "host2"} {
			out, err := exec.Command("ip", "netns", "exec", host, "nft", "list", "table", "ip", "weft_route_test").Output()
			if err != nil {
				t.Fatalf("nft list in %s: %v", host, err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if m := packets.FindStringSubmatch(line); m != nil {
					n, _ := strconv.Atoi(m[1])
					if strings.Contains(line, "drop") {
						dropped += n
					} else {
						duplicated += n
					}
				}
			}
		}
		return dropped, duplicated
	}
}

// TestMultiHostNetnsRoute: 4 ranks on two namespace hosts, two per host,
// with the default transport: each rank reaches its host's other rank
// through shared memory and the other host's through UDP. Every
// collective and point-to-point size class gives exact results, also
// under nftables loss and duplication on the network and under
// WEFT_FAULTS; a ping-pong between the two ranks of host1 goes through
// shared memory, as the devices' counters show.
func TestMultiHostNetnsRoute(t *testing.T) {
	rsh := netnsHosts(t)
	hosts := []string{"-n", "4", "-H", "host1:2,host2:2", "--rsh", rsh}

	r := command(t, "", nil, bins.gorun, append(hosts, "--trace", "2", "-x", "WEFT_TIMEOUT=60s",
		bins.pairping, "-n", "3000")...)
	if r.code != 0 || !strings.Contains(r.stdout, "pairping ok: 3000 round trips between ranks 0 and 1") {
		t.Fatalf("pairping: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`(?m)^stats shm toward \[1\]: sent ([3-9]\d{3,}|\d{5,}) frames$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "stats udp toward [2 3]: sent ") {
		t.Errorf("rank 0's World.Stats do not show its shm device carrying the 3000 round trips toward rank 1:\n%s", r.stdout)
	}
	// The namespace hosts are this machine: their ranks share its CPUs,
	// and are not bound host by host (two talking ranks of two hosts
	// would both take CPU 0).
	if n := strings.Count(r.stderr, "not bound (WEFT_BIND_TO=auto): this host is the launcher's machine"); n != 4 {
		t.Errorf("%d of 4 ranks said they were not bound on the launcher's machine:\n%s", n, r.stderr)
	}
	// Told that the launcher is another machine, each binds itself to its
	// share of its host's CPUs.
	rb := command(t, "", nil, bins.gorun, append(hosts, "--trace", "2", "-x", "WEFT_TIMEOUT=60s",
		"-x", "WEFT_LAUNCHER_BOOT=another-machine", bins.pairping, "-n", "100")...)
	if rb.code != 0 {
		t.Fatalf("pairping, launcher elsewhere: status %d\n%s\n%s", rb.code, rb.stdout, rb.stderr)
	}
	checkRemoteBinding(t, rb.stderr, 4)
	used := devicesUsed(r.stderr)
	for rank, want := range []struct{ shm, udp string }{{"1", "2 3"}, {"0", "2 3"}, {"3", "0 1"}, {"2", "0 1"}} {
		d := used[rank]
		if d["shm"].peers != want.shm || d["udp"].peers != want.udp {
			t.Errorf("rank %d reaches %v, want shm toward [%s] and udp toward [%s]", rank, d, want.shm, want.udp)
		}
	}
	// 3000 round trips: at least 3000 frames each way between ranks 0
	// and 1, by shared memory; UDP carried only the barrier, the
	// bootstrap and reintegration toward host2.
	for _, rank := range []int{0, 1} {
		if d := used[rank]; d["shm"].sent < 3000 || d["udp"].sent > 300 {
			t.Errorf("rank %d sent %d frames by shm and %d by udp: want ≥ 3000 and ≤ 300", rank, d["shm"].sent, d["udp"].sent)
		}
	}

	// The same under MPICH's Hydra, which says which ranks share a host
	// through PMI_process_mapping; it needs the UTS host name set to
	// reach its own server from host1 (shared/launchers/README.md).
	if hydra, err := exec.LookPath("mpiexec.hydra"); err == nil {
		r := command(t, "", nil, "ip", "netns", "exec", "host1", "unshare", "--uts", "sh", "-c",
			"hostname host1; exec "+hydra+" -launcher ssh -launcher-exec "+rsh+
				" -hosts host1:2,host2:2 -n 4 -genv WEFT_TRACE 2 -genv WEFT_TIMEOUT 60s "+bins.pairping+" -n 2000")
		if r.code != 0 || !strings.Contains(r.stdout, "pairping ok: 2000") {
			t.Fatalf("pairping under Hydra: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		used := devicesUsed(r.stdout + r.stderr)
		if d := used[0]; d["shm"].peers != "1" || d["udp"].peers != "2 3" || d["shm"].sent < 2000 || d["udp"].sent > 300 {
			t.Errorf("under Hydra rank 0 used %v, want ≥ 2000 frames by shm toward [1], ≤ 300 by udp toward [2 3]", d)
		}
	} else {
		t.Log("mpiexec.hydra not installed (apt-get install mpich): the Hydra case is not run")
	}

	run := func(name string, env ...string) {
		t.Helper()
		args := append([]string{}, hosts...)
		for _, e := range append(env, "WEFT_TIMEOUT=120s") {
			args = append(args, "-x", e)
		}
		r := command(t, "", nil, bins.gorun, append(args, bins.collcheck, "-rounds", "40", "-p2p", "1", "-large", "4")...)
		if r.code != 0 || !strings.Contains(r.stdout, "collcheck ok: 40 rounds on 4 ranks") {
			t.Errorf("%s: status %d\n%s\n%s", name, r.code, r.stdout, r.stderr)
		}
	}
	run("lossless")
	run("WEFT_FAULTS", "WEFT_FAULTS=loss=0.05,reorder=0.05,dup=0.02,corrupt=0.005,seed=3")
	counts := nftLoss(t, 3, 1)
	run("nftables 3% loss, 1% duplication")
	if d, u := counts(); d == 0 || u == 0 {
		t.Errorf("nftables dropped %d and duplicated %d packets: no fault injected", d, u)
	} else {
		t.Logf("nftables dropped %d and duplicated %d packets", d, u)
	}
	assertNoRankLeft(t)
}

// TestMultiHostNetnsUnevenHosts: hosts that run different numbers of
// ranks. A rank alone on its host opens only the network device and
// publishes its plain address; the ranks beside others route, and each
// side connects to the other's address (once a bootstrap failure: "has no
// address for device"). Every collective and point-to-point size class is
// exact with two ranks on host1 and one on host2, and the other way round,
// and the pair that shares a host goes by shared memory.
func TestMultiHostNetnsUnevenHosts(t *testing.T) {
	rsh := netnsHosts(t)
	for _, c := range []struct {
		hosts string
		shm   map[int]string // rank → the ranks its shm member reaches
		lone  int
		env   []string
	}{
		{"host1:2,host2:1", map[int]string{0: "1", 1: "0"}, 2, nil},
		{"host1:1,host2:2", map[int]string{1: "2", 2: "1"}, 0, []string{"WEFT_FAULTS=loss=0.05,reorder=0.05,dup=0.02,seed=5"}},
	} {
		args := []string{"-n", "3", "-H", c.hosts, "--rsh", rsh, "--trace", "2"}
		for _, e := range append(c.env, "WEFT_TIMEOUT=120s") {
			args = append(args, "-x", e)
		}
		r := command(t, "", nil, bins.gorun, append(args, bins.collcheck, "-rounds", "20", "-p2p", "1", "-large", "4")...)
		if r.code != 0 || !strings.Contains(r.stdout, "collcheck ok: 20 rounds on 3 ranks") {
			t.Errorf("%s %v: status %d\n%s\n%s", c.hosts, c.env, r.code, r.stdout, r.stderr)
			continue
		}
		used := devicesUsed(r.stderr)
		for rank, peers := range c.shm {
			if d := used[rank]; d["shm"].peers != peers || d["shm"].sent == 0 {
				t.Errorf("%s: rank %d used %v, want shm toward [%s]", c.hosts, rank, d, peers)
			}
		}
		if d, ok := used[c.lone]; ok {
			t.Errorf("%s: rank %d, alone on its host, routed over %v; want its one device", c.hosts, c.lone, d)
		}
		if !strings.Contains(r.stderr, fmt.Sprintf("mpi: rank %d device udp:", c.lone)) {
			t.Errorf("%s: rank %d, alone on its host, did not trace its one udp device:\n%s", c.hosts, c.lone, r.stderr)
		}
	}
	assertNoRankLeft(t)
}

// checkRemoteBinding: gorun started all n ranks over ssh (two per host)
// on what they take for another machine, and each bound itself in
// mpi.Init (WEFT_BIND_TO=auto) to its share of its host's CPUs, as gorun
// binds the ranks it starts itself: the two ranks of a host take
// different CPUs where there are two or more.
func checkRemoteBinding(t *testing.T, stderr string, n int) {
	t.Helper()
	bound := regexp.MustCompile(`mpi (\d+): bound to CPUs (\S+) \(WEFT_BIND_TO=auto: rank (\d+) of 2 on this node, (\d+) CPUs shared`)
	cpus := map[int]string{}
	shared := 0
	for _, m := range bound.FindAllStringSubmatch(stderr, -1) {
		rank, _ := strconv.Atoi(m[1])
		cpus[rank] = m[2]
		shared, _ = strconv.Atoi(m[4])
	}
	if len(cpus) != n {
		t.Fatalf("%d of %d ranks said they bound themselves (mpi: bound to CPUs):\n%s", len(cpus), n, stderr)
	}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		if shared >= 2 && cpus[pair[0]] == cpus[pair[1]] {
			t.Errorf("ranks %d and %d of one host both bound to CPUs %s of %d", pair[0], pair[1], cpus[pair[0]], shared)
		}
	}
}
