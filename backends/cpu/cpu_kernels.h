/* CPU backend internals: one head of one sequence, prepared and contiguous.
 *
 * The dispatcher (cpu_backend.c) gathers each (batch, head) slice of the [B, T, H, D]
 * inputs into contiguous [T, D] arrays, applies the feature map and the normalisations
 * VLA-MATH 1 defines, and hands the kernels below a cpu_head. Kernels update the states in
 * place, in the library's storage layout: ST is S transposed ([dk][dv]), A is [dk][dk]. */
#ifndef VLA_CPU_KERNELS_H
#define VLA_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "vla/vla.h"

typedef struct cpu_head {
    int T, dk, dv;
    int64_t t0;         /* absolute position of token 0 */
    const float *q;     /* [T, dk] q~ = phi(q) */
    const float *kf;    /* [T, dk] k~ = phi(k) (linear's key; VLA's normaliser sums it) */
    const float *kh;    /* [T, dk] k^ = normalize(k~) (delta, vla; delta-paper: normalize(k)) */
    const float *u;     /* [T, dk] s_u * normalize(u) or s_u * k^ (vla) */
    const float *v;     /* [T, dv] */
    const float *beta;  /* [T] or NULL (delta) */
    const float *g;     /* [T] or NULL (delta); [T, dv] or NULL (delta-paper) */
    float *o;           /* [T, dv] */
    float *ST;          /* [dk, dv] state in/out */
    float *A;           /* [dk, dk] state in/out (vla) */
    float *n;           /* [dk] state in/out (linear; vla with normalised output) */
} cpu_head;

typedef struct cpu_params {
    int chunk;          /* C */
    int segment_chunks; /* two-level: chunks per segment (0 = choose) */
    float eps;
    int refresh;        /* R */
    float rho;
    int normalize;      /* vla: normalised output */
    float scale;        /* softmax */
    int inner_threads;  /* threads a kernel may use inside one head (1 when heads run in parallel) */
} cpu_params;

/* Every kernel computes one head with the work memory its *_work function asks for (floats),
 * allocated by the caller before anything is written, so a kernel never fails. */
typedef void (*cpu_kernel_fn)(const cpu_head *h, const cpu_params *p, float *work);
typedef size_t (*cpu_work_fn)(int T, int dk, int dv, const cpu_params *p);

