/* Properties VLA-MATH states, checked on every algorithm:
 *  - memory: u not given, phi none, orthonormal keys: n <= dk writes are recalled exactly,
 *    S_n k_i = v_i (read from S_out, computed in double);
 *  - A is the explicit inverse (A0^{-1} + sum u u^T)^{-1} when R = 0 (Gauss-Jordan here);
 *  - non-finite inputs propagate: a NaN in k at token 10 makes that head's outputs from token
 *    10 on non-finite (chunked forms may also poison earlier tokens of the same chunk, never
 *    finite garbage), its final state non-finite, other heads untouched;
 *  - determinism: the same call twice is bit-identical. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"

/* ---- memory property ---- */

/* Orthonormal rows: Gram-Schmidt (twice, for accuracy) of random vectors, in double. */
static void orthonormal_rows(tu_rng *r, double *K, int n, int d) {
    for (int i = 0; i < n; i++) {
        double *x = K + (size_t)i * d;
        for (int j = 0; j < d; j++) x[j] = tu_normal(r);
        for (int pass = 0; pass < 2; pass++)
            for (int p = 0; p < i; p++) {
                const double *y = K + (size_t)p * d;
                double c = 0;
                for (int j = 0; j < d; j++) c += x[j] * y[j];
                for (int j = 0; j < d; j++) x[j] -= c * y[j];
            }
        double nrm = 0;
        for (int j = 0; j < d; j++) nrm += x[j] * x[j];
        nrm = sqrt(nrm);
        for (int j = 0; j < d; j++) x[j] /= nrm;
    }
}

typedef struct mem_case {
    int n, dk, dv, chunk, states;
    double lambda0;
} mem_case;

static const mem_case mem_cases[] = {
    {16, 16, 12, 4, 0, 0.1}, {8, 16, 12, 64, 0, 0.1}, {16, 16, 12, 5, 1, 0.1},
    {5, 8, 3, 2, 0, 1.0},    {24, 24, 24, 8, 0, 0.1}, {32, 32, 16, 16, 0, 0.5},
};
#define N_MEM ((int)(sizeof mem_cases / sizeof mem_cases[0]))

START_TEST(test_memory) {
    const mem_case *c = &mem_cases[_i];
    const int B = 1, H = 2, T = c->n, dk = c->dk, dv = c->dv;
    tu_rng rng;
    tu_seed(&rng, 9000 + (uint64_t)_i);
    tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p);
    float *q = tu_randn_new(&rng, nqk), *k = malloc(nqk * sizeof *k), *v = tu_randn_new(&rng, nvo);
    double *K = malloc((size_t)T * dk * sizeof *K);
    for (int h = 0; h < H; h++) {
        orthonormal_rows(&rng, K, T, dk);
        /* Scale each key (normalize(k) is the same key) to show the property does not need
         * unit inputs. */
        for (int t = 0; t < T; t++)
            for (int i = 0; i < dk; i++) k[((size_t)t * H + h) * dk + i] = (float)(K[t * dk + i] * (0.5 + t % 3));
    }
    float *S0 = c->states ? tu_rand_S0(&rng, B, H, dk, dv) : NULL;
    p.q = q, p.k = k, p.v = v, p.S0 = S0;
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    d.chunk = c->chunk;
    d.lambda0 = c->lambda0;
    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(VLA_MECH_VLA, algos);
    char why[2048] = "";
    int failures = 0;
    fprintf(stderr, "[memory] n=%d dk=%d dv=%d chunk=%d lambda0=%g%s\n", T, dk, dv, c->chunk, c->lambda0,
            c->states ? " S0 random" : "");
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result r;
        tu_run(be, &d, &p, 0, &r);
        ck_assert_msg(r.status == VLA_OK, "%s: %s", vla_algorithm_name(algos[ai]), vla_backend_message(be));
        /* S k^_i in double from the stored S^T [dk, dv], against v_i. */
        double num = 0, den = 0;
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float *kt = k + ((size_t)t * H + h) * dk;
                double kn = 0;
                for (int i = 0; i < dk; i++) kn += (double)kt[i] * kt[i];
                kn = sqrt(kn);
                for (int j = 0; j < dv; j++) {
                    double s = 0;
                    for (int i = 0; i < dk; i++) s += (double)r.S[((size_t)h * dk + i) * dv + j] * (kt[i] / kn);
                    double vj = v[((size_t)t * H + h) * dv + j];
                    num += (s - vj) * (s - vj);
                    den += vj * vj;
                }
            }
        double err = sqrt(num / den);
        int ok = err < 1e-5 && r.S_unwritten == 0;
        fprintf(stderr, "  %-12s recall ||S k_i - v_i|| / ||v|| = %.2e%s\n", vla_algorithm_name(algos[ai]), err,
                ok ? "" : "  FAIL");
        if (!ok) {
            failures++;
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%s: recall error %.2e; ", vla_algorithm_name(algos[ai]), err);
        }
        tu_result_free(&r);
    }
    vla_backend_close(be);
    free(q), free(k), free(v), free(K), free(S0);
    ck_assert_msg(failures == 0, "memory property: %s", why);
}
END_TEST

