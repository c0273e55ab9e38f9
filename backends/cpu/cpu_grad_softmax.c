/* The causal softmax backward (VLA-MATH 5), flash-attention style, in double: the probabilities
 * are recomputed tile by tile from per-row statistics and never stored as a T x T matrix.
 *   x_ts = scale q_t . k_s (s <= t),  P_ts = exp(x_ts - lse_t),  o_t = sum_s P_ts v_s
 *   D_t = dO_t . o_t,  dx_ts = P_ts (dO_t . v_s - D_t)
 *   dq_t = scale sum_{s<=t} dx_ts k_s,  dk_s = scale sum_{t>=s} dx_ts q_t,  dv_s = sum_{t>=s} P_ts dO_t
 * Two passes, each parallel without races when heads are few:
 *   over query tiles: lse_t and o_t (online softmax), D_t, then dq_t (every key tile again);
 *   over key tiles: dk_s and dv_s from every query tile at or after it (lse and D are known).
 * Every product is a QB x KB x d matrix product. Masked entries (s > t) are set to 0, never
 * multiplied by 0, so a NaN in a later key or value cannot reach an earlier row's gradients.
 * Memory per head: lse and D (2 T) and, per thread, the tiles. */
#include "cpu_grad.h"
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define QB 64 /* query rows per tile */
#define KB 64 /* key rows per tile */

/* Per thread: S, P and dP tiles [QB, KB]; acc [QB, dv]; m, l [QB]. */
static size_t per_thread(int dv) { return 3 * cpu_grad_pad((size_t)QB * KB) + cpu_grad_pad((size_t)QB * dv) + 2 * QB; }

size_t cpu_grad_softmax_fused_work(int T, int dk, int dv, const cpu_grad_params *p) {
    (void)dk;
    const int nt = p->inner_threads > 0 ? p->inner_threads : 1;
    return 2 * cpu_grad_pad((size_t)T) + per_thread(dv) * (size_t)nt;
}

typedef struct tiles {
    double *S, *P, *dP, *acc, *m, *l;
} tiles;

static tiles carve(int dv, double *w) {
    tiles t;
    t.S = w, t.P = t.S + cpu_grad_pad((size_t)QB * KB), t.dP = t.P + cpu_grad_pad((size_t)QB * KB);
    t.acc = t.dP + cpu_grad_pad((size_t)QB * KB), t.m = t.acc + cpu_grad_pad((size_t)QB * dv), t.l = t.m + QB;
    return t;
}

/* Visible keys of query row i in the key tile starting at j0 with nk keys. */
static int visible(int i, int j0, int nk) {
    const int last = i - j0 + 1;
    return last < 0 ? 0 : last > nk ? nk : last;
}

/* P[r][c] = exp(S[r][c] - lse_i) for visible keys, exactly 0 for the others; and, when dP is
 * given, dP[r][c] <- P (dP - D_i) (the score gradient, before the scale), 0 where masked. */
static void probs(const double *S, double *P, double *dP, const double *lse, const double *Dt, int i0, int nq,
                  int j0, int nk) {
    for (int r = 0; r < nq; r++) {
        const int vis = visible(i0 + r, j0, nk);
        for (int c = 0; c < nk; c++) {
            const size_t e = (size_t)r * KB + c;
            P[e] = c < vis ? exp(S[e] - lse[i0 + r]) : 0.0;
            if (dP) dP[e] = c < vis ? P[e] * (dP[e] - Dt[i0 + r]) : 0.0;
        }
    }
}

