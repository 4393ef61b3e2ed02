package pmi

import (
	"errors"
	"slices"
	"testing"
)

func TestParseProcessMapping(t *testing.T) {
	for _, tc := range []struct {
		s    string
		size int
		want []int
	}{
		{"(vector,(0,1,4))", 4, []int{0, 0, 0, 0}}, // Slurm -n 4, one node
		{"(vector,(0,1,1))", 3, []int{0, 0, 0}},    // Hydra -n 3, one host
		{"(vector,(0,2,1))", 4, []int{0, 1, 0, 1}}, // Hydra round-robin, 2 hosts
		{"(vector,(0,2,2))", 4, []int{0, 0, 1, 1}}, // by slot
		{"(vector,(0,1,2),(1,1,1))", 5, []int{0, 0, 1, 0, 0}},
	} {
		got, err := ParseProcessMapping(tc.s, tc.size)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseProcessMapping(%q, %d) = %v, %v; want %v", tc.s, tc.size, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "(vector)", "(vector,(0,1))", "(vector,(0,0,0))", "(vector,(a,1,1))", "(vector,(0,1,1)", "vector,(0,1,1)"} {
		if _, err := ParseProcessMapping(bad, 4); !errors.Is(err, ErrProtocol) {
			t.Errorf("ParseProcessMapping(%q): %v, want ErrProtocol", bad, err)
		}
	}
}

func TestFormatProcessMapping(t *testing.T) {
	for _, tc := range []struct {
		nodes []int
		want  string
	}{
		{[]int{0, 0, 0, 0}, "(vector,(0,1,4))"},
		{[]int{0, 0, 1, 1}, "(vector,(0,2,2))"},
		{[]int{0, 1, 0, 1, 0}, "(vector,(0,2,1))"},
		{[]int{0, 0, 0, 1}, "(vector,(0,1,3),(1,1,1))"},
		{[]int{1, 0}, "(vector,(1,1,1),(0,1,1))"},
	} {
		got := FormatProcessMapping(tc.nodes)
		if got != tc.want {
			t.Errorf("FormatProcessMapping(%v) = %q, want %q", tc.nodes, got, tc.want)
		}
		back, err := ParseProcessMapping(got, len(tc.nodes))
		if err != nil || !slices.Equal(back, tc.nodes) {
			t.Errorf("round trip of %v: %v, %v", tc.nodes, back, err)
		}
	}
}
