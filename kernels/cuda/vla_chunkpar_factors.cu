/* The chunk-parallel form's per-chunk factors (vla_chunkpar.cuh describes the form): for every
 * chunk at once, the factors W, Y, the write directions Al, and the chunk's affine map on X = S^T,
 * X_end = P X + Q, that the walk (vla_chunkpar_walk.cu) then steps through:
 *   cp_apart  (VLA) a segment of chunks a block: A at the segment start (from the Gram prefix of
 *             vla_chunkpar_gram.cu), then per chunk its A part (the Woodbury step that yields a_t) and
 *             its S factors (s_factors)
 *   cp_sfac   (DeltaNet) a chunk a block: Al = beta k^, then s_factors
 *   cp_linmap (linear attention) Q = phi(K)^T V alone (P = I)
 * The Cholesky, the substitutions and the unit-lower inverse are here, not in vla_chunkpar_tiles.cuh:
 * they are not inline functions (the emulator would define them again in each file that included
 * them), and every kernel that calls them is in this file, so the compiler sees the same callers
 * when it decides what to inline. */
#include "vla_chunkpar_tiles.cuh"
#include "vla_inverse.cuh"

namespace vlacu {
namespace cp {

#ifdef VLA_CUDA_EMU
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#endif

#if !VLA_CP_TC
/* Cholesky of the symmetric C x C matrix G (ld ldg; the lower triangle is read) in place: on
 * return the lower triangle holds L (G = L L^T); the FMA form's (sm_75) phase 5 (tensor-core
 * devices run chol_z_blocked instead). Blocked by panels of 16 columns, two barriers a panel:
 * warp 0 factors the panel (lane l keeps rows k0 + l and k0 + l + 32 of it in registers; pivots
 * and L entries travel by shuffles), then every thread takes the panel's rank-16 update off the
 * trailing lower triangle. Above the diagonal only the panels' own entries are zeroed: its reader
 * (the Z solve) reads the lower triangle alone. Ends with a barrier. */
__device__ void cholesky64(float *G, int ldg) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k0 = 0; k0 < C; k0 += 16) {
        if (warp == 0) {
            const int r0 = k0 + lane, r1 = r0 + 32;
            const bool v0 = r0 < C, v1 = r1 < C;
            float x0[16], x1[16];
#pragma unroll
            for (int p = 0; p < 16; p++) {
                x0[p] = v0 ? G[r0 * ldg + k0 + p] : 0.0f;
                x1[p] = v1 ? G[r1 * ldg + k0 + p] : 0.0f;
            }
            float piv = __shfl_sync(0xffffffffu, x0[0], 0); /* G[k0][k0] */
#pragma unroll
            for (int jj = 0; jj < 16; jj++) {
                const float rd = rsqrtf(piv), d = piv * rd; /* one MUFU op on the critical path */
                x0[jj] = lane > jj ? x0[jj] * rd : (lane == jj ? d : x0[jj]);
                x1[jj] *= rd;
                /* the next pivot, G[k0+jj+1][k0+jj+1] - L[k0+jj+1][k0+jj]^2, from its own lane's
                 * entries: the same FMA as that lane's update below (whose lpj is its own x0[jj]),
                 * but not behind lpj's shuffle, which took a shuffle off each step's chain */
                if (jj < 15) piv = __shfl_sync(0xffffffffu, fmaf(-x0[jj], x0[jj], x0[jj + 1]), jj + 1);
#pragma unroll
                for (int p = jj + 1; p < 16; p++) {
                    const float lpj = __shfl_sync(0xffffffffu, x0[jj], p); /* L[k0+p][k0+jj] */
                    if (lane > jj) x0[p] = fmaf(-x0[jj], lpj, x0[p]);
                    x1[p] = fmaf(-x1[jj], lpj, x1[p]);
                }
            }
#pragma unroll
            for (int p = 0; p < 16; p++) {
                if (v0) G[r0 * ldg + k0 + p] = r0 >= k0 + p ? x0[p] : 0.0f;
                if (v1) G[r1 * ldg + k0 + p] = x1[p];
            }
        }
        __syncthreads();
        const int m0 = k0 + 16, m = C - m0;
        if (m == 0) break; /* the last panel: nothing trails it */
        for (int e = threadIdx.x; e < m * m; e += NT) {
            const int i = m0 + e / m, j = m0 + e % m;
            if (j <= i) {
                float acc = G[i * ldg + j];
#pragma unroll
                for (int p = 0; p < 16; p++) acc = fmaf(-G[i * ldg + k0 + p], G[j * ldg + k0 + p], acc);
                G[i * ldg + j] = acc;
            }
        }
        __syncthreads();
    }
}
#endif

/* x <- L^{-1} x for one column x of C entries in shared memory (x[t * ldx]); L lower (ld ldl),
 * unit diagonal if UNIT, else rdiag[t] = 1 / L[t][t]. Blocks of 16 rows in registers: the rows
 * above a block are applied to it first (one shared load of x per 16 FMAs), then the block is
 * solved in registers. Threads of a warp read the same L entry (a broadcast). */
template <bool UNIT> __device__ void fwd_subst(const float *L, int ldl, const float *rdiag, float *x, int ldx) {
#pragma unroll 1
    for (int b0 = 0; b0 < C; b0 += 16) {
        float y[16];
#pragma unroll
        for (int i = 0; i < 16; i++) y[i] = x[(b0 + i) * ldx];
#pragma unroll 2
        for (int r = 0; r < b0; r++) {
            const float xr = x[r * ldx];
#pragma unroll
            for (int i = 0; i < 16; i++) y[i] = fmaf(-L[(b0 + i) * ldl + r], xr, y[i]);
        }
#pragma unroll
        for (int i = 0; i < 16; i++) {
#pragma unroll
            for (int r = 0; r < i; r++) y[i] = fmaf(-L[(b0 + i) * ldl + b0 + r], y[r], y[i]);
            if (!UNIT) y[i] *= rdiag[b0 + i];
        }
#pragma unroll
        for (int i = 0; i < 16; i++) x[(b0 + i) * ldx] = y[i];
    }
}

