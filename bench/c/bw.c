/*
 * bw.c: osu_bw's method, or with -bi osu_bibw's. Uni-directional: rank 0
 * posts a window of 64 Isends, rank 1 a window of 64 Irecvs, and rank 1
 * acknowledges each window with 4 bytes. Bi-directional: both post 64
 * Irecvs and 64 Isends per window. MB/s with MB = 1e6 bytes, timed on
 * rank 0, warm-up skipped. With -pair 0,N rank N takes rank 1's part.
 * Other ranks idle.
 */
#define OSU_PAIR
#include "osu.h"

#define WINDOW 64

int main(int argc, char **argv)
{
	struct osu_opts o;
	MPI_Request reqs[2 * WINDOW];
	MPI_Status stats[2 * WINDOW]; /* not MPI_STATUSES_IGNORE: gcc 12 misreads MPICH's sentinel as a zero-size array */
	char ack[4] = {0};
	int iters, warmup, peer;
	int rank = osu_init(&argc, &argv, &o, 1, 4L << 20, 2);
	int role = osu_role(&o, rank, &peer);
	char *s = osu_alloc(o.max, 'a'), *r = osu_alloc(o.max, 'b');
	if (rank == 0)
		osu_p2p_header(o.bi ? "MPI Bi-Directional Bandwidth Test" : "MPI Bandwidth Test", "Bandwidth (MB/s)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		double start = 0;
		int n = (int)size;
		osu_count(&o, SCHED_BANDWIDTH, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters && role >= 0; i++) {
			if (i == warmup)
				start = MPI_Wtime();
			if (o.bi) {
				/* tags: 10 carries the partner -> 0, 11 carries 0 -> the partner */
				for (int j = 0; j < WINDOW; j++)
					MPI_Irecv(r, n, MPI_CHAR, peer, role == 0 ? 10 : 11, MPI_COMM_WORLD, &reqs[j]);
				for (int j = 0; j < WINDOW; j++)
					MPI_Isend(s, n, MPI_CHAR, peer, role == 0 ? 11 : 10, MPI_COMM_WORLD, &reqs[WINDOW + j]);
				MPI_Waitall(2 * WINDOW, reqs, stats);
			} else if (role == 0) {
				for (int j = 0; j < WINDOW; j++)
					MPI_Isend(s, n, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[j]);
				MPI_Waitall(WINDOW, reqs, stats);
				MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				for (int j = 0; j < WINDOW; j++)
					MPI_Irecv(r, n, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[j]);
				MPI_Waitall(WINDOW, reqs, stats);
				MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
			}
		}
		if (rank == 0) {
			double secs = MPI_Wtime() - start;
			osu_p2p_row(size, (double)size * iters * WINDOW * (o.bi ? 2 : 1) / secs / 1e6);
		}
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
