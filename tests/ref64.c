/* Float64 reference, straight from VLA-MATH section 1. In the maths S is dv x dk (S k is a
 * value); the library stores S transposed, [dk, dv]. Here `Sm` holds the maths' S row-major
 * (Sm[j*dk + i] = S[j][i]) and is transposed on the way in and out. */
#include "ref64.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double phi_apply(int fmap, double x) {
    if (fmap == VLA_FMAP_ELU1) return x > 0 ? x + 1.0 : exp(x); /* elu(x) + 1 */
    return x;
}

static double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* x / max(||x||, eps), in place. */
static void normalize(double *x, int n, double eps) {
    double nrm = sqrt(dot(x, x, n));
    double den = nrm > eps ? nrm : eps;
    for (int i = 0; i < n; i++) x[i] /= den;
}

/* Index of element (b, t, h, i) of a [B, T, H, D] tensor. */
static size_t idx4(int b, int t, int h, int i, int T, int H, int D) {
    return (((size_t)b * T + t) * H + h) * D + i;
}

static void softmax_head(const vla_attn_desc *d, int b, int h, int T, int H, int dk, int dv, const float *q,
                         const float *k, const float *v, double *o) {
    double scale = d->scale != 0 ? d->scale : 1.0 / sqrt((double)dk);
    double *logit = malloc((size_t)T * sizeof *logit);
    for (int t = 0; t < T; t++) {
        double m = -INFINITY;
        for (int s = 0; s <= t; s++) {
            double x = 0;
            for (int i = 0; i < dk; i++) x += (double)q[idx4(b, t, h, i, T, H, dk)] * k[idx4(b, s, h, i, T, H, dk)];
            logit[s] = x * scale;
            if (logit[s] > m || isnan(logit[s])) m = logit[s];
        }
        double z = 0;
        for (int s = 0; s <= t; s++) z += exp(logit[s] - m);
        if (o)
            for (int j = 0; j < dv; j++) {
                double acc = 0;
                for (int s = 0; s <= t; s++) acc += exp(logit[s] - m) * v[idx4(b, s, h, j, T, H, dv)];
                o[idx4(b, t, h, j, T, H, dv)] = acc / z;
            }
    }
    free(logit);
}

