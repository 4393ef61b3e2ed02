// Package verbs is weft's device over rdma-core (libibverbs): frames travel
// over a reliable-connected queue pair per peer, so the device is reliable
// and ordered and LAPI runs no reliability of its own above it (no
// sequence numbers, acknowledgements, timers or CRC); with
// Options.Datagrams they travel as unreliable datagrams (a UD queue pair)
// with LAPI's reliability above, as over transport/udp. RDMA Write and
// Read on registered memory go over reliable-connected queue pairs of
// their own, one per peer, moved by the adapters themselves
// (hal.OneSided). On a host without an RDMA NIC, soft-RoCE (the rdma_rxe
// module) gives a device over any Ethernet interface; the tests run on it
// inside a VM.
//
// # Building
//
// The device uses cgo and exists only in binaries built with the build tag
// verbs on Linux, with libibverbs' headers installed (Debian/Ubuntu:
// apt-get install libibverbs-dev):
//
//	go build -tags verbs ./...
//
// Without the tag (or without cgo) the package still compiles: Open then
// returns ErrNotBuilt, and Built is false.
//
// # The device
//
// Open picks a device and port (Options.Device and Options.Port, by default
// the first active port found) and a source GID (Options.GIDIndex, by
// default the port's RoCE v2 GID holding an IPv4 address), and makes a
// protection domain, a UD queue pair, a send and a receive completion
// queue, and a completion channel on the receive queue. Its send and
// receive rings are anonymous memory mappings registered once
// (ibv_reg_mr) for the device's lifetime; they are outside the Go heap, so
// no runtime.Pinner is involved and registration never pins a page that
// holds Go objects. Addr is an Address: GID, UD queue pair number, queue
// key (derived from the job key, so the adapter discards datagrams of
// other jobs) and LID, published through PMI.
//
// # Frames over reliable connections (the default)
//
// Caps: reliable, ordered; MTU FrameSlot (8 KiB) less hal.HeaderLen: a
// frame is one RC SEND, which the adapter cuts into packets of the
// port's MTU. Open also makes a shared receive queue of Options.RecvRing
// buffers of FrameSlot bytes (512, 4 MiB), a completion queue for it and
// one for frame sends, Options.SendRing send slots, and connects two queue
// pairs to each other for this rank's frames to itself. The UD queue pair
// then carries hellos only (below), and belongs to a goroutine of the
// device's (connLoop), which sleeps on a completion channel of its own.
//
// Connect starts the peer's connection at once: connLoop makes a queue
// pair for frames toward the peer (INIT) and sends hellos (flag
// helloFrames) until the peer's device, which answers whether or not its
// user is polling, has connected its own; each side moves its queue pair
// to RTR and RTS on the other's hello. So the connections come up while
// the job starts, and lapi, which asks Caps once when it opens, is told
// reliable from the first frame. A Send toward a peer whose connection is
// not up yet waits for it, at most Options.ConnectTimeout (20 s); past
// that, or once the connection broke, Send returns an error wrapping
// ErrPeerLost, which lapi turns into the peer's failure. The frame queue
// pairs retry a lost packet 6 times at a 268 ms timeout (7 would be
// "for ever" on rxe), so a send toward a dead peer fails within about
// 2 s; a receiver out of buffers makes the sender wait (receive not
// ready, retried for ever: back-pressure, not an error). A rank that only
// waits learns of a dead peer too: connLoop asks each connected peer it
// has not heard from lately to answer (a hello with helloWant, every
// sixth of Options.PeerTimeout) and declares one silent for all of
// Options.PeerTimeout (5 s) lost; the device reports it through
// hal.PeerLoss, its Wait returning, and lapi fails the peer. A closing
// device tells its peers (helloBye), so a rank that finished is not
// taken for one that died. Frames and RDMA
// use separate queue pairs so that a refused RDMA access (which puts its
// queue pair in error, and which lapi recovers from) never loses a
// frame.
//
// Send copies the frame into a free registered slot and queues it; Flush
// posts what is queued, consecutive frames to one peer in one
// ibv_post_send of up to 32, the last of each and every 32nd on a queue
// pair signaled, frames of up to 256 bytes inline. Send completions are
// reaped when half the slots are in flight and every 16th Flush (a
// failed one marks its peer lost); with every slot in flight Send returns
// hal.ErrNoResource. Poll drains the frames' receive completion queue,
// checks each frame's header (job key, destination; no CRC, which the
// link and the adapter's ICRC cover), and posts buffers back to the
// shared receive queue once half a batch (16), or half the ring when
// Options.RecvRing is smaller than a batch, has collected. Receive
// completions go to the channel Wait sleeps on.
//
// # Frames as datagrams (Options.Datagrams)
//
// Caps: unreliable, unordered; MTU the port's active MTU (1024 on rxe over
// a 1500-byte Ethernet MTU, 4096 over jumbo frames) less hal.HeaderLen.
// Receive buffers are 40 bytes longer: the adapter writes the Global Route
// Header in front of every datagram. Connect makes an address handle.
//
// Send copies the frame into the next registered send slot and queues it;
// Flush posts the queued frames, up to 32 per ibv_post_send, asking for a
// completion every 32nd and at the end. A slot comes back when its
// completion (or a later one) is reaped, which Send and Flush do without
// blocking; with every slot queued or in flight Send returns
// hal.ErrNoResource. Poll drains the receive completion queue, checks
// every frame (hal.Check with the CRC required, job key, destination
// rank), counts what it drops in hal.Counters, delivers the rest, and
// posts the buffers again after each batch. Wait polls the receive
// completion queue for Options.Spin (default 200 µs), then arms its
// notification and sleeps in ppoll on the completion channel and an
// eventfd that Close and context cancellation write.
//
// # Hardware RDMA
//
// The device implements hal.OneSided. Register and Deregister are
// ibv_reg_mr (local write, and remote read and write as asked) and
// ibv_dereg_mr; the caller keeps the memory pinned (lapi goes through a
// lazyreg cache, which pins Go memory with runtime.Pinner while
// registered). The reliable-connected queue pair toward a peer is made
// when either side first asks OneSidedReady about the other: the devices
// exchange queue pair numbers and first PSNs in hellos, small datagrams of
// their own on the UD queue pair (hello.go: magic "WR", CRC32C) that Poll
// consumes before the frame checks, and move their queue pairs INIT, RTR
// (toward the peer's GID on the port's active MTU) and RTS; a side is
// ready once the peer's hello says it is connected to this side's queue
// pair, and an unanswered hello is sent again after 20 ms (over reliable
// connections connLoop sends them and takes the answers). Write and Read
// post one signaled work request per port's max_msg_sz (8 MiB on rxe);
// PollOneSided reaps one completion queue for all peers, without
// blocking. Options.RCQueue bounds the work in flight (and 256 a queue
// pair's): with no room, Write and Read return hal.ErrNoResource; a
// transfer needing more work requests than there is room for is posted in
// part, and PollOneSided posts the rest as completions free room (so a
// transfer of any size completes), Write and Read returning
// hal.ErrNoResource until all of it is posted. A failed work request (a
// remote access error: an rkey the peer's adapter no longer honours,
// wrapping hal.ErrRemoteAccess) puts
// the queue pair in the error state: what is still posted on it completes
// flushed (wrapping hal.ErrNotConnected: lapi does it again by the
// software engine), and once it has drained it is destroyed and the next
// OneSidedReady connects afresh (the peer replaces its own on the new
// hello). Their completion queue shares the receive queue's completion
// channel: Wait arms both and sleeps until a frame or a completion comes.
//
// A frame that arrives when no receive buffer is posted is dropped by the
// adapter, and the adapter does not count it for this queue pair, so such
// drops are missing from hal.Counters (Options.RecvRing sets the number of
// buffers).
//
// # Errors
//
// The failures a user meets when setting up RDMA come with the fix:
// no device in the kernel (how to add a soft-RoCE device with `rdma link
// add`), device files missing or not accessible (the file, its mode, and
// the group or udev rule that opens it), a port that is not ACTIVE (the
// port, its state and its network interface), and RLIMIT_MEMLOCK too low
// for the rings (`ulimit -l` and the bytes needed).
//
// # Testing
//
// vmtest.sh builds the test binary with -tags verbs and runs it inside
// the soft-RoCE VM of ../shared/rxe-vm/rxe-run (two devices, rxe0 and
// rxe1, on a veth pair): the hal/haltest conformance suite with every rank
// on rxe0, again across rxe0 and rxe1, and the error cases; RDMA Write and
// Read between two queue pairs on rxe0 and across rxe0 and rxe1, exact,
// with a stale key refused and the connection rebuilt (TestOneSided); lapi
// Put and Get over the device by hardware RDMA (TestLapiOneSided); and,
// with -test.bench RegCache, Writes from one buffer with and without the
// registration cache; the frames over reliable connections to the rank
// itself, a dead peer's loss (ErrPeerLost within seconds) found by a
// send and by a rank that only waits, a closed peer not taken for a lost
// one, a connection never answered (ConnectTimeout), no allocation per
// frame and a receive ring smaller than a batch (TestFrames*), the
// device's own ping-pong (-test.bench PingPong), and the suite again with
// Options.Datagrams; TestLapiOneSidedQueue has many Puts wait in lapi for
// room in a device with Options.RCQueue 4, and TestOneSidedLargerThanQueue
// and TestLapiPutLargerThanQueue move transfers needing more work requests
// than the queues hold. TestVM runs
// the script from a plain `go test` when it can (root, qemu, libibverbs-dev
// and the script present) and skips saying what is missing otherwise.
//
// mpitest.sh runs MPI jobs over the device in the same VM, in one boot:
// gorun (static) and the ranks (collcheck and examples/pi, built with the
// tag) go in through the shared directory, and `gorun --transport verbs`
// starts 2 ranks on rxe0 and 3 ranks across rxe0 and rxe1
// (WEFT_VERBS_DEVICE=rxe0,rxe1); each job must print its exact result and
// every rank's device must report, at trace level 2, frames sent and
// received. TestVMMPI runs it as TestVM runs vmtest.sh.
//
// # In MPI jobs
//
// mpi.Init opens this device for every rank when WEFT_TRANSPORT is verbs
// (gorun --transport verbs), choosing the device, port and GID from
// WEFT_VERBS_DEVICE, WEFT_VERBS_PORT and WEFT_VERBS_GID (docs/tuning.md),
// and publishes Addr through the process manager as it does other
// devices' addresses. With WEFT_TRANSPORT auto (the default), in a binary
// built with the tag, every rank tries to open it and says whether it
// could (one PMI fence): if every rank could, it is the network device,
// toward the ranks of other nodes (shared memory stays within a node);
// if any could not, every rank uses UDP (internal/devices' autoVerbs).
// With WEFT_NICS auto keeps the NICs' stripe of UDP devices. Frames go
// over reliable connections in both: mpi does not set
// Options.Datagrams.
//
// # Not yet
//
// Hardware RDMA serves lapi's large Put and Get (and MPI's rendezvous,
// which reads by Get); everything else (active messages, the rendezvous
// of active messages, accumulate, broadcast RDMA's chunks below the
// threshold, transfers before the connection is up) still runs on the
// software engine over frames, so Caps.NativeRDMA stays false.
// A peer lost without a send is reported through hal.PeerLoss, which a
// route or stripe does not pass on yet. The frame queue pairs are made for every peer Connect
// names, at once: a job of N ranks has N-1 of them per rank, plus the RDMA
// ones made on first use. Missing: memory windows (an rkey per TPT entry, invalidated at its
// deregistration: today a region's rkey is its cached registration's,
// honoured until the cache releases it); RDMA Write with immediate data
// for target notification (lapi sends a message after the completion);
// hardware RDMA toward a peer reached
// through a route or stripe; counting adapter drops (the port's
// hw_counters).
//
// The package imports hal, golang.org/x/sys/unix and, with the tag,
// libibverbs through cgo; nothing else in weft uses cgo.
package verbs
