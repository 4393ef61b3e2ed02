package shm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/trace"
)

// segment is one device's mapping of the job's shared file.
type segment struct {
	name, path string
	mem        []byte
	g          *geometry
	creator    bool
	// nonce tells this instance of the segment from any other made under
	// the same name: drawn by the creator, in the header and in every
	// member's Addr.
	nonce uint64

	// Words of the segment header (line 1).
	ready, life, attached *uint32
}

// openSegment creates the segment, or joins it if another rank created it
// first, and returns it mapped and initialised. It waits at most timeout
// for the creator to finish.
func openSegment(dir, name string, g *geometry, jobKey uint64, timeout time.Duration) (*segment, error) {
	path := filepath.Join(dir, name)
	deadline := time.Now().Add(timeout)
	// O_NOFOLLOW: /dev/shm is world-writable, so the name could be a
	// symbolic link planted by someone else.
	const flags = unix.O_RDWR | unix.O_CLOEXEC | unix.O_NOFOLLOW
	for {
		fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err == nil {
			return createSegment(fd, name, path, g, jobKey)
		}
		if err != unix.EEXIST {
			return nil, fmt.Errorf("shm: create %s: %w", path, err)
		}
		fd, err = unix.Open(path, flags, 0)
		if err == nil {
			s, err := joinSegment(fd, name, path, g, jobKey, deadline)
			if err != errGone {
				return s, err
			}
		} else if err != unix.ENOENT {
			return nil, fmt.Errorf("shm: open %s: %w", path, err)
		}
		// Unlinked between our two opens (its last user closed it), or by
		// a creator that failed: the next O_EXCL may create it afresh.
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("shm: open %s: it keeps appearing and disappearing: %w", path, os.ErrDeadlineExceeded)
		}
	}
}

// createSegment sizes, maps and initialises a segment this rank created.
// On failure it removes the file again, so that the next rank can try.
func createSegment(fd int, name, path string, g *geometry, jobKey uint64) (s *segment, err error) {
	defer unix.Close(fd) // which releases the lock
	defer func() {
		if err != nil {
			_ = unix.Unlink(path)
		}
	}()
	// The lock says "being created" to the ranks that join: while it is
	// held they wait past their timeout (a large job's segment takes
	// seconds to reserve and initialise on a loaded node); once it is
	// released, by this function or by the creator's death, they do not.
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("shm: lock %s: %w", path, err)
	}
	// The mode given to open is filtered by the umask; the segment must be
	// readable by this user only whatever the umask.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, fmt.Errorf("shm: chmod %s: %w", path, err)
	}
	// Reserve every page now: on tmpfs, a page that cannot be allocated
	// when first touched kills the process with SIGBUS, while fallocate
	// fails here with ENOSPC.
	if err := unix.Fallocate(fd, 0, 0, g.total); err != nil {
		if err != unix.EOPNOTSUPP && err != unix.ENOSYS {
			return nil, fmt.Errorf("shm: reserve %d bytes for %s: %w", g.total, path, err)
		}
		if err := unix.Ftruncate(fd, g.total); err != nil {
			return nil, fmt.Errorf("shm: size %s to %d bytes: %w", path, g.total, err)
		}
	}
	s, err = mapSegment(fd, name, path, g)
	if err != nil {
		return nil, err
	}
	s.creator = true
	s.init(jobKey)
	return s, nil
}

// errGone tells openSegment that the file it opened was removed before it
// was sized: its creator failed, and another rank may create it again.
var errGone = errors.New("shm: segment removed by its creator")

// joinSegment maps a segment another rank created, once it is initialised.
func joinSegment(fd int, name, path string, g *geometry, jobKey uint64, deadline time.Time) (*segment, error) {
	defer unix.Close(fd)
	// The creator reserves the size with one call: until then the size is
	// zero and the file must not be mapped (touching it would SIGBUS).
	var st unix.Stat_t
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 2*time.Millisecond) {
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("shm: stat %s: %w", path, err)
		}
		if int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
			return nil, fmt.Errorf("shm: %s belongs to uid %d with mode %#o, not to this user alone: %w",
				path, st.Uid, st.Mode&0o777, ErrMismatch)
		}
		if st.Size == g.total {
			break
		}
		if st.Nlink == 0 {
			return nil, errGone
		}
		if st.Size != 0 {
			return nil, fmt.Errorf("shm: %s has %d bytes, this rank expects %d: the ranks were opened with different sizes, Ranks or Options: %w",
				path, st.Size, g.total, ErrMismatch)
		}
		if time.Now().After(deadline) && !creating(fd) {
			return nil, fmt.Errorf("shm: %s was not sized by its creator in time (did it die? remove the file): %w",
				path, os.ErrDeadlineExceeded)
		}
		time.Sleep(wait)
	}
	s, err := mapSegment(fd, name, path, g)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(deadline, func() bool { return creating(fd) }); err != nil {
		s.unmap()
		return nil, err
	}
	if err := s.check(jobKey); err != nil {
		s.unmap()
		return nil, err
	}
	return s, nil
}

