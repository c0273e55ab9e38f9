/* The nn ops' validation and dispatch (vla/nn.h). Everything a call's signature shows is checked
 * here, once, in the same order for every op: the handle, required tensors, sizes, parameters,
 * then each tensor's backend and element range, then aliasing. A backend's table (nn_impl.h)
 * receives only calls that passed. */
#include "nn_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* One tensor of a call: `n` elements of 4 bytes from element `off` of `buf` (NULL: absent). An
 * output may coincide exactly (same buffer, offset and length) with the inputs whose index bits
 * are set in `same_ok`: the in-place forms nn.h allows. */
typedef struct tref {
    const char *name;
    const vla_buffer *buf;
    size_t off, n;
    int out;
    unsigned same_ok;
} tref;

#define IN(name, buf, off, n) {name, buf, off, n, 0, 0u}
#define OUT(name, buf, off, n) {name, buf, off, n, 1, 0u}
#define OUT_SAME(name, buf, off, n, mask) {name, buf, off, n, 1, mask}
#define NREFS(r) (sizeof(r) / sizeof((r)[0]))

static vla_status begin(vla_backend *b, const char *fn) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "%s: backend is NULL", fn);
    vla_clear_message(b);
    return VLA_OK;
}

static vla_status need(vla_backend *b, const char *fn, const void *p, const char *name) {
    return p ? VLA_OK : vla_fail(b, VLA_ERR_NULL_ARGUMENT, "%s: %s is NULL", fn, name);
}

static vla_status dim(vla_backend *b, const char *fn, const char *name, int v) {
    return v >= 1 ? VLA_OK : vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: %s = %d must be >= 1", fn, name, v);
}

static vla_status len(vla_backend *b, const char *fn, size_t n) {
    return n >= 1 ? VLA_OK : vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: n = 0 must be >= 1", fn);
}

/* *out = a * c (element counts); an error when it does not fit a size_t of bytes. */
static vla_status count(vla_backend *b, const char *fn, size_t a, size_t c, size_t *out) {
    if (a != 0 && c > SIZE_MAX / 4 / a)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: %zu x %zu elements is too large for this machine's size_t",
                        fn, a, c);
    *out = a * c;
    return VLA_OK;
}

static int overlap(const tref *x, const tref *y) {
    return x->buf == y->buf && x->off < y->off + y->n && y->off < x->off + x->n;
}

static vla_status check_refs(vla_backend *b, const char *fn, const tref *r, size_t nr) {
    for (size_t i = 0; i < nr; i++) {
        if (!r[i].buf) continue;
        if (r[i].buf->backend != b)
            return vla_fail(b, VLA_ERR_WRONG_BACKEND, "%s: %s was allocated on backend '%s', the op runs on '%s'", fn,
                            r[i].name, r[i].buf->backend ? r[i].buf->backend->name : "?", b->name);
        const size_t have = r[i].buf->size / 4;
        if (r[i].n > SIZE_MAX / 4 || r[i].off > have || r[i].n > have - r[i].off)
            return vla_fail(b, VLA_ERR_OUT_OF_RANGE,
                            "%s: %s: elements [%zu, %zu + %zu) lie past the buffer's end (it holds %zu elements)", fn,
                            r[i].name, r[i].off, r[i].off, r[i].n, have);
    }
    for (size_t i = 0; i < nr; i++) {
        if (!r[i].buf || !r[i].out) continue;
        for (size_t j = 0; j < nr; j++) {
            if (j == i || !r[j].buf || !overlap(&r[i], &r[j])) continue;
            if (r[j].out) {
                if (j > i)
                    return vla_fail(b, VLA_ERR_ALIASING, "%s: outputs %s and %s overlap", fn, r[i].name, r[j].name);
                continue;
            }
            const int exact = r[i].off == r[j].off && r[i].n == r[j].n;
            if (exact && j < 32 && (r[i].same_ok >> j & 1u)) continue;
            return vla_fail(b, VLA_ERR_ALIASING, "%s: output %s overlaps input %s%s", fn, r[i].name, r[j].name,
                            r[i].same_ok ? " (in place means the same offset and length)" : "");
        }
    }
    return VLA_OK;
}

static vla_status unsupported(vla_backend *b, const char *fn) {
    return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: the %s backend does not implement this op", fn, b->name);
}

