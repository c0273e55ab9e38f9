/* The nn ops' kernels (vla/nn.h): the host side is backends/cuda/cuda_nn.c, the C interface the
 * vlacu_nn_* functions of vla_cuda.h. The CPU backend (backends/cpu/cpu_nn.c) is the reference:
 * each kernel computes what its CPU loop computes, in the same precision (sums in double where the
 * CPU sums in double), and several in the same order, so that their results agree to the last
 * bit where the arithmetic allows (the embedding scatter, the position gradient, AdamW).
 *
 * Determinism: no floating-point atomics anywhere. A reduction is split in a way that depends on
 * the sizes alone (not on the device or on timing), each part is summed by one thread or by a
 * fixed shuffle tree, and the parts are added in order: the same inputs give the same bits on
 * every run. The only atomics are the integer ones that record a bad token or target.
 *
 * Everything is enqueued on the caller's stream and returns at once; no kernel needs the host
 * between launches, so a training step made of these calls can be captured into a CUDA graph. */
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "vla_cuda.h"

/* Self-contained (vla_common.cuh holds the attention kernels' building blocks): the launch
 * macros as there; the emulator (backends/cuda/emu/) provides its own. */
#ifndef VLA_CUDA_EMU
#define VLACU_LAUNCH(kern, grid, block, smem, stream, ...) kern<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif
#ifndef VLACU_NT
#define VLACU_NT 256
#endif

