/* The CPU backward (vla_attention_backward, VLA-MATH 5) through the public API:
 *  - fd:        every mechanism and option on tiny shapes against fourth-order central differences
 *               of the float64 forward (ref64_forward_f64, which shares no code with the backend),
 *               every gradient the op returns; and the check itself must fail on a perturbed
 *               gradient (so it can fail);
 *  - precision: longer pieces (T up to 1024) against ref64_backward, 1e-4 norm-wise per tensor;
 *  - algorithms: sequential and chunked agree (chunk sizes that do and do not divide T);
 *  - chaining:  two pieces chained through dS_0 / dA_0 / dn_0 give the whole sequence's gradient;
 *  - outputs:   every requested output is overwritten (poisoned before), partial requests give the
 *               same values, and nothing else is written.
 *
 * The loss of the finite differences is L = <dO, o> + <dS_end, S_T> + <dA_end, A_T> + <dn_end, n_T>,
 * with random upstream gradients, and each input element x gets
 *   dL/dx ~ (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h),   h = 1e-4 max(1, |x|)
 * (error O(h^4) + 1e-16 |L| / h, far below the float32 rounding of the op's outputs). A_0 is
 * perturbed along symmetric directions (A_ij and A_ji by h/2 each): the backward returns the
 * symmetric part. Inputs stay away from the kinks: |x| >= 0.05 where elu + 1 applies. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"
#include "vla_impl.h" /* white box: a backend whose backward slot is NULL */

#define FD_TOL 2e-5   /* float32 outputs of a double computation, against a float64 FD */
#define PREC_TOL 1e-4 /* VLA-MATH 5's target for float32 gradients at lambda0 = 0.1 */

typedef struct gcase {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv;
    int64_t t0;
    vla_feature_map fmap;
    int normalize, refresh;
    double rho, u_scale, lambda0, scale;
    int has_u, has_beta, has_g;
    int states_in; /* random S_0, A_0, n_0 where the mechanism has them */
    int upstream;  /* random dS_end, dA_end, dn_end where the mechanism has them */
    int paper;     /* vla_attn_desc_preset "paper" first */
    int chunk;
} gcase;

/* The cases whose g has exact zeros and a negative value (the chunked gate gradient never divides;
 * delta-paper's gate gradient never divides either). */
#define G_SPECIAL "delta-g-zero-negative"
#define G_SPECIAL_PAPER "delta-paper-g-zero-negative"

/* Field order: name, mech, B, T, H, dk, dv, t0, fmap, normalize, refresh, rho, u_scale, lambda0,
 * scale, has_u, has_beta, has_g, states_in, upstream, paper, chunk. */
