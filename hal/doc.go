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
// RDMA for devices without native RDMA is a software engine, split by
// concern: tpt.go (the rank's translation and protection table, PVOs and
// keys), rcxt.go (the origin's rCxt pool: keys and ever-growing tids),
// rdma.go (the self-describing RDMA packet: a pure codec with a fuzz
// test), stream.go (one drive of a transfer cut into packets) and
// engine.go (placement at the target as a state machine: tid rules, an
// arrival bitmap per transfer, completions, protection faults, half-RDMA
// hand-up, read serving). HAL never retransmits: the ULP redrives.
// reint.go is the reintegration protocol, also a state machine.
//
// Devices may offer more than frames, through optional interfaces a caller
// finds by type assertion (cma.go, shared.go): CrossMemory (single-copy
// reads and writes of a peer's memory), SharedAddressSpace (peers that are
// goroutines of this process) and SharedMemory (a block of memory every
// rank maps, for collectives that need no frames).
//
// hal may import only the standard library, github.com/klauspost/cpuid/v2
// (to report the CRC32 instruction), internal/crc32c (the frames' CRC32C,
// folded with AVX-512 where the processor has it) and internal/track (the
// leak report). It imports no weft layer.
package hal
