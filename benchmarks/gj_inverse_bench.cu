/* Times the segment inversion of the chunk-parallel A part in isolation on one GPU (session 8):
 * gj_inverse (kernels/cuda/vla_inverse.cuh, what apart_kernel runs: 256 threads, a 2 x 2 (N = 32)
 * or 4 x 4 (N = 64) block each, the steps a loop, a __syncthreads a step) against gj_rows here
 * (a row a lane, NW = 1, 2, 4 or 8 warps, a named barrier or __syncwarp a step), with and without
 * the steps unrolled. Unrolled, NW = 8 took half the cycles (47k against 89k at N = 64, 12k
 * against 17k at N = 32); in apart_kernel it made the VLA forward 1.5% faster at (1,4,32)
 * T = 2048 and 1% slower at T = 8192 and 32768 (benchmarks/results/2026-11-30-h200-session8),
 * so the kernel keeps gj_inverse. Session 11 adds blocked_inverse (2 x 2 blocks down to 16 x 16 ones
 * that a warp inverts by shuffles; vla_inverse.cuh).
 *
 * Inputs are what apart_kernel inverts: M = lambda0 I + U^T U, U = 64 g rows of unit vectors
 * (g = 1 + block % 31, lambda0 = 0.1), one matrix a block, 1 or 3 blocks a multiprocessor.
 * Reported per form: the median and largest clock64() cycles a block for one inversion (loads
 * from global memory included, as in the kernel), the largest |entry - gj_inverse's entry|
 * (0: the forms do the same operations), and the relative Frobenius error against a float64
 * Gauss-Jordan on the host (all blocks, and the worst block).
 *
 * Session 13 adds refined_inverse32 (below: a float32 Gauss-Jordan inverse by one warp, refined by
 * Newton steps in double, blocked_inverse where the float start is too far off) and a hard set at
 * N = 32 (Run's comment). On the H200 it took 25.4k cycles a block against blocked_inverse's 13.2k
 * (one block a multiprocessor; one Newton step sufficed for every random matrix and for 130 of 132
 * hard ones, relative error 1e-13): the float steps cost about 600 cycles each, not the ~150 that
 * their dependent chain suggests (each step's divergent pivot-row branch, its stores, a
 * __syncwarp and shared-memory round trips). In apart_kernel (development switch, session 13 run
 * 2) it made (1,4,32) T = 2048 10% slower (phase 1: 27k cycles against 17k). Not kept; the code is
 * here, where it was measured (benchmarks/results/2026-12-01-h200-session13).
 *
 * Session 24 built it with -DVLA_INV16_WARPS=1, 2 and 4 (blocked_inverse's 16 x 16 leaves by one, two
 * or four warps: 13.5k, 12.7k and 13.8k cycles at N = 32; two landed) and with a fraction-free step
 * (13.0k; benchmarks/results/2026-12-02-h200-session24, with its patch).
 *
 * Build and run (on the device): nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda
 *   benchmarks/gj_inverse_bench.cu -o gj_bench && ./gj_bench */
#include "vla_inverse.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

using namespace vlacu::cp;

/* A barrier among the first NTHR threads of the block (bar.sync 1; __syncwarp for one warp). */
template <int NTHR> __device__ __forceinline__ void bar_first() {
    if (NTHR == 32) __syncwarp();
    else if (NTHR == NT) __syncthreads();
    else asm volatile("bar.sync 1, %0;" ::"n"(NTHR) : "memory");
}

/* M^{-1} by the first NW warps (the other threads must not call it, nor touch buf meanwhile):
 * lane l keeps rows l, l + 32, .. (N / 32 of them) and warp q the columns q CW .. q CW + CW - 1
 * (CW = N / NW) in registers; src(lane, c0, m) fills m[r][j] = M[lane + 32 r][c0 + j]. At step k
 * the owners of row k and of column k publish them to buf (double[2][2N], by k's parity: the
 * buffer a step writes was last read before the previous step's barrier), a barrier among the NW
 * warps, and every thread updates its entries. UNROLL unrolls the N steps, which turns every
 * "is this row / column k" test into a compile-time one: at NW = 8 that halved the time (89k to
 * 47k cycles at N = 64, 17k to 12k at N = 32, one block a multiprocessor on the H200). Then
 * out(i, j, entry) for the thread's entries; no barrier at the end. A non-positive or NaN pivot
 * gives non-finite entries, which then show in every output of the segment. */