/* Runs a slot of the backend's table, or reports it missing. */
#define DISPATCH(slot, ...)                                       \
    do {                                                          \
        const vla_nn_iface *t_ = b->iface->nn;                    \
        if (!t_ || !t_->slot) return unsupported(b, fn);          \
        return t_->slot(b, __VA_ARGS__);                          \
    } while (0)

#define TRY(expr)                       \
    do {                                \
        vla_status s_ = (expr);         \
        if (s_ != VLA_OK) return s_;    \
    } while (0)

/* ---- utility ---- */

vla_status vla_nn_fill(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value) {
    static const char fn[] = "vla_nn_fill";
    TRY(begin(b, fn));
    TRY(need(b, fn, x, "x"));
    TRY(len(b, fn, n));
    const tref r[] = {OUT("x", x, x_off, n)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(fill, x, x_off, n, value);
}

/* ---- matmul ---- */

/* The sizes a matmul's forward and backward share: M, N, K >= 1, and the element counts of
 * y and dy [M, N], x and dx [M, K], W and dW [N, K]. */
static vla_status matmul_sizes(vla_backend *b, const char *fn, int M, int N, int K, size_t *nMN, size_t *nMK,
                               size_t *nNK) {
    TRY(dim(b, fn, "M", M));
    TRY(dim(b, fn, "N", N));
    TRY(dim(b, fn, "K", K));
    TRY(count(b, fn, (size_t)M, (size_t)N, nMN));
    TRY(count(b, fn, (size_t)M, (size_t)K, nMK));
    return count(b, fn, (size_t)N, (size_t)K, nNK);
}

vla_status vla_nn_matmul_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                 const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off, int M,
                                 int N, int K) {
    static const char fn[] = "vla_nn_matmul_forward";
    TRY(begin(b, fn));
    TRY(need(b, fn, y, "y"));
    TRY(need(b, fn, x, "x"));
    TRY(need(b, fn, W, "W"));
    size_t nMN = 0, nMK = 0, nNK = 0;
    TRY(matmul_sizes(b, fn, M, N, K, &nMN, &nMK, &nNK));
    const tref r[] = {OUT("y", y, y_off, nMN), IN("x", x, x_off, nMK), IN("W", W, W_off, nNK),
                      IN("bias", bias, bias_off, (size_t)N)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(matmul_forward, y, y_off, x, x_off, W, W_off, bias, bias_off, M, N, K);
}

vla_status vla_nn_matmul_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                  vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                  const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M, int N,
                                  int K) {
    static const char fn[] = "vla_nn_matmul_backward";
    TRY(begin(b, fn));
    TRY(need(b, fn, dy, "dy"));
    TRY(need(b, fn, x, "x"));
    TRY(need(b, fn, W, "W"));
    size_t nMN = 0, nMK = 0, nNK = 0;
    TRY(matmul_sizes(b, fn, M, N, K, &nMN, &nMK, &nNK));
    const tref r[] = {OUT("dx", dx, dx_off, nMK), OUT("dW", dW, dW_off, nNK), OUT("dbias", dbias, dbias_off, (size_t)N),
                      IN("dy", dy, dy_off, nMN),  IN("x", x, x_off, nMK),     IN("W", W, W_off, nNK)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(matmul_backward, dx, dx_off, dW, dW_off, dbias, dbias_off, dy, dy_off, x, x_off, W, W_off, M, N, K);
}

/* ---- LayerNorm ---- */

vla_status vla_nn_layernorm_forward(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean, size_t mean_off,
                                    vla_buffer *rstd, size_t rstd_off, const vla_buffer *x, size_t x_off,
                                    const vla_buffer *weight, size_t weight_off, const vla_buffer *bias,
                                    size_t bias_off, int M, int C, float eps) {
    static const char fn[] = "vla_nn_layernorm_forward";
    TRY(begin(b, fn));
    TRY(need(b, fn, y, "y"));
    TRY(need(b, fn, x, "x"));
    TRY(need(b, fn, weight, "weight"));
    TRY(need(b, fn, bias, "bias"));
    TRY(dim(b, fn, "M", M));
    TRY(dim(b, fn, "C", C));
    if (!isfinite(eps) || eps <= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: eps = %g must be finite and > 0", fn, (double)eps);
    size_t nMC = 0;
    TRY(count(b, fn, (size_t)M, (size_t)C, &nMC));
    const tref r[] = {OUT("y", y, y_off, nMC),          OUT("mean", mean, mean_off, (size_t)M),
                      OUT("rstd", rstd, rstd_off, (size_t)M), IN("x", x, x_off, nMC),
                      IN("weight", weight, weight_off, (size_t)C), IN("bias", bias, bias_off, (size_t)C)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(layernorm_forward, y, y_off, mean, mean_off, rstd, rstd_off, x, x_off, weight, weight_off, bias, bias_off,
             M, C, eps);
}

vla_status vla_nn_layernorm_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                     size_t dweight_off, vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy,
                                     size_t dy_off, const vla_buffer *x, size_t x_off, const vla_buffer *weight,
                                     size_t weight_off, const vla_buffer *mean, size_t mean_off,
                                     const vla_buffer *rstd, size_t rstd_off, int M, int C) {
    static const char fn[] = "vla_nn_layernorm_backward";
    TRY(begin(b, fn));
    TRY(need(b, fn, dy, "dy"));
    TRY(need(b, fn, x, "x"));
    TRY(need(b, fn, weight, "weight"));
    TRY(need(b, fn, mean, "mean"));
    TRY(need(b, fn, rstd, "rstd"));
    TRY(dim(b, fn, "M", M));
    TRY(dim(b, fn, "C", C));
    size_t nMC = 0;
    TRY(count(b, fn, (size_t)M, (size_t)C, &nMC));
    const tref r[] = {OUT("dx", dx, dx_off, nMC),
                      OUT("dweight", dweight, dweight_off, (size_t)C),
                      OUT("dbias", dbias, dbias_off, (size_t)C),
                      IN("dy", dy, dy_off, nMC),
                      IN("x", x, x_off, nMC),
                      IN("weight", weight, weight_off, (size_t)C),
                      IN("mean", mean, mean_off, (size_t)M),
                      IN("rstd", rstd, rstd_off, (size_t)M)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(layernorm_backward, dx, dx_off, dweight, dweight_off, dbias, dbias_off, dy, dy_off, x, x_off, weight,
             weight_off, mean, mean_off, rstd, rstd_off, M, C);
}

/* ---- elementwise ---- */

/* y = f(x), in place allowed (y's same_ok bit 1 = x). */
static vla_status unary_checks(vla_backend *b, const char *fn, const vla_buffer *y, size_t y_off, const vla_buffer *x,
                               size_t x_off, size_t n) {
    TRY(begin(b, fn));
    TRY(need(b, fn, y, "y"));
    TRY(need(b, fn, x, "x"));
    TRY(len(b, fn, n));
    const tref r[] = {OUT_SAME("y", y, y_off, n, 1u << 1), IN("x", x, x_off, n)};
    return check_refs(b, fn, r, NREFS(r));
}

/* dx += dy * f'(s), s the saved tensor (named `sname`); no overlap allowed. */
static vla_status unary_bwd_checks(vla_backend *b, const char *fn, const vla_buffer *dx, size_t dx_off,
                                   const vla_buffer *dy, size_t dy_off, const vla_buffer *s, size_t s_off,
                                   const char *sname, size_t n) {
    TRY(begin(b, fn));
    TRY(need(b, fn, dx, "dx"));
    TRY(need(b, fn, dy, "dy"));
    TRY(need(b, fn, s, sname));
    TRY(len(b, fn, n));
    const tref r[] = {OUT("dx", dx, dx_off, n), IN("dy", dy, dy_off, n), IN(sname, s, s_off, n)};
    return check_refs(b, fn, r, NREFS(r));
}

vla_status vla_nn_gelu_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                               size_t n) {
    static const char fn[] = "vla_nn_gelu_forward";
    TRY(unary_checks(b, fn, y, y_off, x, x_off, n));
    DISPATCH(gelu_forward, y, y_off, x, x_off, n);
}

vla_status vla_nn_gelu_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy, size_t dy_off,
                                const vla_buffer *x, size_t x_off, size_t n) {
    static const char fn[] = "vla_nn_gelu_backward";
    TRY(unary_bwd_checks(b, fn, dx, dx_off, dy, dy_off, x, x_off, "x", n));
    DISPATCH(gelu_backward, dx, dx_off, dy, dy_off, x, x_off, n);
}

vla_status vla_nn_sigmoid_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                  size_t n) {
    static const char fn[] = "vla_nn_sigmoid_forward";
    TRY(unary_checks(b, fn, y, y_off, x, x_off, n));
    DISPATCH(sigmoid_forward, y, y_off, x, x_off, n);
}

