/*
 * iallreduce.c: osu_iallreduce's method, as bench iallreduce measures
 * weft. Per size: the pure time of MPI_Iallreduce + MPI_Wait (float sum),
 * then the overall time when the rank computes for that long between the
 * two without calling MPI; rank 0 prints the averages over ranks of the
 * overall, compute and pure times (us) and the overlap,
 * max(0, 100 - 100 * (overall - compute) / pure) %.
 */
#include "osu.h"

static volatile double sink;

/* busy computes for us microseconds without calling MPI but the clock. */
static void busy(double us)
{
	double end = MPI_Wtime() + us * 1e-6, x = 1.0;
	while (MPI_Wtime() < end)
		for (int i = 0; i < 256; i++)
			x = x * 1.0000001 + 1e-9;
	sink = x;
}

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
	if (rank == 0) {
		osu_title("MPI Iallreduce Overlap Test");
		printf("%-*s%*s%*s%*s%*s\n", 10, "# Size", FIELD_WIDTH, "Overall(us)", FIELD_WIDTH, "Compute(us)",
		       FIELD_WIDTH, "Pure Comm.(us)", FIELD_WIDTH, "Overlap(%)");
		fflush(stdout);
	}
	for (long size = o.min; size <= o.max; size = osu_next(size)) {
		if (size < 4)
			continue;
		double pure = 0, overall = 0, compute = 0, mine[3], sum[3];
		MPI_Request q;
		osu_count(&o, SCHED_COLLECTIVE, size, &iters, &warmup);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < warmup + iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Iallreduce(s, r, (int)(size / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
			MPI_Wait(&q, MPI_STATUS_IGNORE);
			if (i >= warmup)
				pure += MPI_Wtime() - t0;
			MPI_Barrier(MPI_COMM_WORLD);
		}
		double target = pure * 1e6 / iters;
		for (int i = 0; i < warmup + iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Iallreduce(s, r, (int)(size / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
			double t1 = MPI_Wtime();
			busy(target);
			double t2 = MPI_Wtime();
			MPI_Wait(&q, MPI_STATUS_IGNORE);
			if (i >= warmup) {
				overall += MPI_Wtime() - t0;
				compute += t2 - t1;
			}
			MPI_Barrier(MPI_COMM_WORLD);
		}
		mine[0] = overall * 1e6 / iters;
		mine[1] = compute * 1e6 / iters;
		mine[2] = target;
		MPI_Reduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			double ov = 0;
			for (int k = 0; k < 3; k++)
				sum[k] /= nranks;
			if (sum[2] > 0)
				ov = 100 - 100 * (sum[0] - sum[1]) / sum[2];
			if (ov < 0)
				ov = 0;
			printf("%-*ld%*.*f%*.*f%*.*f%*.*f\n", 10, size, FIELD_WIDTH, osu_decimals, sum[0], FIELD_WIDTH,
			       osu_decimals, sum[1], FIELD_WIDTH, osu_decimals, sum[2], FIELD_WIDTH, osu_decimals, ov);
			fflush(stdout);
		}
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
