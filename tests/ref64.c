/* Float64 reference, straight from VLA-MATH sections 1 (forward) and 5 (gradients). In the
 * maths S is dv x dk (S k is a value); the library stores S transposed, [dk, dv]. Here `Sm`
 * holds the maths' S row-major (Sm[j*dk + i] = S[j][i]) and is transposed on the way in and out.
 *
 * One step function per mechanism computes a token's forward and keeps its intermediate values;
 * the forward is a loop of steps, and the backward runs the loop once keeping every state, then
 * walks the tokens backwards, recomputing each step's intermediates from the state before it.
 * Backward steps accumulate (+=) into the state gradients gS, gA, gn, which on entry to step t
 * hold dL/dS_t, dL/dA_t, dL/dn_t and on exit dL/dS_{t-1}, ... */
#include "ref64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double phi_apply(int fmap, double x) {
    if (fmap == VLA_FMAP_ELU1) return x > 0 ? x + 1.0 : exp(x); /* elu(x) + 1 */
    return x;
}

/* d phi / dx; VLA-MATH 5: exp(x) at x <= 0. */
static double phi_deriv(int fmap, double x) {
    if (fmap == VLA_FMAP_ELU1) return x > 0 ? 1.0 : exp(x);
    return 1.0;
}

static double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* x / max(||x||, eps), in place; returns ||x|| (the backward needs to know whether the floor bound). */
static double normalize(double *x, int n, double eps) {
    double nrm = sqrt(dot(x, x, n));
    double den = nrm > eps ? nrm : eps;
    for (int i = 0; i < n; i++) x[i] /= den;
    return nrm;
}

/* Backward of y = x / max(||x||, eps) given y, ||x|| and gy: adds gx to out.
 * Where ||x|| > eps: gx = (gy - y (y . gy)) / ||x||; where the floor binds it is a constant and
 * gx = gy / eps. */
static void normalize_back(const double *y, double nrm, double eps, const double *gy, double *out, int n) {
    if (nrm > eps) {
        const double yg = dot(y, gy, n);
        for (int i = 0; i < n; i++) out[i] += (gy[i] - y[i] * yg) / nrm;
    } else {
        for (int i = 0; i < n; i++) out[i] += gy[i] / eps;
    }
}

/* Index of element (b, t, h, i) of a [B, T, H, D] tensor. */
static size_t idx4(int b, int t, int h, int i, int T, int H, int D) {
    return (((size_t)b * T + t) * H + h) * D + i;
}

static void *xcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }

/* ---- parameters ---- */

typedef struct prm {
    int mech, fmap, kmap, refresh, normalize; /* fmap on q (and k), kmap on k */
    double eps, lambda0, rho, su, scale;
    int64_t t0;
} prm;

static void prm_from(const vla_attn_desc *d, int dk, int64_t t0, prm *p) {
    p->mech = d->mechanism;
    p->fmap = d->mechanism == VLA_MECH_LINEAR ? VLA_FMAP_ELU1 : (int)d->feature_map; /* linear: its definition */
    p->kmap = d->mechanism == VLA_MECH_DELTA_PAPER ? VLA_FMAP_NONE : p->fmap;      /* delta-paper: phi on q only */
    p->refresh = d->refresh;
    p->normalize = d->normalize_output;
    p->eps = d->eps;
    p->lambda0 = d->lambda0;
    p->rho = d->refresh_size;
    p->su = d->u_scale != 0 ? d->u_scale : 1.0 / sqrt((double)dk);
    p->scale = d->scale != 0 ? d->scale : 1.0 / sqrt((double)dk);
    p->t0 = t0;
}

/* ---- per-token work space: the intermediates of one step ---- */

typedef struct work {
    double *qf, *kf, *kh, *ut, *uh, *z, *ap, *a; /* dk: phi(q), phi(k), k^, u, normalize(u), A u, A k^, a */
    double *e, *Sk, *ov;                         /* dv: v - S k^, S k^, output */
    double nk, nu, s, den, na, qn, dn;           /* ||k~||, ||u||, 1 + u.z, its floor, ||A k^||, q~.n, its floor */
    /* backward scratch */
    double *gqf, *gkf, *gkh, *gu, *gz, *gap, *ga, *gv_, *ge, *w; /* dk, ... , dv */
    double *gg;                                                  /* dv: delta-paper's dg row */
} work;

static int work_alloc(work *w, int dk, int dv) {
    memset(w, 0, sizeof *w);
    const int d = dk > dv ? dk : dv;
    double **p[] = {&w->qf, &w->kf, &w->kh, &w->ut, &w->uh, &w->z,   &w->ap,  &w->a,  &w->e,   &w->Sk, &w->ov,
                    &w->gqf, &w->gkf, &w->gkh, &w->gu, &w->gz, &w->gap, &w->ga, &w->gv_, &w->ge, &w->w, &w->gg};
    int ok = 1;
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) ok &= (*p[i] = xcalloc((size_t)d, sizeof(double))) != NULL;
    return ok;
}

