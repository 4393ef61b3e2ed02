package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The GORUN_KVS rendezvous: under a launcher whose key-value store weft
// cannot speak (Open MPI's mpirun offers only PMIx; srun --mpi=none offers
// none), ranks take rank and size from the launcher's environment and meet
// at a KV server that `gorun --wrap -- LAUNCHER ...` runs and names in
// GORUN_KVS=host:port. The line protocol is the one of
// shared/launchers/pmi-clients/env_rendezvous.py, so either server works:
//
//	hello RANK SIZE   -> ok
//	put KEY VALUE     -> ok
//	get KEY           -> val VALUE | missing
//	fence             -> ok, once SIZE ranks have sent fence
//	bye               (no reply) the rank is done; weft's addition
//
// Errors are answered "err REASON".

// kvsProto is the rank side of the rendezvous protocol.
type kvsProto struct{ w *wireConn }

func newKVSClient(w *wireConn, rank, size int) (*client, error) {
	p := &kvsProto{w: w}
	w.tag = strconv.Itoa(rank)
	if _, err := p.call("hello", fmt.Sprintf("hello %d %d\n", rank, size)); err != nil {
		return nil, err
	}
	c := &client{p: p, kind: "kvs", rank: rank, size: size, info: Info{AppNum: -1, Node: -1}}
	if err := c.exchangeHosts(); err != nil {
		return nil, err
	}
	return c, nil
}

// hostKey is where each rank of a rendezvous publishes its host name.
func hostKey(rank int) string { return "weft-host-" + strconv.Itoa(rank) }

// exchangeHosts fills Node and LocalRanks where no launcher tells them: the
// rendezvous has no process mapping, so ranks swap host names (one fence).
// Transports need LocalRanks to choose shared memory or the network.
func (c *client) exchangeHosts() error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("pmi: host name for the rendezvous: %w", err)
	}
	if err := c.Put(hostKey(c.rank), host); err != nil {
		return err
	}
	if err := c.Fence(); err != nil {
		return err
	}
	node := map[string]int{}
	for r := range c.size {
		h, err := c.Get(hostKey(r))
		if err != nil {
			return err
		}
		if _, ok := node[h]; !ok {
			node[h] = len(node)
		}
		if h == host {
			c.info.LocalRanks = append(c.info.LocalRanks, r)
		}
	}
	c.info.Node = node[host]
	return nil
}

func (p *kvsProto) call(what, line string) (string, error) {
	if err := p.w.send(line); err != nil {
		return "", err
	}
	reply, err := p.w.recvRaw(what)
	if err != nil {
		return "", err
	}
	if why, ok := strings.CutPrefix(reply, "err "); ok {
		return "", fmt.Errorf("%w: %s answered %s: %s", ErrRejected, p.w.where, what, why)
	}
	return reply, nil
}

func (p *kvsProto) expectOK(what, line string) error {
	reply, err := p.call(what, line)
	if err == nil && reply != "ok" {
		err = fmt.Errorf("%w: %s answered %s with %q, want ok", ErrProtocol, p.w.where, what, clip(reply))
	}
	return err
}

func (p *kvsProto) room() int { return roomMax }

func (p *kvsProto) putRaw(key, value string) error {
	return p.expectOK("put", "put "+key+" "+value+"\n")
}

func (p *kvsProto) getRaw(key string) (string, error) {
	reply, err := p.call("get", "get "+key+"\n")
	if err != nil {
		return "", err
	}
	if reply == "missing" {
		return "", ErrNotFound
	}
	v, ok := strings.CutPrefix(reply, "val ")
	if !ok {
		return "", fmt.Errorf("%w: %s answered get with %q", ErrProtocol, p.w.where, clip(reply))
	}
	return v, nil
}

func (p *kvsProto) fence() error { return p.expectOK("fence", "fence\n") }

// abort has nothing to send: the protocol has no abort. The caller exits
// non-zero and the foreign launcher ends the job.
func (p *kvsProto) abort(int, string) error { return nil }

func (p *kvsProto) finalize() error {
	err := p.w.send("bye\n")
	if cerr := p.w.close(); err == nil {
		err = cerr
	}
	return err
}

// memProto is the singleton's store: one rank, nobody to wait for.
type memProto struct{ kv map[string]string }

