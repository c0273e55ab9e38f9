/* The causal softmax backward (VLA-MATH 5), flash-attention style: the probabilities are recomputed
 * tile by tile from per-row statistics; the T x T matrix is never stored.
 *   x_ts = scale q_t . k_s (s <= t),  P_ts = exp(x_ts - lse_t),  D_t = dO_t . o_t = sum_s P_ts (dO_t . v_s)
 *   dx_ts = P_ts (dO_t . v_s - D_t)
 *   dq_t = scale sum_{s<=t} dx_ts k_s,  dk_s = scale sum_{t>=s} dx_ts q_t,  dv_s = sum_{t>=s} P_ts dO_t
 * The backward is not given o, so D_t is formed online beside lse_t (the running sum of
 * exp(x - m) (dO . v) rescaled with the sum of exp(x - m)). Two kernels in either form:
 *   rows  one block per (head, query tile): sweep 1 over the key tiles at or before it for lse_t and
 *         D_t, stored to the workspace; sweep 2 for dq.
 *   keys  one block per (head, key tile): dk and dv from every query tile at or after it.
 * Per pair that is dk + dv multiply-adds in sweep 1, 2 dk + dv in sweep 2 and 2 dk + 2 dv in keys
 * (5 dk + 4 dv; S and dP three times). One kernel per key tile adding dq with atomics would save
 * dk + dv of them, but its sums' order would vary from call to call, and a gradient requested alone
 * must equal the same gradient requested with the others, bit for bit (test_backward_outputs).
 * Forms:
 *   mma   dk, dv <= 64 where its 71 to 103 KiB of shared memory fit (below: gmx): 64 x 64 tiles, every
 *         product a block product of vla_mma.cuh (3xTF32 tensor cores on sm_80+, register-tiled FMA
 *         where built for older devices).
 *   FMA   every other shape (dk or dv up to 256, sm_75's 64 KiB): tiles of TL rows (the largest of
 *         64 .. 4 whose shared memory fits), one output a thread.
 * Masked pairs (s > t) are skipped, never multiplied by 0, so a NaN in a later key or value cannot reach
 * an earlier row's gradients; a NaN score propagates through the row's maximum (as the CPU backend). */
#include "vla_grad.cuh"
#include "vla_mma.cuh"

#include <stdlib.h>

