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
 * Gauss-Jordan on the host.
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

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* form: 0 gj_inverse; 1 gj_rows<N, NW, UNROLL>; 2 blocked_inverse (session 11) */
template <int N, int FORM, int NW, bool UNROLL>
__global__ void __launch_bounds__(NT) inv_kernel(const double *M, double *out, long long *cyc) {
    __shared__ double buf[4 * N];
    __shared__ double bmd[FORM == 2 ? N * (N + 1) : 1], bx[FORM == 2 ? N / 2 * (N / 2 + 1) + 16 * 17 + 32 : 1];
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

    explicit Run(int blocks_) : blocks(blocks_) {
        M.resize((size_t)blocks * N * N);
        ref.resize(M.size());
        unsigned long long s = 12345 + N;
        std::vector<double> u(N);
        for (int b = 0; b < blocks; b++) {
            double *m = &M[(size_t)b * N * N];
            for (int e = 0; e < N * N; e++) m[e] = 0.0;
            for (int i = 0; i < N; i++) m[i * N + i] = 0.1;
            const int rows = 64 * (1 + b % 31);
            for (int r = 0; r < rows; r++) {
                double nn = 0.0;
                for (int i = 0; i < N; i++) nn += (u[i] = urand(&s)) * u[i];
                nn = 1.0 / sqrt(nn);
                for (int i = 0; i < N; i++)
                    for (int j = 0; j < N; j++) m[i * N + j] += u[i] * nn * u[j] * nn;
            }
            host_inverse(N, m, &ref[(size_t)b * N * N]);
        }
        CK(cudaMalloc(&dM, M.size() * 8));
        CK(cudaMalloc(&dO, M.size() * 8));
        CK(cudaMalloc(&dC, (size_t)blocks * 8));
        CK(cudaMemcpy(dM, M.data(), M.size() * 8, cudaMemcpyHostToDevice));
    }
    ~Run() {
        cudaFree(dM);
        cudaFree(dO);
        cudaFree(dC);
    }

    template <int FORM, int NW, bool UNROLL> void form(const char *name) {
        std::vector<long long> cyc(blocks), med;
        std::vector<double> o(M.size());
        for (int rep = 0; rep < 7; rep++) { /* the first is a warm-up */
            CK(cudaMemset(dO, 0, M.size() * 8));
            inv_kernel<N, FORM, NW, UNROLL><<<blocks, NT>>>(dM, dO, dC);
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
        printf("| %d | %d | %-26s | %8lld | %8lld | %.1e | %.1e |\n", N, blocks, name, med[med.size() / 2],
               cyc[blocks - 1], dmax, sqrt(num / den));
    }
};

template <int N> static void all_forms(int blocks) {
    Run<N> r(blocks);
    r.template form<0, 8, false>("gj_inverse (256 threads)");
    r.template form<2, 8, false>("blocked_inverse");
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
    printf("| N | blocks | form | median cycles | max cycles | max diff vs gj_inverse | rel err vs host |\n");
    printf("|--:|--:|---|--:|--:|--:|--:|\n");
    for (int per = 1; per <= 3; per += 2) {
        all_forms<32>(per * p.multiProcessorCount);
        all_forms<64>(per * p.multiProcessorCount);
    }
    return 0;
}
