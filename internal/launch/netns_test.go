package launch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The multi-host test runs gorun against two fake hosts: network namespaces
// with their own addresses and sshd, made by shared/launchers/netns-hosts.
// The hosts share this machine's file system, so the test binaries are at
// the same path there, as a real cluster's shared home would have them.

const (
	netnsUp   = "../../../shared/launchers/netns-hosts/up.sh"
	netnsDown = "../../../shared/launchers/netns-hosts/down.sh"
	netnsDir  = "/tmp/netns-hosts" // the scripts' default NETNS_HOSTS_DIR
)

// netnsHosts makes sure host1 and host2 exist, bringing them up (and down
// after the test) if they do not, and returns the ssh wrapper reaching them.
// Namespaces someone else brought up are used and left up if ssh reaches
// both; namespaces whose sshd is gone (their session ended: the namespaces
// outlive its processes) are taken down and brought up afresh.
func netnsHosts(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("multi-host test needs root to create network namespaces (shared/launchers/netns-hosts/up.sh)")
	}
	needTool(t, "ip", "iproute2")
	needTool(t, "ssh", "openssh-client")
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Skip("sshd not installed: apt-get install openssh-server")
	}
	if _, err := os.Stat(netnsUp); err != nil {
		t.Skipf("%s missing: cannot make test hosts", netnsUp)
	}
	rsh := filepath.Join(netnsDir, "ssh")
	list, _ := exec.Command("ip", "netns", "list").Output()
	_, rshErr := os.Stat(rsh)
	if regexp.MustCompile(`(?m)^host1\b`).Match(list) && regexp.MustCompile(`(?m)^host2\b`).Match(list) && rshErr == nil {
		if reachable(rsh, "host1") && reachable(rsh, "host2") {
			return rsh
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, netnsDown).CombinedOutput()
		cancel()
		if err != nil {
			t.Skipf("test hosts are up but ssh does not reach them, and %s failed (%v):\n%s", netnsDown, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, netnsUp, "2").CombinedOutput()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, netnsDown).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", netnsDown, err, out)
		}
	})
	if err != nil {
		t.Skipf("cannot bring up the test hosts on this machine (%v):\n%s", err, out)
	}
	return rsh
}

// reachable reports whether ssh through rsh runs a command on host.
func reachable(rsh, host string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, rsh, host, "true").Run() == nil
}

// TestMultiHostNetns: 4 ranks over two hosts reached by ssh, with the PMI
// server listening on the address routed towards them; a remote rank's
// death; an unreachable host.
func TestMultiHostNetns(t *testing.T) {
	rsh := netnsHosts(t)
	r := command(t, "", nil, bins.gorun, "-n", "4", "-H", "host1:2,host2:2", "--rsh", rsh, "--trace", "2", bins.pmiprog)
	got := checkJob(t, r, 4)
	for id, wantLocal := range []string{"0 1", "0 1", "2 3", "2 3"} {
		if !got[id].port || got[id].local != wantLocal {
			t.Errorf("rank %d: %+v, want PMI_PORT and local ranks %s", id, got[id], wantLocal)
		}
	}
	// The bridge address of the test network, derived from the route to
	// host1 (10.98.0.1 per the ssh configuration), never hard-coded.
	if !strings.Contains(r.stderr, "listening on 10.98.0.254:") {
		t.Errorf("PMI server not on the bridge address:\n%s", r.stderr)
	}
	t.Logf("4 ranks on 2 hosts in %v", r.took)

	// A real MPI program across the hosts: the ranks bind UDP on their
	// host's address (its name resolves there) and reduce across hosts.
	r = command(t, "", nil, bins.gorun, "-n", "4", "-H", "host1:2,host2:2", "--rsh", rsh, bins.pi, "-n", "200000")
	if r.code != 0 || !strings.Contains(r.stdout, "pi ≈ 3.14159265359") || !strings.Contains(r.stdout, "on 4 ranks") {
		t.Errorf("pi across hosts: status %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	r = command(t, "", nil, bins.gorun, "-n", "4", "-H", "host1:2,host2:2", "--rsh", rsh, bins.pmiprog, "-fail-rank", "3", "-fail", "kill")
	if r.code != 137 || !strings.Contains(r.stderr, "rank 3 (on host2") {
		t.Errorf("status %d, want 137 naming rank 3 on host2:\n%s", r.code, r.stderr)
	}
	assertNoRankLeft(t)

	// 10.98.0.99 is on the test network but no host has it: ssh fails and
	// gorun shows why.
	r = command(t, "", nil, bins.gorun, "-n", "2", "-H", "host1,10.98.0.99", "--rsh", rsh, bins.pmiprog)
	if r.code != 255 || !strings.Contains(r.stderr, "rank 1 (on 10.98.0.99") || !strings.Contains(r.stderr, "ssh: connect to host 10.98.0.99") {
		t.Errorf("status %d, want 255 with ssh's message:\n%s", r.code, r.stderr)
	}
	assertNoRankLeft(t)
}

// TestMultiHostNetnsEnvAndInterrupt: across the namespace hosts, gorun's
// WEFT_* variables and -x reach every rank; Ctrl-C stops every rank on
// every host and gorun exits 130, also when the ranks ignore SIGINT and a
// second Ctrl-C kills them.
func TestMultiHostNetnsEnvAndInterrupt(t *testing.T) {
	rsh := netnsHosts(t)
	r := command(t, "", []string{"WEFT_TESTVAR=over ssh"}, bins.gorun, "-n", "2", "-H", "host1,host2", "--rsh", rsh,
		"-x", "XVAR=x", bins.pmiprog, "-env", "WEFT_TESTVAR,XVAR")
	checkJob(t, r, 2)
	for _, want := range []string{"rank 0 env WEFT_TESTVAR=over ssh", "rank 1 env WEFT_TESTVAR=over ssh", "rank 0 env XVAR=x", "rank 1 env XVAR=x"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("output does not say %q:\n%s", want, r.stdout)
		}
	}

	interruptRemote(t, "host1,host2", rsh, "killed by signal 2 there")
}

// TestMultiHostNetnsBuiltProgram: a package directory run across the hosts
// is copied to each (into its TMPDIR, not gorun's), and the copies are gone
// when gorun returns.
func TestMultiHostNetnsBuiltProgram(t *testing.T) {
	rsh := netnsHosts(t)
	local := t.TempDir()
	r := command(t, "", []string{"TMPDIR=" + local}, bins.gorun, "-n", "2", "-H", "host1,host2", "--rsh", rsh,
		"./testdata/pmiprog", "-card", "10", "-exe")
	checkJob(t, r, 2)
	exe := regexp.MustCompile(`(?m)^rank (\d) exe (/\S+)$`)
	got := exe.FindAllStringSubmatch(r.stdout, -1)
	if len(got) != 2 {
		t.Fatalf("want 2 exe lines:\n%s", r.stdout)
	}
	for _, m := range got {
		if strings.HasPrefix(m[2], local+"/") {
			t.Errorf("rank %s ran gorun's own build %s, which a remote host need not have", m[1], m[2])
		}
		if _, err := os.Stat(m[2]); err == nil {
			t.Errorf("rank %s's copy %s left on its host", m[1], m[2])
		}
	}
}
