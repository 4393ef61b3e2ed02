package pmi

import (
	"strconv"
	"strings"
)

// A rank's state snapshot (issue 32) is text, one record a line: a kind,
// then space-separated NAME=VALUE fields, a value with a space, '"' or '='
// in it quoted as Go quotes strings. mpi writes it on a fatal error, on a
// timeout and when the rank receives AskSignal: to the file
// SnapshotFile(rank) in WEFT_SNAPSHOT_DIR when that is set, and, under
// gorun (SnapshotEnv), to the rank's standard error, each line after
// SnapshotPrefix, which gorun takes out of the output, writes to its own
// snapshot directory and sums up; on AskSignal the lines come before the
// answer line (AskEnv), in the same write. The records, in this order:
//
//	snapshot rank= size= pid= reason= time=     always, first
//	waiting op= peer= tag= comm= call= collective= what=
//	                                             the call the rank is blocked in, if any;
//	                                             peer a world rank (-1: any), call the
//	                                             communicator's collective it belongs to (0: none)
//	comm id= rank= size= calls= group=           each communicator: its context id, this
//	                                             rank in it, collectives begun, world ranks
//	pending op= peer= tag= comm= bytes=          posted receives and sends waiting for their peer
//	unexpected source= tag= comm= bytes= complete=
//	                                             messages arrived with no receive for them
//	held count=                                  messages held back behind an earlier one
//	more kind= n=                                entries of kind left out past SnapshotMax
//	lapi reliable= reintegrates= epoch= ready= rcxts= transfers= chunks_waiting= serving= reassembling= outstanding=
//	link peer= failed= unacked= queued= window= rto= srtt= backoff= oldest_age= retries= ack_owed= rdma_ready= peer_epoch= rdma_bytes= rdma_window= rdma_waiting=
//	                                             one per other rank
//	stats ...                                    the StatsPrefix lines' fields (rank= layer= ...)
//	end                                          always, last: the snapshot is whole
const (
	// SnapshotPrefix starts each line of a snapshot a rank sends gorun.
	SnapshotPrefix = "weft-snapshot: "

	// SnapshotEnv is "1" in the environment of the ranks gorun starts:
	// they send it their snapshots.
	SnapshotEnv = "WEFT_GORUN_SNAPSHOT"

	// SnapshotDirEnv is the variable mpi.Options.SnapshotDir is read
	// from.
	SnapshotDirEnv = "WEFT_SNAPSHOT_DIR"

	// SnapshotMax bounds the entries of one kind (pending, unexpected)
	// a snapshot lists; a "more" record counts the rest.
	SnapshotMax = 64
)

// SnapshotFile is the name of rank's snapshot file.
func SnapshotFile(rank int) string { return "weft-snapshot-rank" + strconv.Itoa(rank) + ".txt" }

// AppendField appends " name=value" to b, quoting value when it is empty
// or holds a space, '"' or '='.
func AppendField(b []byte, name, value string) []byte {
	b = append(append(append(b, ' '), name...), '=')
	if value == "" || strings.ContainsAny(value, " \t\n\"=") {
		return strconv.AppendQuote(b, value)
	}
	return append(b, value...)
}

// ParseRecord splits a snapshot line into its kind and fields; a field
// that cannot be read (a bad quote) ends the fields.
func ParseRecord(line string) (kind string, fields map[string]string) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	fields = map[string]string{}
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		name, v, ok := strings.Cut(rest, "=")
		if !ok || strings.Contains(name, " ") {
			return kind, fields
		}
		if strings.HasPrefix(v, `"`) {
			q, err := strconv.QuotedPrefix(v)
			if err != nil {
				return kind, fields
			}
			fields[name], _ = strconv.Unquote(q)
			rest = v[len(q):]
			continue
		}
		val, after, _ := strings.Cut(v, " ")
		fields[name], rest = val, after
	}
	return kind, fields
}
