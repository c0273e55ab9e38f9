/* Device building blocks shared by the CUDA kernels: one thread block (CTA) cooperates on small
 * dense matrices that live in shared or global memory (generic pointers), as the CPU backend's
 * cpu_linalg.c does on one core.
 *
 * Conventions, kept by every function here:
 *  - Called by all threads of the block, with the same arguments; blockDim.x is a multiple of
 *    32 and at most 1024. Functions marked "no barrier" leave it to the caller to __syncthreads()
 *    before anyone reads what they wrote; the others end with a barrier.
 *  - Matrices are row-major with a leading dimension (ld). Working arrays use ld_of(cols): an odd
 *    leading dimension, so that a warp reading one column (32 rows at stride ld) hits 32
 *    different shared-memory banks.
 *  - No early return that skips a barrier; loops that contain a barrier or a warp shuffle have
 *    the same trip count in every thread of the block (or of the warp, for shuffles). */
#ifndef VLA_COMMON_CUH
#define VLA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "vla_cuda.h"

#ifdef VLA_CUDA_EMU
/* The CPU emulator (backends/cuda/emu/) provides VLACU_DYNSMEM and VLACU_LAUNCH. */
#else
#define VLACU_DYNSMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define VLACU_LAUNCH(kern, grid, block, smem, stream, ...) kern<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

#ifndef VLACU_NT
#define VLACU_NT 256 /* threads per block of the matrix kernels (the emulator also runs 64) */
#endif
#define VLACU_MAXD 256

namespace vlacu {

__host__ __device__ inline int ld_of(int cols) { return cols | 1; }

/* 16 bytes as one load or store (the emulator has no float4) */
#ifdef VLA_CUDA_EMU
struct alignas(16) vf4 {
    float x, y, z, w;
};
#else
typedef float4 vf4;
#endif

/* Programmatic dependent launch (sm_90+): a kernel launched with the programmatic-serialization
 * attribute may start while the kernel before it in the stream still runs. Each such kernel calls
 * pdl_enter() before anything else: griddepcontrol.wait returns once the previous grid has
 * finished and its writes are visible (at once for a kernel launched without the attribute), and
 * launch_dependents then lets the next kernel's blocks be placed while this one runs, so the
 * launch gap between kernels is hidden. A no-op before sm_90 and in the emulator. */
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Host: raises a kernel's dynamic shared-memory limit to `bytes` (needed above 48 KB) once per
 * device and size: the call costs microseconds, which the decode path should not pay per token.
 * cache: 64 zero-initialised slots, one per device. */
inline cudaError_t raise_smem_limit_static(const void *kern, std::atomic<size_t> *cache, size_t bytes,
                                          size_t static_bytes);
inline cudaError_t raise_smem_limit(const void *kern, std::atomic<size_t> *cache, size_t bytes) {
    return raise_smem_limit_static(kern, cache, bytes, 0);
}
/* The same for a kernel with `static_bytes` of static shared memory: the 48 KB default is a limit
 * on static + dynamic together, so a dynamic part under 48 KB can still need the attribute. */
inline cudaError_t raise_smem_limit_static(const void *kern, std::atomic<size_t> *cache, size_t bytes,
                                          size_t static_bytes) {
    if (bytes + static_bytes <= 48 * 1024) return cudaSuccess;
    int dev = 0;
    const bool cached = cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64;
    if (cached && cache[dev].load(std::memory_order_relaxed) >= bytes) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && cached) {
        size_t cur = cache[dev].load(std::memory_order_relaxed);
        while (cur < bytes && !cache[dev].compare_exchange_weak(cur, bytes)) {
        }
    }
    return e;
}

/* Host: the static shared memory of a kernel (asked once). */
inline size_t static_smem_of(const void *kern, size_t fallback) {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
        (void)cudaGetLastError();
        return fallback;
    }
    return fa.sharedSizeBytes;
}

template <typename T> __device__ __forceinline__ bool finite_(T x) { return isfinite(x); }

__device__ __forceinline__ float elu1f(float x) { return x > 0.0f ? x + 1.0f : expf(x); }
__device__ __forceinline__ int imin(int x, int y) { return x < y ? x : y; }

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- chunk boundaries (VLA-MATH 2.3): at most C tokens; every refresh point ends a chunk ---- */

/* First refresh token of the piece: (t0 + f + 1) % R == 0, f in [0, R). */
__host__ __device__ inline int64_t first_refresh(int R, int64_t t0) { return (int64_t)R - 1 - t0 % R; }

