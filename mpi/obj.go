package mpi

import (
	"bytes"
	"encoding/gob"
	"fmt"
)

// SendObj sends any Go value that encoding/gob can encode.
func (c *Comm) SendObj(v any, dest, tag int) error {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return fmt.Errorf("mpi: send object of type %T: %w", v, err)
	}
	return Send(c, b.Bytes(), dest, tag)
}

// RecvObj receives a value sent with SendObj into v, a pointer. It probes
// for the message first, so any size fits. The Status counts values, as
// Recv's counts elements: its Count is 1, the one value received (Probe
// gives the size of its encoding in bytes).
func (c *Comm) RecvObj(v any, source, tag int) (Status, error) {
	st, err := c.Probe(source, tag)
	if err != nil {
		return Status{}, err
	}
	buf := make([]byte, st.Count)
	// Receive exactly the probed message: with wildcards another could
	// otherwise slip in between.
	if st, err = Recv(c, buf, st.Source, st.Tag); err != nil {
		return st, err
	}
	if err := gob.NewDecoder(bytes.NewReader(buf)).Decode(v); err != nil {
		return st, fmt.Errorf("mpi: receive object from rank %d (tag %d) into %T: %w", st.Source, st.Tag, v, err)
	}
	st.Count = 1
	return st, nil
}