#if VLA_CP_TC
/* The Cholesky of G = I + UA U^T and the solve Z = L^{-1} UA as one left-looking pass by blocks of
 * 16 rows (b = 0..3), without G's off-diagonal blocks or L ever formed. From Z U^T = L^T - L^{-1}
 * (L^{-1} G = L^T), L's entries left of the diagonal block are L_ts = u_t . z_s (s < t), so:
 *   P_b = U_b Z_{<b}^T                  (= L_{b,<b}; 2b tiles, depth DK)
 *   R_b = UA_b - P_b Z_{<b}              (in place of UA_b; depth 16 b)
 *   S_b = I + UA_b U_b^T - P_b P_b^T     (the Schur complement G_bb - L_{b,<b} L_{b,<b}^T)
 *   the panel [S_b; R_b^T] (16 + DK rows, 16 columns) is factored as cholesky64 factors its
 *   panels: the rows below S_b come out as R_b^T L_bb^{-T} = Z_b^T, written back over UA_b. Warp
 *   w < DK / 16 takes S_b and 16 of R_b's columns (each warp the same steps on S_b, so the same
 *   bits): one row a lane, where one warp for all rows spilled registers.
 * Three barriers a block where a blocked Cholesky and a separate Z solve (the FMA form's) took about
 * 16, and no 64 x 64 G (that form's phases 4-6: 2.6k + 10.2k + 4.3k cycles at (1,4,32) T = 2048). U is
 * read throughout. G (ld ldc) is scratch: column 0..15 of row 16 b + i hold S_b, columns 16..63 of
 * rows 0..15 hold P_b. RD (apart_kernel's UK form): rdiag[t] <- 1 / L_tt (C floats). Ends with a barrier. */
template <int DK, bool RD> __device__ void chol_z_blocked(const float *U, float *UA, float *G, int ld, int ldc, float *rdiag, long long *pf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    float *Pb = G + 16; /* P_b[i][p] = Pb[i * ldc + p], p < 16 b */
    { /* the diagonal blocks I + UA_b U_b^T: warp w takes block w / 2, columns 8 (w % 2) .. */
        const int b = warp >> 1, h = warp & 1;
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        warp_mma<true, aprec<4>>(UA + 16 * b * ld, ld, U + (16 * b + 8 * h) * ld, ld, DK, d);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = g + (q >> 1) * 8, j = 8 * h + 2 * t + (q & 1);
            G[(16 * b + i) * ldc + j] = d[q] + (i == j ? 1.0f : 0.0f);
        }
    }
    __syncthreads();
    STAMP(pf, 32); /* development (VLA_CUDA_KERNEL_TIMES): 33 + 3 b, 34 + 3 b, 35 + 3 b after P_b, R_b and S_b, the panel */
#pragma unroll 1
    for (int b = 0; b < C / 16; b++) {
        const int r0 = 16 * b;
        if (b > 0) {
            if (warp < 2 * b) { /* P_b, column tile warp */
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                warp_mma<true, aprec<4>>(U + r0 * ld, ld, UA + 8 * warp * ld, ld, DK, d);
#pragma unroll
                for (int q = 0; q < 4; q++) Pb[(g + (q >> 1) * 8) * ldc + 8 * warp + 2 * t + (q & 1)] = d[q];
            }
            __syncthreads();
            STAMP(pf, 33 + 3 * b);
            for (int w = warp; w < DK / 8 + 2; w += NT / 32) { /* R_b's DK / 8 column tiles, then S_b's two */
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                if (w < DK / 8) {
                    warp_mma<false, aprec<4>>(Pb, ldc, UA + 8 * w, ld, r0, d);
#pragma unroll
                    for (int q = 0; q < 4; q++) UA[(r0 + g + (q >> 1) * 8) * ld + 8 * w + 2 * t + (q & 1)] -= d[q];
                } else {
                    const int h = w - DK / 8;
                    warp_mma<true, aprec<4>>(Pb, ldc, Pb + 8 * h * ldc, ldc, r0, d);
#pragma unroll
                    for (int q = 0; q < 4; q++) G[(r0 + g + (q >> 1) * 8) * ldc + 8 * h + 2 * t + (q & 1)] -= d[q];
                }
            }
            __syncthreads();
            STAMP(pf, 34 + 3 * b);
        }
        if (warp < DK / 16) { /* the panel: in warp w, lane l < 16 keeps S_b's row l, lane 16 + i R_b's column 16 w + i */
            const int c = 16 * warp + lane - 16;
            float x[16];
#pragma unroll
            for (int p = 0; p < 16; p++) x[p] = lane < 16 ? G[(r0 + lane) * ldc + p] : UA[(r0 + p) * ld + c];
            float piv = __shfl_sync(0xffffffffu, x[0], 0);
#pragma unroll
            for (int jj = 0; jj < 16; jj++) { /* cholesky64's column step (see there); every warp the same S_b steps */
                const float rd = rsqrtf(piv), d = piv * rd;
                x[jj] = lane > jj ? x[jj] * rd : (lane == jj ? d : x[jj]);
                if (RD && warp == 0 && lane == jj) rdiag[r0 + jj] = rd; /* 1 / L_tt, the factor Z's row t took */
                if (jj < 15) piv = __shfl_sync(0xffffffffu, fmaf(-x[jj], x[jj], x[jj + 1]), jj + 1);
                /* (L's column jj through shared memory, four 16-byte broadcast loads, in place of these
                 * 15 - jj shuffles: 2.19k against 1.69k cycles a panel) */
#pragma unroll
                for (int p = jj + 1; p < 16; p++) {
                    const float lpj = __shfl_sync(0xffffffffu, x[jj], p);
                    if (lane > jj) x[p] = fmaf(-x[jj], lpj, x[p]);
                }
            }
            if (lane >= 16)
#pragma unroll
                for (int p = 0; p < 16; p++) UA[(r0 + p) * ld + c] = x[p];
        }
        __syncthreads();
        STAMP(pf, 35 + 3 * b);
    }
}
#endif

