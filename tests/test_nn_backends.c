/* The nn ops (vla/nn.h) on the OpenCL backend against the CPU backend (test_nn checks the CPU
 * against finite differences and float64 references; here the CPU is the reference).
 *
 * Every op, forward and backward, on random inputs and shapes that reach each kernel's loops
 * (rows longer than a work-group, more rows than the column-sum lanes, tiles of the GEMM, more
 * elements than one grid-stride pass). All tensors of a case live at offsets inside one flat
 * buffer with poisoned guard elements that must stay untouched; accumulating outputs start from
 * random values and their increments are compared. Errors are relative 2-norms ||ocl - cpu|| /
 * ||cpu|| per tensor (printed with the largest absolute difference). The bound TOL (1e-6) sits
 * about 8x above the worst measured on PoCL, 1.3e-7 (the fallback GEMM against OpenBLAS; LayerNorm,
 * the embeddings, the loss, the norm and AdamW matched the CPU bit for bit there). The matrix
 * products run twice on OpenCL: through CLBlast (where built) and through the fallback kernel
 * (VLA_OPENCL_NO_CLBLAST=1). Every OpenCL case runs twice and must give the same bits (no float
 * atomics). test_nn's tiny language model, three training steps with clipping, composes them
 * all. Out-of-range tokens and targets: VLA_ERR_INVALID_PARAMETER naming the position and the
 * value, nothing written outside the tensors, and the next call works.
 *
 * The same cases run on the CUDA backend when it has a device (in the CPU emulator too): cuBLAS
 * and the own GEMM kernel (VLA_CUDA_NN_GEMM=own) as OpenCL's two paths.
 *
 * train_step: one training step of vla-train's TinyLM (tools/train/model.c, compiled in below)
 * on every device vla_list_devices finds (every OpenCL device, PoCL and a GPU's driver alike, and
 * every CUDA device), against the CPU, for every mechanism (softmax, linear, delta, vla, deltanet):
 * the same weights and batch, then the loss, every parameter gradient (per tensor) and the
 * parameters after one clipped AdamW step, each as a relative 2-norm error against the CPU's,
 * bound STEP_TOL. A mechanism a device's backend lacks (VLA_ERR_UNSUPPORTED) is reported as
 * skipped, never as passed, and so is a kind of backend the machine does not have. The CUDA backend finds a
 * bad id on the device without waiting for it: the op returns VLA_OK and the next
 * vla_backend_synchronize (or download) reports it, once; the checks accept either moment.
 *
 * Skips (exit 77) without an OpenCL or CUDA device; runs without fork (CK_NOFORK): an OpenCL or
 * CUDA runtime must not be initialised before a fork. The handles are opened once (PoCL compiles
 * nn.cl at the first nn call of each). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vla/nn.h"

/* vla-train's model, compiled into this suite rather than linked: the suite is built with or
 * without the tools (VLA_BUILD_TOOLS), and the model is plain public-API code. */
#include "../tools/train/data.c"
#include "../tools/train/model.c"

#define TOL 1e-6
#define GUARD 3
#define MAXS 24

static vla_backend *g_cpu;

/* The handles compared with the CPU: each device backend present, and again with its own GEMM
 * kernel instead of the BLAS library (OpenCL: VLA_OPENCL_NO_CLBLAST=1; CUDA: VLA_CUDA_NN_GEMM=own). */
typedef struct target {
    const char *label;
    vla_backend *be;
    int own_gemm; /* runs the cases with matrix products only */
} target;
static target g_tg[16];
static int g_ntg;

#define OK(call)                                                                                     \
    do {                                                                                             \
        vla_status s_ = (call);                                                                      \
        ck_assert_msg(s_ == VLA_OK, "%s: %s: %s", #call, vla_status_string(s_), vla_last_message()); \
    } while (0)

/* ---- a case: tensors in one flat buffer ---- */

enum { IN, OUT, ACC }; /* ACC: a backward output (+=), compared by its increment */

typedef struct slot {
    const char *name;
    size_t off, n;
    int kind;
} slot;

typedef struct layout {
    float *h; /* initial contents: inputs, ACC starts, poison elsewhere */
    size_t cap, used;
    slot s[MAXS];
    int ns;
} layout;

static void lay_init(layout *L, size_t cap) {
    memset(L, 0, sizeof *L);
    L->cap = cap;
    L->h = malloc(cap * sizeof(float));
    ck_assert_ptr_nonnull(L->h);
    tu_poison(L->h, cap);
}

/* Reserves n elements after a guard; x copied in (NULL: poisoned, an OUT). Returns the offset. */
static size_t put(layout *L, const char *name, int kind, const float *x, size_t n) {
    ck_assert_msg(L->used + GUARD + n + GUARD <= L->cap && L->ns < MAXS, "layout too small");
    const size_t off = L->used + GUARD;
    if (x) memcpy(L->h + off, x, n * sizeof(float));
    L->s[L->ns++] = (slot){name, off, n, kind};
    L->used = off + n;
    return off;
}

static size_t put_int(layout *L, const char *name, const int32_t *x, size_t n) {
    const size_t off = put(L, name, IN, NULL, n);
    memcpy(L->h + off, x, n * sizeof(int32_t));
    return off;
}

static size_t total(const layout *L) { return L->used + GUARD; }

typedef void (*ops_fn)(vla_backend *be, vla_buffer *buf, const void *ctx);

/* Uploads L->h to a new buffer on be, runs ops, returns the downloaded contents. */
static float *run_on(vla_backend *be, const layout *L, ops_fn ops, const void *ctx) {
    vla_buffer *buf = NULL;
    OK(vla_buffer_alloc(be, total(L) * sizeof(float), &buf));
    OK(vla_buffer_upload(buf, 0, L->h, total(L) * sizeof(float)));
    ops(be, buf, ctx);
    float *out = malloc(total(L) * sizeof(float));
    OK(vla_buffer_download(buf, 0, out, total(L) * sizeof(float)));
    vla_buffer_free(buf);
    return out;
}

static double worst_seen = 0.0, worst_seen_step = 0.0;

/* One output tensor: relative 2-norm error of got against ref (increments for ACC). */
static void compare_slot(const char *label, const slot *s, const float *got, const float *ref, const float *start) {
    double num = 0, den = 0, maxabs = 0;
    for (size_t i = 0; i < s->n; i++) {
        double g = got[s->off + i], r = ref[s->off + i];
        if (s->kind == ACC) g -= start[s->off + i], r -= start[s->off + i];
        ck_assert_msg(isfinite(g) || !isfinite(r), "%s %s[%zu] = %g (cpu %g)", label, s->name, i, g, r);
        if (!isfinite(r)) {
            ck_assert_msg(!isfinite(g), "%s %s[%zu]: cpu %g, got %g", label, s->name, i, r, g);
            continue;
        }
        num += (g - r) * (g - r), den += r * r;
        if (fabs(g - r) > maxabs) maxabs = fabs(g - r);
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num);
    if (e > worst_seen) worst_seen = e;
    fprintf(stderr, "  %-26s %-22s relerr %.2e  max|diff| %.2e (bound %.0e)\n", label, s->name, e, maxabs, TOL);
    ck_assert_msg(e < TOL, "%s %s: relative error %.3e >= %.0e", label, s->name, e, TOL);
}

/* Runs ops on the CPU and on every target (twice: the bits must repeat; the fallback-GEMM
 * handles only when gemm_too), then compares every output and checks the guards. */
static void compare(const char *label, layout *L, ops_fn ops, const void *ctx, int gemm_too) {
    fprintf(stderr, "%s\n", label);
    float *ref = run_on(g_cpu, L, ops, ctx);
    for (int k = 0; k < g_ntg; k++) {
        if (g_tg[k].own_gemm && !gemm_too) continue;
        float *got = run_on(g_tg[k].be, L, ops, ctx), *again = run_on(g_tg[k].be, L, ops, ctx);
        char lab[64];
        snprintf(lab, sizeof lab, "  %s", g_tg[k].label);
        ck_assert_msg(memcmp(got, again, total(L) * sizeof(float)) == 0, "%s: %s: two runs differ", label, lab);
        char *in = calloc(total(L), 1);
        for (int i = 0; i < L->ns; i++) {
            memset(in + L->s[i].off, 1, L->s[i].n);
            if (L->s[i].kind != IN) compare_slot(lab, &L->s[i], got, ref, L->h);
        }
        for (size_t i = 0; i < total(L); i++)
            ck_assert_msg(in[i] || tu_is_poison(got[i]), "%s: guard element %zu was written", label, i);
        free(in), free(got), free(again);
    }
    free(ref);
}

static float *randn(tu_rng *r, size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    tu_randn(r, x, n, scale);
    return x;
}

/* ---- matmul ---- */

typedef struct mm_case {
    int M, N, K, bias;
    size_t x, W, b, y, dy, dx, dW, db;
} mm_case;

static void mm_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const mm_case *c = p;
    OK(vla_nn_matmul_forward(be, f, c->y, f, c->x, f, c->W, c->bias ? f : NULL, c->b, c->M, c->N, c->K));
    OK(vla_nn_matmul_backward(be, f, c->dx, f, c->dW, c->bias ? f : NULL, c->db, f, c->dy, f, c->x, f, c->W, c->M,
                              c->N, c->K));
}

