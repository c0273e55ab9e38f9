/* The nn ops (vla/nn.h) on the CPU backend.
 *
 * Gradients: every backward against central finite differences, in double, of a float64
 * reference of its forward written here (not the library's code): with upstream r, the scalar
 * L = sum r . y(inputs), h = 1e-5 max(1, |x|). Forwards against the same references. Errors
 * are relative 2-norms ||got - ref|| / ||ref||, printed per tensor; the bounds (TOL_FWD 1e-6,
 * TOL_BWD 1e-5) sit about 10x above the worst errors measured (7e-8 forward; 1.2e-6 backward, a
 * 1 x 1 x 1 matmul whose gradient is small beside its random start). Backward outputs start from
 * random values, so += is what is checked. Every tensor lives at an offset inside one flat buffer
 * with poisoned guard elements around it that must stay untouched.
 * AdamW against a step computed by hand and against the textbook bias-corrected form in double.
 * A one-block tiny language model (embedding, LayerNorm, FFN with GELU, residual, final
 * LayerNorm, tied head, cross-entropy) composed from the ops: every parameter gradient in one
 * flat buffer against finite differences of the whole model, and a few AdamW steps lower its
 * loss. Thread counts 1 and 3 give the same results on shapes large enough to run threaded.
 * Every argument error once per op, with its status, a message naming the argument, and no
 * byte written. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_impl.h" /* white box: only for VLA_ERR_UNSUPPORTED (a backend without the table) */
#include "test_util.h"
#include "vla/nn.h"

#define TOL_FWD 1e-6
#define TOL_BWD 1e-5
#define GUARD 3

/* ---- a flat buffer of tensors with guards ------------------------------------------------- */

typedef struct flat {
    vla_backend *be;
    vla_buffer *buf;
    float *h; /* host copy */
    size_t cap, used;
    size_t off[64], n[64];
    int slots;
} flat;

static void flat_init(flat *f, vla_backend *be, size_t cap) {
    memset(f, 0, sizeof *f);
    f->be = be;
    f->cap = cap;
    f->h = malloc(cap * sizeof(float));
    ck_assert_ptr_nonnull(f->h);
    tu_poison(f->h, cap);
}

/* Reserves n elements after a guard; copies x (NULL: left poisoned, for outputs). */
static size_t flat_put(flat *f, const float *x, size_t n) {
    ck_assert_msg(f->used + GUARD + n + GUARD <= f->cap && f->slots < 64, "flat buffer too small");
    const size_t off = f->used + GUARD;
    if (x) memcpy(f->h + off, x, n * sizeof(float));
    f->off[f->slots] = off, f->n[f->slots] = n, f->slots++;
    f->used = off + n;
    return off;
}

static size_t flat_put_int(flat *f, const int32_t *x, size_t n) {
    const size_t off = flat_put(f, NULL, n);
    memcpy(f->h + off, x, n * sizeof(int32_t));
    return off;
}

static void flat_upload(flat *f) {
    const size_t total = f->used + GUARD;
    if (!f->buf) ck_assert_int_eq(vla_buffer_alloc(f->be, total * sizeof(float), &f->buf), VLA_OK);
    ck_assert_int_eq(vla_buffer_upload(f->buf, 0, f->h, total * sizeof(float)), VLA_OK);
}

/* Downloads into f->h and checks that every element outside the slots is still poison. */
static void flat_download(flat *f, const char *what) {
    const size_t total = f->used + GUARD;
    ck_assert_int_eq(vla_buffer_download(f->buf, 0, f->h, total * sizeof(float)), VLA_OK);
    char *in = calloc(total, 1);
    for (int s = 0; s < f->slots; s++) memset(in + f->off[s], 1, f->n[s]);
    for (size_t i = 0; i < total; i++)
        ck_assert_msg(in[i] || tu_is_poison(f->h[i]), "%s: guard element %zu was written", what, i);
    free(in);
}

static void flat_free(flat *f) {
    vla_buffer_free(f->buf);
    free(f->h);
    memset(f, 0, sizeof *f);
}

/* ---- helpers ---- */

static double *dbl(const float *x, size_t n) { return tu_to_double(x, n); }

static float *randn(tu_rng *r, size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    tu_randn(r, x, n, scale);
    return x;
}

/* got - base (a backward's increment), to double. */
static double *increment(const float *got, const float *base, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = (double)got[i] - (double)base[i];
    return d;
}

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Checks one tensor: prints and asserts its relative error. */
static void expect_close_d(const char *what, const double *got, const double *ref, size_t n, double tol) {
    const double e = tu_relerr_dd(got, ref, n);
    fprintf(stderr, "  %-44s relerr %.2e (bound %.0e)\n", what, e, tol);
    ck_assert_msg(e < tol, "%s: relative error %.3e >= %.0e", what, e, tol);
}
static void expect_close(const char *what, const float *got, const double *ref, size_t n, double tol) {
    ck_assert_msg(tu_count_poison(got, n) == 0, "%s: %zu elements never written", what, tu_count_poison(got, n));
    const double e = tu_relerr(got, ref, n);
    fprintf(stderr, "  %-44s relerr %.2e (bound %.0e)\n", what, e, tol);
    ck_assert_msg(e < tol, "%s: relative error %.3e >= %.0e", what, e, tol);
}
static void expect_grad(const char *what, const float *got, const float *base, const double *ref, size_t n) {
    double *inc = increment(got, base, n);
    expect_close_d(what, inc, ref, n, TOL_BWD);
    free(inc);
}

