/* Causal softmax attention as a fused online softmax (flash-attention style): no T x T matrix is
 * stored. Same arithmetic as cpu_softmax.c: scores scaled, running max m and sum l per row, a NaN
 * score makes its row NaN (never finite garbage), a NaN in a later v never reaches an earlier
 * output, o = acc / l. Two forms:
 *   - softmax_tc_kernel (sm_80+, dk and dv <= 64; below): 3xTF32 tensor-core tiles, 128 query
 *     rows a block, scores and P in registers;
 *   - softmax_kernel (every other shape, and sm_75): one block per tile of `tile` query rows of
 *     one head; key/value tiles stream through shared memory; FP32 FMA products.
 *     Shared memory (floats): Q [tile][ld dk], K [tile][ld dk], V [tile][ld dv], P [tile][ld tile],
 *     O [tile][ld dv], m [tile], l [tile]. */
#include "vla_kernels.cuh"
#include "vla_mma.cuh"

#include <stdlib.h>

namespace vlacu {

static size_t softmax_smem(int dk, int dv, int tile) {
    const size_t f = (size_t)tile * ld_of(dk) * 2 + (size_t)tile * ld_of(dv) * 2 + (size_t)tile * ld_of(tile) +
                     2 * (size_t)tile;
    return f * sizeof(float);
}

__global__ void __launch_bounds__(VLACU_NT) softmax_kernel(const vlacu_args a, int tile) {
    VLACU_DYNSMEM(smem);
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv;
    const int nqt = (T + tile - 1) / tile;
    const int bh = blockIdx.x / nqt, qt = blockIdx.x % nqt, b = bh / H, h = bh % H;
    const int ldk = ld_of(dk), ldv = ld_of(dv), ldt = ld_of(tile);
    float *Qs = (float *)smem, *Ks = Qs + (size_t)tile * ldk, *Vs = Ks + (size_t)tile * ldk;
    float *Ps = Vs + (size_t)tile * ldv, *Os = Ps + (size_t)tile * ldt, *ms = Os + (size_t)tile * ldv;
    float *ls = ms + tile;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float scale = (float)a.scale;

    const int i0 = qt * tile, i1 = i0 + tile < T ? i0 + tile : T, nq = i1 - i0;
    const size_t rq = ((size_t)b * T + i0) * H + h, sk = (size_t)H * dk, sv = (size_t)H * dv;
    load_raw(rows_plain(a.q + rq * dk, sk, dk, ROW_COPY, 1.0f, 1.0f, Qs, ldk), nq);
    for (int e = threadIdx.x; e < nq * dv; e += blockDim.x) {
        const int r = e / dv, j = e - r * dv;
        Os[(size_t)r * ldv + j] = 0.0f;
    }
    for (int r = threadIdx.x; r < nq; r += blockDim.x) ms[r] = -INFINITY, ls[r] = 0.0f;

    for (int j0 = 0; j0 < i1; j0 += tile) {
        const int j1 = j0 + tile < i1 ? j0 + tile : i1, nk = j1 - j0;
        const size_t rk = ((size_t)b * T + j0) * H + h;
        __syncthreads(); /* the previous tile's P V is done with Ks, Vs, Ps */
        load_raw(rows_plain(a.k + rk * dk, sk, dk, ROW_COPY, 1.0f, 1.0f, Ks, ldk), nk);
        load_raw(rows_plain(a.v + rk * dv, sv, dv, ROW_COPY, 1.0f, 1.0f, Vs, ldv), nk);
        __syncthreads();
        gemm<float, false, true>(nq, nk, dk, scale, Qs, ldk, Ks, ldk, 0.0f, Ps, ldt, ep_none());
        __syncthreads();
        for (int r = warp; r < nq; r += nw) { /* one warp per query row */
            float *pr = Ps + (size_t)r * ldt;
            int last = i0 + r - j0 + 1; /* causal: keys j <= i */
            if (last > nk) last = nk;
            if (last <= 0) {
                for (int c = lane; c < nk; c += 32) pr[c] = 0.0f;
                continue; /* uniform in the warp */
            }
            float mx = -INFINITY;
            int nan = 0;
            for (int c = lane; c < last; c += 32) {
                mx = fmaxf(mx, pr[c]);
                nan |= isnan(pr[c]) ? 1 : 0;
            }
            mx = fmaxf(warp_max(mx), ms[r]);
            nan = warp_sum(nan);
            if (nan) mx = NAN;
            const float corr = expf(ms[r] - mx);
            float sum = 0.0f;
            for (int c = lane; c < nk; c += 32) {
                const float p = c < last ? expf(pr[c] - mx) : 0.0f;
                pr[c] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            float *orow = Os + (size_t)r * ldv;
            for (int j = lane; j < dv; j += 32) orow[j] *= corr;
            __syncwarp(); /* every lane has read ms[r] before lane 0 writes it */
            if (lane == 0) {
                ls[r] = ls[r] * corr + sum;
                ms[r] = mx;
            }
        }
        __syncthreads();
        if (j1 <= i0 + 1) {
            gemm<float, false, false>(nq, dv, nk, 1.0f, Ps, ldt, Vs, ldv, 1.0f, Os, ldv, ep_none());
        } else { /* the diagonal tile: each row over the keys it sees only, so that a NaN in a later v
                  * cannot reach an earlier output through 0 x NaN (as the CPU backend does) */
            for (int e = threadIdx.x; e < nq * dv; e += blockDim.x) {
                const int r = e / dv, j = e - r * dv;
                const int last = i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk;
                float acc = Os[(size_t)r * ldv + j];
                for (int c = 0; c < last; c++) acc += Ps[(size_t)r * ldt + c] * Vs[(size_t)c * ldv + j];
                Os[(size_t)r * ldv + j] = acc;
            }
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nq * dv; e += blockDim.x) {
        const int r = e / dv, j = e - r * dv;
        a.o[(rq + (size_t)r * H) * dv + j] = Os[(size_t)r * ldv + j] * (1.0f / ls[r]);
    }
}

/* ---- the tensor-core form (sm_80+, dk and dv <= 64) ----
 * One block = 8 warps = BQ = 128 query rows of one head, 16 rows a warp, so that a warp owns whole
 * rows: the scores S = Q K^T of its 16 rows x BK = 64 keys stay in registers in the mma
 * accumulator layout (lane (g, t): rows g and g + 8, columns 2t and 2t + 1 of each 8-column tile),
 * row maxima and sums are quad shuffles, and P goes straight back into the tensor core as the
 * left operand of P V: the A fragment wants columns t and t + 4 of each 8-key block, the lane
 * holds 2t and 2t + 1, so the keys of a block are taken in the order (0 2 4 6 1 3 5 7) for P and
 * V alike (a sum does not care), and no P tile goes through shared memory. Products are 3xTF32
 * as in vla_mma.cuh (each operand split in big and small tf32 parts by its 3xTF32 split,
 * SPLIT_OPS_S; every 8-deep step added to the float32 accumulators on the CUDA cores). Scores are kept in log2 units (scale log2(e) folded
 * in), so p = exp2(s - m). Key tiles arrive by cp.async into two buffers: the next tile loads
 * while this one computes. Blocks start with the last query tiles (the longest rows). With few
 * query tiles (softmax_tc_nsplit: fewer blocks than two a multiprocessor) each tile's key tiles
 * are split into parts, blocks of their own, combined by softmax_combine_kernel (flash-decoding's
 * split): at (1,4,32) T = 2048 the last query tile walked 32 key tiles alone, 0.178 ms; in 5
 * parts 0.081 ms.
 * Non-finite values: a NaN score makes its row NaN (the running max propagates NaN); a NaN or
 * infinite v in a tile that some row must not see (the diagonal tiles) would reach that row
 * through 0 x NaN in the product, so such a tile takes a per-key FMA path that skips the keys
 * each row must not see (as the CPU backend does).
 * Shared memory (floats): Q [BQ][DK + 4], K [2][BK][DK + 4], V [2][BK][DV + 4] (+ 16 ints): a
 * leading dimension of 4 (mod 32) keeps every fragment load free of bank conflicts; 104 KiB at
 * dk = dv = 64, two blocks a multiprocessor. */
namespace smx {
using cp::NT;
constexpr int BQ = 128, BK = 64;

template <int DK, int DV> struct tc_smem {
    static constexpr int ldk = DK + 4, ldv = DV + 4;
    static constexpr size_t bytes = ((size_t)BQ * ldk + 2 * (size_t)BK * (ldk + ldv)) * 4 + 16 * sizeof(int);
};

/* dst[r][i] <- src[r * stride + i] for r < nrows, i < d; zero elsewhere in R x D. cp.async on the
 * device (wait with async_wait, then a barrier), plain loads in the emulator. No barrier. */
template <int R, int D> __device__ __forceinline__ void load_tile(float *dst, int ld, const float *src, size_t stride, int nrows, int d) {
    constexpr int PER = R * D / NT, RSTEP = NT / D;
    static_assert(NT % D == 0 && PER * NT == R * D, "tile must split over NT threads");
    const int i = (int)threadIdx.x % D, r0 = (int)threadIdx.x / D;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int r = r0 + RSTEP * u;
        const bool in = r < nrows && i < d;
#if !defined(VLA_CUDA_EMU)
        const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + r * ld + i);
        const float *ga = in ? src + (size_t)r * stride + i : src; /* 0 bytes read: zero fill */
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(ga), "r"(in ? 4 : 0) : "memory");
#else
        dst[r * ld + i] = in ? src[(size_t)r * stride + i] : 0.0f;
#endif
    }
}
__device__ __forceinline__ void async_wait() {
#if !defined(VLA_CUDA_EMU)
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

/* max that keeps a NaN from either side */
__device__ __forceinline__ float nanmax(float x, float y) { return (x != x || x > y) ? x : y; }

/* nsplit > 1: the block takes part sp of its query tile's key tiles and writes its unnormalised O
 * with the rows' m and l to part ([nqt][BH][nsplit][BQ][DV + 2], row-major) for
 * softmax_combine_kernel; nsplit = 1: o itself. */
template <int DK, int DV> __global__ void __launch_bounds__(NT, 2) softmax_tc_kernel(const vlacu_args a, int nsplit, float *part) {
#if VLA_CP_TC
    using cp::mma_split;
    using cp::split_tf32;
    VLACU_DYNSMEM(smem);
    typedef tc_smem<DK, DV> S;
    constexpr int ldk = S::ldk, ldv = S::ldv, NDV = DV / 8;
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv, BH = a.B * a.H;
    const int nqt = (T + BQ - 1) / BQ;
    const int qt = nqt - 1 - (int)blockIdx.x / (BH * nsplit), rem = (int)blockIdx.x % (BH * nsplit);
    const int sp = rem / BH, bh = rem % BH, b = bh / H, h = bh % H;
    float *Qs = (float *)smem, *Ks0 = Qs + BQ * ldk, *Vs0 = Ks0 + 2 * BK * ldk;
    int *vbad = (int *)(Vs0 + 2 * BK * ldv); /* [2 stages][8 warps] */
    const int q0 = qt * BQ, kend = imin(q0 + BQ, T); /* keys 0 .. kend - 1 */
    const int ntile = (kend + BK - 1) / BK, tpp = (ntile + nsplit - 1) / nsplit;
    /* this block's key tiles; none for a part past the tile's keys: then m = -inf, l = 0, O = 0 go
     * to the combine as they are (the loads below read nothing) */
    const int jt0 = sp * tpp, jt1 = imin(jt0 + tpp, ntile);
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const size_t sk = (size_t)H * dk, sv = (size_t)H * dv;
    const size_t head0 = (size_t)b * T * H + h; /* row (b, 0, h) */
    load_tile<BQ, DK>(Qs, ldk, a.q + (head0 + (size_t)q0 * H) * dk, sk, imin(BQ, T - q0), dk);
    const size_t k0row = (size_t)imin(jt0, ntile - 1) * BK; /* an address inside the tensor even for no tile */
    load_tile<BK, DK>(Ks0, ldk, a.k + (head0 + k0row * H) * dk, sk, imin(BK, kend - jt0 * BK), dk);
    load_tile<BK, DV>(Vs0, ldv, a.v + (head0 + k0row * H) * dv, sv, imin(BK, kend - jt0 * BK), dv);
    const float c2 = (float)(a.scale * 1.4426950408889634074); /* scale log2(e) */
    const int wr0 = q0 + 16 * warp;                          /* the warp's first query row */
    const int row[2] = {wr0 + g, wr0 + g + 8};               /* this lane's two rows */
    float o[NDV * 4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < NDV * 4; e++) o[e] = 0.0f;
    for (int jt = jt0; jt < jt1; jt++) {
        const int st = (jt - jt0) & 1, j0 = jt * BK;
        const float *Ks = Ks0 + st * BK * ldk, *Vs = Vs0 + st * BK * ldv;
        async_wait();
        __syncthreads(); /* tile jt visible; every warp is done with the other buffers */
        if (jt + 1 < jt1) {
            const int j1 = j0 + BK, n1 = imin(BK, kend - j1);
            load_tile<BK, DK>(Ks0 + (st ^ 1) * BK * ldk, ldk, a.k + (head0 + (size_t)j1 * H) * dk, sk, n1, dk);
            load_tile<BK, DV>(Vs0 + (st ^ 1) * BK * ldv, ldv, a.v + (head0 + (size_t)j1 * H) * dv, sv, n1, dv);
        }
        const bool diag = j0 + BK - 1 > q0; /* some row of the block must not see some key of the tile */
        bool slow = false;
        if (diag) { /* a non-finite v here takes the masked path (block-uniform) */
            int bad = 0;
            for (int e = (int)threadIdx.x; e < BK * DV; e += NT) bad |= isfinite(Vs[(e / DV) * ldv + e % DV]) ? 0 : 1;
            bad = warp_sum(bad);
            if (lane == 0) vbad[st * 8 + warp] = bad;
            __syncthreads();
#pragma unroll
            for (int w = 0; w < 8; w++) slow |= vbad[st * 8 + w] != 0;
        }
        if (j0 > wr0 + 15) continue; /* no row of this warp sees a key of the tile (warp-uniform) */
        /* S = Q K^T, 16 x 64 a warp: 8 tiles of 16 x 8 */
        float s[32];
#pragma unroll
        for (int e = 0; e < 32; e++) s[e] = 0.0f;
#pragma unroll
        for (int k0 = 0; k0 < DK; k0 += 8) {
            unsigned ab[4], as[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                split_tf32<cp::SPLIT_OPS_S>(Qs[(16 * warp + g + (q & 1) * 8) * ldk + k0 + t + (q >> 1) * 4], ab[q], as[q]);
#pragma unroll
            for (int ni = 0; ni < 8; ni++) {
                unsigned bb[2], bs[2];
#pragma unroll
                for (int q = 0; q < 2; q++) split_tf32<cp::SPLIT_OPS_S>(Ks[(ni * 8 + g) * ldk + k0 + t + q * 4], bb[q], bs[q]);
                mma_split(s + ni * 4, ab, as, bb, bs);
            }
        }
        /* scale, causal mask (key <= row), row max over the quad, online update */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const int key = j0 + (e >> 2) * 8 + 2 * t + (e & 1), hr = (e >> 1) & 1;
            const float x = key <= row[hr] ? s[e] * c2 : -INFINITY;
            s[e] = x;
            mx[hr] = nanmax(mx[hr], x);
        }
        float corr[2], msafe[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = nanmax(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = nanmax(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            /* a row that has seen no key yet (a later part of the key range) keeps m = -inf:
             * then corr and p use 0 in its place (0 and exp2(-inf) = 0), not -inf - -inf */
            const float mn = nanmax(m[hr], mx[hr]);
            msafe[hr] = mn == -INFINITY ? 0.0f : mn;
            corr[hr] = exp2f(m[hr] - msafe[hr]);
            m[hr] = mn;
        }
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const float p = exp2f(s[e] - msafe[(e >> 1) & 1]);
            s[e] = p;
            ls[(e >> 1) & 1] += p;
        }
#pragma unroll
        for (int hr = 0; hr < 2; hr++) l[hr] = l[hr] * corr[hr] + ls[hr];
#pragma unroll
        for (int e = 0; e < NDV * 4; e++) o[e] *= corr[(e >> 1) & 1];
        if (!slow) {
            /* O += P V: key block kb, its keys in the order 2t, 2t + 1 -> slots t, t + 4 */
#pragma unroll
            for (int kb = 0; kb < 8; kb++) {
                unsigned ab[4], as[4];
                split_tf32<cp::SPLIT_OPS_S>(s[kb * 4 + 0], ab[0], as[0]); /* row g,     key 2t     */
                split_tf32<cp::SPLIT_OPS_S>(s[kb * 4 + 2], ab[1], as[1]); /* row g + 8, key 2t     */
                split_tf32<cp::SPLIT_OPS_S>(s[kb * 4 + 1], ab[2], as[2]); /* row g,     key 2t + 1 */
                split_tf32<cp::SPLIT_OPS_S>(s[kb * 4 + 3], ab[3], as[3]); /* row g + 8, key 2t + 1 */
                const float *v0 = Vs + (kb * 8 + 2 * t) * ldv;
#pragma unroll
                for (int nd = 0; nd < NDV; nd++) {
                    unsigned bb[2], bs[2];
                    split_tf32<cp::SPLIT_OPS_S>(v0[nd * 8 + g], bb[0], bs[0]);
                    split_tf32<cp::SPLIT_OPS_S>(v0[ldv + nd * 8 + g], bb[1], bs[1]);
                    mma_split(o + nd * 4, ab, as, bb, bs);
                }
            }
        } else {
            /* a non-finite v in a diagonal tile: key by key, each row only over the keys it sees */
#pragma unroll 1
            for (int c = 0; c < BK; c++) {
                const int src = (lane & ~3) | ((c & 7) >> 1);
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const float p = __shfl_sync(0xffffffffu, s[(c >> 3) * 4 + 2 * hr + (c & 1)], src);
                    if (j0 + c <= row[hr])
#pragma unroll
                        for (int nd = 0; nd < NDV; nd++)
#pragma unroll
                            for (int q = 0; q < 2; q++) o[nd * 4 + 2 * hr + q] += p * Vs[c * ldv + nd * 8 + 2 * t + q];
                }
            }
        }
    }
    async_wait(); /* (a part with no key tile left its zero-fill copies in flight) */
    /* o / l, l summed over the quad */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
    }
    if (nsplit > 1) { /* the part's O, m, l; rows relative to the query tile */
        float *pg = part + (((size_t)qt * BH + bh) * nsplit + sp) * BQ * (DV + 2);
#pragma unroll
        for (int e = 0; e < NDV * 4; e++) {
            const int hr = (e >> 1) & 1, col = (e >> 2) * 8 + 2 * t + (e & 1);
            pg[(size_t)(row[hr] - q0) * (DV + 2) + col] = o[e];
        }
        if (t == 0)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                pg[(size_t)(row[hr] - q0) * (DV + 2) + DV] = m[hr];
                pg[(size_t)(row[hr] - q0) * (DV + 2) + DV + 1] = l[hr];
            }
        return;
    }
#pragma unroll
    for (int e = 0; e < NDV * 4; e++) {
        const int hr = (e >> 1) & 1, r = row[hr], col = (e >> 2) * 8 + 2 * t + (e & 1);
        if (r < T && col < dv) a.o[(head0 + (size_t)r * H) * dv + col] = o[e] * (1.0f / l[hr]);
    }
#else
    (void)a, (void)nsplit, (void)part; /* never launched: softmax_tc_ok() */
#endif
}

