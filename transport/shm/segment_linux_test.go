package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/hal"
)

// exists reports whether the segment file is there.
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// openRank opens one rank of a job in dir.
func openRank(t *testing.T, key uint64, rank, size int, opts Options) (*Device, error) {
	t.Helper()
	d, err := Open(hal.Config{JobKey: key, Rank: hal.Rank(rank), Size: size}, opts)
	if err == nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, err
}

// mustOpen is openRank for a rank that must open.
func mustOpen(t *testing.T, key uint64, rank, size int, opts Options) *Device {
	t.Helper()
	d, err := openRank(t, key, rank, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The name disappears as soon as every rank has attached; until then it is
// private to this user.
func TestUnlinkWhenAllAttached(t *testing.T) {
	key := newJobKey()
	path := filepath.Join(DefaultDir, SegmentName(key, 0))
	mustOpen(t, key, 0, 3, Options{})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("after the first rank opened: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("segment mode %v, want 0600", st.Mode().Perm())
	}
	mustOpen(t, key, 2, 3, Options{})
	if !exists(t, path) {
		t.Fatalf("segment unlinked with one rank still to come")
	}
	mustOpen(t, key, 1, 3, Options{})
	if exists(t, path) {
		t.Errorf("segment %s still there after every rank attached", path)
	}
}

// A job whose ranks all close before the last one came leaves nothing
// behind either.
func TestUnlinkOnLastClose(t *testing.T) {
	key := newJobKey()
	path := filepath.Join(DefaultDir, SegmentName(key, 0))
	a := mustOpen(t, key, 0, 3, Options{})
	b := mustOpen(t, key, 1, 3, Options{})
	a.Close()
	if !exists(t, path) {
		t.Fatalf("segment unlinked while rank 1 still has it open")
	}
	b.Close()
	if exists(t, path) {
		t.Errorf("segment %s still there after the last Close", path)
	}
}

// A rank that joins a segment whose other users already closed it fails
// rather than wait alone.
func TestAbandoned(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 2, Options{})
	// As if rank 0 had closed (and unlinked) between rank 1's open and
	// its attach.
	*a.seg.life |= lifeUnlinked
	_, err := openRank(t, key, 1, 2, Options{})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("joining an abandoned segment: %v, want ErrMismatch", err)
	}
	t.Log(err)
	*a.seg.life &^= lifeUnlinked
}

// TestRestartedRankCannotConnect: once every rank has attached, the name
// is gone, so a rank that opens again (a restarted process) creates a
// segment of its own under the same name, and nobody reads the rings it
// writes. Connect, either way between it and a rank of the first
// instance, must fail with ErrMismatch naming the cause, not connect them
// and lose their frames.
func TestRestartedRankCannotConnect(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 2, Options{})
	b := mustOpen(t, key, 1, 2, Options{})
	if err := errors.Join(a.Connect(1, b.Addr()), b.Connect(0, a.Addr())); err != nil {
		t.Fatal(err)
	}
	// Rank 1 restarts: its old device stays as a killed process's would,
	// nothing marked, and it opens again.
	b2, err := openRank(t, key, 1, 2, Options{})
	if err != nil {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("Open of rank 1 again: %v; want it to open, or ErrMismatch", err)
		}
		return // refusing here would do too
	}
	if err := b2.Connect(0, a.Addr()); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "another instance") {
		t.Errorf("restarted rank 1: Connect(0) = %v, want ErrMismatch naming another instance of the segment", err)
	}
	if err := a.Connect(1, b2.Addr()); !errors.Is(err, ErrMismatch) {
		t.Errorf("rank 0: Connect(1) to the restarted rank 1 = %v, want ErrMismatch", err)
	}
	if err := a.Connect(1, b.Addr()); err != nil {
		t.Errorf("rank 0: Connect(1) to the first rank 1 again: %v", err)
	}
}

// TestLateRankAfterAbandonCannotConnect: ranks 0 and 1 of 3 open and
// close before rank 2 comes; the last close unlinks the name, so rank 2
// opens a segment of its own, alone. Its Connect to the earlier ranks must
// fail with ErrMismatch rather than let it send into a segment nobody else
// will ever map.
func TestLateRankAfterAbandonCannotConnect(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 3, Options{})
	b := mustOpen(t, key, 1, 3, Options{})
	addrs := []string{a.Addr(), b.Addr()}
	a.Close()
	b.Close()
	c, err := openRank(t, key, 2, 3, Options{})
	if err != nil {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("Open of the late rank 2: %v; want it to open, or ErrMismatch", err)
		}
		return // refusing here would do too
	}
	for r, addr := range addrs {
		if err := c.Connect(hal.Rank(r), addr); !errors.Is(err, ErrMismatch) {
			t.Errorf("late rank 2, alone in %s: Connect(%d) = %v, want ErrMismatch", c.seg.path, r, err)
		}
	}
}

