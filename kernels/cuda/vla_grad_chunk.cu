/* The chunked backward's S part (VLA-MATH 2.3 and 5) for linear attention, DeltaNet and VLA: the chunk
 * form of vla_grad_seq.cu's residual delta rule, parallel over chunks. backends/cpu/cpu_grad_chunk.c
 * derives the forward and the VJP of one chunk in matrix form; this file splits them so that only two
 * short walks over chunks are sequential. VLA's A part is vla_grad_chunk_apart.cu.
 *
 * One chunk of n <= C tokens, on X = S^T [dk][dv], rows Q, Kr, W [n][dk], V [n][dv]:
 *   gam_t = prod_{r<=t} g_r,  D[t][s] = prod_{s<r<=t} g_r (s <= t; 1 on the diagonal),  Dl = D[n-1][:]
 *   M = strict_lower(Kr W^T o D),  Pm = tril(Q W^T o D)
 *   delta   Y = (I + M)^{-1} V,  Wt = (I + M)^{-1} diag(gam) Kr,  E = Y - Wt X0  (E solves
 *           (I + M) E = V - diag(gam) Kr X0: the residuals).  Kr = k^, W = beta k^
 *   vla     the same with W = a_t (the A part's rows), beta = 1, g = 1; the normalised output is
 *           divided by den_t = max(q~_t . n_t, eps) (dr_t = 0 where the floor binds)
 *   linear  Y = V, Wt = 0, gam = 1, D = 1 (W = k~; the output is divided by den_t = q~_t . n_t + eps)
 *   X_end = gamL X0 + Wd^T E,  Wd = diag(Dl) W,  gamL = gam_{n-1}
 * so the carry is X_end = gamL X0 - Wd^T (Wt X0) + Wd^T Y. The VJP's carry (dO' = dO, or dO / den_t):
 *   dX0 = gamL dX_end - Wt^T (Wd dX_end) + H,  H = Q^T diag(gam) dO' - Wt^T (Pm^T dO')
 * (Kr^T diag(gam) (I + M)^{-T} = Wt^T). Both walks are independent per column of X (the dv axis), so
 * each runs as blocks of (head, column tile): two products of n x dk x tile per chunk, two barriers.
 * The per-chunk VJP (gc_vjp_kernel) is cpu_grad_chunk_vjp, step for step, given X0 (ckX) and dX_end
 * (ckH). dg never divides by g (g may be 0): see cpu_grad_chunk.c's top comment.
 *
 * Arithmetic: float, with products summed in float in the order of the index; the one sum over the
 * whole state (<X0, dX_end>, for dg) in double. Shared memory per chunk block: gc_smem_of below. */
