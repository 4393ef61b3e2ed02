package lapi

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// xchgState collects the values of address exchanges. A fast peer may send
// its value for the next exchange before this rank has finished the current
// one, so values are kept per epoch.
type xchgState struct {
	c     *Context
	epoch uint32
	got   map[uint32][][]byte
	count map[uint32]int
}

// AddressInit exchanges a small value with every rank (LAPI_Address_init):
// it returns each rank's value, indexed by rank, once all have arrived.
// Every rank must call it the same number of times.
func (c *Context) AddressInit(ctx context.Context, local []byte) ([][]byte, error) {
	x := &c.xchg
	c.mu.Lock()
	x.epoch++
	e := x.epoch
	if x.got == nil {
		x.got, x.count = make(map[uint32][][]byte), make(map[uint32]int)
	}
	if x.got[e] == nil {
		x.got[e] = make([][]byte, c.cfg.Size)
	}
	c.mu.Unlock()
	var u [4]byte
	binary.LittleEndian.PutUint32(u[:], e)
	for p := 0; p < c.cfg.Size; p++ {
		if err := c.Amsend(hal.Rank(p), hXchg, u[:], local, SendOpts{}); err != nil {
			return nil, fmt.Errorf("lapi: address exchange with %d: %w", p, err)
		}
	}
	err := c.Wait(ctx, func() (bool, error) {
		for p := 0; p < c.cfg.Size; p++ {
			if err := c.peerFault(hal.Rank(p)); err != nil && x.got[e][p] == nil {
				return false, err
			}
		}
		return x.count[e] == c.cfg.Size, nil
	})
	c.mu.Lock()
	vals := x.got[e]
	delete(x.got, e)
	delete(x.count, e)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return vals, nil
}

func (x *xchgState) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != 4 {
		return nil, nil
	}
	e := binary.LittleEndian.Uint32(uhdr)
	if x.got == nil {
		x.got, x.count = make(map[uint32][][]byte), make(map[uint32]int)
	}
	if x.got[e] == nil {
		x.got[e] = make([][]byte, x.c.cfg.Size)
	}
	buf := make([]byte, n)
	x.got[e][src] = buf
	return buf, e
}

func (x *xchgState) OnComplete(_ hal.Rank, cookie any) {
	e, ok := cookie.(uint32)
	if !ok {
		return
	}
	x.c.mu.Lock()
	x.count[e]++
	x.c.mu.Unlock()
}