func newSingleton() *client {
	return &client{p: &memProto{kv: map[string]string{}}, kind: "singleton", rank: 0, size: 1,
		info: Info{AppNum: 0, JobID: "singleton", Node: 0, LocalRanks: []int{0}}}
}

func (p *memProto) room() int { return roomMax }

func (p *memProto) putRaw(key, value string) error { p.kv[key] = value; return nil }

func (p *memProto) getRaw(key string) (string, error) {
	v, ok := p.kv[key]
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}

func (p *memProto) fence() error            { return nil }
func (p *memProto) abort(int, string) error { return nil }
func (p *memProto) finalize() error         { return nil }

// KVSServer is the rendezvous server of `gorun --wrap`: the GORUN_KVS
// protocol above, one key-value space, fences over the size the ranks
// announce in hello.
type KVSServer struct {
	l  net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	kv      map[string]string
	size    int
	barrier *barrier
	conns   map[net.Conn]struct{}
	closed  bool
}

// ListenKVS starts a rendezvous server on address (use port 0).
func ListenKVS(address string) (*KVSServer, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("pmi: rendezvous server on %s: %w", address, err)
	}
	k := &KVSServer{l: l, kv: map[string]string{}, conns: map[net.Conn]struct{}{}}
	k.wg.Add(1)
	go k.accept()
	return k, nil
}

// Addr is the address to publish in GORUN_KVS.
func (k *KVSServer) Addr() net.Addr { return k.l.Addr() }

// Close stops the server and waits for its goroutines.
func (k *KVSServer) Close() error {
	err := k.l.Close()
	k.mu.Lock()
	k.closed = true
	for c := range k.conns {
		c.Close()
	}
	b := k.barrier
	k.mu.Unlock()
	if b != nil {
		b.breakWith(errors.New("rendezvous server shut down"), false)
	}
	k.wg.Wait()
	return err
}

func (k *KVSServer) accept() {
	defer k.wg.Done()
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.closed {
			k.mu.Unlock()
			c.Close()
			return
		}
		k.conns[c] = struct{}{}
		k.wg.Add(1)
		k.mu.Unlock()
		go k.serve(c)
	}
}

func (k *KVSServer) serve(c net.Conn) {
	defer func() {
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		c.Close()
		k.wg.Done()
	}()
	r := bufio.NewReader(c)
	rank, bye := -1, false
	for {
		line, err := readLine(r)
		if err != nil {
			if !bye && rank >= 0 && k.barrier != nil {
				k.barrier.breakWith(fmt.Errorf("rank %d left the rendezvous without bye", rank), false)
			}
			return
		}
		reply := k.handle(line, &rank, &bye)
		if bye {
			// The rank (known: bye before hello is refused) will never
			// fence again, so the others' fences fail now, naming it,
			// instead of waiting out their PMI timeout.
			k.barrier.breakWith(fmt.Errorf("rank %d already finalized", rank), false)
			return
		}
		if _, err := io.WriteString(c, reply+"\n"); err != nil {
			return
		}
	}
}

func (k *KVSServer) handle(line string, rank *int, bye *bool) string {
	f := strings.SplitN(line, " ", 3)
	switch {
	case f[0] == "hello" && len(f) == 3:
		r, err1 := strconv.Atoi(f[1])
		n, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || n <= 0 || r < 0 || r >= n {
			return "err bad hello " + clip(line)
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.barrier == nil {
			k.size, k.barrier = n, newBarrier(n)
		} else if n != k.size {
			return fmt.Sprintf("err size %d differs from %d announced before", n, k.size)
		}
		*rank = r
		return "ok"
	case *rank < 0:
		return "err hello first"
	case f[0] == "put" && len(f) == 3:
		k.mu.Lock()
		k.kv[f[1]] = f[2]
		k.mu.Unlock()
		return "ok"
	case f[0] == "get" && len(f) == 2:
		k.mu.Lock()
		v, ok := k.kv[f[1]]
		k.mu.Unlock()
		if !ok {
			return "missing"
		}
		return "val " + v
	case line == "fence":
		r := k.barrier.enter()
		<-r.done
		if r.err != nil {
			return "err " + r.err.Error()
		}
		return "ok"
	case line == "bye":
		*bye = true
		return ""
	}
	return "err unknown request " + strconv.Quote(clip(line))
}