int ref64_forward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                  const float *k, const float *v, const float *u, const float *beta, const float *g,
                  const float *S0, const float *A0, const float *n0, double *o, double *S, double *A, double *n) {
    if (!d || !q || !k || !v || B < 1 || T < 1 || H < 1 || dk < 1 || dv < 1) return -1;
    const int mech = d->mechanism;
    const double eps = d->eps;

    if (mech == VLA_MECH_SOFTMAX) {
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) softmax_head(d, b, h, T, H, dk, dv, q, k, v, o);
        return 0;
    }

    const int fmap = d->feature_map;
    double *Sm = malloc((size_t)dv * dk * sizeof *Sm); /* maths' S, dv x dk */
    double *Am = malloc((size_t)dk * dk * sizeof *Am);
    double *nv = malloc((size_t)dk * sizeof *nv);
    double *qt = malloc((size_t)dk * sizeof *qt), *kt = malloc((size_t)dk * sizeof *kt);
    double *kh = malloc((size_t)dk * sizeof *kh), *ut = malloc((size_t)dk * sizeof *ut);
    double *z = malloc((size_t)dk * sizeof *z), *at = malloc((size_t)dk * sizeof *at);
    double *vt = malloc((size_t)dv * sizeof *vt), *e = malloc((size_t)dv * sizeof *e);
    double *Sk = malloc((size_t)dv * sizeof *Sk);

    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const size_t bh = (size_t)b * H + h;
            /* Initial state. */
            for (int j = 0; j < dv; j++)
                for (int i = 0; i < dk; i++) Sm[j * dk + i] = S0 ? S0[(bh * dk + i) * dv + j] : 0.0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++)
                    Am[i * dk + j] = A0 ? A0[(bh * dk + i) * dk + j] : (i == j ? 1.0 / d->lambda0 : 0.0);
            for (int i = 0; i < dk; i++) nv[i] = n0 ? n0[bh * dk + i] : 0.0;

            for (int t = 0; t < T; t++) {
                for (int i = 0; i < dk; i++) {
                    qt[i] = q[idx4(b, t, h, i, T, H, dk)];
                    kt[i] = k[idx4(b, t, h, i, T, H, dk)];
                }
                for (int j = 0; j < dv; j++) vt[j] = v[idx4(b, t, h, j, T, H, dv)];
                double *ot = o ? o + idx4(b, t, h, 0, T, H, dv) : NULL;

                if (mech == VLA_MECH_LINEAR) {
                    /* phi = elu + 1 (linear attention's definition). */
                    for (int i = 0; i < dk; i++) {
                        qt[i] = phi_apply(VLA_FMAP_ELU1, qt[i]);
                        kt[i] = phi_apply(VLA_FMAP_ELU1, kt[i]);
                    }
                    for (int j = 0; j < dv; j++)
                        for (int i = 0; i < dk; i++) Sm[j * dk + i] += vt[j] * kt[i];
                    for (int i = 0; i < dk; i++) nv[i] += kt[i];
                    double den = dot(qt, nv, dk) + eps;
                    if (ot)
                        for (int j = 0; j < dv; j++) ot[j] = dot(Sm + (size_t)j * dk, qt, dk) / den;
                } else if (mech == VLA_MECH_DELTA) {
                    /* k^ = normalize(phi(k)), q~ = phi(q) (phi = identity for none). */
                    for (int i = 0; i < dk; i++) {
                        qt[i] = phi_apply(fmap, qt[i]);
                        kh[i] = phi_apply(fmap, kt[i]);
                    }
                    normalize(kh, dk, eps);
                    double bt = beta ? beta[((size_t)b * T + t) * H + h] : 1.0;
                    double gt = g ? g[((size_t)b * T + t) * H + h] : 1.0;
                    /* S = g S (I - beta k^ k^T) + beta v k^T */
                    for (int j = 0; j < dv; j++) Sk[j] = dot(Sm + (size_t)j * dk, kh, dk);
                    for (int j = 0; j < dv; j++)
                        for (int i = 0; i < dk; i++)
                            Sm[j * dk + i] = gt * (Sm[j * dk + i] - bt * Sk[j] * kh[i]) + bt * vt[j] * kh[i];
                    if (ot)
                        for (int j = 0; j < dv; j++) ot[j] = dot(Sm + (size_t)j * dk, qt, dk);
                } else { /* VLA */
                    double su = d->u_scale != 0 ? d->u_scale : 1.0 / sqrt((double)dk);
                    for (int i = 0; i < dk; i++) {
                        qt[i] = phi_apply(fmap, qt[i]);
                        kt[i] = phi_apply(fmap, kt[i]);
                        kh[i] = kt[i];
                    }
                    normalize(kh, dk, eps);
                    if (u) {
                        for (int i = 0; i < dk; i++) ut[i] = u[idx4(b, t, h, i, T, H, dk)];
                        normalize(ut, dk, eps);
                        for (int i = 0; i < dk; i++) ut[i] *= su;
                    } else {
                        for (int i = 0; i < dk; i++) ut[i] = su * kh[i];
                    }
                    /* z = A u; A -= z z^T / max(1 + u.z, eps) */
                    for (int i = 0; i < dk; i++) z[i] = dot(Am + (size_t)i * dk, ut, dk);
                    double den = 1.0 + dot(ut, z, dk);
                    if (!(den > eps)) den = den != den ? den : eps; /* max(., eps), NaN stays NaN */
                    for (int i = 0; i < dk; i++)
                        for (int j = 0; j < dk; j++) Am[i * dk + j] -= z[i] * z[j] / den;
                    if (d->refresh > 0 && (t0 + t + 1) % d->refresh == 0)
                        for (int i = 0; i < dk; i++) Am[i * dk + i] += d->refresh_size;
                    /* a = normalize(A k^) */
                    for (int i = 0; i < dk; i++) at[i] = dot(Am + (size_t)i * dk, kh, dk);
                    normalize(at, dk, eps);
                    /* e = v - S k^;  S += e a^T */
                    for (int j = 0; j < dv; j++) e[j] = vt[j] - dot(Sm + (size_t)j * dk, kh, dk);
                    for (int j = 0; j < dv; j++)
                        for (int i = 0; i < dk; i++) Sm[j * dk + i] += e[j] * at[i];
                    if (d->normalize_output) {
                        for (int i = 0; i < dk; i++) nv[i] += kt[i];
                        double qn = dot(qt, nv, dk);
                        double dn = qn > eps ? qn : (qn != qn ? qn : eps);
                        if (ot)
                            for (int j = 0; j < dv; j++) ot[j] = dot(Sm + (size_t)j * dk, qt, dk) / dn;
                    } else if (ot) {
                        for (int j = 0; j < dv; j++) ot[j] = dot(Sm + (size_t)j * dk, qt, dk);
                    }
                }
            }
            /* Final states in storage layout. */
            if (S)
                for (int i = 0; i < dk; i++)
                    for (int j = 0; j < dv; j++) S[(bh * dk + i) * dv + j] = Sm[j * dk + i];
            if (A && mech == VLA_MECH_VLA) memcpy(A + bh * dk * dk, Am, (size_t)dk * dk * sizeof *Am);
            if (n) memcpy(n + bh * dk, nv, (size_t)dk * sizeof *nv);
        }
    free(Sm), free(Am), free(nv), free(qt), free(kt), free(kh), free(ut), free(z), free(at), free(vt), free(e),
        free(Sk);
    return 0;
}