#include "vla_grad.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace vlacu {
namespace grad {

namespace {

/* Float offsets of a chunk block's shared arrays. Rows [C][ldk] or [C][ldv], c x c matrices
 * [C][ldc], dDx [C][C + 1] (column -1 first: the adjoint of gam). vjp: the VJP kernel, else the
 * factors kernel. */
struct gc_smem {
    int ldk, ldv, ldc;
    size_t Q, K, W, dW, V, E, dO, dE, T1, D, L, Pq, G, dDx, gam, Dl, den, ng, gv, dr, total;
};

__host__ __device__ inline size_t pad4(size_t x) { return (x + 3) / 4 * 4; }

__host__ __device__ inline gc_smem gc_smem_of(bool vjp, int C, int dk, int dv) {
    gc_smem s;
    s.ldk = ld_of(dk), s.ldv = ld_of(dv), s.ldc = ld_of(C);
    const size_t rk = pad4((size_t)C * s.ldk), rv = pad4((size_t)C * s.ldv), cc = pad4((size_t)C * s.ldc);
    const size_t cv = pad4((size_t)C);
    size_t o = 0;
    s.Q = o, o += rk;
    s.K = o, o += rk;
    s.W = o, o += rk;
    s.dW = o, o += vjp ? rk : 0;
    s.V = o, o += vjp ? 0 : rv;
    s.E = o, o += vjp ? rv : 0;
    s.dO = o, o += rv;
    s.dE = o, o += vjp ? rv : 0;
    s.T1 = o, o += rv;
    s.D = o, o += cc;
    s.L = o, o += cc;
    s.Pq = o, o += cc;
    s.G = o, o += vjp ? cc : 0;
    s.dDx = o, o += vjp ? pad4((size_t)C * (C + 1)) : 0;
    s.gam = o, o += cv;
    s.Dl = o, o += cv;
    s.den = o, o += cv;
    s.ng = o, o += cv;
    s.gv = o, o += cv;
    s.dr = o, o += cv;
    s.total = o;
    return s;
}

__device__ __forceinline__ size_t rowof(const vlacu_args &a, int b, int t, int h) {
    return ((size_t)b * a.T + t) * a.H + h;
}

/* out(m, n, sum_k A(m, k) B(k, n)) for m < M, n < N, A(m, k) = A[m * sam + k * sak], B likewise.
 * Each element's sum is fmaf over k = 0 .. K-1 from 0.0f in both forms below, so they give the same
 * bits. The element (m, n) goes to the same thread in every call with the same M, N (the mapping is a
 * function of M, N and blockDim alone; global accumulators rely on it). No barrier.
 *
 * SIMPLE (VLA_CUDA_BMM=simple, kept for A/B timings): one thread per element, two loads (shared or
 * global memory) per FMA. The default is register-tiled (bmm_tiles): a thread owns TM x TN
 * elements and per k loads TM values of A and TN of B once for its TM * TN FMAs, so loads per FMA
 * are (TM + TN) / (TM * TN): 2 at 1x1, 1 at 2x2, 0.75 at 4x2, 0.5 at 4x4. gc_factors_kernel's and
 * gc_vjp_kernel's n x n x d and n x d x d products at n = d = 64 with 256 threads take 4x4 (256
 * tiles), the walks' 64 x 32 x 64 ones 4x2: a quarter and three eighths of the loads. bmm_pick
 * trades the loads against idle threads, so small products (the tail chunk, the emulator's cases)
 * drop to 2x2 or 1x1; 1x1 is the SIMPLE form's mapping. Per product at (n, dk, dv, tile) =
 * (64, 64, 64, 32), loads per FMA old -> new (s: shared, g: global; the generated PTX's unrolled
 * k loops agree: 4 FMAs and 8 loads old, 64 FMAs and 32 loads at 4x4, 32 and 24 at 4x2):
 *   both operands shared (factors' M, Pm, P2; vjp's Lr, Pq, T1 += Pq E, both G, the four G
 *     products)                                            2 s -> 0.5 s      (4x4)
 *   one shared, one global (vjp's T1 = W dX, dW = E dX^T, dQ = dO X0^T, T1 = Q X0 or K X0,
 *     dK -= dE X0^T)                                       1 s + 1 g -> 0.25 s + 0.25 g  (4x4)
 *   vjp's E = Y - Wt X0                                     2 g -> 0.5 g      (4x4)
 *   the walks' R = Y - Wt X, X += Wd^T R, Z = Wd dX (rows of Wt / Wd global, the X tile shared;
 *     64 x 32)                                             1 s + 1 g -> 0.25 s + 0.5 g  (4x2) */
template <int TM, int TN, class F>
__device__ __forceinline__ void bmm_tiles(int M, int N, int K, const float *A, int sam, int sak, const float *B,
                                          int sbk, int sbn, F &out) {
    /* tile (tm, tn) holds rows tm + i * mt and columns tn + j * nb: consecutive lanes take
     * consecutive tn, i.e. consecutive columns, as the one-element form's lanes did (a column read at
     * an odd ld_of stride stays on 32 banks). Rows past M or columns past N repeat the last one (in
     * bounds, computed and dropped). */
    const int mt = (M + TM - 1) / TM, nb = (N + TN - 1) / TN;
    for (int o = threadIdx.x; o < mt * nb; o += blockDim.x) {
        const int tm = o / nb, tn = o - tm * nb;
        const float *a[TM], *b[TN];
#pragma unroll
        for (int i = 0; i < TM; i++) a[i] = A + (size_t)imin(tm + i * mt, M - 1) * sam;
#pragma unroll
        for (int j = 0; j < TN; j++) b[j] = B + (size_t)imin(tn + j * nb, N - 1) * sbn;
        float s[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) s[i][j] = 0.0f;
        for (int k = 0; k < K; k++) {
            float x[TM], y[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) x[i] = a[i][(size_t)k * sak];
#pragma unroll
            for (int j = 0; j < TN; j++) y[j] = b[j][(size_t)k * sbk];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) s[i][j] = fmaf(x[i], y[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int m = tm + i * mt, n = tn + j * nb;
                if (m < M && n < N) out(m, n, s[i][j]);
            }
    }
}

/* The tile of an M x N product: 0 1x1, 1 2x2, 2 4x2, 3 4x4, the one of least rounds * (TM * TN +
 * 4 (TM + TN)), rounds = ceil(tiles / blockDim): a thread's FMAs and loads per k, a shared load
 * weighted as 4 FMAs (an SM issues 4 warps' FMAs a clock and one warp's 32-bit shared loads);
 * ties go to the larger tile. VLA_GC_BMM_TILE (a compile-time development switch, for the
 * emulator) forces one. */
__device__ __forceinline__ int bmm_pick(int M, int N) {
#ifdef VLA_GC_BMM_TILE
    (void)M, (void)N;
    return VLA_GC_BMM_TILE;
#else
    const int nt = blockDim.x;
    int best = 0, bc = 0;
#pragma unroll
    for (int v = 0; v < 4; v++) {
        const int tm = v ? 2 + 2 * (v > 1) : 1, tn = v ? 2 + 2 * (v > 2) : 1;
        const int tiles = ((M + tm - 1) / tm) * ((N + tn - 1) / tn);
        const int c = (tiles + nt - 1) / nt * (tm * tn + 4 * (tm + tn));
        if (v == 0 || c <= bc) best = v, bc = c;
    }
    return best;
#endif
}

template <bool SIMPLE, class F>
__device__ __forceinline__ void bmm(int M, int N, int K, const float *A, int sam, int sak, const float *B, int sbk,
                                    int sbn, F out) {
    if (SIMPLE) {
        for (int o = threadIdx.x; o < M * N; o += blockDim.x) {
            const int m = o / N, n = o - m * N;
            const float *a = A + (size_t)m * sam, *b = B + (size_t)n * sbn;
            float s = 0.0f;
            for (int k = 0; k < K; k++) s = fmaf(a[(size_t)k * sak], b[(size_t)k * sbk], s);
            out(m, n, s);
        }
        return;
    }
    switch (bmm_pick(M, N)) {
    case 3: bmm_tiles<4, 4>(M, N, K, A, sam, sak, B, sbk, sbn, out); break;
    case 2: bmm_tiles<4, 2>(M, N, K, A, sam, sak, B, sbk, sbn, out); break;
    case 1: bmm_tiles<2, 2>(M, N, K, A, sam, sak, B, sbk, sbn, out); break;
    default: bmm_tiles<1, 1>(M, N, K, A, sam, sak, B, sbk, sbn, out); break;
    }
}

/* The chunk's rows and decay products into shared memory: Q, K = Kr (delta), W = beta k^ (delta) or
 * k~ (linear), gv = g, gam, D (n x n, 0 above the diagonal), Dl; linear: den_t = q~_t . n_t + eps.
 * Ends with a barrier. */
__device__ void load_chunk(const gchunk_params &P, const gc_smem &L, float *sm, int bh, int ts, int n) {
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, tid = threadIdx.x, nt = blockDim.x, b = bh / a.H, h = bh % a.H;
    const bool linear = a.mech == VLACU_LINEAR, delta = a.mech == VLACU_DELTA;
    float *Q = sm + L.Q, *K = sm + L.K, *W = sm + L.W, *gv = sm + L.gv, *gam = sm + L.gam, *D = sm + L.D;
    for (int t = tid; t < n; t += nt) {
        const size_t r = rowof(a, b, ts + t, h);
        gv[t] = delta && a.g ? a.g[r] : 1.0f;
    }
    for (int e = tid; e < n * dk; e += nt) {
        const int t = e / dk, i = e - t * dk;
        const size_t pr = ((size_t)bh * T + ts + t) * dk + i;
        Q[(size_t)t * L.ldk + i] = P.Qp[pr];
        if (linear) {
            W[(size_t)t * L.ldk + i] = P.Kf[pr];
        } else {
            const float k = P.Kh[pr], beta = delta && a.beta ? a.beta[rowof(a, b, ts + t, h)] : 1.0f;
            K[(size_t)t * L.ldk + i] = k;
            W[(size_t)t * L.ldk + i] = delta ? beta * k : P.Aw[pr];
        }
    }
    __syncthreads();
    /* D column by column, D[t][s] = D[t-1][s] g_t (the CPU reference's order); gam likewise */
    for (int s = tid; s < n; s += nt) {
        for (int t = 0; t < s; t++) D[(size_t)t * L.ldc + s] = 0.0f;
        float x = 1.0f;
        D[(size_t)s * L.ldc + s] = x;
        for (int t = s + 1; t < n; t++) D[(size_t)t * L.ldc + s] = x = x * gv[t];
    }
    if (tid == 0) {
        float x = 1.0f;
        for (int t = 0; t < n; t++) gam[t] = x = x * gv[t];
    }
    if (P.N) /* linear: den = q~ . n_t + eps;  vla: max(q~ . n_t, eps), dr = 0 where the floor binds */
        for (int t = tid; t < n; t += nt) {
            const float *q = Q + (size_t)t * L.ldk, *nn = P.N + ((size_t)bh * T + ts + t) * dk;
            float s = 0.0f;
            for (int i = 0; i < dk; i++) s = fmaf(q[i], nn[i], s);
            const float eps = (float)a.eps;
            sm[L.den + t] = linear ? s + eps : fmaxf(s, eps);
            sm[L.ng + t] = linear || s > eps ? 1.0f : 0.0f;
        }
    __syncthreads();
    for (int t = tid; t < n; t += nt) sm[L.Dl + t] = D[(size_t)(n - 1) * L.ldc + t];
    __syncthreads();
}

/* dO' rows: dO, or dO / den_t with a normaliser, into dO [n][ldv]. No barrier. */
__device__ void load_dO(const gchunk_params &P, const gc_smem &L, float *sm, int bh, int ts, int n) {
    const vlacu_args &a = P.a;
    const int dv = a.dv, b = bh / a.H, h = bh % a.H;
    for (int e = threadIdx.x; e < n * dv; e += blockDim.x) {
        const int t = e / dv, j = e - t * dv;
        const float x = P.dO[rowof(a, b, ts + t, h) * dv + j];
        sm[L.dO + (size_t)t * L.ldv + j] = P.N ? x / sm[L.den + t] : x;
    }
}

/* ---- per (head, chunk): Y, Wt, Wd, gamL and H ---- */
template <bool SB>
__global__ void __launch_bounds__(VLACU_NT) gc_factors_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    float *sm = (float *)smem;
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x;
    const int bh = blockIdx.x / P.nck, c = blockIdx.x - bh * P.nck, b = bh / a.H, h = bh % a.H;
    const int ts = c * P.C, n = imin(P.C, T - ts);
    const bool linear = a.mech == VLACU_LINEAR;
    const gc_smem L = gc_smem_of(false, P.C, dk, dv);
    float *Q = sm + L.Q, *K = sm + L.K, *W = sm + L.W, *V = sm + L.V, *dO = sm + L.dO, *P2 = sm + L.T1;
    float *D = sm + L.D, *M = sm + L.L, *Pm = sm + L.Pq, *gam = sm + L.gam, *Dl = sm + L.Dl;
    const int ldk = L.ldk, ldv = L.ldv, ldc = L.ldc;

    load_chunk(P, L, sm, bh, ts, n);
    load_dO(P, L, sm, bh, ts, n);
    for (int e = tid; e < n * dv; e += nt) {
        const int t = e / dv, j = e - t * dv;
        V[(size_t)t * ldv + j] = a.v[rowof(a, b, ts + t, h) * dv + j];
    }
    /* M = strict_lower(Kr W^T o D), Pm = tril(Q W^T o D) */
    if (!linear)
        bmm<SB>(n, n, dk, K, ldk, 1, W, 1, ldk, [&](int t, int s, float x) {
            M[(size_t)t * ldc + s] = s < t ? x * D[(size_t)t * ldc + s] : 0.0f;
        });
    if (!linear)
        bmm<SB>(n, n, dk, Q, ldk, 1, W, 1, ldk,
            [&](int t, int s, float x) { Pm[(size_t)t * ldc + s] = s <= t ? x * D[(size_t)t * ldc + s] : 0.0f; });
    __syncthreads();

    /* (I + M) [Y | Wt] = [V | diag(gam) Kr], in place, one column per thread (no barrier inside) */
    if (!linear)
        for (int col = tid; col < dv + dk; col += nt) {
            const bool isv = col < dv;
            float *x = isv ? V + col : K + (col - dv);
            const int ld = isv ? ldv : ldk;
            for (int t = 0; t < n; t++) {
                float s = isv ? x[(size_t)t * ld] : gam[t] * x[(size_t)t * ld];
                const float *mt = M + (size_t)t * ldc;
                for (int r = 0; r < t; r++) s = fmaf(-mt[r], x[(size_t)r * ld], s);
                x[(size_t)t * ld] = s;
            }
        }
    /* P2 = Pm^T dO' (delta: linear has no Wt) */
    if (!linear) bmm<SB>(n, dv, n, Pm, 1, ldc, dO, ldv, 1, [&](int t, int j, float x) { P2[(size_t)t * ldv + j] = x; });
    __syncthreads();

    const size_t row0 = (size_t)bh * T + ts;
    for (int e = tid; e < n * dv; e += nt) {
        const int t = e / dv, j = e - t * dv;
        P.Y[(row0 + t) * dv + j] = V[(size_t)t * ldv + j];
    }
    for (int e = tid; e < n * dk; e += nt) {
        const int t = e / dk, i = e - t * dk;
        if (!linear) P.Wt[(row0 + t) * dk + i] = K[(size_t)t * ldk + i];
        P.Wd[(row0 + t) * dk + i] = Dl[t] * W[(size_t)t * ldk + i];
    }
    if (tid == 0) P.gamL[(size_t)bh * P.nck + c] = gam[n - 1];
    /* H = Q^T diag(gam) dO' - Wt^T P2 */
    float *H = P.ckH + ((size_t)bh * P.nck + c) * dk * dv;
    for (int e = tid; e < dk * dv; e += nt) {
        const int i = e / dv, j = e - i * dv;
        float s = 0.0f;
        for (int t = 0; t < n; t++) {
            s = fmaf(gam[t] * Q[(size_t)t * ldk + i], dO[(size_t)t * ldv + j], s);
            if (!linear) s = fmaf(-K[(size_t)t * ldk + i], P2[(size_t)t * ldv + j], s);
        }
        H[e] = s;
    }
}

/* ---- the walks: per (head, column tile of X); X tile [dk][ldt], R [C][ldt] in shared memory ---- */
template <bool SB>
__global__ void __launch_bounds__(VLACU_NT) gc_fwd_walk_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x, nck = P.nck;
    const int ntile = (dv + P.tile - 1) / P.tile, bh = blockIdx.x / ntile, j0 = (blockIdx.x - bh * ntile) * P.tile;
    const int jn = imin(P.tile, dv - j0), ldt = ld_of(P.tile);
    float *X = (float *)smem, *R = X + pad4((size_t)dk * ldt);
    const size_t sS = (size_t)bh * dk * dv;
    for (int e = tid; e < dk * jn; e += nt) {
        const int i = e / jn, j = e - i * jn;
        X[(size_t)i * ldt + j] = a.S_in ? a.S_in[sS + (size_t)i * dv + j0 + j] : 0.0f;
    }
    for (int c = 0; c < nck; c++) {
        __syncthreads();
        float *ck = P.ckX + ((size_t)bh * nck + c) * dk * dv;
        for (int e = tid; e < dk * jn; e += nt) {
            const int i = e / jn, j = e - i * jn;
            ck[(size_t)i * dv + j0 + j] = X[(size_t)i * ldt + j];
        }
        if (c == nck - 1) break;
        const int ts = c * P.C, n = imin(P.C, T - ts);
        const size_t row0 = (size_t)bh * T + ts;
        const float *Y = P.Y + row0 * dv + j0, *Wd = P.Wd + row0 * dk;
        /* R = Y - Wt X */
        if (P.Wt)
            bmm<SB>(n, jn, dk, P.Wt + row0 * dk, dk, 1, X, ldt, 1,
                [&](int t, int j, float x) { R[(size_t)t * ldt + j] = Y[(size_t)t * dv + j] - x; });
        else
            for (int e = tid; e < n * jn; e += nt) {
                const int t = e / jn, j = e - t * jn;
                R[(size_t)t * ldt + j] = Y[(size_t)t * dv + j];
            }
        __syncthreads();
        /* X <- gamL X + Wd^T R */
        const float gl = P.gamL[(size_t)bh * nck + c];
        bmm<SB>(dk, jn, n, Wd, 1, dk, R, ldt, 1, [&](int i, int j, float x) {
            float *p = X + (size_t)i * ldt + j;
            *p = fmaf(gl, *p, x);
        });
    }
}

template <bool SB>
__global__ void __launch_bounds__(VLACU_NT) gc_bwd_walk_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x, nck = P.nck;
    const int ntile = (dv + P.tile - 1) / P.tile, bh = blockIdx.x / ntile, j0 = (blockIdx.x - bh * ntile) * P.tile;
    const int jn = imin(P.tile, dv - j0), ldt = ld_of(P.tile);
    float *dX = (float *)smem, *Z = dX + pad4((size_t)dk * ldt);
    const size_t sS = (size_t)bh * dk * dv;
    for (int e = tid; e < dk * jn; e += nt) {
        const int i = e / jn, j = e - i * jn;
        dX[(size_t)i * ldt + j] = P.dS_end ? P.dS_end[sS + (size_t)i * dv + j0 + j] : 0.0f;
    }
    for (int c = nck - 1; c >= 0; c--) {
        __syncthreads();
        const int ts = c * P.C, n = imin(P.C, T - ts);
        const size_t row0 = (size_t)bh * T + ts;
        /* Z = Wd dX (delta; linear's carry is dX + H) */
        if (P.Wt) {
            bmm<SB>(n, jn, dk, P.Wd + row0 * dk, dk, 1, dX, ldt, 1,
                [&](int t, int j, float x) { Z[(size_t)t * ldt + j] = x; });
            __syncthreads();
        }
        /* ckH: H is read, then dX at the chunk's end is stored in its place; dX <- gamL dX - Wt^T Z + H */
        float *Hc = P.ckH + ((size_t)bh * nck + c) * dk * dv + j0;
        const float gl = P.gamL[(size_t)bh * nck + c];
        const float *Wt = P.Wt ? P.Wt + row0 * dk : nullptr;
        for (int e = tid; e < dk * jn; e += nt) {
            const int i = e / jn, j = e - i * jn;
            float *p = dX + (size_t)i * ldt + j;
            const float hv = Hc[(size_t)i * dv + j], x = *p;
            Hc[(size_t)i * dv + j] = x;
            float s = 0.0f;
            if (Wt)
                for (int t = 0; t < n; t++) s = fmaf(Wt[(size_t)t * dk + i], Z[(size_t)t * ldt + j], s);
            *p = fmaf(gl, x, hv - s);
        }
    }
    __syncthreads();
    if (P.dS0)
        for (int e = tid; e < dk * jn; e += nt) {
            const int i = e / jn, j = e - i * jn;
            P.dS0[sS + (size_t)i * dv + j0 + j] = dX[(size_t)i * ldt + j];
        }
}