static void work_free(work *w) {
    free(w->qf), free(w->kf), free(w->kh), free(w->ut), free(w->uh), free(w->z), free(w->ap), free(w->a);
    free(w->e), free(w->Sk), free(w->ov), free(w->gqf), free(w->gkf), free(w->gkh), free(w->gu), free(w->gz);
    free(w->gap), free(w->ga), free(w->gv_), free(w->ge), free(w->w), free(w->gg);
}

/* ---- forward steps (VLA-MATH 1); rows q, k, u [dk], v [dv]; the output goes to w->ov ---- */

/* Linear: S += v phi(k)^T, n += phi(k), o = S phi(q) / (phi(q) . n + eps). w->den = the denominator. */
static void linear_step(const prm *p, int dk, int dv, const double *q, const double *k, const double *v, double *Sm,
                        double *nv, work *w) {
    for (int i = 0; i < dk; i++) {
        w->qf[i] = phi_apply(p->fmap, q[i]);
        w->kf[i] = phi_apply(p->fmap, k[i]);
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) Sm[j * dk + i] += v[j] * w->kf[i];
    for (int i = 0; i < dk; i++) nv[i] += w->kf[i];
    w->den = dot(w->qf, nv, dk) + p->eps;
    for (int j = 0; j < dv; j++) w->ov[j] = dot(Sm + (size_t)j * dk, w->qf, dk) / w->den;
}

/* DeltaNet: k^ = normalize(phi(k)), q~ = phi(q); S = g S (I - beta k^ k^T) + beta v k^T; o = S q~.
 * w->Sk = S_{t-1} k^. */
static void delta_step(const prm *p, int dk, int dv, const double *q, const double *k, const double *v, double bt,
                       double gt, double *Sm, work *w) {
    for (int i = 0; i < dk; i++) {
        w->qf[i] = phi_apply(p->fmap, q[i]);
        w->kh[i] = phi_apply(p->fmap, k[i]);
    }
    w->nk = normalize(w->kh, dk, p->eps);
    for (int j = 0; j < dv; j++) w->Sk[j] = dot(Sm + (size_t)j * dk, w->kh, dk);
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++)
            Sm[j * dk + i] = gt * (Sm[j * dk + i] - bt * w->Sk[j] * w->kh[i]) + bt * v[j] * w->kh[i];
    for (int j = 0; j < dv; j++) w->ov[j] = dot(Sm + (size_t)j * dk, w->qf, dk);
}

/* The paper's DeltaNet (VLA-MATH 1, last subsection): q~ = phi(q) (q only), k^ = normalize(k),
 * e = v - S k^, S = diag(g) S + e k^T, o = S q~. g [dv] or NULL (1). w->Sk = S_{t-1} k^, w->e = e. */
static void delta_paper_step(const prm *p, int dk, int dv, const double *q, const double *k, const double *v,
                             const double *g, double *Sm, work *w) {
    for (int i = 0; i < dk; i++) {
        w->qf[i] = phi_apply(p->fmap, q[i]);
        w->kh[i] = k[i];
    }
    w->nk = normalize(w->kh, dk, p->eps);
    for (int j = 0; j < dv; j++) {
        w->Sk[j] = dot(Sm + (size_t)j * dk, w->kh, dk);
        w->e[j] = v[j] - w->Sk[j];
    }
    for (int j = 0; j < dv; j++) {
        const double gj = g ? g[j] : 1.0;
        for (int i = 0; i < dk; i++) Sm[j * dk + i] = gj * Sm[j * dk + i] + w->e[j] * w->kh[i];
    }
    for (int j = 0; j < dv; j++) w->ov[j] = dot(Sm + (size_t)j * dk, w->qf, dk);
}

