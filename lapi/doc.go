// Package lapi is weft's reliable upper layer (ULP), in the spirit of IBM's
// LAPI: active messages with a header handler that says where the data goes
// and a completion handler, Put, Get and Rmw on registered memory, origin,
// target and completion counters, and fences.
//
// Over an unreliable device lapi delivers every packet exactly once: per-peer
// sequence numbers, selective acknowledgement (piggy-backed or delayed),
// retransmission on an RTT-estimated timeout with exponential back-off,
// duplicate discard, and a credit window so a slow receiver is not flooded.
// That machinery is a pure state machine (link.go) that takes packets and
// the current time and returns packets to send; the driver (progress.go)
// owns the device and the goroutines. Over a reliable device (inproc, shm)
// none of it runs.
//
// Large transfers go by RDMA (rdma.go): Put and Get of RDMAThreshold bytes
// or more, every Accumulate (half-RDMA: the target reduces each packet as
// it lands), and active messages of AMRendezvous bytes or more (the header
// goes ahead and the target reads the data into the buffer its header
// handler chose, rendezvous.go). These packets are hal's self-describing
// RDMA packets, placed by hal's engine; they bypass the per-packet
// sequence and acknowledgement machinery. A transfer is cut into chunks of
// up to 1 MiB, each on its own rCxt, at most RDMAWindow bytes in flight
// per peer. The target keeps what earlier drives placed, and answers the
// last packet of a write's drive at once: with the completion, or with a
// report of the segments still missing, which the origin drives again
// under a new tid, alone. A chunk whose answer does not come within a
// timeout learned from earlier completions (and running from when the
// chunks ahead of it toward the peer were done) is probed with its last
// packet, then redriven whole, the timeout doubling each time. A read
// asks again for the segments it lost when its drive's last packet
// arrives, or its timer runs out.
//
// Half-RDMA (halfrdma.go, Context.Half) has RDMA at one end and the
// processor at the other: PutFromFIFO copies unregistered memory into
// RDMA packets that the target places into its region; PutToFIFO streams the origin's region
// to a FIFOHandler at the target, packet by packet (Accumulate is such a
// write); GetToFIFO streams the target's region to a FIFOHandler at the
// origin, which registers nothing; GetFromFIFO (halfread.go) has the
// target's FIFOSource answer from its FIFO, the origin's engine placing
// the answer into its region. SendOpts.NoCompletion makes a write
// fire-and-forget: no completion comes back, and the origin forgets the
// write once the device (reliable) or lapi's acknowledged packets
// (unreliable) have delivered it.
//
// Broadcast (bcast.go) places one rank's buffer into the buffers of a
// group of ranks as a chain or binomial tree of RDMA Puts (or, with Pull, Gets) in pipelined chunks,
// each receiver forwarding a chunk to its children by conditional RDMA
// (as PutWhen and GetWhen arm it) as soon as it has landed, with the redrive of every
// RDMA transfer; counters tell each member when its buffer is filled and
// free, and the root when every member has the data. Multicast
// (mcast.go) does it over a device that can send one frame to every peer
// (hal.Broadcaster: UDP's IP multicast group): the root streams its
// buffer once, and each receiver Gets from it what the stream lost.
//
// Over a device that does RDMA in hardware (native.go: hal.OneSided, the
// verbs device's RC queue pairs) Put and Get of 64 KiB or more are one
// RDMA Write or Read, on memory registered through lazyreg.
//
// Where the device can copy straight into a peer's memory (cma.go:
// cross-memory attach on shm, checked against a replica of the peer's TPT
// that the peer keeps current; a shared address space on inproc, checked
// by the peer's own TPT), Put and Get of SingleCopyThreshold bytes or more
// are that one copy instead.
//
// A context drives one device, or a set of devices and, per peer, the one
// that reaches it (Config.Devices and Route: shared memory toward the
// node's ranks, the network toward the others), under one route that it
// builds at Open (package route; a stripe of NICs is one device of the
// set). devices.go reports them and the node's shared block
// (Context.Devices); types.go names what of hal the layer above uses (Rank,
// PVO, Access), so that it reaches hal only through lapi.
//
// Close on an unreliable device drains first: it waits until what it sent
// is acknowledged and peers stop resending, so ranks may close right after
// a barrier.
//
// Delivery is exactly-once but not ordered: messages are fragmented into
// self-describing packets that may be placed in any order. Ordering, where
// wanted, is the business of the layer above (mpi).
//
// A Context composes one component per concern, each a type of its own
// with its files: reliability (reliability.go, failure.go, link.go: per-
// peer links, send queues, acknowledgement, retransmission, failure),
// dispatcher (send.go, recv.go, completion.go, rendezvous.go, rma.go:
// active messages, their reassembly and dispatch, counters and
// completions), progressor (progress.go, wait.go), rdmaState (rdma.go,
// rdma_target.go, rdma_redrive.go), nativeState (native.go), cmaState
// (cma.go), reintDriver (reint.go), triggerSet (trigger.go,
// thirdparty.go), collectives (bcast.go, mcast.go) and tracer (trace.go).
// They share the context's one progress lock.
//
// Code of an upper layer that must run atomically with the dispatcher,
// as its handlers do (mpi's matcher), runs in Atomically, a WaitTx
// condition or an OnPeerFailed callback, each lent a Tx (tx.go); the lock
// itself is not exported.
//
// lapi may import hal, stripe, route, lazyreg and internal packages; never
// mpi.
package lapi
