/* The causal softmax backward (VLA-MATH 5), flash-attention style, FP32 FMA: the probabilities are
 * recomputed tile by tile from per-row statistics; the T x T matrix is never stored.
 *   x_ts = scale q_t . k_s (s <= t),  P_ts = exp(x_ts - lse_t),  D_t = dO_t . o_t = sum_s P_ts (dO_t . v_s)
 *   dx_ts = P_ts (dO_t . v_s - D_t)
 *   dq_t = scale sum_{s<=t} dx_ts k_s,  dk_s = scale sum_{t>=s} dx_ts q_t,  dv_s = sum_{t>=s} P_ts dO_t
 * Two kernels, tiles of TL rows (the largest of 64 .. 4 whose shared memory fits):
 *   rows  one block per (head, query tile): sweep 1 over the key tiles at or before it for lse_t and
 *         D_t (online: the running sum of exp(x - m) (dO . v) is rescaled with the sum of exp(x - m)),
 *         stored to the workspace; sweep 2 for dq.
 *   keys  one block per (head, key tile): dk and dv from every query tile at or after it.
 * Masked pairs (s > t) are skipped, never multiplied by 0, so a NaN in a later key or value cannot reach
 * an earlier row's gradients; a NaN score propagates through the row's maximum (as the CPU backend). */
#include "vla_grad.cuh"

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

static std::atomic<size_t> rows_smem_set[64], keys_smem_set[64];

size_t grad_softmax_static_smem() {
    static const size_t s = [] {
        const size_t r = static_smem_of((const void *)grad_softmax_rows_kernel, 1024);
        const size_t k = static_smem_of((const void *)grad_softmax_keys_kernel, 1024);
        return r > k ? r : k;
    }();
    return s;
}

int grad_softmax_pick_tile(int dk, int dv, size_t budget, size_t *smem_rows, size_t *smem_keys) {
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

cudaError_t launch_grad_softmax(const gsm_params &p, cudaStream_t st) {
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
