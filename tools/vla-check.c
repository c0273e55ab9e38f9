/* vla-check: runs every mechanism x algorithm of libvla on every backend/device this machine
 * has, against the independent float64 reference (tests/ref64.c), on seeded random inputs.
 *
 *   vla-check [--grad [--long]] [--backend NAME] [--mechanism M] [--algo A[,A...]] [--case TEXT]
 *             [--seed N] [--list] [--hash]
 *   vla-check --gen-npy DIR --shape B,T,H,dk,dv [--seed N]    (inputs for test_cross_backend.sh)
 *
 * Cases: a fixed list of edge shapes (T = 1, dk != dv both ways, T not a multiple of the chunk,
 * dk = dv = 1, odd sizes, B*H > 1, d = 256) for every algorithm of every mechanism, random
 * shapes and parameters, streaming cases (two pieces, states carried on the device, S updated
 * in place, t0 advanced), cases whose states come in from a reference run of a prefix, and the
 * `paper` preset with u given. Per case and backend it reports ||x - ref|| / ||ref|| for o and
 * every final state (for a state, ||ref|| no less than 0.1 per element: see relerr_floor), with
 * the tolerance beside it, and fails on: an error above tolerance, a
 * NaN or Inf, a guard byte changed past the end of an output buffer (every output buffer is
 * allocated larger than the op needs, poisoned with NaN inside and a byte pattern past the
 * end), a changed input, or a status other than VLA_OK ("not supported" counts as a failure).
 *
 * --grad checks the backward op instead (check_grad.c): every gradient of vla_attention_backward
 * against ref64's float64 backward, norm-wise relative error per tensor <= 1e-4, with the same
 * poison, guards and input checks; its case list is in check_grad.c.
 *
 * Output: a table on stdout, then "N passed, M failed" on its own line. Exit status: 0 all
 * passed, 1 a failure, 2 bad command line, 77 when --backend names a backend that has no device
 * here (so CTest reports a skip, never a pass). */
#define _POSIX_C_SOURCE 200809L
#include "check_common.h"
#include "npy.h"
#include "ref64.h"

#include <vla/vla.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Tolerances. 1e-5 is VLA-MATH 3's float32 bound at lambda0 = 0.1 for every algorithm; at
 * lambda0 = 1e-3 the same note gives about 1e-4 (A_0 = 1000 I makes the early downdates
 * large), and that case is checked at 1e-4. */
#define TOL 1e-5
#define TOL_SMALL_LAMBDA 1e-4
/* A device without fp64 runs VLA's A recurrence in float (the sequential one of sequential and
 * scan, and the chunked A part of chunked and two-level; double elsewhere),
 * which drifts: 1.2e-4 measured at lambda0 = 1e-3, T = 90 on PoCL with VLA_OPENCL_NO_FP64=1, and
 * 0.66e-4 to 0.94e-4 for the chunked forms over 8 seeds (the default-lambda0 cases stay under
 * 1e-5 at these T). Such a backend says "no fp64" or "fp64 off" in its device description; its
 * VLA cases get NO_FP64_FACTOR (check_common.h) on their tolerance. The chunked A part alone in
 * float (CUDA's; OpenCL's on GPUs, "[chunked A part in float]") keeps the plain tolerance: on an
 * H200 its largest error was 2.1e-6 at lambda0 = 1e-3 and under 1e-6 elsewhere. */

/* ---- random numbers: splitmix64, reproducible across machines ---- */