// A creator that fails before sizing the file removes it; a rank waiting
// for it then creates the segment itself.
func TestCreatorFailed(t *testing.T) {
	key := newJobKey()
	path := filepath.Join(DefaultDir, SegmentName(key, 0))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		d, err := Open(hal.Config{JobKey: key, Rank: 1, Size: 2}, Options{})
		if err == nil {
			d.Close()
		}
		res <- err
	}()
	os.Remove(path) // before or after Open found it: either way it recovers
	if err := <-res; err != nil {
		t.Fatalf("Open after its creator gave up: %v", err)
	}
}

// Every rank opening at once: one creates, the others join, all succeed.
func TestCreateRace(t *testing.T) {
	const size = 8
	key := newJobKey()
	devs := make([]*Device, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { devs[r], errs[r] = Open(hal.Config{JobKey: key, Rank: hal.Rank(r), Size: size}, Options{}) })
	}
	wg.Wait()
	creators := 0
	for r, d := range devs {
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
			continue
		}
		defer d.Close()
		if d.seg.creator {
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d ranks created the segment, want 1", creators)
	}
	if exists(t, filepath.Join(DefaultDir, SegmentName(key, 0))) {
		t.Errorf("segment still there after every rank attached")
	}
}

// A segment its creator never finishes fails Open after AttachTimeout with
// an error that says so.
func TestAttachTimeout(t *testing.T) {
	key := newJobKey()
	path := filepath.Join(DefaultDir, SegmentName(key, 0))
	opts := Options{AttachTimeout: 20 * time.Millisecond}
	create := func(size int64) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	create(0) // a creator that died before sizing it
	_, err := openRank(t, key, 1, 2, opts)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Open of a segment never sized: %v, want os.ErrDeadlineExceeded", err)
	}
	t.Log(err)

	os.Remove(path)
	o, _ := opts.withDefaults(2, cacheLine())
	g, _ := newGeometry([]hal.Rank{0, 1}, 2, cacheLine(), o)
	create(g.total) // ... or before initialising it
	_, err = openRank(t, key, 1, 2, opts)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Open of a segment never initialised: %v, want os.ErrDeadlineExceeded", err)
	}
	t.Log(err)
}

// A rank waits past AttachTimeout while the creator, alive, still holds
// the segment's lock (a large job's segment takes seconds to reserve and
// initialise on a loaded node), and joins once it is done.
func TestAttachWaitsForLiveCreator(t *testing.T) {
	key := newJobKey()
	name := SegmentName(key, 0)
	path := filepath.Join(DefaultDir, name)
	opts := Options{AttachTimeout: 20 * time.Millisecond}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil { // a creator at work
		t.Fatal(err)
	}
	joined := make(chan error, 1)
	go func() {
		d, err := Open(hal.Config{JobKey: key, Rank: 1, Size: 2}, opts)
		if err == nil {
			d.Close()
		}
		joined <- err
	}()
	select {
	case err := <-joined:
		unix.Close(fd)
		t.Fatalf("Open returned while the creator held the lock, 5 timeouts in: %v", err)
	case <-time.After(5 * opts.AttachTimeout):
	}
	o, _ := opts.withDefaults(2, cacheLine())
	g, _ := newGeometry([]hal.Rank{0, 1}, 2, cacheLine(), o)
	s, err := createSegment(fd, name, path, &g, key) // sizes, initialises, unlocks
	if err != nil {
		t.Fatal(err)
	}
	defer s.unmap()
	if err := <-joined; err != nil {
		t.Fatalf("Open after the creator finished: %v", err)
	}
}