static void check_matmul(int M, int N, int K, int bias, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    const size_t nMK = (size_t)M * K, nNK = (size_t)N * K, nMN = (size_t)M * N;
    layout L;
    lay_init(&L, 2 * (nMK + nNK + nMN) + 2 * N + 64);
    mm_case c = {M, N, K, bias, 0, 0, 0, 0, 0, 0, 0, 0};
    float *t;
    c.x = put(&L, "x", IN, t = randn(&r, nMK, 1), nMK), free(t);
    c.W = put(&L, "W", IN, t = randn(&r, nNK, 0.5f), nNK), free(t);
    c.b = put(&L, "bias", IN, t = randn(&r, N, 1), N), free(t);
    c.y = put(&L, "y", OUT, NULL, nMN);
    c.dy = put(&L, "dy", IN, t = randn(&r, nMN, 1), nMN), free(t);
    c.dx = put(&L, "dx (+=)", ACC, t = randn(&r, nMK, 1), nMK), free(t);
    c.dW = put(&L, "dW (+=)", ACC, t = randn(&r, nNK, 1), nNK), free(t);
    c.db = put(&L, "dbias (+=)", bias ? ACC : IN, t = randn(&r, N, 1), N), free(t); /* no bias: untouched */
    char label[96];
    snprintf(label, sizeof label, "matmul M=%d N=%d K=%d%s", M, N, K, bias ? " + bias" : "");
    compare(label, &L, mm_ops, &c, 1);
    free(L.h);
}

START_TEST(test_matmul) {
    check_matmul(1, 1, 1, 1, 1);
    check_matmul(7, 5, 3, 0, 2);
    check_matmul(33, 70, 19, 1, 3);
    check_matmul(130, 47, 65, 1, 4); /* several GEMM tiles each way; dbias over 130 rows */
}
END_TEST

/* ---- LayerNorm ---- */

typedef struct ln_case {
    int M, C;
    float eps;
    size_t x, w, b, y, mean, rstd, dy, dx, dw, db;
} ln_case;

static void ln_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const ln_case *c = p;
    OK(vla_nn_layernorm_forward(be, f, c->y, f, c->mean, f, c->rstd, f, c->x, f, c->w, f, c->b, c->M, c->C, c->eps));
    OK(vla_nn_layernorm_backward(be, f, c->dx, f, c->dw, f, c->db, f, c->dy, f, c->x, f, c->w, f, c->mean, f, c->rstd,
                                 c->M, c->C));
}

static void check_layernorm(int M, int C, float shift, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    const size_t n = (size_t)M * C;
    layout L;
    lay_init(&L, 4 * n + 6 * C + 2 * M + 64);
    ln_case c = {M, C, 1e-5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    float *t = randn(&r, n, 1);
    for (size_t i = 0; i < n; i++) t[i] += shift;
    c.x = put(&L, "x", IN, t, n), free(t);
    c.w = put(&L, "weight", IN, t = randn(&r, C, 1), C), free(t);
    c.b = put(&L, "bias", IN, t = randn(&r, C, 1), C), free(t);
    c.y = put(&L, "y", OUT, NULL, n);
    c.mean = put(&L, "mean", OUT, NULL, M);
    c.rstd = put(&L, "rstd", OUT, NULL, M);
    c.dy = put(&L, "dy", IN, t = randn(&r, n, 1), n), free(t);
    c.dx = put(&L, "dx (+=)", ACC, t = randn(&r, n, 1), n), free(t);
    c.dw = put(&L, "dweight (+=)", ACC, t = randn(&r, C, 1), C), free(t);
    c.db = put(&L, "dbias (+=)", ACC, t = randn(&r, C, 1), C), free(t);
    char label[96];
    snprintf(label, sizeof label, "layernorm M=%d C=%d (shift %g)", M, C, (double)shift);
    compare(label, &L, ln_ops, &c, 0);
    free(L.h);
}

START_TEST(test_layernorm) {
    check_layernorm(5, 8, 0.0f, 11);
    check_layernorm(37, 300, 3.0f, 12); /* rows longer than a work-group, rows far from 0 */
    check_layernorm(70, 17, 0.0f, 13);  /* more rows than the column-sum lanes, a partial block */
}
END_TEST

/* ---- elementwise ---- */

typedef struct ew_case {
    size_t n;
    int inplace;
    size_t x, x2, y, dy, dx, a, c, ya, acc, da, dc;
} ew_case;

static void gelu_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const ew_case *c = p;
    OK(vla_nn_gelu_forward(be, f, c->y, f, c->x2, c->n));
    OK(vla_nn_gelu_backward(be, f, c->dx, f, c->dy, f, c->x, c->n));
}

