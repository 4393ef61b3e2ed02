// Package shmcoll runs the small collectives of a group of ranks through
// a block of memory every rank of a node maps (lapi.Devices.SharedBlock:
// the shm device's segment, or the in-process device's memory for
// mpi.Run's goroutines). Each member writes its part into a slot of its
// own and stamps the slot with the collective's round number, and the
// others wait for the stamps and read the parts. A round costs a store and
// a few loads of lines other cores wrote, where messages cost a frame per
// pair and a wait per step. With more ranks than cores that matters most:
// a collective made of log2(n) exchanges, each waiting for the next rank
// to be scheduled, becomes one round each rank joins when it runs.
//
// The package knows memory and rounds only. Waiting (with progress,
// timeouts and reports), waking a member that blocked, and the number of
// the collective call in progress are the Host's, the layer that runs the
// group (mpi's communicator).
//
// A member's round number counts the shared collectives it has started
// on the group, the same sequence at every member (the members call the
// collectives in the same order). Each member has two slots and uses slot
// k&1 in round k; before overwriting one it makes sure every member has
// started round k-1, and so has finished reading round k-2, the slot's
// last use. A member about to block sets its sleep word first (Arm), and a
// member that stamps a slot has every member whose sleep word is set
// nudged (Host.Nudge).
//
// The block, per area (one per group: mpi gives a communicator context id
// / 2, the world's is 0), and share (the world rank, or when the job spans
// nodes and the block is the node's, the rank's place among the node's
// ranks, shares of them):
//
//	sleep words: a u32 per area and share, at 4*(area*shares + share)
//	members' parts, at partsOff + (area*shares + share)*partLen
//	(partsOff: the sleep words rounded up to 128 bytes):
//	  slot 0, slot 1, slotStride apart: stamp u32, length u32, data
//
// What goes through the block overtakes the frames sent before it: a PVO
// sent through it could reach a peer before the TPT update lapi sends
// ahead of its owner's frames, and the peer's reads would go by packets
// rather than by cross-memory attach until the update came (mpi's direct
// reads exchange their PVOs by message for that).
//
// A wait that fails (a member failed, a timeout) leaves the members'
// rounds out of step, so the group's later collectives fail with that
// error too. Members must pass the sizes they agree on: within a slot, a
// member whose size differs gets an error wrapping Config.ErrArg; sizes on
// both sides of SlotLen pick different algorithms in the layer above.
//
// An area belongs to one group for the life of the job: mpi never reuses
// a context id, and two communicators with the same id have no member in
// common.
//
// shmcoll imports only the standard library.
package shmcoll
