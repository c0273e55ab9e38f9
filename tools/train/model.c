/* TinyLM forward/backward on libvla's ops (the model is described in model.h).
 *
 * Conventions of vla/nn.h: tensors are (buffer, offset) pairs; backward outputs ACCUMULATE (+=),
 * so the parameter gradients are zeroed once per step and every scratch gradient right before
 * the call that accumulates into it; the attention op's backward OVERWRITES its outputs. Shapes
 * in the comments: M = B T rows. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LN_EPS 1e-5f
#define INIT_STD 0.02

#define TRY(call)                                                                                                     \
    do {                                                                                                              \
        vla_status s_ = (call);                                                                                       \
        if (s_ != VLA_OK) return s_;                                                                                  \
    } while (0)

/* ---- profiling (tm_profile in model.h) -------------------------------------------------------- */

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* The clock after the work queued so far is done (0 when not profiling). */
static vla_status prof_begin(tm_model *m, double *t0) {
    *t0 = 0.0;
    if (!m->prof) return VLA_OK;
    TRY(vla_backend_synchronize(m->be));
    *t0 = now_ms();
    return VLA_OK;
}

/* After a call that returned s: waits for its work and adds the time since t0 to *acc. */
static vla_status prof_end(tm_model *m, double t0, double *acc, vla_status s) {
    if (!m->prof || s != VLA_OK) return s;
    TRY(vla_backend_synchronize(m->be));
    *acc += now_ms() - t0;
    return VLA_OK;
}

/* TIMED(gemm_ms, call): the call, returning its status on failure, timed when profiling. */
#define TIMED(slot, call)                                                                                             \
    do {                                                                                                              \
        double t0_;                                                                                                   \
        TRY(prof_begin(m, &t0_));                                                                                     \
        TRY(prof_end(m, t0_, m->prof ? &m->prof->slot : NULL, (call)));                                               \
    } while (0)
#define GEMM(call) TIMED(gemm_ms, call)
#define ATTN(call) TIMED(attention_ms, call)

static const char *const mixer_names[TM_N_MIXERS] = {"softmax", "linear", "delta", "vla", "deltanet"};

const char *tm_mixer_name(tm_mixer m) { return (unsigned)m < TM_N_MIXERS ? mixer_names[m] : "?"; }

int tm_mixer_from_name(const char *name, tm_mixer *out) {
    for (int i = 0; i < TM_N_MIXERS; i++)
        if (strcmp(name, mixer_names[i]) == 0) {
            *out = (tm_mixer)i;
            return 0;
        }
    return -1;
}

void tm_config_paper(tm_config *c, tm_mixer m) {
    c->mixer = m;
    c->V = 128, c->d = 128, c->H = 4, c->L = 2, c->F = 256, c->max_T = 4096;
}

int tm_config_check(const tm_config *c, char *err, size_t errlen) {
    if ((unsigned)c->mixer >= TM_N_MIXERS) return snprintf(err, errlen, "unknown mixer %d", (int)c->mixer), -1;
    if (c->V < 2 || c->d < 1 || c->H < 1 || c->F < 1 || c->max_T < 1)
        return snprintf(err, errlen, "V = %d, d = %d, H = %d, F = %d, max_T = %d: each must be positive (V >= 2)",
                        c->V, c->d, c->H, c->F, c->max_T),
               -1;
    if (c->L < 1 || c->L > TM_MAX_LAYERS)
        return snprintf(err, errlen, "L = %d blocks: 1..%d", c->L, TM_MAX_LAYERS), -1;
    if (c->d % c->H || c->d / c->H > 256)
        return snprintf(err, errlen, "d = %d does not split into %d heads of at most 256", c->d, c->H), -1;
    return 0;
}

/* ---- layouts ------------------------------------------------------------------------------- */

