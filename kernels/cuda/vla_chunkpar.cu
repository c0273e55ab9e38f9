/* Chunk-parallel VLA: the CUDA backend's `chunked` algorithm for R = 0 and dk <= 64 (also linear
 * attention and DeltaNet without g: the S part alone, no A part).
 *
 * VLA-MATH 2.3 carries (A, S) chunk to chunk, so one block per head walks every chunk in turn
 * and most of the device idles (the engine in vla_engine.cu still does that for R > 0, dk > 64
 * and chunks longer than 64). Here the carry is taken apart:
 *   - A: with R = 0, A at the start of chunk j is exactly (A_0^{-1} + sum_{j' < j} U_j'^T U_j')^{-1}
 *     (VLA-MATH 1 and 2.4), so every chunk's A part (the Woodbury step that yields its a_t) runs at
 *     once, after a prefix sum of Grams (double) and one inversion (blocked_inverse, double) per
 *     segment of chunks; a segment's block carries A over its chunks (A_end = A0 - Z^T Z). With u not
 *     given (u = s_u k^) a_t comes from Z's rows alone (apart_kernel's UK form, step 3's comment).
 *   - S: given a_t, the S recurrence is the generalised delta rule. Its per-chunk factors
 *     W = (I + strict(K Al^T))^{-1} K and Y = (I + strict(K Al^T))^{-1} V come out of the same
 *     block, and with them the chunk's affine map on X = S^T: X_end = P X + Q, P = I - Al^T W,
 *     Q = Al^T Y. Only X_{j+1} = P_j X_j + Q_j is walked chunk to chunk (one small product a
 *     step), and the value columns are independent, so BV columns go to each block of the walk.
 *     The outputs then use the stored chunk-start states, one block per chunk:
 *     O = Q~ X_j + tril(Q~ Al^T)(Y - W X_j).
 *
 * Kernels (one-dimensional grids):
 *   cp_gram    [BH x (nseg-1) x gparts]   U^T U over a part of segment g's chunks -> Gp (float: its
 *                                float sums as they are; every sum of them is double)
 *   cp_prefix  [BH x DK^2 R/256] Md slot g <- A_0^{-1} + the Gram parts of segments < g (= A_g^{-1});
 *                                with few parts (P.fold) cp_apart sums them itself instead
 *   cp_apart   [BH x nseg]       (VLA) A at the segment start = M_g^{-1}, carried over its chunks;
 *                                per chunk a_t -> Al, W, Y, and the map P, Q (FOLD, beside the
 *                                segmented walk: Q' = Q~ - Pm W and Pm Y instead of Al, W, Y)
 *   cp_sfac    [BH x nch]        (delta) a chunk's Al = beta k^, W, Y, P, Q
 *   cp_walk    [BH x dv/BV]      X_j -> Xst; X_{j+1} = P_j X_j + Q_j; S_out, A_out (with few heads
 *                                and many chunks: three launches over segments, see walk_kernel)
 *   cp_linmap  [BH x nch]        (linear) Q = phi(K)^T V: P = I, W = 0, Y = V, Al = phi(k)
 *   cp_sumwalk [BH x DK dv/256]  (linear) X_j -> Xst; X_{j+1} = X_j + Q_j, a thread per entry
 *   cp_output  [BH x nch]        o; on small shapes in two halves (output_split_kernel: OUT_PRE
 *                                beside the walk on a second stream, or folded into cp_apart;
 *                                OUT_FIN after the walk)
 * DK is dk padded to 32 or 64 with zeros: padded key coordinates stay 0 in every product, and
 * A's padded block is the identity, decoupled (exact). C = 64 rows per chunk block; a shorter
 * chunk has zero rows past its end (exact: a zero u leaves A alone, a zero key writes nothing).
 * Block products (vla_mma.cuh): 3xTF32 on tensor cores on sm_80+, float32 FMA on sm_75. The
 * Cholesky's panels are float32 on CUDA cores everywhere (the A part cancels: A = A0 - Z^T Z); on
 * sm_80+ the Cholesky and the Z solve are one left-looking pass by blocks of 16 rows
 * (chol_z_blocked) whose small products are 4xTF32 tiles, on sm_75 a blocked Cholesky and a
 * substitution a thread a column. The Gram prefix and the inversion are double, as the two-level
 * form's (float32 prefix sums drift over long T). */
#include "vla_kernels.cuh"
#include "vla_inverse.cuh"
#include "vla_mma.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace vlacu {
namespace cp {

/* VLA_CP_A3 (session 25): the A-part product groups taken in 3xTF32 instead of 4xTF32 (the small
 * small term dropped, the rounded add after every 8-deep step kept; vla_mma.cuh): bit 1 the Gram
 * sums, 2 U A0 (and K A0), 4 the Cholesky's and Z's products, 8 Z^T Z, 16 the u-given form's K Z^T
 * and tril(K Z^T) Z, whose difference cancels (session 7). Default 14. None of 2, 4, 8 forms that
 * difference: the UK form takes a_t from Z's rows, and A_end = A0 - Z^T Z is as accurate as Z^T Z
 * relative to A0. H200, gated, against all 4xTF32 (benchmarks/results/2026-12-02-h200-session25,
 * run 1, rounds 1 / 2, ms): (1,4,32) T = 2048 0.0500 / 0.0501 against 0.0505 / 0.0506, T = 131072
 * 1.204 / 1.207 against 1.221 / 1.222, (8,16,64) T = 2048 1.052 / 1.054 against 1.070 / 1.070,
 * T = 32768 15.50 / 15.53 against 15.83 / 15.84. test_cuda with 31 (every group), over the 60 chunked
 * VLA rows against float64: outputs' errors 0.99-1.56x 4xTF32's (the largest 9.9e-6, lambda0 = 1e-3,
 * tol 2e-4), A_out's 1.0-2.2x (the largest 3.5e-6, tol 1e-5). 1 (the Gram sums) took gram_kernel<32>
 * from 70 to 89 registers and (1,4,32) T = 2048 to 0.0553 ms. 0: every group 4xTF32, as before. */
#ifndef VLA_CP_A3
#define VLA_CP_A3 14
#endif
template <int BIT> constexpr int aprec = (VLA_CP_A3 & BIT) ? 2 : 1;

/* Development: clock64() into pf[n] by thread 0 when pf is set (pf: P.prof in the block and chunk that
 * VLA_CUDA_KERNEL_TIMES profiles, else null; PROF below does the same from P). */
#ifdef VLA_CUDA_EMU
#define STAMP(pf, n) ((void)0)
#else
#define STAMP(pf, n)                                                                                                   \
    do {                                                                                                               \
        if ((pf) && threadIdx.x == 0) (pf)[n] = clock64();                                                             \
    } while (0)
#endif

/* Development (a build with -DVLA_CP_TIMELINE, run with VLA_CP_TIMELINE=1): each kernel's span on
 * the GPU's global timer, in the real launch sequence (programmatic dependent launch and the second
 * stream as in production; no events between the kernels). Slot k of P.tl: [k] the first block's
 * entry, [TL_N + k] its griddepcontrol.wait returning, [2 TL_N + k] the last warp's exit (ns).
 * Compiled out otherwise (the scope is pdl_enter() alone): even two tests of P.tl moved register
 * counts (walk_kernel<32, 32, W_MAP> 81 to 85, one block a multiprocessor fewer). */
enum { TL_GRAM, TL_PREFIX, TL_APART, TL_OUTPRE, TL_WALK, TL_WMAP, TL_WSCAN, TL_WLOCAL, TL_OUT, TL_LINMAP, TL_SUMWALK, TL_N };
constexpr int TL_BLOCKS = 4096; /* apart_kernel's first blocks: each one's entry, wait done and exit, after the spans */
/* Since session 18 a block's record has TL_REC slots: entry, wait done, exit, its inversion done
 * (TL_INV_DONE in apart_kernel), its multiprocessor + 1, and the first chunk's phases 3, 4, 9 and 11
 * ending (TL_PHASE 0-3); since session 19 also TL_PHASE 4-7: chol_z_blocked's end before V's loads
 * are issued, V waited for in s_factors, its unit-lower inverse, W and Y stored. Then TL_WBLOCKS
 * slots for the plain walk's blocks' multiprocessors + 1 (they are resident, waiting, while the A
 * part runs). */
constexpr int TL_REC = 13, TL_WBLOCKS = 1024;
/* VLA_CP_SEG_REV (development, session 18): apart_kernel's block x takes segment nseg - 1 - x % nseg,
 * to tell a segment's own cost from its block's place in the launch */
#ifdef VLA_CP_SEG_REV
#define TL_SEG(x, n) ((n) - 1 - (x))
#else
#define TL_SEG(x, n) (x)
#endif
#ifndef VLA_CUDA_EMU
/* the global timer, ns (development stamps) */
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif
#if !defined(VLA_CP_TIMELINE) || defined(VLA_CUDA_EMU) /* (no global timer in the emulator) */
template <int K> struct tl_scope {
    __device__ __forceinline__ tl_scope(const cp_params &) { pdl_enter(); }
};
#define TL_INV_DONE(P) ((void)0)
#define TL_PHASE(P, k) ((void)0)
#else
__device__ __forceinline__ unsigned tl_smid() {
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}
#define TL_PHASE(P, k)                                                                                                 \
    do {                                                                                                               \
        if ((P).tl && threadIdx.x == 0 && blockIdx.x < TL_BLOCKS) (P).tl[3 * TL_N + TL_REC * blockIdx.x + 5 + (k)] = gtime(); \
    } while (0)
#define TL_INV_DONE(P)                                                                                                 \
    do {                                                                                                               \
        if ((P).tl && threadIdx.x == 0 && blockIdx.x < TL_BLOCKS) (P).tl[3 * TL_N + TL_REC * blockIdx.x + 3] = gtime(); \
    } while (0)
template <int K> struct tl_scope { /* (P.tl read from the parameters at each end: nothing held in registers) */
    const cp_params &P;
    __device__ __forceinline__ tl_scope(const cp_params &p) : P(p) {
        const unsigned long long t = gtime();
        if (P.tl && threadIdx.x == 0) atomicMin(P.tl + K, t);
        pdl_enter();
        if (P.tl && threadIdx.x == 0) atomicMin(P.tl + TL_N + K, gtime());
        if (K == TL_APART && P.tl && threadIdx.x == 0 && blockIdx.x < TL_BLOCKS) {
            P.tl[3 * TL_N + TL_REC * blockIdx.x] = t;
            P.tl[3 * TL_N + TL_REC * blockIdx.x + 1] = gtime();
            P.tl[3 * TL_N + TL_REC * blockIdx.x + 4] = tl_smid() + 1;
        }
        if (K == TL_WALK && P.tl && threadIdx.x == 0 && blockIdx.x < TL_WBLOCKS)
            P.tl[3 * TL_N + TL_REC * TL_BLOCKS + blockIdx.x] = tl_smid() + 1;
    }
    __device__ __forceinline__ ~tl_scope() {
        if (P.tl && (threadIdx.x & 31) == 0) atomicMax(P.tl + 2 * TL_N + K, gtime());
        if (K == TL_APART && P.tl && (threadIdx.x & 31) == 0 && blockIdx.x < TL_BLOCKS)
            atomicMax(P.tl + 3 * TL_N + TL_REC * blockIdx.x + 2, gtime());
    }
};
#endif

constexpr int C = 64;   /* rows of a chunk block */
constexpr int GRAM_SUB = 4; /* chunks a gram_kernel block, at most (8: no faster, session 6 run6) */

/* L2 prefetch (session 22): output_kernel asks the L2 cache for its X_j and Y as it starts, so their
 * memory latency overlaps the forming of Pm and Q~ - Pm W (they were fetched only after it). A hint:
 * nothing waits for it and no value changes. H200, gated, same bits: (8,16,64) T = 2048 1.217 / 1.216
 * against 1.227 / 1.230 ms, T = 32768 18.10 / 18.10 against 18.32 / 18.23 (fat build, in the same call;
 * benchmarks/results/2026-12-01-h200-session22). The same kind of prefetch of the A part's next chunk,
 * of the next output block's inputs, and of the walk's P and Q some steps ahead was 0.5-5% slower
 * (l2-prefetch-variants.patch there). VLA_CP_OUT_PREFETCH=0 (development, compile time) turns it off. */
#ifndef VLA_CP_OUT_PREFETCH
#define VLA_CP_OUT_PREFETCH 1
#endif

/* n contiguous floats from src toward L2, by the calling thread alone: sm_90's bulk prefetch, which
 * wants both ends on 16 bytes (otherwise, and on older devices, nothing is asked) */
__device__ __forceinline__ void l2_bulk(const float *src, int n) {
#if !defined(VLA_CUDA_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (n > 0 && (((uintptr_t)src | (uintptr_t)n * 4u) & 15u) == 0u)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(n * 4) : "memory");
#else
    (void)src, (void)n;
#endif
}


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
 * Three barriers a block where session 10's blocked Cholesky and Z solve took about 16, and no
 * 64 x 64 G (apart_kernel's phases 4-6: 2.6k + 10.2k + 4.3k cycles at (1,4,32) T = 2048, session 10). U is
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
                 * 15 - jj shuffles: 2.19k against 1.69k cycles a panel, session 11 run 4) */
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

/* dst[t * ld + i] <- f(t, i) for t < R, i < COLS, R * COLS / NT entries a thread: every load is
 * issued before any store. (Written as one loop, each shared store waited for its global load in
 * turn, the compiler not knowing that the two never overlap: 16 memory latencies a chunk, most
 * of the 18.5k cycles that loading U and K took at dk = 64.) No barrier. */
template <int R, int COLS, typename F> __device__ __forceinline__ void stage(float *dst, int ld, F f) {
    constexpr int PER = R * COLS / NT;
    static_assert(PER * NT == R * COLS, "R x COLS must split over NT threads");
    float x[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int e = (int)threadIdx.x + NT * u, t = e / COLS, i = e - t * COLS;
        x[u] = f(t, i);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int e = (int)threadIdx.x + NT * u, t = e / COLS, i = e - t * COLS;
        dst[t * ld + i] = x[u];
    }
}

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

/* Loads rows ts .. ts+c-1 of one head of a [B, T, H, dk] tensor into dst [C][ld] (zero rows past
 * c, zero columns past dk), elu+1 applied when elu1. No barrier. */
/* dst[t * ld + i] <- src[t * stride + i] (elu+1 applied when elu1) for t < c, i < cols, zero
 * elsewhere in R x COLS, as stage() does: each thread keeps one column and steps rows by NT / COLS
 * from one base pointer (a pointer per load, as a generic stage() lambda gives, spilled registers
 * in apart_kernel). No barrier. */
template <int R, int COLS>
__device__ __forceinline__ void stage_rows(float *dst, int ld, const float *src, size_t stride, int c, int cols,
                                           bool elu1 = false) {
    static_assert(NT % COLS == 0 && R % (NT / COLS) == 0, "rows must split over NT threads");
    constexpr int PER = R * COLS / NT, RSTEP = NT / COLS;
    const int i = (int)threadIdx.x % COLS, t0 = (int)threadIdx.x / COLS;
    const float *p = src + (size_t)t0 * stride + i;
#if !VLA_CP_TC /* sm_75: one load at a time (batched, apart_kernel<32> spilled registers there) */
#pragma unroll 1
    for (int u = 0; u < PER; u++) {
        const bool in = t0 + RSTEP * u < c && i < cols;
        const float x = in ? p[(size_t)(RSTEP * u) * stride] : 0.0f;
        dst[(t0 + RSTEP * u) * ld + i] = elu1 && in ? elu1f(x) : x;
    }
#else
#if !defined(VLA_ASYNC_SCALAR) && !defined(VLA_STAGE_SCALAR) && !defined(VLA_CUDA_EMU) /* (the emulator: 4 bytes) */
    /* 16-byte loads and stores where the rows allow it (as async_rows, session 16), on 64 columns:
     * (8,16,64) 1.2-1.3% faster than with 4-byte loads; on 32 columns it made apart_kernel<32, 2,
     * true> spill 8 bytes and (1,4,32) T = 8192 and 32768 0.3-0.5% slower, so 4 bytes stay there.
     * VLA_STAGE_SCALAR (development): 4 bytes a load here always. */
    if (COLS >= 64 && (((unsigned)cols | (unsigned)stride | (unsigned)ld) & 3u) == 0u &&
        (((uintptr_t)src | (uintptr_t)dst) & 15u) == 0u) {
        constexpr int V = COLS / 4, PER4 = R * V / NT, RSTEP4 = NT / V;
        static_assert(COLS % 4 == 0 && NT % V == 0 && PER4 * NT == R * V, "rows must split over NT threads in fours");
        const int q = 4 * ((int)threadIdx.x % V), r0 = (int)threadIdx.x / V;
        const float4 *p4 = (const float4 *)(src + (size_t)r0 * stride + q);
        float4 x4[PER4];
#pragma unroll
        for (int u = 0; u < PER4; u++)
            x4[u] = r0 + RSTEP4 * u < c && q < cols ? p4[(size_t)(RSTEP4 * u) * (stride / 4)] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int u = 0; u < PER4; u++) {
            float4 y = x4[u];
            if (elu1 && r0 + RSTEP4 * u < c && q < cols) y = make_float4(elu1f(y.x), elu1f(y.y), elu1f(y.z), elu1f(y.w));
            *(float4 *)(dst + (r0 + RSTEP4 * u) * ld + q) = y;
        }
        return;
    }
#endif
    float x[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) x[u] = t0 + RSTEP * u < c && i < cols ? p[(size_t)(RSTEP * u) * stride] : 0.0f;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const bool in = t0 + RSTEP * u < c && i < cols;
        dst[(t0 + RSTEP * u) * ld + i] = elu1 && in ? elu1f(x[u]) : x[u];
    }