static void sigmoid_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const ew_case *c = p;
    OK(vla_nn_sigmoid_forward(be, f, c->y, f, c->x2, c->n));
    OK(vla_nn_sigmoid_backward(be, f, c->dx, f, c->dy, f, c->y, c->n));
}

static void check_unary(int gelu, int inplace, size_t n, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    layout L;
    lay_init(&L, 5 * n + 64);
    ew_case c = {n, inplace, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    float *x = randn(&r, n, 3.0f);
    x[0] = 9.5f, x[1] = -9.5f, x[2] = 30.0f, x[3] = -30.0f, x[4] = -100.0f; /* saturation */
    c.x = put(&L, "x", IN, x, n);
    c.x2 = put(&L, inplace ? "y (in place)" : "x copy", inplace ? OUT : IN, x, n);
    c.y = inplace ? c.x2 : put(&L, "y", OUT, NULL, n);
    float *t;
    c.dy = put(&L, "dy", IN, t = randn(&r, n, 1), n), free(t);
    c.dx = put(&L, "dx (+=)", ACC, t = randn(&r, n, 1), n), free(t);
    char label[96];
    snprintf(label, sizeof label, "%s n=%zu%s", gelu ? "gelu" : "sigmoid", n, inplace ? " (in place)" : "");
    compare(label, &L, gelu ? gelu_ops : sigmoid_ops, &c, 0);
    free(x), free(L.h);
}

START_TEST(test_gelu_sigmoid) {
    check_unary(1, 0, 41, 21);
    check_unary(1, 1, 100003, 22); /* more than one grid-stride pass */
    check_unary(0, 0, 41, 31);
    check_unary(0, 1, 100003, 32);
}
END_TEST

static void add_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const ew_case *c = p;
    OK(vla_nn_add_forward(be, f, c->ya, f, c->a, f, c->c, c->n));
    OK(vla_nn_add_forward(be, f, c->acc, f, c->acc, f, c->c, c->n)); /* x = x + f(x) */
    OK(vla_nn_add_backward(be, f, c->da, f, c->dc, f, c->dy, c->n));
    OK(vla_nn_add_backward(be, f, c->da, NULL, 0, f, c->dy, c->n)); /* one output */
}

START_TEST(test_add) {
    tu_rng r;
    tu_seed(&r, 41);
    const size_t n = 5000;
    layout L;
    lay_init(&L, 8 * n + 64);
    ew_case c = {n, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    float *a = randn(&r, n, 1), *t;
    c.a = put(&L, "a", IN, a, n);
    c.c = put(&L, "c", IN, t = randn(&r, n, 1), n), free(t);
    c.ya = put(&L, "y", OUT, NULL, n);
    c.acc = put(&L, "y (in place)", OUT, a, n);
    c.dy = put(&L, "dy", IN, t = randn(&r, n, 1), n), free(t);
    c.da = put(&L, "da (+= twice)", ACC, t = randn(&r, n, 1), n), free(t);
    c.dc = put(&L, "dc (+=)", ACC, t = randn(&r, n, 1), n), free(t);
    compare("add n=5000", &L, add_ops, &c, 0);
    free(a), free(L.h);
}
END_TEST

/* ---- embeddings ---- */

typedef struct emb_case {
    int B, T, C, V, wpe;
    size_t tok, wte, wpe_off, out, dout, dwte, dwpe;
} emb_case;

static void emb_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const emb_case *c = p;
    OK(vla_nn_embedding_forward(be, f, c->out, f, c->tok, f, c->wte, c->wpe ? f : NULL, c->wpe_off, c->B, c->T, c->C,
                                c->V));
    OK(vla_nn_embedding_backward(be, f, c->dwte, c->wpe ? f : NULL, c->dwpe, f, c->dout, f, c->tok, c->B, c->T, c->C,
                                 c->V));
}

/* The position table holds maxT > T rows; only the first T are read. dwpe is [T, C]: its guards
 * catch a write past row T - 1. */
static void check_embedding(int B, int T, int C, int V, int wpe, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    const int maxT = T + 3;
    const size_t BT = (size_t)B * T, nBTC = BT * C, nVC = (size_t)V * C, nTC = (size_t)T * C;
    int32_t *tok = malloc(BT * sizeof *tok);
    /* Repeats: a few distinct tokens, or (V > 100) tokens spread over the whole vocabulary. */
    const uint64_t span = (uint64_t)(V > 100 ? V : V < 7 ? V : 7);
    for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)(tu_next(&r) % span);
    tok[BT - 1] = V - 1;
    layout L;
    lay_init(&L, 2 * nBTC + 2 * nVC + 3 * (size_t)maxT * C + BT + 64);
    emb_case c = {B, T, C, V, wpe, 0, 0, 0, 0, 0, 0, 0};
    float *t;
    c.tok = put_int(&L, "tokens", tok, BT);
    c.wte = put(&L, "wte", IN, t = randn(&r, nVC, 1), nVC), free(t);
    c.wpe_off = put(&L, "wpe", IN, t = randn(&r, (size_t)maxT * C, 1), (size_t)maxT * C), free(t);
    c.out = put(&L, "out", OUT, NULL, nBTC);
    c.dout = put(&L, "dout", IN, t = randn(&r, nBTC, 1), nBTC), free(t);
    c.dwte = put(&L, "dwte (scatter, +=)", ACC, t = randn(&r, nVC, 1), nVC), free(t);
    c.dwpe = put(&L, wpe ? "dwpe rows 0..T-1 (+=)" : "dwpe (untouched)", wpe ? ACC : IN, t = randn(&r, nTC, 1), nTC),
    free(t);
    char label[96];
    snprintf(label, sizeof label, "embedding B=%d T=%d C=%d V=%d%s", B, T, C, V, wpe ? " + positions" : "");
    compare(label, &L, emb_ops, &c, 0);
    free(tok), free(L.h);
}

