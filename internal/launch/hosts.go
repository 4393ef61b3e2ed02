package launch

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Host is a machine ranks run on.
type Host struct {
	Name  string // as given; "localhost" for this machine when no host is given
	Slots int    // ranks it takes before it counts as oversubscribed
	Local bool   // this machine: ranks are forked, not started over ssh
}

// ParseHostList parses -H's host[:slots],... A host without slots has one,
// as with mpirun -H.
func ParseHostList(s string) ([]Host, error) {
	var hosts []Host
	for _, spec := range strings.Split(s, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		h, err := parseHostSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("-H %q: %w", s, err)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: -H %q names no host", ErrUsage, s)
	}
	return hosts, nil
}

// parseHostSpec parses host[:slots]; an IPv6 address goes in brackets
// ([::1]:2). A name may not start with '-', which ssh would take as an
// option, nor hold ':' outside brackets.
func parseHostSpec(spec string) (Host, error) {
	name, slots, hasSlots := spec, "", false
	if rest, ok := strings.CutPrefix(spec, "["); ok {
		addr, after, closed := strings.Cut(rest, "]")
		if _, err := netip.ParseAddr(addr); !closed || err != nil || !strings.Contains(addr, ":") {
			return Host{}, fmt.Errorf("%w: host %q: want an IPv6 address in brackets, as [::1] or [fe80::1%%eth0]:2", ErrUsage, spec)
		}
		if after != "" && !strings.HasPrefix(after, ":") {
			return Host{}, fmt.Errorf("%w: host %q: want [IPV6-ADDRESS]:SLOTS", ErrUsage, spec)
		}
		name, slots, hasSlots = addr, strings.TrimPrefix(after, ":"), after != ""
	} else {
		name, slots, hasSlots = strings.Cut(spec, ":")
		if strings.Contains(slots, ":") {
			return Host{}, fmt.Errorf("%w: host %q: more than one ':' (want host[:slots]; an IPv6 address goes in brackets, as [::1]:2)", ErrUsage, spec)
		}
	}
	switch {
	case name == "" || strings.ContainsAny(name, " \t'\"$;&|<>`\\[]"):
		return Host{}, fmt.Errorf("%w: bad host name %q", ErrUsage, name)
	case strings.HasPrefix(name, "-"):
		return Host{}, fmt.Errorf("%w: host name %q starts with '-' (ssh would take it as an option)", ErrUsage, name)
	}
	h := Host{Name: name, Slots: 1}
	if hasSlots {
		n, err := parseSlots(slots)
		if err != nil {
			return h, fmt.Errorf("%w: host %q: slots %q: %v", ErrUsage, name, slots, err)
		}
		h.Slots = n
	}
	return h, nil
}

// maxSlots bounds a host's slots, so that the slots of every host add up
// without overflow; it is far more ranks than one host runs.
const maxSlots = 1 << 20

// parseSlots parses a host's slot count, 1..maxSlots.
func parseSlots(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSlots {
		return 0, fmt.Errorf("want a number of slots 1..%d", maxSlots)
	}
	return n, nil
}

// ReadHostfile reads one host per line, as host[:slots] or Open MPI's
// "host slots=N [max_slots=M]"; '#' starts a comment.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --hostfile: %v", ErrUsage, err)
	}
	defer f.Close()
	var hosts []Host
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		h, err := parseHostSpec(fields[0])
		if err == nil {
			err = hostfileOptions(&h, fields[1:])
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: --hostfile %s: %v", ErrUsage, path, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: --hostfile %s names no host", ErrUsage, path)
	}
	return hosts, nil
}

func hostfileOptions(h *Host, opts []string) error {
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "slots":
			n, err := parseSlots(v)
			if err != nil {
				return fmt.Errorf("%w: %q: %v", ErrUsage, o, err)
			}
			h.Slots = n
		case "max_slots", "max-slots":
			// Only a cap on oversubscription in Open MPI; --oversubscribe decides here.
		default:
			return fmt.Errorf("%w: unknown hostfile option %q (want slots=N)", ErrUsage, o)
		}
	}
	return nil
}

