package hal

import "errors"

// MR is one registration of memory with a device that does RDMA in
// hardware (OneSided): the keys the adapter knows it by. Addr and Len are
// the registered span in this process's address space; a peer names a
// place in it by its address (Addr plus an offset) and RKey, this process
// names local memory in it by LKey.
type MR struct {
	Addr uint64
	Len  uint64
	LKey uint32
	RKey uint32
	// ID is the device's own name for the registration, which Deregister
	// takes.
	ID uint64
}

// Contains reports whether mem lies wholly inside the registration.
func (m MR) Contains(mem []byte) bool {
	a := addrOf(mem)
	return len(mem) > 0 && a >= m.Addr && uint64(len(mem)) <= m.Len && a-m.Addr <= m.Len-uint64(len(mem))
}

// ErrNotConnected is returned by a OneSided transfer toward a peer whose
// connection is not set up (OneSidedReady is false).
var ErrNotConnected = errors.New("hal: no one-sided connection to peer")

// ErrRemoteAccess is wrapped by the error a OneSided completion reports
// when the peer's adapter refused the access (an rkey it no longer holds,
// an address outside the registration, access the registration does not
// allow). Nothing was written at the peer.
var ErrRemoteAccess = errors.New("hal: remote access refused by the peer's adapter")

// OneSided is implemented by devices that do RDMA Write and Read in
// hardware on registered memory (the verbs device's reliable-connected
// queue pairs): the adapter moves the data, with no packet of the software
// engine and no work by the peer's CPU. The layer above finds it by type
// assertion, as it finds CrossMemory, and uses it for large transfers
// toward peers OneSidedReady names, keeping the software engine for the
// rest.
//
// Register and Deregister may be called from any goroutine at any time
// before Close. OneSidedReady, Write, Read and PollOneSided are called as
// Send, Flush and Poll are: never concurrently with each other or with
// those (the caller's progress lock). None of them blocks: a full queue
// returns ErrNoResource. A completion wakes the device's Wait, as a frame
// does.
type OneSided interface {
	// Register registers mem for local access and for the remote access
	// acc allows, and returns its keys. The caller keeps mem alive and
	// unmoved until Deregister (lazyreg pins Go memory while registered).
	Register(mem []byte, acc Access) (MR, error)
	// Deregister undoes one Register; the adapter refuses the keys after.
	Deregister(MR) error
	// OneSidedReady reports whether Write and Read toward peer may be
	// posted now. When not, the device starts setting up the connection
	// (frames of its own, consumed inside Poll), and a later call may
	// report true; meanwhile the caller uses another path.
	OneSidedReady(peer Rank) bool
	// Write posts an RDMA Write of local, at least one byte that lies
	// inside mr, to raddr at peer under rkey. The device reads local
	// until the completion tagged id is reported.
	Write(peer Rank, id uint64, local []byte, mr MR, raddr uint64, rkey uint32) error
	// Read posts an RDMA Read of len(local) bytes (at least one) at
	// raddr at peer under rkey into local, which lies inside mr; local
	// holds the data once the completion tagged id is reported.
	Read(peer Rank, id uint64, local []byte, mr MR, raddr uint64, rkey uint32) error
	// PollOneSided calls fn for each Write and Read that has completed,
	// without blocking, with nil or the reason it failed, and returns how
	// many. Each id is reported once. ErrRemoteAccess: the peer's adapter
	// refused it. ErrNotConnected: the connection broke (on another
	// request) before this one was carried out, or while it was, so part
	// of it may have been done; doing it again, by another path, is safe,
	// since a Write or a Read done twice leaves what one leaves.
	PollOneSided(fn func(id uint64, err error)) (int, error)
}