#define OK(call)                                                                                     \
    do {                                                                                             \
        vla_status s_ = (call);                                                                      \
        ck_assert_msg(s_ == VLA_OK, "%s: %s: %s", #call, vla_status_string(s_), vla_last_message()); \
    } while (0)

/* ---- finite differences ---- */

typedef double (*scalar_fn)(void *ctx);

/* g[i] = dL/dx[i] by central differences; x is perturbed in place and restored. */
static void fd_grad(scalar_fn L, void *ctx, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        const double lp = L(ctx);
        x[i] = x0 - h;
        const double lm = L(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

/* ---- float64 references of the forwards ---- */

static void r_matmul(double *y, const double *x, const double *W, const double *b, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0.0;
            for (int k = 0; k < K; k++) s += x[(size_t)m * K + k] * W[(size_t)n * K + k];
            y[(size_t)m * N + n] = s;
        }
}

static void r_layernorm(double *y, double *mean, double *rstd, const double *x, const double *w, const double *b, int M,
                        int C, double eps) {
    for (int m = 0; m < M; m++) {
        const double *r = x + (size_t)m * C;
        double mu = 0.0, var = 0.0;
        for (int i = 0; i < C; i++) mu += r[i];
        mu /= C;
        for (int i = 0; i < C; i++) var += (r[i] - mu) * (r[i] - mu);
        var /= C;
        const double rs = 1.0 / sqrt(var + eps);
        for (int i = 0; i < C; i++) y[(size_t)m * C + i] = (r[i] - mu) * rs * w[i] + b[i];
        if (mean) mean[m] = mu;
        if (rstd) rstd[m] = rs;
    }
}

static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void r_embedding(double *out, const int32_t *tok, const double *wte, const double *wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                const size_t i = (size_t)b * T + t;
                out[i * C + c] = wte[(size_t)tok[i] * C + c] + (wpe ? wpe[(size_t)t * C + c] : 0.0);
            }
}

/* Mean over the rows with a target of -log softmax; 0 when no row has one. */
static double r_crossentropy(const double *z, const int32_t *tg, int M, int V) {
    double s = 0.0;
    int n = 0;
    for (int m = 0; m < M; m++) {
        if (tg[m] < 0) continue;
        const double *r = z + (size_t)m * V;
        double mx = r[0], se = 0.0;
        for (int j = 1; j < V; j++) mx = fmax(mx, r[j]);
        for (int j = 0; j < V; j++) se += exp(r[j] - mx);
        s += mx + log(se) - r[tg[m]];
        n++;
    }
    return n ? s / n : 0.0;
}

/* ---- matmul ---- */

typedef struct mm_ctx {
    int M, N, K;
    double *x, *W, *b, *r, *y;
} mm_ctx;

static double mm_L(void *c) {
    mm_ctx *k = c;
    r_matmul(k->y, k->x, k->W, k->b, k->M, k->N, k->K);
    return dot_d(k->r, k->y, (size_t)k->M * k->N);
}

static void check_matmul(int M, int N, int K, int with_bias, uint64_t seed) {
    fprintf(stderr, "matmul M=%d N=%d K=%d%s\n", M, N, K, with_bias ? " + bias" : "");
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t nMK = (size_t)M * K, nNK = (size_t)N * K, nMN = (size_t)M * N;
    float *x = randn(&rng, nMK, 1), *W = randn(&rng, nNK, 0.5f), *b = randn(&rng, N, 1), *r = randn(&rng, nMN, 1);
    float *gx = randn(&rng, nMK, 1), *gW = randn(&rng, nNK, 1), *gb = randn(&rng, N, 1);
    flat f;
    flat_init(&f, be, 2 * (nMK + nNK + nMN) + 4 * N + 64);
    const size_t ox = flat_put(&f, x, nMK), oW = flat_put(&f, W, nNK), ob = flat_put(&f, b, N);
    const size_t oy = flat_put(&f, NULL, nMN), or = flat_put(&f, r, nMN);
    const size_t ogx = flat_put(&f, gx, nMK), ogW = flat_put(&f, gW, nNK), ogb = flat_put(&f, gb, N);
    flat_upload(&f);
    OK(vla_nn_matmul_forward(be, f.buf, oy, f.buf, ox, f.buf, oW, with_bias ? f.buf : NULL, ob, M, N, K));
    OK(vla_nn_matmul_backward(be, f.buf, ogx, f.buf, ogW, with_bias ? f.buf : NULL, ogb, f.buf, or, f.buf, ox, f.buf,
                              oW, M, N, K));
    flat_download(&f, "matmul");

    mm_ctx c = {M, N, K, dbl(x, nMK), dbl(W, nNK), with_bias ? dbl(b, N) : NULL, dbl(r, nMN), malloc(nMN * sizeof(double))};
    mm_L(&c);
    expect_close("matmul y", f.h + oy, c.y, nMN, TOL_FWD);
    double *g = malloc((nMK + nNK + N) * sizeof *g);
    fd_grad(mm_L, &c, c.x, nMK, g);
    expect_grad("matmul dx (+=)", f.h + ogx, gx, g, nMK);
    fd_grad(mm_L, &c, c.W, nNK, g);
    expect_grad("matmul dW (+=)", f.h + ogW, gW, g, nNK);
    if (with_bias) {
        fd_grad(mm_L, &c, c.b, N, g);
        expect_grad("matmul dbias (+=)", f.h + ogb, gb, g, N);
    } else {
        ck_assert(memcmp(f.h + ogb, gb, N * sizeof(float)) == 0); /* no bias: dbias untouched */
    }
    free(g), free(c.x), free(c.W), free(c.b), free(c.r), free(c.y);
    free(x), free(W), free(b), free(r), free(gx), free(gW), free(gb);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_matmul) {
    check_matmul(7, 5, 3, 1, 1);
    check_matmul(7, 5, 3, 0, 2);
    check_matmul(1, 1, 1, 1, 3);
    check_matmul(13, 9, 17, 1, 4);
    check_matmul(3, 70, 2, 1, 5); /* N over one column block of the bias gradient */
}
END_TEST

/* ---- LayerNorm ---- */

typedef struct ln_ctx {
    int M, C;
    double eps;
    double *x, *w, *b, *r, *y;
} ln_ctx;

static double ln_L(void *c) {
    ln_ctx *k = c;
    r_layernorm(k->y, NULL, NULL, k->x, k->w, k->b, k->M, k->C, k->eps);
    return dot_d(k->r, k->y, (size_t)k->M * k->C);
}

static void check_layernorm(int M, int C, float eps, float shift, uint64_t seed) {
    fprintf(stderr, "layernorm M=%d C=%d eps=%g (rows shifted by %g)\n", M, C, (double)eps, (double)shift);
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t n = (size_t)M * C;
    float *x = randn(&rng, n, 1), *w = randn(&rng, C, 1), *b = randn(&rng, C, 1), *r = randn(&rng, n, 1);
    for (size_t i = 0; i < n; i++) x[i] += shift;
    float *gx = randn(&rng, n, 1), *gw = randn(&rng, C, 1), *gb = randn(&rng, C, 1);
    flat f;
    flat_init(&f, be, 4 * n + 6 * C + 2 * M + 64);
    const size_t ox = flat_put(&f, x, n), ow = flat_put(&f, w, C), ob = flat_put(&f, b, C);
    const size_t oy = flat_put(&f, NULL, n), om = flat_put(&f, NULL, M), ors = flat_put(&f, NULL, M);
    const size_t or = flat_put(&f, r, n), ogx = flat_put(&f, gx, n), ogw = flat_put(&f, gw, C), ogb = flat_put(&f, gb, C);
    flat_upload(&f);
    OK(vla_nn_layernorm_forward(be, f.buf, oy, f.buf, om, f.buf, ors, f.buf, ox, f.buf, ow, f.buf, ob, M, C, eps));
    OK(vla_nn_layernorm_backward(be, f.buf, ogx, f.buf, ogw, f.buf, ogb, f.buf, or, f.buf, ox, f.buf, ow, f.buf, om,
                                 f.buf, ors, M, C));
    flat_download(&f, "layernorm");

    ln_ctx c = {M, C, eps, dbl(x, n), dbl(w, C), dbl(b, C), dbl(r, n), malloc(n * sizeof(double))};
    double *mean = malloc(M * sizeof *mean), *rstd = malloc(M * sizeof *rstd);
    r_layernorm(c.y, mean, rstd, c.x, c.w, c.b, M, C, eps);
    expect_close("layernorm y", f.h + oy, c.y, n, TOL_FWD);
    expect_close("layernorm mean", f.h + om, mean, M, TOL_FWD);
    expect_close("layernorm rstd", f.h + ors, rstd, M, TOL_FWD);
    double *g = malloc(n * sizeof *g);
    fd_grad(ln_L, &c, c.x, n, g);
    expect_grad("layernorm dx (+=)", f.h + ogx, gx, g, n);
    fd_grad(ln_L, &c, c.w, C, g);
    expect_grad("layernorm dweight (+=)", f.h + ogw, gw, g, C);
    fd_grad(ln_L, &c, c.b, C, g);
    expect_grad("layernorm dbias (+=)", f.h + ogb, gb, g, C);
    free(g), free(mean), free(rstd), free(c.x), free(c.w), free(c.b), free(c.r), free(c.y);
    free(x), free(w), free(b), free(r), free(gx), free(gw), free(gb);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_layernorm) {
    check_layernorm(5, 8, 1e-5f, 0.0f, 11);
    check_layernorm(3, 70, 1e-5f, 3.0f, 12); /* two column blocks; rows far from 0 */
    check_layernorm(4, 2, 0.1f, 0.0f, 13);  /* a large eps matters */
}
END_TEST

/* ---- elementwise ---- */

typedef struct ew_ctx {
    size_t n;
    int op; /* 0 gelu, 1 sigmoid, 2 add */
    double *x, *c, *r;
} ew_ctx;

static double ew_L(void *p) {
    ew_ctx *k = p;
    double s = 0.0;
    for (size_t i = 0; i < k->n; i++) {
        const double y = k->op == 0 ? r_gelu(k->x[i]) : k->op == 1 ? r_sigmoid(k->x[i]) : k->x[i] + k->c[i];
        s += k->r[i] * y;
    }
    return s;
}

/* x spans the interesting range: N(0, 3^2), plus a few large values (saturation). */
static float *ew_input(tu_rng *rng, size_t n) {
    float *x = randn(rng, n, 3.0f);
    x[0] = 9.5f, x[1] = -9.5f, x[2] = 30.0f, x[3] = -30.0f;
    return x;
}

static void check_unary(int op, int inplace, uint64_t seed) {
    const char *name = op == 0 ? "gelu" : "sigmoid";
    fprintf(stderr, "%s n=41%s\n", name, inplace ? " (forward in place)" : "");
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t n = 41;
    float *x = ew_input(&rng, n), *r = randn(&rng, n, 1), *gx = randn(&rng, n, 1);
    flat f;
    flat_init(&f, be, 6 * n + 64);
    const size_t ox = flat_put(&f, x, n), ox2 = flat_put(&f, x, n), oy = inplace ? ox2 : flat_put(&f, NULL, n);
    const size_t or = flat_put(&f, r, n), ogx = flat_put(&f, gx, n);
    flat_upload(&f);
    /* The forward writes y (x2 itself when in place); the backward reads x (gelu) or y (sigmoid). */
    if (op == 0) {
        OK(vla_nn_gelu_forward(be, f.buf, oy, f.buf, ox2, n));
        OK(vla_nn_gelu_backward(be, f.buf, ogx, f.buf, or, f.buf, ox, n));
    } else {
        OK(vla_nn_sigmoid_forward(be, f.buf, oy, f.buf, ox2, n));
        OK(vla_nn_sigmoid_backward(be, f.buf, ogx, f.buf, or, f.buf, oy, n));
    }
    flat_download(&f, name);
    ew_ctx c = {n, op, dbl(x, n), NULL, dbl(r, n)};
    double *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) y[i] = op == 0 ? r_gelu(c.x[i]) : r_sigmoid(c.x[i]);
    char what[64];
    snprintf(what, sizeof what, "%s y", name);
    expect_close(what, f.h + oy, y, n, TOL_FWD);
    fd_grad(ew_L, &c, c.x, n, g);
    snprintf(what, sizeof what, "%s dx (+=)", name);
    expect_grad(what, f.h + ogx, gx, g, n);
    free(y), free(g), free(c.x), free(c.r), free(x), free(r), free(gx);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_gelu) {
    check_unary(0, 0, 21);
    check_unary(0, 1, 22);
    /* Spot values of the exact form (not the tanh approximation: GELU(1) would be 0.841192). */
    vla_backend *be = tu_open_cpu();
    const float xs[3] = {1.0f, -1.0f, 2.0f};
    vla_buffer *buf = tu_buf_from(be, xs, 3);
    OK(vla_nn_gelu_forward(be, buf, 0, buf, 0, 3));
    float *y = tu_buf_download_new(buf, 3);
    ck_assert_msg(fabs(y[0] - 0.8413447460685429) < 1e-6, "GELU(1) = %.7f", (double)y[0]);
    ck_assert_msg(fabs(y[1] + 0.15865525393145707) < 1e-6, "GELU(-1) = %.7f", (double)y[1]);
    ck_assert_msg(fabs(y[2] - 1.9544997361036416) < 1e-6, "GELU(2) = %.7f", (double)y[2]);
    free(y);
    vla_buffer_free(buf);
    vla_backend_close(be);
}
END_TEST

START_TEST(test_sigmoid) {
    check_unary(1, 0, 31);
    check_unary(1, 1, 32);
}
END_TEST