/* [nqt x BH]: o from the nsplit parts of each row, m = max m_i, l = sum l_i 2^(m_i - m),
 * o = sum O_i 2^(m_i - m) / l (a NaN m_i gives a NaN row; a part that saw none of a row's keys
 * has m_i = -inf, l_i = 0, O_i = 0 and weight 0). */
template <int DV> __global__ void __launch_bounds__(NT) softmax_combine_kernel(const vlacu_args a, int nsplit, const float *part) {
    const int T = a.T, H = a.H, dv = a.dv, BH = a.B * a.H;
    const int qt = (int)blockIdx.x / BH, bh = (int)blockIdx.x % BH, b = bh / H, h = bh % H, q0 = qt * BQ;
    const int nq = imin(BQ, T - q0);
    const float *pp = part + ((size_t)qt * BH + bh) * nsplit * BQ * (DV + 2);
    const size_t head0 = (size_t)b * T * H + h;
    for (int e = (int)threadIdx.x; e < nq * dv; e += NT) {
        const int r = e / dv, col = e - r * dv;
        float m = -INFINITY;
        for (int i = 0; i < nsplit; i++) m = nanmax(m, pp[((size_t)i * BQ + r) * (DV + 2) + DV]);
        float l = 0.0f, o = 0.0f;
        for (int i = 0; i < nsplit; i++) {
            const float *pr = pp + ((size_t)i * BQ + r) * (DV + 2);
            const float w = exp2f(pr[DV] - m);
            l += pr[DV + 1] * w;
            o += pr[col] * w;
        }
        a.o[(head0 + (size_t)(q0 + r) * H) * dv + col] = o / l;
    }
}
} // namespace smx

