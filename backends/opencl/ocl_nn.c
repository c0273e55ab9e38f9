/* The nn ops (vla/nn.h, table in core/nn_impl.h) on OpenCL. Arguments arrive validated
 * (core/nn.c); the CPU backend (backends/cpu/cpu_nn.c) defines the semantics these follow.
 *
 * - Matrix products: CLBlast's SGEMM, which takes element offsets into the flat buffers as they
 *   are (row-major, the transposes as flags). In a build without CLBlast, or with
 *   VLA_OPENCL_NO_CLBLAST=1, a 16 x 16 tiled kernel of nn.cl (nn_gemm) does them instead.
 * - Everything else: the kernels of kernels/opencl/nn.cl, one program built at the handle's
 *   first nn call (every kernel is created then, so a build failure comes before any write).
 * - Reductions (bias, LayerNorm parameter and position-embedding gradients, the loss, the
 *   norm, the embedding scatter) have one owner per output and a fixed order: no float atomics,
 *   the same bits from run to run on one device. They accumulate in double where the device
 *   has fp64 (as the CPU backend does), else in float.
 * - Token ids and targets out of range (nn.h lets a GPU backend find them after its kernels
 *   ran): the kernels never index with them; they write zeros where the token's data would go
 *   (an embedding row; a cross-entropy row counts as having no target) and record the first
 *   bad position in a device word, which the call reads back (a 4-byte blocking read) and
 *   turns into VLA_ERR_INVALID_PARAMETER naming the position and the value. The outputs are
 *   then unspecified. That read makes these three calls (embedding forward and backward,
 *   cross-entropy) wait for the queue; every other call returns once its work is queued.
 * - The global norm stays on the device; AdamW's kernel reads it there (no round trip). */
#include "nn_impl.h"
#include "ocl_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef VLA_HAVE_CLBLAST
#include <clblast_c.h>
#endif

/* From the generated vla_opencl_kernels.c. */
extern const char *const vla_ocl_source_names[];
extern const char *const vla_ocl_source_texts[];
extern const size_t vla_ocl_source_count;

#define NN_WG 256            /* as nn.cl: the largest work-group, the size of its local arrays */
#define NN_COLS 16           /* as nn.cl: columns per group of the column sums */
#define NN_TILE 16           /* as nn.cl: the fallback GEMM's tile */
#define NN_NOPOS 0xffffffffu /* as nn.cl: no invalid token seen */
#define NN_PARTS 256         /* parts of the global norm's first stage */
#define NN_ROW_GROUPS 65536  /* most groups of a one-group-per-row kernel (they loop beyond) */

typedef enum nn_kid {
    K_GELU_F, K_GELU_B, K_SIG_F, K_SIG_B, K_ADD_F, K_ACC, K_BIAS_ROWS, K_COLSUM, K_GEMM,
    K_LN_F, K_LN_BDX, K_LN_BP, K_EMB_F, K_EMB_COUNT, K_EMB_SCATTER, K_CE_COUNT, K_CE_ROWS,
    K_CE_LOSS, K_SUMSQ, K_NORM_FINAL, K_ADAMW, NK
} nn_kid;

static const char *const kname[NK] = {
    "nn_gelu_fwd", "nn_gelu_bwd", "nn_sigmoid_fwd", "nn_sigmoid_bwd", "nn_add_fwd", "nn_accumulate",
    "nn_bias_rows", "nn_colsum_add", "nn_gemm", "nn_ln_fwd", "nn_ln_bwd_dx", "nn_ln_bwd_params",
    "nn_emb_fwd", "nn_emb_count", "nn_emb_scatter", "nn_ce_count", "nn_ce_rows", "nn_ce_loss",
    "nn_sumsq", "nn_norm_final", "nn_adamw",
};

/* Scratch: ctl = {first invalid position, number of targets}; the embedding counts [V] (int);
 * the per-row losses [M] and the norm's partial sums [NN_PARTS] (acc_t: 8 bytes reserved). */
typedef enum nn_slot { S_CTL, S_COUNT, S_ROWLOSS, S_PART, NS } nn_slot;

