/* vla-probe's maths (tools/probe_math.c) against direct float64 computations:
 *  - state norms from the library run in streaming pieces equal a hand loop of VLA-MATH 1;
 *  - the spectral norms: VLA-MATH 4's closed forms, the subspace-reduced Jacobi SVD and a dense
 *    d x d Jacobi SVD (and a power iteration) agree, for unit and non-unit vectors and windows;
 *  - the A recurrence in double gives the library's own a_t;
 *  - capacity: VLA (u = k^, phi none) and DeltaNet (beta = 1) recall exactly with orthonormal
 *    keys and n <= d; VLA does not with merely independent random keys (VLA-MATH 4). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_math.h"

static vla_backend *open_cpu(void) {
    vla_backend *be = NULL;
    ck_assert_int_eq(vla_backend_open("cpu", &be), VLA_OK);
    vla_backend_set_threads(be, 1);
    return be;
}

static vla_attn_desc desc_of(vla_mechanism m) {
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, m), VLA_OK);
    return d;
}

static void rand_unit(pm_rng *r, double *x, int d, double scale) {
    for (int j = 0; j < d; j++) x[j] = pm_normal(r);
    double n = pm_norm(x, d);
    for (int j = 0; j < d; j++) x[j] *= scale / n;
}

/* ---- state norms against a hand loop ------------------------------------------------------- */

static double elu1(double x) { return x > 0 ? x + 1 : exp(x); }

/* VLA's step for u = k^: Sherman-Morrison on A (16 x 16, d used), then a = normalize(A_t k^). */
static void hand_vla_a(double A[16][16], const double *kh, int d, double *a) {
    double z[16] = {0}, uz = 0, na = 0;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) z[i] += A[i][j] * kh[j];
    for (int i = 0; i < d; i++) uz += kh[i] * z[i];
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) A[i][j] -= z[i] * z[j] / (1 + uz);
    for (int i = 0; i < d; i++) {
        a[i] = 0;
        for (int j = 0; j < d; j++) a[i] += A[i][j] * kh[j];
        na += a[i] * a[i];
    }
    for (int i = 0; i < d; i++) a[i] /= sqrt(na);
}

/* Hand loop of VLA-MATH 1 in double, one head, dk = dv = d, from the zero state: ||S_t||_F
 * (and ||A_t||_F for VLA) after every token. Math layout: S[i][j], i over dv, j over dk. */
static void hand_states(vla_mechanism m, const float *k, const float *v, int T, int d, double *Sn, double *An) {
    double S[16][16] = {{0}}, A[16][16] = {{0}}, kh[16], a[16], e[16];
    for (int i = 0; i < d; i++) A[i][i] = 1.0 / 0.1;
    for (int t = 0; t < T; t++) {
        const float *kt = k + t * d, *vt = v + t * d;
        double nk = 0;
        for (int j = 0; j < d; j++) nk += (double)kt[j] * kt[j];
        for (int j = 0; j < d; j++) kh[j] = kt[j] / fmax(sqrt(nk), 1e-4);
        if (m == VLA_MECH_LINEAR) { /* S += v phi(k)^T */
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++) S[i][j] += vt[i] * elu1(kt[j]);
        } else {
            if (m == VLA_MECH_DELTA) memcpy(a, kh, sizeof a); /* beta = 1: a = k^ */
            else hand_vla_a(A, kh, d, a);
            for (int i = 0; i < d; i++) { /* e = v - S k^; S += e a^T */
                e[i] = vt[i];
                for (int j = 0; j < d; j++) e[i] -= S[i][j] * kh[j];
            }
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++) S[i][j] += e[i] * a[j];
        }
        double s2 = 0, a2 = 0;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) s2 += S[i][j] * S[i][j], a2 += A[i][j] * A[i][j];
        Sn[t] = sqrt(s2);
        An[t] = sqrt(a2);
    }
}