__host__ __device__ inline int64_t count_chunks(int T, int C, int R, int64_t t0) {
    if (R <= 0) return ((int64_t)T + C - 1) / C;
    int64_t L0 = first_refresh(R, t0) + 1;
    if (L0 > T) L0 = T;
    const int64_t n0 = (L0 + C - 1) / C;
    if (T <= L0) return n0;
    const int64_t rest = (int64_t)T - L0, nR = ((int64_t)R + C - 1) / C;
    return n0 + rest / R * nR + (rest % R + C - 1) / C;
}

/* Tokens [ts, te) of chunk k. The pieces between refresh points are cut into chunks of C from
 * each piece's start: the same cuts as cpu_vla.c's chunk_end, in closed form. */
__host__ __device__ inline void chunk_bounds(int64_t k, int T, int C, int R, int64_t t0, int *ts, int *te) {
    int64_t s, e;
    if (R <= 0) {
        s = k * C;
        e = s + C;
    } else {
        int64_t L0 = first_refresh(R, t0) + 1;
        if (L0 > T) L0 = T;
        const int64_t n0 = (L0 + C - 1) / C;
        if (k < n0) {
            s = k * C;
            e = s + C < L0 ? s + C : L0;
        } else {
            const int64_t nR = ((int64_t)R + C - 1) / C, kk = k - n0, piece = kk / nR, w = kk % nR;
            const int64_t ps = L0 + piece * R;
            s = ps + w * C;
            e = s + C < ps + R ? s + C : ps + R;
        }
    }
    if (e > T) e = T;
    *ts = (int)s;
    *te = (int)e;
}

/* Token te - 1 is a refresh point. */
__host__ __device__ inline bool refresh_at_end(int R, int64_t t0, int te) { return R > 0 && (t0 + te) % R == 0; }

/* ---- rows of one head, with the per-row maps of VLA-MATH 1 ---- */

enum { ROW_COPY = 0, ROW_ELU1 = 1, ROW_NORM = 2 };

/* Rows r < c of one head: x_r[i] = src[r * stride + i], i < D (elu+1 applied if mode &
 * ROW_ELU1); y_r = x_r, or scale * x_r / max(||x_r||, eps) if mode & ROW_NORM; dst[r][i] = y_r[i].
 * dst2 (optional): dst2[r][i] = scale2 * (rs ? rs[r * rs_stride] : 1) * y_r[i].
 * Two phases, so that every global load of a chunk is in flight at once:
 *   load_raw     all threads, 8 loads each before the first store; dst = x.   No barrier.
 *   (__syncthreads)
 *   finish_rows  one warp per row, from dst: the normalisation and dst2.     No barrier.
 * finish_rows does nothing without ROW_NORM or dst2. */
struct rowload {
    const float *src;
    size_t stride;
    int D, mode;
    float eps, scale;
    float *dst;
    int ldd;
    float *dst2;
    int ld2;
    float scale2;
    const float *rs;
    size_t rs_stride;
};

__device__ inline rowload rows_plain(const float *src, size_t stride, int D, int mode, float eps, float scale,
                                     float *dst, int ldd) {
    rowload l;
    l.src = src, l.stride = stride, l.D = D, l.mode = mode, l.eps = eps, l.scale = scale, l.dst = dst, l.ldd = ldd;
    l.dst2 = nullptr, l.ld2 = 0, l.scale2 = 1.0f, l.rs = nullptr, l.rs_stride = 0;
    return l;
}

static __device__ __noinline__ void load_raw(const rowload L, int c) {
    const int n = c * L.D, nt = blockDim.x;
    for (int e0 = threadIdx.x; e0 < n; e0 += 8 * nt) {
        float x[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int e = e0 + k * nt;
            if (e < n) {
                const int r = e / L.D, i = e - r * L.D;
                x[k] = L.src[(size_t)r * L.stride + i];
            }
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int e = e0 + k * nt;
            if (e < n) {
                const int r = e / L.D, i = e - r * L.D;
                L.dst[(size_t)r * L.ldd + i] = (L.mode & ROW_ELU1) ? elu1f(x[k]) : x[k];
            }
        }
    }
}

static __device__ __noinline__ void finish_rows(const rowload L, int c) {
    if (!(L.mode & ROW_NORM) && !L.dst2) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int r = warp; r < c; r += nw) {
        float *d = L.dst + (size_t)r * L.ldd;
        float mul = 1.0f;
        if (L.mode & ROW_NORM) {
            float ss = 0.0f;
            for (int i = lane; i < L.D; i += 32) ss += d[i] * d[i];
            ss = warp_sum(ss); /* every lane of the warp is here: r is uniform in the warp */
            mul = L.scale / fmaxf(sqrtf(ss), L.eps);
        }
        const float m2 = L.dst2 ? L.scale2 * (L.rs ? L.rs[(size_t)r * L.rs_stride] : 1.0f) : 0.0f;
        for (int i = lane; i < L.D; i += 32) {
            float y = d[i];
            if (L.mode & ROW_NORM) {
                y *= mul;
                d[i] = y;
            }
            if (L.dst2) L.dst2[(size_t)r * L.ld2 + i] = m2 * y;
        }
    }
}