struct ocl_nn {
    cl_program prog;
    cl_kernel k[NK];
    size_t wg[NK]; /* the power of two <= NN_WG each kernel runs with (K_GEMM: its max) */
    cl_mem s[NS];
    size_t s_size[NS];
};

void ocl_nn_release(ocl_ctx *ctx) {
    struct ocl_nn *st = ctx->nn;
    if (!st) return;
    for (int i = 0; i < NK; i++)
        if (st->k[i]) clReleaseKernel(st->k[i]);
    for (int i = 0; i < NS; i++)
        if (st->s[i]) clReleaseMemObject(st->s[i]);
    if (st->prog) clReleaseProgram(st->prog);
    free(st);
    ctx->nn = NULL;
}

#define TRY(x)                       \
    do {                             \
        vla_status s_ = (x);         \
        if (s_ != VLA_OK) return s_; \
    } while (0)

static const char *nn_source(void) {
    for (size_t i = 0; i < vla_ocl_source_count; i++)
        if (strcmp(vla_ocl_source_names[i], "nn.cl") == 0) return vla_ocl_source_texts[i];
    return NULL;
}

/* Builds the program and creates every kernel, once per handle. */
static vla_status nn_ready(vla_backend *b, const char *fn) {
    ocl_ctx *ctx = b->context;
    if (ctx->nn && ctx->nn->prog) return VLA_OK;
    if (!ctx->nn) {
        ctx->nn = calloc(1, sizeof *ctx->nn);
        if (!ctx->nn) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    struct ocl_nn *st = ctx->nn;
    const char *text = nn_source();
    if (!text) return vla_fail(b, VLA_ERR_INTERNAL, "%s: opencl: nn.cl is not embedded in this build", fn);
    cl_int err = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(ctx->context, 1, &text, NULL, &err);
    if (err != CL_SUCCESS) return ocl_fail(b, err, "clCreateProgramWithSource", "nn.cl");
    /* No fast-math flags. Correctly rounded divide and sqrt where offered: AdamW then rounds as
     * the CPU backend does (OpenCL's defaults allow 2.5 and 3 ulp). */
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    char opts[128];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2%s%s", ctx->fp64 ? " -DVLA_FP64=1" : "",
             (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
    err = clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[VLA_MSG_LEN] = "";
        clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        clReleaseProgram(prog);
        if (err == CL_OUT_OF_HOST_MEMORY) return ocl_fail(b, err, "clBuildProgram", "nn.cl");
        return vla_fail(b, VLA_ERR_BACKEND, "opencl: building nn.cl failed with %s; build log: %s",
                        ocl_error_name(err), log[0] ? log : "(empty)");
    }
    for (int i = 0; i < NK; i++) {
        cl_kernel k = clCreateKernel(prog, kname[i], &err);
        if (err != CL_SUCCESS) {
            for (int j = 0; j < i; j++) clReleaseKernel(st->k[j]), st->k[j] = NULL;
            clReleaseProgram(prog);
            return ocl_fail(b, err, "clCreateKernel", kname[i]);
        }
        size_t lim = 0;
        clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof lim, &lim, NULL);
        if (!lim || lim > ctx->max_wg) lim = ctx->max_wg;
        size_t wg = 1;
        while (wg * 2 <= lim && wg * 2 <= NN_WG) wg *= 2;
        st->k[i] = k;
        st->wg[i] = i == K_GEMM ? lim : wg;
    }
    for (int i = 0; i < NK; i++)
        if (i != K_GEMM && st->wg[i] < NN_COLS) {
            const size_t w = st->wg[i];
            for (int j = 0; j < NK; j++) clReleaseKernel(st->k[j]), st->k[j] = NULL;
            clReleaseProgram(prog);
            return vla_fail(b, VLA_ERR_UNSUPPORTED,
                            "%s: opencl kernel %s runs only %zu work-items per group on this device; it needs %d", fn,
                            kname[i], w, NN_COLS);
        }
    st->prog = prog;
    return VLA_OK;
}