vla_status vla_nn_sigmoid_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                   size_t dy_off, const vla_buffer *y, size_t y_off, size_t n) {
    static const char fn[] = "vla_nn_sigmoid_backward";
    TRY(unary_bwd_checks(b, fn, dx, dx_off, dy, dy_off, y, y_off, "y", n));
    DISPATCH(sigmoid_backward, dx, dx_off, dy, dy_off, y, y_off, n);
}

vla_status vla_nn_add_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                              const vla_buffer *c, size_t c_off, size_t n) {
    static const char fn[] = "vla_nn_add_forward";
    TRY(begin(b, fn));
    TRY(need(b, fn, y, "y"));
    TRY(need(b, fn, a, "a"));
    TRY(need(b, fn, c, "c"));
    TRY(len(b, fn, n));
    const tref r[] = {OUT_SAME("y", y, y_off, n, 1u << 1 | 1u << 2), IN("a", a, a_off, n), IN("c", c, c_off, n)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(add_forward, y, y_off, a, a_off, c, c_off, n);
}

vla_status vla_nn_add_backward(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                               const vla_buffer *dy, size_t dy_off, size_t n) {
    static const char fn[] = "vla_nn_add_backward";
    TRY(begin(b, fn));
    TRY(need(b, fn, dy, "dy"));
    TRY(len(b, fn, n));
    const tref r[] = {OUT("da", da, da_off, n), OUT("dc", dc, dc_off, n), IN("dy", dy, dy_off, n)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(add_backward, da, da_off, dc, dc_off, dy, dy_off, n);
}

/* ---- embeddings ---- */

/* The element counts of the embedding tensors: tokens [B, T], out [B, T, C], wte [V, C], wpe [T, C]. */
typedef struct embedding_sizes {
    size_t BT, BTC, VC, TC;
} embedding_sizes;

/* B, T, C, V >= 1 and the counts, for the forward and the backward alike. */
static vla_status embedding_sizes_of(vla_backend *b, const char *fn, int B, int T, int C, int V,
                                     embedding_sizes *sz) {
    TRY(dim(b, fn, "B", B));
    TRY(dim(b, fn, "T", T));
    TRY(dim(b, fn, "C", C));
    TRY(dim(b, fn, "V", V));
    TRY(count(b, fn, (size_t)B, (size_t)T, &sz->BT));
    TRY(count(b, fn, sz->BT, (size_t)C, &sz->BTC));
    TRY(count(b, fn, (size_t)V, (size_t)C, &sz->VC));
    return count(b, fn, (size_t)T, (size_t)C, &sz->TC);
}

vla_status vla_nn_embedding_forward(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                    size_t tokens_off, const vla_buffer *wte, size_t wte_off, const vla_buffer *wpe,
                                    size_t wpe_off, int B, int T, int C, int V) {
    static const char fn[] = "vla_nn_embedding_forward";
    TRY(begin(b, fn));
    TRY(need(b, fn, out, "out"));
    TRY(need(b, fn, tokens, "tokens"));
    TRY(need(b, fn, wte, "wte"));
    embedding_sizes sz = {0, 0, 0, 0};
    TRY(embedding_sizes_of(b, fn, B, T, C, V, &sz));
    const tref r[] = {OUT("out", out, out_off, sz.BTC), IN("tokens", tokens, tokens_off, sz.BT),
                      IN("wte", wte, wte_off, sz.VC), IN("wpe", wpe, wpe_off, sz.TC)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(embedding_forward, out, out_off, tokens, tokens_off, wte, wte_off, wpe, wpe_off, B, T, C, V);
}

vla_status vla_nn_embedding_backward(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                     size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                     const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V) {
    static const char fn[] = "vla_nn_embedding_backward";
    TRY(begin(b, fn));
    TRY(need(b, fn, dout, "dout"));
    TRY(need(b, fn, tokens, "tokens"));
    embedding_sizes sz = {0, 0, 0, 0};
    TRY(embedding_sizes_of(b, fn, B, T, C, V, &sz));
    const tref r[] = {OUT("dwte", dwte, dwte_off, sz.VC), OUT("dwpe", dwpe, dwpe_off, sz.TC),
                      IN("dout", dout, dout_off, sz.BTC), IN("tokens", tokens, tokens_off, sz.BT)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(embedding_backward, dwte, dwte_off, dwpe, dwpe_off, dout, dout_off, tokens, tokens_off, B, T, C, V);
}

/* ---- loss ---- */

vla_status vla_nn_crossentropy(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                               size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                               const vla_buffer *targets, size_t targets_off, int M, int V) {
    static const char fn[] = "vla_nn_crossentropy";
    TRY(begin(b, fn));
    TRY(need(b, fn, logits, "logits"));
    TRY(need(b, fn, targets, "targets"));
    TRY(dim(b, fn, "M", M));
    TRY(dim(b, fn, "V", V));
    size_t nMV = 0;
    TRY(count(b, fn, (size_t)M, (size_t)V, &nMV));
    const tref r[] = {OUT("loss", loss, loss_off, 1), OUT_SAME("dlogits", dlogits, dlogits_off, nMV, 1u << 2),
                      IN("logits", logits, logits_off, nMV), IN("targets", targets, targets_off, (size_t)M)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(crossentropy, loss, loss_off, dlogits, dlogits_off, logits, logits_off, targets, targets_off, M, V);
}

/* ---- optimiser ---- */

vla_status vla_nn_global_norm(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x, size_t x_off,
                              size_t n) {
    static const char fn[] = "vla_nn_global_norm";
    TRY(begin(b, fn));
    TRY(need(b, fn, norm, "norm"));
    TRY(need(b, fn, x, "x"));
    TRY(len(b, fn, n));
    const tref r[] = {OUT("norm", norm, norm_off, 1), IN("x", x, x_off, n)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(global_norm, norm, norm_off, x, x_off, n);
}

vla_status vla_adamw_params_init(vla_adamw_params *p) {
    vla_clear_message(NULL);
    if (!p) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_adamw_params_init: p is NULL");
    memset(p, 0, sizeof *p);
    /* torch.optim.AdamW's defaults. */
    p->lr = 1e-3;
    p->beta1 = 0.9;
    p->beta2 = 0.999;
    p->eps = 1e-8;
    p->weight_decay = 1e-2;
    p->step = 1;
    p->max_norm = 0.0;
    return VLA_OK;
}

static vla_status check_adamw(vla_backend *b, const char *fn, const vla_adamw_params *p) {
    for (int i = 0; i < 4; i++)
        if (p->reserved[i])
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER,
                            "%s: p.reserved[%d] is not zero (initialise p with vla_adamw_params_init)", fn, i);
    if (!isfinite(p->lr) || p->lr < 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: lr = %g must be finite and >= 0", fn, p->lr);
    if (!(p->beta1 >= 0 && p->beta1 < 1))
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: beta1 = %g is outside [0, 1)", fn, p->beta1);
    if (!(p->beta2 >= 0 && p->beta2 < 1))
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: beta2 = %g is outside [0, 1)", fn, p->beta2);
    if (!isfinite(p->eps) || p->eps <= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: eps = %g must be finite and > 0", fn, p->eps);
    if (!isfinite(p->weight_decay) || p->weight_decay < 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: weight_decay = %g must be finite and >= 0", fn,
                        p->weight_decay);
    if (p->step < 1)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: step = %lld must be >= 1 (counted from 1)", fn,
                        (long long)p->step);
    if (!isfinite(p->max_norm) || p->max_norm < 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: max_norm = %g must be finite and >= 0 (0 = no clipping)",
                        fn, p->max_norm);
    return VLA_OK;
}

vla_status vla_nn_adamw_step(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                             vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                             const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p) {
    static const char fn[] = "vla_nn_adamw_step";
    TRY(begin(b, fn));
    TRY(need(b, fn, param, "param"));
    TRY(need(b, fn, m, "m"));
    TRY(need(b, fn, v, "v"));
    TRY(need(b, fn, grad, "grad"));
    TRY(need(b, fn, p, "p"));
    TRY(len(b, fn, n));
    TRY(check_adamw(b, fn, p));
    if (p->max_norm > 0 && !norm)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: max_norm = %g asks for clipping, which needs norm (vla_nn_global_norm's output)", fn,
                        p->max_norm);
    if (p->max_norm == 0 && norm)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: norm is given but max_norm = 0 turns clipping off (set max_norm, or pass NULL)", fn);
    /* grad is an input that may not share elements with the updated tensors. */
    const tref r[] = {OUT("param", param, param_off, n), OUT("m", m, m_off, n), OUT("v", v, v_off, n),
                      IN("grad", grad, grad_off, n), IN("norm", norm, norm_off, 1)};
    TRY(check_refs(b, fn, r, NREFS(r)));
    DISPATCH(adamw_step, param, param_off, m, m_off, v, v_off, grad, grad_off, norm, norm_off, n, p);
}
