package trace

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The signals that change the level of a running process, as ntpd's and
// other daemons' debug levels are changed, and the ones mpirun forwards to
// its ranks (gorun does too). Each raises or lowers the level by one.
const (
	RaiseSignal = syscall.SIGUSR1
	LowerSignal = syscall.SIGUSR2
)

// sigs is the process's one handler of RaiseSignal and LowerSignal, shared
// by the callers of HandleSignals (the worlds of a process).
var sigs struct {
	mu    sync.Mutex
	users int
	ch    chan os.Signal
	done  chan struct{} // closed when the goroutine reading ch has ended
}

// HandleSignals makes RaiseSignal raise the level by one and LowerSignal
// lower it by one (Shift), until the function it returns is called. Calls
// may overlap: the signals are handled from the first call until every
// call's stop has run, each signal once. Without a handler a Go program
// ignores both signals, so one sent before or after changes nothing.
func HandleSignals() (stop func()) {
	sigs.mu.Lock()
	defer sigs.mu.Unlock()
	sigs.users++
	if sigs.users == 1 {
		// Room for a burst: a signal that finds the channel full is lost.
		ch := make(chan os.Signal, 16)
		done := make(chan struct{})
		signal.Notify(ch, RaiseSignal, LowerSignal)
		go func() {
			defer close(done)
			for s := range ch {
				by := 1
				if s == LowerSignal {
					by = -1
				}
				Shift(by, s.String())
			}
		}()
		sigs.ch, sigs.done = ch, done
	}
	var once sync.Once
	return func() { once.Do(releaseSignals) }
}

// releaseSignals ends one HandleSignals; the last one stops the handler.
func releaseSignals() {
	sigs.mu.Lock()
	defer sigs.mu.Unlock()
	sigs.users--
	if sigs.users > 0 {
		return
	}
	signal.Stop(sigs.ch) // no delivery to ch once it returns
	close(sigs.ch)
	<-sigs.done
	sigs.ch, sigs.done = nil, nil
}

// Shift changes the level by `by` (clamped to Off..Max), says so in a line
// written whatever the level ("trace: level 3 (was 2): user defined signal
// 1"; why says what asked for it), and returns the new level.
func Shift(by int, why string) Level {
	for {
		was := level.Load()
		now := int32(min(max(Level(was)+Level(by), Off), Max))
		if level.CompareAndSwap(was, now) {
			write([]byte("trace: level " + Level(now).String() + " (was " + Level(was).String() + "): " + why + "\n"))
			return Level(now)
		}
	}
}

// String is the level as WEFT_TRACE writes it: a number, or "off".
func (l Level) String() string {
	if l <= Off {
		return "off"
	}
	return strconv.Itoa(int(l))
}

// Mark writes a marker line at level Rare for rank: "mark RANK: TEXT
// (wall HH:MM:SS.UUUUUU)", text formatted as fmt.Sprintf does, the wall
// clock in UTC. Its stamp, like every line's, counts from this process's
// start; the wall clock is there to line up the traces of processes that
// started at different times, on different hosts. mpi's World.Mark is the
// user's way to it.
func Mark(rank int, format string, args ...any) {
	if !On(Rare) {
		return
	}
	text := fmt.Sprintf(format, args...)
	Printf(Rare, "mark %d: %s (wall %s)", rank, text, time.Now().UTC().Format("15:04:05.000000"))
}
