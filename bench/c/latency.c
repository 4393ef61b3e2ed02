/*
 * latency.c: osu_latency's method. Ranks 0 and 1 (or 0 and N with
 * -pair 0,N) ping-pong blocking messages; the figure is half the round
 * trip in microseconds, averaged over the timed iterations (warm-up
 * skipped). Other ranks idle. With
 * -blocks N, as weft's bench latency, rank 0 also prints the figure of
 * every N round trips on a '#' line after each size's row.
 */
#define OSU_BLOCKS
#define OSU_PAIR
#include "osu.h"

int main(int argc, char **argv)
{
	struct osu_opts o;
	int iters, warmup, peer;
	int rank = osu_init(&argc, &argv, &o, 0, 4L << 20, 2);
	int role = osu_role(&o, rank, &peer);
	char *s = osu_alloc(o.max, 'a'), *r = osu_alloc(o.max, 'b');
	if (rank == 0)
		osu_p2p_header("MPI Latency Test", "Latency (us)");
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		double start = 0, block_start = 0, *blocks = NULL;
		int nblocks = 0;
		osu_count(&o, SCHED_LATENCY, size, &iters, &warmup);
		if (rank == 0 && o.blocks > 0 && iters / o.blocks > 0 &&
		    (blocks = malloc(sizeof *blocks * (size_t)(iters / o.blocks))) == NULL) {
			fprintf(stderr, "%s: out of memory for %d blocks\n", argv[0], iters / o.blocks);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters && role >= 0; i++) {
			if (i == warmup)
				block_start = start = MPI_Wtime();
			if (role == 0) {
				MPI_Send(s, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
				MPI_Recv(r, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(r, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(s, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
			}
			if (blocks && i + 1 > warmup && (i + 1 - warmup) % o.blocks == 0) {
				double t = MPI_Wtime();
				blocks[nblocks++] = (t - block_start) * 1e6 / (2.0 * o.blocks);
				block_start = t;
			}
		}
		if (rank == 0) {
			osu_p2p_row(size, (MPI_Wtime() - start) * 1e6 / (2.0 * iters));
			if (blocks) {
				printf("# %ld: per %d round trips:", size, o.blocks);
				for (int k = 0; k < nblocks; k++)
					printf(" %.*f", osu_decimals, blocks[k]);
				printf("\n");
			}
			free(blocks);
		}
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
