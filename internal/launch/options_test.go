package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	t.Setenv("FROM_ENV", "inherited")
	o, err := ParseArgs([]string{"-n", "4", "--oversubscribe", "-H", "a:2,b", "--tag-output", "--timeout", "30s",
		"--trace", "3", "--profile", "cpu", "-x", "A=1", "-x", "FROM_ENV", "--transport", "shm",
		"--rsh", "ssh -F cfg", "./prog", "-n", "7", "--flag-of-prog"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := &Options{N: 4, Oversubscribe: true, TagOutput: true, Timeout: 30 * time.Second, Trace: 3, Profile: "cpu",
		Transport: "shm", Program: "./prog"}
	if o.N != want.N || !o.Oversubscribe || !o.TagOutput || o.Timeout != want.Timeout || o.Trace != 3 ||
		o.Profile != "cpu" || o.Transport != "shm" || o.Program != "./prog" {
		t.Errorf("options %+v", o)
	}
	if !slices.Equal(o.Args, []string{"-n", "7", "--flag-of-prog"}) {
		t.Errorf("program args %q: flags after the program belong to it", o.Args)
	}
	if !slices.Equal(o.Env, []string{"A=1", "FROM_ENV=inherited"}) {
		t.Errorf("-x %q", o.Env)
	}
	if !slices.Equal(o.Rsh, []string{"ssh", "-F", "cfg"}) {
		t.Errorf("--rsh %q", o.Rsh)
	}
	if len(o.Hosts) != 2 || o.Hosts[0] != (Host{Name: "a", Slots: 2}) || o.Hosts[1] != (Host{Name: "b", Slots: 1}) {
		t.Errorf("hosts %+v", o.Hosts)
	}

	d, err := ParseArgs([]string{"prog"}, io.Discard)
	if err != nil || d.N != 1 || d.Transport != "auto" || d.Trace != -1 || !slices.Equal(d.Rsh, defaultRsh) {
		t.Errorf("defaults: %+v, %v", d, err)
	}
	w, err := ParseArgs([]string{"--wrap", "--", "mpirun", "-n", "2"}, io.Discard)
	if err != nil || !w.Wrap || w.Program != "mpirun" || !slices.Equal(w.Args, []string{"-n", "2"}) {
		t.Errorf("--wrap: %+v, %v", w, err)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "no program"},
		{[]string{"-n", "0", "p"}, "at least one rank"},
		{[]string{"-n", "x", "p"}, "invalid value"},
		{[]string{"--transport", "carrier-pigeon", "p"}, "auto, shm, udp, verbs"},
		// Features that do not exist yet are refused, saying so.
		{[]string{"--transport", "inproc-test", "p"}, "mpi.Run"},
		{[]string{"-x", "WEFT_TRANSPORT=inproc-test", "p"}, "-x WEFT_TRANSPORT \"inproc-test\": the in-process device runs ranks as goroutines"},
		{[]string{"--nics", "", "p"}, "without empty ones"},
		{[]string{"--nics", "eth0,,eth1", "p"}, "without empty ones"},
		{[]string{"--nics", "eth0,eth0", "p"}, "eth0 given twice"},
		{[]string{"--nics", "eth0;reboot", "p"}, "not an interface name or address"},
		{[]string{"--nics", "eth0", "--nics", "eth1", "p"}, "one list for every host"},
		{[]string{"-H", "a", "--nics", "b=eth0", "p"}, `"b" is not a host of -H or --hostfile`},
		{[]string{"-H", "a", "--nics", "a=eth0", "--nics", "a=eth1", "p"}, "host a's NICs already given"},
		{[]string{"--nics", "eth0", "-x", "WEFT_NICS=eth1", "p"}, "--nics and -x WEFT_NICS both given"},
		{[]string{"--profile", "heap", "p"}, "cpu, mem, block, mutex"},
		{[]string{"--bind-to", "socket", "p"}, "auto, core, none"},
		{[]string{"--trace", "12", "p"}, "0-9"},
		{[]string{"-x", "=v", "p"}, "NAME=VALUE"},
		{[]string{"-x", "WEFT_NO_SUCH_VARIABLE_SET", "p"}, "-x WEFT_NO_SUCH_VARIABLE_SET: WEFT_NO_SUCH_VARIABLE_SET is not set"}, // was passed on as NAME=
		{[]string{"-H", "a:0", "p"}, "slots"},
		{[]string{"-H", "a;rm", "p"}, "bad host name"},
		{[]string{"--no-such-flag", "p"}, "not defined"},
		// A blank --rsh left no command: gorun panicked at the first remote host.
		{[]string{"--rsh", " ", "-H", "node1", "p"}, `--rsh " "`},
		{[]string{"--rsh", "", "p"}, "--rsh"},
		{[]string{"--hostfile", "/nonexistent/hosts", "p"}, "hostfile"},
	} {
		_, err := ParseArgs(tc.args, io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseArgs(%q) = %v; want ErrUsage saying %q", tc.args, err, tc.says)
		}
	}
}

func TestHostfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(path, []byte("# cluster\nnode1\nnode2:4   # comment\n\nnode3 slots=2 max_slots=8\n[fe80::1]:2\n"), 0o644)
	hosts, err := ReadHostfile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{Name: "node1", Slots: 1}, {Name: "node2", Slots: 4}, {Name: "node3", Slots: 2}, {Name: "fe80::1", Slots: 2}}
	if !slices.Equal(hosts, want) {
		t.Errorf("hosts %+v, want %+v", hosts, want)
	}
	os.WriteFile(path, []byte("node1\nnode2 cpus=3\n"), 0o644)
	if _, err := ReadHostfile(path); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("bad option: %v, want ErrUsage naming line 2", err)
	}
}

// TestHostListRefusesMalformed: a host spec that is not host[:slots] is
// refused with ErrUsage, not taken as a host name that ssh is later asked
// to reach.
func TestHostListRefusesMalformed(t *testing.T) {
	for _, tc := range []struct{ spec, says string }{
		{"node1:", "slots"},                             // was taken as 1 slot
		{"node1:2:3", "more than one ':'"},              // was host "node1:2", 3 slots
		{"::1", "brackets"},                             // was host ":", 1 slot
		{"[::1", "brackets"},                            // unclosed
		{"[node1]:2", "IPv6"},                           // brackets hold an IPv6 address only
		{"[::1]2", "[IPV6-ADDRESS]:SLOTS"},              // no ':' before the slots
		{"-oProxyCommand=/tmp/evil", "starts with '-'"}, // ssh would take it as an option
	} {
		hs, err := ParseHostList(tc.spec)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseHostList(%q) = %+v, %v; want ErrUsage saying %q", tc.spec, hs, err, tc.says)
		}
	}
	hs, err := ParseHostList("[::1]:2,[fe80::1%eth0],node1:3")
	want := []Host{{Name: "::1", Slots: 2}, {Name: "fe80::1%eth0", Slots: 1}, {Name: "node1", Slots: 3}}
	if err != nil || !slices.Equal(hs, want) {
		t.Errorf("ParseHostList of well-formed specs = %+v, %v; want %+v", hs, err, want)
	}
}

func TestPlace(t *testing.T) {
	// This host alone: one slot per core.
	p, err := Place(2, nil, false, 2)
	if err != nil || !slices.Equal(p.NodeOf, []int{0, 0}) || !p.Hosts[0].Local {
		t.Errorf("local: %+v, %v", p, err)
	}
	// More local ranks than cores: allowed without a host list, as with
	// MPICH's mpiexec (the README's 4-rank example runs on 2 cores).
	p, err = Place(4, nil, false, 2)
	if err != nil || !slices.Equal(p.NodeOf, []int{0, 0, 0, 0}) {
		t.Errorf("local, more ranks than cores: %+v, %v", p, err)
	}
	// A listed localhost with too few slots is enforced like any host.
	if _, err = Place(4, []Host{{Name: "localhost", Slots: 2, Local: true}}, false, 2); !errors.Is(err, ErrSlots) || !strings.Contains(err.Error(), "--oversubscribe") {
		t.Errorf("too many ranks for listed slots: %v", err)
	}
	// By slot: fill a, then b; a named twice has its slots added.
	hosts := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}, {Name: "a", Slots: 1}}
	p, err = Place(4, hosts, false, 2)
	if err != nil || !slices.Equal(p.NodeOf, []int{0, 0, 0, 1}) || len(p.Hosts) != 2 {
		t.Errorf("by slot: %+v, %v", p, err)
	}
	_, err = Place(5, hosts, false, 2)
	if !errors.Is(err, ErrSlots) || !strings.Contains(err.Error(), "a:3,b:1") {
		t.Errorf("too many ranks for the hosts: %v", err)
	}
	// Oversubscribed: further rounds over the same slots.
	p, err = Place(6, []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, true, 2)
	if err != nil || !slices.Equal(p.NodeOf, []int{0, 0, 1, 0, 0, 1}) {
		t.Errorf("oversubscribed: %+v, %v", p, err)
	}
	id, count := p.LocalRanks()
	if !slices.Equal(id, []int{0, 1, 0, 2, 3, 1}) || !slices.Equal(count, []int{4, 4, 2, 4, 4, 2}) {
		t.Errorf("local ranks %v of %v", id, count)
	}
}