#endif
}

/* As stage_rows (no elu), but with cp.async on sm_80+: the copies go to shared memory without
 * passing through registers, so several tiles (and the work before their use) overlap one memory
 * latency. Before use: async_wait(), then a barrier. Elsewhere (sm_75, the emulator) it is
 * stage_rows, and async_wait() does nothing. */
template <int R, int COLS>
__device__ __forceinline__ void async_rows(float *dst, int ld, const float *src, size_t stride, int c, int cols) {
#if VLA_CP_TC && !defined(VLA_CUDA_EMU)
#ifndef VLA_ASYNC_SCALAR
    /* 16 bytes a copy where the rows allow it (cols, stride, ld multiples of 4, both ends 16-byte
     * aligned): four columns a thread, a quarter of the copy instructions (session 16). A group of
     * four columns is then wholly inside cols or wholly outside (zero filled), as below.
     * VLA_ASYNC_SCALAR (development): 4 bytes a copy always. */
    if ((((unsigned)cols | (unsigned)stride | (unsigned)ld) & 3u) == 0u && (((uintptr_t)src | (uintptr_t)dst) & 15u) == 0u) {
        constexpr int V = COLS / 4, PER4 = R * V / NT, RSTEP4 = NT / V;
        static_assert(COLS % 4 == 0 && NT % V == 0 && PER4 * NT == R * V, "rows must split over NT threads in fours");
        const int q = 4 * ((int)threadIdx.x % V), t0 = (int)threadIdx.x / V;
        const float *p = src + (size_t)t0 * stride + q;
#pragma unroll
        for (int u = 0; u < PER4; u++) {
            const bool in = t0 + RSTEP4 * u < c && q < cols;
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + (t0 + RSTEP4 * u) * ld + q);
            const float *ga = in ? p + (size_t)(RSTEP4 * u) * stride : src; /* 0 bytes read: zero fill */
            asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(ga), "r"(in ? 16 : 0) : "memory");
        }
        return;
    }
#endif
    constexpr int PER = R * COLS / NT, RSTEP = NT / COLS;
    static_assert(NT % COLS == 0 && PER * NT == R * COLS, "rows must split over NT threads");
    const int i = (int)threadIdx.x % COLS, t0 = (int)threadIdx.x / COLS;
    const float *p = src + (size_t)t0 * stride + i;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const bool in = t0 + RSTEP * u < c && i < cols;
        const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + (t0 + RSTEP * u) * ld + i);
        const float *ga = in ? p + (size_t)(RSTEP * u) * stride : src; /* 0 bytes read: zero fill */
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(ga), "r"(in ? 4 : 0) : "memory");
    }
#else
    stage_rows<R, COLS>(dst, ld, src, stride, c, cols);
#endif
}

__device__ __forceinline__ void async_wait() {
#if VLA_CP_TC && !defined(VLA_CUDA_EMU)
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

template <int DK>
__device__ __forceinline__ void load_rows(const float *src, const vlacu_args &a, int b, int h, int ts, int c, bool elu1,
                                          float *dst, int ld) {
    stage_rows<C, DK>(dst, ld, src + (((size_t)b * a.T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk, elu1);
}

/* Row r of Y[C][ld] (DK used columns) <- scale * x / max(||x||, eps), x = pre(r) * row r of X (Y may
 * be X), and second(r, i, y) for each new entry y (a copy elsewhere, or nothing). A warp takes rows warp, warp + 8, .. all at
 * once: their loads, the 8 sums' shuffles and the divisions are independent, so they overlap,
 * where a row at a time was a chain of 8 x (load, 5 shuffles, sqrt, division): about 3k cycles a
 * call at dk = 32 (apart_kernel's phase 9 was nothing else, session 9's profiles). The same sums
 * in the same order as that loop, so the same bits. No barrier. */
template <int DK, typename PRE, typename F>
__device__ __forceinline__ void norm_rows_from(const float *X, float *Y, int ld, float eps, float scale, PRE pre, F second) {
    constexpr int RW = C / (NT / 32), PL = DK / 32; /* rows a warp; entries a lane a row */
    static_assert(PL * 32 == DK && RW * (NT / 32) == C, "DK a multiple of 32, C of the warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float x[RW][PL], ss[RW];
#pragma unroll
    for (int k = 0; k < RW; k++) {
        const float m = pre(warp + 8 * k);
#pragma unroll
        for (int p = 0; p < PL; p++) x[k][p] = X[(warp + 8 * k) * ld + lane + 32 * p] * m;
    }
#pragma unroll
    for (int k = 0; k < RW; k++) {
        ss[k] = 0.0f;
#pragma unroll
        for (int p = 0; p < PL; p++) ss[k] += x[k][p] * x[k][p];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < RW; k++) ss[k] += __shfl_xor_sync(0xffffffffu, ss[k], o); /* warp_sum's order */
#pragma unroll
    for (int k = 0; k < RW; k++) {
        const int r = warp + 8 * k;
        const float mul = scale / fmaxf(sqrtf(ss[k]), eps);
#pragma unroll
        for (int p = 0; p < PL; p++) {
            const float y = x[k][p] * mul;
            Y[r * ld + lane + 32 * p] = y;
            second(r, lane + 32 * p, y);
        }
    }
}
/* in place, no prescale (x 1.0f: the same bits as before norm_rows_from) */
template <int DK, typename F> __device__ __forceinline__ void norm_rows(float *X, int ld, float eps, float scale, F second) {
    norm_rows_from<DK>(X, X, ld, eps, scale, [](int) { return 1.0f; }, second);
}
template <int DK> __device__ __forceinline__ void norm_rows(float *X, int ld, float eps, float scale) {
    norm_rows<DK>(X, ld, eps, scale, [](int, int, float) {});
}

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
 * made apart_kernel<64, 2> spill 20 bytes, session 7.) */
template <int DK>
__device__ __forceinline__ void issue_uk(const vlacu_args &a, int b, int h, int ts, int c, float *U, float *K, int ld) {
    const size_t off = (((size_t)b * a.T + ts) * a.H + h) * a.dk, stride = (size_t)a.H * a.dk;
    async_rows<C, DK>(K, ld, a.k + off, stride, c, a.dk);
    if (a.u) async_rows<C, DK>(U, ld, a.u + off, stride, c, a.dk);
}
template <int DK> __device__ void finish_uk(const vlacu_args &a, int c, float *U, float *K, int ld) {
    async_wait();
    if (a.elu1) { /* after a barrier: async_rows' 16-byte copies give a thread other entries than this loop's
                   * (session 16; it had relied on the 4-byte mapping, and racecheck caught the change) */
        __syncthreads();
        for (int e = threadIdx.x; e < C * DK; e += NT) {
            const int t = e / DK, i = e - t * DK;
            if (t < c && i < a.dk) K[t * ld + i] = elu1f(K[t * ld + i]);
        }
    }
    __syncthreads();
    norm_uk<DK>(a, U, K, ld);
}

/* Development: clock64() at phase boundaries of block P.prof_block's thread 0 (VLA_CUDA_KERNEL_TIMES). */
#ifdef VLA_CUDA_EMU
#define PROF(n) ((void)0)
#define PROF_NS(n) ((void)0)
#else
#define PROF(n)                                                                                                        \
    do {                                                                                                               \
        if (P.prof && blockIdx.x == (unsigned)P.prof_block && threadIdx.x == 0) P.prof[n] = clock64();                 \
    } while (0)
/* the global timer (ns) beside it, for the clock rate the cycles were counted at */
#define PROF_NS(n)                                                                                                     \
    do {                                                                                                               \
        if (P.prof && blockIdx.x == (unsigned)P.prof_block && threadIdx.x == 0) P.prof[n] = (long long)gtime();       \
    } while (0)
#endif

__device__ __forceinline__ bool head_skipped(const cp_params &P, int bh) { return P.flags && P.flags[bh]; }

/* The walk's end, by its first column block: A_out <- A after the last token (VLA; every A part has
 * run, in an earlier launch, so A_in may be A_out). */
__device__ __forceinline__ void a_out_from_aend(const cp_params &P, int bh, int nthreads = NT) {
    const vlacu_args &a = P.a;
    if (a.mech != VLACU_VLA || !a.A_out) return;
    const size_t n = (size_t)a.dk * a.dk;
    for (size_t e = threadIdx.x; e < n; e += (size_t)nthreads) a.A_out[(size_t)bh * n + e] = P.Aend[(size_t)bh * n + e];
}

/* ---- cp_gram: the Gram sum U^T U of part p of segment g's chunks (g < nseg - 1) into Gp. A
 * segment's chunks are split over gparts blocks (at most GRAM_SUB chunks each): each chunk is a
 * row load, a normalisation and a 64-deep product behind a barrier, several microseconds of
 * latency (one block a segment: 70 us for segments of 8 chunks at (1,4,32) T = 32768); the next
 * chunk's rows are in flight (two buffers) while one is normalised and multiplied. ---- */
/* gram_kernel<64> capped for four blocks a multiprocessor (64 registers, 4 bytes spill; 80 and 8 bytes
 * without the cap held three). Session 23: the kernel 47-48 us against 48-49 serialized at (8,16,64)
 * T = 2048 (runs 1-2), the forward 1.0799 / 1.0727 against 1.0805 / 1.0803 ms gated (run 1). The cap
 * (VLA_CP_GRAM_MINB, development) is the register budget alone: 34 KiB of shared memory a block holds six. */
#ifndef VLA_CP_GRAM_MINB
#define VLA_CP_GRAM_MINB 4
#endif
template <int DK> __global__ void __launch_bounds__(NT, DK == 64 ? VLA_CP_GRAM_MINB : 1) gram_kernel(const cp_params P) {
    tl_scope<TL_GRAM> tl_(P);
    VLACU_DYNSMEM(smem);
    const vlacu_args &a = P.a;
    const int per = P.nseg - 1, p = blockIdx.x % P.gparts, g = blockIdx.x / P.gparts % per;
    const int bh = blockIdx.x / P.gparts / per;
    if (head_skipped(P, bh)) return;
    const int sub = (P.seg + P.gparts - 1) / P.gparts;
    const int b = bh / a.H, h = bh % a.H, j0 = g * P.seg + p * sub;
    const int j1 = imin(imin(j0 + sub, (g + 1) * P.seg), P.nch);
    const int ld = DK + LD_PAD;
    float *Ub = (float *)smem; /* [2][C][ld]: chunk j's rows in Ub[(j - j0) & 1] */
    const float *src = a.u ? a.u : a.k;
    const bool elu1 = !a.u && a.elu1;
    const size_t stride = (size_t)a.H * a.dk;
    /* raw rows of chunk jj (u, or k) in flight to buffer s (cp.async on sm_80+) */
    auto issue = [&](int jj, int s) {
        const int ts = jj * P.C;
        async_rows<C, DK>(Ub + s * C * ld, ld, src + (((size_t)b * a.T + ts) * a.H + h) * a.dk, stride,
                          imin(P.C, a.T - ts), a.dk);
    };
    typedef blk<DK, DK> tl;
    float acc[tl::NE];
    zerob<DK, DK>(acc);
    if (j0 < j1) issue(j0, 0);
    for (int j = j0; j < j1; j++) {
        const int s = (j - j0) & 1, c = imin(P.C, a.T - j * P.C);
        float *U = Ub + s * C * ld;
        async_wait();
        __syncthreads(); /* chunk j's rows have landed; the other buffer's last product is done */
        if (j + 1 < j1) issue(j + 1, s ^ 1); /* in flight during this chunk's normalisation and product */
        if (elu1) /* (the rows are everyone's since the barrier above) */
            for (int e = threadIdx.x; e < C * DK; e += NT) {
                const int t = e / DK, i = e - t * DK;
                if (t < c && i < a.dk) U[t * ld + i] = elu1f(U[t * ld + i]);
            }
        __syncthreads();
        norm_rows<DK>(U, ld, (float)a.eps, (float)a.u_scale); /* U = s_u normalize(.) */
        __syncthreads();
        mmb<DK, DK, C, true, false, aprec<1>>(U, ld, U, ld, acc);
    }
    float *dst = P.Gp + (((size_t)bh * per + g) * P.gparts + p) * DK * DK; /* zero if the part is empty */
#pragma unroll
    for (int i = 0; i < tl::NE; i++) dst[tl::row(i) * DK + tl::col(i)] = acc[i];
}

/* ---- cp_prefix: Md slot g <- M_0 + the Gram parts of segments 0..g-1 (g >= 1), a scan over the
 * nq parts: a block takes NT / R entries of one head, R (prefix_runs: 1 up to 16 parts, at most
 * 8) threads an entry, each a run of L = nq / R parts (all loaded at once when L <= 16); the
 * runs' totals meet in shared memory, then each thread writes its run's prefix. (One thread an
 * entry walking every part took nq / 16 dependent memory round trips.) ---- */
__host__ __device__ inline int prefix_runs(int nq) {
    int r = 1;
    while (r < 8 && (nq + r - 1) / r > 16) r *= 2;
    return r;
}

/* Entry (i, j) of M_0 = A_0^{-1}: A_in^{-1}, or lambda0 I as the inverse of the float A_0 = I / lambda0
 * (the identity on padded coordinates). */
__device__ __forceinline__ double m0_entry(const cp_params &P, int bh, int i, int j) {
    const int dk = P.a.dk;
    if (i >= dk || j >= dk) return i == j ? 1.0 : 0.0;
    if (P.Minv) return P.Minv[(size_t)bh * dk * dk + i * dk + j];
    return i == j ? 1.0 / (double)(float)(1.0 / P.a.lambda0) : 0.0;
}

template <int DK> __global__ void __launch_bounds__(NT) prefix_kernel(const cp_params P) {
    tl_scope<TL_PREFIX> tl_(P);
    __shared__ double tot[NT];
    const int nq = (P.nseg - 1) * P.gparts; /* parts in segment order */
    const int R = prefix_runs(nq), E = NT / R, per = DK * DK / E;
    const int bh = blockIdx.x / per, run = threadIdx.x / E, e = (blockIdx.x % per) * E + threadIdx.x % E;
    if (head_skipped(P, bh)) return;
    const int i = e / DK, jj = e - i * DK;
    const double m0 = m0_entry(P, bh, i, jj);
    double *s = P.Md + (size_t)bh * P.nseg * DK * DK + e;
    const float *gp = P.Gp + (size_t)bh * (P.nseg - 1) * P.gparts * DK * DK + e;
    const int L = (nq + R - 1) / R, q0 = imin(nq, run * L), q1 = imin(nq, q0 + L);
    constexpr int U = 16;
    double x[U], sum = 0.0;
    if (R > 1) {
        for (int b = q0; b < q1; b += U) { /* the run's total (its first U parts stay in x) */
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = b + u < q1 ? gp[(size_t)(b + u) * DK * DK] : 0.0;
#pragma unroll
            for (int u = 0; u < U; u++) sum += x[u];
        }
        tot[threadIdx.x] = sum;
        __syncthreads();
    }
    double acc = m0;
    for (int r = 0; r < run; r++) acc += tot[r * E + threadIdx.x % E];
    for (int b = q0; b < q1; b += U) {
        if (R == 1 || L > U) /* (re)load: the parts are in L2 */
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = b + u < q1 ? gp[(size_t)(b + u) * DK * DK] : 0.0;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (b + u < q1) {
                acc += x[u];
                if ((b + u + 1) % P.gparts == 0) s[(size_t)((b + u + 1) / P.gparts) * DK * DK] = acc;
            }
    }
}

/* At dk = 64 (apart_kernel<64, 2>) P and Q are formed one after the other, one accumulator live:
 * the two at once (one load of Al^T's fragments for both) made it spill 40 bytes, this 4. H200,
 * gated, same bits: (8,16,64) T = 2048 1.224 against 1.250 ms, T = 32768 18.31 against 18.69 ms
 * (benchmarks/results/2026-12-01-h200-session21, run 1; run 2, the fat build: 1.229 against 1.246,
 * 18.26 against 18.71). VLA_CP_PQ_APART=0 (development, compile time) pairs them again. */
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

/* Pm = tril(Q Al^T) (C x C, ld C + LD_PAD) from Q and Al (C x DK, ld DK + LD_PAD): the chunk's
 * causal scores, the output kernels' first product. No barrier. */
template <int DK> __device__ __forceinline__ void causal_scores(const float *Q, const float *Al, float *Pm) {
    typedef blk<C, C> tl;
    constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    float x[tl::NE];
    zerob<C, C>(x);
    mmb<C, C, DK, false, true>(Q, ld, Al, ld, x);
#pragma unroll
    for (int i = 0; i < tl::NE; i++) Pm[tl::row(i) * ldc + tl::col(i)] = tl::col(i) <= tl::row(i) ? x[i] : 0.0f;
}

/* ---- cp_apart (VLA): a segment's chunks in turn, each its A part (VLA-MATH 2.3) and S factors ----
 * apart_kernel's register cap: MINB blocks a multiprocessor. At dk = 32 two (128 registers) run a
 * chunk faster, three (80 registers, 61 KiB of shared memory each) more chunks at once: three when
 * the launch has more blocks than two a multiprocessor hold (chunkpar_apart_minb; on sm_80+: a
 * T4's 64 KiB holds one dk = 32 block anyway). At dk = 64 two (106 KiB each). */
template <int DK> struct apart_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    static constexpr size_t mats = (size_t)3 * C * ld + (size_t)C * ldc; /* U, K, UA(->Z), G */
    static constexpr size_t region1 = mats * 4 > 4 * DK * 8 ? mats * 4 : 4 * DK * 8; /* or the inversion's buffers */
    static constexpr size_t bytes = region1 + ((size_t)DK * ld + (size_t)C * ld + C) * 4; /* + A0, Al, rdiag */
    static constexpr size_t qbytes = (size_t)C * ld * 4; /* P.outfold: Q~ after them */
};

/* The Gram fold (P.fold) is compiled for dk = 32 only: at dk = 64 its 32 doubles a thread made
 * apart_kernel<64, 2> spill 24 bytes, and without it (8,16,64) ran 0.5-1.3% faster (session 6 run6). */
template <int DK> __host__ __device__ constexpr bool fold_here() { return DK == 32; }
#ifndef VLA_CP_FOLD_PARTS
#define VLA_CP_FOLD_PARTS 8 /* the fold's parts a round trip (development; 16 and 32 no faster, session 18) */
#endif

/* FOLD (dk = 32): the output's first half here too (P.outfold, a kernel of its own: in
 * the same instance it made apart_kernel<32, 2> 10% longer, and (1,4,32) T = 2048, which does not
 * use it, about 1% slower in session 12's A/B runs) */
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
             * thread took four 4-byte loads (session 18). The last segment's fold at (1,4,32) T = 8192
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
                             * for the registers the two forms shared, session 23 run 1) */
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
 * apart blocks fill the device either way (benchmarks/results/2026-11-30-h200-session6). ---- */
template <int DK> struct sfac_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    static constexpr size_t bytes = ((size_t)3 * C * ld + (size_t)C * ldc + (size_t)16 * (48 + LD_PAD)) * 4;
};

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
 * against DeltaNet's 0.79, session 6.) ---- */
