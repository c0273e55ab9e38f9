/* vla-bench's arithmetic (tools/bench_count.c): FLOP and byte counts (forward and backward)
 * against hand counts on a tiny shape, the scan's combination count, the crossover interpolation and the slope fit on
 * synthetic timings with known answers, and the budget's time estimate. */
#include "bench_count.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

START_TEST(flops_delta_paper) {
    /* Sequential only, per token: e = v - ST^T k (3*2), ST = ST diag(g) + k e^T (3*2), o = ST^T q
     * (3*2); no chunked form. */
    check_macs(VLA_MECH_DELTA_PAPER, VLA_ALGO_SEQUENTIAL, 5 * 18);
    ck_assert(bench_flops(VLA_MECH_DELTA_PAPER, VLA_ALGO_CHUNKED, &tiny) == 0);
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

/* The backward's counts (vla-bench --backward), by hand on the tiny shape from the operations of
 * backends/cpu/cpu_grad_*.c. Chunks of 2, 2 and 1 tokens; the last chunk (1 token) is not
 * stepped forward twice, so the token-by-token forms step 2T - 1 = 9 tokens forward. */
static void check_bwd(vla_mechanism m, vla_algorithm a, double per_head) {
    const double macs = bench_bwd_macs(m, a, &tiny);
    ck_assert_msg(fabs(macs - HEADS * per_head) < 1e-9, "%s/%s backward: %g MACs, hand count %g",
                  vla_mechanism_name(m), vla_algorithm_name(a), macs, HEADS * per_head);
    ck_assert(fabs(bench_bwd_flops(m, a, &tiny) - 2 * macs) < 1e-9);
    ck_assert(bench_bwd_defined(m, a));
}

START_TEST(bwd_counts) {
    /* Softmax: 15 causal pairs; per pair Q K^T three times (3 * 3), dO V^T twice (2 * 2), dP K,
     * dP^T Q (2 * 3), P V, P^T dO (2 * 2): 23. */
    check_bwd(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, 15 * 23);
    /* Linear sequential: 9 forward steps of ST += k v^T (6); per token num = ST^T q, dST += q dnum^T,
     * ST dnum, dST e, dST^T k (5 * 6). */
    check_bwd(VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, 9 * 6 + 5 * 30);
    /* Delta sequential: 9 forward steps of e = ST^T k and ST += w e^T (12); per token dST += q dnum^T,
     * ST dnum, dST e, dST^T k, dST -= k de^T, ST_{t-1} de (6 * 6). */
    check_bwd(VLA_MECH_DELTA, VLA_ALGO_SEQUENTIAL, 9 * 12 + 5 * 36);
    /* VLA sequential: 9 forward steps of the A part (z = A u 9, u.z 3, A -= z z^T 9, A k 9, |y|^2 3)
     * and the S part (12): 45; per token S adjoint 7 * 6 and A adjoint (a.da 3, seven K x K
     * products 63, z^T G z 3): 111. */
    check_bwd(VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, 9 * 45 + 5 * 111);
    /* Linear chunked, a chunk of c: forward QS = Q ST0 (6c), Pq = Q W^T (3c^2), ST_end (6c);
     * recompute QS, Pq, O = Pm E (2c^2); VJP W dST, E dST^T, dO ST0^T, Q^T dO (4 * 6c),
     * Pm^T dO, dO E^T (2 * 2c^2), G W, G^T Q (2 * 3c^2). Term by term, forward + recompute + VJP:
     *   c = 2: (12 + 12 + 12) + (12 + 12 + 8) + (48 + 16 + 24) = 156
     *   c = 1: (6 + 3 + 6) + (6 + 3 + 2) + (24 + 4 + 6) = 60 */
    const double lin2 = (12 + 12 + 12) + (12 + 12 + 8) + (48 + 16 + 24);
    const double lin1 = (6 + 3 + 6) + (6 + 3 + 2) + (24 + 4 + 6);
    check_bwd(VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, 2 * lin2 + lin1);
    /* Delta chunked, a chunk of c: forward KS (6c), Lr (3c^2), solve (c(c-1)/2 * 2), QS (6c),
     * Pq (3c^2), ST_end (6c); recompute the same without ST_end; VJP as linear's plus the
     * back substitution, dB E^T (2c^2), G W, G^T Kr (2 * 3c^2), dB ST0^T, Kr^T dB (2 * 6c).
     *   c = 2: forward 12 + 12 + 2 + 12 + 12 + 12 = 62, recompute 50, VJP 88 + 2 + 8 + 24 + 24 = 146
     *   c = 1: forward 6 + 3 + 0 + 6 + 3 + 6 = 24, recompute 18, VJP 34 + 0 + 2 + 6 + 12 = 54 */
    const double del2 = 62 + 50 + 146, del1 = 24 + 18 + 54;
    check_bwd(VLA_MECH_DELTA, VLA_ALGO_CHUNKED, 2 * del2 + del1);
    /* VLA chunked: the S part as delta's; the A part token by token, 9 forward steps (33) and 5
     * adjoint steps (69). */
    check_bwd(VLA_MECH_VLA, VLA_ALGO_CHUNKED, 2 * del2 + del1 + 9 * 33 + 5 * 69);
    /* delta-paper (sequential only): 9 forward steps of e = v - ST^T k and ST = ST diag(g) + k e^T
     * (2 * 6); per token dST += q dO^T, ST_t dO, dST^T k, dST e, ST_{t-1} de, dST -= k de^T (6 * 6). */
    check_bwd(VLA_MECH_DELTA_PAPER, VLA_ALGO_SEQUENTIAL, 9 * 12 + 5 * 36);
    ck_assert(bench_bwd_macs(VLA_MECH_DELTA_PAPER, VLA_ALGO_CHUNKED, &tiny) == 0);
    /* Not in the backward: scan, two-level, AUTO; softmax has fused only. */
    ck_assert(bench_bwd_macs(VLA_MECH_VLA, VLA_ALGO_SCAN, &tiny) == 0);
    ck_assert(!bench_bwd_defined(VLA_MECH_VLA, VLA_ALGO_SCAN));
    ck_assert(bench_bwd_macs(VLA_MECH_VLA, VLA_ALGO_TWO_LEVEL, &tiny) == 0);
    ck_assert(bench_bwd_macs(VLA_MECH_DELTA, VLA_ALGO_AUTO, &tiny) == 0);
    ck_assert(!bench_bwd_defined(VLA_MECH_SOFTMAX, VLA_ALGO_CHUNKED));

    /* Bytes, floats a head, 4 bytes each, 2 heads: the walk reads q, k, v, dO (5 * 10), the
     * outputs dq, dk, dv (5 * 8); the recurrent forms' forward pass reads k, v (5 * 5) and
     * writes and reads 3 checkpoints. */
    const double f = 4 * HEADS;
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &tiny) - f * (50 + 40 + 4 * 5)) < 1e-9);
    /* linear sequential: checkpoints of S and n (6 + 3), written and read: 2 * 3 * 9 */
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, &tiny) - f * (25 + 50 + 40 + 54)) < 1e-9);
    /* linear chunked: checkpoints of S; the prefix n_t (5 * 3) written and read */
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, &tiny) - f * (25 + 50 + 40 + 36 + 30)) < 1e-9);
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_DELTA, VLA_ALGO_CHUNKED, &tiny) - f * (25 + 50 + 40 + 36)) < 1e-9);
    /* vla: checkpoints of S and A (6 + 9); with u given, u read twice and du written (3 * 15) */
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, &tiny) - f * (25 + 50 + 40 + 90)) < 1e-9);
    bench_shape u = tiny;
    u.has_u = 1;
    ck_assert(fabs(bench_bwd_bytes(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &u) - f * (25 + 50 + 40 + 90 + 45)) < 1e-9);
    ck_assert(bench_bwd_bytes(VLA_MECH_VLA, VLA_ALGO_SCAN, &tiny) == 0);

    /* About linear in T for the recurrent forms (2x a doubling, but for the last chunk, which is
     * stepped forward once), about 4x a doubling for softmax. */
    bench_shape s = {.B = 2, .H = 4, .T = 4096, .dk = 64, .dv = 64, .chunk = 64}, s2 = s;
    s2.T = 8192;
    const double rv = bench_bwd_flops(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &s2) / bench_bwd_flops(VLA_MECH_VLA, VLA_ALGO_CHUNKED, &s);
    ck_assert(fabs(rv - 2) < 1e-2);
    const double r = bench_bwd_flops(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &s2) /
                     bench_bwd_flops(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, &s);
    ck_assert(r > 3.99 && r < 4.0);
}
END_TEST