namespace vlacu {
namespace grad {

#define TLMAX 64

/* Visible keys of query row i in the key tile starting at j0 with nk keys. */
__device__ __forceinline__ int visible(int i, int j0, int nk) {
    const int last = i - j0 + 1;
    return last < 0 ? 0 : last > nk ? nk : last;
}

__host__ __device__ inline size_t rows_floats(int dk, int dv, int tl) {
    return (size_t)tl * (3 * (size_t)ld_of(dk) + 2 * (size_t)ld_of(dv)) + 2 * (size_t)tl * (tl + 1);
}
__host__ __device__ inline size_t keys_floats(int dk, int dv, int tl) {
    return (size_t)tl * (3 * (size_t)ld_of(dk) + 3 * (size_t)ld_of(dv)) + 2 * (size_t)tl * (tl + 1);
}

/* rows[r][i] = src row (r0 + r) of head (b, h), i < D, r < n (no barrier). */
__device__ __forceinline__ void load_tile(const vlacu_args &a, const float *src, int D, int b, int h, int r0, int n,
                                          float *dst, int ld) {
    for (int e = threadIdx.x; e < n * D; e += blockDim.x) {
        const int r = e / D, i = e - r * D;
        dst[(size_t)r * ld + i] = src[(((size_t)b * a.T + r0 + r) * a.H + h) * D + i];
    }
}

/* S[r][c] = scale Q_r . K_c and dP[r][c] = dO_r . V_c for r < nq, c < nk (no barrier). */
__device__ __forceinline__ void scores(int nq, int nk, int dk, int dv, float scale, const float *Q, int ldq,
                                       const float *K, const float *dO, int ldo, const float *V, float *S, float *dP,
                                       int lds) {
    for (int e = threadIdx.x; e < nq * nk; e += blockDim.x) {
        const int r = e / nk, c = e - r * nk;
        float s = 0.0f, p = 0.0f;
        for (int d = 0; d < dk; d++) s = fmaf(Q[(size_t)r * ldq + d], K[(size_t)c * ldq + d], s);
        for (int d = 0; d < dv; d++) p = fmaf(dO[(size_t)r * ldo + d], V[(size_t)c * ldo + d], p);
        S[(size_t)r * lds + c] = scale * s;
        dP[(size_t)r * lds + c] = p;
    }
}

/* For the visible pairs: S <- P = exp(S - lse_r), dP <- P (dP - D_r); 0 elsewhere (no barrier). */
__device__ __forceinline__ void probs(int i0, int nq, int j0, int nk, const float *lse, const float *Dr, float *S,
                                      float *dP, int lds) {
    for (int e = threadIdx.x; e < nq * nk; e += blockDim.x) {
        const int r = e / nk, c = e - r * nk;
        const bool vis = j0 + c <= i0 + r;
        const size_t x = (size_t)r * lds + c;
        const float p = vis ? expf(S[x] - lse[r]) : 0.0f;
        S[x] = p;
        dP[x] = vis ? p * (dP[x] - Dr[r]) : 0.0f;
    }
}

__global__ void __launch_bounds__(VLACU_NT) grad_softmax_rows_kernel(const gsm_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float m_s[TLMAX], l_s[TLMAX], d_s[TLMAX];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tl = P.tile, tid = threadIdx.x, nt = blockDim.x;
    const int nqt = (T + tl - 1) / tl, bh = blockIdx.x / nqt, i0 = (blockIdx.x % nqt) * tl;
    const int b = bh / a.H, h = bh % a.H, nq = imin(tl, T - i0), i1 = i0 + nq;
    const int ldq = ld_of(dk), ldo = ld_of(dv), lds = tl + 1;
    const float scale = (float)a.scale;
    float *Q = (float *)smem, *K = Q + (size_t)tl * ldq, *dQ = K + (size_t)tl * ldq;
    float *dO = dQ + (size_t)tl * ldq, *V = dO + (size_t)tl * ldo;
    float *S = V + (size_t)tl * ldo, *dP = S + (size_t)tl * lds;

    load_tile(a, a.q, dk, b, h, i0, nq, Q, ldq);
    load_tile(a, P.dO, dv, b, h, i0, nq, dO, ldo);
    for (int r = tid; r < nq; r += nt) m_s[r] = -INFINITY, l_s[r] = 0.0f, d_s[r] = 0.0f;
    for (int e = tid; e < nq * dk; e += nt) {
        const int r = e / dk, d = e - r * dk;
        dQ[(size_t)r * ldq + d] = 0.0f;
    }
    /* sweep 1: lse and D */
    for (int j0 = 0; j0 < i1; j0 += tl) {
        const int nk = imin(tl, i1 - j0);
        __syncthreads(); /* K, V, S are rewritten */
        load_tile(a, a.k, dk, b, h, j0, nk, K, ldq);
        load_tile(a, a.v, dv, b, h, j0, nk, V, ldo);
        __syncthreads();
        scores(nq, nk, dk, dv, scale, Q, ldq, K, dO, ldo, V, S, dP, lds);
        __syncthreads();
        for (int r = tid; r < nq; r += nt) {
            const int vis = visible(i0 + r, j0, nk);
            if (!vis) continue;
            const float *sr = S + (size_t)r * lds, *pr = dP + (size_t)r * lds;
            float mx = m_s[r];
            for (int c = 0; c < vis; c++)
                if (sr[c] > mx || sr[c] != sr[c]) mx = mx != mx ? mx : sr[c]; /* a NaN score propagates */
            const float corr = expf(m_s[r] - mx);
            float l = 0.0f, d = 0.0f;
            for (int c = 0; c < vis; c++) {
                const float p = expf(sr[c] - mx);
                l += p;
                d = fmaf(p, pr[c], d);
            }
            l_s[r] = l_s[r] * corr + l;
            d_s[r] = d_s[r] * corr + d;
            m_s[r] = mx;
        }
    }
    __syncthreads();
    float *lse = P.lse + (size_t)bh * T, *Dr = P.D + (size_t)bh * T;
    for (int r = tid; r < nq; r += nt) {
        const float L = m_s[r] + logf(l_s[r]), D = d_s[r] / l_s[r];
        m_s[r] = L, d_s[r] = D; /* this block's rows: lse and D from here on */
        lse[i0 + r] = L;
        Dr[i0 + r] = D;
    }
    /* sweep 2: dq = scale sum_s dx_ts k_s */
    for (int j0 = 0; j0 < i1; j0 += tl) {
        const int nk = imin(tl, i1 - j0);
        __syncthreads();
        load_tile(a, a.k, dk, b, h, j0, nk, K, ldq);
        load_tile(a, a.v, dv, b, h, j0, nk, V, ldo);
        __syncthreads();
        scores(nq, nk, dk, dv, scale, Q, ldq, K, dO, ldo, V, S, dP, lds);
        __syncthreads();
        probs(i0, nq, j0, nk, m_s, d_s, S, dP, lds);
        __syncthreads();
        for (int e = tid; e < nq * dk; e += nt) {
            const int r = e / dk, d = e - r * dk, vis = visible(i0 + r, j0, nk);
            float s = 0.0f;
            for (int c = 0; c < vis; c++) s = fmaf(dP[(size_t)r * lds + c], K[(size_t)c * ldq + d], s);
            dQ[(size_t)r * ldq + d] += scale * s;
        }
    }
    if (P.dq)
        for (int e = tid; e < nq * dk; e += nt) {
            const int r = e / dk, d = e - r * dk;
            P.dq[(((size_t)b * T + i0 + r) * a.H + h) * dk + d] = dQ[(size_t)r * ldq + d];
        }
}

__global__ void __launch_bounds__(VLACU_NT) grad_softmax_keys_kernel(const gsm_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float lse_s[TLMAX], D_s[TLMAX];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tl = P.tile, tid = threadIdx.x, nt = blockDim.x;
    const int nkt = (T + tl - 1) / tl, bh = blockIdx.x / nkt, j0 = (blockIdx.x % nkt) * tl;
    const int b = bh / a.H, h = bh % a.H, nk = imin(tl, T - j0);
    const int ldq = ld_of(dk), ldo = ld_of(dv), lds = tl + 1;
    const float scale = (float)a.scale;
    float *K = (float *)smem, *dK = K + (size_t)tl * ldq, *Q = dK + (size_t)tl * ldq;
    float *V = Q + (size_t)tl * ldq, *dV = V + (size_t)tl * ldo, *dO = dV + (size_t)tl * ldo;
    float *S = dO + (size_t)tl * ldo, *dP = S + (size_t)tl * lds;
    const float *lse = P.lse + (size_t)bh * T, *Dr = P.D + (size_t)bh * T;

    load_tile(a, a.k, dk, b, h, j0, nk, K, ldq);
    load_tile(a, a.v, dv, b, h, j0, nk, V, ldo);
    for (int e = tid; e < nk * dk; e += nt) {
        const int c = e / dk, d = e - c * dk;
        dK[(size_t)c * ldq + d] = 0.0f;
    }
    for (int e = tid; e < nk * dv; e += nt) {
        const int c = e / dv, d = e - c * dv;
        dV[(size_t)c * ldo + d] = 0.0f;
    }
    for (int i0 = j0; i0 < T; i0 += tl) { /* query tiles aligned with the key tiles: the first is j0's */
        const int nq = imin(tl, T - i0);
        __syncthreads();
        load_tile(a, a.q, dk, b, h, i0, nq, Q, ldq);
        load_tile(a, P.dO, dv, b, h, i0, nq, dO, ldo);
        for (int r = tid; r < nq; r += nt) lse_s[r] = lse[i0 + r], D_s[r] = Dr[i0 + r];
        __syncthreads();
        scores(nq, nk, dk, dv, scale, Q, ldq, K, dO, ldo, V, S, dP, lds);
        __syncthreads();
        probs(i0, nq, j0, nk, lse_s, D_s, S, dP, lds);
        __syncthreads();
        for (int e = tid; e < nk * dk; e += nt) {
            const int c = e / dk, d = e - c * dk, r0 = imin(nq, j0 + c - i0 > 0 ? j0 + c - i0 : 0);
            float s = 0.0f;
            for (int r = r0; r < nq; r++) s = fmaf(dP[(size_t)r * lds + c], Q[(size_t)r * ldq + d], s);
            dK[(size_t)c * ldq + d] += scale * s;
        }
        for (int e = tid; e < nk * dv; e += nt) {
            const int c = e / dv, d = e - c * dv, r0 = imin(nq, j0 + c - i0 > 0 ? j0 + c - i0 : 0);
            float s = 0.0f;
            for (int r = r0; r < nq; r++) s = fmaf(S[(size_t)r * lds + c], dO[(size_t)r * ldo + d], s);
            dV[(size_t)c * ldo + d] += s;
        }
    }
    __syncthreads();
    for (int e = tid; e < nk * dk; e += nt) {
        const int c = e / dk, d = e - c * dk;
        if (P.dk) P.dk[(((size_t)b * T + j0 + c) * a.H + h) * dk + d] = dK[(size_t)c * ldq + d];
    }
    for (int e = tid; e < nk * dv; e += nt) {
        const int c = e / dv, d = e - c * dv;
        if (P.dv) P.dv[(((size_t)b * T + j0 + c) * a.H + h) * dv + d] = dV[(size_t)c * ldo + d];
    }
}

/* ---- the mma form (dk, dv <= 64) ----
 * Tiles of BT = 64 query rows and 64 keys, 256 threads (8 warps), every product a block product of
 * vla_mma.cuh (mmb: 3xTF32 tensor-core tiles where built for sm_80+, else register-tiled FP32 FMA), dk and
 * dv zero-padded to DK, DV in {32, 64}. Scores in log2 units (c2 = scale log2(e)), so P = exp2(x - L)
 * with L = lse / ln 2 the row's statistic in the workspace. Per (query tile, key tile) pair:
 *   rows  sweep 1: S = Q K^T, dP = dO V^T (64 x 64 x DK, 64 x 64 x DV) through shared memory to a
 *         quad of threads per row for the online m, l and d (D = d / l); sweep 2 (dq requested):
 *         S, dP again, dS = scale P (dP - D) (registers, then shared), dQ += dS K (64 x DK x 64).
 *   keys  S, dP, then P and dS (shared), dV += P^T dO, dK += dS^T Q (64 x DV x 64, 64 x DK x 64).
 * Masked pairs and rows past T are selected to 0, never multiplied, in P and dS. Off the diagonal
 * tile every pair is visible; in the diagonal tile the products would still multiply those zeros by
 * the other operand (K in dQ, Q and dO in dK and dV), so a non-finite value there sends that tile's
 * product to a per-pair loop over the visible pairs only (block-uniform).
 * Shared memory (floats): Q, K [64][DK + 4], dO, V [64][DV + 4], A, B [64][68], L, D [64] and
 * 8 ints: 103 KiB at DK = DV = 64 (71 KiB at 32, 32), two blocks a multiprocessor on sm_90. */
namespace gmx {
using cp::NT;
constexpr int BT = 64;
constexpr float LOG2E = 1.4426950408889634074f;
static_assert(NT == 4 * BT, "sweep 1 takes a quad of threads a row");

template <int DK, int DV> struct lay {
    static constexpr int ldk = DK + cp::LD_PAD, ldv = DV + cp::LD_PAD, ldt = BT + cp::LD_PAD;
    static constexpr size_t floats = (size_t)BT * (2 * ldk + 2 * ldv + 2 * ldt) + 2 * BT + 8;
    static constexpr size_t bytes = floats * 4;
};

template <int DK, int DV> struct view {
    float *Q, *K, *dO, *V, *A, *B, *L, *Dr;
    int *flag;
    __device__ explicit view(unsigned char *smem) {
        typedef lay<DK, DV> S;
        Q = (float *)smem, K = Q + BT * S::ldk, dO = K + BT * S::ldk, V = dO + BT * S::ldv;
        A = V + BT * S::ldv, B = A + BT * S::ldt, L = B + BT * S::ldt, Dr = L + BT;
        flag = (int *)(Dr + BT);
    }
};

/* dst[r][i] = row (r0 + r) of head (b, h) of src (width d), zero for r >= n or i >= d; no barrier. */
template <int D>
__device__ __forceinline__ void load_rows(const vlacu_args &a, const float *src, int d, int b, int h, int r0, int n,
                                          float *dst, int ld) {
    const size_t base = ((size_t)b * a.T + r0) * a.H + h;
    for (int e = (int)threadIdx.x; e < BT * D; e += NT) {
        const int r = e / D, i = e % D;
        dst[r * ld + i] = r < n && i < d ? src[(base + (size_t)r * a.H) * d + i] : 0.0f;
    }
}

/* Whether rows r < n, columns i < d of X hold a non-finite value; each warp's answer in flag[warp]
 * (read after the caller's next barrier). */
__device__ __forceinline__ void flag_nonfinite(const float *X, int ld, int n, int d, const float *Y, int ldy, int dy,
                                               int *flag) {
    int bad = 0;
    for (int e = (int)threadIdx.x; e < n * d; e += NT) bad |= isfinite(X[(e / d) * ld + e % d]) ? 0 : 1;
    if (Y)
        for (int e = (int)threadIdx.x; e < n * dy; e += NT) bad |= isfinite(Y[(e / dy) * ldy + e % dy]) ? 0 : 1;
    bad = warp_sum(bad);
    if ((threadIdx.x & 31) == 0) flag[threadIdx.x >> 5] = bad;
}
__device__ __forceinline__ bool any_flag(const int *flag) {
    int f = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) f |= flag[w];
    return f != 0;
}

/* max that keeps a NaN from either side */
__device__ __forceinline__ float nanmax(float x, float y) { return (x != x || x > y) ? x : y; }

/* s = Q K^T and p = dO V^T over the block's 64 x 64 pairs (accumulators zeroed here). PAIR: as one
 * interleaved mmb2 when DK == DV (the keys kernel: no spills at 64 x 64; the rows kernel, holding
 * its statistics or dq besides, spills less with the two products one after the other). */
template <bool PAIR, int DK, int DV>
__device__ __forceinline__ void scores2(const view<DK, DV> &v, float (&s)[cp::blk<BT, BT>::NE],
                                        float (&p)[cp::blk<BT, BT>::NE]) {
    typedef lay<DK, DV> S;
    cp::zerob<BT, BT>(s);
    cp::zerob<BT, BT>(p);
    if constexpr (PAIR && DK == DV)
        cp::mmb2<BT, BT, DK, false, true, false, false>(v.Q, v.dO, S::ldk, v.K, v.V, S::ldk, s, p);
    else {
        cp::mmb<BT, BT, DK, false, true>(v.Q, S::ldk, v.K, S::ldk, s);
        cp::mmb<BT, BT, DV, false, true>(v.dO, S::ldv, v.V, S::ldv, p);
    }
}

/* Block (qt from the last: the longest rows first, bh): lse and D of the tile's rows to the
 * workspace, then dq when requested. */
template <int DK, int DV> __global__ void __launch_bounds__(NT, 2) rows_mma_kernel(const gsm_params P) {
    VLACU_DYNSMEM(smem);
    typedef lay<DK, DV> S;
    typedef cp::blk<BT, BT> SB;
    typedef cp::blk<BT, DK> QB;
    const view<DK, DV> v(smem);
    const vlacu_args &a = P.a;
    const int T = a.T, BH = a.B * a.H, nqt = (T + BT - 1) / BT, tid = (int)threadIdx.x;
    const int qt = nqt - 1 - (int)blockIdx.x / BH, bh = (int)blockIdx.x % BH, b = bh / a.H, h = bh % a.H;
    const int i0 = qt * BT, nq = imin(BT, T - i0);
    const float c2 = (float)a.scale * LOG2E, scale = (float)a.scale;
    load_rows<DK>(a, a.q, a.dk, b, h, i0, nq, v.Q, S::ldk);
    load_rows<DV>(a, P.dO, a.dv, b, h, i0, nq, v.dO, S::ldv);
    /* sweep 1: a quad of threads per row r, columns c = qd + 4 i; m, l, d replicated in the quad */
    const int r = tid >> 2, qd = tid & 3, t = i0 + r;
    float m = -INFINITY, l = 0.0f, d = 0.0f;
    for (int jt = 0; jt <= qt; jt++) {
        const int j0 = jt * BT, nk = imin(BT, T - j0);
        __syncthreads(); /* the previous tile's reads of K, V, A, B are done */
        load_rows<DK>(a, a.k, a.dk, b, h, j0, nk, v.K, S::ldk);
        load_rows<DV>(a, a.v, a.dv, b, h, j0, nk, v.V, S::ldv);
        __syncthreads();
        float s[SB::NE], p[SB::NE];
        scores2<false>(v, s, p);
#pragma unroll
        for (int e = 0; e < SB::NE; e++) {
            v.A[SB::row(e) * S::ldt + SB::col(e)] = s[e] * c2;
            v.B[SB::row(e) * S::ldt + SB::col(e)] = p[e];
        }
        __syncthreads();
        const int vis = imin(t - j0 + 1, nk); /* >= 1: j0 <= i0 <= t */
        const float *xr = v.A + r * S::ldt, *pr = v.B + r * S::ldt;
        float mx = -INFINITY;
#pragma unroll 4
        for (int c = qd; c < vis; c += 4) mx = nanmax(mx, xr[c]); /* a NaN score propagates */
        mx = nanmax(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = nanmax(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = nanmax(m, mx), ms = mn == -INFINITY ? 0.0f : mn, corr = exp2f(m - ms);
        float ls = 0.0f, ds = 0.0f;
#pragma unroll 4
        for (int c = qd; c < vis; c += 4) {
            const float e = exp2f(xr[c] - ms);
            ls += e;
            ds = fmaf(e, pr[c], ds);
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            ls += __shfl_xor_sync(0xffffffffu, ls, o);
            ds += __shfl_xor_sync(0xffffffffu, ds, o);
        }
        l = l * corr + ls;
        d = d * corr + ds;
        m = mn;
    }
    const float Lr = m + log2f(l), Dt = d / l;
    if (qd == 0) {
        v.L[r] = Lr, v.Dr[r] = Dt;
        if (t < T) P.lse[(size_t)bh * T + t] = Lr, P.D[(size_t)bh * T + t] = Dt;
    }
    if (!P.dq) return;
    /* sweep 2, from the diagonal tile (K and V still hold it) down: dq = sum_s dS_ts k_s */
    float dq[QB::NE];
    cp::zerob<BT, DK>(dq);
    for (int jt = qt; jt >= 0; jt--) {
        const int j0 = jt * BT;
        __syncthreads(); /* L, D written; the previous tile's reads of K, A are done */
        if (jt != qt) {
            load_rows<DK>(a, a.k, a.dk, b, h, j0, BT, v.K, S::ldk);
            load_rows<DV>(a, a.v, a.dv, b, h, j0, BT, v.V, S::ldv);
            __syncthreads();
        }
        float s[SB::NE], p[SB::NE];
        scores2<false>(v, s, p);
#pragma unroll
        for (int e = 0; e < SB::NE; e++) {
            const int rr = SB::row(e), c = SB::col(e), tt = i0 + rr;
            const bool vis = j0 + c <= tt && tt < T;
            const float pe = exp2f(s[e] * c2 - v.L[rr]);
            v.A[rr * S::ldt + c] = vis ? pe * ((p[e] - v.Dr[rr]) * scale) : 0.0f;
        }
        const bool diag = jt == qt;
        if (diag) flag_nonfinite(v.K, S::ldk, imin(BT, T - j0), a.dk, nullptr, 0, 0, v.flag);
        __syncthreads();
        if (!diag || !any_flag(v.flag)) {
            cp::mmb<BT, DK, BT, false, false>(v.A, S::ldt, v.K, S::ldk, dq);
        } else { /* a non-finite key in the diagonal tile: row rr over its keys c <= rr only */
#pragma unroll /* constant indices: the accumulators stay in registers */
            for (int e = 0; e < QB::NE; e++) {
                const int rr = QB::row(e), col = QB::col(e);
                float acc = dq[e];
                for (int c = 0; c <= rr; c++) acc = fmaf(v.A[rr * S::ldt + c], v.K[c * S::ldk + col], acc);
                dq[e] = acc;
            }
        }
    }
#pragma unroll
    for (int e = 0; e < QB::NE; e++) {
        const int tt = i0 + QB::row(e), col = QB::col(e);
        if (tt < T && col < a.dk) P.dq[(((size_t)b * T + tt) * a.H + h) * a.dk + col] = dq[e];
    }
}

/* Block (key tile jt from the first: the most query tiles first, bh): dk and dv of the tile's keys. */
template <int DK, int DV> __global__ void __launch_bounds__(NT, 2) keys_mma_kernel(const gsm_params P) {
    VLACU_DYNSMEM(smem);
    typedef lay<DK, DV> S;
    typedef cp::blk<BT, BT> SB;
    typedef cp::blk<BT, DK> KB;
    typedef cp::blk<BT, DV> VB;
    const view<DK, DV> v(smem);
    const vlacu_args &a = P.a;
    const int T = a.T, BH = a.B * a.H, nt = (T + BT - 1) / BT, tid = (int)threadIdx.x;
    const int jt = (int)blockIdx.x / BH, bh = (int)blockIdx.x % BH, b = bh / a.H, h = bh % a.H;
    const int j0 = jt * BT, nk = imin(BT, T - j0);
    const float c2 = (float)a.scale * LOG2E, scale = (float)a.scale;
    const float *lse = P.lse + (size_t)bh * T, *Dg = P.D + (size_t)bh * T;
    load_rows<DK>(a, a.k, a.dk, b, h, j0, nk, v.K, S::ldk);
    load_rows<DV>(a, a.v, a.dv, b, h, j0, nk, v.V, S::ldv);
    float dk[KB::NE], dv[VB::NE];
    cp::zerob<BT, DK>(dk);
    cp::zerob<BT, DV>(dv);
    for (int it = jt; it < nt; it++) {
        const int i0 = it * BT, nq = imin(BT, T - i0);
        __syncthreads(); /* the previous tile's reads of Q, dO, A, B, L, D are done */
        load_rows<DK>(a, a.q, a.dk, b, h, i0, nq, v.Q, S::ldk);
        load_rows<DV>(a, P.dO, a.dv, b, h, i0, nq, v.dO, S::ldv);
        for (int rr = tid; rr < BT; rr += NT) {
            v.L[rr] = rr < nq ? lse[i0 + rr] : 0.0f;
            v.Dr[rr] = rr < nq ? Dg[i0 + rr] : 0.0f;
        }
        __syncthreads();
        float s[SB::NE], p[SB::NE];
        scores2<true>(v, s, p);
#pragma unroll
        for (int e = 0; e < SB::NE; e++) {
            const int rr = SB::row(e), c = SB::col(e), tt = i0 + rr;
            const bool vis = j0 + c <= tt && tt < T;
            const float pe = vis ? exp2f(s[e] * c2 - v.L[rr]) : 0.0f;
            v.A[rr * S::ldt + c] = pe;
            v.B[rr * S::ldt + c] = vis ? pe * ((p[e] - v.Dr[rr]) * scale) : 0.0f;
        }
        const bool diag = it == jt;
        if (diag) flag_nonfinite(v.Q, S::ldk, nq, a.dk, v.dO, S::ldv, a.dv, v.flag);
        __syncthreads();
        if (!diag || !any_flag(v.flag)) {
            if constexpr (DK == DV)
                cp::mmb2<BT, DK, BT, true, false, false, false>(v.A, v.B, S::ldt, v.dO, v.Q, S::ldk, dv, dk);
            else {
                cp::mmb<BT, DV, BT, true, false>(v.A, S::ldt, v.dO, S::ldv, dv);
                cp::mmb<BT, DK, BT, true, false>(v.B, S::ldt, v.Q, S::ldk, dk);
            }
        } else { /* a non-finite query or dO row in the diagonal tile: key c over its rows r >= c only */
#pragma unroll /* constant indices: the accumulators stay in registers */
            for (int e = 0; e < VB::NE; e++) {
                const int c = VB::row(e), col = VB::col(e);
                float acc = dv[e];
                for (int rr = c; rr < nq; rr++) acc = fmaf(v.A[rr * S::ldt + c], v.dO[rr * S::ldv + col], acc);
                dv[e] = acc;
            }
#pragma unroll /* constant indices: the accumulators stay in registers */
            for (int e = 0; e < KB::NE; e++) {
                const int c = KB::row(e), col = KB::col(e);
                float acc = dk[e];
                for (int rr = c; rr < nq; rr++) acc = fmaf(v.B[rr * S::ldt + c], v.Q[rr * S::ldk + col], acc);
                dk[e] = acc;
            }
        }
    }
    if (P.dk)
#pragma unroll
        for (int e = 0; e < KB::NE; e++) {
            const int s = j0 + KB::row(e), col = KB::col(e);
            if (s < T && col < a.dk) P.dk[(((size_t)b * T + s) * a.H + h) * a.dk + col] = dk[e];
        }
    if (P.dv)
#pragma unroll
        for (int e = 0; e < VB::NE; e++) {
            const int s = j0 + VB::row(e), col = VB::col(e);
            if (s < T && col < a.dv) P.dv[(((size_t)b * T + s) * a.H + h) * a.dv + col] = dv[e];
        }
}
} // namespace gmx

static std::atomic<size_t> rows_smem_set[64], keys_smem_set[64], mma_smem_set[2][4][64];

size_t grad_softmax_static_smem() {
    static const size_t s = [] {
        const size_t r = static_smem_of((const void *)grad_softmax_rows_kernel, 1024);
        const size_t k = static_smem_of((const void *)grad_softmax_keys_kernel, 1024);
        return r > k ? r : k;
    }();
    return s;
}

/* The mma form's padded widths: 32 or 64. */
static int mma_width(int d) { return d <= 32 ? 32 : 64; }
static size_t mma_bytes(int dk, int dv) {
    const int DK = mma_width(dk), DV = mma_width(dv);
    return DK == 32 ? (DV == 32 ? gmx::lay<32, 32>::bytes : gmx::lay<32, 64>::bytes)
                    : (DV == 32 ? gmx::lay<64, 32>::bytes : gmx::lay<64, 64>::bytes);
}

/* The mma form where dk, dv <= 64 and its shared memory fits (tile GSM_TILE_MMA); else the FMA
 * kernels' largest tile (64 .. 4) that fits. VLA_SOFTMAX_BWD_TC=0 (development, A/B and tests of
 * the FMA kernels at every shape) turns the mma form off. */
int grad_softmax_pick_tile(int dk, int dv, size_t budget, size_t *smem_rows, size_t *smem_keys) {
    static const bool mma_off = [] {
        const char *e = getenv("VLA_SOFTMAX_BWD_TC");
        return e && e[0] == '0';
    }();
    if (!mma_off && dk <= 64 && dv <= 64 && mma_bytes(dk, dv) <= budget) {
        *smem_rows = *smem_keys = mma_bytes(dk, dv);
        return GSM_TILE_MMA;
    }
    for (int tl = TLMAX; tl >= 4; tl /= 2) {
        const size_t r = rows_floats(dk, dv, tl) * 4, k = keys_floats(dk, dv, tl) * 4;
        if (r <= budget && k <= budget) {
            *smem_rows = r;
            *smem_keys = k;
            return tl;
        }
    }
    return 0;
}

template <int DK, int DV> static cudaError_t launch_mma(const gsm_params &p, cudaStream_t st) {
    typedef gmx::lay<DK, DV> S;
    const int slot = (DK == 64) * 2 + (DV == 64);
    void (*const rows)(const gsm_params) = gmx::rows_mma_kernel<DK, DV>;
    void (*const keys)(const gsm_params) = gmx::keys_mma_kernel<DK, DV>;
    cudaError_t e = raise_smem_limit((const void *)rows, mma_smem_set[0][slot], S::bytes);
    if (e == cudaSuccess) e = raise_smem_limit((const void *)keys, mma_smem_set[1][slot], S::bytes);
    if (e != cudaSuccess) return e;
    const unsigned blocks = (unsigned)(p.a.B * p.a.H) * (unsigned)((p.a.T + gmx::BT - 1) / gmx::BT);
    VLACU_LAUNCH(rows, blocks, gmx::NT, S::bytes, st, p);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (p.dk || p.dv) {
        VLACU_LAUNCH(keys, blocks, gmx::NT, S::bytes, st, p);
        e = cudaGetLastError();
    }
    return e;
}

cudaError_t launch_grad_softmax(const gsm_params &p, cudaStream_t st) {
    if (p.tile == GSM_TILE_MMA) {
        const int DK = mma_width(p.a.dk), DV = mma_width(p.a.dv);
        if (DK == 32) return DV == 32 ? launch_mma<32, 32>(p, st) : launch_mma<32, 64>(p, st);
        return DV == 32 ? launch_mma<64, 32>(p, st) : launch_mma<64, 64>(p, st);
    }
    const unsigned BH = (unsigned)(p.a.B * p.a.H), nt = (unsigned)((p.a.T + p.tile - 1) / p.tile);
    cudaError_t e = raise_smem_limit_static((const void *)grad_softmax_rows_kernel, rows_smem_set, p.smem_rows,
                                            grad_softmax_static_smem());
    if (e == cudaSuccess) e = raise_smem_limit_static((const void *)grad_softmax_keys_kernel, keys_smem_set, p.smem_keys,
                                                          grad_softmax_static_smem());
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(grad_softmax_rows_kernel, BH * nt, VLACU_NT, p.smem_rows, st, p);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (p.dk || p.dv) {
        VLACU_LAUNCH(grad_softmax_keys_kernel, BH * nt, VLACU_NT, p.smem_keys, st, p);
        e = cudaGetLastError();
    }
    return e;
}

} // namespace grad
} // namespace vlacu
