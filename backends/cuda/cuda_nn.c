/* The CUDA backend's nn ops (vla/nn.h; table in core/nn_impl.h; kernels in kernels/cuda/vla_nn.cu).
 * Arguments arrive validated (core/nn.c); each slot enqueues its kernels on the handle's stream
 * and returns: no call waits for the device, so the calls of a training step run back to back
 * and can be captured into a CUDA graph and replayed (the kernels read their inputs when they
 * run). The CPU backend (backends/cpu/cpu_nn.c) is the reference for every op.
 *
 * Matrix products: cuBLAS SGEMM where the build has it (VLA_HAVE_CUBLAS), row-major through the
 * usual transposition (C^T = op(B)^T op(A)^T in column-major terms), in FP32: cuBLAS' default
 * math mode, never TF32 unless VLA_CUDA_TF32=1 asks for it, so that a model trained here and
 * on the CPU agree closely (TF32 keeps 10 bits of mantissa: products ~1e-3 off). Without cuBLAS
 * (the CPU emulator) or with VLA_CUDA_NN_GEMM=own: a plain tiled FP32 kernel (vla_nn.cu).
 *
 * Determinism: no float atomics; every reduction is cut by the sizes alone and summed in a fixed
 * order, so a step gives the same bits on every run (cuBLAS: on the same GPU model and toolkit).
 *
 * Bad token ids and targets: the kernels find them (they never read or write outside a tensor
 * because of one: a bad token's output row is NaN, a bad target's row is ignored) and record the
 * first bad position in a device word per op kind, copied after the kernel into pinned host
 * memory, still without a wait. The error is reported once the host waits for the stream anyway:
 * vla_backend_synchronize and vla_buffer_download return VLA_ERR_INVALID_PARAMETER naming the op
 * and the position (the download's data is still copied), and the record is cleared.
 *
 * Scratch: the bias, LayerNorm-parameter, norm and loss reductions and the token sort need device
 * scratch, kept per handle and grown when a call needs more (growing waits for the stream; a
 * training step sizes it on its first run, so a step captured after one run never grows it). */
#include "cuda_nn.h"
#include "vla_cuda.h"

#include <cuda_runtime_api.h>
#ifdef VLA_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ops that read int32 tensors, each with its error word. */
enum { ERR_EMB_F, ERR_EMB_B, ERR_CE, N_ERR };
static const char *const err_fn[N_ERR] = {"vla_nn_embedding_forward", "vla_nn_embedding_backward",
                                          "vla_nn_crossentropy"};
#define ERR_NONE 0xffffffffffffffffull

struct vla_cuda_nn {
    void *scratch;
    size_t scratch_bytes;
    unsigned long long *err_dev;  /* [N_ERR] on the device; all ones: nothing found */
    unsigned long long *err_host; /* [N_ERR] pinned: the words as of the last copy */
    int err_V[N_ERR];             /* V of the latest call of each kind (for the message) */
    int gemm_own;                 /* 1: the plain kernel instead of cuBLAS */
#ifdef VLA_HAVE_CUBLAS
    cublasHandle_t blas; /* NULL until the first product */
#endif
};

typedef struct call {
    vla_backend *b;
    const char *fn;
    vla_cuda_nn *s;
    void *st; /* cudaStream_t */
} call;

