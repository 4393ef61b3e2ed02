package stripe

import (
	"encoding/binary"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// A member's link toward a peer is judged from both ends. This end sees
// what arrives: a link on which the peer delivers nothing while it
// delivers on the other members is silent (heard). Only the peer sees
// whether what this end sends arrives: each probe carries, per member,
// whether the prober hears the probed rank on it (probe.go), and a link
// the peer reports deaf is taken out here too. So a link that fails in one
// direction only is taken out at both ends, and nothing is sent into it
// while the other members work. Each peer's links are judged apart: a
// member that fails toward one peer still carries frames toward the
// others.

// Outages counts the links (member, peer) taken out so far, and the
// members replaced (hal.Failover): the layer above resends what it has in
// flight when it changes.
func (d *Device) Outages() uint64 { return d.outages.Load() }

// heard records that member m delivered a frame from src at now: src's
// link on m is fresh, and src is checked for silent links once every
// member has been polled (checkSilence). An out link that is heard may
// rejoin.
func (d *Device) heard(m *member, src hal.Rank, ps *peerState, now time.Time) {
	if ps == nil {
		return
	}
	ps.recv++
	ps.lastAny = now
	l := &ps.links[m.idx]
	l.heard, l.window, l.mark = now, now, ps.recv
	if !ps.polled {
		ps.polled = true
		d.polled = append(d.polled, src)
	}
	if l.state == linkOut {
		d.maybeRejoin(m, src, ps, now)
	}
}

// checkSilence takes out, toward each peer that delivered frames in this
// Poll, the links that have been silent for Silence while the peer
// delivered at least SilenceFrames frames (on any member) since their
// window started. It runs after every member was polled: after a stall,
// the first member drained must not make the others look silent. A
// window restarts whenever it is older than Silence without that much
// progress, so only recent progress counts against a link: after a quiet
// spell a link is not blamed for the first frames of a burst.
func (d *Device) checkSilence(now time.Time) {
	for _, src := range d.polled {
		ps := d.peers[src]
		ps.polled = false
		for k := range ps.links {
			o := &ps.links[k]
			if o.state != linkIn || now.Sub(o.heard) < d.opts.Silence {
				continue
			}
			if ps.recv-o.mark >= uint64(d.opts.SilenceFrames) {
				d.takeOut(d.members[k], src, ps, ReasonSilence, now)
			} else if now.Sub(o.window) >= d.opts.Silence {
				o.window, o.mark = now, ps.recv
			}
		}
	}
	d.polled = d.polled[:0]
}

// hears is the report for a probe to a peer: bit i set unless the peer
// has been heard lately on another member but not on member i for
// Silence. A peer not heard lately at all gives no evidence and is
// reported heard.
func (d *Device) hears(ps *peerState, now time.Time) uint16 {
	all := uint16(1)<<len(d.members) - 1
	if now.Sub(ps.lastAny) >= d.opts.Silence {
		return all
	}
	for i := range ps.links {
		if now.Sub(ps.links[i].heard) >= d.opts.Silence {
			all &^= 1 << i
		}
	}
	return all
}

// report takes a probe's report from src: the members on which src hears
// us. A link reported deaf is taken out, unless it came in within
// Silence (the report may predate the reintegration, during which the
// peer heard us on it) or is rejoining (the reintegration is the test);
// one no longer reported deaf may rejoin. Reports older than the last one
// taken from the same life of the peer's stripe (probes overtake each
// other on different members) are ignored; a peer that restarted counts
// its rounds from 1 again, and its first report is taken at once.
func (d *Device) report(src hal.Rank, ps *peerState, payload []byte, now time.Time) {
	round, life := binary.LittleEndian.Uint32(payload[8:]), binary.LittleEndian.Uint32(payload[12:])
	if life == ps.life && round-ps.round > 1<<31 {
		return // older than one already taken
	}
	ps.round, ps.life = round, life
	deaf := ^uint32(binary.LittleEndian.Uint16(payload[6:])) & (1<<len(d.members) - 1)
	for i, m := range d.members {
		l := &ps.links[i]
		is := deaf&(1<<i) != 0
		switch {
		case is && l.state == linkIn && now.Sub(l.in) < d.opts.Silence:
			// Stale: it came in since the peer last missed us.
		case is && l.state == linkJoining:
			l.deaf = true // the reintegration under way is the test
		case is:
			l.deaf = true
			d.takeOut(m, src, ps, ReasonPeerDeaf, now)
		case l.deaf:
			l.deaf = false
			if now.Sub(l.heard) < d.opts.Silence {
				d.maybeRejoin(m, src, ps, now)
			}
		}
	}
}
