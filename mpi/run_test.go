package mpi

import (
	"errors"
	"testing"
)

func TestRunPingPong(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		buf := make([]int64, 4)
		if c.Rank() == 0 {
			for i := range buf {
				buf[i] = int64(i * 10)
			}
			if err := Send(c, buf, 1, 7); err != nil {
				return err
			}
			st, err := Recv(c, buf, 1, 8)
			if err != nil {
				return err
			}
			if st.Source != 1 || st.Tag != 8 || st.Count != 4 || buf[3] != 31 {
				t.Errorf("rank 0 got %+v %v", st, buf)
			}
			return nil
		}
		st, err := Recv(c, buf, 0, 7)
		if err != nil {
			return err
		}
		if st.Count != 4 || buf[3] != 30 {
			t.Errorf("rank 1 got %+v %v", st, buf)
		}
		buf[3]++
		return Send(c, buf, 0, 8)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunAllreduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8} {
		err := Run(n, func(c *Comm) error {
			v := []float64{float64(c.Rank() + 1)}
			if err := Allreduce(c, v, v, Sum); err != nil {
				return err
			}
			if want := float64(n * (n + 1) / 2); v[0] != want {
				t.Errorf("n=%d rank %d: %v want %v", n, c.Rank(), v[0], want)
			}
			return c.Barrier()
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestRunRankFails(t *testing.T) {
	boom := errors.New("boom")
	err := Run(3, func(c *Comm) error {
		if c.Rank() == 1 {
			return boom
		}
		buf := make([]byte, 1)
		_, err := Recv(c, buf, 1, 0)
		if !errors.Is(err, ErrPeerFailed) {
			t.Errorf("rank %d: recv from dead rank: %v", c.Rank(), err)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want boom", err)
	}
}
