package launch

import (
	"io"
	"testing"
)

// WEFT_BIND_TO in gorun's environment: the README says every WEFT_*
// variable of gorun's environment reaches every rank, and gorun takes
// WEFT_TRANSPORT from it as --transport's default. WEFT_BIND_TO is stripped
// (inheritedLauncherVar) and --bind-to stays auto, so WEFT_BIND_TO=none is
// silently ignored and WEFT_BIND_TO=bogus silently accepted.
func TestRevBindToFromEnvironment(t *testing.T) {
	t.Setenv("WEFT_BIND_TO", "none")
	o, err := ParseArgs([]string{"-n", "2", "prog"}, io.Discard)
	if err == nil && o.BindTo != "none" {
		t.Errorf("WEFT_BIND_TO=none in gorun's environment: --bind-to is %q, and the ranks never see the variable", o.BindTo)
	}
	t.Setenv("WEFT_BIND_TO", "bogus")
	if _, err := ParseArgs([]string{"-n", "2", "prog"}, io.Discard); err == nil {
		t.Errorf("WEFT_BIND_TO=bogus in gorun's environment accepted without a word")
	}
}