void cpu_softmax_fused(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_softmax_fused_work(int T, int dk, int dv, const cpu_params *p);
void cpu_linear_sequential(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_linear_sequential_work(int T, int dk, int dv, const cpu_params *p);
void cpu_linear_chunked(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_linear_chunked_work(int T, int dk, int dv, const cpu_params *p);
void cpu_delta_sequential(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_delta_sequential_work(int T, int dk, int dv, const cpu_params *p);
void cpu_delta_chunked(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_delta_chunked_work(int T, int dk, int dv, const cpu_params *p);
void cpu_delta_paper_sequential(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_delta_paper_sequential_work(int T, int dk, int dv, const cpu_params *p);
void cpu_vla_sequential(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_vla_sequential_work(int T, int dk, int dv, const cpu_params *p);
void cpu_vla_scan(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_vla_scan_work(int T, int dk, int dv, const cpu_params *p);
void cpu_vla_chunked(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_vla_chunked_work(int T, int dk, int dv, const cpu_params *p);
void cpu_vla_two_level(const cpu_head *h, const cpu_params *p, float *work);
size_t cpu_vla_two_level_work(int T, int dk, int dv, const cpu_params *p);

/* ---- small dense linear algebra (cpu_linalg.c), row-major ---- */

/* C[m x n] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T (ta, tb), like cblas_sgemm. */
void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
              int ldb, float beta, float *C, int ldc);
/* The same in double (cblas_dgemm with VLA_HAVE_CBLAS): VLA's chunked A part (cpu_vla.c). */
void cpu_gemm_d(int ta, int tb, int m, int n, int k, double alpha, const double *A, int lda, const double *B,
                int ldb, double beta, double *C, int ldc);
float cpu_dot(const float *x, const float *y, int n);
/* y[n] = x^T M for M [k, n] (a row combination: S k with S stored transposed). */
void cpu_vecmat(const float *x, const float *M, int k, int n, float *y);
/* y[k] = M x for M [k, n]. */
void cpu_matvec(const float *M, const float *x, int k, int n, float *y);

/* Lower Cholesky of the SPD c x c matrix G in place (L in the lower triangle). Returns 0, or -1
 * when a pivot is not positive and finite (G not numerically SPD). */
int cpu_cholesky(float *G, int c, int ldg);
/* X[c x n] <- L^{-1} X for lower-triangular L (unit diagonal if `unit`). */
void cpu_trsm_lower(const float *L, int ldl, int unit, float *X, int c, int n, int ldx);

/* Affine maps on the transposed state: X -> M X + N, M [dk, dk], N [dk, dv], stored packed as
 * one array of dk*dk + dk*dv floats. Used by the scan (per token) and the two-level (per
 * segment) algorithms. */
void cpu_affine_identity(float *e, int dk, int dv);
/* second <- first then second: (M2 M1, M2 N1 + N2). tmp holds dk*dk + dk*dv floats. */
void cpu_affine_compose(const float *first, float *second, int dk, int dv, float *tmp);
/* In-place inclusive Brent-Kung (Blelloch up-sweep / down-sweep) scan over n maps of
 * `stride` floats each: afterwards e[i] = e[0] then e[1] ... then e[i]. */
void cpu_affine_scan(float *e, int n, int dk, int dv, float *tmp);
/* ST <- M ST + N. tmp holds dk*dv floats. */
void cpu_affine_apply(const float *e, float *ST, int dk, int dv, float *tmp);

/* ---- the generalised delta rule on one chunk (cpu_linalg.c) ----
 * Storage orientation: ST_t = g_t ST_{t-1} + w_t e_t^T with
 *   e_t = v_t - g_t ST_{t-1}^T kr_t   (residual = 1: delta, vla)    e_t = v_t  (residual = 0: linear)
 *   o_t = ST_t^T q_t.
 * w are the write directions (vla: a_t; delta: beta_t k^_t; linear: k~_t), kr the read keys.
 * g may be NULL (no decay). O may be NULL (state only). Work: cpu_chunk_work floats. */
size_t cpu_chunk_work(int c, int dk, int dv);
void cpu_chunk_step(int c, int dk, int dv, int residual, const float *kr, const float *w, const float *v,
                    const float *q, const float *g, float *ST, float *O, float *work);

/* VLA output normaliser, shared by every VLA algorithm and linear attention: o_t /= den_t with
 * n_t = n_{t-1} + k~_t, den = max(q~ . n, eps) (vla) or q~ . n + eps (linear). */
void cpu_normalize_output(const cpu_head *h, float eps, int linear_style);

/* ---- shared by the forward's dispatcher (cpu_backend.c) and the backward's (cpu_grad_backend.c) ---- */

/* Offset of row (b, t, h) of a [B, T, H, D] tensor: where one head's token lives. */
static inline size_t cpu_row_offset(const vla_attn_args *a, int b, int t, int h, int D) {
    return (((size_t)b * a->T + t) * a->H + h) * (size_t)D;
}
/* Threads the backend runs with (set_threads, or OpenMP's default). */
int cpu_max_threads(const vla_backend *b);
/* How a dispatcher spreads its threads over `heads` (batch, head) pairs: `outer` threads over the
 * heads, and `inner` inside one head when the heads are fewer than the threads. */
void cpu_split_threads(const vla_backend *b, int heads, int *outer, int *inner);
/* The dispatcher's work memory: `per_head` elements of `elem` bytes for each of `threads` heads
 * at once, 64-byte aligned (free it with free). Taken before anything is written, so that a
 * failure (VLA_ERR_OUT_OF_MEMORY, under `fn`'s name) leaves the caller's buffers untouched. */
vla_status cpu_head_work_alloc(vla_backend *b, const char *fn, const vla_attn_desc *d, int T, size_t per_head,
                               size_t elem, int threads, void **mem);
/* The backward op (cpu_grad_backend.c), on validated and resolved arguments. */
vla_status cpu_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g);

#endif