/* ---- block GEMM ----
 * C[m x n] = alpha * rs[i] * had[i][j] * (op(A) op(B))[i][j] + beta * C[i][j]  (+ diag on i == j)
 *   op(A)(i, p) = TA ? A[p * lda + i] : A[i * lda + p]   (m x k)
 *   op(B)(p, j) = TB ? B[j * ldb + p] : B[p * ldb + j]   (k x n)
 * rs (row scale) and had (elementwise factor) are optional (nullptr). mask 1 keeps j <= i
 * (tril), mask 2 keeps j < i (strictly lower): masked entries are written 0 when beta == 0 and
 * left untouched otherwise. a_lower: op(A)(i, p) = 0 for p > i, so the
 * inner loop stops at the tile's last row. beta == 0: C is only written (it may hold garbage).
 * C must not alias A or B. No barrier.
 * Each thread computes R x R micro-tiles: R consecutive rows, R columns strided by the number of
 * column tiles (so a warp reads consecutive columns of B). */
struct gemm_ep {
    const float *rs;
    const float *had;
    int ldh;
    int mask;
    bool a_lower;
    float diag;
};
__device__ inline gemm_ep ep_none() {
    gemm_ep e;
    e.rs = nullptr, e.had = nullptr, e.ldh = 0, e.mask = 0, e.a_lower = false, e.diag = 0.0f;
    return e;
}

template <typename T, bool TA, bool TB, int R>
__device__ __noinline__ void gemm_r(int m, int n, int k, T alpha, const T *__restrict__ A, int lda,
                                    const T *__restrict__ B, int ldb, T beta, T *C, int ldc, gemm_ep ep) {
    const int ntm = (m + R - 1) / R, ntn = (n + R - 1) / R, ntiles = ntm * ntn;
    for (int tile = threadIdx.x; tile < ntiles; tile += blockDim.x) {
        const int tm = tile / ntn, tn = tile - tm * ntn;
        int ia[R], jb[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = tm * R + r;
            ia[r] = i < m ? i : m - 1; /* clamped for loading; not stored */
            const int j = tn + r * ntn;
            jb[r] = j < n ? j : n - 1;
        }
        int kend = k;
        if (ep.a_lower) {
            const int last = tm * R + R; /* rows < last */
            if (last < kend) kend = last;
        }
        T acc[R][R];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < R; c++) acc[r][c] = T(0);
        for (int p = 0; p < kend; p++) {
            T a[R], b[R];
#pragma unroll
            for (int r = 0; r < R; r++) a[r] = TA ? A[(size_t)p * lda + ia[r]] : A[(size_t)ia[r] * lda + p];
#pragma unroll
            for (int c = 0; c < R; c++) b[c] = TB ? B[(size_t)jb[c] * ldb + p] : B[(size_t)p * ldb + jb[c]];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < R; c++) acc[r][c] = fma(a[r], b[c], acc[r][c]);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = tm * R + r;
            if (i >= m) continue;
            const T rsi = ep.rs ? (T)ep.rs[i] : T(1);
#pragma unroll
            for (int c = 0; c < R; c++) {
                const int j = tn + c * ntn;
                if (j >= n) continue;
                T v = alpha * rsi * acc[r][c];
                if (ep.had) v *= (T)ep.had[(size_t)i * ep.ldh + j];
                if (i == j) v += (T)ep.diag;
                const bool masked = (ep.mask == 1 && j > i) || (ep.mask == 2 && j >= i);
                T *cp = C + (size_t)i * ldc + j;
                if (beta == T(0)) *cp = masked ? T(0) : v;
                else if (!masked) *cp = beta * *cp + v;
            }
        }
    }
}

template <typename T, bool TA, bool TB>
__device__ __forceinline__ void gemm(int m, int n, int k, T alpha, const T *A, int lda, const T *B, int ldb, T beta,
                                     T *C, int ldc, gemm_ep ep) {
    if (m <= 0 || n <= 0) return;
    const int nt = blockDim.x;
    if (((m + 3) / 4) * ((n + 3) / 4) >= nt)
        gemm_r<T, TA, TB, 4>(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ep);
    else if (((m + 1) / 2) * ((n + 1) / 2) >= nt / 2)
        gemm_r<T, TA, TB, 2>(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ep);
    else
        gemm_r<T, TA, TB, 1>(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ep);
}

