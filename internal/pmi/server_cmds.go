package pmi

import (
	"fmt"
	"strconv"
	"strings"
)

// The commands of the server, one method per protocol. Replies follow Hydra
// 4.0.2 field for field (evidence/hydra-pmi1-trace.txt), so that MPICH's
// client library, which was only ever tested against Hydra, is at home.

// handle1 serves one PMI-1 command and returns the reply ("" for none).
func (ss *session) handle1(m msg) string {
	s := ss.s
	cmd := m.cmd()
	if cmd == "initack" {
		if ss.rank >= 0 {
			return ss.reject1("initack", fmt.Errorf("%w: initack on a connection already bound to rank %d", ErrProtocol, ss.rank))
		}
		id, err := strconv.Atoi(m["pmiid"])
		if err == nil {
			err = ss.claim(id)
		} else {
			err = fmt.Errorf("%w: initack pmiid=%q is not a number", ErrProtocol, m["pmiid"])
		}
		if err != nil {
			ss.done = true // an unidentified connection cannot go on
			return ss.reject1("initack", err)
		}
		s.setPhase(ss.rank, PhaseConnected, cmd)
		return formatLine("initack") + formatLine("set", "size", strconv.Itoa(s.cfg.Size)) +
			formatLine("set", "rank", strconv.Itoa(ss.rank)) + formatLine("set", "debug", "0")
	}
	if cmd == "init" && m["pmi_version"] == "2" {
		// PMI-2 handshake: still a PMI-1 line; the rank may be unknown until
		// fullinit (PMI_PORT mode).
		return formatLine("response_to_init", "pmi_version", "2", "pmi_subversion", "0", "rc", "0")
	}
	if ss.rank < 0 {
		ss.done = true
		return ss.reject1(cmd, fmt.Errorf("%w: cmd=%s before initack on a PMI_PORT connection", ErrProtocol, cmd))
	}
	s.setPhase(ss.rank, -1, cmd)
	switch cmd {
	case "init":
		if m["pmi_version"] != "1" {
			return ss.reject1("response_to_init", fmt.Errorf("%w: PMI version %q not served (1 and 2 are)", ErrProtocol, m["pmi_version"]))
		}
		s.setPhase(ss.rank, PhaseInitialized, "")
		s.event(Event{Kind: EventInit, Rank: ss.rank})
		return formatLine("response_to_init", "pmi_version", "1", "pmi_subversion", "1", "rc", "0")
	case "get_maxes":
		return formatLine("maxes", "kvsname_max", "256", "keylen_max", strconv.Itoa(wireKeyMax+1), "vallen_max", strconv.Itoa(wireValMax+1))
	case "get_appnum":
		return formatLine("appnum", "appnum", "0")
	case "get_my_kvsname":
		return formatLine("my_kvsname", "kvsname", s.cfg.KVSName)
	case "get_universe_size":
		return formatLine("universe_size", "size", strconv.Itoa(s.cfg.Size))
	case "put":
		if m["kvsname"] != s.cfg.KVSName {
			return formatLine("put_result", "rc", "-1", "msg", "unknown_kvsname")
		}
		if why := ss.put(s.kv, m); why != "" {
			return formatLine("put_result", "rc", "-1", "msg", why)
		}
		return formatLine("put_result", "rc", "0", "msg", "success")
	case "get":
		v, ok := s.lookup(m["key"])
		switch {
		case m["kvsname"] != s.cfg.KVSName:
			return formatLine("get_result", "rc", "-1", "msg", "unknown_kvsname", "value", "unknown")
		case !ok:
			return formatLine("get_result", "rc", "-1", "msg", "key_"+safe(m["key"])+"_not_found", "value", "unknown")
		}
		return formatLine("get_result", "rc", "0", "msg", "success", "value", v)
	case "barrier_in":
		return ss.enterFence(false)
	case "finalize":
		ss.finish(PhaseFinalized, Event{Kind: EventFinalize, Rank: ss.rank})
		return formatLine("finalize_ack")
	case "abort":
		code, err := strconv.Atoi(m["exitcode"])
		if err != nil {
			code = 1
		}
		ss.finish(PhaseAborted, Event{Kind: EventAbort, Rank: ss.rank, Code: code})
		return ""
	}
	return ss.reject1(cmd, fmt.Errorf("%w: unsupported PMI-1 command %q", ErrProtocol, cmd))
}

