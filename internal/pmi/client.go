package pmi

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Sentinel errors. Every error the package returns wraps one of these (or an
// I/O error from the connection) with context, so callers test with errors.Is.
var (
	// ErrNotFound: Get of a key no rank has put (or not yet visible: puts are
	// only guaranteed visible to other ranks after Fence).
	ErrNotFound = errors.New("pmi: key not found")
	// ErrProtocol: a message that does not follow the wire protocol.
	ErrProtocol = errors.New("pmi: protocol error")
	// ErrBadValue: Get found a stored value that is not in weft's encoding
	// (codec.go): written by another program, or cut by a server. Only that
	// Get fails; the client stays usable.
	ErrBadValue = errors.New("pmi: stored value not in weft's encoding")
	// ErrRejected: the server answered a request with a non-zero rc.
	ErrRejected = errors.New("pmi: request rejected by server")
	// ErrTimeout: no reply within the client's wait limit (see WaitLimit).
	ErrTimeout = errors.New("pmi: timed out")
	// ErrClosed: the connection to the server is gone, or the client was
	// finalized.
	ErrClosed = errors.New("pmi: connection closed")
	// ErrEnv: the environment names a launcher but a variable is missing or
	// malformed.
	ErrEnv = errors.New("pmi: bad launcher environment")
	// ErrNoKVS: started by a launcher whose key-value store weft cannot speak
	// (Open MPI's PMIx, srun --mpi=none) and no GORUN_KVS rendezvous given.
	ErrNoKVS = errors.New("pmi: launcher offers no key-value store weft can use")
	// ErrTooLong: a value over MaxValueLen.
	ErrTooLong = errors.New("pmi: value too long")
)

// Client is a rank's connection to its process manager. The MPI bootstrap
// uses it once at start-up (publish addresses, fence, read peers' addresses)
// and once at exit (Finalize). Methods are safe for concurrent use but are
// serialised: the wire protocols allow one outstanding request.
type Client interface {
	// Rank is this process's rank in the job, 0 <= Rank < Size.
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Kind names the interface in use: "pmi1", "pmi2", "kvs" (environment
	// plus GORUN_KVS rendezvous) or "singleton". For logs and reports.
	Kind() string
	// Info is what the launcher told about the job besides rank and size.
	Info() Info
	// Put stores value under key for all ranks. Keys and values are
	// arbitrary strings (encoded on the wire, see codec.go); a value may be
	// up to MaxValueLen bytes. Visible to other ranks after Fence. Keys are
	// the callers' own: one such as PMI_process_mapping, which the
	// server predefines, names a key of weft's, not the server's value.
	Put(key, value string) error
	// Fence is a barrier over all ranks that makes every Put issued before
	// it visible to every Get issued after it.
	Fence() error
	// Get returns the value put under key, or an error wrapping ErrNotFound
	// (no such key) or ErrBadValue (the value found is not one Put wrote).
	Get(key string) (string, error)
	// Abort asks the launcher to kill the whole job with exit code code.
	// msg is written to this process's stderr first (PMI-1 has no field
	// for it). The launcher normally kills this process too; callers should
	// still exit after Abort returns.
	Abort(code int, msg string) error
	// Finalize tells the launcher this rank is leaving cleanly. Required
	// before exit: Hydra and gorun treat a rank that initialised and exits
	// without it as failed. The client is unusable afterwards.
	Finalize() error
}

// Info is job information beyond rank and size. Fields the launcher did not
// provide hold -1 (numbers) or nil/"" (others).
type Info struct {
	// AppNum is the index of this rank's executable in an MPMD launch
	// (Hydra: 0; Slurm: -1).
	AppNum int
	// JobID identifies the job's key-value space (PMI kvsname / jobid).
	JobID string
	// Node is the index of the node this rank runs on, from
	// PMI_process_mapping; -1 if unknown.
	Node int
	// LocalRanks are the ranks that share this rank's node, ascending,
	// including this one; nil if unknown. Shared-memory transports use it.
	LocalRanks []int
}

// jobKeyName is the key under which rank 0 publishes a derived job key.
const jobKeyName = "weft-jobkey"

// JobKey returns the job's random 64-bit key, which frames carry so that
// traffic of another job (or an earlier run) is dropped. gorun passes it in
// WEFT_JOBKEY (hex). Under a foreign launcher rank 0 draws one, Puts it, and
// every rank reads it after a Fence; in that case JobKey is collective and
// every rank must call it.
func JobKey(c Client) (uint64, error) {
	if s := os.Getenv("WEFT_JOBKEY"); s != "" {
		k, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: WEFT_JOBKEY=%q is not a 64-bit hex number", ErrEnv, s)
		}
		return k, nil
	}
	if c.Rank() == 0 {
		k, err := RandomKey()
		if err != nil {
			return 0, err
		}
		if err := c.Put(jobKeyName, strconv.FormatUint(k, 16)); err != nil {
			return 0, fmt.Errorf("publishing job key: %w", err)
		}
	}
	if err := c.Fence(); err != nil {
		return 0, fmt.Errorf("fence for job key: %w", err)
	}
	s, err := c.Get(jobKeyName)
	if err != nil {
		return 0, fmt.Errorf("reading job key from rank 0: %w", err)
	}
	k, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: job key %q from rank 0 is not hex", ErrProtocol, s)
	}
	return k, nil
}

// RandomKey draws a non-zero random 64-bit key (zero is reserved to mean
// "no key" in frame headers).
func RandomKey() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("pmi: drawing a random key: %w", err)
		}
		if k := binary.LittleEndian.Uint64(b[:]); k != 0 {
			return k, nil
		}
	}
}

// SegmentPrefix is the name prefix of every shared-memory segment of the job
// with this key: /dev/shm/weft-<key as 16 lower-case hex digits>-*. gorun
// removes whatever matches it when the job ends, and sweeps segments of jobs
// whose gorun died, so transports must name their segments with it.
func SegmentPrefix(key uint64) string { return fmt.Sprintf("weft-%016x-", key) }
