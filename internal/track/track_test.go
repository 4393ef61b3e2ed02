package track

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// line is the caller's line, for the sites a test expects.
func line() int {
	_, _, l, _ := runtime.Caller(1)
	return l
}

// TestLeaksInOrderWithSites: what is added and not removed is reported in
// the order it was made, each with the test's own line; a removed slot is
// reused and its old ID is ignored.
func TestLeaksInOrderWithSites(t *testing.T) {
	r := New()
	a, la := r.Add("a", 0), line()
	b := r.Add("b", 0)
	c, lc := r.Add("c", 0), line()
	r.Remove(b)
	r.Remove(b) // twice: ignored
	d, ld := r.Add("d", 0), line()
	if d != b {
		t.Errorf("Add after Remove: ID %d, want the freed %d", d, b)
	}
	if r.Len() != 3 {
		t.Errorf("Len %d, want 3", r.Len())
	}
	got := Report(r.Leaks())
	want := "3 resources leaked: a created at track_test.go:" + strconv.Itoa(la) +
		"; c created at track_test.go:" + strconv.Itoa(lc) + "; d created at track_test.go:" + strconv.Itoa(ld)
	if got != want {
		t.Errorf("report\n%s\nwant\n%s", got, want)
	}
	r.Remove(a)
	r.Remove(c)
	r.Remove(d)
	if r.Len() != 0 || Report(r.Leaks()) != "" {
		t.Errorf("after removing all: Len %d, report %q", r.Len(), Report(r.Leaks()))
	}
}

// TestSkip: a helper that adds on its caller's behalf names the caller.
func TestSkip(t *testing.T) {
	r := New()
	helper := func() ID { return r.Add("x", 1) }
	helper()
	l := line() - 1
	if s := r.Leaks()[0].String(); !strings.HasSuffix(s, ":"+strconv.Itoa(l)) {
		t.Errorf("leak %q, want line %d", s, l)
	}
}

// TestNil: a nil Registry is tracking off: nothing recorded, nothing
// allocated.
func TestNil(t *testing.T) {
	var r *Registry
	allocs := testing.AllocsPerRun(100, func() {
		r.Remove(r.Add("x", 0))
		r.Remove(r.AddUser("x", 0))
	})
	if allocs != 0 || r.Len() != 0 || r.Leaks() != nil {
		t.Errorf("nil Registry: %v allocations, Len %d, leaks %v", allocs, r.Len(), r.Leaks())
	}
}

// TestModule: the module path is read from this package's own name.
func TestModule(t *testing.T) {
	if module != "github.com/weft-hpc/weft/" {
		t.Errorf("module %q", module)
	}
	if !ours("github.com/weft-hpc/weft/mpi.Isend[...]", "/x/mpi/p2p.go") || ours("github.com/weft-hpc/weft/mpi.TestX", "/x/mpi/x_test.go") || ours("main.main", "/x/main.go") {
		t.Error("ours misjudges a frame")
	}
}
