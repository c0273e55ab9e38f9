/* FLOP and byte counts per (mechanism, algorithm), derived from the CPU kernels in
 * backends/cpu/ (which follow VLA-MATH 2), and vla-bench's crossover / slope arithmetic.
 * Notation per head: T tokens, K = dk, V = dv, chunks of c tokens (C = 64 by default; the
 * last chunk holds T mod C), sums over chunks written S_c. Counts are multiply-adds (MACs);
 * FLOPs = 2 * MACs. See bench_count.h for what is counted and what is not. */
#include "bench_count.h"

#include <math.h>

/* ---- building blocks (MACs, one head) ---- */

/* The generalised delta rule on one chunk (cpu_chunk_step, residual form, no decay):
 *   E = V - Kr ST          c K V
 *   L = Kr W^T             c^2 K
 *   (I + L) E = ...        c(c-1)/2 V     (forward substitution)
 *   O = Q ST               c K V
 *   M = Q W^T              c^2 K          (the full product; tril keeps s <= t after it)
 *   O += M E               c^2 V
 *   ST += W^T E            c K V
 * = 3 c K V + 2 c^2 K + c^2 V + c(c-1)/2 V. */
static double chunk_step_macs(double c, double K, double V) {
    return 3 * c * K * V + 2 * c * c * K + c * c * V + c * (c - 1) / 2 * V;
}

/* VLA's A part on one chunk (a_part, VLA-MATH 2.3, exact Woodbury):
 *   Z = U A0               c K^2
 *   G = Z U^T              c^2 K
 *   G = L L^T              (c^3 - c)/6    (Cholesky: sum_j j (c - j))
 *   Z = L^{-1} Z           c(c-1)/2 K     (triangular solve)
 *   Al = K A0              c K^2
 *   M = K Z^T              c^2 K
 *   Al -= tril(M) Z        c^2 K
 *   A -= Z^T Z             c K^2
 * = 3 c K^2 + 3 c^2 K + (c^3 - c)/6 + c(c-1)/2 K. */
static double a_part_macs(double c, double K) {
    return 3 * c * K * K + 3 * c * c * K + (c * c * c - c) / 6 + c * (c - 1) / 2 * K;
}

/* One chunk's affine map for the two-level scan (chunk_map):
 *   Lw = K Al^T            c^2 K
 *   [W|Y] = (I+Lw)^{-1}[K|V]  c(c-1)/2 (K + V)
 *   M = I - Al^T W         c K^2
 *   N = Al^T Y             c K V
 * = c^2 K + c(c-1)/2 (K + V) + c K^2 + c K V. */
static double chunk_map_macs(double c, double K, double V) {
    return c * c * K + c * (c - 1) / 2 * (K + V) + c * K * K + c * K * V;
}

/* One composition of affine maps (cpu_affine_compose): N2 += M2 N1 (K^2 V), M2 = M2 M1 (K^3). */
static double compose_macs(double K, double V) { return K * K * K + K * K * V; }

/* One token of the sequential A recurrence (a_step, in double on the CPU):
 *   z = A u  K^2,  u.z  K,  A -= z z^T / (1 + u.z)  K^2,  A k  K^2,  |A k|^2  K
 * = 3 K^2 + 2 K. */
static double a_step_macs(double K) { return 3 * K * K + 2 * K; }

long long bench_scan_combines(long long n) {
    /* The loops of cpu_affine_scan, counted level by level. */
    long long count = 0, top = 1;
    for (long long s = 1; s < n; s *= 2) {
        const long long first = 2 * s - 1;
        if (first < n) count += (n - 1 - first) / (2 * s) + 1;
        top = s;
    }
    for (long long s = top / 2; s >= 1; s /= 2) {
        const long long first = 3 * s - 1;
        if (first < n) count += (n - 1 - first) / (2 * s) + 1;
    }
    return count;
}

/* Sum of f(c) over the chunks of T: floor(T/C) chunks of C and one of T mod C. */
typedef double (*chunk_fn)(double c, double K, double V);
static double over_chunks(chunk_fn f, int T, int C, double K, double V) {
    const int full = T / C, rem = T % C;
    return full * f(C, K, V) + (rem ? f(rem, K, V) : 0.0);
}

static double chunked_linear(double c, double K, double V) { return 2 * c * K * V + c * c * (K + V); }
static double chunked_delta(double c, double K, double V) { return chunk_step_macs(c, K, V); }
static double chunked_vla(double c, double K, double V) { return a_part_macs(c, K) + chunk_step_macs(c, K, V); }
static double two_level_chunk(double c, double K, double V) {
    return a_part_macs(c, K) + chunk_map_macs(c, K, V) + chunk_step_macs(c, K, V);
}