uint64_t next64(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double uniform(rng *r) { return (double)(next64(r) >> 11) * (1.0 / 9007199254740992.0); }
int irange(rng *r, int lo, int hi) { return lo + (int)(next64(r) % (uint64_t)(hi - lo + 1)); }
double normal(rng *r) {
    double u1 = uniform(r), u2 = uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- cases ---- */

#define MAX_CASES 2048

static const vla_algorithm all_algos[] = {VLA_ALGO_AUTO,    VLA_ALGO_SEQUENTIAL, VLA_ALGO_SCAN,
                                          VLA_ALGO_CHUNKED, VLA_ALGO_TWO_LEVEL,  VLA_ALGO_FUSED};
#define N_ALGOS 6

static void case_defaults(check_case *c, vla_mechanism m, vla_algorithm a) {
    memset(c, 0, sizeof *c);
    c->mech = m;
    c->algo = a;
    c->chunk = 64;
    c->rho = 1e-3;
    c->lambda0 = 0.1;
    c->u_scale = 1.0;
    c->fmap = m == VLA_MECH_LINEAR || m == VLA_MECH_DELTA_PAPER ? VLA_FMAP_ELU1 : VLA_FMAP_NONE;
    c->tol = TOL;
}

static void name_case(check_case *c, const char *tag) {
    snprintf(c->name, sizeof c->name, "%s-%s-%s", vla_mechanism_name(c->mech), vla_algorithm_name(c->algo), tag);
}

typedef struct edge_shape {
    const char *tag;
    int B, T, H, dk, dv, chunk;
} edge_shape;

/* The fixed edge shapes of the issue; chunks small enough that the chunked forms cut several
 * chunks (and the last one short) and two-level forms several segments. */
static const edge_shape edges[] = {
    {"t1", 1, 1, 1, 8, 8, 64},          /* one token */
    {"dk16dv24", 1, 40, 2, 16, 24, 16}, /* dk != dv */
    {"dk24dv16", 1, 40, 2, 24, 16, 16},
    {"tail37c16", 1, 37, 1, 8, 8, 16},  /* T not a multiple of the chunk */
    {"d1", 1, 20, 1, 1, 1, 8},          /* dk = dv = 1 */
    {"odd5x3", 1, 13, 1, 5, 3, 4},      /* odd sizes */
    {"bh6", 2, 33, 3, 8, 12, 8},        /* B*H > 1 */
    {"d256", 1, 6, 1, 256, 256, 4},     /* the largest d */
    {"dk3dv256", 1, 10, 1, 3, 256, 4},
    {"dk256dv3", 1, 10, 1, 256, 3, 4},
    {"d64c64", 1, 150, 2, 64, 64, 64},  /* the paper's d at its chunk: GPUs' dk = 64 kernels */
};
#define N_EDGES ((int)(sizeof edges / sizeof edges[0]))

static int build_cases(check_case *cases, uint64_t seed) {
    int n = 0;
    rng r = {seed * 0x2545F4914F6CDD1Dull + 1};
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        const vla_mechanism mech = (vla_mechanism)m;
        const int paper_delta = mech == VLA_MECH_DELTA_PAPER;
        for (int ai = 0; ai < N_ALGOS; ai++) {
            const vla_algorithm algo = all_algos[ai];
            if (!vla_algorithm_defined(mech, algo)) continue;
            /* Edge shapes; AUTO on two of them (it resolves to one of the others). */
            for (int e = 0; e < N_EDGES; e++) {
                if (algo == VLA_ALGO_AUTO && e != 1 && e != 6) continue;
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = edges[e].B, c->T = edges[e].T, c->H = edges[e].H, c->dk = edges[e].dk, c->dv = edges[e].dv;
                c->chunk = edges[e].chunk;
                /* delta-paper: with and without its gate, and phi = none on some. */
                c->has_g = paper_delta && e % 2 == 0;
                if (paper_delta && e % 3 == 1) c->fmap = VLA_FMAP_NONE;
                name_case(c, edges[e].tag);
            }
            if (algo == VLA_ALGO_AUTO) continue;
            /* Random shapes and parameters. */
            for (int i = 0; i < 6; i++) {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = irange(&r, 1, 2), c->H = irange(&r, 1, 3), c->T = irange(&r, 1, 120);
                c->dk = irange(&r, 1, 40), c->dv = irange(&r, 1, 40);
                const int chunks[] = {3, 8, 16, 64};
                c->chunk = chunks[irange(&r, 0, 3)];
                c->seg_chunks = irange(&r, 0, 3);
                if (mech == VLA_MECH_SOFTMAX) {
                    c->scale = irange(&r, 0, 1) ? 0.3 : 0.0;
                } else {
                    if (irange(&r, 0, 2) == 0) c->prefix = irange(&r, 1, 30);
                    c->t0 = irange(&r, 0, 40);
                }
                if (mech == VLA_MECH_DELTA) {
                    c->has_beta = irange(&r, 0, 1), c->has_g = irange(&r, 0, 1);
                    c->fmap = irange(&r, 0, 3) == 0 ? VLA_FMAP_ELU1 : VLA_FMAP_NONE;
                }
                if (paper_delta) {
                    c->has_g = irange(&r, 0, 1);
                    c->fmap = irange(&r, 0, 3) == 0 ? VLA_FMAP_NONE : VLA_FMAP_ELU1;
                }
                if (mech == VLA_MECH_VLA) {
                    c->refresh = irange(&r, 0, 1) ? irange(&r, 2, 25) : 0;
                    const double rhos[] = {1e-3, 0.1, 0.5};
                    c->rho = rhos[irange(&r, 0, 2)];
                    c->lambda0 = irange(&r, 0, 1) ? 0.1 : 1.0;
                    c->has_u = irange(&r, 0, 1);
                    const double scales[] = {1.0, 0.0, 0.5};
                    c->u_scale = scales[irange(&r, 0, 2)];
                    c->fmap = irange(&r, 0, 1) ? VLA_FMAP_ELU1 : VLA_FMAP_NONE;
                    c->normalize = c->fmap == VLA_FMAP_ELU1 && irange(&r, 0, 1);
                }
                char tag[32];
                snprintf(tag, sizeof tag, "rand%d", i);
                name_case(c, tag);
            }
            if (mech == VLA_MECH_SOFTMAX) continue; /* softmax keeps no state: no streaming */
            /* Streaming: two pieces, states carried on the device, S (A, n) updated in place. */
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 1, c->T = 50, c->H = 2, c->dk = 12, c->dv = 10, c->chunk = 8, c->split = 23, c->t0 = 5;
                if (mech == VLA_MECH_DELTA) c->has_beta = c->has_g = 1;
                if (mech == VLA_MECH_VLA) c->refresh = 7, c->rho = 0.1, c->fmap = VLA_FMAP_ELU1, c->normalize = 1;
                c->has_g |= paper_delta;
                name_case(c, "stream");
            }
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 2, c->T = 70, c->H = 1, c->dk = 9, c->dv = 16, c->chunk = 16, c->split = 64, c->prefix = 11;
                if (mech == VLA_MECH_VLA) c->has_u = 1, c->refresh = 20;
                name_case(c, "stream-prefix");
            }
            /* Many chunks on one head: the CUDA chunked walk runs in segments (maps, scan, walks). */
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 1, c->T = 300, c->H = 1, c->dk = 20, c->dv = 40, c->chunk = 4;
                if (mech == VLA_MECH_DELTA) c->has_beta = 1;
                c->has_g = paper_delta;
                name_case(c, "many-chunks");
            }
            /* Whole chunks of 64 tokens at dk = dv = 32: the GPU kernels' tiles and blocks of 16
             * rows past the first (OpenCL's cp_sfac_local inverts I + L by such blocks). */
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 1, c->T = 150, c->H = 2, c->dk = 32, c->dv = 32, c->chunk = 64;
                if (mech == VLA_MECH_DELTA) c->has_beta = 1;
                c->has_g = paper_delta;
                name_case(c, "c64");
            }
            if (paper_delta) {
                /* The trainer's shape (B = 64, H = 4, T = 73, d = 32), gate given; and no gate with
                 * dk = 1 against dv = 256 (the one-wide key the dk = 1 edge has only with dv = 1). */
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 64, c->T = 73, c->H = 4, c->dk = 32, c->dv = 32, c->has_g = 1;
                name_case(c, "train-shape");
                c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 1, c->T = 17, c->H = 2, c->dk = 1, c->dv = 256, c->prefix = 5, c->t0 = 9;
                name_case(c, "dk1dv256");
            }
            if (mech != VLA_MECH_VLA) continue;
            /* The paper preset, u given. */
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 2, c->T = 61, c->H = 2, c->dk = 16, c->dv = 16, c->chunk = 16, c->paper = 1, c->has_u = 1;
                c->refresh = 20, c->rho = 1e-3, c->fmap = VLA_FMAP_ELU1, c->normalize = 1, c->u_scale = 0.0;
                name_case(c, "paper");
            }
            /* Small lambda0 (VLA-MATH 3: about 1e-4 in float32). */
            {
                check_case *c = &cases[n++];
                case_defaults(c, mech, algo);
                c->B = 1, c->T = 90, c->H = 2, c->dk = 16, c->dv = 16, c->chunk = 16, c->lambda0 = 1e-3;
                c->tol = TOL_SMALL_LAMBDA;
                name_case(c, "lambda1e-3");
            }
        }
    }
    for (int i = 0; i < n; i++) {
        /* The prefix occupies positions [t0 - prefix, t0). */
        if (cases[i].t0 < cases[i].prefix) cases[i].t0 += cases[i].prefix;
        cases[i].seed = seed * 1000003ull + (uint64_t)i * 7919ull + 17;
    }
    return n;
}

