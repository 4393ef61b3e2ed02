package stripe

import (
	"encoding/binary"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// A member is judged from both ends. This end sees what arrives: a member
// that delivers nothing while the others deliver is silent (checkSilence).
// Only the peer sees whether what this end sends arrives: each probe
// carries, per member, whether the prober hears the probed rank on it
// (probe.go), and a member a peer reports deaf is taken out here too. So a
// link that fails in one direction only is taken out at both ends, and
// nothing is sent into it while the other members work.

// takeOut stops member m carrying data frames, for reason. err is the
// device error, nil for silence and peer reports.
func (d *Device) takeOut(m *member, reason OutReason, err error) {
	if reason == ReasonSendError || reason == ReasonPollError {
		if !m.in.Load() && m.sendFailed {
			return // a dead member fails every call: record it once
		}
		m.sendFailed = true
		m.lastErr.Store(&err)
	}
	if !m.in.Load() {
		return
	}
	m.in.Store(false)
	m.reason.Store(uint32(reason))
	m.stats.outs.Add(1)
	d.in--
	d.outages.Add(1)
	if trace.On(trace.Rare) {
		why := reason.String()
		if err != nil {
			why += ": " + err.Error()
		}
		trace.Printf(trace.Rare, "stripe %d: member %d (%s) taken out (%s); %d of %d members in", d.opts.Rank, m.idx, m.dev.Addr(), why, d.in, len(d.members))
	}
}

// Outages counts the members taken out so far (hal.Failover): the layer
// above resends what it has in flight when it changes.
func (d *Device) Outages() uint64 { return d.outages.Load() }

// heard records that m delivered a frame from src at now, and re-admits m
// if it may come back.
func (d *Device) heard(m *member, src hal.Rank, now time.Time) {
	d.recvTotal++
	m.lastRecv, m.window, m.mark = now, now, d.recvTotal
	if int(src) < len(d.peers) && d.peers[src].connected {
		ps := &d.peers[src]
		ps.heard[m.idx], ps.lastAny = now, now
	}
	if !m.in.Load() {
		d.maybeAdmit(m, now)
	}
}

// maybeAdmit brings out member m back in if it has delivered a frame
// within Silence, no peer reports it deaf, and, if a device error took it
// out, a probe has gone out on it since without one (a member that
// receives but cannot send would otherwise flap in and out with every
// frame).
func (d *Device) maybeAdmit(m *member, now time.Time) {
	if m.sendFailed || m.deafPeers > 0 || now.Sub(m.lastRecv) >= d.opts.Silence {
		return
	}
	m.in.Store(true)
	m.stats.ins.Add(1)
	m.backoff, m.skipUntil = 0, 0
	d.in++
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "stripe %d: member %d (%s) back in; %d of %d members in", d.opts.Rank, m.idx, m.dev.Addr(), d.in, len(d.members))
	}
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

// hears is the report for a probe to peer: bit i set unless the peer has
// been heard lately on another member but not on member i for Silence. A
// peer not heard lately at all gives no evidence and is reported heard.
func (d *Device) hears(peer hal.Rank, now time.Time) uint16 {
	ps := &d.peers[peer]
	all := uint16(1)<<len(d.members) - 1
	if now.Sub(ps.lastAny) >= d.opts.Silence {
		return all
	}
	for i, at := range ps.heard {
		if now.Sub(at) >= d.opts.Silence {
			all &^= 1 << i
		}
	}
	return all
}

// report takes a probe's report from src: the members on which src hears
// us. A member newly reported deaf is taken out; one no peer reports deaf
// any more may come back in. Reports older than the last one taken (probes
// overtake each other on different members) are ignored.
func (d *Device) report(src hal.Rank, payload []byte, now time.Time) {
	if int(src) >= len(d.peers) || !d.peers[src].connected {
		return
	}
	ps := &d.peers[src]
	round := binary.LittleEndian.Uint32(payload[8:])
	if round-ps.round > 1<<31 && ps.round-round < 64 {
		return // older than one already taken (a restarted peer starts low: not "older" for long)
	}
	ps.round = round
	deaf := ^uint32(binary.LittleEndian.Uint16(payload[6:])) & (1<<len(d.members) - 1)
	for i, m := range d.members {
		was, is := ps.deafTo&(1<<i) != 0, deaf&(1<<i) != 0
		switch {
		case is && !was:
			m.deafPeers++
			d.takeOut(m, ReasonPeerDeaf, nil)
		case was && !is:
			m.deafPeers--
			if !m.in.Load() {
				d.maybeAdmit(m, now)
			}
		}
	}
	ps.deafTo = deaf
}