START_TEST(test_add) {
    fprintf(stderr, "add n=29\n");
    tu_rng rng;
    tu_seed(&rng, 41);
    vla_backend *be = tu_open_cpu();
    const size_t n = 29;
    float *a = randn(&rng, n, 1), *c = randn(&rng, n, 1), *r = randn(&rng, n, 1);
    float *ga = randn(&rng, n, 1), *gc = randn(&rng, n, 1);
    flat f;
    flat_init(&f, be, 8 * n + 64);
    const size_t oa = flat_put(&f, a, n), oc = flat_put(&f, c, n), oy = flat_put(&f, NULL, n), or = flat_put(&f, r, n);
    const size_t oga = flat_put(&f, ga, n), ogc = flat_put(&f, gc, n), oacc = flat_put(&f, a, n);
    flat_upload(&f);
    OK(vla_nn_add_forward(be, f.buf, oy, f.buf, oa, f.buf, oc, n));
    OK(vla_nn_add_forward(be, f.buf, oacc, f.buf, oacc, f.buf, oc, n)); /* x = x + f(x), in place */
    OK(vla_nn_add_backward(be, f.buf, oga, f.buf, ogc, f.buf, or, n));
    flat_download(&f, "add");
    ew_ctx k = {n, 2, dbl(a, n), dbl(c, n), dbl(r, n)};
    double *y = malloc(n * sizeof *y), *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) y[i] = k.x[i] + k.c[i];
    expect_close("add y", f.h + oy, y, n, TOL_FWD);
    expect_close("add y in place", f.h + oacc, y, n, TOL_FWD);
    fd_grad(ew_L, &k, k.x, n, g);
    expect_grad("add da (+=)", f.h + oga, ga, g, n);
    fd_grad(ew_L, &k, k.c, n, g);
    expect_grad("add dc (+=)", f.h + ogc, gc, g, n);
    free(y), free(g), free(k.x), free(k.c), free(k.r), free(a), free(c), free(r), free(ga), free(gc);
    flat_free(&f);
    vla_backend_close(be);
}
END_TEST

/* ---- embeddings ---- */

typedef struct emb_ctx {
    int B, T, C;
    const int32_t *tok;
    double *wte, *wpe, *r, *out;
} emb_ctx;

static double emb_L(void *p) {
    emb_ctx *k = p;
    r_embedding(k->out, k->tok, k->wte, k->wpe, k->B, k->T, k->C);
    return dot_d(k->r, k->out, (size_t)k->B * k->T * k->C);
}

static void check_embedding(int with_wpe, uint64_t seed) {
    const int B = 2, T = 5, C = 6, V = 4, maxT = 9; /* V < B T: tokens repeat */
    fprintf(stderr, "embedding B=%d T=%d C=%d V=%d%s\n", B, T, C, V, with_wpe ? " + positions (table of 9)" : "");
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t nBTC = (size_t)B * T * C, nVC = (size_t)V * C, nPC = (size_t)maxT * C;
    int32_t tok[10];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(tu_next(&rng) % V);
    tok[0] = tok[3] = tok[7] = 2; /* the same token three times */
    float *wte = randn(&rng, nVC, 1), *wpe = randn(&rng, nPC, 1), *r = randn(&rng, nBTC, 1);
    float *gte = randn(&rng, nVC, 1), *gpe = randn(&rng, nPC, 1);
    flat f;
    flat_init(&f, be, 3 * nBTC + 2 * nVC + 2 * nPC + B * T + 64);
    const size_t otok = flat_put_int(&f, tok, (size_t)B * T); /* int32 tokens in the same flat buffer */
    const size_t ote = flat_put(&f, wte, nVC), ope = flat_put(&f, wpe, nPC), oo = flat_put(&f, NULL, nBTC);
    const size_t or = flat_put(&f, r, nBTC), ogte = flat_put(&f, gte, nVC), ogpe = flat_put(&f, gpe, nPC);
    flat_upload(&f);
    OK(vla_nn_embedding_forward(be, f.buf, oo, f.buf, otok, f.buf, ote, with_wpe ? f.buf : NULL, ope, B, T, C, V));
    OK(vla_nn_embedding_backward(be, f.buf, ogte, with_wpe ? f.buf : NULL, ogpe, f.buf, or, f.buf, otok, B, T, C, V));
    flat_download(&f, "embedding");
    emb_ctx k = {B, T, C, tok, dbl(wte, nVC), with_wpe ? dbl(wpe, nPC) : NULL, dbl(r, nBTC), malloc(nBTC * sizeof(double))};
    emb_L(&k);
    expect_close("embedding out", f.h + oo, k.out, nBTC, TOL_FWD);
    double *g = malloc(nPC * sizeof *g);
    fd_grad(emb_L, &k, k.wte, nVC, g);
    expect_grad("embedding dwte (scatter, +=)", f.h + ogte, gte, g, nVC);
    if (with_wpe) {
        fd_grad(emb_L, &k, k.wpe, (size_t)T * C, g);
        expect_grad("embedding dwpe rows 0..T-1 (+=)", f.h + ogpe, gpe, g, (size_t)T * C);
    }
    /* Rows T.. of the position table are neither read nor written. */
    ck_assert(memcmp(f.h + ogpe + (size_t)T * C, gpe + (size_t)T * C, (nPC - (size_t)T * C) * sizeof(float)) == 0);
    if (!with_wpe) ck_assert(memcmp(f.h + ogpe, gpe, nPC * sizeof(float)) == 0);
    free(g), free(k.wte), free(k.wpe), free(k.r), free(k.out), free(wte), free(wpe), free(r), free(gte), free(gpe);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_embedding) {
    check_embedding(1, 51);
    check_embedding(0, 52);
}
END_TEST

/* ---- cross-entropy ---- */

typedef struct ce_ctx {
    int M, V;
    const int32_t *tg;
    double *z;
} ce_ctx;

static double ce_L(void *p) {
    ce_ctx *k = p;
    return r_crossentropy(k->z, k->tg, k->M, k->V);
}

static void check_crossentropy(int inplace, float scale, uint64_t seed) {
    const int M = 9, V = 6;
    fprintf(stderr, "crossentropy M=%d V=%d, logits N(0, %g^2)%s\n", M, V, (double)scale,
            inplace ? ", dlogits in place" : "");
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t n = (size_t)M * V;
    int32_t tg[9] = {3, -1, 0, 5, -1, 2, 2, -1, 1}; /* -1: no target */
    float *z = randn(&rng, n, scale);
    flat f;
    flat_init(&f, be, 3 * n + M + 64);
    const size_t otg = flat_put_int(&f, tg, M), oz = flat_put(&f, z, n);
    const size_t odz = inplace ? oz : flat_put(&f, NULL, n), ol = flat_put(&f, NULL, 1);
    flat_upload(&f);
    OK(vla_nn_crossentropy(be, f.buf, ol, f.buf, odz, f.buf, oz, f.buf, otg, M, V));
    flat_download(&f, "crossentropy");
    ce_ctx k = {M, V, tg, dbl(z, n)};
    const double L = ce_L(&k);
    expect_close("crossentropy loss", f.h + ol, &L, 1, TOL_FWD);
    double *g = malloc(n * sizeof *g);
    fd_grad(ce_L, &k, k.z, n, g);
    expect_close("crossentropy dlogits (overwritten)", f.h + odz, g, n, TOL_BWD);
    for (int m = 0; m < M; m++)
        if (tg[m] < 0)
            for (int j = 0; j < V; j++) ck_assert_msg(f.h[odz + (size_t)m * V + j] == 0.0f, "row %d without target", m);
    free(g), free(k.z), free(z);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_crossentropy) {
    check_crossentropy(0, 1.0f, 61);
    check_crossentropy(1, 1.0f, 62);
    check_crossentropy(0, 40.0f, 63); /* large logits: log-sum-exp must not overflow */
    /* A uniform row: loss = log V exactly; no target anywhere: loss 0 and dlogits 0. */
    vla_backend *be = tu_open_cpu();
    float z[8] = {0};
    int32_t tg[2] = {1, -1};
    vla_buffer *bz = tu_buf_from(be, z, 8), *bd = tu_buf_new(be, 8), *bl = tu_buf_new(be, 1), *bt = tu_buf_new(be, 2);
    ck_assert_int_eq(vla_buffer_upload(bt, 0, tg, sizeof tg), VLA_OK);
    OK(vla_nn_crossentropy(be, bl, 0, bd, 0, bz, 0, bt, 0, 2, 4));
    float loss;
    ck_assert_int_eq(vla_buffer_download(bl, 0, &loss, 4), VLA_OK);
    ck_assert_msg(fabs(loss - log(4.0)) < 1e-6, "uniform: loss %g, log 4 = %g", (double)loss, log(4.0));
    tg[0] = -1;
    ck_assert_int_eq(vla_buffer_upload(bt, 0, tg, sizeof tg), VLA_OK);
    OK(vla_nn_crossentropy(be, bl, 0, bd, 0, bz, 0, bt, 0, 2, 4));
    float *d = tu_buf_download_new(bd, 8);
    ck_assert_int_eq(vla_buffer_download(bl, 0, &loss, 4), VLA_OK);
    ck_assert(loss == 0.0f);
    for (int i = 0; i < 8; i++) ck_assert(d[i] == 0.0f);
    /* Both outputs optional: loss alone. */
    OK(vla_nn_crossentropy(be, bl, 0, NULL, 0, bz, 0, bt, 0, 2, 4));
    free(d);
    vla_buffer_free(bz), vla_buffer_free(bd), vla_buffer_free(bl), vla_buffer_free(bt);
    vla_backend_close(be);
}
END_TEST

/* ---- global norm and AdamW ---- */

START_TEST(test_global_norm) {
    tu_rng rng;
    tu_seed(&rng, 71);
    vla_backend *be = tu_open_cpu();
    const size_t n = 100003;
    float *x = randn(&rng, n, 1);
    flat f;
    flat_init(&f, be, n + 64);
    const size_t ox = flat_put(&f, x, n), on = flat_put(&f, NULL, 1);
    flat_upload(&f);
    OK(vla_nn_global_norm(be, f.buf, on, f.buf, ox, n));
    flat_download(&f, "global_norm");
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    const double ref = sqrt(s);
    fprintf(stderr, "global norm n=%zu\n", n);
    expect_close("norm", f.h + on, &ref, 1, TOL_FWD);
    free(x);
    flat_free(&f);
    vla_backend_close(be);
}
END_TEST

/* One step worked by hand: p = 1, g = 0.5, m = v = 0, t = 1, lr 0.1, wd 0.01, betas 0.9, 0.999.
 *   p <- 1 (1 - 0.1 * 0.01) = 0.999
 *   m = 0.1 * 0.5 = 0.05,  v = 0.001 * 0.25 = 0.00025
 *   m^ = 0.05 / 0.1 = 0.5,  v^ = 0.00025 / 0.001 = 0.25,  sqrt(v^) = 0.5
 *   p <- 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.899000002 */