namespace vlacu {
namespace nn {

__device__ __forceinline__ int imin(int x, int y) { return x < y ? x : y; }

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; /* (the butterfly leaves the same value, summed in the same tree, in every lane) */
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

constexpr int NT = VLACU_NT; /* threads per block: 256 on the device, 64 in the emulator */
constexpr int NW = NT / 32;

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* Float operations nvcc may not contract into an FMA: where the CPU backend's order is matched
 * to the bit (AdamW, LayerNorm's affine step). The emulator's host compiler does not contract
 * (ISO C++, no FMA in the x86-64 baseline). */
#ifdef VLA_CUDA_EMU
__device__ __forceinline__ float mul_rn(float a, float b) { return a * b; }
__device__ __forceinline__ float add_rn(float a, float b) { return a + b; }
__device__ __forceinline__ float sub_rn(float a, float b) { return a - b; }
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
#endif

/* A token or target outside its range: lowers the op's error word to (index << 32 | value), so
 * the host reports the first bad position (the smallest index), whatever the order the threads
 * ran in. */
__device__ __forceinline__ void flag_bad(unsigned long long *err, size_t index, int32_t value) {
    const unsigned long long i = index < 0xffffffffull ? (unsigned long long)index : 0xffffffffull;
    const unsigned long long key = i << 32 | (unsigned long long)(uint32_t)value;
#ifdef VLA_CUDA_EMU
    unsigned long long cur = __atomic_load_n(err, __ATOMIC_RELAXED);
    while (key < cur && !__atomic_compare_exchange_n(err, &cur, key, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
#else
    atomicMin(err, key);
#endif
}

/* Blocks of a grid-stride loop over n elements: enough to fill the device, few in the emulator
 * (its blocks run one after another). */
static unsigned grid_for(size_t n) {
#ifdef VLA_CUDA_EMU
    const size_t cap = 8;
#else
    const size_t cap = 8192;
#endif
    const size_t g = (n + NT - 1) / NT;
    return (unsigned)(g < cap ? g : cap);
}

#define GRID_STRIDE(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* The sum over the block of one double per thread, in a fixed tree; the result in thread 0.
 * sh: NW doubles of shared memory. Ends with a barrier (sh may be reused). */
__device__ __forceinline__ double block_sum0(double v, double *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double r = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < NW; w++) r += sh[w];
    __syncthreads();
    return r;
}

/* ---- fill, elementwise ---------------------------------------------------------------------- */

__global__ void __launch_bounds__(NT) fill_kernel(float *x, size_t n, float v) {
    GRID_STRIDE(i, n) x[i] = v;
}

/* y may be x (in place): each element is read, then written, by one thread. */
__global__ void __launch_bounds__(NT) gelu_fwd_kernel(float *y, const float *x, size_t n) {
    GRID_STRIDE(i, n) {
        const float xi = x[i];
        y[i] = 0.5f * xi * (1.0f + erff(xi * INV_SQRT2));
    }
}

__global__ void __launch_bounds__(NT) gelu_bwd_kernel(float *dx, const float *dy, const float *x, size_t n) {
    GRID_STRIDE(i, n) {
        const float xi = x[i];
        const float cdf = 0.5f * (1.0f + erff(xi * INV_SQRT2));
        const float pdf = INV_SQRT_2PI * expf(-0.5f * xi * xi);
        dx[i] += dy[i] * (cdf + xi * pdf);
    }
}

__global__ void __launch_bounds__(NT) sigmoid_fwd_kernel(float *y, const float *x, size_t n) {
    GRID_STRIDE(i, n) y[i] = 1.0f / (1.0f + expf(-x[i])); /* expf(88+) = inf: y = 0, as it should */
}

__global__ void __launch_bounds__(NT) sigmoid_bwd_kernel(float *dx, const float *dy, const float *y, size_t n) {
    GRID_STRIDE(i, n) dx[i] += dy[i] * y[i] * (1.0f - y[i]);
}

__global__ void __launch_bounds__(NT) add_fwd_kernel(float *y, const float *a, const float *c, size_t n) {
    GRID_STRIDE(i, n) y[i] = a[i] + c[i];
}

__global__ void __launch_bounds__(NT) add_bwd_kernel(float *da, float *dc, const float *dy, size_t n) {
    GRID_STRIDE(i, n) {
        const float d = dy[i];
        if (da) da[i] += d;
        if (dc) dc[i] += d;
    }
}

/* y[m, :] = row[:] for every m (a bias before the product adds to it). */
__global__ void __launch_bounds__(NT) rows_set_kernel(float *y, const float *row, size_t MN, int N) {
    GRID_STRIDE(i, MN) y[i] = row[i % (size_t)N];
}

/* ---- a plain SGEMM: the matrix products where cuBLAS is absent (the emulator) ----------------
 * C[m, n] = op(A) op(B) + beta C, row-major, op = transpose when TA / TB: cpu_gemm's contract.
 * 64 x 64 tiles of C, 256 threads of 4 x 4 outputs, k in steps of 16 through shared memory.
 * beta = 0 never reads C (it may hold NaN). */
constexpr int GB = 64, GK = 16, GT = 256;

template <int TA, int TB>
__global__ void __launch_bounds__(GT) gemm_kernel(int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                                                  float beta, float *C, int ldc, int tiles_n) {
    __shared__ float As[GK][GB + 1], Bs[GK][GB + 1];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int i0 = (int)(blockIdx.x / tiles_n) * GB, j0 = (int)(blockIdx.x % tiles_n) * GB;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += GK) {
        for (int e = tid; e < GB * GK; e += GT) {
            /* consecutive threads along the dimension contiguous in memory */
            int ii = TA ? e % GB : e / GK, kk = TA ? e / GB : e % GK;
            int gi = i0 + ii, gk = k0 + kk;
            As[kk][ii] = gi < m && gk < k ? (TA ? A[(size_t)gk * lda + gi] : A[(size_t)gi * lda + gk]) : 0.0f;
            const int jj = TB ? e / GK : e % GB;
            kk = TB ? e % GK : e / GB;
            gi = j0 + jj, gk = k0 + kk;
            Bs[kk][jj] = gi < n && gk < k ? (TB ? B[(size_t)gi * ldb + gk] : B[(size_t)gk * ldb + gi]) : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < GK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = As[kk][ty + 16 * r], b[r] = Bs[kk][tx + 16 * r];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[r][c] += a[r] * b[c];
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i = i0 + ty + 16 * r, j = j0 + tx + 16 * c;
            if (i < m && j < n) {
                float *out = C + (size_t)i * ldc + j;
                *out = beta == 0.0f ? acc[r][c] : acc[r][c] + beta * *out;
            }
        }
}

/* ---- column sums (bias and LayerNorm parameter gradients) -------------------------------------
 * out[j] += sum over the rows m of q(m, j), in two launches: the rows are cut into S parts (S from
 * M alone), a block sums 32 columns of one part (lane = column, warps over its rows, each in
 * double, the warps added in order), then one thread per column adds the S parts in order.
 * MODE 0: q = A[m, j] (dbias). MODE 1 (LayerNorm): q0 = dy (x - mean) rstd, q1 = dy. */
static int colsum_parts(int M) {
    const int s = M / 64;
    return s < 1 ? 1 : s > 64 ? 64 : s;
}

template <int MODE>
__global__ void __launch_bounds__(NT) colsum_part_kernel(const float *A, const float *X, const float *mean,
                                                         const float *rstd, int M, int N, int S, int ctiles,
                                                         double *part) {
    __shared__ double red[2][NW][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int s = (int)(blockIdx.x / ctiles), j = (int)(blockIdx.x % ctiles) * 32 + lane;
    const int r0 = (int)((int64_t)M * s / S), r1 = (int)((int64_t)M * (s + 1) / S);
    double a0 = 0.0, a1 = 0.0;
    if (j < N)
        for (int m = r0 + warp; m < r1; m += NW) {
            const float d = A[(size_t)m * N + j];
            if (MODE == 0) {
                a0 += d;
            } else {
                a0 += (double)d * ((X[(size_t)m * N + j] - mean[m]) * rstd[m]);
                a1 += d;
            }
        }
    red[0][warp][lane] = a0;
    red[1][warp][lane] = a1;
    __syncthreads();
    if (warp == 0 && j < N) {
        double t0 = 0.0, t1 = 0.0;
        for (int w = 0; w < NW; w++) t0 += red[0][w][lane], t1 += red[1][w][lane];
        part[(size_t)s * N + j] = t0;
        if (MODE == 1) part[((size_t)S + s) * N + j] = t1;
    }
}

__global__ void __launch_bounds__(NT) colsum_final_kernel(const double *part, int S, int N, float *out0,
                                                          float *out1) {
    GRID_STRIDE(j, (size_t)N) {
        double t0 = 0.0, t1 = 0.0;
        for (int s = 0; s < S; s++) {
            t0 += part[(size_t)s * N + j];
            if (out1) t1 += part[((size_t)S + s) * N + j];
        }
        if (out0) out0[j] += (float)t0;
        if (out1) out1[j] += (float)t1;
    }
}

/* ---- LayerNorm: one warp per row ------------------------------------------------------------- */

/* As cpu_layernorm_forward: the mean, then the centred squares, each summed in double. */
__global__ void __launch_bounds__(NT) ln_fwd_kernel(float *y, float *mean, float *rstd, const float *x,
                                                    const float *w, const float *b, int M, int C, float eps) {
    const int lane = threadIdx.x & 31, row = (int)blockIdx.x * NW + (threadIdx.x >> 5);
    if (row >= M) return; /* the whole warp: no barrier follows */
    const float *xr = x + (size_t)row * C;
    float *yr = y + (size_t)row * C;
    double s = 0.0;
    for (int i = lane; i < C; i += 32) s += xr[i];
    s = warp_sum(s);
    const float mu = (float)(s / C);
    double ss = 0.0;
    for (int i = lane; i < C; i += 32) {
        const double d = (double)xr[i] - mu;
        ss += d * d;
    }
    ss = warp_sum(ss);
    const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int i = lane; i < C; i += 32) yr[i] = add_rn(mul_rn(mul_rn(sub_rn(xr[i], mu), rs), w[i]), b[i]);
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

/* dx += rstd (g - mean(g) - n mean(g n)), g = w dy, n = (x - mean) rstd: as cpu_layernorm_backward. */
__global__ void __launch_bounds__(NT) ln_bwd_dx_kernel(float *dx, const float *dy, const float *x, const float *w,
                                                       const float *mean, const float *rstd, int M, int C) {
    const int lane = threadIdx.x & 31, row = (int)blockIdx.x * NW + (threadIdx.x >> 5);
    if (row >= M) return;
    const float *xr = x + (size_t)row * C, *dyr = dy + (size_t)row * C;
    float *dxr = dx + (size_t)row * C;
    const float mu = mean[row], rs = rstd[row];
    double sg = 0.0, sgn = 0.0;
    for (int i = lane; i < C; i += 32) {
        const float g = mul_rn(w[i], dyr[i]);
        sg += g;
        sgn += (double)g * mul_rn(sub_rn(xr[i], mu), rs);
    }
    sg = warp_sum(sg);
    sgn = warp_sum(sgn);
    const float mg = (float)(sg / C), mgn = (float)(sgn / C);
    for (int i = lane; i < C; i += 32) {
        const float nrm = mul_rn(sub_rn(xr[i], mu), rs);
        const float t = sub_rn(sub_rn(mul_rn(w[i], dyr[i]), mg), mul_rn(nrm, mgn));
        dxr[i] = add_rn(dxr[i], mul_rn(rs, t));
    }
}

/* ---- embeddings ------------------------------------------------------------------------------ */

/* One thread per output element. A bad token's row is NaN (unspecified, and visibly so). */
__global__ void __launch_bounds__(NT) emb_fwd_kernel(float *out, const int32_t *tok, const float *wte,
                                                     const float *wpe, size_t BTC, int T, int C, int V,
                                                     unsigned long long *err) {
    GRID_STRIDE(e, BTC) {
        const size_t i = e / (size_t)C;
        const int c = (int)(e - i * (size_t)C), t = tok[i];
        if (t < 0 || t >= V) {
            out[e] = nanf("");
            if (c == 0) flag_bad(err, i, t);
            continue;
        }
        float v = wte[(size_t)t * C + c];
        if (wpe) v = add_rn(v, wpe[(i % (size_t)T) * C + c]);
        out[e] = v;
    }
}

/* dwpe[t, c] += dout[b, t, c] for b = 0, 1, ... in order: the CPU's sum, to the bit. */
__global__ void __launch_bounds__(NT) emb_bwd_pos_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    GRID_STRIDE(e, (size_t)T * C) {
        float acc = dwpe[e];
        for (int b = 0; b < B; b++) acc = add_rn(acc, dout[(size_t)b * T * C + e]);
        dwpe[e] = acc;
    }
}

/* The token gradient is a scatter-add; without atomics it is a sort. The positions are sorted
 * by token, stably (an LSD radix sort, 8 bits a pass, over the bits V - 1 needs), so each
 * token's positions come out in increasing order; then the first position of each run of equal
 * tokens owns that row of dwte and adds the run's rows of dout in that order: the CPU's order,
 * so the same bits. A bad token sorts as token 0 and is skipped when added. */
__global__ void __launch_bounds__(NT) sort_init_kernel(int32_t *keys, int32_t *vals, const int32_t *tok, int BT, int V,
                                                       unsigned long long *err) {
    GRID_STRIDE(i, (size_t)BT) {
        const int t = tok[i];
        const bool ok = t >= 0 && t < V;
        if (!ok) flag_bad(err, i, t);
        keys[i] = ok ? t : 0;
        vals[i] = (int32_t)i;
    }
}

/* Per tile of NT keys: how many have each digit -> hist[digit * ntiles + tile]. */
__global__ void __launch_bounds__(NT) sort_hist_kernel(const int32_t *keys, int BT, int shift, int ntiles,
                                                       int32_t *hist) {
    __shared__ int dig[NT];
    const int tile = (int)blockIdx.x, i = tile * NT + (int)threadIdx.x;
    dig[threadIdx.x] = i < BT ? (keys[i] >> shift) & 255 : 256;
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += NT) {
        int cnt = 0;
        for (int j = 0; j < NT; j++) cnt += dig[j] == d;
        hist[(size_t)d * ntiles + tile] = cnt;
    }
}

/* One block: the exclusive prefix sum of hist[0 .. n) in place (digit-major: every tile's 0s,
 * then every tile's 1s, ...). Thread i takes a contiguous range. */
__global__ void __launch_bounds__(NT) sort_scan_kernel(int32_t *hist, int n) {
    __shared__ int part[NT];
    const int per = (n + NT - 1) / NT, a = imin((int)threadIdx.x * per, n), b = imin(a + per, n);
    int s = 0;
    for (int i = a; i < b; i++) s += hist[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int t = 0; t < NT; t++) {
            const int v = part[t];
            part[t] = acc;
            acc += v;
        }
    }
    __syncthreads();
    int acc = part[threadIdx.x];
    for (int i = a; i < b; i++) {
        const int v = hist[i];
        hist[i] = acc;
        acc += v;
    }
}

/* Each key to its place: the digit's start for this tile plus the keys of the same digit before
 * it in the tile (stable). */
__global__ void __launch_bounds__(NT) sort_scatter_kernel(const int32_t *keys, const int32_t *vals, int32_t *keys_out,
                                                          int32_t *vals_out, int BT, int shift, int ntiles,
                                                          const int32_t *hist) {
    __shared__ int dig[NT];
    const int tile = (int)blockIdx.x, i = tile * NT + (int)threadIdx.x;
    const int key = i < BT ? keys[i] : 0;
    const int d = i < BT ? (key >> shift) & 255 : 256;
    dig[threadIdx.x] = d;
    __syncthreads();
    if (i < BT) {
        int rank = 0;
        for (int j = 0; j < (int)threadIdx.x; j++) rank += dig[j] == d;
        const int dest = hist[(size_t)d * ntiles + tile] + rank;
        keys_out[dest] = key;
        vals_out[dest] = vals[i];
    }
}

/* Block (s, column tile): when s starts a run of equal keys, its columns of that token's dwte
 * row gather the run's dout rows in position order. */
constexpr int SEG_NT = NT < 128 ? NT : 128;

__global__ void __launch_bounds__(SEG_NT) emb_bwd_tok_kernel(float *dwte, const float *dout, const int32_t *tok,
                                                             const int32_t *skeys, const int32_t *svals, int BT,
                                                             int C, int ctiles) {
    const int s = (int)(blockIdx.x / ctiles), c = (int)(blockIdx.x % ctiles) * SEG_NT + (int)threadIdx.x;
    const int key = skeys[s];
    if ((s > 0 && skeys[s - 1] == key) || c >= C) return;
    float *row = dwte + (size_t)key * C + c;
    float acc = *row;
    for (int e = s; e < BT && skeys[e] == key; e++) {
        const int p = svals[e];
        if (tok[p] == key) acc = add_rn(acc, dout[(size_t)p * C + c]); /* (a bad token sorts as 0: skipped) */
    }
    *row = acc;
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */

/* One block: the number of rows with a target (-> *count), and the check of every target. */
__global__ void __launch_bounds__(NT) ce_count_kernel(const int32_t *tg, int M, int V, int *count,
                                                      unsigned long long *err) {
    __shared__ int part[NT];
    int c = 0;
    for (int m = threadIdx.x; m < M; m += NT) {
        const int t = tg[m];
        if (t >= 0 && t < V) c++;
        else if (t != -1) flag_bad(err, (size_t)m, t);
    }
    part[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int i = 0; i < NT; i++) s += part[i];
        *count = s;
    }
}

/* One block per row: the log-sum-exp around the row's maximum (exponentials in float, their sum
 * in double), the row's loss -> rowloss[m], and (softmax - onehot) / |P| -> dlogits. dlogits may
 * be logits: every read of the row (the target's logit first) comes before the barrier that
 * precedes the writes. A row without a target (or with a bad one) has loss 0 and gradient 0. */
__global__ void __launch_bounds__(NT) ce_row_kernel(float *dlogits, const float *logits, const int32_t *tg, int M,
                                                    int V, const int *count, double *rowloss) {
    __shared__ double sh[NW];
    __shared__ float shm[NW];
    __shared__ double bcast;
    const int m = (int)blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *z = logits + (size_t)m * V;
    float *dz = dlogits ? dlogits + (size_t)m * V : nullptr;
    const int t = tg[m];
    if (t < 0 || t >= V) { /* the same for the whole block */
        if (dz)
            for (int j = threadIdx.x; j < V; j += NT) dz[j] = 0.0f;
        if (threadIdx.x == 0) rowloss[m] = 0.0;
        return;
    }
    const float zt = z[t];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += NT) mx = fmaxf(mx, z[j]);
    mx = warp_max(mx);
    if (lane == 0) shm[warp] = mx;
    __syncthreads();
    mx = shm[0];
    for (int w = 1; w < NW; w++) mx = fmaxf(mx, shm[w]);
    double se = 0.0;
    for (int j = threadIdx.x; j < V; j += NT) se += (double)expf(z[j] - mx);
    se = block_sum0(se, sh); /* (its barrier orders every read of z before the writes below) */
    if (threadIdx.x == 0) {
        bcast = se;
        rowloss[m] = (double)mx + log(se) - (double)zt;
    }
    __syncthreads();
    if (!dz) return;
    const double rse = 1.0 / bcast, inv = 1.0 / (double)*count; /* count >= 1: this row has a target */
    for (int j = threadIdx.x; j < V; j += NT) {
        const double p = (double)expf(z[j] - mx) * rse;
        dz[j] = (float)((j == t ? p - 1.0 : p) * inv);
    }
}

/* One block: loss = (sum of the row losses in a fixed order) / |P|, or 0 when P is empty. */
__global__ void __launch_bounds__(NT) ce_loss_kernel(float *loss, const double *rowloss, int M, const int *count) {
    __shared__ double sh[NW];
    const int per = (M + NT - 1) / NT, a = imin((int)threadIdx.x * per, M), b = imin(a + per, M);
    double s = 0.0;
    for (int m = a; m < b; m++) s += rowloss[m];
    s = block_sum0(s, sh);
    if (threadIdx.x == 0) {
        const int n = *count;
        *loss = n ? (float)(s / (double)n) : 0.0f;
    }
}

/* ---- global norm, AdamW ---------------------------------------------------------------------- */

/* Parts of the norm's first stage: a function of n alone, so the sum's order is too. */
static int norm_parts(size_t n) {
    const size_t p = (n + 4095) / 4096;
    return (int)(p < 1024 ? p : 1024);
}

__global__ void __launch_bounds__(NT) norm_part_kernel(const float *x, size_t n, int parts, double *part) {
    __shared__ double sh[NW];
    const size_t q = n / (size_t)parts, r = n % (size_t)parts, b = blockIdx.x;
    const size_t i0 = q * b + (b < r ? b : r), i1 = q * (b + 1) + (b + 1 < r ? b + 1 : r);
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += NT) s += (double)x[i] * x[i];
    s = block_sum0(s, sh);
    if (threadIdx.x == 0) part[b] = s;
}

