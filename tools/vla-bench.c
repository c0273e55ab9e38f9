/* vla-bench: how latency scales with sequence length, for every mechanism and algorithm a
 * backend has (the paper's Figure 3, its crossover claim and its fused-vs-sequential claim);
 * and, with --targets, the CUDA backend against the speed targets of the CUDA issue.
 *
 *   vla-bench [--backend NAME] [-T 128,256,...] [-B 1] [-H 4] [-d 32] [--output md|csv|json] ...
 *   vla-bench --backward ...   the same sweep, forward + backward beside the forward alone
 *   vla-bench --targets [--quick] [--only LIST] [--shape B,H,d,T[,ms]] [--gate US] [--json FILE] ...
 *
 * This file: the sweep's command line and main. The sweep itself (running, timing, the
 * budget) is bench_sweep.c; its summary and output formats bench_report.c; FLOP and byte
 * counts bench_count.c; --targets bench_targets.c, with its CUDA runtime calls in
 * bench_cuda.c (bench_cuda_stub.c in a build without the CUDA backend).
 *
 * Exit status: 0 when the sweep ran (skipped points included); 1 when the backend could not
 * be opened, nothing could run or a result file could not be written; 2 for a bad command
 * line; 77 for --targets on a CUDA build with no usable device. Every failure prints exactly
 * one line on stderr, and leaves no result file behind (files are written whole, through a
 * temporary file and a rename). */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "bench_count.h"
#include "bench_report.h"
#include "bench_sweep.h"
#include "bench_targets.h"

#include <vla/vla.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- options ------------------------------------------------------------------------------- */

static void free_opts(sweep_opts *o) {
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
            "usage: vla-bench [options]          the scaling sweep (below)\n"
            "       vla-bench --targets [options] the CUDA speed-target table (further below)\n"
            "\n"
            "Sweeps sequence length T for every mechanism and every algorithm the backend has and\n"
            "reports latency, throughput, GFLOP/s and GB/s; then a summary: each linear-time series'\n"
            "crossover with softmax, the slope of log latency vs log T, and VLA's fastest algorithm vs\n"
            "sequential at T = 4096 (with --backward, for forward + backward too). Lists are\n"
            "comma-separated. Progress on stderr, results on stdout.\n"
            "\n"
            "  --backend NAME      cpu, cuda[:N], opencl[:P:D] or auto (CUDA, else an OpenCL GPU,\n"
            "                      else the CPU)                                 default: auto\n"
            "  -T LIST             sequence lengths            default: 128,256,...,16384 (powers of 2)\n"
            "  -B LIST             batch sizes                                   default: 1\n"
            "  -H LIST             heads                                         default: 4\n"
            "  -d LIST             head dimension, dk = dv                       default: 32\n"
            "  --mechanism LIST    softmax,linear,delta,vla,delta-paper          default: all\n"
            "  --algo LIST         sequential,scan,chunked,two-level,fused (each only where defined;\n"
            "                      softmax always runs its fused one)            default: all\n"
            "  -r N                timed repetitions per point                   default: 10\n"
            "  --warmup N          untimed runs before them                      default: 2\n"
            "  --output FMT        md, csv or json (json keeps every sample; csv gains a trailing\n"
            "                      note column only when a point was skipped)    default: md\n"
            "  --budget SECONDS    wall-time budget; points it cannot afford are skipped with a\n"
            "                      note, and the sweep stops when it runs out    default: 120\n"
            "  --crossover         keep doubling T beyond the list until every linear-time series\n"
            "                      is below softmax or the budget runs out       default: off\n"
            "  --backward          also time forward + backward (dq, dk, dv from a random dO) in one\n"
            "                      interval after each forward, for the series the backward has\n"
            "                      (sequential, chunked; fused for softmax): its median, the ratio\n"
            "                      (fwd+bwd)/fwd, the backward's FLOP count and fwd+bwd GFLOP/s and\n"
            "                      GB/s, as extra columns of every format        default: off\n"
            "  --threads N         CPU threads (0 = OpenMP's default)            default: 0\n"
            "  --seed N            seed of the random inputs                     default: 42\n"
            "  --save PREFIX       also write the same run to PREFIX.md, PREFIX.csv and PREFIX.json\n"
            "                      (stdout keeps --output)                       default: none\n"
            "  -h, --help          this text\n"
            "\n");
    bench_targets_usage(f);
}

