// Package shm is weft's intra-host device: ranks of one job on one node
// exchange frames through a shared-memory segment, and move large RDMA
// payloads with cross-memory attach (process_vm_readv/writev), one copy,
// no kernel buffering. It is reliable and ordered, so LAPI runs over it
// without its sequence and acknowledgement machinery.
//
// # Segment
//
// Every rank of the node calls Open with the same job key, size, Ranks
// (see below) and geometry Options. They share one file, /dev/shm/weft-<job key as 16 hex
// digits>-shm<device index>, mode 0600 (gorun removes /dev/shm/weft-<key>-*
// when a job dies, so the prefix must stay). Whoever wins an O_CREAT|O_EXCL
// open creates it: it reserves the whole size with fallocate (so that a full
// /dev/shm fails Open instead of killing a rank with SIGBUS later), writes
// the headers and stores a ready marker; the others open the file, wait
// (bounded by Options.AttachTimeout, with a clear error) for the size and
// the marker, and check that the geometry in the header is theirs.
//
// The name is unlinked as soon as it is no longer needed, by the protocol:
//
//   - the rank whose attach brings the number of attached ranks to the
//     number of members unlinks it (everyone has it mapped; nobody else
//     will look for it);
//   - otherwise the last Close unlinks it (a job that ended before all its
//     ranks came);
//   - a rank that opened the file just before the last Close unlinked it
//     finds the segment abandoned and fails its Open rather than sit alone
//     in it.
//
// The open count and the unlinked flag share one word changed by
// compare-and-swap, so "last one out unlinks" and "a late one joins" cannot
// interleave. A rank that dies before all have attached leaves the file for
// gorun's cleanup.
//
// Restarting a rank (Open again for a rank that was attached) is not
// supported. While the name is there its Open fails (the rank's slot is
// taken). Once it is gone, the restarted rank's Open, like that of a rank
// that comes after every earlier one closed, finds no file and creates a
// new segment under the same name, alone; Open cannot tell this from a
// first start. Connect tells: the creator draws a random nonce for each
// instance of the segment and writes it into the header, every member puts
// it in its Addr, and Connect refuses, with ErrMismatch naming the cause,
// the address of a rank in another instance. Frames need no Connect: a
// rank that sends without one loses its frames in its own instance.
//
// # Some ranks of a job
//
// A job that spans hosts opens shared memory toward the ranks of its own
// host only, and reaches the others through another device, a router
// choosing between them. Options.Ranks lists the job ranks that share the
// segment, ascending: slot i of the segment (its rank block, its rings,
// its share of the shared block) belongs to rank Ranks[i], and the segment
// is sized for len(Ranks) ranks. The device speaks job ranks everywhere
// (frame headers, Send's destination, Connect, ReadFrom, WriteTo, errors
// and traces), looking a rank's slot up in a table of one word per job
// rank; a rank outside Ranks is hal.ErrUnknownPeer. The segment's name is
// then weft-<key>-shm<index>-r<Ranks[0]>: the hosts of a job have no rank
// in common, so two hosts on one /dev/shm (network namespaces of one
// machine) never share a segment, and the members of one host, which all
// give the same Ranks, all find theirs. The creator writes the job's size
// and each slot's rank into the segment, and a member that disagrees fails
// its Open with ErrMismatch. Nil Ranks is every rank of the job, 0..Size-1,
// under the name without a suffix: all members give Ranks, or none does.
//
// # Rings
//
// For every ordered pair of members (src, dst), itself included, the segment
// holds a single-producer, single-consumer ring: a header (a start marker
// with the ring's geometry, the consumer's head, an end marker, each on its
// own cache line and 128-byte line pair; the line size comes from cpuid),
// an array of Cells cells of CellSize bytes, a cache line apart (so that
// their stamps spread over the L1 cache's sets), and a data area of
// RingBytes bytes.
//
// Each frame starts in a cell. The cell begins with a 64-bit stamp, the
// frame's position in the ring plus one, then the frame's length; a frame
// of up to CellSize-16 bytes (an 8-byte payload with its 32-byte header,
// or a small upper-layer message) is stored inline in the cell, so that a
// small message costs the receiver one cache-line transfer. A larger frame
// runs on over the following cells (and the lines between them), up to 32
// of them and a quarter of the ring, while the consumer would hold at most
// half the cells: it then comes in the lines after the stamp, as an inline
// one does. Any other frame is stored contiguously in the data area (a
// frame never wraps: the producer skips to the start of the area instead)
// and the cell holds its position. The stamp is published last with an
// atomic store and polled by the consumer with an atomic load: the stamps
// are the producer's tail. Old data can never look
// like a published frame: a cell holds payload bytes at the stamp's offset
// only under a frame that ran over it, and the consumer zeroes those
// stamps before it gives the cells back. After each frame the producer
// writes into the lines (but the stamp's) that a frame of the same size
// would fill next, in the cells or the data area, once the consumer has
// given them back, so that the next one copies into lines its core holds.
// The stamp's own line it cannot take early, since the consumer polls it;
// PrepareSend (hal.SendPreparer), which lapi gives just before a send,
// takes it for writing (PREFETCHW) while the message is being built.
// The consumer publishes its head (cell and data positions) once the
// callbacks that used the frames have returned: at once after a large
// frame, otherwise when half the cells or a quarter of the data wait to be
// given back, or when it next finds the ring empty, so that a small
// message costs it no shared store on the way to its caller (ring.advance
// says why the producer cannot starve). The producer reads the head only
// when its cached copy says the ring is full, or would be more than half
// full after a frame over cells, and then returns hal.ErrNoResource when
// the ring is full.
//
// Poll visits the rings from each source in turn, from a start that
// rotates, but skips the ring a rank would send itself until it does
// (lapi delivers to itself without the device).
//
// With the defaults for up to 22 ranks (64 cells of 2 KiB, 512 KiB of
// data) a ring takes 648 KiB, so the segment of two ranks takes 2.6 MiB
// and that of eight 41 MiB; DefaultCellSize and DefaultRingBytes shrink the
// cells and data areas of larger jobs.
//
// Ring headers carry magic markers at both ends, checked when the device
// attaches and whenever a ring is used; a corrupted marker, or a cell that
// points outside its ring, is reported as an error wrapping ErrCorrupt and
// the ring is not used again. Nothing read from the shared segment is used
// to index memory before it is checked.
//
// # Waiting
//
// Wait busy-polls the inbound rings for Options.Spin, then sleeps on a futex
// word of the receiving rank in the segment. A sender bumps the word and
// calls FUTEX_WAKE only when the receiver has advertised that it sleeps, so
// the hot path makes no system call. Close and the cancellation of Wait's
// context wake the sleeper the same way; the sleep is also bounded, so an
// idle rank uses no CPU and never spins forever.
//
// # Closing, and peers that die
//
// Close may be called at any time, from any goroutine, as hal allows:
// Send, Poll and the other calls that touch the segment count themselves
// in and out of one word, and the segment is unmapped by the last call out
// of a closed device (life_linux.go). A rank that closes marks its block
// closed, and Sends, ReadFroms and WriteTos toward it fail with
// hal.ErrUnknownPeer.
//
// A rank whose process dies marks nothing. Connect opens a pidfd on each
// peer's process (Linux 5.3 and later; without one a death goes
// unnoticed), which the device looks at when a ring toward the peer is
// full, around each cross-memory transfer (so that a reused pid is never
// read or written), and from Wait every 100 ms. A dead peer is reported
// through hal.PeerLoss, Wait returning so that the layer above looks, and
// a Send toward it whose ring is full fails with hal.ErrUnknownPeer rather
// than hal.ErrNoResource for ever (peerloss_linux.go).
//
// # Cross-memory attach
//
// Device implements hal.CrossMemory: ReadFrom and WriteTo copy between this
// process and a peer's address space with process_vm_readv/writev, using
// the pid the peer publishes in its Addr ("shm:<segment>:<rank>:<pid>:<nonce>",
// the rank being the job's, the nonce its segment instance's).
// Open finds out whether the kernel allows it (Yama ptrace_scope, seccomp),
// Connect probes each peer, and CMA reports the result; a refusal is traced
// once at level 2. The device checks nothing about the remote addresses: the
// caller must have validated every access against its replica of the peer's
// TPT first, since the kernel only checks that the pages are mapped.
//
// # Shared block
//
// Device implements hal.SharedMemory: the segment holds a block of
// Options.SharedBytes per member (64 KiB by default) that the device never
// touches, for the layers above to lay out as they like; its length is a
// multiple of the number of members, and share i is slot i's, rank
// Ranks[i]'s, not rank i's of the job. mpi runs its small
// collectives through it (mpi/shmcoll.go): each rank writes its part and a
// round number, the others read them, and no frame moves unless a waiting
// rank is about to sleep.
//
// # Testing in one process
//
// Each Open maps the segment on its own, as a separate process would, so
// OpenLocal opens all ranks of a job (or of a segment, Options.Ranks) in
// one process, for tests and benchmarks; the package's tests also run two
// real processes.
//
// # Imports
//
// shm imports hal, internal/*, golang.org/x/sys/unix and
// github.com/klauspost/cpuid/v2 only, besides the standard library. It is
// Linux-only; elsewhere Open reports errors.ErrUnsupported.
package shm
