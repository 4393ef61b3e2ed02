/*
 * acc_latency.c: osu_acc_latency's method with lock synchronisation (-s
 * lock), as bench's acc_latency: every rank makes a window of size bytes
 * (MPI_Win_create) for each size; each iteration rank 0 locks rank 1
 * (shared), accumulates size signed chars into its window (MPI_SUM) and
 * unlocks. Rank 1 makes no call meanwhile. Microseconds per
 * lock-accumulate-unlock, timed on rank 0, warm-up skipped. With -pair
 * 0,N rank N is the target.
 */
#define OSU_PAIR
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int iters, warmup, peer;
	int rank = osu_init(&argc, &argv, &o, 1, 4L << 20, 2);
	int role = osu_role(&o, rank, &peer);
	char *s = osu_alloc(o.max, 1), *base = osu_alloc(o.max, 0);
	if (rank == 0)
		osu_p2p_header("MPI Accumulate Latency Test", "Latency (us)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		MPI_Win win;
		double start = 0, secs = 0;
		osu_count(&o, SCHED_LATENCY, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Win_create(base, size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
		if (role == 0) {
			for (int i = 0; i < warmup + iters; i++) {
				if (i == warmup)
					start = MPI_Wtime();
				MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
				MPI_Accumulate(s, (int)size, MPI_SIGNED_CHAR, peer, 0, (int)size, MPI_SIGNED_CHAR, MPI_SUM, win);
				MPI_Win_unlock(peer, win);
			}
			secs = MPI_Wtime() - start;
		}
		MPI_Win_free(&win);
		if (rank == 0)
			osu_p2p_row(size, secs * 1e6 / iters);
	}
	free(s);
	free(base);
	MPI_Finalize();
	return 0;
}