static vla_status cu_fail(vla_backend *b, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    if (e == cudaErrorInvalidConfiguration)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: the sizes are too large for the cuda backend's grids", what);
    const vla_status s = e == cudaErrorMemoryAllocation ? VLA_ERR_OUT_OF_MEMORY : VLA_ERR_BACKEND;
    return vla_fail(b, s, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* A launcher's result (0 or a cudaError_t) to a status. */
static vla_status done(const call *c, int e) { return e ? cu_fail(c->b, (cudaError_t)e, c->fn) : VLA_OK; }

#define TRY(expr)                       \
    do {                                \
        vla_status s_ = (expr);         \
        if (s_ != VLA_OK) return s_;    \
    } while (0)
#define TRY_CU(c, expr)                        \
    do {                                       \
        int e_ = (int)(expr);                  \
        if (e_) return done((c), e_);          \
    } while (0)

static vla_status state_new(vla_backend *b, const char *fn, void *stream, vla_cuda_nn **out) {
    vla_cuda_nn *s = calloc(1, sizeof *s);
    if (!s) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    cudaError_t e = cudaMalloc((void **)&s->err_dev, N_ERR * sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMallocHost((void **)&s->err_host, N_ERR * sizeof(unsigned long long));
    if (e == cudaSuccess)
        e = cudaMemsetAsync(s->err_dev, 0xff, N_ERR * sizeof(unsigned long long), (cudaStream_t)stream);
    if (e != cudaSuccess) {
        vla_cuda_nn_free(s);
        return cu_fail(b, e, fn);
    }
    for (int k = 0; k < N_ERR; k++) s->err_host[k] = ERR_NONE;
    const char *g = getenv("VLA_CUDA_NN_GEMM");
#ifdef VLA_HAVE_CUBLAS
    s->gemm_own = g && strcmp(g, "own") == 0;
#else
    (void)g;
    s->gemm_own = 1;
#endif
    *out = s;
    return VLA_OK;
}

/* Every slot starts here: the handle's device, its stream, its nn state (made on first use). */
static vla_status enter(vla_backend *b, const char *fn, call *c) {
    vla_cuda_nn_host h;
    vla_cuda_nn_host_of(b, &h);
    const cudaError_t e = cudaSetDevice(h.device);
    if (e != cudaSuccess) return cu_fail(b, e, fn);
    (void)cudaGetLastError(); /* a stale, non-sticky error must not be blamed on this call */
    if (!*h.state) TRY(state_new(b, fn, h.stream, h.state));
    c->b = b, c->fn = fn, c->s = *h.state, c->st = h.stream;
    return VLA_OK;
}

/* The scratch, grown to `need` bytes. Growing waits for the stream (earlier calls may use it). */
static vla_status scratch(call *c, size_t need, void **out) {
    vla_cuda_nn *s = c->s;
    if (need > s->scratch_bytes) {
        if (s->scratch) {
            const cudaError_t e = cudaStreamSynchronize((cudaStream_t)c->st);
            if (e != cudaSuccess) return cu_fail(c->b, e, c->fn);
            (void)cudaFree(s->scratch);
            s->scratch = NULL, s->scratch_bytes = 0;
        }
        const size_t bytes = need > 4096 ? need : 4096;
        const cudaError_t e = cudaMalloc(&s->scratch, bytes);
        if (e != cudaSuccess) {
            s->scratch = NULL;
            char what[160];
            snprintf(what, sizeof what, "%s: %zu bytes of device scratch", c->fn, bytes);
            return cu_fail(c->b, e, what);
        }
        s->scratch_bytes = bytes;
    }
    *out = s->scratch;
    return VLA_OK;
}

/* After a kernel that checks int32 tensors: its error word to the pinned mirror (no wait). */
static vla_status mirror_err(call *c, int k, int V) {
    c->s->err_V[k] = V;
    const cudaError_t e = cudaMemcpyAsync(c->s->err_host + k, c->s->err_dev + k, sizeof(unsigned long long),
                                          cudaMemcpyDeviceToHost, (cudaStream_t)c->st);
    return e == cudaSuccess ? VLA_OK : cu_fail(c->b, e, c->fn);
}

vla_status vla_cuda_nn_check(vla_backend *b, vla_cuda_nn *s, const char *where) {
    if (!s) return VLA_OK;
    int k = 0;
    while (k < N_ERR && ((volatile unsigned long long *)s->err_host)[k] == ERR_NONE) k++;
    if (k == N_ERR) return VLA_OK;
    const unsigned long long w = s->err_host[k];
    for (int i = 0; i < N_ERR; i++) s->err_host[i] = ERR_NONE;
    vla_cuda_nn_host h;
    vla_cuda_nn_host_of(b, &h);
    (void)cudaMemsetAsync(s->err_dev, 0xff, N_ERR * sizeof(unsigned long long), (cudaStream_t)h.stream);
    (void)cudaGetLastError();
    const unsigned long long index = w >> 32;
    const int value = (int)(int32_t)(uint32_t)(w & 0xffffffffull);
    return vla_fail(b, VLA_ERR_INVALID_PARAMETER,
                    "%s: %s[%s%llu] = %d is outside 0..%d%s (found by the device after the call returned; reported "
                    "by %s, the first wait for the stream; the call's outputs are unspecified)",
                    err_fn[k], k == ERR_CE ? "targets" : "tokens", index == 0xffffffffull ? ">= " : "", index, value,
                    s->err_V[k] - 1, k == ERR_CE ? " (or -1: no target)" : "", where);
}

void vla_cuda_nn_free(vla_cuda_nn *s) {
    if (!s) return;
#ifdef VLA_HAVE_CUBLAS
    if (s->blas) (void)cublasDestroy(s->blas);
#endif
    if (s->scratch) (void)cudaFree(s->scratch);
    if (s->err_dev) (void)cudaFree(s->err_dev);
    if (s->err_host) (void)cudaFreeHost(s->err_host);
    (void)cudaGetLastError();
    free(s);
}

static float *F(vla_buffer *buf, size_t off) { return buf ? (float *)buf->mem + off : NULL; }
static const float *CF(const vla_buffer *buf, size_t off) { return buf ? (const float *)buf->mem + off : NULL; }
static const int32_t *CI(const vla_buffer *buf, size_t off) { return (const int32_t *)buf->mem + off; }

/* ---- matrix products ---- */

#ifdef VLA_HAVE_CUBLAS
static vla_status blas_fail(const call *c, cublasStatus_t st) {
    return vla_fail(c->b, st == CUBLAS_STATUS_ALLOC_FAILED ? VLA_ERR_OUT_OF_MEMORY : VLA_ERR_BACKEND,
                    "%s: cuBLAS status %d (%s): %s", c->fn, (int)st, cublasGetStatusName(st),
                    cublasGetStatusString(st));
}

static vla_status blas_handle(const call *c) {
    vla_cuda_nn *s = c->s;
    if (s->blas) return VLA_OK;
    cublasStatus_t st = cublasCreate(&s->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        s->blas = NULL;
        return blas_fail(c, st);
    }
    const char *tf = getenv("VLA_CUDA_TF32");
    const cublasMath_t mode = tf && tf[0] == '1' ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if ((st = cublasSetStream(s->blas, (cudaStream_t)c->st)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetMathMode(s->blas, mode)) != CUBLAS_STATUS_SUCCESS) {
        (void)cublasDestroy(s->blas);
        s->blas = NULL;
        return blas_fail(c, st);
    }
    return VLA_OK;
}
#endif

/* C[m, n] = op(A) op(B) + beta C, row-major (the CPU backend's cpu_gemm contract). */
static vla_status gemm(const call *c, int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
#ifdef VLA_HAVE_CUBLAS
    if (!c->s->gemm_own) {
        TRY(blas_handle(c));
        /* Row-major X is column-major X^T: C^T [n, m] = op(B)^T op(A)^T. */
        const float alpha = 1.0f;
        const cublasStatus_t st =
            cublasSgemm(c->s->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B,
                        ldb, A, lda, &beta, C, ldc);
        return st == CUBLAS_STATUS_SUCCESS ? VLA_OK : blas_fail(c, st);
    }
#endif
    return done(c, vlacu_nn_gemm(ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, c->st));
}

/* ---- the slots ---- */

static vla_status cu_fill(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value) {
    call c = {0};
    TRY(enter(b, "vla_nn_fill", &c));
    return done(&c, vlacu_nn_fill(F(x, x_off), n, value, c.st));
}

static vla_status cu_matmul_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                    const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off, int M,
                                    int N, int K) {
    call c = {0};
    TRY(enter(b, "vla_nn_matmul_forward", &c));
    float *Y = F(y, y_off);
    const float *bs = CF(bias, bias_off);
    /* With a bias, y starts as bias in every row and the product adds to it (the CPU's order). */
    if (bs) TRY_CU(&c, vlacu_nn_rows_set(Y, bs, M, N, c.st));
    return gemm(&c, 0, 1, M, N, K, CF(x, x_off), K, CF(W, W_off), K, bs ? 1.0f : 0.0f, Y, N); /* y (+)= x W^T */
}

static vla_status cu_matmul_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                     vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                     const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M, int N,
                                     int K) {
    call c = {0};
    TRY(enter(b, "vla_nn_matmul_backward", &c));
    const float *DY = CF(dy, dy_off);
    if (dx) TRY(gemm(&c, 0, 0, M, K, N, DY, N, CF(W, W_off), K, 1.0f, F(dx, dx_off), K)); /* dx += dy W */
    if (dW) TRY(gemm(&c, 1, 0, N, K, M, DY, N, CF(x, x_off), K, 1.0f, F(dW, dW_off), K)); /* dW += dy^T x */
    if (dbias) {
        void *ws = NULL;
        TRY(scratch(&c, vlacu_nn_colsum_scratch(M, N), &ws));
        TRY_CU(&c, vlacu_nn_colsum_add(F(dbias, dbias_off), DY, M, N, ws, c.st)); /* dbias += sum_m dy[m, :] */
    }
    return VLA_OK;
}

static vla_status cu_layernorm_forward(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean,
                                       size_t mean_off, vla_buffer *rstd, size_t rstd_off, const vla_buffer *x,
                                       size_t x_off, const vla_buffer *weight, size_t weight_off,
                                       const vla_buffer *bias, size_t bias_off, int M, int C, float eps) {
    call c = {0};
    TRY(enter(b, "vla_nn_layernorm_forward", &c));
    return done(&c, vlacu_nn_layernorm_forward(F(y, y_off), F(mean, mean_off), F(rstd, rstd_off), CF(x, x_off),
                                               CF(weight, weight_off), CF(bias, bias_off), M, C, eps, c.st));
}

static vla_status cu_layernorm_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                        size_t dweight_off, vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy,
                                        size_t dy_off, const vla_buffer *x, size_t x_off, const vla_buffer *weight,
                                        size_t weight_off, const vla_buffer *mean, size_t mean_off,
                                        const vla_buffer *rstd, size_t rstd_off, int M, int C) {
    call c = {0};
    TRY(enter(b, "vla_nn_layernorm_backward", &c));
    void *ws = NULL;
    if (dweight || dbias) TRY(scratch(&c, vlacu_nn_layernorm_scratch(M, C), &ws));
    return done(&c, vlacu_nn_layernorm_backward(F(dx, dx_off), F(dweight, dweight_off), F(dbias, dbias_off),
                                                CF(dy, dy_off), CF(x, x_off), CF(weight, weight_off),
                                                CF(mean, mean_off), CF(rstd, rstd_off), M, C, ws, c.st));
}