static void check_state_norms(vla_mechanism m, int every) {
    enum { T = 5, D = 4 };
    float q[T * D], k[T * D], v[T * D];
    pm_rng r;
    pm_seed(&r, 7);
    pm_randn(&r, q, T * D), pm_randn(&r, k, T * D), pm_randn(&r, v, T * D);
    double Sh[T], Ah[T], Sp[T], Ap[T];
    hand_states(m, k, v, T, D, Sh, Ah);
    vla_backend *be = open_cpu();
    vla_attn_desc d = desc_of(m);
    pm_seq s = {T, D, D, q, k, v, NULL};
    ck_assert_int_eq(pm_state_norms(be, &d, &s, every, Sp, Ap), VLA_OK);
    int np = (T + every - 1) / every;
    for (int j = 0; j < np; j++) {
        int t = (j + 1) * every < T ? (j + 1) * every : T; /* tokens processed */
        ck_assert_msg(fabs(Sp[j] - Sh[t - 1]) <= 1e-5 * Sh[t - 1], "%s every %d: ||S_%d|| %.9g vs hand %.9g",
                      vla_mechanism_name(m), every, t, Sp[j], Sh[t - 1]);
        if (m == VLA_MECH_VLA)
            ck_assert_msg(fabs(Ap[j] - Ah[t - 1]) <= 1e-5 * Ah[t - 1], "||A_%d|| %.9g vs %.9g", t, Ap[j], Ah[t - 1]);
        else ck_assert(isnan(Ap[j]));
    }
    vla_backend_close(be);
}

START_TEST(state_norms_linear) { check_state_norms(VLA_MECH_LINEAR, 1), check_state_norms(VLA_MECH_LINEAR, 2); }
END_TEST
START_TEST(state_norms_delta) { check_state_norms(VLA_MECH_DELTA, 1), check_state_norms(VLA_MECH_DELTA, 3); }
END_TEST
START_TEST(state_norms_vla) { check_state_norms(VLA_MECH_VLA, 1), check_state_norms(VLA_MECH_VLA, 2); }
END_TEST

/* ---- spectral norms ------------------------------------------------------------------------- */

/* Power iteration on J^T J for J = I - a k^T, dense, from a fixed random start, until the
 * Rayleigh quotient stops moving (an independent check of the Jacobi SVD). */
static double power_norm(const double *a, const double *k, int d) {
    double x[64], y[64], lam = 0;
    pm_rng r;
    pm_seed(&r, 99);
    for (int j = 0; j < d; j++) x[j] = pm_normal(&r);
    for (int it = 0; it < 200000; it++) {
        double nx = pm_norm(x, d), kx, ay, old = lam;
        for (int j = 0; j < d; j++) x[j] /= nx;
        kx = pm_dot(k, x, d);
        for (int j = 0; j < d; j++) y[j] = x[j] - a[j] * kx; /* y = J x */
        ay = pm_dot(a, y, d);
        for (int j = 0; j < d; j++) x[j] = y[j] - k[j] * ay; /* x = J^T y */
        lam = pm_dot(y, y, d);
        if (it > 10 && fabs(lam - old) <= 1e-15 * lam) break;
    }
    return sqrt(lam);
}

static void check_rank1(const double *a, const double *k, int d, int unit, const char *what) {
    double red = pm_window_norm(k, a, 1, d), dense = pm_window_norm_dense(k, a, 1, d);
    double closed = unit ? pm_rank1_norm_unit_closed(pm_dot(a, k, d)) : pm_rank1_norm_closed(a, k, d);
    ck_assert_msg(fabs(red - closed) <= 1e-12 * closed, "%s d=%d: reduced %.17g closed %.17g", what, d, red, closed);
    ck_assert_msg(fabs(dense - closed) <= 1e-12 * closed, "%s d=%d: dense %.17g closed %.17g", what, d, dense, closed);
    double pw = power_norm(a, k, d);
    ck_assert_msg(fabs(pw - closed) <= 1e-6 * closed, "%s d=%d: power %.17g closed %.17g", what, d, pw, closed);
}