/* ---- A is the explicit inverse ---- */

/* In-place inverse of the n x n matrix M by Gauss-Jordan with partial pivoting. */
static int invert(double *M, int n) {
    double *I = calloc((size_t)n * n, sizeof *I);
    for (int i = 0; i < n; i++) I[i * n + i] = 1;
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(M[r * n + c]) > fabs(M[piv * n + c])) piv = r;
        if (M[piv * n + c] == 0) {
            free(I);
            return -1;
        }
        for (int j = 0; j < n; j++) {
            double t = M[c * n + j];
            M[c * n + j] = M[piv * n + j], M[piv * n + j] = t;
            t = I[c * n + j];
            I[c * n + j] = I[piv * n + j], I[piv * n + j] = t;
        }
        double inv = 1.0 / M[c * n + c];
        for (int j = 0; j < n; j++) M[c * n + j] *= inv, I[c * n + j] *= inv;
        for (int r = 0; r < n; r++) {
            if (r == c) continue;
            double f = M[r * n + c];
            if (f == 0) continue;
            for (int j = 0; j < n; j++) M[r * n + j] -= f * M[c * n + j], I[r * n + j] -= f * I[c * n + j];
        }
    }
    memcpy(M, I, (size_t)n * n * sizeof *M);
    free(I);
    return 0;
}

typedef struct inv_case {
    int with_u, elu1, with_A0, T, dk, chunk;
    double lambda0, u_scale;
} inv_case;

static const inv_case inv_cases[] = {
    {0, 0, 0, 40, 8, 16, 0.1, 1.0}, {1, 0, 0, 40, 8, 16, 0.1, 1.0},  {1, 0, 1, 40, 8, 7, 0.1, 1.0},
    {0, 1, 0, 40, 8, 16, 0.1, 0.0}, {1, 1, 1, 70, 16, 16, 0.1, 0.0}, {0, 0, 1, 33, 12, 64, 1.0, 2.0},
};
#define N_INV ((int)(sizeof inv_cases / sizeof inv_cases[0]))

