package mpi

import "errors"

// Hierarchical (node-aware) collectives, as Open MPI's han and MPICH's
// node-aware collectives run them. When a communicator's members span
// nodes and some node has more than one of them, the collectives run in
// two levels: among the members on each node (the node's part, which goes
// through the node's shared block when the device has one, shmcoll.go),
// and among one member per node, its leader, over the network (the
// leaders, with the message algorithms of coll.go). A node's leader is its
// lowest member; the nodes are ordered by their leaders.
//
//	Barrier    fan in to the leader, leaders' barrier, fan out
//	Bcast      leaders' broadcast from the root's node, then each node's
//	           from its leader; a root that does not lead its node first
//	           broadcasts on its node, which so needs no second step
//	Reduce     each node reduces to its leader, the leaders to the root's
//	           node's, which sends the result on to a root that is not it
//	Allreduce  each node reduces to its leader (large ones whose reads
//	           are one copy: allreduces by direct reads, direct.go), the
//	           leaders allreduce, each node's leader broadcasts: every
//	           rank has its leader's bits, and the leaders agree bit for
//	           bit (coll.go's algorithms do: each pair reduces the same
//	           two operands)
//	Allgather  each node gathers to its leader, the leaders allgather the
//	           nodes' blocks, each node's leader broadcasts them all
//	Gather     as Allgather, to the root's node's leader only, which sends
//	           the blocks on to a root that is not it
//	Scatter    the reverse of Gather
//
// Alltoall stays flat: its data goes from every member to every other in
// any case. Reductions reduce within a node first, so they need an op
// that may be applied in any order (reducer.commutative); another takes
// the flat algorithm. Nodes of different sizes are padded to the largest
// in the leaders' exchanges of blocks.
//
// Without a node layout (nodes nil, or every rank on one node) nothing of
// this runs: a collective costs one nil check more.
//
// The node's part and the leaders are internal communicators, never handed
// to a user. Their context ids are derived from the parent's, so that no
// agreement is needed: the parent's id ctx (even, below 1<<30; a
// communicator whose id is not stays flat) gives the node's part
// 1<<31 | ctx<<1 and the leaders 1<<31 | ctx<<1 | 2. User ids are
// agreeContext's, which counts up from 2 by 2 and stays below 1<<31 for
// the first billion communicators, so none is ever one of these; two
// parents have different ids or no member in common, and so have their
// parts. The node's part takes its parent's area of the shared block,
// which the parent, spanning nodes, never uses itself.
//
// A hierarchical collective is one call of its parent: its parts share
// the parent's collState (call numbers, signatures, aborts), so that
// their messages are tagged with the parent's call number, a wait that
// blocks in a part has the parent's members compare their signatures
// (agree.go), and an abort of the parent's call fails the steps its
// parts have under way. The parts are not in the world's table of
// communicators: agreements and aborts name the parent.

// hierCtxBit marks the context ids of hierarchical collectives' parts.
const hierCtxBit = 1 << 31

// hierarchy is a communicator's two levels.
type hierarchy struct {
	c       *Comm
	node    *Comm   // the members on this rank's node, in c's rank order
	leaders *Comm   // one member per node, in node order; nil at a member that does not lead
	nodeOf  []int   // member → index of its node
	local   []int   // member → its rank in its node's part
	members [][]int // node → its members, ascending; the first leads
	most    int     // members on the largest node
	// blocked: every node has most members, node j members j*most up:
	// the nodes' blocks of an allgather are in member order already.
	blocked bool
}

