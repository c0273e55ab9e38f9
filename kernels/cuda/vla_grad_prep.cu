/* The backward's preparation of the inputs and its chain rule (VLA-MATH 1 and 5), one warp per token
 * row (b, t, h), rows in the [BH][T][dk] order of the recurrent backward:
 *
 *   forward   q~ = phi(q),  k~ = phi(k),  k^ = k~ / max(||k~||, eps),
 *             u = s_u u_raw / max(||u_raw||, eps)  (u given),  u = s_u k^  (u not given)
 *   backward  dk^ += s_u du  (u not given: dk collects that path)
 *             dk~ += (dk^ - k^ (k^ . dk^)) / ||k~||  where ||k~|| > eps,  dk^ / eps where the floor binds
 *             dq = phi'(q) dq~,  dk = phi'(k) dk~  (phi' of elu + 1: 1 for x > 0, exp(x) for x <= 0)
 *             du_raw = s_u (du - u^ (u^ . du)) / ||u_raw||  (s_u du / eps where the floor binds)
 * The forward rounds as the sequential forward kernel does (float, x * (1 / max(sqrt(ss), eps))). */
#include "vla_grad.cuh"

namespace vlacu {
namespace grad {

__device__ __forceinline__ float elu1_grad(float x) { return x > 0.0f ? 1.0f : expf(x); }

/* Which [BH][T][dk] row this warp takes, and its [B,T,H] row; false when past the end (uniform in
 * the warp). */
__device__ __forceinline__ bool row_of(const vlacu_args &a, size_t *pr, size_t *r) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const size_t nrows = (size_t)a.B * a.H * a.T;
    if (row >= nrows) return false;
    const size_t bh = row / a.T, t = row - bh * a.T, b = bh / a.H, h = bh - b * a.H;
    *pr = row * a.dk;
    *r = ((b * a.T + t) * a.H + h);
    return true;
}

__global__ void __launch_bounds__(VLACU_NT) grad_prep_kernel(const gprep_params P) {
    const vlacu_args &a = P.a;
    size_t pr, r;
    if (!row_of(a, &pr, &r)) return; /* (no barrier below: warps return independently) */
    const int dk = a.dk, lane = threadIdx.x & 31;
    const bool elu = a.elu1 != 0, vla = a.mech == VLACU_VLA;
    const float eps = (float)a.eps, su = (float)a.u_scale;
    const float *q = a.q + r * dk, *k = a.k + r * dk;
    float ss = 0.0f;
    for (int i = lane; i < dk; i += 32) {
        const float x = q[i];
        P.Qp[pr + i] = elu ? elu1f(x) : x;
        const float y = elu ? elu1f(k[i]) : k[i];
        if (P.Kf) P.Kf[pr + i] = y;
        ss += y * y;
    }
    if (P.Kh) {
        ss = warp_sum(ss);
        const float inv = 1.0f / fmaxf(sqrtf(ss), eps);
        for (int i = lane; i < dk; i += 32) {
            const float y = elu ? elu1f(k[i]) : k[i], x = y * inv;
            P.Kh[pr + i] = x;
            if (vla && !a.u) P.Up[pr + i] = su * x;
        }
    }
    if (vla && a.u) {
        const float *u = a.u + r * dk;
        float su2 = 0.0f;
        for (int i = lane; i < dk; i += 32) su2 += u[i] * u[i];
        su2 = warp_sum(su2);
        const float mul = su / fmaxf(sqrtf(su2), eps);
        for (int i = lane; i < dk; i += 32) P.Up[pr + i] = u[i] * mul;
    }
}

/* One warp: out[i] += s (dy - x^ (x^ . dy)) / ||x|| (or s dy / eps where the floor binds), x a raw
 * row of D (through elu + 1 first when elu), dy a row. In double: these are short sums. */
__device__ __forceinline__ void normalize_back(const float *x, bool elu, const float *dy, int D, double eps, double s,
                                               float *out, bool accumulate) {
    const int lane = threadIdx.x & 31;
    double xx = 0.0, xd = 0.0;
    for (int i = lane; i < D; i += 32) {
        const double xi = elu ? (double)elu1f(x[i]) : (double)x[i];
        xx += xi * xi;
        xd += xi * (double)dy[i];
    }
    xx = warp_sum(xx);
    xd = warp_sum(xd);
    const double nrm = sqrt(xx);
    for (int i = lane; i < D; i += 32) {
        double g;
        if (nrm > eps) {
            const double xi = elu ? (double)elu1f(x[i]) : (double)x[i];
            g = s * ((double)dy[i] - xi * (xd / xx)) / nrm;
        } else {
            g = s * (double)dy[i] / eps;
        }
        out[i] = accumulate ? (float)((double)out[i] + g) : (float)g;
    }
}

/* The chain rule of one row. The row's dk~ and dk^ are gathered in the warp's slices of two shared
 * arrays (rows of VLACU_MAXD) first. */
__global__ void __launch_bounds__(VLACU_NT) grad_prep_back_kernel(const gprep_params P) {
    __shared__ float dkf_s[VLACU_NT / 32][VLACU_MAXD], dkh_s[VLACU_NT / 32][VLACU_MAXD];
    const vlacu_args &a = P.a;
    size_t pr, r;
    if (!row_of(a, &pr, &r)) return;
    const int dk = a.dk, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool elu = a.elu1 != 0, vla = a.mech == VLACU_VLA, delta = a.mech == VLACU_DELTA;
    const double eps = a.eps, su = a.u_scale;
    const float *q = a.q + r * dk, *k = a.k + r * dk;
    float *dkf = dkf_s[warp], *dkh = dkh_s[warp];

    if (P.dq)
        for (int i = lane; i < dk; i += 32) P.dq[r * dk + i] = elu ? P.dQp[pr + i] * elu1_grad(q[i]) : P.dQp[pr + i];

    if (P.dk) {
        for (int i = lane; i < dk; i += 32) {
            dkf[i] = P.dKf ? P.dKf[pr + i] : 0.0f;
            if (vla || delta) dkh[i] = P.dKh[pr + i] + (vla && !a.u ? (float)su * P.dU[pr + i] : 0.0f);
        }
        __syncwarp();
        if (vla || delta) normalize_back(k, elu, dkh, dk, eps, 1.0, dkf, true);
        __syncwarp();
        for (int i = lane; i < dk; i += 32) P.dk[r * dk + i] = elu ? dkf[i] * elu1_grad(k[i]) : dkf[i];
        __syncwarp();
    }
    if (vla && a.u && P.du) normalize_back(a.u + r * dk, false, P.dU + pr, dk, eps, su, P.du + r * dk, false);
}

cudaError_t launch_grad_prep(const gprep_params &p, cudaStream_t st) {
    const size_t rows = (size_t)p.a.B * p.a.H * p.a.T, per = VLACU_NT / 32;
    VLACU_LAUNCH(grad_prep_kernel, (unsigned)((rows + per - 1) / per), VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

cudaError_t launch_grad_prep_back(const gprep_params &p, cudaStream_t st) {
    const size_t rows = (size_t)p.a.B * p.a.H * p.a.T, per = VLACU_NT / 32;
    VLACU_LAUNCH(grad_prep_back_kernel, (unsigned)((rows + per - 1) / per), VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

} // namespace grad
} // namespace vlacu
