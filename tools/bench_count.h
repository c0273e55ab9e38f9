/* vla-bench's arithmetic, kept apart from the timing so the tests can check it by hand:
 * the FLOP and byte count of each (mechanism, algorithm), forward and backward (vla-bench
 * --backward; the backward's rules are beside bench_bwd_macs), the crossover of a linear-time
 * series with softmax on log-log axes, the slope of log latency vs log T, and the time
 * estimate the budget uses to skip points it cannot afford.
 *
 * Counting rules (bench_count.c writes the formula beside each algorithm):
 *   FLOPs: 2 per multiply-add of the products the algorithm performs (matrix and vector
 *   products, rank-1 updates, Cholesky, triangular solves), per head, times B*H. O(T d)
 *   elementwise work (feature maps, row normalisations, softmax's exp, the linear output
 *   normaliser, building I - a k^T counts as a product) is left out: it is under 1/d of the
 *   total.
 *   Bytes: the minimum device-memory traffic: inputs read once, outputs written once, no
 *   initial state read (vla-bench passes none), final states written once (vla-bench asks
 *   for them), plus the per-token intermediates an algorithm must keep in memory (scan: the
 *   maps and a_t; two-level: a_t and the segment maps). float32: 4 bytes an element. */
#ifndef VLA_BENCH_COUNT_H
#define VLA_BENCH_COUNT_H

#include "vla/vla.h"

typedef struct bench_shape {
    int B, H, T, dk, dv;
    int chunk;    /* C of the chunked forms (vla-bench: the library default, 64) */
    int segment;  /* two-level: chunks per segment; 0 = the CPU backend's choice, ceil(sqrt(chunks)) */
    int has_u;    /* VLA penalty vectors passed (vla-bench: no, u = k^) */
} bench_shape;

/* Multiply-adds of one forward call (all B*H heads); FLOPs are twice this. 0 when the
 * algorithm is not defined for the mechanism. AUTO is not counted (resolve it first). */
double bench_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s);
double bench_flops(vla_mechanism m, vla_algorithm a, const bench_shape *s);
/* Minimum bytes moved to and from device memory by one forward call. */
double bench_bytes(vla_mechanism m, vla_algorithm a, const bench_shape *s);

/* The backward (vla_attention_backward) of one call, as the CPU backend's kernels compute it
 * (backends/cpu/cpu_grad_*.c, which docs/BACKWARD.md describes): the forward pass that writes the
 * chunk-start checkpoints, each chunk recomputed from its checkpoint, and the adjoint pass; for
 * the chunked forms the per-chunk products of the VJP (full C x C products, as executed). Counted
 * for vla-bench's call: dq, dk, dv requested from dO; no beta, g, state gradients or normalised
 * output (u only through has_u, which changes the bytes, not the products). 0 where the backward
 * has no such algorithm (scan, two-level, AUTO: the backward runs them as chunked).
 * Bytes: the minimum traffic of the backward alone: k, v (and u) read by the forward pass; q, k,
 * v (and u), dO read by the adjoint pass; dq, dk, dv (and du) written; the checkpoints written
 * once and read once; linear chunked's normaliser prefix n_t [T, K] written and read; softmax's
 * row statistics (2 a row) written and read. Chunk-local arrays are not counted. */
double bench_bwd_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s);
double bench_bwd_flops(vla_mechanism m, vla_algorithm a, const bench_shape *s);
double bench_bwd_bytes(vla_mechanism m, vla_algorithm a, const bench_shape *s);
/* 1 when the backward has (m, a): softmax fused; linear, delta and vla sequential and chunked;
 * delta-paper sequential. */
int bench_bwd_defined(vla_mechanism m, vla_algorithm a);

/* The FLOP and byte count `vla-bench --targets` prints beside each row, with its formula (per
 * head, K = dk, V = dv, C = 64 tokens a chunk, n_c = ceil(T/C) chunks, FLOP = 2 x multiply-adds;
 * then times `heads` = B*H). Unlike bench_flops, which follows the CPU kernels (exact triangles,
 * a short last chunk), these follow the CUDA kernels as executed: full chunks, full C x C
 * products where the kernel computes them. Chunked (or, for softmax, fused) where the row is
 * not VLA; for VLA chunked, u_given selects the general A part (penalty vectors u passed)
 * over the u = k^ form that takes a_t from Z's rows. */
typedef struct bench_target_count {
    double flop, bytes;
    const char *formula; /* "FLOP formula  ; bytes formula", per head */
} bench_target_count;
bench_target_count bench_count_target(vla_mechanism m, vla_algorithm a, double T, double K, double V, double heads,
                                      int u_given);

/* Affine-map compositions an in-place Brent-Kung (Blelloch) scan over n maps performs: the
 * loops of cpu_affine_scan. 2n - 2 - log2(n) for n a power of two. */
long long bench_scan_combines(long long n);

/* Where a linear-time series falls below softmax. T, lin, soft: n points in increasing T
 * (latencies > 0). Returns BENCH_CROSS_FOUND with *t_cross interpolated on log-log axes
 * between the two T values bracketing the last point where lin >= soft (so beyond *t_cross
 * the linear series stays faster within the sweep); BENCH_CROSS_BELOW_MIN when lin < soft at
 * every T (already faster at T_min); BENCH_CROSS_NOT_FOUND when lin >= soft at the largest T
 * (or n == 0). */
typedef enum bench_cross {
    BENCH_CROSS_FOUND = 0,
    BENCH_CROSS_BELOW_MIN = 1,
    BENCH_CROSS_NOT_FOUND = 2
} bench_cross;
bench_cross bench_crossover(const double *T, const double *lin, const double *soft, int n, double *t_cross);

/* Least-squares slope of log(ms) against log(T) over the points with T >= t_min when there
 * are at least min_points of them, else over all points. NAN when fewer than 2 points (or
 * all T equal) are used. *used (may be NULL) gets the number of points fitted.
 * vla-bench uses t_min = 1024, min_points = 3. */
double bench_slope(const double *T, const double *ms, int n, double t_min, int min_points, int *used);

/* The latency at T predicted from a measured point (t_prev, ms_prev): ms_prev * (T/t_prev)^slope.
 * slope NAN or <= 0 means: the default, 1 (each doubling 2x) for linear-time algorithms and
 * 2 (4x) for softmax. The scan costs more per element than its neighbours; it scales as
 * T too. */
double bench_estimate_ms(vla_mechanism m, double t_prev, double ms_prev, double T, double slope);

#endif