/* ---- Cholesky: lower factor of the SPD c x c matrix G in place (the lower triangle; the upper
 * one is neither read nor written). Returns false (in every thread) when a pivot is not positive
 * and finite, as cpu_cholesky; G is then partly overwritten. Ends with a barrier.
 * Right-looking, in panels of 16 columns, 3 barriers a panel: one warp factors the diagonal
 * block (unblocked, warp barriers only); one thread per row solves the panel below it
 * (L21 = A21 L11^{-T}); the block GEMM updates the trailing lower triangle. */
template <typename T> __device__ __noinline__ bool cholesky(T *G, int ldg, int c) {
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int NB = 16;
    __syncthreads();
    for (int k0 = 0; k0 < c; k0 += NB) {
        const int kb = c - k0 < NB ? c - k0 : NB;
        T *D = G + (size_t)k0 * ldg + k0; /* the diagonal block */
        if (warp == 0) {
            for (int j = 0; j < kb; j++) {
                const T d = D[(size_t)j * ldg + j];
                const bool ok = d > T(0) && finite_(d);
                const T r = ok ? sqrt(d) : T(-1);
                __syncwarp(); /* every lane has read d */
                if (lane == 0) D[(size_t)j * ldg + j] = r; /* -1 marks the failure for the others */
                if (ok && lane > j && lane < kb) D[(size_t)lane * ldg + j] /= r;
                __syncwarp();
                if (ok && lane > j && lane < kb) {
                    T *di = D + (size_t)lane * ldg;
                    const T x = di[j];
                    for (int l = j + 1; l <= lane; l++) di[l] -= x * D[(size_t)l * ldg + j];
                }
                __syncwarp();
                if (!ok) break; /* uniform in the warp */
            }
        }
        __syncthreads();
        for (int j = 0; j < kb; j++)
            if (!(D[(size_t)j * ldg + j] > T(0))) return false; /* uniform: the same values for all */
        /* panel: rows below the block, L21 = A21 L11^{-T}, one thread a row */
        for (int i = k0 + kb + tid; i < c; i += nt) {
            T *gi = G + (size_t)i * ldg + k0;
            for (int j = 0; j < kb; j++) {
                const T *dj = D + (size_t)j * ldg;
                T s = gi[j];
                for (int l = 0; l < j; l++) s -= gi[l] * dj[l];
                gi[j] = s / dj[j];
            }
        }
        __syncthreads();
        /* trailing lower triangle: A22 -= L21 L21^T */
        const int m = c - k0 - kb;
        if (m > 0) {
            const T *L21 = G + (size_t)(k0 + kb) * ldg + k0;
            gemm_ep ep = ep_none();
            ep.mask = 1; /* keep the upper triangle as it is (beta = 1) */
            gemm<T, false, true>(m, m, kb, T(-1), L21, ldg, L21, ldg, T(1), G + (size_t)(k0 + kb) * ldg + k0 + kb, ldg,
                                 ep);
        }
        __syncthreads();
    }
    return true;
}

/* ---- triangular solve: X[c x ncols] <- L^{-1} X, L lower (unit diagonal if `unit`).
 * Columns are independent: a group of gs lanes (a power of two <= 32) runs one column's forward
 * substitution, splitting each row's dot product over its lanes. Ends with a barrier. */