static const gcase fd_cases[] = {
    {"softmax", VLA_MECH_SOFTMAX, 1, 7, 2, 3, 4, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 3},
    {"softmax-scale0.3", VLA_MECH_SOFTMAX, 2, 5, 1, 4, 2, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0.3, 0, 0, 0, 0, 0, 0, 3},
    {"linear", VLA_MECH_LINEAR, 2, 6, 1, 4, 2, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 4},
    {"linear-states-upstream", VLA_MECH_LINEAR, 1, 9, 2, 3, 4, 5, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 1, 1, 0,
     4},
    {"delta", VLA_MECH_DELTA, 1, 8, 1, 3, 4, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 3},
    {"delta-beta-g-states-upstream", VLA_MECH_DELTA, 1, 10, 2, 4, 3, 3, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1,
     1, 0, 4},
    {"delta-elu1-beta", VLA_MECH_DELTA, 2, 7, 1, 3, 2, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 1, 0, 0, 1, 0, 3},
    {"delta-g-only", VLA_MECH_DELTA, 1, 6, 1, 2, 3, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 0, 0, 0, 4},
    {G_SPECIAL, VLA_MECH_DELTA, 1, 11, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1, 1, 0, 4},
    {"vla", VLA_MECH_VLA, 1, 8, 1, 3, 4, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 1.0, 0.1, 0, 0, 0, 0, 0, 0, 0, 3},
    {"vla-u-su0.5", VLA_MECH_VLA, 1, 7, 2, 4, 3, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 0.5, 0.1, 0, 1, 0, 0, 0, 0, 0, 4},
    {"vla-su0.7-states", VLA_MECH_VLA, 2, 6, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 0.7, 0.1, 0, 0, 0, 0, 1, 1, 0, 4},
    /* R = 3 from t0 = 2: refreshes after tokens 0, 3, 6, 9 (positions 2, 5, 8, 11). */
    {"vla-refresh-t0-states-upstream", VLA_MECH_VLA, 1, 11, 1, 3, 4, 2, VLA_FMAP_NONE, 0, 3, 0.1, 1.0, 0.1, 0, 0, 0, 0,
     1, 1, 0, 4},
    {"vla-elu1-normalized-u-states", VLA_MECH_VLA, 1, 8, 1, 4, 3, 4, VLA_FMAP_ELU1, 1, 4, 0.5, 1.0, 0.1, 0, 1, 0, 0, 1,
     1, 0, 3},
    {"vla-elu1-normalized", VLA_MECH_VLA, 1, 9, 1, 3, 2, 0, VLA_FMAP_ELU1, 1, 0, 1e-3, 1.0, 0.1, 0, 0, 0, 0, 0, 1, 0,
     4},
    {"vla-elu1-unnormalized-lambda1", VLA_MECH_VLA, 1, 6, 1, 2, 3, 0, VLA_FMAP_ELU1, 0, 0, 1e-3, 1.0, 1.0, 0, 0, 0, 0,
     0, 1, 0, 4},
    /* The paper preset (R = 20) from t0 = 15: a refresh after token 4 (position 19). */
    {"vla-paper-t0-states-upstream", VLA_MECH_VLA, 1, 8, 1, 4, 4, 15, VLA_FMAP_ELU1, 1, 20, 1e-3, 0, 0.1, 0, 1, 0, 0,
     1, 1, 1, 3},
    {"vla-dk1", VLA_MECH_VLA, 1, 5, 1, 1, 2, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 1.0, 0.1, 0, 0, 0, 0, 1, 1, 0, 2},
    {"vla-bh4-refresh2", VLA_MECH_VLA, 2, 4, 2, 2, 3, 1, VLA_FMAP_NONE, 0, 2, 0.2, 1.0, 0.5, 0, 1, 0, 0, 1, 1, 0, 3},
    /* dk much larger than dv and the other way round (scratch sized by the wrong one shows here). */
    {"vla-elu1-normalized-u-dk9dv1", VLA_MECH_VLA, 1, 6, 2, 9, 1, 0, VLA_FMAP_ELU1, 1, 3, 0.1, 1.0, 0.1, 0, 1, 0, 0, 1,
     1, 0, 4},
    {"vla-dk1dv7", VLA_MECH_VLA, 1, 6, 1, 1, 7, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 1.0, 0.1, 0, 1, 0, 0, 1, 1, 0, 4},
    {"linear-dk9dv1", VLA_MECH_LINEAR, 1, 6, 1, 9, 1, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 4},
    {"delta-dk9dv1-beta-g", VLA_MECH_DELTA, 1, 6, 1, 9, 1, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1, 1, 0, 4},
    {"softmax-dk9dv1", VLA_MECH_SOFTMAX, 1, 6, 1, 9, 1, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 4},
    /* Chunks of one token, and one chunk longer than the piece. */
    {"delta-beta-g-chunk1", VLA_MECH_DELTA, 1, 5, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1, 1, 0, 1},
    {"vla-elu1-normalized-u-chunk1", VLA_MECH_VLA, 1, 5, 1, 3, 2, 1, VLA_FMAP_ELU1, 1, 2, 0.1, 1.0, 0.1, 0, 1, 0, 0, 1,
     1, 0, 1},
    {"linear-chunk64", VLA_MECH_LINEAR, 1, 9, 1, 3, 2, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 64},
    {"vla-chunk64", VLA_MECH_VLA, 1, 9, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 3, 0.1, 1.0, 0.1, 0, 0, 0, 0, 1, 1, 0, 64},
    /* The paper's DeltaNet: phi on q only, g [B,T,H,dv]; T = 10 with C = 4 (a short last chunk). */
    {"delta-paper-elu1", VLA_MECH_DELTA_PAPER, 1, 8, 1, 3, 4, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0,
     3},
    {"delta-paper-elu1-g-states-upstream", VLA_MECH_DELTA_PAPER, 1, 10, 2, 4, 3, 3, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0,
     0, 0, 1, 1, 1, 0, 4},
    {"delta-paper-none-g-upstream", VLA_MECH_DELTA_PAPER, 2, 6, 1, 2, 3, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 1,
     0, 1, 0, 4},
    {G_SPECIAL_PAPER, VLA_MECH_DELTA_PAPER, 1, 11, 1, 3, 2, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1, 0,
     4},
    {"delta-paper-dk9dv1-g", VLA_MECH_DELTA_PAPER, 1, 6, 1, 9, 1, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1,
     0, 4},
    {"delta-paper-dk1dv7-g", VLA_MECH_DELTA_PAPER, 1, 6, 1, 1, 7, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1,
     0, 4},
    {"delta-paper-T1-g", VLA_MECH_DELTA_PAPER, 1, 1, 2, 3, 4, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1, 0,
     4},
    {"delta-paper-g-chunk1", VLA_MECH_DELTA_PAPER, 1, 5, 1, 3, 2, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1,
     0, 1},
    {"delta-paper-g-chunk64", VLA_MECH_DELTA_PAPER, 1, 9, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1,
     0, 64},
};
#define N_FD ((int)(sizeof fd_cases / sizeof fd_cases[0]))

static int has_S(const gcase *c) { return c->mech != VLA_MECH_SOFTMAX; }
static int gate_width(const gcase *c) { return c->mech == VLA_MECH_DELTA_PAPER ? c->dv : 1; } /* g's row */
static int has_A(const gcase *c) { return c->mech == VLA_MECH_VLA; }
static int has_n(const gcase *c) { return c->mech == VLA_MECH_LINEAR || (c->mech == VLA_MECH_VLA && c->normalize); }

/* ---- one problem: float inputs (what the op sees) and random upstream gradients ---- */

enum { X_Q, X_K, X_V, X_U, X_BETA, X_G, X_S0, X_A0, X_N0, N_X };
enum { U_DO, U_DS, U_DA, U_DN, N_UP };
static const char *const g_names[N_X] = {"dq", "dk", "dv", "du", "dbeta", "dg", "dS_0", "dA_0", "dn_0"};

typedef struct problem {
    vla_attn_desc d;
    int B, T, H, dk, dv;
    int64_t t0;
    size_t n[N_X], nup[N_UP];
    float *x[N_X];  /* NULL where not used */
    float *up[N_UP];
} problem;

/* Away from elu's kink at 0 and from exact zeros. */
static void away_from_zero(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0.05f) x[i] = x[i] < 0 ? -0.05f - x[i] : 0.05f + x[i];
}