/* Makes scratch slot `s` hold at least `bytes`. */
static vla_status scratch(vla_backend *b, const char *fn, nn_slot s, size_t bytes) {
    ocl_ctx *ctx = b->context;
    struct ocl_nn *st = ctx->nn;
    if (st->s_size[s] >= bytes) return VLA_OK;
    if (bytes > ctx->max_alloc)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY,
                        "%s: opencl scratch of %zu bytes is more than the device allocates at once", fn, bytes);
    if (st->s[s]) clReleaseMemObject(st->s[s]); /* deferred by OpenCL until queued work is done */
    st->s[s] = NULL;
    st->s_size[s] = 0;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS || !m)
        return ocl_fail(b, err == CL_SUCCESS ? CL_MEM_OBJECT_ALLOCATION_FAILURE : err, "clCreateBuffer",
                        "(nn scratch)");
    st->s[s] = m;
    st->s_size[s] = bytes;
    return VLA_OK;
}

/* ---- launches ---- */

typedef struct nl {
    vla_backend *b;
    nn_kid id;
    cl_kernel k;
    cl_uint n;
    cl_int err; /* first clSetKernelArg error */
} nl;

static nl start(vla_backend *b, nn_kid id) {
    nl l = {b, id, ((ocl_ctx *)b->context)->nn->k[id], 0, CL_SUCCESS};
    return l;
}
static void arg(nl *l, size_t size, const void *v) {
    cl_int e = clSetKernelArg(l->k, l->n++, size, v);
    if (l->err == CL_SUCCESS) l->err = e;
}
static void a_mem(nl *l, cl_mem m) { arg(l, sizeof m, &m); }
static void a_buf(nl *l, const vla_buffer *buf) { /* absent (optional) tensors bind a dummy */
    a_mem(l, buf ? (cl_mem)buf->mem : ((ocl_ctx *)l->b->context)->dummy);
}
static void a_off(nl *l, size_t v) {
    const cl_ulong u = (cl_ulong)v;
    arg(l, sizeof u, &u);
}
static void a_int(nl *l, int v) {
    const cl_int i = v;
    arg(l, sizeof i, &i);
}
static void a_flt(nl *l, float v) { arg(l, sizeof v, &v); }

static vla_status launch_nd(nl *l, const size_t global[2], const size_t local[2], cl_uint dims) {
    ocl_ctx *ctx = l->b->context;
    if (l->err != CL_SUCCESS) return ocl_fail(l->b, l->err, "clSetKernelArg", kname[l->id]);
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, l->k, dims, NULL, global, local, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(l->b, err, "clEnqueueNDRangeKernel", kname[l->id]);
}

/* `groups` work-groups of the kernel's size. */
static vla_status run(nl *l, size_t groups) {
    const size_t wg = ((ocl_ctx *)l->b->context)->nn->wg[l->id];
    const size_t global[2] = {groups * wg, 1}, local[2] = {wg, 1};
    return launch_nd(l, global, local, 1);
}

/* Enough groups to cover n items once, capped (the kernels loop with a grid stride). */
static size_t stride_groups(vla_backend *b, nn_kid id, size_t n) {
    ocl_ctx *ctx = b->context;
    const size_t wg = ctx->nn->wg[id];
    const size_t cap = (ctx->compute_units ? ctx->compute_units : 1) * (size_t)64;
    const size_t g = n / wg + (n % wg != 0);
    return g < cap ? g : cap;
}

static size_t row_groups(int M) { return M < NN_ROW_GROUPS ? (size_t)M : NN_ROW_GROUPS; }

