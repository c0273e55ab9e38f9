/* `vla-bench --targets`: the CUDA backend against the speed targets of the CUDA issue, on the
 * device it runs on, with the device's own measured limits in the same run:
 *   - copy bandwidth: a large cudaMemcpy device to device (bytes read + written / time);
 *   - FP32 and TF32 GEMM: cublasSgemm and cublasGemmEx(CUBLAS_COMPUTE_32F_FAST_TF32), n = 8192;
 *   - VLA fp32 forward at (B,H,d; T) = (1,4,32; 2048, 8192, 32768, 131072) and (8,16,64; 2048,
 *     32768), every VLA algorithm (scan skipped where its maps do not fit or it would take
 *     > 10 s), plus softmax (fused), linear and delta (chunked);
 *   - the VLA decode step: T = 1, B=8, H=16, d=64, S and A carried in place, 1000 back-to-back
 *     calls, each timed with CUDA events (launch and the library's host work included).
 * Timing: CUDA events on the legacy default stream, which is ordered with the backend's
 * (blocking) stream; warm-up first (each input set twice, so that the backend's graph cache
 * has captured every call the timed loop makes); median of the repetitions, which rotate over
 * 3 input sets so that repeated runs do not read a warm L2. Inputs are N(0,1), never zeros.
 * Each row also gives the median host time of the call (stderr, and "host_us" in --json).
 *
 * Each result is also given as a fraction of the measured limits, from the FLOP and byte count
 * of its algorithm (bench_count_target; the formula is printed beside each row).
 *
 * Output: the markdown table on stdout once every row has run (progress on stderr); --json
 * FILE writes every row with its raw samples, whole or not at all, before the table. --gate US:
 * each timed call is enqueued behind a host function that holds the stream for US
 * microseconds, so the events time the GPU's work alone (the difference from an ungated run is
 * what the host adds to a call's latency).
 *
 * No CUDA backend in this build: exit 1 with the one line. A CUDA build where cuda:0 cannot be
 * opened (no device, no driver): exit 77 with one line "--targets: skipped: ...", the code the
 * test suites use for "skipped". */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench_targets.h"

#include "bench_common.h"
#include "bench_count.h"
#include "bench_cuda.h"

#include <vla/vla.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXS 64       /* samples kept a row */
#define MAXSHAPES 16  /* --shape, at most */
#define MAXROWS 256

typedef struct shape {
    int B, H, d, T;
    double target_ms; /* VLA target (0: none) */
} shape;

typedef struct inputs {
    vla_buffer *q[3], *k[3], *v[3], *o, *S, *A, *n;
    vla_buffer *pad[9]; /* VLA_BENCH_PAD (development): unused buffers between the inputs */
} inputs;

typedef struct row {
    char shape[48], mech[12], algo[16], status[96];
    double ms, ms_min, ms_max, target, flop, bytes;
    double host_us; /* median host time of vla_attention_forward (its checks, planning and launches) */
    const char *formula;
    int nsamp;
    double samp[MAXS];
} row;

static const char *const row_names[] = {"vla-sequential", "vla-scan", "vla-chunked", "vla-two-level",
                                        "softmax",        "linear",   "delta",       "decode"};
#define NROW_NAMES 8

typedef struct targets {
    /* options */
    int quick, no_limits, u_given, gate_us;
    const char *json_path;
    shape shapes[MAXSHAPES];
    int nshapes;
    int only[NROW_NAMES]; /* --only: 1 for each row name selected */
    int dec_B, dec_H, dec_d;
    /* the run */
    vla_backend *be;
    bench_limits lim;
    float *host_rand; /* one random source for every upload */
    size_t host_n;
    row rows[MAXROWS];
    int nrows;
} targets;

static int selected(const targets *t, const char *name) {
    for (int i = 0; i < NROW_NAMES; i++)
        if (!strcmp(row_names[i], name)) return t->only[i];
    return 0;
}

/* ---- the command line ---------------------------------------------------------------------- */

static const char *const sweep_flags[] = {"--backend", "-T", "-B", "-H", "-d", "--mechanism", "--algo", "-r",
                                          "--warmup", "--output", "--budget", "--crossover", "--threads", "--seed",
                                          "--save", "--backward"};

int bench_targets_flag(const char *f) {
    static const char *const own[] = {"--quick", "--json", "--shape", "--decode", "--no-limits",
                                      "--u-given", "--gate", "--only"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(f, own[i])) return 1;
    return 0;
}

