package pmi

// gorun --stats sets StatsEnv to "1" for every rank; each rank's Finalize
// then writes its counters to its standard error, one line per layer and
// device, each starting with StatsPrefix, which gorun takes out of the
// rank's output and gathers into one table printed at the end of the job.
// The lines travel the way the rank's output does, so this works over ssh
// as it does here; under another launcher they stay in the output.
//
// A line is StatsPrefix and then space-separated NAME=VALUE fields: rank=R
// and layer=L first (lapi, the rank's reliable layer, or a device's kind:
// shm, udp, stripe, inproc, verbs), then numbers, and for lists
// comma-separated items (peers=1,2; drops=crc:1,queue-full:2; "-" when
// empty).
const (
	// StatsEnv is the variable mpi.Options.Stats is read from.
	StatsEnv = "WEFT_STATS"

	// StatsPrefix starts each of a rank's counter lines.
	StatsPrefix = "weft-stats: "
)
