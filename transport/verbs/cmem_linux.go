//go:build verbs && linux && cgo

package verbs

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

typedef struct { uint32_t slot; uint32_t len; int32_t status; uint32_t pad; } weft_rx;                                                    // cverbs.go
typedef struct { struct ibv_ah *ah; uint64_t wr_id; uint32_t slot; uint32_t len; uint32_t qpn; uint32_t qkey; uint32_t signaled; uint32_t pad; } weft_tx; // cverbs.go
typedef struct { uint64_t wr_id; int32_t status; uint32_t qp_num; } weft_rc_wc;                                                           // rc_linux.go
*/
import "C"

import "unsafe"

// scratch is what the frame paths hand C on every call: completion and
// work request batches and the counts C returns. It lives in C's memory,
// not in the Device: cgo checks every Go pointer passed to C, walking
// the array it points into, on every call of the latency path; a
// pointer to C memory it lets through at once.
// Each batch belongs to one path, as the fields it replaced did: cqe and
// repost to the receive side (rxMu), ftx, fwc and fposted to Send and
// Flush over reliable connections, utx, uposted, last and bad to the UD
// queue pair's sender (Flush with Datagrams, else connLoop).
type scratch struct {
	cqe     [batch]C.weft_rx
	repost  [2 * batch]C.uint32_t
	ftx     [batch]C.weft_tx
	fwc     [batch]C.weft_rc_wc
	utx     [batch]C.weft_tx
	fposted C.int
	uposted C.int
	bad     C.int
	last    C.uint64_t
}

// newScratch allocates a zeroed scratch from C (C.malloc never returns
// nil: it fails the program when out of memory); freeScratch frees it.
func newScratch() *scratch {
	s := (*scratch)(C.malloc(C.size_t(unsafe.Sizeof(scratch{}))))
	*s = scratch{}
	return s
}

func freeScratch(s *scratch) {
	if s != nil {
		C.free(unsafe.Pointer(s))
	}
}