START_TEST(test_adamw_hand) {
    vla_backend *be = tu_open_cpu();
    float h[4] = {1.0f, 0.0f, 0.0f, 0.5f}; /* param, m, v, grad in one buffer */
    vla_buffer *buf = tu_buf_from(be, h, 4);
    vla_adamw_params p;
    OK(vla_adamw_params_init(&p));
    ck_assert(p.lr == 1e-3 && p.beta1 == 0.9 && p.beta2 == 0.999 && p.eps == 1e-8 && p.weight_decay == 1e-2 &&
              p.step == 1 && p.max_norm == 0); /* torch's defaults */
    p.lr = 0.1;
    OK(vla_nn_adamw_step(be, buf, 0, buf, 1, buf, 2, buf, 3, NULL, 0, 1, &p));
    ck_assert_int_eq(vla_buffer_download(buf, 0, h, sizeof h), VLA_OK);
    fprintf(stderr, "adamw by hand: param %.9f (0.899000002), m %.9g (0.05), v %.9g (0.00025)\n", (double)h[0],
            (double)h[1], (double)h[2]);
    ck_assert(fabs(h[0] - 0.899000002) < 1e-7);
    ck_assert(fabs(h[1] - 0.05) < 1e-9);
    ck_assert(fabs(h[2] - 0.00025) < 1e-10);
    ck_assert(h[3] == 0.5f); /* grad is read, not written */
    vla_buffer_free(buf);
    vla_backend_close(be);
}
END_TEST

/* The textbook form, in double: clip, decay, moments, bias-corrected ratio. */
static void r_adamw(double *p, double *m, double *v, const double *g, size_t n, const vla_adamw_params *a, double norm) {
    const double s = a->max_norm > 0 ? fmin(1.0, a->max_norm / (norm + 1e-6)) : 1.0;
    for (size_t i = 0; i < n; i++) {
        const double gi = g[i] * s;
        p[i] *= 1.0 - a->lr * a->weight_decay;
        m[i] = a->beta1 * m[i] + (1.0 - a->beta1) * gi;
        v[i] = a->beta2 * v[i] + (1.0 - a->beta2) * gi * gi;
        const double mh = m[i] / (1.0 - pow(a->beta1, (double)a->step));
        const double vh = v[i] / (1.0 - pow(a->beta2, (double)a->step));
        p[i] -= a->lr * mh / (sqrt(vh) + a->eps);
    }
}

static void check_adamw_steps(double beta1, double max_norm, double grad_scale, uint64_t seed) {
    fprintf(stderr, "adamw 6 steps, beta1 %g, max_norm %g, |grad| ~ %g\n", beta1, max_norm, grad_scale);
    tu_rng rng;
    tu_seed(&rng, seed);
    vla_backend *be = tu_open_cpu();
    const size_t n = 257;
    float *p0 = randn(&rng, n, 1);
    flat f;
    flat_init(&f, be, 4 * n + 64);
    const size_t op = flat_put(&f, p0, n), om = flat_put(&f, NULL, n), ov = flat_put(&f, NULL, n);
    const size_t og = flat_put(&f, NULL, n), on = flat_put(&f, NULL, 1);
    flat_upload(&f);
    OK(vla_nn_fill(be, f.buf, om, n, 0.0f));
    OK(vla_nn_fill(be, f.buf, ov, n, 0.0f));
    double *p = dbl(p0, n), *m = calloc(n, sizeof(double)), *v = calloc(n, sizeof(double)), *g = malloc(n * sizeof *g);
    vla_adamw_params a;
    OK(vla_adamw_params_init(&a));
    a.lr = 3e-2, a.beta1 = beta1, a.weight_decay = 0.05, a.max_norm = max_norm;
    float *gf = malloc(n * sizeof *gf);
    for (int t = 1; t <= 6; t++) {
        tu_randn(&rng, gf, n, (float)grad_scale);
        ck_assert_int_eq(vla_buffer_upload(f.buf, og * 4, gf, n * 4), VLA_OK);
        for (size_t i = 0; i < n; i++) g[i] = gf[i];
        double norm = sqrt(dot_d(g, g, n));
        a.step = t;
        if (max_norm > 0) OK(vla_nn_global_norm(be, f.buf, on, f.buf, og, n));
        OK(vla_nn_adamw_step(be, f.buf, op, f.buf, om, f.buf, ov, f.buf, og, max_norm > 0 ? f.buf : NULL, on, n, &a));
        r_adamw(p, m, v, g, n, &a, norm);
    }
    flat_download(&f, "adamw");
    expect_close("adamw param after 6 steps", f.h + op, p, n, 1e-6);
    expect_close("adamw m", f.h + om, m, n, 1e-6);
    expect_close("adamw v", f.h + ov, v, n, 1e-6);
    free(p), free(m), free(v), free(g), free(gf), free(p0);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_adamw_steps) {
    check_adamw_steps(0.9, 0.0, 1.0, 81);
    check_adamw_steps(0.9, 1.0, 1.0, 82);  /* norm ~ 16: clipped */
    check_adamw_steps(0.9, 1.0, 0.01, 83); /* norm ~ 0.16: not clipped */
    check_adamw_steps(0.3, 0.5, 1.0, 84);  /* beta1 < 0.5: torch's lerp takes its other form */
    /* lr = 0 leaves the parameters bit for bit (and still moves the moments). */
    vla_backend *be = tu_open_cpu();
    float h[4] = {0.7f, 0.0f, 0.0f, 2.0f};
    vla_buffer *buf = tu_buf_from(be, h, 4);
    vla_adamw_params a;
    vla_adamw_params_init(&a);
    a.lr = 0.0;
    OK(vla_nn_adamw_step(be, buf, 0, buf, 1, buf, 2, buf, 3, NULL, 0, 1, &a));
    ck_assert_int_eq(vla_buffer_download(buf, 0, h, sizeof h), VLA_OK);
    ck_assert(h[0] == 0.7f && h[1] != 0.0f && h[2] != 0.0f);
    vla_buffer_free(buf);
    vla_backend_close(be);
}
END_TEST

/* ---- a tiny language model composed from the ops ------------------------------------------- */
/* x0 = wte[tok] + wpe;  h = LN1(x0);  a = h W1^T + b1;  x1 = x0 + GELU(a) W2^T + b2;
 * z = LNf(x1);  logits = z wte^T (tied);  loss = CE(logits, targets). */

enum { TB = 2, TT = 5, TC = 8, TF = 12, TV = 11, TMAXT = 7 };
#define TM (TB * TT)

typedef struct tiny_layout {
    size_t wte, wpe, ln1w, ln1b, W1, b1, W2, b2, lnfw, lnfb, total;
} tiny_layout;

static tiny_layout tiny_params(void) {
    tiny_layout L;
    size_t o = 0;
#define P(field, n) L.field = o, o += (n);
    P(wte, TV * TC) P(wpe, TMAXT * TC) P(ln1w, TC) P(ln1b, TC) P(W1, TF * TC) P(b1, TF) P(W2, TC * TF) P(b2, TC)
        P(lnfw, TC) P(lnfb, TC)
#undef P
    L.total = o;
    return L;
}

typedef struct tiny_ctx {
    tiny_layout L;
    double *p;
    const int32_t *tok, *tg;
} tiny_ctx;

static double tiny_loss_ref(void *c) {
    tiny_ctx *k = c;
    const double *p = k->p;
    const tiny_layout *L = &k->L;
    static double x0[TM * TC], h[TM * TC], a[TM * TF], x1[TM * TC], f[TM * TC], z[TM * TC], lg[TM * TV];
    r_embedding(x0, k->tok, p + L->wte, p + L->wpe, TB, TT, TC);
    r_layernorm(h, NULL, NULL, x0, p + L->ln1w, p + L->ln1b, TM, TC, 1e-5);
    r_matmul(a, h, p + L->W1, p + L->b1, TM, TF, TC);
    for (int i = 0; i < TM * TF; i++) a[i] = r_gelu(a[i]);
    r_matmul(f, a, p + L->W2, p + L->b2, TM, TC, TF);
    for (int i = 0; i < TM * TC; i++) x1[i] = x0[i] + f[i];
    r_layernorm(z, NULL, NULL, x1, p + L->lnfw, p + L->lnfb, TM, TC, 1e-5);
    r_matmul(lg, z, p + L->wte, NULL, TM, TV, TC);
    return r_crossentropy(lg, k->tg, TM, TV);
}

/* Activations of one step, in one flat buffer (offsets in elements). */
typedef struct tiny_acts {
    size_t tok, tg, x0, h, m1, r1, a, g, x1, z, mf, rf, lg, loss, dx0, dh, da, dg, dx1, dz, total;
} tiny_acts;

static tiny_acts tiny_act_layout(void) {
    tiny_acts A;
    size_t o = 0;
#define P(field, n) A.field = o, o += (n);
    P(tok, TM) P(tg, TM) P(x0, TM * TC) P(h, TM * TC) P(m1, TM) P(r1, TM) P(a, TM * TF) P(g, TM * TF) P(x1, TM * TC)
        P(z, TM * TC) P(mf, TM) P(rf, TM) P(lg, TM * TV) P(loss, 1) P(dx0, TM * TC) P(dh, TM * TC) P(da, TM * TF)
            P(dg, TM * TF) P(dx1, TM * TC) P(dz, TM * TC)
#undef P
    A.total = o;
    return A;
}

