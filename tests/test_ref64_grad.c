/* ref64's backward (ref64_backward_f64) against central finite differences of ref64's forward,
 * for every mechanism and option of VLA-MATH 5, on tiny shapes (T <= 10, dk, dv <= 4).
 *
 * The loss is L = <dO, o> + <dS_end, S_T> + <dA_end, A_T> + <dn_end, n_T> with random upstream
 * gradients; each input element x gets the fourth-order stencil
 *   dL/dx ~ (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / (12 h),   h = 1e-4 max(1, |x|),
 * whose truncation error is O(h^4) and rounding error about 1e-16 |L| / h, both far below the
 * 1e-7 bound. A is symmetric, so A_0 is perturbed along symmetric directions (A_ij and A_ji by h/2
 * each), which gives the symmetric part the backward returns. Inputs stay away from the points
 * where a derivative jumps: |x| >= 0.05 where elu + 1 applies, every normalised vector has a
 * norm either far above eps or (the `floors` cases, which check VLA-MATH 5's convention that a
 * binding floor is a constant) far below it, and 1 + u.z >= 1 (A positive definite). In the
 * floors cases a tiny row's step is 1e-3 |x|, so that the row stays below the floor.
 *
 * Per case and tensor it prints ||g_ref - g_fd|| / ||g_fd|| (the absolute norm when g_fd = 0)
 * and fails above 1e-7. Exit status 0 when every tensor passes, 1 otherwise. */
#include "ref64.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-7

typedef struct fd_case {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv;
    int64_t t0;
    vla_feature_map fmap; /* delta, vla, delta-paper (linear: always elu + 1) */
    int normalize, refresh;
    double rho, u_scale, lambda0, scale; /* 0: the default */
    int has_u, has_beta, has_g;
    int states_in; /* random S_0, A_0, n_0 (else the defaults, passed explicitly) */
    int upstream;  /* random dS_end, dA_end, dn_end where the mechanism has those states */
    int paper;     /* vla_attn_desc_preset "paper" */
    int floors;    /* rows where the eps floors bind (see make_problem) */
} fd_case;

