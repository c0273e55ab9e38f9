/* OpenCL backend internals shared by ocl_backend.c (devices, context, buffers, programs),
 * ocl_ops.c (the attention op: workspace and kernel launches), ocl_chunkpar.c (the chunked
 * algorithm's chunk-parallel form) and ocl_grad.c (its backward). */
#ifndef VLA_OCL_INTERNAL_H
#define VLA_OCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "vla_impl.h"

/* Kernel families: one program each, built from common.cl + the family's file on first use
 * (grad_vla.cl also takes grad_linear_delta.cl, whose per-token steps it shares; delta_paper.cl
 * is built twice, the second time with DP_DST_LOCAL defined). */
typedef enum ocl_family {
    OCL_FAM_PREP,              /* prep.cl */
    OCL_FAM_SOFTMAX,           /* softmax.cl */
    OCL_FAM_LINEAR_DELTA,      /* linear_delta.cl */
    OCL_FAM_VLA,               /* vla.cl */
    OCL_FAM_GRAD_PREP,         /* grad_prep.cl */
    OCL_FAM_GRAD_SOFTMAX,      /* grad_softmax.cl */
    OCL_FAM_GRAD_LINEAR_DELTA, /* grad_linear_delta.cl */
    OCL_FAM_GRAD_VLA,          /* grad_linear_delta.cl + grad_vla.cl */
    OCL_FAM_DELTA_PAPER,       /* delta_paper.cl: the paper's DeltaNet, forward and backward */
    OCL_FAM_DELTA_PAPER_LOCAL, /* delta_paper.cl with DP_DST_LOCAL: the backward's adjoint in local memory */
    OCL_FAM_CHUNKPAR,          /* chunkpar.cl: the chunk-parallel form (ocl_chunkpar.c) */
    OCL_FAM_CHUNKPAR_CAPPED,   /* chunkpar.cl under a register cap (ctx->reg_cap; without one: OCL_FAM_CHUNKPAR) */
    OCL_FAM_GRAD_CHUNK,        /* grad_chunk.cl: the chunked backward, workspace in global memory */
    OCL_FAM_GRAD_CHUNK_LOCAL,  /* grad_chunk.cl with GC_LOCAL: the workspace in local memory */
    OCL_NFAM
} ocl_family;

typedef enum ocl_kernel_id {
    OCL_K_PREP,
    OCL_K_NORM_OUT,
    OCL_K_INIT_A_REAL,
    OCL_K_STORE_A_REAL,
    OCL_K_INIT_A_F32,
    OCL_K_AFFINE_LEVEL,
    OCL_K_AFFINE_APPLY,
    OCL_K_SOFTMAX,
    OCL_K_GDR_SEQ,
    OCL_K_GDR_CHUNK_PREP,
    OCL_K_GDR_CHUNK_RUN,
    OCL_K_VLA_SEQ,
    OCL_K_VLA_A_CHUNKED,
    OCL_K_SCAN_MAPS,
    OCL_K_SCAN_OUT,
    OCL_K_CHUNK_MAP,
    OCL_K_SEG_COMPOSE,
    OCL_K_SOFTMAX_ROWS,
    OCL_K_GRAD_NORM_DEN,
    OCL_K_GRAD_NORM,
    OCL_K_GRAD_PREP,
    OCL_K_GRAD_SM_STATS,
    OCL_K_GRAD_SM_DQ,
    OCL_K_GRAD_SM_DKV,
    OCL_K_GRAD_GDR,
    OCL_K_GRAD_VLA,
    OCL_K_DP_PREP,
    OCL_K_DP_SEQ,
    OCL_K_GRAD_DP,
    OCL_K_DP_GRAD_PREP,
    OCL_K_GRAD_DP_LOCAL,
    OCL_K_CP_GRAM,
    OCL_K_CP_PREFIX,
    OCL_K_CP_APART,
    OCL_K_CP_AEND,
    OCL_K_CP_SFAC,
    OCL_K_CP_WALK,
    OCL_K_CP_OUT,
    OCL_K_CP_NSUM,
    OCL_K_CP_NORM,
    OCL_K_SOFTMAX_RB64,  /* softmax.cl's register-blocked softmax, dv <= 64 */
    OCL_K_SOFTMAX_RB128, /* and dv <= 128 */
    OCL_K_GRAD_CHUNK,
    OCL_K_GRAD_CHUNK_LOCAL,
    OCL_K_CP_WALK_LOCAL64_16, /* cp_walk with its state and maps in local memory (GPUs, dk = 64, 16 rows an item) */
    OCL_K_CP_SFAC_LOCAL, /* cp_sfac and cp_out in local memory (GPUs, no g, dk, dv, C <= 64) */
    OCL_K_CP_OUT_LOCAL,
    OCL_K_CP_GRAM_LOCAL, /* cp_gram with the chunk's U in local memory (GPUs, dk <= 64) */
    OCL_K_CP_WALK_LOCAL8, /* the same for dk <= 32, at most 8, 4, 2 rows an item */
    OCL_K_CP_WALK_LOCAL4,
    OCL_K_CP_WALK_LOCAL2,
    OCL_K_CP_WALK_LOCAL64_8, /* dk = 64, 8 and 4 rows an item */
    OCL_K_CP_WALK_LOCAL64_4,
    OCL_K_CP_APART_LOCAL, /* cp_apart and cp_aend in local memory (GPUs, where their arrays fit) */
    OCL_K_CP_AEND_LOCAL,
    OCL_K_CP_APART_SEG, /* cp_apart over segments of chunks, A carried (GPUs, dk <= 64) */
    OCL_NK
} ocl_kernel_id;

