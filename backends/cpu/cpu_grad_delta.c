/* The backward of linear attention and DeltaNet (VLA-MATH 5), sequential form, in double.
 *
 * Both are the residual delta rule on ST = S^T [dk][dv]:
 *   e_t = v_t - r g_t ST_{t-1}^T kr_t,  ST_t = g_t ST_{t-1} + w_t e_t^T,  o_t = ST_t^T q~_t / D_t
 * linear:  r = 0, g = 1, w = k~, D_t = q~ . n_t + eps, n_t = n_{t-1} + k~_t  (no max: VLA-MATH 1)
 * delta:   r = 1, g_t (1 when absent), kr = k^, w = beta_t k^, D = 1
 *
 * Adjoints, walking t = T-1 .. 0 with running dST (of ST_t) and dn (of n_t):
 *   output:  dnum = dO_t / D_t,  dq~_t += ST_t dnum,  dST += q~_t dnum^T
 *            linear: dr = -(dO_t . o_t) / D_t,  dq~_t += dr n_t,  dn += dr q~_t,  dk~_t += dn
 *   write:   de = dST^T w_t,  dw = dST e_t,  dv_t += de
 *            linear: dk~_t += dw;  delta: dbeta_t = k^_t . dw,  dk^_t += beta_t dw
 *   carry:   M = dST - r kr_t de^T,  dg_t = <ST_{t-1}, M>,  dk^_t -= r g_t ST_{t-1} de,  dST <- g_t M
 * At the end dS_0 = dST, dn_0 = dn.
 *
 * Memory per head: ST (and n) at every chunk start ((T / C) (dk dv + dk) doubles), and for the
 * chunk being walked its per-token states ST_{t-1} (C dk dv) and vectors e_t, n_t: the gate g_t
 * may be 0 or tiny, so ST_{t-1} cannot be recovered from ST_t by undoing the step; it is
 * recomputed from the chunk's checkpoint instead. */
#include "cpu_grad.h"

#include <math.h>
#include <string.h>

static int n_chunks(int T, int C) { return (T + C - 1) / C; }

/* Checkpoint: ST then n. */
static size_t checkpoint_size(int dk, int dv) { return (size_t)dk * dv + dk; }

static size_t rule_work(int T, int dk, int dv, const cpu_grad_params *p) {
    const size_t C = (size_t)p->chunk, ck = checkpoint_size(dk, dv);
    return cpu_grad_pad((size_t)n_chunks(T, p->chunk) * ck) + 2 * cpu_grad_pad(ck) + /* ST, n; dST, dn */
           cpu_grad_pad(C * (size_t)dk * dv) +                                     /* ST_{t-1} per token */
           cpu_grad_pad(C * ((size_t)dk + dv)) +                                   /* n_t, e_t per token */
           cpu_grad_pad(2 * (size_t)dk + 2 * (size_t)dv);                          /* scratch */
}

size_t cpu_grad_linear_sequential_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return rule_work(T, dk, dv, p);
}
size_t cpu_grad_delta_sequential_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return rule_work(T, dk, dv, p);
}

typedef struct chunk_store {
    double *Sst; /* [C][dk * dv] ST_{t-1} */
    double *N;   /* [C][dk] n_t (linear) */
    double *E;   /* [C][dv] e_t */
} chunk_store;

/* Tokens [ts, te) forward from (ST, n), which are advanced; per-token states into cs. */
static void forward_chunk(const cpu_grad_head *h, int linear, int ts, int te, double *ST, double *n,
                          const chunk_store *cs) {
    const int dk = h->dk, dv = h->dv;
    const size_t sS = (size_t)dk * dv;
    for (int t = ts; t < te; t++) {
        const int i = t - ts;
        const double *v = h->v + (size_t)t * dv;
        double *e = cs->E + (size_t)i * dv;
        memcpy(cs->Sst + (size_t)i * sS, ST, sizeof(double) * sS);
        if (linear) {
            const double *kf = h->kf + (size_t)t * dk;
            memcpy(e, v, sizeof(double) * dv);
            cpu_grad_ger(ST, 1.0, kf, e, dk, dv);
            double *nt = cs->N + (size_t)i * dk;
            for (int j = 0; j < dk; j++) nt[j] = n[j] += kf[j];
        } else {
            const double *k = h->kh + (size_t)t * dk;
            const double g = h->g ? h->g[t] : 1.0, beta = h->beta ? h->beta[t] : 1.0;
            cpu_grad_vecmat(k, ST, dk, dv, e); /* e = v - g ST^T k^ */
            for (int j = 0; j < dv; j++) e[j] = v[j] - g * e[j];
            for (size_t j = 0; j < sS; j++) ST[j] *= g;
            cpu_grad_ger(ST, beta, k, e, dk, dv);
        }
    }
}