/* VLA at absolute position pos; u NULL: u = s_u k^. */
static void vla_step(const prm *p, int dk, int dv, int64_t pos, const double *q, const double *k, const double *v,
                     const double *u, double *Sm, double *Am, double *nv, work *w) {
    const double eps = p->eps;
    for (int i = 0; i < dk; i++) {
        w->qf[i] = phi_apply(p->fmap, q[i]);
        w->kf[i] = phi_apply(p->fmap, k[i]);
        w->kh[i] = w->kf[i];
    }
    w->nk = normalize(w->kh, dk, eps);
    if (u) {
        memcpy(w->uh, u, (size_t)dk * sizeof *u);
        w->nu = normalize(w->uh, dk, eps);
        for (int i = 0; i < dk; i++) w->ut[i] = p->su * w->uh[i];
    } else {
        for (int i = 0; i < dk; i++) w->ut[i] = p->su * w->kh[i];
    }
    /* z = A u; A -= z z^T / max(1 + u.z, eps) */
    for (int i = 0; i < dk; i++) w->z[i] = dot(Am + (size_t)i * dk, w->ut, dk);
    w->s = 1.0 + dot(w->ut, w->z, dk);
    w->den = w->s > eps ? w->s : (w->s != w->s ? w->s : eps); /* max(., eps), NaN stays NaN */
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dk; j++) Am[i * dk + j] -= w->z[i] * w->z[j] / w->den;
    if (p->refresh > 0 && (pos + 1) % p->refresh == 0)
        for (int i = 0; i < dk; i++) Am[i * dk + i] += p->rho;
    /* a = normalize(A k^) */
    for (int i = 0; i < dk; i++) w->ap[i] = dot(Am + (size_t)i * dk, w->kh, dk);
    memcpy(w->a, w->ap, (size_t)dk * sizeof *w->a);
    w->na = normalize(w->a, dk, eps);
    /* e = v - S k^;  S += e a^T */
    for (int j = 0; j < dv; j++) w->e[j] = v[j] - dot(Sm + (size_t)j * dk, w->kh, dk);
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) Sm[j * dk + i] += w->e[j] * w->a[i];
    if (p->normalize) {
        for (int i = 0; i < dk; i++) nv[i] += w->kf[i];
        w->qn = dot(w->qf, nv, dk);
        w->dn = w->qn > eps ? w->qn : (w->qn != w->qn ? w->qn : eps);
        for (int j = 0; j < dv; j++) w->ov[j] = dot(Sm + (size_t)j * dk, w->qf, dk) / w->dn;
    } else {
        for (int j = 0; j < dv; j++) w->ov[j] = dot(Sm + (size_t)j * dk, w->qf, dk);
    }
}

/* ---- softmax ---- */

/* Forward of one (b, h); with gr, the backward instead (the probabilities recomputed per row). */
static void softmax_head(const prm *p, int b, int h, int T, int H, int dk, int dv, const double *q, const double *k,
                         const double *v, double *o, const ref64_grads *gr) {
    double *logit = malloc((size_t)T * sizeof *logit), *w = malloc((size_t)T * sizeof *w);
    double *ot = malloc((size_t)dv * sizeof *ot);
    for (int t = 0; t < T; t++) {
        double m = -INFINITY;
        for (int s = 0; s <= t; s++) {
            logit[s] = dot(q + idx4(b, t, h, 0, T, H, dk), k + idx4(b, s, h, 0, T, H, dk), dk) * p->scale;
            if (logit[s] > m || isnan(logit[s])) m = logit[s];
        }
        double z = 0;
        for (int s = 0; s <= t; s++) z += (w[s] = exp(logit[s] - m));
        for (int j = 0; j < dv; j++) {
            double acc = 0;
            for (int s = 0; s <= t; s++) acc += w[s] * v[idx4(b, s, h, j, T, H, dv)];
            ot[j] = acc / z;
        }
        if (o) memcpy(o + idx4(b, t, h, 0, T, H, dv), ot, (size_t)dv * sizeof *ot);
        if (!gr) continue;
        /* o_t = sum_s p_s v_s, p = softmax(l): dl_s = p_s (dO_t . v_s - dO_t . o_t);
         * dq_t += scale sum_s dl_s k_s, dk_s += scale dl_s q_t, dv_s += p_s dO_t. */
        const double *dO = gr->dO + idx4(b, t, h, 0, T, H, dv);
        const double c = dot(dO, ot, dv);
        for (int s = 0; s <= t; s++) {
            const double ps = w[s] / z;
            const double dl = ps * (dot(dO, v + idx4(b, s, h, 0, T, H, dv), dv) - c) * p->scale;
            if (gr->dq)
                for (int i = 0; i < dk; i++) gr->dq[idx4(b, t, h, i, T, H, dk)] += dl * k[idx4(b, s, h, i, T, H, dk)];
            if (gr->dk)
                for (int i = 0; i < dk; i++) gr->dk[idx4(b, s, h, i, T, H, dk)] += dl * q[idx4(b, t, h, i, T, H, dk)];
            if (gr->dv)
                for (int j = 0; j < dv; j++) gr->dv[idx4(b, s, h, j, T, H, dv)] += ps * dO[j];
        }
    }
    free(logit), free(w), free(ot);
}

/* ---- forward ---- */

/* Initial states of head bh in the maths' layout. */
static void init_states(const prm *p, size_t bh, int dk, int dv, const double *S0, const double *A0, const double *n0,
                        double *Sm, double *Am, double *nv) {
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) Sm[j * dk + i] = S0 ? S0[(bh * dk + i) * dv + j] : 0.0;
    if (Am)
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dk; j++) Am[i * dk + j] = A0 ? A0[(bh * dk + i) * dk + j] : (i == j ? 1.0 / p->lambda0 : 0.0);
    for (int i = 0; i < dk; i++) nv[i] = n0 ? n0[bh * dk + i] : 0.0;
}

static int check_args(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, const void *q, const void *k,
                      const void *v) {
    return d && q && k && v && B >= 1 && T >= 1 && H >= 1 && dk >= 1 && dv >= 1 ? 0 : -1;
}