/* Parses "a,b,c" of integers in [1, max]. Returns 0, or prints the one line and returns -1. */
static int parse_int_list(const char *flag, const char *s, int max, int_list *out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int *v = calloc((size_t)n, sizeof *v);
    if (!v) return bench_fail(BENCH_EXIT_USAGE, "out of memory"), -1;
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
            bench_fail(BENCH_EXIT_USAGE, "%s: '%s' is not a comma-separated list of integers in 1..%d", flag, s, max);
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
            bench_fail(BENCH_EXIT_USAGE, "%s: '%s' is not a comma-separated list of names", flag, s);
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
            bench_fail(BENCH_EXIT_USAGE, "%s: unknown %s '%s' (one of: %s)", flag, is_algo ? "algorithm" : "mechanism", item,
                 is_algo ? "sequential, scan, chunked, two-level, fused" : "softmax, linear, delta, vla, delta-paper");
            return -1;
        }
        on[idx] = 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* Returns 0 to run, 1 after --help, or an exit status (> 1) after printing the one line. */
static int parse_args(int argc, char **argv, sweep_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->reps = 10;
    o->warmup = 2;
    o->budget = 120;
    o->seed = 42;
    o->out = OUT_MD;
    for (int i = 0; i < VLA_N_BENCH_MECHS; i++) o->mech_on[i] = 1;
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
        if (!strcmp(f, "--backward")) {
            o->backward = 1;
            continue;
        }
        static const char *valued[] = {"--backend", "-T", "-B", "-H", "-d", "--mechanism", "--algo", "-r",
                                       "--warmup", "--output", "--budget", "--threads", "--seed", "--save"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(f, valued[k]);
        if (!known && bench_targets_flag(f))
            return bench_fail(BENCH_EXIT_USAGE, "%s applies to --targets only (see --help)", f);
        if (!known) return bench_fail(BENCH_EXIT_USAGE, "unknown flag '%s' (see --help)", f);
        if (i + 1 >= argc) return bench_fail(BENCH_EXIT_USAGE, "%s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--backend")) o->backend = v;
        else if (!strcmp(f, "--save")) o->save = v;
        else if (!strcmp(f, "-T")) {
            if (parse_int_list("-T", v, 1 << 28, &o->T)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "-B")) {
            if (parse_int_list("-B", v, 1 << 20, &o->B)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "-H")) {
            if (parse_int_list("-H", v, 1 << 20, &o->H)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "-d")) {
            if (parse_int_list("-d", v, 256, &o->d)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--mechanism")) {
            if (parse_name_list("--mechanism", v, o->mech_on, VLA_N_BENCH_MECHS, 0)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--algo")) {
            if (parse_name_list("--algo", v, o->algo_on, 6, 1)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "-r")) {
            if (bench_parse_int("-r", v, 1, 1000000, &o->reps)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--warmup")) {
            if (bench_parse_int("--warmup", v, 0, 1000000, &o->warmup)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--threads")) {
            if (bench_parse_int("--threads", v, 0, 4096, &o->threads)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--output")) {
            if (!strcmp(v, "md")) o->out = OUT_MD;
            else if (!strcmp(v, "csv")) o->out = OUT_CSV;
            else if (!strcmp(v, "json")) o->out = OUT_JSON;
            else return bench_fail(BENCH_EXIT_USAGE, "--output: '%s' is not one of md, csv, json", v);
        } else if (!strcmp(f, "--budget")) {
            char *end;
            errno = 0;
            double b = strtod(v, &end);
            if (errno || end == v || *end || !(b > 0) || !isfinite(b))
                return bench_fail(BENCH_EXIT_USAGE, "--budget: '%s' is not a positive number of seconds", v);
            o->budget = b;
        } else if (!strcmp(f, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-')
                return bench_fail(BENCH_EXIT_USAGE, "--seed: '%s' is not a non-negative integer", v);
            o->seed = (uint64_t)s;
        }
    }
    if (!o->T.n) {
        /* 128 .. 16384 in powers of two; 4096 (the paper's ratio point) is one of them. */
        o->T.v = malloc(8 * sizeof(int));
        if (!o->T.v) return bench_fail(BENCH_EXIT_FAILED, "out of memory");
        for (int t = 128; t <= 16384; t *= 2) o->T.v[o->T.n++] = t;
    }
    sort_unique(&o->T);
    /* Defaults: the paper's heads (H = 4, d_h = 32), one sequence. */
    if ((!o->B.n && parse_int_list("-B", "1", 1, &o->B)) || (!o->H.n && parse_int_list("-H", "4", 4, &o->H)) ||
        (!o->d.n && parse_int_list("-d", "32", 32, &o->d)))
        return BENCH_EXIT_FAILED;
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--targets")) {
            const int rc = bench_targets_main(argc, argv);
            if (rc == BENCH_TARGETS_HELP) {
                usage(stdout);
                return 0;
            }
            return rc;
        }
    bench x;
    memset(&x, 0, sizeof x);
    x.t_start = bench_now_s();
    const int prc = parse_args(argc, argv, &x.o);
    if (prc) {
        free_opts(&x.o);
        return prc == 1 ? 0 : prc;
    }

    /* Series: every mechanism, every algorithm VLA-MATH defines for it, in enum order. */
    for (int m = 0; m < VLA_N_BENCH_MECHS; m++) {
        if (!x.o.mech_on[m]) continue;
        for (int a = VLA_ALGO_SEQUENTIAL; a <= VLA_ALGO_FUSED; a++) {
            if (!vla_algorithm_defined((vla_mechanism)m, (vla_algorithm)a)) continue;
            if (m != VLA_MECH_SOFTMAX && !x.o.algo_on[a]) continue;
            if (x.o.backward && !bench_bwd_defined((vla_mechanism)m, (vla_algorithm)a)) continue;
            x.ser[x.nser++] = (series){(vla_mechanism)m, (vla_algorithm)a};
        }
    }
    if (!x.nser) {
        free_opts(&x.o);
        return bench_fail(BENCH_EXIT_USAGE, "no (mechanism, algorithm) pair left by --mechanism and --algo%s",
                          x.o.backward ? " that the backward has (sequential, chunked; fused for softmax)" : "");
    }

    x.nshapes = x.o.B.n * x.o.H.n * x.o.d.n;
    x.shapes = calloc((size_t)x.nshapes, sizeof *x.shapes);
    if (!x.shapes) {
        free_opts(&x.o);
        return bench_fail(BENCH_EXIT_FAILED, "out of host memory");
    }
    int k = 0;
    for (int i = 0; i < x.o.B.n; i++)
        for (int j = 0; j < x.o.H.n; j++)
            for (int l = 0; l < x.o.d.n; l++) x.shapes[k++] = (shape){x.o.B.v[i], x.o.H.v[j], x.o.d.v[l]};

    vla_status s = vla_backend_open(strcmp(x.o.backend, "auto") ? x.o.backend : NULL, &x.b);
    if (s != VLA_OK) {
        free(x.shapes);
        free_opts(&x.o);
        return bench_fail(BENCH_EXIT_FAILED, "--backend %s: %s", x.o.backend, vla_last_message());
    }
    if (x.o.threads) vla_backend_set_threads(x.b, x.o.threads);
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
    fprintf(stderr, "vla-bench: %s (%s), %d series, %d shapes, budget %.0f s%s\n", vla_backend_name(x.b),
            vla_backend_device(x.b), x.nser, x.nshapes, x.o.budget, x.o.backward ? ", forward + backward" : "");

    bench_sweep(&x);
    fprintf(stderr, "vla-bench: sweep done in %.1f s; other processes used %.0f%% of the host's CPUs meanwhile\n",
            x.wall_s, 100 * x.other_share);

    int measured = 0;
    for (int i = 0; i < x.npts; i++) measured += !x.pts[i].skipped;
    /* Nothing measured: the one line, and no table of skipped rows. */
    const int rc = measured ? bench_report(&x)
                            : bench_fail(BENCH_EXIT_FAILED, "no point could be measured (the progress lines above say why)");
    for (int i = 0; i < x.npts; i++) free(x.pts[i].samples), free(x.pts[i].fb_samples);
    free(x.pts);
    free(x.shapes);
    free_opts(&x.o);
    vla_backend_close(x.b);
    return rc;
}
