package lapi

import "time"

// rttEstimator is RFC 6298's smoothed round-trip time and variance.
// Samples come only from packets sent once (Karn's rule): an acknowledgement
// of a retransmitted packet cannot say which transmission it answers.
type rttEstimator struct {
	srtt, rttvar time.Duration
	have         bool
}

func (e *rttEstimator) sample(r time.Duration) {
	if r < 0 {
		return
	}
	if !e.have {
		e.srtt, e.rttvar, e.have = r, r/2, true
		return
	}
	d := e.srtt - r
	if d < 0 {
		d = -d
	}
	// https://www.rfc-editor.org/rfc/rfc6298#section-2.3
	e.rttvar = (3*e.rttvar + d) / 4
	e.srtt = (7*e.srtt + r) / 8
}

// rto is the retransmission timeout before back-off, clamped to [lo, hi];
// init applies until the first sample.
func (e *rttEstimator) rto(init, lo, hi time.Duration) time.Duration {
	r := init
	if e.have {
		r = e.srtt + 4*e.rttvar
	}
	return min(max(r, lo), hi)
}
