/* The paper's DeltaNet, delta-paper (VLA-MATH 1, last subsection), sequential: the forward in
 * float and its backward (VLA-MATH 5) in double.
 *
 * In the maths S is dv x dk; it is stored transposed, ST [dk][dv], so the per-row gate g_t [dv]
 * scales ST's columns:
 *   e_t = v_t - ST_{t-1}^T k^_t,   ST_t[i][j] = g_t[j] ST_{t-1}[i][j] + k^_t[i] e_t[j],   o_t = ST_t^T q~_t
 * The dispatchers hand over q~ = phi(q) and k^ = normalize(k) (no feature map on k). Each value
 * row has its own gate, hence its own transition matrix: there is no shared chunk form, and the
 * sequential loop is the only algorithm.
 *
 * Backward, walking t = T-1 .. 0 with dST = dL/dST_t (dST_end or 0 at the start):
 *   dST += q~_t dO_t^T          dq~_t = ST_t dO_t
 *   de   = dST^T k^_t           dv_t = de                  (e_t = v_t - ST_{t-1}^T k^_t)
 *   dk^_t = dST e_t - ST_{t-1} de
 *   dg_t[j] = sum_i dST[i][j] ST_{t-1}[i][j]
 *   dST[i][j] <- g_t[j] dST[i][j] - k^_t[i] de[j]          (now dL/dST_{t-1})
 * and dS_0 = the final dST. ST_{t-1} is needed walking backwards and cannot be recovered from ST_t
 * (a gate may be 0), so ST is checkpointed every C tokens ((T / C) dk dv doubles) and each chunk is
 * recomputed from its checkpoint, keeping its C per-token states and residuals (C (dk dv + dv)). */
#include "cpu_grad.h"
#include "cpu_kernels.h"

#include <string.h>

/* ---- forward (float) ---- */

size_t cpu_delta_paper_sequential_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T; (void)dk; (void)p;
    return (size_t)dv;
}

void cpu_delta_paper_sequential(const cpu_head *h, const cpu_params *p, float *work) {
    (void)p;
    const int dk = h->dk, dv = h->dv;
    float *e = work; /* [dv] */
    for (int t = 0; t < h->T; t++) {
        const float *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        const float *g = h->g ? h->g + (size_t)t * dv : NULL;
        cpu_vecmat(k, h->ST, dk, dv, e); /* S k^ */
        for (int j = 0; j < dv; j++) e[j] = v[j] - e[j];
        for (int i = 0; i < dk; i++) {
            const float ki = k[i];
            float *row = h->ST + (size_t)i * dv;
            if (g)
                for (int j = 0; j < dv; j++) row[j] = g[j] * row[j] + ki * e[j];
            else
                for (int j = 0; j < dv; j++) row[j] += ki * e[j];
        }
        cpu_vecmat(h->q + (size_t)t * dk, h->ST, dk, dv, h->o + (size_t)t * dv);
    }
}

/* ---- backward (double) ---- */

static int n_chunks(int T, int C) { return (T + C - 1) / C; }

size_t cpu_grad_delta_paper_sequential_work(int T, int dk, int dv, const cpu_grad_params *p) {
    const size_t C = (size_t)p->chunk, sS = (size_t)dk * dv;
    return cpu_grad_pad((size_t)n_chunks(T, p->chunk) * sS) + 2 * cpu_grad_pad(sS) + /* checkpoints; ST, dST */
           cpu_grad_pad(C * sS) + cpu_grad_pad(C * (size_t)dv) +                 /* ST_{t-1}, e_t per token */
           cpu_grad_pad(2 * (size_t)dk + (size_t)dv);                            /* scratch */
}