/* Forward and backward of one step: loss into acts, gradients (zeroed first) into G. */
static void tiny_step(vla_backend *be, vla_buffer *P, vla_buffer *G, vla_buffer *A, const tiny_layout *L,
                      const tiny_acts *a) {
    const float eps = 1e-5f;
    /* forward */
    OK(vla_nn_embedding_forward(be, A, a->x0, A, a->tok, P, L->wte, P, L->wpe, TB, TT, TC, TV));
    OK(vla_nn_layernorm_forward(be, A, a->h, A, a->m1, A, a->r1, A, a->x0, P, L->ln1w, P, L->ln1b, TM, TC, eps));
    OK(vla_nn_matmul_forward(be, A, a->a, A, a->h, P, L->W1, P, L->b1, TM, TF, TC));
    OK(vla_nn_gelu_forward(be, A, a->g, A, a->a, (size_t)TM * TF));
    OK(vla_nn_matmul_forward(be, A, a->x1, A, a->g, P, L->W2, P, L->b2, TM, TC, TF));
    OK(vla_nn_add_forward(be, A, a->x1, A, a->x1, A, a->x0, (size_t)TM * TC)); /* residual, in place */
    OK(vla_nn_layernorm_forward(be, A, a->z, A, a->mf, A, a->rf, A, a->x1, P, L->lnfw, P, L->lnfb, TM, TC, eps));
    OK(vla_nn_matmul_forward(be, A, a->lg, A, a->z, P, L->wte, NULL, 0, TM, TV, TC)); /* tied head */
    /* backward: gradients accumulate, so zero them (parameters and activations) first */
    OK(vla_nn_fill(be, G, 0, L->total, 0.0f));
    OK(vla_nn_fill(be, A, a->dx0, a->total - a->dx0, 0.0f));
    OK(vla_nn_crossentropy(be, A, a->loss, A, a->lg, A, a->lg, A, a->tg, TM, TV)); /* dlogits in place */
    OK(vla_nn_matmul_backward(be, A, a->dz, G, L->wte, NULL, 0, A, a->lg, A, a->z, P, L->wte, TM, TV, TC));
    OK(vla_nn_layernorm_backward(be, A, a->dx1, G, L->lnfw, G, L->lnfb, A, a->dz, A, a->x1, P, L->lnfw, A, a->mf, A,
                                 a->rf, TM, TC));
    /* x1 = x0 + f: both branches get dx1 (through add_backward, to exercise it; dg is the FFN
     * output gradient here, reusing the dh slot) */
    OK(vla_nn_add_backward(be, A, a->dx0, A, a->dh, A, a->dx1, (size_t)TM * TC));
    OK(vla_nn_matmul_backward(be, A, a->dg, G, L->W2, G, L->b2, A, a->dh, A, a->g, P, L->W2, TM, TC, TF));
    OK(vla_nn_gelu_backward(be, A, a->da, A, a->dg, A, a->a, (size_t)TM * TF));
    OK(vla_nn_fill(be, A, a->dh, (size_t)TM * TC, 0.0f));
    OK(vla_nn_matmul_backward(be, A, a->dh, G, L->W1, G, L->b1, A, a->da, A, a->h, P, L->W1, TM, TF, TC));
    OK(vla_nn_layernorm_backward(be, A, a->dx0, G, L->ln1w, G, L->ln1b, A, a->dh, A, a->x0, P, L->ln1w, A, a->m1, A,
                                 a->r1, TM, TC));
    OK(vla_nn_embedding_backward(be, G, L->wte, G, L->wpe, A, a->dx0, A, a->tok, TB, TT, TC, TV));
}

START_TEST(test_tiny_model) {
    fprintf(stderr, "tiny model B=%d T=%d C=%d F=%d V=%d: every parameter gradient\n", TB, TT, TC, TF, TV);
    tu_rng rng;
    tu_seed(&rng, 91);
    vla_backend *be = tu_open_cpu();
    const tiny_layout L = tiny_params();
    const tiny_acts a = tiny_act_layout();
    float *p = randn(&rng, L.total, 0.3f);
    for (int i = 0; i < TC; i++) p[L.ln1w + i] += 1.0f, p[L.lnfw + i] += 1.0f;
    int32_t tok[TM], tg[TM];
    for (int i = 0; i < TM; i++) tok[i] = (int32_t)(tu_next(&rng) % TV), tg[i] = (int32_t)(tu_next(&rng) % TV);
    tg[1] = tg[6] = -1;
    vla_buffer *P = tu_buf_from(be, p, L.total), *G = tu_buf_new(be, L.total), *A = tu_buf_new(be, a.total);
    ck_assert_int_eq(vla_buffer_upload(A, a.tok * 4, tok, sizeof tok), VLA_OK);
    ck_assert_int_eq(vla_buffer_upload(A, a.tg * 4, tg, sizeof tg), VLA_OK);
    tiny_step(be, P, G, A, &L, &a);
    float loss, *grad = tu_buf_download_new(G, L.total);
    ck_assert_int_eq(vla_buffer_download(A, a.loss * 4, &loss, 4), VLA_OK);

    tiny_ctx k = {L, dbl(p, L.total), tok, tg};
    const double loss_ref = tiny_loss_ref(&k);
    expect_close("tiny model loss", &loss, &loss_ref, 1, TOL_FWD);
    double *g = malloc(L.total * sizeof *g);
    fd_grad(tiny_loss_ref, &k, k.p, L.total, g);
    static const char *const names[] = {"wte (embedding + tied head)", "wpe", "ln1 weight", "ln1 bias", "W1", "b1",
                                        "W2", "b2", "lnf weight", "lnf bias"};
    const size_t offs[] = {L.wte, L.wpe, L.ln1w, L.ln1b, L.W1, L.b1, L.W2, L.b2, L.lnfw, L.lnfb, L.total};
    for (int i = 0; i < 10; i++) {
        size_t n = offs[i + 1] - offs[i];
        if (i == 1) { /* rows T.. of the position table get no gradient */
            for (size_t j = (size_t)TT * TC; j < n; j++) ck_assert(grad[offs[i] + j] == 0.0f && g[offs[i] + j] == 0.0);
            n = (size_t)TT * TC;
        }
        char what[64];
        snprintf(what, sizeof what, "tiny d%s", names[i]);
        expect_close(what, grad + offs[i], g + offs[i], n, TOL_BWD);
    }
    expect_close("tiny all parameters", grad, g, L.total, TOL_BWD);

    /* Training it: 30 AdamW steps on the fixed batch, clipped at norm 1, must lower the loss. */
    vla_buffer *Mo = tu_buf_new(be, L.total), *Vo = tu_buf_new(be, L.total), *N = tu_buf_new(be, 1);
    OK(vla_nn_fill(be, Mo, 0, L.total, 0.0f));
    OK(vla_nn_fill(be, Vo, 0, L.total, 0.0f));
    vla_adamw_params ap;
    vla_adamw_params_init(&ap);
    ap.lr = 1e-2, ap.max_norm = 1.0;
    float first = loss, last = loss;
    for (int t = 1; t <= 30; t++) {
        if (t > 1) tiny_step(be, P, G, A, &L, &a);
        ck_assert_int_eq(vla_buffer_download(A, a.loss * 4, &last, 4), VLA_OK);
        ap.step = t;
        OK(vla_nn_global_norm(be, N, 0, G, 0, L.total));
        OK(vla_nn_adamw_step(be, P, 0, Mo, 0, Vo, 0, G, 0, N, 0, L.total, &ap));
    }
    fprintf(stderr, "  tiny model: loss %.4f -> %.4f after 30 AdamW steps\n", (double)first, (double)last);
    ck_assert_msg(last < 0.5f * first, "loss %g -> %g: training did not lower it", (double)first, (double)last);
    vla_buffer_free(Mo), vla_buffer_free(Vo), vla_buffer_free(N);
    free(g), free(k.p), free(grad), free(p);
    vla_buffer_free(P), vla_buffer_free(G), vla_buffer_free(A);
    vla_backend_close(be);
}
END_TEST

/* ---- threads ---------------------------------------------------------------------------------- */
/* Shapes past the threading threshold: 1 and 3 threads agree, bit for bit where each output element
 * has one owner, and to rounding where partial sums are split (loss, norm) or OpenBLAS decides. */

typedef struct big_run {
    float *out[12];
    size_t n[12];
    int count;
} big_run;

