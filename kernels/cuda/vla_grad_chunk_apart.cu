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
 * A and dA live in dynamic shared memory when both fit (smem_a), else in the head's slice of Aws.
 *
 * Two forms of the same arithmetic (both in double; the same eps floors, gates, refresh points,
 * checkpoints and undo):
 *   block form (gc_afwd_kernel, gc_abwd_kernel): VLACU_NT threads a head, for dk > 32 and for A and
 *     dA in global memory (smem_a == 0);
 *   warp form (gc_afwd_warp_kernel, gc_abwd_warp_kernel): one warp a head, for dk <= 32 (dk <= 64
 *     under VLA_CUDA_APART=warp), lane l owns rows (and columns) l and l + 32 of A and dA; see its
 *     comment below. apart_form (below) says why the line is at dk = 32.
 * Under VLA_CUDA_APART=segment the backward walk runs in segment form instead (gc_abwd_seg_kernel,
 * below: a block a head, the adjoint of a whole segment of tokens as products), the forward walk
 * as above.
 * Per token, at dk = 64 (dk = 32 in brackets), counting the double operations (FMA or add, one per
 * shuffle level) that each wait for the one before, and the barriers:
 *                 forward                          backward
 *   block form    11 __syncthreads, 69 (53)        18 __syncthreads, 120 (96)
 *   warp form      2 __syncwarp,    51 (33)         2 __syncwarp,     48 (31)   (+1 a chunk: the reload)
 * The block form splits each matrix-vector product over 256 / dk threads a sum (16 FMAs and 4 adds at
 * dk = 64), but every product, dot and update is followed by a barrier of 8 warps (a block-wide sum
 * costs two), and each token first waits for its inputs from global memory. The warp form keeps
 * whole rows and columns in a lane (four partial sums a product: n / 4 + 2 dependent FMAs), fuses
 * the rank-one update with the next product on the same rows, reorders the backward so that it
 * needs two warp barriers a token, and loads each token's inputs one token ahead. What it gives up is
 * width: a lane issues about 3 NR dk (forward) and 7 NR dk (backward) double FMAs a token (NR = 1 at
 * dk <= 32, 2 above): 1280 together at dk = 64, 320 at dk = 32. An H100 sub-partition issues double
 * FMAs at 16 lanes a clock, a warp's in two clocks, so at dk = 64 (about 2600 clocks a token) the
 * issue, not the dependent chain, sets the warp form's time; at dk = 32 the two are close. */
#include "vla_grad.cuh"

#include <stdlib.h>
#include <string.h>

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

/* The block form's backward walk over chunk c's tokens, last to first: A holds A at the chunk's
 * end (loaded here from ckA) and ends as A at its start; dA is the adjoint of A_{te-1} on entry and
 * of A_{ts-1} on return. Writes dk^ (added) and du of the chunk's tokens. */
__device__ void abwd_tokens(const gchunk_params &P, int c, double *A, double *dA) {
    __shared__ float w[MAXD], dw[MAXD], kr[MAXD], u[MAXD];
    __shared__ double z[MAXD], dy[MAXD], dz[MAXD], g1[MAXD], g2[MAXD];
    __shared__ double red[2 * VLACU_NT];
    __shared__ double sc[3 * 32];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, tid = threadIdx.x, nt = blockDim.x, bh = blockIdx.x, lda = ld_of(dk);
    const int C = P.C, nck = P.nck;
    const double *ckA = P.ckA + (size_t)bh * (nck + 1) * dk * dk;
    const int ts = c * C, te = imin(ts + C, T);
    __syncthreads(); /* the caller's last reads of A are done */
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
        a_token_backward(a, dk, lda, den, yn, gate, refresh, w, dw, kr, u, z, dy, dz, g1, g2, red, sc, A, dA,
                         P.dKh + pr, P.dKh + pr, P.dU + pr); /* the S part's dk^ is in P.dKh */
    }
}

/* dA from dA_end (0 when absent), and at the end dA_0 = dA's symmetric part (A is symmetric). */
__device__ void abwd_load_dA(const gchunk_params &P, double *dA) {
    const int dk = P.a.dk, lda = ld_of(dk);
    const size_t sA = (size_t)blockIdx.x * dk * dk;
    for (int e = threadIdx.x; e < dk * dk; e += blockDim.x) {
        const int i = e / dk, j = e - i * dk;
        dA[(size_t)i * lda + j] = P.dA_end ? (double)P.dA_end[sA + e] : 0.0;
    }
}
__device__ void abwd_store_dA0(const gchunk_params &P, const double *dA) {
    const int dk = P.a.dk, lda = ld_of(dk);
    const size_t sA = (size_t)blockIdx.x * dk * dk;
    __syncthreads();
    if (P.dA0)
        for (int e = threadIdx.x; e < dk * dk; e += blockDim.x) {
            const int i = e / dk, j = e - i * dk;
            P.dA0[sA + e] = (float)(0.5 * (dA[(size_t)i * lda + j] + dA[(size_t)j * lda + i]));
        }
}

__global__ void __launch_bounds__(VLACU_NT) gc_abwd_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    double *A = a_mats(P, smem, blockIdx.x), *dA = A + (size_t)P.a.dk * ld_of(P.a.dk);
    abwd_load_dA(P, dA);
    for (int c = P.nck - 1; c >= 0; c--) abwd_tokens(P, c, A, dA);
    abwd_store_dA0(P, dA);
}