// TestPlaceSlotsOverflow: slot counts that overflow when added do not
// turn a job that fits into "not enough slots" (it said "the hosts offer
// -2 slots"); -H caps a host's slots, saying so.
func TestPlaceSlotsOverflow(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: math.MaxInt}, {Name: "b", Slots: math.MaxInt}, {Name: "a", Slots: math.MaxInt}}
	if p, err := Place(2, hosts, false, 1); err != nil || !slices.Equal(p.NodeOf, []int{0, 0}) {
		t.Errorf("Place(2 ranks, hosts of MaxInt slots) = %+v, %v", p, err)
	}
	if _, err := Place(1, []Host{{Name: "a"}}, true, 1); !errors.Is(err, ErrUsage) {
		t.Errorf("Place on a host of 0 slots = %v; want ErrUsage", err)
	}
	for _, spec := range []string{"a:9223372036854775807", fmt.Sprintf("a:%d", maxSlots+1)} {
		if hs, err := ParseHostList(spec); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), fmt.Sprint(maxSlots)) {
			t.Errorf("ParseHostList(%q) = %+v, %v; want ErrUsage naming the cap", spec, hs, err)
		}
	}
	if hs, err := ParseHostList(fmt.Sprintf("a:%d", maxSlots)); err != nil || hs[0].Slots != maxSlots {
		t.Errorf("ParseHostList at the cap = %+v, %v", hs, err)
	}
}

func TestMarkLocal(t *testing.T) {
	self, _ := os.Hostname()
	hosts := []Host{{Name: "localhost"}, {Name: self}, {Name: "127.0.0.1"}, {Name: "no-such-host.invalid"}}
	markLocal(hosts)
	for i, want := range []bool{true, true, true, false} {
		if hosts[i].Local != want {
			t.Errorf("%s: Local=%v, want %v", hosts[i].Name, hosts[i].Local, want)
		}
	}
}

// TestTransportSources: the ranks' WEFT_TRANSPORT is decided once, from
// -x, --transport, gorun's environment or the default, in that order, and
// a bad value names where it came from.
func TestTransportSources(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"p"}, "auto"},
		{"udp", []string{"p"}, "udp"},
		{"udp", []string{"--transport", "shm", "p"}, "shm"},
		{"udp", []string{"--transport", "shm", "-x", "WEFT_TRANSPORT=auto", "p"}, "auto"},
		{"", []string{"--transport", "verbs", "p"}, "verbs"},
		{"verbs", []string{"p"}, "verbs"},
	} {
		t.Setenv("WEFT_TRANSPORT", tc.env)
		o, err := ParseArgs(tc.args, io.Discard)
		if err != nil || o.Transport != tc.want {
			t.Errorf("WEFT_TRANSPORT=%q gorun %q: transport %q, %v; want %q", tc.env, tc.args, o.Transport, err, tc.want)
		}
	}
	t.Setenv("WEFT_TRANSPORT", "tcp")
	if _, err := ParseArgs([]string{"p"}, io.Discard); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "WEFT_TRANSPORT (gorun's environment) \"tcp\"") {
		t.Errorf("WEFT_TRANSPORT=tcp in gorun's environment: %v", err)
	}
}

