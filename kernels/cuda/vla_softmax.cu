/* Causal softmax attention as a fused online softmax (flash-attention style): one block per
 * tile of `tile` query rows of one head; key/value tiles stream through shared memory; no
 * T x T matrix is stored. Same arithmetic as cpu_softmax.c: scores scaled, running max m and
 * sum l per row, a NaN score makes its row NaN (never finite garbage), o = acc / l.
 *
 * Shared memory (floats): Q [tile][ld dk], K [tile][ld dk], V [tile][ld dv], P [tile][ld tile],
 * O [tile][ld dv], m [tile], l [tile]. */
#include "vla_kernels.cuh"

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
        gemm<float, false, false>(nq, dv, nk, 1.0f, Ps, ldt, Vs, ldv, 1.0f, Os, ldv, ep_none());
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nq * dv; e += blockDim.x) {
        const int r = e / dv, j = e - r * dv;
        a.o[(rq + (size_t)r * H) * dv + j] = Os[(size_t)r * ldv + j] * (1.0f / ls[r]);
    }
}

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

cudaError_t launch_softmax(const vlacu_args &a, int tile, size_t smem_bytes, cudaStream_t st) {
    const cudaError_t e = raise_smem_limit((const void *)softmax_kernel, softmax_smem_set, smem_bytes);
    if (e != cudaSuccess) return e;
    const unsigned nqt = (unsigned)((a.T + tile - 1) / tile);
    VLACU_LAUNCH(softmax_kernel, nqt * (unsigned)(a.B * a.H), VLACU_NT, smem_bytes, st, a, tile);
    return cudaGetLastError();
}

} // namespace vlacu