void bench_targets_usage(FILE *f) {
    fprintf(f,
            "--targets: the CUDA backend (cuda:0) against the CUDA issue's speed targets, with the device's\n"
            "copy bandwidth and cuBLAS SGEMM / TF32 GEMM rates measured in the same run; each row with its\n"
            "FLOP and byte count (the formula beside it) as a fraction of those. Markdown table on stdout,\n"
            "progress on stderr. Needs the CUDA backend (else exit 1) and a device (else exit 77, skipped).\n"
            "The sweep's flags do not apply.\n"
            "\n"
            "  --targets           run the target table instead of the sweep     default: off\n"
            "  --quick             a smoke run: 3-5 repetitions, 200 decode calls, T <= 32768\n"
            "                      (off: up to 30 repetitions, 1000 decode calls) default: off\n"
            "  --only LIST         rows to run, of vla-sequential, vla-scan, vla-chunked,\n"
            "                      vla-two-level, softmax, linear, delta, decode default: all\n"
            "  --shape B,H,d,T[,MS]  a shape to time instead of the targets' (MS: its VLA target\n"
            "                      in ms); repeatable, up to 16 times\n"
            "                      default: (1,4,32) T = 2048, 8192, 32768, 131072; (8,16,64) T = 2048, 32768\n"
            "  --decode B,H,d      the decode step's shape                       default: 8,16,64\n"
            "  --no-limits         skip the copy and GEMM measurements           default: off\n"
            "  --u-given           VLA rows with penalty vectors u given (the paper preset's\n"
            "                      path; off: u = k^, the targets' setting)      default: off\n"
            "  --gate US           enqueue each timed call behind a US-microsecond host hold:\n"
            "                      the GPU's time alone, without the host's (not the targets'\n"
            "                      measure)                                      default: off\n"
            "  --json FILE         also write every row with its raw samples (ms) default: none\n"
            "  Environment (development): VLA_BENCH_PAD=BYTES puts an unused buffer of that size\n"
            "  before each input, to move them in memory; VLA_BENCH_U_GIVEN=1 is --u-given.\n");
}

/* "a,b,c[,x]": n_int positive integers (the d-th, 1-based, at most 256), then optionally one
 * positive number. Returns how many numbers were read, or -1. */
static int parse_tuple(const char *s, int n_int, int d_index, int *iv, double *opt) {
    const char *p = s;
    for (int i = 0; i < n_int; i++) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9') return -1;
        const long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > (1L << 30) || (i + 1 == d_index && x > 256)) return -1;
        iv[i] = (int)x;
        p = end;
        if (i + 1 < n_int && *p++ != ',') return -1;
    }
    if (!*p) return n_int;
    if (!opt || *p++ != ',') return -1;
    char *end;
    errno = 0;
    const double x = strtod(p, &end);
    if (errno || end == p || *end || !(x > 0) || !isfinite(x)) return -1;
    *opt = x;
    return n_int + 1;
}

/* Returns 0 to run, BENCH_TARGETS_HELP, or an exit status after the one line. */
static int parse_targets_args(int argc, char **argv, targets *t) {
    t->dec_B = 8, t->dec_H = 16, t->dec_d = 64;
    for (int i = 0; i < NROW_NAMES; i++) t->only[i] = 1;
    const char *u = getenv("VLA_BENCH_U_GIVEN");
    if (u && *u == '1') t->u_given = 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) return BENCH_TARGETS_HELP;
        if (!strcmp(f, "--targets")) continue;
        if (!strcmp(f, "--quick")) {
            t->quick = 1;
            continue;
        }
        if (!strcmp(f, "--no-limits")) {
            t->no_limits = 1;
            continue;
        }
        if (!strcmp(f, "--u-given")) {
            t->u_given = 1;
            continue;
        }
        for (size_t k = 0; k < sizeof sweep_flags / sizeof *sweep_flags; k++)
            if (!strcmp(f, sweep_flags[k]))
                return bench_fail(BENCH_EXIT_USAGE, "%s does not apply to --targets (see --help)", f);
        if (!bench_targets_flag(f)) return bench_fail(BENCH_EXIT_USAGE, "unknown flag '%s' (see --help)", f);
        if (i + 1 >= argc) return bench_fail(BENCH_EXIT_USAGE, "%s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--json")) {
            t->json_path = v;
        } else if (!strcmp(f, "--gate")) {
            if (bench_parse_int("--gate", v, 1, 1000000, &t->gate_us)) return BENCH_EXIT_USAGE;
        } else if (!strcmp(f, "--shape")) {
            if (t->nshapes == MAXSHAPES) return bench_fail(BENCH_EXIT_USAGE, "--shape: at most %d shapes", MAXSHAPES);
            shape *s = &t->shapes[t->nshapes];
            int iv[4];
            s->target_ms = 0;
            if (parse_tuple(v, 4, 3, iv, &s->target_ms) < 0)
                return bench_fail(BENCH_EXIT_USAGE,
                                  "--shape: '%s' is not B,H,d,T[,MS] (positive integers, d <= 256; MS > 0)", v);
            s->B = iv[0], s->H = iv[1], s->d = iv[2], s->T = iv[3];
            t->nshapes++;
        } else if (!strcmp(f, "--decode")) {
            int iv[3];
            if (parse_tuple(v, 3, 3, iv, NULL) < 0)
                return bench_fail(BENCH_EXIT_USAGE, "--decode: '%s' is not B,H,d (positive integers, d <= 256)", v);
            t->dec_B = iv[0], t->dec_H = iv[1], t->dec_d = iv[2];
        } else if (!strcmp(f, "--only")) {
            for (int k = 0; k < NROW_NAMES; k++) t->only[k] = 0;
            for (const char *p = v;;) {
                const char *end = strchr(p, ',');
                const size_t len = end ? (size_t)(end - p) : strlen(p);
                int k = 0;
                while (k < NROW_NAMES && !(strlen(row_names[k]) == len && !strncmp(row_names[k], p, len))) k++;
                if (k == NROW_NAMES)
                    return bench_fail(BENCH_EXIT_USAGE,
                                      "--only: '%.*s' is not a row (one of: vla-sequential, vla-scan, vla-chunked, "
                                      "vla-two-level, softmax, linear, delta, decode)",
                                      (int)len, p);
                t->only[k] = 1;
                if (!end) break;
                p = end + 1;
            }
        }
    }
    return 0;
}