template <int N, int NW, bool UNROLL, typename S, typename F>
__device__ __forceinline__ void gj_rows(S src, double *buf, F out) {
    constexpr int RW = N / 32, CW = N / NW;
    static_assert(RW * 32 == N && CW * NW == N && NW * 32 <= NT, "N rows over 32 lanes, N columns over NW warps");
    const int lane = (int)threadIdx.x & 31, c0 = CW * ((int)threadIdx.x >> 5);
    double m[RW][CW];
    src(lane, c0, m);
#pragma unroll(UNROLL ? N : 1)
    for (int k = 0; k < N; k++) {
        double *row = buf + (k & 1) * 2 * N, *col = row + N;
#pragma unroll
        for (int r = 0; r < RW; r++)
            if (lane + 32 * r == k)
#pragma unroll
                for (int j = 0; j < CW; j++) row[c0 + j] = m[r][j];
#pragma unroll
        for (int j = 0; j < CW; j++)
            if (c0 + j == k)
#pragma unroll
                for (int r = 0; r < RW; r++) col[lane + 32 * r] = m[r][j];
        bar_first<NW * 32>();
        const double rp = 1.0 / row[k];
        double akj[CW], aik[RW];
#pragma unroll
        for (int j = 0; j < CW; j++) akj[j] = row[c0 + j];
#pragma unroll
        for (int r = 0; r < RW; r++) aik[r] = col[lane + 32 * r];
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int j = 0; j < CW; j++) {
                const bool ik = lane + 32 * r == k, jk = c0 + j == k;
                if (ik) m[r][j] = jk ? rp : akj[j] * rp;
                else m[r][j] = jk ? -aik[r] * rp : fma(-aik[r], akj[j] * rp, m[r][j]);
            }
    }
#pragma unroll
    for (int r = 0; r < RW; r++)
#pragma unroll
        for (int j = 0; j < CW; j++) out(lane + 32 * r, c0 + j, m[r][j]);
}

/* ---- The refined form (session 13, N = 32; tried in apart_kernel and not kept: see the file's
 * header): a float32 Gauss-Jordan inverse by one warp, then Newton steps in double, X <- X + X (I -
 * M X). The idea: blocked_inverse's 32 pivot steps are chains of dependent double operations (the
 * reciprocal alone six, about 330 cycles a step), where a float step is a float reciprocal and one
 * FMA deep. The float inverse of the
 * Jacobi-scaled M (unit diagonal) has a residual R = I - M X of about n eps_f cond(M); each Newton
 * step squares it (||R'|| <= ||R||^2, infinity norm), and the steps are products, 256 threads at
 * once. A residual norm >= 1/2 (or NaN: a float pivot <= 0 of an ill-conditioned M) returns 0,
 * and the caller runs blocked_inverse on the untouched M. ---- */

/* Residual norm after which one more Newton step is the last: its result's residual is at most
 * the square, 1e-8, below float32 rounding of A (A0 is stored as float). */
constexpr double REFINE_TOL = 1e-4;
typedef float4 rf4;
typedef double2 rd2;
constexpr int REFINE_MAXIT = 6; /* steps at most (from 1/2: 1/4, 1/16, 4e-3, 1.5e-5, 2e-10) */
constexpr int REFINE_LD = 34;   /* row stride of X and R (doubles) */

/* Warp 0 (the caller's test): X (ld REFINE_LD) <- the float32 Gauss-Jordan inverse of M (32 x 32
 * double, ld ldm) with Jacobi scaling: X = D (D M D)^{-1} D, D = diag(M)^{-1/2}. Lane r keeps row r
 * of D M D (32 floats); at step k lane k publishes its row to fb (float[2][32], by k's parity) and,
 * after a __syncwarp, every lane updates its row from it. dvec: 32 doubles of scratch. No pivoting
 * (the scaled matrix is symmetric positive definite, pivots > 0 in exact arithmetic). */
