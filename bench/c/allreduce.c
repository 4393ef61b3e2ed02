/*
 * allreduce.c: osu_allreduce's method. Every rank times each
 * MPI_Allreduce (float sum) of the timed iterations, with an untimed
 * barrier between calls; rank 0 reports the average over ranks of each
 * rank's mean per-call time, the fastest and the slowest rank, in us.
 */
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int nranks, iters, warmup;
	int rank = osu_init(&argc, &argv, &o, 4, 1L << 20, 1);
	osu_whole(rank, &o, 4, argv[0]);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	float *s = (float *)osu_alloc(o.max, 0), *r = (float *)osu_alloc(o.max, 0);
	for (long i = 0; i < o.max / 4; i++)
		s[i] = 1;
	osu_coll_header(rank, "MPI Allreduce Latency Test");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		if (size < 4)
			continue; /* less than one float: no operation, as bench skips it */
		double total = 0;
		osu_count(&o, SCHED_COLLECTIVE, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Allreduce(s, r, (int)(size / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			if (i >= warmup)
				total += MPI_Wtime() - t0;
			MPI_Barrier(MPI_COMM_WORLD);
		}
		osu_coll_row(rank, nranks, size, total * 1e6 / iters, iters);
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
