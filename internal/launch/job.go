package launch

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/cpubind"
	"github.com/weft-hpc/weft/internal/pmi"
)

// Exit statuses of gorun besides a failed rank's own.
const (
	exitOK      = 0
	exitFailure = 1   // gorun could not run the job, or a rank failed without a status of its own
	exitUsage   = 2   // bad command line
	exitTimeout = 124 // --timeout expired (as timeout(1))
)

// drainWait bounds how long gorun waits, once every rank has exited, for
// their output pipes to reach EOF (a grandchild may hold them open).
const drainWait = 2 * time.Second

// exitOutputWait bounds how long a rank's exit waits, before gorun judges
// it, for the rank's output pipes to reach EOF (a process the rank started
// may hold them open).
const exitOutputWait = 200 * time.Millisecond

// job is one run of a program over its ranks, and the monitor that sees it
// to the end. Only the monitor goroutine touches its fields after start.
type job struct {
	opts  *Options
	prog  *Program
	place *Placement
	key   uint64
	out   *outputMux
	srv   *pmi.Server
	ranks []*rank
	start time.Time

	copies map[string]*remoteCopy // by host: the built program copied there (copy.go)

	exits  chan *rank
	events chan pmi.Event
	done   chan struct{} // closed when the monitor ends: PMI events are dropped after

	running     int
	stopping    bool        // SIGTERM sent to every rank; their deaths are not failures
	failure     *failure    // the first failure: its status is gorun's
	timedOut    bool        // --timeout expired
	asking      *asking     // the ranks were asked what they wait for, the report is due (report.go)
	interrupted os.Signal   // a SIGINT/SIGTERM/SIGHUP gorun received (and forwarded, if ranks ran)
	killTimer   *time.Timer // SIGKILL after the grace, then abandonRemote after another
	killedAll   bool        // SIGKILL sent to every rank
	said        map[int]bool

	// The first rank whose PMI connection was lost before finalize is most
	// likely the cause of other ranks' failures (their fences break on it),
	// even when their exits reach gorun first. A failure of another rank
	// waits, at most settleWait, for that rank's exit, which is then the
	// failure named.
	firstLost    int // -1: none
	pending      *failure
	pendingTimer *time.Timer
}

// settleWait bounds how long a failure waits for the exit of a rank whose
// PMI connection was lost, which would be its cause.
const settleWait = 2 * time.Second

// failure is why the job failed: which rank, how, and the exit status.
type failure struct {
	rank int
	how  string
	code int
}

// Run builds or finds the program (ResolveProgram) and runs it as the job
// opts describes, its ranks placed by Plan, writing the ranks' output and
// gorun's messages to stdout and stderr, and returns gorun's exit status.
// gorun handles its signals from the start: a SIGINT, SIGTERM or SIGHUP
// before the ranks start stops what prepares them (the build, the copies to
// remote hosts) and removes what it made; gorun then exits 128+N.
func Run(opts *Options, place *Placement, stdout, stderr io.Writer) int {
	j := &job{
		opts:  opts,
		place: place,
		out: &outputMux{stdout: stdout, stderr: stderr, tag: opts.TagOutput, answers: make(chan answer, opts.N),
			stats: newStatsTable(opts.Stats), snaps: newSnapshots(opts.SnapshotDir)},
		exits:  make(chan *rank, opts.N),
		events: make(chan pmi.Event, 4*opts.N+16),
		done:   make(chan struct{}),
		said:   map[int]bool{},
		start:  time.Now(),

		firstLost: -1,
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, jobSignals...)
	defer signal.Stop(sigs)
	code, err := j.run(sigs)
	if err != nil {
		j.out.say(err.Error())
	}
	return code
}

// jobSignals are the signals gorun handles (signalled). SIGPIPE is among
// them so that a write to gorun's closed stdout or stderr (`gorun ... |
// head -1`) fails with EPIPE instead of killing gorun, which then sees the
// job to its end and cleans up.
var jobSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGPIPE, levelSignals[0], levelSignals[1], snapshotSignal}

// stopsJob reports whether sig stops the job: SIGINT, SIGTERM, and SIGHUP
// (the terminal or ssh session running gorun closed).
func stopsJob(sig os.Signal) bool {
	return sig == unix.SIGINT || sig == unix.SIGTERM || sig == unix.SIGHUP
}

