/* vla-bench's arithmetic (tools/bench_count.c): FLOP and byte counts against hand counts on a
 * tiny shape, the scan's combination count, the crossover interpolation and the slope fit on
 * synthetic timings with known answers, and the budget's time estimate. */
#include "bench_count.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

/* The tiny shape: B = 1, H = 2, T = 5, dk = K = 3, dv = V = 2, chunks of C = 2 tokens, so
 * chunks of 2, 2 and 1 tokens. Hand counts below are multiply-adds (MACs) per head; the
 * library count is for both heads, and FLOPs are 2 per MAC. */
static const bench_shape tiny = {.B = 1, .H = 2, .T = 5, .dk = 3, .dv = 2, .chunk = 2, .segment = 0, .has_u = 0};
#define HEADS 2.0

static void check_macs(vla_mechanism m, vla_algorithm a, double per_head) {
    const double macs = bench_macs(m, a, &tiny), flops = bench_flops(m, a, &tiny);
    ck_assert_msg(fabs(macs - HEADS * per_head) < 1e-9, "%s/%s: %g MACs, hand count %g", vla_mechanism_name(m),
                  vla_algorithm_name(a), macs, HEADS * per_head);
    ck_assert_msg(fabs(flops - 2 * HEADS * per_head) < 1e-9, "%s/%s: %g FLOPs, hand count %g", vla_mechanism_name(m),
                  vla_algorithm_name(a), flops, 2 * HEADS * per_head);
}

START_TEST(flops_softmax) {
    /* Causal pairs s <= t: 1 + 2 + 3 + 4 + 5 = 15; each q.k (K = 3) and p v (V = 2): 5 MACs. */
    check_macs(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, 15 * (3 + 2));
    /* Not defined: nothing counted. */
    ck_assert(bench_flops(VLA_MECH_SOFTMAX, VLA_ALGO_CHUNKED, &tiny) == 0);
    ck_assert(bench_flops(VLA_MECH_LINEAR, VLA_ALGO_SCAN, &tiny) == 0);
}
END_TEST

START_TEST(flops_linear) {
    /* Sequential, per token: ST += k v^T (3*2) and o = ST^T q (3*2). */
    check_macs(VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, 5 * (3 * 2 + 3 * 2));
    /* Chunked, per chunk of c: O = Q ST (c*3*2), M = Q W^T (c*c*3), O += M E (c*c*2),
     * ST += W^T E (3*2*c).  c = 2: 12 + 12 + 8 + 12 = 44;  c = 1: 6 + 3 + 2 + 6 = 17. */
    check_macs(VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, 44 + 44 + 17);
}
END_TEST

START_TEST(flops_delta) {
    /* Sequential, per token: e = ST^T k (6), ST = ST + w e^T (6), o = ST^T q (6). */
    check_macs(VLA_MECH_DELTA, VLA_ALGO_SEQUENTIAL, 5 * 18);
    /* Chunk step of c tokens: E = Kr ST (c*3*2), L = Kr W^T (c*c*3), forward substitution
     * (c(c-1)/2 rows of V = 2), O = Q ST (c*6), M = Q W^T (c*c*3), O += M E (c*c*2),
     * ST += W^T E (c*6).
     *   c = 2: 12 + 12 + 2 + 12 + 12 + 8 + 12 = 70
     *   c = 1:  6 +  3 + 0 +  6 +  3 + 2 +  6 = 26 */
    check_macs(VLA_MECH_DELTA, VLA_ALGO_CHUNKED, 70 + 70 + 26);
}
END_TEST

START_TEST(flops_vla_sequential) {
    /* Per token: z = A u (9), u.z (3), A -= z z^T/(..) (9), A k (9), |A k|^2 (3),
     * e = v - ST^T k (6), ST += a e^T (6), o = ST^T q (6): 51. */
    check_macs(VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, 5 * (9 + 3 + 9 + 9 + 3 + 6 + 6 + 6));
}
END_TEST

/* A part of VLA-MATH 2.3 on a chunk of c (K = 3): Z = U A0 (c*9), G = Z U^T (c*c*3),
 * Cholesky of c x c (c = 2: one MAC, l10 * l10; c = 1: none), Z = L^{-1} Z (c = 2: one row
 * update of 3), Al = K A0 (c*9), M = K Z^T (c*c*3), Al -= M Z (c*c*3), A -= Z^T Z (9*c).
 *   c = 2: 18 + 12 + 1 + 3 + 18 + 12 + 12 + 18 = 94
 *   c = 1:  9 +  3 + 0 + 0 +  9 +  3 +  3 +  9 = 36 */
