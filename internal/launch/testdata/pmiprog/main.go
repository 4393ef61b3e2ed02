// Command pmiprog is gorun's test rank. It bootstraps with internal/pmi as
// mpi.Init will (Discover, JobKey, put a card, fence, get every card), and
// prints one line every rank must agree on:
//
//	rank R/N kind=K key=KEY sum=CRC local=L
//
// where CRC is the CRC-32 of all ranks' cards in rank order. Flags make one
// rank fail in a chosen way, for gorun's failure tests.
package main

import (
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/profile"
)

func main() {
	failRank := flag.Int("fail-rank", -1, "rank that fails (-2: every rank)")
	fail := flag.String("fail", "", "how it fails: kill (SIGKILL itself before the fence), exit (status 3 before the fence), "+
		"abort (PMI abort 7 before the fence), nofinalize (exit 0 after the fence without finalize), hang (block before the fence)")
	cardLen := flag.Int("card", 3000, "bytes of padding per card (over 1023 exercises chunked values)")
	lines := flag.Int("lines", 0, "extra output lines per rank, written in small pieces")
	envNames := flag.String("env", "", "comma-separated variable names each rank prints as 'rank R env NAME=VALUE' (or NAME unset)")
	exe := flag.Bool("exe", false, "each rank prints 'rank R exe PATH', the path of its executable")
	ignoreInt := flag.Bool("ignore-int", false, "ignore SIGINT, as a program that does not stop on Ctrl-C")
	flag.Parse()
	if *ignoreInt {
		signal.Ignore(syscall.SIGINT)
	}

	c, err := pmi.Discover(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pmiprog:", err)
		os.Exit(1)
	}
	stop := profile.StartFromEnv(c.Rank())
	r, n := c.Rank(), c.Size()
	if *exe {
		path, err := os.Executable()
		check(err)
		fmt.Printf("rank %d exe %s\n", r, path)
	}
	for _, name := range strings.Split(*envNames, ",") {
		if v, ok := os.LookupEnv(name); ok && name != "" {
			fmt.Printf("rank %d env %s=%s\n", r, name, v)
		} else if name != "" {
			fmt.Printf("rank %d env %s unset\n", r, name)
		}
	}
	key, err := pmi.JobKey(c)
	check(err)
	if os.Getenv("PMIPROG_SEGMENT") != "" {
		// What a shared-memory transport leaves; gorun must remove it.
		path := fmt.Sprintf("/dev/shm/%srank%d", pmi.SegmentPrefix(key), r)
		check(os.WriteFile(path, []byte("segment"), 0o600))
		fmt.Printf("segment %s\n", path)
	}
	if r == *failRank || *failRank == -2 {
		switch *fail {
		case "kill":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "exit":
			os.Exit(3)
		case "abort":
			check(c.Abort(7, "pmiprog asked to abort"))
			select {} // the launcher kills us
		case "hang":
			fmt.Printf("rank %d hanging\n", r)
			select {}
		}
	}
	check(c.Put(fmt.Sprintf("card-%d", r), card(r, key, *cardLen)))
	check(c.Fence())
	sum := crc32.NewIEEE()
	for p := range n {
		v, err := c.Get(fmt.Sprintf("card-%d", p))
		check(err)
		if v != card(p, key, *cardLen) {
			fmt.Fprintf(os.Stderr, "pmiprog: rank %d read a wrong card of rank %d: %.60q\n", r, p, v)
			os.Exit(1)
		}
		sum.Write([]byte(v))
	}
	for i := range *lines {
		// Several writes per line: gorun must still keep lines whole.
		fmt.Fprintf(os.Stdout, "rank %d line %d ", r, i)
		fmt.Fprintf(os.Stdout, "%s", strings.Repeat("x", 50))
		fmt.Fprintf(os.Stdout, " end\n")
	}
	fmt.Printf("rank %d/%d kind=%s key=%016x sum=%08x local=%v port=%v\n", r, n, c.Kind(), key, sum.Sum32(),
		c.Info().LocalRanks, os.Getenv("PMI_PORT") != "")
	if r == *failRank && *fail == "nofinalize" {
		os.Exit(0)
	}
	stop()
	check(c.Finalize())
}

// card is what rank r publishes: text with spaces and ';' that PMI servers
// would mangle unencoded, and long enough to need several PMI values.
func card(r int, key uint64, pad int) string {
	return fmt.Sprintf("rank=%d key=%016x; pad=%s", r, key, strings.Repeat(fmt.Sprintf("%d;", r%10), pad/2))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pmiprog:", err)
		os.Exit(1)
	}
}
