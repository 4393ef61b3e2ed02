// Package stripe makes several devices that reach the same peers (one per
// NIC) look like one hal.Device, as DESIGN.md's "stripe — several NICs as
// one" asks: frames are spread round-robin over the healthy members, a
// member that fails is taken out, and one that comes back is re-admitted.
//
// Frames are self-describing (every frame carries its source, destination
// and the layer above's own sequencing; RDMA packets carry their offset), so
// the order in which frames of different members arrive does not matter:
// lapi's reliability and hal's RDMA engine already accept any order. The
// stripe therefore keeps no reordering state; it is a scheduler on the send
// side and a merger on the receive side.
//
// # Files
//
// stripe.go is the contract (Device, Options, New, the hal.Device methods
// that are not sending or receiving); send.go is Send and Flush, the choice
// of member per frame; recv.go is Poll and Wait; health.go is failure
// detection, peer reports and re-admission; probe.go is the probe frame;
// stats.go the per-member counters (Member, Members).
//
// # Health
//
// A member is in (carries data frames) or out. It is taken out at once when
// its Send, Flush or Poll fails with anything but hal.ErrNoResource (or an
// error that is the caller's: hal.ErrTooLarge, hal.ErrUnknownPeer,
// hal.ErrBadFrame), and when it has been silent: nothing delivered for
// Options.Silence while the other members delivered at least
// Options.SilenceFrames frames. An out member carries no data frames (unless
// every member is out: then the stripe tries them all rather than stall).
//
// Every member, in or out, carries probes: a small frame to each peer this
// rank exchanged data with lately, at most once per Options.Probe, sent
// from Poll and Flush (the stripe has no goroutine of its own). A probe is a
// FrameData frame with flagProbe set in the header's flags (hal defines only
// FlagCRC; the stripe claims the top bit, and the layer above must not use
// it); Poll consumes probes and never delivers them. Probes keep an idle but
// healthy member from looking silent, and carry the prober's report of which
// members it hears the probed rank on: silence is seen by the receiver, but
// only the peer can tell the sender its frames are not arriving, so a member
// a peer reports deaf is taken out too, and a link that fails in one
// direction is out at both ends within Silence plus a probe interval.
//
// An out member comes back in when it has delivered a frame within Silence
// and no peer reports it deaf (a member taken out by a device error must
// also have carried a probe without error since, so that a member that
// receives but cannot send does not flap). After a link heals that takes two
// probe rounds: one to be heard, one to say so.
//
// # Reintegration: what this is and is not yet
//
// DESIGN.md says a device that comes back is re-admitted "after
// reintegration": BOOTING / ACK / NACK / RDMA_READY (hal.Reintegration),
// so that nothing stale lands in it. The probes are the liveness half of
// that only. They are enough for packet mode, because hal's RDMA engine
// drops stale tids and lapi discards duplicates whatever member carried
// them, and because a member's failure here is a link failure: the process
// and its TPT (one per rank, resolving keys for every member) lived on.
// What is not done: a member whose device was restarted (a new incarnation
// of the member with its own state, a new address) must run
// hal.Reintegration per member, BOOTING / ACK per peer on that member,
// before it carries traffic, and the stripe has no way yet to swap a member
// device; the per-peer view (a member that fails toward one peer is taken
// out toward all); lapi redriving, on the survivors, the unacknowledged
// frames of a member taken out (today lapi's ordinary retransmission
// timeout recovers them, which costs an RTO); and the weighting of members
// by measured rate (today: by ErrNoResource back-off, which under a flood
// gives each member a share close to its queue's).
//
// # Caps
//
// The MTU is the smallest member's. The stripe is Reliable only when every
// member is: lapi then skips its acknowledgements, which is right for
// members that cannot lose frames (inproc, shm), and a member failing there
// is a process failure in any case. It is Ordered only with a single ordered
// member, since frames spread over members overtake each other. NativeRDMA
// and Broadcast are off: the stripe offers none of the optional interfaces
// (hal.CrossMemory, hal.SharedMemory), and RDMA runs in hal's software
// engine above it, as frames the stripe spreads like any other.
//
// # Imports
//
// stripe may import hal, the standard library and internal packages other
// than internal/launch (deps_test.go). Its tests use internal/simnet,
// internal/faults, transport/inproc and hal/haltest as fixtures.
//
// # Use
//
// mpi.Init stripes one UDP device per NIC of Options.NICs (WEFT_NICS,
// gorun --nics) and publishes the stripe's Addr, one address per member,
// through PMI; bench/results/stripe-2nic.md measures it across two hosts.
// Not done yet: lapi's redrive on a member's failure, key migration beyond
// the rank-wide TPT, and per-member reintegration (above).
package stripe
