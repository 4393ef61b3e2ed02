package mpi

import (
	"fmt"
	"maps"
	"testing"
)

// revObj has a field that is zero at the root: gob does not send it.
type revObj struct {
	A, B int
	M    map[string]int
}

// TestRevBcastObjStale: BcastObj "broadcasts root's *v into every rank's
// v". A rank whose v held something before must end with root's value,
// not a merge of the two: gob leaves fields it does not send (zero at the
// root) and map keys it does not name as they were.
func TestRevBcastObjStale(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(3, func(c *Comm) error {
		v := revObj{A: 0, B: 2, M: map[string]int{"root": 1}}
		if c.Rank() != 0 {
			v = revObj{A: 99, B: 99, M: map[string]int{"stale": 99}}
		}
		if err := c.BcastObj(&v, 0); err != nil {
			return err
		}
		if v.A != 0 || v.B != 2 || !maps.Equal(v.M, map[string]int{"root": 1}) {
			return fmt.Errorf("rank %d: BcastObj gave %+v, want root's {A:0 B:2 M:map[root:1]}", c.Rank(), v)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestRevRecvObjStale: RecvObj into a value that held something before,
// as BcastObj.
func TestRevRecvObjStale(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 1 {
			return c.SendObj(revObj{A: 0, B: 2}, 0, 3)
		}
		v := revObj{A: 99, B: 99, M: map[string]int{"stale": 99}}
		if _, err := c.RecvObj(&v, AnySource, AnyTag); err != nil {
			return err
		}
		if v.A != 0 || v.B != 2 || len(v.M) != 0 {
			return fmt.Errorf("RecvObj gave %+v, want the sent {A:0 B:2 M:map[]}", v)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
