package lapi

import "github.com/weft-hpc/weft/hal"

// The names of hal that the layer above lapi (MPI) needs, so that it
// uses hal only through lapi. Each is the same thing as in hal, not a
// copy: a value crosses between the layers unchanged.

// Rank is a process's index in its job (hal.Rank).
type Rank = hal.Rank

// PVO names a registered region and an offset into it, as Register
// returns it and Put, Get and Rmw take it (hal.PVO).
type PVO = hal.PVO

// PVOLen is the size of a PVO encoded by PutPVO.
const PVOLen = hal.PVOLen

// PutPVO encodes p into b[:PVOLen], to carry it in a message.
func PutPVO(b []byte, p PVO) { hal.PutPVO(b, p) }

// GetPVO decodes a PVO encoded by PutPVO from b[:PVOLen].
func GetPVO(b []byte) PVO { return hal.GetPVO(b) }

// Access is what a registration allows peers to do with a region
// (hal.Access): AccessRead, AccessWrite, or both.
type Access = hal.Access

// The accesses a registration allows.
const (
	AccessRead  = hal.AccessRead  // the peers' Get and RDMA Read
	AccessWrite = hal.AccessWrite // the peers' Put, RDMA Write and Rmw
)

// DeviceCounters are a device's frame counters (hal.Counters), as
// DeviceInfo.Counters holds them.
type DeviceCounters = hal.Counters