static std::atomic<size_t> softmax_smem_set[64];

size_t softmax_static_smem() {
    static const size_t s = static_smem_of((const void *)softmax_kernel, 1024);
    return s;
}

int softmax_pick_tile(int dk, int dv, size_t budget, size_t *smem_bytes) {
    for (int tile = 64; tile >= 4; tile /= 2) {
        const size_t s = softmax_smem(dk, dv, tile);
        if (s <= budget) {
            *smem_bytes = s;
            return tile;
        }
    }
    return 0;
}

/* Whether the tensor-core form runs this call: dk, dv <= 64, and the kernel as loaded was built for
 * sm_80+ (on an sm_8x device a fat binary of sm_75 and sm_90 code runs a JIT of compute_75 PTX,
 * where the kernel is empty); VLA_SOFTMAX_TC=0 (development, A/B) turns it off. */
static std::atomic<int> softmax_tc_known[64]; /* per device: 0 unknown, 1 built for sm_80+, 2 not */
static bool softmax_tc_ok(const vlacu_args &a, const vlacu_device &dev) {
    static const bool env_off = [] {
        const char *e = getenv("VLA_SOFTMAX_TC");
        return e && e[0] == '0';
    }();
    if (env_off || a.dk > 64 || a.dv > 64 || smx::tc_smem<64, 64>::bytes > dev.smem_optin) return false;
#ifdef VLA_CUDA_EMU
    return VLA_CP_TC != 0;
#else
    if (dev.cc_major < 8) return false;
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= 64) {
        (void)cudaGetLastError();
        return false;
    }
    int k = softmax_tc_known[d].load(std::memory_order_relaxed);
    if (k == 0) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, (const void *)smx::softmax_tc_kernel<64, 64>) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        k = fa.ptxVersion >= 80 ? 1 : 2;
        softmax_tc_known[d].store(k, std::memory_order_relaxed);
    }
    return k == 1;