/* ---- data ---- */

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "vla-check: out of host memory (%zu bytes)\n", n);
        exit(EXIT_FAILED);
    }
    return p;
}

float *rand_tensor(rng *r, size_t n, double lo, double hi, int gaussian) {
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(gaussian ? normal(r) : lo + (hi - lo) * uniform(r));
    return x;
}

void desc_for(const check_case *c, vla_attn_desc *d) {
    vla_attn_desc_init(d, c->mech);
    if (c->paper) vla_attn_desc_preset(d, "paper");
    d->algorithm = c->algo;
    d->chunk = c->chunk;
    d->segment_chunks = c->seg_chunks;
    if (c->eps > 0) d->eps = c->eps;
    if (c->mech == VLA_MECH_SOFTMAX) {
        d->scale = c->scale;
        return;
    }
    d->feature_map = c->fmap;
    if (c->mech == VLA_MECH_VLA) {
        d->lambda0 = c->lambda0;
        d->refresh = c->refresh;
        d->refresh_size = c->rho;
        d->u_scale = c->u_scale;
        d->normalize_output = c->normalize;
    }
}

int has_S(const check_case *c) { return c->mech != VLA_MECH_SOFTMAX; }
int has_A(const check_case *c) { return c->mech == VLA_MECH_VLA; }
int has_n(const check_case *c) { return c->mech == VLA_MECH_LINEAR || (c->mech == VLA_MECH_VLA && c->normalize); }
int gate_width(const check_case *c) { return c->mech == VLA_MECH_DELTA_PAPER ? c->dv : 1; }