/* The counts of vla-bench --targets (the CUDA kernels as executed: full chunks of C = 64),
 * by hand from the formulas printed beside each row. */
START_TEST(target_counts) {
    /* Softmax, T = 4, K = V = 2, 3 heads: 10 causal pairs of K + V MACs; q, k, v, o. */
    bench_target_count c = bench_count_target(VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, 4, 2, 2, 3, 0);
    ck_assert_msg(fabs(c.flop - 2 * 10 * 4 * 3) < 1e-9, "softmax %g FLOP", c.flop);
    ck_assert_msg(fabs(c.bytes - 4 * 4 * 8 * 3) < 1e-9, "softmax %g bytes", c.bytes);
    ck_assert(c.formula && c.formula[0]);
    /* Linear chunked, T = 100 (two chunks, the second counted full), K = V = 2, one head:
     * 2 * 2 (2 C K V + C^2 (K + V)) = 4 (512 + 16384); bytes 4 T (2K + 2V) + 4 (K V + K). */
    c = bench_count_target(VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, 100, 2, 2, 1, 0);
    ck_assert_msg(fabs(c.flop - 4.0 * (512 + 16384)) < 1e-9, "linear %g FLOP", c.flop);
    ck_assert_msg(fabs(c.bytes - (3200 + 24)) < 1e-9, "linear %g bytes", c.bytes);
    /* Delta chunked, one chunk, K = V = 2: 2 (3 C K V + 2 C^2 K + 1.5 C^2 V) = 2 (768 + 16384 + 12288). */
    c = bench_count_target(VLA_MECH_DELTA, VLA_ALGO_CHUNKED, 64, 2, 2, 1, 0);
    ck_assert_msg(fabs(c.flop - 2.0 * (768 + 16384 + 12288)) < 1e-9, "delta %g FLOP", c.flop);
    /* The decode step (VLA sequential at T = 1), K = V = 4, 2 heads: 2 (3 K^2 + 3 K V) per head. */
    c = bench_count_target(VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, 1, 4, 4, 2, 0);
    ck_assert_msg(fabs(c.flop - 2 * 2 * (48 + 48)) < 1e-9, "vla decode %g FLOP", c.flop);
    /* VLA chunked: u given adds K A0, K Z^T and M Z, C K^2 + 2 C^2 K MACs a chunk; the bytes
     * are the same. One chunk, K = V = 2, 2 heads. */
    const bench_target_count g = bench_count_target(VLA_MECH_VLA, VLA_ALGO_CHUNKED, 64, 2, 2, 2, 1);
    c = bench_count_target(VLA_MECH_VLA, VLA_ALGO_CHUNKED, 64, 2, 2, 2, 0);
    ck_assert_msg(fabs((g.flop - c.flop) - 2 * 2 * (64 * 4 + 2 * 4096 * 2)) < 1e-6, "u given adds %g FLOP",
                  g.flop - c.flop);
    ck_assert(g.bytes == c.bytes && strcmp(g.formula, c.formula) != 0);
    /* Every VLA algorithm the targets time has a count and a formula. */
    const vla_algorithm algos[] = {VLA_ALGO_SEQUENTIAL, VLA_ALGO_SCAN, VLA_ALGO_CHUNKED, VLA_ALGO_TWO_LEVEL};
    for (int i = 0; i < 4; i++) {
        c = bench_count_target(VLA_MECH_VLA, algos[i], 2048, 32, 32, 4, 0);
        ck_assert_msg(c.flop > 0 && c.bytes > 0 && c.formula[0], "%s", vla_algorithm_name(algos[i]));
    }
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
    tcase_add_test(c, flops_delta_paper);
    tcase_add_test(c, flops_vla_sequential);
    tcase_add_test(c, flops_vla_chunked);
    tcase_add_test(c, flops_vla_scan);
    tcase_add_test(c, flops_vla_two_level);
    tcase_add_test(c, scan_combines);
    tcase_add_test(c, bytes_counts);
    tcase_add_test(c, counts_scale);
    tcase_add_test(c, target_counts);
    tcase_add_test(c, bwd_counts);
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