/* ---- per (head, chunk): the VJP (cpu_grad_chunk_vjp), with X0 = ckX, dX = dX_end = ckH ---- */
template <bool SB>
__global__ void __launch_bounds__(VLACU_NT) gc_vjp_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ double sc[32];
    float *sm = (float *)smem;
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x;
    const int bh = blockIdx.x / P.nck, c = blockIdx.x - bh * P.nck, b = bh / a.H, h = bh % a.H;
    const int ts = c * P.C, n = imin(P.C, T - ts);
    const bool linear = a.mech == VLACU_LINEAR, has_g = a.mech == VLACU_DELTA && a.g != nullptr;
    const gc_smem L = gc_smem_of(true, P.C, dk, dv);
    float *Q = sm + L.Q, *K = sm + L.K, *W = sm + L.W, *dW = sm + L.dW, *E = sm + L.E, *dO = sm + L.dO;
    float *dE = sm + L.dE, *T1 = sm + L.T1, *D = sm + L.D, *Lr = sm + L.L, *Pq = sm + L.Pq, *G = sm + L.G;
    float *dDx = sm + L.dDx, *gam = sm + L.gam, *Dl = sm + L.Dl, *dr = sm + L.dr;
    const int ldk = L.ldk, ldv = L.ldv, ldc = L.ldc, cx = P.C + 1;