static float *to_float(const double *x, size_t n) {
    float *y = xmalloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

/* Inputs of the case (and of its prefix), the prefix's states, and the reference. */
void make_data(const check_case *c, case_data *cd) {
    memset(cd, 0, sizeof *cd);
    rng r = {c->seed};
    const int B = c->B, H = c->H, dk = c->dk, dv = c->dv, P = c->prefix, gw = gate_width(c);
    const int Tall = P + c->T;
    cd->Tall = Tall;
    const size_t nk = (size_t)B * Tall * H * dk, nv = (size_t)B * Tall * H * dv, nb = (size_t)B * Tall * H;
    float *q = rand_tensor(&r, nk, 0, 0, 1), *k = rand_tensor(&r, nk, 0, 0, 1), *v = rand_tensor(&r, nv, 0, 0, 1);
    float *u = c->has_u ? rand_tensor(&r, nk, 0, 0, 1) : NULL;
    float *beta = c->has_beta ? rand_tensor(&r, nb, 0.1, 1.0, 0) : NULL;
    float *g = c->has_g ? rand_tensor(&r, nb * gw, 0.5, 1.0, 0) : NULL;
    vla_attn_desc d;
    desc_for(c, &d);
    if (P > 0) {
        /* The prefix's final states (float, as a caller would carry them), then the case's tokens. */
        double *S = xmalloc(sizeof(double) * B * H * dk * dv), *A = xmalloc(sizeof(double) * B * H * dk * dk);
        double *n = xmalloc(sizeof(double) * B * H * dk);
        float *pq = xmalloc(sizeof(float) * B * P * H * dk), *pk = xmalloc(sizeof(float) * B * P * H * dk);
        float *pv = xmalloc(sizeof(float) * B * P * H * dv), *pu = u ? xmalloc(sizeof(float) * B * P * H * dk) : NULL;
        float *pb = beta ? xmalloc(sizeof(float) * B * P * H) : NULL;
        float *pg = g ? xmalloc(sizeof(float) * B * P * H * gw) : NULL;
        for (int b = 0; b < B; b++) {
            const size_t src = (size_t)b * Tall * H, dst = (size_t)b * P * H, cnt = (size_t)P * H;
            memcpy(pq + dst * dk, q + src * dk, cnt * dk * sizeof(float));
            memcpy(pk + dst * dk, k + src * dk, cnt * dk * sizeof(float));
            memcpy(pv + dst * dv, v + src * dv, cnt * dv * sizeof(float));
            if (u) memcpy(pu + dst * dk, u + src * dk, cnt * dk * sizeof(float));
            if (beta) memcpy(pb + dst, beta + src, cnt * sizeof(float));
            if (g) memcpy(pg + dst * gw, g + src * gw, cnt * gw * sizeof(float));
        }
        ref64_forward(&d, B, P, H, dk, dv, c->t0 - P, pq, pk, pv, pu, pb, pg, NULL, NULL, NULL, NULL, S, A, n);
        cd->S0 = to_float(S, (size_t)B * H * dk * dv);
        if (has_A(c)) cd->A0 = to_float(A, (size_t)B * H * dk * dk);
        if (has_n(c)) cd->n0 = to_float(n, (size_t)B * H * dk);
        free(S), free(A), free(n), free(pq), free(pk), free(pv), free(pu), free(pb), free(pg);
    }
    /* The case's own T tokens: [B, T, H, .] slices of the generated [B, Tall, H, .]. */
    const int T = c->T;
    cd->q = xmalloc(sizeof(float) * B * T * H * dk), cd->k = xmalloc(sizeof(float) * B * T * H * dk);
    cd->v = xmalloc(sizeof(float) * B * T * H * dv);
    if (u) cd->u = xmalloc(sizeof(float) * B * T * H * dk);
    if (beta) cd->beta = xmalloc(sizeof(float) * B * T * H);
    if (g) cd->g = xmalloc(sizeof(float) * B * T * H * gw);
    for (int b = 0; b < B; b++) {
        const size_t src = ((size_t)b * Tall + P) * H, dst = (size_t)b * T * H, cnt = (size_t)T * H;
        memcpy(cd->q + dst * dk, q + src * dk, cnt * dk * sizeof(float));
        memcpy(cd->k + dst * dk, k + src * dk, cnt * dk * sizeof(float));
        memcpy(cd->v + dst * dv, v + src * dv, cnt * dv * sizeof(float));
        if (u) memcpy(cd->u + dst * dk, u + src * dk, cnt * dk * sizeof(float));
        if (beta) memcpy(cd->beta + dst, beta + src, cnt * sizeof(float));
        if (g) memcpy(cd->g + dst * gw, g + src * gw, cnt * gw * sizeof(float));
    }
    free(q), free(k), free(v), free(u), free(beta), free(g);
    cd->o = xmalloc(sizeof(double) * B * T * H * dv);
    cd->S = xmalloc(sizeof(double) * B * H * dk * dv);
    cd->A = xmalloc(sizeof(double) * B * H * dk * dk);
    cd->n = xmalloc(sizeof(double) * B * H * dk);
    ref64_forward(&d, B, T, H, dk, dv, c->t0, cd->q, cd->k, cd->v, cd->u, cd->beta, cd->g, cd->S0, cd->A0, cd->n0,
                  cd->o, cd->S, cd->A, cd->n);
}

void free_data(case_data *cd) {
    free(cd->q), free(cd->k), free(cd->v), free(cd->u), free(cd->beta), free(cd->g);
    free(cd->S0), free(cd->A0), free(cd->n0), free(cd->o), free(cd->S), free(cd->A), free(cd->n);
}

/* ---- one case on one backend ---- */

typedef struct result {
    double err_o, err_S, err_A, err_n; /* -1: not applicable */
    double tol;
    int ok;
    uint64_t hash; /* FNV-1a over the bytes of o and every final state, in that order */
    char note[256];
} result;

/* FNV-1a, 64 bit: --hash prints it per case so that two builds can be compared bit for bit. */
uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

static void note(result *r, const char *fmt, const char *what) {
    size_t len = strlen(r->note);
    snprintf(r->note + len, sizeof r->note - len, fmt, what);
}

/* ||x - ref|| / max(||ref||, sqrt(n) floor): floor 0 is the plain norm-wise relative error (and
 * ||x|| where ref is all zeros); a state's floor is 0.1 per element (RMS). A state of a few
 * elements can be near zero by chance, and its relative error then says nothing: at dk = dv = 1
 * VLA's S_T is the single number a_T v_T (0.004 at seed 3 of the d1 case), so an absolute error
 * of 1.4e-7, float32 rounding, read as 3.4e-5 against a 1e-5 bound. The inputs are N(0, 1), so a
 * state's entries are otherwise of order 0.1 to 10, where the floor does not act. */
static double relerr_floor(const float *x, const double *ref, size_t n, int *nonfinite, double floor) {
    double num = 0, den = 0, xs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) *nonfinite = 1;
        const double e = (double)x[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
        xs += (double)x[i] * x[i];
    }
    if (*nonfinite) return INFINITY;
    den = fmax(den, floor * floor * (double)n);
    return den > 0 ? sqrt(num / den) : sqrt(xs);
}

double relerr(const float *x, const double *ref, size_t n, int *nonfinite) {
    return relerr_floor(x, ref, n, nonfinite, 0.0);
}

#define STATE_FLOOR 0.1

/* A buffer of `bytes` the op may use, GUARD_BYTES more that it must not touch. Inside:
 * NaN poison (an output element the op fails to write shows up as NaN), past the end: a
 * byte pattern. */
vla_buffer *guarded(vla_backend *be, size_t bytes, const float *init) {
    vla_buffer *buf = NULL;
    if (vla_buffer_alloc(be, bytes + GUARD_BYTES, &buf) != VLA_OK) return NULL;
    unsigned char *h = xmalloc(bytes + GUARD_BYTES);
    if (init) memcpy(h, init, bytes);
    else
        for (size_t i = 0; i < bytes / sizeof(float); i++) ((float *)h)[i] = NAN;
    memset(h + bytes, GUARD_BYTE, GUARD_BYTES);
    vla_buffer_upload(buf, 0, h, bytes + GUARD_BYTES);
    free(h);
    return buf;
}

/* Downloads the first `bytes` into out and checks the guard; returns 0 if the guard is intact. */
int fetch_guarded(const vla_buffer *buf, size_t bytes, float *out) {
    unsigned char *h = xmalloc(bytes + GUARD_BYTES);
    int bad = vla_buffer_download(buf, 0, h, bytes + GUARD_BYTES) != VLA_OK;
    for (size_t i = 0; i < GUARD_BYTES && !bad; i++) bad = h[bytes + i] != GUARD_BYTE;
    memcpy(out, h, bytes);
    free(h);
    return bad;
}