START_TEST(closed_form_unit_random) {
    pm_rng r;
    pm_seed(&r, 1);
    int dims[] = {2, 3, 8, 32, 64};
    double a[64], k[64];
    for (int i = 0; i < 5; i++)
        for (int rep = 0; rep < 20; rep++) {
            rand_unit(&r, a, dims[i], 1.0), rand_unit(&r, k, dims[i], 1.0);
            if (rep % 4 == 1) { /* a near k: c near 1, where the paper's 1 is nearly right */
                for (int j = 0; j < dims[i]; j++) a[j] = k[j] + 0.05 * a[j];
                double na = pm_norm(a, dims[i]);
                for (int j = 0; j < dims[i]; j++) a[j] /= na;
            }
            if (rep % 4 == 2) memcpy(a, k, sizeof(double) * dims[i]); /* a = k exactly */
            check_rank1(a, k, dims[i], 1, "unit");
        }
}
END_TEST

START_TEST(closed_form_unit_special) {
    double k[3] = {1, 0, 0}, a[3] = {1, 0, 0};
    ck_assert(fabs(pm_window_norm(k, a, 1, 3) - 1.0) < 1e-15); /* a = k: a projection, norm 1 */
    ck_assert(fabs(pm_rank1_norm_unit_closed(1.0) - 1.0) < 1e-15);
    a[0] = 0, a[1] = 1; /* a orthogonal to k: the golden ratio, not the paper's 1 */
    ck_assert(fabs(pm_window_norm(k, a, 1, 3) - (1 + sqrt(5.0)) / 2) < 1e-14);
    ck_assert(fabs(pm_rank1_norm_unit_closed(0.0) - (1 + sqrt(5.0)) / 2) < 1e-15);
    a[0] = -1, a[1] = 0; /* a = -k: I + k k^T, norm 2 */
    ck_assert(fabs(pm_window_norm(k, a, 1, 3) - 2.0) < 1e-14);
    ck_assert(fabs(pm_rank1_norm_unit_closed(-1.0) - 2.0) < 1e-15);
}
END_TEST

START_TEST(closed_form_general_random) {
    pm_rng r;
    pm_seed(&r, 2);
    int dims[] = {2, 5, 16, 48};
    double a[64], k[64];
    for (int i = 0; i < 4; i++)
        for (int rep = 0; rep < 20; rep++) {
            rand_unit(&r, a, dims[i], exp(3 * pm_normal(&r))); /* |a| from about 1e-3 to 1e3 */
            rand_unit(&r, k, dims[i], exp(pm_normal(&r)) * sqrt(dims[i]));
            check_rank1(a, k, dims[i], 0, "general");
        }
}
END_TEST

START_TEST(svd_known_matrices) {
    double M[6] = {3, 0, 4, 5, 0, 0}; /* 3 x 2 [[3,0],[4,5],[0,0]]: M^T M = [[25,20],[20,25]], 45 and 5 */
    double want = sqrt(45.0);
    ck_assert(fabs(pm_svd_max(M, 3, 2) - want) < 1e-13 * want);
    double x[4] = {1, -2, 3, 0.5}, y[3] = {2, 0, -1}, R1[12]; /* rank 1: |x| |y| */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) R1[i * 3 + j] = x[i] * y[j];
    ck_assert(fabs(pm_svd_max(R1, 4, 3) - pm_norm(x, 4) * pm_norm(y, 3)) < 1e-13 * 10);
    double Z[4] = {0, 0, 0, 0};
    ck_assert(pm_svd_max(Z, 2, 2) == 0.0);
}
END_TEST

START_TEST(window_reduced_vs_dense) {
    pm_rng r;
    pm_seed(&r, 3);
    int dims[] = {4, 8, 32, 64}, ms[] = {2, 3, 25};
    double K[25 * 64], W[25 * 64];
    for (int i = 0; i < 4; i++)
        for (int mi = 0; mi < 3; mi++) {
            int d = dims[i], m = ms[mi];
            for (int s = 0; s < m; s++) {
                rand_unit(&r, K + s * d, d, 1.0);
                rand_unit(&r, W + s * d, d, 1.0);
                for (int j = 0; j < d; j++) W[s * d + j] += 2 * K[s * d + j]; /* c about 2: contracting */
            }
            double red = pm_window_norm(K, W, m, d), dense = pm_window_norm_dense(K, W, m, d);
            ck_assert_msg(fabs(red - dense) <= 1e-11 * dense, "d=%d m=%d: reduced %.17g dense %.17g", d, m, red, dense);
        }
}
END_TEST