static int chunk_size(const bench_shape *s) { return s->chunk > 0 ? s->chunk : 64; }

/* Segments of the two-level form: `seg` chunks each (default: the smallest s with s*s >= chunks). */
static void segments(const bench_shape *s, long long *nchunks, long long *seg, long long *nseg) {
    const int C = chunk_size(s);
    *nchunks = ((long long)s->T + C - 1) / C;
    long long g = s->segment;
    if (g <= 0) {
        g = 1;
        while (g * g < *nchunks) g++;
    }
    *seg = g;
    *nseg = (*nchunks + g - 1) / g;
}

static double head_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    const double T = s->T, K = s->dk, V = s->dv;
    const int C = chunk_size(s);
    switch (m) {
    case VLA_MECH_SOFTMAX:
        /* FUSED: causal pairs s <= t: T(T+1)/2 (K + V) (Q K^T and P V). The CPU's 64 x 64
         * tiles also compute the masked half of each diagonal tile, up to T(T+64)/2 (K + V)
         * executed: the count is the useful work, as FlashAttention counts it. */
        if (a == VLA_ALGO_FUSED) return T * (T + 1) / 2 * (K + V);
        return 0;
    case VLA_MECH_LINEAR:
        /* SEQUENTIAL per token: ST += k v^T  K V,  o = ST^T q  K V  ->  2 T K V.
         * CHUNKED per chunk (no residual): O = Q ST  c K V,  M = Q W^T  c^2 K,
         * O += M E  c^2 V,  ST += W^T E  c K V  ->  S_c [2 c K V + c^2 (K + V)]. */
        if (a == VLA_ALGO_SEQUENTIAL) return 2 * T * K * V;
        if (a == VLA_ALGO_CHUNKED) return over_chunks(chunked_linear, s->T, C, K, V);
        return 0;
    case VLA_MECH_DELTA:
        /* SEQUENTIAL per token: e = ST^T k  K V,  ST = g ST + (beta k) e^T  K V,
         * o = ST^T q  K V  ->  3 T K V.
         * CHUNKED: S_c [3 c K V + 2 c^2 K + c^2 V + c(c-1)/2 V] (chunk_step_macs). */
        if (a == VLA_ALGO_SEQUENTIAL) return 3 * T * K * V;
        if (a == VLA_ALGO_CHUNKED) return over_chunks(chunked_delta, s->T, C, K, V);
        return 0;
    case VLA_MECH_VLA:
        switch (a) {
        case VLA_ALGO_SEQUENTIAL:
            /* per token: A step 3 K^2 + 2 K; e = v - ST^T k  K V; ST += a e^T  K V;
             * o = ST^T q  K V  ->  T (3 K^2 + 2 K + 3 K V). */
            return T * (a_step_macs(K) + 3 * K * V);
        case VLA_ALGO_CHUNKED:
            /* S_c [a part + chunk step] = S_c [3 c K^2 + 3 c^2 K + (c^3 - c)/6 + c(c-1)/2 K
             *                                   + 3 c K V + 2 c^2 K + c^2 V + c(c-1)/2 V]. */
            return over_chunks(chunked_vla, s->T, C, K, V);
        case VLA_ALGO_SCAN: {
            /* a_t by the sequential A recurrence        T (3 K^2 + 2 K)
             * maps M = I - a k^T, N = a v^T              T (K^2 + K V)
             * Blelloch scan: n_comb(T) compositions      n_comb(T) (K^3 + K^2 V), n_comb ~ 2T
             * o_t = ST0^T (M_t^T q) + N_t^T q            T (K^2 + 2 K V)
             * final state ST = M_T ST0 + N_T             K^2 V */
            const double ncomb = (double)bench_scan_combines(s->T);
            return T * a_step_macs(K) + T * (K * K + K * V) + ncomb * compose_macs(K, V) + T * (K * K + 2 * K * V) +
                   K * K * V;
        }
        case VLA_ALGO_TWO_LEVEL: {
            /* level 0: A part per chunk; level 1: each chunk's map, composed within its
             * segment (chunks - segments compositions); level 2: scan over the segment maps;
             * level 3: each segment but the first applies its start map (K^2 V), then the
             * chunk steps:
             *   S_c [a part + chunk map + chunk step] + (n_chunks - n_seg + n_comb(n_seg)) (K^3 + K^2 V)
             *   + (n_seg - 1) K^2 V. */
            long long nchunks, seg, nseg;
            segments(s, &nchunks, &seg, &nseg);
            return over_chunks(two_level_chunk, s->T, C, K, V) +
                   (double)(nchunks - nseg + bench_scan_combines(nseg)) * compose_macs(K, V) +
                   (double)(nseg - 1) * K * K * V;
        }
        default: return 0;
        }
    }
    return 0;
}