/* ---- inputs -------------------------------------------------------------------------------- */

static int upload_rand(targets *t, vla_buffer *b, size_t n, size_t shift) {
    if (n + shift > t->host_n) shift = 0;
    return vla_buffer_upload(b, 0, t->host_rand + shift, n * sizeof(float)) == VLA_OK ? 0 : -1;
}

static vla_buffer *alloc_buf(targets *t, size_t n) {
    vla_buffer *b = NULL;
    return vla_buffer_alloc(t->be, n * sizeof(float), &b) == VLA_OK ? b : NULL;
}

static void free_inputs(inputs *in) {
    for (int i = 0; i < 3; i++) vla_buffer_free(in->q[i]), vla_buffer_free(in->k[i]), vla_buffer_free(in->v[i]);
    for (int i = 0; i < 9; i++) vla_buffer_free(in->pad[i]);
    vla_buffer_free(in->o), vla_buffer_free(in->S), vla_buffer_free(in->A), vla_buffer_free(in->n);
    memset(in, 0, sizeof *in);
}

/* Three input sets of q, k, v, and o and the states. -1 (inputs freed) when one does not fit. */
static int make_inputs(targets *t, const shape *s, inputs *in) {
    memset(in, 0, sizeof *in);
    const size_t nt = (size_t)s->B * s->T * s->H * s->d;
    /* VLA_BENCH_PAD=bytes (development): an unused buffer of that size allocated before each of
     * q, k and v, to move the inputs in memory. */
    const char *pe = getenv("VLA_BENCH_PAD");
    const size_t pad = pe && *pe ? (size_t)strtoull(pe, NULL, 10) / sizeof(float) : 0;
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        if (pad) ok = ok && (in->pad[3 * i] = alloc_buf(t, pad)) != NULL;
        ok = ok && (in->q[i] = alloc_buf(t, nt)) != NULL;
        if (pad) ok = ok && (in->pad[3 * i + 1] = alloc_buf(t, pad)) != NULL;
        ok = ok && (in->k[i] = alloc_buf(t, nt)) != NULL;
        if (pad) ok = ok && (in->pad[3 * i + 2] = alloc_buf(t, pad)) != NULL;
        ok = ok && (in->v[i] = alloc_buf(t, nt)) != NULL;
        ok = ok && !upload_rand(t, in->q[i], nt, 1000 * i + 1) && !upload_rand(t, in->k[i], nt, 1000 * i + 7) &&
             !upload_rand(t, in->v[i], nt, 1000 * i + 13);
    }
    const size_t ns = (size_t)s->B * s->H * s->d * s->d;
    ok = ok && (in->o = alloc_buf(t, nt)) && (in->S = alloc_buf(t, ns)) && (in->A = alloc_buf(t, ns)) &&
         (in->n = alloc_buf(t, (size_t)s->B * s->H * s->d));
    if (!ok) free_inputs(in);
    return ok ? 0 : -1;
}

/* ---- one row ------------------------------------------------------------------------------- */

static double host_us_since(const struct timespec *h0) {
    struct timespec h1;
    clock_gettime(CLOCK_MONOTONIC, &h1);
    return 1e6 * ((double)(h1.tv_sec - h0->tv_sec) + 1e-9 * (double)(h1.tv_nsec - h0->tv_nsec));
}

/* Times one configuration into a new row. est_ms: a prediction (from a smaller T) or 0.
 * Returns 0 (the row says whether it ran), or -1 on a CUDA runtime error (bench_cuda_error). */
