/* vla-bench: how latency scales with sequence length, for every mechanism and algorithm a
 * backend has (the paper's Figure 3, its crossover claim and its fused-vs-sequential claim).
 *
 *   vla-bench [--backend NAME] [-T 128,256,...] [-B 1] [-H 4] [-d 32] [--output md|csv|json] ...
 *
 * Sweep order: for each shape (B, H, d), T ascending, and at each T every (mechanism,
 * algorithm) series, so a budget that runs out cuts the largest T of every series rather
 * than whole series. Each point: --warmup runs, then -r timed runs on inputs rotated over
 * three random N(0, 1) sets; median, min and max reported. Progress goes to stderr (one line
 * a point), results to stdout (md, csv or json).
 *
 * A point is skipped, with a note, when its buffers or the op run out of memory, or when its
 * estimated time (warm-up + timed runs) exceeds the budget left: the estimate scales the
 * series' previous point by (T / T_prev)^slope, slope the larger of the fitted slope and the
 * default (1 for linear-time series, 2 for softmax), or, for a series' first point, divides
 * its FLOP count by the best GFLOP/s measured so far in the run. After the first warm-up run
 * of a point the estimate is checked again against that run. Once a series is over the
 * budget its larger T are skipped too.
 *
 * CSV: columns backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,
 * tokens_per_s,gflops,gbps. When a run skipped a point, the header gains a trailing `note`
 * column and every row has it (empty for measured rows; the skipped row's numeric fields are
 * empty). Commas inside a field (the device description) are written as ';', so every row
 * splits on commas.
 *
 * Exit status: 0 when the sweep ran (skipped points included); 1 when the backend could not
 * be opened or nothing could run; 2 for a bad command line. Every failure prints exactly one
 * line on stderr. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "bench_count.h"

#include <vla/vla.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef VLA_BENCH_BUILD_TYPE
#define VLA_BENCH_BUILD_TYPE "unknown"
#endif

#if defined(__clang__)
#define BENCH_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER "unknown compiler"
#endif

#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* The paper's numbers (T4 GPU, Triton): printed beside ours. */
#define PAPER_VLA_CROSSOVER 43000.0
#define PAPER_FUSED_SPEEDUP 14.0
#define RATIO_T 4096
#define SLOPE_T_MIN 1024.0
#define SLOPE_MIN_POINTS 3

/* ---- failures: one line on stderr ---------------------------------------------------------- */

static int fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    code = cli_vfail("vla-bench", NULL, code, fmt, ap);
    va_end(ap);
    return code;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the timer: one forward call, start to finished ------------------------------------------
 * vla_backend_timer_*: CUDA events on CUDA, OpenCL profiling events on OpenCL, CLOCK_MONOTONIC
 * on the CPU (and where a driver cannot time). The clock actually used is recorded per run. */
typedef struct bench_timer bench_timer;
struct bench_timer {
    const char *name;
    int device_clock; /* -1 until the first sample; then 1 if every sample came from the device */
};

static void lib_timer_start(bench_timer *t, vla_backend *b) {
    (void)t;
    (void)vla_backend_timer_start(b);
}

static vla_status lib_timer_stop(bench_timer *t, vla_backend *b, double *ms) {
    int dev = 0;
    vla_status s = vla_backend_timer_stop(b, ms, &dev);
    if (s == VLA_OK) t->device_clock = (t->device_clock == -1 ? dev : (t->device_clock && dev));
    return s;
}

/* What clock measured the run, for the md header and the JSON. */
static const char *timer_desc(const bench_timer *t) {
    if (t->device_clock == 1) return "device clock via vla_backend_timer (CUDA events / OpenCL profiling events)";
    if (t->device_clock == 0) return "CLOCK_MONOTONIC around forward + synchronize via vla_backend_timer";
    return "vla_backend_timer (no sample timed)";
}

static bench_timer lib_timer(void) {
    bench_timer t = {.name = "vla_backend_timer (device clock: CUDA events / OpenCL profiling; CPU: CLOCK_MONOTONIC)",
                     .device_clock = -1};
    return t;
}

/* One timed forward call. */
static vla_status time_forward(bench_timer *t, vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                               double *ms) {
    vla_status s = vla_backend_synchronize(b); /* nothing earlier inside the interval */
    if (s != VLA_OK) return s;
    lib_timer_start(t, b);
    s = vla_attention_forward(b, d, a);
    double elapsed = 0;
    vla_status s2 = lib_timer_stop(t, b, &elapsed);
    *ms = elapsed;
    return s != VLA_OK ? s : s2;
}

/* ---- options ------------------------------------------------------------------------------- */

typedef enum out_fmt { OUT_MD, OUT_CSV, OUT_JSON } out_fmt;

typedef struct int_list {
    int *v;
    int n;
} int_list;

typedef struct opts {
    const char *backend;
    int_list T, B, H, d;
    int T_given;
    int mech_on[4];     /* --mechanism filter */
    int algo_on[6];     /* --algo filter (softmax's fused always runs when softmax does) */
    int reps, warmup, threads, crossover;
    double budget;
    uint64_t seed;
    const char *save; /* --save PREFIX: also write PREFIX.md, .csv and .json */
    out_fmt out;
} opts;

static void free_opts(opts *o) {
    free(o->T.v);
    free(o->B.v);
    free(o->H.v);
    free(o->d.v);
    memset(&o->T, 0, sizeof o->T);
    memset(&o->B, 0, sizeof o->B);
    memset(&o->H, 0, sizeof o->H);
    memset(&o->d, 0, sizeof o->d);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: vla-bench [options]\n"
            "Sweeps sequence length T for every mechanism and every algorithm the backend has and\n"
            "reports latency, throughput, GFLOP/s and GB/s; then a summary: each linear-time series'\n"
            "crossover with softmax, the slope of log latency vs log T, and VLA's fastest algorithm vs\n"
            "sequential at T = 4096. Lists are comma-separated. Progress on stderr, results on stdout.\n"
            "\n"
            "  --backend NAME      cpu, cuda[:N], opencl[:P:D] or auto (CUDA, else an OpenCL GPU,\n"
            "                      else the CPU)                                 default: auto\n"
            "  -T LIST             sequence lengths            default: 128,256,...,16384 (powers of 2)\n"
            "  -B LIST             batch sizes                                   default: 1\n"
            "  -H LIST             heads                                         default: 4\n"
            "  -d LIST             head dimension, dk = dv                       default: 32\n"
            "  --mechanism LIST    softmax,linear,delta,vla                      default: all\n"
            "  --algo LIST         sequential,scan,chunked,two-level,fused (each only where defined;\n"
            "                      softmax always runs its fused one)             default: all\n"
            "  -r N                timed repetitions per point                   default: 10\n"
            "  --warmup N          untimed runs before them                      default: 2\n"
            "  --output FMT        md, csv or json (json keeps every sample; csv gains a trailing\n"
            "                      note column only when a point was skipped) default: md\n"
            "  --budget SECONDS    wall-time budget; points it cannot afford are skipped with a\n"
            "                      note, and the sweep stops when it runs out    default: 120\n"
            "  --crossover         keep doubling T beyond the list until every linear-time series\n"
            "                      is below softmax or the budget runs out       default: off\n"
            "  --threads N         CPU threads (0 = OpenMP's default)            default: 0\n"
            "  --seed N            seed of the random inputs                     default: 42\n"
            "  --save PREFIX       also write the same run to PREFIX.md, PREFIX.csv and PREFIX.json\n"
            "                      (stdout keeps --output)                       default: none\n"
            "  -h, --help          this text\n");
}