static vla_status cu_gelu_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                  size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_gelu_forward", &c));
    return done(&c, vlacu_nn_gelu_forward(F(y, y_off), CF(x, x_off), n, c.st));
}

static vla_status cu_gelu_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                   size_t dy_off, const vla_buffer *x, size_t x_off, size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_gelu_backward", &c));
    return done(&c, vlacu_nn_gelu_backward(F(dx, dx_off), CF(dy, dy_off), CF(x, x_off), n, c.st));
}

static vla_status cu_sigmoid_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                     size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_sigmoid_forward", &c));
    return done(&c, vlacu_nn_sigmoid_forward(F(y, y_off), CF(x, x_off), n, c.st));
}

static vla_status cu_sigmoid_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                      size_t dy_off, const vla_buffer *y, size_t y_off, size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_sigmoid_backward", &c));
    return done(&c, vlacu_nn_sigmoid_backward(F(dx, dx_off), CF(dy, dy_off), CF(y, y_off), n, c.st));
}

static vla_status cu_add_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                                 const vla_buffer *cc, size_t c_off, size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_add_forward", &c));
    return done(&c, vlacu_nn_add_forward(F(y, y_off), CF(a, a_off), CF(cc, c_off), n, c.st));
}

static vla_status cu_add_backward(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                                  const vla_buffer *dy, size_t dy_off, size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_add_backward", &c));
    if (!da && !dc) return VLA_OK;
    return done(&c, vlacu_nn_add_backward(F(da, da_off), F(dc, dc_off), CF(dy, dy_off), n, c.st));
}

