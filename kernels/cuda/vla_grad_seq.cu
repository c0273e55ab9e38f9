/* The recurrent backward of linear attention, DeltaNet and VLA (VLA-MATH 5): one block per head.
 * Port of the CPU backend's cpu_grad_delta.c / cpu_grad_vla.c (their top comments derive the
 * adjoints), on the prepared rows of vla_grad_prep.cu (q~, k~, k^, u in [BH][T][dk]).
 *
 * All three are the residual delta rule on X = S^T [dk][dv] (the library's storage of S):
 *   e_t = v_t - r g_t X_{t-1}^T kr_t,  X_t = g_t X_{t-1} + w_t e_t^T,  o_t = X_t^T q~_t / D_t
 *   linear  r = 0, g = 1, w = k~, D = q~ . n_t + eps, n_t = n_{t-1} + k~_t
 *   delta   r = 1, kr = k^, w = beta k^, g (1 when absent), D = 1
 *   vla     r = 1, kr = k^, w = a_t from the A recurrence (double, as the forward's sequential
 *           engine), g = 1, D = max(q~ . n_t, eps) with the normalised output, else 1.
 * Adjoints, walking t = T-1 .. 0 with the running dX (of X_t), dA (of A_t), dn (of n_t), started at
 * dS_end, dA_end, dn_end (0 when absent); P = dX + q~ dnum^T is the adjoint of X_t with token t's
 * output in:
 *   output  dnum = dO / D;  dr = -(dO . num) / D^2 (linear always; vla where q~ . n_t > eps);
 *           dq~ += X_t dnum + dr n_t;  dn += dr q~;  dk~_t += dn
 *   write   de = P^T w,  dw = P e,  dv_t = de
 *           linear dk~_t += dw;  delta dbeta_t = k^ . dw, dk^_t += beta dw;  vla da_t = dw
 *   carry   M = P - r kr de^T,  dg_t = <X_{t-1}, M>,  dkr_t -= r g X_{t-1} de,  dX <- g M
 *   vla A   dy = (da - a (a . da)) / ||y|| (da / eps where the floor binds);  dk^ += A_t^T dy;
 *           G = dA + dy k^^T;  dz = -(G + G^T) z / den + dc u,  dc = [c > eps] z^T G z / den^2;
 *           du = dc z + A_{t-1}^T dz;  dA <- G + dz u^T
 * X_t is never kept: X_t dnum = g X_{t-1} dnum + w (e . dnum), and X_t^T q~ likewise.
 *
 * Memory (seq_layout): X, A, n at every chunk start of C tokens (one forward pass), then chunk by
 * chunk backwards: each chunk recomputed from its checkpoint, keeping X_{t-1} [C][dk][dv], z_t, den_t,
 * ||y_t||, a_t, e_t, n_t, and walked back. A_{t-1} is recovered from A_t by undoing the step in double,
 * A_{t-1} = A_t (- rho I) + z z^T / den (exact up to rounding over C tokens, as the CPU backend); X_{t-1}
 * is kept because DeltaNet's g_t may be 0. No d x d matrix per token of the whole sequence. */
#include "vla_grad.cuh"

