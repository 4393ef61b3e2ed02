package mpi

// Large Allgathers by RDMA Puts (putBlocks, alltoall_rdma.go): each rank
// Puts its block into every peer's receive buffer at once. Every rank
// sends and receives p-1 blocks, as in the ring it replaces, but in one
// step instead of p-1 steps with a rendezvous each.

// allgatherRDMALarge is the default smallest Allgather block (bytes per
// rank) that goes by Puts (WEFT_ALLGATHER_RDMA sets it; 0 turns it off):
// from 64 KiB they beat the ring on 4 and 8 ranks over shm and udp
// (across hosts, where the hierarchy of hosts carries Allgather and Puts
// run between the hosts' leaders only, they were level); below it the
// ring's figures and theirs crossed (bench/results/allgather-rdma.md).
const allgatherRDMALarge = 64 << 10

// allgatherPut reports whether an Allgather of n bytes per rank goes by
// Puts (allgatherRDMA).
func (c *Comm) allgatherPut(n int) bool { return c.usePuts(n, c.w.allgatherPutMin) }

// allgatherRDMA is Allgather by Puts: send goes to block c.rank of every
// member's recv.
func (c *Comm) allgatherRDMA(send, recv []byte) error {
	return c.putBlocks("allgather", recv, len(send), func(int) []byte { return send })
}