__global__ void __launch_bounds__(NT) norm_final_kernel(float *norm, const double *part, int parts) {
    __shared__ double sh[NW];
    double s = 0.0;
    for (int i = threadIdx.x; i < parts; i += NT) s += part[i];
    s = block_sum0(s, sh);
    if (threadIdx.x == 0) *norm = (float)sqrt(s);
}

/* torch.optim.AdamW's step in torch's order, float operations as cpu_adamw_step (no FMA
 * contraction): the same bits as the CPU backend. The clip factor is computed from norm on the
 * device, by every thread (one load; no host round trip). */
__global__ void __launch_bounds__(NT) adamw_kernel(float *P, float *Mm, float *Vv, const float *G, const float *norm,
                                                   size_t n, vlacu_adamw h) {
    float clip = 1.0f;
    if (norm) {
        const float c = h.max_norm / (*norm + 1e-6f);
        clip = c < 1.0f ? c : 1.0f;
    }
    GRID_STRIDE(i, n) {
        const float g = mul_rn(G[i], clip), m0 = Mm[i];
        float pi = mul_rn(P[i], h.decay);
        const float mi = h.w1 < 0.5f ? add_rn(m0, mul_rn(h.w1, sub_rn(g, m0)))
                                     : sub_rn(g, mul_rn(sub_rn(g, m0), 1.0f - h.w1));
        const float vi = add_rn(mul_rn(Vv[i], h.beta2), mul_rn(mul_rn(h.w2, g), g));
        const float denom = add_rn(sqrtf(vi) / h.bc2_sqrt, h.eps);
        pi = add_rn(pi, mul_rn(-h.step_size, mi) / denom);
        P[i] = pi, Mm[i] = mi, Vv[i] = vi;
    }
}