/* One step of mechanism p->mech for token t of head (b, h). */
static void step(const prm *p, int b, int t, int h, int T, int H, int dk, int dv, const double *q, const double *k,
                 const double *v, const double *u, const double *beta, const double *g, double *Sm, double *Am,
                 double *nv, work *w) {
    const double *qt = q + idx4(b, t, h, 0, T, H, dk), *kt = k + idx4(b, t, h, 0, T, H, dk);
    const double *vt = v + idx4(b, t, h, 0, T, H, dv);
    if (p->mech == VLA_MECH_LINEAR) {
        linear_step(p, dk, dv, qt, kt, vt, Sm, nv, w);
    } else if (p->mech == VLA_MECH_DELTA) {
        const size_t bt = ((size_t)b * T + t) * H + h;
        delta_step(p, dk, dv, qt, kt, vt, beta ? beta[bt] : 1.0, g ? g[bt] : 1.0, Sm, w);
    } else if (p->mech == VLA_MECH_DELTA_PAPER) {
        delta_paper_step(p, dk, dv, qt, kt, vt, g ? g + idx4(b, t, h, 0, T, H, dv) : NULL, Sm, w);
    } else {
        vla_step(p, dk, dv, p->t0 + t, qt, kt, vt, u ? u + idx4(b, t, h, 0, T, H, dk) : NULL, Sm, Am, nv, w);
    }
}

int ref64_forward_f64(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const double *q,
                      const double *k, const double *v, const double *u, const double *beta, const double *g,
                      const double *S0, const double *A0, const double *n0, double *o, double *S, double *A,
                      double *n) {
    if (check_args(d, B, T, H, dk, dv, q, k, v)) return -1;
    prm p;
    prm_from(d, dk, t0, &p);
    if (p.mech == VLA_MECH_SOFTMAX) {
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) softmax_head(&p, b, h, T, H, dk, dv, q, k, v, o, NULL);
        return 0;
    }
    double *Sm = xcalloc((size_t)dv * dk, sizeof *Sm), *Am = xcalloc((size_t)dk * dk, sizeof *Am);
    double *nv = xcalloc((size_t)dk, sizeof *nv);
    work w;
    int rc = 0;
    if (!work_alloc(&w, dk, dv) || !Sm || !Am || !nv) rc = -1;
    for (int b = 0; b < B && !rc; b++)
        for (int h = 0; h < H; h++) {
            const size_t bh = (size_t)b * H + h;
            init_states(&p, bh, dk, dv, S0, A0, n0, Sm, Am, nv);
            for (int t = 0; t < T; t++) {
                step(&p, b, t, h, T, H, dk, dv, q, k, v, u, beta, g, Sm, Am, nv, &w);
                if (o) memcpy(o + idx4(b, t, h, 0, T, H, dv), w.ov, (size_t)dv * sizeof *w.ov);
            }
            /* Final states in storage layout. */
            if (S)
                for (int i = 0; i < dk; i++)
                    for (int j = 0; j < dv; j++) S[(bh * dk + i) * dv + j] = Sm[j * dk + i];
            if (A && p.mech == VLA_MECH_VLA) memcpy(A + bh * dk * dk, Am, (size_t)dk * dk * sizeof *Am);
            if (n) memcpy(n + bh * dk, nv, (size_t)dk * sizeof *nv);
        }
    work_free(&w);
    free(Sm), free(Am), free(nv);
    return rc;
}

/* ---- backward steps: on entry gS, gA, gn hold the gradients of the step's output states; on
 * exit those of its input states. Sp, Ap: the states before the step (S_{t-1}, A_{t-1}); St, At, nt:
 * after it. w holds the step's intermediates. Token gradients go to w->gqf, gkf (w.r.t. phi(q),
 * phi(k)), gv_, and *gb, *gg, gu (w.r.t. the raw u). ---- */

/* Linear: o = num / den, num = S_t q~, den = q~ . n_t + eps. */
static void linear_back(int dk, int dv, const double *dO, const double *St, const double *nt, const double *v,
                        double *gS, double *gn, work *w) {
    double *gnum = w->ge;
    const double gden = -dot(dO, w->ov, dv) / w->den; /* d(num/den)/dden = -o / den */
    for (int j = 0; j < dv; j++) gnum[j] = dO[j] / w->den;
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += St[j * dk + i] * gnum[j];
        w->gqf[i] = acc + gden * nt[i];
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] += gnum[j] * w->qf[i];
    for (int i = 0; i < dk; i++) gn[i] += gden * w->qf[i];
    /* S_t = S_{t-1} + v k~^T, n_t = n_{t-1} + k~: gS, gn pass through. */
    for (int j = 0; j < dv; j++) w->gv_[j] = dot(gS + (size_t)j * dk, w->kf, dk);
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += gS[j * dk + i] * v[j];
        w->gkf[i] = acc + gn[i];
    }
}

