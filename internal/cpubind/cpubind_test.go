package cpubind

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestAssign: shares of a machine's CPUs, holes in its list included.
func TestAssign(t *testing.T) {
	cpus := []int{0, 1, 2, 3, 8, 9, 10, 11}
	for _, c := range []struct {
		oneEach bool
		n       int
		want    string
	}{
		{false, 2, "0-3 8-11"},
		{false, 3, "0-1 2-3,8 9-11"},
		{false, 8, "0 1 2 3 8 9 10 11"},
		{false, 10, "0 0 1 2 3 8 8 9 10 11"}, // blocks of consecutive ranks
		{true, 3, "0 2 9"},
		{true, 1, "0"},
	} {
		var got []string
		for _, s := range Assign(cpus, c.oneEach, c.n) {
			got = append(got, List(s))
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("Assign(%v, oneEach %v, %d) = %s; want %s", cpus, c.oneEach, c.n, g, c.want)
		}
	}
}

// TestAssignNothing: with no CPUs (a cgroup or mask that lists none) or
// no ranks, Assign binds nothing instead of panicking.
func TestAssignNothing(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		n    int
	}{{nil, 2}, {[]int{}, 1}, {[]int{0, 1}, 0}, {[]int{0, 1}, -1}} {
		for _, oneEach := range []bool{false, true} {
			if sets := Assign(c.cpus, oneEach, c.n); sets != nil {
				t.Errorf("Assign(%v, oneEach %v, %d) = %v; want nil (unbound)", c.cpus, oneEach, c.n, sets)
			}
		}
	}
}

func TestList(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2}, "0-2"}, {[]int{0, 2, 3, 7}, "0,2-3,7"},
	} {
		if got := List(c.cpus); got != c.want {
			t.Errorf("List(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
}

// TestFor: a bad mode is refused naming it; none and a lone rank under
// auto are not bound; core binds a lone rank.
func TestFor(t *testing.T) {
	if _, _, err := For("cores", 2); err == nil || !strings.Contains(err.Error(), `"cores"`) {
		t.Errorf("For(cores): %v, want an error naming the mode", err)
	}
	allowed, err := Allowed()
	if err != nil || len(allowed) == 0 {
		t.Fatalf("Allowed: %v, %v", allowed, err)
	}
	for _, c := range []struct {
		mode  string
		n     int
		bound bool
	}{{"none", 2, false}, {"auto", 1, false}, {"core", 1, true}, {"auto", 2, true}} {
		sets, shared, err := For(c.mode, c.n)
		if err != nil || (sets != nil) != c.bound || c.bound && (len(sets) != c.n || shared != len(allowed)) {
			t.Errorf("For(%s, %d) = %v, %d, %v; want bound %v, shared %d", c.mode, c.n, sets, shared, err, c.bound, len(allowed))
		}
	}
}

// TestBindProcess binds every thread of the test process, the many that
// goroutines locked to threads make included, to one CPU, and back.
func TestBindProcess(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	var wg, locked sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		locked.Add(1)
		wg.Go(func() {
			runtime.LockOSThread() // a thread of its own, parked
			locked.Done()
			<-release
		})
	}
	defer func() { close(release); wg.Wait() }()
	locked.Wait()
	defer func() {
		if err := BindProcess(allowed); err != nil {
			t.Errorf("binding back to %v: %v", allowed, err)
		}
	}()
	one := allowed[len(allowed)-1:]
	if err := BindProcess(one); err != nil {
		t.Fatal(err)
	}
	tids, err := Threads()
	if err != nil || len(tids) < 9 {
		t.Fatalf("Threads: %v, %v; want at least 9", tids, err)
	}
	re := regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`)
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
		if err != nil {
			continue // gone since
		}
		if m := re.FindSubmatch(b); m == nil || string(m[1]) != List(one) {
			t.Errorf("thread %d may run on %s, want %s", tid, m, List(one))
		}
	}
}