/* Parses "a,b,c" of integers in [1, max]. Returns 0, or prints the one line and returns -1. */
static int parse_int_list(const char *flag, const char *s, int max, int_list *out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int *v = calloc((size_t)n, sizeof *v);
    if (!v) return fail(EXIT_USAGE, "out of memory"), -1;
    const char *p = s;
    for (int i = 0; i < n; i++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[32];
        int ok = len > 0 && len < sizeof item;
        long long x = 0;
        if (ok) {
            memcpy(item, p, len);
            item[len] = '\0';
            for (size_t j = 0; j < len; j++) ok &= item[j] >= '0' && item[j] <= '9';
            if (ok) {
                errno = 0;
                x = strtoll(item, NULL, 10);
                ok = errno == 0 && x >= 1 && x <= max;
            }
        }
        if (!ok) {
            free(v);
            fail(EXIT_USAGE, "%s: '%s' is not a comma-separated list of integers in 1..%d", flag, s, max);
            return -1;
        }
        v[i] = (int)x;
        p = end ? end + 1 : p + len;
    }
    free(out->v);
    out->v = v;
    out->n = n;
    return 0;
}

/* Sorts ascending and drops repeats (the sweep and the crossover want increasing T). */
static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
static void sort_unique(int_list *l) {
    qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_int);
    int k = 0;
    for (int i = 0; i < l->n; i++)
        if (k == 0 || l->v[i] != l->v[k - 1]) l->v[k++] = l->v[i];
    l->n = k;
}

/* Parses a comma list of names with `from_name` into on[]; -1 (after the line) on a bad name. */
static int parse_name_list(const char *flag, const char *s, int *on, int n_on, int is_algo) {
    for (int i = 0; i < n_on; i++) on[i] = 0;
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) {
            fail(EXIT_USAGE, "%s: '%s' is not a comma-separated list of names", flag, s);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        int idx = -1;
        if (is_algo) {
            vla_algorithm a;
            if (vla_algorithm_from_name(item, &a) == VLA_OK && (int)a > 0 && (int)a < n_on) idx = (int)a;
        } else {
            vla_mechanism m;
            if (vla_mechanism_from_name(item, &m) == VLA_OK && (int)m >= 0 && (int)m < n_on) idx = (int)m;
        }
        if (idx < 0) {
            fail(EXIT_USAGE, "%s: unknown %s '%s' (one of: %s)", flag, is_algo ? "algorithm" : "mechanism", item,
                 is_algo ? "sequential, scan, chunked, two-level, fused" : "softmax, linear, delta, vla");
            return -1;
        }
        on[idx] = 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

static int parse_count(const char *flag, const char *s, int min, int max, int *out) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < min || x > max)
        return fail(EXIT_USAGE, "%s: '%s' is not an integer in %d..%d", flag, s, min, max), -1;
    *out = (int)x;
    return 0;
}

/* Returns 0 to run, 1 after --help, or an exit status (> 1) after printing the one line. */
static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->reps = 10;
    o->warmup = 2;
    o->budget = 120;
    o->seed = 42;
    o->out = OUT_MD;
    for (int i = 0; i < 4; i++) o->mech_on[i] = 1;
    for (int i = 1; i < 6; i++) o->algo_on[i] = 1;

    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(f, "--crossover")) {
            o->crossover = 1;
            continue;
        }
        static const char *valued[] = {"--backend", "-T", "-B", "-H", "-d", "--mechanism", "--algo", "-r",
                                       "--warmup", "--output", "--budget", "--threads", "--seed", "--save"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(f, valued[k]);
        if (!known) return fail(EXIT_USAGE, "unknown flag '%s' (see --help)", f);
        if (i + 1 >= argc) return fail(EXIT_USAGE, "%s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--backend")) o->backend = v;
        else if (!strcmp(f, "--save")) o->save = v;
        else if (!strcmp(f, "-T")) {
            if (parse_int_list("-T", v, 1 << 28, &o->T)) return EXIT_USAGE;
            o->T_given = 1;
        } else if (!strcmp(f, "-B")) {
            if (parse_int_list("-B", v, 1 << 20, &o->B)) return EXIT_USAGE;
        } else if (!strcmp(f, "-H")) {
            if (parse_int_list("-H", v, 1 << 20, &o->H)) return EXIT_USAGE;
        } else if (!strcmp(f, "-d")) {
            if (parse_int_list("-d", v, 256, &o->d)) return EXIT_USAGE;
        } else if (!strcmp(f, "--mechanism")) {
            if (parse_name_list("--mechanism", v, o->mech_on, 4, 0)) return EXIT_USAGE;
        } else if (!strcmp(f, "--algo")) {
            if (parse_name_list("--algo", v, o->algo_on, 6, 1)) return EXIT_USAGE;
        } else if (!strcmp(f, "-r")) {
            if (parse_count("-r", v, 1, 1000000, &o->reps)) return EXIT_USAGE;
        } else if (!strcmp(f, "--warmup")) {
            if (parse_count("--warmup", v, 0, 1000000, &o->warmup)) return EXIT_USAGE;
        } else if (!strcmp(f, "--threads")) {
            if (parse_count("--threads", v, 0, 4096, &o->threads)) return EXIT_USAGE;
        } else if (!strcmp(f, "--output")) {
            if (!strcmp(v, "md")) o->out = OUT_MD;
            else if (!strcmp(v, "csv")) o->out = OUT_CSV;
            else if (!strcmp(v, "json")) o->out = OUT_JSON;
            else return fail(EXIT_USAGE, "--output: '%s' is not one of md, csv, json", v);
        } else if (!strcmp(f, "--budget")) {
            char *end;
            errno = 0;
            double b = strtod(v, &end);
            if (errno || end == v || *end || !(b > 0) || !isfinite(b))
                return fail(EXIT_USAGE, "--budget: '%s' is not a positive number of seconds", v);
            o->budget = b;
        } else if (!strcmp(f, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-')
                return fail(EXIT_USAGE, "--seed: '%s' is not a non-negative integer", v);
            o->seed = (uint64_t)s;
        }
    }
    if (!o->T.n) {
        /* 128 .. 16384 in powers of two; 4096 (the paper's ratio point) is one of them. */
        o->T.v = malloc(8 * sizeof(int));
        if (!o->T.v) return fail(EXIT_FAILED, "out of memory");
        for (int t = 128; t <= 16384; t *= 2) o->T.v[o->T.n++] = t;
    }
    sort_unique(&o->T);
    /* Defaults: the paper's heads (H = 4, d_h = 32), one sequence. */
    if ((!o->B.n && parse_int_list("-B", "1", 1, &o->B)) || (!o->H.n && parse_int_list("-H", "4", 4, &o->H)) ||
        (!o->d.n && parse_int_list("-d", "32", 32, &o->d)))
        return EXIT_FAILED;
    return 0;
}