namespace vlacu {
namespace grad {

#define MAXD VLACU_MAXD

struct vecs {
    float *q, *kr, *w, *u, *kf, *v, *e, *n, *dO, *dnum, *de, *dw, *num, *dq, *dn, *t1, *t2, *dkr;
    double *z, *y, *dy, *dz, *g1, *g2;
};

__device__ __forceinline__ size_t rowof(const vlacu_args &a, int b, int t, int h) { return ((size_t)b * a.T + t) * a.H + h; }

/* Tokens [ts, te) forward from X, A, n (advanced in place). With `store`, the chunk store gets the
 * per-token values the backward walk reads. Ends with a barrier. */
__device__ void fwd_chunk(const gseq_params &P, int bh, int ts, int te, bool store, float *X, double *A, const vecs &V,
                          unsigned char *gs, double *red, double *sc) {
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x, b = bh / a.H, h = bh % a.H;
    const bool vla = a.mech == VLACU_VLA, linear = a.mech == VLACU_LINEAR, delta = a.mech == VLACU_DELTA;
    const bool has_n = linear || (vla && a.normalize);
    const int ldx = ld_of(dv), lda = ld_of(dk);
    const seq_layout &L = P.lay;
    for (int t = ts; t < te; t++) {
        const int i = t - ts;
        const size_t pr = ((size_t)bh * T + t) * dk, r = rowof(a, b, t, h);
        if (linear) ldvec(V.kr, P.Kf + pr, dk);
        else ldvec(V.kr, P.Kh + pr, dk);
        if (vla) ldvec(V.u, P.Up + pr, dk);
        if (vla && has_n) ldvec(V.kf, P.Kf + pr, dk);
        ldvec(V.v, a.v + r * dv, dv);
        const float g = delta && a.g ? a.g[r] : 1.0f, beta = delta && a.beta ? a.beta[r] : 1.0f;
        __syncthreads();
        if (vla) {
            /* z = A u;  A -= z z^T / max(1 + u.z, eps)  (+ rho I);  a = normalize(A k^) */
            mv<false, 1, double>(A, lda, dk, dk, V.u, V.u, V.z, V.z, red);
            double s[1] = {0.0};
            for (int j = tid; j < dk; j += nt) s[0] += (double)V.u[j] * V.z[j];
            block_sums<1>(s, sc);
            const double c = 1.0 + s[0], den = fmax(c, a.eps), inv = 1.0 / den;
            const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
            for (int e = tid; e < dk * dk; e += nt) {
                const int ii = e / dk, j = e - ii * dk;
                double *ap = A + (size_t)ii * lda + j;
                double x = *ap - V.z[ii] * inv * V.z[j];
                if (refresh && ii == j) x += a.rho;
                *ap = x;
            }
            __syncthreads();
            mv<false, 1, double>(A, lda, dk, dk, V.kr, V.kr, V.y, V.y, red);
            double s2[1] = {0.0};
            for (int j = tid; j < dk; j += nt) s2[0] += V.y[j] * V.y[j];
            block_sums<1>(s2, sc);
            const double yn = sqrt(s2[0]), ys = 1.0 / fmax(yn, a.eps);
            for (int j = tid; j < dk; j += nt) V.w[j] = (float)(V.y[j] * ys);
            if (store) {
                double *Z = (double *)(gs + L.sZ) + (size_t)i * dk;
                for (int j = tid; j < dk; j += nt) Z[j] = V.z[j];
                if (tid == 0) {
                    ((double *)(gs + L.sDen))[i] = den;
                    ((double *)(gs + L.sYn))[i] = yn;
                    ((double *)(gs + L.sGate))[i] = c > a.eps ? 1.0 : 0.0;
                }
            }
        } else if (delta) {
            for (int j = tid; j < dk; j += nt) V.w[j] = beta * V.kr[j];
        } else {
            for (int j = tid; j < dk; j += nt) V.w[j] = V.kr[j];
        }
        /* e = v - g X^T kr (residual) or v */
        if (!linear) mv<true, 1, float>(X, ldx, dv, dk, V.kr, V.kr, V.t1, V.t1, (float *)red);
        else __syncthreads();
        for (int j = tid; j < dv; j += nt) V.e[j] = linear ? V.v[j] : V.v[j] - g * V.t1[j];
        if (store) {
            float *Xs = (float *)(gs + L.sX) + (size_t)i * dk * dv;
            for (int e = tid; e < dk * dv; e += nt) {
                const int ii = e / dv, j = e - ii * dv;
                Xs[e] = X[(size_t)ii * ldx + j];
            }
        }
        __syncthreads();
        for (int e = tid; e < dk * dv; e += nt) {
            const int ii = e / dv, j = e - ii * dv;
            float *x = X + (size_t)ii * ldx + j;
            *x = delta ? g * *x + V.w[ii] * V.e[j] : *x + V.w[ii] * V.e[j];
        }
        if (has_n)
            for (int j = tid; j < dk; j += nt) V.n[j] += linear ? V.kr[j] : V.kf[j];
        if (store) {
            float *W = (float *)(gs + L.sW) + (size_t)i * dk, *E = (float *)(gs + L.sE) + (size_t)i * dv;
            for (int j = tid; j < dk; j += nt) W[j] = V.w[j];
            for (int j = tid; j < dv; j += nt) E[j] = V.e[j];
            if (has_n) {
                float *N = (float *)(gs + L.sN) + (size_t)i * dk;
                for (int j = tid; j < dk; j += nt) N[j] = V.n[j];
            }
        }
        __syncthreads();
    }
}

/* Token t (i in the chunk) backwards. dX, dA, dn are the adjoints of X_t, A_t, n_t on entry and of
 * X_{t-1}, A_{t-1}, n_{t-1} on return; A is A_t on entry and A_{t-1} on return. Ends with a barrier. */
__device__ void bwd_token(const gseq_params &P, int bh, int t, int i, float *dX, double *A, double *dA, const vecs &V,
                          unsigned char *gs, double *red, double *sc) {
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x, b = bh / a.H, h = bh % a.H;
    const bool vla = a.mech == VLACU_VLA, linear = a.mech == VLACU_LINEAR, delta = a.mech == VLACU_DELTA;
    const bool has_n = linear || (vla && a.normalize);
    const int ldx = ld_of(dv), lda = ld_of(dk);
    const seq_layout &L = P.lay;
    const size_t pr = ((size_t)bh * T + t) * dk, r = rowof(a, b, t, h);
    const float *X0 = (const float *)(gs + L.sX) + (size_t)i * dk * dv; /* X_{t-1}, [dk][dv] */
    const float eps = (float)a.eps;

    ldvec(V.q, P.Qp + pr, dk);
    if (linear) ldvec(V.kr, P.Kf + pr, dk);
    else ldvec(V.kr, P.Kh + pr, dk);
    if (vla) ldvec(V.u, P.Up + pr, dk);
    ldvec(V.w, (const float *)(gs + L.sW) + (size_t)i * dk, dk);
    ldvec(V.e, (const float *)(gs + L.sE) + (size_t)i * dv, dv);
    ldvec(V.dO, P.dO + r * dv, dv);
    if (has_n) ldvec(V.n, (const float *)(gs + L.sN) + (size_t)i * dk, dk);
    if (vla) ldvec(V.z, (const double *)(gs + L.sZ) + (size_t)i * dk, dk);
    const float g = delta && a.g ? a.g[r] : 1.0f, beta = delta && a.beta ? a.beta[r] : 1.0f;
    __syncthreads();

    /* ---- output: dnum, and dq~'s normaliser part (into dq), dn ---- */
    if (has_n) {
        /* num = X_t^T q~ = X_{t-1}^T q~ + e (w . q~)  (g = 1 here) */
        mv<true, 1, float>(X0, dv, dv, dk, V.q, V.q, V.num, V.num, (float *)red);
        double s[2] = {0.0, 0.0};
        for (int j = tid; j < dk; j += nt) s[0] += (double)V.w[j] * V.q[j], s[1] += (double)V.q[j] * V.n[j];
        block_sums<2>(s, sc);
        const float wq = (float)s[0], rq = (float)s[1];
        double s2[1] = {0.0};
        for (int j = tid; j < dv; j += nt) s2[0] += (double)V.dO[j] * (V.num[j] + V.e[j] * wq);
        block_sums<1>(s2, sc);
        const float D = linear ? rq + eps : fmaxf(rq, eps);
        const float dr = (linear || rq > eps) ? (float)(-s2[0] / ((double)D * D)) : 0.0f;
        for (int j = tid; j < dv; j += nt) V.dnum[j] = V.dO[j] / D;
        for (int j = tid; j < dk; j += nt) {
            V.dq[j] = dr * V.n[j];
            V.dn[j] += dr * V.q[j];
        }
    } else {
        for (int j = tid; j < dv; j += nt) V.dnum[j] = V.dO[j];
        for (int j = tid; j < dk; j += nt) V.dq[j] = 0.0f;
    }
    __syncthreads();

    /* ---- write: de = P^T w, dw = P e with P = dX + q~ dnum^T ---- */
    mv<true, 1, float>(dX, ldx, dv, dk, V.w, V.w, V.de, V.de, (float *)red);
    mv<false, 1, float>(dX, ldx, dk, dv, V.e, V.e, V.dw, V.dw, (float *)red);
    {
        double s[2] = {0.0, 0.0};
        for (int j = tid; j < dk; j += nt) s[0] += (double)V.q[j] * V.w[j];
        for (int j = tid; j < dv; j += nt) s[1] += (double)V.dnum[j] * V.e[j];
        block_sums<2>(s, sc);
        const float qw = (float)s[0], dnume = (float)s[1];
        for (int j = tid; j < dv; j += nt) V.de[j] += V.dnum[j] * qw;
        for (int j = tid; j < dk; j += nt) V.dw[j] += V.q[j] * dnume;
        __syncthreads();
        /* X_{t-1} dnum and X_{t-1} de: dq~ += g X_{t-1} dnum + w (e . dnum); dkr -= g X_{t-1} de */
        mv<false, 2, float>(X0, dv, dk, dv, V.dnum, V.de, V.t1, V.t2, (float *)red);
        for (int j = tid; j < dk; j += nt) V.dq[j] += g * V.t1[j] + V.w[j] * dnume;
    }
    if (P.dv)
        for (int j = tid; j < dv; j += nt) P.dv[r * dv + j] = V.de[j];
    if (delta && P.dg) {
        /* dg_t = <X_{t-1}, M>, M = dX + q~ dnum^T - k^ de^T */
        double s[3] = {0.0, 0.0, 0.0};
        for (int e = tid; e < dk * dv; e += nt) {
            const int ii = e / dv, j = e - ii * dv;
            s[0] += (double)X0[e] * dX[(size_t)ii * ldx + j];
        }
        for (int j = tid; j < dk; j += nt) s[1] += (double)V.q[j] * V.t1[j], s[2] += (double)V.kr[j] * V.t2[j];
        block_sums<3>(s, sc);
        if (tid == 0) P.dg[r] = (float)(s[0] + s[1] - s[2]);
    }
    for (int j = tid; j < dk; j += nt) P.dQp[pr + j] = V.dq[j];
    if (linear) {
        for (int j = tid; j < dk; j += nt) P.dKf[pr + j] = V.dn[j] + V.dw[j];
    } else if (delta) {
        for (int j = tid; j < dk; j += nt) P.dKh[pr + j] = beta * V.dw[j] - g * V.t2[j];
        if (P.dbeta) {
            double s[1] = {0.0};
            for (int j = tid; j < dk; j += nt) s[0] += (double)V.kr[j] * V.dw[j];
            block_sums<1>(s, sc);
            if (tid == 0) P.dbeta[r] = (float)s[0];
        }
    } else {
        if (has_n)
            for (int j = tid; j < dk; j += nt) P.dKf[pr + j] = V.dn[j];
        for (int j = tid; j < dk; j += nt) V.dkr[j] = -V.t2[j];
    }
    /* dX <- g (dX + q~ dnum^T - r kr de^T) (every read of dX above ended with a barrier) */
    for (int e = tid; e < dk * dv; e += nt) {
        const int ii = e / dv, j = e - ii * dv;
        float *x = dX + (size_t)ii * ldx + j;
        float m = *x + V.q[ii] * V.dnum[j];
        if (!linear) m -= V.kr[ii] * V.de[j];
        *x = g * m;
    }
    __syncthreads();
    if (!vla) return;

    /* ---- the A part: da = dw ---- */
    const double den = ((const double *)(gs + L.sDen))[i], yn = ((const double *)(gs + L.sYn))[i];
    const bool gate = ((const double *)(gs + L.sGate))[i] != 0.0;
    const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
    a_token_backward(a, dk, lda, den, yn, gate, refresh, V.w, V.dw, V.kr, V.u, V.z, V.dy, V.dz, V.g1, V.g2, red, sc,
                     A, dA, V.dkr, P.dKh + pr, P.dU + pr);
}

__global__ void __launch_bounds__(VLACU_NT) grad_seq_kernel(const gseq_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ float fv[18][MAXD];
    __shared__ double dvv[6][MAXD];
    __shared__ double red[2 * VLACU_NT];
    __shared__ double sc[3 * 32];
    const vlacu_args &a = P.a;
    const int T = a.T, dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x;
    const int bh = blockIdx.x, C = P.C, nck = P.nck;
    const bool vla = a.mech == VLACU_VLA, linear = a.mech == VLACU_LINEAR;
    const bool has_n = linear || (vla && a.normalize);
    vecs V;
    V.q = fv[0], V.kr = fv[1], V.w = fv[2], V.u = fv[3], V.kf = fv[4], V.v = fv[5], V.e = fv[6], V.n = fv[7];
    V.dO = fv[8], V.dnum = fv[9], V.de = fv[10], V.dw = fv[11], V.num = fv[12], V.dq = fv[13], V.dn = fv[14];
    V.t1 = fv[15], V.t2 = fv[16], V.dkr = fv[17];
    V.z = dvv[0], V.y = dvv[1], V.dy = dvv[2], V.dz = dvv[3], V.g1 = dvv[4], V.g2 = dvv[5];

    unsigned char *gs = P.slices + (size_t)bh * P.lay.bytes;
    float *X = gbuf<float>(P.plan, GB_X, smem, gs), *dX = gbuf<float>(P.plan, GB_DX, smem, gs);
    double *A = gbuf<double>(P.plan, GB_A, smem, gs), *dA = gbuf<double>(P.plan, GB_DA, smem, gs);
    const int ldx = ld_of(dv), lda = ld_of(dk);
    const size_t sS = (size_t)bh * dk * dv, sA = (size_t)bh * dk * dk, sn = (size_t)bh * dk;
    const seq_layout &L = P.lay;
    float *ckX = (float *)(gs + L.ckX), *ckN = (float *)(gs + L.ckN);
    double *ckA = (double *)(gs + L.ckA);

    /* initial states: given, or S_0 = 0, A_0 = I / lambda0, n_0 = 0 */
    for (int e = tid; e < dk * dv; e += nt) {
        const int i = e / dv, j = e - i * dv;
        X[(size_t)i * ldx + j] = a.S_in ? a.S_in[sS + e] : 0.0f;
    }
    if (vla)
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            A[(size_t)i * lda + j] = a.A_in ? (double)a.A_in[sA + e] : (i == j ? 1.0 / a.lambda0 : 0.0);
        }
    for (int j = tid; j < dk; j += nt) V.n[j] = has_n && a.n_in ? a.n_in[sn + j] : 0.0f;
    __syncthreads();

