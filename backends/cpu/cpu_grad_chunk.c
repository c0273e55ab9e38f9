/* One chunk of the residual delta rule in double, forward and vector-Jacobian product: the S part
 * of every chunked backward (linear, DeltaNet, VLA). The forward is cpu_chunk_step's form
 * (VLA-MATH 2.3), on ST = S^T [dk][dv], for c tokens with rows Kr, W, Q [c, dk], V [c, dv]:
 *   gam_t = prod_{r<=t} g_r,  D[t][s] = prod_{s<r<=t} g_r (s <= t; 1 on the diagonal; g = 1 when absent)
 *   B = V - diag(gam) Kr ST0          (residual; B = V without)
 *   (I + strict_lower(Lr o D)) E = B,  Lr = Kr W^T      (E: the residuals e_t; E = B without residual)
 *   O = diag(gam) Q ST0 + tril(Pq o D) E,  Pq = Q W^T
 *   ST_end = gam_{c-1} ST0 + W^T diag(D[c-1, :]) E
 *
 * VJP, given dO [c, dv] and dST = dST_end [dk, dv] (which becomes dST0):
 *   dE = tril(Pq o D)^T dO + diag(D[c-1, :]) W dST_end,   dW += diag(D[c-1, :]) E dST_end^T
 *   dST0 = gam_{c-1} dST_end + Q^T diag(gam) dO - Kr^T diag(gam) dB
 *   dQ += diag(gam) dO ST0^T + (dO E^T o D)_tril W,        dW += (dO E^T o D)_tril^T Q
 *   (I + strict_lower(Lr o D))^T dB = dE   (back substitution),   dV += dB
 *   dLr = -(dB E^T o D)_strict:  dKr += dLr W - diag(gam) dB ST0^T,   dW += dLr^T Kr
 * and the adjoints of the decay products, dD[t][s] (and dgam_t as a column s = -1 of an extended
 * Dext, Dext[t][-1] = gam_t), give the gate's gradient without dividing by g (g may be 0):
 *   d D[t][s] / d g_r = D[t][r] D[r-1][s]  for s < r <= t   (D[r-1][-1] = gam_{r-1}, gam_{-1} = 1)
 *   dg_r = sum_{t>=r} D[t][r] Y[t][r],  Y = dDext Fext^T,  Fext[r][s] = Dext[r-1][s] for s < r, else 0
 * (one c x (c+1) x c product). Work per chunk: O(c (dk + dv)(c + min(dk, dv)) + c^3) in products. */
#include "cpu_grad.h"
#include "cpu_kernels.h"

#include <string.h>

/* Work arrays, in doubles, each [c, c], [c, c + 1], [c, dv] or [c]. */
typedef struct chunk_ws {
    double *D, *gam, *KS, *E, *QS, *Lr, *Pq, *Pm; /* kept from the forward for the VJP */
    double *WdS, *dE, *dB, *T1, *G, *dDx, *Fx, *Y;
} chunk_ws;

static chunk_ws carve(int c, int dv, double *w) {
    const size_t cc = (size_t)c * c, cx = (size_t)c * (c + 1), cv = (size_t)c * dv;
    chunk_ws s;
    s.D = w, w += cpu_grad_pad(cc);
    s.gam = w, w += cpu_grad_pad((size_t)c);
    s.KS = w, w += cpu_grad_pad(cv);
    s.E = w, w += cpu_grad_pad(cv);
    s.QS = w, w += cpu_grad_pad(cv);
    s.Lr = w, w += cpu_grad_pad(cc);
    s.Pq = w, w += cpu_grad_pad(cc);
    s.Pm = w, w += cpu_grad_pad(cc);
    s.WdS = w, w += cpu_grad_pad(cv);
    s.dE = w, w += cpu_grad_pad(cv);
    s.dB = w, w += cpu_grad_pad(cv);
    s.T1 = w, w += cpu_grad_pad(cv);
    s.G = w, w += cpu_grad_pad(cc);
    s.dDx = w, w += cpu_grad_pad(cx);
    s.Fx = w, w += cpu_grad_pad(cx);
    s.Y = w;
    return s;
}

size_t cpu_grad_chunk_work(int c, int dk, int dv) {
    (void)dk;
    const size_t cc = (size_t)c * c, cx = (size_t)c * (c + 1), cv = (size_t)c * dv;
    return 5 * cpu_grad_pad(cc) + cpu_grad_pad((size_t)c) + 7 * cpu_grad_pad(cv) + 2 * cpu_grad_pad(cx) +
           cpu_grad_pad(cc);
}