static int run_one(targets *t, const shape *s, inputs *in, vla_mechanism m, vla_algorithm a, double est_ms) {
    row *r = &t->rows[t->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "(%d,%d,%d) T=%d", s->B, s->H, s->d, s->T);
    snprintf(r->mech, sizeof r->mech, "%s", vla_mechanism_name(m));
    snprintf(r->algo, sizeof r->algo, "%s", vla_algorithm_name(a));
    r->target = m == VLA_MECH_VLA ? s->target_ms : 0;
    const bench_target_count c = bench_count_target(m, a, s->T, s->d, s->d, (double)s->B * s->H, t->u_given);
    r->flop = c.flop, r->bytes = c.bytes, r->formula = c.formula;
    r->ms = NAN;
    if (est_ms > 10000) {
        snprintf(r->status, sizeof r->status, "skipped (est. %.0f s > 10 s)", est_ms / 1e3);
        fprintf(stderr, "  %-22s %-8s %-11s %s\n", r->shape, r->mech, r->algo, r->status);
        return 0;
    }
    vla_attn_desc d;
    vla_attn_desc_init(&d, m);
    d.algorithm = a;
    vla_attn_args args = {.B = s->B, .T = s->T, .H = s->H, .dk = s->d, .dv = s->d, .o = in->o};
    if (m != VLA_MECH_SOFTMAX) args.S_out = in->S;
    if (m == VLA_MECH_VLA) args.A_out = in->A;
    if (m == VLA_MECH_LINEAR) args.n_out = in->n;
    bench_events *ev = NULL;
    if (bench_events_create(2, &ev)) return -1;
    /* Warm-up (module load, workspace growth; each input set twice, so that the backend's graph
     * cache has captured every call the timed loop makes), which also gives the first estimate. */
    double t1 = 0;
    for (int w = 0; w < 6; w++) {
        args.q = in->q[w % 3], args.k = in->k[w % 3], args.v = in->v[w % 3];
        if (m == VLA_MECH_VLA && t->u_given) args.u = in->q[(w + 1) % 3];
        if (bench_events_record(ev, 0)) goto cuda_error;
        const vla_status st = vla_attention_forward(t->be, &d, &args);
        if (bench_events_record(ev, 1)) goto cuda_error;
        if (st != VLA_OK) {
            snprintf(r->status, sizeof r->status, "%s",
                     st == VLA_ERR_OUT_OF_MEMORY ? "skipped (out of memory)" : vla_status_string(st));
            fprintf(stderr, "  %-22s %-8s %-11s %s: %s\n", r->shape, r->mech, r->algo, r->status,
                    vla_backend_message(t->be));
            bench_events_destroy(ev);
            return 0;
        }
        if (bench_events_wait(ev, 1) || bench_events_ms(ev, 0, 1, &t1)) goto cuda_error;
        if (t1 > 5000) break; /* one long warm-up is enough */
    }
    double host[MAXS];
    int reps = t->quick ? 3 : (int)(2000.0 / (t1 > 0.01 ? t1 : 0.01));
    if (reps > (t->quick ? 5 : 30)) reps = t->quick ? 5 : 30;
    if (reps < 3) reps = 3;
    if (t1 > 3000) reps = 1;
    for (int i = 0; i < reps; i++) {
        args.q = in->q[i % 3], args.k = in->k[i % 3], args.v = in->v[i % 3];
        if (m == VLA_MECH_VLA && t->u_given) args.u = in->q[(i + 1) % 3];
        if (t->gate_us > 0 && bench_cuda_gate(t->gate_us)) goto cuda_error;
        if (bench_events_record(ev, 0)) goto cuda_error;
        struct timespec h0;
        clock_gettime(CLOCK_MONOTONIC, &h0);
        const vla_status st = vla_attention_forward(t->be, &d, &args);
        host[i] = host_us_since(&h0);
        if (bench_events_record(ev, 1) || bench_events_wait(ev, 1) || bench_events_ms(ev, 0, 1, &r->samp[i]))
            goto cuda_error;
        if (st != VLA_OK) { /* it ran in the warm-up: say so rather than time a failure */
            snprintf(r->status, sizeof r->status, "failed in a timed run: %s", vla_status_string(st));
            fprintf(stderr, "  %-22s %-8s %-11s %s: %s\n", r->shape, r->mech, r->algo, r->status,
                    vla_backend_message(t->be));
            bench_events_destroy(ev);
            return 0;
        }
    }
    bench_events_destroy(ev);
    r->host_us = bench_sort_median(host, reps);
    r->nsamp = reps;
    double tmp[MAXS];
    memcpy(tmp, r->samp, sizeof(double) * (size_t)reps);
    r->ms = bench_sort_median(tmp, reps);
    r->ms_min = tmp[0], r->ms_max = tmp[reps - 1];
    snprintf(r->status, sizeof r->status, "ok");
    fprintf(stderr, "  %-22s %-8s %-11s %10.4f ms (%d reps)\n", r->shape, r->mech, r->algo, r->ms, reps);
    fprintf(stderr, "    host %.1f us a call (median: the library's checks, planning and launches)\n", r->host_us);
    return 0;
cuda_error:
    bench_events_destroy(ev);
    return -1;
}

