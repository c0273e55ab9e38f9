/* The CPU backend's nn ops (vla/nn.h, table in core/nn_impl.h): the reference every other
 * backend is compared with, so each op is written to be read top to bottom. Arguments arrive
 * validated (core/nn.c). As nn.h says once: backward outputs accumulate (+=), forward outputs
 * are overwritten.
 *
 * Threads: vla_backend_set_threads' count. Reductions (bias and LayerNorm weight gradients,
 * the loss, the norm, the embedding scatter) are split so each output element has one owner
 * and is summed in a fixed order: a result does not depend on the thread count except through
 * OpenBLAS (the matrix products) and the per-thread partial sums of the loss and the norm. */
#include "cpu_kernels.h"
#include "nn_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef VLA_HAVE_CBLAS
#include <cblas.h>
#endif

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* Below this many elements an OpenMP region costs more than the loop. */
#define PAR_MIN 32768
/* Most parts a reduction is split into (partial sums live on the stack). */
#define MAX_PARTS 64

/* Start of part i of n elements split into `parts` near-equal contiguous ranges. */
static size_t part_start(size_t n, int parts, int i) {
    const size_t q = n / (size_t)parts, r = n % (size_t)parts;
    return q * (size_t)i + ((size_t)i < r ? (size_t)i : r);
}

static float *fptr(vla_buffer *buf, size_t off) { return buf ? (float *)buf->mem + off : NULL; }
static const float *cfptr(const vla_buffer *buf, size_t off) { return buf ? (const float *)buf->mem + off : NULL; }
static const int32_t *iptr(const vla_buffer *buf, size_t off) { return (const int32_t *)buf->mem + off; }

/* ---- fill, elementwise ---- */

static vla_status cpu_fill(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value) {
    float *X = fptr(x, x_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) X[i] = value;
    return VLA_OK;
}

/* y may be x (in place): each element is read before it is written. */
static vla_status cpu_gelu_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                   size_t n) {
    float *Y = fptr(y, y_off);
    const float *X = cfptr(x, x_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float xi = X[i];
        Y[i] = 0.5f * xi * (1.0f + erff(xi * INV_SQRT2));
    }
    return VLA_OK;
}

static vla_status cpu_gelu_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                    size_t dy_off, const vla_buffer *x, size_t x_off, size_t n) {
    float *DX = fptr(dx, dx_off);
    const float *DY = cfptr(dy, dy_off), *X = cfptr(x, x_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float xi = X[i];
        const float cdf = 0.5f * (1.0f + erff(xi * INV_SQRT2));  /* Phi(x) */
        const float pdf = INV_SQRT_2PI * expf(-0.5f * xi * xi); /* phi(x) */
        DX[i] += DY[i] * (cdf + xi * pdf);
    }
    return VLA_OK;
}

static vla_status cpu_sigmoid_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x,
                                      size_t x_off, size_t n) {
    float *Y = fptr(y, y_off);
    const float *X = cfptr(x, x_off);
    const int nt = cpu_max_threads(b);
    /* expf(-x) overflows to inf for x < -88: y = 0 then, as it should. */
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) Y[i] = 1.0f / (1.0f + expf(-X[i]));
    return VLA_OK;
}

static vla_status cpu_sigmoid_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                       size_t dy_off, const vla_buffer *y, size_t y_off, size_t n) {
    float *DX = fptr(dx, dx_off);
    const float *DY = cfptr(dy, dy_off), *Y = cfptr(y, y_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) DX[i] += DY[i] * Y[i] * (1.0f - Y[i]);
    return VLA_OK;
}

static vla_status cpu_add_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                                  const vla_buffer *c, size_t c_off, size_t n) {
    float *Y = fptr(y, y_off);
    const float *A = cfptr(a, a_off), *Cc = cfptr(c, c_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) Y[i] = A[i] + Cc[i];
    return VLA_OK;
}

static vla_status cpu_add_backward(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                                   const vla_buffer *dy, size_t dy_off, size_t n) {
    float *DA = fptr(da, da_off), *DC = fptr(dc, dc_off);
    const float *DY = cfptr(dy, dy_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        if (DA) DA[i] += DY[i];
        if (DC) DC[i] += DY[i];
    }
    return VLA_OK;
}

/* ---- matmul ---- */

