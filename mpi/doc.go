// Package mpi is weft's MPI: communicators, tagged point-to-point messages
// with MPI's matching and non-overtaking rules, nonblocking requests, and
// collectives, over lapi.
//
// A program started by gorun, mpiexec (Hydra), srun --mpi=pmi2 or Open MPI's
// mpirun calls Init; HPC code under test calls Run, which starts n ranks as
// goroutines in one process over the in-process device:
//
//	err := mpi.Run(4, func(c *mpi.Comm) error {
//		sum := []float64{float64(c.Rank())}
//		return mpi.Allreduce(c, sum, sum, mpi.Sum)
//	})
//
// Messages from one sender on one communicator are matched in the order
// they were sent, even though the layers below may deliver packets in any
// order: every message carries a per-pair sequence number and early ones
// wait. Small messages go eagerly (into the posted buffer when one is
// waiting, else into an unexpected-message buffer); large ones by
// rendezvous: the receiver reads the sender's registered buffer with a
// lapi Get (an RDMA read) once the receive is matched. From WEFT_SPLIT
// bytes (default 256 KiB; 0 turns it off) both ends copy: the receiver
// reads the lower half while the sender, asked by a CTS, writes the upper
// half with a lapi Put, so two cores move the message (split.go).
//
// Iprobe polls for a message as Probe waits for one; WaitAny, WaitSome,
// TestAny and TestAll complete one, some or all of several Requests
// (probe.go, waitany.go); Cancel takes back a receive no message has
// matched (Status.Cancelled); Mprobe and Improbe take a message out of
// matching, for Mrecv or Imrecv to receive (mprobe.go). SendObj, RecvObj
// and BcastObj move any value encoding/gob can encode (obj.go).
//
// Isend and Irecv return a *Request, a new allocation each time (an Isend
// whose data is copied at once shares one). IsendInto and IrecvInto take
// the caller's Request instead, as MPI_Isend fills an MPI_Request: a
// window of messages through an array of Requests reused from window to
// window allocates nothing, and the garbage collector stays away from a
// stream of small messages.
//
// Within a node (the shm device, or mpi.Run's goroutines), the collectives
// of up to 2 KiB per rank (Barrier, Bcast, Reduce, Allreduce, Gather,
// Allgather; Scatter and Alltoall of up to 2 KiB in all) on communicators
// of 2-16 ranks go through a block of memory every rank maps
// (lapi.Devices.SharedBlock; package shmcoll, run from shmcoll.go): each
// rank writes its part and a round number into its own slot and reads
// the others', so a collective is one round whatever the
// number of ranks, and sends nothing unless a rank waiting for it is about
// to sleep. Reductions combine the parts in rank order, so every rank gets
// the same bits. With more ranks than cores, where every exchange of a
// message algorithm waits for a context switch, the gain is largest.
// WEFT_SHMCOLL=off
// turns it off. The block has room for the world and the communicators of
// the first 14 Dup or Split calls (context ids below 30); later ones, and
// larger ones, use messages.
//
// Large Allreduces between ranks of one node whose reads are one copy
// (WEFT_DIRECT bytes, default 128 KiB) read directly: each rank reads its
// block of every peer's send buffer, reduces it in its receive buffer,
// then reads the other reduced blocks from their owners (direct.go).
// Elsewhere, large Allreduces (WEFT_ACCUMULATE bytes, default 1 MiB)
// reduce by half-RDMA: in the ring's reduce-scatter each rank accumulates
// its block straight into its neighbour's buffer, which reduces every
// packet as it lands (lapi.Accumulate), so the reduction overlaps the
// transfer.
//
// Bcasts of WEFT_BCAST_RDMA bytes or more (default 128 KiB) among more
// than two ranks go by lapi's broadcast RDMA (lapi.Broadcast): the data
// streams down a binomial tree in 512 KiB chunks, each rank's lapi
// forwarding a chunk to its children as soon as it has landed
// (conditional RDMA), with no handshake per step (bcast_rdma.go); among
// ranks of one node, where the sender of a single-copy Put does the copy,
// only below 8 MiB.
//
// Allgathers and Alltoalls of WEFT_ALLGATHER_RDMA and WEFT_ALLTOALL_RDMA
// bytes per block or more (default 64 KiB) go by RDMA Puts: the ranks
// exchange their receive buffers' PVOs, then each Puts its blocks
// straight into the peers' buffers, every Put counted at its target as
// it lands, in one step instead of the ring's or the pairwise exchange's
// p-1 (allgather_rdma.go, alltoall_rdma.go); from 1 MiB only where single
// copies reach the members or the members span nodes.
//
// When a job spans nodes, a communicator whose members do and that has
// several on some node runs Barrier, Bcast, Reduce, Allreduce, Allgather,
// Gather and Scatter node by node (hier.go): within each node (its shared
// block), between one leader per node (messages), within each node again.
//
// Every member of a communicator chooses the same algorithm for a
// collective, from what all of them share: the sizes, op and root, the
// communicator's layout, and what Init agrees for the job: whether each
// node runs more ranks than cores, and the WEFT_ settings above, which
// Init refuses at a rank whose differ from rank 0's. What only one host
// has (single copies, its shared block) decides only among members all
// on that host.
//
// MaxLoc and MinLoc reduce (value, index) pairs held side by side in the
// slice (reduce.go); every algorithm that keeps rank order takes them. The
// bitwise and logical ops BAnd, BOr, BXor, LAnd, LOr and LXor take
// integer types only and commute, so every algorithm takes them
// (bitop.go).
//
// Besides the collectives above: Scan and Exscan (recursive doubling),
// ReduceScatterBlock (a Reduce to rank 0 then a Scatter), and the vector
// collectives Gatherv, Scatterv, Allgatherv and Alltoallv (a message per
// block, zero counts included; scan.go, vcoll.go). NewOp makes a
// user-defined reduction (op.go) that every reduction takes; one that is
// not commutative is applied in rank order, by the algorithms that keep
// it (Reduce's tree rooted at rank 0, recursive doubling, the shared
// block), never by the ring, direct reads, half-RDMA accumulate or the
// node-aware ones.
//
// The nonblocking collectives (Ibarrier, Ibcast, Ireduce, Iallreduce,
// Igather, Iscatter, Iallgather, Ialltoall; icoll.go) return a Request
// at once. Each is a schedule (schedule.go): rounds of sends and
// receives, each followed by a local step, which Test, Wait, WaitAny and
// TestAll advance, and, while any is in flight, one progress goroutine
// per rank that sleeps in lapi until a round may have completed, so a
// collective moves on while the caller computes. Several may be in
// flight on one communicator beside blocking collectives and
// point-to-point; their steps' tags carry the call's number, so they
// complete in any order. They go by messages, never through the shared
// block or node by node, and keep rank order for an op that does not
// commute. A rank bound to one core (gorun binds each rank to its share
// of the cores, one core when they are as many or more) has one processor for Go, which its computation
// holds: WEFT_ASYNC_PROGRESS=1 gives the progress goroutine a second one
// (Options.AsyncProgress), which the kernel then shares with the
// computation.
//
// One-sided communication (win.go, win_lock.go): NewWin makes the
// caller's own []T a window over a communicator (collective); Put, Get
// and Accumulate (predefined ops only, as in MPI) reach another rank's
// window at a displacement in its elements, and may return before the
// data moved. They are complete at the next Fence (active target,
// collective) or at Flush or Unlock of their target (passive target,
// Lock shared or exclusive). Puts and Gets are lapi's (RDMA; within a
// node one copy from lapi's single-copy threshold), Accumulate is lapi's
// half-RDMA accumulate. NewWin gives every rank every window's length,
// so a range outside a target's window fails at the origin with ErrArg
// (a bad rank with ErrRank) before anything moves; a call outside an
// epoch, Unlock without Lock and any call after Free fail with ErrArg
// too. The lock is a registered word per rank, changed with lapi's Rmw;
// the target takes no part: while a window exists each rank keeps a
// goroutine waiting in lapi that answers for it when its own goroutine is
// outside mpi. With one processor per rank that goroutine runs only when
// a computing rank is preempted: passive-target programs whose targets
// compute want WEFT_ASYNC_PROGRESS=1.
//
// Errors are values: ErrTruncate, ErrRank, ErrPeerFailed and ErrTimeout are
// tested with errors.Is. With WEFT_TIMEOUT set, a blocking call that waits
// longer fails with ErrTimeout and says what it was waiting for.
//
// Finalize fails when requests were never waited for. With WEFT_TRACK=1
// (Options.Track) it names every resource still live and the file:line
// of the call outside weft that made it: requests from Isend, Irecv and
// the nonblocking collectives not yet settled by Wait or Test, windows
// not freed, communicators from Dup or Split not freed (Comm.Free),
// memory the program registered in lapi's TPT, RDMA transfers in flight
// and the shared-memory segment if the device kept it (track.go). Off,
// each creation and release tests one pointer and records nothing.
//
// Ranks that call a collective with different lengths, roots or
// predefined ops get an error wrapping ErrArg that names the
// disagreement, never another rank's data (user ops are numbered per
// process, so one op may have different numbers at different ranks: two
// user ops are taken to be the same): a collective's receive must get exactly the bytes this rank
// expects, a call that fails on one rank is aborted on all of them (its
// messages are tagged with the call's number, so none of them matches a
// later call), and a collective wait blocked for 100 ms has the ranks
// compare what each of them called (agree.go). In a rooted collective a
// rank whose data is right, or that only sends, may return nil; where
// every rank that disagrees only sends (ranks that each name themselves
// root), so that no wait blocks, one of the next three collectives on the
// communicator fails instead at such a rank, naming the disagreement
// (stray.go; through shared memory, as it finds out in time). The
// communicator stays usable; from the call after an aborted one its
// collectives go by messages, not through shared memory, on every rank
// alike (a rank that began that call in the block before it heard of the
// abort runs it again by messages; where the communicator's collectives
// are node-aware, whose steps across nodes may have gone already, that
// call fails with ErrArg instead, and the calls after it go by messages).
//
// mpi may import lapi and internal packages (pmi, trace, and
// internal/devices, which opens the rank's devices at start-up and hands
// them to lapi): it uses hal only through what lapi exposes, and names
// no device.
package mpi
