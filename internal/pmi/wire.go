package pmi

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Wire formats shared by the clients and the server.
//
// PMI-1: one message per line, "cmd=NAME key=value key=value\n". Fields are
// separated by spaces; a value runs to the next space, and may contain '='
// (split at the first one). Servers order fields differently (Hydra puts rc
// last, Slurm first), so messages are parsed into maps, never by position.
//
// PMI-2: "LLLLLLcmd=NAME;key=value;...;" where LLLLLL is the decimal length of
// the rest, left-justified and space-padded to 6 bytes. ';' inside a value is
// escaped as ";;" by MPICH, but neither Hydra 4.0.2 nor Slurm 22.05 honours
// it, so weft never sends ';' in a value (codec.go) and the parser accepts
// the escape only for symmetry.

const (
	// maxLine bounds a PMI-1 line so that a peer sending garbage without a
	// newline cannot make us buffer without limit. Real lines are < 1.2 KiB.
	maxLine = 64 << 10
	// maxFrame is the PMI-2 message limit of the MPICH client.
	maxFrame = 64 << 10
	// pmi2LenField is the width of the PMI-2 length prefix.
	pmi2LenField = 6
)

// msg is a parsed PMI message: field name to value. "cmd" holds the command.
type msg map[string]string

// cmd returns the command name ("cmd", or "mcmd" for multi-line commands).
func (m msg) cmd() string {
	if c, ok := m["cmd"]; ok {
		return c
	}
	return m["mcmd"]
}

// rcOK reports whether the message carries no rc, or rc=0.
func (m msg) rcOK() bool {
	rc, ok := m["rc"]
	return !ok || rc == "0"
}

// add stores the field "key=value" (split at the first '='), refusing a
// field without key or a repeated key; whole is the message, for errors.
func (m msg) add(field, whole string) error {
	k, v, ok := strings.Cut(field, "=")
	if !ok || k == "" {
		return fmt.Errorf("%w: field %q in %q is not key=value", ErrProtocol, clip(field), clip(whole))
	}
	if _, dup := m[k]; dup {
		return fmt.Errorf("%w: field %q repeated in %q", ErrProtocol, k, clip(whole))
	}
	m[k] = v
	return nil
}

// parseLine parses one PMI-1 line (without its newline).
func parseLine(line string) (msg, error) {
	line = strings.TrimSuffix(line, "\r")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	m := make(msg, len(fields))
	for _, f := range fields {
		if err := m.add(f, line); err != nil {
			return nil, err
		}
	}
	if m.cmd() == "" {
		return nil, fmt.Errorf("%w: line %q has no cmd=", ErrProtocol, clip(line))
	}
	return m, nil
}

// formatLine builds a PMI-1 line from cmd and key/value pairs, in order.
// Values must not contain spaces or newlines (callers encode them).
func formatLine(cmd string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(cmd)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(kv[i+1])
	}
	b.WriteByte('\n')
	return b.String()
}

// parseFrame parses the body of a PMI-2 message (after the length prefix).
func parseFrame(body string) (msg, error) {
	m := make(msg)
	var cur strings.Builder
	flush := func() error {
		if cur.Len() == 0 {
			return nil
		}
		f := cur.String()
		cur.Reset()
		return m.add(f, body)
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != ';' {
			cur.WriteByte(c)
			continue
		}
		if i+1 < len(body) && body[i+1] == ';' {
			cur.WriteByte(';')
			i++
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if m["cmd"] == "" {
		return nil, fmt.Errorf("%w: PMI-2 message %q has no cmd=", ErrProtocol, clip(body))
	}
	return m, nil
}

// formatFrame builds a complete PMI-2 message, length prefix included.
// ';' in values is escaped as ";;" for MPICH-conformant peers; weft's own
// values never contain one.
func formatFrame(cmd string, kv ...string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(cmd)
	b.WriteByte(';')
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(kv[i+1], ";", ";;"))
		b.WriteByte(';')
	}
	body := b.String()
	return fmt.Sprintf("%-*d%s", pmi2LenField, len(body), body)
}

// readLine reads one PMI-1 line, without its newline, refusing lines over
// maxLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxLine {
			return "", fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLine)
		}
		switch err {
		case nil:
			return string(buf[:len(buf)-1]), nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(buf) > 0 {
				return "", fmt.Errorf("%w: connection closed in the middle of line %q", ErrProtocol, clip(string(buf)))
			}
			return "", io.EOF
		default:
			return "", err
		}
	}
}

// readFrame reads one PMI-2 message and returns its body.
func readFrame(r *bufio.Reader) (string, error) {
	var hdr [pmi2LenField]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return "", fmt.Errorf("%w: connection closed inside a PMI-2 length field", ErrProtocol)
		}
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
	if err != nil || n <= 0 || n > maxFrame {
		return "", fmt.Errorf("%w: bad PMI-2 length field %q", ErrProtocol, string(hdr[:]))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("%w: PMI-2 message cut short (%d bytes announced): %v", ErrProtocol, n, err)
	}
	return string(body), nil
}

// clip shortens s for inclusion in an error message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