static int status() { return (int)cudaGetLastError(); }

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

} // namespace nn
} // namespace vlacu

using namespace vlacu::nn;

#define ST(s) ((cudaStream_t)(s))

extern "C" {

int vlacu_nn_fill(float *x, size_t n, float value, void *stream) {
    VLACU_LAUNCH(fill_kernel, grid_for(n), NT, 0, ST(stream), x, n, value);
    return status();
}

int vlacu_nn_gelu_forward(float *y, const float *x, size_t n, void *stream) {
    VLACU_LAUNCH(gelu_fwd_kernel, grid_for(n), NT, 0, ST(stream), y, x, n);
    return status();
}

int vlacu_nn_gelu_backward(float *dx, const float *dy, const float *x, size_t n, void *stream) {
    VLACU_LAUNCH(gelu_bwd_kernel, grid_for(n), NT, 0, ST(stream), dx, dy, x, n);
    return status();
}

int vlacu_nn_sigmoid_forward(float *y, const float *x, size_t n, void *stream) {
    VLACU_LAUNCH(sigmoid_fwd_kernel, grid_for(n), NT, 0, ST(stream), y, x, n);
    return status();
}

int vlacu_nn_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n, void *stream) {
    VLACU_LAUNCH(sigmoid_bwd_kernel, grid_for(n), NT, 0, ST(stream), dx, dy, y, n);
    return status();
}