func mapSegment(fd int, name, path string, g *geometry) (*segment, error) {
	mem, err := unix.Mmap(fd, 0, int(g.total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %d bytes of %s: %w", g.total, path, err)
	}
	s := &segment{name: name, path: path, mem: mem, g: g}
	l1 := g.line
	s.ready = word32(mem, l1+offReady)
	s.life = word32(mem, l1+offLife)
	s.attached = word32(mem, l1+offAttached)
	return s, nil
}

func (s *segment) unmap() {
	_ = unix.Munmap(s.mem)
	s.mem = nil
}

// init writes the headers of a fresh (zero-filled) segment, then the ready
// marker that releases the ranks waiting to join.
func (s *segment) init(jobKey uint64) {
	g, b := s.g, s.mem
	*word64(b, offMagic) = segMagic
	*word32(b, offVersion) = segVersion
	*word32(b, offLine) = uint32(g.line)
	*word32(b, offSize) = uint32(g.size)
	*word32(b, offCellSize) = uint32(g.cellSize)
	*word32(b, offCells) = uint32(g.cells)
	*word32(b, offMTU) = uint32(g.mtu)
	*word64(b, offRingBytes) = uint64(g.ringBytes)
	*word64(b, offRingStride) = uint64(g.ringStride)
	*word64(b, offTotal) = uint64(g.total)
	*word64(b, offJobKey) = jobKey
	*word32(b, g.line+offCreator) = uint32(os.Getpid())
	*word64(b, 2*g.line+offSegEnd) = segEnd
	*word64(b, 2*g.line+offSharedBytes) = uint64(g.sharedBytes)
	*word32(b, 2*g.line+offJobSize) = uint32(g.jobSize)
	s.nonce = rand.Uint64() | 1
	*word64(b, 2*g.line+offNonce) = s.nonce
	for i, r := range g.ranks {
		*word32(b, g.rankBlock(i)+offRank) = uint32(r)
	}
	for src := range g.size {
		for dst := range g.size {
			initRing(b, g, src, dst)
		}
	}
	atomic.StoreUint32(s.ready, readyMagic)
	futexWake(s.ready)
}

// creating reports whether the segment's creator still holds its lock:
// it is alive and still sizing or initialising it.
func creating(fd int) bool {
	err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	if err == nil {
		_ = unix.Flock(fd, unix.LOCK_UN)
	}
	return err == unix.EWOULDBLOCK
}

// waitReady waits for the creator's ready marker, past deadline while
// creating reports the creator at work.
func (s *segment) waitReady(deadline time.Time, creating func() bool) error {
	for {
		v := atomic.LoadUint32(s.ready)
		if v == readyMagic {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 && creating() {
			left = 10 * time.Millisecond
		}
		if left <= 0 {
			return fmt.Errorf("shm: %s was not initialised by its creator in time (did it die? remove the file): %w",
				s.path, os.ErrDeadlineExceeded)
		}
		futexWait(s.ready, v, min(left, 10*time.Millisecond))
	}
}

// check compares the header with this rank's view of the job.
func (s *segment) check(jobKey uint64) error {
	g, b := s.g, s.mem
	if m, e := *word64(b, offMagic), *word64(b, 2*g.line+offSegEnd); m != segMagic || e != segEnd {
		return fmt.Errorf("shm: %s: header markers %#x/%#x, want %#x/%#x: %w", s.path, m, e, segMagic, segEnd, ErrCorrupt)
	}
	type field struct {
		name      string
		got, want uint64
	}
	for _, f := range []field{
		{"version", uint64(*word32(b, offVersion)), segVersion},
		{"job key", *word64(b, offJobKey), jobKey},
		{"cache line", uint64(*word32(b, offLine)), uint64(g.line)},
		{"job size", uint64(*word32(b, 2*g.line+offJobSize)), uint64(g.jobSize)},
		{"number of member ranks", uint64(*word32(b, offSize)), uint64(g.size)},
		{"cell size", uint64(*word32(b, offCellSize)), uint64(g.cellSize)},
		{"cells", uint64(*word32(b, offCells)), uint64(g.cells)},
		{"MTU", uint64(*word32(b, offMTU)), uint64(g.mtu)},
		{"ring bytes", *word64(b, offRingBytes), uint64(g.ringBytes)},
		{"ring stride", *word64(b, offRingStride), uint64(g.ringStride)},
		{"total", *word64(b, offTotal), uint64(g.total)},
		{"shared block", *word64(b, 2*g.line+offSharedBytes), uint64(g.sharedBytes)},
	} {
		if f.got != f.want {
			return fmt.Errorf("shm: %s was made with %s %d, this rank has %d: the ranks disagree on the job or its Options: %w",
				s.path, f.name, f.got, f.want, ErrMismatch)
		}
	}
	if s.nonce = *word64(b, 2*g.line+offNonce); s.nonce == 0 {
		return fmt.Errorf("shm: %s: instance nonce 0: %w", s.path, ErrCorrupt)
	}
	for i, r := range g.ranks {
		if got := *word32(b, g.rankBlock(i)+offRank); got != uint32(r) {
			return fmt.Errorf("shm: %s was made with rank %d in slot %d, this rank has rank %d there: the ranks disagree on Options.Ranks: %w",
				s.path, got, i, r, ErrMismatch)
		}
	}
	return nil
}

// attach claims slot r in the segment, publishing the pid and CMA probe
// that peers check, and unlinks the name once every member has attached.
func (s *segment) attach(r, pid int, probeAddr uintptr, probeVal uint64) error {
	// Count ourselves in, unless the segment was abandoned: its name is
	// gone, nobody else will ever find it.
	for {
		v := atomic.LoadUint32(s.life)
		if v&lifeUnlinked != 0 {
			return fmt.Errorf("shm: %s was abandoned: the ranks that had it open closed it before rank %d came: %w",
				s.path, s.g.ranks[r], ErrMismatch)
		}
		if atomic.CompareAndSwapUint32(s.life, v, v+1) {
			break
		}
	}
	blk := s.g.rankBlock(r)
	if !atomic.CompareAndSwapUint32(word32(s.mem, blk+offState), stateFree, stateAttached) {
		s.leave()
		return fmt.Errorf("shm: rank %d is already attached to %s: two processes opened the same rank, or it restarted (not supported): %w",
			s.g.ranks[r], s.path, ErrMismatch)
	}
	atomic.StoreUint32(word32(s.mem, blk+offPid), uint32(pid))
	atomic.StoreUint64(word64(s.mem, blk+offProbeAddr), uint64(probeAddr))
	atomic.StoreUint64(word64(s.mem, blk+offProbeVal), probeVal)
	if int(atomic.AddUint32(s.attached, 1)) == s.g.size {
		// Everyone has it mapped: the name has served its purpose, and
		// without it nothing is left behind however the job ends.
		s.unlink()
	}
	return nil
}

// detach marks slot r closed, drops this rank's reference (unlinking the
// name if it was the last) and unmaps the segment.
func (s *segment) detach(r int) error {
	atomic.StoreUint32(word32(s.mem, s.g.rankBlock(r)+offState), stateClosed)
	err := s.leave()
	s.unmap()
	return err
}

// leave drops one open reference; the last one out unlinks the name.
func (s *segment) leave() error {
	for {
		v := atomic.LoadUint32(s.life)
		n := v&^lifeUnlinked - 1
		nv := n | v&lifeUnlinked
		if n == 0 {
			nv |= lifeUnlinked
		}
		if atomic.CompareAndSwapUint32(s.life, v, nv) {
			if n == 0 && v&lifeUnlinked == 0 {
				return s.removeName()
			}
			return nil
		}
	}
}

// unlink removes the name unless someone already did.
func (s *segment) unlink() {
	for {
		v := atomic.LoadUint32(s.life)
		if v&lifeUnlinked != 0 {
			return
		}
		if atomic.CompareAndSwapUint32(s.life, v, v|lifeUnlinked) {
			if err := s.removeName(); err != nil {
				trace.Printf(trace.Error, "%v", err)
			}
			return
		}
	}
}

func (s *segment) removeName() error {
	if err := unix.Unlink(s.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("shm: unlink %s: %w", s.path, err)
	}
	trace.Printf(trace.Setup, "shm: unlinked %s", s.path)
	return nil
}
