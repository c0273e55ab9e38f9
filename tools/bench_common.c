#define _POSIX_C_SOURCE 200809L /* clock_gettime, getpid */
#include "bench_common.h"

#include "cli.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bench_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    code = cli_vfail("vla-bench", NULL, code, fmt, ap);
    va_end(ap);
    return code;
}

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- random inputs ---- */

void bench_rng_seed(bench_rng *r, uint64_t seed) { rng_xoshiro_seed(r->s, seed); }

static uint64_t rng_next(bench_rng *r) { return rng_xoshiro_next(r->s); }
uint64_t bench_rng_u64(bench_rng *r) { return rng_next(r); }

/* Uniform in (0, 1): never 0, so the log below is finite. */
static double rng_uniform(bench_rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void bench_fill_normal(bench_rng *r, float *x, size_t n) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n;) {
        const double rad = sqrt(-2.0 * log(rng_uniform(r))), th = two_pi * rng_uniform(r);
        const float a = (float)(rad * cos(th)), b = (float)(rad * sin(th));
        if (a != 0.0f) x[i++] = a;
        if (i < n && b != 0.0f) x[i++] = b;
    }
}

void bench_fill_normal_blocks(uint64_t seed, size_t first, float *x, size_t n) {
    const size_t nb = (n + BENCH_FILL_BLOCK - 1) / BENCH_FILL_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nb; i++) {
        uint64_t key = seed ^ (0x9e3779b97f4a7c15ull * (first + i + 1));
        bench_rng r;
        bench_rng_seed(&r, rng_splitmix64(&key));
        const size_t off = i * BENCH_FILL_BLOCK, m = n - off < BENCH_FILL_BLOCK ? n - off : BENCH_FILL_BLOCK;
        bench_fill_normal(&r, x + off, m);
    }
}

/* ---- statistics and JSON ---- */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_sort_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

void bench_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void bench_json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

int bench_parse_int(const char *flag, const char *s, int min, int max, int *out) {
    char *end;
    errno = 0;
    const long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < min || x > max)
        return bench_fail(BENCH_EXIT_USAGE, "%s: '%s' is not an integer in %d..%d", flag, s, min, max), -1;
    *out = (int)x;
    return 0;
}

/* ---- result files: whole or not at all ---- */

#define BENCH_MAX_FILES 4

int bench_write_files(const char *what, const char *const *paths, int n, bench_file_writer write, const void *ctx) {
    char tmp[BENCH_MAX_FILES][4160];
    int made = 0, rc = 0;
    if (n > BENCH_MAX_FILES) return bench_fail(BENCH_EXIT_FAILED, "%s: too many files", what);
    for (int i = 0; i < n && !rc; i++) {
        if (strlen(paths[i]) + 32 > sizeof tmp[i]) {
            rc = bench_fail(BENCH_EXIT_FAILED, "%s: path too long: '%s'", what, paths[i]);
            break;
        }
        snprintf(tmp[i], sizeof tmp[i], "%s.tmp%ld", paths[i], (long)getpid());
        /* "x": never clobber a file that happens to have the temporary name. */
        FILE *f = fopen(tmp[i], "wx");
        if (!f) {
            rc = bench_fail(BENCH_EXIT_FAILED, "%s: cannot write '%s': %s", what, tmp[i], strerror(errno));
            break;
        }
        made = i + 1;
        const int werr = write(f, ctx, i);
        const int ferr = ferror(f);
        if (fclose(f) != 0 || ferr) {
            if (!werr) rc = bench_fail(BENCH_EXIT_FAILED, "%s: error writing '%s'", what, tmp[i]);
            else rc = BENCH_EXIT_FAILED;
        } else if (werr) {
            rc = BENCH_EXIT_FAILED;
        }
    }
    for (int i = 0; i < made && !rc; i++)
        if (rename(tmp[i], paths[i]) != 0)
            rc = bench_fail(BENCH_EXIT_FAILED, "%s: cannot rename '%s' to '%s': %s", what, tmp[i], paths[i],
                            strerror(errno));
    if (rc)
        for (int i = 0; i < made; i++) remove(tmp[i]); /* those already renamed are gone from tmp: harmless */
    return rc;
}
