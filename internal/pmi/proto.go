package pmi

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// proto is one wire protocol seen from a rank: the raw store plus the
// collective and lifecycle requests. client wraps it with the value codec,
// locking and the finalized state, the same for every protocol.
type proto interface {
	store
	fence() error
	abort(code int, msg string) error
	finalize() error
}

// client implements Client over a proto.
type client struct {
	mu   sync.Mutex
	p    proto
	kind string
	rank int
	size int
	info Info
	done error // why the client is no longer usable, or nil
}

// broken returns err, and when err is a wire failure (a timeout, a closed
// connection, a reply that does not parse) marks the client unusable: a
// reply may still be in flight, and neither PMI-1's get_result nor
// PMI-2's kvs-get-response names its key, so the next request would read
// the earlier one's answer as its own. Later calls fail naming err. A
// value that arrived whole but does not decode (ErrBadValue) leaves the
// client in step.
func (c *client) broken(err error) error {
	if errors.Is(err, ErrTimeout) || errors.Is(err, ErrClosed) || errors.Is(err, ErrProtocol) {
		c.done = fmt.Errorf("%s client of rank %d unusable, out of step with its server since: %w", c.kind, c.rank, err)
	}
	return err
}

// Rank implements Client.
func (c *client) Rank() int { return c.rank }

// Size implements Client.
func (c *client) Size() int { return c.size }

// Kind implements Client.
func (c *client) Kind() string { return c.kind }

// Info implements Client.
func (c *client) Info() Info { return c.info }

// Put implements Client: it encodes value and splits it across keys as
// the wire needs (codec.go).
func (c *client) Put(key, value string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if err := putValue(c.p, key, value); err != nil {
		return c.broken(fmt.Errorf("%s put: %w", c.kind, err))
	}
	return nil
}

// Get implements Client.
func (c *client) Get(key string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return "", c.done
	}
	v, err := getValue(c.p, key)
	if err != nil {
		return "", c.broken(fmt.Errorf("%s get: %w", c.kind, err))
	}
	return v, nil
}

// Fence implements Client.
func (c *client) Fence() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if err := c.p.fence(); err != nil {
		return c.broken(fmt.Errorf("%s fence (rank %d of %d): %w", c.kind, c.rank, c.size, err))
	}
	return nil
}

// Abort implements Client.
func (c *client) Abort(code int, msg string) error {
	// Not under mu: a rank may abort while another goroutine waits in Fence.
	fmt.Fprintf(os.Stderr, "weft: rank %d of %d aborting the job (exit code %d): %s\n", c.rank, c.size, code, msg)
	if err := c.p.abort(code, msg); err != nil {
		return fmt.Errorf("%s abort: %w", c.kind, err)
	}
	return nil
}

// Finalize implements Client.
func (c *client) Finalize() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = fmt.Errorf("%w: %s client of rank %d already finalized", ErrClosed, c.kind, c.rank)
	if err := c.p.finalize(); err != nil {
		return fmt.Errorf("%s finalize: %w", c.kind, err)
	}
	return nil
}
