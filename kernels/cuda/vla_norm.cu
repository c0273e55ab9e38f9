/* The output normaliser shared by linear attention and VLA's normalised output, for the
 * algorithms that produce all outputs first (chunked, two-level, scan), as the CPU backend's
 * cpu_normalize_output: n_t = n_{t-1} + k~_t, o_t /= max(q~_t . n_t, eps) (vla) or
 * (q~_t . n_t + eps) (linear). Three launches: per block of NB tokens the sum of k~, an
 * exclusive prefix over the blocks (in double, which also gives n_out), then each block of
 * tokens from its prefix. */
#include "vla_kernels.cuh"

namespace vlacu {

#define NB VLACU_NORM_NB

__global__ void __launch_bounds__(VLACU_NT) norm_sums_kernel(const vlacu_args a, float *work, int nb) {
    const int bh = blockIdx.x / nb, blk = blockIdx.x % nb, b = bh / a.H, h = bh % a.H, dk = a.dk;
    const int ta = blk * NB, tb = ta + NB < a.T ? ta + NB : a.T;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        float s = 0.0f;
        for (int t = ta; t < tb; t++) {
            const float x = a.k[(((size_t)b * a.T + t) * a.H + h) * dk + i];
            s += a.elu1 ? elu1f(x) : x;
        }
        work[((size_t)bh * nb + blk) * dk + i] = s;
    }
}

/* One block per head: the exclusive prefix over the nb block sums of every column, in double.
 * Warp w takes a contiguous range of blocks, lane = column (coalesced): sum the range, exchange
 * the warps' totals, rewrite the range from its start. A single thread per column walking all nb
 * blocks was one memory latency a block (~1.3 ms at T = 131072). */
__global__ void __launch_bounds__(VLACU_NT) norm_scan_kernel(const vlacu_args a, float *work, int nb) {
    __shared__ double part[VLACU_NT / 32][32];
    const int bh = blockIdx.x, dk = a.dk, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = (nb + nw - 1) / nw, b0 = imin(warp * per, nb), b1 = imin(b0 + per, nb);
    float *wh = work + (size_t)bh * nb * dk;
    for (int i0 = 0; i0 < dk; i0 += 32) {
        const int i = i0 + lane;
        const bool on = i < dk;
        const double nin = on && a.n_in ? (double)a.n_in[(size_t)bh * dk + i] : 0.0; /* before n_out (may alias) */
        double s = 0.0;
        if (on) {
#pragma unroll 8
            for (int blk = b0; blk < b1; blk++) s += wh[(size_t)blk * dk + i];
        }
        part[warp][lane] = s;
        __syncthreads();
        double acc = nin;
        for (int w = 0; w < warp; w++) acc += part[w][lane];
        if (on)
            for (int blk = b0; blk < b1; blk += 8) { /* eight loads in flight, then their stores */
                float x[8];
#pragma unroll
                for (int u = 0; u < 8; u++) x[u] = blk + u < b1 ? wh[(size_t)(blk + u) * dk + i] : 0.0f;
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (blk + u < b1) {
                        wh[(size_t)(blk + u) * dk + i] = (float)acc;
                        acc += x[u];
                    }
            }
        if (on && warp == nw - 1 && a.n_out) a.n_out[(size_t)bh * dk + i] = (float)acc; /* the total */
        __syncthreads(); /* part is rewritten by the next columns */
    }
}

/* One block per (head, NB tokens), over the key columns 32 at a time: the tile of k~ and q~
 * [NB][32] is loaded coalesced, 32 threads run n along the tokens of their column (in float, as
 * the CPU backend) leaving q~_t[i] n_t[i] in place, then TPT threads a token sum those into
 * q~_t . n_t. Last, every output row of the block is divided by its denominator. */
__global__ void __launch_bounds__(VLACU_NT) norm_apply_kernel(const vlacu_args a, const float *work, int nb) {
    constexpr int TPT = VLACU_NT / NB, CPT = 32 / TPT, NE = NB * 32 / VLACU_NT; /* NB <= VLACU_NT */
    __shared__ float kt[NB][33], qt[NB][33];
    __shared__ float den[NB];
    const int bh = blockIdx.x / nb, blk = blockIdx.x % nb, b = bh / a.H, h = bh % a.H, dk = a.dk, dv = a.dv;
    const int ta = blk * NB, nt = imin(NB, a.T - ta), tid = threadIdx.x;
    const bool linear = a.mech == VLACU_LINEAR, elu = a.elu1 != 0;
    const float eps = (float)a.eps;
    const int my_t = tid / TPT, my_p = tid - my_t * TPT;
    float qn = 0.0f;
    for (int i0 = 0; i0 < dk; i0 += 32) {
        float kr[NE], qr[NE];
#pragma unroll
        for (int u = 0; u < NE; u++) {
            const int e = tid + VLACU_NT * u, t = e >> 5, i = i0 + (e & 31);
            const size_t r = ((size_t)b * a.T + ta + t) * a.H + h;
            const bool on = t < nt && i < dk;
            kr[u] = on ? a.k[r * dk + i] : 0.0f;
            qr[u] = on ? a.q[r * dk + i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NE; u++) {
            const int e = tid + VLACU_NT * u, t = e >> 5, c = e & 31;
            const bool on = t < nt && i0 + c < dk; /* padding stays 0 (elu1(0) would be 1) */
            kt[t][c] = on && elu ? elu1f(kr[u]) : kr[u];
            qt[t][c] = on && elu ? elu1f(qr[u]) : qr[u];
        }
        __syncthreads();
        if (tid < 32 && i0 + tid < dk) {
            float n = work[((size_t)bh * nb + blk) * dk + i0 + tid];
            for (int t = 0; t < nt; t++) {
                n += kt[t][tid];
                qt[t][tid] *= n;
            }
        }
        __syncthreads();
        float p = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++) p += qt[my_t][my_p * CPT + c];
        for (int o = TPT >> 1; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
        qn += p;
        __syncthreads(); /* the tiles are rewritten by the next columns */
    }
    if (my_p == 0) den[my_t] = linear ? qn + eps : fmaxf(qn, eps);
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    for (int t = warp; t < nt; t += nw) {
        float *o = a.o + (((size_t)b * a.T + ta + t) * a.H + h) * dv;
        const float d = den[t];
        for (int j = lane; j < dv; j += 32) o[j] /= d;
    }
}

cudaError_t launch_normalize(const vlacu_args &a, float *work, cudaStream_t st) {
    const int nb = (a.T + NB - 1) / NB;
    const unsigned BH = (unsigned)(a.B * a.H);
    VLACU_LAUNCH(norm_sums_kernel, BH * nb, VLACU_NT, 0, st, a, work, nb);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(norm_scan_kernel, BH, VLACU_NT, 0, st, a, work, nb);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    VLACU_LAUNCH(norm_apply_kernel, BH * nb, VLACU_NT, 0, st, a, (const float *)work, nb);
    return cudaGetLastError();
}

} // namespace vlacu