START_TEST(test_A_inverse) {
    const inv_case *c = &inv_cases[_i];
    const int B = 1, H = 2, T = c->T, dk = c->dk, dv = 6;
    tu_rng rng;
    tu_seed(&rng, 9500 + (uint64_t)_i);
    tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p);
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = c->with_u ? tu_randn_new(&rng, nqk) : NULL;
    float *A0 = c->with_A0 ? tu_rand_A0(&rng, B, H, dk, c->lambda0) : NULL;
    p.q = q, p.k = k, p.v = v, p.u = u, p.A0 = A0;
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    d.chunk = c->chunk;
    d.lambda0 = c->lambda0;
    d.u_scale = c->u_scale;
    if (c->elu1) d.feature_map = VLA_FMAP_ELU1;
    const double su = c->u_scale != 0 ? c->u_scale : 1.0 / sqrt((double)dk);
    const double eps = d.eps;

    /* Expected A per head: (A0^{-1} + sum_t u_t u_t^T)^{-1}, u_t as VLA-MATH defines it. */
    double *Aexp = malloc((size_t)H * dk * dk * sizeof *Aexp), *M = malloc((size_t)dk * dk * sizeof *M);
    double *ut = malloc((size_t)dk * sizeof *ut);
    for (int h = 0; h < H; h++) {
        if (A0) {
            for (int i = 0; i < dk * dk; i++) M[i] = A0[(size_t)h * dk * dk + i];
            ck_assert_int_eq(invert(M, dk), 0);
        } else {
            for (int i = 0; i < dk * dk; i++) M[i] = (i % (dk + 1) == 0) ? c->lambda0 : 0.0;
        }
        for (int t = 0; t < T; t++) {
            const float *src = (u ? u : k) + ((size_t)t * H + h) * dk;
            double nrm = 0;
            for (int i = 0; i < dk; i++) {
                double x = src[i];
                if (!u && c->elu1) x = x > 0 ? x + 1 : exp(x); /* u = s_u k^, k^ = normalize(phi(k)) */
                ut[i] = x;
                nrm += x * x;
            }
            nrm = sqrt(nrm);
            if (nrm < eps) nrm = eps;
            for (int i = 0; i < dk; i++) ut[i] = su * ut[i] / nrm;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++) M[i * dk + j] += ut[i] * ut[j];
        }
        ck_assert_int_eq(invert(M, dk), 0);
        memcpy(Aexp + (size_t)h * dk * dk, M, (size_t)dk * dk * sizeof *M);
    }

    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(VLA_MECH_VLA, algos);
    char why[2048] = "";
    int failures = 0;
    fprintf(stderr, "[A inverse] T=%d dk=%d u %s, phi %s, A0 %s, lambda0 %g, s_u %g, chunk %d\n", T, dk,
            u ? "given" : "= s_u k^", c->elu1 ? "elu1" : "none", A0 ? "random SPD" : "I/lambda0", c->lambda0, su,
            c->chunk);
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result r;
        tu_run(be, &d, &p, 0, &r);
        ck_assert_msg(r.status == VLA_OK, "%s: %s", vla_algorithm_name(algos[ai]), vla_backend_message(be));
        double err = tu_relerr(r.A, Aexp, (size_t)H * dk * dk);
        int ok = err < 1e-5 && r.A_unwritten == 0;
        fprintf(stderr, "  %-12s ||A - inverse|| / ||inverse|| = %.2e%s\n", vla_algorithm_name(algos[ai]), err,
                ok ? "" : "  FAIL");
        if (!ok) {
            failures++;
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%s: %.2e; ", vla_algorithm_name(algos[ai]), err);
        }
        tu_result_free(&r);
    }
    vla_backend_close(be);
    free(q), free(k), free(v), free(u), free(A0), free(Aexp), free(M), free(ut);
    ck_assert_msg(failures == 0, "A != explicit inverse: %s", why);
}
END_TEST

/* ---- non-finite inputs propagate ---- */

typedef struct nan_case {
    vla_mechanism mech;
    int with_u, elu1_norm, with_beta_g;
} nan_case;

static const nan_case nan_cases[] = {
    {VLA_MECH_SOFTMAX, 0, 0, 0}, {VLA_MECH_LINEAR, 0, 0, 0}, {VLA_MECH_DELTA, 0, 0, 1},
    {VLA_MECH_DELTA, 0, 0, 0},   {VLA_MECH_VLA, 0, 0, 0},    {VLA_MECH_VLA, 1, 1, 0},
};
#define N_NAN ((int)(sizeof nan_cases / sizeof nan_cases[0]))

