/*
 * osu.h: what bench/c's programs share. They measure Open MPI and MPICH
 * the way weft's bench measures weft (the OSU micro-benchmarks' method), so
 * that bench/compare.sh can put the three side by side:
 *
 *   - the command line of weft's bench: -min SIZE -max SIZE -iters N
 *     -warmup N -decimals N, sizes with K/M/G suffixes (and latency's
 *     -blocks N, latency's and bw's -pair 0,N);
 *   - the iteration schedule, which must stay equal to bench/run.go's
 *     (latencySchedule, bandwidthSchedule, collectiveSchedule);
 *   - OSU's output layout (osu_util.h: FIELD_WIDTH 18, FLOAT_PRECISION 2;
 *     -decimals changes the 2, as bench's does).
 *
 * Header-only, because each program is compiled alone by mpicc.
 */
#ifndef WEFT_BENCH_OSU_H
#define WEFT_BENCH_OSU_H

#include <ctype.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OSU_LARGE_MESSAGE (8L << 10) /* OSU's LARGE_MESSAGE_SIZE */
#define OSU_MAX_SIZE (1L << 30)      /* bench's -max limit */
#define FIELD_WIDTH 18
#define FLOAT_PRECISION 2 /* OSU's decimals: -decimals' default */
#define OSU_MAX_DECIMALS 6  /* bench's maxDecimals */

/* A program that defines OSU_BLOCKS before including this (latency.c)
 * takes -blocks N as well. */
#ifdef OSU_BLOCKS
#define OSU_BLOCKS_USAGE " [-blocks N]"
#else
#define OSU_BLOCKS_USAGE ""
#endif

/* A program that defines OSU_PAIR (latency.c, bw.c: point-to-point) takes
 * -pair 0,N as well: rank N plays rank 1's part opposite rank 0, and the
 * other ranks idle, as bench's -pair. */
#ifdef OSU_PAIR
#define OSU_PAIR_USAGE " [-pair 0,N]"
#else
#define OSU_PAIR_USAGE ""
#endif

/* osu_decimals is what the values are printed with (-decimals). */
static int osu_decimals = FLOAT_PRECISION;

enum schedule { SCHED_LATENCY, SCHED_BANDWIDTH, SCHED_COLLECTIVE };

struct osu_opts {
	long min, max;
	int iters;  /* 0: the schedule's */
	int warmup; /* -1: the schedule's */
	int bi;     /* bw.c: -bi measures bi-directional bandwidth */
	int blocks; /* -blocks N (OSU_BLOCKS): time every N iterations too (0: no) */
	int partner; /* -pair 0,N (OSU_PAIR): the rank opposite rank 0 (default 1) */
};

/* osu_parse_pair reads "0,N" with N > 0 and returns N, or -1. */
static inline int osu_parse_pair(const char *s)
{
	char *end;
	long n;
	if (s[0] != '0' || s[1] != ',' || !isdigit((unsigned char)s[2]))
		return -1;
	n = strtol(s + 2, &end, 10);
	return *end == '\0' && n > 0 && n < (1L << 30) ? (int)n : -1;
}

/* osu_role is a rank's part in a point-to-point test: 0 for rank 0 (it
 * times), 1 for the partner, -1 for the ranks that idle; *peer is the rank
 * opposite. */
static inline int osu_role(const struct osu_opts *o, int rank, int *peer)
{
	if (rank == 0) {
		*peer = o->partner;
		return 0;
	}
	*peer = 0;
	return rank == o->partner ? 1 : -1;
}

/* osu_parse_size reads 512, 64K, 4M, 1G (binary, case-insensitive, an
 * optional B or iB after the suffix). Returns -1 for anything else. */
static inline long osu_parse_size(const char *s)
{
	char *end;
	long v, shift = 0;
	if (!isdigit((unsigned char)*s))
		return -1;
	v = strtol(s, &end, 10);
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	}
	if (shift && toupper((unsigned char)*end) == 'I')
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end != '\0' || v > (OSU_MAX_SIZE >> shift))
		return -1;
	return v << shift;
}

