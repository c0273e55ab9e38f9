/* VLA's A part around the chunked S part (vla_grad_chunk.cu): the A recurrence forward and its
 * adjoint backward, token by token, one block per head. This is vla_grad_seq.cu's A part, split
 * out. The S part needs only the rows a_t = w_t, and returns da_t = dW_t for every token at once,
 * so neither walk touches X:
 *
 *   forward   z = A_{t-1} u;  A_t = A_{t-1} - z z^T / max(1 + u.z, eps) (+ rho I at refresh points);
 *             y = A_t k^;  a_t = y / max(||y||, eps).  Kept: a_t (Aw, float), z_t (double), den_t,
 *             ||y_t||, the gate [1 + u.z > eps] per token, and A (double) at every chunk start and
 *             at the end (ckA [nck + 1][dk][dk]).
 *   backward  the A part of vla_grad_seq.cu's header, t = T-1 .. 0, with dA from dA_end:
 *             dy = (da - a (a . da)) / ||y|| (da / eps where the floor binds);  dk^ += A_t^T dy;
 *             G = dA + dy k^^T;  dz = -(G + G^T) z / den + dc u,  dc = [gate] z^T G z / den^2;
 *             du = dc z + A_{t-1}^T dz;  dA <- G + dz u^T.
 *             A_{t-1} = A_t (- rho I) + z z^T / den: undone in double from the next chunk's start,
 *             over at most C tokens (exact up to rounding, as vla_grad_seq.cu and the CPU backend).
 * A and dA live in dynamic shared memory when both fit (smem_a), else in the head's slice of Aws. */
#include "vla_grad.cuh"