#define DDX(t, s) dDx[(size_t)(t) * cx + (size_t)((s) + 1)]
    const size_t row0 = (size_t)bh * T + ts, ckoff = ((size_t)bh * P.nck + c) * dk * dv;
    const float *X0 = P.ckX + ckoff, *dX = P.ckH + ckoff; /* [dk][dv] */
    float *dQ = P.dQp + row0 * dk;

    load_chunk(P, L, sm, bh, ts, n);
    load_dO(P, L, sm, bh, ts, n);
    if (has_g)
        for (int e = tid; e < n * cx; e += nt) dDx[e] = 0.0f;
    /* E = Y - Wt X0 */
    const float *Yg = P.Y + row0 * dv;
    if (!linear)
        bmm<SB>(n, dv, dk, P.Wt + row0 * dk, dk, 1, X0, dv, 1,
            [&](int t, int j, float x) { E[(size_t)t * ldv + j] = Yg[(size_t)t * dv + j] - x; });
    else
        for (int e = tid; e < n * dv; e += nt) {
            const int t = e / dv, j = e - t * dv;
            E[(size_t)t * ldv + j] = Yg[(size_t)t * dv + j];
        }
    /* Lr = strict_lower(Kr W^T), Pq = tril(Q W^T) (without D) */
    if (!linear)
        bmm<SB>(n, n, dk, K, ldk, 1, W, 1, ldk,
                [&](int t, int s, float x) { Lr[(size_t)t * ldc + s] = s < t ? x : 0.0f; });
    bmm<SB>(n, n, dk, Q, ldk, 1, W, 1, ldk,
            [&](int t, int s, float x) { Pq[(size_t)t * ldc + s] = s <= t ? x : 0.0f; });
    __syncthreads();

    /* X_end's term: T1 = W dX;  dE = diag(Dl) T1;  dW = diag(Dl) E dX^T */
    bmm<SB>(n, dv, dk, W, ldk, 1, dX, dv, 1, [&](int t, int j, float x) { T1[(size_t)t * ldv + j] = x; });
    bmm<SB>(n, dk, dv, E, ldv, 1, dX, 1, dv, [&](int t, int i, float x) { dW[(size_t)t * ldk + i] = Dl[t] * x; });
    __syncthreads();
    for (int e = tid; e < n * dv; e += nt) {
        const int t = e / dv, j = e - t * dv;
        dE[(size_t)t * ldv + j] = Dl[t] * T1[(size_t)t * ldv + j];
    }
    if (has_g) {
        for (int t = tid; t < n; t += nt) {
            float s = 0.0f;
            for (int j = 0; j < dv; j++) s = fmaf(T1[(size_t)t * ldv + j], E[(size_t)t * ldv + j], s);
            DDX(n - 1, t) += s;
        }
        double s[1] = {0.0};
        for (int e = tid; e < dk * dv; e += nt) s[0] += (double)X0[e] * dX[e];
        block_sums<1>(s, sc);
        if (tid == 0) DDX(n - 1, -1) += (float)s[0];
    }
    __syncthreads();

    /* The output: dE += Pm^T dO';  dQ = diag(gam) dO' X0^T;  T1 = Q X0 (for dg, and linear's numerator) */
    for (int e = tid; e < n * dv; e += nt) {
        const int t = e / dv, j = e - t * dv;
        float s = 0.0f;
        for (int r = t; r < n; r++) s = fmaf(Pq[(size_t)r * ldc + t] * D[(size_t)r * ldc + t], dO[(size_t)r * ldv + j], s);
        dE[(size_t)t * ldv + j] += s;
    }
    bmm<SB>(n, dk, dv, dO, ldv, 1, X0, 1, dv, [&](int t, int i, float x) { dQ[(size_t)t * dk + i] = gam[t] * x; });
    if (has_g || P.N)
        bmm<SB>(n, dv, dk, Q, ldk, 1, X0, dv, 1, [&](int t, int j, float x) { T1[(size_t)t * ldv + j] = x; });
    __syncthreads();
    if (has_g)
        for (int t = tid; t < n; t += nt) {
            float s = 0.0f;
            for (int j = 0; j < dv; j++) s = fmaf(dO[(size_t)t * ldv + j], T1[(size_t)t * ldv + j], s);
            DDX(t, -1) += s;
        }
    if (P.N) { /* numerator T1 += Pm E;  dr_t = -(dO'_t . num_t) / den_t (0 where vla's floor binds);  dq~ += dr_t n_t */
        bmm<SB>(n, dv, n, Pq, ldc, 1, E, ldv, 1, [&](int t, int j, float x) { T1[(size_t)t * ldv + j] += x; });
        __syncthreads();
        for (int t = tid; t < n; t += nt) {
            float s = 0.0f;
            for (int j = 0; j < dv; j++) s = fmaf(dO[(size_t)t * ldv + j], T1[(size_t)t * ldv + j], s);
            dr[t] = sm[L.ng + t] != 0.0f ? -s / sm[L.den + t] : 0.0f;
            P.dr[row0 + t] = dr[t];
        }
        __syncthreads();
        for (int e = tid; e < n * dk; e += nt) {
            const int t = e / dk, i = e - t * dk;
            dQ[(size_t)t * dk + i] += dr[t] * P.N[(row0 + t) * dk + i];
        }
    }
    /* G = tril(dO' E^T): dDx += G o Pq, then G <- G o D (dPq) */
    bmm<SB>(n, n, dv, dO, ldv, 1, E, 1, ldv, [&](int t, int s, float x) {
        float *gp = G + (size_t)t * ldc + s;
        if (s > t) {
            *gp = 0.0f;
            return;
        }
        if (has_g) DDX(t, s) += x * Pq[(size_t)t * ldc + s];
        *gp = x * D[(size_t)t * ldc + s];
    });
    __syncthreads();
    /* dQ += dPq W;  dW += dPq^T Q */
    bmm<SB>(n, dk, n, G, ldc, 1, W, ldk, 1, [&](int t, int i, float x) { dQ[(size_t)t * dk + i] += x; });
    bmm<SB>(n, dk, n, G, 1, ldc, Q, ldk, 1, [&](int t, int i, float x) { dW[(size_t)t * ldk + i] += x; });
    __syncthreads();

    if (!linear) {
        /* (I + strict_lower(Lr o D))^T dB = dE, in place, one column per thread */
        for (int j = tid; j < dv; j += nt)
            for (int t = n - 1; t >= 0; t--) {
                float s = dE[(size_t)t * ldv + j];
                for (int r = t + 1; r < n; r++)
                    s = fmaf(-Lr[(size_t)r * ldc + t] * D[(size_t)r * ldc + t], dE[(size_t)r * ldv + j], s);
                dE[(size_t)t * ldv + j] = s;
            }
        __syncthreads();
        /* G = strict_lower(dB E^T): dDx -= G o Lr;  dLr = -G o D */
        bmm<SB>(n, n, dv, dE, ldv, 1, E, 1, ldv, [&](int t, int s, float x) {
            float *gp = G + (size_t)t * ldc + s;
            if (s >= t) {
                *gp = 0.0f;
                return;
            }
            if (has_g) DDX(t, s) -= x * Lr[(size_t)t * ldc + s];
            *gp = -x * D[(size_t)t * ldc + s];
        });
        if (has_g)
            bmm<SB>(n, dv, dk, K, ldk, 1, X0, dv, 1, [&](int t, int j, float x) { T1[(size_t)t * ldv + j] = x; });
        __syncthreads();
        /* dKr = dLr W - diag(gam) dB X0^T;  dW += dLr^T Kr;  dDx[t][-1] -= dB_t . (Kr X0)_t */
        float *dK = P.dKh + row0 * dk;
        bmm<SB>(n, dk, n, G, ldc, 1, W, ldk, 1, [&](int t, int i, float x) { dK[(size_t)t * dk + i] = x; });
        bmm<SB>(n, dk, n, G, 1, ldc, K, ldk, 1, [&](int t, int i, float x) { dW[(size_t)t * ldk + i] += x; });
        __syncthreads();
        bmm<SB>(n, dk, dv, dE, ldv, 1, X0, 1, dv, [&](int t, int i, float x) { dK[(size_t)t * dk + i] -= gam[t] * x; });
        if (has_g)
            for (int t = tid; t < n; t += nt) {
                float s = 0.0f;
                for (int j = 0; j < dv; j++) s = fmaf(dE[(size_t)t * ldv + j], T1[(size_t)t * ldv + j], s);
                DDX(t, -1) -= s;
            }
        __syncthreads();
    }
    /* dv = dB */
    if (P.dv)
        for (int e = tid; e < n * dv; e += nt) {
            const int t = e / dv, j = e - t * dv;
            P.dv[rowof(a, b, ts + t, h) * dv + j] = dE[(size_t)t * ldv + j];
        }

    /* The gate: dg_r = sum_{t>=r} D[t][r] Y[t][r],  Y[t][r] = dDx[t][-1] gam_{r-1} + sum_{s<r} dDx[t][s] D[r-1][s] */
    if (has_g && P.dg) {
        for (int e = tid; e < n * n; e += nt) {
            const int t = e / n, r = e - t * n;
            float s = DDX(t, -1) * (r ? gam[r - 1] : 1.0f);
            for (int q = 0; q < r; q++) s = fmaf(DDX(t, q), D[(size_t)(r - 1) * ldc + q], s);
            G[(size_t)t * ldc + r] = s;
        }
        __syncthreads();
        for (int r = tid; r < n; r += nt) {
            float s = 0.0f;
            for (int t = r; t < n; t++) s = fmaf(D[(size_t)t * ldc + r], G[(size_t)t * ldc + r], s);
            P.dg[rowof(a, b, ts + r, h)] = s;
        }
    }

    /* w = beta k^ (delta): dk^ += beta dW, dbeta = k^ . dW;  w = k~ (linear): dk~ = dW (+ dn later);
     * w = a_t (vla): da_t = dW, for the A part (vla_grad_chunk_apart.cu) */
    if (linear || a.mech == VLACU_VLA) {
        float *out = linear ? P.dKf : P.dAw;
        for (int e = tid; e < n * dk; e += nt) {
            const int t = e / dk, i = e - t * dk;
            out[(row0 + t) * dk + i] = dW[(size_t)t * ldk + i];
        }
    } else {
        float *dK = P.dKh + row0 * dk;
        for (int e = tid; e < n * dk; e += nt) {
            const int t = e / dk, i = e - t * dk;
            const float beta = a.beta ? a.beta[rowof(a, b, ts + t, h)] : 1.0f;
            dK[(size_t)t * dk + i] += beta * dW[(size_t)t * ldk + i];
        }
        if (P.dbeta)
            for (int t = tid; t < n; t += nt) {
                float s = 0.0f;
                for (int i = 0; i < dk; i++) s = fmaf(K[(size_t)t * ldk + i], dW[(size_t)t * ldk + i], s);
                P.dbeta[rowof(a, b, ts + t, h)] = s;
            }
    }
