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
// Delivery is exactly-once but not ordered: messages are fragmented into
// self-describing packets that may be placed in any order. Ordering, where
// wanted, is the business of the layer above (mpi).
//
// lapi may import hal, stripe, lazyreg and internal packages; never mpi.
package lapi