template <int DK> struct linmap_smem {
    static constexpr int ld = DK + LD_PAD;
    static constexpr size_t bytes = (size_t)2 * C * ld * 4; /* phi(K), V's columns */
};

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

/* [BH x DK dv / NT]: one thread per entry (r, c) of X = S (DK x dv): X_j -> Xst, X += Qm_j; S_in
 * and S_out. The entries are independent: no shared memory, no barrier; SW loads in flight a
 * thread. */
__global__ void __launch_bounds__(NT) sumwalk_kernel(const cp_params P, int DK) {
    tl_scope<TL_SUMWALK> tl_(P);
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, per = DK * dv, nb = (per + NT - 1) / NT;
    const int bh = blockIdx.x / nb, e = (blockIdx.x % nb) * NT + (int)threadIdx.x;
    if (e >= per) return;
    const int r = e / dv, cc = e - r * dv;
    float x = a.S_in && r < dk ? a.S_in[(size_t)bh * dk * dv + (size_t)r * dv + cc] : 0.0f;
    const size_t step = (size_t)per, base = (size_t)bh * P.nch * step + e;
    const float *qg = P.Qm + base;
    float *xg = P.Xst + base;
    constexpr int SW = 8;
    int j = 0;
    for (; j + SW <= P.nch; j += SW) {
        float q[SW];
#pragma unroll
        for (int u = 0; u < SW; u++) q[u] = qg[(size_t)(j + u) * step];
#pragma unroll
        for (int u = 0; u < SW; u++) {
            xg[(size_t)(j + u) * step] = x;
            x += q[u];
        }
    }
    for (; j < P.nch; j++) {
        xg[(size_t)j * step] = x;
        x += qg[(size_t)j * step];
    }
    if (a.S_out && r < dk) a.S_out[(size_t)bh * dk * dv + (size_t)r * dv + cc] = x;
}

/* ---- cp_walk: the S walk over chunks on BV value columns: X_j -> Xst, X_{j+1} = P_j X_j + Q_j.
 * The only sequential part. With few heads and many chunks it is split into segments of wlen
 * chunks (VLA-MATH 2.4, on the chunks' affine maps), three launches of this kernel:
 *   W_MAP    per (head, segment, column block): the segment's map [P_seg | Q_seg] (DK x (DK+dv)),
 *            walking from [I | 0]: column blocks < DK/BV carry the identity columns (Q = 0),
 *            the rest the value columns (from X = 0)
 *   W_SCAN   per (head, value block): X over the segments' maps from S_in; X at each segment
 *            start -> Sst; S_out, A_out
 *   W_LOCAL  per (head, value block, segment): the plain walk over the segment's chunks from its
 *            start state in Sst, X_j -> Xst
 * so a head takes 2 wlen + nch / wlen steps instead of nch. W_PLAIN is the whole walk. ---- */
enum { W_PLAIN = 0, W_MAP = 1, W_SCAN = 2, W_LOCAL = 3 };

/* VLA_WALK_DIAG (development, timing only, session 25; results wrong): walk_kernel leaves out, by
 * bit, 1 the fetches of P_j and Q_j after the first steps, 2 the stores of X_j, 4 the product */
#ifndef VLA_WALK_DIAG
#define VLA_WALK_DIAG 0
#endif
/* VLA_WALK_VEC (session 25): the plain walk's loads of P_j, Q_j and stores of X_j by 16 bytes at
 * dk = 64 on 32 columns (walk_kernel<64, 32, W_PLAIN>, see WVEC there); 0 (development): 4 bytes,
 * as before. */
#ifndef VLA_WALK_VEC
#define VLA_WALK_VEC 1
#endif
template <int DK, int BV> struct walk_smem {
    static constexpr int ld = DK + LD_PAD, ldv = BV + LD_PAD;
    /* two stages of [P | Q] tiles and of X */
    static constexpr size_t bytes = (size_t)2 * ((size_t)DK * ld + 2 * (size_t)DK * ldv) * 4;
};

/* MODE is a template argument so that W_PLAIN compiles to the plain walk with no test of the mode
 * (with a runtime mode, one profile at (1,4,32) T = 2048 counted 50.8k cycles for the 32 steps of
 * a block, against 34.6k before). */
template <int DK, int BV, int MODE> __global__ void __launch_bounds__(NT, 2) walk_kernel(const cp_params P) {
    tl_scope<MODE == W_PLAIN ? TL_WALK : MODE == W_MAP ? TL_WMAP : MODE == W_SCAN ? TL_WSCAN : TL_WLOCAL> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef walk_smem<DK, BV> S;
    constexpr int ld = S::ld, ldv = S::ldv, mode = MODE;
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + BV - 1) / BV;
    const int ncb = mode == W_MAP ? DK / BV + nvb : nvb; /* column blocks */
    const int nsg = mode == W_MAP || mode == W_LOCAL ? P.wnseg : 1;
    const int g = blockIdx.x % nsg, cb = (blockIdx.x / nsg) % ncb, bh = blockIdx.x / nsg / ncb;
    if (head_skipped(P, bh)) return;
    const bool pblock = mode == W_MAP && cb < DK / BV; /* identity columns v0.. of P_seg */
    const int v0 = (pblock ? cb : mode == W_MAP ? cb - DK / BV : cb) * BV, nv = pblock ? BV : imin(BV, dv - v0);
    /* the steps: chunks, a segment's chunks, or the segments */
    const int j0 = mode == W_MAP || mode == W_LOCAL ? g * P.wlen : 0;
    const int j1 = mode == W_SCAN ? P.wnseg : mode == W_PLAIN ? P.nch : imin(j0 + P.wlen, P.nch);
    const int segld = DK + dv; /* row stride of a segment map */
    constexpr int stage = DK * ld + 2 * DK * ldv;
    float *const base = (float *)smem;
