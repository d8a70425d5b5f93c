/* MPI collectives, every result checked against a reference each rank computes itself:
 * MPI_Allreduce (sum), MPI_Allgather, MPI_Bcast (a root that moves with the size) and
 * MPI_Alltoall, on int and float, for messages of 8 B to 8 MiB (a rank's buffer; Alltoall's
 * per-peer block is that divided by the number of ranks). The values are small integers
 * (floats too, so every sum is exact in any order). Rank 0 prints one PASS or FAIL line a
 * case with the ranks' error count and the time it took; exits 1 on a FAIL.
 *
 *   collectives [MAX_BYTES] [ROUNDS]   MAX_BYTES (default 8 MiB, a power of two from 8);
 *                                      ROUNDS: how many times the whole table runs (default
 *                                      1; the kill test runs many)
 *   collectives bench [MAX_BYTES] [ITERS]
 *                                      MPI_Allreduce (float, sum) timed as nccl-tests'
 *                                      all_reduce_perf times it: sizes 8 B to MAX_BYTES by
 *                                      factors of 2, one warm-up and ITERS (default 5) timed
 *                                      calls, the slowest rank's average, algbw = size /
 *                                      time, busbw = algbw * 2 (n - 1) / n, and #wrong (the
 *                                      result of the last call checked)
 * With UHCA_MPI_PIDDIR set, each rank writes its process id to $UHCA_MPI_PIDDIR/rankN.pid
 * (the kill test kills one rank by it).
 * Written for uhca's tests (tests/mpi-uhca.sh). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks;

/* The value rank r puts at element i (for Alltoall: of its block for peer d). */
static int32_t val(int r, int d, size_t i) {
	return (int32_t)((r * 7919 + d * 104729 + (int)(i % 65521) * 31) % 1000 - 500);
}

static void fill(void *buf, MPI_Datatype t, size_t n, int r, int d) {
	for (size_t i = 0; i < n; i++) {
		if (t == MPI_INT)
			((int32_t *)buf)[i] = val(r, d, i);
		else
			((float *)buf)[i] = (float)val(r, d, i);
	}
}

/* Elements of buf[0..n) that are not val(r, d, i) (times `mul` for sums). */
static long count_bad(const void *buf, MPI_Datatype t, size_t n, int r, int d, int sum) {
	long bad = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t want = 0;
		if (sum)
			for (int q = 0; q < nranks; q++)
				want += val(q, d, i);
		else
			want = val(r, d, i);
		if (t == MPI_INT)
			bad += ((const int32_t *)buf)[i] != want;
		else
			bad += ((const float *)buf)[i] != (float)want;
	}
	return bad;
}

static int failed;

static void report(const char *what, const char *tname, size_t bytes, long bad, double t0) {
	long all = 0;
	double dt = MPI_Wtime() - t0, worst = 0;
	MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("%s %-9s %-5s %8zu B  %ld wrong  %.3f ms\n", all ? "FAIL" : "PASS", what, tname,
		       bytes, all, worst * 1e3);
		fflush(stdout);
	}
	if (all)
		failed = 1;
}

