package verbs

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Address is where a device receives: what Addr prints and Connect parses.
//
//	verbs:<gid>:<qpn>:<qkey>:<lid>
//
// gid is the 16-byte GID in 32 lower-case hex digits, qpn the UD queue
// pair number in decimal, qkey the queue key in 8 hex digits, lid the
// port's LID in decimal (0 on RoCE, where the GID alone routes). Example:
// "verbs:00000000000000000000ffffc0000201:17:1a2b3c4d:0". The form has no
// spaces, ';', ',' or '|', so PMI and gorun can carry it as it is.
type Address struct {
	GID  [16]byte
	QPN  uint32
	QKey uint32
	LID  uint16
}

// String formats a as Addr does.
func (a Address) String() string {
	return fmt.Sprintf("verbs:%s:%d:%08x:%d", hex.EncodeToString(a.GID[:]), a.QPN, a.QKey, a.LID)
}

// ParseAddress parses the form String prints.
func ParseAddress(s string) (Address, error) {
	var a Address
	f := strings.Split(s, ":")
	if len(f) != 5 || f[0] != "verbs" {
		return a, fmt.Errorf("verbs: address %q: want verbs:<gid>:<qpn>:<qkey>:<lid>", s)
	}
	if len(f[1]) != 32 {
		return a, fmt.Errorf("verbs: address %q: GID %q is not 32 hex digits", s, f[1])
	}
	if _, err := hex.Decode(a.GID[:], []byte(f[1])); err != nil {
		return a, fmt.Errorf("verbs: address %q: GID: %v", s, err)
	}
	qpn, err := strconv.ParseUint(f[2], 10, 24) // QPNs are 24 bits
	if err != nil {
		return a, fmt.Errorf("verbs: address %q: queue pair number: %v", s, err)
	}
	qkey, err := strconv.ParseUint(f[3], 16, 32)
	if err != nil || len(f[3]) != 8 {
		return a, fmt.Errorf("verbs: address %q: queue key %q is not 8 hex digits", s, f[3])
	}
	lid, err := strconv.ParseUint(f[4], 10, 16)
	if err != nil {
		return a, fmt.Errorf("verbs: address %q: LID: %v", s, err)
	}
	a.QPN, a.QKey, a.LID = uint32(qpn), uint32(qkey), uint16(lid)
	return a, nil
}

// qkeyFor derives the queue key of a job from its key: every device of the
// job uses it, so the adapter itself discards datagrams of other jobs that
// reach a reused queue pair number. The top bit is clear: queue keys with
// it set are privileged.
func qkeyFor(jobKey uint64) uint32 {
	return uint32(jobKey^jobKey>>32) & 0x7fffffff
}