int vlacu_nn_add_forward(float *y, const float *a, const float *c, size_t n, void *stream) {
    VLACU_LAUNCH(add_fwd_kernel, grid_for(n), NT, 0, ST(stream), y, a, c, n);
    return status();
}

int vlacu_nn_add_backward(float *da, float *dc, const float *dy, size_t n, void *stream) {
    VLACU_LAUNCH(add_bwd_kernel, grid_for(n), NT, 0, ST(stream), da, dc, dy, n);
    return status();
}

int vlacu_nn_rows_set(float *y, const float *row, int M, int N, void *stream) {
    const size_t MN = (size_t)M * N;
    VLACU_LAUNCH(rows_set_kernel, grid_for(MN), NT, 0, ST(stream), y, row, MN, N);
    return status();
}

int vlacu_nn_gemm(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc, void *stream) {
    const long long tm = (m + GB - 1) / GB, tn = (n + GB - 1) / GB;
    if (tm * tn > 0x7fffffffLL) return (int)cudaErrorInvalidConfiguration;
    const unsigned grid = (unsigned)(tm * tn);
    const int tiles_n = (int)tn;
    void (*kern)(int, int, int, const float *, int, const float *, int, float, float *, int, int) =
        ta ? (tb ? gemm_kernel<1, 1> : gemm_kernel<1, 0>) : (tb ? gemm_kernel<0, 1> : gemm_kernel<0, 0>);
    VLACU_LAUNCH(kern, grid, GT, 0, ST(stream), m, n, k, A, lda, B, ldb, beta, C, ldc, tiles_n);
    return status();
}