START_TEST(test_embedding) {
    check_embedding(2, 5, 6, 4, 1, 51);
    check_embedding(2, 5, 6, 4, 0, 52);
    check_embedding(4, 100, 300, 40, 1, 53); /* B T > a work-group's tile, C > a work-group, rows never used */
    check_embedding(4, 70, 20, 1000, 1, 54); /* V > 256: the CUDA token sort's second radix pass */
}
END_TEST

/* ---- cross-entropy ---- */

typedef struct ce_case {
    int M, V, with_loss;
    size_t tg, z, dz, loss;
} ce_case;

static void ce_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const ce_case *c = p;
    OK(vla_nn_crossentropy(be, c->with_loss ? f : NULL, c->loss, f, c->dz, f, c->z, f, c->tg, c->M, c->V));
}

static void check_crossentropy(int M, int V, int inplace, float scale, int no_targets, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    const size_t n = (size_t)M * V;
    int32_t *tg = malloc((size_t)M * sizeof *tg);
    for (int m = 0; m < M; m++) tg[m] = no_targets || m % 4 == 1 ? -1 : (int32_t)(tu_next(&r) % (uint64_t)V);
    layout L;
    lay_init(&L, 2 * n + M + 64);
    ce_case c = {M, V, 1, 0, 0, 0, 0};
    float *t;
    c.tg = put_int(&L, "targets", tg, M);
    c.z = put(&L, inplace ? "dlogits (in place)" : "logits", inplace ? OUT : IN, t = randn(&r, n, scale), n), free(t);
    c.dz = inplace ? c.z : put(&L, "dlogits", OUT, NULL, n);
    c.loss = put(&L, "loss", OUT, NULL, 1);
    char label[96];
    snprintf(label, sizeof label, "crossentropy M=%d V=%d N(0, %g^2)%s%s", M, V, (double)scale,
             inplace ? " in place" : "", no_targets ? " no targets" : "");
    compare(label, &L, ce_ops, &c, 0);
    free(tg), free(L.h);
}

START_TEST(test_crossentropy) {
    check_crossentropy(9, 6, 0, 1.0f, 0, 61);
    check_crossentropy(37, 300, 1, 1.0f, 0, 62);
    check_crossentropy(20, 50, 0, 40.0f, 0, 63); /* large logits */
    check_crossentropy(5, 7, 0, 1.0f, 1, 64);    /* no target anywhere: loss 0, dlogits 0 */
}
END_TEST

/* ---- global norm, AdamW, fill ---- */

typedef struct opt_case {
    size_t n;
    int steps;
    double beta1, max_norm;
    const float *grads; /* [steps][n] */
    size_t p, m, v, g, norm, f1, f2;
} opt_case;

static void norm_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const opt_case *c = p;
    OK(vla_nn_global_norm(be, f, c->norm, f, c->g, c->n));
}

static void adamw_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const opt_case *c = p;
    OK(vla_nn_fill(be, f, c->m, c->n, 0.0f));
    OK(vla_nn_fill(be, f, c->v, c->n, 0.0f));
    vla_adamw_params a;
    OK(vla_adamw_params_init(&a));
    a.lr = 3e-2, a.beta1 = c->beta1, a.weight_decay = 0.05, a.max_norm = c->max_norm;
    for (int t = 1; t <= c->steps; t++) {
        OK(vla_buffer_upload(f, c->g * 4, c->grads + (size_t)(t - 1) * c->n, c->n * 4));
        a.step = t;
        if (c->max_norm > 0) OK(vla_nn_global_norm(be, f, c->norm, f, c->g, c->n));
        OK(vla_nn_adamw_step(be, f, c->p, f, c->m, f, c->v, f, c->g, c->max_norm > 0 ? f : NULL, c->norm, c->n, &a));
    }
    OK(vla_nn_fill(be, f, c->f1, 7, -2.5f));
    OK(vla_nn_fill(be, f, c->f2, 5, NAN));
}

START_TEST(test_global_norm) {
    const size_t ns[3] = {5, 300, 100003};
    for (int k = 0; k < 3; k++) {
        tu_rng r;
        tu_seed(&r, 71 + k);
        const size_t n = ns[k];
        layout L;
        lay_init(&L, n + 64);
        opt_case c = {n, 0, 0, 0, NULL, 0, 0, 0, 0, 0, 0, 0};
        float *t;
        c.g = put(&L, "x", IN, t = randn(&r, n, 1), n), free(t);
        c.norm = put(&L, "norm", OUT, NULL, 1);
        char label[64];
        snprintf(label, sizeof label, "global norm n=%zu", n);
        compare(label, &L, norm_ops, &c, 0);
        free(L.h);
    }
}
END_TEST

static void check_adamw(double beta1, double max_norm, float grad_scale, uint64_t seed) {
    tu_rng r;
    tu_seed(&r, seed);
    const size_t n = 1000;
    const int steps = 6;
    float *grads = randn(&r, (size_t)steps * n, grad_scale);
    layout L;
    lay_init(&L, 5 * n + 64);
    opt_case c = {n, steps, beta1, max_norm, grads, 0, 0, 0, 0, 0, 0, 0};
    float *t;
    c.p = put(&L, "param", OUT, t = randn(&r, n, 1), n), free(t);
    c.m = put(&L, "m", OUT, NULL, n);
    c.v = put(&L, "v", OUT, NULL, n);
    c.g = put(&L, "grad (last uploaded)", OUT, NULL, n);
    c.norm = put(&L, max_norm > 0 ? "norm" : "norm (unused)", max_norm > 0 ? OUT : IN, NULL, 1);
    c.f1 = put(&L, "fill -2.5", OUT, NULL, 7);
    c.f2 = put(&L, "fill NaN", OUT, NULL, 5);
    char label[96];
    snprintf(label, sizeof label, "adamw 6 steps beta1 %g max_norm %g |g|~%g", beta1, max_norm, (double)grad_scale);
    compare(label, &L, adamw_ops, &c, 0);
    free(grads), free(L.h);
}

START_TEST(test_adamw_fill) {
    check_adamw(0.9, 0.0, 1.0f, 81);
    check_adamw(0.9, 1.0, 1.0f, 82);  /* clipped */
    check_adamw(0.3, 1.0, 0.01f, 83); /* not clipped; beta1 < 0.5: the lerp's other form */
}
END_TEST

