package pmi

import (
	"maps"
	"testing"
)

// TestSnapshotRecord: fields written by AppendField, plain, empty, and
// holding spaces, quotes and '=', read back whole by ParseRecord.
func TestSnapshotRecord(t *testing.T) {
	want := map[string]string{
		"op": "Recv", "peer": "1", "failed": "", "what": `Barrier, step Recv from rank 0 "x=y"`, "tag": "7",
	}
	b := []byte("waiting")
	for _, k := range []string{"op", "peer", "failed", "what", "tag"} {
		b = AppendField(b, k, want[k])
	}
	kind, got := ParseRecord(string(b) + "\n")
	if kind != "waiting" || !maps.Equal(got, want) {
		t.Errorf("ParseRecord(%q) = %q, %q; want waiting, %q", b, kind, got, want)
	}
	if kind, got := ParseRecord("end"); kind != "end" || len(got) != 0 {
		t.Errorf("ParseRecord(end) = %q, %q", kind, got)
	}
	if f := SnapshotFile(3); f != "weft-snapshot-rank3.txt" {
		t.Errorf("SnapshotFile(3) = %q", f)
	}
}