// forwarded is the signal gorun sends the ranks when it receives sig, one
// that stops the job: sig itself, but SIGTERM for SIGHUP (the ranks have
// no terminal of gorun's to lose, and SIGTERM is what a rank handles to
// stop).
func forwarded(sig os.Signal) unix.Signal {
	if sig == unix.SIGHUP {
		return unix.SIGTERM
	}
	return sig.(unix.Signal)
}

// watchPreparation watches sigs while gorun prepares the job, when there is
// no rank yet to forward a signal to: a signal that stops the job cancels
// ctx, which stops the preparation; the others are dropped. end stops the
// watch and returns the signal that cancelled ctx, nil if none came.
func watchPreparation(sigs <-chan os.Signal) (ctx context.Context, end func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	got := make(chan os.Signal, 1)
	go func() {
		for {
			select {
			case sig := <-sigs:
				if stopsJob(sig) {
					cancel()
					got <- sig
					return
				}
			case <-stop:
				got <- nil
				return
			}
		}
	}()
	return ctx, func() os.Signal {
		close(stop)
		sig := <-got
		cancel()
		return sig
	}
}

// shmMaxRanks is transport/shm's MaxRanks, the most ranks a job on the
// shared-memory device may have (its segment holds size² rings); launch
// may not import transport/shm, so a test checks that the two agree.
const shmMaxRanks = 256

// Plan places opts.N ranks on the hosts (this machine alone without -H or
// --hostfile) and refuses, before anything is built or started, a job its
// device cannot run: shared memory reaches only within one host and takes
// at most shmMaxRanks ranks (auto picks it when every rank is on one host).
func Plan(opts *Options) (*Placement, error) {
	hosts := append([]Host(nil), opts.Hosts...)
	markLocal(hosts)
	place, err := Place(opts.N, hosts, opts.Oversubscribe, runtime.NumCPU())
	if err != nil {
		return nil, err
	}
	perNode := map[int]int{}
	for _, node := range place.NodeOf {
		perNode[node]++
	}
	// Under auto the ranks of each host reach each other through shared
	// memory whether or not the job spans hosts.
	shm := opts.Transport == "shm" || opts.Transport == "auto" && opts.N > 1
	switch {
	case opts.Transport == "shm" && len(perNode) > 1:
		return nil, fmt.Errorf("%w: %s shm: the ranks are on %d hosts, and shared memory reaches only within one; use auto or udp",
			ErrUsage, opts.transportFrom, len(perNode))
	case shm:
		for node := range place.Hosts { // in order: the first host with too many is named
			if n := perNode[node]; n > shmMaxRanks {
				return nil, fmt.Errorf("%w: %d ranks on host %s: the shared-memory device (what auto picks within a host) takes at most %d; use --transport udp, or spread the ranks over more hosts with -H",
					ErrUsage, n, place.Hosts[node].Name, shmMaxRanks)
			}
		}
	}
	return place, nil
}

func (j *job) run(sigs <-chan os.Signal) (int, error) {
	ctx, endPrep := watchPreparation(sigs)
	ports, err := j.prepare(ctx)
	defer j.cleanUp()
	if sig := endPrep(); sig != nil {
		// A build or copy cut short fails with an error of no interest.
		j.interrupted = sig
		if j.opts.Trace >= 1 {
			j.out.say(fmt.Sprintf("%v before the ranks started: stopped", sig))
		}
		return j.exitCode(), nil
	}
	if err != nil {
		return exitFailure, err
	}
	j.startRanks(ports)
	j.monitor(sigs)
	close(j.done)
	j.drain()
	if j.out.snaps.unsummed() {
		j.summarize("written by the ranks", time.Time{}) // at a fatal error or a timeout of their own
	}
	if j.out.stats != nil {
		j.out.stats.print(j.out, len(j.ranks))
	}
	return j.exitCode(), nil
}