static vla_status cu_embedding_forward(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                       size_t tokens_off, const vla_buffer *wte, size_t wte_off,
                                       const vla_buffer *wpe, size_t wpe_off, int B, int T, int C, int V) {
    call c = {0};
    TRY(enter(b, "vla_nn_embedding_forward", &c));
    TRY_CU(&c, vlacu_nn_embedding_forward(F(out, out_off), CI(tokens, tokens_off), CF(wte, wte_off), CF(wpe, wpe_off),
                                          B, T, C, V, c.s->err_dev + ERR_EMB_F, c.st));
    return mirror_err(&c, ERR_EMB_F, V);
}

static vla_status cu_embedding_backward(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                        size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                        const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V) {
    call c = {0};
    TRY(enter(b, "vla_nn_embedding_backward", &c));
    if ((long long)B * T > INT_MAX / 2)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: B*T = %lld tokens are more than the cuda backend's sort takes (%d)",
                        c.fn, (long long)B * T, INT_MAX / 2);
    void *ws = NULL;
    TRY(scratch(&c, vlacu_nn_embedding_scratch(B * T), &ws));
    TRY_CU(&c, vlacu_nn_embedding_backward(F(dwte, dwte_off), F(dwpe, dwpe_off), CF(dout, dout_off),
                                           CI(tokens, tokens_off), B, T, C, V, ws, c.s->err_dev + ERR_EMB_B, c.st));
    return mirror_err(&c, ERR_EMB_B, V);
}