vla_buffer *input(vla_backend *be, const float *x, size_t n) {
    if (!x) return NULL;
    vla_buffer *buf = NULL;
    if (vla_buffer_alloc(be, n * sizeof(float), &buf) != VLA_OK) return NULL;
    vla_buffer_upload(buf, 0, x, n * sizeof(float));
    return buf;
}

/* 1 if the buffer still holds x. */
int unchanged(const vla_buffer *buf, const float *x, size_t n) {
    if (!buf) return 1;
    float *h = xmalloc(n * sizeof(float));
    int same = vla_buffer_download(buf, 0, h, n * sizeof(float)) == VLA_OK && memcmp(h, x, n * sizeof(float)) == 0;
    free(h);
    return same;
}

/* x[B, T, H, D] tokens [t0, t1) -> y[B, t1 - t0, H, D]. */
static float *slice(const float *x, int B, int T, int H, int D, int t0, int t1) {
    if (!x) return NULL;
    float *y = xmalloc(sizeof(float) * B * (t1 - t0) * H * D);
    for (int b = 0; b < B; b++)
        memcpy(y + (size_t)b * (t1 - t0) * H * D, x + ((size_t)b * T + t0) * H * D,
               sizeof(float) * (size_t)(t1 - t0) * H * D);
    return y;
}

/* The tolerance of case c on backend be (see NO_FP64_FACTOR). */
double tolerance(const check_case *c, vla_backend *be) {
    const char *dev = vla_backend_device(be);
    const int no64 = strstr(dev, "no fp64") || strstr(dev, "fp64 off");
    if (no64 && c->mech == VLA_MECH_VLA)
        return c->tol * NO_FP64_FACTOR;
    return c->tol;
}

static void run_case(const check_case *c, const case_data *cd, vla_backend *be, result *r) {
    memset(r, 0, sizeof *r);
    r->tol = tolerance(c, be);
    r->err_o = r->err_S = r->err_A = r->err_n = -1;
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv, gw = gate_width(c);
    const size_t nS = (size_t)B * H * dk * dv, nA = (size_t)B * H * dk * dk, nn = (size_t)B * H * dk;
    vla_attn_desc d;
    desc_for(c, &d);
    const int np = c->split > 0 ? 2 : 1;
    const int cut[3] = {0, c->split > 0 ? c->split : T, T};

    /* State buffers: given states in (prefix cases), outputs guarded. For streaming, piece 1
     * writes Sb/Ab/nb and piece 2 updates them in place. */
    vla_buffer *S_in = has_S(c) ? input(be, cd->S0, nS) : NULL, *A_in = has_A(c) ? input(be, cd->A0, nA) : NULL;
    vla_buffer *n_in = has_n(c) ? input(be, cd->n0, nn) : NULL;
    vla_buffer *Sb = has_S(c) ? guarded(be, nS * 4, NULL) : NULL, *Ab = has_A(c) ? guarded(be, nA * 4, NULL) : NULL;
    vla_buffer *nb = has_n(c) ? guarded(be, nn * 4, NULL) : NULL;
    float *o = xmalloc(sizeof(float) * B * T * H * dv);
    int ok = 1, guard_bad = 0, input_changed = 0;
    vla_status st = VLA_OK;
    for (int p = 0; p < np && st == VLA_OK; p++) {
        const int t0 = cut[p], t1 = cut[p + 1], Tp = t1 - t0;
        float *q = slice(cd->q, B, T, H, dk, t0, t1), *k = slice(cd->k, B, T, H, dk, t0, t1);
        float *v = slice(cd->v, B, T, H, dv, t0, t1), *u = slice(cd->u, B, T, H, dk, t0, t1);
        float *beta = slice(cd->beta, B, T, H, 1, t0, t1), *g = slice(cd->g, B, T, H, gw, t0, t1);
        const size_t nk = (size_t)B * Tp * H * dk, nv = (size_t)B * Tp * H * dv, nb1 = (size_t)B * Tp * H;
        const size_t ng = nb1 * gw;
        vla_attn_args a = {.B = B, .T = Tp, .H = H, .dk = dk, .dv = dv, .t0 = c->t0 + t0};
        vla_buffer *bq = input(be, q, nk), *bk = input(be, k, nk), *bv = input(be, v, nv), *bu = input(be, u, nk);
        vla_buffer *bb = input(be, beta, nb1), *bg = input(be, g, ng);
        vla_buffer *bo = guarded(be, nv * 4, NULL);
        if (!bq || !bk || !bv || !bo || (u && !bu) || (beta && !bb) || (g && !bg)) {
            st = VLA_ERR_OUT_OF_MEMORY;
        } else {
            a.q = bq, a.k = bk, a.v = bv, a.u = bu, a.beta = bb, a.g = bg, a.o = bo;
            if (p == 0) a.S_in = S_in, a.A_in = A_in, a.n_in = n_in;
            else a.S_in = Sb, a.A_in = Ab, a.n_in = nb; /* in place */
            a.S_out = Sb, a.A_out = Ab, a.n_out = nb;
            st = vla_attention_forward(be, &d, &a);
            if (st == VLA_OK) {
                float *op = xmalloc(sizeof(float) * nv);
                guard_bad |= fetch_guarded(bo, nv * 4, op);
                for (int b = 0; b < B; b++)
                    memcpy(o + ((size_t)b * T + t0) * H * dv, op + (size_t)b * Tp * H * dv,
                           sizeof(float) * (size_t)Tp * H * dv);
                free(op);
                input_changed |= !unchanged(bq, q, nk) || !unchanged(bk, k, nk) || !unchanged(bv, v, nv) ||
                                 !unchanged(bu, u, nk) || !unchanged(bb, beta, nb1) || !unchanged(bg, g, ng);
            }
        }
        vla_buffer_free(bq), vla_buffer_free(bk), vla_buffer_free(bv), vla_buffer_free(bu), vla_buffer_free(bb);
        vla_buffer_free(bg), vla_buffer_free(bo);
        free(q), free(k), free(v), free(u), free(beta), free(g);
    }
    if (st != VLA_OK) {
        ok = 0;
        if (st == VLA_ERR_UNSUPPORTED) note(r, "not supported: %s", vla_backend_message(be));
        else {
            char msg[200];
            snprintf(msg, sizeof msg, "%s: %.150s", vla_status_string(st), vla_backend_message(be));
            note(r, "%s", msg);
        }
    } else {
        int nf = 0;
        r->err_o = relerr(o, cd->o, (size_t)B * T * H * dv, &nf);
        r->hash = fnv1a(FNV_OFFSET, o, sizeof(float) * (size_t)B * T * H * dv);
        float *x = xmalloc(sizeof(float) * (nS > nA ? nS : nA));
        if (Sb) {
            guard_bad |= fetch_guarded(Sb, nS * 4, x);
            r->err_S = relerr_floor(x, cd->S, nS, &nf, STATE_FLOOR);
            r->hash = fnv1a(r->hash, x, nS * 4);
        }
        if (Ab) {
            guard_bad |= fetch_guarded(Ab, nA * 4, x);
            r->err_A = relerr_floor(x, cd->A, nA, &nf, STATE_FLOOR);
            r->hash = fnv1a(r->hash, x, nA * 4);
        }
        if (nb) {
            guard_bad |= fetch_guarded(nb, nn * 4, x);
            r->err_n = relerr_floor(x, cd->n, nn, &nf, STATE_FLOOR);
            r->hash = fnv1a(r->hash, x, nn * 4);
        }
        free(x);
        input_changed |= !unchanged(S_in, cd->S0, nS) || !unchanged(A_in, cd->A0, nA) || !unchanged(n_in, cd->n0, nn);
        if (nf) ok = 0, note(r, "%s", "NaN/Inf in an output; ");
        if (guard_bad) ok = 0, note(r, "%s", "guard bytes past an output changed; ");
        if (input_changed) ok = 0, note(r, "%s", "an input buffer changed; ");
        const double errs[4] = {r->err_o, r->err_S, r->err_A, r->err_n};
        for (int i = 0; i < 4; i++)
            if (errs[i] > r->tol || isnan(errs[i])) ok = 0;
    }
    r->ok = ok;
    vla_buffer_free(S_in), vla_buffer_free(A_in), vla_buffer_free(n_in);
    vla_buffer_free(Sb), vla_buffer_free(Ab), vla_buffer_free(nb);
    free(o);
}