// prepare does what precedes the ranks' start, stopping when ctx is
// cancelled: it builds or finds the program, claims the job's shared-memory
// segments, starts the PMI server, and for remote hosts opens its listeners
// and copies a built program there. It returns PMI_PORT for each remote
// host. What it made is recorded in j for cleanUp, also when it fails.
func (j *job) prepare(ctx context.Context) (map[string]string, error) {
	var err error
	if j.prog, err = ResolveProgram(ctx, j.opts.Program, j.opts.buildTags()...); err != nil {
		return nil, err
	}
	if j.key, err = pmi.RandomKey(); err != nil {
		return nil, err
	}
	for _, key := range sweepStale(shmDir) {
		j.out.say(fmt.Sprintf("removed shared-memory segments %s%s* of a job whose gorun died", shmDir+"/", segmentPrefix(key)))
	}
	if err := writeOwner(shmDir, j.key); err != nil && j.opts.Trace >= 1 {
		j.out.say("cannot record the job's owner in " + shmDir + ": " + err.Error())
	}

	cfg := pmi.ServerConfig{
		Size:           j.opts.N,
		KVSName:        fmt.Sprintf("kvs_weft_%016x", j.key),
		ProcessMapping: pmi.FormatProcessMapping(j.place.NodeOf),
		OnEvent: func(e pmi.Event) {
			select {
			case j.events <- e:
			case <-j.done:
			}
		},
	}
	if j.opts.Trace >= 4 {
		cfg.Trace = func(rank int, dir, msg string) { j.out.say(fmt.Sprintf("pmi [%d] %s %s", rank, dir, msg)) }
	}
	if j.srv, err = pmi.NewServer(cfg); err != nil {
		return nil, err
	}
	ports, err := j.listenForRemote(ctx)
	if err != nil {
		return nil, err
	}
	if j.prog.Built && len(ports) > 0 {
		if err := j.copyProgram(ctx); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// cleanUp removes what prepare made, once the ranks are done with it: the
// copies of the program on remote hosts, the built program, the PMI
// server, and the job's shared-memory segments.
func (j *job) cleanUp() {
	if j.copies != nil {
		j.endCopies()
	}
	if j.prog != nil {
		j.prog.Remove()
	}
	if j.srv != nil {
		j.srv.Close()
	}
	if j.key == 0 {
		return // prepare stopped before it claimed a key: no segment is the job's
	}
	if n, err := removeSegments(shmDir, j.key); err != nil {
		j.out.say(fmt.Sprintf("removing shared-memory segments %s/%s*: %v", shmDir, segmentPrefix(j.key), err))
	} else if n > 1 && j.opts.Trace >= 2 {
		j.out.say(fmt.Sprintf("removed %d shared-memory segments of the job", n-1))
	}
}

// listenForRemote opens one PMI listener (port 0) per local address remote
// hosts reach this machine by, and returns PMI_PORT for each remote host
// that has ranks: a host that gets none is not even resolved.
func (j *job) listenForRemote(ctx context.Context) (map[string]string, error) {
	ports := map[string]string{}
	byIP := map[string]string{}
	for node, h := range j.place.Hosts {
		if h.Local || !j.place.Uses(node) {
			continue
		}
		ip, err := localAddrToward(ctx, h.Name, j.opts.Rsh)
		if err != nil {
			return nil, err
		}
		if _, ok := byIP[ip.String()]; !ok {
			addr, err := j.srv.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
			if err != nil {
				return nil, err
			}
			byIP[ip.String()] = addr.String()
			if j.opts.Trace >= 2 {
				j.out.say(fmt.Sprintf("PMI server for remote ranks listening on %s (route to %s)", addr, h.Name))
			}
		}
		ports[h.Name] = byIP[ip.String()]
	}
	return ports, nil
}

// startRanks starts every rank; a rank that cannot start fails the job.
func (j *job) startRanks(ports map[string]string) {
	base := j.rankEnv(true)
	remoteBase := j.rankEnv(false)
	userCPUs := userSets(base, "WEFT_NODE_CPUS")
	localID, localN := j.place.LocalRanks()
	var cpus [][]int // by local rank id; nil: not bound
	var shared int
	for id, node := range j.place.NodeOf {
		if j.place.Hosts[node].Local {
			var err error
			if cpus, shared, err = cpubind.For(j.opts.BindTo, localN[id]); err != nil {
				j.out.say(err.Error() + ": ranks left unbound")
			}
			break
		}
	}
	for id, node := range j.place.NodeOf {
		r := &rank{id: id, host: j.place.Hosts[node]}
		j.ranks = append(j.ranks, r)
		if j.stopping {
			continue
		}
		vars := []string{
			"PMI_RANK=" + strconv.Itoa(id), "PMI_SIZE=" + strconv.Itoa(j.opts.N),
			"MPI_LOCALRANKID=" + strconv.Itoa(localID[id]), "MPI_LOCALNRANKS=" + strconv.Itoa(localN[id]),
		}
		var nics []string
		if l := j.opts.nicsFor(r.host.Name); l != "" {
			nics = []string{"WEFT_NICS=" + l}
		}
		var err error
		if r.host.Local {
			vars = append(vars, nics...)
			if cpus != nil {
				r.cpus = cpus[localID[id]]
				if !userCPUs {
					vars = append(vars, "WEFT_NODE_CPUS="+strconv.Itoa(shared))
				}
			}
			err = j.startLocal(r, append(append([]string(nil), base...), vars...))
		} else {
			// Hydra's PMI_PORT mode: no PMI_RANK/PMI_SIZE, the server tells.
			err = j.startRemote(r, append(append(append([]string(nil), remoteBase...), vars[2:]...), nics...), ports[r.host.Name])
		}
		if err != nil {
			j.fail(id, fmt.Sprintf("could not be started on %s: %v", r.host.Name, err), exitFailure)
			continue
		}
		j.running++
		if j.opts.Trace >= 2 {
			j.out.say(fmt.Sprintf("rank %d started (%s)", id, r.where()))
		}
	}
}

// rankEnv is the environment common to all ranks: for local ranks gorun's
// own, for remote ranks (whose environment is the remote login's) gorun's
// WEFT_* variables, less in both cases what would make a rank think another
// launcher started it; then what gorun sets, and -x last, so that each
// overrides what precedes it.
func (j *job) rankEnv(local bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !inheritedLauncherVar(kv) && (local || strings.HasPrefix(kv, "WEFT_")) {
			env = append(env, kv)
		}
	}
	env = append(env, "WEFT_JOBKEY="+fmt.Sprintf("%016x", j.key), "WEFT_TRANSPORT="+j.opts.Transport)
	if j.opts.Trace >= 0 {
		env = append(env, "WEFT_TRACE="+strconv.Itoa(j.opts.Trace))
	}
	// Each rank answers gorun's question (report.go), at the timeout, when
	// a rank fails and on SIGQUIT, and sends its state snapshots
	// (snapshot.go). WEFT_TIMEOUT is not set from --timeout: a rank's own
	// timeout would race gorun's, and end the waits gorun asks about.
	env = append(env, pmi.AskEnv+"=1", pmi.SnapshotEnv+"=1")
	if !local {
		// gorun binds the ranks it starts here itself (startRanks); one on
		// another host binds itself in mpi.Init, among that host's ranks,
		// unless that host is this machine (cpubind.LauncherBootEnv).
		env = append(env, "WEFT_BIND_TO="+j.opts.BindTo)
		if id := cpubind.BootID(); id != "" {
			env = append(env, cpubind.LauncherBootEnv+"="+id)
		}
	}
	if j.opts.Stats {
		env = append(env, pmi.StatsEnv+"=1") // each rank writes its counters at Finalize (stats.go)
	}
	if j.opts.Profile != "" {
		dir, _ := filepath.Abs(".")
		env = append(env, "WEFT_PROFILE="+j.opts.Profile, "WEFT_PROFILE_DIR="+dir)
	}
	for _, kv := range j.opts.Env {
		// -x WEFT_BIND_TO is Options.BindTo already (resolveBindTo): gorun
		// binds the local ranks, which must not bind again within the
		// share it gave them, and sets the variable for the others.
		if !strings.HasPrefix(kv, "WEFT_BIND_TO=") {
			env = append(env, kv)
		}
	}
	return env
}

// userSets reports whether env, the ranks' environment as rankEnv makes
// it from gorun's and -x, gives variable name: gorun's own setting of it
// then gives way.
func userSets(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// inheritedLauncherVar reports variables gorun must not pass on: they would
// make a rank believe another launcher started it (gorun run inside srun,
// mpirun or Hydra), or carry another job's key.
func inheritedLauncherVar(kv string) bool {
	for _, p := range []string{"PMI_", "PMIX_", "OMPI_COMM_WORLD_", "GORUN_KVS=", "MPI_LOCALRANKID=", "MPI_LOCALNRANKS=", "HYDI_", "WEFT_JOBKEY=", "WEFT_BIND_TO=", cpubind.LauncherBootEnv + "=", pmi.AskEnv + "=", pmi.SnapshotEnv + "="} {
		if strings.HasPrefix(kv, p) {
			return true
		}
	}
	return false
}

// monitor handles exits, PMI events, signals and the timeout until every
// started rank has exited.
func (j *job) monitor(sigs <-chan os.Signal) {
	var timeout <-chan time.Time
	if j.opts.Timeout > 0 {
		t := time.NewTimer(j.opts.Timeout - time.Since(j.start))
		defer t.Stop()
		timeout = t.C
	}
	var kill, settle, asked <-chan time.Time
	for j.running > 0 {
		if j.killTimer != nil {
			kill = j.killTimer.C
		}
		settle = nil
		if j.pendingTimer != nil {
			settle = j.pendingTimer.C
		}
		asked = nil
		if j.asking != nil {
			asked = j.asking.timer.C
		}
		select {
		case r := <-j.exits:
			j.exited(r)
		case e := <-j.events:
			j.pmiEvent(e)
		case sig := <-sigs:
			j.signalled(sig)
		case <-timeout:
			timeout = nil
			if !j.stopping {
				j.timedOut = true
				j.ask("--timeout", true) // the report, the summary and the stop follow the answers
			}
		case a := <-j.out.answers:
			j.answered(a)
		case <-asked:
			j.endAsk()
		case <-kill:
			if j.killedAll {
				j.abandonRemote()
				break
			}
			for _, r := range j.ranks {
				if r.running && j.opts.Trace >= 1 {
					j.out.say(fmt.Sprintf("rank %d (%s) still running %v after SIGTERM: SIGKILL", r.id, r.where(), j.opts.KillGrace))
				}
			}
			j.killAll()
		case <-settle:
			j.settle(true)
		}
	}
	j.settle(true)
	j.endAsk() // every rank ended before answering
	if j.killTimer != nil {
		j.killTimer.Stop()
	}
}

// exited judges a rank's end.
func (j *job) exited(r *rank) {
	// PMI events already queued happened before this exit was seen: a lost
	// connection must be known before a failure is attributed.
	for drained := false; !drained; {
		select {
		case e := <-j.events:
			j.pmiEvent(e)
		default:
			drained = true
		}
	}
	r.running = false
	r.state = r.cmd.ProcessState
	j.running--
	phase := j.srv.States()[r.id].Phase
	j.srv.RankExited(r.id)
	if r.remote {
		r.control.Close()
	}
	how, code := j.judge(r, phase)
	switch {
	case how == "":
		if j.opts.Trace >= 2 {
			j.out.say(fmt.Sprintf("rank %d exited", r.id))
		}
	case j.stopping || j.timedOut:
		// Stopped by gorun (after a failure, or the timeout), or ended
		// while gorun asked what it waits for: not news.
	case j.waitingForCause(r.id):
		if j.pending == nil {
			j.pending = &failure{rank: r.id, how: how, code: code}
			j.pendingTimer = time.NewTimer(settleWait)
		}
	default:
		j.fail(r.id, how, code)
	}
	j.settle(false)
	if j.asking != nil && j.allAnswered() {
		j.endAsk()
	}
}

// waitingForCause reports whether a failure of rank id may be the
// consequence of the first lost rank, which has not been reaped yet.
func (j *job) waitingForCause(id int) bool {
	return j.firstLost >= 0 && j.firstLost != id && j.ranks[j.firstLost].running
}

// settle declares the pending failure once the first lost rank has been
// reaped (and named if it failed), or unconditionally (timer expired,
// monitor ending).
func (j *job) settle(now bool) {
	if j.pending == nil || (!now && j.waitingForCause(j.pending.rank)) {
		return
	}
	p := j.pending
	j.pending = nil
	j.pendingTimer.Stop()
	j.pendingTimer = nil
	j.fail(p.rank, p.how, p.code)
}

// judge says how a rank's exit is a failure ("" if it is not) and the exit
// status it gives the job.
func (j *job) judge(r *rank, phase pmi.Phase) (string, int) {
	code, sig := exitOf(r.state)
	if sig != 0 {
		how := fmt.Sprintf("was killed by signal %d (%v)", int(sig), sig)
		if j.interrupted != nil {
			fwd := forwarded(j.interrupted)
			how += fmt.Sprintf(" after gorun forwarded %v", fwd)
			if fwd != j.interrupted {
				how += fmt.Sprintf(" for %v", j.interrupted)
			}
			if sig == fwd {
				// gorun's status is the signal it received, as a shell's
				// for a job it interrupted.
				code = 128 + int(j.interrupted.(unix.Signal))
			}
		}
		return how, code
	}
	switch {
	case r.remote && code == 255 && phase <= pmi.PhaseConnected:
		return fmt.Sprintf("could not be started on %s: %s exited with status 255%s",
			r.host.Name, j.opts.Rsh[0], tailText(r.tail.get())), 255
	case r.remote && code > 128 && code <= 128+64:
		how := fmt.Sprintf("exited with status %d on %s (killed by signal %d there)", code, r.host.Name, code-128)
		if j.interrupted != nil && unix.Signal(code-128) == forwarded(j.interrupted) {
			code = 128 + int(j.interrupted.(unix.Signal))
		}
		return how, code
	case code != 0:
		return fmt.Sprintf("exited with status %d", code), code
	case phase == pmi.PhaseInitialized || phase == pmi.PhaseInFence || phase == pmi.PhaseLost:
		return "exited with status 0 without calling World.Finalize (PMI finalize never came)", exitFailure
	}
	return "", 0
}

func tailText(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return ":\n    " + strings.Join(lines, "\n    ")
}

// pmiEvent handles what a rank did on its PMI connection.
func (j *job) pmiEvent(e pmi.Event) {
	switch e.Kind {
	case pmi.EventAbort:
		code := e.Code
		if code == 0 {
			code = exitFailure // an aborted job did not succeed
		}
		how := fmt.Sprintf("called PMI abort with exit code %d", e.Code)
		if e.Msg != "" {
			how += " (" + e.Msg + ")"
		}
		j.fail(e.Rank, how, code)
	case pmi.EventLost:
		if e.Rank >= 0 && e.Rank < len(j.ranks) && j.firstLost < 0 {
			j.firstLost = e.Rank
		}
	case pmi.EventProtocol:
		if !j.said[e.Rank] || j.opts.Trace >= 3 {
			j.said[e.Rank] = true
			j.out.say(fmt.Sprintf("rank %d: PMI: %v", e.Rank, e.Err))
		}
	}
}

// fail records the job's first failure, says it, and stops the other ranks.
func (j *job) fail(id int, how string, code int) {
	if j.failure != nil {
		return
	}
	j.failure = &failure{rank: id, how: how, code: code}
	others := 0
	for _, r := range j.ranks {
		if r.running && r.id != id {
			others++
		}
	}
	msg := fmt.Sprintf("rank %d %s", id, how)
	if r := j.rankByID(id); r != nil && r.cmd != nil && r.cmd.Process != nil {
		msg = fmt.Sprintf("rank %d (%s) %s", id, r.where(), how)
	}
	if others > 0 {
		msg += fmt.Sprintf("; stopping the other %d running rank(s)", others)
	}
	j.out.say(msg)
	if j.canAnswer(id) {
		// Their snapshots first: what they wait for when it failed.
		j.ask(fmt.Sprintf("rank %d failed", id), true)
		return
	}
	j.stop()
}

func (j *job) rankByID(id int) *rank {
	if id >= 0 && id < len(j.ranks) {
		return j.ranks[id]
	}
	return nil
}

// stop sends SIGTERM to every running rank and SIGKILL after the grace.
func (j *job) stop() {
	if j.stopping {
		return
	}
	j.stopping = true
	for _, r := range j.ranks {
		r.signal(unix.SIGTERM)
	}
	j.killTimer = time.NewTimer(j.opts.KillGrace)
}

// killAll sends SIGKILL to every rank still running. A remote rank's ssh
// exits once its wrapper has seen the rank die; one that has not within the
// grace is abandoned (abandonRemote).
func (j *job) killAll() {
	for _, r := range j.ranks {
		if r.running {
			r.signal(unix.SIGKILL)
		}
	}
	j.killedAll = true
	if j.killTimer != nil {
		j.killTimer.Stop()
	}
	j.killTimer = time.NewTimer(j.opts.KillGrace)
}

// abandonRemote kills the ssh clients of remote ranks whose wrapper did not
// report their end within the grace after SIGKILL (host unreachable), saying
// that the rank may still run there.
func (j *job) abandonRemote() {
	for _, r := range j.ranks {
		if r.running && r.remote {
			j.out.say(fmt.Sprintf("rank %d (%s): no word from %s %v after SIGKILL; killing ssh, the rank may still run there",
				r.id, r.where(), r.host.Name, j.opts.KillGrace))
			r.abandon()
		}
	}
}

// signalled forwards SIGINT/SIGTERM to every rank, and SIGTERM for SIGHUP;
// a second one kills. SIGPIPE is dropped: gorun's stdout or stderr is
// closed, which only makes its writes there fail (copyLines, say).
// SIGUSR1/SIGUSR2 change the ranks' trace level, and only that. SIGQUIT
// asks the ranks for their snapshots (snapshotSignal). While gorun waits
// for answers to a question that stops the job, the first SIGINT/SIGTERM
// ends the wait: the report comes with what has come, and the job stops;
// to SIGQUIT's, it brings the summary of what has come, and is forwarded.
func (j *job) signalled(sig os.Signal) {
	if sig == unix.SIGPIPE {
		return
	}
	if isLevelSignal(sig) {
		j.forwardLevel(sig.(unix.Signal))
		return
	}
	if sig == snapshotSignal {
		if !j.stopping {
			j.ask("SIGQUIT", false)
		}
		return
	}
	if a := j.asking; a != nil {
		j.endAsk()
		if a.stop {
			return
		}
	}
	if j.interrupted != nil || j.stopping {
		j.out.say(fmt.Sprintf("%v again: killing every rank", sig))
		j.stopping = true
		j.killAll()
		return
	}
	j.interrupted = sig
	fwd := forwarded(sig)
	if j.opts.Trace >= 1 {
		msg := fmt.Sprintf("forwarding %v to every rank", fwd)
		if fwd != sig {
			msg = fmt.Sprintf("%v: %s", sig, msg)
		}
		j.out.say(msg)
	}
	for _, r := range j.ranks {
		r.signal(fwd)
	}
}

// drain waits for the ranks' output to reach gorun, then makes sure nothing
// the job started is left. Every rank has exited; its pipes reach EOF once
// what it started has exited too. After drainWait each rank's process group
// gets a SIGKILL (a grandchild that outlived its rank), and the copies go on
// to EOF, however slowly gorun's own stdout takes what is still in the
// pipes. A pipe whose copy then waits for input drainWait more is held open
// by a process that left the group (setsid, a daemon): it is closed.
// Whatever the copies end with, every group gets a SIGKILL at the end.
func (j *job) drain() {
	deadline := time.NewTimer(drainWait)
	defer deadline.Stop()
	var killed time.Time // when the groups got their SIGKILL; zero: not yet
	for _, r := range j.ranks {
		if r.drained == nil {
			continue
		}
		if killed.IsZero() {
			select {
			case <-r.drained:
				continue
			case <-deadline.C:
				killed = time.Now()
				j.killGroups()
			}
		}
		j.awaitDrained(r, killed)
	}
	j.killGroups()
}

// killGroups sends SIGKILL to every started rank's process group.
func (j *job) killGroups() {
	for _, r := range j.ranks {
		if r.cmd != nil && r.cmd.Process != nil {
			_ = unix.Kill(-r.pid(), unix.SIGKILL)
		}
	}
}

// awaitDrained waits until r's output is drained, closing a pipe whose copy
// has waited for input for drainWait since killed, the SIGKILL of the
// ranks' groups: nothing the job can kill holds it open.
func (j *job) awaitDrained(r *rank, killed time.Time) {
	tick := time.NewTicker(drainWait / 10)
	defer tick.Stop()
	for {
		select {
		case <-r.drained:
			return
		case <-tick.C:
			for _, p := range r.pipes {
				if !p.closed && p.waited(killed) >= drainWait {
					p.closed = true
					if j.opts.Trace >= 1 {
						j.out.say(fmt.Sprintf("rank %d: its %s is still open %v after the SIGKILL of its process group (a process that left the group holds it): closing it",
							r.id, p.stream, drainWait))
					}
					p.Close() // unblocks the copy
				}
			}
		}
	}
}

// exitCode is gorun's status: the first failure's, 124 for a timeout,
// 128+N after gorun received signal N (as a shell reports a job it
// interrupted, also when the ranks were killed by a second one), else 0.
func (j *job) exitCode() int {
	switch {
	case j.failure != nil:
		return j.failure.code
	case j.timedOut:
		return exitTimeout
	case j.interrupted != nil:
		return 128 + int(j.interrupted.(unix.Signal))
	}
	return exitOK
}
