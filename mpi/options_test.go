package mpi

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/transport/udp"
)

// envOptions is OptionsFromEnv for test helpers that build worlds by hand:
// the tests that set WEFT_* variables see them applied as Init and Run
// apply them.
func envOptions(tb testing.TB) Options {
	tb.Helper()
	o, err := OptionsFromEnv()
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// clearEnv unsets (empties) every variable OptionsFromEnv reads, for the
// test's duration.
func clearEnv(t *testing.T) {
	for _, e := range slices.Concat(envVars, checkedVars) {
		t.Setenv(e.name, "")
	}
}

// TestOptionsFromEnv: each variable's good value sets its field (and only
// it), each bad value is an error wrapping ErrArg that names the variable
// and the accepted form, and every variable OptionsFromEnv reads is in the
// table.
func TestOptionsFromEnv(t *testing.T) {
	clearEnv(t)
	if o, err := OptionsFromEnv(); err != nil || !reflect.DeepEqual(o, Options{}) {
		t.Fatalf("empty environment: %+v, %v; want the zero Options", o, err)
	}
	snapDir := t.TempDir()
	notDir := snapDir + "/file"
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		good []string
		want []Options
		bad  []string
	}{
		{"WEFT_TRANSPORT", []string{"shm", "auto"}, []Options{{Transport: "shm"}, {Transport: "auto"}}, []string{"tcp", "SHM"}},
		{"WEFT_BIND", []string{"10.0.0.2"}, []Options{{Bind: "10.0.0.2"}}, nil},
		{"WEFT_NICS", []string{"eth0,eth1", "10.0.0.2", " eth0 , 10.0.1.2"},
			[]Options{{NICs: []string{"eth0", "eth1"}}, {NICs: []string{"10.0.0.2"}}, {NICs: []string{"eth0", "10.0.1.2"}}},
			[]string{"eth0,", "eth0,eth0", ",eth1", "eth0 eth1", manyNICs(17)}},
		{"WEFT_VERBS_DEVICE", []string{"rxe0", "rxe0, mlx5_1"}, []Options{{VerbsDevices: []string{"rxe0"}}, {VerbsDevices: []string{"rxe0", "mlx5_1"}}},
			[]string{"rxe0,", "rxe0,rxe0", "rxe 0", "../uverbs0"}},
		{"WEFT_VERBS_PORT", []string{"1", "2"}, []Options{{VerbsPort: 1}, {VerbsPort: 2}}, []string{"0", "256", "-1", "one"}},
		{"WEFT_VERBS_GID", []string{"1", "3"}, []Options{{VerbsGID: 1}, {VerbsGID: 3}}, []string{"0", "256", "-3", "v2"}},
		{"WEFT_NODE_CPUS", []string{"4"}, []Options{{NodeCPUs: 4}}, []string{"junk", "0", "-2", "4cpus"}},
		{"WEFT_BIND_TO", []string{"auto", "core", "none"}, []Options{{BindTo: "auto"}, {BindTo: "core"}, {BindTo: "none"}}, []string{"cores", "AUTO"}},
		{"WEFT_YIELD", []string{"2ms", "0"}, []Options{{Yield: 2 * time.Millisecond}, {Yield: -1}}, []string{"soon", "-1ms", "5"}},
		{"WEFT_TIMEOUT", []string{"30s", "0"}, []Options{{Timeout: 30 * time.Second}, {}}, []string{"later", "-1s"}},
		{"WEFT_EAGER", []string{"100000"}, []Options{{Eager: 100000}}, []string{"junk", "0", "-1", "64k"}},
		{"WEFT_SINGLECOPY", []string{"262144", "-1", "0"}, []Options{{SingleCopy: 262144}, {SingleCopy: -1}, {}}, []string{"big", "1.5"}},
		{"WEFT_SPLIT", []string{"100000", "0"}, []Options{{Split: 100000}, {Split: -1}}, []string{"junk", "-1"}},
		{"WEFT_DIRECT", []string{"4096", "0"}, []Options{{Direct: 4096}, {Direct: -1}}, []string{"junk", "-4096"}},
		{"WEFT_ACCUMULATE", []string{"1048576", "0"}, []Options{{Accumulate: 1 << 20}, {Accumulate: -1}}, []string{"1MiB", "-1"}},
		{"WEFT_BCAST_RDMA", []string{"4194304", "0"}, []Options{{BcastRDMA: 4 << 20}, {BcastRDMA: -1}}, []string{"4MiB", "-1"}},
		{"WEFT_ALLGATHER_RDMA", []string{"65536", "0"}, []Options{{AllgatherRDMA: 64 << 10}, {AllgatherRDMA: -1}}, []string{"64KiB", "-1"}},
		{"WEFT_ALLTOALL_RDMA", []string{"1048576", "0"}, []Options{{AlltoallRDMA: 1 << 20}, {AlltoallRDMA: -1}}, []string{"1M", "-5"}},
		// Read by transport/udp alone once, where a bad value passed silently
		// in a job on shared memory.
		{"WEFT_GSO", []string{"0", "off", "1", "on"}, []Options{{NoGSO: true}, {NoGSO: true}, {}, {}}, []string{"bogus", "yes"}},
		{"WEFT_UDP_BATCH", []string{"1", "1024"}, []Options{{UDPBatch: 1}, {UDPBatch: 1024}}, []string{"0", "1025", "-3", "many"}},
		{"WEFT_UDP_MCAST", []string{"1", "on", "0", "off"}, []Options{{UDPMcast: "on"}, {UDPMcast: "on"}, {UDPMcast: "off"}, {UDPMcast: "off"}}, []string{"maybe", "2"}},
		{"WEFT_BCAST_MCAST", []string{"1", "on", "0", "off"}, []Options{{BcastMcast: true}, {BcastMcast: true}, {}, {}}, []string{"yes", "2"}},
		{"WEFT_SHMCOLL", []string{"off", "on"}, []Options{{NoShmColl: true}, {}}, []string{"maybe", "0"}},
		{"WEFT_SYSMON", []string{"batch", "normal"}, []Options{{Sysmon: "batch"}, {Sysmon: "normal"}}, []string{"bogus", "idle"}},
		{"WEFT_STATS", []string{"1", "on", "0", "off"}, []Options{{Stats: true}, {Stats: true}, {}, {}}, []string{"yes", "2", "ON"}},
		{"WEFT_ASYNC_PROGRESS", []string{"1", "on", "0", "off"}, []Options{{AsyncProgress: true}, {AsyncProgress: true}, {}, {}}, []string{"yes", "2"}},
		{"WEFT_TRACK", []string{"1", "on", "0", "off"}, []Options{{Track: true}, {Track: true}, {}, {}}, []string{"yes", "2"}},
		{"WEFT_SNAPSHOT_DIR", []string{snapDir}, []Options{{SnapshotDir: snapDir}}, []string{snapDir + "/none", notDir}},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.name] = true
		for i, v := range c.good {
			t.Setenv(c.name, v)
			if o, err := OptionsFromEnv(); err != nil || !reflect.DeepEqual(o, c.want[i]) {
				t.Errorf("%s=%s: %+v, %v; want %+v", c.name, v, o, err, c.want[i])
			}
		}
		for _, v := range c.bad {
			t.Setenv(c.name, v)
			_, err := OptionsFromEnv()
			if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), fmt.Sprintf("%s=%q: want ", c.name, v)) {
				t.Errorf("%s=%s: %v; want an ErrArg naming the variable and its form", c.name, v, err)
			}
		}
		t.Setenv(c.name, "")
	}
	for _, e := range envVars {
		if !seen[e.name] {
			t.Errorf("%s is read but not tested", e.name)
		}
	}

	// Several bad values: one error names each.
	t.Setenv("WEFT_EAGER", "junk")
	t.Setenv("WEFT_SYSMON", "bogus")
	_, err := OptionsFromEnv()
	if err == nil || !strings.Contains(err.Error(), "WEFT_EAGER") || !strings.Contains(err.Error(), "WEFT_SYSMON") {
		t.Errorf("two bad variables: %v; want both named", err)
	}
	// Run and Init refuse them too.
	if err := Run(2, func(*Comm) error { return nil }); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), `WEFT_EAGER="junk"`) {
		t.Errorf("Run with WEFT_EAGER=junk: %v", err)
	}
	if w, err := Init(); err == nil {
		w.Finalize()
		t.Error("Init accepted WEFT_EAGER=junk")
	} else if !strings.Contains(err.Error(), `WEFT_EAGER="junk"`) {
		t.Errorf("Init with WEFT_EAGER=junk: %v", err)
	}
}