/* ---- series and points --------------------------------------------------------------------- */

typedef struct series {
    vla_mechanism m;
    vla_algorithm a;
} series;

typedef struct shape {
    int B, H, d;
} shape;

typedef struct point {
    int shape, series;
    int B, H, T, dk, dv;
    int skipped;
    char note[256];
    double *samples;
    int nsamples;
    double median, min, max, tokens_per_s, gflops, gbps, flops, bytes;
} point;

typedef struct bench {
    opts o;
    vla_backend *b;
    bench_timer timer;
    int host_memory; /* the backend's buffers are host memory (the CPU) */
    double t_start;
    double best_gflops; /* best rate measured so far: estimates a series' first point */
    series ser[16];
    int nser;
    shape *shapes;
    int nshapes;
    point *pts;
    int npts, cap;
    char command[2048];
    char date[64];
    double other_share; /* share of the host's CPUs other processes used during the sweep */
} bench;

static double budget_left(const bench *x) { return x->o.budget - (now_s() - x->t_start); }

static point *new_point(bench *x, int shape_i, int series_i, int T) {
    if (x->npts == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        point *p = realloc(x->pts, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        x->pts = p;
        x->cap = cap;
    }
    point *p = &x->pts[x->npts++];
    memset(p, 0, sizeof *p);
    const shape *sh = &x->shapes[shape_i];
    p->shape = shape_i;
    p->series = series_i;
    p->B = sh->B;
    p->H = sh->H;
    p->T = T;
    p->dk = p->dv = sh->d;
    p->median = p->min = p->max = p->tokens_per_s = p->gflops = p->gbps = NAN;
    bench_shape bs = {.B = sh->B, .H = sh->H, .T = T, .dk = sh->d, .dv = sh->d, .chunk = 64};
    p->flops = bench_flops(x->ser[series_i].m, x->ser[series_i].a, &bs);
    p->bytes = bench_bytes(x->ser[series_i].m, x->ser[series_i].a, &bs);
    return p;
}

/* Makes `s` safe for one CSV field and one md cell: no commas, bars or line breaks. */
static void sanitize(char *s) {
    for (; *s; s++) {
        if (*s == ',') *s = ';';
        else if (*s == '|') *s = '/';
        else if (*s == '\n' || *s == '\r' || *s == '"') *s = ' ';
    }
}

static void skip_point(point *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void skip_point(point *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->note, sizeof p->note, fmt, ap);
    va_end(ap);
    sanitize(p->note);
    p->skipped = 1;
}

static void progress(const bench *x, const point *p) {
    const series *s = &x->ser[p->series];
    fprintf(stderr, "[%7.1f s] %s %s/%s B=%d H=%d T=%d d=%d: ", now_s() - x->t_start, vla_backend_name(x->b),
            vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk);
    if (p->skipped) fprintf(stderr, "%s\n", p->note);
    else fprintf(stderr, "median %.4g ms (min %.4g, max %.4g), %.3g GFLOP/s\n", p->median, p->min, p->max, p->gflops);
    fflush(stderr);
}

/* ---- inputs: three random N(0, 1) sets, rotated ---------------------------------------------- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t rng_next(rng *r) { /* xoshiro256** */
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return out;
}
/* Uniform in (0, 1): never 0, so the log below is finite. */
static double rng_uniform(rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* n N(0, 1) floats by Box-Muller; an exact zero (probability ~0) is drawn again. */
static void fill_normal(rng *r, float *x, size_t n) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n;) {
        const double rad = sqrt(-2.0 * log(rng_uniform(r))), th = two_pi * rng_uniform(r);
        const float a = (float)(rad * cos(th)), b = (float)(rad * sin(th));
        if (a != 0.0f) x[i++] = a;
        if (i < n && b != 0.0f) x[i++] = b;
    }
}

typedef struct inputs {
    vla_buffer *q[3], *k[3], *v[3];
    vla_buffer *o, *S, *A, *n;
} inputs;

static void free_inputs(inputs *in) {
    for (int i = 0; i < 3; i++) {
        vla_buffer_free(in->q[i]);
        vla_buffer_free(in->k[i]);
        vla_buffer_free(in->v[i]);
    }
    vla_buffer_free(in->o);
    vla_buffer_free(in->S);
    vla_buffer_free(in->A);
    vla_buffer_free(in->n);
    memset(in, 0, sizeof *in);
}

/* Host memory available now (MemAvailable), or 0 when unknown. */
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (double)kb * 1024.0;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
}

static double input_bytes(int B, int H, int T, int d) {
    const double bth = (double)B * T * H;
    /* 3 sets of q, k, v; one o; the final states S, A (d x d) and n. */
    return 4.0 * (3 * 3 * bth * d + bth * d + 2.0 * B * H * d * d + (double)B * H * d);
}

/* Fills `buf` (n floats) with normals: in place for host memory, else through a staging block. */
static vla_status fill_buffer(vla_buffer *buf, rng *r, size_t n) {
    float *host = vla_buffer_host_ptr(buf);
    if (host) {
        fill_normal(r, host, n);
        return VLA_OK;
    }
    const size_t block = (size_t)1 << 20;
    float *tmp = malloc(block * sizeof *tmp);
    if (!tmp) return VLA_ERR_OUT_OF_MEMORY;
    vla_status s = VLA_OK;
    for (size_t off = 0; off < n && s == VLA_OK; off += block) {
        const size_t m = n - off < block ? n - off : block;
        fill_normal(r, tmp, m);
        s = vla_buffer_upload(buf, off * sizeof(float), tmp, m * sizeof(float));
    }
    free(tmp);
    return s;
}

/* Allocates and fills the inputs of one (B, H, T, d). Returns VLA_OK or the failing status,
 * with a note (why) in `why`. */