/* Query tile [i0, i0 + nq): lse, D and dq. */
static void query_tile(const cpu_grad_head *h, double scale, int i0, int nq, double *lse, double *Dt, tiles w) {
    const int dk = h->dk, dv = h->dv, i1 = i0 + nq;
    const double *Q = h->q + (size_t)i0 * dk, *dO = h->dO + (size_t)i0 * dv;
    for (int r = 0; r < nq; r++) w.m[r] = -INFINITY, w.l[r] = 0.0;
    memset(w.acc, 0, sizeof(double) * (size_t)nq * dv);
    /* Sweep 1: online softmax for lse and o. */
    for (int j0 = 0; j0 < i1; j0 += KB) {
        const int nk = j0 + KB < i1 ? KB : i1 - j0;
        cpu_gemm_d(0, 1, nq, nk, dk, scale, Q, dk, h->kf + (size_t)j0 * dk, dk, 0.0, w.S, KB);
        for (int r = 0; r < nq; r++) {
            const int vis = visible(i0 + r, j0, nk);
            double *sr = w.S + (size_t)r * KB, mx = w.m[r];
            for (int c = 0; c < vis; c++)
                if (sr[c] > mx || isnan(sr[c])) mx = isnan(mx) ? mx : sr[c]; /* a NaN score propagates */
            const double corr = vis ? exp(w.m[r] - mx) : 1.0;
            double sum = 0.0;
            for (int c = 0; c < nk; c++) {
                sr[c] = c < vis ? exp(sr[c] - mx) : 0.0;
                sum += sr[c];
            }
            if (vis) w.l[r] = w.l[r] * corr + sum, w.m[r] = mx;
            double *ar = w.acc + (size_t)r * dv;
            for (int d = 0; d < dv; d++) ar[d] *= corr;
            /* Rows that do not see the whole tile sum their visible keys only: a later NaN value
             * must not enter as 0 * NaN. */
            if (vis == nk) continue;
            for (int c = 0; c < vis; c++) {
                const double *vc = h->v + (size_t)(j0 + c) * dv;
                for (int d = 0; d < dv; d++) ar[d] += sr[c] * vc[d];
            }
        }
        /* The rows that see the whole tile (a suffix: i >= j0 + nk - 1) take it as one product. */
        const int rf = j0 + nk - 1 - i0 > 0 ? j0 + nk - 1 - i0 : 0;
        if (rf < nq)
            cpu_gemm_d(0, 0, nq - rf, dv, nk, 1.0, w.S + (size_t)rf * KB, KB, h->v + (size_t)j0 * dv, dv, 1.0,
                       w.acc + (size_t)rf * dv, dv);
    }
    for (int r = 0; r < nq; r++) {
        const int i = i0 + r;
        lse[i] = w.m[r] + log(w.l[r]);
        const double inv = 1.0 / w.l[r];
        Dt[i] = inv * cpu_grad_dot(dO + (size_t)r * dv, w.acc + (size_t)r * dv, dv);
    }
    /* Sweep 2: dq = scale sum_s dx_ts k_s. */
    for (int j0 = 0; j0 < i1; j0 += KB) {
        const int nk = j0 + KB < i1 ? KB : i1 - j0;
        const double *K = h->kf + (size_t)j0 * dk, *V = h->v + (size_t)j0 * dv;
        cpu_gemm_d(0, 1, nq, nk, dk, scale, Q, dk, K, dk, 0.0, w.S, KB);
        cpu_gemm_d(0, 1, nq, nk, dv, 1.0, dO, dv, V, dv, 0.0, w.dP, KB);
        probs(w.S, w.P, w.dP, lse, Dt, i0, nq, j0, nk);
        if (j0 + nk <= i0 + 1) {
            cpu_gemm_d(0, 0, nq, dk, nk, scale, w.dP, KB, K, dk, 1.0, h->dq + (size_t)i0 * dk, dk);
        } else { /* a tile with masked keys: visible pairs only */
            for (int r = 0; r < nq; r++) {
                double *dq = h->dq + (size_t)(i0 + r) * dk;
                for (int c = 0; c < visible(i0 + r, j0, nk); c++) {
                    const double x = scale * w.dP[(size_t)r * KB + c], *kc = K + (size_t)c * dk;
                    for (int d = 0; d < dk; d++) dq[d] += x * kc[d];
                }
            }
        }
    }
}

/* Key tile [j0, j0 + nk): dk and dv from every query tile at or after it. */
static void key_tile(const cpu_grad_head *h, double scale, int j0, int nk, const double *lse, const double *Dt,
                     tiles w) {
    const int dk = h->dk, dv = h->dv, T = h->T;
    const double *K = h->kf + (size_t)j0 * dk, *V = h->v + (size_t)j0 * dv;
    for (int i0 = j0 / QB * QB; i0 < T; i0 += QB) {
        const int nq = i0 + QB < T ? QB : T - i0;
        if (i0 + nq <= j0) continue; /* every row before the tile */
        const double *Q = h->q + (size_t)i0 * dk, *dO = h->dO + (size_t)i0 * dv;
        cpu_gemm_d(0, 1, nq, nk, dk, scale, Q, dk, K, dk, 0.0, w.S, KB);
        cpu_gemm_d(0, 1, nq, nk, dv, 1.0, dO, dv, V, dv, 0.0, w.dP, KB);
        probs(w.S, w.P, w.dP, lse, Dt, i0, nq, j0, nk);
        if (j0 + nk <= i0 + 1) {
            cpu_gemm_d(1, 0, nk, dk, nq, scale, w.dP, KB, Q, dk, 1.0, h->dkf + (size_t)j0 * dk, dk);
            cpu_gemm_d(1, 0, nk, dv, nq, 1.0, w.P, KB, dO, dv, 1.0, h->dval + (size_t)j0 * dv, dv);
        } else { /* a tile with masked pairs: visible pairs only (an earlier row's NaN stays out) */
            for (int r = 0; r < nq; r++) {
                const double *qr = Q + (size_t)r * dk, *gr = dO + (size_t)r * dv;
                for (int c = 0; c < visible(i0 + r, j0, nk); c++) {
                    const double x = scale * w.dP[(size_t)r * KB + c], pr = w.P[(size_t)r * KB + c];
                    double *dkc = h->dkf + (size_t)(j0 + c) * dk, *dvc = h->dval + (size_t)(j0 + c) * dv;
                    for (int d = 0; d < dk; d++) dkc[d] += x * qr[d];
                    for (int d = 0; d < dv; d++) dvc[d] += pr * gr[d];
                }
            }
        }
    }
}

void cpu_grad_softmax_fused(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    const int T = h->T, nt = p->inner_threads > 0 ? p->inner_threads : 1;
    const int ntiles = (T + QB - 1) / QB, nktiles = (T + KB - 1) / KB;
    double *lse = work, *Dt = lse + cpu_grad_pad((size_t)T), *tw = Dt + cpu_grad_pad((size_t)T);
    const size_t per = per_thread(h->dv);
    /* Later query tiles cost more, earlier key tiles more: hand them out dynamically. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && ntiles > 1)
    for (int it = 0; it < ntiles; it++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        const int i0 = it * QB;
        query_tile(h, p->scale, i0, i0 + QB < T ? QB : T - i0, lse, Dt, carve(h->dv, tw + (size_t)me * per));
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && nktiles > 1)
    for (int jt = 0; jt < nktiles; jt++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        const int j0 = jt * KB;
        key_tile(h, p->scale, j0, j0 + KB < T ? KB : T - j0, lse, Dt, carve(h->dv, tw + (size_t)me * per));
    }
}