// newHierarchy returns c's two levels by the world's nodes, or nil when
// its collectives stay flat: its members are on one node, or on as many
// nodes as there are members.
func newHierarchy(c *Comm) *hierarchy {
	if c.ctx >= hierCtxBit>>1 {
		return nil
	}
	h := &hierarchy{c: c, nodeOf: make([]int, c.size), local: make([]int, c.size)}
	index := make(map[int]int) // node id (its lowest world rank) → index
	for m, wr := range c.group {
		id := c.w.nodes[wr]
		j, ok := index[id]
		if !ok {
			j = len(h.members)
			index[id] = j
			h.members = append(h.members, nil)
		}
		h.nodeOf[m], h.local[m] = j, len(h.members[j])
		h.members[j] = append(h.members[j], m)
		h.most = max(h.most, len(h.members[j]))
	}
	if len(h.members) < 2 || h.most < 2 {
		return nil
	}
	h.blocked = true
	for j, ms := range h.members {
		for i, m := range ms {
			h.blocked = h.blocked && len(ms) == h.most && m == j*h.most+i
		}
	}
	mine := h.members[h.nodeOf[c.rank]]
	group := make([]int, len(mine))
	for i, m := range mine {
		group[i] = c.group[m]
	}
	h.node = newPart(c, hierCtxBit|c.ctx<<1, h.local[c.rank], group, int(c.ctx/2))
	if h.local[c.rank] == 0 {
		group := make([]int, len(h.members))
		for j, ms := range h.members {
			group[j] = c.group[ms[0]]
		}
		h.leaders = newPart(c, hierCtxBit|c.ctx<<1|2, h.nodeOf[c.rank], group, -1)
	}
	return h
}

// spansNodes reports whether c's members are on more than one node:
// then its collectives choose by nothing of one host's (its devices,
// single copies), which the members on other hosts do not share.
func spansNodes(c *Comm) bool {
	if c.w.nodes == nil {
		return false
	}
	first := c.w.nodes[c.group[0]]
	for _, wr := range c.group[1:] {
		if c.w.nodes[wr] != first {
			return true
		}
	}
	return false
}

// newPart makes a part of parent: a communicator of the given group that
// shares parent's collective state, with shared-memory collectives in the
// block's area (none when area < 0).
func newPart(parent *Comm, ctx uint32, rank int, group []int, area int) *Comm {
	c := &Comm{w: parent.w, ctx: ctx, rank: rank, size: len(group), group: group, coll: parent.coll}
	if area >= 0 {
		c.sh = newShComm(c, area)
	}
	return c
}

// leads reports whether member m leads its node.
func (h *hierarchy) leads(m int) bool { return h.local[m] == 0 }

// done ends a hierarchical call: it is counted, and if it failed, the
// scratch buffers are dropped, which a receive or read left pending may
// still write. A call that failed because a member on another node
// aborted it (a step that failed after a member left it) reports the
// abort, the cause.
func (h *hierarchy) done(err *error) {
	h.c.w.hierCalls.Add(1)
	if *err != nil {
		if a := h.c.coll.abortedNow(); a != nil && !errors.Is(*err, ErrArg) {
			*err = a
		}
		h.c.tmp, h.node.tmp = nil, nil
		if h.leaders != nil {
			h.leaders.tmp = nil
		}
	}
}

// barrier: fan in to the leaders, the leaders' barrier, fan out.
func (h *hierarchy) barrier() (err error) {
	defer h.done(&err)
	if err := h.node.gather(nil, nil, 0); err != nil {
		return err
	}
	if h.leaders != nil {
		if err := h.leaders.barrier(); err != nil {
			return err
		}
	}
	return h.node.bcast(nil, 0)
}

// bcast broadcasts root's b.
func (h *hierarchy) bcast(b []byte, root int) (err error) {
	defer h.done(&err)
	rn, home := h.nodeOf[root], h.nodeOf[h.c.rank] == h.nodeOf[root]
	if home && !h.leads(root) {
		if err := h.node.bcast(b, h.local[root]); err != nil {
			return err
		}
	}
	if h.leaders != nil {
		if err := h.leaders.bcast(b, rn); err != nil {
			return err
		}
	}
	if !home || h.leads(root) {
		return h.node.bcast(b, 0)
	}
	return nil
}

// reduce reduces every member's send into root's recv.
func (h *hierarchy) reduce(send, recv []byte, red reducer, root int) (err error) {
	defer h.done(&err)
	c, n := h.c, len(send)
	rn := h.nodeOf[root]
	if h.leaders == nil {
		if err := h.node.reduce(send, nil, red, 0); err != nil || c.rank != root {
			return err
		}
		return h.node.crecv(recv[:n], 0, tagReduce)
	}
	buf := c.scratch(2 * n)
	part, res := buf[:n], buf[n:]
	if c.rank == root {
		res = recv[:n]
	}
	if err := h.node.reduce(send, part, red, 0); err != nil {
		return err
	}
	if err := h.leaders.reduce(part, res, red, rn); err != nil {
		return err
	}
	if h.nodeOf[c.rank] == rn && c.rank != root {
		return h.node.csend(res, h.local[root], tagReduce)
	}
	return nil
}