static vla_status make_inputs(bench *x, const shape *sh, int T, inputs *in, char *why, size_t why_n) {
    memset(in, 0, sizeof *in);
    const double need = input_bytes(sh->B, sh->H, T, sh->d);
    if (x->host_memory) {
        /* The host overcommits: a buffer larger than what is free "succeeds" and the process
         * dies when it touches it. Count it as out of memory before that. */
        const double avail = host_available_bytes();
        if (avail > 0 && need > 0.8 * avail) {
            snprintf(why, why_n, "out of memory: inputs need %.2f GiB; the host has %.2f GiB available",
                     need / 1073741824.0, avail / 1073741824.0);
            return VLA_ERR_OUT_OF_MEMORY;
        }
    }
    const size_t bth = (size_t)sh->B * (size_t)T * (size_t)sh->H, d = (size_t)sh->d;
    const size_t qk = bth * d * sizeof(float);
    vla_status s = VLA_OK;
    for (int i = 0; i < 3 && s == VLA_OK; i++) {
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->q[i]);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->k[i]);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->v[i]);
    }
    if (!s) s = vla_buffer_alloc(x->b, qk, &in->o);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * d * sizeof(float), &in->S);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * d * sizeof(float), &in->A);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * sizeof(float), &in->n);
    if (s) {
        snprintf(why, why_n, "%s allocating %.2f GiB of inputs: %s", s == VLA_ERR_OUT_OF_MEMORY ? "out of memory" : "error",
                 need / 1073741824.0, vla_last_message());
        free_inputs(in);
        return s;
    }
    rng r;
    rng_seed(&r, x->o.seed ^ ((uint64_t)T << 32) ^ ((uint64_t)sh->B << 48) ^ ((uint64_t)sh->H << 40) ^ (uint64_t)sh->d);
    for (int i = 0; i < 3 && s == VLA_OK; i++) {
        if (!s) s = fill_buffer(in->q[i], &r, bth * d);
        if (!s) s = fill_buffer(in->k[i], &r, bth * d);
        if (!s) s = fill_buffer(in->v[i], &r, bth * d);
    }
    if (s) {
        snprintf(why, why_n, "error uploading inputs: %s", vla_last_message());
        free_inputs(in);
    }
    return s;
}

/* ---- one point ------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs warm-up and timed runs of point p on `in`. */
static void run_point(bench *x, point *p, inputs *in) {
    const series *se = &x->ser[p->series];
    vla_attn_desc d;
    vla_attn_desc_init(&d, se->m);
    d.algorithm = se->a;
    vla_attn_args a = {.B = p->B, .T = p->T, .H = p->H, .dk = p->dk, .dv = p->dv, .o = in->o};
    /* The final states are part of what a forward call delivers (and of the byte count). */
    if (se->m != VLA_MECH_SOFTMAX) a.S_out = in->S;
    if (se->m == VLA_MECH_VLA) a.A_out = in->A;
    if (se->m == VLA_MECH_LINEAR) a.n_out = in->n;

    if (x->host_memory && se->m == VLA_MECH_VLA && se->a == VLA_ALGO_SCAN) {
        /* The scan keeps T maps of dk^2 + dk dv floats per head in flight (one head per
         * thread): check it against the host, which would overcommit and kill us. */
        long cpus = x->o.threads > 0 ? x->o.threads : sysconf(_SC_NPROCESSORS_ONLN);
        const double heads = (double)p->B * p->H, conc = cpus > 0 && cpus < heads ? (double)cpus : heads;
        const double need = conc * p->T * ((double)p->dk * p->dk + (double)p->dk * p->dv) * 4.0;
        const double avail = host_available_bytes();
        if (avail > 0 && need > 0.8 * avail) {
            skip_point(p, "skipped: out of memory: the scan's maps need %.2f GiB; the host has %.2f GiB available",
                       need / 1073741824.0, avail / 1073741824.0);
            return;
        }
    }
    const int total = x->o.warmup + x->o.reps;
    double *samples = malloc((size_t)x->o.reps * sizeof *samples);
    if (!samples) {
        skip_point(p, "skipped: out of host memory for the samples");
        return;
    }
    int ns = 0;
    for (int run = 0; run < total; run++) {
        a.q = in->q[run % 3];
        a.k = in->k[run % 3];
        a.v = in->v[run % 3];
        double ms = 0;
        vla_status s = time_forward(&x->timer, x->b, &d, &a, &ms);
        if (s != VLA_OK) {
            const char *msg = vla_backend_message(x->b);
            if (s == VLA_ERR_OUT_OF_MEMORY) skip_point(p, "skipped: out of memory: %s", msg);
            else if (s == VLA_ERR_UNSUPPORTED) skip_point(p, "skipped: not supported by this backend: %s", msg);
            else skip_point(p, "skipped: error (%s): %s", vla_status_string(s), msg);
            free(samples);
            return;
        }
        if (run == 0) {
            /* The first run is the best estimate there is: re-check the budget. */
            const double left = budget_left(x), need = (total - 1) * ms / 1e3;
            if (need > left) {
                skip_point(p, "skipped: budget: one run took %.3g s; %d more need %.3g s > %.3g s left", ms / 1e3,
                           total - 1, need, left > 0 ? left : 0.0);
                free(samples);
                return;
            }
        }
        if (run >= x->o.warmup) samples[ns++] = ms;
    }
    p->samples = samples;
    p->nsamples = ns;
    double *sorted = malloc((size_t)ns * sizeof *sorted);
    if (sorted) {
        memcpy(sorted, samples, (size_t)ns * sizeof *sorted);
        qsort(sorted, (size_t)ns, sizeof *sorted, cmp_double);
        p->min = sorted[0];
        p->max = sorted[ns - 1];
        p->median = ns % 2 ? sorted[ns / 2] : 0.5 * (sorted[ns / 2 - 1] + sorted[ns / 2]);
        free(sorted);
    } else {
        p->min = p->max = p->median = samples[0];
    }
    const double sec = p->median / 1e3;
    p->tokens_per_s = (double)p->B * p->T / sec;
    p->gflops = p->flops / sec / 1e9;
    p->gbps = p->bytes / sec / 1e9;
    if (p->gflops > x->best_gflops) x->best_gflops = p->gflops;
}

/* ---- the sweep ----------------------------------------------------------------------------- */

typedef struct series_state {
    int dead;        /* over the budget at some T: larger T are skipped too */
    char why[160];
} series_state;

/* The measured points of series `si` in shape `sh`, in increasing T. */
static int series_points(const bench *x, int sh, int si, double *T, double *ms, int max) {
    int n = 0;
    for (int i = 0; i < x->npts && n < max; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && !p->skipped && p->nsamples > 0) { /* measured, not pending */
            T[n] = p->T;
            ms[n] = p->median;
            n++;
        }
    }
    return n;
}

/* Seconds the point (warm-up + timed runs) is expected to take; NAN when there is nothing to go on. */
static double estimate_point_s(const bench *x, int sh, int si, int T) {
    double Ts[256], ms[256];
    const int n = series_points(x, sh, si, Ts, ms, 256);
    const series *se = &x->ser[si];
    double per_run_ms = NAN;
    if (n > 0) {
        double slope = n >= 2 ? bench_slope(Ts, ms, n, SLOPE_T_MIN, SLOPE_MIN_POINTS, NULL) : NAN;
        const double floor_slope = se->m == VLA_MECH_SOFTMAX ? 2.0 : 1.0;
        if (!(slope >= floor_slope)) slope = floor_slope; /* never cheaper than its asymptotic scaling */
        if (slope > 3.0) slope = 3.0;
        per_run_ms = bench_estimate_ms(se->m, Ts[n - 1], ms[n - 1], T, slope);
    } else if (x->best_gflops > 0) {
        const shape *s = &x->shapes[sh];
        bench_shape bs = {.B = s->B, .H = s->H, .T = T, .dk = s->d, .dv = s->d, .chunk = 64};
        per_run_ms = bench_flops(se->m, se->a, &bs) / (x->best_gflops * 1e9) * 1e3;
    }
    return per_run_ms * (x->o.warmup + x->o.reps) / 1e3;
}