/* Workspace slots: device scratch of the op, grown on demand and kept between calls (a
 * streaming caller makes many calls of one shape). */
typedef enum ocl_ws {
    OCL_WS_QF, OCL_WS_KF, OCL_WS_KH, OCL_WS_UU, OCL_WS_W, OCL_WS_AL,
    OCL_WS_WR, OCL_WS_Y, OCL_WS_MQ, OCL_WS_DM, OCL_WS_LM, OCL_WS_GAM, OCL_WS_DL,
    OCL_WS_ST, OCL_WS_ST2, OCL_WS_STSEG, OCL_WS_AT, OCL_WS_AF, OCL_WS_AD,
    OCL_WS_Z, OCL_WS_G, OCL_WS_M, OCL_WS_MAPS, OCL_WS_SEGMAPS, OCL_WS_STARTS, OCL_WS_TMP,
    OCL_WS_CPX, OCL_WS_CPGR, OCL_WS_CPZ, OCL_WS_CPG, OCL_WS_CPO, OCL_WS_CPT, OCL_WS_CPN, /* chunk-parallel: X_j, M_j, Z, G, o, W^T, n */
    OCL_WS_CPSM, OCL_WS_CPSX, /* the segmented walk: segments' maps and start states */
    OCL_NWS
} ocl_ws;

/* The backward's workspace slots (ocl_grad.c), apart from the forward's: a training loop
 * alternates the two ops, and neither then regrows the other's buffers. */
typedef enum ocl_gws {
    OCL_GW_QF, OCL_GW_KF, OCL_GW_KH, OCL_GW_UU, OCL_GW_W,      /* prep's outputs */
    OCL_GW_DQF, OCL_GW_DKF, OCL_GW_DKH, OCL_GW_DUU,           /* gradients of them */
    OCL_GW_QN, OCL_GW_R,                                      /* normaliser: q~.n, do'.o' */
    OCL_GW_CKS, OCL_GW_CKA, OCL_GW_WST, OCL_GW_WA,            /* checkpoints, chunk states */
    OCL_GW_WAL, OCL_GW_WZ, OCL_GW_WSC, OCL_GW_WE,             /* chunk per-token vectors */
    OCL_GW_DST, OCL_GW_DA,                                    /* the adjoint states */
    OCL_GW_SM_M, OCL_GW_SM_L, OCL_GW_SM_D,                    /* softmax row statistics */
    OCL_GW_GCW,                                               /* chunked backward's chunk workspace */
    OCL_GW_AL, OCL_GW_DAL,                                    /* VLA chunked: a_t and its gradient */
    OCL_NGWS
} ocl_gws;