START_TEST(test_nan_propagates) {
    const nan_case *c = &nan_cases[_i];
    const int B = 2, T = 30, H = 3, dk = 8, dv = 6, C = 8, TN = 10, HN = 1, BN = 1;
    tu_rng rng;
    tu_seed(&rng, 9700 + (uint64_t)_i);
    tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p), nbt = tu_nbt(&p);
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = c->with_u ? tu_randn_new(&rng, nqk) : NULL, *beta = NULL, *g = NULL;
    if (c->with_beta_g) {
        beta = malloc(nbt * sizeof *beta), g = malloc(nbt * sizeof *g);
        tu_randu(&rng, beta, nbt, 0.0f, 1.0f), tu_randu(&rng, g, nbt, 0.0f, 1.0f);
    }
    float *kn = malloc(nqk * sizeof *kn);
    memcpy(kn, k, nqk * sizeof *kn);
    kn[(((size_t)BN * T + TN) * H + HN) * dk + 2] = NAN;
    vla_attn_desc d;
    vla_attn_desc_init(&d, c->mech);
    d.chunk = C;
    if (c->elu1_norm) d.feature_map = VLA_FMAP_ELU1, d.normalize_output = 1;
    tu_problem pc = p, pn = p;
    pc.q = q, pc.k = k, pc.v = v, pc.u = u, pc.beta = beta, pc.g = g;
    pn = pc;
    pn.k = kn;
    double *ro = malloc(nvo * sizeof *ro);
    ck_assert_int_eq(ref64_forward(&d, B, T, H, dk, dv, 0, q, k, v, u, beta, g, NULL, NULL, NULL, ro, NULL, NULL, NULL),
                     0);

    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(c->mech, algos);
    char why[4096] = "";
    int failures = 0;
    fprintf(stderr, "[nan] %s%s%s%s: NaN in k at (b=%d, t=%d, h=%d), chunk %d\n", vla_mechanism_name(c->mech),
            c->with_u ? " u" : "", c->with_beta_g ? " beta g" : "", c->elu1_norm ? " elu1 normalised" : "", BN, TN, HN, C);
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result rc, rn;
        tu_run(be, &d, &pc, 0, &rc);
        tu_run(be, &d, &pn, 0, &rn);
        ck_assert_msg(rc.status == VLA_OK, "clean run: %s", vla_backend_message(be));
        vla_algorithm ran = rn.resolved;
        int chunky = ran == VLA_ALGO_CHUNKED || ran == VLA_ALGO_TWO_LEVEL;
        char an[48];
        snprintf(an, sizeof an, "%s%s%s", algos[ai] == VLA_ALGO_AUTO ? "auto->" : "", vla_algorithm_name(ran), "");
        char msg[512] = "";
        if (rn.status != VLA_OK) {
            /* Rejecting non-finite input with a status would also be a documented behaviour. */
            snprintf(msg, sizeof msg, "status %s (%s)", vla_status_string(rn.status), vla_backend_message(be));
        } else {
            size_t chunk_start = (size_t)(TN / C) * C;
            size_t bad_after = 0, bad_before = 0, garbage = 0, early_nan = 0, other_diff = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < H; h++) {
                        size_t row = (((size_t)b * T + t) * H + h) * dv;
                        const float *x = rn.o + row, *xc = rc.o + row;
                        if (b != BN || h != HN) { /* untouched: bit-identical to the clean run */
                            if (memcmp(x, xc, (size_t)dv * sizeof *x) != 0 || !tu_all_finite(x, dv)) other_diff++;
                            continue;
                        }
                        double rn2 = 0;
                        for (int j = 0; j < dv; j++) rn2 += ro[row + j] * ro[row + j];
                        double rnorm = sqrt(rn2);
                        for (int j = 0; j < dv; j++) {
                            int fin = isfinite(x[j]);
                            double e = fin ? fabs((double)x[j] - ro[row + j]) : 0;
                            if (t >= TN) {
                                if (fin) bad_after++; /* finite garbage after the NaN */
                            } else if (chunky && (size_t)t >= chunk_start) {
                                if (fin && e > 1e-4 * (rnorm + 1e-6)) garbage++; /* may be NaN; if not, right */
                                if (!fin) early_nan++;
                            } else {
                                if (!fin || e > 1e-4 * (rnorm + 1e-6)) bad_before++;
                            }
                        }
                    }
            /* Final states of that head non-finite; other heads equal to the clean run. */
            int state_ok = 1;
            if (rn.S) {
                size_t off = ((size_t)BN * H + HN) * dk * dv;
                if (tu_all_finite(rn.S + off, (size_t)dk * dv)) state_ok = 0;
                for (int bh = 0; bh < B * H; bh++)
                    if (bh != BN * H + HN &&
                        memcmp(rn.S + (size_t)bh * dk * dv, rc.S + (size_t)bh * dk * dv, (size_t)dk * dv * 4))
                        state_ok = 0;
            }
            if (rn.A) {
                /* A depends on u alone: with u given it stays finite (and right); with u = s_u k^
                 * the NaN reaches it. */
                size_t off = ((size_t)BN * H + HN) * dk * dk;
                if (u) {
                    if (!(tu_relerr_ff(rn.A + off, rc.A + off, (size_t)dk * dk) < 1e-6)) state_ok = 0;
                } else if (tu_all_finite(rn.A + off, (size_t)dk * dk)) {
                    state_ok = 0;
                }
                for (int bh = 0; bh < B * H; bh++)
                    if (bh != BN * H + HN &&
                        memcmp(rn.A + (size_t)bh * dk * dk, rc.A + (size_t)bh * dk * dk, (size_t)dk * dk * 4))
                        state_ok = 0;
            }
            if (rn.n) {
                size_t off = ((size_t)BN * H + HN) * dk;
                if (tu_all_finite(rn.n + off, (size_t)dk)) state_ok = 0;
            }
            fprintf(stderr,
                    "  %-16s finite after NaN %zu, wrong before %zu, finite garbage in NaN's chunk %zu (NaN there "
                    "%zu), other heads differing rows %zu, state %s%s\n",
                    an, bad_after, bad_before, garbage, early_nan, other_diff,
                    state_ok ? "ok" : "WRONG", (bad_after || bad_before || garbage || other_diff || !state_ok) ? "  FAIL" : "");
            if (bad_after || bad_before || garbage || other_diff || !state_ok)
                snprintf(msg, sizeof msg,
                         "finite after NaN %zu, wrong before %zu, garbage %zu, other heads %zu, state %s", bad_after,
                         bad_before, garbage, other_diff, state_ok ? "ok" : "wrong");
        }
        if (msg[0]) {
            failures++;
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%s: %s; ", an, msg);
        }
        tu_result_free(&rc), tu_result_free(&rn);
    }
    vla_backend_close(be);
    free(q), free(k), free(v), free(u), free(beta), free(g), free(kn), free(ro);
    ck_assert_msg(failures == 0, "%s: %s", vla_mechanism_name(c->mech), why);
}
END_TEST

