package cpubind

import "testing"

// Assign is exported and For guards it against an empty CPU list, but a
// caller that does not (a cgroup or affinity that lists nothing) panics
// with an index out of range instead of getting no binding.
func TestRevAssignNoCPUs(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Assign(no CPUs, 2 ranks) panicked: %v; want nil sets (unbound)", r)
		}
	}()
	if sets := Assign(nil, false, 2); sets != nil && len(sets[0]) > 0 {
		t.Errorf("Assign(no CPUs) = %v", sets)
	}
}
