// Package simnet is a seeded, simulated network for deterministic protocol
// tests: New(size, spec) gives one hal.Device per rank, unreliable and
// unordered, joined by links with a fixed latency, losing, duplicating,
// corrupting and reordering frames with the same faults.Decider the real
// devices use under WEFT_FAULTS. Devices also broadcast (hal.Broadcaster):
// a multicast frame goes to every other rank, each copy decided on its own.
//
// # Time
//
// The Network owns a fake clock that moves only when the test says so
// (Advance, Step). A single-goroutine driver loops:
//
//	for {
//		// step the state machines under test, which send and poll
//		if !net.Step() { // advance to the next delivery
//			break      // nothing in flight
//		}
//	}
//
// and runs the same way every time: the deciders are seeded per sending
// rank, frames in flight are ordered by (delivery time, sender, sender's
// sequence), so the same seed and the same calls give a byte-identical
// delivery sequence.
//
// # Wait
//
// A device's Wait returns nil at once when a frame is deliverable or merely
// in flight toward it (the clock is the driver's to advance, so waiting
// would never end in a single-goroutine driver); it blocks only when nothing
// at all is on its way, until another goroutine sends to it, ctx is done, or
// the device is closed or killed.
//
// # Failures
//
// Cut, Heal, Isolate and HealAll partition links (a frame on a cut link is
// lost when sent and when due); Kill makes a rank's device fail every call
// with hal.ErrClosed and lose every frame toward it; Restart gives the rank
// a fresh device, as a restarted process, to test reintegration; SetFilter
// drops chosen frames. Stats accounts for every copy lost.
//
// # Imports
//
// simnet may import hal, internal/faults and the standard library only.
package simnet