/* ---- output ---- */

void shape_str(const check_case *c, char *out, size_t n) {
    snprintf(out, n, "%dx%dx%dx%d/%d", c->B, c->T, c->H, c->dk, c->dv);
}

void err_str(double e, char *out, size_t n) {
    if (e < 0) snprintf(out, n, "-");
    else snprintf(out, n, "%.2e", e);
}

static void print_header(void) {
    printf("%-30s %-12s %-10s %-16s %-9s %-7s %-4s  %-9s %-9s %-9s %-9s %s\n", "case", "backend", "algorithm",
           "shape(BxTxHxdk/dv)", "error", "tol", "ok", "o", "S", "A", "n", "note");
}

void describe_case(const check_case *c, char *out, size_t n) {
    size_t len = 0;
    len += snprintf(out + len, n - len, "chunk=%d", c->chunk);
    if (c->seg_chunks) len += snprintf(out + len, n - len, " seg=%d", c->seg_chunks);
    if (c->t0) len += snprintf(out + len, n - len, " t0=%lld", (long long)c->t0);
    if (c->eps > 0) len += snprintf(out + len, n - len, " eps=%g", c->eps);
    if (c->prefix) len += snprintf(out + len, n - len, " states-in(prefix %d)", c->prefix);
    if (c->split) len += snprintf(out + len, n - len, " stream(split %d, in place)", c->split);
    if (c->mech == VLA_MECH_SOFTMAX && c->scale) len += snprintf(out + len, n - len, " scale=%g", c->scale);
    if (c->mech == VLA_MECH_DELTA) len += snprintf(out + len, n - len, "%s%s", c->has_beta ? " beta" : "", c->has_g ? " g" : "");
    if (c->mech == VLA_MECH_DELTA_PAPER) len += snprintf(out + len, n - len, "%s", c->has_g ? " g[dv]" : " no-g");
    if (c->mech != VLA_MECH_SOFTMAX) len += snprintf(out + len, n - len, " phi=%s", vla_feature_map_name(c->fmap));
    if (c->mech == VLA_MECH_VLA) {
        len += snprintf(out + len, n - len, " lambda0=%g R=%d rho=%g s_u=%s%s%s", c->lambda0, c->refresh, c->rho,
                        c->u_scale == 0 ? "1/sqrt(dk)" : c->u_scale == 1 ? "1" : "0.5", c->has_u ? " u" : "",
                        c->normalize ? " normalized" : "");
        if (c->paper) len += snprintf(out + len, n - len, " preset=paper");
    }
    if (c->upstream) len += snprintf(out + len, n - len, " upstream(dS_end%s%s)", has_A(c) ? ",dA_end" : "",
                                     has_n(c) ? ",dn_end" : "");
    if (c->partial) snprintf(out + len, n - len, " some-outputs-only");
}

/* ---- --gen-npy: inputs for tests/test_cross_backend.sh ---- */