#undef DDX
}

/* ---- linear: n_t prefix and the dn suffix, one thread per (head, column) ----
 * Each thread walks its T tokens in order, one add a token as before. The loads come GC_NB tokens
 * at a time, ahead of the dependent adds: N and dKf may alias Kf and Qp as far as the compiler
 * knows, so without the batch every token's load waits for the previous token's store: a memory
 * latency a token. On an H100 at (1,4,32) T = 32768
 * linear attention's chunked fwd+bwd took 32.5 ms against DeltaNet's 14.2, whose walks do more
 * work but have no such loops: 0.28 us a token for each of the two (an inference, not profiled). */
#define GC_NB 16

__global__ void __launch_bounds__(VLACU_NT) gc_nprefix_kernel(const gchunk_params P) {
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk;
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)a.B * a.H * dk) return;
    const size_t bh = id / dk, j = id - bh * dk;
    const float *kf = P.Kf + bh * T * dk + j;
    float *nn = P.N + bh * T * dk + j;
    float x = a.n_in ? a.n_in[id] : 0.0f;
    for (int t0 = 0; t0 < T; t0 += GC_NB) {
        const int nb = imin(GC_NB, T - t0);
        float v[GC_NB];
#pragma unroll
        for (int u = 0; u < GC_NB; u++) v[u] = u < nb ? kf[(size_t)(t0 + u) * dk] : 0.0f;
#pragma unroll
        for (int u = 0; u < GC_NB; u++)
            if (u < nb) {
                x += v[u];
                nn[(size_t)(t0 + u) * dk] = x;
            }
    }
}

