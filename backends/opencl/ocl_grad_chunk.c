/* The chunked backward of linear attention and DeltaNet on OpenCL (kernels/opencl/grad_chunk.cl):
 * the step of ocl_grad.c's sequence that the recurrent kernel (grad_gdr) takes otherwise, when
 * the backward's algorithm is `chunked`. Prep, the normaliser and the chain rule through prep
 * are ocl_grad.c's, unchanged.
 *
 * Per head: checkpoints of S at every chunk start (nch dk dv real_t), and one workspace for the
 * chunk being differentiated (gc_ws_reals: the chunk's inputs, E, the c x c products, the
 * gradients; 59,584 reals, 465 KiB in double, at C = 64, dk = dv = 32). It sits in local memory
 * where it fits beside the kernel's 2 KiB of reduction scratch (PoCL: 2 MiB a group), else in one
 * global buffer for all heads; there C is halved while that buffer would pass the device's
 * allocation limit. Devices that are not GPUs run one item a group (CP_ONE_ITEM, grad_chunk.cl);
 * GPUs ocl_wg's size from 256 (the many-item form: checked on PoCL under VLA_OPENCL_CHUNKPAR_GPU=1,
 * and by vla-check --grad on NVIDIA's driver). */
#include "ocl_internal.h"

#include <stdint.h>

/* grad_chunk.cl's gc_carve, summed. */
static size_t gc_ws_reals(size_t C, size_t dk, size_t dv) {
    size_t bt = C * (dk > dv ? dk : dv);
    if (dk * dv > bt) bt = dk * dv;
    return 2 * dk * dv + 6 * C * dk + 9 * C * dv + 5 * C * C + C * (C + 1) + 2 * C + bt;
}

/* AUTO's backward where the forward's AUTO is chunked (ocl_resolve). Devices that are not GPUs
 * take this chunked form for linear attention and DeltaNet: on PoCL (2 cores, fp64) it was faster
 * than the recurrent kernel at every shape timed (backward = fwd+bwd - fwd, median ms, chunked vs
 * sequential): (B,H,d) = (1,4,32) T = 16: linear 0.13 vs 0.31, DeltaNet 0.08 vs 0.30; T = 1024:
 * 4.9 vs 11.2, 4.2 vs 12.1; T = 4096: 20.2 vs 46.4, 17.3 vs 49.1; (64,4,32) T = 73: 21.8 vs 55.2,
 * 18.7 vs 57.7; (2,4,64) T = 1024: 23.4 vs 81.8, 19.0 vs 102.5. GPUs (NVIDIA's driver on an H100,
 * vla-bench --backward at ce29b16, the same measure): (B,H,d) = (1,4,32) T = 2048: linear 16.2 vs
 * 30.7, DeltaNet 31.8 vs 26.0; T = 8192: 70.7 vs 126.6, 130.5 vs 106.8; (8,4,32) T = 2048: 19.4
 * vs 34.6, 33.2 vs 27.8; T = 8192: 82.1 vs 145.7, 135.4 vs 115.1. So GPUs take it for linear
 * attention from T = 2048 (shorter sequences are not timed) and keep the recurrent kernel for
 * DeltaNet. VLA's chunked form (grad_chunk's S part between grad_vla's two A-part launches) on
 * PoCL, the same measure, 10 runs (benchmarks/results/2026-12-06-pocl-chunked-backward/):
 * (B,H,d) = (1,4,32) T = 256: 4.95 vs 5.34, T = 1024: 18.5 vs 23.6, T = 4096: 72.6 vs 93.8;
 * (1,4,64) T = 256: 20.5 vs 27.2; (2,4,64) T = 256: 38.9 vs 54.0 (a 5-run call: (1,4,32) T = 64 a
 * tie). So devices that are not GPUs take it. On an H100 (a1dfb0c, fwd+bwd): 66.5 vs 65.9 ms at
 * (1,4,32) T = 2048, 272.8 vs 269.8 at 8192, 181.3 vs 186.2 at (8,16,64) T = 2048: the A recurrence
 * (a head a group) holds both, so GPUs keep the recurrent kernel. */
int ocl_backward_auto_chunked(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    if (d->mechanism == VLA_MECH_VLA) return !((const ocl_ctx *)b->context)->is_gpu;
    if (d->mechanism != VLA_MECH_LINEAR && d->mechanism != VLA_MECH_DELTA) return 1;
    if (!((const ocl_ctx *)b->context)->is_gpu) return 1;
    return d->mechanism == VLA_MECH_LINEAR && a->T >= 2048;
}