static void rule_backward(const cpu_grad_head *h, const cpu_grad_params *p, int linear, double *work) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t ck = checkpoint_size(dk, dv), sS = (size_t)dk * dv;
    double *ckpt = work;
    double *ST = ckpt + cpu_grad_pad((size_t)nc * ck), *n = ST + sS;
    double *dST = ST + cpu_grad_pad(ck), *dn = dST + sS;
    chunk_store cs;
    cs.Sst = dST + cpu_grad_pad(ck);
    cs.N = cs.Sst + cpu_grad_pad((size_t)C * sS);
    cs.E = cs.N + (size_t)C * dk;
    double *tmp = cs.N + cpu_grad_pad((size_t)C * ((size_t)dk + dv)), *dw = tmp + dk, *dnum = dw + dk;
    double *de = dnum + dv;

    memcpy(ST, h->ST0, sizeof(double) * sS);
    if (linear) memcpy(n, h->n0, sizeof(double) * dk);
    else memset(n, 0, sizeof(double) * dk);
    for (int c = 0; c < nc; c++) {
        memcpy(ckpt + (size_t)c * ck, ST, sizeof(double) * ck);
        forward_chunk(h, linear, c * C, c + 1 < nc ? (c + 1) * C : T, ST, n, &cs);
    }

    if (h->dST_end) memcpy(dST, h->dST_end, sizeof(double) * sS);
    else memset(dST, 0, sizeof(double) * sS);
    if (linear && h->dn_end) memcpy(dn, h->dn_end, sizeof(double) * dk);
    else memset(dn, 0, sizeof(double) * dk);

    for (int c = nc - 1; c >= 0; c--) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T;
        if (c != nc - 1) { /* the last chunk is current after the forward pass */
            memcpy(ST, ckpt + (size_t)c * ck, sizeof(double) * ck);
            forward_chunk(h, linear, ts, te, ST, n, &cs);
        }
        for (int t = te - 1; t >= ts; t--) {
            const int i = t - ts;
            const double *q = h->q + (size_t)t * dk, *dO = h->dO + (size_t)t * dv, *e = cs.E + (size_t)i * dv;
            const double *S1 = t == te - 1 ? ST : cs.Sst + (size_t)(i + 1) * sS; /* ST_t */
            const double *S0 = cs.Sst + (size_t)i * sS;                          /* ST_{t-1} */
            double *dq = h->dq + (size_t)t * dk, *dvt = h->dval + (size_t)t * dv;

            /* Output. */
            if (linear) {
                const double *nt = cs.N + (size_t)i * dk;
                const double D = cpu_grad_dot(q, nt, dk) + p->eps;
                for (int j = 0; j < dv; j++) dnum[j] = dO[j] / D;
                cpu_grad_vecmat(q, S1, dk, dv, de); /* numerator (de is free here) */
                const double dr = -cpu_grad_dot(dO, de, dv) / (D * D);
                for (int j = 0; j < dk; j++) dq[j] += dr * nt[j], dn[j] += dr * q[j];
            } else {
                memcpy(dnum, dO, sizeof(double) * dv);
            }
            cpu_grad_ger(dST, 1.0, q, dnum, dk, dv);
            cpu_grad_matvec(S1, dnum, dk, dv, tmp);
            for (int j = 0; j < dk; j++) dq[j] += tmp[j];

            /* Write and carry. */
            cpu_grad_matvec(dST, e, dk, dv, dw); /* dw = dS^T e */
            if (linear) {
                const double *kf = h->kf + (size_t)t * dk;
                double *dkf = h->dkf + (size_t)t * dk;
                cpu_grad_vecmat(kf, dST, dk, dv, de);
                for (int j = 0; j < dk; j++) dkf[j] += dw[j] + dn[j];
                for (int j = 0; j < dv; j++) dvt[j] += de[j];
                /* dST carries unchanged (g = 1, no residual). */
            } else {
                const double *k = h->kh + (size_t)t * dk;
                const double g = h->g ? h->g[t] : 1.0, beta = h->beta ? h->beta[t] : 1.0;
                double *dkh = h->dkh + (size_t)t * dk;
                cpu_grad_vecmat(k, dST, dk, dv, de);
                for (int j = 0; j < dv; j++) de[j] *= beta, dvt[j] += de[j];
                if (h->dbeta) h->dbeta[t] += cpu_grad_dot(k, dw, dk);
                cpu_grad_ger(dST, -1.0, k, de, dk, dv); /* M = dST - k^ de^T */
                if (h->dg) h->dg[t] += cpu_grad_dot(S0, dST, (int)sS);
                cpu_grad_matvec(S0, de, dk, dv, tmp);
                for (int j = 0; j < dk; j++) dkh[j] += beta * dw[j] - g * tmp[j];
                for (size_t j = 0; j < sS; j++) dST[j] *= g;
            }
        }
    }
    memcpy(h->dST0, dST, sizeof(double) * sS);
    if (h->dn0) memcpy(h->dn0, dn, sizeof(double) * dk);
}