static tm_params param_layout(const tm_config *c) {
    tm_params P;
    const size_t d = (size_t)c->d, F = (size_t)c->F, H = (size_t)c->H;
    size_t o = 0;
#define PUT(field, n) (field = o, o += (n))
    PUT(P.wte, (size_t)c->V * d);
    PUT(P.wpe, (size_t)c->max_T * d);
    for (int l = 0; l < TM_MAX_LAYERS; l++) {
        tm_block_params *b = &P.blk[l];
        memset(b, 0xff, sizeof *b); /* TM_NONE everywhere, then the tensors this block has */
        if (l >= c->L) continue;
        PUT(b->ln1w, d), PUT(b->ln1b, d);
        PUT(b->Wqkv, 3 * d * d), PUT(b->bqkv, 3 * d);
        if (c->mixer == TM_DELTA) PUT(b->Wbeta, H * d), PUT(b->bbeta, H);
        if (c->mixer == TM_DELTANET) PUT(b->Wg, d * d), PUT(b->bg, d);
        if (c->mixer == TM_VLA) PUT(b->Wu, d * d), PUT(b->lnow, d), PUT(b->lnob, d);
        PUT(b->Wo, d * d), PUT(b->bo, d);
        PUT(b->ln2w, d), PUT(b->ln2b, d);
        PUT(b->W1, F * d), PUT(b->b1, F);
        PUT(b->W2, d * F), PUT(b->b2, d);
    }
    PUT(P.lnfw, d), PUT(P.lnfb, d);
    P.total = o;
    return P;
}

