/* The output normaliser shared by linear attention and VLA's normalised output, for the
 * algorithms that produce all outputs first (chunked, two-level, scan), as the CPU backend's
 * cpu_normalize_output: n_t = n_{t-1} + k~_t, o_t /= max(q~_t . n_t, eps) (vla) or
 * (q~_t . n_t + eps) (linear). Three launches: per block of NB tokens the sum of k~, an
 * exclusive prefix over the blocks (in double, which also gives n_out), then each block of
 * tokens in order from its prefix. */
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

__global__ void __launch_bounds__(VLACU_NT) norm_scan_kernel(const vlacu_args a, float *work, int nb) {
    const int bh = blockIdx.x, dk = a.dk;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        double acc = a.n_in ? (double)a.n_in[(size_t)bh * dk + i] : 0.0; /* read before n_out (may alias) */
        for (int blk = 0; blk < nb; blk++) {
            float *w = work + ((size_t)bh * nb + blk) * dk + i;
            const float x = *w;
            *w = (float)acc;
            acc += x;
        }
        if (a.n_out) a.n_out[(size_t)bh * dk + i] = (float)acc;
    }
}

__global__ void __launch_bounds__(VLACU_NT) norm_apply_kernel(const vlacu_args a, const float *work, int nb) {
    __shared__ float red[32];
    __shared__ float nsh[VLACU_MAXD];
    const int bh = blockIdx.x / nb, blk = blockIdx.x % nb, b = bh / a.H, h = bh % a.H, dk = a.dk, dv = a.dv;
    const int ta = blk * NB, tb = ta + NB < a.T ? ta + NB : a.T;
    const bool linear = a.mech == VLACU_LINEAR;
    const float eps = (float)a.eps;
    /* n[i] lives in nsh[i], touched only by thread i mod blockDim */
    for (int i = threadIdx.x; i < dk; i += blockDim.x) nsh[i] = work[((size_t)bh * nb + blk) * dk + i];
    for (int t = ta; t < tb; t++) {
        const size_t r = ((size_t)b * a.T + t) * a.H + h;
        float p = 0.0f;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            float kx = a.k[r * dk + i], qx = a.q[r * dk + i];
            if (a.elu1) kx = elu1f(kx), qx = elu1f(qx);
            const float n = nsh[i] + kx;
            nsh[i] = n;
            p += qx * n;
        }
        const float qn = block_sum(p, red);
        const float den = linear ? qn + eps : fmaxf(qn, eps);
        for (int j = threadIdx.x; j < dv; j += blockDim.x) a.o[r * dv + j] /= den;
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
