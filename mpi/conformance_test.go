package mpi

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
)

// celsius checks that named element types work like their base type.
type celsius float64

// value is rank r's element i in iteration it: small integers, so that
// floating-point sums and products are exact in any order and a reduction
// can be compared with a sequential reference bit for bit.
func value[T Elem](it, r, i int) T {
	v := (it*7+r*3+i)%5 + 1
	var z T
	rv := reflect.ValueOf(&z).Elem()
	switch rv.Kind() {
	case reflect.Complex64, reflect.Complex128:
		rv.SetComplex(complex(float64(v), float64(r%2)))
	case reflect.Float32, reflect.Float64:
		rv.SetFloat(float64(v))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		rv.SetInt(int64(v))
	default:
		rv.SetUint(uint64(v))
	}
	return z
}

func fill[T Elem](it, r, n int) []T {
	b := make([]T, n)
	for i := range b {
		b[i] = value[T](it, r, i)
	}
	return b
}

// refReduce folds every rank's contribution in rank order.
func refReduce[T Elem](it, size, n int, op Op) ([]T, error) {
	red, err := reducerFor[T](op, n)
	if err != nil {
		return nil, err
	}
	acc := fill[T](it, 0, n)
	for r := 1; r < size; r++ {
		red.reduce(asBytes(acc), asBytes(fill[T](it, r, n)))
	}
	return acc, nil
}

// conformanceCase runs one collective or point-to-point pattern of type T
// and compares with the sequential reference.
func conformanceCase[T Elem](c *Comm, it, kind, n, root int, op Op) error {
	p, me := c.Size(), c.Rank()
	mine := fill[T](it, me, n)
	fail := func(what string, got, want []T) error {
		return fmt.Errorf("iter %d %s n=%d root=%d op=%v type %T: got %v want %v", it, what, n, root, op, *new(T), trunc(got), trunc(want))
	}
	switch kind {
	case 0: // Bcast
		buf := slices.Clone(mine)
		if err := Bcast(c, buf, root); err != nil {
			return err
		}
		if want := fill[T](it, root, n); !slices.Equal(buf, want) {
			return fail("bcast", buf, want)
		}
	case 1: // Reduce
		recv := make([]T, n)
		want, err := refReduce[T](it, p, n, op)
		if err != nil {
			return nil // op undefined on T: covered by TestReduceErrors
		}
		if err := Reduce(c, mine, recv, op, root); err != nil {
			return err
		}
		if me == root && !slices.Equal(recv, want) {
			return fail("reduce", recv, want)
		}
	case 2: // Allreduce
		want, err := refReduce[T](it, p, n, op)
		if err != nil {
			return nil
		}
		recv := make([]T, n)
		if err := Allreduce(c, mine, recv, op); err != nil {
			return err
		}
		if !slices.Equal(recv, want) {
			return fail("allreduce", recv, want)
		}
	case 3: // Gather
		var recv []T
		if me == root {
			recv = make([]T, p*n)
		}
		if err := Gather(c, mine, recv, root); err != nil {
			return err
		}
		if me == root {
			for r := 0; r < p; r++ {
				if want := fill[T](it, r, n); !slices.Equal(recv[r*n:(r+1)*n], want) {
					return fail(fmt.Sprintf("gather block %d", r), recv[r*n:(r+1)*n], want)
				}
			}
		}
	case 4: // Scatter
		var send []T
		if me == root {
			send = fill[T](it, root, p*n)
		}
		recv := make([]T, n)
		if err := Scatter(c, send, recv, root); err != nil {
			return err
		}
		if want := fill[T](it, root, p*n)[me*n : (me+1)*n]; !slices.Equal(recv, want) {
			return fail("scatter", recv, want)
		}
	case 5: // Allgather
		recv := make([]T, p*n)
		if err := Allgather(c, mine, recv); err != nil {
			return err
		}
		for r := 0; r < p; r++ {
			if want := fill[T](it, r, n); !slices.Equal(recv[r*n:(r+1)*n], want) {
				return fail(fmt.Sprintf("allgather block %d", r), recv[r*n:(r+1)*n], want)
			}
		}
	case 6: // Alltoall: block j of rank r's send is fill(it, r*p+j)
		send := make([]T, 0, p*n)
		for j := 0; j < p; j++ {
			send = append(send, fill[T](it, me*p+j, n)...)
		}
		recv := make([]T, p*n)
		if err := Alltoall(c, send, recv); err != nil {
			return err
		}
		for r := 0; r < p; r++ {
			if want := fill[T](it, r*p+me, n); !slices.Equal(recv[r*n:(r+1)*n], want) {
				return fail(fmt.Sprintf("alltoall block %d", r), recv[r*n:(r+1)*n], want)
			}
		}
	case 7: // ring shift with Sendrecv
		recv := make([]T, n)
		st, err := Sendrecv(c, mine, (me+1)%p, it, recv, (me-1+p)%p, it)
		if err != nil {
			return err
		}
		if want := fill[T](it, (me-1+p)%p, n); !slices.Equal(recv, want) || st.Count != n || st.Source != (me-1+p)%p {
			return fail(fmt.Sprintf("sendrecv (status %+v)", st), recv, want)
		}
	case 8: // everyone sends 3 tagged messages to root, which receives with wildcards
		if me != root {
			for k := 0; k < 3; k++ {
				if err := Send(c, fill[T](it+k, me, n), root, 100+k); err != nil {
					return err
				}
			}
			// Wildcard receives at root would take the next pattern's
			// messages (as MPI allows): hold senders back until it is done.
			return c.Barrier()
		}
		next := make([]int, p) // per sender, next tag expected: order must hold
		for m := 0; m < 3*(p-1); m++ {
			buf := make([]T, n)
			st, err := Recv(c, buf, AnySource, AnyTag)
			if err != nil {
				return err
			}
			k := st.Tag - 100
			if k != next[st.Source] {
				return fmt.Errorf("iter %d: from %d got tag %d before tag %d: order broken", it, st.Source, st.Tag, 100+next[st.Source])
			}
			next[st.Source]++
			if want := fill[T](it+k, st.Source, n); !slices.Equal(buf, want) {
				return fail("anysource", buf, want)
			}
		}
		return c.Barrier()
	}
	return nil
}