static void big_ops(int threads, big_run *R) {
    enum { M = 512, C = 128, V = 96, F = 64 };
    tu_rng rng;
    tu_seed(&rng, 101);
    vla_backend *be = tu_open_cpu();
    OK(vla_backend_set_threads(be, threads));
    const size_t nMC = (size_t)M * C, nMV = (size_t)M * V, nVC = (size_t)V * C, nFC = (size_t)F * C, nMF = (size_t)M * F;
    float *x = randn(&rng, nMC, 1), *w = randn(&rng, C, 1), *bb = randn(&rng, C, 1), *dy = randn(&rng, nMC, 1);
    float *E = randn(&rng, nVC, 1), *W = randn(&rng, nFC, 0.1f), *zl = randn(&rng, nMV, 2);
    int32_t *tok = malloc(M * sizeof *tok);
    for (int i = 0; i < M; i++) tok[i] = (int32_t)(tu_next(&rng) % V) - (i % 7 == 0); /* some -1 */
    flat f;
    flat_init(&f, be, 12 * nMC + 2 * nMV + 4 * nVC + 4 * nMF + 64);
    const size_t ox = flat_put(&f, x, nMC), ow = flat_put(&f, w, C), ob = flat_put(&f, bb, C), ody = flat_put(&f, dy, nMC);
    const size_t oE = flat_put(&f, E, nVC), oW = flat_put(&f, W, nFC), oz = flat_put(&f, zl, nMV);
    const size_t otg = flat_put_int(&f, tok, M);
    for (int i = 0; i < M; i++) tok[i] = tok[i] < 0 ? 0 : tok[i];
    const size_t otok = flat_put_int(&f, tok, M);
    R->count = 0;
#define OUTSLOT(var, n_) const size_t var = flat_put(&f, NULL, n_); R->n[R->count++] = n_;
    OUTSLOT(oy, nMC) OUTSLOT(om, M) OUTSLOT(ors, M) OUTSLOT(odx, nMC) OUTSLOT(odw, C) OUTSLOT(omm, nMF)
        OUTSLOT(odE, nVC) OUTSLOT(odl, nMV) OUTSLOT(ol, 1) OUTSLOT(on, 1) OUTSLOT(og, nMC) OUTSLOT(oemb, nMC)
#undef OUTSLOT
    flat_upload(&f);
    OK(vla_nn_fill(be, f.buf, odx, nMC, 0.0f));
    OK(vla_nn_fill(be, f.buf, odw, C, 0.0f));
    OK(vla_nn_fill(be, f.buf, odE, nVC, 0.0f));
    OK(vla_nn_layernorm_forward(be, f.buf, oy, f.buf, om, f.buf, ors, f.buf, ox, f.buf, ow, f.buf, ob, M, C, 1e-5f));
    OK(vla_nn_layernorm_backward(be, f.buf, odx, f.buf, odw, NULL, 0, f.buf, ody, f.buf, ox, f.buf, ow, f.buf, om,
                                 f.buf, ors, M, C));
    OK(vla_nn_matmul_forward(be, f.buf, omm, f.buf, ox, f.buf, oW, NULL, 0, M, F, C));
    OK(vla_nn_embedding_backward(be, f.buf, odE, NULL, 0, f.buf, ody, f.buf, otok, 4, M / 4, C, V));
    OK(vla_nn_crossentropy(be, f.buf, ol, f.buf, odl, f.buf, oz, f.buf, otg, M, V));
    OK(vla_nn_global_norm(be, f.buf, on, f.buf, ody, nMC));
    OK(vla_nn_gelu_forward(be, f.buf, og, f.buf, ox, nMC));
    OK(vla_nn_embedding_forward(be, f.buf, oemb, f.buf, otok, f.buf, oE, f.buf, ox, 4, M / 4, C, V));
    flat_download(&f, "threads");
    const size_t offs[] = {oy, om, ors, odx, odw, omm, odE, odl, ol, on, og, oemb};
    for (int i = 0; i < R->count; i++) {
        R->out[i] = malloc(R->n[i] * sizeof(float));
        memcpy(R->out[i], f.h + offs[i], R->n[i] * sizeof(float));
        ck_assert_msg(tu_count_poison(R->out[i], R->n[i]) == 0, "threads=%d: output %d not fully written", threads, i);
    }
    /* The large shapes against the references too: the threaded paths compute the right thing. */
    double *xd = dbl(x, nMC), *wd = dbl(w, C), *bd = dbl(bb, C), *yd = malloc(nMC * sizeof *yd);
    r_layernorm(yd, NULL, NULL, xd, wd, bd, M, C, 1e-5);
    ck_assert(tu_relerr(R->out[0], yd, nMC) < TOL_FWD);
    double *Wd = dbl(W, nFC), *mmd = malloc(nMF * sizeof *mmd);
    r_matmul(mmd, xd, Wd, NULL, M, F, C);
    ck_assert(tu_relerr(R->out[5], mmd, nMF) < TOL_FWD);
    double *zd = dbl(zl, nMV);
    const double Lref = r_crossentropy(zd, (const int32_t *)(f.h + otg), M, V);
    ck_assert(tu_relerr(R->out[8], &Lref, 1) < TOL_FWD);
    free(xd), free(wd), free(bd), free(yd), free(Wd), free(mmd), free(zd);
    free(x), free(w), free(bb), free(dy), free(E), free(W), free(zl), free(tok);
    flat_free(&f);
    vla_backend_close(be);
}

START_TEST(test_threads) {
    big_run one, three;
    big_ops(1, &one);
    big_ops(3, &three);
    static const char *const names[] = {"layernorm y", "layernorm mean", "layernorm rstd", "layernorm dx",
                                        "layernorm dweight", "matmul y", "embedding dwte",
                                        "crossentropy dlogits", "crossentropy loss", "global norm", "gelu y",
                                        "embedding out"};
    /* Rounding-only differences allowed for split partial sums and the BLAS. */
    static const int exact[] = {1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1};
    for (int i = 0; i < one.count; i++) {
        const double e = tu_relerr_ff(three.out[i], one.out[i], one.n[i]);
        const int same = memcmp(three.out[i], one.out[i], one.n[i] * sizeof(float)) == 0;
        fprintf(stderr, "  threads 1 vs 3: %-24s %s (relerr %.1e)\n", names[i], same ? "identical" : "differ", e);
        if (exact[i]) ck_assert_msg(same, "%s differs between 1 and 3 threads", names[i]);
        else ck_assert_msg(e < 1e-6, "%s: 1 vs 3 threads relerr %.2e", names[i], e);
        free(one.out[i]), free(three.out[i]);
    }
}
END_TEST

/* ---- argument errors ------------------------------------------------------------------------ */

enum {
    OP_FILL,
    OP_MM_F,
    OP_MM_B,
    OP_LN_F,
    OP_LN_B,
    OP_GELU_F,
    OP_GELU_B,
    OP_SIG_F,
    OP_SIG_B,
    OP_ADD_F,
    OP_ADD_B,
    OP_EMB_F,
    OP_EMB_B,
    OP_CE,
    OP_NORM,
    OP_ADAMW,
    N_OPS
};

/* A valid call of every op on small shapes, as data, so each argument can be broken in turn. */
typedef struct targ {
    const char *name;
    int out, req, isint;
    size_t n; /* elements at the baseline shape */
} targ;

typedef struct opdef {
    const char *fn;
    int nt;
    targ t[6];
    int nd;
    const char *dn[4];
    int dv[4];
    int flat; /* takes a length n */
} opdef;

/* Shapes: matmul M 3 N 4 K 5; LayerNorm M 3 C 6; embedding B 2 T 3 C 4 V 7; cross-entropy M 6
 * V 7; flat n 10. */
static const opdef OPS[N_OPS] = {
    [OP_FILL] = {"vla_nn_fill", 1, {{"x", 1, 1, 0, 10}}, 0, {0}, {0}, 1},
    [OP_MM_F] = {"vla_nn_matmul_forward", 4,
                 {{"y", 1, 1, 0, 12}, {"x", 0, 1, 0, 15}, {"W", 0, 1, 0, 20}, {"bias", 0, 0, 0, 4}}, 3,
                 {"M", "N", "K"}, {3, 4, 5}, 0},
    [OP_MM_B] = {"vla_nn_matmul_backward", 6,
                 {{"dx", 1, 0, 0, 15}, {"dW", 1, 0, 0, 20}, {"dbias", 1, 0, 0, 4}, {"dy", 0, 1, 0, 12},
                  {"x", 0, 1, 0, 15}, {"W", 0, 1, 0, 20}}, 3, {"M", "N", "K"}, {3, 4, 5}, 0},
    [OP_LN_F] = {"vla_nn_layernorm_forward", 6,
                 {{"y", 1, 1, 0, 18}, {"mean", 1, 0, 0, 3}, {"rstd", 1, 0, 0, 3}, {"x", 0, 1, 0, 18},
                  {"weight", 0, 1, 0, 6}, {"bias", 0, 1, 0, 6}}, 2, {"M", "C"}, {3, 6}, 0},
    /* the backward's eight tensors: dx dweight dbias dy x weight mean rstd; t[] holds six, the
     * last two (mean, rstd) are handled by ln_b_extra below */
    [OP_LN_B] = {"vla_nn_layernorm_backward", 6,
                 {{"dx", 1, 0, 0, 18}, {"dweight", 1, 0, 0, 6}, {"dbias", 1, 0, 0, 6}, {"dy", 0, 1, 0, 18},
                  {"x", 0, 1, 0, 18}, {"weight", 0, 1, 0, 6}}, 2, {"M", "C"}, {3, 6}, 0},
    [OP_GELU_F] = {"vla_nn_gelu_forward", 2, {{"y", 1, 1, 0, 10}, {"x", 0, 1, 0, 10}}, 0, {0}, {0}, 1},
    [OP_GELU_B] = {"vla_nn_gelu_backward", 3, {{"dx", 1, 1, 0, 10}, {"dy", 0, 1, 0, 10}, {"x", 0, 1, 0, 10}}, 0, {0},
                   {0}, 1},
    [OP_SIG_F] = {"vla_nn_sigmoid_forward", 2, {{"y", 1, 1, 0, 10}, {"x", 0, 1, 0, 10}}, 0, {0}, {0}, 1},
    [OP_SIG_B] = {"vla_nn_sigmoid_backward", 3, {{"dx", 1, 1, 0, 10}, {"dy", 0, 1, 0, 10}, {"y", 0, 1, 0, 10}}, 0,
                  {0}, {0}, 1},
    [OP_ADD_F] = {"vla_nn_add_forward", 3, {{"y", 1, 1, 0, 10}, {"a", 0, 1, 0, 10}, {"c", 0, 1, 0, 10}}, 0, {0}, {0},
                  1},
    [OP_ADD_B] = {"vla_nn_add_backward", 3, {{"da", 1, 0, 0, 10}, {"dc", 1, 0, 0, 10}, {"dy", 0, 1, 0, 10}}, 0, {0},
                  {0}, 1},
    [OP_EMB_F] = {"vla_nn_embedding_forward", 4,
                  {{"out", 1, 1, 0, 24}, {"tokens", 0, 1, 1, 6}, {"wte", 0, 1, 0, 28}, {"wpe", 0, 0, 0, 12}}, 4,
                  {"B", "T", "C", "V"}, {2, 3, 4, 7}, 0},
    [OP_EMB_B] = {"vla_nn_embedding_backward", 4,
                  {{"dwte", 1, 0, 0, 28}, {"dwpe", 1, 0, 0, 12}, {"dout", 0, 1, 0, 24}, {"tokens", 0, 1, 1, 6}}, 4,
                  {"B", "T", "C", "V"}, {2, 3, 4, 7}, 0},
    [OP_CE] = {"vla_nn_crossentropy", 4,
               {{"loss", 1, 0, 0, 1}, {"dlogits", 1, 0, 0, 42}, {"logits", 0, 1, 0, 42}, {"targets", 0, 1, 1, 6}}, 2,
               {"M", "V"}, {6, 7}, 0},
    [OP_NORM] = {"vla_nn_global_norm", 2, {{"norm", 1, 1, 0, 1}, {"x", 0, 1, 0, 10}}, 0, {0}, {0}, 1},
    [OP_ADAMW] = {"vla_nn_adamw_step", 5,
                  {{"param", 1, 1, 0, 10}, {"m", 1, 1, 0, 10}, {"v", 1, 1, 0, 10}, {"grad", 0, 1, 0, 10},
                   {"norm", 0, 0, 0, 1}}, 0, {0}, {0}, 1},
};