#endif
}

static std::atomic<size_t> softmax_tc_smem_set[4][64];

/* Parts a query tile's keys are split into (1: none). With few query tiles a head and few heads
 * (a short sequence, or one long one with 4 heads), the blocks leave multiprocessors idle and
 * the last query tile walks every key tile alone: then up to 2 blocks a multiprocessor over all
 * tiles, at least 4 key tiles a part. */
static int softmax_tc_nsplit(const vlacu_args &a, const vlacu_device &dev) {
    const long long nqt = (a.T + smx::BQ - 1) / smx::BQ, blocks = nqt * a.B * a.H;
    const long long slots = 2LL * (dev.sm_count > 0 ? dev.sm_count : 1), ntile = (a.T + smx::BK - 1) / smx::BK;
    long long n = (slots + blocks - 1) / blocks, most = ntile / 4;
    if (n > most) n = most;
    return n > 1 ? (int)n : 1;
}

int softmax_tc_plan(const vlacu_args &a, const vlacu_device &dev, size_t *part_bytes) {
    *part_bytes = 0;
    if (!softmax_tc_ok(a, dev)) return 0;
    const int n = softmax_tc_nsplit(a, dev);
    if (n > 1) {
        const size_t nqt = (size_t)((a.T + smx::BQ - 1) / smx::BQ), dvp = a.dv <= 32 ? 32 : 64;
        *part_bytes = nqt * (size_t)a.B * a.H * n * smx::BQ * (dvp + 2) * sizeof(float);
    }
    return n;
}