// reject1 reports err and builds a PMI-1 error reply to cmd.
func (ss *session) reject1(cmd string, err error) string {
	ss.protocolError(err)
	name := cmd + "_result"
	if cmd == "initack" || cmd == "response_to_init" {
		name = cmd
	}
	return formatLine(name, "rc", "-1", "msg", safe(err.Error()))
}

// handle2 serves one PMI-2 command and returns the reply ("" for none).
func (ss *session) handle2(m msg) string {
	s := ss.s
	cmd := m.cmd()
	resp := cmd + "-response"
	if cmd == "fullinit" {
		r, err := strconv.Atoi(m["pmirank"])
		switch {
		case err != nil:
			err = fmt.Errorf("%w: fullinit pmirank=%q is not a number", ErrProtocol, m["pmirank"])
		case ss.rank < 0:
			err = ss.claim(r)
		case r != ss.rank:
			err = fmt.Errorf("%w: fullinit pmirank=%d on the connection of rank %d", ErrProtocol, r, ss.rank)
		}
		if err != nil {
			ss.done = true
			return ss.reject2(cmd, err)
		}
		s.setPhase(ss.rank, PhaseInitialized, cmd)
		s.event(Event{Kind: EventInit, Rank: ss.rank})
		return formatFrame(resp, "pmi-version", "2", "pmi-subversion", "0", "rank", strconv.Itoa(ss.rank),
			"size", strconv.Itoa(s.cfg.Size), "appnum", "0", "debugged", "FALSE", "pmiverbose", "FALSE", "rc", "0")
	}
	if ss.rank < 0 {
		ss.done = true
		return ss.reject2(cmd, fmt.Errorf("%w: cmd=%s before fullinit", ErrProtocol, cmd))
	}
	s.setPhase(ss.rank, -1, cmd)
	switch cmd {
	case "job-getid":
		return formatFrame(resp, "jobid", s.cfg.KVSName, "rc", "0")
	case "kvs-put":
		if why := ss.put(s.kv, m); why != "" {
			return formatFrame(resp, "rc", "-1", "errmsg", why)
		}
		return formatFrame(resp, "rc", "0")
	case "kvs-get", "info-getjobattr":
		key := m["key"]
		if cmd == "info-getjobattr" && key == "universeSize" {
			return formatFrame(resp, "found", "TRUE", "value", strconv.Itoa(s.cfg.Size), "rc", "0")
		}
		if v, ok := s.lookup(key); ok {
			return formatFrame(resp, "found", "TRUE", "value", v, "rc", "0")
		}
		return formatFrame(resp, "found", "FALSE", "rc", "0")
	case "info-putnodeattr":
		// Every rank of a gorun job shares one node-attribute space: ranks
		// that use it are on one node by construction (shared memory).
		if why := ss.put(s.nodeAttr, m); why != "" {
			return formatFrame(resp, "rc", "-1", "errmsg", why)
		}
		return formatFrame(resp, "rc", "0")
	case "info-getnodeattr":
		s.mu.Lock()
		v, ok := s.nodeAttr[m["key"]]
		s.mu.Unlock()
		if ok {
			return formatFrame(resp, "found", "TRUE", "value", v, "rc", "0")
		}
		return formatFrame(resp, "found", "FALSE", "rc", "0")
	case "kvs-fence":
		return ss.enterFence(true)
	case "finalize":
		ss.finish(PhaseFinalized, Event{Kind: EventFinalize, Rank: ss.rank})
		return formatFrame(resp, "rc", "0")
	case "abort":
		text := m["msg"]
		code := 1
		// weft's client writes "exit code N: msg" (PMI-2 has no code field).
		if rest, ok := strings.CutPrefix(text, "exit code "); ok {
			if n, _, ok := strings.Cut(rest, ":"); ok {
				if c, err := strconv.Atoi(n); err == nil {
					code = c
				}
			}
		}
		ss.finish(PhaseAborted, Event{Kind: EventAbort, Rank: ss.rank, Code: code, Msg: text})
		return ""
	}
	return ss.reject2(cmd, fmt.Errorf("%w: unsupported PMI-2 command %q", ErrProtocol, cmd))
}

// reject2 reports err and builds a PMI-2 error reply to cmd.
func (ss *session) reject2(cmd string, err error) string {
	ss.protocolError(err)
	return formatFrame(cmd+"-response", "rc", "-1", "errmsg", abortMsg(err.Error()))
}
