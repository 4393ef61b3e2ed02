/*
 * get_latency.c: osu_get_latency's method with its default
 * synchronisation (-s flush), as bench's get_latency: every rank makes a
 * window of size bytes (MPI_Win_create) for each size; under one shared
 * lock on rank 1, rank 0 gets size bytes and flushes, each iteration. Rank
 * 1 makes no call meanwhile. Microseconds per Get (the whole round trip),
 * timed on rank 0, warm-up skipped. With -pair 0,N rank N is the target.
 */
#define OSU_PAIR
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int iters, warmup, peer;
	int rank = osu_init(&argc, &argv, &o, 1, 4L << 20, 2);
	int role = osu_role(&o, rank, &peer);
	char *r = osu_alloc(o.max, 'b'), *base = osu_alloc(o.max, 'a');
	if (rank == 0)
		osu_p2p_header("MPI Get Latency Test", "Latency (us)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		MPI_Win win;
		double start = 0, secs = 0;
		osu_count(&o, SCHED_LATENCY, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Win_create(base, size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
		if (role == 0) {
			MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
			for (int i = 0; i < warmup + iters; i++) {
				if (i == warmup)
					start = MPI_Wtime();
				MPI_Get(r, (int)size, MPI_CHAR, peer, 0, (int)size, MPI_CHAR, win);
				MPI_Win_flush(peer, win);
			}
			secs = MPI_Wtime() - start;
			MPI_Win_unlock(peer, win);
		}
		MPI_Win_free(&win);
		if (rank == 0)
			osu_p2p_row(size, secs * 1e6 / iters);
	}
	free(r);
	free(base);
	MPI_Finalize();
	return 0;
}