void cpu_grad_chunk_forward(const cpu_grad_chunk *ch, const double *ST0, double *O, double *ST_end, double *work) {
    const int c = ch->c, dk = ch->dk, dv = ch->dv;
    chunk_ws s = carve(c, dv, work);
    /* Decay products; 1 without g. */
    for (int t = 0; t < c; t++) {
        const double gt = ch->g ? ch->g[t] : 1.0;
        s.gam[t] = (t ? s.gam[t - 1] : 1.0) * gt;
        double *Dt = s.D + (size_t)t * c;
        for (int j = 0; j < c; j++) Dt[j] = j < t ? s.D[(size_t)(t - 1) * c + j] * gt : (j == t ? 1.0 : 0.0);
    }
    /* E: the residuals. */
    if (ch->residual) {
        cpu_gemm_d(0, 0, c, dv, dk, 1.0, ch->Kr, dk, ST0, dv, 0.0, s.KS, dv); /* KS = Kr ST0 */
        for (int t = 0; t < c; t++)
            for (int j = 0; j < dv; j++)
                s.E[(size_t)t * dv + j] = ch->V[(size_t)t * dv + j] - s.gam[t] * s.KS[(size_t)t * dv + j];
        cpu_gemm_d(0, 1, c, c, dk, 1.0, ch->Kr, dk, ch->W, dk, 0.0, s.Lr, c); /* Lr = Kr W^T */
        for (int t = 1; t < c; t++) {
            double *et = s.E + (size_t)t * dv;
            for (int r = 0; r < t; r++) {
                const double l = s.Lr[(size_t)t * c + r] * s.D[(size_t)t * c + r];
                const double *er = s.E + (size_t)r * dv;
                for (int j = 0; j < dv; j++) et[j] -= l * er[j];
            }
        }
    } else {
        memcpy(s.E, ch->V, sizeof(double) * (size_t)c * dv);
    }
    /* O = diag(gam) Q ST0 + tril(Pq o D) E. */
    cpu_gemm_d(0, 0, c, dv, dk, 1.0, ch->Q, dk, ST0, dv, 0.0, s.QS, dv);
    cpu_gemm_d(0, 1, c, c, dk, 1.0, ch->Q, dk, ch->W, dk, 0.0, s.Pq, c);
    for (size_t i = 0; i < (size_t)c * c; i++) s.Pm[i] = s.Pq[i] * s.D[i]; /* D is 0 above the diagonal */
    if (O) {
        for (int t = 0; t < c; t++)
            for (int j = 0; j < dv; j++) O[(size_t)t * dv + j] = s.gam[t] * s.QS[(size_t)t * dv + j];
        cpu_gemm_d(0, 0, c, dv, c, 1.0, s.Pm, c, s.E, dv, 1.0, O, dv);
    }
    /* ST_end = gam_last ST0 + W^T diag(D[c-1, :]) E. */
    if (ST_end) {
        const double gl = s.gam[c - 1], *Dl = s.D + (size_t)(c - 1) * c;
        for (size_t i = 0; i < (size_t)dk * dv; i++) ST_end[i] = gl * ST0[i];
        for (int t = 0; t < c; t++)
            for (int j = 0; j < dv; j++) s.T1[(size_t)t * dv + j] = Dl[t] * s.E[(size_t)t * dv + j];
        cpu_gemm_d(1, 0, dk, dv, c, 1.0, ch->W, dk, s.T1, dv, 1.0, ST_end, dv);
    }
}