/* ---- the segment form of the backward walk (VLA_CUDA_APART=segment; development: 17-36% slower
 * than the token walk on an H100, benchmarks/results/2026-12-06-h100-backward) ----
 * backends/cpu/cpu_grad_vla.c's a_backward_chunk, one block per head: a segment is a run of tokens
 * of one chunk with no refresh before its last token; where every gate of the chunk is open and A at
 * its start is symmetric, Sherman-Morrison is exact within a segment and its adjoint is a handful of
 * products over the segment's tokens (docs/BACKWARD.md, "What a fast GPU chunked backward needs",
 * item 3), with only dA passed from segment to segment; other chunks take abwd_tokens. Every product
 * is one output a thread, in double, the segment's arrays in the head's slice of P.Sg:
 *   K x K: Ae, N, M, T1;  n x K: DY, W, Yp, Wt, Yt;  n x n: Ca, Cb  (n <= C, K = dk). */
__host__ __device__ inline size_t seg_doubles(int C, int dk) {
    return 4 * (size_t)dk * dk + 5 * (size_t)C * dk + 2 * (size_t)C * C;
}

__device__ inline bool is_refresh_at(const vlacu_args &a, int t) {
    return a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
}

/* One segment [s0, s1) of a chunk: As in A (K x K, ld lda), G = dA (the adjoint of A_{s1-1} in, of As
 * out). */