void cpu_grad_linear_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    rule_backward(h, p, 1, work);
}

void cpu_grad_delta_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    rule_backward(h, p, 0, work);
}

/* ---- chunked (VLA-MATH 2.3's form): the S part of each chunk as matrix products ----
 * Checkpoints ST at every chunk start ((T / C) dk dv doubles); walking the chunks backwards, each
 * is recomputed from its checkpoint and differentiated by cpu_grad_chunk_vjp. Linear attention's
 * normaliser needs n_t at every token: the prefix sums N [T, dk] are kept whole (O(T dk)). */

static size_t chunked_work(int T, int dk, int dv, const cpu_grad_params *p, int linear) {
    const size_t C = (size_t)p->chunk, sS = (size_t)dk * dv;
    return cpu_grad_pad((size_t)n_chunks(T, p->chunk) * sS) + 2 * cpu_grad_pad(sS) + /* checkpoints, ST, dST */
           (linear ? cpu_grad_pad((size_t)T * dk) + cpu_grad_pad(C * dv) + cpu_grad_pad(C) : 0) + /* N, dnum, dr */
           2 * cpu_grad_pad(C * dk) +                                                             /* W, dW */
           cpu_grad_pad(C * dv) + cpu_grad_pad((size_t)dk) + cpu_grad_chunk_work(p->chunk, dk, dv);
}

size_t cpu_grad_linear_chunked_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return chunked_work(T, dk, dv, p, 1);
}
size_t cpu_grad_delta_chunked_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return chunked_work(T, dk, dv, p, 0);
}

/* The chunk [ts, ts + c): W = k~ (linear) or beta k^ (delta) into Wb. */
static cpu_grad_chunk chunk_of(const cpu_grad_head *h, int linear, int ts, int c, double *Wb) {
    const int dk = h->dk;
    cpu_grad_chunk ch = {.c = c, .dk = dk, .dv = h->dv, .residual = !linear, .V = h->v + (size_t)ts * h->dv,
                         .Q = h->q + (size_t)ts * dk};
    if (linear) {
        ch.W = h->kf + (size_t)ts * dk;
    } else {
        ch.Kr = h->kh + (size_t)ts * dk;
        for (int t = 0; t < c; t++) {
            const double beta = h->beta ? h->beta[ts + t] : 1.0;
            for (int j = 0; j < dk; j++) Wb[(size_t)t * dk + j] = beta * ch.Kr[(size_t)t * dk + j];
        }
        ch.W = Wb;
        ch.g = h->g ? h->g + ts : NULL;
    }
    return ch;
}