#define SM VLA_MECH_SOFTMAX
#define LIN VLA_MECH_LINEAR
#define DN VLA_MECH_DELTA
#define VLA VLA_MECH_VLA
#define DP VLA_MECH_DELTA_PAPER
static const fd_case cases[] = {
    {"softmax", SM, .B = 1, .T = 7, .H = 2, .dk = 3, .dv = 4},
    {"softmax-scale0.3", SM, .B = 2, .T = 5, .H = 1, .dk = 4, .dv = 2, .scale = 0.3},
    {"linear", LIN, .B = 2, .T = 6, .H = 1, .dk = 4, .dv = 2},
    {"linear-states-upstream", LIN, .B = 1, .T = 8, .H = 2, .dk = 3, .dv = 4, .t0 = 5, .states_in = 1, .upstream = 1},
    {"delta", DN, .B = 1, .T = 8, .H = 1, .dk = 3, .dv = 4},
    {"delta-beta-g-states-upstream", DN, .B = 1, .T = 9, .H = 2, .dk = 4, .dv = 3, .t0 = 3, .has_beta = 1,
     .has_g = 1, .states_in = 1, .upstream = 1},
    {"delta-elu1-beta", DN, .B = 2, .T = 7, .H = 1, .dk = 3, .dv = 2, .fmap = VLA_FMAP_ELU1, .has_beta = 1,
     .upstream = 1},
    {"delta-g-only", DN, .B = 1, .T = 6, .H = 1, .dk = 2, .dv = 3, .has_g = 1},
    {"vla", VLA, .B = 1, .T = 8, .H = 1, .dk = 3, .dv = 4},
    {"vla-u-su0.5", VLA, .B = 1, .T = 7, .H = 2, .dk = 4, .dv = 3, .u_scale = 0.5, .has_u = 1},
    /* R = 3 from t0 = 2: refreshes after tokens 0, 3, 6, 9 (positions 2, 5, 8, 11). */
    {"vla-refresh-t0-states-upstream", VLA, .B = 1, .T = 10, .H = 1, .dk = 3, .dv = 4, .t0 = 2, .refresh = 3,
     .rho = 0.1, .states_in = 1, .upstream = 1},
    {"vla-elu1-normalized-u-states", VLA, .B = 1, .T = 8, .H = 1, .dk = 4, .dv = 3, .t0 = 4, .fmap = VLA_FMAP_ELU1,
     .normalize = 1, .refresh = 4, .rho = 0.5, .has_u = 1, .states_in = 1, .upstream = 1},
    {"vla-elu1-unnormalized", VLA, .B = 1, .T = 6, .H = 1, .dk = 2, .dv = 3, .fmap = VLA_FMAP_ELU1, .lambda0 = 1.0,
     .upstream = 1},
    /* The paper preset (R = 20) from t0 = 15: a refresh after token 4 (position 19). fmap and
     * normalize repeat the preset's (the test's own bookkeeping reads them). */
    {"vla-paper-t0-states-upstream", VLA, .B = 1, .T = 8, .H = 1, .dk = 4, .dv = 4, .t0 = 15, .fmap = VLA_FMAP_ELU1,
     .normalize = 1, .has_u = 1, .states_in = 1, .upstream = 1, .paper = 1},
    {"vla-dk1", VLA, .B = 1, .T = 5, .H = 1, .dk = 1, .dv = 2, .states_in = 1, .upstream = 1},
    {"vla-bh4-refresh2", VLA, .B = 2, .T = 4, .H = 2, .dk = 2, .dv = 3, .t0 = 1, .refresh = 2, .rho = 0.2,
     .lambda0 = 0.5, .has_u = 1, .states_in = 1, .upstream = 1},
    {"delta-floor", DN, .B = 1, .T = 6, .H = 1, .dk = 3, .dv = 2, .has_beta = 1, .upstream = 1, .floors = 1},
    {"vla-floors-normalized-u", VLA, .B = 1, .T = 7, .H = 1, .dk = 3, .dv = 2, .fmap = VLA_FMAP_ELU1, .normalize = 1,
     .has_u = 1, .states_in = 1, .upstream = 1, .floors = 1},
    {"vla-floor-k", VLA, .B = 1, .T = 6, .H = 1, .dk = 3, .dv = 3, .refresh = 3, .rho = 0.1, .upstream = 1,
     .floors = 1},
    /* The paper's DeltaNet: phi on q only, a gate per value row (g [B,T,H,dv]). */
    {"delta-paper-elu1", DP, .B = 1, .T = 8, .H = 1, .dk = 3, .dv = 4, .fmap = VLA_FMAP_ELU1},
    {"delta-paper-elu1-g-states-upstream", DP, .B = 1, .T = 9, .H = 2, .dk = 4, .dv = 3, .t0 = 3,
     .fmap = VLA_FMAP_ELU1, .has_g = 1, .states_in = 1, .upstream = 1},
    {"delta-paper-none-g-upstream", DP, .B = 2, .T = 6, .H = 1, .dk = 2, .dv = 3, .has_g = 1, .upstream = 1},
    {"delta-paper-none-states", DP, .B = 1, .T = 5, .H = 1, .dk = 3, .dv = 2, .states_in = 1},
    {"delta-paper-dk1-g", DP, .B = 1, .T = 5, .H = 1, .dk = 1, .dv = 2, .fmap = VLA_FMAP_ELU1, .has_g = 1,
     .states_in = 1, .upstream = 1},
    {"delta-paper-floor-g", DP, .B = 1, .T = 6, .H = 1, .dk = 3, .dv = 2, .fmap = VLA_FMAP_ELU1, .has_g = 1,
     .upstream = 1, .floors = 1},
};
#undef SM
#undef LIN
#undef DN
#undef VLA
#undef DP
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int has_S(const fd_case *c) { return c->mech != VLA_MECH_SOFTMAX; }
static int has_A(const fd_case *c) { return c->mech == VLA_MECH_VLA; }
static int has_n(const fd_case *c) { return c->mech == VLA_MECH_LINEAR || (c->mech == VLA_MECH_VLA && c->normalize); }