// Placement maps ranks to hosts.
type Placement struct {
	Hosts  []Host // node index -> host; each host once
	NodeOf []int  // rank -> node index
}

// Uses reports whether any rank is placed on node.
func (p *Placement) Uses(node int) bool { return slices.Contains(p.NodeOf, node) }

// Place puts n ranks on hosts by slot, like mpirun: host 1's slots first,
// then host 2's, and so on; with oversubscribe, further rounds over the
// same slots. Without hosts this machine alone has one slot per core.
// Hosts named twice have their slots added.
func Place(n int, hosts []Host, oversubscribe bool, cores int) (*Placement, error) {
	p := &Placement{}
	if len(hosts) == 0 {
		// Without a host list the job runs here, like MPICH's mpiexec: as
		// many ranks as asked, since a local job oversubscribing cores is
		// slower, not wrong, and lapi's waits block instead of spinning
		// when ranks outnumber cores. Slots are enforced only for the hosts
		// a user lists.
		p.Hosts = []Host{{Name: "localhost", Slots: max(cores, n), Local: true}}
	} else {
		index := map[string]int{}
		for _, h := range hosts {
			if h.Slots < 1 {
				return nil, fmt.Errorf("%w: host %s has %d slots, want at least 1", ErrUsage, h.Name, h.Slots)
			}
			if i, ok := index[h.Name]; ok {
				p.Hosts[i].Slots = addSlots(p.Hosts[i].Slots, h.Slots)
				continue
			}
			index[h.Name] = len(p.Hosts)
			p.Hosts = append(p.Hosts, h)
		}
	}
	total := 0
	for _, h := range p.Hosts {
		total = addSlots(total, h.Slots)
	}
	if n > total && !oversubscribe {
		var list []string
		for _, h := range p.Hosts {
			list = append(list, fmt.Sprintf("%s:%d", h.Name, h.Slots))
		}
		return nil, fmt.Errorf("%w: %d ranks requested but the hosts offer %d slots (%s): add --oversubscribe or more slots",
			ErrSlots, n, total, strings.Join(list, ","))
	}
	for len(p.NodeOf) < n {
		for node, h := range p.Hosts {
			for range h.Slots {
				if len(p.NodeOf) == n {
					break
				}
				p.NodeOf = append(p.NodeOf, node)
			}
		}
	}
	return p, nil
}

// addSlots is a+b for non-negative slot counts, saturated at the largest
// int: Hosts built without ParseHostList may hold any count.
func addSlots(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// LocalRanks returns, for each rank, its index among the ranks of its node
// and the number of ranks on that node (MPI_LOCALRANKID, MPI_LOCALNRANKS).
func (p *Placement) LocalRanks() (id, count []int) {
	perNode := make([]int, len(p.Hosts))
	id = make([]int, len(p.NodeOf))
	for r, node := range p.NodeOf {
		id[r] = perNode[node]
		perNode[node]++
	}
	count = make([]int, len(p.NodeOf))
	for r, node := range p.NodeOf {
		count[r] = perNode[node]
	}
	return id, count
}

// markLocal sets Local on the hosts that are this machine: localhost, its
// host name, or a name resolving to one of its interface addresses.
func markLocal(hosts []Host) {
	self, _ := os.Hostname()
	short, _, _ := strings.Cut(self, ".")
	var mine map[string]bool
	for i := range hosts {
		h := &hosts[i]
		switch {
		case h.Local:
			continue
		case h.Name == "localhost" || h.Name == self || h.Name == short:
			h.Local = true
			continue
		}
		if mine == nil {
			mine = localAddrs()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, h.Name)
		cancel()
		if err != nil {
			continue // not resolvable here: ssh may still know it (ssh_config)
		}
		for _, a := range addrs {
			if mine[a] {
				h.Local = true
			}
		}
	}
}

func localAddrs() map[string]bool {
	m := map[string]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			m[ipn.IP.String()] = true
		}
	}
	return m
}
