// Package deps_test enforces weft's layering, as Go's own go/build
// deps_test.go does for the standard library: every package in the module
// may import only what its row in layers allows, so that dependencies point
// downward (mpi → lapi → stripe → hal ← transport/*) and a lower layer never
// imports a higher one.
//
// The imports are read from the source with go/parser, every .go file of
// every package including its in-package test files and files behind build
// tags (verbs), so that a violation is caught even in code this machine does
// not build. External test packages (package x_test) are not checked: they
// are separate packages, and importing a higher layer from one is the
// standard way for a lower layer's tests to run against a real device.
package deps_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// rule says what the packages matching pkg may import.
//
// Patterns are module-relative ("hal", "internal/trace"), with "/..." for a
// folder and everything below it; "." is the module root. In allow, "std"
// is the standard library, "C" is cgo, a path whose first element has a dot
// is another module ("golang.org/x/sys/..."), and a leading "!" forbids what
// a later, wider pattern would allow. A package may always import packages
// below its own rule's folder.
type rule struct {
	pkg   string
	allow []string
}

// layers is the table. The first row whose pkg matches a package applies, so
// narrow rows come before wide ones. A package no row matches fails the test:
// a new package needs a deliberate place in the layering.
var layers = []rule{
	// hal is the bottom layer: the standard library and CPU feature
	// detection for the CRC32C choice, nothing of weft.
	// internal/track, a std-only leaf, records what hal's tables and the
	// devices hold for a leak report (WEFT_TRACK).
	{"hal/...", []string{"std", "github.com/klauspost/cpuid/v2", "internal/track", "internal/crc32c"}},

	// Leaves used from many layers.
	{"internal/trace", []string{"std"}},
	// CRC-32C for hal's frames: AVX-512 detection from x/sys/cpu.
	{"internal/crc32c", []string{"std", "golang.org/x/sys/cpu"}},
	{"internal/track", []string{"std"}},
	// The fault injector wraps a hal.Device (loss, reorder, duplication,
	// corruption) and so sits just above hal.
	{"internal/faults", []string{"std", "hal/..."}},
	{"internal/pmi/...", []string{"std"}},
	{"internal/simnet/...", []string{"std", "hal/...", "internal/faults"}},
	// gorun's logic. internal/trace is a std-only leaf, allowed so that
	// --trace can trace the launcher itself.
	{"internal/launch/...", []string{"std", "internal/pmi", "internal/trace", "internal/cpubind",
		"internal/profile", "github.com/pkg/profile", "golang.org/x/sys/..."}},
	// Per-rank profiles for gorun --profile, written by the rank itself.
	{"internal/profile", []string{"std", "github.com/pkg/profile"}},
	{"internal/osyield", []string{"std", "golang.org/x/sys/unix"}},
	{"internal/sysmon", []string{"std", "golang.org/x/sys/unix", "internal/cpubind"}},
	// Sharing a node's CPUs among its ranks: gorun binds the ranks it
	// starts here, mpi.Init a rank gorun started on another host.
	{"internal/cpubind", []string{"std", "golang.org/x/sys/unix"}},
	// vec's kernels need to know whether the processor has them.
	{"internal/vec", []string{"std", "github.com/klauspost/cpuid/v2"}},
	// Opening a rank's devices from the launcher's facts and the options
	// (shm, udp, verbs, a stripe of NICs): below mpi, beside lapi, so
	// that mpi names no device. Its set goes to lapi, which routes it.
	{"internal/devices", []string{"std", "hal/...", "route", "stripe", "transport/...",
		"internal/pmi", "internal/faults", "internal/trace", "internal/track"}},
	// Internal helpers not listed above (stats, resource tracker): leaves.
	{"internal/...", []string{"std", "internal/trace"}},

	// Devices implement hal. "hal/..." in a row takes in hal's test-support
	// packages (hal/haltest, the device conformance suite) too. lazyreg is
	// allowed because DESIGN.md has devices that register memory use the
	// registration cache.
	{"transport/verbs/...", []string{"std", "C", "hal/...", "lazyreg",
		"internal/faults", "internal/trace", "internal/lifecycle", "golang.org/x/sys/unix"}},
	// cpuid gives shm its cache-line size for the ring layout.
	{"transport/...", []string{"std", "hal/...", "lazyreg",
		"internal/faults", "internal/trace", "internal/track", "internal/lifecycle", "golang.org/x/sys/unix", "github.com/klauspost/cpuid/v2"}},

	{"lazyreg/...", []string{"std", "hal/...", "!internal/launch", "internal/..."}},
	{"stripe/...", []string{"std", "hal/...", "!internal/launch", "internal/..."}},
	// route, like stripe, is a device made of devices: beside it.
	{"route/...", []string{"std", "hal/...", "!internal/launch", "internal/..."}},
	{"lapi/...", []string{"std", "stripe", "route", "hal/...", "lazyreg", "!internal/launch", "internal/..."}},
	// Collectives through a block of memory the node's ranks map: memory
	// and rounds only; the waiting is its host's (mpi), through an
	// interface.
	{"shmcoll", []string{"std"}},
	// mpi uses hal only through lapi, and has its devices opened by
	// internal/devices: it imports neither hal nor any device.
	{"mpi/...", []string{"std", "lapi", "shmcoll", "!internal/launch", "internal/..."}},

	// Programs.
	{"cmd/gorun/...", []string{"std", "internal/launch"}},
	// netbench runs one side of a measurement between two hosts (network
	// namespaces): a program over lapi and the UDP device it measures.
	{"cmd/netbench", []string{"std", "hal/...", "lapi", "transport/udp", "internal/faults"}},
	// bench linestate pins its two threads to CPUs (x/sys/unix).
	{"bench/...", []string{"std", "mpi", "gonum.org/v1/plot/...", "golang.org/x/sys/unix"}},
	{"examples/...", []string{"std", "mpi"}},
}