/* DeltaNet: S_t = g P - g b (P k^) k^^T + b v k^^T with P = S_{t-1}, o = S_t q~. */
static void delta_back(const prm *p, int dk, int dv, const double *dO, const double *Sp, const double *St,
                       const double *v, double bt, double gt, double *gS, work *w, double *gb, double *gg) {
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += St[j * dk + i] * dO[j];
        w->gqf[i] = acc;
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] += dO[j] * w->qf[i];
    /* wv = gS k^ (dv) */
    double *wv = w->ge;
    for (int j = 0; j < dv; j++) wv[j] = dot(gS + (size_t)j * dk, w->kh, dk);
    for (int j = 0; j < dv; j++) w->gv_[j] = bt * wv[j];
    double gbv = 0, ggv = 0;
    for (int j = 0; j < dv; j++) gbv += wv[j] * (v[j] - gt * w->Sk[j]);
    for (size_t x = 0; x < (size_t)dv * dk; x++) ggv += gS[x] * Sp[x];
    ggv -= bt * dot(w->Sk, wv, dv);
    *gb = gbv, *gg = ggv;
    /* gk^ = b gS^T v - g b (P^T wv + gS^T (P k^)) */
    for (int i = 0; i < dk; i++) {
        double a1 = 0, a2 = 0, a3 = 0;
        for (int j = 0; j < dv; j++) {
            a1 += gS[j * dk + i] * v[j];
            a2 += Sp[j * dk + i] * wv[j];
            a3 += gS[j * dk + i] * w->Sk[j];
        }
        w->gkh[i] = bt * a1 - gt * bt * (a2 + a3);
    }
    /* dL/dP = g (gS - b wv k^^T) */
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] = gt * (gS[j * dk + i] - bt * wv[j] * w->kh[i]);
    memset(w->gkf, 0, (size_t)dk * sizeof *w->gkf);
    normalize_back(w->kh, w->nk, p->eps, w->gkh, w->gkf, dk);
}

/* The paper's DeltaNet: S_t = diag(g) P + e k^^T, e = v - P k^, P = S_{t-1}, o = S_t q~.
 * g [dv] or NULL; the gate's gradient row goes to w->gg. */
static void delta_paper_back(const prm *p, int dk, int dv, const double *dO, const double *Sp, const double *St,
                             const double *g, double *gS, work *w) {
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += St[j * dk + i] * dO[j];
        w->gqf[i] = acc;
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] += dO[j] * w->qf[i];
    /* ge = gS k^ (the gradient of e, and of v) */
    for (int j = 0; j < dv; j++) w->gv_[j] = dot(gS + (size_t)j * dk, w->kh, dk);
    /* gk^ = gS^T e - P^T ge;  gg_j = <gS row j, P row j> */
    for (int i = 0; i < dk; i++) {
        double a1 = 0, a2 = 0;
        for (int j = 0; j < dv; j++) {
            a1 += gS[j * dk + i] * w->e[j];
            a2 += Sp[j * dk + i] * w->gv_[j];
        }
        w->gkh[i] = a1 - a2;
    }
    for (int j = 0; j < dv; j++) w->gg[j] = dot(gS + (size_t)j * dk, Sp + (size_t)j * dk, dk);
    /* dL/dP = diag(g) gS - ge k^^T */
    for (int j = 0; j < dv; j++) {
        const double gj = g ? g[j] : 1.0;
        for (int i = 0; i < dk; i++) gS[j * dk + i] = gj * gS[j * dk + i] - w->gv_[j] * w->kh[i];
    }
    memset(w->gkf, 0, (size_t)dk * sizeof *w->gkf);
    normalize_back(w->kh, w->nk, p->eps, w->gkh, w->gkf, dk);
}