/* Valid carried states for the decode step: S = 0.1 N(0,1), A = I / lambda0 (lambda0 = 0.1),
 * n = 1. */
static int decode_states(targets *t, inputs *in, int B, int H, int d) {
    const size_t ns = (size_t)B * H * d * d;
    float *h = malloc(ns * sizeof *h);
    if (!h) return -1;
    int bad = 0;
    for (size_t i = 0; i < ns; i++) h[i] = 0.1f * t->host_rand[i % t->host_n];
    bad |= vla_buffer_upload(in->S, 0, h, ns * sizeof *h) != VLA_OK;
    for (size_t i = 0; i < ns; i++) h[i] = (i / d) % d == i % d ? 10.0f : 0.0f;
    bad |= vla_buffer_upload(in->A, 0, h, ns * sizeof *h) != VLA_OK;
    for (size_t i = 0; i < (size_t)B * H * d; i++) h[i] = 1.0f;
    bad |= vla_buffer_upload(in->n, 0, h, (size_t)B * H * d * sizeof *h) != VLA_OK;
    free(h);
    return bad ? -1 : 0;
}

/* The decode step: N back-to-back T = 1 calls, states carried in place, an event before each.
 * Returns 0, or -1 on a CUDA runtime error. */
static int run_decode(targets *t, vla_mechanism m) {
    const int B = t->dec_B, H = t->dec_H, d = t->dec_d, N = t->quick ? 200 : 1000;
    row *r = &t->rows[t->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "decode (%d,%d,%d) T=1", B, H, d);
    snprintf(r->mech, sizeof r->mech, "%s", vla_mechanism_name(m));
    snprintf(r->algo, sizeof r->algo, "sequential");
    r->target = m == VLA_MECH_VLA ? 0.010 : 0;
    r->ms = NAN;
    r->flop = bench_count_target(m, VLA_ALGO_SEQUENTIAL, 1, d, d, (double)B * H, t->u_given).flop;
    /* per step: S (and A) read and written, q k v read, o written */
    r->bytes = (double)B * H * 4 * (2.0 * d * d * (m == VLA_MECH_VLA ? 2 : 1) + 4 * d);
    r->formula = m == VLA_MECH_VLA      ? "per step: 2(3K^2+3KV)  ; 4(2KV + 2K^2 + 2K+2V) per head"
                 : m == VLA_MECH_LINEAR ? "per step: 2*2KV  ; 4(2KV + 2K+2V) per head (n left out)"
                                        : "per step: 2*3KV  ; 4(2KV + 2K+2V) per head";
    const shape s = {B, H, d, 1, 0};
    inputs in;
    if (make_inputs(t, &s, &in) != 0 || decode_states(t, &in, B, H, d) != 0) {
        snprintf(r->status, sizeof r->status, "allocation failed");
        fprintf(stderr, "  %-22s %-8s %s: %s\n", r->shape, r->mech, r->status, vla_last_message());
        free_inputs(&in);
        return 0;
    }
    vla_attn_desc desc;
    vla_attn_desc_init(&desc, m);
    desc.algorithm = VLA_ALGO_SEQUENTIAL;
    vla_attn_args a = {.B = B, .T = 1, .H = H, .dk = d, .dv = d, .o = in.o, .S_in = in.S, .S_out = in.S};
    if (m == VLA_MECH_VLA) a.A_in = in.A, a.A_out = in.A;
    if (m == VLA_MECH_LINEAR) a.n_in = in.n, a.n_out = in.n;
    bench_events *ev = NULL;
    double *ts = malloc(sizeof *ts * (size_t)N);
    int rc = 0;
    if (!ts) {
        snprintf(r->status, sizeof r->status, "out of host memory");
        goto done;
    }
    if (bench_events_create(N + 1, &ev)) goto cuda_error;
    for (int w = 0; w < 20; w++) { /* warm-up */
        a.q = in.q[w % 3], a.k = in.k[w % 3], a.v = in.v[w % 3], a.t0 = w;
        if (vla_attention_forward(t->be, &desc, &a) != VLA_OK) {
            snprintf(r->status, sizeof r->status, "failed: %.50s", vla_backend_message(t->be));
            goto done;
        }
    }
    if (bench_cuda_synchronize()) goto cuda_error;
    int failed = 0;
    for (int i = 0; i < N; i++) {
        a.q = in.q[i % 3], a.k = in.k[i % 3], a.v = in.v[i % 3], a.t0 = 20 + i;
        if (bench_events_record(ev, i)) goto cuda_error;
        failed |= vla_attention_forward(t->be, &desc, &a) != VLA_OK;
    }
    if (bench_events_record(ev, N) || bench_events_wait(ev, N)) goto cuda_error;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        if (bench_events_ms(ev, i, i + 1, &ts[i])) goto cuda_error;
        sum += ts[i];
    }
    for (int i = 0; i < MAXS && i < N; i++) r->samp[i] = ts[i];
    r->nsamp = N < MAXS ? N : MAXS;
    /* The host's share: the same N calls with no events, host clock around the enqueueing (a
     * step cannot take less than this), then the wall time once the queue drains. */
    struct timespec h0;
    clock_gettime(CLOCK_MONOTONIC, &h0);
    for (int i = 0; i < N; i++) {
        a.q = in.q[i % 3], a.k = in.k[i % 3], a.v = in.v[i % 3], a.t0 = 20 + N + i;
        failed |= vla_attention_forward(t->be, &desc, &a) != VLA_OK;
    }
    const double host_us = host_us_since(&h0) / N;
    if (bench_cuda_synchronize()) goto cuda_error;
    const double wall_us = host_us_since(&h0) / N;
    if (failed) {
        snprintf(r->status, sizeof r->status, "failed in a timed call: %.50s", vla_backend_message(t->be));
        goto done;
    }
    r->ms = bench_sort_median(ts, N);
    r->ms_min = ts[0], r->ms_max = ts[N - 1];
    snprintf(r->status, sizeof r->status, "ok (mean %.2f us; host %.2f, wall %.2f us/call)", 1e3 * sum / N, host_us,
             wall_us);
    fprintf(stderr, "  %-22s %-8s decode median %.2f us, %s\n", r->shape, r->mech, r->ms * 1e3, r->status);
    goto done;