__device__ __noinline__ void float_gj32(const double *M, int ldm, double *X, float *fb, double *dvec) {
    const int r = (int)threadIdx.x & 31;
    const double dr = 1.0 / sqrt(M[r * ldm + r]);
    dvec[r] = dr;
    __syncwarp();
    float m[32];
#pragma unroll
    for (int j = 0; j < 32; j++) m[j] = (float)(M[r * ldm + j] * dr * dvec[j]);
#pragma unroll
    for (int k = 0; k < 32; k++) {
        rf4 *row4 = reinterpret_cast<rf4 *>(fb + (k & 1) * 32); /* 16-byte rows: eight vector loads a step */
        if (r == k)
#pragma unroll
            for (int j = 0; j < 8; j++) row4[j] = rf4{m[4 * j], m[4 * j + 1], m[4 * j + 2], m[4 * j + 3]};
        __syncwarp();
        const float rp = 1.0f / fb[(k & 1) * 32 + k];
        if (r == k) { /* the pivot row is the lane's own */
#pragma unroll
            for (int j = 0; j < 32; j++) m[j] = j == k ? rp : m[j] * rp;
        } else { /* a quarter of the pivot row at a time (all of it at once spilled under an 80-register cap) */
            const float f = m[k] * rp;
#pragma unroll
            for (int j4 = 0; j4 < 8; j4++) {
                const rf4 v = row4[j4];
                const float w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int j = 4 * j4 + q;
                    m[j] = j == k ? -f : fmaf(-f, w[q], m[j]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 32; j++) X[r * REFINE_LD + j] = (double)m[j] * dr * dvec[j];
}

/* Block-wide: the largest of every thread's x (NaN if any is NaN), through red (NT / 32 doubles).
 * Ends with the barrier that also publishes the caller's shared-memory stores before it. */
__device__ __forceinline__ double block_max_nan(double x, double *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double y = __shfl_xor_sync(0xffffffffu, x, o);
        x = (y > x || y != y) ? y : x;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
    __syncthreads();
    double m = red[0];
    for (int w = 1; w < NT / 32; w++) m = (red[w] > m || red[w] != red[w]) ? red[w] : m;
    return m;
}

/* M^{-1} for the symmetric positive definite 32 x 32 M (double, ld ldm, in shared memory, staged
 * by the caller before a barrier): the float inverse (warp 0) into Xa, then Newton steps, X (ld
 * REFINE_LD) alternating between Xa and Xb, R in Rd (32 x REFINE_LD doubles each); fb (64 floats)
 * and dvec (32 doubles) are warp 0's scratch, red (2 NT / 32 doubles) the norms'. Xa, Xb, Rd and
 * fb 16-byte aligned. Each thread
 * takes 2 x 2 tiles of the 16 x 16 (tile e: rows 2 (e / 16) .., columns 2 (e % 16) ..), and the
 * last step's result goes straight to out(i, j, entry). Returns the Newton steps taken, or 0, every
 * thread alike and out never called, when the float inverse's residual norm is not below 1/2. M is only read. No
 * barrier at the end. */
template <typename F>
__device__ __forceinline__ int refined_inverse32(const double *M, int ldm, double *Xa, double *Xb, double *Rd, float *fb,
                                                  double *dvec, double *red, F out) {
    constexpr int LD = REFINE_LD, TT = 256, TPT = TT / NT;
    static_assert(TPT * NT == TT, "the 256 tiles must split over NT threads");
    if (threadIdx.x < 32) float_gj32(M, ldm, Xa, fb, dvec);
    __syncthreads();
    double *X = Xa, *Xn = Xb;
#pragma unroll 1
    for (int it = 0;; it++) {
        /* R = I - M X, and its infinity norm (the largest row sum of |R|: 16 tiles a row pair, lanes
         * of one half-warp) */
        double nrm = 0.0;
#pragma unroll
        for (int u = 0; u < TPT; u++) {
            const int e = (int)threadIdx.x + NT * u, r0 = 2 * (e >> 4), c0 = 2 * (e & 15);
            double s00 = 0.0, s01 = 0.0, s10 = 0.0, s11 = 0.0;
#pragma unroll 8
            for (int p = 0; p < 32; p++) {
                const double a0 = M[r0 * ldm + p], a1 = M[(r0 + 1) * ldm + p];
                const rd2 b = *reinterpret_cast<const rd2 *>(X + p * LD + c0);
                const double b0 = b.x, b1 = b.y;
                s00 = fma(a0, b0, s00), s01 = fma(a0, b1, s01), s10 = fma(a1, b0, s10), s11 = fma(a1, b1, s11);
            }
            const double r00 = (r0 == c0 ? 1.0 : 0.0) - s00, r01 = -s01, r10 = -s10, r11 = (r0 == c0 ? 1.0 : 0.0) - s11;
            Rd[r0 * LD + c0] = r00, Rd[r0 * LD + c0 + 1] = r01, Rd[(r0 + 1) * LD + c0] = r10, Rd[(r0 + 1) * LD + c0 + 1] = r11;
            double q0 = fabs(r00) + fabs(r01), q1 = fabs(r10) + fabs(r11);
#pragma unroll
            for (int o = 1; o < 16; o <<= 1) q0 += __shfl_xor_sync(0xffffffffu, q0, o), q1 += __shfl_xor_sync(0xffffffffu, q1, o);
            const double q = (q1 > q0 || q1 != q1) ? q1 : q0;
            nrm = (q > nrm || q != q) ? q : nrm;
        }
        const double rn = block_max_nan(nrm, red + (it & 1) * (NT / 32)); /* (also publishes Rd) */
        if (!(rn < 0.5)) return 0;
        const bool last = rn <= REFINE_TOL || it + 1 >= REFINE_MAXIT;
        /* X' = X + X R */
        double xn[TPT][4];
#pragma unroll
        for (int u = 0; u < TPT; u++) {
            const int e = (int)threadIdx.x + NT * u, r0 = 2 * (e >> 4), c0 = 2 * (e & 15);
            double s00 = 0.0, s01 = 0.0, s10 = 0.0, s11 = 0.0;
#pragma unroll 8
            for (int p = 0; p < 32; p++) {
                const double a0 = X[r0 * LD + p], a1 = X[(r0 + 1) * LD + p];
                const rd2 b = *reinterpret_cast<const rd2 *>(Rd + p * LD + c0);
                const double b0 = b.x, b1 = b.y;
                s00 = fma(a0, b0, s00), s01 = fma(a0, b1, s01), s10 = fma(a1, b0, s10), s11 = fma(a1, b1, s11);
            }
            xn[u][0] = X[r0 * LD + c0] + s00, xn[u][1] = X[r0 * LD + c0 + 1] + s01;
            xn[u][2] = X[(r0 + 1) * LD + c0] + s10, xn[u][3] = X[(r0 + 1) * LD + c0 + 1] + s11;
        }
        if (last) {
#pragma unroll
            for (int u = 0; u < TPT; u++) {
                const int e = (int)threadIdx.x + NT * u, r0 = 2 * (e >> 4), c0 = 2 * (e & 15);
                out(r0, c0, xn[u][0]), out(r0, c0 + 1, xn[u][1]), out(r0 + 1, c0, xn[u][2]), out(r0 + 1, c0 + 1, xn[u][3]);
            }
            return it + 1;
        }
#pragma unroll
        for (int u = 0; u < TPT; u++) {
            const int e = (int)threadIdx.x + NT * u, r0 = 2 * (e >> 4), c0 = 2 * (e & 15);
            Xn[r0 * LD + c0] = xn[u][0], Xn[r0 * LD + c0 + 1] = xn[u][1];
            Xn[(r0 + 1) * LD + c0] = xn[u][2], Xn[(r0 + 1) * LD + c0 + 1] = xn[u][3];
        }
        __syncthreads(); /* Xn complete; X and Rd read */
        double *t = X;
        X = Xn, Xn = t;
    }
}

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* form: 0 gj_inverse; 1 gj_rows<N, NW, UNROLL>; 2 blocked_inverse (session 11); 3 refined_inverse32
 * (session 13; steps_out: its Newton steps a block, 0 where it fell back to blocked_inverse) */
template <int N, int FORM, int NW, bool UNROLL>
__global__ void __launch_bounds__(NT) inv_kernel(const double *M, double *out, long long *cyc, int *steps_out) {
    __shared__ double buf[4 * N];
    __shared__ double bmd[FORM >= 2 ? N * (N + 1) : 1], bx[FORM >= 2 ? N / 2 * (N / 2 + 1) + 16 * 17 + 32 : 1];
    const double *src = M + (size_t)blockIdx.x * N * N;
    double *dst = out + (size_t)blockIdx.x * N * N;
    auto put = [&](int i, int j, double x) { dst[i * N + j] = x; };
    __syncthreads();
    const long long t0 = clock64();
    if (FORM == 0) {
        constexpr int R = N / 16;
        gj_inverse<N>([&](int r0, int c0, double (&m)[R][R]) {
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < R; j++) m[i][j] = src[(r0 + i) * N + c0 + j];
        }, buf, put);
    } else if (FORM == 2) { /* as apart_kernel: the thread's R x R block staged, then the inverse */
        constexpr int R = N / 16;
        const int r0 = R * ((int)threadIdx.x / 16), c0 = R * ((int)threadIdx.x % 16);
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < R; j++) bmd[(r0 + i) * (N + 1) + c0 + j] = src[(r0 + i) * N + c0 + j];
        __syncthreads();
        blocked_inverse<N>(bmd, bx, put);
    } else if (FORM == 3) { /* refined_inverse32 (session 13), blocked_inverse where it gives up, as apart_kernel */
        static_assert(FORM != 3 || N == 32, "the refined form is N = 32's");
        __shared__ __align__(16) double xa[32 * REFINE_LD], xb[32 * REFINE_LD], rd[32 * REFINE_LD], dv[32], red[2 * NT / 32];
        __shared__ __align__(16) float fb[64];
        const int r0 = 2 * ((int)threadIdx.x / 16), c0 = 2 * ((int)threadIdx.x % 16);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) bmd[(r0 + i) * (N + 1) + c0 + j] = src[(r0 + i) * N + c0 + j];
        __syncthreads();
        const int steps = refined_inverse32(bmd, N + 1, xa, xb, rd, fb, dv, red, put);
        if (!steps) blocked_inverse<N>(bmd, bx, put);
        if (threadIdx.x == 0) steps_out[blockIdx.x] = steps;
    } else if ((int)threadIdx.x < NW * 32) {
        constexpr int RW = N / 32, CW = N / NW;
        gj_rows<N, NW, UNROLL>([&](int r0, int c0, double (&m)[RW][CW]) {
#pragma unroll
            for (int r = 0; r < RW; r++)
#pragma unroll
                for (int j = 0; j < CW; j++) m[r][j] = src[(r0 + 32 * r) * N + c0 + j];
        }, buf, put);
    }
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

static void host_inverse(int n, const double *M, double *X) {
    std::vector<double> a(M, M + (size_t)n * n);
    for (int k = 0; k < n; k++) {
        const double rp = 1.0 / a[k * n + k];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (i == k || j == k) continue;
                a[i * n + j] -= a[i * n + k] * a[k * n + j] * rp;
            }
        for (int j = 0; j < n; j++)
            if (j != k) a[k * n + j] *= rp;
        for (int i = 0; i < n; i++)
            if (i != k) a[i * n + k] *= -rp;
        a[k * n + k] = rp;
    }
    for (size_t e = 0; e < (size_t)n * n; e++) X[e] = a[e];
}