static int gen_npy(const char *dir, const char *shape, uint64_t seed) {
    int B, T, H, dk, dv;
    char extra;
    if (sscanf(shape, "%d,%d,%d,%d,%d%c", &B, &T, &H, &dk, &dv, &extra) != 5 || B < 1 || T < 1 || H < 1 || dk < 1 ||
        dv < 1 || dk > 256 || dv > 256) {
        fprintf(stderr, "vla-check: --shape: expected B,T,H,dk,dv (positive; dk, dv <= 256), got '%s'\n", shape);
        return EXIT_USAGE;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "vla-check: --gen-npy: cannot create %s: %s\n", dir, strerror(errno));
        return EXIT_FAILED;
    }
    rng r = {seed * 0x9E3779B97F4A7C15ull + 5};
    const size_t nk = (size_t)B * T * H * dk, nv = (size_t)B * T * H * dv, nb = (size_t)B * T * H;
    struct {
        const char *name;
        size_t n;
        int ndim;
        int64_t shape[4];
        double lo, hi;
        int gaussian;
    } f[] = {
        {"q", nk, 4, {B, T, H, dk}, 0, 0, 1},       {"k", nk, 4, {B, T, H, dk}, 0, 0, 1},
        {"v", nv, 4, {B, T, H, dv}, 0, 0, 1},       {"u", nk, 4, {B, T, H, dk}, 0, 0, 1},
        {"beta", nb, 3, {B, T, H, 0}, 0.1, 1.0, 0}, {"g", nb, 3, {B, T, H, 0}, 0.5, 1.0, 0},
        {"g_rows", nv, 4, {B, T, H, dv}, 0.5, 1.0, 0}, /* delta-paper's gate, one per value row */
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        float *x = rand_tensor(&r, f[i].n, f[i].lo, f[i].hi, f[i].gaussian);
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%s.npy", dir, f[i].name);
        const int bad = npy_write_f32(path, x, f[i].ndim, f[i].shape, err, sizeof err);
        free(x);
        if (bad) {
            fprintf(stderr, "vla-check: %s\n", err);
            return EXIT_FAILED;
        }
    }
    return 0;
}

