package pmi

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// The key/value encoding weft puts on every PMI wire.
//
// Why: Hydra 4.0.2 stores a PMI-1 value only up to its first space, drops a
// newline's worth of protocol, and silently truncates keys over 63 bytes and
// values over 1023 bytes (put still answers rc=0); PMI-2 servers cut values at
// the first ';'. So every value is stored as a one-letter tag and a payload
// made only of bytes all of them pass:
//
//	"r" + v         v itself, when v is only [A-Za-z0-9] and -_.:/,@+[]()
//	                (addresses such as tcp://10.0.0.1:4000 stay readable)
//	"b" + b64       otherwise: v in unpadded base64url (RFC 4648 §5)
//
// An encoded value longer than the wire's room (store.room: at most 1000
// bytes, less where the whole request line is bounded) is split: the key
// holds "c" + the decimal chunk count, and chunk i (room bytes of the
// encoded value) is stored under key + "#" + i. Get reassembles it.
//
// Keys made only of [A-Za-z0-9] and -_.:/ and at most keyMax bytes are used
// as they are, unless they begin with "PMI_", the prefix of the keys a PMI
// server predefines (PMI_process_mapping): a caller's key never reads the
// server's value. Any other key is replaced by "~" + 22 characters of
// base64url SHA-256 of it, so that keys of any length and content fit in
// 63 bytes and never collide with a literal key ('~' is not a literal-key
// byte).

const (
	// MaxValueLen is the longest value Put accepts (4 MiB: far above any
	// address card; every chunk costs one round trip to the server).
	MaxValueLen = 4 << 20
	// wireKeyMax and wireValMax are the usable limits of Hydra and Slurm
	// (keylen_max=64, vallen_max=1024, both counting the C string's NUL).
	wireKeyMax = 63
	wireValMax = 1023
	// lineMax is the longest PMI-1 line, newline included, every server
	// takes whole: Slurm 22.05's pmi2 plugin reads PMI-1 requests into a
	// 1024-byte buffer and rejects the rest of a longer line as a new
	// request, so a put's value must leave room for the command around it.
	lineMax = 1023
	// roomMax caps an encoded value stored under one key; minRoom is the
	// least any wire must offer (a kvsname of 256 bytes still leaves more).
	roomMax = 1000
	minRoom = 64
	// keyMax leaves room for the chunk suffix "#" + up to 6 digits.
	keyMax = wireKeyMax - 7
	// maxChunks bounds the chunk count of a MaxValueLen value in base64.
	maxChunks = (MaxValueLen/3*4+4)/minRoom + 1
)

// store is the raw key-value access a client offers: keys and values are
// already safe for the wire. getRaw returns an error wrapping ErrNotFound
// for a missing key; room is the longest value putRaw can carry whole.
type store interface {
	putRaw(key, value string) error
	getRaw(key string) (string, error)
	room() int
}

// putValue encodes value and stores it under key, in chunks if needed.
func putValue(s store, key, value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: %d bytes under key %q (limit %d)", ErrTooLong, len(value), clip(key), MaxValueLen)
	}
	wk := wireKey(key)
	enc := encodeValue(value)
	room := s.room()
	if room < minRoom {
		return fmt.Errorf("%w: the PMI wire leaves %d bytes per value, weft needs %d", ErrRejected, room, minRoom)
	}
	if len(enc) <= room {
		return s.putRaw(wk, enc)
	}
	n := (len(enc) + room - 1) / room
	for i := range n {
		part := enc[i*room : min((i+1)*room, len(enc))]
		if err := s.putRaw(chunkKey(wk, i), part); err != nil {
			return fmt.Errorf("chunk %d of %d of key %q: %w", i, n, clip(key), err)
		}
	}
	// The head goes last so that a reader who sees it finds every chunk.
	return s.putRaw(wk, "c"+strconv.Itoa(n))
}

// getValue reads and decodes the value stored under key by putValue.
func getValue(s store, key string) (string, error) {
	wk := wireKey(key)
	head, err := s.getRaw(wk)
	if err != nil {
		return "", fmt.Errorf("key %q: %w", clip(key), err)
	}
	if !strings.HasPrefix(head, "c") {
		return decodeValue(head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n <= 0 || n > maxChunks {
		return "", fmt.Errorf("%w: key %q holds a bad chunk header %q", ErrBadValue, clip(key), clip(head))
	}
	var b strings.Builder
	for i := range n {
		part, err := s.getRaw(chunkKey(wk, i))
		if err != nil {
			return "", fmt.Errorf("chunk %d of %d of key %q: %w", i, n, clip(key), err)
		}
		b.WriteString(part)
	}
	return decodeValue(b.String())
}

func chunkKey(wk string, i int) string { return wk + "#" + strconv.Itoa(i) }

// serverKeyPrefix begins every key a PMI server predefines.
const serverKeyPrefix = "PMI_"

// wireKey maps a caller's key to the key stored on the wire.
func wireKey(key string) string {
	if key != "" && len(key) <= keyMax && allBytes(key, isKeyByte) && !strings.HasPrefix(key, serverKeyPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + base64.RawURLEncoding.EncodeToString(sum[:])[:22]
}

// encodeValue returns the tagged wire form of v.
func encodeValue(v string) string {
	if allBytes(v, isValueByte) {
		return "r" + v
	}
	return "b" + base64.RawURLEncoding.EncodeToString([]byte(v))
}

// decodeValue inverts encodeValue.
func decodeValue(enc string) (string, error) {
	if enc == "" {
		return "", fmt.Errorf("%w: empty stored value (not written by weft?)", ErrBadValue)
	}
	switch enc[0] {
	case 'r':
		return enc[1:], nil
	case 'b':
		b, err := base64.RawURLEncoding.DecodeString(enc[1:])
		if err != nil {
			return "", fmt.Errorf("%w: stored value %q is not base64url: %v", ErrBadValue, clip(enc), err)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("%w: stored value %q has an unknown tag (not written by weft?)", ErrBadValue, clip(enc))
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isKeyByte(c byte) bool { return isAlnum(c) || strings.IndexByte("-_.:/", c) >= 0 }

func isValueByte(c byte) bool { return isAlnum(c) || strings.IndexByte("-_.:/,@+[]()", c) >= 0 }