__device__ void abwd_segment(const gchunk_params &P, int s0, int s1, double *As, double *G, double *sg) {
    const vlacu_args &a = P.a;
    const int T = a.T, K = a.dk, tid = threadIdx.x, nt = blockDim.x, bh = blockIdx.x, lda = ld_of(K), n = s1 - s0;
    const size_t kk = (size_t)K * K, nk = (size_t)n * K;
    double *Ae = sg, *N = Ae + kk, *M = N + kk, *T1 = M + kk;
    double *DY = T1 + kk, *W = DY + (size_t)P.C * K, *Yp = W + (size_t)P.C * K, *Wt = Yp + (size_t)P.C * K;
    double *Yt = Wt + (size_t)P.C * K, *Ca = Yt + (size_t)P.C * K, *Cb = Ca + (size_t)P.C * P.C;
    const size_t r0 = (size_t)bh * T + s0;
    const float *U = P.Up + r0 * K, *Kh = P.Kh + r0 * K, *Al = P.Aw + r0 * K, *dAl = P.dAw + r0 * K;
    const double *Z = P.Zs + r0 * K, *tok = P.tok + r0 * 3;
    /* DY: dy_t from da_t through the normalisation, a warp a token */
    for (int t = tid >> 5; t < n; t += nt >> 5) {
        double p = 0.0;
        for (int j = tid & 31; j < K; j += 32) p += (double)Al[(size_t)t * K + j] * dAl[(size_t)t * K + j];
        p = warp_sum(p);
        const double yn = tok[(size_t)t * 3 + 1];
        for (int j = tid & 31; j < K; j += 32) {
            const double da = dAl[(size_t)t * K + j];
            DY[(size_t)t * K + j] = yn > a.eps ? (da - (double)Al[(size_t)t * K + j] * p) / yn : da / a.eps;
        }
    }
    __syncthreads();
    /* Ca[t][r] = z_r . dy_t / den_r, Cb[t][r] = z_r . k^_t / den_r (r <= t) */
    for (int e = tid; e < n * n; e += nt) {
        const int t = e / n, r = e - t * n;
        if (r > t) continue;
        double x = 0.0, y = 0.0;
        for (int j = 0; j < K; j++) {
            const double z = Z[(size_t)r * K + j];
            x += z * DY[(size_t)t * K + j];
            y += z * (double)Kh[(size_t)t * K + j];
        }
        const double den = tok[(size_t)r * 3];
        Ca[(size_t)t * n + r] = x / den, Cb[(size_t)t * n + r] = y / den;
    }
    __syncthreads();
    /* W = A'_t dy_t, Yp = A'_t k^_t; Ae = A' of the last token */
    for (int e = tid; e < (int)nk; e += nt) {
        const int t = e / K, j = e - t * K;
        double x = 0.0, y = 0.0;
        for (int l = 0; l < K; l++) {
            const double m = As[(size_t)j * lda + l]; /* As symmetric: row j */
            x += m * DY[(size_t)t * K + l];
            y += m * (double)Kh[(size_t)t * K + l];
        }
        for (int r = 0; r <= t; r++) {
            const double z = Z[(size_t)r * K + j];
            x -= Ca[(size_t)t * n + r] * z;
            y -= Cb[(size_t)t * n + r] * z;
        }
        W[e] = x, Yp[e] = y;
    }
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = As[(size_t)i * lda + j];
        for (int r = 0; r < n; r++) x -= Z[(size_t)r * K + i] * Z[(size_t)r * K + j] / tok[(size_t)r * 3];
        Ae[e] = x;
    }
    __syncthreads();
    /* dk^_t += w_t (+ rho dy_t at a refresh on the last token); T1 = Ae G */
    for (int e = tid; e < (int)nk; e += nt) {
        const int t = e / K;
        const double rho = t == n - 1 && is_refresh_at(a, s0 + t) ? a.rho : 0.0;
        float *d = P.dKh + r0 * K + e;
        *d = (float)((double)*d + W[e] + rho * DY[e]);
    }
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = 0.0;
        for (int l = 0; l < K; l++) x += Ae[(size_t)i * K + l] * G[(size_t)l * lda + j];
        T1[e] = x;
    }
    __syncthreads();
    /* N = (Ae G) Ae; Ca[r][t] = u_r . w_t, Cb[r][t] = u_r . y'_t (r <= t) */
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = 0.0;
        for (int l = 0; l < K; l++) x += T1[(size_t)i * K + l] * Ae[(size_t)l * K + j];
        N[e] = x;
    }
    for (int e = tid; e < n * n; e += nt) {
        const int r = e / n, t = e - r * n;
        if (r > t) continue;
        double x = 0.0, y = 0.0;
        for (int j = 0; j < K; j++) {
            const double u = U[(size_t)r * K + j];
            x += u * W[(size_t)t * K + j];
            y += u * Yp[(size_t)t * K + j];
        }
        Ca[(size_t)r * n + t] = x, Cb[(size_t)r * n + t] = y;
    }
    __syncthreads();
    /* du_r = -sum_{t>=r} (w_t (u_r . y'_t) + y'_t (u_r . w_t)) - (N + N^T) u_r;
     * Wt = P w_t = dy_t - sum_{r<=t} u_r (u_r . w_t), Yt = P y'_t likewise; T1 <- Ae u_r rows */
    for (int e = tid; e < (int)nk; e += nt) {
        const int r = e / K, j = e - r * K;
        double x = 0.0;
        for (int t = r; t < n; t++) x += W[(size_t)t * K + j] * Cb[(size_t)r * n + t] + Yp[(size_t)t * K + j] * Ca[(size_t)r * n + t];
        for (int l = 0; l < K; l++) x += (N[(size_t)j * K + l] + N[(size_t)l * K + j]) * (double)U[(size_t)r * K + l];
        P.dU[r0 * K + e] = (float)-x;
        double wt = DY[e], yt = (double)Kh[e];
        const int t = r; /* the same (row, column) as Wt's token t */
        for (int q = 0; q <= t; q++) {
            const double u = U[(size_t)q * K + j];
            wt -= u * Ca[(size_t)q * n + t];
            yt -= u * Cb[(size_t)q * n + t];
        }
        Wt[e] = wt, Yt[e] = yt;
    }
    __syncthreads();
    /* M = I - sum_r u_r (Ae u_r)^T: Ae u_r into DY first (DY is no longer read) */
    for (int e = tid; e < (int)nk; e += nt) {
        const int r = e / K, j = e - r * K;
        double x = 0.0;
        for (int l = 0; l < K; l++) x += Ae[(size_t)j * K + l] * (double)U[(size_t)r * K + l];
        DY[e] = x;
    }
    __syncthreads();
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = i == j ? 1.0 : 0.0;
        for (int r = 0; r < n; r++) x -= (double)U[(size_t)r * K + i] * DY[(size_t)r * K + j];
        M[e] = x;
    }
    __syncthreads();
    /* T1 = M G; then G <- T1 M^T + sum_t Wt_t Yt_t^T */
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = 0.0;
        for (int l = 0; l < K; l++) x += M[(size_t)i * K + l] * G[(size_t)l * lda + j];
        T1[e] = x;
    }
    __syncthreads();
    for (int e = tid; e < (int)kk; e += nt) {
        const int i = e / K, j = e - i * K;
        double x = 0.0;
        for (int l = 0; l < K; l++) x += T1[(size_t)i * K + l] * M[(size_t)j * K + l];
        for (int t = 0; t < n; t++) x += Wt[(size_t)t * K + i] * Yt[(size_t)t * K + j];
        G[(size_t)i * lda + j] = x;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(VLACU_NT) gc_abwd_seg_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ double sc[32];
    const vlacu_args &a = P.a;
    const int T = a.T, K = a.dk, tid = threadIdx.x, nt = blockDim.x, bh = blockIdx.x, lda = ld_of(K);
    const int C = P.C, nck = P.nck;
    double *A = a_mats(P, smem, bh), *dA = A + (size_t)K * lda;
    double *sg = P.Sg + (size_t)bh * seg_doubles(C, K);
    const double *ckA = P.ckA + (size_t)bh * (nck + 1) * K * K;
    abwd_load_dA(P, dA);
    for (int c = nck - 1; c >= 0; c--) {
        const int ts = c * C, te = imin(ts + C, T);
        const double *Ac = ckA + (size_t)c * K * K;
        /* the chunk's check: every gate open, A at its start symmetric up to rounding (1e-12 of max |A|) */
        double v[2] = {0.0, 0.0}; /* closed gates; max |A| */
        for (int t = ts + tid; t < te; t += nt) v[0] += P.tok[((size_t)bh * T + t) * 3 + 2] == 0.0 ? 1.0 : 0.0;
        for (int e = tid; e < K * K; e += nt) v[1] = fmax(v[1], fabs(Ac[e]));
        double g1[1] = {v[0]};
        block_sums<1>(g1, sc);
        for (int o = 16; o > 0; o >>= 1) v[1] = fmax(v[1], __shfl_xor_sync(0xffffffffu, v[1], o));
        __syncthreads();
        if ((tid & 31) == 0) sc[tid >> 5] = v[1];
        __syncthreads();
        double amax = 0.0;
        for (int w = 0; w < nt >> 5; w++) amax = fmax(amax, sc[w]);
        double asym[1] = {0.0};
        for (int e = tid; e < K * K; e += nt) {
            const int i = e / K, j = e - i * K;
            asym[0] += fabs(Ac[e] - Ac[(size_t)j * K + i]) > 1e-12 * amax ? 1.0 : 0.0;
        }
        block_sums<1>(asym, sc);
        if (g1[0] != 0.0 || asym[0] != 0.0) {
            abwd_tokens(P, c, A, dA);
            continue;
        }
        /* segments, last to first: [s0, e1) with s0 after the last refresh token before e1 - 1 */
        for (int e1 = te; e1 > ts;) {
            int s0 = ts, nref = 0;
            for (int t = e1 - 2; t >= ts; t--)
                if (is_refresh_at(a, t)) {
                    s0 = t + 1;
                    break;
                }
            for (int t = ts; t < s0; t++) nref += is_refresh_at(a, t) ? 1 : 0;
            /* As = A_c - sum_{t in [ts, s0)} z z^T / den + nref rho I (the updates add up) */
            __syncthreads();
            for (int e = tid; e < K * K; e += nt) {
                const int i = e / K, j = e - i * K;
                double x = Ac[e];
                for (int t = ts; t < s0; t++) {
                    const double *z = P.Zs + ((size_t)bh * T + t) * K;
                    x -= z[i] * z[j] / P.tok[((size_t)bh * T + t) * 3];
                }
                if (i == j) x += nref * a.rho;
                A[(size_t)i * lda + j] = x;
            }
            __syncthreads();
            abwd_segment(P, s0, e1, A, dA, sg);
            e1 = s0;
        }
    }
    abwd_store_dA0(P, dA);
}