#if VLA_CP_TC
/* G (C x C, ld ldg) holds a strictly lower Lw, zero elsewhere: G <- T = (I + Lw)^{-1} (unit lower),
 * so that the chunk's W and Y solves become tensor-core products. By blocks of 16: warps 0..3
 * invert the diagonal blocks D_b (lane j solves column j in registers); then row blocks i = 1, 2,
 * 3 in turn: M = Lw_{i,<i} T_{<i,<i} (into scr, 16 x 48, ld lds), and T_{i,<i} = -D_i M. (The
 * one-thread-a-column substitution this replaces was a chain of C^2 / 2 dependent FMAs a thread:
 * 20-45k cycles a chunk.) Ends with a barrier. */
__device__ void unit_lower_inverse(float *G, int ldg, float *scr, int lds) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    if (warp < C / 16) {
        float *Db = G + 16 * warp * ldg + 16 * warp;
        const int j = lane & 15;
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float acc = i == j ? 1.0f : 0.0f;
#pragma unroll
            for (int r = 0; r < i; r++) acc = fmaf(-Db[i * ldg + r], x[r], acc);
            x[i] = i < j ? 0.0f : acc;
        }
        __syncwarp(); /* every lane has read the block before any writes it */
        if (lane < 16)
#pragma unroll
            for (int i = 0; i < 16; i++) Db[i * ldg + j] = x[i];
    }
    __syncthreads();
    for (int i = 1; i < C / 16; i++) {
        const int r0 = 16 * i;
        if (warp < 2 * i) { /* column tile warp of M: 16 x 8, depth 16 i */
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            warp_mma(G + r0 * ldg, ldg, G + 8 * warp, ldg, r0, d);
#pragma unroll
            for (int q = 0; q < 4; q++) scr[(g + (q >> 1) * 8) * lds + 8 * warp + 2 * t + (q & 1)] = d[q];
        }
        __syncthreads();
        if (warp < 2 * i) {
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            warp_mma(G + r0 * ldg + r0, ldg, scr + 8 * warp, lds, 16, d);
#pragma unroll
            for (int q = 0; q < 4; q++) G[(r0 + g + (q >> 1) * 8) * ldg + 8 * warp + 2 * t + (q & 1)] = -d[q];
        }
        __syncthreads();
    }
}
#endif

/* The normalisations of a chunk's U and K once their rows have landed (elu+1 applied, a barrier
 * since): k^ = normalize(K), U = s_u normalize(u), or s_u k^ (written as k^ is). Ends with a barrier. */
template <int DK> __device__ __forceinline__ void norm_uk(const vlacu_args &a, float *U, float *K, int ld) {
    const float eps = (float)a.eps, su = (float)a.u_scale;
    const bool copy = !a.u;
    norm_rows<DK>(K, ld, eps, 1.0f, [&](int r, int i, float y) {
        if (copy) U[r * ld + i] = su * y;
    });
    if (a.u) norm_rows<DK>(U, ld, eps, su);
    __syncthreads();
}

/* U (the penalty vectors) and K (k^ = normalize(phi(k))) of a chunk. Ends with a barrier. */
template <int DK>
__device__ void load_uk(const vlacu_args &a, int b, int h, int ts, int c, float *U, float *K, int ld) {
    load_rows<DK>(a.k, a, b, h, ts, c, a.elu1 != 0, K, ld);
    if (a.u) load_rows<DK>(a.u, a, b, h, ts, c, false, U, ld);
    __syncthreads();
    norm_uk<DK>(a, U, K, ld);
}

/* load_uk in two halves, so that the loads overlap other work: issue_uk puts the raw rows of k
 * (and u) in flight (cp.async on sm_80+), finish_uk waits for them and applies elu+1 and the
 * normalisations. Ends with a barrier. (apart_kernel's later chunks keep load_uk: this pair there
 * made apart_kernel<64, 2> spill 20 bytes.) */
template <int DK>
__device__ __forceinline__ void issue_uk(const vlacu_args &a, int b, int h, int ts, int c, float *U, float *K, int ld) {
    const size_t off = (((size_t)b * a.T + ts) * a.H + h) * a.dk, stride = (size_t)a.H * a.dk;
    async_rows<C, DK>(K, ld, a.k + off, stride, c, a.dk);
    if (a.u) async_rows<C, DK>(U, ld, a.u + off, stride, c, a.dk);
}
template <int DK> __device__ void finish_uk(const vlacu_args &a, int c, float *U, float *K, int ld) {
    async_wait();
    if (a.elu1) { /* after a barrier: async_rows' 16-byte copies give a thread other entries than this loop's
                   * (without the barrier, racecheck reported the 16-byte copies against this 4-byte mapping) */
        __syncthreads();
        for (int e = threadIdx.x; e < C * DK; e += NT) {
            const int t = e / DK, i = e - t * DK;
            if (t < c && i < a.dk) K[t * ld + i] = elu1f(K[t * ld + i]);
        }
    }
    __syncthreads();
    norm_uk<DK>(a, U, K, ld);
}

/* At dk = 64 (apart_kernel<64, 2>) P and Q are formed one after the other, one accumulator live:
 * the two at once (one load of Al^T's fragments for both) made it spill 40 bytes, this 4. H200,
 * gated, same bits: (8,16,64) T = 2048 1.224 against 1.250 ms, T = 32768 18.31 against 18.69 ms
 * (git: 416e00f; again in the fat build: 1.229 against 1.246, 18.26 against
 * 18.71). VLA_CP_PQ_APART=0 (development, compile time) pairs them again. */
#ifndef VLA_CP_PQ_APART
#define VLA_CP_PQ_APART 1
#endif
template <int DK> __host__ __device__ constexpr bool pq_apart() { return VLA_CP_PQ_APART && DK == 64; }

