// Package sysmon keeps the Go runtime's system monitor thread from
// preempting a rank that busy-polls.
//
// sysmon is the thread the runtime starts first, before any package's
// init: it wakes on its own to preempt long-running goroutines, retake
// processors from blocking system calls and poll the network. After every
// stretch of idling or blocking it wakes every 20 µs for some 50 rounds,
// and only then backs off to 10 ms. On a node where every core runs a
// polling rank, each of those wake-ups takes a core from a rank: the
// kernel switches to sysmon and back, and the peer waiting on that rank
// loses that time too. What it costs, and the A/B that keeps this package
// (in launched ranks only), are in bench/results/sysmon.md.
//
// Batch moves sysmon to SCHED_BATCH: the same share of the processor, but
// a wake-up no longer preempts the running thread; sysmon runs when the
// running thread's slice ends, within a scheduler tick. Its duties are
// measured in milliseconds (10 ms to preempt a goroutine, 10 ms to poll
// the network), so they lose nothing that matters.
//
// The policy is inherited by the threads sysmon starts (the runtime clones
// a new thread from the one that asks for it), and goroutines then run on
// them without wake-up preemption. Batch therefore also starts a sweep:
// once a second, every thread but sysmon's is moved back.
//
// What the user chose stays: a process started under another policy than
// SCHED_OTHER (chrt -b or -i, as a batch system may start jobs) is left as
// it is (ErrChosenPolicy), a thread already on SCHED_BATCH when Batch acts
// stays on it, and every thread keeps its nice value.
//
// sysmon may import the standard library, golang.org/x/sys/unix and
// internal/cpubind (for its list of the process's threads).
package sysmon