/* ---- determinism ---- */

START_TEST(test_deterministic) {
    const vla_mechanism mech = (vla_mechanism)_i;
    const int B = 2, T = 100, H = 2, dk = 16, dv = 16;
    tu_rng rng;
    tu_seed(&rng, 9900 + (uint64_t)_i);
    tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = 3};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p), nbt = tu_nbt(&p);
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = mech == VLA_MECH_VLA ? tu_randn_new(&rng, nqk) : NULL, *beta = NULL, *g = NULL;
    if (mech == VLA_MECH_DELTA) {
        beta = malloc(nbt * sizeof *beta), g = malloc(nbt * sizeof *g);
        tu_randu(&rng, beta, nbt, 0.0f, 1.0f), tu_randu(&rng, g, nbt, 0.0f, 1.0f);
    }
    vla_attn_desc d;
    vla_attn_desc_init(&d, mech);
    if (mech == VLA_MECH_VLA) vla_attn_desc_preset(&d, "paper");
    else if (mech == VLA_MECH_SOFTMAX) p.t0 = 0;
    d.chunk = 16;
    p.q = q, p.k = k, p.v = v, p.u = u, p.beta = beta, p.g = g;
    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(mech, algos);
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result r1, r2;
        tu_run(be, &d, &p, 0, &r1);
        tu_run(be, &d, &p, 0, &r2);
        ck_assert_msg(r1.status == VLA_OK && r2.status == VLA_OK, "%s", vla_backend_message(be));
        int same = memcmp(r1.o, r2.o, nvo * 4) == 0;
        if (r1.S) same &= memcmp(r1.S, r2.S, tu_nS(&p) * 4) == 0;
        if (r1.A) same &= memcmp(r1.A, r2.A, tu_nA(&p) * 4) == 0;
        if (r1.n) same &= memcmp(r1.n, r2.n, tu_nn(&p) * 4) == 0;
        fprintf(stderr, "[determinism] %s %s: %s\n", vla_mechanism_name(mech), vla_algorithm_name(algos[ai]),
                same ? "bit-identical" : "DIFFERENT");
        ck_assert_msg(same, "%s %s: two identical calls gave different bits", vla_mechanism_name(mech),
                      vla_algorithm_name(algos[ai]));
        tu_result_free(&r1), tu_result_free(&r2);
    }
    vla_backend_close(be);
    free(q), free(k), free(v), free(u), free(beta), free(g);
}
END_TEST

Suite *properties_suite(void) {
    Suite *s = suite_create("properties");
    TCase *tm = tcase_create("memory");
    tcase_set_timeout(tm, 60);
    tcase_add_loop_test(tm, test_memory, 0, N_MEM);
    suite_add_tcase(s, tm);
    TCase *ti = tcase_create("A_inverse");
    tcase_set_timeout(ti, 60);
    tcase_add_loop_test(ti, test_A_inverse, 0, N_INV);
    suite_add_tcase(s, ti);
    TCase *tn = tcase_create("nonfinite");
    tcase_set_timeout(tn, 60);
    tcase_add_loop_test(tn, test_nan_propagates, 0, N_NAN);
    suite_add_tcase(s, tn);
    TCase *td = tcase_create("determinism");
    tcase_set_timeout(td, 60);
    tcase_add_loop_test(td, test_deterministic, 0, 4);
    suite_add_tcase(s, td);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(properties_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