/* ---- a tiny language model composed from the ops (test_nn's), three training steps ---- */
/* x0 = wte[tok] + wpe;  h = LN1(x0);  a = h W1^T + b1;  x1 = x0 + GELU(a) W2^T + b2;
 * z = LNf(x1);  logits = z wte^T (tied);  loss = CE(logits, targets); then the global norm of
 * the gradient and an AdamW step with clipping. Everything in one flat buffer. */

enum { TB = 2, TT = 5, TC = 8, TF = 12, TV = 11, TMAXT = 7, TM = TB * TT };

typedef struct tiny {
    /* parameter offsets inside the parameter block */
    size_t wte, wpe, ln1w, ln1b, W1, b1, W2, b2, lnfw, lnfb, np;
    /* block offsets in the flat buffer */
    size_t P, G, Mo, Vo, tok, tg, norm, A;
    /* activations inside the activation block */
    size_t x0, h, m1, r1, a, g, x1, z, mf, rf, lg, loss, dx0, dh, da, dg, dx1, dz, na;
} tiny;

static void tiny_ops(vla_backend *be, vla_buffer *f, const void *p) {
    const tiny *t = p;
    const float eps = 1e-5f;
#define PP(x) (t->P + t->x)
#define GG(x) (t->G + t->x)
#define AA(x) (t->A + t->x)
    OK(vla_nn_fill(be, f, t->Mo, t->np, 0.0f));
    OK(vla_nn_fill(be, f, t->Vo, t->np, 0.0f));
    vla_adamw_params ap;
    OK(vla_adamw_params_init(&ap));
    ap.lr = 1e-2, ap.max_norm = 1.0;
    for (int step = 1; step <= 3; step++) {
        OK(vla_nn_embedding_forward(be, f, AA(x0), f, t->tok, f, PP(wte), f, PP(wpe), TB, TT, TC, TV));
        OK(vla_nn_layernorm_forward(be, f, AA(h), f, AA(m1), f, AA(r1), f, AA(x0), f, PP(ln1w), f, PP(ln1b), TM, TC,
                                    eps));
        OK(vla_nn_matmul_forward(be, f, AA(a), f, AA(h), f, PP(W1), f, PP(b1), TM, TF, TC));
        OK(vla_nn_gelu_forward(be, f, AA(g), f, AA(a), (size_t)TM * TF));
        OK(vla_nn_matmul_forward(be, f, AA(x1), f, AA(g), f, PP(W2), f, PP(b2), TM, TC, TF));
        OK(vla_nn_add_forward(be, f, AA(x1), f, AA(x1), f, AA(x0), (size_t)TM * TC));
        OK(vla_nn_layernorm_forward(be, f, AA(z), f, AA(mf), f, AA(rf), f, AA(x1), f, PP(lnfw), f, PP(lnfb), TM, TC,
                                    eps));
        OK(vla_nn_matmul_forward(be, f, AA(lg), f, AA(z), f, PP(wte), NULL, 0, TM, TV, TC));
        OK(vla_nn_fill(be, f, t->G, t->np, 0.0f));
        OK(vla_nn_fill(be, f, AA(dx0), t->na - t->dx0, 0.0f));
        OK(vla_nn_crossentropy(be, f, AA(loss), f, AA(lg), f, AA(lg), f, t->tg, TM, TV));
        OK(vla_nn_matmul_backward(be, f, AA(dz), f, GG(wte), NULL, 0, f, AA(lg), f, AA(z), f, PP(wte), TM, TV, TC));
        OK(vla_nn_layernorm_backward(be, f, AA(dx1), f, GG(lnfw), f, GG(lnfb), f, AA(dz), f, AA(x1), f, PP(lnfw), f,
                                     AA(mf), f, AA(rf), TM, TC));
        OK(vla_nn_add_backward(be, f, AA(dx0), f, AA(dh), f, AA(dx1), (size_t)TM * TC));
        OK(vla_nn_matmul_backward(be, f, AA(dg), f, GG(W2), f, GG(b2), f, AA(dh), f, AA(g), f, PP(W2), TM, TC, TF));
        OK(vla_nn_gelu_backward(be, f, AA(da), f, AA(dg), f, AA(a), (size_t)TM * TF));
        OK(vla_nn_fill(be, f, AA(dh), (size_t)TM * TC, 0.0f));
        OK(vla_nn_matmul_backward(be, f, AA(dh), f, GG(W1), f, GG(b1), f, AA(da), f, AA(h), f, PP(W1), TM, TF, TC));
        OK(vla_nn_layernorm_backward(be, f, AA(dx0), f, GG(ln1w), f, GG(ln1b), f, AA(dh), f, AA(x0), f, PP(ln1w), f,
                                     AA(m1), f, AA(r1), TM, TC));
        OK(vla_nn_embedding_backward(be, f, GG(wte), f, GG(wpe), f, AA(dx0), f, t->tok, TB, TT, TC, TV));
        OK(vla_nn_global_norm(be, f, t->norm, f, t->G, t->np));
        ap.step = step;
        OK(vla_nn_adamw_step(be, f, t->P, f, t->Mo, f, t->Vo, f, t->G, f, t->norm, t->np, &ap));
    }
#undef PP
#undef GG
#undef AA
}

START_TEST(test_tiny_model) {
    tiny t;
    memset(&t, 0, sizeof t);
    size_t o = 0;
#define Q(field, n) t.field = o, o += (n);
    Q(wte, TV * TC) Q(wpe, TMAXT * TC) Q(ln1w, TC) Q(ln1b, TC) Q(W1, TF * TC) Q(b1, TF) Q(W2, TC * TF) Q(b2, TC)
        Q(lnfw, TC) Q(lnfb, TC)
    t.np = o, o = 0;
    Q(x0, TM * TC) Q(h, TM * TC) Q(m1, TM) Q(r1, TM) Q(a, TM * TF) Q(g, TM * TF) Q(x1, TM * TC) Q(z, TM * TC) Q(mf, TM)
        Q(rf, TM) Q(lg, TM * TV) Q(loss, 1) Q(dx0, TM * TC) Q(dh, TM * TC) Q(da, TM * TF) Q(dg, TM * TF) Q(dx1, TM * TC)
            Q(dz, TM * TC)
#undef Q
    t.na = o;
    tu_rng r;
    tu_seed(&r, 101);
    float *p0 = randn(&r, t.np, 0.5f);
    for (int i = 0; i < TC; i++) p0[t.ln1w + i] = p0[t.lnfw + i] = 1.0f;
    int32_t tok[TM], tg[TM];
    for (int i = 0; i < TM; i++) {
        tok[i] = (int32_t)(tu_next(&r) % TV);
        tg[i] = i % 3 == 2 ? -1 : (int32_t)(tu_next(&r) % TV); /* some positions without a target */
    }
    layout L;
    lay_init(&L, 4 * t.np + t.na + 2 * TM + 64);
    t.P = put(&L, "params after 3 steps", OUT, p0, t.np);
    t.G = put(&L, "gradients of step 3", OUT, NULL, t.np);
    t.Mo = put(&L, "adam m", OUT, NULL, t.np);
    t.Vo = put(&L, "adam v", OUT, NULL, t.np);
    t.tok = put_int(&L, "tokens", tok, TM);
    t.tg = put_int(&L, "targets", tg, TM);
    t.norm = put(&L, "gradient norm", OUT, NULL, 1);
    t.A = put(&L, "activations of step 3", OUT, NULL, t.na);
    compare("tiny model B=2 T=5 C=8 F=12 V=11, 3 AdamW steps", &L, tiny_ops, &t, 1);
    free(p0), free(L.h);
}
END_TEST

