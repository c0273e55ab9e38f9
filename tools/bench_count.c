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
    case VLA_MECH_DELTA_PAPER:
        /* SEQUENTIAL only, per token: e = v - ST^T k  K V,  ST = ST diag(g) + k e^T  K V (the gate's
         * K V multiplies are elementwise, not counted, and vla-bench passes no gate),
         * o = ST^T q  K V  ->  3 T K V. */
        return a == VLA_ALGO_SEQUENTIAL ? 3 * T * K * V : 0;
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
 * [T, K] when given (VLA). Final states written: linear S [K, V] and n [K]; delta and delta-paper S; vla S
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
    case VLA_MECH_DELTA:
    case VLA_MECH_DELTA_PAPER: f += K * V; break; /* no beta or g: vla-bench passes none */
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

/* ---- the backward (backends/cpu/cpu_grad_*.c) ---- */

/* Tokens in the last chunk: the backward's walk starts there with the states the forward pass
 * left, so only the other chunks are recomputed token by token (the chunked S part recomputes
 * every chunk, the last one too). */
static double last_chunk(int T, int C) { return T - (double)((T - 1) / C) * C; }

/* The chunk forward of cpu_grad_chunk_forward and its VJP, cpu_grad_chunk_vjp (MACs, one chunk of
 * c; residual r = 1 for delta and vla, 0 for linear). Forward, for the checkpoints (ST_end, no O):
 *   KS = Kr ST0  c K V (r),  Lr = Kr W^T  c^2 K (r),  solve  c(c-1)/2 V (r),
 *   QS = Q ST0  c K V,  Pq = Q W^T  c^2 K   (computed whatever the outputs),  ST_end: W^T E  c K V.
 * Recompute in the backward walk: the same without ST_end, with O = Pm E (c^2 V) for linear's
 * normaliser.
 * VJP: W dST, dW += E dST^T, dQ += dO ST0^T, dST0 += Q^T dO  4 c K V;  Pm^T dO, G = dO E^T  2 c^2 V;
 *   dQ += G W, dW += G^T Q  2 c^2 K;  residual: back substitution c(c-1)/2 V, G = dB E^T  c^2 V,
 *   dKr += G W, dW += G^T Kr  2 c^2 K, dKr -= dB ST0^T, dST0 -= Kr^T dB  2 c K V. */
static double bwd_chunk_linear(double c, double K, double V) {
    const double fwd = 2 * c * K * V + c * c * K, re = c * K * V + c * c * K + c * c * V;
    const double vjp = 4 * c * K * V + 2 * c * c * V + 2 * c * c * K;
    return fwd + re + vjp; /* 7 c K V + 4 c^2 K + 3 c^2 V */
}
static double bwd_chunk_residual(double c, double K, double V) {
    const double solve = c * (c - 1) / 2 * V;
    const double fwd = 3 * c * K * V + 2 * c * c * K + solve, re = 2 * c * K * V + 2 * c * c * K + solve;
    const double vjp = 6 * c * K * V + 4 * c * c * K + 3 * c * c * V + solve;
    return fwd + re + vjp; /* 11 c K V + 8 c^2 K + 3 c^2 V + 3 c(c-1)/2 V */
}

/* One token of the A part's adjoint (a_backward): a . da  K;  dA += dy k^T, A^T dy, G z, G^T z,
 * A += z z^T / den, dA += dz u^T, A^T dz  7 K^2;  z^T G z  K. = 7 K^2 + 2 K. */
static double a_back_macs(double K) { return 7 * K * K + 2 * K; }