typedef struct ocl_ctx {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue; /* in order, profiling enabled */
    int fp64;               /* cl_khr_fp64: the A recurrence runs in double */
    int cp_fp64;            /* chunkpar.cl's real_t (VLA's chunked A part) is double */
    int clblast;            /* scan levels through CLBlast (built with it, not VLA_OPENCL_NO_CLBLAST) */
    size_t max_wg;          /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    cl_ulong local_mem;     /* CL_DEVICE_LOCAL_MEM_SIZE */
    cl_ulong max_alloc;     /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    cl_uint compute_units;
    int is_gpu;
    int cp_gpu;             /* chunkpar.cl in its GPU form (many items a group): GPUs, or VLA_OPENCL_CHUNKPAR_GPU=1 */
    int native_exp;         /* softmax_rb's exponentials by native_exp: NVIDIA's GPUs, or VLA_OPENCL_NATIVE_EXP=1 */
    int reg_cap;            /* registers an item for OCL_FAM_CHUNKPAR_CAPPED (NVIDIA's -cl-nv-maxrregcount; 0: none) */
    cl_program programs[OCL_NFAM]; /* built lazily, once per handle */
    cl_kernel kernels[OCL_NK];     /* created lazily from their family's program */
    size_t kernel_max_wg[OCL_NK];  /* CL_KERNEL_WORK_GROUP_SIZE */
    cl_mem dummy;                  /* bound to optional buffer arguments that are absent */
    cl_mem ws[OCL_NWS];
    size_t ws_size[OCL_NWS];
    cl_mem gws[OCL_NGWS];
    size_t gws_size[OCL_NGWS];
    /* VLA_OPENCL_PROFILE=1: every launch waits for its profiling event; per-kernel device time
     * is summed here and printed to stderr when the handle closes (a development aid). */
    int profile;
    double prof_ns[OCL_NK + 1]; /* [OCL_NK]: CLBlast calls */
    long prof_calls[OCL_NK + 1];
    cl_event timer_ev;             /* vla_backend_timer_start's marker, or NULL */
    struct ocl_nn *nn;             /* the nn ops' program, kernels and scratch (ocl_nn.c), or NULL */
} ocl_ctx;

/* The OpenCL error's name ("CL_OUT_OF_RESOURCES"), or "CL error <n>". */
const char *ocl_error_name(cl_int err);
/* Records a failed OpenCL call: VLA_ERR_OUT_OF_MEMORY for the allocation errors, else
 * VLA_ERR_BACKEND; the message names the call, the error and `what`. */
vla_status ocl_fail(vla_backend *b, cl_int err, const char *call, const char *what);

/* The kernel, building its family's program first if needed (build failure: VLA_ERR_BACKEND
 * with the build log; a kernel that needs more local memory than the device has:
 * VLA_ERR_UNSUPPORTED). */
vla_status ocl_kernel(vla_backend *b, ocl_kernel_id id, cl_kernel *out);

/* The work-group size for kernel `id`: the power of two >= want, clamped to
 * [VLA_MINWG, VLA_MAXWG] = [32, 256] and to the kernel's and device's limits.
 * VLA_ERR_UNSUPPORTED when the device cannot hold 32 work-items in a group. */
vla_status ocl_wg(vla_backend *b, ocl_kernel_id id, int want, size_t *out);

extern const char *const ocl_kernel_names[OCL_NK + 1];

/* a * b * c * d (workspace bytes), or 0 on overflow. */
static inline size_t ocl_mul4(size_t a, size_t b, size_t c, size_t d) {
    size_t f[4] = {a, b, c, d}, x = 1;
    for (int i = 0; i < 4; i++) {
        if (f[i] && x > SIZE_MAX / f[i]) return 0;
        x *= f[i];
    }
    return x;
}

/* One launch of an op kernel (ocl_ops.c, ocl_chunkpar.c, ocl_grad.c): the arguments are set in
 * order, and the first clSetKernelArg error is kept and reported when the launch is enqueued. */
typedef struct ocl_launch {
    vla_backend *b;
    ocl_kernel_id id;
    cl_kernel k;
    cl_uint n;  /* next argument index */
    cl_int err; /* first clSetKernelArg error */
} ocl_launch;

/* The kernel must have been created (ocl_kernel) before. */
static inline ocl_launch ocl_launch_start(vla_backend *b, ocl_kernel_id id) {
    ocl_launch l = {b, id, ((ocl_ctx *)b->context)->kernels[id], 0, CL_SUCCESS};
    return l;
}
static inline void ocl_launch_arg(ocl_launch *l, size_t size, const void *value) {
    cl_int e = clSetKernelArg(l->k, l->n++, size, value);
    if (l->err == CL_SUCCESS) l->err = e;
}
/* Enqueues `groups` work-groups of wg items (ocl_ops.c); with VLA_OPENCL_PROFILE=1 it waits for
 * the kernel and adds its device time to the handle's profile. */
vla_status ocl_launch_run(ocl_launch *l, size_t groups, size_t wg);
/* Enqueues at least `items` work-items (kernels that guard their index). */
static inline vla_status ocl_launch_items(ocl_launch *l, size_t items, size_t wg) {
    return ocl_launch_run(l, (items + wg - 1) / wg, wg);
}

/* prep.cl's launch: lanes L a token row (the power of two >= dk, at most wg: prep_lanes; 1 where
 * prep.cl is built with CP_ONE_ITEM, cp_gpu off), wg / L rows a group. */
static inline size_t ocl_prep_groups(const ocl_ctx *ctx, size_t rows, int dk, size_t wg) {
    size_t L = 1;
    while (ctx->cp_gpu && L < (size_t)dk && L < wg) L <<= 1;
    const size_t per = wg / L;
    return (rows + per - 1) / per;
}