/* ---- invalid token ids and targets ---- */

/* Runs one call on `be` with a bad id and expects the status (from the call, or from the next
 * synchronize on a backend that checks on the device), the message, untouched guards. */
static void expect_bad(vla_backend *be, int op, int32_t bad, const char *what) {
    const int B = 2, T = 5, C = 6, V = 4;
    const size_t BT = (size_t)B * T, nBTC = BT * C, nVC = (size_t)V * C, nTC = (size_t)T * C;
    tu_rng r;
    tu_seed(&r, 91);
    int32_t tok[10] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
    const int pos = op == 2 ? 5 : 4;
    if (op == 2) tok[1] = -1; /* no target: fine */
    tok[pos] = bad;
    layout L;
    lay_init(&L, 3 * nBTC + 2 * nVC + 2 * nTC + BT + 64);
    float *t;
    const size_t otok = put_int(&L, "ids", tok, BT);
    const size_t ote = put(&L, "wte", IN, t = randn(&r, nVC, 1), nVC);
    free(t);
    const size_t ope = put(&L, "wpe", IN, t = randn(&r, nTC, 1), nTC);
    free(t);
    const size_t oo = put(&L, "out", OUT, NULL, nBTC);
    const size_t ogte = put(&L, "dwte", ACC, t = randn(&r, nVC, 1), nVC);
    free(t);
    const size_t ogpe = put(&L, "dwpe", ACC, t = randn(&r, nTC, 1), nTC);
    free(t);
    const size_t ol = put(&L, "loss", OUT, NULL, 1);
    vla_buffer *f = NULL;
    OK(vla_buffer_alloc(be, total(&L) * 4, &f));
    OK(vla_buffer_upload(f, 0, L.h, total(&L) * 4));
    vla_status s;
    if (op == 0) s = vla_nn_embedding_forward(be, f, oo, f, otok, f, ote, f, ope, B, T, C, V);
    else if (op == 1) s = vla_nn_embedding_backward(be, f, ogte, f, ogpe, f, oo, f, otok, B, T, C, V);
    else s = vla_nn_crossentropy(be, f, ol, f, oo, f, oo, f, otok, (int)BT, C); /* logits [10, 6] from out */
    const int deferred = s == VLA_OK;
    if (deferred) s = vla_backend_synchronize(be); /* found on the device: reported by the wait */
    fprintf(stderr, "  %s %s: %s%s: %s\n", vla_backend_name(be), what, vla_status_string(s),
            deferred ? " (at the synchronize)" : "", vla_last_message());
    ck_assert_int_eq(s, VLA_ERR_INVALID_PARAMETER);
    char want[64];
    snprintf(want, sizeof want, "%s[%d] = %d", op == 2 ? "targets" : "tokens", pos, (int)bad);
    ck_assert_msg(strstr(vla_last_message(), want) != NULL, "message lacks '%s': %s", want, vla_last_message());
    const char *fn = op == 0 ? "vla_nn_embedding_forward" : op == 1 ? "vla_nn_embedding_backward" : "vla_nn_crossentropy";
    ck_assert_msg(strstr(vla_last_message(), fn) != NULL, "message lacks '%s': %s", fn, vla_last_message());
    float *h = malloc(total(&L) * 4);
    OK(vla_buffer_download(f, 0, h, total(&L) * 4));
    char *in = calloc(total(&L), 1);
    for (int i = 0; i < L.ns; i++) memset(in + L.s[i].off, 1, L.s[i].n);
    for (size_t i = 0; i < total(&L); i++) ck_assert_msg(in[i] || tu_is_poison(h[i]), "%s: guard %zu written", what, i);
    /* The next call with valid ids succeeds (the device flag was reset), and so does the wait. */
    tok[pos] = 1;
    OK(vla_buffer_upload(f, otok * 4, tok, sizeof tok));
    if (op == 0) OK(vla_nn_embedding_forward(be, f, oo, f, otok, f, ote, f, ope, B, T, C, V));
    else if (op == 1) OK(vla_nn_embedding_backward(be, f, ogte, f, ogpe, f, oo, f, otok, B, T, C, V));
    else OK(vla_nn_crossentropy(be, f, ol, f, oo, f, oo, f, otok, (int)BT, C));
    OK(vla_backend_synchronize(be));
    free(in), free(h), free(L.h);
    vla_buffer_free(f);
}

START_TEST(test_bad_ids) {
    for (int k = 0; k < g_ntg; k++) {
        if (g_tg[k].own_gemm) continue;
        vla_backend *be = g_tg[k].be;
        fprintf(stderr, "invalid ids on %s\n", g_tg[k].label);
        expect_bad(be, 0, 7, "embedding forward, token 7");
        expect_bad(be, 0, -1, "embedding forward, token -1");
        expect_bad(be, 0, INT32_MIN, "embedding forward, token INT32_MIN");
        expect_bad(be, 1, 4, "embedding backward, token 4");
        expect_bad(be, 1, -3, "embedding backward, token -3");
        expect_bad(be, 2, 6, "crossentropy, target 6");
        expect_bad(be, 2, -2, "crossentropy, target -2");
    }
}
END_TEST

