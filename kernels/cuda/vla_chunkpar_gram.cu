/* The chunk-parallel form's Gram prefix (VLA with more than one segment a head; vla_chunkpar.cuh
 * describes the form): cp_gram sums U^T U over parts of each segment's chunks, cp_prefix turns the
 * parts into M_g = A_0^{-1} + the Gram sums of the segments before g, one slot a segment, from which
 * each A-part block (vla_chunkpar_factors.cu) inverts its segment's starting A. */
#include "vla_chunkpar_tiles.cuh"

namespace vlacu {
namespace cp {

/* ---- cp_gram: the Gram sum U^T U of part p of segment g's chunks (g < nseg - 1) into Gp. A
 * segment's chunks are split over gparts blocks (at most GRAM_SUB chunks each): each chunk is a
 * row load, a normalisation and a 64-deep product behind a barrier, several microseconds of
 * latency (one block a segment: 70 us for segments of 8 chunks at (1,4,32) T = 32768); the next
 * chunk's rows are in flight (two buffers) while one is normalised and multiplied. ---- */
/* gram_kernel<64> capped for four blocks a multiprocessor (64 registers, 4 bytes spill; 80 and 8
 * bytes without the cap held three): the kernel 47-48 us against 48-49 serialized at (8,16,64)
 * T = 2048, the forward 1.0799 / 1.0727 against 1.0805 / 1.0803 ms gated. The cap (VLA_CP_GRAM_MINB,
 * development) is the register budget alone: 34 KiB of shared memory a block holds six. */
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

template <int DK> kfn gram_fn() { return gram_kernel<DK>; }
template <int DK> kfn prefix_fn() { return prefix_kernel<DK>; }
template kfn gram_fn<32>();
template kfn gram_fn<64>();
template kfn prefix_fn<32>();
template kfn prefix_fn<64>();

} // namespace cp
} // namespace vlacu