enum { SLOT = 64, NSLOT = 12, ESIZE = SLOT * NSLOT };

typedef struct call {
    int op;
    vla_backend *b;
    vla_buffer *t[8];
    size_t off[8];
    int d[4];
    size_t n;
    float f;
    vla_adamw_params p;
    int p_null; /* pass NULL for p */
} call;

typedef struct efix {
    vla_backend *be, *be2;
    vla_buffer *P, *P2; /* P2 on be2 */
} efix;

static efix E;

static void e_setup(void) {
    tu_rng rng;
    tu_seed(&rng, 4243);
    E.be = tu_open_cpu();
    E.be2 = tu_open_cpu();
    float *h = malloc(ESIZE * sizeof *h);
    tu_randu(&rng, h, ESIZE, 0.1f, 1.0f);
    /* Slots 8 and 9 hold int32 tokens / targets: valid ids 0..6 (V = 7). */
    for (int i = 0; i < SLOT; i++) {
        int32_t v = (int32_t)(i % 7);
        memcpy(h + 8 * SLOT + i, &v, 4), memcpy(h + 9 * SLOT + i, &v, 4);
    }
    E.P = tu_buf_from(E.be, h, ESIZE);
    E.P2 = tu_buf_from(E.be2, h, ESIZE);
    free(h);
}

static void e_teardown(void) {
    vla_buffer_free(E.P), vla_buffer_free(E.P2);
    vla_backend_close(E.be), vla_backend_close(E.be2);
    memset(&E, 0, sizeof E);
}

/* The baseline: tensor i in slot i (ints in slot 8), LayerNorm backward's mean and rstd in
 * slots 6 and 7; the norm of AdamW only with max_norm > 0, so absent by default. */
static call base_call(int op) {
    call c;
    memset(&c, 0, sizeof c);
    c.op = op, c.b = E.be;
    const opdef *d = &OPS[op];
    for (int i = 0; i < d->nt; i++) {
        c.t[i] = E.P;
        c.off[i] = d->t[i].isint ? 8 * SLOT : (size_t)i * SLOT;
    }
    if (op == OP_LN_B) c.t[6] = E.P, c.off[6] = 6 * SLOT, c.t[7] = E.P, c.off[7] = 7 * SLOT;
    if (op == OP_ADAMW) c.t[4] = NULL;
    for (int i = 0; i < d->nd; i++) c.d[i] = d->dv[i];
    c.n = 10;
    c.f = op == OP_LN_F ? 1e-5f : 0.5f;
    vla_adamw_params_init(&c.p);
    return c;
}

static vla_status invoke(const call *c) {
    vla_buffer *const *t = c->t;
    const size_t *o = c->off;
    const int *d = c->d;
    switch (c->op) {
    case OP_FILL: return vla_nn_fill(c->b, t[0], o[0], c->n, c->f);
    case OP_MM_F: return vla_nn_matmul_forward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], d[0], d[1], d[2]);
    case OP_MM_B:
        return vla_nn_matmul_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], t[4], o[4], t[5], o[5], d[0],
                                      d[1], d[2]);
    case OP_LN_F:
        return vla_nn_layernorm_forward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], t[4], o[4], t[5], o[5],
                                        d[0], d[1], c->f);
    case OP_LN_B:
        return vla_nn_layernorm_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], t[4], o[4], t[5], o[5],
                                         t[6], o[6], t[7], o[7], d[0], d[1]);
    case OP_GELU_F: return vla_nn_gelu_forward(c->b, t[0], o[0], t[1], o[1], c->n);
    case OP_GELU_B: return vla_nn_gelu_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], c->n);
    case OP_SIG_F: return vla_nn_sigmoid_forward(c->b, t[0], o[0], t[1], o[1], c->n);
    case OP_SIG_B: return vla_nn_sigmoid_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], c->n);
    case OP_ADD_F: return vla_nn_add_forward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], c->n);
    case OP_ADD_B: return vla_nn_add_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], c->n);
    case OP_EMB_F:
        return vla_nn_embedding_forward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], d[0], d[1], d[2], d[3]);
    case OP_EMB_B:
        return vla_nn_embedding_backward(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], d[0], d[1], d[2], d[3]);
    case OP_CE: return vla_nn_crossentropy(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], d[0], d[1]);
    case OP_NORM: return vla_nn_global_norm(c->b, t[0], o[0], t[1], o[1], c->n);
    case OP_ADAMW: return vla_nn_adamw_step(c->b, t[0], o[0], t[1], o[1], t[2], o[2], t[3], o[3], t[4], o[4], c->n, c->p_null ? NULL : &c->p);
    }
    return VLA_ERR_INTERNAL;
}

/* Runs a call that must fail with `want`, its messages naming `kw` (and the function), and no
 * byte of either buffer written. */
static void expect_err(const call *c, vla_status want, const char *kw, const char *what) {
    unsigned char *before = malloc(ESIZE * 4), *before2 = malloc(ESIZE * 4), *after = malloc(ESIZE * 4);
    ck_assert_int_eq(vla_buffer_download(E.P, 0, before, ESIZE * 4), VLA_OK);
    ck_assert_int_eq(vla_buffer_download(E.P2, 0, before2, ESIZE * 4), VLA_OK);
    const vla_status got = invoke(c);
    char tm[1024], bm[1024];
    snprintf(tm, sizeof tm, "%s", vla_last_message());
    snprintf(bm, sizeof bm, "%s", c->b ? vla_backend_message(c->b) : "");
    const char *fn = OPS[c->op].fn;
    fprintf(stderr, "  %-26s %-34s -> %-26s \"%s\"\n", fn, what, vla_status_string(got), tm);
    ck_assert_msg(got == want, "%s %s: status %s, expected %s (\"%s\")", fn, what, vla_status_string(got),
                  vla_status_string(want), tm);
    ck_assert_msg(tu_has_word(tm, kw), "%s %s: message \"%s\" does not name '%s'", fn, what, tm, kw);
    ck_assert_msg(strstr(tm, fn) != NULL, "%s %s: message \"%s\" does not name the function", fn, what, tm);
    if (c->b) ck_assert_msg(strcmp(tm, bm) == 0, "%s %s: handle message \"%s\" differs", fn, what, bm);
    ck_assert_int_eq(vla_buffer_download(E.P, 0, after, ESIZE * 4), VLA_OK);
    ck_assert_msg(memcmp(before, after, ESIZE * 4) == 0, "%s %s: the failing call wrote P", fn, what);
    ck_assert_int_eq(vla_buffer_download(E.P2, 0, after, ESIZE * 4), VLA_OK);
    ck_assert_msg(memcmp(before2, after, ESIZE * 4) == 0, "%s %s: the failing call wrote P2", fn, what);
    free(before), free(before2), free(after);
}

/* The names of every tensor argument of an op, the LayerNorm backward's mean and rstd included. */
static int tensor_names(int op, const char *names[8], const targ *info[8]) {
    static const targ ln_extra[2] = {{"mean", 0, 1, 0, 3}, {"rstd", 0, 1, 0, 3}};
    const opdef *d = &OPS[op];
    int k = 0;
    for (int i = 0; i < d->nt; i++) names[k] = d->t[i].name, info[k++] = &d->t[i];
    if (op == OP_LN_B) names[k] = "mean", info[k++] = &ln_extra[0], names[k] = "rstd", info[k++] = &ln_extra[1];
    return k;
}

START_TEST(test_baselines_valid) {
    for (int op = 0; op < N_OPS; op++) {
        call c = base_call(op);
        const vla_status s = invoke(&c);
        ck_assert_msg(s == VLA_OK, "%s baseline: %s: %s", OPS[op].fn, vla_status_string(s), vla_last_message());
    }
}
END_TEST

START_TEST(test_err_null) {
    for (int op = 0; op < N_OPS; op++) {
        call c = base_call(op);
        c.b = NULL;
        expect_err(&c, VLA_ERR_NULL_ARGUMENT, "backend", "backend NULL");
        const char *names[8];
        const targ *info[8];
        const int nt = tensor_names(op, names, info);
        for (int i = 0; i < nt; i++) {
            if (!info[i]->req) continue;
            c = base_call(op);
            c.t[i] = NULL;
            char what[64];
            snprintf(what, sizeof what, "%s NULL", names[i]);
            expect_err(&c, VLA_ERR_NULL_ARGUMENT, names[i], what);
        }
    }
    call c = base_call(OP_ADAMW);
    c.p_null = 1;
    expect_err(&c, VLA_ERR_NULL_ARGUMENT, "p", "p NULL");
    ck_assert_int_eq(vla_adamw_params_init(NULL), VLA_ERR_NULL_ARGUMENT);
    ck_assert(tu_has_word(vla_last_message(), "p"));
}
END_TEST

START_TEST(test_err_dimensions) {
    for (int op = 0; op < N_OPS; op++) {
        const opdef *d = &OPS[op];
        for (int i = 0; i < d->nd; i++) {
            const int bad[2] = {0, -1};
            for (int j = 0; j < 2; j++) {
                call c = base_call(op);
                c.d[i] = bad[j];
                char what[64];
                snprintf(what, sizeof what, "%s = %d", d->dn[i], bad[j]);
                expect_err(&c, VLA_ERR_INVALID_DIMENSION, d->dn[i], what);
            }
        }
        if (d->flat) {
            call c = base_call(op);
            c.n = 0;
            expect_err(&c, VLA_ERR_INVALID_DIMENSION, "n", "n = 0");
        }
    }
    /* Sizes whose product overflows a size_t of bytes. */
    call c = base_call(OP_EMB_F);
    c.d[0] = c.d[1] = c.d[2] = INT_MAX;
    expect_err(&c, VLA_ERR_INVALID_DIMENSION, "size_t", "B T C overflow");
}
END_TEST