/* Runs every live series of `todo` (flags per series) at T for shape sh. */
static void run_T(bench *x, int sh, int T, const int *todo, series_state *st) {
    int run_idx[16], nrun = 0;
    for (int si = 0; si < x->nser; si++) {
        if (!todo[si]) continue;
        point *p = new_point(x, sh, si, T);
        if (!p) {
            fail(EXIT_FAILED, "out of host memory for the results");
            exit(EXIT_FAILED);
        }
        const double left = budget_left(x);
        if (st[si].dead) {
            skip_point(p, "skipped: budget: %s", st[si].why);
        } else if (left <= 0) {
            skip_point(p, "skipped: budget: the %.0f s budget is spent", x->o.budget);
            st[si].dead = 1;
            snprintf(st[si].why, sizeof st[si].why, "the %.0f s budget is spent", x->o.budget);
        } else {
            const double est = estimate_point_s(x, sh, si, T);
            if (est > left) {
                skip_point(p, "skipped: budget: estimated %.3g s for %d runs > %.3g s left", est,
                           x->o.warmup + x->o.reps, left);
                st[si].dead = 1;
                snprintf(st[si].why, sizeof st[si].why, "T = %d was already estimated over the budget", T);
            } else {
                run_idx[nrun++] = x->npts - 1;
                continue;
            }
        }
        progress(x, p);
    }
    if (!nrun) return;
    inputs in;
    char why[256] = "";
    vla_status s = make_inputs(x, &x->shapes[sh], T, &in, why, sizeof why);
    for (int i = 0; i < nrun; i++) {
        point *p = &x->pts[run_idx[i]];
        if (s != VLA_OK) skip_point(p, "skipped: %s", why);
        else if (budget_left(x) <= 0) skip_point(p, "skipped: budget: the %.0f s budget is spent", x->o.budget);
        else run_point(x, p, &in);
        if (p->skipped && strstr(p->note, "budget")) {
            st[p->series].dead = 1;
            snprintf(st[p->series].why, sizeof st[p->series].why, "T = %d was already over the budget", T);
        }
        progress(x, p);
    }
    if (s == VLA_OK) free_inputs(&in);
}

/* The median of series si at T in shape sh, or NAN. */
static double median_at(const bench *x, int sh, int si, int T) {
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && p->T == T && !p->skipped && p->nsamples > 0) return p->median;
    }
    return NAN;
}

static int softmax_series(const bench *x) {
    for (int i = 0; i < x->nser; i++)
        if (x->ser[i].m == VLA_MECH_SOFTMAX) return i;
    return -1;
}

static void sweep(bench *x) {
    const int smx = softmax_series(x);
    for (int sh = 0; sh < x->nshapes; sh++) {
        series_state st[16];
        memset(st, 0, sizeof st);
        int todo[16];
        for (int i = 0; i < x->nser; i++) todo[i] = 1;
        int T_last = 0;
        for (int ti = 0; ti < x->o.T.n; ti++) {
            T_last = x->o.T.v[ti];
            run_T(x, sh, T_last, todo, st);
        }
        if (!x->o.crossover || smx < 0) continue;
        /* --crossover: keep doubling T while a series is not yet below softmax at the largest
         * T where both were measured (or has no such T). Softmax runs first at each new T;
         * when it cannot be measured (budget, memory) the search ends. */
        while (T_last <= (1 << 27) && budget_left(x) > 0 && !st[smx].dead) {
            const int T = 2 * T_last;
            int any = 0;
            for (int si = 0; si < x->nser; si++) {
                todo[si] = 0;
                if (si == smx || st[si].dead) continue;
                /* The largest T where both were measured. */
                int crossed = 0, best_T = 0;
                for (int i = 0; i < x->npts; i++) {
                    const point *p = &x->pts[i];
                    if (p->shape != sh || p->series != si || p->T <= best_T) continue;
                    const double lin = median_at(x, sh, si, p->T), soft = median_at(x, sh, smx, p->T);
                    if (!isnan(lin) && !isnan(soft)) {
                        best_T = p->T;
                        crossed = lin < soft;
                    }
                }
                if (!crossed) todo[si] = any = 1;
            }
            if (!any) break;
            T_last = T;
            fprintf(stderr, "[%7.1f s] --crossover: T = %d\n", now_s() - x->t_start, T);
            int only_soft[16] = {0};
            only_soft[smx] = 1;
            run_T(x, sh, T, only_soft, st);
            if (isnan(median_at(x, sh, smx, T))) break;
            run_T(x, sh, T, todo, st);
        }
    }
}

/* ---- summary --------------------------------------------------------------------------------- */

typedef struct series_summary {
    int series;
    double slope;
    int slope_n;
    double slope_from; /* the smallest T fitted */
    bench_cross cross;
    double t_cross;
    int has_cross;     /* 1: a linear-time series compared with softmax; -1: no softmax in the run */
    double T_min, T_max; /* the common T range compared */
} series_summary;

typedef struct shape_summary {
    series_summary s[16];
    int n;
    /* VLA at T = 4096: fastest algorithm vs sequential */
    int ratio_state;   /* 0 ok; 1 T = 4096 not in run; 2 sequential not measured; 3 no VLA */
    int fastest;       /* series index */
    double ratio;
    double algo_ratio[16]; /* sequential / algo for each VLA series (NAN if not measured) */
} shape_summary;