func trunc[T any](s []T) []T { return s[:min(len(s), 8)] }

// sizes cover zero, one, odd counts not divisible by the rank count, and
// counts large enough for rendezvous and the large-message algorithms.
var sizes = []int{0, 1, 3, 7, 100, 1001, 9000, 70000}

func runConformance(t *testing.T, n, iters int, seed uint64) (repaired uint64) {
	t.Helper()
	var mu sync.Mutex
	err := Run(n, func(c *Comm) error {
		defer func() {
			st, rd := c.World().lc.Stats(), c.World().lc.RDMAStats()
			mu.Lock()
			// Repairs: lapi's retransmissions and discarded duplicates,
			// and the RDMA transfers' redrives and dropped stale or
			// duplicate packets.
			repaired += st.Retransmits + st.Duplicates + rd.Redrives + rd.Engine.Duplicates + rd.Engine.Stale
			mu.Unlock()
		}()
		rng := rand.New(rand.NewPCG(seed, uint64(n))) // same draws on every rank
		for it := 0; it < iters; it++ {
			kind, size := rng.IntN(9), sizes[rng.IntN(len(sizes))]
			root, op := rng.IntN(n), Op(rng.IntN(4))
			var err error
			switch rng.IntN(6) {
			case 0:
				err = conformanceCase[int32](c, it, kind, size, root, op)
			case 1:
				err = conformanceCase[float64](c, it, kind, size, root, op)
			case 2:
				err = conformanceCase[uint8](c, it, kind, size, root, op)
			case 3:
				err = conformanceCase[complex128](c, it, kind, size, root, op)
			case 4:
				err = conformanceCase[int](c, it, kind, size, root, op)
			case 5:
				err = conformanceCase[celsius](c, it, kind, size, root, op)
			}
			if err != nil {
				return err
			}
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatalf("n=%d: %v", n, err)
	}
	return repaired
}

// TestConformance checks every collective and point-to-point pattern
// against a sequential reference for 1 to 9 ranks.
func TestConformance(t *testing.T) {
	iters := 60
	if testing.Short() {
		iters = 15
	}
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runConformance(t, n, iters, 1) })
	}
}

// TestConformanceFaulty is TestConformance over a network that drops,
// reorders, duplicates and corrupts frames (WEFT_FAULTS on the in-process
// device): lapi's reliability must make the results identical.
func TestConformanceFaulty(t *testing.T) {
	t.Setenv("WEFT_FAULTS", "loss=0.05,reorder=0.1,dup=0.02,corrupt=0.01,seed=3")
	iters := 25
	if testing.Short() {
		iters = 16 // enough traffic that the faults always bite, even under -race on a loaded machine
	}
	for _, n := range []int{2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if fixed := runConformance(t, n, iters, 2); fixed == 0 {
				t.Fatal("no retransmission or duplicate seen: the faults were not injected")
			} else {
				t.Logf("%d retransmissions and duplicates repaired", fixed)
			}
		})
	}
}