size_t vlacu_nn_colsum_scratch(int M, int N) { return align256((size_t)2 * colsum_parts(M) * N * sizeof(double)); }

/* out0 (and out1, LayerNorm) += the column sums; the scratch holds the parts. */
static int colsum(int mode, float *out0, float *out1, const float *A, const float *X, const float *mean,
                  const float *rstd, int M, int N, void *scratch, cudaStream_t st) {
    const int S = colsum_parts(M), ctiles = (N + 31) / 32;
    if ((long long)S * ctiles > 0x7fffffffLL) return (int)cudaErrorInvalidConfiguration;
    double *part = (double *)scratch;
    void (*kern)(const float *, const float *, const float *, const float *, int, int, int, int, double *) =
        mode ? colsum_part_kernel<1> : colsum_part_kernel<0>;
    VLACU_LAUNCH(kern, (unsigned)(S * ctiles), NT, 0, st, A, X, mean, rstd, M, N, S, ctiles, part);
    int e = status();
    if (e) return e;
    VLACU_LAUNCH(colsum_final_kernel, grid_for((size_t)N), NT, 0, st, (const double *)part, S, N, out0, out1);
    return status();
}

int vlacu_nn_colsum_add(float *out, const float *A, int M, int N, void *scratch, void *stream) {
    return colsum(0, out, nullptr, A, nullptr, nullptr, nullptr, M, N, scratch, ST(stream));
}