static void summarize(const bench *x, int sh, shape_summary *out) {
    memset(out, 0, sizeof *out);
    const int smx = softmax_series(x);
    for (int si = 0; si < x->nser; si++) {
        series_summary *s = &out->s[out->n++];
        s->series = si;
        double T[256], ms[256];
        int n = series_points(x, sh, si, T, ms, 256);
        s->slope = bench_slope(T, ms, n, SLOPE_T_MIN, SLOPE_MIN_POINTS, &s->slope_n);
        int big = 0;
        for (int i = 0; i < n; i++) big += T[i] >= SLOPE_T_MIN;
        s->slope_from = n ? (big >= SLOPE_MIN_POINTS ? SLOPE_T_MIN : T[0]) : NAN;
        if (si == smx) continue;
        if (smx < 0) {
            s->has_cross = -1;
            continue;
        }
        /* Common T of this series and softmax. */
        double cT[256], cl[256], cs[256];
        int m = 0;
        for (int i = 0; i < n; i++) {
            const double soft = median_at(x, sh, smx, (int)T[i]);
            if (!isnan(soft)) {
                cT[m] = T[i];
                cl[m] = ms[i];
                cs[m] = soft;
                m++;
            }
        }
        s->has_cross = 1;
        s->cross = bench_crossover(cT, cl, cs, m, &s->t_cross);
        s->T_min = m ? cT[0] : NAN;
        s->T_max = m ? cT[m - 1] : NAN;
    }
    /* Fused-vs-sequential, VLA, T = 4096. */
    int in_run = 0;
    for (int i = 0; i < x->npts; i++) in_run |= x->pts[i].shape == sh && x->pts[i].T == RATIO_T;
    int seq = -1, nvla = 0;
    for (int si = 0; si < x->nser; si++) {
        out->algo_ratio[si] = NAN;
        if (x->ser[si].m != VLA_MECH_VLA) continue;
        nvla++;
        if (x->ser[si].a == VLA_ALGO_SEQUENTIAL) seq = si;
    }
    out->fastest = -1;
    if (!nvla) out->ratio_state = 3;
    else if (!in_run) out->ratio_state = 1;
    else if (seq < 0 || isnan(median_at(x, sh, seq, RATIO_T))) out->ratio_state = 2;
    else {
        const double tseq = median_at(x, sh, seq, RATIO_T);
        double best = INFINITY;
        for (int si = 0; si < x->nser; si++) {
            if (x->ser[si].m != VLA_MECH_VLA) continue;
            const double t = median_at(x, sh, si, RATIO_T);
            if (isnan(t)) continue;
            out->algo_ratio[si] = tseq / t;
            if (t < best) {
                best = t;
                out->fastest = si;
            }
        }
        out->ratio = tseq / best;
    }
}

/* The crossover in words. */
static void cross_text(const series_summary *s, char *buf, size_t n) {
    if (s->has_cross == 0) snprintf(buf, n, "-");
    else if (s->has_cross < 0) snprintf(buf, n, "no softmax in this run");
    else if (isnan(s->T_min)) snprintf(buf, n, "no T measured for both");
    else if (s->cross == BENCH_CROSS_FOUND) snprintf(buf, n, "%.0f", s->t_cross);
    else if (s->cross == BENCH_CROSS_BELOW_MIN) snprintf(buf, n, "< %.0f", s->T_min);
    else snprintf(buf, n, "not within the sweep (T <= %.0f)", s->T_max);
}

static void slope_text(const series_summary *s, char *buf, size_t n) {
    if (isnan(s->slope)) snprintf(buf, n, "- (fewer than 2 points)");
    else snprintf(buf, n, "%.2f (%d points, T >= %.0f)", s->slope, s->slope_n, s->slope_from);
}

static void ratio_text(const bench *x, const shape_summary *ss, char *buf, size_t n) {
    switch (ss->ratio_state) {
    case 1: snprintf(buf, n, "T = %d not in this run", RATIO_T); break;
    case 2: snprintf(buf, n, "VLA sequential not measured at T = %d", RATIO_T); break;
    case 3: snprintf(buf, n, "VLA not in this run"); break;
    default: {
        size_t k = (size_t)snprintf(buf, n, "fastest VLA algorithm at T = %d: %s, %.2fx sequential's speed (",
                                    RATIO_T, vla_algorithm_name(x->ser[ss->fastest].a), ss->ratio);
        int first = 1;
        for (int si = 0; si < x->nser && k < n; si++) {
            if (isnan(ss->algo_ratio[si]) || x->ser[si].a == VLA_ALGO_SEQUENTIAL) continue;
            k += (size_t)snprintf(buf + k, n - k, "%s%s %.2fx", first ? "" : ", ", vla_algorithm_name(x->ser[si].a),
                                  ss->algo_ratio[si]);
            first = 0;
        }
        if (k < n) snprintf(buf + k, n - k, "%s)", first ? "no other algorithm measured" : "");
    }
    }
}

/* ---- output ---------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

/* CPU seconds the whole host has spent busy (/proc/stat: user, nice, system, irq, softirq,
 * steal), or -1 when unknown. */
static double host_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                         &v[6], &v[7]);
    fclose(f);
    const long hz = sysconf(_SC_CLK_TCK);
    if (n < 8 || hz <= 0) return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

/* CPU seconds this process has used. */
static double self_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* The share of the host's CPUs that other processes used during the run, 0..1, or NAN when
 * unknown: on a shared machine this says how far to trust the numbers. */
static double g_busy0 = -1, g_self0 = -1, g_wall0 = 0;
static void host_share_start(void) {
    g_busy0 = host_busy_s();
    g_self0 = self_cpu_s();
    g_wall0 = now_s();
}
static double host_other_share(void) {
    const double busy = host_busy_s(), self = self_cpu_s(), wall = now_s() - g_wall0;
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (g_busy0 < 0 || busy < 0 || g_self0 < 0 || self < 0 || ncpu <= 0 || wall <= 0) return NAN;
    const double other = (busy - g_busy0) - (self - g_self0);
    return other > 0 ? other / (wall * (double)ncpu) : 0.0;
}

/* The host's load average when the run ends: a busy machine explains noisy numbers. */
static const char *load_info(void) {
    static char buf[128];
    buf[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    double l1, l5, l15;
    if (f && fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3) snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l1, l5, l15);
    if (f) fclose(f);
    if (!buf[0]) snprintf(buf, sizeof buf, "unknown");
    return buf;
}

static const char *build_info(void) {
    static char buf[512];
    snprintf(buf, sizeof buf, "libvla %s (header %s), %s, %s build", vla_version(), VLA_VERSION_STRING, BENCH_COMPILER,
             VLA_BENCH_BUILD_TYPE);
    return buf;
}

