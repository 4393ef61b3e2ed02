package pmi

import (
	"fmt"
	"strconv"
	"strings"
)

// pmi2 speaks the PMI-2 wire protocol: a PMI-1 style init line, then
// length-prefixed "cmd=NAME;key=value;" messages both ways.
type pmi2 struct {
	w     *wireConn
	jobid string
}

// newPMI2 runs the PMI-2 handshake on w. pmirank is PMI_ID if set, else
// PMI_RANK; jobid is PMI_JOBID (Slurm requires it in fullinit) or "".
func newPMI2(w *wireConn, pmirank, jobid string) (*client, error) {
	p := &pmi2{w: w}
	w.tag = pmirank
	if err := w.send(formatLine("init", "pmi_version", "2", "pmi_subversion", "0")); err != nil {
		return nil, err
	}
	m, err := w.recvLine("init")
	if err != nil {
		return nil, err
	}
	if m.cmd() != "response_to_init" || !m.rcOK() || m["pmi_version"] != "2" {
		return nil, fmt.Errorf("%w: %s refused PMI-2 (answered cmd=%s rc=%s pmi_version=%s); unset WEFT_PMI to use PMI-1",
			ErrRejected, w.where, m.cmd(), m["rc"], m["pmi_version"])
	}
	var args []string
	if jobid != "" {
		args = append(args, "pmijobid", jobid)
	}
	args = append(args, "pmirank", pmirank, "threaded", "FALSE")
	fi, err := p.call("fullinit", args...)
	if err != nil {
		return nil, err
	}
	rank, err1 := strconv.Atoi(fi["rank"])
	size, err2 := strconv.Atoi(fi["size"])
	if err1 != nil || err2 != nil || size <= 0 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: %s fullinit gave rank=%q size=%q", ErrProtocol, w.where, fi["rank"], fi["size"])
	}
	w.tag = strconv.Itoa(rank)
	info := Info{AppNum: -1, Node: -1}
	if n, err := strconv.Atoi(fi["appnum"]); err == nil {
		info.AppNum = n
	}
	g, err := p.call("job-getid")
	if err != nil {
		return nil, err
	}
	if p.jobid = g["jobid"]; p.jobid == "" {
		return nil, fmt.Errorf("%w: %s sent an empty jobid", ErrProtocol, w.where)
	}
	info.JobID = p.jobid
	if a, err := p.call("info-getjobattr", "key", "PMI_process_mapping"); err == nil && a["found"] == "TRUE" {
		info.setMapping(a["value"], rank, size)
	}
	return &client{p: p, kind: "pmi2", rank: rank, size: size, info: info}, nil
}

// call sends a request and reads its reply, which must be cmd=<cmd>-response
// with rc=0.
func (p *pmi2) call(cmd string, kv ...string) (msg, error) {
	if err := p.w.send(formatFrame(cmd, kv...)); err != nil {
		return nil, err
	}
	m, err := p.w.recvFrame(cmd)
	if err != nil {
		return nil, err
	}
	if m.cmd() != cmd+"-response" {
		return nil, fmt.Errorf("%w: %s answered %s with cmd=%s", ErrProtocol, p.w.where, cmd, m.cmd())
	}
	if !m.rcOK() {
		return m, fmt.Errorf("%w: %s answered %s with rc=%s %s", ErrRejected, p.w.where, cmd, m["rc"], m["errmsg"])
	}
	return m, nil
}

// room: PMI-2 bounds the value (1024 with the NUL), not the message.
func (p *pmi2) room() int { return roomMax }

func (p *pmi2) putRaw(key, value string) error {
	_, err := p.call("kvs-put", "key", key, "value", value)
	return err
}

func (p *pmi2) getRaw(key string) (string, error) {
	m, err := p.call("kvs-get", "jobid", p.jobid, "srcid", "-1", "key", key)
	if err != nil {
		return "", err
	}
	// A missing key is found=FALSE with rc=0, not an error reply.
	if m["found"] != "TRUE" {
		return "", ErrNotFound
	}
	return m["value"], nil
}

func (p *pmi2) fence() error {
	_, err := p.call("kvs-fence")
	return err
}

func (p *pmi2) abort(code int, text string) error {
	// PMI-2 abort carries no exit code, only a message; the code goes in it
	// so that the launcher's log shows it. No reply: the server kills the job.
	return p.w.send(formatFrame("abort", "isworld", "TRUE", "msg", abortMsg(fmt.Sprintf("exit code %d: %s", code, text))))
}

func (p *pmi2) finalize() error {
	_, err := p.call("finalize")
	if cerr := p.w.close(); err == nil && cerr != nil {
		return fmt.Errorf("closing %s: %w", p.w.where, cerr)
	}
	return err
}

// abortMsg makes a message safe for a PMI-2 value: no ';' (lost by Hydra
// and Slurm) and no control characters.
func abortMsg(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ';' || r < ' ' {
			return ','
		}
		return r
	}, s)
	return clip(s)
}