int vlacu_nn_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                               int M, int C, float eps, void *stream) {
    VLACU_LAUNCH(ln_fwd_kernel, (unsigned)((M + NW - 1) / NW), NT, 0, ST(stream), y, mean, rstd, x, w, b, M, C, eps);
    return status();
}

size_t vlacu_nn_layernorm_scratch(int M, int C) { return vlacu_nn_colsum_scratch(M, C); }

int vlacu_nn_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, int M, int C, void *scratch, void *stream) {
    if (dx) {
        VLACU_LAUNCH(ln_bwd_dx_kernel, (unsigned)((M + NW - 1) / NW), NT, 0, ST(stream), dx, dy, x, w, mean, rstd, M, C);
        const int e = status();
        if (e) return e;
    }
    if (dw || db) return colsum(1, dw, db, dy, x, mean, rstd, M, C, scratch, ST(stream));
    return 0;
}

int vlacu_nn_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                               int V, unsigned long long *err, void *stream) {
    const size_t BTC = (size_t)B * T * C;
    VLACU_LAUNCH(emb_fwd_kernel, grid_for(BTC), NT, 0, ST(stream), out, tok, wte, wpe, BTC, T, C, V, err);
    return status();
}

/* Radix passes for keys in 0..V-1. */
static int sort_passes(int V) {
    int bits = 0;
    while (bits < 31 && ((V - 1) >> bits) != 0) bits++;
    return (bits + 7) / 8;
}

size_t vlacu_nn_embedding_scratch(int BT) {
    const size_t ntiles = ((size_t)BT + NT - 1) / NT;
    return 4 * align256((size_t)BT * sizeof(int32_t)) + align256(256 * ntiles * sizeof(int32_t));
}

