/*
 * put_bw.c: osu_put_bw's method with its default synchronisation (-s
 * flush), as bench's put_bw: every rank makes a window (MPI_Win_create
 * over its own buffer) for each size; rank 0 takes a shared lock on rank
 * 1 once, then each iteration puts a window of 64 messages (32 above 8K)
 * at consecutive places of rank 1's window and flushes. Rank 1 makes no
 * call meanwhile. MB/s with MB = 1e6 bytes, timed on rank 0, warm-up
 * skipped. With -pair 0,N rank N is the target. Other ranks idle.
 */
#define OSU_PAIR
#include "osu.h"

static int window_of(long size) { return size <= OSU_LARGE_MESSAGE ? 64 : 32; }

int main(int argc, char **argv)
{
	struct osu_opts o;
	int iters, warmup, peer;
	int rank = osu_init(&argc, &argv, &o, 1, 4L << 20, 2);
	if (o.max * window_of(o.max) > OSU_MAX_SIZE) {
		/* as bench refuses it: the window would hold window_of(max) * max bytes */
		if (rank == 0)
			fprintf(stderr, "%s: -max %ld: the window holds %d messages of -max bytes, beyond the %ld-byte limit\n",
			        argv[0], o.max, window_of(o.max), OSU_MAX_SIZE);
		MPI_Finalize();
		exit(2);
	}
	int role = osu_role(&o, rank, &peer);
	long small = (o.max < OSU_LARGE_MESSAGE ? o.max : OSU_LARGE_MESSAGE) * 64, large = o.max * window_of(o.max);
	char *s = osu_alloc(o.max, 'a'), *base = osu_alloc(small > large ? small : large, 'b');
	if (rank == 0)
		osu_p2p_header("MPI Put Bandwidth Test", "Bandwidth (MB/s)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		MPI_Win win;
		double start = 0, secs = 0;
		int wn = window_of(size);
		osu_count(&o, SCHED_BANDWIDTH, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Win_create(base, size * wn, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
		if (role == 0) {
			MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
			for (int i = 0; i < warmup + iters; i++) {
				if (i == warmup)
					start = MPI_Wtime();
				for (int j = 0; j < wn; j++)
					MPI_Put(s, (int)size, MPI_CHAR, peer, (MPI_Aint)j * size, (int)size, MPI_CHAR, win);
				MPI_Win_flush(peer, win);
			}
			secs = MPI_Wtime() - start;
			MPI_Win_unlock(peer, win);
		}
		MPI_Win_free(&win);
		if (rank == 0)
			osu_p2p_row(size, (double)size * iters * wn / secs / 1e6);
	}
	free(s);
	free(base);
	MPI_Finalize();
	return 0;
}