START_TEST(median_and_max) {
    double x[5] = {5, 1, 4, 2, 3}, y[4] = {4, 1, 3, 2};
    ck_assert(pm_max(x, 5) == 5);
    ck_assert(pm_median(x, 5) == 3);
    ck_assert(pm_median(y, 4) == 2.5);
    ck_assert(isnan(pm_median(y, 0)));
}
END_TEST

/* ---- the a_t of the A recurrence --------------------------------------------------------------- */

static void check_write_vectors(int preset) {
    enum { T = 40, D = 8 };
    float k[T * D], u[T * D];
    double K[T * D], W[T * D], L[T * D];
    pm_rng r;
    pm_seed(&r, 11);
    pm_randn(&r, k, T * D), pm_randn(&r, u, T * D);
    vla_attn_desc d = desc_of(VLA_MECH_VLA);
    if (preset) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    pm_vla p;
    pm_vla_from_desc(&p, &d, D);
    ck_assert_int_eq(pm_vla_write_vectors(&p, k, preset ? u : NULL, T, D, K, W), 0);
    vla_backend *be = open_cpu();
    ck_assert_int_eq(pm_library_write_vectors(be, &d, k, preset ? u : NULL, T, D, L), VLA_OK);
    vla_backend_close(be);
    for (int i = 0; i < T * D; i++)
        ck_assert_msg(fabs(L[i] - W[i]) < 2e-5, "preset %d: a[%d][%d] library %.9g double %.9g", preset, i / D,
                      i % D, L[i], W[i]);
}

START_TEST(write_vectors_vs_library) { check_write_vectors(0), check_write_vectors(1); }
END_TEST

START_TEST(jacobian_norms_closed) {
    enum { T = 60, D = 8, WIN = 25 };
    float k[T * D];
    double K[T * D], W[T * D], step[T], win[T / WIN], cd;
    pm_rng r;
    pm_seed(&r, 5);
    pm_randn(&r, k, T * D);
    vla_attn_desc d = desc_of(VLA_MECH_VLA);
    pm_vla p;
    pm_vla_from_desc(&p, &d, D);
    for (int un = 0; un < 2; un++) {
        p.unnormalised = un;
        ck_assert_int_eq(pm_vla_write_vectors(&p, k, NULL, T, D, K, W), 0);
        pm_jacobian_norms(K, W, T, D, WIN, !un, step, win, &cd);
        ck_assert_msg(cd < 1e-12, "unnormalised %d: closed form differs by %g", un, cd);
        for (int t = 0; t < T; t++) ck_assert(step[t] >= 1.0 - 1e-12); /* never below 1 (d >= 2) */
        for (int w = 0; w < T / WIN; w++)
            ck_assert(fabs(win[w] - pm_window_norm_dense(K + w * WIN * D, W + w * WIN * D, WIN, D)) < 1e-10 * win[w]);
        if (un) { /* VLAv2's first step: a = A_1 k = k / 1.1 (u = k^), so ||J|| = |k|^2 / 1.1 - 1 */
            double kk = pm_dot(K, K, D);
            ck_assert(fabs(step[0] - fmax(1.0, fabs(kk / 1.1 - 1))) < 1e-9 * step[0]);
        }
    }
}
END_TEST

/* ---- capacity ------------------------------------------------------------------------------------ */

START_TEST(keys_orthonormal_in_blocks) {
    enum { D = 8, N = 20 };
    float K[N * D];
    pm_rng r;
    pm_seed(&r, 4);
    pm_make_keys(&r, N, D, 1, K);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            if (i / D != j / D) continue;
            double g = 0;
            for (int x = 0; x < D; x++) g += (double)K[i * D + x] * K[j * D + x];
            ck_assert_msg(fabs(g - (i == j)) < 1e-6, "K K^T [%d][%d] = %g", i, j, g);
        }
}
END_TEST

