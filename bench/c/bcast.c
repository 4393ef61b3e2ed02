/*
 * bcast.c: osu_bcast's method, as bench bcast runs it. Every rank times
 * each MPI_Bcast (bytes, from rank 0) of the timed iterations, with an
 * untimed barrier between calls; rank 0 reports the average over ranks of
 * each rank's mean per-call time, the fastest and the slowest rank, in us.
 */
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int nranks, iters, warmup;
	int rank = osu_init(&argc, &argv, &o, 1, 1L << 20, 1);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	char *b = (char *)osu_alloc(o.max, 0);
	osu_coll_header(rank, "MPI Broadcast Latency Test");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		double total = 0;
		osu_count(&o, SCHED_COLLECTIVE, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Bcast(b, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
			if (i >= warmup)
				total += MPI_Wtime() - t0;
			MPI_Barrier(MPI_COMM_WORLD);
		}
		osu_coll_row(rank, nranks, size, total * 1e6 / iters, iters);
	}
	free(b);
	MPI_Finalize();
	return 0;
}