#define PB(s) (base + (s) * stage)
#define QB(s) (base + (s) * stage + DK * ld)
#define XB(s) (base + (s) * stage + DK * ld + DK * ldv)
    typedef blk<DK, BV> tx; /* X, Q [DK][BV] */
    constexpr int NP = DK * DK / NT, NQ = DK * BV / NT;
    /* P and Q of the next AH steps in registers, by step mod AH. Two for the plain walk at dk = 64
     * ((8,16,64): 0.7% faster at T = 2048 and 32768, session 12 run 1); one elsewhere (at dk = 32
     * two were 3-4% slower at T = 8192 and 131072, and W_MAP at dk = 64 spilled 8 bytes) */
    constexpr int AH = DK == 64 && MODE == W_PLAIN ? 2 : 1;
    float rp[AH][NP], rq[AH][NQ];

    /* WVEC (fetch4, stash4, put_x4; session 25): each thread takes four consecutive entries e .. e + 3
     * of a row of P, Q and X_j, moved by one 16-byte load or store where dv is a multiple of 4 and the
     * arrays lie on 16 bytes (vec), else by four (the mapping is the same either way, so the
     * registers are too); X_j is stored from XB(s) in whole rows, where the accumulator layout stored
     * half a 32-byte sector a lane. The same values land in the same places: the same bits (44 of 44
     * files, session 25 run 3). At (8,16,64) the plain walk's steps took 3.7-3.8k cycles a block
     * instead of 4.5-4.6k (T = 2048, 32 steps: 118-123k against 144-148k), and without X_j's stores
     * 3.4k (VLA_WALK_DIAG=2, run 2): the accumulator-layout stores were a quarter of a step. Forward, gated, rounds 1 / 2: (8,16,64)
     * T = 2048 1.0404 / 1.0397 ms against 1.0566 / 1.0586, T = 32768 15.28 / 15.29 against 15.54 /
     * 15.54. The same form in walk_kernel<32, 32> (the segmented walk's first and last launches) made
     * (1,4,32) T = 8192 and 32768 2-3% slower (0.1128 / 0.1123 against 0.1092 / 0.1094 ms) and
     * T = 131072 2% faster: so the plain walk at dk = 64 on 32 columns alone, where it was measured. */
    constexpr bool WVEC = VLA_WALK_VEC && DK == 64 && BV == 32 && MODE == W_PLAIN;
    static_assert(!WVEC || (NP % 4 == 0 && NQ % 4 == 0), "four entries a thread");
    const bool vec = (dv & 3) == 0 && (((uintptr_t)P.Pm | (uintptr_t)P.Qm | (uintptr_t)P.Xst) & 15u) == 0u;
    auto ld4 = [&](const float *src, int n) { /* src[0..3], zero past n (n >= 4: all) */
        vf4 x;
        if (vec && n >= 4) return *reinterpret_cast<const vf4 *>(src);
        x.x = n > 0 ? src[0] : 0.0f, x.y = n > 1 ? src[1] : 0.0f, x.z = n > 2 ? src[2] : 0.0f, x.w = n > 3 ? src[3] : 0.0f;
        return x;
    };
    auto fetch4 = [&](int jj, int u) {
        const float *pg = P.Pm + ((size_t)bh * P.nch + jj) * DK * DK, *qg = P.Qm + ((size_t)bh * P.nch + jj) * DK * dv + v0;
#pragma unroll
        for (int r = 0; r < NP / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / DK, k = e - i * DK;
            const vf4 x = ld4(pg + (size_t)i * DK + k, 4);
            rp[u][4 * r] = x.x, rp[u][4 * r + 1] = x.y, rp[u][4 * r + 2] = x.z, rp[u][4 * r + 3] = x.w;
        }
#pragma unroll
        for (int r = 0; r < NQ / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / BV, cc = e - i * BV;
            const vf4 x = ld4(qg + (size_t)i * dv + cc, nv - cc);
            rq[u][4 * r] = x.x, rq[u][4 * r + 1] = x.y, rq[u][4 * r + 2] = x.z, rq[u][4 * r + 3] = x.w;
        }
    };
    auto stash4 = [&](int s, int u) {
#pragma unroll
        for (int r = 0; r < NP / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / DK, k = e - i * DK;
            vf4 x;
            x.x = rp[u][4 * r], x.y = rp[u][4 * r + 1], x.z = rp[u][4 * r + 2], x.w = rp[u][4 * r + 3];
            *reinterpret_cast<vf4 *>(PB(s) + i * ld + k) = x;
        }
#pragma unroll
        for (int r = 0; r < NQ / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / BV, cc = e - i * BV;
            vf4 x;
            x.x = rq[u][4 * r], x.y = rq[u][4 * r + 1], x.z = rq[u][4 * r + 2], x.w = rq[u][4 * r + 3];
            *reinterpret_cast<vf4 *>(QB(s) + i * ldv + cc) = x;
        }
    };
    /* X_j (in XB(s), written before the last barrier) to xst, whole rows of BV: columns < nv */
    auto put_x4 = [&](float *xst, int s) {
        for (int e4 = (int)threadIdx.x; e4 < DK * BV / 4; e4 += NT) {
            const int i = 4 * e4 / BV, cc = 4 * e4 - i * BV;
            const float *x = XB(s) + i * ldv + cc;
            float *dst = xst + (size_t)i * dv + cc;
            if (vec && cc < nv) *reinterpret_cast<vf4 *>(dst) = *reinterpret_cast<const vf4 *>(x);
            else if (!vec)
                for (int q = 0; q < 4 && cc + q < nv; q++) dst[q] = x[q];
        }
    };
    /* registers slot u <- step jj's P and Q columns v0.. (columns < nv; Q = 0 for identity columns) */
    auto fetch = [&](int jj, int u) {
        if constexpr (WVEC) {
            fetch4(jj, u);
        } else {
            if (mode == W_SCAN) { /* a segment map [P_seg | Q_seg], rows of DK + dv */
                const float *pg = P.Seg + ((size_t)bh * P.wnseg + jj) * DK * segld, *qg = pg + DK + v0;
#pragma unroll
                for (int r = 0; r < NP; r++) {
                    const int e = threadIdx.x + NT * r, i = e / DK, k = e - i * DK;
                    rp[u][r] = pg[(size_t)i * segld + k];
                }
#pragma unroll
                for (int r = 0; r < NQ; r++) {
                    const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                    rq[u][r] = cc < nv ? qg[(size_t)i * segld + cc] : 0.0f;
                }
                return;
            }
            const float *pg = P.Pm + ((size_t)bh * P.nch + jj) * DK * DK;
            const float *qg = P.Qm + ((size_t)bh * P.nch + jj) * DK * dv + v0;
#pragma unroll
            for (int r = 0; r < NP; r++) rp[u][r] = pg[threadIdx.x + NT * r];
#pragma unroll
            for (int r = 0; r < NQ; r++) {
                const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                rq[u][r] = !pblock && cc < nv ? qg[(size_t)i * dv + cc] : 0.0f;
            }
        }
    };
    auto stash = [&](int s, int u) {
        if constexpr (WVEC) {
            stash4(s, u);
        } else {
#pragma unroll
            for (int r = 0; r < NP; r++) {
                const int e = threadIdx.x + NT * r, i = e / DK, k = e - i * DK;
                PB(s)[i * ld + k] = rp[u][r];
            }
#pragma unroll
            for (int r = 0; r < NQ; r++) {
                const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                QB(s)[i * ldv + cc] = rq[u][r];
            }
        }
    };

    /* X at the first step: S_in^T columns v0.. (zero rows past dk, columns past nv), the segment's
     * start state, or [I | 0]; each thread its own entries */
    float xs[tx::NE];
#pragma unroll
    for (int i = 0; i < tx::NE; i++) {
            const int r = tx::row(i), cc = tx::col(i);
            float x0 = 0.0f;
            if (mode == W_PLAIN || mode == W_SCAN)
                x0 = (a.S_in && r < dk && cc < nv) ? a.S_in[(size_t)bh * dk * dv + (size_t)r * dv + v0 + cc] : 0.0f;
            else if (mode == W_LOCAL)
                x0 = cc < nv ? P.Sst[((size_t)bh * P.wnseg + g) * DK * dv + (size_t)r * dv + v0 + cc] : 0.0f;
            else if (pblock)
                x0 = r == v0 + cc ? 1.0f : 0.0f;
            xs[i] = x0;
            XB(0)[r * ldv + cc] = x0;
        }
    /* step j0 stashed; steps j0 + 1 .. j0 + AH - 1 in registers (slot (j - j0) mod AH) */
    if (j0 < j1) {
        fetch(j0, 0);
        stash(0, 0);
    }
#pragma unroll
    for (int u = 1; u < AH; u++)
        if (j0 + u < j1) fetch(j0 + u, u);
    __syncthreads();
    PROF(12);
    /* step j (u = (j - j0) mod AH, a constant in the unrolled body): P_{j+AH} into slot u, whose
     * step is stashed; the next step's P from slot (u + 1) mod AH to the other stage */
    for (int jb = j0; jb < j1; jb += AH) {
#pragma unroll
        for (int u = 0; u < AH; u++) {
            const int j = jb + u;
            if (j >= j1) break;
            const int s = (j - j0) & 1;
            if (j - j0 == 1) PROF(14);
            float *xst = mode == W_SCAN  ? P.Sst + ((size_t)bh * P.wnseg + j) * DK * dv + v0
                         : mode == W_MAP ? nullptr
                                         : P.Xst + ((size_t)bh * P.nch + j) * DK * dv + v0;
            if (xst && !(VLA_WALK_DIAG & 2)) {
                if constexpr (WVEC) {
                    put_x4(xst, s);
                } else {
#pragma unroll
                    for (int i = 0; i < tx::NE; i++)
                        if (tx::col(i) < nv) xst[(size_t)tx::row(i) * dv + tx::col(i)] = xs[i];
                }
            }
            if (j + AH < j1 && !(VLA_WALK_DIAG & 1)) fetch(j + AH, u);
            /* X <- P X + Q */
#pragma unroll
            for (int i = 0; i < tx::NE; i++) xs[i] = QB(s)[tx::row(i) * ldv + tx::col(i)];
            if (!(VLA_WALK_DIAG & 4)) mmb<DK, BV, DK, false, false>(PB(s), ld, XB(s), ldv, xs);
#pragma unroll
            for (int i = 0; i < tx::NE; i++) XB(s ^ 1)[tx::row(i) * ldv + tx::col(i)] = xs[i];
            if (j + 1 < j1) stash(s ^ 1, (u + 1) % AH);
            __syncthreads();
            if (j - j0 == 1) PROF(15);
        }
    }
    PROF(13);
    if (mode == W_MAP) {
        float *sg = P.Seg + ((size_t)bh * P.wnseg + g) * DK * segld + (pblock ? v0 : DK + v0);
#pragma unroll
        for (int i = 0; i < tx::NE; i++)
                if (tx::col(i) < nv) sg[(size_t)tx::row(i) * segld + tx::col(i)] = xs[i];
        return;
    }
    if (mode == W_LOCAL) return;
    if (a.S_out)
#pragma unroll
        for (int i = 0; i < tx::NE; i++) {
                const int r = tx::row(i), cc = tx::col(i);
                if (r < dk && cc < nv) a.S_out[(size_t)bh * dk * dv + (size_t)r * dv + v0 + cc] = xs[i];
            }
    if (v0 == 0) a_out_from_aend(P, bh);
#undef PB
#undef QB
#undef XB
}

/* The plain walk (W_PLAIN) at DK = 32 with 8 or 16 value columns a block, P's rows in registers
 * (session 8). walk_kernel stashes each P_j in shared memory and its product reads two shared
 * values for every multiply-add (RM = RN = 1 there): 226 instructions a warp a step, about 1000
 * cycles (Nsight Compute, session 5: mostly waits on those dependent loads). Here thread
 * (i, cq) keeps row i of P_j in 32 registers (the next chunk's row comes from global memory
 * into 32 more while this step computes) and reads its columns cq + 8 u of X from shared memory
 * as X^T rows, 16 bytes a load: a step is 8 vector loads of P, 8 of X a column, 32 FMA a column
 * and one barrier (X^T double-buffered). The sums are mm's (KS partial sums, the same order),
 * so X and the outputs are bitwise walk_kernel's. X_j to Xst; S_out, A_out at the end. */
template <int BV, int AHEAD> __global__ void __launch_bounds__(NT, AHEAD == 1 ? 2 : 1) walk_rows_kernel(const cp_params P) {
    tl_scope<TL_WALK> tl_(P);
    constexpr int DK = 32, TPR = NT / DK, NC = BV / TPR, KS = NC >= 4 ? 1 : 4 / NC, ldx = DK + 4;
    static_assert(AHEAD == 1 || AHEAD == 2, "P_{j+1} or P_{j+2} in flight");
    static_assert(NC * TPR == BV && (BV == 8 || BV == 16), "8 or 16 value columns, 1 or 2 a thread");
    __shared__ __align__(16) float xt[2][BV][ldx]; /* X^T: [column][row], by step parity */
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + BV - 1) / BV, nch = P.nch;
    const int cb = blockIdx.x % nvb, bh = blockIdx.x / nvb;
    if (head_skipped(P, bh)) return;
    const int v0 = cb * BV, nv = imin(BV, dv - v0);
    const int i = (int)threadIdx.x / TPR, cq = (int)threadIdx.x % TPR; /* row i, columns cq + TPR u */
    const float *pg = P.Pm + (size_t)bh * nch * DK * DK + i * DK;
    const float *qg = P.Qm + (size_t)bh * nch * DK * dv + (size_t)i * dv + v0;
    float *xg = P.Xst + (size_t)bh * nch * DK * dv + (size_t)i * dv + v0;
    float x[NC], qa[NC], qb[NC], qc[NC];
    vf4 pa[DK / 4], pb[DK / 4], pc[DK / 4]; /* pc: with AHEAD = 2 only */
    auto fetch = [&](int j, vf4 (&pd)[DK / 4], float (&qd)[NC]) { /* P_j's row i, Q_j's entries */
        const vf4 *p4 = reinterpret_cast<const vf4 *>(pg + (size_t)j * DK * DK);
#pragma unroll
        for (int k = 0; k < DK / 4; k++) pd[k] = p4[k];
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            qd[u] = c < nv ? qg[(size_t)j * DK * dv + c] : 0.0f;
        }
    };
#pragma unroll
    for (int u = 0; u < NC; u++) { /* X_0 = S_in^T (zero rows past dk, columns past nv) */
        const int c = cq + TPR * u;
        x[u] = (a.S_in && i < dk && c < nv) ? a.S_in[(size_t)bh * dk * dv + (size_t)i * dv + v0 + c] : 0.0f;
        xt[0][c][i] = x[u];
    }
    if (nch > 0) fetch(0, pa, qa);
    if (AHEAD == 2 && nch > 1) fetch(1, pb, qb);
    __syncthreads();
    PROF(12);
    /* X_j to Xst; X <- P_j X + Q_j, with P_{j+AHEAD}, Q_{j+AHEAD} in flight (into pd, qd) */
    auto step = [&](int j, const vf4 (&pc)[DK / 4], const float (&qc)[NC], vf4 (&pd)[DK / 4], float (&qd)[NC]) {
        const int s = j & 1;
#pragma unroll
        for (int u = 0; u < NC; u++)
            if (cq + TPR * u < nv) xg[(size_t)j * DK * dv + cq + TPR * u] = x[u];
        if (j + AHEAD < nch) fetch(j + AHEAD, pd, qd);
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            const vf4 *xv = reinterpret_cast<const vf4 *>(&xt[s][c][0]);
            float part[KS];
#pragma unroll
            for (int t = 0; t < KS; t++) part[t] = t == 0 ? qc[u] : 0.0f;
#pragma unroll
            for (int k = 0; k < DK / 4; k++) {
                const vf4 xk = xv[k], pk = pc[k];
                part[(4 * k + 0) % KS] = fmaf(pk.x, xk.x, part[(4 * k + 0) % KS]);
                part[(4 * k + 1) % KS] = fmaf(pk.y, xk.y, part[(4 * k + 1) % KS]);
                part[(4 * k + 2) % KS] = fmaf(pk.z, xk.z, part[(4 * k + 2) % KS]);
                part[(4 * k + 3) % KS] = fmaf(pk.w, xk.w, part[(4 * k + 3) % KS]);
            }
            float t0 = part[0];
#pragma unroll
            for (int t = 1; t < KS; t++) t0 += part[t];
            x[u] = t0;
            xt[s ^ 1][c][i] = t0;
        }
        __syncthreads();
    };
    int j = 0;
    if (AHEAD == 1) { /* buffers a, b in turn: step j computes from one while P_{j+1} lands in the other */
        for (; j + 1 < nch; j += 2) {
            step(j, pa, qa, pb, qb);
            if (j == 0) PROF(14);
            step(j + 1, pb, qb, pa, qa);
            if (j == 0) PROF(15);
        }
        if (j < nch) step(j, pa, qa, pb, qb);
    } else { /* a, b, c: P_{j+2} lands in the buffer step j - 1 used */
        for (; j + 2 < nch; j += 3) {
            step(j, pa, qa, pc, qc);
            if (j == 0) PROF(14);
            step(j + 1, pb, qb, pa, qa);
            if (j == 0) PROF(15);
            step(j + 2, pc, qc, pb, qb);
        }
        if (j < nch) step(j, pa, qa, pc, qc);
        if (j + 1 < nch) step(j + 1, pb, qb, pa, qa);
    }
    PROF(13);
    if (a.S_out)
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            if (i < dk && c < nv) a.S_out[(size_t)bh * dk * dv + (size_t)i * dv + v0 + c] = x[u];
        }
    if (v0 == 0) a_out_from_aend(P, bh);
}