/* Phases 10-12 of chunk j (tokens ts .., c of them): its S factors (VLA-MATH 2.3) from K (the
 * read keys, normalised) and Al (the write directions), C x DK in shared memory (ld DK + LD_PAD),
 * with V's first DK columns in flight to Vs (async_rows; the rest are staged here):
 * Lw = strict(K Al^T), [W | Y] = (I + Lw)^{-1} [K | V], the chunk map P = I - Al^T W, Q = Al^T Y.
 * P, Q go to global memory, and Al, W, Y too when store_awy (false: the caller forms the output's
 * first half from them in shared memory, apart_kernel's P.outfold). K is overwritten with W; G (C x C + LD_PAD)
 * and scr (16 x 48 + LD_PAD, tensor-core form) are scratch; Y lands in Ys, DK columns at a time
 * (INPLACE: Ys is Vs, as the FMA form needs). Ends with a barrier. */
template <int DK, bool INPLACE>
__device__ __forceinline__ void s_factors(const cp_params &P, int bh, int j, int ts, int c, const float *vsrc, size_t sv, bool store_awy,
                          float *K, float *Al, float *G, float *Vs, float *Ys, float *scr, bool first) {
    static_assert(INPLACE || VLA_CP_TC, "the FMA form solves Y in place");
    const vlacu_args &a = P.a;
    const int dv = a.dv;
    constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    float *Alg = P.Al + ((size_t)bh * a.T + ts) * DK, *Wg = P.W + ((size_t)bh * a.T + ts) * DK;
    if (store_awy)
        for (int e = threadIdx.x; e < c * DK; e += NT) {
            const int t = e / DK, i = e - t * DK;
            Alg[e] = Al[t * ld + i];
        }
    /* 10. Lw = strictly_lower(K Al^T) into G */
    {
        typedef blk<C, C> tl;
        float x[tl::NE];
        zerob<C, C>(x);
        mmb<C, C, DK, false, true>(K, ld, Al, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) G[tl::row(i) * ldc + tl::col(i)] = tl::col(i) < tl::row(i) ? x[i] : 0.0f;
    }
    __syncthreads();
    if (first) PROF(10);
    /* 11. [W | Y] = (I + Lw)^{-1} [K | V]: W in place of K, Y on DK columns of V at a time (staged
     * in Vs). Tensor cores: the explicit inverse, then products. FMA units: one thread per column
     * substitutes in place (threads < DK for W, 128 .. 128 + DK - 1 for Y; Ys must be Vs there). */
    float *Yg = P.Y + ((size_t)bh * a.T + ts) * dv;
#if VLA_CP_TC
    unit_lower_inverse(G, ldc, scr, 48 + LD_PAD); /* G <- (I + Lw)^{-1} */
    if (first) {
        PROF(17);
        TL_PHASE(P, 6);
    }
#endif
    for (int v0 = 0; v0 < dv; v0 += DK) {
        const int nv = imin(DK, dv - v0);
        if (v0 == 0) async_wait(); /* prefetched */
        else stage_rows<C, DK>(Vs, ld, vsrc + v0, sv, c, nv);
        __syncthreads();
        if (first && v0 == 0) {
            PROF(16);
            TL_PHASE(P, 5);
        }
#if VLA_CP_TC
        if (INPLACE) { /* Y = T V over V, and (first block) W = T K over K: all of V and K read first */
            typedef blk<C, DK> tl;
            float y[tl::NE], w[tl::NE];
            zerob<C, DK>(y);
            zerob<C, DK>(w);
            mmb<C, DK, C, false, false>(G, ldc, Vs, ld, y); /* (as one mmb2, sfac_kernel<64, 3> spilled 40 bytes) */
            if (v0 == 0) mmb<C, DK, C, false, false>(G, ldc, K, ld, w);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < tl::NE; i++) Vs[tl::row(i) * ld + tl::col(i)] = y[i];
            if (v0 == 0)
#pragma unroll
                for (int i = 0; i < tl::NE; i++) K[tl::row(i) * ld + tl::col(i)] = w[i];
        } else { /* Y = T V into Ys, W = T K over K (all of K read first) */
            typedef blk<C, DK> tl;
            float y[tl::NE], w[tl::NE];
            zerob<C, DK>(y);
            if (v0 == 0) {
                zerob<C, DK>(w);
                mmb2<C, DK, C, false, false, true, false>(G, nullptr, ldc, Vs, K, ld, y, w); /* one A: T */
            } else {
                mmb<C, DK, C, false, false>(G, ldc, Vs, ld, y);
            }
#pragma unroll
            for (int i = 0; i < tl::NE; i++) Ys[tl::row(i) * ld + tl::col(i)] = y[i];
            if (v0 == 0) {
                __syncthreads();
#pragma unroll
                for (int i = 0; i < tl::NE; i++) K[tl::row(i) * ld + tl::col(i)] = w[i];
            }
        }
#else
        if (v0 == 0 && threadIdx.x < DK) fwd_subst<true>(G, ldc, nullptr, K + threadIdx.x, ld);
        if (threadIdx.x >= 128 && threadIdx.x < 128 + nv) fwd_subst<true>(G, ldc, nullptr, Vs + threadIdx.x - 128, ld);
#endif
        __syncthreads();
        if (first && v0 == 0) PROF(18);
        if (v0 == 0 && store_awy)
            for (int e = threadIdx.x; e < c * DK; e += NT) {
                const int t = e / DK, i = e - t * DK;
                Wg[e] = K[t * ld + i];
            }
        if (store_awy)
            for (int e = threadIdx.x; e < c * DK; e += NT) {
                const int t = e / DK, cc = e - t * DK;
                if (cc < nv) Yg[(size_t)t * dv + v0 + cc] = Ys[t * ld + cc];
            }
        if (first && v0 == 0) TL_PHASE(P, 7);
        /* 12. the chunk's affine map on X = S^T: X_end = P X + Q, P = I - Al^T W, Q = Al^T Y */
        {
            typedef blk<DK, DK> tl;
            auto put_p = [&](const float (&w)[tl::NE]) { /* P = I - Al^T W from its product */
                float *pg = P.Pm + ((size_t)bh * P.nch + j) * DK * DK;
#pragma unroll
                for (int i = 0; i < tl::NE; i++)
                    pg[tl::row(i) * DK + tl::col(i)] = (tl::row(i) == tl::col(i) ? 1.0f : 0.0f) - w[i];
            };
            float x[tl::NE];
            zerob<DK, DK>(x);
            if (v0 == 0 && !INPLACE && !pq_apart<DK>()) { /* P and Q at once (one A: Al^T; not in sfac_kernel, whose <64, 3> form then spilled) */
                float xp[tl::NE];
                zerob<DK, DK>(xp);
                mmb2<DK, DK, C, true, false, true, false>(Al, nullptr, ld, K, Ys, ld, xp, x);
                put_p(xp);
            } else { /* one accumulator live at a time */
                if (v0 == 0) {
                    mmb<DK, DK, C, true, false>(Al, ld, K, ld, x);
                    put_p(x);
                    zerob<DK, DK>(x);
                }
                mmb<DK, DK, C, true, false>(Al, ld, Ys, ld, x);
            }
            float *qg = P.Qm + ((size_t)bh * P.nch + j) * DK * dv + v0;
#pragma unroll
            for (int i = 0; i < tl::NE; i++)
                    if (tl::col(i) < nv) qg[(size_t)tl::row(i) * dv + tl::col(i)] = x[i];
        }
        __syncthreads();
    }
}