static double head_bwd_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    const double T = s->T, K = s->dk, V = s->dv;
    const int C = chunk_size(s);
    const double redo = 2 * T - last_chunk(s->T, C); /* tokens stepped forward: the pass, then the recompute */
    switch (m) {
    case VLA_MECH_SOFTMAX:
        /* FUSED (cpu_grad_softmax.c), per causal pair: query tiles: Q K^T, P V (lse, o)  K + V;
         * Q K^T, dO V^T, dq += dP K  2K + V;  key tiles: Q K^T, dO V^T, dk += dP^T Q, dv += P^T dO
         * 2K + 2V  ->  T(T+1)/2 (5 K + 4 V). */
        return a == VLA_ALGO_FUSED ? T * (T + 1) / 2 * (5 * K + 4 * V) : 0;
    case VLA_MECH_LINEAR:
        /* SEQUENTIAL (cpu_grad_delta.c): a step forward, ST += k v^T  K V, for 2T - c_last tokens;
         * the adjoint a token: num = ST^T q, dST += q dnum^T, ST dnum, dST e, dST^T k  5 K V.
         * CHUNKED: S_c bwd_chunk_linear. */
        if (a == VLA_ALGO_SEQUENTIAL) return redo * K * V + 5 * T * K * V;
        if (a == VLA_ALGO_CHUNKED) return over_chunks(bwd_chunk_linear, s->T, C, K, V);
        return 0;
    case VLA_MECH_DELTA:
        /* SEQUENTIAL: a step forward, e = ST^T k, ST += w e^T  2 K V, for 2T - c_last tokens; the
         * adjoint a token: dST += q dnum^T, ST_t dnum, dST e, dST^T k, dST -= k de^T,
         * ST_{t-1} de  6 K V.  CHUNKED: S_c bwd_chunk_residual. */
        if (a == VLA_ALGO_SEQUENTIAL) return redo * 2 * K * V + 6 * T * K * V;
        if (a == VLA_ALGO_CHUNKED) return over_chunks(bwd_chunk_residual, s->T, C, K, V);
        return 0;
    case VLA_MECH_DELTA_PAPER:
        /* SEQUENTIAL (cpu_delta_paper.c), as delta's: a step forward, e = v - ST^T k, ST += k e^T
         * 2 K V, for 2T - c_last tokens; the adjoint a token: dST += q dO^T, ST_t dO, dST^T k,
         * dST e, ST_{t-1} de, dST -= k de^T  6 K V (the gate's dg = <dST, ST_{t-1}> by row adds
         * K V with a gate; vla-bench passes none). */
        return a == VLA_ALGO_SEQUENTIAL ? redo * 2 * K * V + 6 * T * K * V : 0;
    case VLA_MECH_VLA:
        /* SEQUENTIAL (cpu_grad_vla.c): a step forward, A part 3 K^2 + 2 K and S part 2 K V, for
         * 2T - c_last tokens; the adjoint a token: S part dST += q dnum^T, ST dnum, dST^T a, dST e,
         * ST -= a e^T (undoing the step), ST de, dST -= k de^T  7 K V, and the A part 7 K^2 + 2 K.
         * CHUNKED: the A part as sequential's (token by token), the S part S_c bwd_chunk_residual. */
        if (a == VLA_ALGO_SEQUENTIAL)
            return redo * (a_step_macs(K) + 2 * K * V) + T * (7 * K * V + a_back_macs(K));
        if (a == VLA_ALGO_CHUNKED)
            return redo * a_step_macs(K) + T * a_back_macs(K) + over_chunks(bwd_chunk_residual, s->T, C, K, V);
        return 0;
    }
    return 0;
}

int bench_bwd_defined(vla_mechanism m, vla_algorithm a) {
    if (m == VLA_MECH_SOFTMAX) return a == VLA_ALGO_FUSED;
    if (m == VLA_MECH_DELTA_PAPER) return a == VLA_ALGO_SEQUENTIAL;
    return (m == VLA_MECH_LINEAR || m == VLA_MECH_DELTA || m == VLA_MECH_VLA) &&
           (a == VLA_ALGO_SEQUENTIAL || a == VLA_ALGO_CHUNKED);
}

double bench_bwd_macs(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    if (!s || s->B <= 0 || s->H <= 0 || s->T <= 0 || s->dk <= 0 || s->dv <= 0 || !bench_bwd_defined(m, a)) return 0;
    return (double)s->B * s->H * head_bwd_macs(m, a, s);
}

double bench_bwd_flops(vla_mechanism m, vla_algorithm a, const bench_shape *s) { return 2 * bench_bwd_macs(m, a, s); }