static tm_acts act_layout(const tm_config *c, size_t M) {
    tm_acts A;
    const size_t d = (size_t)c->d, F = (size_t)c->F;
    size_t o = 0;
    memset(&A, 0xff, sizeof A);
    PUT(A.tokens, M), PUT(A.targets, M);
    for (int l = 0; l <= c->L; l++) PUT(A.res[l], M * d);
    for (int l = 0; l < c->L; l++) {
        tm_block_acts *b = &A.blk[l];
        PUT(b->h1, M * d), PUT(b->m1, M), PUT(b->r1, M);
        if (c->mixer == TM_VLA) PUT(b->lno, M * d), PUT(b->mo, M), PUT(b->ro, M);
        PUT(b->x_mid, M * d);
        PUT(b->h2, M * d), PUT(b->m2, M), PUT(b->r2, M);
        PUT(b->a, M * F), PUT(b->g, M * F);
    }
    PUT(A.z, M * d), PUT(A.mf, M), PUT(A.rf, M);
    PUT(A.logits, M * (size_t)c->V);
    PUT(A.loss, 1);
    PUT(A.dres, M * d), PUT(A.dh, M * d);
    PUT(A.dF1, M * F), PUT(A.dF2, M * F);
    if (c->mixer == TM_DELTA) PUT(A.dbp, M * (size_t)c->H);
    if (c->mixer == TM_DELTANET) PUT(A.dgp, M * d);
#undef PUT
    A.total = o;
    return A;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static vla_status alloc_f(vla_backend *be, size_t n, vla_buffer **out) {
    return vla_buffer_alloc(be, (n ? n : 1) * sizeof(float), out);
}

void tm_destroy(tm_model *m) {
    if (!m) return;
    vla_buffer_free(m->params), vla_buffer_free(m->grads), vla_buffer_free(m->moments);
    vla_buffer_free(m->acts), vla_buffer_free(m->norm);
    for (int l = 0; l < TM_MAX_LAYERS; l++) {
        tm_layer_bufs *b = &m->lb[l];
        vla_buffer_free(b->q), vla_buffer_free(b->k), vla_buffer_free(b->v), vla_buffer_free(b->o);
        vla_buffer_free(b->u), vla_buffer_free(b->beta), vla_buffer_free(b->gate);
        vla_buffer_free(b->S_out), vla_buffer_free(b->A_out);
    }
    vla_buffer_free(m->dO), vla_buffer_free(m->dq), vla_buffer_free(m->dk), vla_buffer_free(m->dv);
    vla_buffer_free(m->du), vla_buffer_free(m->dbeta), vla_buffer_free(m->dgate);
    memset(m, 0, sizeof *m);
}

static vla_status create(tm_model *m) {
    const tm_config *c = &m->cfg;
    const size_t M = (size_t)m->Bmax * (size_t)m->Tmax, Md = M * (size_t)c->d, MH = M * (size_t)c->H;
    vla_backend *be = m->be;
    TRY(alloc_f(be, m->P.total, &m->params));
    TRY(alloc_f(be, m->P.total, &m->grads));
    TRY(alloc_f(be, 2 * m->P.total, &m->moments));
    TRY(alloc_f(be, m->A.total, &m->acts));
    TRY(alloc_f(be, 1, &m->norm));
    for (int l = 0; l < c->L; l++) {
        tm_layer_bufs *b = &m->lb[l];
        TRY(alloc_f(be, Md, &b->q));
        TRY(alloc_f(be, Md, &b->k));
        TRY(alloc_f(be, Md, &b->v));
        TRY(alloc_f(be, Md, &b->o));
        if (c->mixer == TM_VLA) TRY(alloc_f(be, Md, &b->u));
        if (c->mixer == TM_DELTA) TRY(alloc_f(be, MH, &b->beta));
        if (c->mixer == TM_DELTANET) TRY(alloc_f(be, Md, &b->gate));
    }
    TRY(alloc_f(be, Md, &m->dO));
    TRY(alloc_f(be, Md, &m->dq));
    TRY(alloc_f(be, Md, &m->dk));
    TRY(alloc_f(be, Md, &m->dv));
    if (c->mixer == TM_VLA) TRY(alloc_f(be, Md, &m->du));
    if (c->mixer == TM_DELTA) TRY(alloc_f(be, MH, &m->dbeta));
    if (c->mixer == TM_DELTANET) TRY(alloc_f(be, Md, &m->dgate));
    return VLA_OK;
}

vla_status tm_create(tm_model *m, vla_backend *be, const tm_config *c, int Bmax, int Tmax) {
    memset(m, 0, sizeof *m);
    char err[256];
    if (tm_config_check(c, err, sizeof err) || Bmax < 1 || Tmax < 1 || Tmax > c->max_T)
        return VLA_ERR_INVALID_PARAMETER;
    m->cfg = *c, m->be = be, m->Bmax = Bmax, m->Tmax = Tmax;
    m->P = param_layout(c);
    m->A = act_layout(c, (size_t)Bmax * (size_t)Tmax);
    static const vla_mechanism mech[TM_N_MIXERS] = {VLA_MECH_SOFTMAX, VLA_MECH_LINEAR, VLA_MECH_DELTA, VLA_MECH_VLA,
                                                    VLA_MECH_DELTA_PAPER};
    vla_status s = vla_attn_desc_init(&m->desc, mech[c->mixer]);
    if (s == VLA_OK && c->mixer == TM_VLA) s = vla_attn_desc_preset(&m->desc, "paper");
    /* TRAINER.md's linear mixer divides by max(q~ . z, 1e-6); the op divides by q~ . z + eps,
     * the same to rounding with eps = 1e-6 (q~, z > 0). */
    if (c->mixer == TM_LINEAR) m->desc.eps = 1e-6;
    /* deltanet: the paper's code normalises k with F.normalize, x / max(||x||, 1e-12); the op's
     * normalize(x) = x / max(||x||, eps). Its feature map stays the default, elu1 on q. */
    if (c->mixer == TM_DELTANET) m->desc.eps = 1e-12;
    if (s == VLA_OK) s = create(m);
    if (s != VLA_OK) {
        tm_config keep = m->cfg;
        tm_destroy(m);
        m->cfg = keep;
    }
    return s;
}

vla_status tm_init_params(tm_model *m, tr_rng *r) {
    const tm_config *c = &m->cfg;
    const tm_params *P = &m->P;
    float *p = calloc(P->total, sizeof *p); /* biases and LayerNorm biases stay 0 */
    if (!p) return VLA_ERR_OUT_OF_MEMORY;
    const size_t d = (size_t)c->d, F = (size_t)c->F, H = (size_t)c->H;
#define NORMAL(off, n)                                                                                                \
    for (size_t i_ = 0; i_ < (n); i_++) p[(off) + i_] = (float)(INIT_STD * tr_rng_normal(r))
#define ONES(off, n)                                                                                                  \
    for (size_t i_ = 0; i_ < (n); i_++) p[(off) + i_] = 1.0f
    NORMAL(P->wte, (size_t)c->V * d);
    NORMAL(P->wpe, (size_t)c->max_T * d);
    for (int l = 0; l < c->L; l++) {
        const tm_block_params *b = &P->blk[l];
        ONES(b->ln1w, d);
        NORMAL(b->Wqkv, 3 * d * d);
        if (b->Wbeta != TM_NONE) NORMAL(b->Wbeta, H * d);
        if (b->Wg != TM_NONE) NORMAL(b->Wg, d * d);
        if (b->Wu != TM_NONE) NORMAL(b->Wu, d * d);
        if (b->lnow != TM_NONE) ONES(b->lnow, d);
        NORMAL(b->Wo, d * d);
        ONES(b->ln2w, d);
        NORMAL(b->W1, F * d);
        NORMAL(b->W2, d * F);
    }
    ONES(P->lnfw, d);
#undef NORMAL
#undef ONES
    vla_status s = vla_buffer_upload(m->params, 0, p, P->total * sizeof *p);
    free(p);
    if (s == VLA_OK) s = vla_nn_fill(m->be, m->moments, 0, 2 * P->total, 0.0f);
    return s;
}

vla_status tm_set_batch(tm_model *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    if (B < 1 || B > m->Bmax || T < 1 || T > m->Tmax) return VLA_ERR_INVALID_DIMENSION;
    const size_t n = (size_t)B * (size_t)T * sizeof(int32_t);
    TRY(vla_buffer_upload(m->acts, m->A.tokens * 4, tokens, n));
    return vla_buffer_upload(m->acts, m->A.targets * 4, targets, n);
}

/* ---- forward ---------------------------------------------------------------------------------- */

static vla_attn_args attn_args(const tm_model *m, int l, int B, int T) {
    const tm_layer_bufs *b = &m->lb[l];
    vla_attn_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.T = T, a.H = m->cfg.H, a.dk = a.dv = m->cfg.d / m->cfg.H;
    a.q = b->q, a.k = b->k, a.v = b->v, a.o = b->o;
    a.u = b->u;       /* NULL except vla */
    a.beta = b->beta; /* NULL except delta */
    a.g = b->gate;    /* NULL except deltanet */
    a.S_out = b->S_out, a.A_out = b->A_out; /* NULL except in tm_state_norms */
    return a;
}

/* The mixer of block l: h1 [M, d] -> x_mid [M, d] (before the residual add). */
static vla_status mixer_forward(tm_model *m, int l, int B, int T) {
    vla_backend *be = m->be;
    const tm_config *c = &m->cfg;
    const tm_block_params *p = &m->P.blk[l];
    const tm_block_acts *a = &m->A.blk[l];
    const tm_layer_bufs *lb = &m->lb[l];
    vla_buffer *P = m->params, *A = m->acts;
    const int M = B * T, d = c->d;
    const size_t dd = (size_t)d * d;
    /* q, k, v [M, d] = h1 [M, d] times the three row blocks of Wqkv [3d, d], plus bias. */
    GEMM(vla_nn_matmul_forward(be, lb->q, 0, A, a->h1, P, p->Wqkv, P, p->bqkv, M, d, d));
    GEMM(vla_nn_matmul_forward(be, lb->k, 0, A, a->h1, P, p->Wqkv + dd, P, p->bqkv + d, M, d, d));
    GEMM(vla_nn_matmul_forward(be, lb->v, 0, A, a->h1, P, p->Wqkv + 2 * dd, P, p->bqkv + 2 * d, M, d, d));
    if (c->mixer == TM_DELTA) { /* beta [M, H] = sigmoid(h1 Wbeta^T + bbeta) */
        GEMM(vla_nn_matmul_forward(be, lb->beta, 0, A, a->h1, P, p->Wbeta, P, p->bbeta, M, c->H, d));
        TRY(vla_nn_sigmoid_forward(be, lb->beta, 0, lb->beta, 0, (size_t)M * c->H));
    }
    if (c->mixer == TM_DELTANET) { /* gate [M, d] = sigmoid(h1 Wg^T + bg): one per state row and head */
        GEMM(vla_nn_matmul_forward(be, lb->gate, 0, A, a->h1, P, p->Wg, P, p->bg, M, d, d));
        TRY(vla_nn_sigmoid_forward(be, lb->gate, 0, lb->gate, 0, (size_t)M * d));
    }
    if (c->mixer == TM_VLA) /* u [M, d] = k_raw Wu^T: the merged raw keys, no bias */
        GEMM(vla_nn_matmul_forward(be, lb->u, 0, lb->k, 0, P, p->Wu, NULL, 0, M, d, d));
    vla_attn_args args = attn_args(m, l, B, T);
    ATTN(vla_attention_forward(be, &m->desc, &args));
    if (c->mixer == TM_VLA) { /* Wo(LayerNorm(o)) */
        TRY(vla_nn_layernorm_forward(be, A, a->lno, A, a->mo, A, a->ro, lb->o, 0, P, p->lnow, P, p->lnob, M, d,
                                     LN_EPS));
        GEMM(vla_nn_matmul_forward(be, A, a->x_mid, A, a->lno, P, p->Wo, P, p->bo, M, d, d));
        return VLA_OK;
    }
    GEMM(vla_nn_matmul_forward(be, A, a->x_mid, lb->o, 0, P, p->Wo, P, p->bo, M, d, d));
    return VLA_OK;
}

vla_status tm_forward(tm_model *m, int B, int T) {
    vla_backend *be = m->be;
    const tm_config *c = &m->cfg;
    const tm_params *p = &m->P;
    const tm_acts *a = &m->A;
    vla_buffer *P = m->params, *A = m->acts;
    const int M = B * T, d = c->d, F = c->F;
    const size_t Md = (size_t)M * d;
    if (B < 1 || B > m->Bmax || T < 1 || T > m->Tmax) return VLA_ERR_INVALID_DIMENSION;
    TRY(vla_nn_embedding_forward(be, A, a->res[0], A, a->tokens, P, p->wte, P, p->wpe, B, T, d, c->V));
    for (int l = 0; l < c->L; l++) {
        const tm_block_params *bp = &p->blk[l];
        const tm_block_acts *ba = &a->blk[l];
        TRY(vla_nn_layernorm_forward(be, A, ba->h1, A, ba->m1, A, ba->r1, A, a->res[l], P, bp->ln1w, P, bp->ln1b, M,
                                     d, LN_EPS));
        TRY(mixer_forward(m, l, B, T));
        TRY(vla_nn_add_forward(be, A, ba->x_mid, A, ba->x_mid, A, a->res[l], Md)); /* x + Mixer(LN1(x)) */
        TRY(vla_nn_layernorm_forward(be, A, ba->h2, A, ba->m2, A, ba->r2, A, ba->x_mid, P, bp->ln2w, P, bp->ln2b,
                                     M, d, LN_EPS));
        GEMM(vla_nn_matmul_forward(be, A, ba->a, A, ba->h2, P, bp->W1, P, bp->b1, M, F, d));
        TRY(vla_nn_gelu_forward(be, A, ba->g, A, ba->a, (size_t)M * F));
        GEMM(vla_nn_matmul_forward(be, A, a->res[l + 1], A, ba->g, P, bp->W2, P, bp->b2, M, d, F));
        TRY(vla_nn_add_forward(be, A, a->res[l + 1], A, a->res[l + 1], A, ba->x_mid, Md));
    }
    TRY(vla_nn_layernorm_forward(be, A, a->z, A, a->mf, A, a->rf, A, a->res[c->L], P, p->lnfw, P, p->lnfb, M, d,
                                 LN_EPS));
    GEMM(vla_nn_matmul_forward(be, A, a->logits, A, a->z, P, p->wte, NULL, 0, M, c->V, d)); /* tied head */
    return VLA_OK;
}

vla_status tm_loss(tm_model *m, int B, int T, float *loss) {
    TRY(vla_nn_crossentropy(m->be, m->acts, m->A.loss, NULL, 0, m->acts, m->A.logits, m->acts, m->A.targets, B * T,
                            m->cfg.V));
    return tm_read_loss(m, loss);
}

vla_status tm_read_loss(tm_model *m, float *loss) {
    return vla_buffer_download(m->acts, m->A.loss * sizeof(float), loss, sizeof *loss);
}

vla_status tm_accuracy(tm_model *m, int B, int T, const int32_t *targets, float *host_logits, long *hits,
                       long *count) {
    const int V = m->cfg.V;
    const size_t M = (size_t)B * T;
    TRY(vla_buffer_download(m->acts, m->A.logits * sizeof(float), host_logits, M * V * sizeof(float)));
    long h = 0, n = 0;
    for (size_t i = 0; i < M; i++) {
        if (targets[i] < 0) continue;
        const float *row = host_logits + i * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (row[j] > row[best]) best = j;
        h += best == targets[i], n++;
    }
    *hits = h, *count = n;
    return VLA_OK;
}

/* ---- backward --------------------------------------------------------------------------------- */

/* dres [M, d] holds dL/dx_mid of block l on entry; adds the mixer's input gradient into dh
 * (zeroed here) and every mixer parameter gradient into G. */
static vla_status mixer_backward(tm_model *m, int l, int B, int T) {
    vla_backend *be = m->be;
    const tm_config *c = &m->cfg;
    const tm_block_params *p = &m->P.blk[l];
    const tm_block_acts *a = &m->A.blk[l];
    const tm_layer_bufs *lb = &m->lb[l];
    vla_buffer *P = m->params, *G = m->grads, *A = m->acts;
    const tm_acts *acts = &m->A;
    const int M = B * T, d = c->d;
    const size_t dd = (size_t)d * d, Md = (size_t)M * d;
    /* dO [M, d] = dL/do through Wo (and the LayerNorm before it, vla). */
    TRY(vla_nn_fill(be, m->dO, 0, Md, 0.0f));
    if (c->mixer == TM_VLA) {
        TRY(vla_nn_fill(be, A, acts->dh, Md, 0.0f));
        GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wo, G, p->bo, A, acts->dres, A, a->lno, P, p->Wo, M, d, d));
        TRY(vla_nn_layernorm_backward(be, m->dO, 0, G, p->lnow, G, p->lnob, A, acts->dh, lb->o, 0, P, p->lnow, A,
                                      a->mo, A, a->ro, M, d));
    } else {
        GEMM(vla_nn_matmul_backward(be, m->dO, 0, G, p->Wo, G, p->bo, A, acts->dres, lb->o, 0, P, p->Wo, M, d, d));
    }
    /* The op's backward overwrites dq, dk, dv [M, d] (and du [M, d], dbeta [M, H], dgate [M, d]). */
    vla_attn_args args = attn_args(m, l, B, T);
    vla_attn_grads g;
    memset(&g, 0, sizeof g);
    g.dO = m->dO, g.dq = m->dq, g.dk = m->dk, g.dv = m->dv;
    g.du = c->mixer == TM_VLA ? m->du : NULL;
    g.dbeta = c->mixer == TM_DELTA ? m->dbeta : NULL;
    g.dg = c->mixer == TM_DELTANET ? m->dgate : NULL;
    ATTN(vla_attention_backward(be, &m->desc, &args, &g));
    TRY(vla_nn_fill(be, A, acts->dh, Md, 0.0f));
    if (c->mixer == TM_DELTA) { /* beta = sigmoid(h1 Wbeta^T + bbeta) */
        const size_t MH = (size_t)M * c->H;
        TRY(vla_nn_fill(be, A, acts->dbp, MH, 0.0f));
        TRY(vla_nn_sigmoid_backward(be, A, acts->dbp, m->dbeta, 0, lb->beta, 0, MH));
        GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wbeta, G, p->bbeta, A, acts->dbp, A, a->h1, P, p->Wbeta,
                                    M, c->H, d));
    }
    if (c->mixer == TM_DELTANET) { /* gate = sigmoid(h1 Wg^T + bg): the op's dg through the sigmoid, then Wg */
        TRY(vla_nn_fill(be, A, acts->dgp, Md, 0.0f));
        TRY(vla_nn_sigmoid_backward(be, A, acts->dgp, m->dgate, 0, lb->gate, 0, Md));
        GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wg, G, p->bg, A, acts->dgp, A, a->h1, P, p->Wg, M, d, d));
    }
    if (c->mixer == TM_VLA) /* u = k_raw Wu^T: k_raw's gradient gathers du Wu on top of the op's dk */
        GEMM(vla_nn_matmul_backward(be, m->dk, 0, G, p->Wu, NULL, 0, m->du, 0, lb->k, 0, P, p->Wu, M, d, d));
    GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wqkv, G, p->bqkv, m->dq, 0, A, a->h1, P, p->Wqkv, M, d, d));
    GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wqkv + dd, G, p->bqkv + d, m->dk, 0, A, a->h1, P,
                                p->Wqkv + dd, M, d, d));
    GEMM(vla_nn_matmul_backward(be, A, acts->dh, G, p->Wqkv + 2 * dd, G, p->bqkv + 2 * d, m->dv, 0, A, a->h1, P,
                                p->Wqkv + 2 * dd, M, d, d));
    return VLA_OK;
}