/* VLA, in reverse order of vla_step. gu_raw: the gradient w.r.t. the raw u row (u given). */
static void vla_back(const prm *p, int dk, int dv, const double *dO, const double *Sp, const double *Ap,
                     const double *St, const double *At, const double *nt, int has_u, double *gS, double *gA,
                     double *gn, work *w, double *gu_raw) {
    const double eps = p->eps;
    memset(w->gkf, 0, (size_t)dk * sizeof *w->gkf);
    memset(w->gkh, 0, (size_t)dk * sizeof *w->gkh);
    memset(w->gu, 0, (size_t)dk * sizeof *w->gu);
    /* Output: o = S_t q~ / dn (dn = max(q~ . n_t, eps)) or o = S_t q~. */
    double *gnum = w->ge;
    double gqn = 0;
    if (p->normalize) {
        for (int j = 0; j < dv; j++) gnum[j] = dO[j] / w->dn;
        if (w->qn > eps) gqn = -dot(dO, w->ov, dv) / w->dn;
    } else {
        memcpy(gnum, dO, (size_t)dv * sizeof *gnum);
    }
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += St[j * dk + i] * gnum[j];
        w->gqf[i] = acc + (p->normalize ? gqn * nt[i] : 0.0);
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] += gnum[j] * w->qf[i];
    if (p->normalize) {
        for (int i = 0; i < dk; i++) gn[i] += gqn * w->qf[i];
        for (int i = 0; i < dk; i++) w->gkf[i] += gn[i]; /* n_t = n_{t-1} + k~ */
    }
    /* S_t = P + e a^T: ge = gS a, ga = gS^T e; gP = gS. */
    for (int j = 0; j < dv; j++) w->gv_[j] = dot(gS + (size_t)j * dk, w->a, dk); /* ge; e = v - P k^: gv = ge */
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += gS[j * dk + i] * w->e[j];
        w->ga[i] = acc;
    }
    /* e = v - P k^: gP -= ge k^^T, gk^ -= P^T ge. */
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int j = 0; j < dv; j++) acc += Sp[j * dk + i] * w->gv_[j];
        w->gkh[i] -= acc;
    }
    for (int j = 0; j < dv; j++)
        for (int i = 0; i < dk; i++) gS[j * dk + i] -= w->gv_[j] * w->kh[i];
    /* a = normalize(ap), ap = A_t k^: gA += gap k^^T, gk^ += A_t^T gap. */
    memset(w->gap, 0, (size_t)dk * sizeof *w->gap);
    normalize_back(w->a, w->na, eps, w->ga, w->gap, dk);
    for (int i = 0; i < dk; i++)
        for (int l = 0; l < dk; l++) gA[i * dk + l] += w->gap[i] * w->kh[l];
    for (int l = 0; l < dk; l++) {
        double acc = 0;
        for (int i = 0; i < dk; i++) acc += At[i * dk + l] * w->gap[i];
        w->gkh[l] += acc;
    }
    /* The refresh adds a constant. A_t = A_{t-1} - z z^T / den, den = max(s, eps), s = 1 + u.z:
     * gz = -(gA + gA^T) z / den + gs u, gu += gs z with gs = z^T gA z / den^2 where s > eps. */
    double gs = 0;
    if (w->s > eps) {
        double zgz = 0;
        for (int i = 0; i < dk; i++) zgz += w->z[i] * dot(gA + (size_t)i * dk, w->z, dk);
        gs = zgz / (w->den * w->den);
    }
    for (int i = 0; i < dk; i++) {
        double acc = 0;
        for (int l = 0; l < dk; l++) acc += (gA[i * dk + l] + gA[l * dk + i]) * w->z[l];
        w->gz[i] = -acc / w->den + gs * w->ut[i];
    }
    for (int i = 0; i < dk; i++) w->gu[i] += gs * w->z[i];
    /* z = A_{t-1} u: gA += gz u^T, gu += A_{t-1}^T gz. */
    for (int i = 0; i < dk; i++)
        for (int l = 0; l < dk; l++) gA[i * dk + l] += w->gz[i] * w->ut[l];
    for (int l = 0; l < dk; l++) {
        double acc = 0;
        for (int i = 0; i < dk; i++) acc += Ap[i * dk + l] * w->gz[i];
        w->gu[l] += acc;
    }
    /* u = s_u normalize(u_raw), or u = s_u k^. */
    for (int i = 0; i < dk; i++) w->gu[i] *= p->su;
    if (has_u) {
        memset(gu_raw, 0, (size_t)dk * sizeof *gu_raw);
        normalize_back(w->uh, w->nu, eps, w->gu, gu_raw, dk);
    } else {
        for (int i = 0; i < dk; i++) w->gkh[i] += w->gu[i];
    }
    /* k^ = normalize(k~) */
    normalize_back(w->kh, w->nk, eps, w->gkh, w->gkf, dk);
}

