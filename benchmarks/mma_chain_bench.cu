/* How long a TF32 tensor-core step takes on this GPU when the steps depend on each other and
 * when they do not (session 10): the chunk-parallel kernels' products (kernels/cuda/vla_mma.cuh)
 * issue each 16 x 8 tile's 3xTF32 / 4xTF32 steps as one dependent chain (mma.sync
 * m16n8k8 .tf32, the accumulator fed back), so whether a chain costs its latency or only its
 * issue slots decides whether interleaving tiles can pay.
 *
 * Each warp runs ITER rounds of CH chains of DEP dependent mma.sync (chains interleaved in
 * program order, the asm not volatile so that ptxas may schedule), operands from registers. Printed:
 * clock64() cycles a round per warp divided by the mma a round, for 1 warp a block and for 8
 * (two a sub-partition), one block a multiprocessor.
 *
 * Session 14 added the FP64 tensor-core step (OP = 1: mma.sync m8n8k4 .f64, 512 FLOP against
 * m16n8k8 .tf32's 2048), to see whether FP64 tiles on float operands could replace 4xTF32 (its run
 * 1 also timed cvt.f64.f32, but the compiler hoisted the conversions out of the loop: removed).
 *
 * Build and run (on the device): nvcc -O3 -std=c++17 -arch=sm_90 benchmarks/mma_chain_bench.cu
 *   -o mma_bench && ./mma_bench */
#include <cuda_runtime.h>
#include <stdio.h>

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void dmma(double (&d)[2], double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a), "d"(b));
}

/* OP 0: m16n8k8 .tf32 steps, OP 1: m8n8k4 .f64 steps; CH chains of DEP dependent steps a round. */
template <int OP, int CH, int DEP, int ITER> __global__ void chains(float *out, long long *cyc, unsigned seed) {
    unsigned a[4], b[2];
#pragma unroll
    for (int q = 0; q < 4; q++) a[q] = (seed * (threadIdx.x + 3 * q + 1)) & 0x3f800000u;
#pragma unroll
    for (int q = 0; q < 2; q++) b[q] = (seed * (threadIdx.x + 7 * q + 2)) & 0x3f800000u;
    const double da = 1.0 + 1e-3 * (seed & 7) * threadIdx.x, db = 1.0 - 1e-3 * threadIdx.x;
    float d[CH][4];
    double dd[CH][2];
#pragma unroll
    for (int c = 0; c < CH; c++) {
#pragma unroll
        for (int q = 0; q < 4; q++) d[c][q] = 0.0f;
        dd[c][0] = dd[c][1] = 0.0;
    }
    __syncwarp();
    const long long t0 = clock64();
#pragma unroll 1
    for (int it = 0; it < ITER; it++)
#pragma unroll
        for (int s = 0; s < DEP; s++)
#pragma unroll
            for (int c = 0; c < CH; c++) {
                if constexpr (OP == 0) mma(d[c], a, b);
                else dmma(dd[c], da, db);
            }
    __syncwarp();
    const long long t1 = clock64();
    double x = 0.0;
#pragma unroll
    for (int c = 0; c < CH; c++) x += d[c][0] + d[c][1] + d[c][2] + d[c][3] + dd[c][0] + dd[c][1];
    out[blockIdx.x * blockDim.x + threadIdx.x] = (float)x;
    if ((threadIdx.x & 31) == 0) cyc[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = t1 - t0;
}

template <int CH, int DEP, int OP = 0> static void run(int warps, int sms) {
    constexpr int ITER = 512;
    float *out;
    long long *cyc;
    cudaMalloc(&out, (size_t)sms * warps * 32 * sizeof(float));
    cudaMalloc(&cyc, (size_t)sms * warps * sizeof(long long));
    long long best = -1;
    for (int rep = 0; rep < 5; rep++) {
        chains<OP, CH, DEP, ITER><<<sms, warps * 32>>>(out, cyc, 0x9e3779b9u + rep);
        long long h[8 * 1024];
        cudaMemcpy(h, cyc, (size_t)sms * warps * sizeof(long long), cudaMemcpyDeviceToHost);
        long long mx = 0;
        for (int i = 0; i < sms * warps; i++) mx = h[i] > mx ? h[i] : mx;
        if (rep > 0 && (best < 0 || mx < best)) best = mx; /* the first launch warms up */
    }
    const cudaError_t e = cudaGetLastError();
    printf("| %s | %d | %d | %d | %.2f | %.2f |\n", OP == 0 ? "tf32 m16n8k8" : "f64 m8n8k4", warps, CH, DEP, (double)best / ITER, (double)best / ITER / (CH * DEP));
    if (e != cudaSuccess) printf("error: %s\n", cudaGetErrorString(e));
    cudaFree(out);
    cudaFree(cyc);
}

int main() {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d multiprocessors; mma.sync m16n8k8 .tf32, one block a multiprocessor\n\n", p.name, p.multiProcessorCount);
    printf("| op | warps a block | chains a warp | dependent mma a chain | cycles a round | cycles an mma (per warp) |\n|---|--:|--:|--:|--:|--:|\n");
    const int sms = p.multiProcessorCount;
    for (int w : {1, 8}) {
        run<1, 4>(w, sms);
        run<2, 4>(w, sms);
        run<4, 4>(w, sms);
        run<8, 4>(w, sms);
        run<4, 1>(w, sms);
        run<8, 1>(w, sms);
    }
    for (int w : {1, 8, 16}) {
        run<1, 4, 1>(w, sms);
        run<4, 4, 1>(w, sms);
        run<8, 4, 1>(w, sms);
        run<8, 1, 1>(w, sms);
    }
    run<8, 4>(16, sms);
    return 0;
}