vla_status tm_backward(tm_model *m, int B, int T) {
    vla_backend *be = m->be;
    const tm_config *c = &m->cfg;
    const tm_params *p = &m->P;
    const tm_acts *a = &m->A;
    vla_buffer *P = m->params, *G = m->grads, *A = m->acts;
    const int M = B * T, d = c->d, F = c->F;
    const size_t Md = (size_t)M * d, MF = (size_t)M * F;
    if (B < 1 || B > m->Bmax || T < 1 || T > m->Tmax) return VLA_ERR_INVALID_DIMENSION;
    TRY(vla_nn_fill(be, G, 0, p->total, 0.0f));
    /* loss, and dlogits [M, V] in place of the logits */
    TRY(vla_nn_crossentropy(be, A, a->loss, A, a->logits, A, a->logits, A, a->targets, M, c->V));
    TRY(vla_nn_fill(be, A, a->dh, Md, 0.0f)); /* dz */
    GEMM(vla_nn_matmul_backward(be, A, a->dh, G, p->wte, NULL, 0, A, a->logits, A, a->z, P, p->wte, M, c->V, d));
    TRY(vla_nn_fill(be, A, a->dres, Md, 0.0f));
    TRY(vla_nn_layernorm_backward(be, A, a->dres, G, p->lnfw, G, p->lnfb, A, a->dh, A, a->res[c->L], P, p->lnfw, A,
                                  a->mf, A, a->rf, M, d));
    for (int l = c->L - 1; l >= 0; l--) {
        const tm_block_params *bp = &p->blk[l];
        const tm_block_acts *ba = &a->blk[l];
        /* dres = dL/d res[l+1]. The FFN branch; the residual path needs no call: LN2's backward
         * adds into dres, which then is dL/dx_mid. */
        TRY(vla_nn_fill(be, A, a->dF2, MF, 0.0f));
        GEMM(vla_nn_matmul_backward(be, A, a->dF2, G, bp->W2, G, bp->b2, A, a->dres, A, ba->g, P, bp->W2, M, d, F));
        TRY(vla_nn_fill(be, A, a->dF1, MF, 0.0f));
        TRY(vla_nn_gelu_backward(be, A, a->dF1, A, a->dF2, A, ba->a, MF));
        TRY(vla_nn_fill(be, A, a->dh, Md, 0.0f));
        GEMM(vla_nn_matmul_backward(be, A, a->dh, G, bp->W1, G, bp->b1, A, a->dF1, A, ba->h2, P, bp->W1, M, F, d));
        TRY(vla_nn_layernorm_backward(be, A, a->dres, G, bp->ln2w, G, bp->ln2b, A, a->dh, A, ba->x_mid, P, bp->ln2w,
                                      A, ba->m2, A, ba->r2, M, d));
        /* The mixer branch: dh = dL/dh1, then LN1's backward adds into dres = dL/d res[l]. */
        TRY(mixer_backward(m, l, B, T));
        TRY(vla_nn_layernorm_backward(be, A, a->dres, G, bp->ln1w, G, bp->ln1b, A, a->dh, A, a->res[l], P, bp->ln1w,
                                      A, ba->m1, A, ba->r1, M, d));
    }
    return vla_nn_embedding_backward(be, G, p->wte, G, p->wpe, A, a->dres, A, a->tokens, B, T, d, c->V);
}

