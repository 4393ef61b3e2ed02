package shmcoll

// The collectives. Each moves at most SlotLen bytes per member (all the
// blocks of Scatter and Alltoall count); a failure is the Host's wait's
// error or a disagreement on the sizes.

// Tags are the Host's tags of the collectives (Config.Tags), handed back
// to Host.Wait for its reports.
type Tags struct {
	Barrier, Allreduce, Reduce, Bcast, Gather, Allgather, Scatter, Alltoall int
}

// Barrier: every member stamps the round and waits for the others'.
func (g *Group) Barrier() error {
	if err := g.usable(); err != nil {
		return err
	}
	k := g.start()
	if err := g.wait(k, -1, "Barrier (shared memory)", g.tags.Barrier); err != nil {
		return err
	}
	g.synced = k
	return nil
}

// exchange publishes data and waits for every member's part of the
// round.
func (g *Group) exchange(data []byte, op string, tag int) (uint32, error) {
	if err := g.usable(); err != nil {
		return 0, err
	}
	k, err := g.publish(data, op, tag)
	if err == nil {
		err = g.wait(k, -1, op, tag)
	}
	if err != nil {
		return k, err
	}
	g.synced = k
	return k, nil
}

// Allreduce: every member publishes send and reduces all the parts in
// member order with reduce (dst = dst ∘ src, dst holding the lower
// members' part), so that every member computes the same result bit for
// bit. recv may be send.
func (g *Group) Allreduce(send, recv []byte, reduce func(dst, src []byte)) error {
	k, err := g.exchange(send, "Allreduce (shared memory)", g.tags.Allreduce)
	if err != nil {
		return err
	}
	return g.combine(k, recv, reduce)
}

// combine reduces round k's parts, in member order, into recv.
func (g *Group) combine(k uint32, recv []byte, reduce func(dst, src []byte)) error {
	if err := g.sizes(k, len(recv), -1); err != nil {
		return err
	}
	j := k & 1
	copy(recv, g.data[0][j][:len(recv)])
	for m := 1; m < len(g.data); m++ {
		reduce(recv, g.data[m][j][:len(recv)])
	}
	return nil
}

// toRoot publishes data and, at root, waits for every member's part of
// the round. It reports the round and whether this member is root (and
// so has the parts to read).
func (g *Group) toRoot(data []byte, root int, op string, tag int) (uint32, bool, error) {
	if err := g.usable(); err != nil {
		return 0, false, err
	}
	k, err := g.publish(data, op, tag)
	if err != nil || g.me != root {
		return k, false, err
	}
	if err := g.wait(k, -1, op, tag); err != nil {
		return k, false, err
	}
	g.synced = k
	return k, true, nil
}

// fromRoot: root publishes data; the others stamp the round (they have
// started it) and wait for root's part, which must have n bytes. It
// reports the round and whether this member is not root (and so has
// root's part to read).
func (g *Group) fromRoot(data []byte, n, root int, op string, tag int) (uint32, bool, error) {
	if err := g.usable(); err != nil {
		return 0, false, err
	}
	if g.me == root {
		k, err := g.publish(data, op, tag)
		return k, false, err
	}
	k := g.start()
	if err := g.wait(k, root, op, tag); err != nil {
		return k, false, err
	}
	if err := g.sizes(k, n, root); err != nil {
		return k, false, err
	}
	return k, true, nil
}

// Reduce: root reduces every member's send, in member order, into recv.
func (g *Group) Reduce(send, recv []byte, reduce func(dst, src []byte), root int) error {
	k, mine, err := g.toRoot(send, root, "Reduce (shared memory)", g.tags.Reduce)
	if !mine {
		return err
	}
	return g.combine(k, recv[:len(send)], reduce)
}

// Bcast: every member copies root's b.
func (g *Group) Bcast(b []byte, root int) error {
	k, read, err := g.fromRoot(b, len(b), root, "Bcast (shared memory)", g.tags.Bcast)
	if read {
		copy(b, g.data[root][k&1][:len(b)])
	}
	return err
}

// Gather: root copies every member's send into recv.
func (g *Group) Gather(send, recv []byte, root int) error {
	k, mine, err := g.toRoot(send, root, "Gather (shared memory)", g.tags.Gather)
	if !mine {
		return err
	}
	return g.collect(k, recv, len(send))
}

// Allgather: every member publishes send and copies every part in.
func (g *Group) Allgather(send, recv []byte) error {
	k, err := g.exchange(send, "Allgather (shared memory)", g.tags.Allgather)
	if err != nil {
		return err
	}
	return g.collect(k, recv, len(send))
}

// collect copies round k's parts, n bytes each, into recv in member order.
func (g *Group) collect(k uint32, recv []byte, n int) error {
	if err := g.sizes(k, n, -1); err != nil {
		return err
	}
	for m := range g.data {
		copy(recv[m*n:(m+1)*n], g.data[m][k&1][:n])
	}
	return nil
}

// Scatter: root publishes all the blocks; each member copies its own.
func (g *Group) Scatter(send, recv []byte, root int) error {
	n := len(recv)
	var blocks []byte
	if g.me == root {
		blocks = send[:len(g.data)*n]
	}
	k, read, err := g.fromRoot(blocks, len(g.data)*n, root, "Scatter (shared memory)", g.tags.Scatter)
	switch {
	case read:
		copy(recv, g.data[root][k&1][g.me*n:])
	case err == nil:
		copy(recv, send[g.me*n:]) // root's own block
	}
	return err
}

// Alltoall: every member publishes its blocks and copies block me of
// every member's.
func (g *Group) Alltoall(send, recv []byte) error {
	k, err := g.exchange(send, "Alltoall (shared memory)", g.tags.Alltoall)
	if err != nil {
		return err
	}
	if err := g.sizes(k, len(send), -1); err != nil {
		return err
	}
	n := len(send) / len(g.data)
	for m := range g.data {
		copy(recv[m*n:(m+1)*n], g.data[m][k&1][g.me*n:(g.me+1)*n])
	}
	return nil
}
