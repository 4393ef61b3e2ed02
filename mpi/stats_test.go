package mpi

import (
	"slices"
	"testing"
)

// TestStats: after 200 round trips of 8 bytes between two ranks, each
// rank's Stats count at least 200 messages and packets each way, its one
// device (in-process here) names itself and its peer and carried at least
// as many frames, and nothing was retransmitted or dropped.
func TestStats(t *testing.T) {
	const n = 200
	got := make([]Stats, 2)
	err := Run(2, func(c *Comm) error {
		before := c.World().Stats()
		buf := []uint64{0}
		for range n {
			if c.Rank() == 0 {
				if err := Send(c, buf, 1, 0); err != nil {
					return err
				}
				if _, err := Recv(c, buf, 1, 0); err != nil {
					return err
				}
			} else {
				if _, err := Recv(c, buf, 0, 0); err != nil {
					return err
				}
				if err := Send(c, buf, 0, 0); err != nil {
					return err
				}
			}
		}
		after := c.World().Stats()
		after.MessagesSent -= before.MessagesSent
		after.MessagesIn -= before.MessagesIn
		got[c.Rank()] = after
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, s := range got {
		if s.MessagesSent < n || s.MessagesIn < n || s.PacketsSent < n {
			t.Errorf("rank %d: %d messages sent, %d in, %d packets sent; want at least %d each", r, s.MessagesSent, s.MessagesIn, s.PacketsSent, n)
		}
		if len(s.Devices) != 1 {
			t.Fatalf("rank %d: %d devices, want 1: %+v", r, len(s.Devices), s.Devices)
		}
		d := s.Devices[0]
		if d.Name != "inproc" || !slices.Equal(d.Peers, []int{1 - r}) {
			t.Errorf("rank %d: device %q toward %v, want inproc toward [%d]", r, d.Name, d.Peers, 1-r)
		}
		if d.FramesSent < n || d.FramesRecv < n || d.BytesSent == 0 || d.Dropped != 0 || s.Retransmits != 0 {
			t.Errorf("rank %d: device sent %d frames (%d B), received %d, dropped %d; %d retransmits", r, d.FramesSent, d.BytesSent, d.FramesRecv, d.Dropped, s.Retransmits)
		}
	}
}
