// Package track records live resources with the place in the user's code
// that made them, so that a rank can name every one it still holds when it
// finishes (WEFT_TRACK, mpi.Options.Track): "Irecv request (from rank 1
// tag 7) created at main.go:42".
//
// A Registry is one world's (mpi's) or one context's (lapi's) record. The
// layers hold a *Registry that is nil when tracking is off: every method
// of a nil Registry returns at once, so the only cost of tracking off is a
// pointer test at each creation and release, and callers test the pointer
// themselves before they build a description. Add and Remove are O(1)
// under one mutex, with a free list of slots; the creation site is the
// call stack's program counters, turned into file:line only when a report
// asks for it.
package track

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// ID names a tracked resource in its Registry; 0 is none (tracking off,
// or a resource not tracked), which Remove ignores.
type ID uint32

// depth is how many frames above a creation are kept: enough to get from
// the layer that tracks (hal's TPT, under lapi, under mpi's generic
// wrappers) out to the user's call.
const depth = 12

// Registry is a set of live resources, each with a description and the
// stack that made it. Safe for concurrent use. A nil *Registry is
// tracking off.
type Registry struct {
	mu    sync.Mutex
	slots []entry
	free  []ID
	seq   uint64
	n     int
}

type entry struct {
	what string
	seq  uint64 // creation order; 0: a free slot
	npc  int
	pc   [depth]uintptr
}

// New returns an empty Registry.
func New() *Registry { return &Registry{} }

// Add records a live resource described by what ("window of 100 int32"),
// made by the caller's caller's ... skip frames up: skip 0 is the function
// that calls Add. It returns the ID to Remove it by; a nil Registry
// returns 0.
func (r *Registry) Add(what string, skip int) ID {
	if r == nil {
		return 0
	}
	var e entry
	e.what = what
	e.npc = runtime.Callers(skip+2, e.pc[:])
	r.mu.Lock()
	r.seq++
	e.seq = r.seq
	var id ID
	if n := len(r.free); n > 0 {
		id = r.free[n-1]
		r.free = r.free[:n-1]
		r.slots[id-1] = e
	} else {
		r.slots = append(r.slots, e)
		id = ID(len(r.slots))
	}
	r.n++
	r.mu.Unlock()
	return id
}

// AddUser is Add for a resource the user may make directly or weft may
// make for itself (a memory registration): it records the resource only
// when the function skip frames up, the one that made it, is outside
// weft (or in a test file), and returns 0 otherwise. weft's own ones are
// released with, or reported as, the resource they serve.
func (r *Registry) AddUser(what string, skip int) ID {
	if r == nil {
		return 0
	}
	pc, file, _, ok := runtime.Caller(skip + 1)
	if ok && ours(funcName(pc), file) {
		return 0
	}
	return r.Add(what, skip+1)
}

// Remove forgets the resource id names. A 0 id, a nil Registry, or an id
// removed already are ignored.
func (r *Registry) Remove(id ID) {
	if r == nil || id == 0 {
		return
	}
	r.mu.Lock()
	if int(id) <= len(r.slots) && r.slots[id-1].seq != 0 {
		r.slots[id-1] = entry{}
		r.free = append(r.free, id)
		r.n--
	}
	r.mu.Unlock()
}

// Len is how many resources are live; 0 for a nil Registry.
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Leak is a resource still live, as a report names it.
type Leak struct {
	What string // the description given to Add
	// File and Line are the user's call that made it: the first frame
	// outside weft, or in a weft test file; the first frame recorded
	// when every one was weft's (File then weft's own). Empty and 0 when
	// no stack was recorded.
	File string
	Line int
}

// String is "what created at file:line", with the file's base name.
func (l Leak) String() string {
	if l.File == "" {
		return l.What
	}
	return fmt.Sprintf("%s created at %s:%d", l.What, filepath.Base(l.File), l.Line)
}

// Leaks returns the live resources in the order they were made; nil for
// a nil Registry.
func (r *Registry) Leaks() []Leak {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	live := make([]entry, 0, r.n)
	for _, e := range r.slots {
		if e.seq != 0 {
			live = append(live, e)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(live, func(a, b entry) int { return int(a.seq - b.seq) })
	leaks := make([]Leak, len(live))
	for i, e := range live {
		leaks[i] = Leak{What: e.what}
		leaks[i].File, leaks[i].Line = site(e.pc[:e.npc])
	}
	return leaks
}

// Report is the leaks as one line, "N resources leaked: a; b", or "" when
// there are none.
func Report(leaks []Leak) string {
	if len(leaks) == 0 {
		return ""
	}
	var b strings.Builder
	noun := "resources"
	if len(leaks) == 1 {
		noun = "resource"
	}
	fmt.Fprintf(&b, "%d %s leaked: ", len(leaks), noun)
	for i, l := range leaks {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.String())
	}
	return b.String()
}

// site is the user's frame of a recorded stack (see Leak).
func site(pcs []uintptr) (string, int) {
	if len(pcs) == 0 {
		return "", 0
	}
	frames := runtime.CallersFrames(pcs)
	var first runtime.Frame
	for i := 0; ; i++ {
		f, more := frames.Next()
		if i == 0 {
			first = f
		}
		if !ours(f.Function, f.File) && !strings.HasPrefix(f.Function, "runtime.") {
			return f.File, f.Line
		}
		if !more {
			break
		}
	}
	return first.File, first.Line
}

// module is weft's import path with a trailing slash, taken from this
// package's own: "github.com/weft-hpc/weft/".
var module = func() string {
	name := funcName(pcOf())
	i := strings.Index(name, "internal/track.")
	if i < 0 {
		return "\x00" // matches nothing: every frame is the user's
	}
	return name[:i]
}()

// pcOf is a function of this package, whose name gives the module path.
func pcOf() uintptr {
	pc, _, _, _ := runtime.Caller(0)
	return pc
}

func funcName(pc uintptr) string {
	if f := runtime.FuncForPC(pc); f != nil {
		return f.Name()
	}
	return ""
}

// ours reports whether a frame is weft's own code: a function of the
// module outside its test files (a weft test calling mpi is the user).
func ours(function, file string) bool {
	return strings.HasPrefix(function, module) && !strings.HasSuffix(file, "_test.go")
}