static void rule_chunked(const cpu_grad_head *h, const cpu_grad_params *p, int linear, double *work) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t sS = (size_t)dk * dv;
    double *ckpt = work, *ST = ckpt + cpu_grad_pad((size_t)nc * sS), *dST = ST + cpu_grad_pad(sS);
    double *w = dST + cpu_grad_pad(sS), *N = NULL, *dnum = NULL, *dr = NULL;
    if (linear) {
        N = w, w += cpu_grad_pad((size_t)T * dk);
        dnum = w, w += cpu_grad_pad((size_t)C * dv);
        dr = w, w += cpu_grad_pad((size_t)C);
    }
    double *Wb = w, *dW = Wb + cpu_grad_pad((size_t)C * dk), *num = dW + cpu_grad_pad((size_t)C * dk);
    double *dn = num + cpu_grad_pad((size_t)C * dv), *cw = dn + cpu_grad_pad((size_t)dk);

    /* Forward pass: checkpoints. */
    memcpy(ST, h->ST0, sizeof(double) * sS);
    for (int c = 0; c < nc; c++) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T;
        memcpy(ckpt + (size_t)c * sS, ST, sizeof(double) * sS);
        const cpu_grad_chunk ch = chunk_of(h, linear, ts, te - ts, Wb);
        cpu_grad_chunk_forward(&ch, ST, NULL, ST, cw);
    }
    if (linear) { /* n_t = n_0 + sum_{s<=t} k~_s */
        for (int t = 0; t < T; t++)
            for (int j = 0; j < dk; j++)
                N[(size_t)t * dk + j] = (t ? N[(size_t)(t - 1) * dk + j] : h->n0[j]) + h->kf[(size_t)t * dk + j];
    }

    if (h->dST_end) memcpy(dST, h->dST_end, sizeof(double) * sS);
    else memset(dST, 0, sizeof(double) * sS);
    if (linear && h->dn_end) memcpy(dn, h->dn_end, sizeof(double) * dk);
    else memset(dn, 0, sizeof(double) * dk);

    for (int c = nc - 1; c >= 0; c--) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T, n = te - ts;
        const double *ST0 = ckpt + (size_t)c * sS;
        const cpu_grad_chunk ch = chunk_of(h, linear, ts, n, Wb);
        cpu_grad_chunk_forward(&ch, ST0, linear ? num : NULL, NULL, cw);
        const double *dO = h->dO + (size_t)ts * dv;
        if (linear) { /* o = num / (q~ . n + eps): dnum = dO / den, dr = -(dO . num) / den^2 */
            for (int i = 0; i < n; i++) {
                const double *q = h->q + (size_t)(ts + i) * dk, *nt = N + (size_t)(ts + i) * dk;
                const double den = cpu_grad_dot(q, nt, dk) + p->eps;
                dr[i] = -cpu_grad_dot(dO + (size_t)i * dv, num + (size_t)i * dv, dv) / (den * den);
                for (int j = 0; j < dv; j++) dnum[(size_t)i * dv + j] = dO[(size_t)i * dv + j] / den;
                double *dq = h->dq + (size_t)(ts + i) * dk;
                for (int j = 0; j < dk; j++) dq[j] += dr[i] * nt[j];
            }
            for (int i = n - 1; i >= 0; i--) { /* n_t = n_{t-1} + k~_t: dk~_t += dn of n_t */
                const double *q = h->q + (size_t)(ts + i) * dk;
                double *dkf = h->dkf + (size_t)(ts + i) * dk;
                for (int j = 0; j < dk; j++) dn[j] += dr[i] * q[j], dkf[j] += dn[j];
            }
            dO = dnum;
        }
        memset(dW, 0, sizeof(double) * (size_t)n * dk);
        cpu_grad_chunk_vjp(&ch, ST0, dO, dST, h->dq + (size_t)ts * dk, linear ? NULL : h->dkh + (size_t)ts * dk,
                           dW, h->dval + (size_t)ts * dv, h->dg ? h->dg + ts : NULL, cw);
        for (int i = 0; i < n; i++) {
            const double *dw = dW + (size_t)i * dk;
            if (linear) {
                double *dkf = h->dkf + (size_t)(ts + i) * dk;
                for (int j = 0; j < dk; j++) dkf[j] += dw[j];
            } else { /* w = beta k^ */
                const double *k = h->kh + (size_t)(ts + i) * dk, beta = h->beta ? h->beta[ts + i] : 1.0;
                double *dkh = h->dkh + (size_t)(ts + i) * dk;
                if (h->dbeta) h->dbeta[ts + i] += cpu_grad_dot(k, dw, dk);
                for (int j = 0; j < dk; j++) dkh[j] += beta * dw[j];
            }
        }
    }
    memcpy(h->dST0, dST, sizeof(double) * sS);
    if (h->dn0) memcpy(h->dn0, dn, sizeof(double) * dk);
}

void cpu_grad_linear_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    rule_chunked(h, p, 1, work);
}

void cpu_grad_delta_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    rule_chunked(h, p, 0, work);
}
