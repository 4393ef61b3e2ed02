/*
 * latency.c: osu_latency's method. Ranks 0 and 1 ping-pong blocking
 * messages; the figure is half the round trip in microseconds, averaged
 * over the timed iterations (warm-up skipped). Other ranks idle.
 */
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int iters, warmup;
	int rank = osu_init(&argc, &argv, &o, 0, 4L << 20, 2);
	char *s = osu_alloc(o.max, 'a'), *r = osu_alloc(o.max, 'b');
	if (rank == 0)
		osu_p2p_header("MPI Latency Test", "Latency (us)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		double start = 0;
		osu_count(&o, SCHED_LATENCY, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters && rank < 2; i++) {
			if (i == warmup)
				start = MPI_Wtime();
			if (rank == 0) {
				MPI_Send(s, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(r, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(r, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(s, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
			}
		}
		if (rank == 0)
			osu_p2p_row(size, (MPI_Wtime() - start) * 1e6 / (2.0 * iters));
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
