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
	if (rank == 0) {
		osu_title("MPI Broadcast Latency Test");
		printf("%-*s%*s%*s%*s%*s\n", 10, "# Size", FIELD_WIDTH, "Avg Latency(us)", FIELD_WIDTH,
		       "Min Latency(us)", FIELD_WIDTH, "Max Latency(us)", 12, "Iterations");
		fflush(stdout);
	}
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		double total = 0, mine, lo, hi, sum;
		osu_count(&o, SCHED_COLLECTIVE, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Bcast(b, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
			if (i >= warmup)
				total += MPI_Wtime() - t0;
			MPI_Barrier(MPI_COMM_WORLD);
		}
		mine = total * 1e6 / iters;
		MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
		MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("%-*ld%*.*f%*.*f%*.*f%*d\n", 10, size, FIELD_WIDTH, osu_decimals, sum / nranks,
			       FIELD_WIDTH, osu_decimals, lo, FIELD_WIDTH, osu_decimals, hi, 12, iters);
			fflush(stdout);
		}
	}
	free(b);
	MPI_Finalize();
	return 0;
}