/* The walk at DK = 32 with few heads (sm_80+, session 9), each entry of X by four threads: thread
 * (i, c, q) holds the quarter k = 8q .. 8q + 7 of row i of P_j (two 16-byte loads, AHEAD chunks
 * ahead: 7 for the plain walk since session 19, 2 for W_SCAN), reads the same quarter of X's column
 * c from shared memory (two 16-byte loads), makes 8 multiply-adds, and the four quarters meet by
 * two shuffles. Two columns a block (QW_COLS), so a head's walk spreads over dv / 2 blocks. A step
 * is about 25 instructions a warp where walk_rows_kernel's was 94 (one thread an entry: 32
 * multiply-adds behind 16 vector loads); 512 against 840 cycles a step at (1,4,32) T = 2048.
 * (Giving walk_rows_kernel a deeper prefetch, a ring of chunk slots in shared memory filled by
 * cp.async, made it slower, 930 cycles a step: the loads were not what it waited on.) The plain
 * walk only: the same form for the segmented walk's three launches read each P_j once a column pair
 * (16 times as often as walk_kernel's 32-column blocks) over 16 times as many blocks, and (1,4,32)
 * T = 32768 ran 17% slower. The sums: Q_j + the quarter's products in k order, then (q0 + q1) + (q2
 * + q3); the four threads get the same bits. X_j to Xst; S_out, A_out at the end. Its own block
 * size (QW_NT), launched as such. MODE W_SCAN (session 12): the segmented walk's middle launch, X
 * over the segment maps [P_seg | Q_seg] (rows of DK + dv: dv a multiple of 4 for the 16-byte
 * loads), X at each segment start to Sst. It has the plain walk's block count (the segments' maps
 * are its steps), where the first and last launches have a block per segment too and keep
 * walk_kernel. */
constexpr int QW_COLS = 2, QW_NT = 32 * QW_COLS * 4; /* 256: 32 rows x 2 columns x 4 quarters */
#ifndef VLA_WQ_DIAG
/* development (session 19; timing only, the results are wrong): the plain walk's steps without
 * 1 the X_j stores, 2 any loads, 3 the barrier (a warp's), 4 the second 16 bytes of P's quarter, 5 Q;
 * (session 24) 6 only the first half of the steps: what a walk of two chunks a step (X_{j+2} from X_j by
 * P_{j+1} P_j, formed off the chain) could save at most */
#define VLA_WQ_DIAG 0
#endif
#ifndef VLA_QW_AHEAD
#define VLA_QW_AHEAD 7 /* the plain walk's steps of P in flight (run(); development: other depths) */
#endif
#ifndef VLA_QW_SCAN_AHEAD
#define VLA_QW_SCAN_AHEAD 2 /* the same for the scan over segment maps (development: other depths; 3, 5
                             * and 7 were no faster at (1,4,32) T = 8192 to 131072, session 19 run 12) */
#endif
template <int AHEAD, int MODE> __global__ void __launch_bounds__(QW_NT, 2) walk_quad_kernel(const cp_params P) {
    tl_scope<MODE == W_SCAN ? TL_WSCAN : TL_WALK> tl_(P);
    static_assert(MODE == W_PLAIN || MODE == W_SCAN, "the plain walk or the scan over segment maps");
    constexpr int DK = 32, ldx = DK + 4;
    static_assert(AHEAD >= 1 && AHEAD <= 7, "P_{j+1} .. P_{j+AHEAD} in flight");
    __shared__ __align__(16) float xt[2][QW_COLS][ldx]; /* X^T: [column][row], by step parity */
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + QW_COLS - 1) / QW_COLS;
    const int nch = MODE == W_SCAN ? P.wnseg : P.nch; /* the steps */
    /* W_SCAN: step j's map [P_seg | Q_seg], rows of DK + dv */
    const size_t pstride = (size_t)DK * (DK + dv);
    const int pld = DK + dv;
    float *const xbase = MODE == W_SCAN ? P.Sst : P.Xst;
    const int cb = blockIdx.x % nvb, bh = blockIdx.x / nvb;
    if (head_skipped(P, bh)) return;
    const int q = (int)threadIdx.x & 3, c = ((int)threadIdx.x >> 2) & 1, i = (int)threadIdx.x >> 3;
    const int col = cb * QW_COLS + c; /* the value column */
    const bool live = col < dv;
    vf4 pb[AHEAD + 1][2];
    float qb[AHEAD + 1];
    auto fetch = [&](int j, vf4 (&pd)[2], float &qd) { /* step j's P row i (quarter q) and Q entry */
        if constexpr (MODE == W_PLAIN) { /* (written as before session 12: the same code) */
            const vf4 *p4 = reinterpret_cast<const vf4 *>(P.Pm + ((size_t)bh * nch + j) * DK * DK + i * DK + 8 * q);
            pd[0] = p4[0], pd[1] = VLA_WQ_DIAG == 4 ? pd[0] : p4[1];
            qd = VLA_WQ_DIAG != 5 && live && q == 0 ? P.Qm[(((size_t)bh * nch + j) * DK + i) * dv + col] : 0.0f;
        } else {
            const float *pj = P.Seg + ((size_t)bh * nch + j) * pstride + (size_t)i * pld;
            const vf4 *p4 = reinterpret_cast<const vf4 *>(pj + 8 * q);
            pd[0] = p4[0], pd[1] = p4[1];
            qd = live && q == 0 ? pj[DK + col] : 0.0f;
        }
    };
    float x = a.S_in && i < dk && live ? a.S_in[(size_t)bh * dk * dv + (size_t)i * dv + col] : 0.0f; /* X_0 = S_in^T */
    if (q == 0) xt[0][c][i] = x;
    const int nstep = VLA_WQ_DIAG == 6 && MODE == W_PLAIN ? (nch + 1) / 2 : nch; /* (development: 6) */
#pragma unroll
    for (int u = 0; u < AHEAD; u++)
        if (u < nstep) fetch(u, pb[u], qb[u]);
    __syncthreads();
    PROF(12);
    /* buffers by j mod (AHEAD + 1), unrolled so that every index is a constant */
    for (int jb = 0; jb < nstep; jb += AHEAD + 1) {
#pragma unroll
        for (int u = 0; u <= AHEAD; u++) {
            const int j = jb + u;
            if (j >= nstep) break;
            const int s = j & 1;
            if (VLA_WQ_DIAG != 1 && q == 0 && live) xbase[(((size_t)bh * nch + j) * DK + i) * dv + col] = x;
            if (VLA_WQ_DIAG != 2 && j + AHEAD < nstep)
                fetch(j + AHEAD, pb[(u + AHEAD) % (AHEAD + 1)], qb[(u + AHEAD) % (AHEAD + 1)]);
            const vf4 *xv = reinterpret_cast<const vf4 *>(&xt[s][c][8 * q]);
            const vf4 x0 = xv[0], x1 = xv[1], p0 = pb[u][0], p1 = pb[u][1];
            float part = qb[u];
            part = fmaf(p0.x, x0.x, part);
            part = fmaf(p0.y, x0.y, part);
            part = fmaf(p0.z, x0.z, part);
            part = fmaf(p0.w, x0.w, part);
            part = fmaf(p1.x, x1.x, part);
            part = fmaf(p1.y, x1.y, part);
            part = fmaf(p1.z, x1.z, part);
            part = fmaf(p1.w, x1.w, part);
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            x = part;
            if (q == 0) xt[s ^ 1][c][i] = x;
            if (VLA_WQ_DIAG == 3) __syncwarp();
            else __syncthreads();
            if (j == 0) PROF(14);
            if (j == 1) PROF(15);
        }
    }
    PROF(13);
    if (a.S_out && q == 0 && i < dk && live) a.S_out[(size_t)bh * dk * dv + (size_t)i * dv + col] = x;
    if (cb == 0) a_out_from_aend(P, bh, QW_NT);
}

/* ---- cp_output: O = Q~ X_j + tril(Q~ Al^T) (Y - W X_j) = (Q~ - Pm W) X_j + Pm Y, Pm = tril(Q~ Al^T),
 * VT output columns at a time ---- */
/* Shared memory: Q~, Al, Pm, and one slot for W, then Y's columns; X's columns go to Al's place
 * once Pm is formed. At dk = 64 that is 71 KiB, three blocks a multiprocessor (X in a place of its
 * own took 88 KiB: two); at dk = 32 46 KiB, four (with the register cap MINB sets). */
template <int DK, int VT> struct output_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD, ldv = VT + LD_PAD;
    static constexpr size_t wy = (size_t)C * (ld > ldv ? ld : ldv); /* W [C][ld], then Y [C][ldv] */
    static_assert((size_t)DK * ldv <= (size_t)C * ld, "X must fit Al's place");
    static constexpr size_t bytes = ((size_t)2 * C * ld + (size_t)C * ldc + wy) * 4;
};
#ifdef VLA_OUT_MINB1 /* development (A/B): no register cap */
template <int DK> constexpr int output_minb() { return 1; }
#else
template <int DK> constexpr int output_minb() { return VLA_CP_TC ? (DK == 32 ? 4 : 3) : 1; }
#endif

