package stripe

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/trace"
)

// TestTraceFailover: at level 1 each rank traces member 1 taken out when
// its network fails (the peer, the reason, and how many members are left
// in toward it), rejoining and back in after reintegration when it heals;
// at level 0 none is traced.
func TestTraceFailover(t *testing.T) {
	for _, l := range []trace.Level{trace.Error, trace.Rare} {
		var buf bytes.Buffer
		restore := trace.Redirect(&buf, l)
		f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
		s := f.stripes(t, testOpts)
		p := newPingPong(t, f, s)
		start := f.now()
		failed, healed := false, false
		p.run(start.Add(250*time.Millisecond), func(now time.Time) {
			if !failed && now.Sub(start) >= 50*time.Millisecond {
				f.nets[1].Isolate(0)
				failed = true
			}
			if !healed && now.Sub(start) >= 150*time.Millisecond {
				f.nets[1].HealAll()
				healed = true
			}
		})
		restore()
		out := buf.String()
		if l < trace.Rare {
			if out != "" {
				t.Errorf("level 0: traced %q", out)
			}
			continue
		}
		for r := range 2 {
			addr := regexp.QuoteMeta(s[r].Member(1).Addr)
			for _, re := range []string{
				`stripe ` + strconv.Itoa(r) + `: member 1 \(` + addr + `\) taken out toward rank ` + strconv.Itoa(1-r) + ` \((silence|peer-deaf)\); 1 of 2 members in toward it`,
				`stripe ` + strconv.Itoa(r) + `: member 1 \(` + addr + `\) rejoining rank ` + strconv.Itoa(1-r),
				`stripe ` + strconv.Itoa(r) + `: member 1 \(` + addr + `\) back in toward rank ` + strconv.Itoa(1-r) + ` after reintegration; 2 of 2 members in toward it`,
			} {
				if !regexp.MustCompile(`(?m)^weft\[\?\] \d+\.\d{6} ` + re + `$`).MatchString(out) {
					t.Errorf("rank %d: no line matching %s in:\n%s", r, re, out)
				}
			}
		}
	}
}