// allreduce reduces every member's send into every member's recv (the
// same length; they may be the same buffer) of elements of es bytes.
func (h *hierarchy) allreduce(send, recv []byte, es int, red reducer) (err error) {
	defer h.done(&err)
	if direct(h.node, len(recv), es) {
		// Every member has the node's result in recv then.
		err = h.node.allreduce(send, recv, es, red)
	} else {
		err = h.node.reduce(send, recv, red, 0)
	}
	if err != nil {
		return err
	}
	if h.leaders != nil {
		if err := h.leaders.allreduce(recv, recv, es, red); err != nil {
			return err
		}
	}
	return h.node.bcast(recv, 0)
}

// allgather gathers every member's send into every member's recv, member
// m's at recv[m*len(send):].
func (h *hierarchy) allgather(send, recv []byte) (err error) {
	defer h.done(&err)
	n, k, most := len(send), len(h.members), h.most
	var mine, all []byte
	if h.blocked {
		nd := h.nodeOf[h.c.rank]
		mine, all = recv[nd*most*n:(nd+1)*most*n], recv
	} else {
		buf := h.c.scratch((1 + k) * most * n)
		mine, all = buf[:most*n], buf[most*n:]
	}
	if err := h.node.gather(send, mine, 0); err != nil {
		return err
	}
	if h.leaders != nil {
		if err := h.leaders.allgather(mine, all); err != nil {
			return err
		}
		if !h.blocked {
			h.unpack(all, recv, n)
		}
	}
	return h.node.bcast(recv, 0)
}

// unpack copies the nodes' blocks of n bytes, most per node (padded),
// from all into out in member order.
func (h *hierarchy) unpack(all, out []byte, n int) {
	for j, ms := range h.members {
		for i, m := range ms {
			at := (j*h.most + i) * n
			copy(out[m*n:(m+1)*n], all[at:at+n])
		}
	}
}

// gather gathers every member's send into root's recv.
func (h *hierarchy) gather(send, recv []byte, root int) (err error) {
	defer h.done(&err)
	c, n, k, most := h.c, len(send), len(h.members), h.most
	rn := h.nodeOf[root]
	p := c.size * n
	if h.leaders == nil {
		if err := h.node.gather(send, nil, 0); err != nil || c.rank != root {
			return err
		}
		return h.node.crecv(recv[:p], 0, tagGather)
	}
	buf := c.scratch((1+k)*most*n + p)
	mine, all, out := buf[:most*n], buf[most*n:(1+k)*most*n], buf[(1+k)*most*n:]
	if c.rank == root {
		out = recv[:p]
	}
	if err := h.node.gather(send, mine, 0); err != nil {
		return err
	}
	if err := h.leaders.gather(mine, all, rn); err != nil {
		return err
	}
	if h.nodeOf[c.rank] != rn {
		return nil
	}
	h.unpack(all, out, n)
	if c.rank != root {
		return h.node.csend(out, h.local[root], tagGather)
	}
	return nil
}

// scatter sends block m of root's send to member m's recv.
func (h *hierarchy) scatter(send, recv []byte, root int) (err error) {
	defer h.done(&err)
	c, n, k, most := h.c, len(recv), len(h.members), h.most
	rn, me := h.nodeOf[root], c.rank
	p := c.size * n
	if me == root && !h.leads(me) {
		if err := h.node.csend(send[:p], 0, tagScatter); err != nil {
			return err
		}
	}
	var mine []byte
	if h.leaders != nil {
		buf := c.scratch((1+k)*most*n + p)
		all, in := buf[most*n:(1+k)*most*n], buf[(1+k)*most*n:]
		mine = buf[:most*n]
		if h.nodeOf[me] == rn {
			if me == root {
				in = send[:p]
			} else if err := h.node.crecv(in, h.local[root], tagScatter); err != nil {
				return err
			}
			for j, ms := range h.members {
				for i, m := range ms {
					at := (j*most + i) * n
					copy(all[at:at+n], in[m*n:(m+1)*n])
				}
			}
		}
		if err := h.leaders.scatter(all, mine, rn); err != nil {
			return err
		}
		mine = mine[:h.node.size*n]
	}
	return h.node.scatter(mine, recv, 0)
}