/* ---- the warp form: one warp per head, dk <= WD, A and dA in dynamic shared memory ----
 * Lane l owns the indices ix = l + 32 m (m < NR = 1 or 2, ix < dk): rows ix of A and dA, and entries ix
 * of every vector. Every product the walks need is then a row or a column of A or dA against a vector
 * that the whole warp reads by broadcast from shared memory, so a lane computes its own outputs
 * without exchanging partial sums. Rows: the warp reads 32 rows at the odd stride ld (distinct banks
 * in each half-warp's 128-byte wavefront); columns: 32 consecutive doubles of one row. Dots and norms
 * are shuffle butterflies. The order of each token's steps is chosen so that two __syncwarp() a token
 * suffice (see the kernels). The per-token inputs are loaded one token ahead into registers, so the
 * global-memory latency overlaps the token before (the block form waits for it every token). */
constexpr int WD = 64; /* the warp form's largest dk: two indices per lane */

/* K warp-wide sums of doubles; every lane gets the same totals: in the xor butterfly both lanes of
 * a pair add the same two operands, and IEEE addition is commutative, so the totals agree bit for
 * bit (a gate taken on them is the same in every lane). */
template <int K> __device__ __forceinline__ void warp_sums(double (&v)[K]) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < K; k++) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
}

/* y[v][m] = sum_{j<n} M(ix[m], j) x_v[j], v < NV, M(i, j) = TR ? M[j ld + i] : M[i ld + j] (column ix[m]
 * of M, or row ix[m]). Four partial sums per output (j mod 4) cut the dependent FMA chain to n/4 + 2.
 * Reads only (every lane, ix clamped to a valid index): no barrier inside. */
template <bool TR, int NR, int NV>
__device__ __forceinline__ void wmv(const double *M, int ld, int n, const int (&ix)[NR], const double *x0,
                                    const double *x1, double (&y)[NV][NR]) {
    double p[NV][NR][4];
#pragma unroll
    for (int v = 0; v < NV; v++)
#pragma unroll
        for (int m = 0; m < NR; m++)
#pragma unroll
            for (int q = 0; q < 4; q++) p[v][m][q] = 0.0;
    int j = 0;
    for (; j + 4 <= n; j += 4)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const double xa = x0[j + q], xb = NV > 1 ? x1[j + q] : 0.0;
#pragma unroll
            for (int m = 0; m < NR; m++) {
                const double e = TR ? M[(size_t)(j + q) * ld + ix[m]] : M[(size_t)ix[m] * ld + j + q];
                p[0][m][q] = fma(e, xa, p[0][m][q]);
                if (NV > 1) p[NV - 1][m][q] = fma(e, xb, p[NV - 1][m][q]);
            }
        }
    for (; j < n; j++) {
        const double xa = x0[j], xb = NV > 1 ? x1[j] : 0.0;
#pragma unroll
        for (int m = 0; m < NR; m++) {
            const double e = TR ? M[(size_t)j * ld + ix[m]] : M[(size_t)ix[m] * ld + j];
            p[0][m][0] = fma(e, xa, p[0][m][0]);
            if (NV > 1) p[NV - 1][m][0] = fma(e, xb, p[NV - 1][m][0]);
        }
    }
#pragma unroll
    for (int v = 0; v < NV; v++)
#pragma unroll
        for (int m = 0; m < NR; m++) y[v][m] = (p[v][m][0] + p[v][m][1]) + (p[v][m][2] + p[v][m][3]);
}

/* The lane's indices: ix[m] = lane + 32 m where below dk (ok[m]), else 0 (a valid row to read, never
 * written through this lane). */