/* Tokens [ts, te) forward from ST, which is advanced; ST_{t-1} and e_t of each token into Sst, E. */
static void forward_chunk(const cpu_grad_head *h, int ts, int te, double *ST, double *Sst, double *E) {
    const int dk = h->dk, dv = h->dv;
    const size_t sS = (size_t)dk * dv;
    for (int t = ts; t < te; t++) {
        const double *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        const double *g = h->g ? h->g + (size_t)t * dv : NULL;
        double *e = E + (size_t)(t - ts) * dv;
        memcpy(Sst + (size_t)(t - ts) * sS, ST, sizeof(double) * sS);
        cpu_grad_vecmat(k, ST, dk, dv, e);
        for (int j = 0; j < dv; j++) e[j] = v[j] - e[j];
        if (g)
            for (int i = 0; i < dk; i++) {
                double *row = ST + (size_t)i * dv;
                for (int j = 0; j < dv; j++) row[j] *= g[j];
            }
        cpu_grad_ger(ST, 1.0, k, e, dk, dv);
    }
}

void cpu_grad_delta_paper_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t sS = (size_t)dk * dv;
    double *ckpt = work;
    double *ST = ckpt + cpu_grad_pad((size_t)nc * sS), *dST = ST + cpu_grad_pad(sS);
    double *Sst = dST + cpu_grad_pad(sS), *E = Sst + cpu_grad_pad((size_t)C * sS);
    double *tmp = E + cpu_grad_pad((size_t)C * dv), *dw = tmp + dk, *de = dw + dk;

    memcpy(ST, h->ST0, sizeof(double) * sS);
    for (int c = 0; c < nc; c++) {
        memcpy(ckpt + (size_t)c * sS, ST, sizeof(double) * sS);
        forward_chunk(h, c * C, c + 1 < nc ? (c + 1) * C : T, ST, Sst, E);
    }
    if (h->dST_end) memcpy(dST, h->dST_end, sizeof(double) * sS);
    else memset(dST, 0, sizeof(double) * sS);

    for (int c = nc - 1; c >= 0; c--) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T;
        if (c != nc - 1) { /* the last chunk is current after the forward pass */
            memcpy(ST, ckpt + (size_t)c * sS, sizeof(double) * sS);
            forward_chunk(h, ts, te, ST, Sst, E);
        }
        for (int t = te - 1; t >= ts; t--) {
            const int i = t - ts;
            const double *q = h->q + (size_t)t * dk, *k = h->kh + (size_t)t * dk, *dO = h->dO + (size_t)t * dv;
            const double *g = h->g ? h->g + (size_t)t * dv : NULL, *e = E + (size_t)i * dv;
            const double *S1 = t == te - 1 ? ST : Sst + (size_t)(i + 1) * sS; /* ST_t */
            const double *S0 = Sst + (size_t)i * sS;                          /* ST_{t-1} */
            double *dq = h->dq + (size_t)t * dk, *dkh = h->dkh + (size_t)t * dk, *dvt = h->dval + (size_t)t * dv;

            /* Output: o = ST_t^T q~. */
            cpu_grad_ger(dST, 1.0, q, dO, dk, dv);
            cpu_grad_matvec(S1, dO, dk, dv, tmp);
            for (int j = 0; j < dk; j++) dq[j] += tmp[j];
            /* Write: ST_t = ST_{t-1} diag(g) + k^ e^T, e = v - ST_{t-1}^T k^. */
            cpu_grad_vecmat(k, dST, dk, dv, de);
            for (int j = 0; j < dv; j++) dvt[j] += de[j];
            cpu_grad_matvec(dST, e, dk, dv, dw);
            cpu_grad_matvec(S0, de, dk, dv, tmp);
            for (int j = 0; j < dk; j++) dkh[j] += dw[j] - tmp[j];
            if (h->dg) {
                double *dg = h->dg + (size_t)t * dv;
                for (int r = 0; r < dk; r++) {
                    const double *a = dST + (size_t)r * dv, *s = S0 + (size_t)r * dv;
                    for (int j = 0; j < dv; j++) dg[j] += a[j] * s[j];
                }
            }
            /* Carry: dST <- dST diag(g) - k^ de^T. */
            if (g)
                for (int r = 0; r < dk; r++) {
                    double *row = dST + (size_t)r * dv;
                    for (int j = 0; j < dv; j++) row[j] *= g[j];
                }
            cpu_grad_ger(dST, -1.0, k, de, dk, dv);
        }
    }
    memcpy(h->dST0, dST, sizeof(double) * sS);
}