static void capacity(vla_mechanism m, int d, int n, int orthonormal, pm_recall_stats *out) {
    float *K = malloc(sizeof(float) * n * d), *V = malloc(sizeof(float) * n * d);
    pm_rng r;
    pm_seed(&r, 42);
    pm_make_keys(&r, n, d, orthonormal, K);
    pm_randn(&r, V, (size_t)n * d);
    vla_backend *be = open_cpu();
    vla_attn_desc desc = desc_of(m);
    ck_assert_int_eq(pm_capacity_point(be, &desc, K, V, NULL, n, d, d, out), VLA_OK);
    vla_backend_close(be);
    free(K), free(V);
}

START_TEST(capacity_exact_orthonormal) {
    int dims[] = {4, 16, 32};
    vla_mechanism ms[] = {VLA_MECH_VLA, VLA_MECH_DELTA};
    for (int mi = 0; mi < 2; mi++)
        for (int i = 0; i < 3; i++)
            for (int n = 1; n <= dims[i]; n += n < 4 ? 1 : 3) {
                pm_recall_stats s;
                capacity(ms[mi], dims[i], n, 1, &s);
                ck_assert_msg(s.recall == 1.0 && s.mean_cos > 0.9999 && s.mean_relerr < 1e-4,
                              "%s d=%d n=%d: recall %g cos %.9g relerr %g", vla_mechanism_name(ms[mi]), dims[i], n,
                              s.recall, s.mean_cos, s.mean_relerr);
            }
}
END_TEST

START_TEST(capacity_random_keys_not_exact) {
    pm_recall_stats s; /* VLA-MATH 4: about 8% relative error with 8 random unit keys, d = 32 */
    capacity(VLA_MECH_VLA, 32, 8, 0, &s);
    ck_assert_msg(s.mean_relerr > 0.02 && s.mean_relerr < 0.3, "relerr %g", s.mean_relerr);
    ck_assert(s.recall == 1.0);
}
END_TEST

START_TEST(recall_scores) {
    /* S = I (dk = dv = 2, storage = math for a symmetric S): r_i = k_i. */
    float S[4] = {1, 0, 0, 1}, K[4] = {1, 0, 0, 1}, V[4] = {1, 0, 1, 0}; /* v_1 = v_0: a tie is no hit */
    pm_recall_stats s;
    pm_recall(S, K, V, 2, 2, 2, VLA_FMAP_NONE, &s);
    ck_assert(s.recall == 0.0);
    ck_assert(fabs(s.mean_cos - 0.5) < 1e-15);
    float V2[4] = {2, 0, 0, 3};
    pm_recall(S, K, V2, 2, 2, 2, VLA_FMAP_NONE, &s);
    ck_assert(s.recall == 1.0 && fabs(s.mean_cos - 1.0) < 1e-15);
    ck_assert(fabs(s.mean_relerr - 0.5 * (0.5 + 2.0 / 3.0)) < 1e-15);
}
END_TEST

static Suite *probe_suite(void) {
    Suite *s = suite_create("probe");
    TCase *tc = tcase_create("probe_math");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, state_norms_linear);
    tcase_add_test(tc, state_norms_delta);
    tcase_add_test(tc, state_norms_vla);
    tcase_add_test(tc, closed_form_unit_random);
    tcase_add_test(tc, closed_form_unit_special);
    tcase_add_test(tc, closed_form_general_random);
    tcase_add_test(tc, svd_known_matrices);
    tcase_add_test(tc, window_reduced_vs_dense);
    tcase_add_test(tc, median_and_max);
    tcase_add_test(tc, write_vectors_vs_library);
    tcase_add_test(tc, jacobian_norms_closed);
    tcase_add_test(tc, keys_orthonormal_in_blocks);
    tcase_add_test(tc, capacity_exact_orthonormal);
    tcase_add_test(tc, capacity_random_keys_not_exact);
    tcase_add_test(tc, recall_scores);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(probe_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