#define A_PART_2 94
#define A_PART_1 36
#define STEP_2 70
#define STEP_1 26

START_TEST(flops_vla_chunked) {
    check_macs(VLA_MECH_VLA, VLA_ALGO_CHUNKED, 2 * (A_PART_2 + STEP_2) + (A_PART_1 + STEP_1));
}
END_TEST

START_TEST(flops_vla_scan) {
    /* a_t: 5 * 33 = 165 (the sequential A recurrence, 3K^2 + 2K a token).
     * maps M = I - a k^T (9) and N = a v^T (6): 5 * 15 = 75.
     * Brent-Kung over 5 maps: up-sweep (1<-0), (3<-2), (3<-1); down-sweep (2<-1), (4<-3):
     * 5 compositions of K^3 + K^2 V = 27 + 18 = 45: 225.
     * outputs: y = M^T q (9), ST0^T y (6), N^T q (6): 5 * 21 = 105.
     * final state ST = M ST0 + N: K^2 V = 18. */
    ck_assert_int_eq(bench_scan_combines(5), 5);
    check_macs(VLA_MECH_VLA, VLA_ALGO_SCAN, 165 + 75 + 225 + 105 + 18);
}
END_TEST

START_TEST(flops_vla_two_level) {
    /* 3 chunks; segments of 2 chunks (smallest s with s*s >= 3), so 2 segments.
     * Chunk map of c: Lw = K Al^T (c*c*3), unit solve on [K|V] (c(c-1)/2 rows of 5),
     * M = I - Al^T W (9*c), N = Al^T Y (6*c).  c = 2: 12 + 5 + 18 + 12 = 47;  c = 1: 3 + 0 + 9 + 6 = 18.
     * Per chunk: A part + map + step. Compositions: 1 inside the first segment + 1 in the scan
     * over 2 segment maps = 2 * 45. The second segment applies its start map: 18. */
    check_macs(VLA_MECH_VLA, VLA_ALGO_TWO_LEVEL,
               2 * (A_PART_2 + 47 + STEP_2) + (A_PART_1 + 18 + STEP_1) + 2 * 45 + 18);
}
END_TEST

START_TEST(scan_combines) {
    /* 2n - 2 - log2(n) for powers of two; small cases by hand. */
    ck_assert_int_eq(bench_scan_combines(1), 0);
    ck_assert_int_eq(bench_scan_combines(2), 1);
    ck_assert_int_eq(bench_scan_combines(3), 2); /* (1<-0), then (2<-1) */
    ck_assert_int_eq(bench_scan_combines(8), 2 * 8 - 2 - 3);
    ck_assert_int_eq(bench_scan_combines(4096), 2 * 4096 - 2 - 12);
}
END_TEST

START_TEST(bytes_counts) {
    /* Per head, floats: q, k (5*3 each) and v (5*2) read, o (5*2) written: 30 + 10 + 10 = 50.
     * 4 bytes a float, 2 heads. */
    const double f = 4 * HEADS;
    ck_assert(fabs(bench_bytes(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &tiny) - f * 50) < 1e-9);
    /* linear: + final S (3*2) and n (3) */
    ck_assert(fabs(bench_bytes(VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, &tiny) - f * (50 + 6 + 3)) < 1e-9);
    ck_assert(fabs(bench_bytes(VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, &tiny) - f * (50 + 6 + 3)) < 1e-9);
    /* delta: + S */
    ck_assert(fabs(bench_bytes(VLA_MECH_DELTA, VLA_ALGO_CHUNKED, &tiny) - f * (50 + 6)) < 1e-9);
    /* vla: + S and A (3*3) */
    ck_assert(fabs(bench_bytes(VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, &tiny) - f * (50 + 6 + 9)) < 1e-9);
    ck_assert(fabs(bench_bytes(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &tiny) - f * (50 + 6 + 9)) < 1e-9);
    /* scan: + maps (9 + 6 a token) written and read, + a_t (3 a token) written and read */
    ck_assert(fabs(bench_bytes(VLA_MECH_VLA, VLA_ALGO_SCAN, &tiny) - f * (65 + 2 * 5 * 15 + 2 * 5 * 3)) < 1e-9);
    /* two-level: + a_t written once and read twice (3 * 5 * 3), k and v read again
     * (5 * (3 + 2)), 2 segment maps written and read (2 * 2 * 15) */
    ck_assert(fabs(bench_bytes(VLA_MECH_VLA, VLA_ALGO_TWO_LEVEL, &tiny) - f * (65 + 45 + 25 + 60)) < 1e-9);
    /* u given: VLA reads it too */
    bench_shape u = tiny;
    u.has_u = 1;
    ck_assert(fabs(bench_bytes(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &u) - f * (65 + 15)) < 1e-9);
    ck_assert(bench_bytes(VLA_MECH_DELTA, VLA_ALGO_SCAN, &tiny) == 0);
}
END_TEST