template <int NR> __device__ __forceinline__ void lane_ix(int dk, int (&ix)[NR], bool (&ok)[NR]) {
#pragma unroll
    for (int m = 0; m < NR; m++) {
        ix[m] = (int)threadIdx.x + 32 * m;
        ok[m] = ix[m] < dk;
        if (!ok[m]) ix[m] = 0;
    }
}

/* dst [dk][dk] (global, dense) <- src [dk][ld] (shared), coalesced: a row per step, lanes along it. */
__device__ __forceinline__ void wcopy_out(double *dst, const double *src, int dk, int ld) {
    for (int i = 0; i < dk; i++)
        for (int j = threadIdx.x; j < dk; j += 32) dst[(size_t)i * dk + j] = src[(size_t)i * ld + j];
}

/* Forward, token t (b = t & 1; uv[b], kv[b] hold u_t, k^_t, visible to all lanes):
 *   [t % C == 0: ckA <- A, all rows]
 *   F1  z_r = A_{t-1}(r, :) u for the lane's rows; zv <- z_r; s = u.z (butterfly)      __syncwarp #1
 *   F2  row r of A_t = A_{t-1}(r, :) - (z_r / den) z^T, written in place, and y_r = A_t(r, :) k^
 *       in the same pass (a lane writes only its own rows, so F1 -> F2 needs no barrier for A; the
 *       refresh's rho is added to A(r, r) and rho k^_r to y_r after the pass); ||y|| (butterfly);
 *       a_t, z_t, (den, ||y||, gate) out; u_{t+1}, k^_{t+1} (loaded at F1) into uv[b^1], kv[b^1]  __syncwarp #2
 * #1 makes zv visible before F2 reads it; #2 orders F2's reads of zv and of the buffers before the
 * next token rewrites them, and the rows written in F2 before the next checkpoint copy reads them. */
template <int NR> __global__ void __launch_bounds__(32) gc_afwd_warp_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ double uv[2][WD], kv[2][WD], zv[WD];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, lane = threadIdx.x, bh = blockIdx.x, lda = ld_of(dk);
    const int C = P.C, nck = P.nck;
    double *A = (double *)smem;
    const size_t sA = (size_t)bh * dk * dk, mm = (size_t)dk * dk;
    double *ckA = P.ckA + (size_t)bh * (nck + 1) * mm;
    int ix[NR];
    bool ok[NR];
    lane_ix<NR>(dk, ix, ok);
    for (int i = 0; i < dk; i++)
        for (int j = lane; j < dk; j += 32)
            A[(size_t)i * lda + j] =
                a.A_in ? (double)a.A_in[sA + (size_t)i * dk + j] : (i == j ? 1.0 / a.lambda0 : 0.0);
    if (T > 0) {
        const size_t pr = (size_t)bh * T * dk;
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) uv[0][ix[m]] = (double)P.Up[pr + ix[m]], kv[0][ix[m]] = (double)P.Kh[pr + ix[m]];
    }
    __syncwarp();
    for (int t = 0; t < T; t++) {
        const int b = t & 1;
        const size_t pr = ((size_t)bh * T + t) * dk;
        if (t % C == 0) wcopy_out(ckA + (size_t)(t / C) * mm, A, dk, lda);
        const bool more = t + 1 < T;
        float nu[NR], nk[NR]; /* the next token's inputs, stored at the end of this one */
#pragma unroll
        for (int m = 0; m < NR; m++) {
            nu[m] = nk[m] = 0.0f;
            if (more && ok[m]) nu[m] = P.Up[pr + dk + ix[m]], nk[m] = P.Kh[pr + dk + ix[m]];
        }
        /* F1 */
        double zz[1][NR];
        wmv<false, NR, 1>(A, lda, dk, ix, uv[b], uv[b], zz);
        double s[1] = {0.0};
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) s[0] += uv[b][ix[m]] * zz[0][m], zv[ix[m]] = zz[0][m];
        warp_sums<1>(s);
        __syncwarp();
        const double c = 1.0 + s[0], den = fmax(c, a.eps), inv = 1.0 / den;
        const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
        /* F2 */
        double zi[NR], p[NR][4];
#pragma unroll
        for (int m = 0; m < NR; m++) {
            zi[m] = zz[0][m] * inv;
#pragma unroll
            for (int q = 0; q < 4; q++) p[m][q] = 0.0;
        }
        for (int j0 = 0; j0 < dk; j0 += 4)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int j = j0 + q;
                if (j < dk) {
                    const double zj = zv[j], kj = kv[b][j];
#pragma unroll
                    for (int m = 0; m < NR; m++)
                        if (ok[m]) {
                            double *ap = A + (size_t)ix[m] * lda + j;
                            const double x = *ap - zi[m] * zj;
                            *ap = x;
                            p[m][q] = fma(x, kj, p[m][q]);
                        }
                }
            }
        double y[NR], s2[1] = {0.0};
