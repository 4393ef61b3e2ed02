// Command leaks is TestTrackProcesses' job: each rank leaves resources
// behind, then checks that Finalize names each one with this file's line
// of the call that made it (WEFT_TRACK=1), or counts the requests
// (unset). It prints "rank R: ok" or why not, and exits 1 on a mismatch.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/weft-hpc/weft/mpi"
)

// above is "main.go:N", N the line above the caller's.
func above() string {
	_, _, l, _ := runtime.Caller(1)
	return fmt.Sprintf("main.go:%d", l-1)
}

func main() {
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := w.Comm()
	me, peer := c.Rank(), 1-c.Rank()
	var want []string
	leak := func(what, site string) { want = append(want, what+" created at "+site) }

	_, err = mpi.NewWin(c, make([]int32, 100))
	leak("window of 100 int32", above())
	check(err)
	_, err = mpi.Irecv(c, make([]int32, 1), peer, 7)
	leak(fmt.Sprintf("Irecv request (from rank %d tag 7)", peer), above())
	check(err)
	_, err = mpi.Isend(c, make([]byte, 1<<20), peer, 8) // rendezvous, never received
	leak(fmt.Sprintf("Isend request (to rank %d tag 8)", peer), above())
	check(err)
	// Communicator 2: the window above synchronises on number 1, its own.
	_, err = c.Dup()
	leak("communicator 2 from Dup (2 ranks)", above())
	check(err)

	report := ""
	if err := w.Finalize(); err != nil {
		report = err.Error()
	}
	expect := "mpi: finalize: 2 requests still outstanding (never waited for; WEFT_TRACK=1 names them and where they were made)"
	if os.Getenv("WEFT_TRACK") == "1" {
		expect = fmt.Sprintf("mpi: finalize: %d resources leaked: %s", len(want), strings.Join(want, "; "))
	}
	if report != expect {
		fmt.Printf("rank %d: Finalize reported\n%s\nwant\n%s\n", me, report, expect)
		os.Exit(1)
	}
	fmt.Printf("rank %d: ok: %s\n", me, report)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