void cpu_grad_chunk_vjp(const cpu_grad_chunk *ch, const double *ST0, const double *dO, double *dST, double *dQ,
                        double *dKr, double *dW, double *dV, double *dg, double *work) {
    const int c = ch->c, dk = ch->dk, dv = ch->dv, cx = c + 1;
    chunk_ws s = carve(c, dv, work);
    const double *Dl = s.D + (size_t)(c - 1) * c;
    if (ch->g) memset(s.dDx, 0, sizeof(double) * (size_t)c * cx);
#define DDX(t, j) s.dDx[(size_t)(t) * cx + (j) + 1] /* column -1 is dgam */

    /* The ST_end term, with dST = dST_end. */
    cpu_gemm_d(0, 0, c, dv, dk, 1.0, ch->W, dk, dST, dv, 0.0, s.WdS, dv); /* W dST_end */
    for (int t = 0; t < c; t++)
        for (int j = 0; j < dv; j++) {
            s.dE[(size_t)t * dv + j] = Dl[t] * s.WdS[(size_t)t * dv + j];
            s.T1[(size_t)t * dv + j] = Dl[t] * s.E[(size_t)t * dv + j];
        }
    cpu_gemm_d(0, 1, c, dk, dv, 1.0, s.T1, dv, dST, dv, 1.0, dW, dk); /* dW += diag(D_last) E dST^T */
    if (ch->g) {
        for (int t = 0; t < c; t++) DDX(c - 1, t) += cpu_grad_dot(s.WdS + (size_t)t * dv, s.E + (size_t)t * dv, dv);
        DDX(c - 1, -1) += cpu_grad_dot(ST0, dST, dk * dv);
    }
    const double gl = s.gam[c - 1];
    for (size_t i = 0; i < (size_t)dk * dv; i++) dST[i] *= gl; /* dST is dST0 from here on */

    /* O = diag(gam) Q ST0 + Pm E. */
    cpu_gemm_d(1, 0, c, dv, c, 1.0, s.Pm, c, dO, dv, 1.0, s.dE, dv); /* dE += Pm^T dO */
    for (int t = 0; t < c; t++)
        for (int j = 0; j < dv; j++) s.T1[(size_t)t * dv + j] = s.gam[t] * dO[(size_t)t * dv + j];
    cpu_gemm_d(0, 1, c, dk, dv, 1.0, s.T1, dv, ST0, dv, 1.0, dQ, dk); /* dQ += diag(gam) dO ST0^T */
    cpu_gemm_d(1, 0, dk, dv, c, 1.0, ch->Q, dk, s.T1, dv, 1.0, dST, dv); /* dST0 += Q^T diag(gam) dO */
    if (ch->g)
        for (int t = 0; t < c; t++) DDX(t, -1) += cpu_grad_dot(dO + (size_t)t * dv, s.QS + (size_t)t * dv, dv);
    cpu_gemm_d(0, 1, c, c, dv, 1.0, dO, dv, s.E, dv, 0.0, s.G, c); /* G = dO E^T */
    for (int t = 0; t < c; t++)
        for (int j = 0; j < c; j++) {
            double *gt = s.G + (size_t)t * c + j;
            if (j > t) {
                *gt = 0.0;
                continue;
            }
            if (ch->g) DDX(t, j) += *gt * s.Pq[(size_t)t * c + j];
            *gt *= s.D[(size_t)t * c + j]; /* dPq */
        }
    cpu_gemm_d(0, 0, c, dk, c, 1.0, s.G, c, ch->W, dk, 1.0, dQ, dk); /* dQ += dPq W */
    cpu_gemm_d(1, 0, c, dk, c, 1.0, s.G, c, ch->Q, dk, 1.0, dW, dk); /* dW += dPq^T Q */

    /* The triangular solve, and B = V - diag(gam) Kr ST0. */
    if (ch->residual) {
        for (int t = c - 1; t >= 0; t--) { /* (I + strict_lower(Lr o D))^T dB = dE */
            double *bt = s.dB + (size_t)t * dv;
            memcpy(bt, s.dE + (size_t)t * dv, sizeof(double) * dv);
            for (int r = t + 1; r < c; r++) {
                const double l = s.Lr[(size_t)r * c + t] * s.D[(size_t)r * c + t];
                const double *br = s.dB + (size_t)r * dv;
                for (int j = 0; j < dv; j++) bt[j] -= l * br[j];
            }
        }
        cpu_gemm_d(0, 1, c, c, dv, 1.0, s.dB, dv, s.E, dv, 0.0, s.G, c); /* G = dB E^T */
        for (int t = 0; t < c; t++)
            for (int j = 0; j < c; j++) {
                double *gt = s.G + (size_t)t * c + j;
                if (j >= t) {
                    *gt = 0.0;
                    continue;
                }
                if (ch->g) DDX(t, j) -= *gt * s.Lr[(size_t)t * c + j];
                *gt *= -s.D[(size_t)t * c + j]; /* dLr */
            }
        cpu_gemm_d(0, 0, c, dk, c, 1.0, s.G, c, ch->W, dk, 1.0, dKr, dk); /* dKr += dLr W */
        cpu_gemm_d(1, 0, c, dk, c, 1.0, s.G, c, ch->Kr, dk, 1.0, dW, dk); /* dW += dLr^T Kr */
        for (int t = 0; t < c; t++)
            for (int j = 0; j < dv; j++) s.T1[(size_t)t * dv + j] = -s.gam[t] * s.dB[(size_t)t * dv + j];
        cpu_gemm_d(0, 1, c, dk, dv, 1.0, s.T1, dv, ST0, dv, 1.0, dKr, dk); /* dKr -= diag(gam) dB ST0^T */
        cpu_gemm_d(1, 0, dk, dv, c, 1.0, ch->Kr, dk, s.T1, dv, 1.0, dST, dv); /* dST0 -= Kr^T diag(gam) dB */
        if (ch->g)
            for (int t = 0; t < c; t++)
                DDX(t, -1) -= cpu_grad_dot(s.dB + (size_t)t * dv, s.KS + (size_t)t * dv, dv);
    } else {
        memcpy(s.dB, s.dE, sizeof(double) * (size_t)c * dv);
    }
    for (size_t i = 0; i < (size_t)c * dv; i++) dV[i] += s.dB[i];

    /* The gate: dg_r = sum_{t>=r} D[t][r] Y[t][r], Y = dDext Fext^T. */
    if (ch->g && dg) {
        memset(s.Fx, 0, sizeof(double) * (size_t)c * cx);
        for (int r = 0; r < c; r++) {
            double *f = s.Fx + (size_t)r * cx;
            f[0] = r ? s.gam[r - 1] : 1.0;
            for (int j = 0; j < r; j++) f[j + 1] = s.D[(size_t)(r - 1) * c + j];
        }
        cpu_gemm_d(0, 1, c, c, cx, 1.0, s.dDx, cx, s.Fx, cx, 0.0, s.Y, c);
        for (int r = 0; r < c; r++) {
            double acc = 0.0;
            for (int t = r; t < c; t++) acc += s.D[(size_t)t * c + r] * s.Y[(size_t)t * c + r];
            dg[r] += acc;
        }
    }
#undef DDX
}