/* LIN (linear attention): Al = phi(k) from k itself, W = 0 (no Pm W), Y = V from v itself. */
template <int DK, int VT, bool LIN> __global__ void __launch_bounds__(NT, output_minb<DK>()) output_kernel(const cp_params P) {
    tl_scope<TL_OUT> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef output_smem<DK, VT> S;
    constexpr int ld = S::ld, ldc = S::ldc, ldv = S::ldv;
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x / P.nch, j = blockIdx.x % P.nch;
    if (head_skipped(P, bh)) return;
    const int b = bh / a.H, h = bh % a.H, ts = j * P.C, c = imin(P.C, a.T - ts), dv = a.dv, T = a.T;
    float *Q = (float *)smem, *Al = Q + C * ld, *Pm = Al + C * ld, *W = Pm + C * ldc;
    float *X = Al, *Yt = W; /* after Q - Pm W is formed */
    /* Q, Al and W in flight at once (one memory latency, where one at a time were three) */
    if (a.elu1) load_rows<DK>(a.q, a, b, h, ts, c, true, Q, ld);
    else async_rows<C, DK>(Q, ld, a.q + (((size_t)b * T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk);
    if (LIN) {
        if (a.elu1) load_rows<DK>(a.k, a, b, h, ts, c, true, Al, ld);
        else async_rows<C, DK>(Al, ld, a.k + (((size_t)b * T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk);
    } else {
        async_rows<C, DK>(Al, ld, P.Al + ((size_t)bh * T + ts) * DK, DK, c, DK);
        async_rows<C, DK>(W, ld, P.W + ((size_t)bh * T + ts) * DK, DK, c, DK);
    }
    if (!LIN && VLA_CP_OUT_PREFETCH) { /* X_j and Y toward L2: read after Pm and Q~ - Pm W are formed */
        if (threadIdx.x == 0) l2_bulk(P.Xst + ((size_t)bh * P.nch + j) * DK * dv, DK * dv);
        else if (threadIdx.x == 32) l2_bulk(P.Y + ((size_t)bh * T + ts) * dv, c * dv);
    }
    async_wait();
    __syncthreads();
    causal_scores<DK>(Q, Al, Pm);
    __syncthreads();
    if (!LIN) { /* Q <- Q - Pm W: each thread its own entries of Q (no one else reads Q here) */
        typedef blk<C, DK> tl;
        float x[tl::NE];
        zerob<C, DK>(x);
        mmb<C, DK, C, false, false>(Pm, ldc, W, ld, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) Q[tl::row(i) * ld + tl::col(i)] -= x[i];
    }
    __syncthreads(); /* Al and W are read before X and Y land in their places */
    const float *xst = P.Xst + ((size_t)bh * P.nch + j) * DK * dv;
    const float *yg = LIN ? a.v + (((size_t)b * T + ts) * a.H + h) * dv : P.Y + ((size_t)bh * T + ts) * dv;
    const size_t sy = LIN ? (size_t)a.H * dv : (size_t)dv;
    float *og = a.o + (((size_t)b * T + ts) * a.H + h) * dv;
    const size_t so = (size_t)a.H * dv;
    for (int v0 = 0; v0 < dv; v0 += VT) {
        const int nv = imin(VT, dv - v0);
        async_rows<DK, VT>(X, ldv, xst + v0, dv, DK, nv);
        async_rows<C, VT>(Yt, ldv, yg + v0, sy, c, nv);
        async_wait();
        __syncthreads();
        typedef blk<C, VT> tl;
        float x[tl::NE];
        zerob<C, VT>(x);
        mmb<C, VT, DK, false, false>(Q, ld, X, ldv, x);
        mmb<C, VT, C, false, false>(Pm, ldc, Yt, ldv, x);
#pragma unroll
        for (int i = 0; i < tl::NE; i++) {
                const int t = tl::row(i), cc = tl::col(i);
                if (t < c && cc < nv) og[(size_t)t * so + v0 + cc] = x[i];
            }
        __syncthreads();
    }
}

/* The output in two parts (VLA and DeltaNet), for shapes whose walk leaves most of the device
 * idle: OUT_PRE runs beside the walk on a second stream and forms Q' = Q~ - Pm W and Pm Y, written
 * over W and Y (only this chunk's block reads them); OUT_FIN, after the walk, adds Q' X_j. The same
 * shared-memory layout as output_kernel (kept apart from it: with the modes in one kernel its
 * dk = 64 form spilled more and DeltaNet at (8,16,64) T = 2048 ran 1% slower, session 9). */
enum { OUT_PRE = 1, OUT_FIN = 2 };
template <int DK, int VT, int MODE>
__global__ void __launch_bounds__(NT, output_minb<DK>()) output_split_kernel(const cp_params P) {
    tl_scope<MODE == OUT_PRE ? TL_OUTPRE : TL_OUT> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef output_smem<DK, VT> S;
    constexpr int ld = S::ld, ldc = S::ldc, ldv = S::ldv;
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x / P.nch, j = blockIdx.x % P.nch;
    if (head_skipped(P, bh)) return;
    const int b = bh / a.H, h = bh % a.H, ts = j * P.C, c = imin(P.C, a.T - ts), dv = a.dv, T = a.T;
    float *Q = (float *)smem, *Al = Q + C * ld, *Pm = Al + C * ld, *W = Pm + C * ldc;
    float *X = Al, *Yt = W;
    float *wg = P.W + ((size_t)bh * T + ts) * DK; /* W's rows, then Q' */
    float *yg = P.Y + ((size_t)bh * T + ts) * dv; /* Y's rows, then Pm Y */
    if (MODE == OUT_FIN) {
        async_rows<C, DK>(Q, ld, wg, DK, c, DK);
    } else {
        if (a.elu1) load_rows<DK>(a.q, a, b, h, ts, c, true, Q, ld);
        else async_rows<C, DK>(Q, ld, a.q + (((size_t)b * T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk);
        async_rows<C, DK>(Al, ld, P.Al + ((size_t)bh * T + ts) * DK, DK, c, DK);
        async_rows<C, DK>(W, ld, wg, DK, c, DK);
        async_wait();
        __syncthreads();
        causal_scores<DK>(Q, Al, Pm);
        __syncthreads();
        { /* Q' = Q - Pm W, straight to W's rows in global memory (no one reads Q here again) */
            typedef blk<C, DK> tl;
            float x[tl::NE];
            zerob<C, DK>(x);
            mmb<C, DK, C, false, false>(Pm, ldc, W, ld, x);
#pragma unroll
            for (int i = 0; i < tl::NE; i++)
                if (tl::row(i) < c) wg[(size_t)tl::row(i) * DK + tl::col(i)] = Q[tl::row(i) * ld + tl::col(i)] - x[i];
        }
        __syncthreads(); /* W is read before Y lands in its place */
    }
    const float *xst = P.Xst + ((size_t)bh * P.nch + j) * DK * dv;
    float *og = a.o + (((size_t)b * T + ts) * a.H + h) * dv;
    const size_t so = (size_t)a.H * dv;
    for (int v0 = 0; v0 < dv; v0 += VT) {
        const int nv = imin(VT, dv - v0);
        if (MODE == OUT_FIN) async_rows<DK, VT>(X, ldv, xst + v0, dv, DK, nv);
        async_rows<C, VT>(Yt, ldv, yg + v0, dv, c, nv); /* Y, or Pm Y */
        async_wait();
        __syncthreads();
        typedef blk<C, VT> tl;
        float x[tl::NE];
        if (MODE == OUT_FIN) { /* o = Pm Y + Q' X_j */
#pragma unroll
            for (int i = 0; i < tl::NE; i++) x[i] = Yt[tl::row(i) * ldv + tl::col(i)];
            mmb<C, VT, DK, false, false>(Q, ld, X, ldv, x);
        } else {
            zerob<C, VT>(x);
            mmb<C, VT, C, false, false>(Pm, ldc, Yt, ldv, x);
        }
        /* (OUT_PRE: this tile of Y was read into Yt before the barrier above) */
#pragma unroll
        for (int i = 0; i < tl::NE; i++) {
                const int t = tl::row(i), cc = tl::col(i);
                if (t < c && cc < nv) {
                    if (MODE == OUT_FIN) og[(size_t)t * so + v0 + cc] = x[i];
                    else yg[(size_t)t * dv + v0 + cc] = x[i];
                }
            }
        __syncthreads();
    }
}

/* ---- host side ---- */

/* A launch of one of the form's kernels; pdl: with programmatic stream serialization (sm_90+, see
 * pdl_enter: every kernel here starts with it). */
static cudaError_t launch_one(void (*kern)(const cp_params), unsigned grid, size_t smem, cudaStream_t st,
                              const cp_params &P, bool pdl, unsigned block = NT) {
#ifndef VLA_CUDA_EMU
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = smem, cfg.stream = st;
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at, cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, kern, P);
    }
#else
    (void)pdl;
#endif
    VLACU_LAUNCH(kern, grid, block, smem, st, P);
    return cudaGetLastError();
}

static std::atomic<size_t> smem_set[44][64]; /* per kernel instance and device */

static cudaError_t raise(int slot, void (*kern)(const cp_params), size_t bytes) {
    return raise_smem_limit((const void *)kern, smem_set[slot], bytes);
}

/* VLA_CUDA_KERNEL_TIMES=1 (development): each kernel of a call timed with events on the stream,
 * printed to stderr after the call (which then synchronises). */
struct ktimer {
    bool on;
    cudaEvent_t ev[8];
    int n;
    const char *name[8];
    void start(cudaStream_t st) {
        static const bool env_on = [] {
            const char *e = getenv("VLA_CUDA_KERNEL_TIMES");
            return e && e[0] == '1';
        }(); /* read once a process */
        on = env_on;
        n = 0;
        if (on) mark("start", st);
    }
    void mark(const char *what, cudaStream_t st) {
        if (!on || n >= 8) return;
        cudaEventCreate(&ev[n]);
        cudaEventRecord(ev[n], st);
        name[n++] = what;
    }
    long long *prof = nullptr;
    void finish(const vlacu_args &a) {
        if (!on) return;
        cudaEventSynchronize(ev[n - 1]);
        if (prof) {
            long long h[64];
            cudaMemcpy(h, prof, sizeof h, cudaMemcpyDeviceToHost);
            fprintf(stderr, "apart block cycles:");
            for (int i = 1; i <= 11; i++) fprintf(stderr, " %d:%lld", i, h[i] - h[i - 1]);
            if (h[16] && h[18]) /* phase 11's parts; the inverse on tensor-core devices only */
                fprintf(stderr, " (11: inverse %lld, V wait %lld, W Y %lld, rest %lld)", h[17] ? h[17] - h[10] : 0LL,
                        h[16] - (h[17] ? h[17] : h[10]), h[18] - h[16], h[11] - h[18]);
            if (h[53]) /* phase 1's blocked inverse (at N = 32: its stages) */
                fprintf(stderr, " (1: before the inverse %lld, 16 x 16 inverse %lld, X %lld, S %lld, 16 x 16 inverse %lld,"
                        " Y %lld, out %lld)", h[48] - h[0], h[49] - h[48], h[50] - h[49], h[51] - h[50], h[52] - h[51],
                        h[53] - h[52], h[1] - h[53]);
            if (h[32]) { /* phase 4: chol_z_blocked's stages */
                fprintf(stderr, " (4: diagonal blocks %lld, panel 0 %lld", h[32] - h[3], h[35] - h[32]);
                for (int b = 1; b < 4; b++)
                    fprintf(stderr, ", P_%d %lld R/S %lld panel %lld", b, h[33 + 3 * b] - h[32 + 3 * b], h[34 + 3 * b] - h[33 + 3 * b],
                            h[35 + 3 * b] - h[34 + 3 * b]);
                fprintf(stderr, ")");
            }
            if (h[61] > h[60]) /* phases 1-11 in cycles over the same span on the global timer */
                fprintf(stderr, " (clock %.0f MHz)", 1e3 * (double)(h[11] - h[0]) / (double)(h[61] - h[60]));
            fprintf(stderr, "\nwalk cycles: all steps %lld, step 1 %lld\n", h[13] - h[12], h[15] - h[14]);
            cudaFree(prof);
        }
        fprintf(stderr, "chunkpar B=%d T=%d H=%d dk=%d dv=%d:", a.B, a.T, a.H, a.dk, a.dv);
        for (int i = 1; i < n; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev[i - 1], ev[i]);
            fprintf(stderr, " %s %.1f us", name[i], 1e3 * ms);
        }
        fprintf(stderr, "\n");
        for (int i = 0; i < n; i++) cudaEventDestroy(ev[i]);
    }
};

/* Whether the segmented walk's scan (its middle launch) runs as walk_quad_kernel<2, W_SCAN>: dk <= 32,
 * sm_80+, dv a multiple of 4 (16-byte loads of the map rows), and its dv / 2 blocks a head fit two a
 * multiprocessor. VLA_CP_QSCAN=0 (development) turns it off. */
static bool quad_scan_ok(int dk, int dv, long long heads, int cc, int sms) {
    static const bool env = [] {
        const char *e = getenv("VLA_CP_QSCAN");
        return !(e && e[0] == '0');
    }();
    return env && dk <= 32 && cc >= 8 && dv % 4 == 0 && heads * ((dv + QW_COLS - 1) / QW_COLS) <= 2LL * (sms > 0 ? sms : 1);
}

/* VLA_CP_TIMELINE=1 in a -DVLA_CP_TIMELINE build (development): the kernels' spans on the GPU's global timer for one call, printed
 * after it (the call then waits for its stream): for each kernel, microseconds from the first
 * kernel's entry to its first block's entry, to that block's griddepcontrol.wait returning, and to
 * its last warp's exit. Unlike VLA_CUDA_KERNEL_TIMES, the launches are as in production. */
struct tline {
    unsigned long long *d = nullptr;
    void start(cp_params &p, cudaStream_t st) {
#ifdef VLA_CP_TIMELINE
        static const bool env_on = [] {
            const char *e = getenv("VLA_CP_TIMELINE");
            return e && e[0] == '1';
        }();
#else
        constexpr bool env_on = false;
#endif
        static unsigned long long *buf = nullptr; /* one a process (development), never freed */
        const size_t n = 3 * TL_N + TL_REC * (size_t)TL_BLOCKS + TL_WBLOCKS;
        if (!env_on || (!buf && cudaMalloc((void **)&buf, n * sizeof *buf) != cudaSuccess)) return;
        d = buf;
        cudaMemsetAsync(d, 0xff, 2 * TL_N * sizeof *d, st); /* (not with bench_cuda_targets --gate: finish waits) */
        cudaMemsetAsync(d + 2 * TL_N, 0, (n - 2 * TL_N) * sizeof *d, st);
        p.tl = d;
    }
    /* apart_kernel's blocks (session 17): quantiles of entry, wait done, exit and duration (us from t0), and
     * the last blocks to exit with their segment (the Gram parts its fold adds grow with it) */
    static void blocks(const unsigned long long *b, const unsigned long long *wsm, int nblk, int nseg, unsigned long long t0) {
        if (nblk > TL_BLOCKS) nblk = TL_BLOCKS;
        if (nblk < 1 || !b[2]) return;
        static double v[5][TL_BLOCKS];
        static int idx[TL_BLOCKS];
        for (int i = 0; i < nblk; i++) {
            const unsigned long long *r = b + TL_REC * i;
            v[0][i] = 1e-3 * (double)(r[0] - t0), v[1][i] = 1e-3 * (double)(r[1] - t0);
            v[2][i] = 1e-3 * (double)(r[2] - t0), v[3][i] = v[2][i] - v[1][i];
            v[4][i] = r[3] ? 1e-3 * (double)(r[3] - t0) : v[1][i]; /* inversion done (the first segment has none) */
            idx[i] = i;
        }
        /* VLA_CP_TIMELINE_DUMP=file (development, session 18): every block's record appended as CSV */
        if (const char *dump = getenv("VLA_CP_TIMELINE_DUMP")) {
            static int call = 0;
            if (FILE *f = fopen(dump, "a")) {
                if (ftell(f) == 0) fprintf(f, "call,nseg,block,segment,smid,entry,wait,inv,p3,p4,p9,p11,exit,cz,vw,tinv,wy\n");
                for (int i = 0; i < nblk; i++) {
                    const unsigned long long *r = b + TL_REC * i;
                    auto us = [&](unsigned long long x) { return x ? 1e-3 * (double)(x - t0) : -1.0; };
                    fprintf(f, "%d,%d,%d,%d,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", call, nseg, i,
                            TL_SEG(i % nseg, nseg), (long long)r[4] - 1, us(r[0]), us(r[1]), us(r[3]), us(r[5]), us(r[6]), us(r[7]),
                            us(r[8]), us(r[2]), us(r[9]), us(r[10]), us(r[11]), us(r[12]));
                }
                fclose(f);
            }
            call++;
        }
        std::sort(idx, idx + nblk, [&](int x, int y) { return v[2][x] > v[2][y]; });
        static const char *const what[4] = {"entry", "wait done", "exit", "run"};
        fprintf(stderr, "apart blocks (%d, us: min / median / max):", nblk);
        for (int k = 0; k < 4; k++) {
            double w[TL_BLOCKS];
            memcpy(w, v[k], nblk * sizeof(double));
            std::sort(w, w + nblk);
            fprintf(stderr, " %s %.1f / %.1f / %.1f;", what[k], w[0], w[nblk / 2], w[nblk - 1]);
        }
        fprintf(stderr, " last out (segment: entry, run):");
        for (int i = 0; i < 6 && i < nblk; i++)
            fprintf(stderr, " %d: %.1f, %.1f;", TL_SEG(idx[i] % nseg, nseg), v[1][idx[i]], v[3][idx[i]]);
        double q[3][4] = {}, c[4] = {};
        for (int i = 0; i < nblk; i++) {
            const int k = 4 * TL_SEG(i % nseg, nseg) / nseg;
            q[0][k] += v[3][i], q[1][k] += v[4][i] - v[1][i], q[2][k] += v[2][i] - v[4][i], c[k]++;
        }
        fprintf(stderr, " by segment quarter, mean run / to the inversion's end / after it:");
        for (int k = 0; k < 4; k++)
            fprintf(stderr, " %.1f / %.1f / %.1f%s", c[k] ? q[0][k] / c[k] : 0.0, c[k] ? q[1][k] / c[k] : 0.0,
                    c[k] ? q[2][k] / c[k] : 0.0, k < 3 ? "," : "");
        /* (session 18) where the blocks ran: A-part blocks a multiprocessor, and the mean run of the
         * blocks beside the plain walk's waiting blocks against the others */
        static int na[1024], nw[1024];
        memset(na, 0, sizeof na), memset(nw, 0, sizeof nw);
        for (int i = 0; i < nblk; i++)
            if (b[TL_REC * i + 4] && b[TL_REC * i + 4] <= 1024) na[b[TL_REC * i + 4] - 1]++;
        for (int i = 0; i < TL_WBLOCKS; i++)
            if (wsm[i] && wsm[i] <= 1024) nw[wsm[i] - 1]++;
        int used = 0, most = 0, hist[5] = {};
        for (int m = 0; m < 1024; m++) used += na[m] > 0, most = na[m] > most ? na[m] : most, hist[na[m] < 4 ? na[m] : 4]++;
        double rw[2] = {0, 0}, cw[2] = {0, 0};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            const int beside = m && m <= 1024 && nw[m - 1] > 0;
            rw[beside] += v[3][i], cw[beside]++;
        }
        fprintf(stderr, "; on %d multiprocessors (0/1/2/3/4+ blocks: %d/%d/%d/%d/%d); mean run beside a walk block %.1f (%d), not %.1f (%d)",
                used, hist[0], hist[1], hist[2], hist[3], hist[4], cw[1] ? rw[1] / cw[1] : 0.0, (int)cw[1],
                cw[0] ? rw[0] / cw[0] : 0.0, (int)cw[0]);
        /* by the multiprocessor's share: mean run of blocks alone on theirs, and of those with another */
        double rs[2] = {0, 0}, cs[2] = {0, 0};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            if (!m || m > 1024) continue;
            const int shared = na[m - 1] > 1;
            rs[shared] += v[3][i], cs[shared]++;
        }
        fprintf(stderr, "; alone %.1f (%d), shared %.1f (%d)", cs[0] ? rs[0] / cs[0] : 0.0, (int)cs[0],
                cs[1] ? rs[1] / cs[1] : 0.0, (int)cs[1]);
        /* the time after the inversion by the multiprocessor's number (quarters of the highest + 1) */
        unsigned long long top = 1;
        for (int i = 0; i < nblk; i++) top = b[TL_REC * i + 4] > top ? b[TL_REC * i + 4] : top;
        double qa[4] = {}, qc[4] = {};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            if (!m) continue;
            const int k = (int)(4 * (m - 1) / top);
            qa[k] += v[2][i] - v[4][i], qc[k]++;
        }
        {
            double pq[5][4] = {}, pc[4] = {};
            for (int i = 0; i < nblk; i++) {
                const unsigned long long *r = b + TL_REC * i;
                if (!r[5] || !r[6] || !r[7] || !r[8]) continue;
                const double t[6] = {v[4][i], 1e-3 * (double)(r[5] - t0), 1e-3 * (double)(r[6] - t0), 1e-3 * (double)(r[7] - t0),
                                     1e-3 * (double)(r[8] - t0), v[2][i]};
                const int k = 4 * TL_SEG(i % nseg, nseg) / nseg;
                for (int x = 0; x < 5; x++) pq[x][k] += t[x + 1] - t[x];
                pc[k]++;
            }
            fprintf(stderr, "; first chunk by segment quarter, us (inversion to phase 3 / 4 / 9 / 11 / exit):");
            for (int k = 0; k < 4; k++)
                if (pc[k]) fprintf(stderr, " %.1f %.1f %.1f %.1f %.1f%s", pq[0][k] / pc[k], pq[1][k] / pc[k], pq[2][k] / pc[k],
                                   pq[3][k] / pc[k], pq[4][k] / pc[k], k < 3 ? "," : "");
        }
        fprintf(stderr, "; after the inversion by multiprocessor quarter:");
        for (int k = 0; k < 4; k++) fprintf(stderr, " %.1f (%d)", qc[k] ? qa[k] / qc[k] : 0.0, (int)qc[k]);
        fprintf(stderr, "\n");
    }
    void finish(cudaStream_t st, const vlacu_args &a, int apart_blocks = 0, int nseg = 1) {
        if (!d) return;
        unsigned long long h[3 * TL_N];
        cudaStreamSynchronize(st);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        static const char *const name[TL_N] = {"gram", "prefix", "apart", "outpre", "walk", "wmap", "wscan", "wlocal", "out", "linmap", "sumwalk"};
        unsigned long long t0 = ~0ull, t1 = 0;
        for (int k = 0; k < TL_N; k++)
            if (h[2 * TL_N + k]) t0 = h[k] < t0 ? h[k] : t0, t1 = h[2 * TL_N + k] > t1 ? h[2 * TL_N + k] : t1;
        fprintf(stderr, "timeline B=%d T=%d H=%d dk=%d dv=%d (us: entry, wait done, exit):", a.B, a.T, a.H, a.dk, a.dv);
        for (int k = 0; k < TL_N; k++)
            if (h[2 * TL_N + k])
                fprintf(stderr, " %s %.1f %.1f %.1f;", name[k], 1e-3 * (double)(h[k] - t0), 1e-3 * (double)(h[TL_N + k] - t0),
                        1e-3 * (double)(h[2 * TL_N + k] - t0));
        fprintf(stderr, " total %.1f\n", 1e-3 * (double)(t1 - t0));
        if (apart_blocks > 0) {
            static unsigned long long hb[TL_REC * TL_BLOCKS + TL_WBLOCKS];
            const int nb = apart_blocks < TL_BLOCKS ? apart_blocks : TL_BLOCKS;
            if (cudaMemcpy(hb, d + 3 * TL_N, sizeof hb, cudaMemcpyDeviceToHost) == cudaSuccess)
                blocks(hb, hb + TL_REC * TL_BLOCKS, nb, nseg, t0);
        }
    }
};

