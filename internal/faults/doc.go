// Package faults is weft's one fault-injection layer: the WEFT_FAULTS
// specification (loss, reordering, duplication, corruption), a seeded
// per-frame Decider, and Wrap, a hal.Device decorator that applies the
// Decider's verdicts on the send side of a real device.
//
// The same Decider drives internal/simnet, so a fault scenario found on the
// simulated network replays on inproc or udp with the same seed, and the
// other way round.
//
// # Determinism
//
// Decisions come from a PCG stream keyed by the seed and by the sending
// device (its rank and device index, see Stream). The n-th frame a device
// sends always gets the same verdict for a given seed, whatever the other
// ranks do, and every verdict consumes the same number of random draws, so
// raising one rate does not reshuffle the others.
//
// # Imports
//
// faults may import hal and the standard library only. It never imports
// lapi, mpi, stripe or a transport: the transports import it.
package faults