/* C[m, n] = op(A) op(B) + beta C (row-major, op = transpose when ta / tb), on nt threads: row
 * blocks of C, one per OpenMP thread, each one cpu_gemm (OpenBLAS on one thread, where built with
 * it). One pool of threads, not two: with OpenBLAS's own threads beside OpenMP's, each pool's
 * workers spin while the other's run, and a TinyLM training step on 2 cores took 426 ms against
 * 253 ms with OMP_WAIT_POLICY=PASSIVE (benchmarks/results/2026-12-06-cpu-train-speed/). */
static void gemm_threads(int nt, int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B,
                         int ldb, float beta, float *C, int ldc) {
#ifdef VLA_HAVE_CBLAS
    openblas_set_num_threads(1);
#endif
    const int blocks = m < nt ? m : nt;
#pragma omp parallel for num_threads(blocks) if (blocks > 1 && (size_t)m * n * k >= PAR_MIN) schedule(static)
    for (int i = 0; i < blocks; i++) {
        const int r0 = (int)((int64_t)m * i / blocks), r1 = (int)((int64_t)m * (i + 1) / blocks);
        /* Rows r0.. of op(A): rows of A, or columns of A when transposed. */
        const float *Ai = ta ? A + r0 : A + (size_t)r0 * lda;
        cpu_gemm(ta, tb, r1 - r0, n, k, 1.0f, Ai, lda, B, ldb, beta, C + (size_t)r0 * ldc, ldc);
    }
}

static vla_status cpu_matmul_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                     const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off,
                                     int M, int N, int K) {
    float *Y = fptr(y, y_off);
    const float *X = cfptr(x, x_off), *Wt = cfptr(W, W_off), *bs = cfptr(bias, bias_off);
    const int nt = cpu_max_threads(b);
    /* With a bias, y starts as bias in every row and the product adds to it (beta = 1); without,
     * beta = 0 overwrites whatever y held. */
    if (bs) {
#pragma omp parallel for num_threads(nt) if ((size_t)M * N >= PAR_MIN) schedule(static)
        for (int m = 0; m < M; m++) memcpy(Y + (size_t)m * N, bs, sizeof(float) * N);
    }
    /* y[M, N] (+)= x[M, K] W[N, K]^T */
    gemm_threads(nt, 0, 1, M, N, K, X, K, Wt, K, bs ? 1.0f : 0.0f, Y, N);
    return VLA_OK;
}

/* out[j] += sum over rows m of A[m, j], A [M, N]: columns in blocks of 64, one block per thread
 * iteration, each summed in double in row order. */
#define COLS 64
static void column_sums_add(int nt, const float *A, int M, int N, float *out) {
    const int nb = (N + COLS - 1) / COLS;
#pragma omp parallel for num_threads(nt) if (nb > 1 && (size_t)M * N >= PAR_MIN) schedule(static)
    for (int cb = 0; cb < nb; cb++) {
        const int c0 = cb * COLS, c1 = c0 + COLS < N ? c0 + COLS : N;
        double acc[COLS] = {0};
        for (int m = 0; m < M; m++) {
            const float *row = A + (size_t)m * N;
            for (int j = c0; j < c1; j++) acc[j - c0] += row[j];
        }
        for (int j = c0; j < c1; j++) out[j] += (float)acc[j - c0];
    }
}

static vla_status cpu_matmul_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                      vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                      const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M,
                                      int N, int K) {
    float *DX = fptr(dx, dx_off), *DW = fptr(dW, dW_off), *DB = fptr(dbias, dbias_off);
    const float *DY = cfptr(dy, dy_off), *X = cfptr(x, x_off), *Wt = cfptr(W, W_off);
    const int nt = cpu_max_threads(b);
    if (DX) gemm_threads(nt, 0, 0, M, K, N, DY, N, Wt, K, 1.0f, DX, K); /* dx[M, K] += dy[M, N] W[N, K] */
    if (DW) gemm_threads(nt, 1, 0, N, K, M, DY, N, X, K, 1.0f, DW, K);  /* dW[N, K] += dy^T[N, M] x[M, K] */
    if (DB) column_sums_add(nt, DY, M, N, DB);                         /* dbias[N] += sum_m dy[m, :] */
    return VLA_OK;
}

/* ---- LayerNorm ---- */

