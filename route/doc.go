// Package route makes several devices that reach different peers look like
// one hal.Device: shared memory toward the ranks of this node, the network
// toward the others, as Open MPI's BML picks a BTL per peer and MPICH's
// CH4 a shared-memory module or a netmod.
//
// Each peer is reached through exactly one member, fixed when the route is
// made from where the launcher says each rank runs. Frames to a peer go to
// its member; Poll delivers every member's frames, and drops (counted as
// hal.DropPeer) a frame whose source is routed through another member, so
// that the layer above can trust a frame's source to have come the way it
// expects: lapi skips sequence numbers toward reliable members, and a
// frame claiming such a source must not arrive unsequenced over the
// network. The route is a hal.Router: lapi asks it, per peer, which member
// carries the peer's frames and keeps that member's guarantees (reliable
// or not, MTU, short frames, cross-memory attach) per peer.
//
// A route broadcasts (hal.Broadcaster, Caps.Broadcast) when one of its
// members does: the frame goes once on that member (IP multicast, which
// also loops back to this host's ranks), and a multicast frame is
// delivered whichever member it came through, since the layer that owns
// it trusts no frame's route.
//
// The route's address joins its members' addresses, "route:a|b", and
// Connect gives a peer's member the part of the peer's address of the
// same scheme (udp, shm: no two members of a route share one); the other
// members are not told of the peer.
//
// Wait waits on the first member in the caller's goroutine and on the
// others through a watcher goroutine each, which also takes over from
// Poll a member that has been silent for a while, so that its polling
// cost (a system call for UDP) is not paid on every pass (watch.go). The
// first member should be the one whose frames matter soonest and cost
// least to poll: shared memory.
//
// The package may import hal and the standard library only.
package route
