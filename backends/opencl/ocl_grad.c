/* The backward op on OpenCL (VLA-MATH 5): workspace and launch sequence; the kernels are in
 * kernels/opencl/grad_<family>.cl (the paper's DeltaNet: delta_paper.cl, beside its forward).
 *
 * Softmax: row statistics, then dq per query row and dk, dv per key row (grad_softmax.cl).
 * The paper's DeltaNet (delta-paper): backward_delta_paper, the same checkpointed walk as below
 * with its own preparation (phi on q only) and per-row gate.
 * Linear, DeltaNet, VLA (every algorithm: all compute the same gradient, and the backward runs
 * one, sequential with checkpoints):
 *   1. prep (the forward's kernel): q~, k~, k^, u, beta k^ in [B*H, T, dk];
 *   2. the normaliser's denominators q~ . n_t (linear; VLA with normalised output);
 *   3. the recurrent backward, one work-group per head (grad_gdr or grad_vla): a forward pass
 *      that keeps the states every C tokens, then chunk by chunk backwards, each chunk's
 *      per-token states recomputed into a C-token workspace; gradients of the prepared arrays,
 *      dv, dbeta, dg, dS_0, dA_0. Linear attention and DeltaNet under the `chunked` algorithm
 *      take the chunk form here instead (ocl_grad_chunk.c, grad_chunk.cl);
 *   4. the normaliser's backward (dq~ and dk~ through n, dn_0);
 *   5. back through prep: dq, dk, du (grad_prep).
 * C is the descriptor's chunk (capped at T; halved while the chunk states of all heads would
 * pass the device's allocation limit). Memory per head: (T/C) checkpoints of S (and A: dk^2
 * real_t) plus C per-token states, O(T (dk + dv)) for the prepared arrays and their gradients:
 * never a state per token of the whole sequence.
 *
 * Every kernel is built and the whole workspace allocated before anything is queued, so a call
 * that fails on either writes nothing to the caller's buffers. */
#include "ocl_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

static const char *const gws_names[OCL_NGWS] = {
    "q~", "k~", "k^", "u", "beta k^", "dq~", "dk~", "dk^", "du", "q~.n", "do'.o'", "S checkpoints",
    "A checkpoints", "chunk S states", "chunk A states", "chunk a", "chunk z", "chunk scalars", "chunk e",
    "dS", "dA", "softmax row max", "softmax row sum", "softmax dO.o", "chunked backward work",
};

void ocl_gws_release(ocl_ctx *ctx) {
    for (int i = 0; i < OCL_NGWS; i++) {
        if (ctx->gws[i]) clReleaseMemObject(ctx->gws[i]);
        ctx->gws[i] = NULL;
        ctx->gws_size[i] = 0;
    }
}

/* Makes slot w hold at least `bytes` (0: the size overflowed). Kept between calls. */
static vla_status gws(vla_backend *b, ocl_gws w, size_t bytes) {
    ocl_ctx *ctx = b->context;
    if (bytes == 0)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_attention_backward: opencl workspace '%s' overflows size_t",
                        gws_names[w]);
    if (ctx->gws_size[w] >= bytes) return VLA_OK;
    if (bytes > ctx->max_alloc)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY,
                        "vla_attention_backward: opencl workspace '%s' needs %.1f MiB in one buffer; this device "
                        "allocates at most %.1f MiB at once (use a shorter piece, fewer heads per call, or a smaller "
                        "chunk)",
                        gws_names[w], (double)bytes / 1048576.0, (double)ctx->max_alloc / 1048576.0);
    if (ctx->gws[w]) clReleaseMemObject(ctx->gws[w]);
    ctx->gws[w] = NULL;
    ctx->gws_size[w] = 0;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS || !m) {
        char what[96];
        snprintf(what, sizeof what, "(backward workspace '%s', %.1f MiB)", gws_names[w], (double)bytes / 1048576.0);
        return ocl_fail(b, err == CL_SUCCESS ? CL_MEM_OBJECT_ALLOCATION_FAILURE : err, "clCreateBuffer", what);
    }
    ctx->gws[w] = m;
    ctx->gws_size[w] = bytes;
    return VLA_OK;
}