__global__ void __launch_bounds__(VLACU_NT) gc_dn_kernel(const gchunk_params P) {
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk;
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)a.B * a.H * dk) return;
    const size_t bh = id / dk, j = id - bh * dk;
    const bool linear = a.mech == VLACU_LINEAR; /* (vla: dk~ is dn alone; linear adds dW's part) */
    const float *qp = P.Qp + bh * T * dk + j, *dr = P.dr + bh * T;
    float *dkf = P.dKf + bh * T * dk + j;
    float dn = P.dn_end ? P.dn_end[id] : 0.0f;
    for (int t1 = T; t1 > 0; t1 -= GC_NB) { /* tokens t1 - 1 down to t1 - nb */
        const int nb = imin(GC_NB, t1);
        float r[GC_NB], q[GC_NB], w[GC_NB];
#pragma unroll
        for (int u = 0; u < GC_NB; u++) {
            const int t = t1 - 1 - u;
            r[u] = u < nb ? dr[t] : 0.0f;
            q[u] = u < nb ? qp[(size_t)t * dk] : 0.0f;
            w[u] = u < nb && linear ? dkf[(size_t)t * dk] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < GC_NB; u++)
            if (u < nb) {
                dn += r[u] * q[u];
                dkf[(size_t)(t1 - 1 - u) * dk] = linear ? w[u] + dn : dn;
            }
    }
    if (P.dn0) P.dn0[id] = dn;
}
#undef GC_NB

