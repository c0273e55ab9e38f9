/* What vla-bench's two modes (the scaling sweep, bench_sweep.c; the CUDA speed targets,
 * bench_targets.c) share: the one-line failure and the exit statuses, the clock, the random
 * inputs, the median, JSON escaping, strict number parsing, and writing result files whole or
 * not at all. */
#ifndef VLA_BENCH_COMMON_H
#define VLA_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_EXIT_FAILED 1 /* the run could not be done (backend, memory, a file) */
#define BENCH_EXIT_USAGE 2  /* a bad command line */
#define BENCH_EXIT_SKIP 77  /* --targets on a CUDA build with no usable device: the tests' skip code */

/* Prints "vla-bench: <message>" as one line on stderr and returns `code`. */
int bench_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* CLOCK_MONOTONIC in seconds. */
double bench_now_s(void);

/* xoshiro256** seeded by splitmix64: the same inputs for the same seed on every machine. */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;
void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_u64(bench_rng *r);
/* n N(0, 1) floats by Box-Muller, never exactly 0 (a zero input hides a missing read). */
void bench_fill_normal(bench_rng *r, float *x, size_t n);
/* The same distribution on every host thread: x[0..n) in blocks of BENCH_FILL_BLOCK floats, block
 * i from its own generator seeded with (seed, first + i), so the values depend on the seed and
 * the block index only, never on the thread count. A sweep's inputs at (8,16,64) T = 32768 are
 * 2.4 G floats, about a minute on one thread. */
#define BENCH_FILL_BLOCK ((size_t)1 << 16)
void bench_fill_normal_blocks(uint64_t seed, size_t first, float *x, size_t n);

/* Sorts x[0..n) ascending and returns its median (n >= 1). */
double bench_sort_median(double *x, int n);

/* A JSON string (quoted, escaped) and a JSON number (null when not finite). */
void bench_json_string(FILE *f, const char *s);
void bench_json_number(FILE *f, double v);

/* Strict parsing for flag values: the whole string, in range, else the one line (usage
 * status) and -1. */
int bench_parse_int(const char *flag, const char *s, int min, int max, int *out);

/* Writes n (<= 4) files, each whole or not at all: file i is written to "PATH.tmpPID" by
 * write(f, ctx, i) (which returns 0, or -1 after its own one line), and only when every one
 * was written and closed without error are they renamed into place (a rename that fails
 * after an earlier one succeeded leaves that earlier file: rename is atomic per file only).
 * On failure the temporary files are removed, the one line printed and BENCH_EXIT_FAILED
 * returned; 0 otherwise. `what` names the flag in the message ("--save", "--json"). */
typedef int (*bench_file_writer)(FILE *f, const void *ctx, int i);
int bench_write_files(const char *what, const char *const *paths, int n, bench_file_writer write, const void *ctx);

#endif