START_TEST(test_err_range) {
    for (int op = 0; op < N_OPS; op++) {
        const char *names[8];
        const targ *info[8];
        const int nt = tensor_names(op, names, info);
        for (int i = 0; i < nt; i++) {
            call c = base_call(op);
            if (!c.t[i]) { /* AdamW's norm: present only with clipping */
                c.t[i] = E.P, c.p.max_norm = 1.0;
            }
            char what[64];
            /* The last element one past the end. */
            c.off[i] = ESIZE - info[i]->n + 1;
            snprintf(what, sizeof what, "%s one element past the end", names[i]);
            expect_err(&c, VLA_ERR_OUT_OF_RANGE, names[i], what);
            /* An offset whose range wraps around size_t. */
            c.off[i] = SIZE_MAX - 2;
            snprintf(what, sizeof what, "%s offset SIZE_MAX - 2", names[i]);
            expect_err(&c, VLA_ERR_OUT_OF_RANGE, names[i], what);
        }
    }
    /* A size larger than the buffers hold: matmul's K (x is the first tensor it outgrows). */
    call c = base_call(OP_MM_F);
    c.d[2] = 1000;
    expect_err(&c, VLA_ERR_OUT_OF_RANGE, "x", "K = 1000");
}
END_TEST

START_TEST(test_err_backend) {
    for (int op = 0; op < N_OPS; op++) {
        const char *names[8];
        const targ *info[8];
        const int nt = tensor_names(op, names, info);
        for (int i = 0; i < nt; i++) {
            call c = base_call(op);
            if (!c.t[i]) c.p.max_norm = 1.0;
            c.t[i] = E.P2;
            char what[64];
            snprintf(what, sizeof what, "%s on another backend", names[i]);
            expect_err(&c, VLA_ERR_WRONG_BACKEND, names[i], what);
        }
    }
}
END_TEST

/* Each output against each other tensor: starting on the other's last element (a partial
 * overlap) is an error, and so is starting on its first, except where nn.h allows that (in place:
 * same offset and length). */
START_TEST(test_err_aliasing) {
    for (int op = 0; op < N_OPS; op++) {
        const char *names[8];
        const targ *info[8];
        const int nt = tensor_names(op, names, info);
        for (int i = 0; i < nt; i++) {
            if (!info[i]->out) continue;
            for (int j = 0; j < nt; j++) {
                if (j == i) continue;
                for (int shift = 0; shift < 2; shift++) {
                    call c = base_call(op);
                    if (op == OP_ADAMW && j == 4) c.t[4] = E.P, c.p.max_norm = 1.0;
                    c.off[i] = c.off[j] + (shift ? info[j]->n - 1 : 0);
                    /* the allowed in-place forms: elementwise forwards (y = x, a or c), dlogits = logits */
                    const int fwd_ew = op == OP_GELU_F || op == OP_SIG_F || op == OP_ADD_F;
                    const int allowed = shift == 0 && !info[j]->out &&
                                        ((fwd_ew && i == 0) || (op == OP_CE && i == 1 && j == 2));
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %s", names[i], shift ? "starts on the end of" : "starts at",
                             names[j]);
                    if (allowed) {
                        /* valid: run it on a scratch copy so the fixture stays as it was */
                        const vla_status s = invoke(&c);
                        ck_assert_msg(s == VLA_OK, "%s: %s in place: %s", OPS[op].fn, what, vla_last_message());
                        e_teardown(), e_setup();
                        continue;
                    }
                    expect_err(&c, VLA_ERR_ALIASING, names[j], what); /* the message names both */
                }
            }
        }
    }
}
END_TEST

START_TEST(test_err_parameters) {
    const float bad_eps[] = {0.0f, -1e-5f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        call c = base_call(OP_LN_F);
        c.f = bad_eps[i];
        char what[64];
        snprintf(what, sizeof what, "eps = %g", (double)bad_eps[i]);
        expect_err(&c, VLA_ERR_INVALID_PARAMETER, "eps", what);
    }
    struct {
        const char *field;
        double val;
    } bad[] = {{"lr", -1e-3},          {"lr", NAN},    {"lr", INFINITY}, {"beta1", -0.1},      {"beta1", 1.0},
               {"beta1", NAN},         {"beta2", 1.0}, {"beta2", -1.0},  {"eps", 0.0},         {"eps", -1e-8},
               {"eps", INFINITY},      {"weight_decay", -0.01}, {"weight_decay", NAN}, {"max_norm", -1.0},
               {"max_norm", INFINITY}, {"step", 0},    {"step", -3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        call c = base_call(OP_ADAMW);
        if (!strcmp(bad[i].field, "lr")) c.p.lr = bad[i].val;
        if (!strcmp(bad[i].field, "beta1")) c.p.beta1 = bad[i].val;
        if (!strcmp(bad[i].field, "beta2")) c.p.beta2 = bad[i].val;
        if (!strcmp(bad[i].field, "eps")) c.p.eps = bad[i].val;
        if (!strcmp(bad[i].field, "weight_decay")) c.p.weight_decay = bad[i].val;
        if (!strcmp(bad[i].field, "max_norm")) c.p.max_norm = bad[i].val, c.t[4] = E.P;
        if (!strcmp(bad[i].field, "step")) c.p.step = (int64_t)bad[i].val;
        char what[64];
        snprintf(what, sizeof what, "%s = %g", bad[i].field, bad[i].val);
        expect_err(&c, VLA_ERR_INVALID_PARAMETER, bad[i].field, what);
    }
    call c = base_call(OP_ADAMW);
    c.p.reserved[2] = 1;
    expect_err(&c, VLA_ERR_INVALID_PARAMETER, "reserved", "reserved[2] = 1");
    c = base_call(OP_ADAMW);
    c.p.max_norm = 1.0;
    expect_err(&c, VLA_ERR_INVALID_COMBINATION, "norm", "max_norm without norm");
    c = base_call(OP_ADAMW);
    c.t[4] = E.P;
    expect_err(&c, VLA_ERR_INVALID_COMBINATION, "norm", "norm without max_norm");
}
END_TEST

/* Token ids and targets out of range: found by the CPU backend before anything is written. */
START_TEST(test_err_tokens) {
    const int32_t bad_tok[] = {7, -1, INT32_MIN};
    const int ops[] = {OP_EMB_F, OP_EMB_B};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            call c = base_call(ops[k]);
            ck_assert_int_eq(vla_buffer_upload(E.P, (8 * SLOT + 4) * 4, &bad_tok[i], 4), VLA_OK);
            char what[64];
            snprintf(what, sizeof what, "tokens[4] = %d", bad_tok[i]);
            expect_err(&c, VLA_ERR_INVALID_PARAMETER, "tokens", what);
            e_teardown(), e_setup();
        }
    const int32_t bad_tg[] = {7, -2};
    for (int i = 0; i < 2; i++) {
        call c = base_call(OP_CE);
        ck_assert_int_eq(vla_buffer_upload(E.P, (8 * SLOT + 5) * 4, &bad_tg[i], 4), VLA_OK);
        char what[64];
        snprintf(what, sizeof what, "targets[5] = %d", bad_tg[i]);
        expect_err(&c, VLA_ERR_INVALID_PARAMETER, "targets", what);
        e_teardown(), e_setup();
    }
}
END_TEST

/* A backend without the table, and one with a table missing a slot (white box, nn_impl.h). */
START_TEST(test_err_unsupported) {
    const vla_backend_iface *orig = E.be->iface;
    vla_backend_iface no_nn = *orig;
    no_nn.nn = NULL;
    E.be->iface = &no_nn;
    for (int op = 0; op < N_OPS; op++) {
        call c = base_call(op);
        expect_err(&c, VLA_ERR_UNSUPPORTED, "cpu", "backend without nn ops");
    }
    vla_nn_iface partial = *orig->nn;
    partial.layernorm_backward = NULL;
    no_nn.nn = &partial;
    call c = base_call(OP_LN_B);
    expect_err(&c, VLA_ERR_UNSUPPORTED, "cpu", "slot layernorm_backward NULL");
    c = base_call(OP_LN_F);
    ck_assert_int_eq(invoke(&c), VLA_OK); /* the other slots still run */
    /* Argument errors come first, on any backend. */
    c = base_call(OP_LN_B);
    c.d[0] = 0;
    expect_err(&c, VLA_ERR_INVALID_DIMENSION, "M", "M = 0 on a backend without the slot");
    E.be->iface = orig;
}
END_TEST

/* A failing call's message is cleared by the next successful one. */
START_TEST(test_err_message_cleared) {
    call c = base_call(OP_GELU_F);
    c.n = 0;
    ck_assert_int_ne(invoke(&c), VLA_OK);
    ck_assert_str_ne(vla_backend_message(E.be), "");
    c = base_call(OP_GELU_F);
    ck_assert_int_eq(invoke(&c), VLA_OK);
    ck_assert_str_eq(vla_backend_message(E.be), "");
    ck_assert_str_eq(vla_last_message(), "");
}
END_TEST

Suite *nn_suite(void) {
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("gradients");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_gelu);
    tcase_add_test(tc, test_sigmoid);
    tcase_add_test(tc, test_add);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_crossentropy);
    tcase_add_test(tc, test_global_norm);
    tcase_add_test(tc, test_adamw_hand);
    tcase_add_test(tc, test_adamw_steps);
    tcase_add_test(tc, test_tiny_model);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_checked_fixture(te, e_setup, e_teardown);
    tcase_set_timeout(te, 60);
    tcase_add_test(te, test_baselines_valid);
    tcase_add_test(te, test_err_null);
    tcase_add_test(te, test_err_dimensions);
    tcase_add_test(te, test_err_range);
    tcase_add_test(te, test_err_backend);
    tcase_add_test(te, test_err_aliasing);
    tcase_add_test(te, test_err_parameters);
    tcase_add_test(te, test_err_tokens);
    tcase_add_test(te, test_err_unsupported);
    tcase_add_test(te, test_err_message_cleared);
    suite_add_tcase(s, te);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(nn_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