static double urand(unsigned long long *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0;
}

template <int N> struct Run {
    int blocks;
    std::vector<double> M, ref, base;
    double *dM = nullptr, *dO = nullptr;
    long long *dC = nullptr;
    int *dS = nullptr;

    const char *kind;
    /* hard: lambda0 = 1e-3 and rows near a subspace of (1 + b % 8) dimensions (noise 1e-3 b % 5 off it),
     * condition numbers up to about 1e7, where the refined form's float start fails on some */
    Run(int blocks_, bool hard) : blocks(blocks_), kind(hard ? "hard" : "random") {
        M.resize((size_t)blocks * N * N);
        ref.resize(M.size());
        unsigned long long s = 12345 + N;
        std::vector<double> u(N);
        for (int b = 0; b < blocks; b++) {
            double *m = &M[(size_t)b * N * N];
            for (int e = 0; e < N * N; e++) m[e] = 0.0;
            for (int i = 0; i < N; i++) m[i * N + i] = hard ? 1e-3 : 0.1;
            const int rows = 64 * (1 + b % 31), sub = 1 + b % 8;
            const double noise = 1e-3 * (b % 5);
            for (int r = 0; r < rows; r++) {
                double nn = 0.0;
                for (int i = 0; i < N; i++) nn += (u[i] = urand(&s) * (!hard || i < sub ? 1.0 : noise)) * u[i];
                nn = 1.0 / sqrt(nn);
                for (int i = 0; i < N; i++)
                    for (int j = 0; j < N; j++) m[i * N + j] += u[i] * nn * u[j] * nn;
            }
            host_inverse(N, m, &ref[(size_t)b * N * N]);
        }
        CK(cudaMalloc(&dM, M.size() * 8));
        CK(cudaMalloc(&dO, M.size() * 8));
        CK(cudaMalloc(&dC, (size_t)blocks * 8));
        CK(cudaMalloc(&dS, (size_t)blocks * 4));
        CK(cudaMemset(dS, 0, (size_t)blocks * 4));
        CK(cudaMemcpy(dM, M.data(), M.size() * 8, cudaMemcpyHostToDevice));
    }
    ~Run() {
        cudaFree(dM);
        cudaFree(dO);
        cudaFree(dC);
        cudaFree(dS);
    }

    template <int FORM, int NW, bool UNROLL> void form(const char *name) {
        std::vector<long long> cyc(blocks), med;
        std::vector<double> o(M.size());
        for (int rep = 0; rep < 7; rep++) { /* the first is a warm-up */
            CK(cudaMemset(dO, 0, M.size() * 8));
            inv_kernel<N, FORM, NW, UNROLL><<<blocks, NT>>>(dM, dO, dC, dS);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(cyc.data(), dC, (size_t)blocks * 8, cudaMemcpyDeviceToHost));
            std::sort(cyc.begin(), cyc.end());
            if (rep) med.push_back(cyc[blocks / 2]);
        }
        std::sort(med.begin(), med.end());
        CK(cudaMemcpy(o.data(), dO, o.size() * 8, cudaMemcpyDeviceToHost));
        if (FORM == 0) base = o;
        double dmax = 0.0, num = 0.0, den = 0.0;
        for (size_t e = 0; e < o.size(); e++) {
            dmax = fmax(dmax, fabs(o[e] - base[e]));
            num += (o[e] - ref[e]) * (o[e] - ref[e]);
            den += ref[e] * ref[e];
        }
        /* the worst block's relative error too (the hard set's conditioning varies block to block) */
        double worst = 0.0;
        for (int b = 0; b < blocks; b++) {
            double nb = 0.0, db = 0.0;
            for (int e = 0; e < N * N; e++) {
                const size_t i = (size_t)b * N * N + e;
                nb += (o[i] - ref[i]) * (o[i] - ref[i]), db += ref[i] * ref[i];
            }
            worst = fmax(worst, sqrt(nb / db));
        }
        char steps[64] = "";
        if (FORM == 3) {
            std::vector<int> st(blocks);
            CK(cudaMemcpy(st.data(), dS, (size_t)blocks * 4, cudaMemcpyDeviceToHost));
            int hist[REFINE_MAXIT + 1] = {0};
            for (int v : st) hist[v < 0 ? 0 : v > REFINE_MAXIT ? REFINE_MAXIT : v]++;
            snprintf(steps, sizeof steps, "fell back %d, 1 step %d, 2 %d, 3+ %d", hist[0], hist[1], hist[2],
                     blocks - hist[0] - hist[1] - hist[2]);
        }
        printf("| %d | %s | %d | %-26s | %8lld | %8lld | %.1e | %.1e | %.1e | %s |\n", N, kind, blocks, name,
               med[med.size() / 2], cyc[blocks - 1], dmax, sqrt(num / den), worst, steps);
    }
};