// manyNICs is a WEFT_NICS value of n distinct names.
func manyNICs(n int) string {
	nics := make([]string, n)
	for i := range nics {
		nics[i] = fmt.Sprintf("eth%d", i)
	}
	return strings.Join(nics, ",")
}

// TestOptionsCheck: RunWith refuses a field out of its range, naming it.
func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		o     Options
		field string
	}{
		{Options{Transport: "tcp"}, "Transport"},
		{Options{Sysmon: "idle"}, "Sysmon"},
		{Options{BindTo: "socket"}, "BindTo"},
		{Options{NodeCPUs: -1}, "NodeCPUs"},
		{Options{Timeout: -time.Second}, "Timeout"},
		{Options{Eager: -1}, "Eager"},
		{Options{NICs: []string{"eth0", ""}}, "NICs"},
		{Options{NICs: []string{"eth0", "eth0"}}, "NICs"},
		{Options{NICs: []string{"eth0"}, Bind: "10.0.0.1"}, "NICs"},
		{Options{VerbsDevices: []string{"rxe0", "rxe0"}}, "VerbsDevices"},
		{Options{VerbsDevices: []string{""}}, "VerbsDevices"},
		{Options{VerbsPort: 256}, "VerbsPort"},
		{Options{UDPBatch: maxUDPBatch + 1}, "UDPBatch"},
		{Options{UDPBatch: -1}, "UDPBatch"},
		{Options{UDPMcast: "1"}, "UDPMcast"},
		{Options{VerbsGID: -1}, "VerbsGID"},
		{Options{SnapshotDir: "/nonexistent/weft-snapshots"}, "SnapshotDir"},
	} {
		err := RunWith(2, c.o, func(*Comm) error { return nil })
		if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "Options."+c.field) {
			t.Errorf("RunWith %+v: %v; want an ErrArg naming Options.%s", c.o, err, c.field)
		}
	}
}