/* ---- cp_apart (VLA): a segment's chunks in turn, each its A part (VLA-MATH 2.3) and S factors ----
 * apart_kernel's register cap: MINB blocks a multiprocessor. At dk = 32 two (128 registers) run a
 * chunk faster, three (80 registers, 61 KiB of shared memory each) more chunks at once: three when
 * the launch has more blocks than two a multiprocessor hold (chunkpar_apart_minb; on sm_80+: a
 * T4's 64 KiB holds one dk = 32 block anyway). At dk = 64 two (106 KiB each). Its shared memory:
 * apart_smem (vla_chunkpar.cuh). */

/* The Gram fold (P.fold) is compiled for dk = 32 only: at dk = 64 its 32 doubles a thread made
 * apart_kernel<64, 2> spill 24 bytes, and without it (8,16,64) ran 0.5-1.3% faster. */
#ifndef VLA_CP_FOLD_PARTS
#define VLA_CP_FOLD_PARTS 8 /* the fold's parts a round trip (development; 16 and 32 no faster) */
#endif

/* FOLD (dk = 32): the output's first half here too (P.outfold, a kernel of its own: in
 * the same instance it made apart_kernel<32, 2> 10% longer, and (1,4,32) T = 2048, which does not
 * use it, about 1% slower in A/B runs) */