    /* forward pass: a checkpoint at every chunk start; the last chunk's store stays */
    for (int c = 0; c < nck; c++) {
        const int ts = c * C, te = ts + C < T ? ts + C : T;
        float *cx = ckX + (size_t)c * dk * dv;
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            cx[e] = X[(size_t)i * ldx + j];
        }
        if (vla) {
            double *ca = ckA + (size_t)c * dk * dk;
            for (int e = tid; e < dk * dk; e += nt) {
                const int i = e / dk, j = e - i * dk;
                ca[e] = A[(size_t)i * lda + j];
            }
        }
        if (has_n)
            for (int j = tid; j < dk; j += nt) ckN[(size_t)c * dk + j] = V.n[j];
        __syncthreads();
        fwd_chunk(P, bh, ts, te, c == nck - 1, X, A, V, gs, red, sc);
    }

    /* the upstream gradients of the final states */
    for (int e = tid; e < dk * dv; e += nt) {
        const int i = e / dv, j = e - i * dv;
        dX[(size_t)i * ldx + j] = P.dS_end ? P.dS_end[sS + e] : 0.0f;
    }
    if (vla)
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            dA[(size_t)i * lda + j] = P.dA_end ? (double)P.dA_end[sA + e] : 0.0;
        }
    for (int j = tid; j < dk; j += nt) V.dn[j] = has_n && P.dn_end ? P.dn_end[sn + j] : 0.0f;
    __syncthreads();

    for (int c = nck - 1; c >= 0; c--) {
        const int ts = c * C, te = ts + C < T ? ts + C : T;
        if (c != nck - 1) { /* the last chunk's store is current after the forward pass */
            const float *cx = ckX + (size_t)c * dk * dv;
            for (int e = tid; e < dk * dv; e += nt) {
                const int i = e / dv, j = e - i * dv;
                X[(size_t)i * ldx + j] = cx[e];
            }
            if (vla) {
                const double *ca = ckA + (size_t)c * dk * dk;
                for (int e = tid; e < dk * dk; e += nt) {
                    const int i = e / dk, j = e - i * dk;
                    A[(size_t)i * lda + j] = ca[e];
                }
            }
            if (has_n)
                for (int j = tid; j < dk; j += nt) V.n[j] = ckN[(size_t)c * dk + j];
            __syncthreads();
            fwd_chunk(P, bh, ts, te, true, X, A, V, gs, red, sc);
        }
        for (int t = te - 1; t >= ts; t--) bwd_token(P, bh, t, t - ts, dX, A, dA, V, gs, red, sc);
    }

    /* the initial states' gradients; dA_0 is dA's symmetric part (A is symmetric) */
    if (P.dS0)
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            P.dS0[sS + e] = dX[(size_t)i * ldx + j];
        }
    if (vla && P.dA0)
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            P.dA0[sA + e] = (float)(0.5 * (dA[(size_t)i * lda + j] + dA[(size_t)j * lda + i]));
        }
    if (has_n && P.dn0)
        for (int j = tid; j < dk; j += nt) P.dn0[sn + j] = V.dn[j];
}

static std::atomic<size_t> grad_seq_smem_set[64];

size_t grad_seq_static_smem() {
    static const size_t s = static_smem_of((const void *)grad_seq_kernel, 40960);
    return s;
}

cudaError_t launch_grad_seq(const gseq_params &p, cudaStream_t st) {
    const cudaError_t e = raise_smem_limit_static((const void *)grad_seq_kernel, grad_seq_smem_set, p.plan.smem_bytes,
                                                      grad_seq_static_smem());
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(grad_seq_kernel, (unsigned)(p.a.B * p.a.H), VLACU_NT, p.plan.smem_bytes, st, p);
    return cudaGetLastError();
}

} // namespace grad
} // namespace vlacu