template <typename T>
__device__ __noinline__ void trsm_lower(const T *L, int ldl, bool unit, T *X, int ldx, int c, int ncols) {
    const int nt = blockDim.x;
    int gs = 1;
    while (gs < 32 && gs * 2 * ncols <= nt) gs *= 2;
    const int ngroups = nt / gs, g = threadIdx.x / gs, lig = threadIdx.x % gs;
    const int rounds = (ncols + ngroups - 1) / ngroups;
    for (int rr = 0; rr < rounds; rr++) {
        const int col = rr * ngroups + g;
        const bool act = col < ncols;
        for (int i = 0; i < c; i++) {
            T s = T(0);
            if (act) {
                const T *li = L + (size_t)i * ldl;
                for (int j = lig; j < i; j += gs) s += li[j] * X[(size_t)j * ldx + col];
            }
            for (int o = gs >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (act && lig == 0) {
                T x = X[(size_t)i * ldx + col] - s;
                if (!unit) x /= L[(size_t)i * ldl + i];
                X[(size_t)i * ldx + col] = x;
            }
            __syncwarp();
        }
    }
    __syncthreads();
}

/* ---- y[j] = sum_i x[i] M[i][j] (rows x cols; "S^T k" with S stored transposed).
 * red: blockDim.x floats of shared scratch. Ends with a barrier. */
template <typename MT>
__device__ __noinline__ void colvec(const MT *M, int ldm, int rows, int cols, const float *x, float *y, float *red) {
    const int nt = blockDim.x, tid = threadIdx.x;
    if (cols > nt) {
        for (int j = tid; j < cols; j += nt) {
            float s = 0.0f;
            for (int i = 0; i < rows; i++) s += x[i] * (float)M[(size_t)i * ldm + j];
            y[j] = s;
        }
        __syncthreads();
        return;
    }
    const int np = nt / cols; /* row partitions */
    if (tid < np * cols) {
        const int pp = tid / cols, j = tid - pp * cols;
        float s = 0.0f;
        for (int i = pp; i < rows; i += np) s += x[i] * (float)M[(size_t)i * ldm + j];
        red[pp * cols + j] = s;
    }
    __syncthreads();
    if (tid < cols) {
        float s = 0.0f;
        for (int pp = 0; pp < np; pp++) s += red[pp * cols + tid];
        y[tid] = s;
    }
    __syncthreads();
}

/* ---- block sum of one float per thread; every thread gets the total. red: 32 floats of
 * shared scratch, not touched again until the next call's barrier. Ends with a barrier. */
__device__ inline float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read by the previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < nw; w++) s += red[w];
    return s;
}

/* ---- one token of the VLA A recurrence (VLA-MATH 1), as cpu_vla.c's a_step:
 *   z = A u;  A -= z z^T / max(1 + u.z, eps);  (+ rho I at a refresh);  a_out = normalize(A k).
 * AT = double (the sequential algorithm: float32 drifts over long T) or float (the chunked
 * form's fallback when a chunk's Cholesky fails). Products are summed in double either way.
 * zbuf: dk doubles, part: 32 doubles, both shared. a_out may alias u (u is read before a_out
 * is written). Ends with a barrier. */
template <typename AT>
__device__ __noinline__ void a_step(AT *A, int lda, int dk, const float *u, const float *k, bool refresh, double rho,
                                    double eps, double *zbuf, double *part, float *a_out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int tid = threadIdx.x, nt = blockDim.x;
    /* z = A u (one thread per row: no shuffles on the critical path), and u.z */
    double pz = 0.0;
    for (int i = tid; i < dk; i += nt) {
        const AT *row = A + (size_t)i * lda;
        double s0 = 0.0, s1 = 0.0;
        int j = 0;
        for (; j + 2 <= dk; j += 2) {
            s0 = fma((double)row[j], (double)u[j], s0);
            s1 = fma((double)row[j + 1], (double)u[j + 1], s1);
        }
        if (j < dk) s0 = fma((double)row[j], (double)u[j], s0);
        const double z = s0 + s1;
        zbuf[i] = z;
        pz += (double)u[i] * z;
    }
    pz = warp_sum(pz);
    if (lane == 0) part[warp] = pz;
    __syncthreads();
    double uz = 0.0;
    for (int w = 0; w < nw; w++) uz += part[w];
    const double inv = 1.0 / fmax(1.0 + uz, eps);
    for (int e = tid; e < dk * dk; e += nt) {
        const int i = e / dk, j = e - i * dk;
        AT *ap = A + (size_t)i * lda + j;
        double v = (double)*ap - zbuf[i] * inv * zbuf[j];
        if (refresh && i == j) v += rho;
        *ap = (AT)v;
    }
    __syncthreads();
    /* w = A k and |w|^2 */
    double pn = 0.0;
    for (int i = tid; i < dk; i += nt) {
        const AT *row = A + (size_t)i * lda;
        double s0 = 0.0, s1 = 0.0;
        int j = 0;
        for (; j + 2 <= dk; j += 2) {
            s0 = fma((double)row[j], (double)k[j], s0);
            s1 = fma((double)row[j + 1], (double)k[j + 1], s1);
        }
        if (j < dk) s0 = fma((double)row[j], (double)k[j], s0);
        const double w = s0 + s1;
        zbuf[i] = w;
        pn += w * w;
    }
    pn = warp_sum(pn);
    if (lane == 0) part[warp] = pn;
    __syncthreads();
    double nn = 0.0;
    for (int w = 0; w < nw; w++) nn += part[w];
    const double sc = 1.0 / fmax(sqrt(nn), eps);
    for (int i = tid; i < dk; i += nt) a_out[i] = (float)(zbuf[i] * sc);
    __syncthreads();
}

} // namespace vlacu

#endif /* VLA_COMMON_CUH */
