/* VLA-MATH 2.1, the recurrent form of every mechanism but softmax: one block per head walks
 * the tokens in order. For dk or dv > 64 only: smaller states (and so the usual decode step)
 * run vla_seq_regs.cu. The whole call is this one launch: feature maps, normalisations, states
 * in and out, and the output normaliser are fused in.
 *
 * Per token (S stored transposed as X [dk, dv]):
 *   vla     A recurrence in double (as cpu_vla.c: float32 drifts over long T) -> a;
 *           X += a (v - X^T k^)^T
 *   delta   X = g X + (beta k^) (v - g X^T k^)^T
 *   linear  X += k~ v^T
 *   o = X^T q~, then / max(q~.n, eps) (vla normalised) or / (q~.n + eps) (linear), n += k~.
 * X and A live in shared memory when they fit (bufplan), else in the block's workspace slice. */
#include "vla_kernels.cuh"

namespace vlacu {

/* One warp: dst[i] = x[i] (elu+1 if elu1), i < D; if norm, dst = scale * x / max(||x||, eps). */
__device__ void warp_load_vec(const float *src, int D, bool elu1, bool norm, float eps, float scale, float *dst) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int i = lane; i < D; i += 32) {
        float x = src[i];
        if (elu1) x = elu1f(x);
        dst[i] = x;
        ss += x * x;
    }
    if (norm) {
        ss = warp_sum(ss);
        const float mul = scale / fmaxf(sqrtf(ss), eps);
        for (int i = lane; i < D; i += 32) dst[i] *= mul;
    }
}