static vla_status cpu_layernorm_forward(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean,
                                        size_t mean_off, vla_buffer *rstd, size_t rstd_off, const vla_buffer *x,
                                        size_t x_off, const vla_buffer *weight, size_t weight_off,
                                        const vla_buffer *bias, size_t bias_off, int M, int C, float eps) {
    float *Y = fptr(y, y_off), *MEAN = fptr(mean, mean_off), *RSTD = fptr(rstd, rstd_off);
    const float *X = cfptr(x, x_off), *w = cfptr(weight, weight_off), *bs = cfptr(bias, bias_off);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if ((size_t)M * C >= PAR_MIN) schedule(static)
    for (int m = 0; m < M; m++) {
        const float *xr = X + (size_t)m * C;
        float *yr = Y + (size_t)m * C;
        /* Two passes (mean, then the centred squares): no cancellation for rows far from 0. */
        double s = 0.0;
        for (int i = 0; i < C; i++) s += xr[i];
        const float mu = (float)(s / C);
        double ss = 0.0;
        for (int i = 0; i < C; i++) {
            const double d = (double)xr[i] - mu;
            ss += d * d;
        }
        const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs * w[i] + bs[i];
        if (MEAN) MEAN[m] = mu;
        if (RSTD) RSTD[m] = rs;
    }
    return VLA_OK;
}

/* With n_i = (x_i - mean) rstd and g_i = w_i dy_i (per row, C columns):
 *   dx_i += rstd (g_i - mean_j g_j - n_i mean_j(g_j n_j))
 *   dweight_i += sum over rows of dy_i n_i;  dbias_i += sum over rows of dy_i. */
static vla_status cpu_layernorm_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                         size_t dweight_off, vla_buffer *dbias, size_t dbias_off,
                                         const vla_buffer *dy, size_t dy_off, const vla_buffer *x, size_t x_off,
                                         const vla_buffer *weight, size_t weight_off, const vla_buffer *mean,
                                         size_t mean_off, const vla_buffer *rstd, size_t rstd_off, int M, int C) {
    float *DX = fptr(dx, dx_off), *DW = fptr(dweight, dweight_off), *DB = fptr(dbias, dbias_off);
    const float *DY = cfptr(dy, dy_off), *X = cfptr(x, x_off), *w = cfptr(weight, weight_off);
    const float *MEAN = cfptr(mean, mean_off), *RSTD = cfptr(rstd, rstd_off);
    const int nt = cpu_max_threads(b);
    const int par = (size_t)M * C >= PAR_MIN;
    if (DX) {
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
        for (int m = 0; m < M; m++) {
            const float *xr = X + (size_t)m * C, *dyr = DY + (size_t)m * C;
            const float mu = MEAN[m], rs = RSTD[m];
            double sg = 0.0, sgn = 0.0;
            for (int i = 0; i < C; i++) {
                const float g = w[i] * dyr[i];
                sg += g;
                sgn += (double)g * ((xr[i] - mu) * rs);
            }
            const float mg = (float)(sg / C), mgn = (float)(sgn / C);
            float *dxr = DX + (size_t)m * C;
            for (int i = 0; i < C; i++) {
                const float n = (xr[i] - mu) * rs;
                dxr[i] += rs * (w[i] * dyr[i] - mg - n * mgn);
            }
        }
    }
    if (DW || DB) {
        /* Column blocks: each thread owns its columns of dweight and dbias. */
        const int nb = (C + COLS - 1) / COLS;
#pragma omp parallel for num_threads(nt) if (par && nb > 1) schedule(static)
        for (int cb = 0; cb < nb; cb++) {
            const int c0 = cb * COLS, c1 = c0 + COLS < C ? c0 + COLS : C;
            double aw[COLS] = {0}, ab[COLS] = {0};
            for (int m = 0; m < M; m++) {
                const float *xr = X + (size_t)m * C, *dyr = DY + (size_t)m * C;
                const float mu = MEAN[m], rs = RSTD[m];
                for (int i = c0; i < c1; i++) {
                    aw[i - c0] += (double)dyr[i] * ((xr[i] - mu) * rs);
                    ab[i - c0] += dyr[i];
                }
            }
            for (int i = c0; i < c1; i++) {
                if (DW) DW[i] += (float)aw[i - c0];
                if (DB) DB[i] += (float)ab[i - c0];
            }
        }
    }
    return VLA_OK;
}

/* ---- embeddings ---- */