static vla_status cu_crossentropy(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                                  size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                                  const vla_buffer *targets, size_t targets_off, int M, int V) {
    call c = {0};
    TRY(enter(b, "vla_nn_crossentropy", &c));
    void *ws = NULL;
    TRY(scratch(&c, vlacu_nn_crossentropy_scratch(M), &ws));
    TRY_CU(&c, vlacu_nn_crossentropy(F(loss, loss_off), F(dlogits, dlogits_off), CF(logits, logits_off),
                                     CI(targets, targets_off), M, V, ws, c.s->err_dev + ERR_CE, c.st));
    return mirror_err(&c, ERR_CE, V);
}

static vla_status cu_global_norm(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x, size_t x_off,
                                 size_t n) {
    call c = {0};
    TRY(enter(b, "vla_nn_global_norm", &c));
    void *ws = NULL;
    TRY(scratch(&c, vlacu_nn_global_norm_scratch(n), &ws));
    return done(&c, vlacu_nn_global_norm(F(norm, norm_off), CF(x, x_off), n, ws, c.st));
}

/* The scalars as cpu_adamw_step computes them (in double, then float); the kernel applies them in
 * torch's order. */
static vla_status cu_adamw_step(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                                vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                                const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p) {
    call c = {0};
    TRY(enter(b, "vla_nn_adamw_step", &c));
    const double t = (double)p->step;
    vlacu_adamw h;
    h.decay = (float)(1.0 - p->lr * p->weight_decay);
    h.w1 = (float)(1.0 - p->beta1);
    h.beta2 = (float)p->beta2, h.w2 = (float)(1.0 - p->beta2);
    h.step_size = (float)(p->lr / (1.0 - pow(p->beta1, t)));
    h.bc2_sqrt = (float)sqrt(1.0 - pow(p->beta2, t));
    h.eps = (float)p->eps;
    h.max_norm = (float)p->max_norm;
    return done(&c, vlacu_nn_adamw(F(param, param_off), F(m, m_off), F(v, v_off), CF(grad, grad_off),
                                   CF(norm, norm_off), n, &h, c.st));
}

const vla_nn_iface vla_cuda_nn_iface = {
    .fill = cu_fill,
    .matmul_forward = cu_matmul_forward,
    .matmul_backward = cu_matmul_backward,
    .layernorm_forward = cu_layernorm_forward,
    .layernorm_backward = cu_layernorm_backward,
    .gelu_forward = cu_gelu_forward,
    .gelu_backward = cu_gelu_backward,
    .sigmoid_forward = cu_sigmoid_forward,
    .sigmoid_backward = cu_sigmoid_backward,
    .add_forward = cu_add_forward,
    .add_backward = cu_add_backward,
    .embedding_forward = cu_embedding_forward,
    .embedding_backward = cu_embedding_backward,
    .crossentropy = cu_crossentropy,
    .global_norm = cu_global_norm,
    .adamw_step = cu_adamw_step,
};
