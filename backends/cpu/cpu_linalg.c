/* Small dense linear algebra for the CPU kernels: GEMM (own loops, or OpenBLAS when built
 * with VLA_HAVE_CBLAS), Cholesky, triangular solves, affine-map scans and the generalised
 * delta rule on one chunk. Everything row-major. */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

#ifdef VLA_HAVE_CBLAS
#include <cblas.h>
#endif

float cpu_dot(const float *restrict x, const float *restrict y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

void cpu_vecmat(const float *restrict x, const float *restrict M, int k, int n, float *restrict y) {
    for (int j = 0; j < n; j++) y[j] = 0.0f;
    for (int i = 0; i < k; i++) {
        const float xi = x[i];
        const float *row = M + (size_t)i * n;
        for (int j = 0; j < n; j++) y[j] += xi * row[j];
    }
}

void cpu_matvec(const float *restrict M, const float *restrict x, int k, int n, float *restrict y) {
    for (int i = 0; i < k; i++) y[i] = cpu_dot(M + (size_t)i * n, x, n);
}

void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
#ifdef VLA_HAVE_CBLAS
    if (k > 0) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                    A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    /* beta = 0 overwrites (C may hold poison); it never multiplies. */
    for (int i = 0; i < m; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < n; j++) c[j] = 0.0f;
        else if (beta != 1.0f)
            for (int j = 0; j < n; j++) c[j] *= beta;
    }
    if (k <= 0) return;
    if (!tb) {
        /* C[i,:] += alpha A(i,p) B[p,:]: contiguous inner loop over j. */
        for (int i = 0; i < m; i++) {
            float *restrict c = C + (size_t)i * ldc;
            for (int p = 0; p < k; p++) {
                const float a = alpha * (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
                const float *restrict b = B + (size_t)p * ldb;
                for (int j = 0; j < n; j++) c[j] += a * b[j];
            }
        }
    } else if (!ta) {
        /* C[i,j] += alpha A[i,:] . B[j,:]: two contiguous rows. */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                C[(size_t)i * ldc + j] += alpha * cpu_dot(A + (size_t)i * lda, B + (size_t)j * ldb, k);
    } else {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float s = 0.0f;
                for (int p = 0; p < k; p++) s += A[(size_t)p * lda + i] * B[(size_t)j * ldb + p];
                C[(size_t)i * ldc + j] += alpha * s;
            }
    }
}

void cpu_gemm_d(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                int ldb, double beta, double *C, int ldc) {
    if (m <= 0 || n <= 0) return;
#ifdef VLA_HAVE_CBLAS
    if (k > 0) {
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                    A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    for (int i = 0; i < m; i++) { /* beta = 0 overwrites (C may hold poison) */
        double *c = C + (size_t)i * ldc;
        if (beta == 0.0)
            for (int j = 0; j < n; j++) c[j] = 0.0;
        else if (beta != 1.0)
            for (int j = 0; j < n; j++) c[j] *= beta;
    }
    if (k <= 0) return;
    for (int i = 0; i < m; i++) {
        double *restrict c = C + (size_t)i * ldc;
        if (!tb) /* C[i,:] += alpha A(i,p) B[p,:]: contiguous inner loop over j */
            for (int p = 0; p < k; p++) {
                const double a = alpha * (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
                const double *restrict b = B + (size_t)p * ldb;
                for (int j = 0; j < n; j++) c[j] += a * b[j];
            }
        else
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int p = 0; p < k; p++) s += (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]) * B[(size_t)j * ldb + p];
                c[j] += alpha * s;
            }
    }
}

int cpu_cholesky(float *G, int c, int ldg) {
    for (int j = 0; j < c; j++) {
        float *gj = G + (size_t)j * ldg;
        float d = gj[j] - cpu_dot(gj, gj, j);
        if (!(d > 0.0f) || !isfinite(d)) return -1;
        d = sqrtf(d);
        gj[j] = d;
        for (int i = j + 1; i < c; i++) {
            float *gi = G + (size_t)i * ldg;
            gi[j] = (gi[j] - cpu_dot(gi, gj, j)) / d;
        }
    }
    return 0;
}

void cpu_trsm_lower(const float *L, int ldl, int unit, float *X, int c, int n, int ldx) {
    for (int i = 0; i < c; i++) {
        float *restrict xi = X + (size_t)i * ldx;
        const float *li = L + (size_t)i * ldl;
        for (int j = 0; j < i; j++) {
            const float l = li[j];
            const float *restrict xj = X + (size_t)j * ldx;
            for (int p = 0; p < n; p++) xi[p] -= l * xj[p];
        }
        if (!unit) {
            const float inv = 1.0f / li[i];
            for (int p = 0; p < n; p++) xi[p] *= inv;
        }
    }
}

/* ---- affine maps X -> M X + N on the transposed state ---- */

void cpu_affine_identity(float *e, int dk, int dv) {
    memset(e, 0, sizeof(float) * ((size_t)dk * dk + (size_t)dk * dv));
    for (int i = 0; i < dk; i++) e[(size_t)i * dk + i] = 1.0f;
}

void cpu_affine_compose(const float *first, float *second, int dk, int dv, float *tmp) {
    const float *M1 = first, *N1 = first + (size_t)dk * dk;
    float *M2 = second, *N2 = second + (size_t)dk * dk;
    cpu_gemm(0, 0, dk, dv, dk, 1.0f, M2, dk, N1, dv, 1.0f, N2, dv); /* N2 += M2 N1 (before M2 changes) */
    cpu_gemm(0, 0, dk, dk, dk, 1.0f, M2, dk, M1, dk, 0.0f, tmp, dk);
    memcpy(M2, tmp, sizeof(float) * (size_t)dk * dk);
}