template <int DK> cudaError_t run(const cp_params &P, int bv, cudaStream_t st, const vlacu_aux *aux) {
    const unsigned BH = (unsigned)(P.a.B * P.a.H), nch = (unsigned)P.nch;
    const int slot = DK == 32 ? 0 : 6, slot2 = DK == 32 ? 12 : 15; /* smem_set slots of this DK's kernels */
    cudaError_t e;
    ktimer kt;
    kt.start(st);
    cp_params Pp = P;
    tline tl;
    tl.start(Pp, st);
    const bool vla = P.a.mech == VLACU_VLA;
    /* The Gram prefix summed in apart_kernel (no cp_prefix launch) when the last segment's block
     * has at most fold_max parts to add (dk = 32: 8 parts a round trip; cp_prefix is a launch and
     * about 5 us). 64 since session 13: with the 63 parts of (1,4,32) T = 8192 the forward was 2.4%
     * faster (0.1301 / 0.1297 against 0.1332 / 0.1333 ms gated, run 4; session 6 had found 64 no
     * faster, before the fold's loads were batched); 128 made T = 32768's 126 parts 0.8% slower */
    static const int fold_env = [] {
        const char *e = getenv("VLA_CP_FOLD");
        return e && *e ? atoi(e) : -1;
    }();
    const int fold_max = !fold_here<DK>() ? 0 : fold_env >= 0 ? fold_env : 64;
    Pp.fold = vla && P.nseg > 1 && (P.nseg - 1) * P.gparts <= fold_max ? 1 : 0;
    if (kt.on && cudaMalloc((void **)&kt.prof, 64 * sizeof(long long)) == cudaSuccess) {
        cudaMemset(kt.prof, 0, 64 * sizeof(long long));
        Pp.prof = kt.prof;
        /* head 0's second segment; VLA_CP_PROF_LAST=1: its last (the longest Gram prefix) */
        static const bool last = [] {
            const char *e = getenv("VLA_CP_PROF_LAST");
            return e && e[0] == '1';
        }();
        Pp.prof_block = P.nseg > 1 ? (last ? P.nseg - 1 : 1) : 0;
    }
    const cp_params &PP = Pp;
    typedef void (*kfn)(const cp_params);
    /* The walk's blocks (its widest launch): at most one a multiprocessor means the device is
     * mostly idle around the walk, and the launch gaps and the output are worth hiding there. */
    const unsigned nvb = (unsigned)((P.a.dv + bv - 1) / bv);
    const unsigned walk_blocks = BH * nvb * (unsigned)(P.wnseg > 1 ? P.wnseg : 1);
    const bool small = walk_blocks <= (unsigned)P.sms;
    /* Every launch after the first with programmatic serialization (sm_90+) on small shapes
     * (-1 to -2% at (1,4,32) T >= 8192; +0.5% at (8,16,64) T = 2048, session 9); not while the
     * kernels are timed one by one. VLA_CP_PDL=0/1 (development) forces it off or on. */
    static const int pdl_env = [] {
        const char *e = getenv("VLA_CP_PDL");
        return e && *e ? atoi(e) : -1;
    }();
    const bool pdl = P.cc >= 9 && !kt.on && pdl_env != 0 && (pdl_env == 1 || small);
    bool chained = false;
    auto cp_launch = [&](kfn kern, unsigned grid, size_t smem, cudaStream_t s, const cp_params &p, unsigned block = NT) {
        const cudaError_t r = launch_one(kern, grid, smem, s, p, pdl && chained, block);
        chained = true;
        host_mark("launch"); /* (development, VLA_CUDA_HOST_TIMES) */
        return r;
    };
    const unsigned nseg = (unsigned)P.nseg;
    if (nseg > 1 && P.a.mech == VLACU_VLA) {
        const kfn kg = gram_kernel<DK>, kp = prefix_kernel<DK>;
        if ((e = cp_launch(kg, BH * (nseg - 1) * (unsigned)P.gparts, (size_t)2 * C * (DK + LD_PAD) * 4, st, PP)) != cudaSuccess) return e;
        kt.mark("gram", st);
        if (!Pp.fold) {
            if ((e = cp_launch(kp, BH * (unsigned)(DK * DK * prefix_runs((nseg - 1) * P.gparts) / NT), 0, st, PP)) != cudaSuccess) return e;
            kt.mark("prefix", st);
        }
    }
    if (P.a.mech == VLACU_LINEAR) { /* Q maps, their running sum, the outputs */
        const kfn km = linmap_kernel<DK>;
        if ((e = raise(DK == 32 ? 23 : 24, km, linmap_smem<DK>::bytes)) != cudaSuccess) return e;
        if ((e = cp_launch(km, BH * nch, linmap_smem<DK>::bytes, st, PP)) != cudaSuccess) return e;
        kt.mark("linmap", st);
        const unsigned nb = (unsigned)((DK * P.a.dv + NT - 1) / NT);
        VLACU_LAUNCH(sumwalk_kernel, BH * nb, NT, 0, st, PP, DK); /* (launched plainly: it takes an int too) */
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        kt.mark("walk", st);
        const kfn ko = P.a.dv <= 32 ? output_kernel<DK, 32, true> : output_kernel<DK, 64, true>;
        const size_t so = P.a.dv <= 32 ? output_smem<DK, 32>::bytes : output_smem<DK, 64>::bytes;
        if ((e = raise((DK == 32 ? 25 : 27) + (P.a.dv <= 32 ? 0 : 1), ko, so)) != cudaSuccess) return e;
        if ((e = cp_launch(ko, BH * nch, so, st, PP)) != cudaSuccess) return e;
        kt.mark("output", st);
        kt.finish(P.a);
        tl.finish(st, P.a);
        return cudaGetLastError();
    }
    /* The output's split (output_split_kernel: OUT_PRE beside the walk on the second stream,
     * OUT_FIN after it) on small shapes. VLA_CP_SPLIT=0/1 (development) forces it off or on. */
    static const int split_env = [] {
        const char *e = getenv("VLA_CP_SPLIT");
        return e && *e ? atoi(e) : -1;
    }();
    const bool split = aux && split_env != 0 && (split_env == 1 || small);
    /* With the segmented walk (its launches step 3 x fewer chunks, with more blocks), OUT_PRE's
     * blocks (one a chunk) beside it slowed it down and ended after it ((1,4,32) T = 8192: the walk
     * about 23 us alone, 28-33 beside OUT_PRE; session 12's timelines). There, at dk = 32 and dv <= 32
     * (Y in one tile), apart_kernel forms Q' and Pm Y itself (P.outfold: the same sums, so the same
     * bits) and the walk runs alone. VLA_CP_OUTFOLD=0/1 (development) forces it off, or on for
     * every split shape. */
    static const int outfold_env = [] {
        const char *e = getenv("VLA_CP_OUTFOLD");
        return e && *e ? atoi(e) : -1;
    }();
    const bool outfold = DK == 32 && vla && split && P.a.dv <= DK && P.cc >= 8 && outfold_env != 0 &&
                         (outfold_env == 1 || P.wnseg > 1);
    Pp.outfold = outfold ? 1 : 0;
    if (vla) {
        /* uk: u not given (u = s_u k^), the A part's shorter form (apart_kernel, step 3) */
        const bool uk = !P.a.u;
        kfn ka = uk ? apart_kernel<DK, 2, false, true> : apart_kernel<DK, 2>;
        int aslot = uk ? (DK == 32 ? 39 : 43) : slot;
        if constexpr (DK == 32) {
            if (outfold) {
                if (uk) ka = P.apart_minb == 3 ? apart_kernel<32, 3, true, true> : apart_kernel<32, 2, true, true>, aslot = P.apart_minb == 3 ? 40 : 41;
                else ka = P.apart_minb == 3 ? apart_kernel<32, 3, true> : apart_kernel<32, 2, true>, aslot = P.apart_minb == 3 ? 37 : 38;
            } else if (P.apart_minb == 3) {
                if (uk) ka = apart_kernel<32, 3, false, true>, aslot = 42;
                else ka = apart_kernel<32, 3>, aslot = 18;
            }
        }
        const size_t sa = apart_smem<DK>::bytes + (outfold ? apart_smem<DK>::qbytes : 0);
        if ((e = raise(aslot, ka, sa)) != cudaSuccess) return e;
        if ((e = cp_launch(ka, BH * nseg, sa, st, PP)) != cudaSuccess) return e;
#ifdef VLA_CP_TIMELINE
        /* VLA_CP_APART_TWICE=1 (development, session 19, timeline build): the A part launched a
         * second time, the same work over the same outputs, so that its blocks' records are those
         * of a launch whose code the multiprocessors have just run (the instruction-fetch test) */
        if (const char *tw = getenv("VLA_CP_APART_TWICE"))
            if (tw[0] == '1' && (e = cp_launch(ka, BH * nseg, sa, st, PP)) != cudaSuccess) return e;
#endif
        kt.mark("apart", st);
    } else {
        const bool many = P.sfac_minb > 2;
        const kfn kf = many ? sfac_kernel<DK, DK == 32 ? 4 : 3> : sfac_kernel<DK, 2>;
        if ((e = raise((DK == 32 ? 19 : 21) + (many ? 0 : 1), kf, sfac_smem<DK>::bytes)) != cudaSuccess) return e;
        if ((e = cp_launch(kf, BH * nch, sfac_smem<DK>::bytes, st, PP)) != cudaSuccess) return e;
        kt.mark("sfac", st);
    }
    /* walk_quad_kernel for the plain walk at dk <= 32 when its dv / 2 blocks a head fit two a
     * multiprocessor (sm_80+; the T4 keeps walk_rows_kernel, not measured there). VLA_CP_QUAD=0
     * (development) turns it off. */
    static const bool quad_env = [] {
        const char *e = getenv("VLA_CP_QUAD");
        return !(e && e[0] == '0');
    }();
    const bool quad = quad_env && P.cc >= 8 && P.wnseg <= 1 &&
                      BH * (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS) <= 2u * (unsigned)P.sms;
    const int VT = P.a.dv <= 32 ? 32 : 64;
    const size_t so = VT == 32 ? output_smem<DK, 32>::bytes : output_smem<DK, 64>::bytes;
    const int oslot = 29 + (DK == 32 ? 0 : 4) + (VT == 32 ? 0 : 2); /* OUT_PRE; OUT_FIN + 1 */
    if (split && !outfold) { /* Q' and Pm Y on the second stream, from the A part's (or cp_sfac's) W, Y, Al */
        const cudaStream_t as = (cudaStream_t)aux->stream;
        const kfn kpre = VT == 32 ? output_split_kernel<DK, 32, OUT_PRE> : output_split_kernel<DK, 64, OUT_PRE>;
        if ((e = raise(oslot, kpre, so)) != cudaSuccess) return e;
        if ((e = cudaEventRecord((cudaEvent_t)aux->fork, st)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(as, (cudaEvent_t)aux->fork, 0)) != cudaSuccess)
            return e;
        if ((e = launch_one(kpre, BH * nch, so, as, PP, false)) != cudaSuccess) return e;
        if ((e = cudaEventRecord((cudaEvent_t)aux->join, as)) != cudaSuccess) return e;
    }
    if (P.wnseg > 1) { /* segments (bv = 32): their maps, the scan over them, each segment's walk */
        const unsigned ns = (unsigned)P.wnseg;
        const size_t sc = walk_smem<DK, 32>::bytes;
        const kfn km = walk_kernel<DK, 32, W_MAP>, ks = walk_kernel<DK, 32, W_SCAN>, kl = walk_kernel<DK, 32, W_LOCAL>;
        if ((e = raise(slot2, km, sc)) != cudaSuccess || (e = raise(slot2 + 1, ks, sc)) != cudaSuccess ||
            (e = raise(slot2 + 2, kl, sc)) != cudaSuccess)
            return e;
        if ((e = cp_launch(km, BH * ((unsigned)(DK / 32) + nvb) * ns, sc, st, PP)) != cudaSuccess) return e;
        if (quad_scan_ok(DK, P.a.dv, (long long)BH, P.cc, P.sms)) { /* four threads an entry of X */
            const unsigned nq = (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS);
            if ((e = cp_launch(walk_quad_kernel<VLA_QW_SCAN_AHEAD, W_SCAN>, BH * nq, 0, st, PP, QW_NT)) != cudaSuccess) return e;
        } else if ((e = cp_launch(ks, BH * nvb, sc, st, PP)) != cudaSuccess)
            return e;
        if ((e = cp_launch(kl, BH * nvb * ns, sc, st, PP)) != cudaSuccess) return e;
    } else if (DK == 32 && quad) { /* four threads an entry of X (walk_quad_kernel) */
        const unsigned nq = (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS);
        /* seven steps of P in flight (session 19; three since session 13, which had found three better
         * than two: 15.2k against 16.9k cycles for the 32 steps of (1,4,32) T = 2048). The loads of a
         * step ahead were what a step waited on: with none at all (VLA_WQ_DIAG=2) the steps took
         * 9.8-10.4k cycles (runs 6, 7); 4, 5 and 7 ahead 14.6k, 13.2k and 12.5k against 14.9k, and the forward
         * 0.0545, 0.0540 and 0.0536 ms gated against 0.0560 (session 19 run 10; the scan over segment
         * maps keeps two: three there made T = 8192 1.5% slower, session 13 run 4). The same sums,
         * the same bits. VLA_QW_AHEAD=n (development, compile time) sets it; VLA_CP_QW_AHEAD=2
         * (development, environment): two */
        static const bool ahead2 = [] {
            const char *e = getenv("VLA_CP_QW_AHEAD");
            return e && e[0] == '2';
        }();
        const kfn kq = ahead2 ? walk_quad_kernel<2, W_PLAIN> : walk_quad_kernel<VLA_QW_AHEAD, W_PLAIN>;
        if ((e = cp_launch(kq, BH * nq, 0, st, PP, QW_NT)) != cudaSuccess) return e;
    } else if (DK == 32 && bv <= 16) { /* P's rows in registers (walk_rows_kernel); static shared memory only */
        /* two chunks ahead (96 registers of P rows, one block a multiprocessor) when the blocks fit one a
         * multiprocessor: one ahead left each step waiting on its loads (about 900 cycles a step) */
        const bool one = BH * nvb <= (unsigned)P.sms;
        const kfn kw = bv == 8 ? (one ? walk_rows_kernel<8, 2> : walk_rows_kernel<8, 1>)
                               : (one ? walk_rows_kernel<16, 2> : walk_rows_kernel<16, 1>);
        if ((e = cp_launch(kw, BH * nvb, 0, st, PP)) != cudaSuccess) return e;
    } else {
        const kfn kc = bv == 8 ? walk_kernel<DK, 8, W_PLAIN> : bv == 16 ? walk_kernel<DK, 16, W_PLAIN> : walk_kernel<DK, 32, W_PLAIN>;
        const size_t sc = bv == 8 ? walk_smem<DK, 8>::bytes : bv == 16 ? walk_smem<DK, 16>::bytes : walk_smem<DK, 32>::bytes;
        if ((e = raise(slot + (bv == 8 ? 1 : bv == 16 ? 2 : 5), kc, sc)) != cudaSuccess) return e;
        if ((e = cp_launch(kc, BH * nvb, sc, st, PP)) != cudaSuccess) return e;
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    kt.mark("walk", st);
    if (split) { /* after the walk and the second stream's part */
        const kfn kfin = VT == 32 ? output_split_kernel<DK, 32, OUT_FIN> : output_split_kernel<DK, 64, OUT_FIN>;
        if ((e = raise(oslot + 1, kfin, so)) != cudaSuccess) return e;
        if (outfold) {
            if ((e = cp_launch(kfin, BH * nch, so, st, PP)) != cudaSuccess) return e;
        } else {
            if ((e = cudaStreamWaitEvent(st, (cudaEvent_t)aux->join, 0)) != cudaSuccess) return e;
            if ((e = launch_one(kfin, BH * nch, so, st, PP, false)) != cudaSuccess) return e;
        }
    } else {
        const kfn ko = VT == 32 ? output_kernel<DK, 32, false> : output_kernel<DK, 64, false>;
        if ((e = raise(slot + (VT == 32 ? 3 : 4), ko, so)) != cudaSuccess) return e;
        if ((e = cp_launch(ko, BH * nch, so, st, PP)) != cudaSuccess) return e;
    }
    kt.mark(split ? "output (fin)" : "output", st);
    kt.finish(P.a);
    tl.finish(st, P.a, vla ? (int)(BH * nseg) : 0, (int)nseg);
    return cudaGetLastError();
}

} // namespace cp