template <int DK, int MINB, bool FOLD = false, bool UK = false> __global__ void __launch_bounds__(NT, MINB) apart_kernel(const cp_params P) {
    static_assert(!FOLD || DK == 32, "the fold is dk = 32's");
    tl_scope<TL_APART> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef apart_smem<DK> S;
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x / P.nseg, g = TL_SEG((int)(blockIdx.x % P.nseg), P.nseg);
    if (head_skipped(P, bh)) return;
    const int b = bh / a.H, h = bh % a.H, j0 = g * P.seg, j1 = imin(j0 + P.seg, P.nch), dk = a.dk, dv = a.dv;
    constexpr int ld = S::ld, ldc = S::ldc;
    bool first = true;
    PROF(0);
    PROF_NS(60);
    float *U = (float *)smem, *K = U + C * ld, *UA = K + C * ld, *G = UA + C * ld; /* region 1 */
    float *A0 = (float *)(smem + S::region1), *Al = A0 + DK * ld;
    float *rdiag = Al + C * ld; /* 1 / L_tt (the FMA form's Z solve; Al from Z when u = s_u k^) */
    float *Qf = (float *)(smem + S::bytes); /* FOLD: Q~ (launched with S::qbytes more) */
    /* FOLD, after s_factors: the output's first half (output_split_kernel's OUT_PRE, the same sums):
     * W is in K, Y (dv <= DK) in Ysm, a_t in Al; Pm = tril(Q~ Al^T) in G (T's place), then
     * Q' = Q~ - Pm W and Pm Y over W's and Y's rows in global memory */
    auto fold_out = [&](int ts, int c, const float *Ysm) {
        if (a.elu1) {
            load_rows<DK>(a.q, a, b, h, ts, c, true, Qf, ld);
            __syncthreads();
        }
        causal_scores<DK>(Qf, Al, G);
        __syncthreads();
        typedef blk<C, DK> tl;
        float *wg = P.W + ((size_t)bh * a.T + ts) * DK, *yg = P.Y + ((size_t)bh * a.T + ts) * dv;
        float x[tl::NE]; /* one accumulator at a time (as one mmb2, apart_kernel<32, 2, true> spilled 16 bytes) */
        zerob<C, DK>(x);
        mmb<C, DK, C, false, false>(G, ldc, K, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++)
            if (tl::row(i) < c) wg[(size_t)tl::row(i) * DK + tl::col(i)] = Qf[tl::row(i) * ld + tl::col(i)] - x[i];
        zerob<C, DK>(x);
        mmb<C, DK, C, false, false>(G, ldc, Ysm, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++)
            if (tl::row(i) < c && tl::col(i) < dv) yg[(size_t)tl::row(i) * dv + tl::col(i)] = x[i];
        __syncthreads(); /* G, K and Y's place are read before the next chunk's rows land */
    };

    /* the first chunk's raw k (and u) rows in flight while A0 is formed */
    issue_uk<DK>(a, b, h, j0 * P.C, imin(P.C, a.T - j0 * P.C), U, K, ld);
    /* 1. A at the segment start: A_0, or the inverse of M (the Gram prefix) */
    if (g == 0) {
        const float ainit = (float)(1.0 / a.lambda0);
        for (int e = threadIdx.x; e < DK * DK; e += NT) {
            const int i = e / DK, jj = e - i * DK;
            float x = i == jj ? 1.0f : 0.0f;
            if (i < dk && jj < dk) x = a.A_in ? a.A_in[(size_t)bh * dk * dk + i * dk + jj] : (i == jj ? ainit : 0.0f);
            A0[i * ld + jj] = x;
        }
    } else {
        /* M_g (double, ld DK + 1) into shared memory, a 2 x 2 (dk = 32) or 4 x 4 block a thread, then its
         * inverse (blocked_inverse; M_g in G's place, dk = 32, or UA's and G's, with its scratch X in Al's) */
        constexpr int R = DK / 16, ldm = DK + 1;
        double *Md = DK == 32 ? (double *)G : (double *)UA, *X = DK == 32 ? Md + DK * ldm : (double *)Al;
        bool folded = false;
        if constexpr (fold_here<DK>()) if (P.fold) {
            /* M_g = M_0 + the Gram parts of segments < g, summed here (no cp_prefix launch). Thread t
             * sums row t / 8, columns 4 (t % 8) .. + 3: one 16-byte load a part, where a 2 x 2 block a
             * thread took four 4-byte loads. The last segment's fold at (1,4,32) T = 8192
             * (63 parts) went from 9.4-10.7k to 8.0-8.9k cycles, the forward 0.7% faster gated; 16 or
             * 32 parts a round trip were no faster (all the blocks' folds together read about 33 MB
             * from L2 in a few microseconds). The same sums in the same order: the same bits. */
            static_assert(DK * DK == 4 * NT, "the fold's map: one 16-byte piece a thread");
            const int fr = (int)threadIdx.x / (DK / 4), fc = 4 * ((int)threadIdx.x % (DK / 4));
            double m[4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) m[jj] = m0_entry(P, bh, fr, fc + jj);
            const vf4 *gp = reinterpret_cast<const vf4 *>(P.Gp + (size_t)bh * (P.nseg - 1) * P.gparts * DK * DK + fr * DK + fc);
            const int nq = g * P.gparts;
            constexpr int U = VLA_CP_FOLD_PARTS; /* parts a round trip */
            for (int q0 = 0; q0 < nq; q0 += U) {
                vf4 x[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (q0 + u < nq) x[u] = gp[(size_t)(q0 + u) * (DK * DK / 4)];
                    else x[u].x = x[u].y = x[u].z = x[u].w = 0.0f;
                }
#pragma unroll
                for (int u = 0; u < U; u++) /* in part order, as cp_prefix with one run */
                    m[0] += x[u].x, m[1] += x[u].y, m[2] += x[u].z, m[3] += x[u].w;
            }
#pragma unroll
            for (int jj = 0; jj < 4; jj++) Md[fr * ldm + fc + jj] = m[jj];
            folded = true;
        }
        if (!folded) {
            const int r0 = R * ((int)threadIdx.x / 16), c0 = R * ((int)threadIdx.x % 16);
            const double *src = P.Md + ((size_t)bh * P.nseg + g) * DK * DK;
            double m[R][R];
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int jj = 0; jj < R; jj++) m[i][jj] = src[(r0 + i) * DK + c0 + jj];
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int jj = 0; jj < R; jj++) Md[(r0 + i) * ldm + c0 + jj] = m[i][jj];
        }
        __syncthreads();
        blocked_inverse<DK>(Md, X, [&](int i, int jj, double x) { A0[i * ld + jj] = (float)x; },
                            P.prof && blockIdx.x == (unsigned)P.prof_block ? P.prof : nullptr);
    }
    __syncthreads(); /* the inversion's buffers are G's (and UA's, Al's) place: done before they are formed */
    PROF(1);
    TL_INV_DONE(P);

    for (int j = j0; j < j1; j++, first = false) {
    const int ts = j * P.C, c = imin(P.C, a.T - ts);
    /* V's first DK columns go to U's place once U is read (step 4), in flight while the A part runs */
    const float *vsrc = a.v + (((size_t)b * a.T + ts) * a.H + h) * dv;
    const size_t sv = (size_t)a.H * dv;
    /* 2. U and K */
    if (j == j0) finish_uk<DK>(a, c, U, K, ld);
    else load_uk<DK>(a, b, h, ts, c, U, K, ld);

    if (first) PROF(2);
    /* u = s_u k^ (u not given): U = s_u K, so K A0 = L Z / s_u and K Z^T = (L - L^{-T}) / s_u (from
     * U A0 U^T = G - I = L L^T - I), whose lower triangle is (L - D^{-1}) / s_u, D = diag(L). Step 8's
     * K A0 - tril(K Z^T) Z is then exactly D^{-1} Z / s_u: row t is z_t / (1 + u_t . z_t) / s_u =
     * A_t k^_t, as Sherman-Morrison has it. So K A0 and steps 7-8 (three of the chunk's 64-deep
     * products, two barriers) are not needed: a_t = normalize(Z's row t / (s_u L_tt)). (The prescale
     * keeps the eps clamp exact: ||A_t k^_t|| can fall below eps at long T.) */
    constexpr bool uk = UK; /* (a template argument: as a run-time bit, the u-given form ran 0.7-1.5% slower
                             * for the registers the two forms shared) */
    /* 3. UA = U A0; Al = K A0 (u given) */
    if constexpr (uk) {
        typedef blk<C, DK> tl;
        float x[tl::NE];
        zerob<C, DK>(x);
        mmb<C, DK, DK, false, false, aprec<2>>(U, ld, A0, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) UA[tl::row(i) * ld + tl::col(i)] = x[i];
    } else {
        typedef blk<C, DK> tl;
        float x[tl::NE], y[tl::NE];
        zerob<C, DK>(x);
        zerob<C, DK>(y);
        mmb2<C, DK, DK, false, false, false, true, aprec<2>>(U, K, ld, A0, nullptr, ld, x, y); /* one B: A0 */
#pragma unroll
        for (int i = 0; i < tl::NE; i++) {
                UA[tl::row(i) * ld + tl::col(i)] = x[i];
                Al[tl::row(i) * ld + tl::col(i)] = y[i];
            }
    }
    __syncthreads();
    if (first) {
        PROF(3);
        TL_PHASE(P, 0);
    }
#if VLA_CP_TC /* 4-6. Z = L^{-1} UA, G = I + UA U^T = L L^T, by blocks of 16 rows */
    chol_z_blocked<DK, UK>(U, UA, G, ld, ldc, rdiag, P.prof && first && blockIdx.x == (unsigned)P.prof_block ? P.prof : nullptr);
    if (first) TL_PHASE(P, 4);
    async_rows<C, DK>(U, ld, vsrc, sv, c, imin(DK, dv)); /* U has been read */
    if (FOLD && !a.elu1) /* Q~ in flight too (s_factors waits for both) */
        async_rows<C, DK>(Qf, ld, a.q + (((size_t)b * a.T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk);
    if (first) {
        PROF(4);
        TL_PHASE(P, 1);
        PROF(5);
        PROF(6);
    }
#else /* the FMA form: G, its Cholesky, then Z by one thread a column */
    /* 4. G = I + UA U^T (symmetric, both triangles) */
    {
        typedef blk<C, C> tl;
        float x[tl::NE];
        zerob<C, C>(x);
        mmb<C, C, DK, false, true, aprec<4>>(UA, ld, U, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) G[tl::row(i) * ldc + tl::col(i)] = x[i] + (tl::row(i) == tl::col(i) ? 1.0f : 0.0f);
    }
    __syncthreads();
    async_rows<C, DK>(U, ld, vsrc, sv, c, imin(DK, dv)); /* U has been read */
    if (FOLD && !a.elu1) async_rows<C, DK>(Qf, ld, a.q + (((size_t)b * a.T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk);
    if (first) PROF(4);
    /* 5. G = L L^T */
    cholesky64(G, ldc);
    for (int t = threadIdx.x; t < C; t += NT) rdiag[t] = 1.0f / G[t * ldc + t];
    __syncthreads();
    if (first) PROF(5);
    /* 6. Z = L^{-1} UA in place */
    for (int col = threadIdx.x; col < DK; col += NT) fwd_subst<false>(G, ldc, rdiag, UA + col, ld);
    __syncthreads();
    if (first) PROF(6);
#endif
    float *Z = UA;
    if constexpr (uk) { /* 7-9. a_t = normalize(z_t / (s_u L_tt)) (above) */
        const float isu = 1.0f / (float)a.u_scale;
        norm_rows_from<DK>(Z, Al, ld, (float)a.eps, 1.0f, [&](int t) { return rdiag[t] * isu; }, [](int, int, float) {});
        if (first) {
            PROF(7);
            PROF(8);
        }
    } else {
    /* 7. tril(K Z^T) into G (L is no longer needed) */
    {
        typedef blk<C, C> tl;
        float x[tl::NE];
        zerob<C, C>(x);
        mmb<C, C, DK, false, true, aprec<16>>(K, ld, Z, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) G[tl::row(i) * ldc + tl::col(i)] = tl::col(i) <= tl::row(i) ? x[i] : 0.0f;
    }
    __syncthreads();
    if (first) PROF(7);
    /* 8. Al = K A0 - tril(K Z^T) Z */
    {
        typedef blk<C, DK> tl;
        float x[tl::NE];
        zerob<C, DK>(x);
        mmb<C, DK, C, false, false, aprec<16>>(G, ldc, Z, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) Al[tl::row(i) * ld + tl::col(i)] -= x[i];
    }
    __syncthreads();
    if (first) PROF(8);
    /* 9. a_t = normalize(row t) */
    norm_rows<DK>(Al, ld, (float)a.eps, 1.0f);
    }
    /* A at the chunk end for A_out (last chunk): A0 - Z^T Z */
    if (j + 1 < j1 || (j == P.nch - 1 && a.A_out)) { /* A at the chunk end: the next chunk's A0 */
        typedef blk<DK, DK> tl;
        float x[tl::NE];
        zerob<DK, DK>(x);
        mmb<DK, DK, C, true, false, aprec<8>>(Z, ld, Z, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) {
                const int r = tl::row(i), cc = tl::col(i);
                const float y = A0[r * ld + cc] - x[i];
                A0[r * ld + cc] = y;
                if (j == P.nch - 1 && r < dk && cc < dk) P.Aend[(size_t)bh * dk * dk + r * dk + cc] = y;
            }
    }
    __syncthreads();
    if (first) {
        PROF(9);
        TL_PHASE(P, 2);
    }
#if VLA_CP_TC /* Y, DK columns at a time, into UA's place (Z is no longer needed) */
    s_factors<DK, false>(P, bh, j, ts, c, vsrc, sv, !FOLD, K, Al, G, U, UA, UA, first);
    if constexpr (FOLD) fold_out(ts, c, UA);
#else
    s_factors<DK, true>(P, bh, j, ts, c, vsrc, sv, !FOLD, K, Al, G, U, U, UA, first);
    if constexpr (FOLD) fold_out(ts, c, U); /* (Y over V in U) */
#endif
    if (first) {
        PROF(11);
        TL_PHASE(P, 3);
        PROF_NS(61);
    }
    }
}

/* ---- cp_sfac: a chunk's S factors (s_factors) for DeltaNet (no A part), one block a
 * chunk: K, Al, V (Y in place) and G, 74 KiB at dk = 64, three blocks a multiprocessor where
 * apart_kernel's 106 KiB held two (delta (8,16,64) T = 2048: 0.83 against 0.88 ms). For VLA the
 * same split (apart_kernel stopping at Al, this kernel reading it back) was no faster: 1.54
 * against 1.51 ms at (8,16,64) T = 2048, 0.496 against 0.487 at (1,4,32) T = 32768, since the
 * apart blocks fill the device either way (git: 15d8391). Shared memory: sfac_smem
 * (vla_chunkpar.cuh). ---- */

/* MINB: blocks a multiprocessor on sm_80+: as many as the shared memory holds, four (dk = 32) or
 * three (dk = 64), with a register cap of 64 or 80 (a few bytes spill), for launches with more
 * blocks than two a multiprocessor hold; else two (chunkpar_sfac_minb). (A T4 holds one dk = 32
 * block anyway: no cap there.) */
template <int DK, int MINB> __global__ void __launch_bounds__(NT, VLA_CP_TC ? MINB : 1) sfac_kernel(const cp_params P) {
    tl_scope<TL_APART> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef sfac_smem<DK> S;
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x / P.nch, j = blockIdx.x % P.nch;
    if (head_skipped(P, bh)) return;
    const int b = bh / a.H, h = bh % a.H, ts = j * P.C, c = imin(P.C, a.T - ts), dv = a.dv;
    constexpr int ld = S::ld, ldc = S::ldc;
    float *K = (float *)smem, *Al = K + C * ld, *Vs = Al + C * ld, *G = Vs + C * ld, *scr = G + C * ldc;
    const float *vsrc = a.v + (((size_t)b * a.T + ts) * a.H + h) * dv;
    const size_t sv = (size_t)a.H * dv;
    async_rows<C, DK>(Vs, ld, vsrc, sv, c, imin(DK, dv)); /* V's first DK columns, waited for in s_factors */
    /* K: k^ = normalize(phi(k)) */
    load_rows<DK>(a.k, a, b, h, ts, c, a.elu1 != 0, K, ld);
    __syncthreads();
    /* and the write directions beta_t k^_t as k^ is written */
    norm_rows<DK>(K, ld, (float)a.eps, 1.0f, [&](int t, int i, float y) {
        const bool bt = a.beta && t < c;
        Al[t * ld + i] = (bt ? a.beta[((size_t)b * a.T + ts + t) * a.H + h] : 1.0f) * y;
    });
    __syncthreads();
    s_factors<DK, true>(P, bh, j, ts, c, vsrc, sv, true, K, Al, G, Vs, Vs, scr, false);
}

/* ---- linear attention (read keys 0): the chunk map is X_end = X + Q, Q = phi(K)^T V (P = I, and
 * W = 0, Y = V, so there is nothing else to factor). linmap_kernel forms Q, sumwalk_kernel the
 * running sum, output_kernel<.., true> reads phi(k) and v themselves. (The general path computed
 * Lw = 0, T = I, W = 0, P = I and walked P X + Q: at (8,16,64) T = 2048 linear took 1.00 ms
 * against DeltaNet's 0.79.) ---- */

/* [BH x nch]: Qm_j = phi(K_j)^T V_j (DK x dv), DK value columns at a time. */
template <int DK> __global__ void __launch_bounds__(NT, 4) linmap_kernel(const cp_params P) {
    tl_scope<TL_LINMAP> tl_(P);
    VLACU_DYNSMEM(smem);
    constexpr int ld = linmap_smem<DK>::ld;
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x / P.nch, j = blockIdx.x % P.nch;
    const int b = bh / a.H, h = bh % a.H, ts = j * P.C, c = imin(P.C, a.T - ts), dv = a.dv;
    float *K = (float *)smem, *Vs = K + C * ld;
    const float *vsrc = a.v + (((size_t)b * a.T + ts) * a.H + h) * dv;
    const size_t sv = (size_t)a.H * dv;
    async_rows<C, DK>(Vs, ld, vsrc, sv, c, imin(DK, dv));
    load_rows<DK>(a.k, a, b, h, ts, c, a.elu1 != 0, K, ld);
    float *qg = P.Qm + ((size_t)bh * P.nch + j) * DK * dv;
    for (int v0 = 0; v0 < dv; v0 += DK) {
        const int nv = imin(DK, dv - v0);
        if (v0 == 0) async_wait();
        else {
            __syncthreads(); /* the previous product is done with Vs */
            stage_rows<C, DK>(Vs, ld, vsrc + v0, sv, c, nv);
        }
        __syncthreads();
        typedef blk<DK, DK> tl;
        float x[tl::NE];
        zerob<DK, DK>(x);
        mmb<DK, DK, C, true, false>(K, ld, Vs, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++)
            if (tl::col(i) < nv) qg[(size_t)tl::row(i) * dv + v0 + tl::col(i)] = x[i];
    }
}

template <int DK, int MINB, bool FOLD, bool UK> kfn apart_fn() { return apart_kernel<DK, MINB, FOLD, UK>; }
template <int DK, int MINB> kfn sfac_fn() { return sfac_kernel<DK, MINB>; }
template <int DK> kfn linmap_fn() { return linmap_kernel<DK>; }
/* the forms run<DK> takes (vla_chunkpar.cu): at dk = 32 also three blocks a multiprocessor and the
 * output's first half folded in (P.apart_minb, P.outfold) */
template kfn apart_fn<32, 2, false, false>();
template kfn apart_fn<32, 2, false, true>();
template kfn apart_fn<32, 3, false, false>();
template kfn apart_fn<32, 3, false, true>();
template kfn apart_fn<32, 2, true, false>();
template kfn apart_fn<32, 2, true, true>();
template kfn apart_fn<32, 3, true, false>();
template kfn apart_fn<32, 3, true, true>();
template kfn apart_fn<64, 2, false, false>();
template kfn apart_fn<64, 2, false, true>();
template kfn sfac_fn<32, 2>();
template kfn sfac_fn<32, 4>();
template kfn sfac_fn<64, 2>();
template kfn sfac_fn<64, 3>();
template kfn linmap_fn<32>();
template kfn linmap_fn<64>();

} // namespace cp
} // namespace vlacu