/* The first token outside 0..V-1 (or -1 when all are inside): checked before anything is written. */
static int64_t bad_token(const int32_t *tok, size_t n, int V, int allow_ignore) {
    for (size_t i = 0; i < n; i++)
        if (tok[i] >= V || tok[i] < (allow_ignore ? -1 : 0)) return (int64_t)i;
    return -1;
}

static vla_status cpu_embedding_forward(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                        size_t tokens_off, const vla_buffer *wte, size_t wte_off,
                                        const vla_buffer *wpe, size_t wpe_off, int B, int T, int C, int V) {
    float *O = fptr(out, out_off);
    const int32_t *tok = iptr(tokens, tokens_off);
    const float *E = cfptr(wte, wte_off), *P = cfptr(wpe, wpe_off);
    const size_t BT = (size_t)B * T;
    const int64_t bad = bad_token(tok, BT, V, 0);
    if (bad >= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "vla_nn_embedding_forward: tokens[%lld] = %d is outside 0..%d",
                        (long long)bad, tok[bad], V - 1);
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (BT * C >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < BT; i++) {
        float *o = O + i * C;
        const float *e = E + (size_t)tok[i] * C;
        if (P) {
            const float *p = P + (i % (size_t)T) * C; /* row i is (b, t = i mod T) */
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            memcpy(o, e, sizeof(float) * C);
        }
    }
    return VLA_OK;
}

static vla_status cpu_embedding_backward(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                         size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                         const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V) {
    float *DE = fptr(dwte, dwte_off), *DP = fptr(dwpe, dwpe_off);
    const float *DO = cfptr(dout, dout_off);
    const int32_t *tok = iptr(tokens, tokens_off);
    const size_t BT = (size_t)B * T;
    const int64_t bad = bad_token(tok, BT, V, 0);
    if (bad >= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "vla_nn_embedding_backward: tokens[%lld] = %d is outside 0..%d",
                        (long long)bad, tok[bad], V - 1);
    const int nt = cpu_max_threads(b);
    const int par = BT * C >= PAR_MIN;
    if (DE) {
        /* Scatter-add without atomics: thread i owns the vocabulary rows [V i / nt, V (i+1) / nt)
         * and walks every position in order, so repeated tokens sum in a fixed order. */
        const int parts = par ? (V < nt ? V : nt) : 1;
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
        for (int pi = 0; pi < parts; pi++) {
            const int v0 = (int)((int64_t)V * pi / parts), v1 = (int)((int64_t)V * (pi + 1) / parts);
            for (size_t i = 0; i < BT; i++) {
                if (tok[i] < v0 || tok[i] >= v1) continue;
                float *de = DE + (size_t)tok[i] * C;
                const float *d = DO + i * C;
                for (int c = 0; c < C; c++) de[c] += d[c];
            }
        }
    }
    if (DP) {
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
        for (int t = 0; t < T; t++) {
            float *dp = DP + (size_t)t * C;
            for (int bb = 0; bb < B; bb++) {
                const float *d = DO + ((size_t)bb * T + t) * C;
                for (int c = 0; c < C; c++) dp[c] += d[c];
            }
        }
    }
    return VLA_OK;
}

/* ---- loss ---- */

/* Rows are split into `parts` contiguous ranges; each part's loss is summed in double and the
 * parts are added in order. */
static vla_status cpu_crossentropy(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                                   size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                                   const vla_buffer *targets, size_t targets_off, int M, int V) {
    float *L = fptr(loss, loss_off), *DL = fptr(dlogits, dlogits_off);
    const float *Z = cfptr(logits, logits_off);
    const int32_t *tg = iptr(targets, targets_off);
    const int64_t bad = bad_token(tg, (size_t)M, V, 1);
    if (bad >= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER,
                        "vla_nn_crossentropy: targets[%lld] = %d is outside 0..%d (or -1: no target)", (long long)bad,
                        tg[bad], V - 1);
    int64_t valid = 0;
    for (int m = 0; m < M; m++) valid += tg[m] >= 0;
    const double inv = valid ? 1.0 / (double)valid : 0.0;

    const int nt = cpu_max_threads(b);
    int parts = (size_t)M * V >= PAR_MIN ? (M < nt ? M : nt) : 1;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    double part_loss[MAX_PARTS];
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
    for (int pi = 0; pi < parts; pi++) {
        const int m0 = (int)part_start((size_t)M, parts, pi), m1 = (int)part_start((size_t)M, parts, pi + 1);
        double acc = 0.0;
        for (int m = m0; m < m1; m++) {
            const float *z = Z + (size_t)m * V;
            float *dz = DL ? DL + (size_t)m * V : NULL;
            const int t = tg[m];
            if (t < 0) {
                if (dz) memset(dz, 0, sizeof(float) * V);
                continue;
            }
            /* log-sum-exp around the row's maximum. Everything read from z is read before dz (which
             * may be z: in place) is written. */
            float mx = z[0];
            for (int j = 1; j < V; j++) mx = z[j] > mx ? z[j] : mx;
            double se = 0.0;
            for (int j = 0; j < V; j++) se += exp((double)z[j] - mx);
            acc += mx + log(se) - z[t]; /* -log softmax(z)[t] */
            if (dz)
                for (int j = 0; j < V; j++) { /* (softmax - onehot) / |P|, the difference in double */
                    const double pj = exp((double)z[j] - mx) / se;
                    dz[j] = (float)((j == t ? pj - 1.0 : pj) * inv);
                }
        }
        part_loss[pi] = acc;
    }
    if (L) {
        double total = 0.0;
        for (int pi = 0; pi < parts; pi++) total += part_loss[pi];
        L[0] = (float)(total * inv);
    }
    return VLA_OK;
}