cuda_error:
    rc = -1;
done:
    if (rc == 0 && isnan(r->ms)) fprintf(stderr, "  %-22s %-8s %s\n", r->shape, r->mech, r->status);
    bench_events_destroy(ev);
    free(ts);
    free_inputs(&in);
    return rc;
}

/* ---- output -------------------------------------------------------------------------------- */

static void print_table(const targets *t, FILE *f) {
    const bench_limits *lim = &t->lim;
    fprintf(f, "\n## libvla CUDA backend on %s\n\n", vla_backend_device(t->be));
    fprintf(f, "Device limits measured in this run: copy %.0f GB/s (read+write); FP32 SGEMM %.1f TFLOP/s; "
               "TF32 GEMM %.1f TFLOP/s.\n",
            lim->copy_gbs, lim->sgemm_tflops, lim->tf32_tflops);
    fprintf(f, "%%FP32 = achieved FLOP/s over the SGEMM rate; %%BW = the algorithm's minimum bytes over the copy rate.\n");
    if (t->gate_us > 0)
        fprintf(f, "Gated (--gate %d): each call was enqueued while the stream was held, so these are GPU times without the\n"
                   "host's part of a call's latency; the targets are ungated.\n",
                t->gate_us);
    fprintf(f, "\n");
    fprintf(f, "| shape | mech | algorithm | median ms | min..max ms | target ms | vs target | GFLOP/s | %%FP32 | GB/s | %%BW | FLOP ; bytes formula |\n");
    fprintf(f, "|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < t->nrows; i++) {
        const row *r = &t->rows[i];
        char tgt[32] = "", vs[32] = "";
        if (r->target > 0) snprintf(tgt, sizeof tgt, "%.3g", r->target);
        if (isnan(r->ms)) {
            fprintf(f, "| %s | %s | %s | %s | | %s | | | | | | %s |\n", r->shape, r->mech, r->algo, r->status, tgt,
                    r->formula);
            continue;
        }
        const double s = r->ms * 1e-3, gf = r->flop / s / 1e9, gb = r->bytes / s / 1e9;
        if (r->target > 0)
            snprintf(vs, sizeof vs, "%s %.2fx", r->ms <= r->target ? "MET" : "missed", r->ms / r->target);
        fprintf(f, "| %s | %s | %s | %.4f | %.4f..%.4f | %s | %s | %.0f | %.1f%% | %.0f | %.1f%% | %s |\n", r->shape,
                r->mech, r->algo, r->ms, r->ms_min, r->ms_max, tgt, vs, gf,
                lim->sgemm_tflops > 0 ? 100 * gf / (lim->sgemm_tflops * 1e3) : 0, gb,
                lim->copy_gbs > 0 ? 100 * gb / lim->copy_gbs : 0, r->formula);
    }
    int said = 0;
    for (int i = 0; i < t->nrows; i++) {
        if (strncmp(t->rows[i].shape, "decode", 6)) continue;
        if (!said++)
            fprintf(f, "\nDecode steps: mean of the per-call event times; host = time to enqueue one call (no events); "
                       "wall = the same calls' total over their count.\n\n");
        fprintf(f, "- %s %s: %s\n", t->rows[i].shape, t->rows[i].mech, t->rows[i].status);
    }
    /* VLA targets: the best algorithm per shape */
    fprintf(f, "\n### VLA targets (best algorithm per shape)\n\n| shape | best | median ms | target ms | result |\n"
               "|---|---|---:|---:|---|\n");
    for (int i = 0; i < t->nrows; i++) {
        const row *r = &t->rows[i];
        if (strcmp(r->mech, "vla") || r->target <= 0) continue;
        int first = 1;
        for (int j = 0; j < i; j++)
            if (!strcmp(t->rows[j].shape, r->shape) && !strcmp(t->rows[j].mech, "vla")) first = 0;
        if (!first) continue;
        const row *best = NULL;
        for (int j = i; j < t->nrows; j++)
            if (!strcmp(t->rows[j].shape, r->shape) && !strcmp(t->rows[j].mech, "vla") && !isnan(t->rows[j].ms) &&
                (!best || t->rows[j].ms < best->ms))
                best = &t->rows[j];
        if (!best) {
            fprintf(f, "| %s | - | - | %.3g | no result |\n", r->shape, r->target);
            continue;
        }
        fprintf(f, "| %s | %s | %.4f | %.3g | %s (%.2fx) |\n", r->shape, best->algo, best->ms, r->target,
                best->ms <= r->target ? "MET" : "missed", best->ms / r->target);
    }
}