namespace vlacu {
namespace grad {

namespace {

#define MAXD VLACU_MAXD

__device__ __forceinline__ double *a_mats(const gchunk_params &P, unsigned char *smem, int bh) {
    const size_t m = (size_t)P.a.dk * ld_of(P.a.dk);
    return P.smem_a ? (double *)smem : P.Aws + (size_t)bh * 2 * m;
}

__global__ void __launch_bounds__(VLACU_NT) gc_afwd_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float fu[MAXD], fk[MAXD];
    __shared__ double z[MAXD], y[MAXD];
    __shared__ double red[2 * VLACU_NT];
    __shared__ double sc[32];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, tid = threadIdx.x, nt = blockDim.x, bh = blockIdx.x, lda = ld_of(dk);
    const int C = P.C, nck = P.nck;
    double *A = a_mats(P, smem, bh);
    const size_t sA = (size_t)bh * dk * dk;
    double *ckA = P.ckA + (size_t)bh * (nck + 1) * dk * dk;
    for (int e = tid; e < dk * dk; e += nt) {
        const int i = e / dk, j = e - i * dk;
        A[(size_t)i * lda + j] = a.A_in ? (double)a.A_in[sA + e] : (i == j ? 1.0 / a.lambda0 : 0.0);
    }
    __syncthreads();
    for (int t = 0; t < T; t++) {
        if (t % C == 0)
            for (int e = tid; e < dk * dk; e += nt) {
                const int i = e / dk, j = e - i * dk;
                ckA[(size_t)(t / C) * dk * dk + e] = A[(size_t)i * lda + j];
            }
        const size_t pr = ((size_t)bh * T + t) * dk;
        ldvec(fu, P.Up + pr, dk);
        ldvec(fk, P.Kh + pr, dk);
        __syncthreads();
        mv<false, 1, double>(A, lda, dk, dk, fu, fu, z, z, red);
        double s[1] = {0.0};
        for (int j = tid; j < dk; j += nt) s[0] += (double)fu[j] * z[j];
        block_sums<1>(s, sc);
        const double c = 1.0 + s[0], den = fmax(c, a.eps), inv = 1.0 / den;
        const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            double *ap = A + (size_t)i * lda + j;
            double x = *ap - z[i] * inv * z[j];
            if (refresh && i == j) x += a.rho;
            *ap = x;
        }
        __syncthreads();
        mv<false, 1, double>(A, lda, dk, dk, fk, fk, y, y, red);
        double s2[1] = {0.0};
        for (int j = tid; j < dk; j += nt) s2[0] += y[j] * y[j];
        block_sums<1>(s2, sc);
        const double yn = sqrt(s2[0]), ys = 1.0 / fmax(yn, a.eps);
        for (int j = tid; j < dk; j += nt) {
            P.Aw[pr + j] = (float)(y[j] * ys);
            P.Zs[pr + j] = z[j];
        }
        if (tid == 0) {
            double *tk = P.tok + ((size_t)bh * T + t) * 3;
            tk[0] = den, tk[1] = yn, tk[2] = c > a.eps ? 1.0 : 0.0;
        }
        __syncthreads();
    }
    for (int e = tid; e < dk * dk; e += nt) {
        const int i = e / dk, j = e - i * dk;
        ckA[(size_t)nck * dk * dk + e] = A[(size_t)i * lda + j];
    }
}

__global__ void __launch_bounds__(VLACU_NT) gc_abwd_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float w[MAXD], dw[MAXD], kr[MAXD], u[MAXD];
    __shared__ double z[MAXD], dy[MAXD], dz[MAXD], g1[MAXD], g2[MAXD];
    __shared__ double red[2 * VLACU_NT];
    __shared__ double sc[3 * 32];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, tid = threadIdx.x, nt = blockDim.x, bh = blockIdx.x, lda = ld_of(dk);
    const int C = P.C, nck = P.nck;
    double *A = a_mats(P, smem, bh), *dA = A + (size_t)dk * lda;
    const size_t sA = (size_t)bh * dk * dk;
    const double *ckA = P.ckA + (size_t)bh * (nck + 1) * dk * dk;
    for (int e = tid; e < dk * dk; e += nt) {
        const int i = e / dk, j = e - i * dk;
        dA[(size_t)i * lda + j] = P.dA_end ? (double)P.dA_end[sA + e] : 0.0;
    }
    for (int c = nck - 1; c >= 0; c--) {
        const int ts = c * C, te = imin(ts + C, T);
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            A[(size_t)i * lda + j] = ckA[(size_t)(c + 1) * dk * dk + e]; /* A at the chunk's end */
        }
        for (int t = te - 1; t >= ts; t--) {
            const size_t pr = ((size_t)bh * T + t) * dk;
            ldvec(w, P.Aw + pr, dk);
            ldvec(dw, P.dAw + pr, dk);
            ldvec(kr, P.Kh + pr, dk);
            ldvec(u, P.Up + pr, dk);
            ldvec(z, P.Zs + pr, dk);
            const double *tk = P.tok + ((size_t)bh * T + t) * 3;
            const double den = tk[0], yn = tk[1];
            const bool gate = tk[2] != 0.0;
            const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
            __syncthreads();
            {
                double s[1] = {0.0};
                for (int j = tid; j < dk; j += nt) s[0] += (double)w[j] * dw[j];
                block_sums<1>(s, sc);
                const double ada = s[0];
                for (int j = tid; j < dk; j += nt)
                    dy[j] = yn > a.eps ? ((double)dw[j] - (double)w[j] * ada) / yn : (double)dw[j] / a.eps;
            }
            __syncthreads();
            /* G z and G^T z with G = dA + dy k^^T: dA z, dA^T z, then the rank-one part */
            mv<false, 1, double>(dA, lda, dk, dk, z, z, g1, g1, red);
            mv<true, 1, double>(dA, lda, dk, dk, z, z, g2, g2, red);
            double s[2] = {0.0, 0.0};
            for (int j = tid; j < dk; j += nt) s[0] += (double)kr[j] * z[j], s[1] += dy[j] * z[j];
            block_sums<2>(s, sc);
            const double kz = s[0], dyz = s[1];
            double s3[1] = {0.0};
            for (int j = tid; j < dk; j += nt) {
                g1[j] += dy[j] * kz;          /* G z */
                g2[j] += (double)kr[j] * dyz; /* G^T z */
                s3[0] += z[j] * g1[j];
            }
            block_sums<1>(s3, sc);
            const double dc = gate ? s3[0] / (den * den) : 0.0;
            for (int j = tid; j < dk; j += nt) dz[j] = -(g1[j] + g2[j]) / den + dc * (double)u[j];
            __syncthreads();
            /* A_t^T dy and A_t^T dz; A_{t-1}^T dz = A_t^T dz (- rho dz) + z (z . dz) / den */
            mv<true, 2, double>(A, lda, dk, dk, dy, dz, g1, g2, red);
            double s4[1] = {0.0};
            for (int j = tid; j < dk; j += nt) s4[0] += z[j] * dz[j];
            block_sums<1>(s4, sc);
            const double zdz = s4[0] / den;
            for (int j = tid; j < dk; j += nt) {
                P.dKh[pr + j] = (float)((double)P.dKh[pr + j] + g1[j]); /* the S part's dk^ is there */
                const double am1dz = g2[j] - (refresh ? a.rho * dz[j] : 0.0) + z[j] * zdz;
                P.dU[pr + j] = (float)(dc * z[j] + am1dz);
            }
            /* A <- A_{t-1};  dA <- G + dz u^T */
            const double inv = 1.0 / den;
            for (int e = tid; e < dk * dk; e += nt) {
                const int i = e / dk, j = e - i * dk;
                double *ap = A + (size_t)i * lda + j;
                double x = *ap;
                if (refresh && i == j) x -= a.rho;
                *ap = x + z[i] * inv * z[j];
                double *gp = dA + (size_t)i * lda + j;
                *gp += dy[i] * (double)kr[j] + dz[i] * (double)u[j];
            }
            __syncthreads();
        }
    }
    /* dA_0 is dA's symmetric part (A is symmetric) */
    if (P.dA0)
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            P.dA0[sA + e] = (float)(0.5 * (dA[(size_t)i * lda + j] + dA[(size_t)j * lda + i]));
        }
}

std::atomic<size_t> afwd_smem_set[64], abwd_smem_set[64];

#undef MAXD

} // namespace

size_t grad_chunk_apart_static_smem() {
    static const size_t s = static_smem_of((const void *)gc_abwd_kernel, 24576);
    return s;
}

cudaError_t launch_grad_chunk_afwd(const gchunk_params &p, cudaStream_t st) {
    const size_t bytes = p.smem_a ? p.smem_a / 2 : 0; /* A alone */
    cudaError_t e = raise_smem_limit_static((const void *)gc_afwd_kernel, afwd_smem_set, bytes,
                                            grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    /* the backward kernel's limit too, before anything is queued (a failing call writes nothing) */
    e = raise_smem_limit_static((const void *)gc_abwd_kernel, abwd_smem_set, p.smem_a, grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(gc_afwd_kernel, (unsigned)(p.a.B * p.a.H), VLACU_NT, bytes, st, p);
    return cudaGetLastError();
}

cudaError_t launch_grad_chunk_abwd(const gchunk_params &p, cudaStream_t st) {
    const cudaError_t e = raise_smem_limit_static((const void *)gc_abwd_kernel, abwd_smem_set, p.smem_a,
                                                  grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(gc_abwd_kernel, (unsigned)(p.a.B * p.a.H), VLACU_NT, p.smem_a, st, p);
    return cudaGetLastError();
}

} // namespace grad
} // namespace vlacu