static vla_status fill_bytes(vla_backend *b, cl_mem m, const void *pattern, size_t psize, size_t off, size_t bytes,
                             const char *what) {
    ocl_ctx *ctx = b->context;
    cl_int err = clEnqueueFillBuffer(ctx->queue, m, pattern, psize, off, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueFillBuffer", what);
}

/* ctl = {NN_NOPOS, 0}: no invalid token seen, no target counted. */
static vla_status ctl_reset(vla_backend *b) {
    const cl_uint init[2] = {NN_NOPOS, 0};
    cl_mem ctl = ((ocl_ctx *)b->context)->nn->s[S_CTL];
    TRY(fill_bytes(b, ctl, &init[0], 4, 0, 4, "(nn token check)"));
    return fill_bytes(b, ctl, &init[1], 4, 4, 4, "(nn token check)");
}

/* After the kernels: the first invalid id, if any, as VLA_ERR_INVALID_PARAMETER. */
static vla_status ctl_check(vla_backend *b, const char *fn, const vla_buffer *ids, size_t off, const char *what,
                            int V, int ignore) {
    ocl_ctx *ctx = b->context;
    cl_uint pos = 0;
    cl_int err = clEnqueueReadBuffer(ctx->queue, ctx->nn->s[S_CTL], CL_TRUE, 0, 4, &pos, 0, NULL, NULL);
    if (err != CL_SUCCESS) return ocl_fail(b, err, "clEnqueueReadBuffer", "(nn token check)");
    if (pos == NN_NOPOS) return VLA_OK;
    cl_int val = 0;
    err = clEnqueueReadBuffer(ctx->queue, (cl_mem)ids->mem, CL_TRUE, (off + pos) * 4, 4, &val, 0, NULL, NULL);
    if (err != CL_SUCCESS) return ocl_fail(b, err, "clEnqueueReadBuffer", "(nn token check)");
    return vla_fail(b, VLA_ERR_INVALID_PARAMETER,
                    "%s: %s[%u] = %d is outside 0..%d%s (found after the kernels ran: the outputs are unspecified)", fn,
                    what, (unsigned)pos, (int)val, V - 1, ignore ? " (or -1: no target)" : "");
}

/* C[m, n] = op(A) op(B) (+ C when beta_one), row-major, offsets in elements. */
static vla_status gemm(vla_backend *b, const char *what, int ta, int tb, int m, int n, int k, const vla_buffer *A,
                       size_t ao, int lda, const vla_buffer *B, size_t bo, int ldb, int beta_one, vla_buffer *C,
                       size_t co, int ldc) {
    ocl_ctx *ctx = b->context;
#ifdef VLA_HAVE_CLBLAST
    if (ctx->clblast) {
        cl_event ev = NULL;
        CLBlastStatusCode st = CLBlastSgemm(
            CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
            tb ? CLBlastTransposeYes : CLBlastTransposeNo,
            (size_t)m, (size_t)n, (size_t)k, 1.0f, (cl_mem)A->mem, ao, (size_t)lda, (cl_mem)B->mem, bo, (size_t)ldb,
            beta_one ? 1.0f : 0.0f, (cl_mem)C->mem, co, (size_t)ldc, &ctx->queue, &ev);
        if (ev) clReleaseEvent(ev);
        if (st == CLBlastSuccess) return VLA_OK;
        char msg[96];
        snprintf(msg, sizeof msg, "(Sgemm, %s: [%d, %d] x [%d, %d])", what, m, k, k, n);
        if (st < 0 && st > -100) return ocl_fail(b, (cl_int)st, "CLBlast", msg);
        return vla_fail(b, VLA_ERR_BACKEND, "opencl: CLBlast status %d %s", (int)st, msg);
    }
#else
    (void)what;
#endif
    if (ctx->nn->wg[K_GEMM] < NN_TILE * NN_TILE)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "opencl: nn_gemm needs %d work-items per group; this device runs %zu (build with CLBlast)",
                        NN_TILE * NN_TILE, ctx->nn->wg[K_GEMM]);
    nl l = start(b, K_GEMM);
    a_buf(&l, C), a_off(&l, co), a_int(&l, ldc);
    a_buf(&l, A), a_off(&l, ao), a_int(&l, lda), a_int(&l, ta);
    a_buf(&l, B), a_off(&l, bo), a_int(&l, ldb), a_int(&l, tb);
    a_int(&l, m), a_int(&l, n), a_int(&l, k), a_int(&l, beta_one);
    const size_t global[2] = {((size_t)n + NN_TILE - 1) / NN_TILE * NN_TILE,
                              ((size_t)m + NN_TILE - 1) / NN_TILE * NN_TILE};
    const size_t local[2] = {NN_TILE, NN_TILE};
    return launch_nd(&l, global, local, 2);
}

