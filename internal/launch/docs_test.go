package launch

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeListsWhatExists: the README's layout lists only examples and
// devices that are in the tree, and promises no gorun flag or transport
// that gorun refuses.
func TestReadmeListsWhatExists(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Skipf("no README beside the module: %v", err)
	}
	m := regexp.MustCompile(`(?m)^examples/\s+small programs:? \(?([^)\n]*)\)?$`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README's layout has no examples/ line")
	}
	for _, name := range strings.Split(string(m[1]), ",") {
		if st, err := os.Stat(filepath.Join("../../examples", strings.TrimSpace(name))); err != nil || !st.IsDir() {
			t.Errorf("README lists example %q, which is not in examples/", strings.TrimSpace(name))
		}
	}
	for _, absent := range []string{"inproc-test", "allreduce, one-sided", "one-sided windows\n"} {
		if strings.Contains(string(readme), absent) {
			t.Errorf("README promises %q, which does not exist", absent)
		}
	}
}
