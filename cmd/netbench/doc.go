// Command netbench runs one side of a two-process measurement over weft's
// UDP device, alone or under lapi: the two processes stand for two hosts
// (typically two network namespaces joined by a veth pair), which an
// in-process benchmark cannot stand for.
//
// Each run is one role; the active roles are rank 0 and their passive
// partners rank 1 of a two-rank job:
//
//	dev-ping / dev-echo   UDP device ping-pong of -size bytes, one-way µs
//	am-ping  / am-echo    lapi active-message ping-pong, one-way µs
//	am-send  / am-recv    lapi stream of -count messages of -size bytes with
//	                      -inflight in flight; the receiver checks that every
//	                      message arrives exactly once, with the right content
//	                      (unless -verify=false)
//
// The address exchange stands in for PMI: each side prints its device
// address ("udp:IP:PORT") as the first line of stdout and reads its peer's
// from the first line of stdin. The result follows as one JSON line on
// stdout (type Result). EOF on stdin stops a side that is still running
// (dev-echo runs until then), so whoever starts the pair also stops it.
// By hand, with namespaces a and b already up:
//
//	coproc A { ip netns exec a netbench -role am-send -bind 10.0.0.1; }
//	coproc B { ip netns exec b netbench -role am-recv -bind 10.0.0.2; }
//	read -r a <&"${A[0]}"; read -r b <&"${B[0]}"
//	echo "$b" >&"${A[1]}"; echo "$a" >&"${B[1]}"
//	cat <&"${A[0]}"
//
// The transport/udp netns tests and benchmarks drive netbench this way.
// WEFT_FAULTS adds user-space fault injection as for any rank
// (udp.OpenFromEnv); -cpuprofile profiles one side.
package main
