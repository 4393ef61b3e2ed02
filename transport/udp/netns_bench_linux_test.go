package udp

import (
	"fmt"
	"testing"
)

// The figures between two namespaces are what two hosts would see over a
// network path through the kernel, without a wire: latency and throughput
// of the device alone and under lapi, measured by netbench in the two
// processes (so ns/op here is netbench's timing, not the benchmark
// harness's, which would include starting the processes).

// pingPongs are the ping-pong measurements: the device alone with 1-byte
// frames, and lapi active messages of 0 and 8 bytes over it.
var pingPongs = []struct {
	name, ping, echo string
	size             int
}{
	{"dev/1B", "dev-ping", "dev-echo", 1},
	{"lapi/0B", "am-ping", "am-echo", 0},
	{"lapi/8B", "am-ping", "am-echo", 8},
}

// BenchmarkNetnsPingPong is osu_latency between two processes in two
// namespaces joined by a veth pair of MTU 1500: us/one-way is half the
// round trip; ns/op is the round trip.
func BenchmarkNetnsPingPong(b *testing.B) {
	p := newNetnsPair(b, netnsConfig{})
	for _, c := range pingPongs {
		b.Run(c.name, func(b *testing.B) {
			res, _ := startNetbench(b, p, c.ping, c.echo,
				"-size", fmt.Sprint(c.size), "-iters", fmt.Sprint(b.N), "-rounds", "1").wait()
			b.ReportMetric(res.MedianUS, "us/one-way")
			b.ReportMetric(res.MedianUS*2e3, "ns/op")
		})
	}
}

// streamMTUs are the link MTUs the stream benchmark runs over: Ethernet's,
// a jumbo frame's, and the largest a veth takes (frames of ~64 KiB).
var streamMTUs = []int{1500, 9000, 65535}

// BenchmarkNetnsStream is lapi's streaming goodput between two namespaces:
// 1 MiB active messages, 8 in flight, for each link MTU, with and without
// GSO (UDP_SEGMENT/UDP_GRO) on the device. GB/s is message data delivered
// per second until the receiver's last completion reached the sender;
// rtx/op is lapi's retransmissions per message (no loss is injected:
// every one is spurious). The receiver checks that each message arrives
// once but not its content, which would cost it a read of every byte (the
// fault tests check content).
func BenchmarkNetnsStream(b *testing.B) {
	for _, mtu := range streamMTUs {
		b.Run(fmt.Sprintf("mtu%d", mtu), func(b *testing.B) {
			p := newNetnsPair(b, netnsConfig{MTU: mtu})
			for _, gso := range []bool{false, true} {
				b.Run(fmt.Sprintf("gso=%v", gso), func(b *testing.B) {
					res, _ := startNetbench(b, p, "am-send", "am-recv", "-size", fmt.Sprint(1<<20),
						"-count", fmt.Sprint(b.N), fmt.Sprintf("-gso=%v", gso), "-verify=false").wait()
					b.ReportMetric(res.GBps, "GB/s")
					b.ReportMetric(float64(res.Retransmits)/float64(b.N), "rtx/op")
					b.ReportMetric(res.Seconds*1e9/float64(b.N), "ns/op")
				})
			}
		})
	}
}

// TestNetnsRoles runs every measurement briefly, so that they keep working
// between benchmark runs, and logs the figures: a quick look, not the
// benchmark.
func TestNetnsRoles(t *testing.T) {
	skipShort(t)
	p := newNetnsPair(t, netnsConfig{})
	for _, c := range pingPongs {
		res, _ := startNetbench(t, p, c.ping, c.echo, "-size", fmt.Sprint(c.size), "-iters", "2000", "-rounds", "3").wait()
		if len(res.OneWayUS) != 3 || res.MedianUS <= 0 {
			t.Fatalf("%s: result %+v", c.name, res)
		}
		t.Logf("%s: %.2f µs one-way (rounds %.2f)", c.name, res.MedianUS, res.OneWayUS)
	}
	for _, gso := range []bool{false, true} {
		a, b := startNetbench(t, p, "am-send", "am-recv", "-size", fmt.Sprint(1<<20), "-count", "64", fmt.Sprintf("-gso=%v", gso)).wait()
		if a.Messages != 64 || b.Messages != 64 {
			t.Fatalf("stream: sent %d, received %d messages, want 64", a.Messages, b.Messages)
		}
		t.Logf("stream, gso=%v: %.3f GB/s, %d retransmissions", gso, a.GBps, a.Retransmits)
	}
}

// skipShort skips a namespace test in -short runs: each takes seconds and
// both CPUs.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("network-namespace test: not run with -short")
	}
}