vla_status ocl_gc_plan(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, ocl_gc_call *c) {
    ocl_ctx *ctx = b->context;
    const size_t BH = (size_t)a->B * a->H, rs = ctx->fp64 ? sizeof(double) : sizeof(float);
    const size_t dk = (size_t)a->dk, dv = (size_t)a->dv;
    int C = d->chunk < a->T ? d->chunk : a->T;
    c->local = gc_ws_reals((size_t)C, dk, dv) * rs + 256 * rs <= ctx->local_mem;
    if (!c->local)
        while (C > 1 && ocl_mul4(BH, gc_ws_reals((size_t)C, dk, dv), rs, 1) > ctx->max_alloc) C = (C + 1) / 2;
    c->id = c->local ? OCL_K_GRAD_CHUNK_LOCAL : OCL_K_GRAD_CHUNK;
    c->C = C;
    c->nch = (a->T + C - 1) / C;
    c->ws_reals = gc_ws_reals((size_t)C, dk, dv);
    cl_kernel k;
    vla_status s = ocl_kernel(b, c->id, &k);
    c->wg = 1; /* devices that are not GPUs (cp_gpu off): one item a group (CP_ONE_ITEM) */
    if (s == VLA_OK && ctx->cp_gpu) s = ocl_wg(b, c->id, 256, &c->wg);
    if (s == VLA_OK) s = ocl_gws_grow(b, OCL_GW_CKS, ocl_mul4(BH, (size_t)c->nch, dk * dv, rs));
    if (s == VLA_OK && !c->local) s = ocl_gws_grow(b, OCL_GW_GCW, ocl_mul4(BH, c->ws_reals, rs, 1));
    return s;
}

static void g_mem(ocl_launch *l, cl_mem m) { ocl_launch_arg(l, sizeof m, &m); }
static void g_int(ocl_launch *l, int v) { ocl_launch_arg(l, sizeof v, &v); }
static void g_flt(ocl_launch *l, float v) { ocl_launch_arg(l, sizeof v, &v); }

#define GW(x) (ctx->gws[OCL_GW_##x])
#define MEM(buf) ((buf) ? (cl_mem)(buf)->mem : ctx->dummy)

vla_status ocl_gc_run(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g,
                      const ocl_gc_call *c, int outs) {
    ocl_ctx *ctx = b->context;
    const int linear = d->mechanism == VLA_MECH_LINEAR, vla = d->mechanism == VLA_MECH_VLA;
    const int den_mode = linear ? 1 : vla && d->normalize_output ? 2 : 0; /* grad_chunk.cl's gc_inv_den */
    const size_t rs = ctx->fp64 ? sizeof(double) : sizeof(float);
    const cl_long stride = (cl_long)c->ws_reals;
    if (vla) outs |= OCL_GC_DW; /* da_t to DAL, for grad_vla's A part */
    ocl_launch l = ocl_launch_start(b, c->id);
    g_mem(&l, linear ? ctx->dummy : GW(KH)), g_mem(&l, linear ? GW(KF) : vla ? GW(AL) : a->beta ? GW(W) : GW(KH)),
        g_mem(&l, GW(QF)), g_mem(&l, MEM(a->v)), g_mem(&l, MEM(a->g)), g_mem(&l, MEM(a->beta)),
        g_int(&l, a->g != NULL), g_int(&l, a->beta != NULL), g_int(&l, !linear), g_mem(&l, MEM(a->S_in)),
        g_int(&l, a->S_in != NULL), g_mem(&l, MEM(g->dS_end)), g_int(&l, g->dS_end != NULL), g_mem(&l, MEM(g->dO)),
        g_mem(&l, den_mode ? GW(QN) : ctx->dummy), g_int(&l, den_mode), g_flt(&l, (float)d->eps), g_mem(&l, GW(CKS));
    if (c->local) ocl_launch_arg(&l, c->ws_reals * rs, NULL); /* the group's workspace */
    else g_mem(&l, GW(GCW));
    ocl_launch_arg(&l, sizeof stride, &stride);
    g_mem(&l, GW(DQF)), g_mem(&l, linear ? GW(DKF) : GW(DKH)), g_mem(&l, MEM(g->dv)), g_mem(&l, MEM(g->dbeta)),
        g_mem(&l, MEM(g->dg)), g_mem(&l, den_mode ? GW(R) : ctx->dummy), g_mem(&l, MEM(g->dS_0)), g_int(&l, outs),
        g_int(&l, a->T), g_int(&l, a->H), g_int(&l, a->dk), g_int(&l, a->dv), g_int(&l, c->C), g_int(&l, c->nch),
        g_mem(&l, vla ? GW(DAL) : ctx->dummy);
    return ocl_launch_run(&l, (size_t)a->B * a->H, c->wg);
}