// TestBindToSources: --bind-to is settled like --transport: -x
// WEFT_BIND_TO wins, then the flag, then WEFT_BIND_TO in gorun's
// environment (which gorun used to strip, leaving auto); a value not among
// cpubind's modes is refused naming where it came from; the ranks see the
// one value.
func TestBindToSources(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"p"}, "auto"},
		{"none", []string{"p"}, "none"},
		{" core", []string{"p"}, "core"},
		{"none", []string{"--bind-to", "core", "p"}, "core"},
		{"", []string{"--bind-to", "core", "-x", "WEFT_BIND_TO=none", "p"}, "none"},
	} {
		t.Setenv("WEFT_BIND_TO", tc.env)
		o, err := ParseArgs(tc.args, io.Discard)
		if err != nil || o.BindTo != tc.want {
			t.Fatalf("WEFT_BIND_TO=%q gorun %q: --bind-to %+v, %v; want %q", tc.env, tc.args, o, err, tc.want)
		}
		j := &job{opts: o}
		for _, local := range []bool{true, false} {
			var got []string
			for _, kv := range j.rankEnv(local) {
				if strings.HasPrefix(kv, "WEFT_BIND_TO=") {
					got = append(got, kv)
				}
			}
			want := []string{"WEFT_BIND_TO=" + tc.want}
			if local {
				want = nil // gorun binds them itself
			}
			if !slices.Equal(got, want) {
				t.Errorf("WEFT_BIND_TO=%q gorun %q: the ranks (local %v) see %q; want %q", tc.env, tc.args, local, got, want)
			}
		}
	}
	for _, tc := range []struct{ env, arg, says string }{
		{"bogus", "p", `WEFT_BIND_TO (gorun's environment) "bogus"`},
		{"", "-x=WEFT_BIND_TO=socket", `-x WEFT_BIND_TO "socket"`},
	} {
		t.Setenv("WEFT_BIND_TO", tc.env)
		if _, err := ParseArgs([]string{tc.arg, "p"}, io.Discard); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("WEFT_BIND_TO=%q %s: %v; want ErrUsage saying %s", tc.env, tc.arg, err, tc.says)
		}
	}
}

// TestHelpListsOnlyWhatExists: gorun -h describes no flag or value of a
// feature that does not exist yet, and says what remote hosts need.
func TestHelpListsOnlyWhatExists(t *testing.T) {
	var help strings.Builder
	if _, err := ParseArgs([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, absent := range []string{"inproc-test"} {
		if strings.Contains(help.String(), absent) {
			t.Errorf("help mentions %q:\n%s", absent, help.String())
		}
	}
	for _, present := range []string{"-transport", "auto | shm | udp | verbs", "-tags verbs", "-nics", "default: one NIC", "copied to each remote host", "same path on every", "WEFT_*", "PMI-1 and PMI-2"} {
		if !strings.Contains(help.String(), present) {
			t.Errorf("help does not say %q:\n%s", present, help.String())
		}
	}
}

// TestRankEnvPassesNodeCPUs: WEFT_NODE_CPUS, a tuning knob of mpi.Options,
// reaches local and remote ranks from gorun's environment as every WEFT_*
// variable does (it was dropped), and gorun's own value, when it binds,
// gives way to the user's (userSets).
func TestRankEnvPassesNodeCPUs(t *testing.T) {
	t.Setenv("WEFT_NODE_CPUS", "3")
	j := &job{opts: &Options{N: 2, Trace: -1, BindTo: "none", Transport: "auto"}}
	for _, local := range []bool{true, false} {
		env := j.rankEnv(local)
		found := false
		for _, kv := range env {
			found = found || kv == "WEFT_NODE_CPUS=3"
		}
		if !found {
			t.Errorf("rankEnv(local=%v) with WEFT_NODE_CPUS=3 in gorun's environment and --bind-to none: not passed on", local)
		}
	}
}

// TestUserSetsNodeCPUs: a -x setting is the user's, matched by whole name.
func TestUserSetsNodeCPUs(t *testing.T) {
	j := &job{opts: &Options{Env: []string{"WEFT_NODE_CPUS=7"}, Trace: -1, BindTo: "none", Transport: "auto"}}
	env := j.rankEnv(true)
	if !userSets(env, "WEFT_NODE_CPUS") {
		t.Error("-x WEFT_NODE_CPUS=7 not seen as the user's")
	}
	if userSets(env, "WEFT_NODE") {
		t.Error("a prefix of a name taken for it")
	}
}