vla_status ocl_gws_grow(vla_backend *b, ocl_gws w, size_t bytes) { return gws(b, w, bytes); }

/* ---- launches (ocl_launch, ocl_internal.h): short spellings of the argument setters ---- */

static void g_mem(ocl_launch *l, cl_mem m) { ocl_launch_arg(l, sizeof m, &m); }
static void g_int(ocl_launch *l, int v) { ocl_launch_arg(l, sizeof v, &v); }
static void g_flt(ocl_launch *l, float v) { ocl_launch_arg(l, sizeof v, &v); }

#define GW(x) (ctx->gws[OCL_GW_##x])
#define MEM(buf) ((buf) ? (cl_mem)(buf)->mem : ctx->dummy)
#define OPT(x) ((x) ? (x) : ctx->dummy)
#define TRY(x)                       \
    do {                             \
        vla_status s_ = (x);         \
        if (s_ != VLA_OK) return s_; \
    } while (0)

static vla_status build(vla_backend *b, const ocl_kernel_id *ids, int n) {
    for (int i = 0; i < n; i++) {
        cl_kernel k;
        TRY(ocl_kernel(b, ids[i], &k));
    }
    return VLA_OK;
}

static int imax(int a, int b) { return a > b ? a : b; }

/* ---- softmax ---- */

static vla_status backward_softmax(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                   const vla_attn_grads *g) {
    ocl_ctx *ctx = b->context;
    const int T = a->T, H = a->H, dk = a->dk, dv = a->dv;
    if (!g->dq && !g->dk && !g->dv) return VLA_OK;
    const size_t nrows = ocl_mul4((size_t)a->B, (size_t)H, (size_t)T, 1);
    if (nrows > INT_MAX)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "vla_attention_backward: softmax with B*H*T = %zu rows: at most %d on OpenCL", nrows, INT_MAX);
    const ocl_kernel_id ids[] = {OCL_K_GRAD_SM_STATS, OCL_K_GRAD_SM_DQ, OCL_K_GRAD_SM_DKV};
    TRY(build(b, ids, 3));
    size_t wg[3];
    for (int i = 0; i < 3; i++) TRY(ocl_wg(b, ids[i], 64, &wg[i]));
    TRY(gws(b, OCL_GW_SM_M, ocl_mul4(nrows, sizeof(float), 1, 1)));
    TRY(gws(b, OCL_GW_SM_L, ocl_mul4(nrows, sizeof(float), 1, 1)));
    TRY(gws(b, OCL_GW_SM_D, ocl_mul4(nrows, sizeof(float), 1, 1)));
    const float scale = (float)d->scale;

    ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_SM_STATS);
    g_mem(&l, MEM(a->q)), g_mem(&l, MEM(a->k)), g_mem(&l, MEM(a->v)), g_mem(&l, MEM(g->dO)), g_mem(&l, GW(SM_M)),
        g_mem(&l, GW(SM_L)), g_mem(&l, GW(SM_D)), g_int(&l, T), g_int(&l, H), g_int(&l, dk), g_int(&l, dv),
        g_flt(&l, scale), g_int(&l, (int)nrows);
    TRY(ocl_launch_items(&l, nrows, wg[0]));
    if (g->dq) {
        ocl_launch q = ocl_launch_start(b, OCL_K_GRAD_SM_DQ);
        g_mem(&q, MEM(a->q)), g_mem(&q, MEM(a->k)), g_mem(&q, MEM(a->v)), g_mem(&q, MEM(g->dO)), g_mem(&q, GW(SM_M)),
            g_mem(&q, GW(SM_L)), g_mem(&q, GW(SM_D)), g_mem(&q, MEM(g->dq)), g_int(&q, T), g_int(&q, H),
            g_int(&q, dk), g_int(&q, dv), g_flt(&q, scale), g_int(&q, (int)nrows);
        TRY(ocl_launch_items(&q, nrows, wg[1]));
    }
    if (g->dk || g->dv) {
        ocl_launch k = ocl_launch_start(b, OCL_K_GRAD_SM_DKV);
        g_mem(&k, MEM(a->q)), g_mem(&k, MEM(a->k)), g_mem(&k, MEM(a->v)), g_mem(&k, MEM(g->dO)), g_mem(&k, GW(SM_M)),
            g_mem(&k, GW(SM_L)), g_mem(&k, GW(SM_D)), g_mem(&k, MEM(g->dk)), g_mem(&k, MEM(g->dv)),
            g_int(&k, g->dk != NULL), g_int(&k, g->dv != NULL), g_int(&k, T), g_int(&k, H), g_int(&k, dk),
            g_int(&k, dv), g_flt(&k, scale), g_int(&k, (int)nrows);
        TRY(ocl_launch_items(&k, nrows, wg[2]));
    }
    return VLA_OK;
}