void cpu_affine_scan(float *e, int n, int dk, int dv, float *tmp) {
    const size_t stride = (size_t)dk * dk + (size_t)dk * dv;
    int top = 1;
    /* Up-sweep: e[i] for i = 2s-1 mod 2s accumulates the 2s maps ending at i. */
    for (int s = 1; s < n; s *= 2) {
        for (int i = 2 * s - 1; i < n; i += 2 * s) cpu_affine_compose(e + (i - s) * stride, e + i * stride, dk, dv, tmp);
        top = s;
    }
    /* Down-sweep: fill in the prefixes between the ones the up-sweep finished. */
    for (int s = top / 2; s >= 1; s /= 2)
        for (int i = 3 * s - 1; i < n; i += 2 * s) cpu_affine_compose(e + (i - s) * stride, e + i * stride, dk, dv, tmp);
}

void cpu_affine_apply(const float *e, float *ST, int dk, int dv, float *tmp) {
    cpu_gemm(0, 0, dk, dv, dk, 1.0f, e, dk, ST, dv, 0.0f, tmp, dv);
    const float *N = e + (size_t)dk * dk;
    for (size_t i = 0; i < (size_t)dk * dv; i++) ST[i] = tmp[i] + N[i];
}

/* ---- the generalised delta rule on one chunk ---- */

size_t cpu_chunk_work(int c, int dk, int dv) {
    (void)dk;
    return 3 * (size_t)c * c + (size_t)c + (size_t)c * dv;
}

void cpu_chunk_step(int c, int dk, int dv, int residual, const float *kr, const float *w, const float *v,
                    const float *q, const float *g, float *ST, float *O, float *work) {
    float *D = work;                     /* [c, c] decay from s to t: prod_{s<r<=t} g_r */
    float *L = D + (size_t)c * c;        /* [c, c] strictly lower coupling kr_t . w_s */
    float *M = L + (size_t)c * c;        /* [c, c] tril(q_t . w_s) */
    float *gam = M + (size_t)c * c;      /* [c] decay from the chunk start: prod_{r<=t} g_r */
    float *E = gam + c;                  /* [c, dv] residuals e_t */

    if (g) {
        /* Products, not exp(log) ratios: exact for any g, including 0 and negatives. */
        for (int t = 0; t < c; t++) {
            gam[t] = (t ? gam[t - 1] : 1.0f) * g[t];
            D[(size_t)t * c + t] = 1.0f;
            for (int s = 0; s < t; s++) D[(size_t)t * c + s] = D[(size_t)(t - 1) * c + s] * g[t];
        }
    }

    /* E = V - diag(gam) Kr ST, then (I + L o D) E = that (forward substitution). */
    if (residual) {
        cpu_gemm(0, 0, c, dv, dk, -1.0f, kr, dk, ST, dv, 0.0f, E, dv);
        for (int t = 0; t < c; t++) {
            float *e = E + (size_t)t * dv;
            const float gt = g ? gam[t] : 1.0f;
            const float *vt = v + (size_t)t * dv;
            for (int j = 0; j < dv; j++) e[j] = vt[j] + gt * e[j];
        }
        cpu_gemm(0, 1, c, c, dk, 1.0f, kr, dk, w, dk, 0.0f, L, c);
        for (int t = 0; t < c; t++) {
            float *e = E + (size_t)t * dv;
            for (int s = 0; s < t; s++) {
                const float l = L[(size_t)t * c + s] * (g ? D[(size_t)t * c + s] : 1.0f);
                const float *es = E + (size_t)s * dv;
                for (int j = 0; j < dv; j++) e[j] -= l * es[j];
            }
        }
    } else {
        memcpy(E, v, sizeof(float) * (size_t)c * dv);
    }

    /* O = diag(gam) Q ST + (tril(Q W^T) o D) E. */
    if (O) {
        cpu_gemm(0, 0, c, dv, dk, 1.0f, q, dk, ST, dv, 0.0f, O, dv);
        if (g)
            for (int t = 0; t < c; t++)
                for (int j = 0; j < dv; j++) O[(size_t)t * dv + j] *= gam[t];
        cpu_gemm(0, 1, c, c, dk, 1.0f, q, dk, w, dk, 0.0f, M, c);
        for (int t = 0; t < c; t++)
            for (int s = 0; s < c; s++) {
                float *m = M + (size_t)t * c + s;
                *m = s > t ? 0.0f : (g ? *m * D[(size_t)t * c + s] : *m);
            }
        cpu_gemm(0, 0, c, dv, c, 1.0f, M, c, E, dv, 1.0f, O, dv);
    }

    /* ST = gam_last ST + W^T diag(D[last, :]) E. */
    if (g) {
        const float gl = gam[c - 1];
        for (size_t i = 0; i < (size_t)dk * dv; i++) ST[i] *= gl;
        for (int s = 0; s < c; s++) {
            const float d = D[(size_t)(c - 1) * c + s];
            for (int j = 0; j < dv; j++) E[(size_t)s * dv + j] *= d;
        }
    }
    cpu_gemm(1, 0, dk, dv, c, 1.0f, w, dk, E, dv, 1.0f, ST, dv);
}

void cpu_normalize_output(const cpu_head *h, float eps, int linear_style) {
    for (int t = 0; t < h->T; t++) {
        const float *kt = h->kf + (size_t)t * h->dk;
        for (int i = 0; i < h->dk; i++) h->n[i] += kt[i];
        const float qn = cpu_dot(h->q + (size_t)t * h->dk, h->n, h->dk);
        const float den = linear_style ? qn + eps : fmaxf(qn, eps);
        float *o = h->o + (size_t)t * h->dv;
        for (int j = 0; j < h->dv; j++) o[j] /= den;
    }
}
