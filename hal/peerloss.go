package hal

// PeerLoss is implemented by a Device that can find a peer lost without
// sending toward it: over reliable connections a send is what finds a
// dead peer (its adapter stops acknowledging), so a rank that only waits
// for a peer whose process died would wait for ever; a device that
// watches its connections (transport/verbs) reports the loss here. The
// layer above looks at PeersLost when the device's Wait returns (which
// it does, soon, after a loss is found) and takes the list with
// LostPeers when the count moved; it then fails the peer as it does on a
// send's error. Both methods may be called at any time, beside the
// others.
type PeerLoss interface {
	// PeersLost counts the peers found lost since Open. It is cheap (an
	// atomic load): the caller asks LostPeers only when it moved.
	PeersLost() uint64
	// LostPeers appends to dst the peers found lost that it has not
	// returned before, and returns dst.
	LostPeers(dst []LostPeer) []LostPeer
}

// LostPeer is a peer a device found lost, and why (an error wrapping the
// device's own sentinel, as its Send would return).
type LostPeer struct {
	Peer Rank
	Err  error
}