/* A problem: inputs and upstream gradients, all double. */
typedef struct problem {
    vla_attn_desc d;
    size_t nqk, nvo, nbt, ng, nS, nA, nn; /* ng: g's size ([B,T,H], delta-paper [B,T,H,dv]) */
    double *q, *k, *v, *u, *beta, *g, *S0, *A0, *n0;
    double *dO, *dS_end, *dA_end, *dn_end;
} problem;

static double *alloc0(size_t n) {
    double *x = calloc(n ? n : 1, sizeof *x);
    if (!x) {
        fprintf(stderr, "test_ref64_grad: out of memory\n");
        exit(1);
    }
    return x;
}

/* N(0, 1) with |x| >= 0.05 (elu + 1's second derivative jumps at 0). */
static void randn_away(tu_rng *r, double *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double y = tu_normal(r);
        x[i] = fabs(y) < 0.05 ? copysign(0.05 + fabs(y), y) : y;
    }
}

static void make_problem(const fd_case *c, uint64_t seed, problem *p) {
    memset(p, 0, sizeof *p);
    tu_rng r;
    tu_seed(&r, seed);
    vla_attn_desc_init(&p->d, c->mech);
    if (c->paper) vla_attn_desc_preset(&p->d, "paper");
    else if (c->mech == VLA_MECH_SOFTMAX) p->d.scale = c->scale;
    else if (c->mech != VLA_MECH_LINEAR) {
        p->d.feature_map = c->fmap;
        if (c->mech == VLA_MECH_VLA) {
            p->d.normalize_output = c->normalize, p->d.refresh = c->refresh;
            if (c->rho > 0) p->d.refresh_size = c->rho;
            if (c->u_scale > 0) p->d.u_scale = c->u_scale;
            if (c->lambda0 > 0) p->d.lambda0 = c->lambda0;
        }
    }
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    p->nqk = (size_t)B * T * H * dk, p->nvo = (size_t)B * T * H * dv, p->nbt = (size_t)B * T * H;
    p->ng = c->mech == VLA_MECH_DELTA_PAPER ? p->nvo : p->nbt;
    p->nS = (size_t)B * H * dk * dv, p->nA = (size_t)B * H * dk * dk, p->nn = (size_t)B * H * dk;
    p->q = alloc0(p->nqk), p->k = alloc0(p->nqk), p->v = alloc0(p->nvo);
    randn_away(&r, p->q, p->nqk), randn_away(&r, p->k, p->nqk), randn_away(&r, p->v, p->nvo);
    if (c->has_u) p->u = alloc0(p->nqk), randn_away(&r, p->u, p->nqk);
    if (c->has_beta) {
        p->beta = alloc0(p->nbt);
        for (size_t i = 0; i < p->nbt; i++) p->beta[i] = 0.1 + 0.9 * tu_uniform(&r);
    }
    if (c->has_g) {
        p->g = alloc0(p->ng);
        for (size_t i = 0; i < p->ng; i++) p->g[i] = 0.5 + 0.5 * tu_uniform(&r);
    }
    /* States: always passed (the defaults when not states_in) so that their gradients can be
     * differenced; NULL states are checked against these separately. */
    p->S0 = alloc0(p->nS), p->A0 = alloc0(p->nA), p->n0 = alloc0(p->nn);
    for (int bh = 0; bh < B * H; bh++) {
        double *A = p->A0 + (size_t)bh * dk * dk;
        if (c->states_in) {
            /* Symmetric positive definite, about I / lambda0. */
            double *M = alloc0((size_t)dk * dk);
            for (int i = 0; i < dk * dk; i++) M[i] = tu_normal(&r);
            for (int i = 0; i < dk; i++)
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int m = 0; m < dk; m++) s += M[i * dk + m] * M[j * dk + m];
                    A[i * dk + j] = A[j * dk + i] = (0.4 * s / dk + (i == j ? 0.6 : 0.0)) / p->d.lambda0;
                }
            free(M);
        } else {
            for (int i = 0; i < dk; i++) A[i * dk + i] = 1.0 / p->d.lambda0;
        }
    }
    if (c->states_in) {
        for (size_t i = 0; i < p->nS; i++) p->S0[i] = 0.3 * tu_normal(&r);
        for (size_t i = 0; i < p->nn; i++) p->n0[i] = 0.5 + 2.5 * tu_uniform(&r);
    }
    if (c->floors)
        /* Per head: k at token 2 with ||phi(k)|| about 1e-5, below eps (k^ = phi(k) / eps; delta-paper
         * maps no k, so its k is scaled as without a map);
         * VLA's k at token 5 with ||phi(k)|| about 1e-9, so that ||A k^|| < eps too (a's floor). With
         * elu + 1 that is k = -12 and -23, without a map k scaled by 1e-6 and 1e-10. With elu + 1,
         * q at token 4 is -15: q~ . n is about 1e-6, below eps (the normalised output's floor).
         * u at token 3 scaled by 1e-5. */
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < dk; i++) {
                    const int tk[2] = {2 % T, 5 % T};
                    for (int m = 0; m < 2; m++) {
                        double *x = p->k + (((size_t)b * T + tk[m]) * H + h) * dk + i;
                        const int deep = m && c->mech == VLA_MECH_VLA; /* only VLA has a */
                        const int k_mapped = c->fmap == VLA_FMAP_ELU1 && c->mech != VLA_MECH_DELTA_PAPER;
                        *x = k_mapped ? (deep ? -23.0 : -12.0) - 0.1 * i : *x * (deep ? 1e-10 : 1e-6);
                    }
                    if (c->fmap == VLA_FMAP_ELU1) p->q[(((size_t)b * T + 4 % T) * H + h) * dk + i] = -15.0 + 0.1 * i;
                    if (p->u) p->u[(((size_t)b * T + 3 % T) * H + h) * dk + i] *= 1e-5;
                }
    p->dO = alloc0(p->nvo);
    for (size_t i = 0; i < p->nvo; i++) p->dO[i] = tu_normal(&r);
    if (c->upstream) {
        /* dA_end is not symmetric: only its symmetric part can matter, which the test covers too. */
        if (has_S(c)) p->dS_end = alloc0(p->nS);
        if (has_A(c)) p->dA_end = alloc0(p->nA);
        if (has_n(c)) p->dn_end = alloc0(p->nn);
        if (p->dS_end)
            for (size_t i = 0; i < p->nS; i++) p->dS_end[i] = tu_normal(&r);
        if (p->dA_end)
            for (size_t i = 0; i < p->nA; i++) p->dA_end[i] = tu_normal(&r);
        if (p->dn_end)
            for (size_t i = 0; i < p->nn; i++) p->dn_end[i] = tu_normal(&r);
    }
}