/* out[N] += column sums of A[M, N]. */
static vla_status colsum_add(vla_backend *b, vla_buffer *out, size_t oo, const vla_buffer *A, size_t ao, size_t M,
                             size_t N) {
    nl l = start(b, K_COLSUM);
    a_buf(&l, out), a_off(&l, oo), a_buf(&l, A), a_off(&l, ao), a_off(&l, M), a_off(&l, N);
    return run(&l, N / NN_COLS + (N % NN_COLS != 0));
}

/* ---- fill, elementwise ---- */

static vla_status ocl_fill(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value) {
    return fill_bytes(b, (cl_mem)x->mem, &value, sizeof value, x_off * 4, n * 4, "(vla_nn_fill)");
}

/* out = f(in) or out += dy f'(s): the kernels of signature (out, in[, in2], n). */
static vla_status ew2(vla_backend *b, const char *fn, nn_kid id, vla_buffer *o, size_t oo, const vla_buffer *i1,
                      size_t o1, size_t n) {
    TRY(nn_ready(b, fn));
    nl l = start(b, id);
    a_buf(&l, o), a_off(&l, oo), a_buf(&l, i1), a_off(&l, o1), a_off(&l, n);
    return run(&l, stride_groups(b, id, n));
}
static vla_status ew3(vla_backend *b, const char *fn, nn_kid id, vla_buffer *o, size_t oo, const vla_buffer *i1,
                      size_t o1, const vla_buffer *i2, size_t o2, size_t n) {
    TRY(nn_ready(b, fn));
    nl l = start(b, id);
    a_buf(&l, o), a_off(&l, oo), a_buf(&l, i1), a_off(&l, o1), a_buf(&l, i2), a_off(&l, o2), a_off(&l, n);
    return run(&l, stride_groups(b, id, n));
}

static vla_status ocl_gelu_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                   size_t n) {
    return ew2(b, "vla_nn_gelu_forward", K_GELU_F, y, y_off, x, x_off, n);
}
static vla_status ocl_gelu_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                    size_t dy_off, const vla_buffer *x, size_t x_off, size_t n) {
    return ew3(b, "vla_nn_gelu_backward", K_GELU_B, dx, dx_off, dy, dy_off, x, x_off, n);
}
static vla_status ocl_sigmoid_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x,
                                      size_t x_off, size_t n) {
    return ew2(b, "vla_nn_sigmoid_forward", K_SIG_F, y, y_off, x, x_off, n);
}
static vla_status ocl_sigmoid_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                       size_t dy_off, const vla_buffer *y, size_t y_off, size_t n) {
    return ew3(b, "vla_nn_sigmoid_backward", K_SIG_B, dx, dx_off, dy, dy_off, y, y_off, n);
}
static vla_status ocl_add_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                                  const vla_buffer *c, size_t c_off, size_t n) {
    return ew3(b, "vla_nn_add_forward", K_ADD_F, y, y_off, a, a_off, c, c_off, n);
}
static vla_status ocl_add_backward(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                                   const vla_buffer *dy, size_t dy_off, size_t n) {
    if (da) TRY(ew2(b, "vla_nn_add_backward", K_ACC, da, da_off, dy, dy_off, n));
    if (dc) TRY(ew2(b, "vla_nn_add_backward", K_ACC, dc, dc_off, dy, dy_off, n));
    return VLA_OK;
}

/* ---- matmul ---- */