// TestRunWithOptions: RunWith's options take effect, the environment's do
// not. A 32 KiB message is rendezvous by default between goroutines (the
// eager limit is one byte under the 16 KiB single-copy size), so its Isend
// cannot complete before the receive is posted; with Eager 64 KiB it goes
// eagerly and completes alone. The thresholds and the shared block follow
// the other fields.
func TestRunWithOptions(t *testing.T) {
	clearEnv(t)
	t.Setenv("WEFT_EAGER", "1000") // ignored by RunWith
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, c := range []struct {
		eager     int
		completes bool
	}{
		{0, false},
		{64 << 10, true},
	} {
		t.Run(fmt.Sprint("eager=", c.eager), func(t *testing.T) {
			posted := make(chan struct{})
			release := sync.OnceFunc(func() { close(posted) })
			err := RunWith(2, Options{Eager: c.eager, Timeout: 20 * time.Second}, func(cm *Comm) error {
				buf := make([]byte, 32<<10)
				if cm.Rank() == 1 {
					<-posted
					_, err := Recv(cm, buf, 0, 7)
					return err
				}
				defer release() // on an error, too: rank 1 must not wait forever
				r, err := Isend(cm, buf, 1, 7)
				if err != nil {
					return err
				}
				done := false
				for end := time.Now().Add(200 * time.Millisecond); !done && time.Now().Before(end); {
					if done, _, err = r.Test(); err != nil {
						return err
					}
				}
				if done != c.completes {
					return fmt.Errorf("Isend of 32 KiB with Eager %d complete before the receive: %v, want %v", c.eager, done, c.completes)
				}
				release()
				_, err = r.Wait()
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}

	err := RunWith(2, Options{Split: 100000, Direct: -1, Accumulate: 4096, NoShmColl: true, Timeout: time.Second}, func(c *Comm) error {
		w := c.w
		if w.splitMin != 100000 || w.directMin != 0 || w.accumulateMin != 4096 || c.sh != nil || w.timeout != time.Second {
			return fmt.Errorf("splitMin %d, directMin %d, accumulateMin %d, shared block %v, timeout %v",
				w.splitMin, w.directMin, w.accumulateMin, c.sh != nil, w.timeout)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Error(err)
	}
}

// TestRunLeavesSysmon: Run and RunWith leave the Go runtime's monitor
// thread alone unless Options.Sysmon says batch; Init (a launched rank)
// batches it by default.
func TestRunLeavesSysmon(t *testing.T) {
	clearEnv(t)
	calls := 0
	saved := sysmonBatch
	sysmonBatch = func() (int, error) { calls++; return 0, errors.New("not moved in this test") }
	t.Cleanup(func() { sysmonBatch = saved })

	barrier := func(c *Comm) error { return c.Barrier() }
	if err := Run(2, barrier); err != nil {
		t.Fatal(err)
	}
	if err := RunWith(2, Options{Sysmon: "normal"}, barrier); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("Run and RunWith without Sysmon batch moved sysmon (%d calls)", calls)
	}
	if err := RunWith(2, Options{Sysmon: "batch"}, barrier); err != nil || calls != 1 {
		t.Fatalf("RunWith Sysmon batch: %v, %d calls; want sysmon moved once", err, calls)
	}

	for _, v := range []string{"PMI_FD", "PMI_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"} {
		t.Setenv(v, "")
	}
	calls = 0
	w, err := InitWith(Options{})
	if err != nil {
		t.Fatalf("InitWith as a singleton: %v", err)
	}
	if err := w.Finalize(); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("InitWith with the default Sysmon: %d calls; want sysmon moved once", calls)
	}
}

// TestInitTimeoutFromEnv: WEFT_TIMEOUT=0 means no bound and spaces around a
// value are trimmed (OptionsFromEnv); Init, which hands the bound to PMI
// discovery, accepts what OptionsFromEnv accepts.
func TestInitTimeoutFromEnv(t *testing.T) {
	for _, v := range []string{"PMI_FD", "PMI_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMIX_RANK"} {
		t.Setenv(v, "")
	}
	for _, v := range []string{"0", " 30s"} {
		t.Setenv("WEFT_TIMEOUT", v)
		w, err := Init()
		if err != nil {
			t.Errorf("WEFT_TIMEOUT=%q: %v (OptionsFromEnv accepts it)", v, err)
			continue
		}
		if err := w.Finalize(); err != nil {
			t.Errorf("WEFT_TIMEOUT=%q: Finalize: %v", v, err)
		}
	}
}

// TestOptionsUDPBatchBound: UDPBatch's bound is the UDP device's.
func TestOptionsUDPBatchBound(t *testing.T) {
	if maxUDPBatch != udp.MaxBatch {
		t.Errorf("maxUDPBatch %d, udp.MaxBatch %d", maxUDPBatch, udp.MaxBatch)
	}
}

// TestEnvironmentDocs: the README says which variables are not fields of
// Options; every other variable its Environment section or docs/tuning.md
// documents is one OptionsFromEnv reads, every one it reads is documented,
// and the variables of the process-manager side (WEFT_PMI) are too.
func TestEnvironmentDocs(t *testing.T) {
	readme, err1 := os.ReadFile("../README.md")
	tuning, err2 := os.ReadFile("../docs/tuning.md")
	if err1 != nil || err2 != nil {
		t.Skipf("no README or docs/tuning.md beside the module: %v, %v", err1, err2)
	}
	name := regexp.MustCompile(`WEFT_[A-Z0-9_]+`)
	_, env, ok := strings.Cut(string(readme), "\n## Environment\n")
	claim := regexp.MustCompile(`Every variable but ([^.]*) is a field of\s+` + "`mpi.Options`").FindStringSubmatch(env)
	if !ok || claim == nil {
		t.Fatal("README has no Environment section saying which variables are not fields of mpi.Options")
	}
	notFields := map[string]bool{}
	for _, n := range name.FindAllString(claim[1], -1) {
		notFields[n] = true
	}
	read := map[string]bool{}
	for _, e := range envVars {
		read[e.name] = true
	}
	documented := name.FindAllString(env, -1)
	for _, row := range regexp.MustCompile("(?m)^\\| `(WEFT_[A-Z0-9_]+)").FindAllStringSubmatch(string(tuning), -1) {
		documented = append(documented, row[1])
	}
	seen := map[string]bool{}
	for _, n := range documented {
		if seen[n] {
			continue
		}
		seen[n] = true
		switch {
		case read[n] && notFields[n]:
			t.Errorf("%s is a field of Options, but the README says it is not", n)
		case !read[n] && !notFields[n]:
			t.Errorf("%s is documented, but neither a field of Options nor among the README's exceptions", n)
		}
	}
	for n := range read {
		if !seen[n] {
			t.Errorf("%s is read by OptionsFromEnv but in neither the README's Environment section nor docs/tuning.md's tables", n)
		}
	}
	if !seen["WEFT_PMI"] {
		t.Error("WEFT_PMI (internal/pmi) is not documented with the other variables")
	}
}

// TestOptionsFromEnvChecksOthers: a malformed WEFT_TRACE or WEFT_PROFILE,
// variables of other packages, fails Init and Run with the other
// variables, named once in the error (internal/trace no longer prints a
// bad level as well: TestInitQuietOnBadEnv); a well-formed one leaves
// Options alone.
func TestOptionsFromEnvChecksOthers(t *testing.T) {
	for _, c := range []struct {
		name, bad string
		good      []string
	}{
		{"WEFT_TRACE", "x", []string{"off", " 3", "0"}},
		{"WEFT_PROFILE", "bogus", []string{"cpu", "mem", "block", "mutex"}},
	} {
		clearEnv(t)
		t.Setenv(c.name, c.bad)
		_, err := OptionsFromEnv()
		if !errors.Is(err, ErrArg) || strings.Count(err.Error(), c.name) != 1 {
			t.Errorf("%s=%s: %v; want an ErrArg naming %s once", c.name, c.bad, err, c.name)
		}
		if err := Run(2, func(*Comm) error { return nil }); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), c.name+`="`+c.bad+`"`) {
			t.Errorf("Run with %s=%s: %v", c.name, c.bad, err)
		}
		for _, v := range c.good {
			t.Setenv(c.name, v)
			if o, err := OptionsFromEnv(); err != nil || !reflect.DeepEqual(o, Options{}) {
				t.Errorf("%s=%q: %+v, %v; want the zero Options", c.name, v, o, err)
			}
		}
	}
}
