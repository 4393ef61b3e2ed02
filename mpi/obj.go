package mpi

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"
)

// SendObj sends any Go value that encoding/gob can encode.
func (c *Comm) SendObj(v any, dest, tag int) error {
	if c == nil {
		return errNilComm("SendObj")
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return fmt.Errorf("mpi: send object of type %T: %w", v, err)
	}
	return Send(c, b.Bytes(), dest, tag)
}

// RecvObj receives a value sent with SendObj into v, a pointer, replacing
// what *v held. It probes for the message first, so any size fits. The
// Status counts values, as Recv's counts elements: its Count is 1, the
// one value received (Probe gives the size of its encoding in bytes).
func (c *Comm) RecvObj(v any, source, tag int) (Status, error) {
	if c == nil {
		return Status{}, errNilComm("RecvObj")
	}
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
	if err := decodeObj(buf, v); err != nil {
		return st, fmt.Errorf("mpi: receive object from rank %d (tag %d) into %T: %w", st.Source, st.Tag, v, err)
	}
	st.Count = 1
	return st, nil
}

// BcastObj broadcasts root's *v, any value encoding/gob can encode, into
// every rank's v, a pointer (mpi4py's comm.bcast), replacing what *v
// held: root sends the size of its encoding, then the encoding, so any
// size fits. A value root cannot encode fails the call on every rank.
func (c *Comm) BcastObj(v any, root int) error {
	if c == nil {
		return errNilComm("BcastObj")
	}
	if err := c.checkRoot(root); err != nil {
		return fmt.Errorf("mpi: BcastObj: %w", err)
	}
	var enc bytes.Buffer
	size := []int64{0}
	if c.rank == root {
		if err := gob.NewEncoder(&enc).Encode(v); err != nil {
			size[0] = -1 // tell the others, which would wait for the bytes
			_ = Bcast(c, size, root)
			return fmt.Errorf("mpi: BcastObj of type %T: %w", v, err)
		}
		size[0] = int64(enc.Len())
	}
	if err := Bcast(c, size, root); err != nil {
		return fmt.Errorf("mpi: BcastObj: %w", err)
	}
	if size[0] < 0 {
		return fmt.Errorf("mpi: BcastObj: rank %d could not encode its value: %w", root, ErrArg)
	}
	b := enc.Bytes()
	if c.rank != root {
		b = make([]byte, size[0])
	}
	if err := Bcast(c, b, root); err != nil {
		return fmt.Errorf("mpi: BcastObj: %w", err)
	}
	if c.rank == root {
		return nil
	}
	if err := decodeObj(b, v); err != nil {
		return fmt.Errorf("mpi: BcastObj from rank %d into %T: %w", root, v, err)
	}
	return nil
}

// decodeObj decodes b, a gob encoding, into v, a pointer, so that *v is
// the value sent: gob alone merges into what *v held (fields the encoding
// leaves out, zero at the sender, and map keys it does not name would
// stay). It decodes into a new value, so an error leaves *v as it was.
func decodeObj(b []byte, v any) error {
	dec := gob.NewDecoder(bytes.NewReader(b))
	p := reflect.ValueOf(v)
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return dec.Decode(v) // gob says what is wrong with v
	}
	fresh := reflect.New(p.Type().Elem())
	if err := dec.DecodeValue(fresh); err != nil {
		return err
	}
	p.Elem().Set(fresh.Elem())
	return nil
}