/* ---- one training step of the TinyLM on every device ---- */
/* Model V 13, d 32, H 2 (dh 16), L 2, FFN 48; B 2, T 70 (more than one chunk of 64 where a
 * backend picks a chunked algorithm). Parameters N(0, 0.2^2), LayerNorm weights 1 + N(0, 0.1^2),
 * biases included, so that every path carries a gradient; a third of the targets -1. STEP_TOL
 * bounds the relative 2-norm error of the loss, of each gradient tensor and of all parameters
 * after the update; it sits above the worst measured (printed) and far below what a wrong or
 * missing term gives (order 1). */
#define STEP_TOL 1e-4

static const tm_mixer step_mixers[] = {TM_SOFTMAX, TM_LINEAR, TM_DELTA, TM_VLA, TM_DELTANET};
static int g_step_skipped;

typedef struct step_result {
    vla_status status; /* VLA_ERR_UNSUPPORTED: the backend lacks the mechanism */
    float loss;
    float *grads, *params; /* [P.total] each, after the backward / after the update */
} step_result;

static step_result train_step(vla_backend *be, const tm_config *cfg, const float *p0, const int32_t *tok,
                              const int32_t *tgt, int B, int T) {
    step_result r = {VLA_OK, NAN, NULL, NULL};
    tm_model m;
    OK(tm_create(&m, be, cfg, B, T));
    const size_t n = m.P.total;
    const tm_optim opt = {1e-2, 1.0, 0.9, 0.999, 1e-8};
    OK(vla_buffer_upload(m.params, 0, p0, n * sizeof *p0));
    OK(vla_nn_fill(be, m.moments, 0, 2 * n, 0.0f));
    OK(tm_set_batch(&m, tok, tgt, B, T));
    r.status = tm_forward(&m, B, T);
    if (r.status == VLA_OK) r.status = tm_backward(&m, B, T);
    if (r.status == VLA_ERR_UNSUPPORTED) {
        tm_destroy(&m);
        return r;
    }
    ck_assert_msg(r.status == VLA_OK, "%s on %s: %s", tm_mixer_name(cfg->mixer), vla_backend_name(be),
                  vla_last_message());
    OK(tm_read_loss(&m, &r.loss));
    r.grads = tu_buf_download_new(m.grads, n);
    OK(tm_update(&m, &opt, 1e-3, 1));
    r.params = tu_buf_download_new(m.params, n);
    tm_destroy(&m);
    return r;
}

/* Relative 2-norm error of got against ref over [off, off + len); printed, bounded. */
static double step_err(const char *what, const char *label, const float *got, const float *ref, size_t off,
                       size_t len) {
    double num = 0, den = 0;
    for (size_t i = off; i < off + len; i++) {
        ck_assert_msg(isfinite(got[i]), "%s %s[%zu] = %g", label, what, i - off, (double)got[i]);
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), den += (double)ref[i] * ref[i];
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num);
    ck_assert_msg(e < STEP_TOL, "%s %s: relative error %.3e >= %.0e", label, what, e, STEP_TOL);
    return e;
}

START_TEST(test_train_step) {
    const tm_mixer mix = step_mixers[_i];
    const int B = 2, T = 70, M = B * T;
    tm_config cfg = {mix, 13, 32, 2, 2, 48, 72};
    tu_rng rng;
    tu_seed(&rng, 500 + (uint64_t)mix);
    /* The layout, for the size and the tensor offsets (a model on the CPU, freed at once). */
    tm_model lay;
    OK(tm_create(&lay, g_cpu, &cfg, B, T));
    const tm_params P = lay.P;
    tm_destroy(&lay);
    float *p0 = malloc(P.total * sizeof *p0);
    tu_randn(&rng, p0, P.total, 0.2f);
    for (int l = 0; l <= cfg.L; l++) {
        const size_t lnw[3] = {l < cfg.L ? P.blk[l].ln1w : P.lnfw, l < cfg.L ? P.blk[l].ln2w : TM_NONE,
                               l < cfg.L ? P.blk[l].lnow : TM_NONE};
        for (int i = 0; i < 3; i++)
            if (lnw[i] != TM_NONE)
                for (int j = 0; j < cfg.d; j++) p0[lnw[i] + j] = 1.0f + 0.5f * p0[lnw[i] + j];
    }
    int32_t *tok = malloc((size_t)M * sizeof *tok), *tgt = malloc((size_t)M * sizeof *tgt);
    for (int i = 0; i < M; i++) {
        tok[i] = (int32_t)(tu_next(&rng) % (uint64_t)cfg.V);
        tgt[i] = i % 3 == 1 ? -1 : (int32_t)(tu_next(&rng) % (uint64_t)cfg.V);
    }
    step_result ref = train_step(g_cpu, &cfg, p0, tok, tgt, B, T);
    ck_assert_msg(ref.status == VLA_OK, "the cpu lacks %s", tm_mixer_name(mix));
    /* The tensors of the layout, in order (the block tensors a mixer lacks are TM_NONE). */
    struct {
        const char *name;
        size_t off, len;
    } t[64];
    int nt = 0;
#define T_ADD(nm, o, l) \
    if ((o) != TM_NONE) t[nt].name = (nm), t[nt].off = (o), t[nt].len = (l), nt++
    const size_t d = (size_t)cfg.d, F = (size_t)cfg.F, H = (size_t)cfg.H;
    T_ADD("wte", P.wte, (size_t)cfg.V * d);
    T_ADD("wpe", P.wpe, (size_t)cfg.max_T * d);
    for (int l = 0; l < cfg.L; l++) {
        const tm_block_params *b = &P.blk[l];
        T_ADD("ln1w", b->ln1w, d);
        T_ADD("ln1b", b->ln1b, d);
        T_ADD("Wqkv", b->Wqkv, 3 * d * d);
        T_ADD("bqkv", b->bqkv, 3 * d);
        T_ADD("Wbeta", b->Wbeta, H * d);
        T_ADD("bbeta", b->bbeta, H);
        T_ADD("Wg", b->Wg, d * d);
        T_ADD("bg", b->bg, d);
        T_ADD("Wu", b->Wu, d * d);
        T_ADD("lnow", b->lnow, d);
        T_ADD("lnob", b->lnob, d);
        T_ADD("Wo", b->Wo, d * d);
        T_ADD("bo", b->bo, d);
        T_ADD("ln2w", b->ln2w, d);
        T_ADD("ln2b", b->ln2b, d);
        T_ADD("W1", b->W1, F * d);
        T_ADD("b1", b->b1, F);
        T_ADD("W2", b->W2, d * F);
        T_ADD("b2", b->b2, d);
    }
    T_ADD("lnfw", P.lnfw, d);
    T_ADD("lnfb", P.lnfb, d);
#undef T_ADD
    for (int k = 0; k < g_ntg; k++) {
        if (g_tg[k].own_gemm) continue;
        char label[96];
        snprintf(label, sizeof label, "step %s on %s:", tm_mixer_name(mix), g_tg[k].label);
        step_result got = train_step(g_tg[k].be, &cfg, p0, tok, tgt, B, T);
        if (got.status == VLA_ERR_UNSUPPORTED) {
            fprintf(stderr, "  %s SKIPPED: %s\n", label, vla_last_message());
            g_step_skipped++;
            continue;
        }
        const double loss_err = fabs((double)got.loss - ref.loss) / fabs((double)ref.loss);
        ck_assert_msg(loss_err < STEP_TOL, "%s loss %.9g vs cpu %.9g", label, (double)got.loss, (double)ref.loss);
        double worst = 0;
        const char *worst_name = "";
        for (int i = 0; i < nt; i++) {
            const double e = step_err(t[i].name, label, got.grads, ref.grads, t[i].off, t[i].len);
            if (e > worst) worst = e, worst_name = t[i].name;
        }
        const double pe = step_err("parameters after AdamW", label, got.params, ref.params, 0, P.total);
        if (loss_err > worst_seen_step) worst_seen_step = loss_err;
        if (worst > worst_seen_step) worst_seen_step = worst;
        fprintf(stderr, "  %s passed: loss %.7f (cpu %.7f, rel err %.1e), worst gradient %s %.1e, parameters after "
                        "the update %.1e (bound %.0e)\n",
                label, (double)got.loss, (double)ref.loss, loss_err, worst_name, worst, pe, STEP_TOL);
        free(got.grads), free(got.params);
    }
    free(ref.grads), free(ref.params), free(p0), free(tok), free(tgt);
}
END_TEST