/* The op (ocl_ops.c). */
vla_status ocl_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a);
vla_status ocl_resolve(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, vla_algorithm *out);
void ocl_ws_release(ocl_ctx *ctx);
/* Makes workspace slot `w` hold at least `bytes` (0: the size overflowed). */
vla_status ocl_ws_grow(vla_backend *b, ocl_ws w, size_t bytes);

/* The chunk-parallel form of the chunked algorithm (ocl_chunkpar.c). ocl_cp_plan decides
 * whether a call takes it (mode 0: no; 1: the S part chunk-parallel, VLA's A part by
 * vla_a_chunked; 2: both), builds its kernels and sizes its workspace, before anything is
 * queued. ocl_cp_forward enqueues it after prep and the start states: VLA's a_t (mode 2) into
 * the AL slot and A_end into AF, the S part from ST (= X_0) to o and the final state in ST. */
typedef struct ocl_cp_call {
    int mode;
    int T, H, dk, dv, BH, C, nch;
    int residual, has_g;
    int walk_vb; /* value columns a cp_walk_local group (0: cp_walk) */
    int walk_id; /* its kernel (ocl_kernel_id): by rows an item */
    int walk_seg; /* cp_walk_local over segments of this many chunks (0: one walk a head) */
    int out_wg;  /* cp_sfac_local and cp_out_local: cp_out_local's group (0: cp_sfac and cp_out) */
    int ks;      /* and their slab's columns */
    int gram_wg; /* cp_gram_local's group (0: cp_gram) */
    int apart_local; /* cp_apart_local's items a group (128 or 256; 0: cp_apart) */
    int aend_local;  /* cp_aend_local (256 items) in place of cp_aend */
    int aend_fused;  /* A_end as cp_apart_local's extra groups (VLA_OPENCL_CP_AEND_FUSE=0: not) */
    int Ca, ppc;     /* cp_apart_local: each chunk in ppc pieces of at most Ca tokens (C and 1 unless
                        its arrays need them shorter to fit local memory); cp_apart_seg: pieces of Ca */
    int apart_seg;   /* cp_apart_seg over segments of this many chunks (0: not taken) */
    size_t seg_bytes; /* and its local arena */
    cl_mem kr, w, q, v, g, o, starts;
} ocl_cp_call;
vla_status ocl_cp_plan(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, ocl_cp_call *c);
vla_status ocl_cp_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const ocl_cp_call *c);
/* 1 when AUTO on a device that is not a GPU should take chunked (ocl_resolve). */
int ocl_cp_auto_chunked(const vla_attn_desc *d, const vla_attn_args *a);
/* The same for a GPU with that many compute units. */
int ocl_cp_auto_chunked_gpu(const vla_attn_desc *d, const vla_attn_args *a, unsigned compute_units);

/* The backward op (ocl_grad.c). */
vla_status ocl_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g);
void ocl_gws_release(ocl_ctx *ctx);
/* Makes backward workspace slot `w` hold at least `bytes` (0: the size overflowed). */
vla_status ocl_gws_grow(vla_backend *b, ocl_gws w, size_t bytes);

/* The chunked backward of linear attention and DeltaNet (ocl_grad_chunk.c, grad_chunk.cl), in
 * place of the recurrent kernel in ocl_grad.c's sequence. ocl_gc_plan builds its kernel and
 * sizes its workspace before anything is queued; ocl_gc_run enqueues it after prep and the
 * normaliser's denominators, with `outs` the recurrent kernel's output bits. */
typedef struct ocl_gc_call {
    ocl_kernel_id id; /* OCL_K_GRAD_CHUNK_LOCAL where the workspace fits local memory */
    int local, C, nch;
    size_t wg, ws_reals; /* ws_reals: one head's workspace */
} ocl_gc_call;
vla_status ocl_gc_plan(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, ocl_gc_call *c);
/* grad_chunk.cl's GC_DW bit of `outs` (above ocl_grad.c's GO_* bits): dW to its own output, the
 * da_t that VLA's A part (grad_vla.cl, amode 2) reads. ocl_gc_run sets it for VLA. */
#define OCL_GC_DW 256
vla_status ocl_gc_run(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g,
                      const ocl_gc_call *c, int outs);
/* The iface's backward_auto_chunked: for linear attention and DeltaNet, 1 on devices that are not
 * GPUs; on GPUs for linear attention from T = 2048. */
int ocl_backward_auto_chunked(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a);

/* The nn ops (ocl_nn.c, vla/nn.h): the backend's table and the release of its state. */
extern const struct vla_nn_iface ocl_nn_iface;
void ocl_nn_release(ocl_ctx *ctx);

#endif
