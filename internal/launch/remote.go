package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// remoteScript runs on the remote host, as `sh -c remoteScript weft-rank
// BINARY ARGS...`. ssh forwards no signals, and a remote process whose ssh
// died is orphaned, so the script reads signal names from its stdin
// (gorun's control pipe through ssh) and passes each line to kill -s, for
// the rank's process group, but USR1 and USR2 (trace levels) for the rank
// alone; end of input (gorun gone, or closing the pipe) kills the rank.
//
// The rank runs in the foreground of a pipeline, not as `rank &`: a shell
// without job control starts background commands with SIGINT and SIGQUIT
// ignored, which the rank would inherit (dash cannot undo it with trap),
// and gorun's Ctrl-C would not stop it. The left side prints the pid of
// the shell that then execs the rank, and the rank's status once it ends;
// the rank's output goes to the original stdout (fd 4). Where setsid
// exists, that shell runs under it, so its process group (whatever the
// rank starts goes with it) exists before its pid is printed: a signal
// that came between the two, when the rank was signalled alone, left
// alive what the rank had started by then, holding the output open. The
// right side runs the signal reader in the background and exits with the
// rank's status (128+N for signal N), after killing the rank's process
// group (what the rank left running would hold the output open, and ssh
// would wait for it; gorun's drain kills a local rank's group too) and
// removing the job's shared-memory segments on that host if the rank
// failed, since gorun cannot reach them (only a prefix of the form
// .../weft-KEY-: an unset one must never become "rm *").
const remoteScript = `exec 3<&0 </dev/null 4>&1
g=; if command -v setsid >/dev/null 2>&1; then g=setsid; fi
{ $g sh -c 'echo "$$"; exec >&4 4>&- 3<&-; exec "$@"' weft-rank "$@"; echo "$?"; } | {
read -r p
k() { kill -s "$1" -- "-$p" 2>/dev/null || kill -s "$1" "$p" 2>/dev/null; }
( while read -r s <&3; do case $s in USR1|USR2) kill -s "$s" "$p" 2>/dev/null;; *) k "$s";; esac; done; k KILL ) &
w=$!
read -r rc || rc=1
kill "$w" 2>/dev/null
[ -n "$g" ] && [ -n "$p" ] && kill -s KILL -- "-$p" 2>/dev/null
if [ "$rc" -ne 0 ]; then case "$WEFT_SHM_PREFIX" in */weft-?*-) rm -f -- "$WEFT_SHM_PREFIX"* 2>/dev/null;; esac; fi
exit "$rc"
}`

// remoteCommand is the command line ssh runs on the remote host: change to
// gorun's directory if it exists there, then run the wrapper under env with
// the rank's variables. Every word is quoted for the remote shell.
func remoteCommand(cwd string, env []string, shmPrefix, binary string, args []string) string {
	words := []string{"exec", "env"}
	for _, kv := range env {
		words = append(words, shellQuote(kv))
	}
	words = append(words, shellQuote("WEFT_SHM_PREFIX="+shmPrefix), "sh", "-c", shellQuote(remoteScript), "weft-rank", shellQuote(binary))
	for _, a := range args {
		words = append(words, shellQuote(a))
	}
	return "cd " + shellQuote(cwd) + " 2>/dev/null; " + strings.Join(words, " ")
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// localAddrToward returns this machine's address on the route to host: the
// address a remote rank on host can reach gorun's PMI server at. host may be
// an ssh alias: the resolver is asked first, then `RSH -G host` (ssh prints
// its resolved configuration, HostName included).
func localAddrToward(ctx context.Context, host string, rsh []string) (net.IP, error) {
	ip, err := hostIP(ctx, host, rsh)
	if err != nil {
		return nil, err
	}
	// Connecting a UDP socket sends nothing; it only picks the route.
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), "9"))
	if err != nil {
		return nil, fmt.Errorf("%w: no route to %s (%s): %v", ErrHost, host, ip, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

func hostIP(ctx context.Context, host string, rsh []string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err == nil && len(ips) > 0 {
		for _, ip := range ips {
			if ip.To4() != nil {
				return ip, nil
			}
		}
		return ips[0], nil
	}
	if len(rsh) == 0 {
		return nil, fmt.Errorf("%w: cannot resolve %s (%v), and no --rsh command to ask", ErrUsage, host, err)
	}
	if !strings.Contains(filepath.Base(rsh[0]), "ssh") {
		return nil, fmt.Errorf("%w: cannot resolve %s: %v", ErrHost, host, err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, rsh[0], append(append([]string{}, rsh[1:]...), "-G", host)...)
	cmd.Stderr = &stderr
	out, gerr := cmd.Output()
	if gerr != nil {
		return nil, fmt.Errorf("%w: cannot resolve %s (%v), and %s -G %s failed: %v %s",
			ErrHost, host, err, rsh[0], host, gerr, strings.TrimSpace(stderr.String()))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "hostname "); ok {
			if ip := net.ParseIP(name); ip != nil {
				return ip, nil
			}
			ips, lerr := net.DefaultResolver.LookupIP(ctx, "ip", name)
			if lerr == nil && len(ips) > 0 {
				return ips[0], nil
			}
			return nil, fmt.Errorf("%w: %s is %s in the ssh configuration, which does not resolve: %v", ErrHost, host, name, lerr)
		}
	}
	return nil, fmt.Errorf("%w: cannot resolve %s: %v", ErrHost, host, err)
}