#pragma unroll
        for (int m = 0; m < NR; m++) {
            y[m] = (p[m][0] + p[m][1]) + (p[m][2] + p[m][3]);
            if (refresh && ok[m]) A[(size_t)ix[m] * lda + ix[m]] += a.rho, y[m] += a.rho * kv[b][ix[m]];
            if (ok[m]) s2[0] += y[m] * y[m];
        }
        warp_sums<1>(s2);
        const double yn = sqrt(s2[0]), ys = 1.0 / fmax(yn, a.eps);
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) {
                P.Aw[pr + ix[m]] = (float)(y[m] * ys);
                P.Zs[pr + ix[m]] = zz[0][m];
                if (more) uv[b ^ 1][ix[m]] = (double)nu[m], kv[b ^ 1][ix[m]] = (double)nk[m];
            }
        if (lane == 0) {
            double *tk = P.tok + ((size_t)bh * T + t) * 3;
            tk[0] = den, tk[1] = yn, tk[2] = c > a.eps ? 1.0 : 0.0;
        }
        __syncwarp();
    }
    wcopy_out(ckA + (size_t)nck * mm, A, dk, lda);
}

/* One token's inputs to the backward, the lane's entries (loaded a token ahead). */
template <int NR> struct wtok {
    float w[NR], dw[NR], k[NR], u[NR], dkh[NR];
    double z[NR], den, yn, gate;
};
template <int NR>
__device__ __forceinline__ void wtok_load(wtok<NR> &v, const gchunk_params &P, size_t row, const int (&ix)[NR],
                                          const bool (&ok)[NR]) {
    const size_t pr = row * P.a.dk;
#pragma unroll
    for (int m = 0; m < NR; m++) {
        v.w[m] = v.dw[m] = v.k[m] = v.u[m] = v.dkh[m] = 0.0f;
        v.z[m] = 0.0;
        if (ok[m]) {
            v.w[m] = P.Aw[pr + ix[m]], v.dw[m] = P.dAw[pr + ix[m]], v.k[m] = P.Kh[pr + ix[m]];
            v.u[m] = P.Up[pr + ix[m]], v.dkh[m] = P.dKh[pr + ix[m]], v.z[m] = P.Zs[pr + ix[m]];
        }
    }
    const double *tk = P.tok + row * 3;
    v.den = tk[0], v.yn = tk[1], v.gate = tk[2];
}

/* Backward, token t (b = t & 1; zv[b], kv[b], uv[b] hold z_t, k^_t, u_t; A = A_t, dA = the adjoint of
 * A_t):
 *                                                                                   __syncwarp #2
 *   [t + 1 a chunk end or t = T - 1: A <- ckA (A at the chunk's end), all rows      __syncwarp]
 *   B1  ada = a.da, kz = k^.z (one butterfly of two, independent of A: it overlaps the pass); dy_r.
 *       One pass over j for the lane's rows/columns r: A(r, j) += (z_r / den) z_j (after A(r, r) -= rho
 *       at a refresh): the undo to A_{t-1}, in place, own rows; g1_r = dA(r, :) z, g2_r = dA(:, r) . z.
 *       G z = g1 + dy kz, G^T z = g2 + k^ (dy.z); z^T G z and dy.z (one butterfly of two); dc; dz_r.
 *       dyv, dzv <- dy_r, dz_r                                                      __syncwarp #1
 *   B2  columns of A_{t-1}: h1 = A_{t-1}^T dy, h2 = A_{t-1}^T dz. Then A_t^T dy = h1 - z (z.dy) / den
 *       (+ rho dy at a refresh) goes to dk^, and du = dc z + A_{t-1}^T dz = dc z + h2 (no z.dz needed).
 *       dA(r, :) += dy_r k^^T + dz_r u^T, own rows; z, k^, u of token t-1 into the other buffers.
 * Taking the column products on A_{t-1} (after the undo) instead of on A_t, as the block form does, is
 * what lets the undo share B1's pass and barrier: B2 reads other lanes' rows of A only after #1. #2
 * (at the top of the next token) orders B2's column reads of A and B1's of dA against the next
 * token's row writes (and the reload), and the buffers and dyv, dzv against their next writes. */
template <int NR> __global__ void __launch_bounds__(32) gc_abwd_warp_kernel(const gchunk_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ double zv[2][WD], kv[2][WD], uv[2][WD], dyv[WD], dzv[WD];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, lane = threadIdx.x, bh = blockIdx.x, lda = ld_of(dk);
    const int C = P.C, nck = P.nck;
    double *A = (double *)smem, *dA = A + (size_t)dk * lda;
    const size_t sA = (size_t)bh * dk * dk, mm = (size_t)dk * dk;
    const double *ckA = P.ckA + (size_t)bh * (nck + 1) * mm;
    int ix[NR];
    bool ok[NR];
    lane_ix<NR>(dk, ix, ok);
    for (int i = 0; i < dk; i++)
        for (int j = lane; j < dk; j += 32)
            dA[(size_t)i * lda + j] = P.dA_end ? (double)P.dA_end[sA + (size_t)i * dk + j] : 0.0;
    wtok<NR> cur = {};
    if (T > 0) {
        wtok_load<NR>(cur, P, (size_t)bh * T + T - 1, ix, ok);
        const int b = (T - 1) & 1;
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) zv[b][ix[m]] = cur.z[m], kv[b][ix[m]] = (double)cur.k[m], uv[b][ix[m]] = (double)cur.u[m];
    }
    for (int t = T - 1; t >= 0; t--) {
        const int b = t & 1;
        const size_t pr = ((size_t)bh * T + t) * dk;
        __syncwarp(); /* #2: the token before (t + 1) is done with every row and buffer */
        if (t == T - 1 || (t + 1) % C == 0) {
            const double *src = ckA + (size_t)(t / C + 1) * mm; /* A at the end of t's chunk */
            for (int i = 0; i < dk; i++)
                for (int j = lane; j < dk; j += 32) A[(size_t)i * lda + j] = src[(size_t)i * dk + j];
            __syncwarp(); /* once a chunk: the reload wrote every lane's rows */
        }
        wtok<NR> nx;
        if (t > 0) wtok_load<NR>(nx, P, (size_t)bh * T + t - 1, ix, ok);
        const double den = cur.den, inv = 1.0 / den;
        const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
        double r1[2] = {0.0, 0.0};
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) r1[0] += (double)cur.w[m] * cur.dw[m], r1[1] += (double)cur.k[m] * cur.z[m];
        warp_sums<2>(r1);
        const double ada = r1[0], kz = r1[1];
        double dy[NR];