/* [SB][device]: each instance has its own shared memory attribute */
std::atomic<size_t> fac_smem_set[2][64], vjp_smem_set[2][64], fwalk_smem_set[2][64], bwalk_smem_set[2][64];

/* VLA_CUDA_KERNEL_TIMES=1 (development, read once a process; as the forward's in vla_chunkpar.cu):
 * each phase of a chunked backward call timed with events on the stream and printed to stderr
 * after the call, which then synchronises. Phases that do not run (no A part, no normaliser) print
 * as 0. */
struct gc_phase_timer {
    enum { NPH = 8 };
    bool on = false;
    cudaEvent_t ev[NPH + 1];
    void start(cudaStream_t st) {
        static const bool env_on = [] {
            const char *e = getenv("VLA_CUDA_KERNEL_TIMES");
            return e && e[0] == '1';
        }();
        on = env_on;
        if (!on) return;
        for (int i = 0; i <= NPH; i++) cudaEventCreate(&ev[i]);
        cudaEventRecord(ev[0], st);
    }
    void mark(int phase, cudaStream_t st) { /* the end of phase `phase` (0-based) */
        if (on) cudaEventRecord(ev[phase + 1], st);
    }
    void finish(const vlacu_args &a) {
        if (!on) return;
        static const char *const name[NPH] = {"afwd", "nprefix", "factors", "fwalk", "bwalk", "vjp", "abwd", "dn"};
        cudaEventSynchronize(ev[NPH]);
        float total = 0.0f;
        fprintf(stderr, "grad chunk B=%d T=%d H=%d dk=%d dv=%d, ms:", a.B, a.T, a.H, a.dk, a.dv);
        for (int i = 0; i < NPH; i++) {
            float ms = 0.0f;
            cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
            total += ms;
            fprintf(stderr, " %s %.4f", name[i], ms);
        }
        fprintf(stderr, ", total %.4f\n", total);
        for (int i = 0; i <= NPH; i++) cudaEventDestroy(ev[i]);
    }
};