static void make_desc(const gcase *c, vla_attn_desc *d) {
    ck_assert_int_eq(vla_attn_desc_init(d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(d, "paper"), VLA_OK);
    d->feature_map = c->fmap;
    d->normalize_output = c->normalize;
    d->refresh = c->refresh;
    if (c->mech == VLA_MECH_VLA) d->refresh_size = c->rho, d->u_scale = c->u_scale, d->lambda0 = c->lambda0;
    d->scale = c->scale;
    d->chunk = c->chunk;
}

static void make_problem(const gcase *c, uint64_t seed, problem *p) {
    memset(p, 0, sizeof *p);
    make_desc(c, &p->d);
    p->B = c->B, p->T = c->T, p->H = c->H, p->dk = c->dk, p->dv = c->dv, p->t0 = c->t0;
    const size_t BTH = (size_t)c->B * c->T * c->H, BH = (size_t)c->B * c->H;
    const size_t nqk = BTH * c->dk, nvo = BTH * c->dv;
    const size_t ng = BTH * (size_t)gate_width(c);
    const size_t ns[N_X] = {nqk, nqk, nvo, nqk, BTH, ng, BH * c->dk * c->dv, BH * c->dk * c->dk, BH * c->dk};
    memcpy(p->n, ns, sizeof ns);
    const size_t nu[N_UP] = {nvo, ns[X_S0], ns[X_A0], ns[X_N0]};
    memcpy(p->nup, nu, sizeof nu);
    tu_rng r;
    tu_seed(&r, seed);
    p->x[X_Q] = tu_randn_new(&r, nqk), p->x[X_K] = tu_randn_new(&r, nqk), p->x[X_V] = tu_randn_new(&r, nvo);
    away_from_zero(p->x[X_Q], nqk), away_from_zero(p->x[X_K], nqk);
    if (c->has_u) p->x[X_U] = tu_randn_new(&r, nqk);
    if (c->has_beta) p->x[X_BETA] = malloc(BTH * sizeof(float)), tu_randu(&r, p->x[X_BETA], BTH, 0.2f, 1.0f);
    if (c->has_g) p->x[X_G] = malloc(ng * sizeof(float)), tu_randu(&r, p->x[X_G], ng, 0.5f, 1.0f);
    /* Zeros inside a chunk and on a chunk's first and last token, and a negative gate. */
    if (!strcmp(c->name, G_SPECIAL) || !strcmp(c->name, G_SPECIAL_PAPER))
        for (size_t i = 0; i < ng; i++)
            p->x[X_G][i] = i % 11 == 1 || i % 11 == 4 || i % 11 == 7 ? 0.0f : i % 11 == 9 ? -0.6f : p->x[X_G][i];
    if (c->states_in && has_S(c)) p->x[X_S0] = tu_rand_S0(&r, c->B, c->H, c->dk, c->dv);
    if (c->states_in && has_A(c)) p->x[X_A0] = tu_rand_A0(&r, c->B, c->H, c->dk, c->lambda0);
    if (c->states_in && has_n(c)) p->x[X_N0] = tu_rand_n0(&r, c->B, c->H, c->dk);
    p->up[U_DO] = tu_randn_new(&r, nvo);
    if (c->upstream && has_S(c)) p->up[U_DS] = tu_randn_new(&r, ns[X_S0]);
    if (c->upstream && has_A(c)) p->up[U_DA] = tu_randn_new(&r, ns[X_A0]);
    if (c->upstream && has_n(c)) p->up[U_DN] = tu_randn_new(&r, ns[X_N0]);
}

static void free_problem(problem *p) {
    for (int i = 0; i < N_X; i++) free(p->x[i]);
    for (int i = 0; i < N_UP; i++) free(p->up[i]);
}

/* Which gradients the op returns for this problem (every one the forward uses). */
static int grad_wanted(const problem *p, int i) {
    const vla_attn_desc *d = &p->d;
    switch (i) {
    case X_Q: case X_K: case X_V: return 1;
    case X_U: return p->x[X_U] != NULL;
    case X_BETA: return p->x[X_BETA] != NULL;
    case X_G: return p->x[X_G] != NULL;
    case X_S0: return d->mechanism != VLA_MECH_SOFTMAX;
    case X_A0: return d->mechanism == VLA_MECH_VLA;
    case X_N0: return d->mechanism == VLA_MECH_LINEAR || (d->mechanism == VLA_MECH_VLA && d->normalize_output);
    }
    return 0;
}

/* ---- the op under test ---- */

typedef struct grads {
    vla_status status;
    float *g[N_X]; /* NULL where not requested */
    size_t unwritten[N_X];
    char msg[512]; /* the failing call's message (a later download clears the library's) */
} grads;

/* Runs vla_attention_backward with algorithm `algo` on the CPU, requesting the gradients in
 * `want` (a bit per X_*), with every output poisoned first. */
static void run_backward(vla_backend *be, const problem *p, vla_algorithm algo, unsigned want, grads *out) {
    memset(out, 0, sizeof *out);
    vla_attn_desc d = p->d;
    d.algorithm = algo;
    vla_buffer *xb[N_X] = {0}, *ub[N_UP] = {0}, *gb[N_X] = {0};
    for (int i = 0; i < N_X; i++)
        if (p->x[i]) xb[i] = tu_buf_from(be, p->x[i], p->n[i]);
    for (int i = 0; i < N_UP; i++)
        if (p->up[i]) ub[i] = tu_buf_from(be, p->up[i], p->nup[i]);
    for (int i = 0; i < N_X; i++)
        if (want >> i & 1) gb[i] = tu_buf_new(be, p->n[i]); /* poisoned */
    vla_attn_args a = {.B = p->B, .T = p->T, .H = p->H, .dk = p->dk, .dv = p->dv, .t0 = p->t0};
    a.q = xb[X_Q], a.k = xb[X_K], a.v = xb[X_V], a.u = xb[X_U], a.beta = xb[X_BETA], a.g = xb[X_G];
    a.S_in = xb[X_S0], a.A_in = xb[X_A0], a.n_in = xb[X_N0];
    vla_attn_grads g = {.dO = ub[U_DO], .dS_end = ub[U_DS], .dA_end = ub[U_DA], .dn_end = ub[U_DN]};
    g.dq = gb[X_Q], g.dk = gb[X_K], g.dv = gb[X_V], g.du = gb[X_U], g.dbeta = gb[X_BETA], g.dg = gb[X_G];
    g.dS_0 = gb[X_S0], g.dA_0 = gb[X_A0], g.dn_0 = gb[X_N0];
    out->status = vla_attention_backward(be, &d, &a, &g);
    snprintf(out->msg, sizeof out->msg, "%s", vla_last_message());
    if (out->status != VLA_OK) fprintf(stderr, "  backward: %s\n", out->msg);
    for (int i = 0; i < N_X; i++)
        if (gb[i]) {
            out->g[i] = tu_buf_download_new(gb[i], p->n[i]);
            out->unwritten[i] = tu_count_poison(out->g[i], p->n[i]);
        }
    for (int i = 0; i < N_X; i++) vla_buffer_free(xb[i]), vla_buffer_free(gb[i]);
    for (int i = 0; i < N_UP; i++) vla_buffer_free(ub[i]);
}

static void free_grads(grads *g) {
    for (int i = 0; i < N_X; i++) free(g->g[i]);
}

static unsigned all_wanted(const problem *p) {
    unsigned w = 0;
    for (int i = 0; i < N_X; i++) w |= (unsigned)grad_wanted(p, i) << i;
    return w;
}

/* ---- finite differences of ref64_forward_f64 ---- */

typedef struct fd_ctx {
    const problem *p;
    double *x[N_X]; /* double copies; NULL where not used */
    double *up[N_UP];
    double *o, *S, *A, *n;
} fd_ctx;

static double dotd(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double loss(fd_ctx *f) {
    const problem *p = f->p;
    ck_assert_int_eq(ref64_forward_f64(&p->d, p->B, p->T, p->H, p->dk, p->dv, p->t0, f->x[X_Q], f->x[X_K], f->x[X_V],
                                       f->x[X_U], f->x[X_BETA], f->x[X_G], f->x[X_S0], f->x[X_A0], f->x[X_N0], f->o,
                                       f->up[U_DS] ? f->S : NULL, f->up[U_DA] ? f->A : NULL,
                                       f->up[U_DN] ? f->n : NULL),
                     0);
    double L = dotd(f->up[U_DO], f->o, p->nup[U_DO]);
    if (f->up[U_DS]) L += dotd(f->up[U_DS], f->S, p->nup[U_DS]);
    if (f->up[U_DA]) L += dotd(f->up[U_DA], f->A, p->nup[U_DA]);
    if (f->up[U_DN]) L += dotd(f->up[U_DN], f->n, p->nup[U_DN]);
    return L;
}

/* L with x[i][e] (and, for A_0 off the diagonal, its mirror) moved by s. */
static double loss_at(fd_ctx *f, int i, size_t e, size_t mirror, double s) {
    double *x = f->x[i];
    const double x0 = x[e], m0 = x[mirror];
    if (mirror != e) x[e] += s / 2, x[mirror] += s / 2;
    else x[e] += s;
    const double L = loss(f);
    x[e] = x0, x[mirror] = m0;
    return L;
}

/* The FD gradient of input i, in the layout the op returns. */
static double *fd_grad(fd_ctx *f, int i) {
    const problem *p = f->p;
    const size_t n = p->n[i];
    double *gd = calloc(n, sizeof *gd);
    if (!f->x[i]) { /* a default state the op was not given: differentiate at the default */
        return gd;
    }
    const int dk = p->dk;
    for (size_t e = 0; e < n; e++) {
        size_t mirror = e;
        if (i == X_A0) {
            const size_t base = e / ((size_t)dk * dk) * dk * dk, r = (e - base) / dk, c = (e - base) % dk;
            mirror = base + c * dk + r;
        }
        const double x = f->x[i][e], h = 1e-4 * (fabs(x) > 1 ? fabs(x) : 1);
        const double d1 = loss_at(f, i, e, mirror, h) - loss_at(f, i, e, mirror, -h);
        const double d2 = loss_at(f, i, e, mirror, 2 * h) - loss_at(f, i, e, mirror, -2 * h);
        gd[e] = (8 * d1 - d2) / (12 * h);
    }
    return gd;
}

/* Default states made explicit, so that their gradients can be differenced too. */
static void fd_init(fd_ctx *f, const problem *p) {
    memset(f, 0, sizeof *f);
    f->p = p;
    for (int i = 0; i < N_X; i++) {
        if (p->x[i]) f->x[i] = tu_to_double(p->x[i], p->n[i]);
        else if (grad_wanted(p, i) && i >= X_S0) {
            f->x[i] = calloc(p->n[i], sizeof(double));
            if (i == X_A0) /* I / lambda0 in every head */
                for (size_t e = 0; e < p->n[i]; e++)
                    if (e % ((size_t)p->dk * p->dk) % ((size_t)p->dk + 1) == 0) f->x[i][e] = 1.0 / p->d.lambda0;
        }
    }
    for (int i = 0; i < N_UP; i++)
        if (p->up[i]) f->up[i] = tu_to_double(p->up[i], p->nup[i]);
    f->o = malloc(p->nup[U_DO] * sizeof(double));
    f->S = malloc((p->n[X_S0] ? p->n[X_S0] : 1) * sizeof(double));
    f->A = malloc(p->n[X_A0] * sizeof(double));
    f->n = malloc(p->n[X_N0] * sizeof(double));
}

static void fd_free(fd_ctx *f) {
    for (int i = 0; i < N_X; i++) free(f->x[i]);
    for (int i = 0; i < N_UP; i++) free(f->up[i]);
    free(f->o), free(f->S), free(f->A), free(f->n);
}

/* Compares every returned gradient with a reference; prints one line; returns 1 when all pass. */
static int compare(const char *label, const problem *p, const grads *g, double *const ref[N_X], double tol,
                   double *worst) {
    char line[512];
    int n = snprintf(line, sizeof line, "  %-40s", label), ok = 1;
    for (int i = 0; i < N_X; i++) {
        if (!g->g[i]) continue;
        const double e = tu_relerr(g->g[i], ref[i], p->n[i]);
        const int pass = e < tol && g->unwritten[i] == 0;
        ok &= pass;
        if (worst && e > *worst) *worst = e;
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1e%s", g_names[i], e, pass ? "" : "(!)");
        if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    }
    fprintf(stderr, "%s\n", line);
    return ok;
}

static vla_algorithm algos_of(vla_mechanism m, vla_algorithm out[2]) {
    if (m == VLA_MECH_SOFTMAX) {
        out[0] = VLA_ALGO_FUSED;
        return 1;
    }
    if (m == VLA_MECH_DELTA_PAPER) { /* sequential only; AUTO must resolve to it */
        out[0] = VLA_ALGO_SEQUENTIAL;
        out[1] = VLA_ALGO_AUTO;
        return 2;
    }
    out[0] = VLA_ALGO_SEQUENTIAL;
    out[1] = VLA_ALGO_CHUNKED;
    return 2;
}

/* Is the chunked backward implemented? (UNSUPPORTED is reported, never passed.) */
static int chunked_supported(vla_backend *be, const problem *p) {
    grads g;
    run_backward(be, p, VLA_ALGO_CHUNKED, 1u << X_V, &g);
    const int ok = g.status != VLA_ERR_UNSUPPORTED;
    free_grads(&g);
    return ok;
}

/* ---- fd ---- */

START_TEST(test_fd) {
    const gcase *c = &fd_cases[_i];
    vla_backend *be = tu_open_cpu();
    problem p;
    make_problem(c, 1000 + (uint64_t)_i, &p);
    fd_ctx f;
    fd_init(&f, &p);
    double *fd[N_X] = {0};
    for (int i = 0; i < N_X; i++)
        if (grad_wanted(&p, i)) fd[i] = fd_grad(&f, i);
    vla_algorithm al[2];
    const int na = algos_of(c->mech, al);
    for (int j = 0; j < na; j++) {
        if (al[j] == VLA_ALGO_CHUNKED && !chunked_supported(be, &p)) {
            fprintf(stderr, "  %-40s chunked: not supported (skipped)\n", c->name);
            continue;
        }
        grads g;
        run_backward(be, &p, al[j], all_wanted(&p), &g);
        ck_assert_msg(g.status == VLA_OK, "%s/%s: status %s", c->name, vla_algorithm_name(al[j]),
                      vla_status_string(g.status));
        char label[96];
        snprintf(label, sizeof label, "%s/%s", c->name, vla_algorithm_name(al[j]));
        ck_assert_msg(compare(label, &p, &g, fd, FD_TOL, NULL), "%s: a gradient differs from the finite difference",
                      label);
        /* The check can fail: one element of one gradient moved by 1% of that gradient's norm. */
        if (j == 0) {
            for (int i = 0; i < N_X; i++) {
                if (!g.g[i]) continue;
                double nrm = 0;
                for (size_t e = 0; e < p.n[i]; e++) nrm += fd[i][e] * fd[i][e];
                if (nrm < 1e-20) continue; /* a gradient that is zero (vla with dk = 1: k^ = +-1) */
                const float keep = g.g[i][p.n[i] / 2];
                g.g[i][p.n[i] / 2] += (float)(0.01 * sqrt(nrm));
                ck_assert_msg(!compare("  (perturbed: must fail)", &p, &g, fd, FD_TOL, NULL),
                              "%s: a perturbed %s still passes", label, g_names[i]);
                g.g[i][p.n[i] / 2] = keep;
            }
        }
        free_grads(&g);
    }
    for (int i = 0; i < N_X; i++) free(fd[i]);
    fd_free(&f);
    free_problem(&p);
    vla_backend_close(be);
}
END_TEST

/* ---- precision against ref64_backward on longer pieces ---- */

static const gcase prec_cases[] = {
    {"softmax-T1024", VLA_MECH_SOFTMAX, 1, 1024, 2, 32, 16, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 64},
    {"linear-T1024", VLA_MECH_LINEAR, 1, 1024, 2, 16, 16, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 64},
    {"delta-beta-g-T1024", VLA_MECH_DELTA, 1, 1024, 2, 16, 16, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1, 1, 0,
     64},
    {"vla-T1024", VLA_MECH_VLA, 1, 1024, 2, 16, 16, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 1.0, 0.1, 0, 0, 0, 0, 1, 1, 0, 64},
    {"vla-paper-T1000-u", VLA_MECH_VLA, 1, 1000, 2, 16, 8, 7, VLA_FMAP_ELU1, 1, 20, 1e-3, 0, 0.1, 0, 1, 0, 0, 1, 1, 1,
     48},
    {"delta-paper-g-T1024", VLA_MECH_DELTA_PAPER, 1, 1024, 2, 16, 16, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1,
     1, 0, 64},
    {"delta-paper-T1000-dk24dv8", VLA_MECH_DELTA_PAPER, 1, 1000, 2, 24, 8, 9, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0,
     0, 1, 1, 0, 48},
};
#define N_PREC ((int)(sizeof prec_cases / sizeof prec_cases[0]))

/* ref64_backward's gradients of p (double, the op's layouts). */
static void ref_grads(const problem *p, double *ref[N_X]) {
    for (int i = 0; i < N_X; i++) ref[i] = calloc(p->n[i], sizeof(double));
    double *up[N_UP] = {0};
    for (int i = 0; i < N_UP; i++)
        if (p->up[i]) up[i] = tu_to_double(p->up[i], p->nup[i]);
    ref64_grads r = {.dO = up[U_DO], .dS_end = up[U_DS], .dA_end = up[U_DA], .dn_end = up[U_DN]};
    r.dq = ref[X_Q], r.dk = ref[X_K], r.dv = ref[X_V], r.du = ref[X_U], r.dbeta = ref[X_BETA], r.dg = ref[X_G];
    r.dS_0 = ref[X_S0], r.dA_0 = ref[X_A0], r.dn_0 = ref[X_N0];
    ck_assert_int_eq(ref64_backward(&p->d, p->B, p->T, p->H, p->dk, p->dv, p->t0, p->x[X_Q], p->x[X_K], p->x[X_V],
                                    p->x[X_U], p->x[X_BETA], p->x[X_G], p->x[X_S0], p->x[X_A0], p->x[X_N0], &r),
                     0);
    for (int i = 0; i < N_UP; i++) free(up[i]);
}

START_TEST(test_precision) {
    const gcase *c = &prec_cases[_i];
    vla_backend *be = tu_open_cpu();
    problem p;
    make_problem(c, 2000 + (uint64_t)_i, &p);
    double *ref[N_X];
    ref_grads(&p, ref);
    vla_algorithm al[2];
    const int na = algos_of(c->mech, al);
    double *first[N_X] = {0}; /* the first algorithm's gradients: the others must agree with them */
    for (int j = 0; j < na; j++) {
        if (al[j] == VLA_ALGO_CHUNKED && !chunked_supported(be, &p)) {
            fprintf(stderr, "  %-40s chunked: not supported (skipped)\n", c->name);
            continue;
        }
        grads g;
        run_backward(be, &p, al[j], all_wanted(&p), &g);
        ck_assert_int_eq(g.status, VLA_OK);
        char label[96];
        snprintf(label, sizeof label, "%s/%s", c->name, vla_algorithm_name(al[j]));
        ck_assert_msg(compare(label, &p, &g, ref, PREC_TOL, NULL), "%s: a gradient is off ref64_backward", label);
        if (j == 0) {
            for (int i = 0; i < N_X; i++)
                if (g.g[i]) first[i] = tu_to_double(g.g[i], p.n[i]);
        } else {
            snprintf(label, sizeof label, "%s: %s vs %s", c->name, vla_algorithm_name(al[j]),
                     vla_algorithm_name(al[0]));
            ck_assert_msg(compare(label, &p, &g, first, 1e-5, NULL), "%s: the algorithms disagree", label);
        }
        free_grads(&g);
    }
    for (int i = 0; i < N_X; i++) free(ref[i]), free(first[i]);
    free_problem(&p);
    vla_backend_close(be);
}
END_TEST

/* ---- chaining two pieces through the state gradients ---- */

static const gcase chain_cases[] = {
    {"linear", VLA_MECH_LINEAR, 2, 37, 1, 5, 4, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 8},
    {"delta-beta-g", VLA_MECH_DELTA, 1, 37, 2, 5, 4, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 1, 1, 0, 8},
    {"vla-paper-u", VLA_MECH_VLA, 1, 45, 2, 6, 3, 3, VLA_FMAP_ELU1, 1, 20, 1e-3, 0, 0.1, 0, 1, 0, 0, 1, 1, 1, 8},
    {"vla-refresh7", VLA_MECH_VLA, 1, 33, 1, 4, 5, 0, VLA_FMAP_NONE, 0, 7, 0.05, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 5},
    {"delta-paper-g", VLA_MECH_DELTA_PAPER, 1, 37, 2, 5, 4, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1, 0,
     8},
};
#define N_CHAIN ((int)(sizeof chain_cases / sizeof chain_cases[0]))

/* The piece [ta, tb) of p: its inputs, and its initial states from the forward of [0, ta). */
static void piece_of(const problem *p, int ta, int tb, problem *q) {
    memset(q, 0, sizeof *q);
    q->d = p->d;
    q->B = p->B, q->T = tb - ta, q->H = p->H, q->dk = p->dk, q->dv = p->dv, q->t0 = p->t0 + ta;
    const int gw = p->d.mechanism == VLA_MECH_DELTA_PAPER ? p->dv : 1;
    const int D[N_X] = {p->dk, p->dk, p->dv, p->dk, 1, gw};
    for (int i = 0; i < N_X; i++) {
        if (i < X_S0) {
            q->n[i] = p->n[i] / p->T * q->T;
            if (p->x[i]) q->x[i] = tu_slice_time(p->x[i], p->B, p->T, p->H, D[i], ta, tb);
        } else {
            q->n[i] = p->n[i];
        }
    }
    q->nup[U_DO] = p->nup[U_DO] / p->T * q->T;
    for (int i = U_DS; i < N_UP; i++) q->nup[i] = p->nup[i];
}

START_TEST(test_chain) {
    const gcase *c = &chain_cases[_i];
    vla_backend *be = tu_open_cpu();
    problem p;
    make_problem(c, 3000 + (uint64_t)_i, &p);
    const int split = p.T / 2 + 3;
    vla_algorithm al[2];
    const int na = algos_of(c->mech, al);
    for (int j = 0; j < na; j++) {
        if (al[j] == VLA_ALGO_CHUNKED && !chunked_supported(be, &p)) continue;
        grads whole;
        run_backward(be, &p, al[j], all_wanted(&p), &whole);
        ck_assert_int_eq(whole.status, VLA_OK);

        /* The forward of piece 1 gives piece 2's initial states. */
        problem p1, p2;
        piece_of(&p, 0, split, &p1);
        piece_of(&p, split, p.T, &p2);
        for (int i = X_S0; i < N_X; i++)
            if (p.x[i]) {
                p1.x[i] = malloc(p.n[i] * sizeof(float));
                memcpy(p1.x[i], p.x[i], p.n[i] * sizeof(float));
            }
        tu_problem tp = {.B = p1.B, .T = p1.T, .H = p1.H, .dk = p1.dk, .dv = p1.dv, .t0 = p1.t0};
        tp.q = p1.x[X_Q], tp.k = p1.x[X_K], tp.v = p1.x[X_V], tp.u = p1.x[X_U], tp.beta = p1.x[X_BETA];
        tp.g = p1.x[X_G], tp.S0 = p1.x[X_S0], tp.A0 = p1.x[X_A0], tp.n0 = p1.x[X_N0];
        tu_result fr;
        vla_attn_desc fd = p.d;
        fd.algorithm = VLA_ALGO_SEQUENTIAL;
        ck_assert_int_eq(tu_run(be, &fd, &tp, 0, &fr), VLA_OK);
        p2.x[X_S0] = fr.S, fr.S = NULL;
        if (has_A(c)) p2.x[X_A0] = fr.A, fr.A = NULL;
        if (has_n(c)) p2.x[X_N0] = fr.n, fr.n = NULL;
        tu_result_free(&fr);

        /* Piece 2 with the whole call's upstream; piece 1 with piece 2's state gradients. */
        p2.up[U_DO] = tu_slice_time(p.up[U_DO], p.B, p.T, p.H, p.dv, split, p.T);
        for (int i = U_DS; i < N_UP; i++)
            if (p.up[i]) {
                p2.up[i] = malloc(p.nup[i] * sizeof(float));
                memcpy(p2.up[i], p.up[i], p.nup[i] * sizeof(float));
            }
        grads g2;
        run_backward(be, &p2, al[j], all_wanted(&p2), &g2);
        ck_assert_int_eq(g2.status, VLA_OK);
        p1.up[U_DO] = tu_slice_time(p.up[U_DO], p.B, p.T, p.H, p.dv, 0, split);
        const int st[3] = {X_S0, X_A0, X_N0}, us[3] = {U_DS, U_DA, U_DN};
        for (int s = 0; s < 3; s++)
            if (g2.g[st[s]]) {
                p1.up[us[s]] = g2.g[st[s]];
                g2.g[st[s]] = NULL;
            }
        grads g1;
        run_backward(be, &p1, al[j], all_wanted(&p1), &g1);
        ck_assert_int_eq(g1.status, VLA_OK);

        /* Reassemble the per-token gradients along T and compare with the whole call's. */
        const int D[N_X] = {p.dk, p.dk, p.dv, p.dk, 1, gate_width(c)};
        double *ref[N_X] = {0};
        grads joined = {0};
        for (int i = 0; i < N_X; i++) {
            if (!whole.g[i]) continue;
            ref[i] = tu_to_double(whole.g[i], p.n[i]);
            joined.g[i] = malloc(p.n[i] * sizeof(float));
            if (i < X_S0) {
                tu_place_time(joined.g[i], g1.g[i], p.B, p.T, p.H, D[i], 0, split);
                tu_place_time(joined.g[i], g2.g[i], p.B, p.T, p.H, D[i], split, p.T);
            } else {
                memcpy(joined.g[i], g1.g[i], p.n[i] * sizeof(float));
            }
        }
        char label[96];
        snprintf(label, sizeof label, "chain %s/%s at %d", c->name, vla_algorithm_name(al[j]), split);
        ck_assert_msg(compare(label, &p, &joined, ref, 1e-5, NULL), "%s: the chained pieces differ", label);
        for (int i = 0; i < N_X; i++) free(ref[i]);
        free_grads(&joined), free_grads(&g1), free_grads(&g2), free_grads(&whole);
        free_problem(&p1), free_problem(&p2);
    }
    free_problem(&p);
    vla_backend_close(be);
}
END_TEST

/* ---- outputs: overwritten, optional, and nothing else written ---- */

START_TEST(test_partial_outputs) {
    static const gcase c = {"vla-u-states", VLA_MECH_VLA, 2, 19, 2, 5, 3, 0, VLA_FMAP_ELU1, 1, 4, 0.01, 1, 0.1, 0,
                            1, 0, 0, 1, 1, 0, 8};
    vla_backend *be = tu_open_cpu();
    problem p;
    make_problem(&c, 77, &p);
    grads full;
    run_backward(be, &p, VLA_ALGO_SEQUENTIAL, all_wanted(&p), &full);
    ck_assert_int_eq(full.status, VLA_OK);
    for (int i = 0; i < N_X; i++)
        if (full.g[i]) {
            ck_assert_msg(full.unwritten[i] == 0, "%s: %zu elements left unwritten", g_names[i], full.unwritten[i]);
            ck_assert_msg(tu_all_finite(full.g[i], p.n[i]), "%s: not finite", g_names[i]);
        }
    /* Each output alone gives the same values, bit for bit. */
    for (int i = 0; i < N_X; i++) {
        if (!full.g[i]) continue;
        grads one;
        run_backward(be, &p, VLA_ALGO_SEQUENTIAL, 1u << i, &one);
        ck_assert_int_eq(one.status, VLA_OK);
        ck_assert_msg(memcmp(one.g[i], full.g[i], p.n[i] * sizeof(float)) == 0, "%s alone differs", g_names[i]);
        free_grads(&one);
    }
    /* No output at all is a valid (empty) request. */
    grads none;
    run_backward(be, &p, VLA_ALGO_SEQUENTIAL, 0, &none);
    ck_assert_int_eq(none.status, VLA_OK);
    free_grads(&full);
    free_problem(&p);
    vla_backend_close(be);
}
END_TEST

/* The threads over heads and inside one head give the same gradients as one thread. */
START_TEST(test_threads) {
    static const gcase cs[] = {
        {"softmax", VLA_MECH_SOFTMAX, 1, 150, 1, 8, 5, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 64},
        {"vla", VLA_MECH_VLA, 2, 40, 3, 6, 5, 0, VLA_FMAP_NONE, 0, 3, 0.01, 1, 0.1, 0, 0, 0, 0, 1, 1, 0, 16},
        {"delta-paper", VLA_MECH_DELTA_PAPER, 2, 40, 3, 6, 5, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 1, 1, 0,
         16},
    };
    for (int k = 0; k < (int)(sizeof cs / sizeof cs[0]); k++) {
        vla_backend *be = tu_open_cpu();
        problem p;
        make_problem(&cs[k], 99, &p);
        vla_algorithm al[2];
        algos_of(cs[k].mech, al);
        grads g1, g4;
        ck_assert_int_eq(vla_backend_set_threads(be, 1), VLA_OK);
        run_backward(be, &p, al[0], all_wanted(&p), &g1);
        ck_assert_int_eq(vla_backend_set_threads(be, 4), VLA_OK);
        run_backward(be, &p, al[0], all_wanted(&p), &g4);
        ck_assert_int_eq(g1.status, VLA_OK);
        ck_assert_int_eq(g4.status, VLA_OK);
        for (int i = 0; i < N_X; i++)
            if (g1.g[i])
                ck_assert_msg(tu_relerr_ff(g4.g[i], g1.g[i], p.n[i]) < 1e-6, "%s %s: 4 threads differ from 1",
                              cs[k].name, g_names[i]);
        free_grads(&g1), free_grads(&g4);
        free_problem(&p);
        vla_backend_close(be);
    }
}
END_TEST

/* A backend without the backward (its slot NULL) answers VLA_ERR_UNSUPPORTED, and writes nothing. */
START_TEST(test_no_backward_slot) {
    vla_backend *be = tu_open_cpu();
    static const gcase c = {"vla", VLA_MECH_VLA, 1, 5, 1, 3, 2, 0, VLA_FMAP_NONE, 0, 0, 1e-3, 1, 0.1, 0, 0, 0, 0, 0,
                            0, 0, 4};
    problem p;
    make_problem(&c, 5, &p);
    const vla_backend_iface *orig = be->iface;
    vla_backend_iface none = *orig;
    none.attention_backward = NULL;
    be->iface = &none;
    grads g;
    run_backward(be, &p, VLA_ALGO_SEQUENTIAL, all_wanted(&p), &g);
    be->iface = orig;
    ck_assert_int_eq(g.status, VLA_ERR_UNSUPPORTED);
    ck_assert_msg(tu_has_word(g.msg, "backward"), "message \"%s\" does not say what is missing", g.msg);
    for (int i = 0; i < N_X; i++)
        if (g.g[i]) ck_assert_msg(g.unwritten[i] == p.n[i], "%s was written", g_names[i]);
    free_grads(&g);
    free_problem(&p);
    vla_backend_close(be);
}
END_TEST

/* A NaN in v at token J propagates (never finite garbage); softmax keeps the causal mask: rows
 * before J get finite dq (as its forward keeps o finite there). */
START_TEST(test_nan) {
    enum { J = 70 };
    static const gcase cs[] = {
        {"softmax", VLA_MECH_SOFTMAX, 1, 150, 2, 8, 5, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 64},
        {"linear", VLA_MECH_LINEAR, 1, 150, 2, 8, 5, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 0, 0, 0, 0, 32},
        {"delta", VLA_MECH_DELTA, 1, 150, 2, 8, 5, 0, VLA_FMAP_NONE, 0, 0, 0, 1, 0.1, 0, 0, 1, 1, 0, 0, 0, 32},
        {"vla", VLA_MECH_VLA, 1, 150, 2, 8, 5, 0, VLA_FMAP_ELU1, 1, 20, 1e-3, 1, 0.1, 0, 1, 0, 0, 0, 0, 0, 32},
        {"delta-paper", VLA_MECH_DELTA_PAPER, 1, 150, 2, 8, 5, 0, VLA_FMAP_ELU1, 0, 0, 0, 1, 0.1, 0, 0, 0, 1, 0, 0, 0,
         32},
    };
    vla_backend *be = tu_open_cpu();
    for (int k = 0; k < (int)(sizeof cs / sizeof cs[0]); k++) {
        problem p;
        make_problem(&cs[k], 55, &p);
        p.x[X_V][((size_t)J * p.H + 1) * p.dv] = NAN; /* token J of head 1 */
        vla_algorithm al[2];
        const int na = algos_of(cs[k].mech, al);
        for (int j = 0; j < na; j++) {
            grads g;
            run_backward(be, &p, al[j], all_wanted(&p), &g);
            ck_assert_int_eq(g.status, VLA_OK);
            size_t bad = 0;
            for (int i = 0; i < N_X; i++)
                if (g.g[i]) bad += tu_count_nonfinite(g.g[i], p.n[i]);
            fprintf(stderr, "  nan %s/%s: %zu non-finite gradient elements\n", cs[k].name, vla_algorithm_name(al[j]),
                    bad);
            ck_assert_msg(bad > 0, "%s/%s: a NaN input gave finite gradients", cs[k].name, vla_algorithm_name(al[j]));
            if (cs[k].mech == VLA_MECH_SOFTMAX)
                for (int t = 0; t < J; t++)
                    ck_assert_msg(tu_all_finite(g.g[X_Q] + ((size_t)t * p.H + 1) * p.dk, (size_t)p.dk),
                                  "softmax: dq of row %d before the NaN at %d is not finite", t, J);
            free_grads(&g);
        }
        free_problem(&p);
    }
    vla_backend_close(be);
}
END_TEST

Suite *grad_cpu_suite(void) {
    Suite *s = suite_create("grad_cpu");
    TCase *fd = tcase_create("fd");
    tcase_set_timeout(fd, 120);
    tcase_add_loop_test(fd, test_fd, 0, N_FD);
    suite_add_tcase(s, fd);
    TCase *prec = tcase_create("precision");
    tcase_set_timeout(prec, 120);
    tcase_add_loop_test(prec, test_precision, 0, N_PREC);
    suite_add_tcase(s, prec);
    TCase *other = tcase_create("chain-outputs-threads");
    tcase_set_timeout(other, 120);
    tcase_add_loop_test(other, test_chain, 0, N_CHAIN);
    tcase_add_test(other, test_partial_outputs);
    tcase_add_test(other, test_threads);
    tcase_add_test(other, test_nan);
    tcase_add_test(other, test_no_backward_slot);
    suite_add_tcase(s, other);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(grad_cpu_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