#pragma unroll
        for (int m = 0; m < NR; m++)
            dy[m] = cur.yn > a.eps ? ((double)cur.dw[m] - (double)cur.w[m] * ada) / cur.yn : (double)cur.dw[m] / a.eps;
        /* B1: the undo and dA z, dA^T z in one pass */
        double zi[NR], p1[NR][4], p2[NR][4];
#pragma unroll
        for (int m = 0; m < NR; m++) {
            zi[m] = cur.z[m] * inv;
            if (refresh && ok[m]) A[(size_t)ix[m] * lda + ix[m]] -= a.rho;
#pragma unroll
            for (int q = 0; q < 4; q++) p1[m][q] = p2[m][q] = 0.0;
        }
        for (int j0 = 0; j0 < dk; j0 += 4)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int j = j0 + q;
                if (j < dk) {
                    const double zj = zv[b][j];
#pragma unroll
                    for (int m = 0; m < NR; m++) {
                        p1[m][q] = fma(dA[(size_t)ix[m] * lda + j], zj, p1[m][q]);
                        p2[m][q] = fma(dA[(size_t)j * lda + ix[m]], zj, p2[m][q]);
                        if (ok[m]) {
                            double *ap = A + (size_t)ix[m] * lda + j;
                            *ap = *ap + zi[m] * zj;
                        }
                    }
                }
            }
        double g1[NR], g2[NR], r2[2] = {0.0, 0.0};
#pragma unroll
        for (int m = 0; m < NR; m++) {
            g1[m] = (p1[m][0] + p1[m][1]) + (p1[m][2] + p1[m][3]) + dy[m] * kz; /* G z */
            g2[m] = (p2[m][0] + p2[m][1]) + (p2[m][2] + p2[m][3]);
            if (ok[m]) r2[0] += cur.z[m] * g1[m], r2[1] += dy[m] * cur.z[m];
        }
        warp_sums<2>(r2);
        const double dyz = r2[1], dc = cur.gate != 0.0 ? r2[0] / (den * den) : 0.0;
        double dz[NR];
#pragma unroll
        for (int m = 0; m < NR; m++) {
            g2[m] += (double)cur.k[m] * dyz; /* G^T z */
            dz[m] = -(g1[m] + g2[m]) / den + dc * (double)cur.u[m];
            if (ok[m]) dyv[ix[m]] = dy[m], dzv[ix[m]] = dz[m];
        }
        __syncwarp();
        /* B2 */
        double h[2][NR];
        wmv<true, NR, 2>(A, lda, dk, ix, dyv, dzv, h);
        const double zdy = dyz * inv;
#pragma unroll
        for (int m = 0; m < NR; m++)
            if (ok[m]) {
                const double atdy = h[0][m] - cur.z[m] * zdy + (refresh ? a.rho * dy[m] : 0.0); /* A_t^T dy */
                P.dKh[pr + ix[m]] = (float)((double)cur.dkh[m] + atdy); /* the S part's dk^ is there */
                P.dU[pr + ix[m]] = (float)(dc * cur.z[m] + h[1][m]);
            }
        for (int j = 0; j < dk; j++) {
            const double kj = kv[b][j], uj = uv[b][j];
#pragma unroll
            for (int m = 0; m < NR; m++)
                if (ok[m]) {
                    double *gp = dA + (size_t)ix[m] * lda + j;
                    *gp = fma(dz[m], uj, fma(dy[m], kj, *gp));
                }
        }
        if (t > 0) {
#pragma unroll
            for (int m = 0; m < NR; m++)
                if (ok[m]) zv[b ^ 1][ix[m]] = nx.z[m], kv[b ^ 1][ix[m]] = (double)nx.k[m], uv[b ^ 1][ix[m]] = (double)nx.u[m];
            cur = nx;
        }
    }
    __syncwarp(); /* the last token's dA rows */
    /* dA_0 is dA's symmetric part (A is symmetric) */
    if (P.dA0)
        for (int i = 0; i < dk; i++)
            for (int j = lane; j < dk; j += 32)
                P.dA0[sA + (size_t)i * dk + j] = (float)(0.5 * (dA[(size_t)i * lda + j] + dA[(size_t)j * lda + i]));
}

std::atomic<size_t> afwd_smem_set[64], abwd_smem_set[64], abwds_smem_set[64];
std::atomic<size_t> afwdw_smem_set[2][64], abwdw_smem_set[2][64];

#undef MAXD

} // namespace