static void print_md(const bench *x, FILE *f) {
    fprintf(f, "<!-- vla-bench date: %s -->\n", x->date);
    fprintf(f, "<!-- backend: %s; device: %s -->\n", vla_backend_name(x->b), vla_backend_device(x->b));
    fprintf(f, "<!-- build: %s -->\n", build_info());
    fprintf(f, "<!-- command: %s -->\n", x->command);
    fprintf(f, "<!-- wall time %.1f s; other processes used %.0f%% of the host's CPUs meanwhile (/proc/stat); "
               "load average at the end (1, 5, 15 min): %s -->\n",
            now_s() - x->t_start, 100 * x->other_share, load_info());
    fprintf(f, "<!-- %d timed runs after %d warm-up runs per point, inputs N(0,1) rotated over 3 sets, seed %llu; "
               "budget %.0f s; timer: %s -->\n\n",
            x->o.reps, x->o.warmup, (unsigned long long)x->o.seed, x->o.budget, timer_desc(&x->timer));
    fprintf(f, "| backend | mechanism | algo | B | H | T | dk | dv | median ms | min ms | max ms | tokens/s | GFLOP/s | GB/s |\n");
    fprintf(f, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    int nskip = 0;
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->skipped) {
            nskip++;
            continue;
        }
        const series *s = &x->ser[p->series];
        fprintf(f, "| %s | %s | %s | %d | %d | %d | %d | %d | %.4g | %.4g | %.4g | %.0f | %.2f | %.2f |\n",
                vla_backend_name(x->b), vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk,
                p->dv, p->median, p->min, p->max, p->tokens_per_s, p->gflops, p->gbps);
    }
    if (nskip) {
        fprintf(f, "\nSkipped points:\n\n");
        for (int i = 0; i < x->npts; i++) {
            const point *p = &x->pts[i];
            if (!p->skipped) continue;
            const series *s = &x->ser[p->series];
            fprintf(f, "- %s/%s B=%d H=%d T=%d d=%d: %s\n", vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B,
                    p->H, p->T, p->dk, p->note);
        }
    }
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss;
        summarize(x, sh, &ss);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "\n### Summary: %s (%s), B=%d H=%d dk=dv=%d\n\n", vla_backend_name(x->b), vla_backend_device(x->b),
                shp->B, shp->H, shp->d);
        fprintf(f, "| mechanism | algo | crossover T (latency below softmax) | slope of log latency vs log T |\n");
        fprintf(f, "|---|---|---|---|\n");
        for (int i = 0; i < ss.n; i++) {
            const series_summary *s = &ss.s[i];
            const series *se = &x->ser[s->series];
            char c[96], sl[96];
            cross_text(s, c, sizeof c);
            slope_text(s, sl, sizeof sl);
            fprintf(f, "| %s | %s | %s%s | %s |\n", vla_mechanism_name(se->m), vla_algorithm_name(se->a), c,
                    se->m == VLA_MECH_VLA ? " (paper: ~43000, Triton on a T4)" : "", sl);
        }
        char r[512];
        ratio_text(x, &ss, r, sizeof r);
        fprintf(f, "\nVLA fused-vs-sequential: %s. Paper: 14x (its Triton kernel vs its sequential Python, T4, T = 4096).\n", r);
    }
}

static void csv_field_device(char *out, size_t n, const char *dev) {
    snprintf(out, n, "%s", dev);
    sanitize(out);
}

static void print_csv(const bench *x, FILE *f) {
    int any_skip = 0;
    for (int i = 0; i < x->npts; i++) any_skip |= x->pts[i].skipped;
    char dev[256];
    csv_field_device(dev, sizeof dev, vla_backend_device(x->b));
    fprintf(f, "backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps%s\n",
            any_skip ? ",note" : "");
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        const series *s = &x->ser[p->series];
        fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,", vla_backend_name(x->b), dev, vla_mechanism_name(s->m),
                vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk, p->dv);
        if (p->skipped) fprintf(f, ",,,,,");
        else
            fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g", p->median, p->min, p->max, p->tokens_per_s, p->gflops, p->gbps);
        if (any_skip) fprintf(f, ",%s", p->skipped ? p->note : "");
        fputc('\n', f);
    }
}

/* The summary as text lines (stderr in CSV mode). */
static void print_summary_text(const bench *x, FILE *f) {
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss;
        summarize(x, sh, &ss);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "summary: %s (%s), B=%d H=%d dk=dv=%d\n", vla_backend_name(x->b), vla_backend_device(x->b), shp->B,
                shp->H, shp->d);
        for (int i = 0; i < ss.n; i++) {
            const series_summary *s = &ss.s[i];
            const series *se = &x->ser[s->series];
            char c[96], sl[96];
            cross_text(s, c, sizeof c);
            slope_text(s, sl, sizeof sl);
            fprintf(f, "  %s/%s: crossover %s%s; slope %s\n", vla_mechanism_name(se->m), vla_algorithm_name(se->a), c,
                    se->m == VLA_MECH_VLA ? " (paper: ~43000, T4)" : "", sl);
        }
        char r[512];
        ratio_text(x, &ss, r, sizeof r);
        fprintf(f, "  VLA fused-vs-sequential: %s (paper: 14x at T = 4096)\n", r);
    }
}