template <int DK, int DV> static cudaError_t launch_tc(const vlacu_args &a, int slot, int nsplit, float *part, cudaStream_t st) {
    typedef smx::tc_smem<DK, DV> S;
    void (*const kern)(const vlacu_args, int, float *) = smx::softmax_tc_kernel<DK, DV>;
    const cudaError_t e = raise_smem_limit((const void *)kern, softmax_tc_smem_set[slot], S::bytes);
    if (e != cudaSuccess) return e;
    const unsigned nqt = (unsigned)((a.T + smx::BQ - 1) / smx::BQ), BH = (unsigned)(a.B * a.H);
    VLACU_LAUNCH(kern, nqt * BH * (unsigned)nsplit, smx::NT, S::bytes, st, a, nsplit, part);
    if (nsplit > 1) {
        const cudaError_t e2 = cudaGetLastError();
        if (e2 != cudaSuccess) return e2;
        void (*const comb)(const vlacu_args, int, const float *) = smx::softmax_combine_kernel<DV>;
        VLACU_LAUNCH(comb, nqt * BH, smx::NT, 0, st, a, nsplit, (const float *)part);
    }
    return cudaGetLastError();
}

cudaError_t launch_softmax(const vlacu_args &a, int tile, size_t smem_bytes, int nsplit,
                           float *part, cudaStream_t st) {
    if (nsplit > 0) {
        if (a.dk <= 32) return a.dv <= 32 ? launch_tc<32, 32>(a, 0, nsplit, part, st) : launch_tc<32, 64>(a, 1, nsplit, part, st);
        return a.dv <= 32 ? launch_tc<64, 32>(a, 2, nsplit, part, st) : launch_tc<64, 64>(a, 3, nsplit, part, st);
    }
    const cudaError_t e = raise_smem_limit((const void *)softmax_kernel, softmax_smem_set, smem_bytes);
    if (e != cudaSuccess) return e;
    const unsigned nqt = (unsigned)((a.T + tile - 1) / tile);
    VLACU_LAUNCH(softmax_kernel, nqt * (unsigned)(a.B * a.H), VLACU_NT, smem_bytes, st, a, tile);
    return cudaGetLastError();
}

} // namespace vlacu
