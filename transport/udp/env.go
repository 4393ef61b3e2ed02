package udp

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// GSOEnvVar turns GSO (Options.GSO) on or off for the devices OpenFromEnv
// opens: "1"/"on" or "0"/"off". Unset or empty means on.
const GSOEnvVar = "WEFT_GSO"

// McastEnvVar has the devices OpenFromEnv opens join the job's multicast
// group (Options.Multicast = JobGroup(job key)) or not: "1"/"on" or
// "0"/"off". Unset or empty keeps what the caller passed.
const McastEnvVar = "WEFT_UDP_MCAST"

// BatchEnvVar sets Options.Batch for the devices OpenFromEnv opens: frames
// per sendmmsg and datagrams per recvmmsg, 1..MaxBatch. Unset or empty
// keeps what the caller passed (0: DefaultBatch).
const BatchEnvVar = "WEFT_UDP_BATCH"

// OpenFromEnv opens a device like Open, with the environment's settings
// applied, and is how the bootstrap opens UDP devices, so that a user can
// change them without changing the program:
//
//   - WEFT_GSO: GSO on (the default: Options.GSO is set whatever the
//     caller passed) or off ("0"/"off"). At an Ethernet MTU it is what
//     lets a stream of full frames cross the kernel's network stack once
//     per 64 KiB instead of once per frame (bench/results/udp-mtu1500.md
//     has the figures). A kernel or route that cannot segment is detected
//     at the first send and the device falls back.
//   - WEFT_UDP_MCAST: join the job's multicast group ("1"/"on": a frame
//     to every peer then crosses the link once, lapi's Multicast) or not
//     ("0"/"off"); unset keeps Options.Multicast as passed. A link where
//     multicast does not work leaves the device without it
//     (Device.Multicast says why), not an error.
//   - WEFT_UDP_BATCH: the batch (Options.Batch), to measure or tune how
//     many frames one system call carries each way; with GSO a run of
//     frames to one peer is cut at the batch's end as well as at 64 KiB.
//   - WEFT_FAULTS: the device is wrapped with fault injection
//     (internal/faults), which also makes it report itself unreliable
//     whatever the rates.
//
// A malformed variable is an error, not ignored.
func OpenFromEnv(cfg hal.Config, opts Options) (hal.Device, error) {
	spec, ok, err := faults.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	switch v := os.Getenv(GSOEnvVar); v {
	case "", "1", "on":
		opts.GSO = true
	case "0", "off":
		opts.GSO = false
	default:
		return nil, fmt.Errorf("udp: %s=%q: want 1, on, 0 or off", GSOEnvVar, v)
	}
	switch v := os.Getenv(McastEnvVar); v {
	case "":
	case "1", "on":
		opts.Multicast = JobGroup(cfg.JobKey)
	case "0", "off":
		opts.Multicast = netip.AddrPort{}
	default:
		return nil, fmt.Errorf("udp: %s=%q: want 1, on, 0 or off", McastEnvVar, v)
	}
	if v := os.Getenv(BatchEnvVar); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxBatch {
			return nil, fmt.Errorf("udp: %s=%q: want a number of frames in 1..%d", BatchEnvVar, v, MaxBatch)
		}
		opts.Batch = n
	}
	d, err := Open(cfg, opts)
	if err != nil {
		return nil, err
	}
	if !ok {
		return d, nil
	}
	return faults.Wrap(d, spec, nil), nil
}