/* ---- optimiser ---- */

static vla_status cpu_global_norm(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x,
                                  size_t x_off, size_t n) {
    float *NRM = fptr(norm, norm_off);
    const float *X = cfptr(x, x_off);
    const int nt = cpu_max_threads(b);
    int parts = n >= PAR_MIN ? nt : 1;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    double part[MAX_PARTS];
#pragma omp parallel for num_threads(parts) if (parts > 1) schedule(static)
    for (int pi = 0; pi < parts; pi++) {
        const size_t i0 = part_start(n, parts, pi), i1 = part_start(n, parts, pi + 1);
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)X[i] * X[i];
        part[pi] = s;
    }
    double s = 0.0;
    for (int pi = 0; pi < parts; pi++) s += part[pi];
    NRM[0] = (float)sqrt(s);
    return VLA_OK;
}

/* torch.optim.AdamW (_single_tensor_adamw, not capturable) step by step: the scalars in double as
 * Python computes them, each tensor operation in float in torch's order. */
static vla_status cpu_adamw_step(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                                 vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                                 const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p) {
    float *P = fptr(param, param_off), *Mm = fptr(m, m_off), *Vv = fptr(v, v_off);
    const float *G = cfptr(grad, grad_off);
    /* clip_grad_norm_: coef = max_norm / (total_norm + 1e-6) in float, clamped to 1. */
    float clip = 1.0f;
    if (norm) {
        const float c = (float)p->max_norm / (cfptr(norm, norm_off)[0] + 1e-6f);
        clip = c < 1.0f ? c : 1.0f;
    }
    const double t = (double)p->step;
    const float decay = (float)(1.0 - p->lr * p->weight_decay);
    const float w1 = (float)(1.0 - p->beta1); /* exp_avg.lerp_(grad, 1 - beta1) */
    const float b2 = (float)p->beta2, w2 = (float)(1.0 - p->beta2);
    const float step_size = (float)(p->lr / (1.0 - pow(p->beta1, t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(p->beta2, t));
    const float eps = (float)p->eps;
    const int nt = cpu_max_threads(b);
#pragma omp parallel for num_threads(nt) if (n >= PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = G[i] * clip;
        float pi = P[i] * decay;                                          /* param.mul_(1 - lr wd) */
        const float mi = w1 < 0.5f ? Mm[i] + w1 * (g - Mm[i])              /* torch's lerp: two forms */
                                   : g - (g - Mm[i]) * (1.0f - w1);
        const float vi = Vv[i] * b2 + w2 * g * g;                          /* mul_(beta2).addcmul_ */
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi = pi + (-step_size * mi) / denom;                               /* addcdiv_(value = -step_size) */
        P[i] = pi, Mm[i] = mi, Vv[i] = vi;
    }
    return VLA_OK;
}

const vla_nn_iface vla_cpu_nn_iface = {
    .fill = cpu_fill,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .sigmoid_forward = cpu_sigmoid_forward,
    .sigmoid_backward = cpu_sigmoid_backward,
    .add_forward = cpu_add_forward,
    .add_backward = cpu_add_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .crossentropy = cpu_crossentropy,
    .global_norm = cpu_global_norm,
    .adamw_step = cpu_adamw_step,
};