static int write_json(FILE *f, const void *ctx, int i) {
    const targets *t = ctx;
    (void)i;
    fprintf(f, "{\"tool\": \"vla-bench --targets\", \"device\": ");
    bench_json_string(f, vla_backend_device(t->be));
    fprintf(f, ", \"copy_gbs\": ");
    bench_json_number(f, t->lim.copy_gbs);
    fprintf(f, ", \"sgemm_tflops\": ");
    bench_json_number(f, t->lim.sgemm_tflops);
    fprintf(f, ", \"tf32_tflops\": ");
    bench_json_number(f, t->lim.tf32_tflops);
    fprintf(f, ", \"gate_us\": %d, \"u_given\": %s, \"quick\": %s, \"rows\": [", t->gate_us,
            t->u_given ? "true" : "false", t->quick ? "true" : "false");
    for (int k = 0; k < t->nrows; k++) {
        const row *r = &t->rows[k];
        fprintf(f, "%s\n  {\"shape\": ", k ? "," : "");
        bench_json_string(f, r->shape);
        fprintf(f, ", \"mechanism\": ");
        bench_json_string(f, r->mech);
        fprintf(f, ", \"algorithm\": ");
        bench_json_string(f, r->algo);
        fprintf(f, ", \"status\": ");
        bench_json_string(f, r->status);
        const double vals[] = {r->ms, r->ms_min, r->ms_max, r->target, r->flop, r->bytes, r->host_us};
        static const char *const names[] = {"median_ms", "min_ms", "max_ms", "target_ms", "flop", "bytes", "host_us"};
        for (int j = 0; j < 7; j++) {
            fprintf(f, ", \"%s\": ", names[j]);
            bench_json_number(f, isnan(r->ms) && j < 3 ? NAN : vals[j]);
        }
        fprintf(f, ", \"formula\": ");
        bench_json_string(f, r->formula);
        fprintf(f, ", \"samples_ms\": [");
        for (int j = 0; j < r->nsamp; j++) fprintf(f, "%s%.6g", j ? ", " : "", r->samp[j]);
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
    return 0;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* The shapes of the run: --shape's, else the targets' (B, H, d, T, VLA target in ms). */
static const shape *run_shapes(const targets *t, int *n) {
    static const shape target_shapes[] = {
        {1, 4, 32, 2048, 0.05},  {1, 4, 32, 8192, 0.12}, {1, 4, 32, 32768, 0.6},
        {1, 4, 32, 131072, 2.5}, {8, 16, 64, 2048, 0.5}, {8, 16, 64, 32768, 11.0},
    };
    *n = t->nshapes ? t->nshapes : (int)(sizeof target_shapes / sizeof target_shapes[0]);
    return t->nshapes ? t->shapes : target_shapes;
}

/* Does --only leave a row that runs at the shapes (anything but decode)? */
static int shape_rows(const targets *t) {
    for (int i = 0; i < NROW_NAMES; i++)
        if (t->only[i] && strcmp(row_names[i], "decode")) return 1;
    return 0;
}

/* Every row of the run; 0, or -1 on a CUDA runtime error. */
static int run_rows(targets *t) {
    int nshapes;
    const shape *shapes = run_shapes(t, &nshapes);
    const vla_algorithm valgos[] = {VLA_ALGO_SEQUENTIAL, VLA_ALGO_SCAN, VLA_ALGO_CHUNKED, VLA_ALGO_TWO_LEVEL};
    double last_ms[4] = {0, 0, 0, 0}, last_T = 0;
    int last_d = 0;
    for (int si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        if (!shape_rows(t) || (t->quick && s->T > 32768)) continue;
        if (s->d != last_d) last_T = 0, memset(last_ms, 0, sizeof last_ms);
        inputs in;
        if (make_inputs(t, s, &in) != 0) {
            fprintf(stderr, "  (%d,%d,%d) T=%d: no rows: could not allocate the inputs: %s\n", s->B, s->H, s->d,
                    s->T, vla_last_message());
            continue;
        }
        int rc = 0;
        for (int ai = 0; ai < 4 && !rc; ai++) {
            if (!selected(t, row_names[ai])) continue;
            const double est = last_T > 0 && last_ms[ai] > 0 ? last_ms[ai] * s->T / last_T : 0;
            rc = run_one(t, s, &in, VLA_MECH_VLA, valgos[ai], est);
            const row *r = &t->rows[t->nrows - 1];
            last_ms[ai] = r->ms > 0 ? r->ms : (est > 10000 ? est : 0);
        }
        if (!rc && selected(t, "softmax")) rc = run_one(t, s, &in, VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, 0);
        if (!rc && selected(t, "linear")) rc = run_one(t, s, &in, VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, 0);
        if (!rc && selected(t, "delta")) rc = run_one(t, s, &in, VLA_MECH_DELTA, VLA_ALGO_CHUNKED, 0);
        last_T = s->T, last_d = s->d;
        free_inputs(&in);
        if (rc) return -1;
    }
    if (selected(t, "decode"))
        if (run_decode(t, VLA_MECH_VLA) || run_decode(t, VLA_MECH_DELTA) || run_decode(t, VLA_MECH_LINEAR)) return -1;
    return 0;
}

static int run_targets(targets *t) {
    if (!bench_cuda_built()) return bench_fail(BENCH_EXIT_FAILED, "--targets: %s", bench_cuda_error());
    if (vla_backend_open("cuda:0", &t->be) != VLA_OK)
        return bench_fail(BENCH_EXIT_SKIP, "--targets: skipped: %s", vla_last_message());
    fprintf(stderr, "vla-bench --targets: %s\n", vla_backend_device(t->be));
    /* The random source covers the largest tensor that runs, plus room to shift each upload. */
    t->host_n = (size_t)t->dec_B * t->dec_H * t->dec_d * t->dec_d + 4096;
    int nshapes;
    const shape *shapes = run_shapes(t, &nshapes);
    for (int i = 0; i < nshapes && shape_rows(t); i++) {
        const shape *s = &shapes[i];
        const size_t n = (size_t)s->B * s->H * s->d * s->T + 4096;
        if (!(t->quick && s->T > 32768) && n > t->host_n) t->host_n = n;
    }
    t->host_rand = malloc(t->host_n * sizeof(float));
    if (!t->host_rand) return bench_fail(BENCH_EXIT_FAILED, "--targets: out of host memory for the inputs");
    bench_rng rng;
    bench_rng_seed(&rng, 42);
    bench_fill_normal(&rng, t->host_rand, t->host_n);

    if (!t->no_limits) {
        fprintf(stderr, "limits...\n");
        if (bench_cuda_limits(&t->lim))
            return bench_fail(BENCH_EXIT_FAILED, "--targets: measuring the device's limits: %s", bench_cuda_error());
    }
    fprintf(stderr, "  copy %.0f GB/s, SGEMM %.1f TFLOP/s, TF32 %.1f TFLOP/s\n", t->lim.copy_gbs, t->lim.sgemm_tflops,
            t->lim.tf32_tflops);
    if (run_rows(t)) return bench_fail(BENCH_EXIT_FAILED, "--targets: %s", bench_cuda_error());
    if (t->json_path) {
        const int rc = bench_write_files("--json", &t->json_path, 1, write_json, t);
        if (rc) return rc;
    }
    print_table(t, stdout);
    if (fflush(stdout) != 0 || ferror(stdout))
        return bench_fail(BENCH_EXIT_FAILED, "error writing the table to stdout");
    return 0;
}

int bench_targets_main(int argc, char **argv) {
    targets *t = calloc(1, sizeof *t);
    if (!t) return bench_fail(BENCH_EXIT_FAILED, "out of host memory");
    int rc = parse_targets_args(argc, argv, t);
    if (!rc) rc = run_targets(t);
    if (t->be) vla_backend_close(t->be);
    free(t->host_rand);
    free(t);
    return rc;
}