/* Floats per head (bench_count.h says what is counted). n_c = ceil(T/C) checkpoints of the state:
 * S [K, V]; linear sequential also n [K]; vla also A [K, K]. */
static double head_bwd_floats(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    const double T = s->T, K = s->dk, V = s->dv;
    const double u = m == VLA_MECH_VLA && s->has_u ? T * K : 0.0;
    const double walk = T * (2 * K + 2 * V) + u, out = T * (2 * K + V) + u; /* q k v (u) dO; dq dk dv (du) */
    if (m == VLA_MECH_SOFTMAX) return walk + out + 4 * T;
    const double nc = ceil(T / chunk_size(s));
    double state = K * V;
    if (m == VLA_MECH_VLA) state += K * K;
    if (m == VLA_MECH_LINEAR && a == VLA_ALGO_SEQUENTIAL) state += K;
    double f = T * (K + V) + u + walk + out + 2 * nc * state;
    if (m == VLA_MECH_LINEAR && a == VLA_ALGO_CHUNKED) f += 2 * T * K;
    return f;
}

double bench_bwd_bytes(vla_mechanism m, vla_algorithm a, const bench_shape *s) {
    if (bench_bwd_macs(m, a, s) <= 0) return 0;
    return 4.0 * s->B * s->H * head_bwd_floats(m, a, s);
}

/* ---- the counts of vla-bench --targets (the CUDA backend's kernels) ---- */

/* The CUDA kernels' chunk steps, full chunks, as their formulas print (the CPU forms' exact
 * triangles are in chunk_step_macs and a_part_macs above).
 * S part: E = V - K X; Lw; solve; O; M; O += M E; X += W^T E. */
static double cuda_s_part_macs(double c, double K, double V) {
    return 3 * c * K * V + 2 * c * c * K + c * c * V + c * c * V / 2;
}
/* A part: Z = U A; G; Cholesky; solve; K A; K Z^T; M Z; Z^T Z. */
static double cuda_a_part_macs(double c, double K) {
    return 3 * c * K * K + 3 * c * c * K + c * c * c / 6 + c * c * K / 2;
}