int ref64_backward_f64(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const double *q,
                       const double *k, const double *v, const double *u, const double *beta, const double *g,
                       const double *S0, const double *A0, const double *n0, const ref64_grads *gr) {
    if (check_args(d, B, T, H, dk, dv, q, k, v) || !gr || !gr->dO) return -1;
    prm p;
    prm_from(d, dk, t0, &p);
    const size_t nqk = (size_t)B * T * H * dk, nvo = (size_t)B * T * H * dv, nbt = (size_t)B * T * H;
    const size_t nS = (size_t)B * H * dk * dv, nA = (size_t)B * H * dk * dk, nn = (size_t)B * H * dk;
    const int paper_delta = p.mech == VLA_MECH_DELTA_PAPER;
    /* Overwritten, not accumulated into: zero first (softmax accumulates across rows). */
    double *outs[] = {gr->dq, gr->dk, gr->du, gr->dv, gr->dbeta, gr->dg, gr->dS_0, gr->dA_0, gr->dn_0};
    const size_t sizes[] = {nqk, nqk, nqk, nvo, nbt, paper_delta ? nvo : nbt, nS, nA, nn};
    for (int i = 0; i < 9; i++)
        if (outs[i]) memset(outs[i], 0, sizes[i] * sizeof(double));

    if (p.mech == VLA_MECH_SOFTMAX) {
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) softmax_head(&p, b, h, T, H, dk, dv, q, k, v, NULL, gr);
        return 0;
    }

    const int is_vla = p.mech == VLA_MECH_VLA;
    const size_t sS = (size_t)dv * dk, sA = (size_t)dk * dk;
    /* States before each token and after the last: Sh[t] = S_{t-1} (S_0 at t = 0), Sh[T] = S_T. */
    double *Sh = xcalloc((T + 1) * sS, sizeof *Sh), *Ah = is_vla ? xcalloc((T + 1) * sA, sizeof *Ah) : NULL;
    double *nh = xcalloc((size_t)(T + 1) * dk, sizeof *nh);
    double *gS = xcalloc(sS, sizeof *gS), *gA = xcalloc(sA, sizeof *gA), *gn = xcalloc((size_t)dk, sizeof *gn);
    double *Sc = xcalloc(sS, sizeof *Sc), *Ac = xcalloc(sA, sizeof *Ac), *nc = xcalloc((size_t)dk, sizeof *nc);
    double *gu_raw = xcalloc((size_t)dk, sizeof *gu_raw);
    work w;
    int rc = 0;
    if (!work_alloc(&w, dk, dv) || !Sh || (is_vla && !Ah) || !nh || !gS || !gA || !gn || !Sc || !Ac || !nc || !gu_raw)
        rc = -1;
    for (int b = 0; b < B && !rc; b++)
        for (int h = 0; h < H; h++) {
            const size_t bh = (size_t)b * H + h;
            init_states(&p, bh, dk, dv, S0, A0, n0, Sh, Ah, nh);
            for (int t = 0; t < T; t++) {
                memcpy(Sh + (t + 1) * sS, Sh + t * sS, sS * sizeof *Sh);
                if (Ah) memcpy(Ah + (t + 1) * sA, Ah + t * sA, sA * sizeof *Ah);
                memcpy(nh + (size_t)(t + 1) * dk, nh + (size_t)t * dk, (size_t)dk * sizeof *nh);
                step(&p, b, t, h, T, H, dk, dv, q, k, v, u, beta, g, Sh + (t + 1) * sS, Ah ? Ah + (t + 1) * sA : NULL,
                     nh + (size_t)(t + 1) * dk, &w);
            }
            /* Upstream gradients of the final states (storage layout -> the maths'). */
            for (int j = 0; j < dv; j++)
                for (int i = 0; i < dk; i++) gS[j * dk + i] = gr->dS_end ? gr->dS_end[(bh * dk + i) * dv + j] : 0.0;
            for (size_t x = 0; x < sA; x++) gA[x] = gr->dA_end && is_vla ? gr->dA_end[bh * sA + x] : 0.0;
            for (int i = 0; i < dk; i++) gn[i] = gr->dn_end ? gr->dn_end[bh * dk + i] : 0.0;

            for (int t = T - 1; t >= 0; t--) {
                /* Recompute token t's intermediates from the states before it. */
                memcpy(Sc, Sh + t * sS, sS * sizeof *Sc);
                if (Ah) memcpy(Ac, Ah + t * sA, sA * sizeof *Ac);
                memcpy(nc, nh + (size_t)t * dk, (size_t)dk * sizeof *nc);
                step(&p, b, t, h, T, H, dk, dv, q, k, v, u, beta, g, Sc, Ah ? Ac : NULL, nc, &w);
                const size_t bt = ((size_t)b * T + t) * H + h;
                const double *dO = gr->dO + idx4(b, t, h, 0, T, H, dv), *vt = v + idx4(b, t, h, 0, T, H, dv);
                double gb = 0, gg = 0;
                if (p.mech == VLA_MECH_LINEAR) {
                    linear_back(dk, dv, dO, Sc, nc, vt, gS, gn, &w);
                } else if (p.mech == VLA_MECH_DELTA) {
                    delta_back(&p, dk, dv, dO, Sh + t * sS, Sc, vt, beta ? beta[bt] : 1.0, g ? g[bt] : 1.0, gS, &w,
                               &gb, &gg);
                } else if (paper_delta) {
                    delta_paper_back(&p, dk, dv, dO, Sh + t * sS, Sc, g ? g + idx4(b, t, h, 0, T, H, dv) : NULL, gS,
                                     &w);
                } else {
                    vla_back(&p, dk, dv, dO, Sh + t * sS, Ah + t * sA, Sc, Ac, nc, u != NULL, gS, gA, gn, &w, gu_raw);
                }
                const double *qt = q + idx4(b, t, h, 0, T, H, dk), *kt = k + idx4(b, t, h, 0, T, H, dk);
                for (int i = 0; i < dk; i++) {
                    if (gr->dq) gr->dq[idx4(b, t, h, i, T, H, dk)] = w.gqf[i] * phi_deriv(p.fmap, qt[i]);
                    if (gr->dk) gr->dk[idx4(b, t, h, i, T, H, dk)] = w.gkf[i] * phi_deriv(p.kmap, kt[i]);
                    if (gr->du && u && is_vla) gr->du[idx4(b, t, h, i, T, H, dk)] = gu_raw[i];
                }
                if (gr->dv) memcpy(gr->dv + idx4(b, t, h, 0, T, H, dv), w.gv_, (size_t)dv * sizeof *w.gv_);
                if (gr->dbeta && beta) gr->dbeta[bt] = gb;
                if (gr->dg && g && paper_delta) /* a row of dv */
                    memcpy(gr->dg + idx4(b, t, h, 0, T, H, dv), w.gg, (size_t)dv * sizeof *w.gg);
                else if (gr->dg && g)
                    gr->dg[bt] = gg;
            }
            if (gr->dS_0)
                for (int i = 0; i < dk; i++)
                    for (int j = 0; j < dv; j++) gr->dS_0[(bh * dk + i) * dv + j] = gS[j * dk + i];
            if (gr->dA_0 && is_vla) /* the symmetric part */
                for (int i = 0; i < dk; i++)
                    for (int j = 0; j < dk; j++)
                        gr->dA_0[bh * sA + (size_t)i * dk + j] = 0.5 * (gA[(size_t)i * dk + j] + gA[(size_t)j * dk + i]);
            if (gr->dn_0) memcpy(gr->dn_0 + bh * dk, gn, (size_t)dk * sizeof *gn);
        }
    work_free(&w);
    free(Sh), free(Ah), free(nh), free(gS), free(gA), free(gn), free(Sc), free(Ac), free(nc), free(gu_raw);
    return rc;
}

