package inproc

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// MTU is the largest payload an inproc frame carries: as much as the header's
// length field and hal allow.
const MTU = hal.MaxPayload

// DefaultQueueLen is how many frames an inbox holds before Send toward it
// returns hal.ErrNoResource.
const DefaultQueueLen = 1024

// Fabric is one job's worth of in-process ranks. It is safe for concurrent
// use: each rank's goroutine opens and drives its own device.
type Fabric struct {
	jobKey   uint64
	queueLen int
	inboxes  []inbox

	faults    faults.Spec
	faultsOn  bool
	faultsErr error

	sharedOnce sync.Once
	shared     []byte // the hal.SharedMemory block, made on first use
}

// SharedBytes is each rank's share of the block the fabric's devices offer
// as hal.SharedMemory, the shm device's default.
const SharedBytes = 64 << 10

// sharedBlock is the fabric's shared block, made at the first call: one
// allocation the ranks' goroutines all see, 8-byte aligned.
func (f *Fabric) sharedBlock() []byte {
	f.sharedOnce.Do(func() {
		words := make([]uint64, len(f.inboxes)*SharedBytes/8)
		f.shared = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)
	})
	return f.shared
}

// NewFabric makes the fabric of a job of size ranks (at least 1) whose
// frames carry jobKey. It reads WEFT_FAULTS once, here.
func NewFabric(size int, jobKey uint64) *Fabric {
	f := &Fabric{jobKey: jobKey, queueLen: DefaultQueueLen, inboxes: make([]inbox, max(size, 0))}
	for i := range f.inboxes {
		f.inboxes[i].notify = make(chan struct{}, 1)
	}
	f.faults, f.faultsOn, f.faultsErr = faults.FromEnv()
	return f
}

// SetQueueLen changes how many frames each inbox holds (n >= 1) before Send
// returns hal.ErrNoResource. Call it before any rank opens its device.
func (f *Fabric) SetQueueLen(n int) { f.queueLen = max(n, 1) }

// Size is the number of ranks.
func (f *Fabric) Size() int { return len(f.inboxes) }

// Addr is the address of rank r's device.
func Addr(r hal.Rank) string { return "inproc:" + strconv.FormatUint(uint64(r), 10) }

// Open opens rank's device. A rank has one open device at a time; once it is
// closed the rank may open a new one (a restart), which starts with an empty
// inbox. Frames sent to a rank before its first Open wait in its inbox.
func (f *Fabric) Open(rank hal.Rank) (hal.Device, error) {
	if int(rank) >= len(f.inboxes) {
		return nil, fmt.Errorf("inproc: open rank %d of a %d-rank fabric: %w", rank, len(f.inboxes), hal.ErrUnknownPeer)
	}
	if f.faultsErr != nil {
		return nil, fmt.Errorf("inproc: open rank %d: %w", rank, f.faultsErr)
	}
	box := &f.inboxes[rank]
	box.mu.Lock()
	defer box.mu.Unlock()
	if box.state == stateOpen {
		return nil, fmt.Errorf("inproc: rank %d is already open", rank)
	}
	if box.state == stateClosed {
		box.reset()
	}
	box.state = stateOpen
	d := &device{fabric: f, rank: rank, box: box, done: make(chan struct{}), addr: Addr(rank)}
	if f.faultsOn {
		return faults.Wrap(d, f.faults, time.Now), nil
	}
	return d, nil
}

// Inbox states: frames are queued while a rank is unopened or open, and
// refused once its device is closed, until the rank opens a new one.
const (
	stateUnopened = iota
	stateOpen
	stateClosed
)

// sizeClasses are the capacities of the inbox buffers: a frame takes the
// smallest that fits, so small frames do not pin 64 KiB each.
var sizeClasses = [...]int{128, 512, 2048, 8192, 1 << 16}

// inbox is a rank's receive queue, written by every sender and drained by
// the rank's Poll.
type inbox struct {
	mu    sync.Mutex
	state int
	q     [][]byte // frames waiting for Poll, oldest first
	free  [len(sizeClasses)][][]byte

	// queued is len(q), readable without mu: an empty Poll or Wait must not
	// take the lock, or a spinning receiver starves its senders of it.
	queued atomic.Int32

	// waiting is set while the owner is in Wait, so senders only touch
	// notify when someone may be asleep on it.
	waiting atomic.Bool
	notify  chan struct{}

	// tpt is the TPT the open device shared (hal.SharedAddressSpace):
	// how its peers' RDMA reaches this rank's memory.
	tpt atomic.Pointer[hal.TPT]
}

// get returns a buffer of n bytes from the free list. Call with mu held.
func (b *inbox) get(n int) []byte {
	c := 0
	for sizeClasses[c] < n {
		c++
	}
	if k := len(b.free[c]); k > 0 {
		buf := b.free[c][k-1]
		b.free[c] = b.free[c][:k-1]
		return buf[:n]
	}
	return make([]byte, n, sizeClasses[c])
}

// put returns buf to the free list. Call with mu held.
func (b *inbox) put(buf []byte) {
	c := 0
	for sizeClasses[c] < cap(buf) {
		c++
	}
	b.free[c] = append(b.free[c], buf)
}

// reset forgets a closed device's frames and buffers. Call with mu held.
func (b *inbox) reset() {
	b.q = nil
	b.queued.Store(0)
	b.free = [len(sizeClasses)][][]byte{}
	b.tpt.Store(nil)
}

// wake tells a rank asleep in Wait that its inbox changed.
func (b *inbox) wake() {
	if b.waiting.Load() {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}