START_TEST(counts_scale) {
    /* Linear-time algorithms double with T (whole chunks), softmax about quadruples. */
    bench_shape s = {.B = 2, .H = 4, .T = 4096, .dk = 64, .dv = 64, .chunk = 64};
    bench_shape s2 = s;
    s2.T = 8192;
    const vla_algorithm lin[] = {VLA_ALGO_SEQUENTIAL, VLA_ALGO_CHUNKED};
    for (int i = 0; i < 2; i++) {
        ck_assert(fabs(bench_flops(VLA_MECH_DELTA, lin[i], &s2) / bench_flops(VLA_MECH_DELTA, lin[i], &s) - 2) < 1e-12);
        ck_assert(fabs(bench_flops(VLA_MECH_VLA, lin[i], &s2) / bench_flops(VLA_MECH_VLA, lin[i], &s) - 2) < 1e-12);
    }
    const double r = bench_flops(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &s2) / bench_flops(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &s);
    ck_assert(r > 3.99 && r < 4.0);
    /* The scan is O(T d^3): at d = 64 it costs far more than the chunked form. */
    ck_assert(bench_flops(VLA_MECH_VLA, VLA_ALGO_SCAN, &s) > 10 * bench_flops(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &s));
}
END_TEST

/* Synthetic timings: linear series c1 * T, softmax c2 * T^2, crossing at T = c1 / c2. */
START_TEST(crossover_power_laws) {
    double T[8], lin[8], soft[8];
    const double c1 = 1e-3, c2 = 1e-6; /* crossover at 1000 */
    for (int i = 0; i < 8; i++) {
        T[i] = 128 << i; /* 128 .. 16384 */
        lin[i] = c1 * T[i];
        soft[i] = c2 * T[i] * T[i];
    }
    double tc = 0;
    ck_assert_int_eq(bench_crossover(T, lin, soft, 8, &tc), BENCH_CROSS_FOUND);
    /* Both are straight lines on log-log axes, so the interpolation is exact. */
    ck_assert_msg(fabs(tc - 1000) < 1e-6, "crossover %.9g, expected 1000", tc);

    /* Another constant: c1 / c2 = 5000 lies between 4096 and 8192. */
    for (int i = 0; i < 8; i++) lin[i] = 5e-3 * T[i];
    ck_assert_int_eq(bench_crossover(T, lin, soft, 8, &tc), BENCH_CROSS_FOUND);
    ck_assert(fabs(tc - 5000) < 1e-6);

    /* Already faster at the smallest T. */
    for (int i = 0; i < 8; i++) lin[i] = 1e-5 * T[i];
    ck_assert_int_eq(bench_crossover(T, lin, soft, 8, &tc), BENCH_CROSS_BELOW_MIN);
    ck_assert(isnan(tc));

    /* Never faster within the sweep (crossover at 10^5). */
    for (int i = 0; i < 8; i++) lin[i] = 1e-1 * T[i];
    ck_assert_int_eq(bench_crossover(T, lin, soft, 8, &tc), BENCH_CROSS_NOT_FOUND);
    ck_assert_int_eq(bench_crossover(T, lin, soft, 0, &tc), BENCH_CROSS_NOT_FOUND);

    /* Noise at small T (faster, then slower, then faster for good): the last crossing counts. */
    for (int i = 0; i < 8; i++) lin[i] = c1 * T[i];
    lin[0] = 0.5 * soft[0];
    ck_assert_int_eq(bench_crossover(T, lin, soft, 8, &tc), BENCH_CROSS_FOUND);
    ck_assert(fabs(tc - 1000) < 1e-6);

    /* Exactly equal at a sweep point: the crossing is that point. */
    double T2[] = {1000, 2000}, l2[] = {1.0, 2.0}, s2[] = {1.0, 4.0};
    ck_assert_int_eq(bench_crossover(T2, l2, s2, 2, &tc), BENCH_CROSS_FOUND);
    ck_assert(fabs(tc - 1000) < 1e-9);
}
END_TEST