// testFixtures may be imported by any in-package test file: the devices
// and the simulated network are how a protocol layer's tests run it for
// real (lapi's exactly-once tests over UDP sockets, its benchmarks over the
// in-process device) while the package itself stays above hal.
// hal is one too, for a test that opens or wraps a device by hand.
var testFixtures = []string{"transport/inproc", "transport/udp", "transport/shm",
	"internal/simnet", "internal/faults", "hal", "hal/haltest"}

func inTestFile(at string) bool { return strings.Contains(at, "_test.go:") }

// pkgImports is one package directory's imports.
type pkgImports struct {
	rel     string            // module-relative directory, "." for the root
	imports map[string]string // import path → "file:line" of its first import
}

func TestLayering(t *testing.T) {
	mod, err := modulePath("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := scan(".", mod)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 2 {
		t.Fatalf("found %d packages: the scan is not reading the tree", len(pkgs))
	}
	for _, v := range violations(mod, pkgs, layers) {
		t.Error(v)
	}
}

// TestCheckerCatchesViolations feeds the checker a fabricated module, so that
// TestLayering passing means the tree is clean, not that the checker is blind.
func TestCheckerCatchesViolations(t *testing.T) {
	const mod = "example.com/w"
	pkgs := []pkgImports{
		{"hal", map[string]string{
			"fmt":                           "hal/a.go:3",
			"github.com/klauspost/cpuid/v2": "hal/a.go:4",
			mod + "/hal/haltest":            "hal/x_test.go:5",
			mod + "/mpi":                    "hal/b.go:6",
		}},
		{"internal/pmi", map[string]string{"os": "p.go:1", mod + "/lapi": "internal/pmi/p_test.go:9"}},
		{"transport/udp", map[string]string{"C": "u.go:2", "golang.org/x/sys/unix": "u.go:3",
			mod + "/hal/haltest": "transport/udp/u_test.go:4"}},
		{"transport/verbs", map[string]string{"C": "v.go:2", mod + "/lazyreg": "v.go:3"}},
		{"lapi", map[string]string{mod + "/internal/trace": "l.go:1", mod + "/internal/launch": "l.go:2"}},
		{"mpi", map[string]string{mod + "/transport/inproc": "m.go:1", mod + "/lapi": "m.go:2",
			mod + "/hal": "m.go:3", mod + "/hal/haltest": "m_test.go:4", mod + "/route": "m_test.go:5"}},
		{"bench", map[string]string{"gonum.org/v1/plot/plotter": "b.go:1", "gonum.org/v1/gonum/mat": "b.go:2"}},
		{"examples/pi", map[string]string{mod + "/lapi": "examples/pi/main.go:7"}},
		{"newthing", map[string]string{"fmt": "newthing/n.go:1"}},
		{"stripe", map[string]string{mod + "/transport/inproc": "stripe/s.go:1", mod + "/transport/udp": "stripe/s_test.go:2"}},
	}
	got := violations(mod, pkgs, layers)
	if slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, "stripe/s_test.go:2") }) {
		t.Errorf("a test file's fixture import was reported: %v", got)
	}
	want := []string{
		"examples/pi/main.go:7: examples/pi imports example.com/w/lapi",
		"hal/b.go:6: hal imports example.com/w/mpi",
		"internal/pmi/p_test.go:9: internal/pmi imports example.com/w/lapi",
		"l.go:2: lapi imports example.com/w/internal/launch",
		"b.go:2: bench imports gonum.org/v1/gonum/mat",
		"u.go:2: transport/udp imports C",
		"newthing/n.go:1: no rule in deps_test.go covers package newthing",
		"stripe/s.go:1: stripe imports example.com/w/transport/inproc",
		"m.go:1: mpi imports example.com/w/transport/inproc",
		"m.go:3: mpi imports example.com/w/hal",
		"m_test.go:5: mpi imports example.com/w/route",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no violation reported for %q", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}

// TestScan checks the source reader on a small tree: it must read test
// files and tagged files, and skip what the go command skips.
func TestScan(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                  "module example.com/w\n\ngo 1.26\n",
		"hal/a.go":                "package hal\n\nimport \"example.com/w/lapi\"\n",
		"hal/a_test.go":           "package hal\n\nimport (\n\t\"testing\"\n\n\t\"example.com/w/mpi\"\n)\n",
		"hal/x_test.go":           "package hal_test\n\nimport \"example.com/w/lapi/lapitest\"\n",
		"hal/verbs.go":            "//go:build verbs && linux\n\npackage hal\n\nimport \"C\"\n",
		"hal/gen.go":              "//go:build ignore\n\npackage main\n\nimport \"example.com/w/mpi\"\n",
		"hal/testdata/x.go":       "package x\n\nimport \"example.com/w/mpi\"\n",
		"hal/.hidden/x.go":        "package x\n\nimport \"example.com/w/mpi\"\n",
		"hal/_old/x.go":           "package x\n\nimport \"example.com/w/mpi\"\n",
		"tools/go.mod":            "module example.com/tools\n",
		"tools/t.go":              "package tools\n\nimport \"example.com/w/mpi\"\n",
		"transport/udp/README.md": "not go",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mod, err := modulePath(filepath.Join(dir, "go.mod"))
	if err != nil || mod != "example.com/w" {
		t.Fatalf("modulePath = %q, %v", mod, err)
	}
	pkgs, err := scan(dir, mod)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || pkgs[0].rel != "hal" {
		t.Fatalf("scan found %+v, want only hal", pkgs)
	}
	var imports []string
	for p, at := range pkgs[0].imports {
		imports = append(imports, p+" @ "+at)
	}
	sort.Strings(imports)
	want := []string{
		"C @ hal/verbs.go:5",
		"example.com/w/lapi @ hal/a.go:3",
		"example.com/w/mpi @ hal/a_test.go:6",
		"testing @ hal/a_test.go:4",
	}
	if !slices.Equal(imports, want) {
		t.Errorf("imports:\n%s\nwant:\n%s", strings.Join(imports, "\n"), strings.Join(want, "\n"))
	}

	if err := os.WriteFile(filepath.Join(dir, "hal/broken.go"), []byte("package hal\nimport (\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scan(dir, mod); err == nil || !strings.Contains(err.Error(), "broken.go") {
		t.Errorf("scan of a broken file: error %v, want one naming broken.go", err)
	}
}

// violations returns one message per import that layers does not allow, and
// one per package no rule covers, sorted.
func violations(mod string, pkgs []pkgImports, rules []rule) []string {
	var out []string
	for _, p := range pkgs {
		r, ok := ruleFor(p.rel, rules)
		if !ok {
			for _, at := range p.imports {
				out = append(out, fmt.Sprintf("%s: no rule in deps_test.go covers package %s: add one to layers", at, p.rel))
				break
			}
			continue
		}
		for imp, at := range p.imports {
			if inTestFile(at) && slices.Contains(testFixtures, strings.TrimPrefix(imp, mod+"/")) {
				continue
			}
			if !allowed(mod, imp, r) {
				out = append(out, fmt.Sprintf("%s: %s imports %s, which its layer may not (%s may import: %s)",
					at, p.rel, imp, r.pkg, strings.Join(r.allow, ", ")))
			}
		}
	}
	sort.Strings(out)
	return out
}

// ruleFor returns the first rule whose pattern matches the package.
func ruleFor(rel string, rules []rule) (rule, bool) {
	for _, r := range rules {
		if match(r.pkg, rel) {
			return r, true
		}
	}
	return rule{}, false
}

// allowed reports whether a package under rule r may import imp.
func allowed(mod, imp string, r rule) bool {
	inModule := strings.HasPrefix(imp, mod+"/")
	local := strings.TrimPrefix(imp, mod+"/")
	if inModule && strings.HasSuffix(r.pkg, "/...") && match(r.pkg, local) {
		return true // a package of the same folder
	}
	for _, a := range r.allow {
		deny := strings.HasPrefix(a, "!")
		a = strings.TrimPrefix(a, "!")
		var m bool
		switch {
		case a == "std":
			m = isStd(imp)
		case a == "C":
			m = imp == "C"
		case isExternal(a):
			m = !inModule && match(a, imp)
		default:
			m = inModule && match(a, local)
		}
		if m {
			return !deny
		}
	}
	return false
}

// match reports whether path matches pattern: equal, or below it when the
// pattern ends in "/...".
func match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// isExternal reports whether an import path names another module: its first
// element has a dot, as the go command requires of module paths.
func isExternal(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return strings.Contains(first, ".")
}

// isStd reports whether p is a standard-library import path.
func isStd(p string) bool { return p != "C" && !isExternal(p) }

// modulePath reads the module path from a go.mod file.
func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			if p := strings.Trim(strings.TrimSpace(rest), `"`); p != "" {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// scan reads the imports of every Go package below root as the go command
// sees the tree: it skips testdata, vendor, folders and files starting with
// "." or "_", nested modules, and files that only build with the "ignore"
// tag. Other build tags are ignored: every file counts. Files of external
// test packages are skipped (see the package comment). A file that does not
// parse is an error naming it.
func scan(root, mod string) ([]pkgImports, error) {
	byDir := map[string]*pkgImports{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if onlyIgnore(f.Comments, f.Package) || strings.HasSuffix(f.Name.Name, "_test") {
			return nil
		}
		relFile, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		relFile = filepath.ToSlash(relFile)
		rel := path.Dir(relFile)
		pkg := byDir[rel]
		if pkg == nil {
			pkg = &pkgImports{rel: rel, imports: map[string]string{}}
			byDir[rel] = pkg
		}
		for _, is := range f.Imports {
			imp, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: bad import %s", relFile, is.Path.Value)
			}
			// Keep the first location, but a non-test one over a test one:
			// test files get the fixture allowance (testFixtures) and must
			// not lend it to the package's own code.
			if at, seen := pkg.imports[imp]; !seen || (inTestFile(at) && !strings.HasSuffix(relFile, "_test.go")) {
				pkg.imports[imp] = fmt.Sprintf("%s:%d", relFile, fset.Position(is.Pos()).Line)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	pkgs := make([]pkgImports, 0, len(byDir))
	for _, p := range byDir {
		pkgs = append(pkgs, *p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].rel < pkgs[j].rel })
	return pkgs, nil
}

// onlyIgnore reports whether a file's //go:build line can be satisfied only
// with the "ignore" tag: the convention for generators and scratch programs
// kept beside a package.
func onlyIgnore(comments []*ast.CommentGroup, pkgPos token.Pos) bool {
	for _, g := range comments {
		if g.Pos() >= pkgPos {
			break
		}
		for _, c := range g.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return false // the go command will report it
			}
			return !satisfiable(expr, "ignore")
		}
	}
	return false
}

// satisfiable reports whether some assignment of the expression's tags, with
// tag off, makes it true. Build lines name few tags, so trying every
// assignment is cheap.
func satisfiable(expr constraint.Expr, off string) bool {
	var tags []string
	expr.Eval(func(tag string) bool {
		if tag != off && !slices.Contains(tags, tag) {
			tags = append(tags, tag)
		}
		return false
	})
	if len(tags) > 16 {
		return true // too many to try; treat as buildable
	}
	for bits := 0; bits < 1<<len(tags); bits++ {
		if expr.Eval(func(tag string) bool {
			i := slices.Index(tags, tag)
			return i >= 0 && bits&(1<<i) != 0
		}) {
			return true
		}
	}
	return false
}
