package main

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePairOption(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"latency", nil, 0},
		{"latency", []string{"-pair", "0,1"}, 1},
		{"latency", []string{"-pair", "0,2"}, 2},
		{"bw", []string{"-pair", "0, 3"}, 3},
		{"bibw", []string{"-pair", "0,7"}, 7},
	} {
		o, err := parseOptions(c.name, c.args, io.Discard)
		if err != nil || o.partner != c.want {
			t.Errorf("parseOptions(%s %q): partner %v, %v; want %d", c.name, c.args, o, err, c.want)
			continue
		}
		role, peer := o.countFor(8).role(0)
		wantPeer := c.want
		if wantPeer == 0 {
			wantPeer = 1
		}
		if role != 0 || peer != wantPeer {
			t.Errorf("%s %q: rank 0 has role %d opposite %d; want 0 opposite %d", c.name, c.args, role, peer, wantPeer)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"latency", []string{"-pair", "2"}, "not two ranks"},
		{"latency", []string{"-pair", "0,x"}, "not two rank numbers"},
		{"latency", []string{"-pair", "1,2"}, "the first rank must be 0"},
		{"latency", []string{"-pair", "0,0"}, "the second rank must be above 0"},
		{"latency", []string{"-pair", "0,-1"}, "the second rank must be above 0"},
		{"allreduce", []string{"-pair", "0,2"}, "point-to-point benchmarks only"},
		{"barrier", []string{"-pair", "0,1"}, "point-to-point benchmarks only"},
	} {
		_, err := parseOptions(c.name, c.args, io.Discard)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseOptions(%s %q) = %v; want a usage error saying %q", c.name, c.args, err, c.want)
		}
	}
}

func TestRoles(t *testing.T) {
	for _, c := range []struct {
		partner, me, role, peer int
	}{
		{0, 0, 0, 1}, {0, 1, 1, 0}, {0, 2, -1, -1},
		{2, 0, 0, 2}, {2, 2, 1, 0}, {2, 1, -1, -1}, {2, 3, -1, -1},
	} {
		role, peer := count{partner: c.partner}.role(c.me)
		if role != c.role || peer != c.peer {
			t.Errorf("partner %d, rank %d: role %d peer %d; want %d %d", c.partner, c.me, role, peer, c.role, c.peer)
		}
	}
}

// With -pair 0,2 on 4 ranks, rank 0 and rank 2 talk and ranks 1 and 3
// idle: a message to or an ack awaited from the wrong rank would hang, so
// the runs are bounded.
func TestBenchmarksPair(t *testing.T) {
	for _, name := range []string{"latency", "bw", "bibw"} {
		t.Run(name, func(t *testing.T) {
			o := &options{bench: lookup(name), min: 4, max: 8, iters: 3, warmup: 1, label: "weft", partner: 2}
			type result struct {
				tb  *table
				err error
			}
			done := make(chan result, 1)
			go func() {
				tb, _, err := runInProcess(t, 4, o)
				done <- result{tb, err}
			}()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatal(r.err)
				}
				if len(r.tb.rows) != 2 || !(r.tb.rows[0].value > 0) {
					t.Errorf("%s -pair 0,2 on 4 ranks: rows %+v; want 2 positive", name, r.tb.rows)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s -pair 0,2 on 4 ranks did not finish in a minute: the pair is not 0 and 2", name)
			}
		})
	}
	o := &options{bench: lookup("latency"), min: 1, max: 1, iters: 1, label: "weft", partner: 3}
	if _, _, err := runInProcess(t, 3, o); err == nil || !strings.Contains(err.Error(), "-pair 0,3: this job has 3 ranks") {
		t.Errorf("-pair 0,3 on 3 ranks: %v; want an error saying the job is too small", err)
	}
}

// TestCPair runs bench/c's latency.c and bw.c, built with MPICH, with
// -pair 0,2 on 3 ranks: each prints its table (a wrong peer would hang
// until the timeout), and a pair beyond the job is refused.
func TestCPair(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs MPI programs")
	}
	var tools []string
	for _, tool := range []string{"mpicc.mpich", "mpiexec.mpich"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not installed: apt-get install mpich libmpich-dev", tool)
		}
		tools = append(tools, p)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		prog string
		args []string
	}{
		{"latency", nil},
		{"bw", nil},
		{"bw", []string{"-bi"}},
	} {
		bin := filepath.Join(dir, c.prog)
		if out, err := exec.Command(tools[0], "-O2", "-o", bin, filepath.Join("c", c.prog+".c")).CombinedOutput(); err != nil {
			t.Fatalf("mpicc.mpich %s.c: %v\n%s", c.prog, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		args := append([]string{"-n", "3", bin, "-min", "8", "-max", "16", "-iters", "3", "-warmup", "1", "-pair", "0,2"}, c.args...)
		out, err := exec.CommandContext(ctx, tools[1], args...).Output()
		cancel()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", c.prog, args, err, out)
		}
		back, err := readOSU(strings.NewReader(string(out)), "")
		if err != nil || len(back.rows) != 2 || !(back.rows[0].value > 0) {
			t.Errorf("%s %q printed\n%s\nread back as %+v, %v; want 2 positive rows", c.prog, args, out, back, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tools[1], "-n", "2", filepath.Join(dir, "latency"), "-pair", "0,2").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-pair 0,2: this job has 2 ranks") {
		t.Errorf("latency -pair 0,2 on 2 ranks: %v\n%s\nwant a failure saying the job is too small", err, out)
	}
}
