package pmi

import (
	"fmt"
	"strconv"
	"strings"
)

// pmi1 speaks PMI-1 ("simple" PMI, wire version 1.1).
type pmi1 struct {
	w   *wireConn
	kvs string
}

// newPMI1 runs the PMI-1 handshake on w. rank and size come from the
// environment in PMI_FD mode; in PMI_PORT mode pass portID (PMI_ID) and the
// server tells rank and size.
func newPMI1(w *wireConn, rank, size int, portID string) (*client, error) {
	p := &pmi1{w: w}
	if portID != "" {
		var err error
		if rank, size, err = p.initack(portID); err != nil {
			return nil, err
		}
	}
	w.tag = strconv.Itoa(rank)
	if _, err := p.call("init", formatLine("init", "pmi_version", "1", "pmi_subversion", "1"), "response_to_init"); err != nil {
		return nil, err
	}
	maxes, err := p.call("get_maxes", formatLine("get_maxes"), "maxes")
	if err != nil {
		return nil, err
	}
	if err := checkMaxes(maxes); err != nil {
		return nil, fmt.Errorf("%s: %w", w.where, err)
	}
	info := Info{AppNum: -1, Node: -1}
	if m, err := p.call("get_appnum", formatLine("get_appnum"), "appnum"); err != nil {
		return nil, err
	} else if n, err := strconv.Atoi(m["appnum"]); err == nil {
		info.AppNum = n
	}
	m, err := p.call("get_my_kvsname", formatLine("get_my_kvsname"), "my_kvsname")
	if err != nil {
		return nil, err
	}
	if p.kvs = m["kvsname"]; p.kvs == "" {
		return nil, fmt.Errorf("%w: %s sent an empty kvsname", ErrProtocol, w.where)
	}
	info.JobID = p.kvs
	if mapping, err := p.getRaw("PMI_process_mapping"); err == nil {
		info.setMapping(mapping, rank, size)
	}
	return &client{p: p, kind: "pmi1", rank: rank, size: size, info: info}, nil
}

// initack identifies a PMI_PORT connection. Hydra answers with four lines:
// cmd=initack, then cmd=set size=N, cmd=set rank=R, cmd=set debug=D.
func (p *pmi1) initack(id string) (rank, size int, err error) {
	if _, err := p.call("initack", formatLine("initack", "pmiid", id), "initack"); err != nil {
		return 0, 0, err
	}
	rank, size = -1, -1
	for range 3 {
		m, err := p.w.recvLine("initack")
		if err != nil {
			return 0, 0, err
		}
		if m.cmd() != "set" {
			return 0, 0, fmt.Errorf("%w: %s answered initack with cmd=%s, want cmd=set", ErrProtocol, p.w.where, m.cmd())
		}
		if v, ok := m["size"]; ok {
			size, _ = strconv.Atoi(v)
		}
		if v, ok := m["rank"]; ok {
			rank, _ = strconv.Atoi(v)
		}
	}
	if size <= 0 || rank < 0 || rank >= size {
		return 0, 0, fmt.Errorf("%w: %s gave rank %d of size %d for PMI_ID=%s", ErrProtocol, p.w.where, rank, size, id)
	}
	return rank, size, nil
}

// call sends line and reads the reply, which must be cmd=want with rc=0.
func (p *pmi1) call(what, line, want string) (msg, error) {
	if err := p.w.send(line); err != nil {
		return nil, err
	}
	m, err := p.w.recvLine(what)
	if err != nil {
		return nil, err
	}
	if m.cmd() != want {
		return nil, fmt.Errorf("%w: %s answered %s with cmd=%s, want cmd=%s", ErrProtocol, p.w.where, what, m.cmd(), want)
	}
	if !m.rcOK() {
		// Servers write messages with '_' for spaces (a value cannot hold one).
		return m, fmt.Errorf("%w: %s answered %s with rc=%s: %s", ErrRejected, p.w.where, what, m["rc"], strings.ReplaceAll(m["msg"], "_", " "))
	}
	return m, nil
}

// room leaves a put request line, with the longest key, within lineMax.
func (p *pmi1) room() int {
	return min(roomMax, lineMax-len(formatLine("put", "kvsname", p.kvs, "key", "", "value", ""))-wireKeyMax)
}

func (p *pmi1) putRaw(key, value string) error {
	_, err := p.call("put", formatLine("put", "kvsname", p.kvs, "key", key, "value", value), "put_result")
	return err
}

func (p *pmi1) getRaw(key string) (string, error) {
	m, err := p.call("get", formatLine("get", "kvsname", p.kvs, "key", key), "get_result")
	if m != nil && err != nil {
		// Any rc != 0 means "not found": Hydra says rc=-1 msg=key_K_not_found,
		// Slurm rc=1.
		return "", fmt.Errorf("%w (server said rc=%s %s)", ErrNotFound, m["rc"], m["msg"])
	}
	if err != nil {
		return "", err
	}
	return m["value"], nil
}

func (p *pmi1) fence() error {
	_, err := p.call("barrier_in", formatLine("barrier_in"), "barrier_out")
	return err
}

func (p *pmi1) abort(code int, _ string) error {
	// No reply: the server kills the job. PMI-1 abort has no message field
	// (Client.Abort wrote it to stderr).
	return p.w.send(formatLine("abort", "exitcode", strconv.Itoa(code)))
}

func (p *pmi1) finalize() error {
	_, err := p.call("finalize", formatLine("finalize"), "finalize_ack")
	if cerr := p.w.close(); err == nil && cerr != nil {
		return fmt.Errorf("closing %s: %w", p.w.where, cerr)
	}
	return err
}

// checkMaxes refuses a server whose limits are below what the codec assumes.
func checkMaxes(m msg) error {
	k, err1 := strconv.Atoi(m["keylen_max"])
	v, err2 := strconv.Atoi(m["vallen_max"])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: get_maxes reply without numeric keylen_max/vallen_max", ErrProtocol)
	}
	if k < wireKeyMax+1 || v < wireValMax+1 {
		return fmt.Errorf("%w: server limits keys to %d and values to %d bytes; weft needs %d and %d",
			ErrRejected, k, v, wireKeyMax+1, wireValMax+1)
	}
	return nil
}