static void print_json(const bench *x, FILE *f) {
    fprintf(f, "{\n  \"tool\": \"vla-bench\",\n  \"date\": ");
    json_string(f, x->date);
    fprintf(f, ",\n  \"backend\": ");
    json_string(f, vla_backend_name(x->b));
    fprintf(f, ",\n  \"device\": ");
    json_string(f, vla_backend_device(x->b));
    fprintf(f, ",\n  \"build\": {\"libvla\": ");
    json_string(f, vla_version());
    fprintf(f, ", \"header\": ");
    json_string(f, VLA_VERSION_STRING);
    fprintf(f, ", \"compiler\": ");
    json_string(f, BENCH_COMPILER);
    fprintf(f, ", \"build_type\": ");
    json_string(f, VLA_BENCH_BUILD_TYPE);
    fprintf(f, "},\n  \"command\": ");
    json_string(f, x->command);
    fprintf(f, ",\n  \"host_other_cpu_share\": ");
    json_number(f, x->other_share);
    fprintf(f, ",\n  \"load_average\": ");
    json_string(f, load_info());
    fprintf(f, ",\n  \"wall_s\": ");
    json_number(f, now_s() - x->t_start);
    fprintf(f, ",\n  \"settings\": {\"reps\": %d, \"warmup\": %d, \"budget_s\": ", x->o.reps, x->o.warmup);
    json_number(f, x->o.budget);
    fprintf(f, ", \"threads\": %d, \"seed\": %llu, \"crossover\": %s, \"input_sets\": 3, \"timer\": ", x->o.threads,
            (unsigned long long)x->o.seed, x->o.crossover ? "true" : "false");
    json_string(f, timer_desc(&x->timer));
    fprintf(f, "},\n  \"results\": [");
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        const series *s = &x->ser[p->series];
        fprintf(f, "%s\n    {\"mechanism\": \"%s\", \"algo\": \"%s\", \"B\": %d, \"H\": %d, \"T\": %d, \"dk\": %d, \"dv\": %d, ",
                i ? "," : "", vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk, p->dv);
        fprintf(f, "\"skipped\": %s, ", p->skipped ? "true" : "false");
        if (p->skipped) {
            fprintf(f, "\"note\": ");
            json_string(f, p->note);
            fprintf(f, ", ");
        }
        fprintf(f, "\"flops\": ");
        json_number(f, p->flops);
        fprintf(f, ", \"bytes\": ");
        json_number(f, p->bytes);
        const double *vals[] = {&p->median, &p->min, &p->max, &p->tokens_per_s, &p->gflops, &p->gbps};
        const char *names[] = {"median_ms", "min_ms", "max_ms", "tokens_per_s", "gflops", "gbps"};
        for (int k = 0; k < 6; k++) {
            fprintf(f, ", \"%s\": ", names[k]);
            json_number(f, *vals[k]);
        }
        fprintf(f, ", \"samples_ms\": [");
        for (int k = 0; k < p->nsamples; k++) {
            if (k) fputs(", ", f);
            json_number(f, p->samples[k]);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  ],\n  \"summary\": {\n    \"backend\": ");
    json_string(f, vla_backend_name(x->b));
    fprintf(f, ",\n    \"device\": ");
    json_string(f, vla_backend_device(x->b));
    fprintf(f, ",\n    \"paper\": {\"vla_crossover_T\": %.0f, \"fused_vs_sequential\": %.0f, \"at_T\": %d, "
               "\"hardware\": \"NVIDIA T4, Triton kernel vs sequential Python\"},\n    \"shapes\": [",
            PAPER_VLA_CROSSOVER, PAPER_FUSED_SPEEDUP, RATIO_T);
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss;
        summarize(x, sh, &ss);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "%s\n      {\"B\": %d, \"H\": %d, \"dk\": %d, \"dv\": %d, \"series\": [", sh ? "," : "", shp->B,
                shp->H, shp->d, shp->d);
        for (int i = 0; i < ss.n; i++) {
            const series_summary *s = &ss.s[i];
            const series *se = &x->ser[s->series];
            char c[96];
            cross_text(s, c, sizeof c);
            fprintf(f, "%s\n        {\"mechanism\": \"%s\", \"algo\": \"%s\", \"slope\": ", i ? "," : "",
                    vla_mechanism_name(se->m), vla_algorithm_name(se->a));
            json_number(f, s->slope);
            fprintf(f, ", \"slope_points\": %d, \"slope_T_from\": ", s->slope_n);
            json_number(f, s->slope_from);
            if (s->has_cross > 0) {
                static const char *st[] = {"found", "below_min", "not_found"};
                fprintf(f, ", \"crossover\": {\"status\": \"%s\", \"T\": ", st[s->cross]);
                json_number(f, s->cross == BENCH_CROSS_FOUND ? s->t_cross : NAN);
                fprintf(f, ", \"text\": ");
                json_string(f, c);
                fprintf(f, "}");
            }
            fprintf(f, "}");
        }
        char r[512];
        ratio_text(x, &ss, r, sizeof r);
        fprintf(f, "\n      ], \"fused_vs_sequential\": {\"T\": %d, \"fastest_algo\": ", RATIO_T);
        if (ss.fastest >= 0) json_string(f, vla_algorithm_name(x->ser[ss.fastest].a));
        else fputs("null", f);
        fprintf(f, ", \"ratio\": ");
        json_number(f, ss.ratio_state == 0 ? ss.ratio : NAN);
        fprintf(f, ", \"text\": ");
        json_string(f, r);
        fprintf(f, "}}");
    }
    fprintf(f, "\n    ]\n  }\n}\n");
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    bench x;
    memset(&x, 0, sizeof x);
    x.t_start = now_s();
    int rc = parse_args(argc, argv, &x.o);
    if (rc) {
        free_opts(&x.o);
        return rc == 1 ? 0 : rc;
    }

    /* Series: every mechanism, every algorithm VLA-MATH defines for it, in enum order. */
    for (int m = 0; m < 4; m++) {
        if (!x.o.mech_on[m]) continue;
        for (int a = VLA_ALGO_SEQUENTIAL; a <= VLA_ALGO_FUSED; a++) {
            if (!vla_algorithm_defined((vla_mechanism)m, (vla_algorithm)a)) continue;
            if (m != VLA_MECH_SOFTMAX && !x.o.algo_on[a]) continue;
            x.ser[x.nser++] = (series){(vla_mechanism)m, (vla_algorithm)a};
        }
    }
    if (!x.nser) {
        free_opts(&x.o);
        return fail(EXIT_USAGE, "no (mechanism, algorithm) pair left by --mechanism and --algo");
    }

    x.nshapes = x.o.B.n * x.o.H.n * x.o.d.n;
    x.shapes = calloc((size_t)x.nshapes, sizeof *x.shapes);
    if (!x.shapes) {
        free_opts(&x.o);
        return fail(EXIT_FAILED, "out of host memory");
    }
    int k = 0;
    for (int i = 0; i < x.o.B.n; i++)
        for (int j = 0; j < x.o.H.n; j++)
            for (int l = 0; l < x.o.d.n; l++) x.shapes[k++] = (shape){x.o.B.v[i], x.o.H.v[j], x.o.d.v[l]};

    vla_status s = vla_backend_open(strcmp(x.o.backend, "auto") ? x.o.backend : NULL, &x.b);
    if (s != VLA_OK) {
        free(x.shapes);
        free_opts(&x.o);
        return fail(EXIT_FAILED, "--backend %s: %s", x.o.backend, vla_last_message());
    }
    if (x.o.threads) vla_backend_set_threads(x.b, x.o.threads);
    x.timer = lib_timer();
    {
        vla_buffer *probe = NULL;
        if (vla_buffer_alloc(x.b, 64, &probe) == VLA_OK) x.host_memory = vla_buffer_host_ptr(probe) != NULL;
        vla_buffer_free(probe);
    }
    size_t len = 0;
    for (int i = 0; i < argc && len + 2 < sizeof x.command; i++)
        len += (size_t)snprintf(x.command + len, sizeof x.command - len, "%s%s", i ? " " : "", argv[i]);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(x.date, sizeof x.date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "vla-bench: %s (%s), %d series, %d shapes, budget %.0f s\n", vla_backend_name(x.b),
            vla_backend_device(x.b), x.nser, x.nshapes, x.o.budget);

    host_share_start();
    sweep(&x);
    x.other_share = host_other_share();
    fprintf(stderr, "vla-bench: sweep done in %.1f s; other processes used %.0f%% of the host's CPUs meanwhile\n",
            now_s() - x.t_start, 100 * x.other_share);

    int measured = 0;
    for (int i = 0; i < x.npts; i++) measured += !x.pts[i].skipped;
    switch (x.o.out) {
    case OUT_MD: print_md(&x, stdout); break;
    case OUT_CSV:
        print_csv(&x, stdout);
        print_summary_text(&x, stderr);
        break;
    case OUT_JSON: print_json(&x, stdout); break;
    }
    fflush(stdout);
    int save_failed = 0;
    if (x.o.save) {
        /* The same run in every format: PREFIX.md, PREFIX.csv, PREFIX.json. */
        static const char *ext[] = {"md", "csv", "json"};
        for (int i = 0; i < 3 && !save_failed; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s.%s", x.o.save, ext[i]);
            FILE *f = fopen(path, "w");
            if (!f) {
                save_failed = fail(EXIT_FAILED, "--save: cannot write '%s': %s", path, strerror(errno));
                break;
            }
            if (i == 0) print_md(&x, f);
            else if (i == 1) print_csv(&x, f);
            else print_json(&x, f);
            if (fclose(f) != 0) save_failed = fail(EXIT_FAILED, "--save: error writing '%s'", path);
        }
    }
    for (int i = 0; i < x.npts; i++) free(x.pts[i].samples);
    free(x.pts);
    free(x.shapes);
    free_opts(&x.o);
    vla_backend_close(x.b);
    if (save_failed) return save_failed;
    if (!measured) return fail(EXIT_FAILED, "no point could be measured (see the notes)");
    return 0;
}