// Ranks that disagree on the geometry, a rank opened twice, and a segment
// others could read are refused.
func TestMismatch(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		key := newJobKey()
		mustOpen(t, key, 0, 2, Options{Cells: 64})
		_, err := openRank(t, key, 1, 2, Options{Cells: 128})
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank with more cells: %v, want ErrMismatch", err)
		}
		t.Log(err)
	})
	t.Run("header", func(t *testing.T) {
		key := newJobKey()
		mustOpen(t, key, 0, 2, Options{MTU: 1000, RingBytes: 1 << 20})
		_, err := openRank(t, key, 1, 2, Options{MTU: 2000, RingBytes: 1 << 20})
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank with another MTU, same size: %v, want ErrMismatch", err)
		}
		t.Log(err)
	})
	t.Run("rank twice", func(t *testing.T) {
		key := newJobKey()
		mustOpen(t, key, 0, 2, Options{})
		_, err := openRank(t, key, 0, 2, Options{})
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank 0 opened twice: %v, want ErrMismatch", err)
		}
		t.Log(err)
	})
	t.Run("magic", func(t *testing.T) {
		key := newJobKey()
		a := mustOpen(t, key, 0, 2, Options{})
		*word64(a.seg.mem, offMagic) ^= 1
		_, err := openRank(t, key, 1, 2, Options{})
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("joining a segment with a bad magic: %v, want ErrCorrupt", err)
		}
		*word64(a.seg.mem, offMagic) ^= 1
	})
	t.Run("mode", func(t *testing.T) {
		key := newJobKey()
		path := filepath.Join(DefaultDir, SegmentName(key, 0))
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := openRank(t, key, 0, 2, Options{})
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("a world-readable segment: %v, want ErrMismatch", err)
		}
		t.Log(err)
	})
	t.Run("options", func(t *testing.T) {
		for _, o := range []Options{{Cells: 3}, {CellSize: 32}, {RingBytes: 64 << 10}, {MTU: -1}, {PollBatch: -1}} {
			if _, err := openRank(t, newJobKey(), 0, 1, o); err == nil {
				t.Errorf("Open with %+v succeeded", o)
			}
		}
		if _, err := openRank(t, newJobKey(), 2, 2, Options{}); !errors.Is(err, hal.ErrUnknownPeer) {
			t.Errorf("Open of rank 2 of 2: %v, want hal.ErrUnknownPeer", err)
		}
	})
}

// Frames sent before the receiver opens wait for it; a closed receiver
// refuses them.
func TestLifecycle(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 2, Options{})
	if err := a.Send(header(key, 0, 1, 0), nil); err != nil {
		t.Fatalf("Send before the receiver opened: %v", err)
	}
	b := mustOpen(t, key, 1, 2, Options{})
	if n, err := b.Poll(ignore); n != 1 || err != nil {
		t.Errorf("receiver opened late: Poll %d, %v; want the frame sent before", n, err)
	}
	b.Close()
	if err := a.Send(header(key, 0, 1, 0), nil); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Send to a closed device: %v, want hal.ErrUnknownPeer", err)
	}
}

func TestConnect(t *testing.T) {
	devs, _ := openLocal(t, 2, Options{})
	d := devs[0]
	other := SegmentName(newJobKey(), 0)
	seg, nonce := "shm:"+d.seg.name, fmt.Sprintf(":%016x", d.seg.nonce)
	for _, addr := range []string{"", "shm", "udp:1.2.3.4:5", seg + ":1", seg + ":1:1", seg + ":x:1" + nonce,
		seg + ":1:0" + nonce, seg + ":0:1" + nonce, "shm:" + other + ":1:1" + nonce, "shm::1:1" + nonce,
		seg + ":1:1:", seg + ":1:1:0000000000000000", seg + ":1:1:12345", seg + ":1:1:0x12345678901234",
		seg + ":1:1:zzzzzzzzzzzzzzzz", seg + ":1:1:1234567890abcdef0", seg + ":1:1" + nonce + ":1",
		seg + ":-1:1" + nonce, seg + ":1:-1" + nonce, seg + ":99999999999:1" + nonce} {
		if err := d.Connect(1, addr); !errors.Is(err, hal.ErrUnknownPeer) {
			t.Errorf("Connect(1, %q): %v, want hal.ErrUnknownPeer", addr, err)
		}
	}
	if err := d.Connect(1, fmt.Sprintf("%s:1:%d:%016x", seg, os.Getpid(), d.seg.nonce^2)); !errors.Is(err, ErrMismatch) {
		t.Errorf("Connect(1) with another instance's nonce: %v, want ErrMismatch", err)
	}
	if err := d.Connect(2, devs[1].Addr()); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Connect(2) in a job of 2: %v, want hal.ErrUnknownPeer", err)
	}
}

// TestSharedBlockSize: the block has SharedBytes per rank, or is absent
// when asked for none, and ranks that disagree on its size cannot share a
// segment.
func TestSharedBlockSize(t *testing.T) {
	devs, _ := openLocal(t, 3, Options{SharedBytes: 4096})
	if got := len(devs[2].SharedBlock()); got != 3*4096 {
		t.Errorf("shared block of %d bytes, want %d", got, 3*4096)
	}
	devs, _ = openLocal(t, 2, Options{SharedBytes: -1})
	if b := devs[1].SharedBlock(); b != nil {
		t.Errorf("SharedBytes -1: a block of %d bytes, want none", len(b))
	}

	key := newJobKey()
	dir := t.TempDir()
	a, err := Open(hal.Config{JobKey: key, Rank: 0, Size: 2}, Options{Dir: dir, SharedBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(hal.Config{JobKey: key, Rank: 1, Size: 2}, Options{Dir: dir, SharedBytes: 8192})
	if err == nil {
		b.Close()
		t.Fatal("ranks with shared blocks of 4096 and 8192 bytes per rank shared a segment")
	}
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("mismatched shared blocks: %v, want ErrMismatch", err)
	}
}