__global__ void __launch_bounds__(VLACU_NT) seq_kernel(const seq_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float qv[VLACU_MAXD], kf[VLACU_MAXD], kh[VLACU_MAXD], uv[VLACU_MAXD], vv[VLACU_MAXD];
    __shared__ float av[VLACU_MAXD], y[VLACU_MAXD], nvec[VLACU_MAXD];
    __shared__ float red[VLACU_NT], red2[32];
    __shared__ double zbuf[VLACU_MAXD], part[32];
    const vlacu_args &a = P.a;
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv;
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, lane = tid & 31;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int mech = a.mech;
    const bool vla = mech == VLACU_VLA, linear = mech == VLACU_LINEAR;
    const bool has_n = linear || (vla && a.normalize);

    unsigned char *gs = P.spill + (size_t)blockIdx.x * P.plan.gbytes;
    float *X = bufp<float>(P.plan, B_X, smem, gs);
    double *A = bufp<double>(P.plan, B_A, smem, gs);
    const int ldx = ld_of(dv), lda = ld_of(dk);
    const size_t sS = (size_t)bh * dk * dv, sA = (size_t)bh * dk * dk, sn = (size_t)bh * dk;

    for (int e = tid; e < dk * dv; e += nt) {
        const int i = e / dv, j = e - i * dv;
        X[(size_t)i * ldx + j] = a.S_in ? a.S_in[sS + e] : 0.0f;
    }
    if (vla) {
        /* A_0 = I / lambda0 rounded to float, as the CPU backend starts from. */
        const double a_init = (double)(float)(1.0 / a.lambda0);
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            A[(size_t)i * lda + j] = a.A_in ? (double)a.A_in[sA + e] : (i == j ? a_init : 0.0);
        }
    }
    if (has_n)
        for (int i = tid; i < dk; i += nt) nvec[i] = a.n_in ? a.n_in[sn + i] : 0.0f;
    __syncthreads();

    const float eps = (float)a.eps, su = (float)a.u_scale;
    const bool elu = a.elu1 != 0;
    for (int t = 0; t < T; t++) {
        const size_t r = ((size_t)b * T + t) * H + h;
        /* ---- the token's rows: q, k, u, v, one warp each (fewer warps take several) ---- */
        for (int job = warp; job < 4; job += nt / 32) {
            if (job == 0) warp_load_vec(a.q + r * dk, dk, elu, false, eps, 1.0f, qv);
            if (job == 1 && !linear) {
                /* k~ and k^ = normalize(k~); u = s_u k^ when u is not given */
                float ss = 0.0f;
                for (int i = lane; i < dk; i += 32) {
                    float x = a.k[r * dk + i];
                    if (elu) x = elu1f(x);
                    kf[i] = x;
                    ss += x * x;
                }
                ss = warp_sum(ss);
                const float inv = 1.0f / fmaxf(sqrtf(ss), eps);
                for (int i = lane; i < dk; i += 32) {
                    const float x = kf[i] * inv;
                    kh[i] = x;
                    if (vla && !a.u) uv[i] = su * x;
                }
            }
            if (job == 1 && linear) warp_load_vec(a.k + r * dk, dk, elu, false, eps, 1.0f, kf);
            if (job == 2 && vla && a.u) warp_load_vec(a.u + r * dk, dk, false, true, eps, su, uv);
            if (job == 3) warp_load_vec(a.v + r * dv, dv, false, false, eps, 1.0f, vv);
        }
        __syncthreads();

        if (vla) {
            const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
            a_step<double>(A, lda, dk, uv, kh, refresh, a.rho, a.eps, zbuf, part, av);
        }
        if (!linear) colvec<float>(X, ldx, dk, dv, kh, y, red); /* y = X^T k^ (S k^) */

        /* ---- state update ---- */
        if (vla) {
            for (int e = tid; e < dk * dv; e += nt) {
                const int i = e / dv, j = e - i * dv;
                X[(size_t)i * ldx + j] += av[i] * (vv[j] - y[j]);
            }
        } else if (mech == VLACU_DELTA) {
            const float g = a.g ? a.g[r] : 1.0f, beta = a.beta ? a.beta[r] : 1.0f;
            for (int e = tid; e < dk * dv; e += nt) {
                const int i = e / dv, j = e - i * dv;
                float *x = X + (size_t)i * ldx + j;
                *x = g * *x + (beta * kh[i]) * (vv[j] - g * y[j]);
            }
        } else {
            for (int e = tid; e < dk * dv; e += nt) {
                const int i = e / dv, j = e - i * dv;
                X[(size_t)i * ldx + j] += kf[i] * vv[j];
            }
        }
        __syncthreads();
        colvec<float>(X, ldx, dk, dv, qv, y, red); /* y = X^T q~ */

        float den = 1.0f;
        if (has_n) {
            float p = 0.0f;
            for (int i = tid; i < dk; i += nt) {
                const float n = nvec[i] + kf[i];
                nvec[i] = n;
                p += qv[i] * n;
            }
            const float qn = block_sum(p, red2);
            den = linear ? qn + eps : fmaxf(qn, eps);
        }
        for (int j = tid; j < dv; j += nt) a.o[r * dv + j] = has_n ? y[j] / den : y[j];
    }
    __syncthreads();

    if (a.S_out)
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            a.S_out[sS + e] = X[(size_t)i * ldx + j];
        }
    if (vla && a.A_out)
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            a.A_out[sA + e] = (float)A[(size_t)i * lda + j];
        }
    if (has_n && a.n_out)
        for (int i = tid; i < dk; i += nt) a.n_out[sn + i] = nvec[i];
}

static std::atomic<size_t> seq_smem_set[64];

size_t seq_static_smem() {
    static const size_t s = static_smem_of((const void *)seq_kernel, 16384);
    return s;
}

cudaError_t launch_seq(const seq_params &p, cudaStream_t st) {
    const cudaError_t e = raise_smem_limit((const void *)seq_kernel, seq_smem_set, p.plan.smem_bytes);
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(seq_kernel, (unsigned)(p.a.B * p.a.H), VLACU_NT, p.plan.smem_bytes, st, p);
    return cudaGetLastError();
}

} // namespace vlacu
