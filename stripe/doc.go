// Package stripe makes several devices that reach the same peers (one per
// NIC) look like one hal.Device, as DESIGN.md's "stripe — several NICs as
// one" asks: frames are spread round-robin over the healthy members, a
// member that fails toward a peer is taken out toward it, and one that
// comes back is re-admitted after reintegration with that peer.
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
// stripe.go is the contract (Device, Options, New, Connect, Replace, the
// hal.Device methods that are not sending or receiving); send.go is Send
// and Flush, the choice of member per frame; recv.go is Poll and Wait;
// link.go is the state machine of one member toward one peer and its
// reintegration; health.go is failure detection and peer reports;
// probe.go is the probe frame, reintframe.go the members' reintegration
// frame; peerloss.go the peers members find lost without a send
// (hal.PeerLoss: a link out, and the peer reported once every member lost
// it); stats.go the per-member counters (Member, Members).
//
// # Links
//
// What is judged is a link: one member toward one peer (link.go). A link
// is in (carries data frames), out, or joining (a reintegration with the
// peer on that member is under way). A member that fails toward one peer
// is out toward that peer only; a device error (its Send, Flush or Poll
// failing with anything but hal.ErrNoResource or an error that is the
// caller's: hal.ErrTooLarge, hal.ErrUnknownPeer, hal.ErrBadFrame) takes it
// out toward every peer. Frames go round-robin, per destination, over the
// members whose link toward it is in (unless none is: then the stripe
// tries them all rather than stall).
//
// A link is taken out when it has been silent: nothing from the peer on
// that member for Options.Silence while the peer delivered at least
// Options.SilenceFrames frames on the others (judged once every member
// has been polled, so that after a stall the member drained last does not
// look silent); and when the peer reports it deaf. Every member, whatever
// its links, carries probes: a small frame to each peer this rank
// exchanged data with lately, at most once per Options.Probe, sent from
// Poll and Flush (the stripe has no goroutine of its own). A probe is a FrameData frame with flagStripe set in the
// header's flags (hal defines only FlagCRC; the stripe claims the top bit,
// and the layer above must not use it); Poll consumes probes and never
// delivers them. Probes keep an idle but healthy link from looking silent,
// and carry the prober's report of which members it hears the probed rank
// on: silence is seen by the receiver, but only the peer can tell the
// sender its frames are not arriving, so a link a peer reports deaf is
// taken out too, and a link that fails in one direction is out at both
// ends within Silence plus a probe interval.
//
// # Reintegration
//
// A link comes back only through the reintegration protocol of DESIGN.md
// (BOOTING / BOOT_ACK / BOOT_NACK / RDMA_READY, hal.Reintegration), run per
// member toward that one peer (Reintegration.Rejoin, under a new
// incarnation): an out link whose peer is heard on it again, and no
// longer reports it deaf, sends BOOTING; the peer clears its end of the
// link (joining: it sends nothing on it) and answers BOOT_ACK; then
// RDMA_READY goes both ways, each answered (the answer to the first asks
// for one back): an end takes what arrives on the link as current once it
// has the peer's RDMA_READY, and takes the link back in, sending data on
// it, once the peer has also answered its own, so that nothing it sends
// reaches an end that still refuses it. After a link heals that takes two
// probe rounds (one to be heard, one to say so) and two and a half round
// trips.
// Members' reintegration frames carry flagStripe too, so they are told
// apart from the rank's own reintegration, which the layer above runs
// over the stripe as a whole (and which joins every member toward a peer
// at the start: links start in).
//
// A member whose device was restarted is a new incarnation with its own
// state and, usually, a new address: Replace puts it in place, and it
// rejoins every peer before it carries data toward it; its BOOTING carries
// its address and a restart flag, and the peer connects its member to it.
// Until the peer's RDMA_READY of its current incarnation comes, such a
// link is stale: data frames that arrive on it (sent to or by an
// incarnation that is gone, such as frames in flight to the old device
// that reach the new one) are refused and counted (MemberStats.Refused),
// never delivered. A link that comes back between
// the same incarnations refuses nothing: what arrives on it is current.
// A rejoin that gets no answer after 20 BOOTINGs, or a BOOT_NACK, leaves
// the link out; it is tried again when the peer is heard after Silence.
//
// Keys: RDMA runs above the stripe, in hal's software engine of the rank,
// which resolves every packet's key in the rank's one TPT whatever member
// carried it; so a region registered once is reachable through every
// member, packets of one transfer spread over members are placed in any
// order, and a key the TPT does not hold is refused with a
// hal.ProtectionError naming the check, reported to the origin, on
// whichever member it came (lapi's TestStripeKeyMigration).
//
// Not done yet: members with keys of their own (native RDMA on a member,
// such as verbs RC with a memory region per device) would need the
// per-member key table the seed describes, with a miss asking the rank's
// TPT before the key is refused; the stripe refuses members with
// NativeRDMA today by offering none. lapi still redrives a member's lost
// frames through its ordinary resend of what is in flight when Outages
// moves (hal.Failover), not per member; and members are weighted by
// ErrNoResource back-off (under a flood, each member's share is close to
// its queue's), not by measured rate.
//
// # Caps
//
// The MTU is the smallest member's. The stripe is Reliable only when every
// member is: lapi then skips its acknowledgements, which is right for
// members that cannot lose frames (inproc, shm), and a member failing there
// is a process failure in any case. It is Ordered only with a single ordered
// member, since frames spread over members overtake each other. NativeRDMA
// is off: the stripe offers neither hal.CrossMemory nor hal.SharedMemory,
// and RDMA runs in hal's software engine above it, as frames the stripe
// spreads like any other. It broadcasts (hal.Broadcaster, Caps.Broadcast)
// when some member does: each broadcast goes once, on the next such member
// round-robin (one member's multicast reaches every peer's member on that
// network), and arrives like any frame.
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
// Nothing replaces a member in mpi yet: a NIC whose device fails stays
// out until its link works again (Replace is for a driver that reopens
// the device).
package stripe