/* The worst error seen, for the report (runs last). */
START_TEST(test_summary) {
    fprintf(stderr, "worst relative error against the cpu: %.2e (bound %.0e)\n", worst_seen, TOL);
    fprintf(stderr, "training step: worst relative error against the cpu %.2e (bound %.0e); %d device x mechanism "
                    "pairs skipped (the backend lacks the mechanism)\n",
            worst_seen_step, STEP_TOL, g_step_skipped);
}
END_TEST

static Suite *nn_backends_suite(void) {
    Suite *s = suite_create("nn_backends");
    TCase *tc = tcase_create("devices_vs_cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_gelu_sigmoid);
    tcase_add_test(tc, test_add);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_crossentropy);
    tcase_add_test(tc, test_global_norm);
    tcase_add_test(tc, test_adamw_fill);
    tcase_add_test(tc, test_tiny_model);
    tcase_add_test(tc, test_bad_ids);
    suite_add_tcase(s, tc);
    TCase *st = tcase_create("train_step");
    tcase_set_timeout(st, 120);
    tcase_add_loop_test(st, test_train_step, 0, (int)(sizeof step_mixers / sizeof step_mixers[0]));
    tcase_add_test(st, test_summary);
    suite_add_tcase(s, st);
    return s;
}

/* Opens `name` with the environment variable `var` set to `val` for the handle's life: read at
 * open (OpenCL) or at the first nn call (CUDA), which a one-element fill makes here. */
static vla_backend *open_with(const char *name, const char *var, const char *val) {
    vla_backend *be = NULL;
    setenv(var, val, 1);
    vla_status s = vla_backend_open(name, &be);
    vla_buffer *one = NULL;
    if (s == VLA_OK && (s = vla_buffer_alloc(be, 4, &one)) == VLA_OK) s = vla_nn_fill(be, one, 0, 1, 0.0f);
    vla_buffer_free(one);
    unsetenv(var);
    if (s != VLA_OK) {
        fprintf(stderr, "test_nn_backends: cannot open %s with %s=%s: %s\n", name, var, val, vla_last_message());
        exit(1);
    }
    return be;
}

static void add_target(const char *label, vla_backend *be, int own_gemm) {
    g_tg[g_ntg++] = (target){label, be, own_gemm};
    fprintf(stderr, "%-16s %s\n", label, vla_backend_device(be));
}

int main(void) {
    static vla_device_info info[16]; /* its names label the targets to the end */
    int n = 0;
    vla_list_devices(info, 16, &n);
    if (n > 16) n = 16;
    int n_ocl = 0, n_cuda = 0;
    for (int i = 0; i < n; i++) {
        n_ocl += strncmp(info[i].name, "opencl:", 7) == 0;
        n_cuda += strncmp(info[i].name, "cuda:", 5) == 0;
    }
    if (!n_ocl && !n_cuda) {
        printf("test_nn_backends: no OpenCL or CUDA device on this machine: skipped\n");
        return 77;
    }
    if (vla_backend_open("cpu", &g_cpu) != VLA_OK) {
        fprintf(stderr, "test_nn_backends: cannot open the cpu backend: %s\n", vla_last_message());
        return 1;
    }
    /* Every device; the own-GEMM handles (the op cases' second GEMM path) for the first device of
     * each kind only. */
    int first_ocl = 1, first_cuda = 1;
    for (int i = 0; i < n && g_ntg + 2 <= 16; i++) {
        const int ocl = strncmp(info[i].name, "opencl:", 7) == 0, cu = strncmp(info[i].name, "cuda:", 5) == 0;
        if (!ocl && !cu) continue;
        vla_backend *be = NULL;
        if (vla_backend_open(info[i].name, &be) != VLA_OK) {
            fprintf(stderr, "test_nn_backends: cannot open %s: %s\n", info[i].name, vla_last_message());
            return 1;
        }
        add_target(info[i].name, be, 0);
        if (ocl && first_ocl) {
            add_target("opencl own gemm", open_with(info[i].name, "VLA_OPENCL_NO_CLBLAST", "1"), 1);
            first_ocl = 0;
        }
        /* (the emulator has no cuBLAS: its products are the own kernel already) */
        if (cu && first_cuda && !strstr(vla_backend_device(be), "emulator")) {
            add_target("cuda own gemm", open_with(info[i].name, "VLA_CUDA_NN_GEMM", "own"), 1);
            first_cuda = 0;
        }
    }
    if (!n_ocl) fprintf(stderr, "opencl           no device on this machine: skipped\n");
    if (!n_cuda) fprintf(stderr, "cuda             no device on this machine (or not built): skipped\n");
    SRunner *sr = srunner_create(nn_backends_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int k = g_ntg - 1; k >= 0; k--) vla_backend_close(g_tg[k].be);
    vla_backend_close(g_cpu);
    return failed ? 1 : 0;
}
