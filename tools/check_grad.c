/* vla-check --grad: the backward op (vla_attention_backward, VLA-MATH 5) of every mechanism x
 * backward algorithm x backend against ref64's float64 backward (tests/ref64.c, itself checked
 * against finite differences of ref64's forward by tests/test_ref64_grad.c).
 *
 * Per case and backend it reports ||g - ref|| / ||ref|| (||g|| where ref = 0) for each gradient
 * the case requests: dq, dk, dv, and du, dbeta, dg, dS_0, dA_0 (its symmetric part, as the API
 * defines it), dn_0 where the mechanism and inputs have them. Tolerance: 1e-4 per tensor, the
 * forward's small-lambda0 bound (VLA-MATH 3); the backward chains as many float32 products as
 * the forward does twice over, and its long cases (T = 1024 at d = 32) are there to show where
 * that bound stands. A device without fp64 gets NO_FP64_FACTOR on its VLA cases, as the forward's.
 *
 * Like the forward's checks, a case fails on an error above tolerance, a NaN or Inf, a guard
 * byte changed past the end of an output (every gradient buffer is NaN-poisoned, with guard
 * bytes past its end), an input changed (the forward's inputs, initial states and upstream
 * gradients), or a status other than VLA_OK ("not supported" is a failure).
 *
 * Algorithms: the backward's own (auto, sequential, chunked; fused for softmax). Cases: edge
 * shapes (T = 1, dk = 1, dk = 256, dk != dv, T not a multiple of the chunk, B*H > 1), a piece
 * at t0 > 0 with states in (from a reference run of a prefix) and upstream dS_end, dA_end, dn_end,
 * only some outputs requested, beta and g (delta), the per-row gate g (delta-paper), u given, refresh points inside and at the
 * ends of chunks, normalised output, the paper preset (VLA), and T = 256, 1024 at d = 32. */
#include "check_common.h"
#include "ref64.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL_GRAD 1e-4
#define MAX_GRAD_CASES 1024

/* The gradients, in the order of the table's columns. */
enum { G_Q, G_K, G_V, G_U, G_BETA, G_G, G_S0, G_A0, G_N0, N_GRADS };
static const char *grad_names[N_GRADS] = {"dq", "dk", "dv", "du", "dbeta", "dg", "dS_0", "dA_0", "dn_0"};

/* ---- cases ---- */

static check_case *add(check_case *cs, int *n, vla_mechanism m, vla_algorithm a, const char *tag, int B, int T, int H,
                       int dk, int dv, int chunk) {
    check_case *c = &cs[(*n)++];
    memset(c, 0, sizeof *c);
    c->mech = m, c->algo = a;
    c->B = B, c->T = T, c->H = H, c->dk = dk, c->dv = dv, c->chunk = chunk;
    c->rho = 1e-3, c->lambda0 = 0.1, c->u_scale = 1.0;
    c->fmap = m == VLA_MECH_LINEAR || m == VLA_MECH_DELTA_PAPER ? VLA_FMAP_ELU1 : VLA_FMAP_NONE;
    c->tol = TOL_GRAD;
    snprintf(c->name, sizeof c->name, "%s-%s-%s", vla_mechanism_name(m), vla_algorithm_name(a), tag);
    return c;
}

static void set_paper(check_case *c) {
    c->paper = 1, c->has_u = 1, c->refresh = 20, c->rho = 1e-3, c->fmap = VLA_FMAP_ELU1, c->normalize = 1;
    c->u_scale = 0.0, c->lambda0 = 0.1;
}