/* ---- linear, DeltaNet, VLA ---- */

/* Bits of grad_gdr's and grad_vla's `outs` (grad_linear_delta.cl). */
enum { GO_DQ = 1, GO_DK = 2, GO_DV = 4, GO_DBETA = 8, GO_DG = 16, GO_DS0 = 32, GO_DU = 64, GO_DA0 = 128 };
/* Bits of prep's and grad_prep's `flags` (prep.cl, grad_prep.cl). */
enum { PREP_KF = 1, PREP_KH = 2, PREP_UU = 4, PREP_HAS_U = 8, PREP_W = 16 };
enum { GP_DQF = 1, GP_DKF = 2, GP_DKH = 4, GP_DUU = 8, GP_HAS_U = 16, GP_OUT_DQ = 32, GP_OUT_DK = 64, GP_OUT_DU = 128 };

static vla_status backward_recurrent(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                     const vla_attn_grads *g) {
    ocl_ctx *ctx = b->context;
    const int vla = d->mechanism == VLA_MECH_VLA, delta = d->mechanism == VLA_MECH_DELTA;
    const int linear = d->mechanism == VLA_MECH_LINEAR;
    const int has_n = linear || (vla && d->normalize_output);
    const int T = a->T, H = a->H, dk = a->dk, dv = a->dv;
    const size_t BH = (size_t)a->B * H, rows = BH * (size_t)T;
    const float eps = (float)d->eps;
    if (!g->dq && !g->dk && !g->dv && !g->du && !g->dbeta && !g->dg && !g->dS_0 && !g->dA_0 && !g->dn_0)
        return VLA_OK;

    /* 1. Every kernel built, every work-group size known. */
    /* chunked: grad_chunk.cl's S part (VLA: between grad_vla's two A-part launches) */
    const int chunked = d->algorithm == VLA_ALGO_CHUNKED;
    const ocl_kernel_id core = vla ? OCL_K_GRAD_VLA : OCL_K_GRAD_GDR;
    const ocl_kernel_id ids[] = {OCL_K_PREP, OCL_K_GRAD_PREP, OCL_K_GRAD_NORM_DEN, OCL_K_GRAD_NORM};
    TRY(build(b, ids, has_n ? 4 : 2));
    size_t wg_prep, wg_gprep, wg_core = 32, wg_den = 32, wg_norm = 32;
    TRY(ocl_wg(b, OCL_K_PREP, 128, &wg_prep));
    TRY(ocl_wg(b, OCL_K_GRAD_PREP, 64, &wg_gprep));
    if (!chunked || vla) {
        TRY(build(b, &core, 1));
        TRY(ocl_wg(b, core, imax(dk, dv), &wg_core));
    }
    if (has_n) {
        TRY(ocl_wg(b, OCL_K_GRAD_NORM_DEN, imax(dk, dv), &wg_den)); /* as norm_out: the same sums */
        TRY(ocl_wg(b, OCL_K_GRAD_NORM, 64, &wg_norm));
    }

    /* 2. Workspace. */
    const size_t f = sizeof(float), rs = ctx->fp64 ? sizeof(double) : sizeof(float);
    /* The per-token chunk states are the largest buffers ([B*H, C, dk, dk] real_t for VLA's A):
     * where one would pass the device's allocation limit, checkpoints every fewer tokens. */
    int C = d->chunk < T ? d->chunk : T;
    const size_t per_tok = vla && (size_t)dk * rs > (size_t)dv * f ? (size_t)dk * dk * rs : (size_t)dk * dv * f;
    while (C > 1 && ocl_mul4(BH, C, per_tok, 1) > ctx->max_alloc) C = (C + 1) / 2;
    const int nch = (T + C - 1) / C;
    TRY(gws(b, OCL_GW_QF, ocl_mul4(rows, dk, f, 1)));
    TRY(gws(b, OCL_GW_DQF, ocl_mul4(rows, dk, f, 1)));
    if (has_n) {
        TRY(gws(b, OCL_GW_KF, ocl_mul4(rows, dk, f, 1)));
        TRY(gws(b, OCL_GW_DKF, ocl_mul4(rows, dk, f, 1)));
        TRY(gws(b, OCL_GW_QN, ocl_mul4(rows, f, 1, 1)));
        TRY(gws(b, OCL_GW_R, ocl_mul4(rows, f, 1, 1)));
    }
    if (vla || delta) {
        TRY(gws(b, OCL_GW_KH, ocl_mul4(rows, dk, f, 1)));
        TRY(gws(b, OCL_GW_DKH, ocl_mul4(rows, dk, f, 1)));
    }
    if (vla) {
        TRY(gws(b, OCL_GW_UU, ocl_mul4(rows, dk, f, 1)));
        TRY(gws(b, OCL_GW_DUU, ocl_mul4(rows, dk, f, 1)));
    }
    if (delta && a->beta) TRY(gws(b, OCL_GW_W, ocl_mul4(rows, dk, f, 1)));
    ocl_gc_call gc;
    if (chunked) {
        TRY(ocl_gc_plan(b, d, a, &gc)); /* its own checkpoints and chunk workspace */
    } else {
        TRY(gws(b, OCL_GW_CKS, ocl_mul4(BH, nch, (size_t)dk * dv, f)));
        TRY(gws(b, OCL_GW_WST, ocl_mul4(BH, C, (size_t)dk * dv, f)));
        TRY(gws(b, OCL_GW_WE, ocl_mul4(BH, C, dv, f)));
        TRY(gws(b, OCL_GW_DST, ocl_mul4(BH, dk, dv, rs)));
    }
    if (vla) {
        TRY(gws(b, OCL_GW_CKA, ocl_mul4(BH, nch, (size_t)dk * dk, rs)));
        TRY(gws(b, OCL_GW_WA, ocl_mul4(BH, C, (size_t)dk * dk, rs)));
        TRY(gws(b, OCL_GW_WAL, ocl_mul4(BH, C, dk, f)));
        TRY(gws(b, OCL_GW_WZ, ocl_mul4(BH, C, dk, rs)));
        TRY(gws(b, OCL_GW_WSC, ocl_mul4(BH, C, 2, rs)));
        TRY(gws(b, OCL_GW_DA, ocl_mul4(BH, dk, dk, rs)));
        if (chunked) {
            TRY(gws(b, OCL_GW_AL, ocl_mul4(rows, dk, f, 1)));
            TRY(gws(b, OCL_GW_DAL, ocl_mul4(rows, dk, f, 1)));
        }
    }

    /* 3. Preparation, as the forward's (prep.cl). */
    {
        int flags = 0;
        if (has_n) flags |= PREP_KF;
        if (vla || delta) flags |= PREP_KH;
        if (vla) flags |= PREP_UU | (a->u ? PREP_HAS_U : 0);
        if (delta && a->beta) flags |= PREP_W;
        ocl_launch l = ocl_launch_start(b, OCL_K_PREP);
        g_mem(&l, MEM(a->q)), g_mem(&l, MEM(a->k)), g_mem(&l, MEM(a->u)), g_mem(&l, MEM(a->beta));
        g_mem(&l, GW(QF)), g_mem(&l, OPT(GW(KF))), g_mem(&l, OPT(GW(KH))), g_mem(&l, OPT(GW(UU)));
        g_mem(&l, (delta && a->beta) ? GW(W) : ctx->dummy);
        g_int(&l, a->B), g_int(&l, T), g_int(&l, H), g_int(&l, dk), g_int(&l, (int)d->feature_map), g_int(&l, flags);
        g_flt(&l, eps), g_flt(&l, (float)d->u_scale);
        TRY(ocl_launch_run(&l, ocl_prep_groups(ctx, rows, dk, wg_prep), wg_prep));
    }
    if (has_n) {
        ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_NORM_DEN);
        g_mem(&l, GW(QF)), g_mem(&l, GW(KF)), g_mem(&l, MEM(a->n_in)), g_int(&l, a->n_in != NULL), g_mem(&l, GW(QN)),
            g_int(&l, T), g_int(&l, dk);
        TRY(ocl_launch_run(&l, BH, wg_den));
    }

    /* 4. The recurrent backward. */
    const int den_mode = has_n ? (linear ? 1 : 2) : 0;
    int outs = 0;
    if (g->dq) outs |= GO_DQ;
    if (g->dk) outs |= GO_DK;
    if (g->dv) outs |= GO_DV;
    if (g->dbeta) outs |= GO_DBETA;
    if (g->dg) outs |= GO_DG;
    if (g->dS_0) outs |= GO_DS0;
    if (g->du || (vla && g->dk && !a->u)) outs |= GO_DU; /* u = s_u k^: du reaches dk */
    if (g->dA_0) outs |= GO_DA0;
    /* The normaliser's backward reads dq~ (and, for linear, dk~) as the recurrent kernel leaves them. */
    if (has_n) outs |= GO_DQ | (linear ? GO_DK : 0);
    if (chunked && !vla) {
        TRY(ocl_gc_run(b, d, a, g, &gc, outs));
    } else if (vla) { /* amode 0: the whole backward; chunked: 1, grad_chunk's S part, 2 */
        for (int amode = chunked ? 1 : 0; amode <= (chunked ? 2 : 0); amode++) {
            if (amode == 2) TRY(ocl_gc_run(b, d, a, g, &gc, outs));
            ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_VLA);
            g_mem(&l, GW(UU)), g_mem(&l, GW(KH)), g_mem(&l, GW(QF)), g_mem(&l, MEM(a->v)), g_mem(&l, MEM(a->S_in)),
                g_int(&l, a->S_in != NULL), g_mem(&l, MEM(a->A_in)), g_int(&l, a->A_in != NULL),
                g_flt(&l, (float)(1.0 / d->lambda0)), g_mem(&l, MEM(g->dS_end)), g_int(&l, g->dS_end != NULL),
                g_mem(&l, MEM(g->dA_end)), g_int(&l, g->dA_end != NULL), g_mem(&l, MEM(g->dO)), g_mem(&l, OPT(GW(QN))),
                g_int(&l, den_mode), g_int(&l, d->refresh), g_int(&l, d->refresh > 0 ? (int)(a->t0 % d->refresh) : 0),
                g_flt(&l, (float)d->refresh_size), g_flt(&l, eps);
            /* chunked: CKS, WST, WE and DST are grad_chunk's or unused (amode 1, 2 leave S alone) */
            g_mem(&l, chunked ? ctx->dummy : GW(CKS)), g_mem(&l, GW(CKA)), g_mem(&l, OPT(GW(WST))), g_mem(&l, GW(WA)),
                g_mem(&l, GW(WAL)), g_mem(&l, GW(WZ)), g_mem(&l, GW(WSC)), g_mem(&l, OPT(GW(WE))), g_mem(&l, OPT(GW(DST))),
                g_mem(&l, GW(DA));
            g_mem(&l, GW(DQF)), g_mem(&l, GW(DKH)), g_mem(&l, GW(DUU)), g_mem(&l, MEM(g->dv)), g_mem(&l, OPT(GW(R))),
                g_mem(&l, MEM(g->dS_0)), g_mem(&l, MEM(g->dA_0)), g_int(&l, outs), g_int(&l, T), g_int(&l, H),
                g_int(&l, dk), g_int(&l, dv), g_int(&l, C), g_int(&l, nch), g_int(&l, amode), g_mem(&l, OPT(GW(AL))),
                g_mem(&l, OPT(GW(DAL)));
            TRY(ocl_launch_run(&l, BH, wg_core));
        }
    } else {
        ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_GDR);
        g_mem(&l, delta ? GW(KH) : ctx->dummy), g_mem(&l, linear ? GW(KF) : a->beta ? GW(W) : GW(KH)),
            g_mem(&l, GW(QF)), g_mem(&l, MEM(a->v)), g_mem(&l, MEM(a->g)), g_mem(&l, MEM(a->beta)),
            g_int(&l, a->g != NULL), g_int(&l, a->beta != NULL), g_int(&l, delta), g_mem(&l, MEM(a->S_in)),
            g_int(&l, a->S_in != NULL), g_mem(&l, MEM(g->dS_end)), g_int(&l, g->dS_end != NULL),
            g_mem(&l, MEM(g->dO)), g_mem(&l, OPT(GW(QN))), g_int(&l, den_mode), g_flt(&l, eps);
        g_mem(&l, GW(CKS)), g_mem(&l, GW(WST)), g_mem(&l, GW(WE)), g_mem(&l, GW(DST)), g_mem(&l, GW(DQF)),
            g_mem(&l, linear ? GW(DKF) : GW(DKH)), g_mem(&l, MEM(g->dv)), g_mem(&l, MEM(g->dbeta)),
            g_mem(&l, MEM(g->dg)), g_mem(&l, OPT(GW(R))), g_mem(&l, MEM(g->dS_0)), g_int(&l, outs), g_int(&l, T),
            g_int(&l, H), g_int(&l, dk), g_int(&l, dv), g_int(&l, C), g_int(&l, nch);
        TRY(ocl_launch_run(&l, BH, wg_core));
    }

    /* 5. The normaliser's backward: dq~ += dden n, dk~ (+)= dn, dn_0. */
    if (has_n && (g->dq || g->dk || g->dn_0)) {
        ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_NORM);
        g_mem(&l, GW(QF)), g_mem(&l, GW(KF)), g_mem(&l, GW(QN)), g_mem(&l, GW(R)), g_mem(&l, MEM(a->n_in)),
            g_int(&l, a->n_in != NULL), g_mem(&l, MEM(g->dn_end)), g_int(&l, g->dn_end != NULL), g_mem(&l, GW(DQF)),
            g_mem(&l, GW(DKF)), g_int(&l, linear), g_mem(&l, MEM(g->dn_0)), g_int(&l, g->dn_0 != NULL),
            g_int(&l, (int)BH), g_int(&l, T), g_int(&l, dk), g_flt(&l, eps), g_int(&l, linear);
        TRY(ocl_launch_items(&l, BH * (size_t)dk, wg_norm));
    }

    /* 6. Back through prep. */
    if (g->dq || g->dk || g->du) {
        int flags = GP_DQF;
        if (has_n) flags |= GP_DKF;
        if (vla || delta) flags |= GP_DKH;
        if (vla) flags |= GP_DUU | (a->u ? GP_HAS_U : 0);
        if (g->dq) flags |= GP_OUT_DQ;
        if (g->dk) flags |= GP_OUT_DK;
        if (g->du) flags |= GP_OUT_DU;
        ocl_launch l = ocl_launch_start(b, OCL_K_GRAD_PREP);
        g_mem(&l, MEM(a->q)), g_mem(&l, MEM(a->k)), g_mem(&l, MEM(a->u)), g_mem(&l, GW(DQF)), g_mem(&l, OPT(GW(DKF))),
            g_mem(&l, OPT(GW(DKH))), g_mem(&l, OPT(GW(DUU))), g_mem(&l, MEM(g->dq)), g_mem(&l, MEM(g->dk)),
            g_mem(&l, MEM(g->du)), g_int(&l, a->B), g_int(&l, T), g_int(&l, H), g_int(&l, dk),
            g_int(&l, (int)d->feature_map), g_int(&l, flags), g_flt(&l, eps), g_flt(&l, (float)d->u_scale);
        TRY(ocl_launch_items(&l, rows, wg_gprep));
    }
    return VLA_OK;
}