static void free_problem(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->u), free(p->beta), free(p->g), free(p->S0), free(p->A0), free(p->n0);
    free(p->dO), free(p->dS_end), free(p->dA_end), free(p->dn_end);
}

static double sum_prod(const double *a, const double *b, size_t n) {
    double s = 0;
    if (a && b)
        for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double loss(const fd_case *c, const problem *p) {
    double *o = alloc0(p->nvo), *S = alloc0(p->nS), *A = alloc0(p->nA), *n = alloc0(p->nn);
    if (ref64_forward_f64(&p->d, c->B, c->T, c->H, c->dk, c->dv, c->t0, p->q, p->k, p->v, p->u, p->beta, p->g, p->S0,
                          p->A0, p->n0, o, S, A, n) != 0) {
        fprintf(stderr, "test_ref64_grad: ref64_forward_f64 refused case %s\n", c->name);
        exit(1);
    }
    const double L = sum_prod(p->dO, o, p->nvo) + sum_prod(p->dS_end, S, p->nS) + sum_prod(p->dA_end, A, p->nA) +
                     sum_prod(p->dn_end, n, p->nn);
    free(o), free(S), free(A), free(n);
    return L;
}

/* The stencil along direction (x[i] += s0 h, x[j] += s1 h) (j < 0: one element). */
static double fd(const fd_case *c, problem *p, double *x, size_t i, long j, double s0, double s1) {
    /* The floors cases' tiny rows (|x| < 1e-4; every other input is 0 or >= 0.05) get a step
     * relative to themselves: normalize() bends at the scale of the vector's own norm. */
    const double h = c->floors && x[i] != 0 && fabs(x[i]) < 1e-3 ? 1e-3 * fabs(x[i]) : 1e-4 * fmax(1.0, fabs(x[i]));
    const double xi = x[i], xj = j >= 0 ? x[j] : 0;
    double Lv[4];
    const double steps[4] = {h, -h, 2 * h, -2 * h};
    for (int m = 0; m < 4; m++) {
        x[i] = xi + s0 * steps[m];
        if (j >= 0) x[j] = xj + s1 * steps[m];
        Lv[m] = loss(c, p);
    }
    x[i] = xi;
    if (j >= 0) x[j] = xj;
    return (8.0 * (Lv[0] - Lv[1]) - (Lv[2] - Lv[3])) / (12.0 * h);
}

static double *fd_grad(const fd_case *c, problem *p, double *x, size_t n) {
    double *gfd = alloc0(n);
    for (size_t i = 0; i < n; i++) gfd[i] = fd(c, p, x, i, -1, 1.0, 0.0);
    return gfd;
}

/* Along symmetric directions E = (e_i e_j^T + e_j e_i^T) / 2: <G, E> = sym(G)_ij. */
static double *fd_grad_sym(const fd_case *c, problem *p, double *A, int BH, int dk) {
    double *gfd = alloc0((size_t)BH * dk * dk);
    for (int bh = 0; bh < BH; bh++)
        for (int i = 0; i < dk; i++)
            for (int j = 0; j <= i; j++) {
                const size_t ij = ((size_t)bh * dk + i) * dk + j, ji = ((size_t)bh * dk + j) * dk + i;
                const double gv = i == j ? fd(c, p, A, ij, -1, 1.0, 0.0) : fd(c, p, A, ij, (long)ji, 0.5, 0.5);
                gfd[ij] = gfd[ji] = gv;
            }
    return gfd;
}

static double relerr(const double *x, const double *ref, size_t n) {
    double num = 0, den = 0, xs = 0;
    for (size_t i = 0; i < n; i++) {
        num += (x[i] - ref[i]) * (x[i] - ref[i]);
        den += ref[i] * ref[i];
        xs += x[i] * x[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(xs);
}

static int run_case(const fd_case *c, uint64_t seed, double *worst) {
    problem p;
    make_problem(c, seed, &p);
    const int BH = c->B * c->H;
    double *dq = alloc0(p.nqk), *dk = alloc0(p.nqk), *dv = alloc0(p.nvo), *du = alloc0(p.nqk);
    double *dbeta = alloc0(p.nbt), *dg = alloc0(p.ng), *dS0 = alloc0(p.nS), *dA0 = alloc0(p.nA), *dn0 = alloc0(p.nn);
    ref64_grads gr = {p.dO, p.dS_end, p.dA_end, p.dn_end, dq, dk, dv, du, dbeta, dg, dS0, dA0, dn0};
    int ok = 1, refused = 0;
    if (ref64_backward_f64(&p.d, c->B, c->T, c->H, c->dk, c->dv, c->t0, p.q, p.k, p.v, p.u, p.beta, p.g, p.S0, p.A0,
                           p.n0, &gr) != 0) {
        printf("%-34s backward refused the case  FAIL\n", c->name);
        ok = 0, refused = 1;
    }
    struct {
        const char *name;
        double *got, *x;
        size_t n;
        int on, sym;
    } t[] = {
        {"dq", dq, p.q, p.nqk, 1, 0},
        {"dk", dk, p.k, p.nqk, 1, 0},
        {"dv", dv, p.v, p.nvo, 1, 0},
        {"du", du, p.u, p.nqk, p.u != NULL, 0},
        {"dbeta", dbeta, p.beta, p.nbt, p.beta != NULL, 0},
        {"dg", dg, p.g, p.ng, p.g != NULL, 0},
        {"dS_0", dS0, p.S0, p.nS, has_S(c), 0},
        {"dA_0", dA0, p.A0, p.nA, has_A(c), 1},
        {"dn_0", dn0, p.n0, p.nn, has_n(c), 0},
    };
    char line[512];
    size_t len = snprintf(line, sizeof line, "%-34s", c->name);
    for (size_t i = 0; i < sizeof t / sizeof t[0] && !refused; i++) {
        if (!t[i].on) continue;
        double *gfd = t[i].sym ? fd_grad_sym(c, &p, t[i].x, BH, c->dk) : fd_grad(c, &p, t[i].x, t[i].n);
        const double e = relerr(t[i].got, gfd, t[i].n);
        free(gfd);
        const int pass = e <= TOL;
        ok &= pass;
        if (e > *worst || isnan(e)) *worst = e;
        len += snprintf(line + len, sizeof line - len, " %s %.1e%s", t[i].name, e, pass ? "" : " FAIL");
    }
    /* States not given must mean exactly the defaults: the same gradients as the explicit ones. */
    if (ok) {
        const size_t ns[9] = {p.nqk, p.nqk, p.nvo, p.nqk, p.nbt, p.ng, p.nS, p.nA, p.nn};
        double *g2[9];
        for (int i = 0; i < 9; i++) g2[i] = alloc0(ns[i]);
        ref64_grads gr2 = {p.dO, p.dS_end, p.dA_end, p.dn_end, g2[0], g2[1], g2[2], g2[3], g2[4], g2[5], g2[6], g2[7], g2[8]};
        if (!c->states_in) {
            ref64_backward_f64(&p.d, c->B, c->T, c->H, c->dk, c->dv, c->t0, p.q, p.k, p.v, p.u, p.beta, p.g, NULL, NULL,
                               NULL, &gr2);
            const double *g1[9] = {dq, dk, dv, du, dbeta, dg, dS0, dA0, dn0};
            for (int i = 0; i < 9; i++)
                if (relerr(g2[i], g1[i], ns[i]) > 1e-14) {
                    ok = 0;
                    len += snprintf(line + len, sizeof line - len, " NULL states differ from the defaults (tensor %d)", i);
                    break;
                }
        }
        for (int i = 0; i < 9; i++) free(g2[i]);
    }
    printf("%s%s\n", line, ok ? "  ok" : "  FAIL");
    free(dq), free(dk), free(dv), free(du), free(dbeta), free(dg), free(dS0), free(dA0), free(dn0);
    free_problem(&p);
    return ok;
}

int main(void) {
    int failed = 0;
    double worst = 0;
    printf("ref64 backward vs 4th-order central differences of ref64 forward; ||g - g_fd|| / ||g_fd|| <= %.0e\n", TOL);
    for (int i = 0; i < N_CASES; i++) failed += !run_case(&cases[i], 1000 + (uint64_t)i, &worst);
    printf("worst relative error %.2e\n", worst);
    printf("%d passed, %d failed\n", N_CASES - failed, failed);
    return failed ? 1 : 0;
}