static vla_status ocl_matmul_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                     const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off,
                                     int M, int N, int K) {
    TRY(nn_ready(b, "vla_nn_matmul_forward"));
    if (bias) { /* y starts as bias in every row; the product adds to it */
        nl l = start(b, K_BIAS_ROWS);
        a_buf(&l, y), a_off(&l, y_off), a_buf(&l, bias), a_off(&l, bias_off);
        a_off(&l, (size_t)M), a_off(&l, (size_t)N);
        TRY(run(&l, stride_groups(b, K_BIAS_ROWS, (size_t)M * N)));
    }
    /* y[M, N] (+)= x[M, K] W[N, K]^T */
    return gemm(b, "matmul forward", 0, 1, M, N, K, x, x_off, K, W, W_off, K, bias != NULL, y, y_off, N);
}

static vla_status ocl_matmul_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                      vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                      const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M,
                                      int N, int K) {
    TRY(nn_ready(b, "vla_nn_matmul_backward"));
    if (dx) /* dx[M, K] += dy[M, N] W[N, K] */
        TRY(gemm(b, "matmul backward dx", 0, 0, M, K, N, dy, dy_off, N, W, W_off, K, 1, dx, dx_off, K));
    if (dW) /* dW[N, K] += dy^T[N, M] x[M, K] */
        TRY(gemm(b, "matmul backward dW", 1, 0, N, K, M, dy, dy_off, N, x, x_off, K, 1, dW, dW_off, K));
    if (dbias) TRY(colsum_add(b, dbias, dbias_off, dy, dy_off, (size_t)M, (size_t)N));
    return VLA_OK;
}

/* ---- LayerNorm ---- */

static vla_status ocl_layernorm_forward(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean,
                                        size_t mean_off, vla_buffer *rstd, size_t rstd_off, const vla_buffer *x,
                                        size_t x_off, const vla_buffer *weight, size_t weight_off,
                                        const vla_buffer *bias, size_t bias_off, int M, int C, float eps) {
    TRY(nn_ready(b, "vla_nn_layernorm_forward"));
    nl l = start(b, K_LN_F);
    a_buf(&l, y), a_off(&l, y_off);
    a_buf(&l, mean), a_off(&l, mean_off), a_int(&l, mean != NULL);
    a_buf(&l, rstd), a_off(&l, rstd_off), a_int(&l, rstd != NULL);
    a_buf(&l, x), a_off(&l, x_off), a_buf(&l, weight), a_off(&l, weight_off), a_buf(&l, bias), a_off(&l, bias_off);
    a_int(&l, M), a_int(&l, C), a_flt(&l, eps);
    return run(&l, row_groups(M));
}

static vla_status ocl_layernorm_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                         size_t dweight_off, vla_buffer *dbias, size_t dbias_off,
                                         const vla_buffer *dy, size_t dy_off, const vla_buffer *x, size_t x_off,
                                         const vla_buffer *weight, size_t weight_off, const vla_buffer *mean,
                                         size_t mean_off, const vla_buffer *rstd, size_t rstd_off, int M, int C) {
    TRY(nn_ready(b, "vla_nn_layernorm_backward"));
    if (dx) {
        nl l = start(b, K_LN_BDX);
        a_buf(&l, dx), a_off(&l, dx_off), a_buf(&l, dy), a_off(&l, dy_off), a_buf(&l, x), a_off(&l, x_off);
        a_buf(&l, weight), a_off(&l, weight_off), a_buf(&l, mean), a_off(&l, mean_off), a_buf(&l, rstd),
            a_off(&l, rstd_off);
        a_int(&l, M), a_int(&l, C);
        TRY(run(&l, row_groups(M)));
    }
    if (dweight || dbias) {
        nl l = start(b, K_LN_BP);
        a_buf(&l, dweight), a_off(&l, dweight_off), a_int(&l, dweight != NULL);
        a_buf(&l, dbias), a_off(&l, dbias_off), a_int(&l, dbias != NULL);
        a_buf(&l, dy), a_off(&l, dy_off), a_buf(&l, x), a_off(&l, x_off);
        a_buf(&l, mean), a_off(&l, mean_off), a_buf(&l, rstd), a_off(&l, rstd_off);
        a_int(&l, M), a_int(&l, C);
        TRY(run(&l, (size_t)C / NN_COLS + (C % NN_COLS != 0)));
    }
    return VLA_OK;
}