START_TEST(slope_fit) {
    double T[8], lin[8], soft[8];
    for (int i = 0; i < 8; i++) {
        T[i] = 128 << i;
        lin[i] = 2e-3 * T[i];
        soft[i] = 3e-7 * T[i] * T[i];
    }
    int used = 0;
    ck_assert(fabs(bench_slope(T, lin, 8, 1024, 3, &used) - 1) < 1e-12);
    ck_assert_int_eq(used, 5); /* 1024 .. 16384 */
    ck_assert(fabs(bench_slope(T, soft, 8, 1024, 3, &used) - 2) < 1e-12);

    /* Softmax with a fixed overhead at small T: the fit over T >= 1024 ignores it. */
    double sm[8];
    for (int i = 0; i < 8; i++) sm[i] = T[i] < 1024 ? 5.0 : 3e-7 * T[i] * T[i];
    ck_assert(fabs(bench_slope(T, sm, 8, 1024, 3, &used) - 2) < 1e-12);
    ck_assert_int_eq(used, 5);

    /* Fewer than 3 points with T >= 1024: all points. T = 512, 1024, 2048 with
     * ms = 1, 2, 8: least squares on x = 0, 1, 2 (units of log 2), y = 0, 1, 3:
     * slope = (3 * (0 + 1 + 6) - 3 * 4) / (3 * 5 - 9) = 9 / 6 = 1.5. */
    double T3[] = {512, 1024, 2048}, m3[] = {1, 2, 8};
    ck_assert(fabs(bench_slope(T3, m3, 3, 1024, 3, &used) - 1.5) < 1e-12);
    ck_assert_int_eq(used, 3);

    /* Too few points. */
    ck_assert(isnan(bench_slope(T3, m3, 1, 1024, 3, &used)));
    ck_assert_int_eq(used, 1);
}
END_TEST

START_TEST(estimate) {
    /* Default scalings: 2x per doubling for linear-time series, 4x for softmax. */
    ck_assert(fabs(bench_estimate_ms(VLA_MECH_VLA, 1024, 10, 2048, NAN) - 20) < 1e-12);
    ck_assert(fabs(bench_estimate_ms(VLA_MECH_SOFTMAX, 1024, 10, 2048, NAN) - 40) < 1e-12);
    ck_assert(fabs(bench_estimate_ms(VLA_MECH_SOFTMAX, 1024, 10, 4096, 0) - 160) < 1e-9);
    /* A fitted slope. */
    ck_assert(fabs(bench_estimate_ms(VLA_MECH_LINEAR, 1024, 10, 2048, 1.5) - 10 * pow(2, 1.5)) < 1e-9);
}
END_TEST

static Suite *bench_suite(void) {
    Suite *s = suite_create("bench");
    TCase *c = tcase_create("counts");
    tcase_add_test(c, flops_softmax);
    tcase_add_test(c, flops_linear);
    tcase_add_test(c, flops_delta);
    tcase_add_test(c, flops_vla_sequential);
    tcase_add_test(c, flops_vla_chunked);
    tcase_add_test(c, flops_vla_scan);
    tcase_add_test(c, flops_vla_two_level);
    tcase_add_test(c, scan_combines);
    tcase_add_test(c, bytes_counts);
    tcase_add_test(c, counts_scale);
    suite_add_tcase(s, c);
    TCase *m = tcase_create("math");
    tcase_add_test(m, crossover_power_laws);
    tcase_add_test(m, slope_fit);
    tcase_add_test(m, estimate);
    suite_add_tcase(s, m);
    return s;
}

int main(void) {
    SRunner *r = srunner_create(bench_suite());
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
