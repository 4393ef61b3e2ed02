package hal

// SharedMemory is implemented by devices whose ranks all map the same
// memory: the shm device (a region of the job's segment) and the
// in-process one (the ranks are goroutines of one process). Collectives
// among such ranks can go through it instead of frames: a rank writes its
// part and a flag, the others read them, and nothing is sent.
//
// The device only provides the bytes; how they are laid out is its
// users' business. The device never reads or writes them after creating
// them, and a rank that waits on what another writes there must arrange
// to be sent a frame before it blocks in Wait, which wakes only for
// frames.
type SharedMemory interface {
	// SharedBlock returns the block every rank of the device maps, the
	// same bytes at every rank (at different addresses in different
	// processes), zero when the job's first rank opened the device and
	// aligned to 8 bytes; nil when the device has none. Its length is a
	// multiple of the number of ranks that map it (the job's size, or
	// for a device that serves some ranks of the job, as the shm device
	// of a job across hosts does, theirs): each may be given an equal
	// share. A route (hal.Router) offers its member's block, which only
	// the peers that member reaches share.
	SharedBlock() []byte
}
