package stripe

import "time"

// takeOut stops member m carrying data frames, for reason. err is the
// device error, nil for silence.
func (d *Device) takeOut(m *member, reason OutReason, err error) {
	if reason != ReasonSilence {
		m.sendFailed = m.sendFailed || reason == ReasonSendError || reason == ReasonPollError
	}
	if err != nil {
		m.lastErr.Store(&err)
	}
	if !m.in.Load() {
		return
	}
	m.in.Store(false)
	m.reason.Store(uint32(reason))
	m.stats.outs.Add(1)
	d.in--
}

// heard records that m delivered a frame at now: it is alive, and an out
// member comes back in (unless a send error took it out and no probe has
// gone out on it since: a member that receives but cannot send would
// otherwise flap in and out with every frame).
func (d *Device) heard(m *member, now time.Time) {
	d.recvTotal++
	m.lastRecv, m.window, m.mark = now, now, d.recvTotal
	if m.in.Load() || m.sendFailed {
		return
	}
	m.in.Store(true)
	m.stats.ins.Add(1)
	m.backoff, m.skipUntil = 0, 0
	d.in++
}

// checkSilence takes out every in member that has delivered nothing for
// Options.Silence while the others delivered at least
// Options.SilenceFrames frames in the current window. The window restarts
// whenever it is older than Silence without enough progress, so only
// recent progress of the others counts against a member: after a quiet
// spell a member is not blamed for the first frames of a burst.
func (d *Device) checkSilence(now time.Time) {
	for _, m := range d.members {
		if !m.in.Load() || now.Sub(m.lastRecv) < d.opts.Silence {
			continue
		}
		if d.recvTotal-m.mark >= uint64(d.opts.SilenceFrames) {
			d.takeOut(m, ReasonSilence, nil)
		} else if now.Sub(m.window) >= d.opts.Silence {
			m.window, m.mark = now, d.recvTotal
		}
	}
}