/* ---- embeddings ---- */

static vla_status ocl_embedding_forward(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                        size_t tokens_off, const vla_buffer *wte, size_t wte_off,
                                        const vla_buffer *wpe, size_t wpe_off, int B, int T, int C, int V) {
    static const char fn[] = "vla_nn_embedding_forward";
    TRY(nn_ready(b, fn));
    TRY(scratch(b, fn, S_CTL, 16));
    TRY(ctl_reset(b));
    const size_t BT = (size_t)B * T;
    nl l = start(b, K_EMB_F);
    a_buf(&l, out), a_off(&l, out_off), a_buf(&l, tokens), a_off(&l, tokens_off), a_buf(&l, wte), a_off(&l, wte_off);
    a_buf(&l, wpe), a_off(&l, wpe_off), a_int(&l, wpe != NULL);
    a_off(&l, BT), a_int(&l, T), a_int(&l, C), a_int(&l, V), a_mem(&l, ((ocl_ctx *)b->context)->nn->s[S_CTL]);
    TRY(run(&l, stride_groups(b, K_EMB_F, BT * C)));
    return ctl_check(b, fn, tokens, tokens_off, "tokens", V, 0);
}

static vla_status ocl_embedding_backward(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                         size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                         const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V) {
    static const char fn[] = "vla_nn_embedding_backward";
    TRY(nn_ready(b, fn));
    TRY(scratch(b, fn, S_CTL, 16));
    TRY(scratch(b, fn, S_COUNT, (size_t)V * 4));
    struct ocl_nn *st = ((ocl_ctx *)b->context)->nn;
    const size_t BT = (size_t)B * T;
    /* The counts validate the tokens too, so they run even when dwte is not asked for. */
    TRY(ctl_reset(b));
    const cl_int zero = 0;
    TRY(fill_bytes(b, st->s[S_COUNT], &zero, 4, 0, (size_t)V * 4, "(embedding counts)"));
    {
        nl l = start(b, K_EMB_COUNT);
        a_mem(&l, st->s[S_COUNT]), a_buf(&l, tokens), a_off(&l, tokens_off), a_off(&l, BT), a_int(&l, V);
        a_mem(&l, st->s[S_CTL]);
        TRY(run(&l, stride_groups(b, K_EMB_COUNT, BT)));
    }
    if (dwte) {
        nl l = start(b, K_EMB_SCATTER);
        a_buf(&l, dwte), a_off(&l, dwte_off), a_buf(&l, dout), a_off(&l, dout_off), a_buf(&l, tokens),
            a_off(&l, tokens_off);
        a_mem(&l, st->s[S_COUNT]), a_off(&l, BT), a_int(&l, C);
        TRY(run(&l, (size_t)V));
    }
    /* dwpe[T, C] += sum over b of dout[b, :, :]: column sums of dout viewed as [B, T C]. */
    if (dwpe) TRY(colsum_add(b, dwpe, dwpe_off, dout, dout_off, (size_t)B, (size_t)T * C));
    return ctl_check(b, fn, tokens, tokens_off, "tokens", V, 0);
}

/* ---- loss ---- */

static vla_status ocl_crossentropy(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                                   size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                                   const vla_buffer *targets, size_t targets_off, int M, int V) {
    static const char fn[] = "vla_nn_crossentropy";
    TRY(nn_ready(b, fn));
    TRY(scratch(b, fn, S_CTL, 16));
    TRY(scratch(b, fn, S_ROWLOSS, (size_t)M * 8));
    struct ocl_nn *st = ((ocl_ctx *)b->context)->nn;
    TRY(ctl_reset(b));
    {
        nl l = start(b, K_CE_COUNT); /* |P| first: dlogits is divided by it */
        a_buf(&l, targets), a_off(&l, targets_off), a_int(&l, M), a_int(&l, V), a_mem(&l, st->s[S_CTL]);
        TRY(run(&l, 1));
    }
    if (loss || dlogits) {
        nl l = start(b, K_CE_ROWS);
        a_mem(&l, st->s[S_ROWLOSS]), a_buf(&l, dlogits), a_off(&l, dlogits_off), a_int(&l, dlogits != NULL);
        a_buf(&l, logits), a_off(&l, logits_off), a_buf(&l, targets), a_off(&l, targets_off), a_int(&l, V);
        a_mem(&l, st->s[S_CTL]);
        TRY(run(&l, (size_t)M)); /* one group per row */
    }
    if (loss) {
        nl l = start(b, K_CE_LOSS);
        a_buf(&l, loss), a_off(&l, loss_off), a_mem(&l, st->s[S_ROWLOSS]), a_int(&l, M), a_mem(&l, st->s[S_CTL]);
        TRY(run(&l, 1));
    }
    return ctl_check(b, fn, targets, targets_off, "targets", V, 1);
}

