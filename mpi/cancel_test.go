package mpi

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestCancel: a receive no message matched is taken back, and the message
// then goes to the next receive; a matched receive and a send are not.
func TestCancel(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			q, err := Irecv(c, make([]int32, 2), 1, 5)
			if err != nil {
				return err
			}
			if err := q.Cancel(); err != nil {
				return err
			}
			st, err := q.Wait()
			if err != nil || !st.Cancelled {
				return fmt.Errorf("cancelled receive: %+v, %v", st, err)
			}
			if err := Send(c, []int32{1}, 1, 6); err != nil { // go ahead
				return err
			}
			got := make([]int32, 2)
			st, err = Recv(c, got, 1, 5)
			if err != nil || st.Cancelled || got[1] != 42 {
				return fmt.Errorf("receive after the cancel: %+v %v %v", st, got, err)
			}
			// Matched already: Cancel leaves it.
			q, err = Irecv(c, got, 1, 7)
			if err != nil {
				return err
			}
			if _, err := Recv(c, make([]int32, 1), 1, 8); err != nil { // 7 was sent before 8
				return err
			}
			if _, _, err := q.Test(); err != nil {
				return err
			}
			_ = q.Cancel()
			if st, err := q.Wait(); err != nil || st.Cancelled || got[0] != 7 {
				return fmt.Errorf("Cancel of a matched receive: %+v %v %v", st, got, err)
			}
			return nil
		}
		if _, err := Recv(c, make([]int32, 1), 0, 6); err != nil {
			return err
		}
		if err := Send(c, []int32{41, 42}, 0, 5); err != nil {
			return err
		}
		q, err := Isend(c, []int32{7, 7}, 0, 7)
		if err != nil {
			return err
		}
		_ = q.Cancel()
		if st, err := q.Wait(); err != nil || st.Cancelled {
			return fmt.Errorf("Cancel of a send: %+v %v", st, err)
		}
		return Send(c, []int32{8}, 0, 8)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTestAnyWaitSome: TestAny reports nothing until a request completes,
// then that one; WaitSome returns every completed request.
func TestTestAnyWaitSome(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(3, func(c *Comm) error {
		if c.Rank() != 0 {
			if _, err := Recv(c, make([]byte, 0), 0, 1); err != nil { // rank 0 has looked
				return err
			}
			return Send(c, []int64{int64(c.Rank())}, 0, 2)
		}
		bufs := [][]int64{make([]int64, 1), make([]int64, 1)}
		reqs := make([]*Request, 2)
		for i := range reqs {
			var err error
			if reqs[i], err = Irecv(c, bufs[i], i+1, 2); err != nil {
				return err
			}
		}
		if i, done, _, err := TestAny(reqs...); done || i != -1 || err != nil {
			return fmt.Errorf("TestAny before any message: %d %v %v", i, done, err)
		}
		if i, done, _, _ := TestAny(nil, nil); !done || i != -1 {
			return fmt.Errorf("TestAny of nil requests: %d %v", i, done)
		}
		for r := 1; r <= 2; r++ {
			if err := Send(c, []byte{}, r, 1); err != nil {
				return err
			}
		}
		var seen []int
		for len(seen) < 2 {
			idx, sts, errs := WaitSome(reqs...)
			if len(idx) == 0 {
				return errors.New("WaitSome returned nothing with requests pending")
			}
			for k, i := range idx {
				if errs[k] != nil || sts[k].Source != i+1 || bufs[i][0] != int64(i+1) {
					return fmt.Errorf("WaitSome: request %d: %+v %v %v", i, sts[k], errs[k], bufs[i])
				}
				reqs[i] = nil
				seen = append(seen, i)
			}
		}
		slices.Sort(seen)
		if !slices.Equal(seen, []int{0, 1}) {
			return fmt.Errorf("WaitSome saw %v", seen)
		}
		if idx, _, _ := WaitSome(reqs...); idx != nil {
			return fmt.Errorf("WaitSome of nil requests: %v", idx)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBcastObj: a value with a map and a slice from rank 1 reaches every
// rank whole; a value root cannot encode fails the call everywhere.
func TestBcastObj(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	type config struct {
		Name  string
		Steps []int
		Knobs map[string]float64
	}
	err := Run(3, func(c *Comm) error {
		var v config
		if c.Rank() == 1 {
			v = config{Name: "heat", Steps: make([]int, 5000), Knobs: map[string]float64{"dt": 0.01}}
			v.Steps[4999] = 7
		}
		if err := c.BcastObj(&v, 1); err != nil {
			return err
		}
		if v.Name != "heat" || len(v.Steps) != 5000 || v.Steps[4999] != 7 || v.Knobs["dt"] != 0.01 {
			return fmt.Errorf("rank %d got %+v", c.Rank(), v.Name)
		}
		var f func()
		if err := c.BcastObj(&f, 0); err == nil {
			return fmt.Errorf("rank %d: BcastObj of a func: no error", c.Rank())
		}
		if err := c.BcastObj(&v, 3); !errors.Is(err, ErrRank) {
			return fmt.Errorf("BcastObj from rank 3 of 3: %v", err)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}