bench_target_count bench_count_target(vla_mechanism m, vla_algorithm a, double T, double K, double V, double heads,
                                      int u_given) {
    const double C = 64, nc = ceil(T / C), io = 4.0 * T * (2 * K + 2 * V); /* q, k, v read; o written */
    bench_target_count r = {0, 0, ""};
    if (m == VLA_MECH_SOFTMAX) {
        r.flop = 2 * (T * (T + 1) / 2) * (K + V);
        r.bytes = io;
        r.formula = "2*T(T+1)/2*(K+V)  ; 4T(2K+2V)";
    } else if (m != VLA_MECH_VLA && a == VLA_ALGO_SEQUENTIAL) {
        /* per token: linear S += k v^T, o = S^T q (2KV); delta and delta-paper also y = S^T k (3KV) */
        r.flop = 2 * T * (m == VLA_MECH_LINEAR ? 2 : 3) * K * V;
        r.bytes = io + 4 * (K * V + (m == VLA_MECH_LINEAR ? K : 0));
        r.formula = m == VLA_MECH_LINEAR ? "2*T*2KV  ; 4T(2K+2V) + 4(KV+K)" : "2*T*3KV  ; 4T(2K+2V) + 4KV";
    } else if (m == VLA_MECH_LINEAR) {
        r.flop = 2 * nc * (2 * C * K * V + C * C * (K + V));
        r.bytes = io + 4 * (K * V + K);
        r.formula = "2*n_c*(2CKV + C^2(K+V))  ; 4T(2K+2V) + 4(KV+K)";
    } else if (m == VLA_MECH_DELTA_PAPER) {
        r.formula = "(delta-paper: sequential only)"; /* no chunked form: nothing to count */
    } else if (m == VLA_MECH_DELTA) {
        r.flop = 2 * nc * cuda_s_part_macs(C, K, V);
        r.bytes = io + 4 * K * V;
        r.formula = "2*n_c*(3CKV + 2C^2K + 1.5C^2V)  ; 4T(2K+2V) + 4KV";
    } else {
        const double st = 4 * (K * V + K * K);
        switch (a) {
        case VLA_ALGO_SEQUENTIAL:
            r.flop = 2 * T * (3 * K * K + 3 * K * V);
            r.bytes = io + st;
            r.formula = "2*T*(3K^2 + 3KV)  ; 4T(2K+2V) + 4(KV+K^2)";
            break;
        case VLA_ALGO_CHUNKED:
            /* The chunk-parallel form (kernels/cuda/vla_chunkpar.cu; R = 0, K <= 64), operations as
             * executed (full C x C products, not their triangles), a chunk: Gram C K^2; inversion
             * K^3 (one a segment: counted a chunk, an upper bound); A part U A0, K A0, Z^T Z 3CK^2 +
             * G, K Z^T, M Z 3C^2K + Cholesky C^3/6 + Z solve C^2K/2; S factors Lw C^2K + solves
             * C^2(K+V)/2 + P, Q CK^2 + CKV; walk K^2 V; output Q Al^T, Pm W 2C^2K + Q X CKV + Pm Y
             * C^2V. Bytes: q k v o, the A^{-1} prefix (double: written twice, read twice), a_t and
             * W (written, read twice), Y (written, read), the maps and chunk-start states.
             * With u = k^ (u not given) the A part takes a_t from Z's rows: no K A0, K Z^T or M Z
             * (CK^2 + 2C^2K less). */
            if (u_given) {
                r.flop = 2 * nc * (5 * C * K * K + K * K * K + 7 * C * C * K + C * C * C / 6 + 2 * C * K * V + K * K * V +
                                   1.5 * C * C * V);
                r.formula = "2*n_c*(5CK^2+K^3+7C^2K+C^3/6+2CKV+K^2V+1.5C^2V)  ; 4T(2K+2V) + 32n_cK^2 + 24TK + 8TV + 8n_cK(K+2V)";
            } else {
                r.flop = 2 * nc * (4 * C * K * K + K * K * K + 5 * C * C * K + C * C * C / 6 + 2 * C * K * V + K * K * V +
                                   1.5 * C * C * V);
                r.formula = "2*n_c*(4CK^2+K^3+5C^2K+C^3/6+2CKV+K^2V+1.5C^2V)  ; 4T(2K+2V) + 32n_cK^2 + 24TK + 8TV + 8n_cK(K+2V)";
            }
            r.bytes = io + st + 32 * nc * K * K + 24 * T * K + 8 * T * V + 8 * nc * K * (K + 2 * V);
            break;
        case VLA_ALGO_TWO_LEVEL:
            /* Gram (C K^2 a chunk) + A part + the chunk map on [M|N] (S part at width K+V) +
             * the S part again for the outputs; segment inverses and the map scan are O(K^3)
             * per segment and left out. Bytes: a_t written once, read once (8TK). */
            r.flop = 2 * nc *
                     (C * K * K + cuda_a_part_macs(C, K) + cuda_s_part_macs(C, K, K + V) + cuda_s_part_macs(C, K, V));
            r.bytes = io + st + 8 * T * K;
            r.formula = "2*n_c*(CK^2 + A part + S part(K+V) + S part(V))  ; 4T(2K+2V) + 8TK + 4(KV+K^2)";
            break;
        case VLA_ALGO_SCAN: {
            /* a_t as two-level; maps built (TK(K+V)); Brent-Kung ~2T compositions of K^2(K+V);
             * outputs T(K(K+V) + KV). Bytes: the maps written once and read once. */
            const double ncomb = 2 * T;
            r.flop = 2 * (nc * (C * K * K + cuda_a_part_macs(C, K)) + T * K * (K + V) + ncomb * K * K * (K + V) +
                          T * (K * (K + V) + K * V));
            r.bytes = io + st + 8 * T * K * (K + V) + 8 * T * K;
            r.formula = "2*(A part + 2T*K^2(K+V) + 2T*K(K+V))  ; 4T(2K+2V) + 8TK(K+V) + 8TK";
            break;
        }
        default: break;
        }
    }
    r.flop *= heads;
    r.bytes *= heads;
    return r;
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