int vlacu_nn_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C,
                                int V, void *scratch, unsigned long long *err, void *stream) {
    cudaStream_t st = ST(stream);
    int e = 0;
    if (dwpe) {
        VLACU_LAUNCH(emb_bwd_pos_kernel, grid_for((size_t)T * C), NT, 0, st, dwpe, dout, B, T, C);
        if ((e = status())) return e;
    }
    const int BT = B * T; /* (the host checked that it fits) */
    const int ntiles = (BT + NT - 1) / NT, ctiles = (C + SEG_NT - 1) / SEG_NT;
    if ((long long)BT * ctiles > 0x7fffffffLL || 256LL * ntiles > 0x7fffffffLL) return (int)cudaErrorInvalidConfiguration;
    unsigned char *w = (unsigned char *)scratch;
    const size_t vb = align256((size_t)BT * sizeof(int32_t));
    int32_t *k0 = (int32_t *)w, *v0 = (int32_t *)(w + vb), *k1 = (int32_t *)(w + 2 * vb), *v1 = (int32_t *)(w + 3 * vb);
    int32_t *hist = (int32_t *)(w + 4 * vb);
    VLACU_LAUNCH(sort_init_kernel, grid_for((size_t)BT), NT, 0, st, k0, v0, tok, BT, V, err);
    if ((e = status())) return e;
    if (!dwte) return 0; /* (the tokens are still checked) */
    const int passes = sort_passes(V);
    for (int p = 0; p < passes; p++) {
        VLACU_LAUNCH(sort_hist_kernel, (unsigned)ntiles, NT, 0, st, (const int32_t *)k0, BT, 8 * p, ntiles, hist);
        if ((e = status())) return e;
        VLACU_LAUNCH(sort_scan_kernel, 1, NT, 0, st, hist, 256 * ntiles);
        if ((e = status())) return e;
        VLACU_LAUNCH(sort_scatter_kernel, (unsigned)ntiles, NT, 0, st, (const int32_t *)k0, (const int32_t *)v0, k1, v1,
                     BT, 8 * p, ntiles, (const int32_t *)hist);
        if ((e = status())) return e;
        int32_t *tk = k0, *tv = v0;
        k0 = k1, v0 = v1, k1 = tk, v1 = tv;
    }
    VLACU_LAUNCH(emb_bwd_tok_kernel, (unsigned)((long long)BT * ctiles), SEG_NT, 0, st, dwte, dout, tok,
                 (const int32_t *)k0, (const int32_t *)v0, BT, C, ctiles);
    return status();
}

size_t vlacu_nn_crossentropy_scratch(int M) { return 256 + align256((size_t)M * sizeof(double)); }

int vlacu_nn_crossentropy(float *loss, float *dlogits, const float *logits, const int32_t *targets, int M, int V,
                          void *scratch, unsigned long long *err, void *stream) {
    cudaStream_t st = ST(stream);
    int *count = (int *)scratch;
    double *rowloss = (double *)((unsigned char *)scratch + 256);
    VLACU_LAUNCH(ce_count_kernel, 1, NT, 0, st, targets, M, V, count, err);
    int e = status();
    if (e) return e;
    VLACU_LAUNCH(ce_row_kernel, (unsigned)M, NT, 0, st, dlogits, logits, targets, M, V, (const int *)count, rowloss);
    if ((e = status())) return e;
    if (loss) {
        VLACU_LAUNCH(ce_loss_kernel, 1, NT, 0, st, loss, (const double *)rowloss, M, (const int *)count);
        e = status();
    }
    return e;
}

size_t vlacu_nn_global_norm_scratch(size_t n) { return align256((size_t)norm_parts(n) * sizeof(double)); }

int vlacu_nn_global_norm(float *norm, const float *x, size_t n, void *scratch, void *stream) {
    const int parts = norm_parts(n);
    double *part = (double *)scratch;
    VLACU_LAUNCH(norm_part_kernel, (unsigned)parts, NT, 0, ST(stream), x, n, parts, part);
    const int e = status();
    if (e) return e;
    VLACU_LAUNCH(norm_final_kernel, 1, NT, 0, ST(stream), norm, (const double *)part, parts);
    return status();
}

int vlacu_nn_adamw(float *param, float *m, float *v, const float *grad, const float *norm, size_t n,
                   const vlacu_adamw *h, void *stream) {
    VLACU_LAUNCH(adamw_kernel, grid_for(n), NT, 0, ST(stream), param, m, v, grad, norm, n, *h);
    return status();
}

} // extern "C"