/* ---- final states ------------------------------------------------------------------------------ */

/* Mean over the n = B H matrices of x (each of r x c floats) of their Frobenius norms. */
static double mean_frobenius(const float *x, size_t n, size_t rc) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double s = 0.0;
        for (size_t j = 0; j < rc; j++) s += (double)x[i * rc + j] * x[i * rc + j];
        sum += sqrt(s);
    }
    return sum / (double)n;
}

vla_status tm_state_norms(tm_model *m, int B, int T, double *S_norm, double *A_norm) {
    const tm_config *c = &m->cfg;
    const int has_S = c->mixer != TM_SOFTMAX, has_A = c->mixer == TM_VLA;
    for (int l = 0; l < c->L; l++) S_norm[l] = A_norm[l] = NAN;
    if (B < 1 || B > m->Bmax || T < 1 || T > m->Tmax) return VLA_ERR_INVALID_DIMENSION;
    if (!has_S) return VLA_OK;
    const size_t dh = (size_t)(c->d / c->H), n = (size_t)B * (size_t)c->H, nS = n * dh * dh;
    float *host = malloc(nS * sizeof *host);
    vla_status s = host ? VLA_OK : VLA_ERR_OUT_OF_MEMORY;
    for (int l = 0; l < c->L && !s; l++) {
        s = alloc_f(m->be, nS, &m->lb[l].S_out);
        if (!s && has_A) s = alloc_f(m->be, nS, &m->lb[l].A_out); /* dk = dv: A is as large as S */
    }
    if (!s) s = tm_forward(m, B, T);
    for (int l = 0; l < c->L && !s; l++) {
        s = vla_buffer_download(m->lb[l].S_out, 0, host, nS * sizeof *host);
        if (!s) S_norm[l] = mean_frobenius(host, n, dh * dh);
        if (!s && has_A) s = vla_buffer_download(m->lb[l].A_out, 0, host, nS * sizeof *host);
        if (!s && has_A) A_norm[l] = mean_frobenius(host, n, dh * dh);
    }
    for (int l = 0; l < c->L; l++) {
        vla_buffer_free(m->lb[l].S_out), vla_buffer_free(m->lb[l].A_out);
        m->lb[l].S_out = m->lb[l].A_out = NULL;
    }
    free(host);
    return s;
}

/* ---- update ----------------------------------------------------------------------------------- */

vla_status tm_update(tm_model *m, const tm_optim *o, double lr, int64_t t) {
    const size_t n = m->P.total;
    vla_adamw_params ap;
    TRY(vla_adamw_params_init(&ap));
    ap.lr = lr, ap.beta1 = o->beta1, ap.beta2 = o->beta2, ap.eps = o->eps;
    ap.weight_decay = o->weight_decay, ap.step = t, ap.max_norm = o->clip;
    if (o->clip > 0) TRY(vla_nn_global_norm(m->be, m->norm, 0, m->grads, 0, n));
    return vla_nn_adamw_step(m->be, m->params, 0, m->moments, 0, m->moments, n, m->grads, 0,
                             o->clip > 0 ? m->norm : NULL, 0, n, &ap);
}

double tm_lr_at(double base, int64_t s, int64_t N, int64_t W) {
    if (s < W) return base * (double)s / (double)W;
    const double span = N > W ? (double)(N - W) : 1.0;
    return base * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)(s - W) / span));
}