/* ---- the paper's DeltaNet (delta_paper.cl) ----
 * dp_prep (q~, k^), grad_dp (the checkpointed walk, as grad_gdr's), dp_grad_prep (dq, dk). The
 * same checkpoint sizing as backward_recurrent: C = the descriptor's chunk capped at T, halved
 * while the per-token chunk states of all heads would pass the allocation limit. */
enum { DP_DQ = 1, DP_DK = 2, DP_DV = 4, DP_DG = 8, DP_DS0 = 16 }; /* grad_dp's `outs` */

static vla_status backward_delta_paper(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                       const vla_attn_grads *g) {
    ocl_ctx *ctx = b->context;
    const int T = a->T, H = a->H, dk = a->dk, dv = a->dv;
    const size_t BH = (size_t)a->B * H, rows = BH * (size_t)T;
    if (!g->dq && !g->dk && !g->dv && !g->dg && !g->dS_0) return VLA_OK;
    const size_t f = sizeof(float), rs = ctx->fp64 ? sizeof(double) : sizeof(float);
    /* The adjoint dS ([dk, dv + 1] padded) in local memory where it fits beside the kernel's own
     * 7 KiB of staging, up to 24 KiB (dk = dv = 48 in double), else in global memory
     * (DP_DST_SPACE in delta_paper.cl says why). Measured on an H200 (NVIDIA's OpenCL, fp64),
     * grad_dp at B=64 H=4 T=73 d=32 (the training shape): 2.09 ms with dS in global memory,
     * 1.21 ms in local; at B=8 H=4 T=2048 d=64 forward + backward took 77 ms (global) and
     * 80 ms (local), no gain, so d = 64 stays in global memory. */
    const size_t dst_bytes = (size_t)dk * (dv + 1) * rs;
    const int dst_local = dst_bytes <= 24576 && dst_bytes + 8192 <= ctx->local_mem;
    const ocl_kernel_id core = dst_local ? OCL_K_GRAD_DP_LOCAL : OCL_K_GRAD_DP;
    const ocl_kernel_id ids[] = {OCL_K_DP_PREP, core, OCL_K_DP_GRAD_PREP};
    TRY(build(b, ids, 3));
    size_t wg_prep, wg_core, wg_gprep;
    TRY(ocl_wg(b, OCL_K_DP_PREP, 64, &wg_prep));
    TRY(ocl_wg(b, core, imax(dk, dv), &wg_core));
    TRY(ocl_wg(b, OCL_K_DP_GRAD_PREP, 64, &wg_gprep));

    int C = d->chunk < T ? d->chunk : T;
    while (C > 1 && ocl_mul4(BH, C, (size_t)dk * dv, f) > ctx->max_alloc) C = (C + 1) / 2;
    const int nch = (T + C - 1) / C;
    TRY(gws(b, OCL_GW_QF, ocl_mul4(rows, dk, f, 1)));
    TRY(gws(b, OCL_GW_KH, ocl_mul4(rows, dk, f, 1)));
    if (g->dq) TRY(gws(b, OCL_GW_DQF, ocl_mul4(rows, dk, f, 1)));
    if (g->dk) TRY(gws(b, OCL_GW_DKH, ocl_mul4(rows, dk, f, 1)));
    TRY(gws(b, OCL_GW_CKS, ocl_mul4(BH, nch, (size_t)dk * dv, f)));
    TRY(gws(b, OCL_GW_WST, ocl_mul4(BH, C, (size_t)dk * dv, f)));
    TRY(gws(b, OCL_GW_WE, ocl_mul4(BH, C, dv, f)));
    if (!dst_local) TRY(gws(b, OCL_GW_DST, ocl_mul4(BH, dk, dv, rs)));

    const float eps = (float)d->eps;
    {
        ocl_launch l = ocl_launch_start(b, OCL_K_DP_PREP);
        g_mem(&l, MEM(a->q)), g_mem(&l, MEM(a->k)), g_mem(&l, GW(QF)), g_mem(&l, GW(KH)), g_int(&l, a->B),
            g_int(&l, T), g_int(&l, H), g_int(&l, dk), g_int(&l, (int)d->feature_map), g_flt(&l, eps);
        TRY(ocl_launch_items(&l, rows, wg_prep));
    }
    const int outs = (g->dq ? DP_DQ : 0) | (g->dk ? DP_DK : 0) | (g->dv ? DP_DV : 0) | (g->dg ? DP_DG : 0) |
                     (g->dS_0 ? DP_DS0 : 0);
    {
        ocl_launch l = ocl_launch_start(b, core);
        g_mem(&l, GW(KH)), g_mem(&l, GW(QF)), g_mem(&l, MEM(a->v)), g_mem(&l, MEM(a->g)), g_int(&l, a->g != NULL),
            g_mem(&l, MEM(a->S_in)), g_int(&l, a->S_in != NULL), g_mem(&l, MEM(g->dS_end)),
            g_int(&l, g->dS_end != NULL), g_mem(&l, MEM(g->dO));
        g_mem(&l, GW(CKS)), g_mem(&l, GW(WST)), g_mem(&l, GW(WE));
        if (dst_local) ocl_launch_arg(&l, dst_bytes, NULL); /* the group's dS [dk, dv] */
        else g_mem(&l, GW(DST));
        g_mem(&l, OPT(GW(DQF))), g_mem(&l, OPT(GW(DKH))), g_mem(&l, MEM(g->dv)), g_mem(&l, MEM(g->dg)),
            g_mem(&l, MEM(g->dS_0));
        g_int(&l, outs), g_int(&l, T), g_int(&l, H), g_int(&l, dk), g_int(&l, dv), g_int(&l, C), g_int(&l, nch);
        TRY(ocl_launch_run(&l, BH, wg_core));
    }
    if (g->dq || g->dk) {
        ocl_launch l = ocl_launch_start(b, OCL_K_DP_GRAD_PREP);
        g_mem(&l, MEM(a->q)), g_mem(&l, MEM(a->k)), g_mem(&l, OPT(GW(DQF))), g_mem(&l, OPT(GW(DKH))),
            g_mem(&l, MEM(g->dq)), g_mem(&l, MEM(g->dk)), g_int(&l, g->dq != NULL), g_int(&l, g->dk != NULL),
            g_int(&l, a->B), g_int(&l, T), g_int(&l, H), g_int(&l, dk), g_int(&l, (int)d->feature_map),
            g_flt(&l, eps);
        TRY(ocl_launch_items(&l, rows, wg_gprep));
    }
    return VLA_OK;
}

vla_status ocl_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g) {
    if ((long long)a->B * a->H > INT32_MAX)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION,
                        "vla_attention_backward: B*H = %lld is too large for the opencl backend",
                        (long long)a->B * a->H);
    if (d->mechanism == VLA_MECH_SOFTMAX) return backward_softmax(b, d, a, g);
    if (d->mechanism == VLA_MECH_DELTA_PAPER) return backward_delta_paper(b, d, a, g);
    return backward_recurrent(b, d, a, g);
}