/* ---- main ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: vla-check [options]\n"
            "Runs every mechanism x algorithm on every backend/device against a float64 reference.\n\n"
            "  --grad              check the backward op (vla_attention_backward) instead: every\n"
            "                      gradient against ref64's float64 backward, ||g - ref|| / ||ref|| per\n"
            "                      tensor <= 1e-4 (x3 for VLA on a device without fp64); the algorithms\n"
            "                      are the backward's: auto, sequential, chunked (fused for softmax)\n"
            "  --long              with --grad: add the T = 32768, d = 32 cases (slow; not for CI)\n"
            "  --backend NAME      only devices whose name is NAME or starts with NAME: (cpu, opencl,\n"
            "                      opencl:0:0, cuda, ...) (default: every device vla_list_devices gives)\n"
            "  --mechanism M       only softmax|linear|delta|vla|delta-paper (default: all)\n"
            "  --algo A[,A...]     only auto|sequential|scan|chunked|two-level|fused (default: all)\n"
            "  --case TEXT         only cases whose name contains TEXT\n"
            "  --seed N            seed of the random cases and inputs (default: 1)\n"
            "  --list              print the cases and exit without running them\n"
            "  --hash              add a column with a 64-bit hash of each case's outputs and final\n"
            "                      states, or gradients with --grad (to compare two builds bit for bit)\n"
            "  --gen-npy DIR       write random q,k,v,u,beta,g .npy inputs (and g_rows [B,T,H,dv],\n"
            "                      delta-paper's gate) into DIR and exit\n"
            "  --shape B,T,H,dk,dv shape for --gen-npy (default: 2,45,3,16,24)\n"
            "  --help              print this help and exit\n\n"
            "Exit status: 0 all passed, 1 a case failed, 2 bad command line, 77 no device matches\n"
            "--backend (a skip for CTest).\n");
}

int filter_match(const check_filter *f, const check_case *c) {
    if (f->has_mech && c->mech != f->mech) return 0;
    if (f->text && !strstr(c->name, f->text)) return 0;
    if (f->nalgo == 0) return 1;
    for (int i = 0; i < f->nalgo; i++)
        if (c->algo == f->algos[i]) return 1;
    return 0;
}

static int matches_backend(const char *filter, const char *name) {
    if (!filter) return 1;
    const size_t n = strlen(filter);
    return strcmp(filter, name) == 0 || (strncmp(filter, name, n) == 0 && name[n] == ':');
}

int main(int argc, char **argv) {
    const char *case_filter = NULL;
    const char *backend = NULL, *mech_name = NULL, *algo_name = NULL, *gen_dir = NULL, *shape = "2,45,3,16,24";
    uint64_t seed = 1;
    int list = 0, hash = 0, grad = 0, long_cases = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--list") == 0) {
            list = 1;
        } else if (strcmp(a, "--hash") == 0) {
            hash = 1;
        } else if (strcmp(a, "--grad") == 0) {
            grad = 1;
        } else if (strcmp(a, "--long") == 0) {
            long_cases = 1;
        } else if (!strcmp(a, "--backend") || !strcmp(a, "--mechanism") || !strcmp(a, "--algo") ||
                   !strcmp(a, "--seed") || !strcmp(a, "--gen-npy") || !strcmp(a, "--shape") || !strcmp(a, "--case")) {
            if (!val) {
                fprintf(stderr, "vla-check: %s needs a value (see --help)\n", a);
                return EXIT_USAGE;
            }
            i++;
            if (!strcmp(a, "--backend")) backend = val;
            else if (!strcmp(a, "--mechanism")) mech_name = val;
            else if (!strcmp(a, "--algo")) algo_name = val;
            else if (!strcmp(a, "--gen-npy")) gen_dir = val;
            else if (!strcmp(a, "--shape")) shape = val;
            else if (!strcmp(a, "--case")) case_filter = val;
            else {
                char *end;
                errno = 0;
                unsigned long long s = strtoull(val, &end, 10);
                if (end == val || *end || errno) {
                    fprintf(stderr, "vla-check: --seed: not a non-negative integer: '%s'\n", val);
                    return EXIT_USAGE;
                }
                seed = s;
            }
        } else {
            fprintf(stderr, "vla-check: unknown argument '%s' (see --help)\n", a);
            return EXIT_USAGE;
        }
    }
    if (gen_dir) return gen_npy(gen_dir, shape, seed);

    check_filter filt = {.text = case_filter};
    if (mech_name && vla_mechanism_from_name(mech_name, &filt.mech) != VLA_OK) {
        fprintf(stderr, "vla-check: --mechanism: %s\n", vla_last_message());
        return EXIT_USAGE;
    }
    filt.has_mech = mech_name != NULL;
    if (algo_name) {
        /* A comma-separated list. */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", algo_name);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (filt.nalgo == (int)(sizeof filt.algos / sizeof filt.algos[0]) ||
                vla_algorithm_from_name(tok, &filt.algos[filt.nalgo]) != VLA_OK) {
                fprintf(stderr, "vla-check: --algo: %s\n", filt.nalgo == 8 ? "too many names" : vla_last_message());
                return EXIT_USAGE;
            }
            filt.nalgo++;
        }
    }
    if (long_cases && !grad) {
        fprintf(stderr, "vla-check: --long needs --grad\n");
        return EXIT_USAGE;
    }

    check_case *cases = NULL;
    int ncases = 0;
    if (grad) {
        ncases = grad_select(&filt, seed, long_cases, &cases);
    } else {
        check_case *all = xmalloc(sizeof *all * MAX_CASES);
        const int nall = build_cases(all, seed);
        cases = xmalloc(sizeof *cases * MAX_CASES);
        for (int i = 0; i < nall; i++)
            if (filter_match(&filt, &all[i])) cases[ncases++] = all[i];
        free(all);
    }
    if (ncases == 0) {
        fprintf(stderr, "vla-check: no %scase matches --mechanism %s --algo %s --case %s\n", grad ? "gradient " : "",
                mech_name ? mech_name : "*", algo_name ? algo_name : "*", case_filter ? case_filter : "*");
        free(cases);
        return EXIT_USAGE;
    }
    if (list && grad) {
        grad_list(cases, ncases);
        free(cases);
        return 0;
    }
    if (list) {
        char sh[48], desc[256];
        for (int i = 0; i < ncases; i++) {
            shape_str(&cases[i], sh, sizeof sh);
            describe_case(&cases[i], desc, sizeof desc);
            printf("%-30s %-8s %-10s %-16s tol=%.0e %s\n", cases[i].name, vla_mechanism_name(cases[i].mech),
                   vla_algorithm_name(cases[i].algo), sh, cases[i].tol, desc);
        }
        printf("%d cases\n", ncases);
        free(cases);
        return 0;
    }

    /* Devices. */
    vla_device_info devs[64];
    int ndev = 0;
    vla_list_devices(devs, 64, &ndev);
    if (ndev > 64) ndev = 64;
    vla_backend *bes[64];
    int nbe = 0;
    char names[64][64];
    for (int i = 0; i < ndev; i++) {
        if (!matches_backend(backend, devs[i].name)) continue;
        vla_backend *be = NULL;
        if (vla_backend_open(devs[i].name, &be) != VLA_OK) {
            printf("%-30s %-12s could not open: %s\n", "open", devs[i].name, vla_last_message());
            printf("0 passed, 1 failed\n");
            free(cases);
            return EXIT_FAILED;
        }
        fprintf(stderr, "vla-check: %s = %s\n", devs[i].name, vla_backend_device(be));
        memcpy(names[nbe], devs[i].name, sizeof names[nbe]);
        names[nbe][sizeof names[nbe] - 1] = '\0';
        bes[nbe++] = be;
    }
    if (nbe == 0) {
        const int known = backend && (!strcmp(backend, "cpu") || !strcmp(backend, "opencl") || !strcmp(backend, "cuda") ||
                                      !strncmp(backend, "opencl:", 7) || !strncmp(backend, "cuda:", 5));
        fprintf(stderr, "vla-check: no device matches --backend %s on this machine%s\n", backend ? backend : "(any)",
                known ? ": skipped" : "");
        free(cases);
        return known ? EXIT_SKIP : EXIT_USAGE;
    }

    if (grad) {
        const int failed = grad_run(cases, ncases, bes, (const char(*)[64])names, nbe, hash);
        for (int j = 0; j < nbe; j++) vla_backend_close(bes[j]);
        free(cases);
        return failed ? EXIT_FAILED : 0;
    }
    print_header();
    int passed = 0, failed = 0;
    const clock_t t_start = clock();
    for (int i = 0; i < ncases; i++) {
        case_data cd;
        make_data(&cases[i], &cd);
        for (int j = 0; j < nbe; j++) {
            result r;
            run_case(&cases[i], &cd, bes[j], &r);
            char sh[48], eo[16], eS[16], eA[16], en[16], em[16];
            shape_str(&cases[i], sh, sizeof sh);
            double mx = -1;
            const double e4[4] = {r.err_o, r.err_S, r.err_A, r.err_n};
            for (int k = 0; k < 4; k++)
                if (e4[k] > mx || isnan(e4[k])) mx = e4[k];
            err_str(mx, em, sizeof em), err_str(r.err_o, eo, sizeof eo), err_str(r.err_S, eS, sizeof eS);
            err_str(r.err_A, eA, sizeof eA), err_str(r.err_n, en, sizeof en);
            char hs[24] = "";
            if (hash) snprintf(hs, sizeof hs, "%016llx ", (unsigned long long)r.hash);
            printf("%-30s %-12s %-10s %-16s %-9s %-7.0e %-4s  %-9s %-9s %-9s %-9s %s%s\n", cases[i].name, names[j],
                   vla_algorithm_name(cases[i].algo), sh, em, r.tol, r.ok ? "ok" : "FAIL", eo, eS, eA, en, hs, r.note);
            if (r.ok) passed++;
            else failed++;
        }
        fflush(stdout);
        free_data(&cd);
    }
    for (int j = 0; j < nbe; j++) vla_backend_close(bes[j]);
    free(cases);
    fprintf(stderr, "vla-check: %.1f s of CPU time\n", (double)(clock() - t_start) / CLOCKS_PER_SEC);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? EXIT_FAILED : 0;
}