size_t grad_chunk_apart_static_smem() { /* the larger of the block form's and the segment form's */
    static const size_t s = [] {
        const size_t b = static_smem_of((const void *)gc_abwd_kernel, 24576);
        const size_t g = static_smem_of((const void *)gc_abwd_seg_kernel, 24576);
        return b > g ? b : g;
    }();
    return s;
}

/* VLA_CUDA_APART=segment (read once a process): the backward walk in segment form, where the plan
 * gives it P.Sg (seg_doubles a head). */
bool grad_chunk_apart_segment() {
    static const bool on = [] {
        const char *e = getenv("VLA_CUDA_APART");
        return e && strcmp(e, "segment") == 0;
    }();
    return on;
}
size_t grad_chunk_apart_segment_doubles(int C, int dk) { return seg_doubles(C, dk); }

/* Which form runs the A part: the warp form (0: one row of A per lane, 1: two) or the block form
 * (-1). Timed on an H100 (benchmarks/results/2026-12-06-h100-backward/ab-8c8452e, fwd + bwd): at dk = 32 the
 * warp form takes VLA from 20.0 to 12.5 ms ((1,4,32), T = 2048); at dk = 64 it is 4% slower than the
 * block form ((8,16,64), T = 2048 and 8192), as the header's issue count says (one sub-partition's
 * double units against four). So by default: the warp form for dk <= 32 when the planner put A and
 * dA in shared memory (smem_a; the warp kernels' static vectors, at most 8 WD doubles, are below
 * the block kernels' static arrays that the planner counted), else the block form.
 * VLA_CUDA_APART=block or =warp (warp: for every dk <= WD with smem_a) overrides that, read once per
 * process: a development switch, so that two runs of one build can time both forms. */
static int apart_form(const gchunk_params &p) {
    static const int force = [] { /* 0: none, -1: block, 1: warp */
        const char *s = getenv("VLA_CUDA_APART");
        return !s ? 0 : strcmp(s, "block") == 0 ? -1 : strcmp(s, "warp") == 0 ? 1 : 0;
    }();
    if (force < 0 || p.smem_a == 0 || p.a.dk > WD) return -1;
    if (p.a.dk > 32) return force > 0 ? 1 : -1;
    return 0;
}

cudaError_t launch_grad_chunk_afwd(const gchunk_params &p, cudaStream_t st) {
    const size_t bytes = p.smem_a ? p.smem_a / 2 : 0; /* A alone */
    const unsigned BH = (unsigned)(p.a.B * p.a.H);
    const int w = apart_form(p);
    const void *kf = w < 0 ? (const void *)gc_afwd_kernel
                           : w ? (const void *)gc_afwd_warp_kernel<2> : (const void *)gc_afwd_warp_kernel<1>;
    const void *kb = w < 0 ? (const void *)gc_abwd_kernel
                           : w ? (const void *)gc_abwd_warp_kernel<2> : (const void *)gc_abwd_warp_kernel<1>;
    std::atomic<size_t> *cf = w < 0 ? afwd_smem_set : afwdw_smem_set[w];
    std::atomic<size_t> *cb = w < 0 ? abwd_smem_set : abwdw_smem_set[w];
    cudaError_t e = raise_smem_limit_static(kf, cf, bytes, grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    /* the backward kernel's limit too, before anything is queued (a failing call writes nothing) */
    e = raise_smem_limit_static(kb, cb, p.smem_a, grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    if (w < 0)
        VLACU_LAUNCH(gc_afwd_kernel, BH, VLACU_NT, bytes, st, p);
    else if (w)
        VLACU_LAUNCH(gc_afwd_warp_kernel<2>, BH, 32, bytes, st, p);
    else
        VLACU_LAUNCH(gc_afwd_warp_kernel<1>, BH, 32, bytes, st, p);
    return cudaGetLastError();
}

cudaError_t launch_grad_chunk_abwd(const gchunk_params &p, cudaStream_t st) {
    const unsigned BH = (unsigned)(p.a.B * p.a.H);
    if (p.Sg) { /* the segment form (grad_chunk_apart_segment: the plan gave it its slices) */
        const cudaError_t e = raise_smem_limit_static((const void *)gc_abwd_seg_kernel, abwds_smem_set, p.smem_a,
                                                      grad_chunk_apart_static_smem());
        if (e != cudaSuccess) return e;
        VLACU_LAUNCH(gc_abwd_seg_kernel, BH, VLACU_NT, p.smem_a, st, p);
        return cudaGetLastError();
    }
    const int w = apart_form(p);
    const void *kb = w < 0 ? (const void *)gc_abwd_kernel
                           : w ? (const void *)gc_abwd_warp_kernel<2> : (const void *)gc_abwd_warp_kernel<1>;
    const cudaError_t e = raise_smem_limit_static(kb, w < 0 ? abwd_smem_set : abwdw_smem_set[w], p.smem_a,
                                                  grad_chunk_apart_static_smem());
    if (e != cudaSuccess) return e;
    if (w < 0)
        VLACU_LAUNCH(gc_abwd_kernel, BH, VLACU_NT, p.smem_a, st, p);
    else if (w)
        VLACU_LAUNCH(gc_abwd_warp_kernel<2>, BH, 32, p.smem_a, st, p);
    else
        VLACU_LAUNCH(gc_abwd_warp_kernel<1>, BH, 32, p.smem_a, st, p);
    return cudaGetLastError();
}

} // namespace grad
} // namespace vlacu
