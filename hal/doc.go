// Package hal is weft's hardware abstraction layer: the contract between the
// reliable upper layer (lapi, through stripe) and the devices in transport/*.
//
// A Device is one adapter opened by this process. It moves fixed-format
// frames (a 32-byte little-endian header, then payload) and reports what it
// guarantees through Caps: a reliable, ordered device (inproc, shm) lets LAPI
// skip its sequence and acknowledgement machinery; an unreliable one (udp, or
// any device with faults injected) does not.
//
// Devices never block and never retransmit. Send on a full queue returns
// ErrNoResource and the caller retries after Flush or Poll; Wait is the only
// blocking call and takes a context.
//
// Frame encoding and decoding are pure functions (EncodeHeader, DecodeHeader,
// Seal, Check) so that every device validates frames the same way and counts
// each rejected frame under the reason it failed.
//
// hal may import only the standard library and github.com/klauspost/cpuid/v2
// (to report the CRC32 instruction). It never imports a weft package.
package hal