static int build_grad_cases(check_case *cs, uint64_t seed, int long_cases) {
    int n = 0;
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        const vla_mechanism mech = (vla_mechanism)m;
        const int sm = mech == VLA_MECH_SOFTMAX, dp = mech == VLA_MECH_DELTA_PAPER;
        const vla_algorithm algos_sm[] = {VLA_ALGO_AUTO, VLA_ALGO_FUSED};
        const vla_algorithm algos_st[] = {VLA_ALGO_AUTO, VLA_ALGO_SEQUENTIAL, VLA_ALGO_CHUNKED};
        const int nalgo = sm || dp ? 2 : 3; /* delta-paper: auto and sequential (its only algorithm) */
        for (int ai = 0; ai < nalgo; ai++) {
            const vla_algorithm algo = sm ? algos_sm[ai] : algos_st[ai];
            const int is_auto = algo == VLA_ALGO_AUTO;
            check_case *c;
            /* Edge shapes; AUTO on two of them (it resolves to one of the others). */
            if (!is_auto) {
                /* Linear attention's dq at T = 1 or dk = 1 is proportional to eps (o = v x / (x + eps)
                 * with x = q~ . k~ there): float32 computes it as the difference of two terms
                 * about x / eps times larger (x is about dk): 1e-3 off at eps = 1e-4, 2e-5 at
                 * eps = 0.1. eps = 1 keeps the gradient well conditioned and the path the same. */
                const double eps_lin = mech == VLA_MECH_LINEAR ? 1.0 : 0;
                /* delta-paper: its gate on some edges (has_g = dp), not on others. */
                c = add(cs, &n, mech, algo, "t1", 1, 1, 1, 8, 8, 64);
                c->eps = eps_lin, c->has_g = dp;
                add(cs, &n, mech, algo, "tail37c16", 1, 37, 1, 8, 8, 16); /* T not a multiple of the chunk */
                c = add(cs, &n, mech, algo, "dk1", 1, 20, 1, 1, 3, 8);
                c->eps = eps_lin, c->has_g = dp;
                add(cs, &n, mech, algo, "dk256", 1, 9, 1, 256, 16, 4)->has_g = dp; /* the largest dk; 9 = 2 chunks + 1 */
            }
            c = add(cs, &n, mech, algo, "dk16dv24", 1, 40, 2, 16, 24, 16);
            c->upstream = !sm;
            add(cs, &n, mech, algo, "bh6", 2, 33, 3, 8, 12, 8); /* B*H > 1 */
            if (is_auto) continue;
            if (sm) {
                add(cs, &n, mech, algo, "scale0.3", 1, 30, 2, 8, 8, 64)->scale = 0.3;
                add(cs, &n, mech, algo, "some-outputs", 1, 20, 1, 8, 8, 64)->partial = 1;
            } else {
                /* A piece at t0 = 17 whose states come from a reference run of the 11 tokens
                 * before it, with the loss's gradients of its final states given. */
                c = add(cs, &n, mech, algo, "states-t0", 1, 29, 2, 12, 10, 8);
                c->prefix = 11, c->t0 = 17, c->upstream = 1;
                if (mech == VLA_MECH_DELTA) c->has_beta = c->has_g = 1;
                if (mech == VLA_MECH_VLA) c->refresh = 7, c->rho = 0.1, c->has_u = 1;
                c->has_g |= dp;
                add(cs, &n, mech, algo, "upstream", 1, 24, 2, 8, 6, 8)->upstream = 1;
                c = add(cs, &n, mech, algo, "some-outputs", 1, 20, 1, 8, 8, 8);
                c->partial = 1, c->upstream = 1;
            }
            if (mech == VLA_MECH_DELTA) {
                c = add(cs, &n, mech, algo, "beta-g", 1, 30, 2, 8, 8, 8);
                c->has_beta = c->has_g = 1;
                c = add(cs, &n, mech, algo, "elu1-beta", 1, 25, 1, 8, 8, 8);
                c->fmap = VLA_FMAP_ELU1, c->has_beta = 1;
            }
            if (dp) {
                /* The gate per value row; no feature map; dv = 256 with dk = 1 and the other way
                 * round; the trainer's shape (B = 64, H = 4, T = 73, d = 32). */
                add(cs, &n, mech, algo, "g", 1, 30, 2, 8, 8, 8)->has_g = 1;
                c = add(cs, &n, mech, algo, "phi-none-g", 1, 25, 1, 8, 6, 8);
                c->fmap = VLA_FMAP_NONE, c->has_g = 1, c->upstream = 1;
                c = add(cs, &n, mech, algo, "dk1dv256-g", 1, 11, 1, 1, 256, 4);
                c->has_g = 1, c->upstream = 1;
                c = add(cs, &n, mech, algo, "dk256dv1-g", 1, 11, 1, 256, 1, 4);
                c->has_g = 1, c->upstream = 1;
                c = add(cs, &n, mech, algo, "train-shape-g", 64, 73, 4, 32, 32, 64);
                c->has_g = 1;
            }
            if (mech == VLA_MECH_VLA) {
                c = add(cs, &n, mech, algo, "u-su0.5", 1, 30, 2, 8, 8, 8);
                c->has_u = 1, c->u_scale = 0.5;
                /* R = 5 with chunks of 8: refreshes after tokens 4, 9, 14, ... fall inside chunks. */
                c = add(cs, &n, mech, algo, "refresh-inside", 1, 37, 1, 8, 8, 8);
                c->refresh = 5, c->rho = 0.1;
                /* R = 8 = the chunk from t0 = 0: every refresh is a chunk's last token, the last
                 * one the piece's last token. */
                c = add(cs, &n, mech, algo, "refresh-ends", 1, 24, 1, 8, 8, 8);
                c->refresh = 8, c->rho = 0.1, c->upstream = 1;
                c = add(cs, &n, mech, algo, "normalized", 1, 40, 2, 12, 8, 16);
                c->fmap = VLA_FMAP_ELU1, c->normalize = 1, c->has_u = 1, c->upstream = 1;
                add(cs, &n, mech, algo, "elu1", 1, 25, 1, 8, 8, 8)->fmap = VLA_FMAP_ELU1;
                add(cs, &n, mech, algo, "lambda1", 1, 30, 1, 8, 8, 8)->lambda0 = 1.0;
                /* The paper preset, u given, from t0 = 9 with states in: a refresh at position 19. */
                c = add(cs, &n, mech, algo, "paper", 2, 61, 2, 16, 16, 16);
                set_paper(c);
                c->prefix = 9, c->t0 = 9, c->upstream = 1;
            }
            /* Longer sequences at d = 32: the precision bound. */
            c = add(cs, &n, mech, algo, "T256d32", 1, 256, 1, 32, 32, 64);
            c->upstream = !sm, c->has_g = dp;
            c = add(cs, &n, mech, algo, "T1024d32", 1, 1024, 1, 32, 32, 64);
            c->upstream = !sm, c->has_g = dp;
            if (mech == VLA_MECH_VLA) {
                c = add(cs, &n, mech, algo, "T1024d32-paper", 1, 1024, 1, 32, 32, 64);
                set_paper(c);
            }
            if (long_cases) {
                c = add(cs, &n, mech, algo, "T32768d32", 1, 32768, 1, 32, 32, 64);
                c->upstream = !sm;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        /* The prefix occupies positions [t0 - prefix, t0). */
        if (cs[i].t0 < cs[i].prefix) cs[i].t0 += cs[i].prefix;
        cs[i].seed = seed * 1000003ull + (uint64_t)i * 7919ull + 0x6a09e667ull;
    }
    return n;
}

int grad_select(const check_filter *f, uint64_t seed, int long_cases, check_case **out) {
    check_case *all = xmalloc(sizeof *all * MAX_GRAD_CASES);
    const int nall = build_grad_cases(all, seed, long_cases);
    check_case *cs = xmalloc(sizeof *cs * (nall ? nall : 1));
    int n = 0;
    for (int i = 0; i < nall; i++)
        if (filter_match(f, &all[i])) cs[n++] = all[i];
    free(all);
    *out = cs;
    return n;
}

void grad_list(const check_case *cases, int n) {
    char sh[48], desc[256];
    for (int i = 0; i < n; i++) {
        shape_str(&cases[i], sh, sizeof sh);
        describe_case(&cases[i], desc, sizeof desc);
        printf("%-32s %-8s %-10s %-18s tol=%.0e %s\n", cases[i].name, vla_mechanism_name(cases[i].mech),
               vla_algorithm_name(cases[i].algo), sh, cases[i].tol, desc);
    }
    printf("%d cases\n", n);
}

/* ---- data: upstream gradients and the reference ---- */

typedef struct grad_data {
    float *dO, *dS_end, *dA_end, *dn_end; /* upstream, as the library gets them */
    size_t size[N_GRADS];                 /* elements of each gradient */
    int want[N_GRADS];                    /* requested from the library */
    double *ref[N_GRADS];                 /* ref64's gradients (all of them) */
} grad_data;

static double *to_double(const float *x, size_t n) {
    if (!x) return NULL;
    double *y = xmalloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static void make_grad_data(const check_case *c, const case_data *cd, grad_data *gd) {
    memset(gd, 0, sizeof *gd);
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nqk = (size_t)B * T * H * dk, nvo = (size_t)B * T * H * dv, nbt = (size_t)B * T * H;
    const size_t nS = (size_t)B * H * dk * dv, nA = (size_t)B * H * dk * dk, nn = (size_t)B * H * dk;
    const size_t sizes[N_GRADS] = {nqk, nqk, nvo, nqk, nbt, nbt * gate_width(c), nS, nA, nn};
    memcpy(gd->size, sizes, sizeof sizes);
    rng r = {c->seed ^ 0xbb67ae8584caa73bull};
    gd->dO = rand_tensor(&r, nvo, 0, 0, 1);
    if (c->upstream) {
        /* dA_end is not made symmetric: only its symmetric part can matter (A_T is symmetric), and
         * a backward that assumes it is symmetric would show here. */
        if (has_S(c)) gd->dS_end = rand_tensor(&r, nS, 0, 0, 1);
        if (has_A(c)) gd->dA_end = rand_tensor(&r, nA, 0, 0, 1);
        if (has_n(c)) gd->dn_end = rand_tensor(&r, nn, 0, 0, 1);
    }
    const int avail[N_GRADS] = {1, 1, 1, c->has_u, c->has_beta, c->has_g, has_S(c), has_A(c), has_n(c)};
    for (int i = 0; i < N_GRADS; i++) {
        gd->want[i] = avail[i];
        gd->ref[i] = xmalloc(sizes[i] * sizeof(double));
    }
    if (c->partial) {
        /* Some outputs only: dv for softmax, dk and dS_0 for the others. */
        for (int i = 0; i < N_GRADS; i++) gd->want[i] = 0;
        if (c->mech == VLA_MECH_SOFTMAX) gd->want[G_V] = 1;
        else gd->want[G_K] = gd->want[G_S0] = 1;
    }
    double *dO = to_double(gd->dO, nvo), *dS = to_double(gd->dS_end, nS), *dA = to_double(gd->dA_end, nA);
    double *dn = to_double(gd->dn_end, nn);
    ref64_grads gr = {dO,         dS,         dA,         dn,         gd->ref[G_Q],  gd->ref[G_K], gd->ref[G_V],
                      gd->ref[G_U], gd->ref[G_BETA], gd->ref[G_G], gd->ref[G_S0], gd->ref[G_A0], gd->ref[G_N0]};
    vla_attn_desc d;
    desc_for(c, &d);
    if (ref64_backward(&d, B, T, H, dk, dv, c->t0, cd->q, cd->k, cd->v, cd->u, cd->beta, cd->g, cd->S0, cd->A0, cd->n0,
                       &gr) != 0) {
        fprintf(stderr, "vla-check: ref64_backward refused case %s\n", c->name);
        exit(EXIT_FAILED);
    }
    free(dO), free(dS), free(dA), free(dn);
}

static void free_grad_data(grad_data *gd) {
    free(gd->dO), free(gd->dS_end), free(gd->dA_end), free(gd->dn_end);
    for (int i = 0; i < N_GRADS; i++) free(gd->ref[i]);
}

/* ---- one case on one backend ---- */

typedef struct grad_result {
    double err[N_GRADS]; /* -1: not requested */
    double tol;
    int ok;
    uint64_t hash; /* FNV-1a over the bytes of every requested gradient, in column order */
    char note[256];
} grad_result;

static void add_note(grad_result *r, const char *what) {
    const size_t len = strlen(r->note);
    snprintf(r->note + len, sizeof r->note - len, "%s", what);
}

static void run_grad_case(const check_case *c, const case_data *cd, const grad_data *gd, vla_backend *be,
                          grad_result *r) {
    memset(r, 0, sizeof *r);
    r->tol = tolerance(c, be);
    for (int i = 0; i < N_GRADS; i++) r->err[i] = -1;
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nqk = gd->size[G_Q], nvo = gd->size[G_V], nbt = gd->size[G_BETA], ng = gd->size[G_G];
    const size_t nS = gd->size[G_S0], nA = gd->size[G_A0], nn = gd->size[G_N0];
    vla_attn_desc d;
    desc_for(c, &d);

    /* Inputs: the forward's (its initial states where the case has them) and the upstream. */
    vla_buffer *bq = input(be, cd->q, nqk), *bk = input(be, cd->k, nqk), *bv = input(be, cd->v, nvo);
    vla_buffer *bu = input(be, cd->u, nqk), *bb = input(be, cd->beta, nbt), *bg = input(be, cd->g, ng);
    vla_buffer *S_in = input(be, cd->S0, nS), *A_in = input(be, cd->A0, nA), *n_in = input(be, cd->n0, nn);
    vla_buffer *bdO = input(be, gd->dO, nvo), *bdS = input(be, gd->dS_end, nS), *bdA = input(be, gd->dA_end, nA);
    vla_buffer *bdn = input(be, gd->dn_end, nn);
    vla_buffer *out[N_GRADS] = {0};
    int alloc_bad = !bq || !bk || !bv || !bdO || (cd->u && !bu) || (cd->beta && !bb) || (cd->g && !bg) ||
                    (cd->S0 && !S_in) || (cd->A0 && !A_in) || (cd->n0 && !n_in) || (gd->dS_end && !bdS) ||
                    (gd->dA_end && !bdA) || (gd->dn_end && !bdn);
    for (int i = 0; i < N_GRADS; i++)
        if (gd->want[i] && !(out[i] = guarded(be, gd->size[i] * sizeof(float), NULL))) alloc_bad = 1;

    vla_status st = VLA_ERR_OUT_OF_MEMORY;
    if (!alloc_bad) {
        vla_attn_args a = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = c->t0};
        a.q = bq, a.k = bk, a.v = bv, a.u = bu, a.beta = bb, a.g = bg;
        a.S_in = S_in, a.A_in = A_in, a.n_in = n_in;
        vla_attn_grads g = {.dO = bdO, .dS_end = bdS, .dA_end = bdA, .dn_end = bdn};
        g.dq = out[G_Q], g.dk = out[G_K], g.dv = out[G_V], g.du = out[G_U], g.dbeta = out[G_BETA], g.dg = out[G_G];
        g.dS_0 = out[G_S0], g.dA_0 = out[G_A0], g.dn_0 = out[G_N0];
        st = vla_attention_backward(be, &d, &a, &g);
    }
    int ok = 1;
    if (st != VLA_OK) {
        ok = 0;
        char msg[220];
        snprintf(msg, sizeof msg, "%s: %.180s", st == VLA_ERR_UNSUPPORTED ? "not supported" : vla_status_string(st),
                 vla_backend_message(be));
        add_note(r, msg);
    } else {
        int nonfinite = 0, guard_bad = 0;
        r->hash = FNV_OFFSET;
        size_t most = 0;
        for (int i = 0; i < N_GRADS; i++)
            if (gd->size[i] > most) most = gd->size[i];
        float *x = xmalloc(most * sizeof *x);
        for (int i = 0; i < N_GRADS; i++) {
            if (!out[i]) continue;
            guard_bad |= fetch_guarded(out[i], gd->size[i] * sizeof(float), x);
            int nf = 0;
            r->err[i] = relerr(x, gd->ref[i], gd->size[i], &nf);
            nonfinite |= nf;
            r->hash = fnv1a(r->hash, x, gd->size[i] * sizeof(float));
            if (r->err[i] > r->tol || isnan(r->err[i])) ok = 0;
        }
        free(x);
        const int input_changed =
            !unchanged(bq, cd->q, nqk) || !unchanged(bk, cd->k, nqk) || !unchanged(bv, cd->v, nvo) ||
            !unchanged(bu, cd->u, nqk) || !unchanged(bb, cd->beta, nbt) || !unchanged(bg, cd->g, ng) ||
            !unchanged(S_in, cd->S0, nS) || !unchanged(A_in, cd->A0, nA) || !unchanged(n_in, cd->n0, nn) ||
            !unchanged(bdO, gd->dO, nvo) || !unchanged(bdS, gd->dS_end, nS) || !unchanged(bdA, gd->dA_end, nA) ||
            !unchanged(bdn, gd->dn_end, nn);
        if (nonfinite) ok = 0, add_note(r, "NaN/Inf in a gradient; ");
        if (guard_bad) ok = 0, add_note(r, "guard bytes past a gradient changed; ");
        if (input_changed) ok = 0, add_note(r, "an input buffer changed; ");
    }
    r->ok = ok;
    vla_buffer *all[] = {bq, bk, bv, bu, bb, bg, S_in, A_in, n_in, bdO, bdS, bdA, bdn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) vla_buffer_free(all[i]);
    for (int i = 0; i < N_GRADS; i++) vla_buffer_free(out[i]);
}

/* ---- the table ---- */

int grad_run(const check_case *cases, int n, vla_backend **bes, const char (*names)[64], int nbe, int hash) {
    printf("%-32s %-12s %-10s %-18s %-9s %-7s %-4s ", "case", "backend", "algorithm", "shape(BxTxHxdk/dv)", "error",
           "tol", "ok");
    for (int i = 0; i < N_GRADS; i++) printf(" %-8s", grad_names[i]);
    printf(" %snote\n", hash ? "hash             " : "");
    int passed = 0, failed = 0;
    const clock_t t_start = clock();
    for (int i = 0; i < n; i++) {
        const check_case *c = &cases[i];
        case_data cd;
        grad_data gd;
        make_data(c, &cd);
        make_grad_data(c, &cd, &gd);
        for (int j = 0; j < nbe; j++) {
            grad_result r;
            run_grad_case(c, &cd, &gd, bes[j], &r);
            double mx = -1;
            for (int k = 0; k < N_GRADS; k++)
                if (r.err[k] > mx || isnan(r.err[k])) mx = r.err[k];
            char sh[48], em[16];
            shape_str(c, sh, sizeof sh);
            err_str(mx, em, sizeof em);
            printf("%-32s %-12s %-10s %-18s %-9s %-7.0e %-4s ", c->name, names[j], vla_algorithm_name(c->algo), sh, em,
                   r.tol, r.ok ? "ok" : "FAIL");
            for (int k = 0; k < N_GRADS; k++) {
                char e[16];
                err_str(r.err[k], e, sizeof e);
                printf(" %-8s", e);
            }
            if (hash) printf(" %016llx", (unsigned long long)r.hash);
            printf(" %s\n", r.note);
            if (r.ok) passed++;
            else failed++;
        }
        fflush(stdout);
        free_grad_data(&gd);
        free_data(&cd);
    }
    fprintf(stderr, "vla-check: %.1f s of CPU time\n", (double)(clock() - t_start) / CLOCKS_PER_SEC);
    printf("%d passed, %d failed\n", passed, failed);
    return failed;
}