/* osu_parse reads the command line. On a bad one rank 0 says why and it
 * returns -1. */
static inline int osu_parse(int argc, char **argv, struct osu_opts *o, long defmin, long defmax)
{
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	o->min = defmin;
	o->max = defmax;
	o->iters = 0;
	o->warmup = -1;
	o->bi = 0;
	o->blocks = 0;
	o->partner = 1;
	osu_decimals = FLOAT_PRECISION;
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (f[0] == '-' && f[1] == '-')
			f++; /* --min as well as -min */
		if (strcmp(f, "-bi") == 0) {
			o->bi = 1;
			continue;
		}
		if (v == NULL)
			goto bad;
		if (strcmp(f, "-min") == 0 && (o->min = osu_parse_size(v)) >= 0)
			i++;
		else if (strcmp(f, "-max") == 0 && (o->max = osu_parse_size(v)) >= 0)
			i++;
		else if (strcmp(f, "-iters") == 0 && (o->iters = atoi(v)) >= 0 && isdigit((unsigned char)*v))
			i++;
		else if (strcmp(f, "-warmup") == 0 && (o->warmup = atoi(v)) >= 0 && isdigit((unsigned char)*v))
			i++;
#ifdef OSU_BLOCKS
		else if (strcmp(f, "-blocks") == 0 && (o->blocks = atoi(v)) >= 0 && isdigit((unsigned char)*v))
			i++;
#endif
#ifdef OSU_PAIR
		else if (strcmp(f, "-pair") == 0 && (o->partner = osu_parse_pair(v)) > 0)
			i++;
#endif
		else if (strcmp(f, "-decimals") == 0 && isdigit((unsigned char)*v) &&
		         (osu_decimals = atoi(v)) <= OSU_MAX_DECIMALS)
			i++;
		else
			goto bad;
	}
	if (o->min <= o->max)
		return 0;
bad:
	if (rank == 0)
		fprintf(stderr, "%s: bad command line; usage: %s [-min SIZE] [-max SIZE] [-iters N] [-warmup N] [-decimals N]%s%s\n"
		        "  (sizes like 512, 64K, 4M; -min <= -max; -decimals 0 to %d)\n",
		        argv[0], argv[0], strstr(argv[0], "bw") ? " [-bi]" : OSU_BLOCKS_USAGE, OSU_PAIR_USAGE, OSU_MAX_DECIMALS);
	return -1;
}

/* osu_whole refuses, as bench does, a -min or -max that is not a whole
 * number of elem-byte elements (allreduce's float32s): its row would be
 * labelled with bytes the call never reduces. Every rank calls it after
 * osu_init; on a bad size rank 0 says why and every rank exits 2. */
static inline void osu_whole(int rank, const struct osu_opts *o, long elem, const char *argv0)
{
	if (o->min % elem == 0 && o->max % elem == 0)
		return;
	if (rank == 0)
		fprintf(stderr, "%s: -min %ld -max %ld: sizes are whole float32s; want multiples of %ld\n", argv0,
		        o->min, o->max, elem);
	MPI_Finalize();
	exit(2);
}

/* osu_count gives the timed and warm-up iterations for one size: OSU's
 * counts, as bench/run.go has them, unless the command line set them. */
static inline void osu_count(const struct osu_opts *o, enum schedule s, long size, int *iters, int *warmup)
{
	switch (s) {
	case SCHED_LATENCY:
		*iters = size <= OSU_LARGE_MESSAGE ? 10000 : size <= (256L << 10) ? 1000 : 100;
		*warmup = size <= OSU_LARGE_MESSAGE ? 100 : 10;
		break;
	case SCHED_BANDWIDTH:
		*iters = size <= OSU_LARGE_MESSAGE ? 100 : 20;
		*warmup = size <= OSU_LARGE_MESSAGE ? 10 : 2;
		break;
	case SCHED_COLLECTIVE:
		*iters = size <= OSU_LARGE_MESSAGE ? 1000 : 100;
		*warmup = size <= OSU_LARGE_MESSAGE ? 200 : 10;
		break;
	}
	if (o->iters > 0)
		*iters = o->iters;
	if (o->warmup >= 0)
		*warmup = o->warmup;
}