double bench_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    if (!s || s->B <= 0 || s->H <= 0 || s->T <= 0 || s->dk <= 0 || s->dv <= 0) return 0;
    return (double)s->B * s->H * head_macs(m, a, s);
}

double bench_flops(vla_mechanism m, vla_algorithm a, const bench_shape *s) { return 2 * bench_macs(m, a, s); }

/* Floats per head. Every mechanism: q, k [T, K] and v [T, V] read, o [T, V] written, plus u
 * [T, K] when given (VLA). Final states written: linear S [K, V] and n [K]; delta S; vla S
 * and A [K, K] (n only with the normalised output, which vla-bench does not use). Extra:
 *   scan: the maps (K^2 + K V per token) written once and read once for the outputs, and
 *     a_t [T, K] written and read once: 2 T (K^2 + K V) + 2 T K. The scan's own passes
 *     re-read and re-write maps (3 per combination, ~2T combinations); those are not counted.
 *   two-level: a_t [T, K] written at level 0 and read at levels 1 and 3 (3 T K); k and v
 *     read a second time at level 3 (T (K + V)); the segment maps written and read once
 *     (2 n_seg (K^2 + K V)). */
static double head_floats(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    const double T = s->T, K = s->dk, V = s->dv;
    double f = T * (2 * K + V) + T * V;
    if (m == VLA_MECH_VLA && s->has_u) f += T * K;
    switch (m) {
    case VLA_MECH_SOFTMAX: break;
    case VLA_MECH_LINEAR: f += K * V + K; break;
    case VLA_MECH_DELTA: f += K * V; break;
    case VLA_MECH_VLA: f += K * V + K * K; break;
    }
    if (m == VLA_MECH_VLA && a == VLA_ALGO_SCAN) f += 2 * T * (K * K + K * V) + 2 * T * K;
    if (m == VLA_MECH_VLA && a == VLA_ALGO_TWO_LEVEL) {
        long long nchunks, seg, nseg;
        segments(s, &nchunks, &seg, &nseg);
        f += 3 * T * K + T * (K + V) + 2 * (double)nseg * (K * K + K * V);
    }
    return f;
}

double bench_bytes(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    if (bench_macs(m, a, s) <= 0) return 0;
    return 4.0 * s->B * s->H * head_floats(m, a, s);
}

/* ---- crossover and slope ---- */

bench_cross bench_crossover(const double *T, const double *lin, const double *soft, int n, double *t_cross) {
    if (t_cross) *t_cross = NAN;
    if (n <= 0) return BENCH_CROSS_NOT_FOUND;
    int last = -1; /* the last point where the linear series is not faster */
    for (int i = 0; i < n; i++)
        if (lin[i] >= soft[i]) last = i;
    if (last < 0) return BENCH_CROSS_BELOW_MIN;
    if (last == n - 1) return BENCH_CROSS_NOT_FOUND;
    /* d = log(lin/soft) is >= 0 at `last` and < 0 at `last + 1`; linear in log T between. */
    const double d0 = log(lin[last] / soft[last]), d1 = log(lin[last + 1] / soft[last + 1]);
    const double x0 = log(T[last]), x1 = log(T[last + 1]);
    const double x = x0 + d0 / (d0 - d1) * (x1 - x0);
    if (t_cross) *t_cross = exp(x);
    return BENCH_CROSS_FOUND;
}

double bench_slope(const double *T, const double *ms, int n, double t_min, int min_points, int *used) {
    int big = 0;
    for (int i = 0; i < n; i++)
        if (T[i] >= t_min) big++;
    const int restrict_big = big >= min_points;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (restrict_big && T[i] < t_min) continue;
        if (!(T[i] > 0) || !(ms[i] > 0)) continue;
        const double x = log(T[i]), y = log(ms[i]);
        sx += x; sy += y; sxx += x * x; sxy += x * y;
        k++;
    }
    if (used) *used = k;
    if (k < 2) return NAN;
    const double den = k * sxx - sx * sx;
    if (!(fabs(den) > 1e-12 * (k * sxx + 1))) return NAN;
    return (k * sxy - sx * sy) / den;
}

double bench_estimate_ms(vla_mechanism m, double t_prev, double ms_prev, double T, double slope) {
    if (!(slope > 0) || isnan(slope)) slope = m == VLA_MECH_SOFTMAX ? 2.0 : 1.0;
    return ms_prev * pow(T / t_prev, slope);
}