/* ---- float entry points ---- */

static double *to_f64(const float *x, size_t n) {
    if (!x) return NULL;
    double *y = malloc((n ? n : 1) * sizeof *y);
    if (y)
        for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

typedef struct inputs64 {
    double *q, *k, *v, *u, *beta, *g, *S0, *A0, *n0;
} inputs64;

static int inputs_to_f64(inputs64 *in, vla_mechanism mech, int B, int T, int H, int dk, int dv, const float *q,
                         const float *k, const float *v, const float *u, const float *beta, const float *g,
                         const float *S0, const float *A0, const float *n0) {
    const size_t nqk = (size_t)B * T * H * dk, nvo = (size_t)B * T * H * dv, nbt = (size_t)B * T * H;
    in->q = to_f64(q, nqk), in->k = to_f64(k, nqk), in->v = to_f64(v, nvo), in->u = to_f64(u, nqk);
    in->beta = to_f64(beta, nbt), in->g = to_f64(g, mech == VLA_MECH_DELTA_PAPER ? nvo : nbt);
    in->S0 = to_f64(S0, (size_t)B * H * dk * dv), in->A0 = to_f64(A0, (size_t)B * H * dk * dk);
    in->n0 = to_f64(n0, (size_t)B * H * dk);
    return (q && !in->q) || (k && !in->k) || (v && !in->v) || (u && !in->u) || (beta && !in->beta) ||
                   (g && !in->g) || (S0 && !in->S0) || (A0 && !in->A0) || (n0 && !in->n0)
               ? -1
               : 0;
}

static void inputs_free(inputs64 *in) {
    free(in->q), free(in->k), free(in->v), free(in->u), free(in->beta), free(in->g);
    free(in->S0), free(in->A0), free(in->n0);
}

int ref64_forward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                  const float *k, const float *v, const float *u, const float *beta, const float *g,
                  const float *S0, const float *A0, const float *n0, double *o, double *S, double *A, double *n) {
    if (check_args(d, B, T, H, dk, dv, q, k, v)) return -1;
    inputs64 in;
    int rc = inputs_to_f64(&in, d->mechanism, B, T, H, dk, dv, q, k, v, u, beta, g, S0, A0, n0);
    if (!rc)
        rc = ref64_forward_f64(d, B, T, H, dk, dv, t0, in.q, in.k, in.v, in.u, in.beta, in.g, in.S0, in.A0, in.n0, o,
                               S, A, n);
    inputs_free(&in);
    return rc;
}

int ref64_backward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                   const float *k, const float *v, const float *u, const float *beta, const float *g,
                   const float *S0, const float *A0, const float *n0, const ref64_grads *gr) {
    if (check_args(d, B, T, H, dk, dv, q, k, v)) return -1;
    inputs64 in;
    int rc = inputs_to_f64(&in, d->mechanism, B, T, H, dk, dv, q, k, v, u, beta, g, S0, A0, n0);
    if (!rc)
        rc = ref64_backward_f64(d, B, T, H, dk, dv, t0, in.q, in.k, in.v, in.u, in.beta, in.g, in.S0, in.A0, in.n0,
                                gr);
    inputs_free(&in);
    return rc;
}
