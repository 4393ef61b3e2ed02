package mpi

import (
	"strings"
	"testing"
)

// Every WEFT_* variable a rank reads must be refused when malformed,
// naming it. WEFT_GSO, WEFT_UDP_BATCH and WEFT_UDP_MCAST are read by
// transport/udp only when a UDP device opens (udp.OpenFromEnv), bypassing
// OptionsFromEnv: in a job on shared memory (every gorun job on one host)
// a bad value is accepted without a word.
func TestRevEnvBypassesOptionsFromEnv(t *testing.T) {
	for _, kv := range []string{"WEFT_GSO=bogus", "WEFT_UDP_BATCH=0", "WEFT_UDP_MCAST=maybe"} {
		name, value, _ := strings.Cut(kv, "=")
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: OptionsFromEnv() error = %v; want one naming %s", kv, err, name)
			}
		})
	}
}