/* osu_next is OSU's walk over sizes: double, and 0 is followed by 1. */
static inline long osu_next(long size) { return size ? size * 2 : 1; }

/* osu_alloc returns n bytes (at least 1) filled with c, page-aligned like
 * OSU's buffers, every page touched before any timing. */
static inline char *osu_alloc(long n, int c)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n > 0 ? (size_t)n : 1) != 0) {
		fprintf(stderr, "out of memory allocating %ld bytes\n", n);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(p, c, n > 0 ? (size_t)n : 1);
	return p;
}

/* osu_title prints the title line and, as a comment OSU readers skip,
 * the first line of the MPI library's version, so a saved table says
 * which MPI it measured. */
static inline void osu_title(const char *test)
{
	char lib[MPI_MAX_LIBRARY_VERSION_STRING];
	int n;
	MPI_Get_library_version(lib, &n);
	lib[strcspn(lib, "\n,")] = '\0';
	for (char *c = lib; *c; c++)
		if (*c == '\t')
			*c = ' '; /* MPICH's "Version:\t4.0.2" */
	printf("# weft-c %s v1\n# Library: %.70s\n", test, lib);
}

/* osu_p2p_header prints a point-to-point test's title and column names. */
static inline void osu_p2p_header(const char *test, const char *metric)
{
	osu_title(test);
	printf("%-*s%*s\n", 10, "# Size", FIELD_WIDTH, metric);
	fflush(stdout);
}

/* osu_p2p_row prints one size's figure, flushed so that a watcher (or a
 * run cut short by compare.sh's time limit) sees every finished size. */
static inline void osu_p2p_row(long size, double v)
{
	printf("%-*ld%*.*f\n", 10, size, FIELD_WIDTH, osu_decimals, v);
	fflush(stdout);
}

/* osu_coll_header prints a collective test's title and OSU's columns
 * (average, fastest and slowest rank, iterations), at rank 0. */
static inline void osu_coll_header(int rank, const char *test)
{
	if (rank != 0)
		return;
	osu_title(test);
	printf("%-*s%*s%*s%*s%*s\n", 10, "# Size", FIELD_WIDTH, "Avg Latency(us)", FIELD_WIDTH,
	       "Min Latency(us)", FIELD_WIDTH, "Max Latency(us)", 12, "Iterations");
	fflush(stdout);
}

/* osu_coll_row gathers every rank's mean per-call time mine (us) and
 * prints, at rank 0, the average over ranks, the fastest and the slowest;
 * every rank calls it. */
static inline void osu_coll_row(int rank, int nranks, long size, double mine, int iters)
{
	double lo, hi, sum;
	MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
	MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("%-*ld%*.*f%*.*f%*.*f%*d\n", 10, size, FIELD_WIDTH, osu_decimals, sum / nranks,
		       FIELD_WIDTH, osu_decimals, lo, FIELD_WIDTH, osu_decimals, hi, 12, iters);
		fflush(stdout);
	}
}

/* osu_init starts MPI and reads the command line. On a bad command line,
 * or fewer than min_ranks ranks, rank 0 says why and every rank finalizes
 * and exits 2. Returns this process's rank. */
static inline int osu_init(int *argc, char ***argv, struct osu_opts *o, long defmin, long defmax, int min_ranks)
{
	int rank, size;
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int bad = osu_parse(*argc, *argv, o, defmin, defmax) != 0;
	if (!bad && size < min_ranks) {
		if (rank == 0)
			fprintf(stderr, "%s: needs at least %d ranks, this job has %d\n", (*argv)[0], min_ranks, size);
		bad = 1;
	}
#ifdef OSU_PAIR
	if (!bad && o->partner >= size) {
		if (rank == 0)
			fprintf(stderr, "%s: -pair 0,%d: this job has %d ranks\n", (*argv)[0], o->partner, size);
		bad = 1;
	}
#endif
	if (bad) {
		MPI_Finalize();
		exit(2);
	}
	return rank;
}

#endif