template <int N> static void all_forms(int blocks, bool hard, bool few) {
    Run<N> r(blocks, hard);
    r.template form<0, 8, false>("gj_inverse (256 threads)");
    r.template form<2, 8, false>("blocked_inverse");
    if constexpr (N == 32) r.template form<3, 8, false>("refined_inverse32");
    if (few) return;
    r.template form<1, 8, false>("gj_rows NW=8");
    r.template form<1, 4, false>("gj_rows NW=4");
    r.template form<1, 2, false>("gj_rows NW=2");
    r.template form<1, 8, true>("gj_rows NW=8 unrolled");
    r.template form<1, 4, true>("gj_rows NW=4 unrolled");
    r.template form<1, 2, true>("gj_rows NW=2 unrolled");
    if constexpr (N == 32) r.template form<1, 1, true>("gj_rows NW=1 unrolled");
}

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "usage: %s (no arguments): times every inversion form at N = 32 and 64\n", argv[0]);
        return 2;
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s, %d multiprocessors; cycles a block for one inversion (median of 6 launches of the block median)\n\n",
           p.name, p.multiProcessorCount);
    printf("| N | matrices | blocks | form | median cycles | max cycles | max diff vs gj_inverse | rel err vs host | worst block | refined: steps |\n");
    printf("|--:|---|--:|---|--:|--:|--:|--:|--:|---|\n");
    for (int per = 1; per <= 3; per += 2) {
        all_forms<32>(per * p.multiProcessorCount, false, false);
        all_forms<64>(per * p.multiProcessorCount, false, false);
    }
    for (int per = 1; per <= 2; per++) all_forms<32>(per * p.multiProcessorCount, true, true);
    return 0;
}