/* The bench mode: rank 0 prints nccl-tests' columns. */
static int bench(size_t max, int iters) {
	float *a = malloc(max), *b = malloc(max);
	if (!a || !b)
		MPI_Abort(MPI_COMM_WORLD, 2);
	if (rank == 0)
		printf("# MPI_Allreduce float sum, %d ranks, %d iters\n"
		       "#       size         count     time   algbw   busbw  #wrong\n"
		       "#        (B)    (elements)     (us)  (GB/s)  (GB/s)\n", nranks, iters);
	long total_bad = 0;
	for (size_t bytes = 8; bytes <= max; bytes *= 2) {
		size_t n = bytes / 4;
		fill(a, MPI_FLOAT, n, rank, 0);
		MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++)
			MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double dt = (MPI_Wtime() - t0) / iters, worst = 0;
		long bad = count_bad(b, MPI_FLOAT, n, 0, 0, 1), all = 0;
		MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			double algbw = bytes / worst / 1e9;
			printf("%12zu  %12zu  %7.1f  %6.4f  %6.4f  %6ld\n", bytes, n, worst * 1e6, algbw,
			       algbw * 2 * (nranks - 1) / nranks, all);
			fflush(stdout);
		}
		total_bad += all;
	}
	free(a);
	free(b);
	return total_bad != 0;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const char *piddir = getenv("UHCA_MPI_PIDDIR");
	if (piddir) {
		char path[4096];
		snprintf(path, sizeof path, "%s/rank%d.pid", piddir, rank);
		FILE *f = fopen(path, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	if (argc > 1 && strcmp(argv[1], "bench") == 0) {
		size_t bmax = argc > 2 ? strtoull(argv[2], NULL, 0) : 8u << 20;
		int iters = argc > 3 ? atoi(argv[3]) : 5;
		int r = bench(bmax < 8 ? 8 : bmax, iters < 1 ? 1 : iters);
		MPI_Finalize();
		return r;
	}
	size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : 8u << 20;
	int rounds = argc > 2 ? atoi(argv[2]) : 1;
	if (max < 8)
		max = 8;
	/* The largest buffer: Allgather's result, max bytes from every rank. */
	char *a = malloc(max), *b = malloc(max * (size_t)nranks);
	if (!a || !b) {
		fprintf(stderr, "rank %d: no memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (rank == 0)
		printf("collectives: %d ranks, 8 B to %zu B, %d round(s)\n", nranks, max, rounds);
	MPI_Datatype types[2] = { MPI_INT, MPI_FLOAT };
	const char *tnames[2] = { "int", "float" };
	for (int round = 0; round < rounds; round++) {
		int k = 0;
		for (size_t bytes = 8; bytes <= max; bytes *= 8, k++) {
			for (int ti = 0; ti < 2; ti++) {
				MPI_Datatype t = types[ti];
				size_t n = bytes / 4;
				double t0;
				long bad;

				fill(a, t, n, rank, 0);
				memset(b, 0x5a, bytes);
				t0 = MPI_Wtime();
				MPI_Allreduce(a, b, (int)n, t, MPI_SUM, MPI_COMM_WORLD);
				bad = count_bad(b, t, n, 0, 0, 1);
				report("Allreduce", tnames[ti], bytes, bad, t0);

				fill(a, t, n, rank, 0);
				memset(b, 0x5a, bytes * nranks);
				t0 = MPI_Wtime();
				MPI_Allgather(a, (int)n, t, b, (int)n, t, MPI_COMM_WORLD);
				bad = 0;
				for (int r = 0; r < nranks; r++)
					bad += count_bad(b + (size_t)r * bytes, t, n, r, 0, 0);
				report("Allgather", tnames[ti], bytes, bad, t0);

				int root = (k + ti) % nranks;
				if (rank == root)
					fill(a, t, n, root, 1);
				else
					memset(a, 0x5a, bytes);
				t0 = MPI_Wtime();
				MPI_Bcast(a, (int)n, t, root, MPI_COMM_WORLD);
				bad = count_bad(a, t, n, root, 1, 0);
				report("Bcast", tnames[ti], bytes, bad, t0);

				size_t blk = n / nranks ? n / nranks : 1;
				for (int d = 0; d < nranks; d++)
					fill(b + (size_t)d * blk * 4, t, blk, rank, d);
				char *recv = malloc(blk * 4 * nranks);
				if (!recv)
					MPI_Abort(MPI_COMM_WORLD, 2);
				memset(recv, 0x5a, blk * 4 * nranks);
				t0 = MPI_Wtime();
				MPI_Alltoall(b, (int)blk, t, recv, (int)blk, t, MPI_COMM_WORLD);
				bad = 0;
				for (int s = 0; s < nranks; s++)
					bad += count_bad(recv + (size_t)s * blk * 4, t, blk, s, rank, 0);
				free(recv);
				report("Alltoall", tnames[ti], blk * 4, bad, t0);
			}
			if (bytes * 8 > max && bytes < max)
				bytes = max / 8; /* the last size is max itself */
		}
	}
	if (rank == 0)
		printf("%s: %d ranks\n", failed ? "FAILED" : "all collectives correct", nranks);
	free(a);
	free(b);
	MPI_Finalize();
	return failed;
}
