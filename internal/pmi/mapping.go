package pmi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PMI_process_mapping tells which ranks share a node, in MPICH's format
//
//	(vector,(start_node,node_count,ranks_per_node),...)
//
// Each block puts ranks_per_node consecutive ranks on each of node_count
// consecutive nodes from start_node; the vector repeats cyclically until all
// ranks are placed. Seen in practice: Slurm -n 4 on one node (vector,(0,1,4));
// Hydra -n 3 on one host (vector,(0,1,1)); Hydra round-robin over 2 hosts
// (vector,(0,2,1)).

type mapBlock struct{ start, nodes, perNode int }

// ParseProcessMapping returns the node index of each of size ranks.
func ParseProcessMapping(s string, size int) ([]int, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: PMI_process_mapping %q: %s", ErrProtocol, clip(s), why)
	}
	if size <= 0 {
		return nil, bad("job size must be positive")
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(s), "(vector,")
	if !ok || !strings.HasSuffix(body, ")") {
		return nil, bad("want (vector,(start,count,per_node),...)")
	}
	body = strings.TrimSuffix(body, ")")
	var blocks []mapBlock
	for body != "" {
		inner, rest, ok := strings.Cut(strings.TrimPrefix(body, "("), ")")
		if !ok || !strings.HasPrefix(body, "(") {
			return nil, bad("unbalanced parentheses")
		}
		f := strings.Split(inner, ",")
		if len(f) != 3 {
			return nil, bad("a block needs three numbers")
		}
		var v [3]int
		for i, x := range f {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil || n < 0 || n > 1<<24 {
				return nil, bad("block field " + strconv.Quote(x) + " is not a small non-negative number")
			}
			v[i] = n
		}
		blocks = append(blocks, mapBlock{v[0], v[1], v[2]})
		body = strings.TrimPrefix(rest, ",")
	}
	if len(blocks) == 0 {
		return nil, bad("no blocks")
	}
	return expandMapping(blocks, size, bad)
}

func expandMapping(blocks []mapBlock, size int, bad func(string) error) ([]int, error) {
	nodes := make([]int, 0, size)
	for len(nodes) < size {
		before := len(nodes)
		for _, b := range blocks {
			for n := b.start; n < b.start+b.nodes; n++ {
				for range b.perNode {
					if len(nodes) == size {
						return nodes, nil
					}
					nodes = append(nodes, n)
				}
			}
		}
		if len(nodes) == before {
			return nil, bad("places no rank")
		}
	}
	return nodes, nil
}

// FormatProcessMapping encodes the node index of each rank (nodeOf[rank]) as
// a PMI_process_mapping value, the shortest cyclic vector that reproduces it
// when one exists among short ones.
func FormatProcessMapping(nodeOf []int) string {
	// Runs of consecutive ranks on one node, merged into blocks over
	// consecutive nodes with the same run length.
	var blocks []mapBlock
	for i := 0; i < len(nodeOf); {
		j := i
		for j < len(nodeOf) && nodeOf[j] == nodeOf[i] {
			j++
		}
		b := mapBlock{start: nodeOf[i], nodes: 1, perNode: j - i}
		if k := len(blocks) - 1; k >= 0 && blocks[k].perNode == b.perNode && blocks[k].start+blocks[k].nodes == b.start {
			blocks[k].nodes++
		} else {
			blocks = append(blocks, b)
		}
		i = j
	}
	// A round-robin placement gives the same block again and again: keep the
	// shortest prefix whose cyclic repetition yields the same placement.
	for p := 1; p < len(blocks) && p <= 16; p++ {
		got, err := expandMapping(blocks[:p], len(nodeOf), func(string) error { return ErrProtocol })
		if err == nil && slices.Equal(got, nodeOf) {
			blocks = blocks[:p]
			break
		}
	}
	var b strings.Builder
	b.WriteString("(vector")
	for _, x := range blocks {
		fmt.Fprintf(&b, ",(%d,%d,%d)", x.start, x.nodes, x.perNode)
	}
	b.WriteString(")")
	return b.String()
}

// setMapping fills Node and LocalRanks from a PMI_process_mapping value;
// a value it cannot parse leaves them unknown.
func (in *Info) setMapping(mapping string, rank, size int) {
	nodes, err := ParseProcessMapping(mapping, size)
	if err != nil {
		return
	}
	in.Node = nodes[rank]
	for r, n := range nodes {
		if n == in.Node {
			in.LocalRanks = append(in.LocalRanks, r)
		}
	}
}