int chunkpar_dk(const vlacu_args &a) { return a.dk <= 32 ? 32 : 64; }

/* A kernel's static shared memory, asked once (each launch adds it to the dynamic bytes). */
template <void (*K)(const cp_params)> static size_t static_of() {
    static const size_t s = static_smem_of((const void *)K, 0);
    return s;
}

template <int DK> static size_t max_smem(int dv) {
    size_t m = cp::apart_smem<DK>::bytes + static_of<cp::apart_kernel<DK, 2>>();
    const size_t f = cp::sfac_smem<DK>::bytes + static_of<cp::sfac_kernel<DK, DK == 32 ? 4 : 3>>();
    if (f > m) m = f;
    const size_t w = cp::walk_smem<DK, 16>::bytes + static_of<cp::walk_kernel<DK, 16, cp::W_PLAIN>>();
    const size_t o = dv <= 32 ? cp::output_smem<DK, 32>::bytes + static_of<cp::output_kernel<DK, 32, false>>()
                              : cp::output_smem<DK, 64>::bytes + static_of<cp::output_kernel<DK, 64, false>>();
    if (w > m) m = w;
    if (o > m) m = o;
    return m;
}

/* The most shared memory (dynamic + static) one block of the form needs for this shape. */
static size_t chunkpar_max_smem(const vlacu_args &a) {
    return chunkpar_dk(a) == 32 ? max_smem<32>(a.dv) : max_smem<64>(a.dv);
}

/* VLA with R = 0 (the Gram prefix gives A exactly), linear, or delta without g (the decay would
 * need its own chunk maps); dk <= 64, chunks of at most 64 tokens, and the kernels' shared memory
 * fits the device (a T4's 64 KiB a block: dk <= 32 only). */
bool chunkpar_applies(const vlacu_args &a, const vlacu_device &dev) {
    const bool mech = (a.mech == VLACU_VLA && a.refresh == 0) || a.mech == VLACU_LINEAR ||
                      (a.mech == VLACU_DELTA && !a.g);
    return mech && a.algo == VLACU_CHUNKED && a.dk <= 64 && a.chunk <= cp::C && a.chunk >= 1 &&
           chunkpar_max_smem(a) <= dev.smem_optin;
}

/* Shared memory (dynamic + static) of a walk block on 32 value columns. */
static size_t chunkpar_walk32_smem(const vlacu_args &a) {
    return chunkpar_dk(a) == 32 ? cp::walk_smem<32, 32>::bytes + static_of<cp::walk_kernel<32, 32, cp::W_MAP>>()
                                : cp::walk_smem<64, 32>::bytes + static_of<cp::walk_kernel<64, 32, cp::W_MAP>>();
}

/* The walk's segments: when the heads' value blocks leave most multiprocessors idle and there
 * are enough chunks, segments of wlen chunks on 32 value columns a block (the segments give the
 * parallelism). The three launches take wlen, wnseg and wlen steps a head; wlen minimises
 * (waves of the first launch + waves of the last) x wlen + s x wnseg, two blocks a multiprocessor,
 * s the scan's step against walk_kernel's: 1, or 1/2 with walk_quad_kernel (session 12). (With
 * s = 1 and one wave each this is wlen ~ sqrt(nch / 2), the rule before.) VLA_CP_WLEN=L
 * (development) forces wlen. Else one segment (wlen = nch) and chunkpar_bv's width. */
void chunkpar_walk(const vlacu_args &a, const vlacu_device &dev, int nch, int *bv, int *wlen, int *wnseg) {
    const long long heads = (long long)a.B * a.H, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    *bv = chunkpar_bv(a, dev);
    *wlen = nch > 0 ? nch : 1;
    *wnseg = 1;
    if (a.mech == VLACU_LINEAR) return; /* sumwalk_kernel: a thread per entry of S, no segments */
    if (nch < 64 || heads * ((a.dv + 31) / 32) * 4 > sms || chunkpar_walk32_smem(a) > dev.smem_optin)
        return; /* (from 32 chunks it was slower at T = 2048; with walk_quad_kernel, leaving 64 and
                 * 128 chunks unsegmented was 8% and 19% slower, session 9 run7) */
    const int DK = chunkpar_dk(a);
    const long long nvb = (a.dv + 31) / 32, slots = 2 * sms;
    const double s = cp::quad_scan_ok(DK, a.dv, heads, dev.cc_major, (int)sms) ? 0.5 : 1.0;
    int L = 2;
    double best = -1;
    for (int l = 2; l < nch; l++) {
        /* cost(l) >= 2 l (a wave each launch at least), so no l from best / 2 on is cheaper: the same
         * L as the whole range, in O(sqrt(nch)) steps. (The whole range, searched twice a call (the
         * workspace size and the launch plan), took 20 us a search at 2048 chunks on a development
         * host; at (1,4,32) T = 131072 ungated calls were 42-48 us longer than gated ones with it,
         * 11-20 us without; session 15 runs 4 and 7.) */
        if (best >= 0 && 2.0 * l >= best) break;
        const long long ns = (nch + l - 1) / l;
        const long long wm = (heads * (DK / 32 + nvb) * ns + slots - 1) / slots, wl = (heads * nvb * ns + slots - 1) / slots;
        const double cost = (double)(wm + wl) * l + s * (double)ns;
        if (best < 0 || cost < best) best = cost, L = l;
    }
    static const int wlen_env = [] {
        const char *e = getenv("VLA_CP_WLEN");
        return e && *e ? atoi(e) : 0;
    }();
    if (wlen_env >= 2 && wlen_env < nch) L = wlen_env;
    *bv = 32;
    *wlen = L;
    *wnseg = (nch + L - 1) / L;
}

int chunkpar_bv(const vlacu_args &a, const vlacu_device &dev) {
    /* Value columns a block of the S walk: 32 when that still gives every multiprocessor a block
     * (fewer shared loads per FMA), else 16 when that gives two, else 8: the walk is the
     * sequential part, and narrower blocks step faster. */
    const long long heads = (long long)a.B * a.H, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    const size_t b32 = chunkpar_walk32_smem(a);
    if (heads * ((a.dv + 31) / 32) >= sms && a.dv > 16 && b32 <= dev.smem_optin) return 32;
    return heads * ((a.dv + 15) / 16) >= 2 * sms ? 16 : 8;
}

extern "C" int vlacu_chunkpar_ok(int dk, int dv, int chunk, int refresh, const vlacu_device *dev) {
    vlacu_args a;
    memset(&a, 0, sizeof a);
    a.mech = VLACU_VLA, a.algo = VLACU_CHUNKED, a.dk = dk, a.dv = dv, a.chunk = chunk, a.refresh = refresh;
    return chunkpar_applies(a, *dev) ? 1 : 0;
}

/* Chunks per segment of the A part. A segment is one block: it inverts M once, then carries A
 * over its chunks (A_end = A0 - Z^T Z), so longer segments do fewer inversions (each costs about
 * r chunks' worth of the rest) but expose less parallelism. Picks the S (a power of two) that
 * minimises waves x (S + r), two blocks a multiprocessor. */
int chunkpar_seg(const vlacu_args &a, const vlacu_device &dev, int nch) {
    if (a.mech != VLACU_VLA) return 1; /* no A part: nothing to amortise */
    /* VLA_CP_SEG=S (development): S chunks a segment. (1,4,32) T = 8192 picks 2: 1 (512 blocks, three
     * a multiprocessor) was 12% slower, 4 was 50% slower (session 13 run 3) */
    static const int seg_env = [] {
        const char *e = getenv("VLA_CP_SEG");
        return e && *e ? atoi(e) : 0;
    }();
    if (seg_env >= 1) return seg_env < nch ? seg_env : (nch > 0 ? nch : 1);
    const double r = chunkpar_dk(a) == 64 ? 1.5 : 0.4;
    const long long heads = (long long)a.B * a.H, slots = 2LL * (dev.sm_count > 0 ? dev.sm_count : 1);
    int best = 1;
    double best_cost = 0;
    for (int S = 1;; S *= 2) {
        const long long blocks = heads * ((nch + S - 1) / S);
        const double cost = (double)((blocks + slots - 1) / slots) * (S + r);
        if (S == 1 || cost < best_cost) best = S, best_cost = cost;
        if (S >= nch) break;
    }
    return best;
}

/* apart_kernel's blocks a multiprocessor (its register cap) for nseg segments a head. */
int chunkpar_apart_minb(const vlacu_args &a, const vlacu_device &dev, int nseg) {
    const long long blocks = (long long)a.B * a.H * nseg, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    return chunkpar_dk(a) == 32 && dev.cc_major >= 8 && blocks > 2 * sms ? 3 : 2;
}

/* sfac_kernel's blocks a multiprocessor (its register cap) for nch chunks a head: as many as the
 * shared memory holds when the launch has more blocks than two a multiprocessor hold; else two
 * (128 registers, no spills: (1,4,32) T = 2048 DeltaNet 0.047 against 0.049 ms with the cap,
 * session 6 run1). */
int chunkpar_sfac_minb(const vlacu_args &a, const vlacu_device &dev, int nch) {
    const long long blocks = (long long)a.B * a.H * nch, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    return blocks > 2 * sms ? (chunkpar_dk(a) == 32 ? 4 : 3) : 2;
}

int chunkpar_gram_parts(int seg) {
    /* VLA_CP_GRAM_SUB=N (development): N chunks a gram_kernel block at most. At (1,4,32) T = 8192
     * (segments of 2 chunks) 1 was 1% slower than GRAM_SUB's 2 (session 13 run 3) */
    static const int sub = [] {
        const char *e = getenv("VLA_CP_GRAM_SUB");
        const int n = e && *e ? atoi(e) : 0;
        return n >= 1 ? n : cp::GRAM_SUB;
    }();
    return (seg + sub - 1) / sub;
}

cudaError_t launch_chunkpar(const cp_params &p, int bv, cudaStream_t st, const vlacu_aux *aux) {
    return chunkpar_dk(p.a) == 32 ? cp::run<32>(p, bv, st, aux) : cp::run<64>(p, bv, st, aux);
}

} // namespace vlacu