/* ---- optimiser ---- */

static vla_status ocl_global_norm(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x,
                                  size_t x_off, size_t n) {
    static const char fn[] = "vla_nn_global_norm";
    TRY(nn_ready(b, fn));
    TRY(scratch(b, fn, S_PART, (size_t)NN_PARTS * 8));
    struct ocl_nn *st = ((ocl_ctx *)b->context)->nn;
    /* Stage 1: NN_PARTS contiguous parts (fewer when n is small), stage 2: one group adds them. */
    size_t parts = n / st->wg[K_SUMSQ] + (n % st->wg[K_SUMSQ] != 0);
    if (parts > NN_PARTS) parts = NN_PARTS;
    nl l = start(b, K_SUMSQ);
    a_mem(&l, st->s[S_PART]), a_buf(&l, x), a_off(&l, x_off), a_off(&l, n);
    TRY(run(&l, parts));
    nl f = start(b, K_NORM_FINAL);
    a_buf(&f, norm), a_off(&f, norm_off), a_mem(&f, st->s[S_PART]), a_int(&f, (int)parts);
    return run(&f, 1);
}

/* The scalars as cpu_adamw_step computes them (double, as Python), the rest in the kernel. */
static vla_status ocl_adamw_step(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                                 vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                                 const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p) {
    TRY(nn_ready(b, "vla_nn_adamw_step"));
    const double t = (double)p->step;
    nl l = start(b, K_ADAMW);
    a_buf(&l, param), a_off(&l, param_off), a_buf(&l, m), a_off(&l, m_off), a_buf(&l, v), a_off(&l, v_off);
    a_buf(&l, grad), a_off(&l, grad_off), a_buf(&l, norm), a_off(&l, norm_off), a_int(&l, norm != NULL);
    a_flt(&l, (float)p->max_norm);
    a_flt(&l, (float)(1.0 - p->lr * p->weight_decay));
    a_flt(&l, (float)(1.0 - p->beta1));
    a_flt(&l, (float)p->beta2), a_flt(&l, (float)(1.0 - p->beta2));
    a_flt(&l, (float)(p->lr / (1.0 - pow(p->beta1, t))));
    a_flt(&l, (float)sqrt(1.0 - pow(p->beta2, t)));
    a_flt(&l, (float)p->eps);
    a_off(&l, n);
    return run(&l, stride_groups(b, K_ADAMW, n));
}

const vla_nn_iface ocl_nn_iface = {
    .fill = ocl_fill,
    .matmul_forward = ocl_matmul_forward,
    .matmul_backward = ocl_matmul_backward,
    .layernorm_forward = ocl_layernorm_forward,
    .layernorm_backward = ocl_layernorm_backward,
    .gelu_forward = ocl_gelu_forward,
    .gelu_backward = ocl_gelu_backward,
    .sigmoid_forward = ocl_sigmoid_forward,
    .sigmoid_backward = ocl_sigmoid_backward,
    .add_forward = ocl_add_forward,
    .add_backward = ocl_add_backward,
    .embedding_forward = ocl_embedding_forward,
    .embedding_backward = ocl_embedding_backward,
    .crossentropy = ocl_crossentropy,
    .global_norm = ocl_global_norm,
    .adamw_step = ocl_adamw_step,
};
