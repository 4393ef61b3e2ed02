package hal

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// DropReason says why a device discarded a frame.
type DropReason uint8

// Drop reasons. Every frame a device receives is either delivered or counted
// under exactly one of these.
const (
	DropShort   DropReason = iota // shorter than a header
	DropMagic                     // not a weft frame
	DropVersion                   // another wire version
	DropType                      // unknown frame type
	DropLength                    // length field disagrees with the frame size
	DropCRC                       // CRC32C mismatch, or missing where required
	DropJobKey                    // belongs to another job
	DropPeer                      // addressed to another rank, or from an unknown one
	DropQueue                     // receive queue full
	NumDropReasons
)

var dropNames = [NumDropReasons]string{"short", "magic", "version", "type",
	"length", "crc", "job-key", "peer", "queue-full"}

// String names the reason as the counters print it.
func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", r)
}

// Counters are a device's statistics. They are updated atomically and may be
// read at any time from any goroutine.
type Counters struct {
	FramesSent atomic.Uint64
	FramesRecv atomic.Uint64 // delivered to the layer above
	BytesSent  atomic.Uint64
	BytesRecv  atomic.Uint64
	NoResource atomic.Uint64 // times Send or Flush returned ErrNoResource
	Drops      [NumDropReasons]atomic.Uint64
}

// Drop counts one discarded frame under reason r.
// A reason out of range is counted as DropType rather than panicking.
func (c *Counters) Drop(r DropReason) {
	if r >= NumDropReasons {
		r = DropType
	}
	c.Drops[r].Add(1)
}

// DropErr counts a frame rejected by Check or DecodeHeader under the reason
// err carries (DropLength if err is not a *FrameError).
func (c *Counters) DropErr(err error) {
	// A type assertion first: errors.As would move its target to the heap
	// and make every rejected frame allocate.
	if fe, ok := err.(*FrameError); ok {
		c.Drop(fe.Reason)
		return
	}
	if fe, ok := errors.AsType[*FrameError](err); ok {
		c.Drop(fe.Reason)
		return
	}
	c.Drop(DropLength)
}

// Dropped is the total of all drop reasons.
func (c *Counters) Dropped() uint64 {
	var n uint64
	for i := range c.Drops {
		n += c.Drops[i].Load()
	}
	return n
}

// String prints the non-zero counters on one line.
func (c *Counters) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent=%d/%dB recv=%d/%dB noresource=%d",
		c.FramesSent.Load(), c.BytesSent.Load(), c.FramesRecv.Load(), c.BytesRecv.Load(), c.NoResource.Load())
	for i := range c.Drops {
		if n := c.Drops[i].Load(); n != 0 {
			fmt.Fprintf(&b, " drop.%v=%d", DropReason(i), n)
		}
	}
	return b.String()
}
