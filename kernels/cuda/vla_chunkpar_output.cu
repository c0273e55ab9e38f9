/* The chunk-parallel form's outputs (vla_chunkpar.cuh describes the form), one block a chunk
 * from the chunk's start state X_j (the walk's, vla_chunkpar_walk.cu) and its factors:
 * O = Q~ X_j + tril(Q~ Al^T) (Y - W X_j). output_kernel in one launch after the walk;
 * output_split_kernel in two halves on small shapes (OUT_PRE beside the walk, OUT_FIN after it). */
#include "vla_chunkpar_tiles.cuh"

namespace vlacu {
namespace cp {

/* L2 prefetch: output_kernel asks the L2 cache for its X_j and Y as it starts, so their
 * memory latency overlaps the forming of Pm and Q~ - Pm W (they were fetched only after it). A hint:
 * nothing waits for it and no value changes. H200, gated, same bits: (8,16,64) T = 2048 1.217 / 1.216
 * against 1.227 / 1.230 ms, T = 32768 18.10 / 18.10 against 18.32 / 18.23 (fat build, in the same call;
 * git: 29d1270). The same kind of prefetch of the A part's next chunk, of the next output block's
 * inputs, and of the walk's P and Q some steps ahead was 0.5-5% slower (l2-prefetch-variants.patch
 * there). VLA_CP_OUT_PREFETCH=0 (development, compile time) turns it off. */
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

/* ---- cp_output: O = Q~ X_j + tril(Q~ Al^T) (Y - W X_j) = (Q~ - Pm W) X_j + Pm Y, Pm = tril(Q~ Al^T),
 * VT output columns at a time ---- */
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
 * dk = 64 form spilled more and DeltaNet at (8,16,64) T = 2048 ran 1% slower). */
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

template <int DK, int VT, bool LIN> kfn output_fn() { return output_kernel<DK, VT, LIN>; }
template <int DK, int VT, int MODE> kfn output_split_fn() { return output_split_kernel<DK, VT, MODE>; }
/* the forms run<DK> takes (vla_chunkpar.cu) */
template kfn output_fn<32, 32, false>();
template kfn output_fn<32, 64, false>();
template kfn output_fn<64, 32, false>();
template kfn output_fn<64, 64, false>();
template kfn output_fn<32, 32, true>();
template kfn output_fn<32, 64, true>();
template kfn output_fn<64, 32, true>();
template kfn output_fn<64, 64, true>();
template kfn output_split_fn<32, 32, OUT_PRE>();
template kfn output_split_fn<32, 64, OUT_PRE>();
template kfn output_split_fn<64, 32, OUT_PRE>();
template kfn output_split_fn<64, 64, OUT_PRE>();
template kfn output_split_fn<32, 32, OUT_FIN>();
template kfn output_split_fn<32, 64, OUT_FIN>();
template kfn output_split_fn<64, 32, OUT_FIN>();
template kfn output_split_fn<64, 64, OUT_FIN>();

} // namespace cp
} // namespace vlacu