template <bool SB> cudaError_t launch_gc(const gchunk_params &p, cudaStream_t st) {
    cudaError_t e;
    if ((e = raise_smem_limit((const void *)gc_factors_kernel<SB>, fac_smem_set[SB], p.smem_fac)) != cudaSuccess)
        return e;
    if ((e = raise_smem_limit_static((const void *)gc_vjp_kernel<SB>, vjp_smem_set[SB], p.smem_vjp,
                                     grad_chunk_static_smem())) != cudaSuccess)
        return e;
    if ((e = raise_smem_limit((const void *)gc_fwd_walk_kernel<SB>, fwalk_smem_set[SB], p.smem_walk)) != cudaSuccess)
        return e;
    if ((e = raise_smem_limit((const void *)gc_bwd_walk_kernel<SB>, bwalk_smem_set[SB], p.smem_walk)) != cudaSuccess)
        return e;
    const vlacu_args &a = p.a;
    const unsigned BH = (unsigned)(a.B * a.H), chunks = BH * (unsigned)p.nck;
    const unsigned walks = BH * (unsigned)((a.dv + p.tile - 1) / p.tile);
    const unsigned cols = (unsigned)(((size_t)BH * a.dk + VLACU_NT - 1) / VLACU_NT);
    const bool vla = a.mech == VLACU_VLA;
    gc_phase_timer tm;
    tm.start(st);
    if (vla && (e = launch_grad_chunk_afwd(p, st)) != cudaSuccess) return e;
    tm.mark(0, st);
    if (p.N) VLACU_LAUNCH(gc_nprefix_kernel, cols, VLACU_NT, 0, st, p);
    tm.mark(1, st);
    VLACU_LAUNCH(gc_factors_kernel<SB>, chunks, VLACU_NT, p.smem_fac, st, p);
    tm.mark(2, st);
    VLACU_LAUNCH(gc_fwd_walk_kernel<SB>, walks, VLACU_NT, p.smem_walk, st, p);
    tm.mark(3, st);
    VLACU_LAUNCH(gc_bwd_walk_kernel<SB>, walks, VLACU_NT, p.smem_walk, st, p);
    tm.mark(4, st);
    VLACU_LAUNCH(gc_vjp_kernel<SB>, chunks, VLACU_NT, p.smem_vjp, st, p);
    tm.mark(5, st);
    if (vla && (e = launch_grad_chunk_abwd(p, st)) != cudaSuccess) return e;
    tm.mark(6, st);
    if (p.N) VLACU_LAUNCH(gc_dn_kernel, cols, VLACU_NT, 0, st, p);
    tm.mark(7, st);
    tm.finish(a);
    return cudaGetLastError();
}

} // namespace

void grad_chunk_smem(int C, int dk, int dv, int tile, size_t *fac, size_t *vjp, size_t *walk) {
    *fac = gc_smem_of(false, C, dk, dv).total * sizeof(float);
    *vjp = gc_smem_of(true, C, dk, dv).total * sizeof(float);
    *walk = (pad4((size_t)dk * ld_of(tile)) + pad4((size_t)C * ld_of(tile))) * sizeof(float);
}

size_t grad_chunk_static_smem() { /* (the same in both instances: sc[32]) */
    static const size_t s = static_smem_of((const void *)gc_vjp_kernel<false>, 256);
    return s;
}

/* VLA_CUDA_BMM=simple (development, read once): the kernels' products one element a thread (bmm's
 * SIMPLE form), to time the register-tiled default against. Same results, bit for bit. */
cudaError_t launch_grad_chunk(const gchunk_params &p, cudaStream_t st) {
    static const bool simple = [] {
        const char *e = getenv("VLA_CUDA_BMM");
        return e && strcmp(e, "simple") == 0;
    }();
    return simple ? launch_gc<true>(p, st) : launch_gc<false>(p, st);
}

} // namespace grad
} // namespace vlacu
