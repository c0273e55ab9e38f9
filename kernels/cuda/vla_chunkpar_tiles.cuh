/* Device helpers of the chunk-parallel kernels (vla_chunkpar_*.cu; the form is described in
 * vla_chunkpar.cuh): the A part's product precision (aprec), development stamps (STAMP, PROF, the
 * timeline's tl_scope), row staging from global memory (stage_rows, async_rows, load_rows), row
 * normalisation (norm_rows), and the pieces more than one kernel file takes. All inline: each
 * kernel file compiles its own copy into its kernels. */
#ifndef VLA_CHUNKPAR_TILES_CUH
#define VLA_CHUNKPAR_TILES_CUH

#include "vla_chunkpar.cuh"

namespace vlacu {
namespace cp {

/* VLA_CP_A3: the A-part product groups taken in 3xTF32 instead of 4xTF32 (the small small term
 * dropped, the rounded add after every 8-deep step kept; vla_mma.cuh): bit 1 the Gram sums, 2 U A0
 * (and K A0), 4 the Cholesky's and Z's products, 8 Z^T Z, 16 the u-given form's K Z^T and
 * tril(K Z^T) Z, whose difference cancels (3xTF32 there broke the 1e-5 bound: vla_mma.cuh, mmb).
 * Default 14. None of 2, 4, 8 forms that difference: the UK form takes a_t from Z's rows, and
 * A_end = A0 - Z^T Z is as accurate as Z^T Z relative to A0. H200, gated, against all 4xTF32
 * (git: 71566c7, rounds 1 / 2, ms): (1,4,32) T = 2048 0.0500 / 0.0501 against 0.0505 / 0.0506,
 * T = 131072 1.204 / 1.207 against 1.221 / 1.222, (8,16,64) T = 2048 1.052 / 1.054 against 1.070 / 1.070,
 * T = 32768 15.50 / 15.53 against 15.83 / 15.84. test_cuda with 31 (every group), over the 60 chunked
 * VLA rows against float64: outputs' errors 0.99-1.56x 4xTF32's (the largest 9.9e-6, lambda0 = 1e-3,
 * tol 2e-4), A_out's 1.0-2.2x (the largest 3.5e-6, tol 1e-5). 1 (the Gram sums) took gram_kernel<32>
 * from 70 to 89 registers and (1,4,32) T = 2048 to 0.0553 ms. 0: every group 4xTF32. */
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

/* dst[t * ld + i] <- src[t * stride + i] (elu+1 applied when elu1) for t < c, i < cols, zero
 * elsewhere in R x COLS, R * COLS / NT entries a thread, every load issued before any store.
 * (Written as one loop, each shared store waited for its global load in turn, the compiler not
 * knowing that the two never overlap: 16 memory latencies a chunk, most of the 18.5k cycles that
 * loading U and K took at dk = 64.) Each thread keeps one column and steps rows by NT / COLS from
 * one base pointer (a pointer per load, as a generic staging lambda gives, spilled registers in
 * apart_kernel). No barrier. */
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
    /* 16-byte loads and stores where the rows allow it (as async_rows), on 64 columns:
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
     * aligned): four columns a thread, a quarter of the copy instructions. A group of
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

/* Loads rows ts .. ts+c-1 of one head of a [B, T, H, dk] tensor into dst [C][ld] (zero rows past
 * c, zero columns past dk), elu+1 applied when elu1. No barrier. */
template <int DK>
__device__ __forceinline__ void load_rows(const float *src, const vlacu_args &a, int b, int h, int ts, int c, bool elu1,
                                          float *dst, int ld) {
    stage_rows<C, DK>(dst, ld, src + (((size_t)b * a.T + ts) * a.H + h) * a.dk, (size_t)a.H * a.dk, c, a.dk, elu1);
}

/* Row r of Y[C][ld] (DK used columns) <- scale * x / max(||x||, eps), x = pre(r) * row r of X (Y may
 * be X), and second(r, i, y) for each new entry y (a copy elsewhere, or nothing). A warp takes rows warp, warp + 8, .. all at
 * once: their loads, the 8 sums' shuffles and the divisions are independent, so they overlap,
 * where a row at a time was a chain of 8 x (load, 5 shuffles, sqrt, division): about 3k cycles a
 * call at dk = 32 (apart_kernel's phase 9 was nothing else in its profiles). The same sums
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
/* in place, no prescale (x 1.0f: the same bits as a normalisation without the prescale) */
template <int DK, typename F> __device__ __forceinline__ void norm_rows(float *X, int ld, float eps, float scale, F second) {
    norm_rows_from<DK>(X, X, ld, eps, scale, [](int) { return 1.0f; }, second);
}
template <int DK> __device__ __forceinline__ void norm_rows(float *X, int ld, float eps, float scale) {
    norm_rows<DK>(X, ld, eps, scale, [](int, int, float) {});
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

/* Entry (i, j) of M_0 = A_0^{-1}: A_in^{-1}, or lambda0 I as the inverse of the float A_0 = I / lambda0
 * (the identity on padded coordinates). */
__device__ __forceinline__ double m0_entry(const cp_params &P, int bh, int i, int j) {
    const int dk = P.a.dk;
    if (i >= dk || j >= dk) return i == j ? 1.0 : 0.0;
    if (P.Minv) return P.Minv[(size_t)bh * dk * dk + i * dk + j];
    return i == j ? 1.0 / (double)(float)(1.0 / P.a.lambda0) : 0.0;
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

} // namespace cp
} // namespace vlacu

#endif
