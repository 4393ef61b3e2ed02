package launch

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/internal/pmi"
)

// TestExitWithoutFinalize: a rank that exits 0 after joining the job but
// without finalizing fails the job, and the report names the call the
// program left out, World.Finalize (PMI is gorun's business, not the
// program's).
func TestExitWithoutFinalize(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("no true(1) to exit 0: %v", err)
	}
	j := &job{}
	for _, phase := range []pmi.Phase{pmi.PhaseInitialized, pmi.PhaseInFence, pmi.PhaseLost} {
		how, code := j.judge(&rank{state: cmd.ProcessState}, phase)
		if code == 0 || !strings.Contains(how, "without calling World.Finalize") {
			t.Errorf("exit 0 in phase %v: %q, exit status %d; want a failure naming World.Finalize", phase, how, code)
		}
	}
}
