/* The attention op on OpenCL: the algorithm choice, the workspace, and the launch sequence of
 * every mechanism x algorithm of VLA-MATH 2 (kernels in kernels/opencl/<family>.cl; the paper's
 * DeltaNet in forward_delta_paper, kernels in delta_paper.cl). The chunked algorithm's
 * chunk-parallel form is in ocl_chunkpar.c (hooked in forward: ocl_cp_plan, ocl_cp_forward).
 *
 * Every call goes: build/fetch every kernel it needs, size the workspace, then enqueue. Build
 * and allocation failures therefore happen before anything is written to the caller's buffers.
 * The queue is in order, so states may be updated in place (S_in == S_out): the inputs are
 * copied into workspace first and the outputs written last. Calls return once the work is
 * queued (downloads are blocking, vla_backend_synchronize waits).
 *
 * CLBlast (optional, VLA_HAVE_CLBLAST): measured on PoCL (2 cores; numbers and commands in
 * benchmarks/results/2026-11-30-opencl-pocl-vs-cpu/README.md, the program in bench_clblast.c), CLBlast's
 * strided-batched SGEMM ran one scan level's map compositions ([dk, dk] x [dk, dk + dv] per pair,
 * 4096 pairs) 2.0x (d = 32) to 2.9x (d = 64) faster than the own compose kernel, and the whole
 * scan algorithm 3.1x (B=1 H=4 d=32 T=2048) to 4.4x (B=2 H=8 d=64 T=1024) faster, so the scan
 * levels of the scan and two-level algorithms use it (level_clblast). It was also 1.6-1.9x faster
 * on the chunked forms' per-chunk Q W^T products, but those chunks are ragged (the last one is
 * short, refresh points and t0 cut them) and the products sit between the triangular solves of
 * gdr_chunk_prep, so they stay in the own kernel. VLA_OPENCL_NO_CLBLAST=1 forces the own compose
 * kernel (the tests run both paths).  */
#include "ocl_internal.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef VLA_HAVE_CLBLAST
#include <clblast_c.h>
#endif

/* ---- workspace ---- */

static const char *const ws_names[OCL_NWS] = {
    "qf", "kf", "kh", "u", "w", "a", "Wr", "Y", "Mq", "D", "L", "gamma", "dl", "S", "S2", "S per segment",
    "A (recurrence)", "A", "A (fallback)", "Z", "G", "M", "affine maps", "segment maps", "chunk starts",
    "scan products", "chunk start states", "Gram prefix", "Z per chunk", "G per chunk", "o rows", "W^T per chunk",
    "n per chunk", "walk segments' maps", "walk segments' start states",
};

void ocl_ws_release(ocl_ctx *ctx) {
    for (int i = 0; i < OCL_NWS; i++) {
        if (ctx->ws[i]) clReleaseMemObject(ctx->ws[i]);
        ctx->ws[i] = NULL;
        ctx->ws_size[i] = 0;
    }
}

/* a * b bytes, or 0 on overflow (four factors: ocl_mul4). */
static size_t mul(size_t a, size_t b) { return (a && b > SIZE_MAX / a) ? 0 : a * b; }

/* Makes workspace slot `w` hold at least `bytes` (0 means the size overflowed). */
static vla_status ws(vla_backend *b, ocl_ws w, size_t bytes) {
    ocl_ctx *ctx = b->context;
    if (bytes == 0)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_attention_forward: opencl workspace '%s' overflows size_t",
                        ws_names[w]);
    if (ctx->ws_size[w] >= bytes) return VLA_OK;
    if (bytes > ctx->max_alloc)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY,
                        "vla_attention_forward: opencl workspace '%s' needs %.1f MiB in one buffer; this device allocates "
                        "at most %.1f MiB at once (use a shorter piece, or a chunked algorithm)",
                        ws_names[w], (double)bytes / 1048576.0, (double)ctx->max_alloc / 1048576.0);
    if (ctx->ws[w]) clReleaseMemObject(ctx->ws[w]); /* deferred by OpenCL until queued work is done */
    ctx->ws[w] = NULL;
    ctx->ws_size[w] = 0;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS || !m) {
        char what[96];
        snprintf(what, sizeof what, "(workspace '%s', %.1f MiB)", ws_names[w], (double)bytes / 1048576.0);
        return ocl_fail(b, err == CL_SUCCESS ? CL_MEM_OBJECT_ALLOCATION_FAILURE : err, "clCreateBuffer", what);
    }
    ctx->ws[w] = m;
    ctx->ws_size[w] = bytes;
    return VLA_OK;
}

vla_status ocl_ws_grow(vla_backend *b, ocl_ws w, size_t bytes) { return ws(b, w, bytes); }

/* ---- launches ---- */

/* Short spellings of the argument setters, one per type. */
static void a_mem(ocl_launch *l, cl_mem m) { ocl_launch_arg(l, sizeof m, &m); }
static void a_int(ocl_launch *l, int v) { ocl_launch_arg(l, sizeof v, &v); }
static void a_flt(ocl_launch *l, float v) { ocl_launch_arg(l, sizeof v, &v); }

const char *const ocl_kernel_names[OCL_NK + 1] = {
    "prep", "norm_out", "init_a_real", "store_a_real", "init_a_f32", "affine_level", "affine_apply",
    "softmax_fused", "gdr_sequential", "gdr_chunk_prep", "gdr_chunk_run", "vla_sequential", "vla_a_chunked",
    "scan_maps", "scan_out", "chunk_map", "seg_compose", "softmax_rows", "grad_norm_den", "grad_norm", "grad_prep",
    "sm_grad_stats", "sm_grad_dq", "sm_grad_dkv", "grad_gdr", "grad_vla", "dp_prep", "dp_sequential", "grad_dp",
    "dp_grad_prep", "grad_dp (local dS)", "cp_gram", "cp_prefix", "cp_apart", "cp_aend", "cp_sfac", "cp_walk",
    "cp_out", "cp_nsum", "cp_norm", "softmax_rb64", "softmax_rb128", "grad_chunk", "grad_chunk (local)",
    "cp_walk_local64_16", "cp_sfac_local", "cp_out_local", "cp_gram_local", "cp_walk_local8", "cp_walk_local4",
    "cp_walk_local2", "cp_walk_local64_8", "cp_walk_local64_4", "cp_apart_local", "cp_aend_local", "cp_apart_seg",
    "CLBlast sgemm",
};

vla_status ocl_launch_run(ocl_launch *l, size_t groups, size_t wg) {
    ocl_ctx *ctx = l->b->context;
    if (l->err != CL_SUCCESS) return ocl_fail(l->b, l->err, "clSetKernelArg", ocl_kernel_names[l->id]);
    if (groups == 0) return VLA_OK;
    const size_t global = groups * wg;
    cl_event ev = NULL;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, l->k, 1, NULL, &global, &wg, 0, NULL, ctx->profile ? &ev : NULL);
    if (err != CL_SUCCESS) return ocl_fail(l->b, err, "clEnqueueNDRangeKernel", ocl_kernel_names[l->id]);
    if (ev) {
        cl_ulong t0 = 0, t1 = 0;
        clWaitForEvents(1, &ev);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
        ctx->prof_ns[l->id] += (double)(t1 - t0);
        ctx->prof_calls[l->id]++;
    }
    return VLA_OK;
}

static vla_status copy_buf(vla_backend *b, cl_mem src, cl_mem dst, size_t bytes) {
    ocl_ctx *ctx = b->context;
    cl_int err = clEnqueueCopyBuffer(ctx->queue, src, dst, 0, 0, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueCopyBuffer", "(state)");
}
static vla_status zero_buf(vla_backend *b, cl_mem m, size_t bytes) {
    ocl_ctx *ctx = b->context;
    const float zero = 0.0f;
    cl_int err = clEnqueueFillBuffer(ctx->queue, m, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueFillBuffer", "(state)");
}

/* ---- algorithm choice ---- */

/* AUTO. Softmax has its one algorithm. GPUs: chunked where the chunk-parallel form was timed faster
 * (ocl_cp_auto_chunked_gpu: where the local-memory kernels apply, else linear and VLA with few
 * heads), else sequential. Other devices (PoCL on 2
 * CPU cores, B=1 H=4 d=32, ocl_cp_auto_chunked): chunked wherever the chunk-parallel form runs all
 * of it (1.4-3.9x faster than sequential from T = 16 to 4096), sequential for decode-sized pieces
 * and for VLA whose A part stays per head (R > 0, u or A_in given). */
vla_status ocl_resolve(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, vla_algorithm *out) {
    const ocl_ctx *ctx = b->context;
    if (d->algorithm != VLA_ALGO_AUTO) *out = d->algorithm; /* every algorithm VLA-MATH defines is implemented */
    else if (d->mechanism == VLA_MECH_SOFTMAX) *out = VLA_ALGO_FUSED;
    else if (ctx->is_gpu ? ocl_cp_auto_chunked_gpu(d, a, ctx->compute_units) : ocl_cp_auto_chunked(d, a))
        *out = VLA_ALGO_CHUNKED;
    else *out = VLA_ALGO_SEQUENTIAL;
    return VLA_OK;
}

/* ---- chunk boundaries (as the CPU backend): at most C tokens, and with R > 0 every refresh
 * point (absolute position t0 + t) ends a chunk. ---- */

static int chunk_end(int T, int C, int R, int64_t t0, int ts) {
    int te = ts + C < T ? ts + C : T;
    if (R > 0) {
        const int64_t r = (t0 + ts + 1) % R;
        const int64_t next = ts + (R - r) % R; /* first refresh token >= ts */
        if (next + 1 < te) te = (int)(next + 1);
    }
    return te;
}

/* ---- the op ---- */

typedef struct op {
    int B, T, H, dk, dv, BH;
    int C;       /* the largest chunk: min(chunk, T) */
    int nchunks; /* chunked and two-level */
    int seg_chunks, nseg;
    int *starts; /* [nchunks + 1], host */
    int rphase;  /* t0 % R */
} op;

#define WS(x) (ctx->ws[OCL_WS_##x])
#define MEM(buf) ((buf) ? (cl_mem)(buf)->mem : ctx->dummy)
#define TRY(x)                         \
    do {                               \
        vla_status s_ = (x);           \
        if (s_ != VLA_OK) return s_;   \
    } while (0)

/* Kernels each (mechanism, algorithm) runs, so all are built before anything is queued. */
static int needs(const vla_attn_desc *d, ocl_kernel_id *ids) {
    int n = 0;
    const int vla = d->mechanism == VLA_MECH_VLA;
    if (d->mechanism == VLA_MECH_SOFTMAX) {
        ids[n++] = OCL_K_SOFTMAX;
        ids[n++] = OCL_K_SOFTMAX_ROWS;
        return n;
    }
    ids[n++] = OCL_K_PREP;
    if (d->mechanism == VLA_MECH_LINEAR || (vla && d->normalize_output)) ids[n++] = OCL_K_NORM_OUT;
    switch (d->algorithm) {
    case VLA_ALGO_SEQUENTIAL:
        if (vla) {
            ids[n++] = OCL_K_INIT_A_REAL;
            ids[n++] = OCL_K_STORE_A_REAL;
            ids[n++] = OCL_K_VLA_SEQ;
        } else {
            ids[n++] = OCL_K_GDR_SEQ;
        }
        break;
    case VLA_ALGO_SCAN:
        ids[n++] = OCL_K_INIT_A_REAL;
        ids[n++] = OCL_K_STORE_A_REAL;
        ids[n++] = OCL_K_VLA_SEQ;
        ids[n++] = OCL_K_SCAN_MAPS;
        ids[n++] = OCL_K_AFFINE_LEVEL;
        ids[n++] = OCL_K_SCAN_OUT;
        ids[n++] = OCL_K_AFFINE_APPLY;
        break;
    case VLA_ALGO_TWO_LEVEL:
        ids[n++] = OCL_K_CHUNK_MAP;
        ids[n++] = OCL_K_SEG_COMPOSE;
        ids[n++] = OCL_K_AFFINE_LEVEL;
        ids[n++] = OCL_K_AFFINE_APPLY;
        /* and everything chunked needs: */
        __attribute__((fallthrough));
    case VLA_ALGO_CHUNKED:
        if (vla) {
            ids[n++] = OCL_K_INIT_A_F32;
            ids[n++] = OCL_K_VLA_A_CHUNKED;
        }
        ids[n++] = OCL_K_GDR_CHUNK_PREP;
        ids[n++] = OCL_K_GDR_CHUNK_RUN;
        break;
    default: break;
    }
    return n;
}

static size_t wg_of(vla_backend *b, ocl_kernel_id id, int want, vla_status *s) {
    size_t wg = 32;
    if (*s == VLA_OK) *s = ocl_wg(b, id, want, &wg);
    return wg;
}

static int imax(int a, int b) { return a > b ? a : b; }

#ifdef VLA_HAVE_CLBLAST
/* Fails with the CLBlast status; OpenCL errors that CLBlast mirrors get their OpenCL name. */
static vla_status clblast_fail(vla_backend *b, CLBlastStatusCode st, const char *what) {
    if (st < 0 && st > -100) return ocl_fail(b, (cl_int)st, "CLBlast", what);
    return vla_fail(b, VLA_ERR_BACKEND, "opencl: CLBlast status %d %s", (int)st, what);
}

static void clblast_profile(ocl_ctx *ctx, cl_event ev) {
    if (!ev) return;
    if (ctx->profile) {
        cl_ulong t0 = 0, t1 = 0;
        clWaitForEvents(1, &ev);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        ctx->prof_ns[OCL_NK] += (double)(t1 - t0);
        ctx->prof_calls[OCL_NK]++;
    }
    clReleaseEvent(ev);
}

/* One scan level through CLBlast, for pairs i = first + p * step, j = i - s:
 *   N_i += M_i N_j   in place (A = M_i and C = N_i are disjoint columns of map i), then
 *   M_i  = M_i M_j   out of place into tmp, copied back by one rectangular copy.
 * One strided-batched call covers every head when the pairs of consecutive heads are evenly
 * spaced (npairs * step == n), else one call per head. */
static vla_status level_clblast(vla_backend *b, const op *p, cl_mem maps, int n, int s, int first, int step,
                                int npairs) {
    ocl_ctx *ctx = b->context;
    const size_t dk = (size_t)p->dk, dv = (size_t)p->dv, W = dk + dv, msz = dk * W;
    const int one_call = npairs * step == n;
    const cl_mem tmp = ctx->ws[OCL_WS_TMP];
    char what[160];
    for (int h = 0; h < (one_call ? 1 : p->BH); h++) {
        const size_t batch = one_call ? (size_t)p->BH * npairs : (size_t)npairs;
        const size_t mi = (one_call ? 0 : (size_t)h * n) + first, mj = mi - s; /* map indices */
        const size_t tmp0 = (size_t)h * npairs * dk * dk;
        cl_event ev = NULL;
        CLBlastStatusCode st = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, dk, dv, dk, 1.0f, maps, mi * msz, W,
            (size_t)step * msz, maps, mj * msz + dk, W, (size_t)step * msz, 1.0f, maps, mi * msz + dk, W,
            (size_t)step * msz, batch, &ctx->queue, &ev);
        snprintf(what, sizeof what, "(SgemmStridedBatched, scan level: %zu products of [%zu, %zu] x [%zu, %zu])", batch, dk,
                 dk, dk, dv);
        if (st != CLBlastSuccess) return clblast_fail(b, st, what);
        clblast_profile(ctx, ev);
        ev = NULL;
        st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, dk, dk, dk, 1.0f,
                                        maps, mi * msz, W, (size_t)step * msz, maps, mj * msz, W, (size_t)step * msz,
                                        0.0f, tmp, tmp0, dk, dk * dk, batch, &ctx->queue, &ev);
        if (st != CLBlastSuccess) return clblast_fail(b, st, what);
        clblast_profile(ctx, ev);
        /* tmp [batch][dk][dk] -> the M columns of maps mi, mi + step, ... */
        const size_t f = sizeof(float);
        const size_t src_origin[3] = {tmp0 * f, 0, 0}, dst_origin[3] = {mi * msz * f, 0, 0};
        const size_t region[3] = {dk * f, dk, batch};
        cl_int err = clEnqueueCopyBufferRect(ctx->queue, tmp, maps, src_origin, dst_origin, region, dk * f, dk * dk * f,
                                             W * f, (size_t)step * msz * f, 0, NULL, NULL);
        if (err != CL_SUCCESS) return ocl_fail(b, err, "clEnqueueCopyBufferRect", "(scan level)");
    }
    return VLA_OK;
}
#endif

/* The Blelloch (Brent-Kung) scan over n maps per head, level by level (as cpu_affine_scan):
 * the pairs of a level are independent, the levels are not. */
static vla_status scan_maps_levels(vla_backend *b, const op *p, cl_mem maps, int n) {
    ocl_ctx *ctx = b->context;
    vla_status s = VLA_OK;
    const size_t wg = wg_of(b, OCL_K_AFFINE_LEVEL, p->dk + p->dv, &s);
    TRY(s);
    (void)ctx;
    int top = 1;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0, up-sweep: maps[i], i = 2st-1 mod 2st, gathers its 2st maps (st = 1, 2, 4, ...);
         * pass 1, down-sweep: the prefixes in between (st = top/2, ..., 1). */
        for (int st = pass == 0 ? 1 : top / 2; pass == 0 ? st < n : st >= 1; st = pass == 0 ? st * 2 : st / 2) {
            const int first = pass == 0 ? 2 * st - 1 : 3 * st - 1;
            const int npairs = pass == 0 ? n / (2 * st) : (n >= 3 * st ? (n - st) / (2 * st) : 0);
            if (pass == 0) top = st;
            if (npairs == 0) continue;
#ifdef VLA_HAVE_CLBLAST
            if (ctx->clblast) {
                TRY(level_clblast(b, p, maps, n, st, first, 2 * st, npairs));
                continue;
            }
#endif
            ocl_launch l = ocl_launch_start(b, OCL_K_AFFINE_LEVEL);
            a_mem(&l, maps), a_int(&l, n), a_int(&l, p->dk), a_int(&l, p->dv), a_int(&l, st), a_int(&l, first),
                a_int(&l, 2 * st), a_int(&l, npairs);
            TRY(ocl_launch_run(&l, (size_t)p->BH * npairs, wg));
        }
    }
    return VLA_OK;
}

/* softmax.cl's rb_pad: a local row stride for n floats, a multiple of 4 whose quarter is odd. */
static int sm_rb_pad(int n) {
    const int n4 = (n + 3) & ~3;
    return (n4 & 7) ? n4 : n4 + 4;
}

/* The register-blocked softmax (softmax.cl, softmax_rb64/128): GPUs' default where the shape
 * fits (on an H100's OpenCL 1.9-2.3x softmax_fused's speed at the shapes, with native_exp:
 * benchmarks/results/2026-12-06-h100-opencl-speed/); VLA_OPENCL_SOFTMAX_KERNEL=fused|rb forces
 * either. *done = 0 leaves the call to softmax_fused.
 * Query rows per group QB = 64, 32 or 16 (WG = 4 QB items): the largest whose local memory
 * ([QB][dks] queries, a [64][max(dks, dvs)] K-or-V tile, [64][qbs] probabilities, [16][qbs] row
 * partials) fits in min(device, 48 KiB), 48 KiB being what NVIDIA's OpenCL gives a group, so
 * every device takes the tiles a GPU takes: dk = dv = 64 gives QB = 32 (36.8 KiB), dk = dv =
 * 128 QB = 16 (47.5 KiB), small d QB = 64; dv > 128 or dk > 132 fall back to softmax_fused. */
static vla_status softmax_rb(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const op *p, int *done) {
    ocl_ctx *ctx = b->context;
    const int T = p->T, dk = p->dk, dv = p->dv;
    *done = 0;
    if (dv > 128) return VLA_OK;
    const ocl_kernel_id id = dv <= 64 ? OCL_K_SOFTMAX_RB64 : OCL_K_SOFTMAX_RB128;
    cl_kernel kern;
    TRY(ocl_kernel(b, id, &kern));
    const size_t dks = (size_t)sm_rb_pad(dk), dvs = dv <= 64 ? 64 : 128;
    const cl_ulong budget = ctx->local_mem < 49152 ? ctx->local_mem : 49152;
    for (int qb = 64; qb >= 16; qb /= 2) {
        size_t wg = 0;
        vla_status s = ocl_wg(b, id, 4 * qb, &wg);
        if (s != VLA_OK) return s;
        if (wg != (size_t)(4 * qb)) continue; /* the kernel's grid is QB/4 x 16 items */
        const size_t qbs = (size_t)sm_rb_pad(qb);
        const size_t lbytes = sizeof(float) * (qb * dks + 64 * (dks > dvs ? dks : dvs) + 64 * qbs + 16 * qbs);
        if (lbytes > budget) continue;
        const int ntiles = (T + qb - 1) / qb;
        ocl_launch l = ocl_launch_start(b, id);
        a_mem(&l, MEM(a->q)), a_mem(&l, MEM(a->k)), a_mem(&l, MEM(a->v)), a_mem(&l, MEM(a->o)), a_int(&l, T),
            a_int(&l, p->H), a_int(&l, dk), a_int(&l, dv), a_flt(&l, (float)d->scale), a_int(&l, ntiles);
        ocl_launch_arg(&l, lbytes, NULL);
        *done = 1;
        return ocl_launch_run(&l, (size_t)p->BH * ntiles, wg);
    }
    return VLA_OK;
}

static vla_status forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, op *p) {
    ocl_ctx *ctx = b->context;
    const int vla = d->mechanism == VLA_MECH_VLA, delta = d->mechanism == VLA_MECH_DELTA;
    const int linear = d->mechanism == VLA_MECH_LINEAR;
    const int T = p->T, H = p->H, dk = p->dk, dv = p->dv, BH = p->BH;
    const vla_algorithm algo = d->algorithm;
    const int chunked = algo == VLA_ALGO_CHUNKED || algo == VLA_ALGO_TWO_LEVEL;
    const int has_n = linear || (vla && d->normalize_output);
    const float eps = (float)d->eps;
    vla_status s = VLA_OK;

    /* 1. Every kernel, built. */
    ocl_kernel_id ids[24];
    const int nk = needs(d, ids);
    for (int i = 0; i < nk; i++) {
        cl_kernel k;
        TRY(ocl_kernel(b, ids[i], &k));
    }

    const char *tiled = getenv("VLA_OPENCL_SOFTMAX_TILED"); /* tests: softmax_fused on any device */
    if (d->mechanism == VLA_MECH_SOFTMAX && !ctx->is_gpu && !(tiled && tiled[0] && strcmp(tiled, "0") != 0)) {
        /* Not a GPU: one work-item per query row (softmax.cl says why). */
        const size_t wg = wg_of(b, OCL_K_SOFTMAX_ROWS, 64, &s);
        TRY(s);
        const size_t nrows = mul(BH, T);
        if (nrows > INT_MAX)
            return vla_fail(b, VLA_ERR_UNSUPPORTED,
                            "vla_attention_forward: softmax with B*H*T = %zu rows: at most %d on OpenCL", nrows, INT_MAX);
        ocl_launch l = ocl_launch_start(b, OCL_K_SOFTMAX_ROWS);
        a_mem(&l, MEM(a->q)), a_mem(&l, MEM(a->k)), a_mem(&l, MEM(a->v)), a_mem(&l, MEM(a->o)), a_int(&l, T),
            a_int(&l, H), a_int(&l, dk), a_int(&l, dv), a_flt(&l, (float)d->scale), a_int(&l, (int)nrows);
        return ocl_launch_run(&l, (nrows + wg - 1) / wg, wg);
    }
    if (d->mechanism == VLA_MECH_SOFTMAX) {
        /* VLA_OPENCL_SOFTMAX_KERNEL: fused or rb; unset, rb on GPUs, and softmax_fused on other
         * devices that VLA_OPENCL_SOFTMAX_TILED sends here (the tests of that kernel). */
        const char *kname = getenv("VLA_OPENCL_SOFTMAX_KERNEL");
        if (!kname || !kname[0]) kname = ctx->is_gpu ? "rb" : "fused";
        if (strcmp(kname, "fused") != 0) {
            if (strcmp(kname, "rb") != 0)
                return vla_fail(b, VLA_ERR_UNSUPPORTED,
                                "vla_attention_forward: VLA_OPENCL_SOFTMAX_KERNEL=%s; fused or rb", kname);
            int done = 0;
            TRY(softmax_rb(b, d, a, p, &done));
            if (done) return VLA_OK;
        }
        /* 16 query rows x 8 lanes; 8 rows when d is large, so the query tile and the accumulators
         * ([rows, dk] + [rows, dv] floats) leave room for a key tile. */
        const size_t wg = wg_of(b, OCL_K_SOFTMAX, dk + dv > 256 ? 64 : 128, &s);
        TRY(s);
        /* Keys per tile: the most (up to 32) whose tiles fit in local memory beside the queries
         * and the accumulators, within 32 KiB so a GPU keeps several groups per compute unit
         * (d = 256: 8 query rows, 4 keys). */
        const int qb = (int)wg / 8, ntiles = (T + qb - 1) / qb;
        const cl_ulong budget = ctx->local_mem < 32768 ? ctx->local_mem : 32768;
        int kb = 32;
        size_t lbytes = 0;
        for (; kb >= 1; kb /= 2) {
            /* Qt, Kt (rows dk + 1 apart), Vt, sc (rows kb + 1 apart), acc, three per-item arrays */
            lbytes = sizeof(float) * ((size_t)qb * dk + (size_t)kb * (dk + 1) + (size_t)kb * dv + (size_t)qb * (kb + 1) +
                                      (size_t)qb * dv + 3 * wg);
            if (lbytes <= budget) break;
        }
        if (kb < 1)
            return vla_fail(b, VLA_ERR_UNSUPPORTED,
                            "vla_attention_forward: softmax with dk = %d, dv = %d needs %zu bytes of local memory per "
                            "work-group; this OpenCL device has %llu",
                            dk, dv, lbytes, (unsigned long long)ctx->local_mem);
        ocl_launch l = ocl_launch_start(b, OCL_K_SOFTMAX);
        a_mem(&l, MEM(a->q)), a_mem(&l, MEM(a->k)), a_mem(&l, MEM(a->v)), a_mem(&l, MEM(a->o)), a_int(&l, T),
            a_int(&l, H), a_int(&l, dk), a_int(&l, dv), a_flt(&l, (float)d->scale), a_int(&l, ntiles), a_int(&l, kb);
        ocl_launch_arg(&l, lbytes, NULL);
        return ocl_launch_run(&l, (size_t)BH * ntiles, wg);
    }

    /* 2. Chunk boundaries and the workspace. */
    if (chunked) {
        p->C = d->chunk < T ? d->chunk : T;
        p->starts = malloc(sizeof(int) * ((size_t)T + 1));
        if (!p->starts) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_attention_forward: out of host memory");
        const int R = vla ? d->refresh : 0;
        int n = 0;
        for (int ts = 0; ts < T; ts = chunk_end(T, p->C, R, a->t0, ts)) p->starts[n++] = ts;
        p->starts[n] = T;
        p->nchunks = n;
        if (algo == VLA_ALGO_TWO_LEVEL) {
            int sc = d->segment_chunks;
            if (sc <= 0) /* about sqrt(chunks): segment maps and per-segment work stay balanced */
                for (sc = 1; (long)sc * sc < n; sc++) {
                }
            p->seg_chunks = sc;
        } else {
            p->seg_chunks = n;
        }
        p->nseg = (n + p->seg_chunks - 1) / p->seg_chunks;
    }
    const size_t f = sizeof(float), rs = ctx->fp64 ? sizeof(double) : sizeof(float);
    const size_t rows = mul(BH, T);
    const size_t mapsz = mul((size_t)dk, (size_t)dk + dv);
    TRY(ws(b, OCL_WS_QF, ocl_mul4(rows, dk, f, 1)));
    if (linear || (vla && d->normalize_output)) TRY(ws(b, OCL_WS_KF, ocl_mul4(rows, dk, f, 1)));
    if (vla || delta) TRY(ws(b, OCL_WS_KH, ocl_mul4(rows, dk, f, 1)));
    if (vla) TRY(ws(b, OCL_WS_UU, ocl_mul4(rows, dk, f, 1)));
    if (delta && a->beta) TRY(ws(b, OCL_WS_W, ocl_mul4(rows, dk, f, 1)));
    TRY(ws(b, OCL_WS_ST, ocl_mul4(BH, dk, dv, f)));
    if (vla && (algo == VLA_ALGO_SEQUENTIAL || algo == VLA_ALGO_SCAN)) TRY(ws(b, OCL_WS_AT, ocl_mul4(BH, dk, dk, rs)));
    if (vla && (algo == VLA_ALGO_SCAN || chunked)) TRY(ws(b, OCL_WS_AL, ocl_mul4(rows, dk, f, 1)));
    if (algo == VLA_ALGO_SCAN) {
        TRY(ws(b, OCL_WS_MAPS, ocl_mul4(rows, mapsz, f, 1)));
        TRY(ws(b, OCL_WS_ST2, ocl_mul4(BH, dk, dv, f)));
        if (ctx->clblast && T > 1) TRY(ws(b, OCL_WS_TMP, ocl_mul4(BH, T / 2, (size_t)dk * dk, f)));
    }
    if (chunked) {
        TRY(ws(b, OCL_WS_STARTS, mul((size_t)p->nchunks + 1, sizeof(int))));
        TRY(ws(b, OCL_WS_WR, ocl_mul4(rows, dk, f, 1)));
        TRY(ws(b, OCL_WS_Y, ocl_mul4(rows, dv, f, 1)));
        TRY(ws(b, OCL_WS_MQ, ocl_mul4(rows, p->C, f, 1)));
        TRY(ws(b, OCL_WS_LM, ocl_mul4(rows, p->C, f, 1)));
        if (a->g) {
            TRY(ws(b, OCL_WS_DM, ocl_mul4(rows, p->C, f, 1)));
            TRY(ws(b, OCL_WS_GAM, ocl_mul4(rows, f, 1, 1)));
            TRY(ws(b, OCL_WS_DL, ocl_mul4(rows, f, 1, 1)));
        }
        if (vla) {
            TRY(ws(b, OCL_WS_AF, ocl_mul4(BH, dk, dk, f)));
            TRY(ws(b, OCL_WS_AD, ocl_mul4(BH, dk, dk, 2 * rs))); /* A, and A^T for the fallback */
            TRY(ws(b, OCL_WS_Z, ocl_mul4(BH, p->C, dk, rs)));
            TRY(ws(b, OCL_WS_G, ocl_mul4(BH, p->C, p->C, rs)));
            TRY(ws(b, OCL_WS_M, ocl_mul4(BH, p->C, p->C, rs)));
        }
        if (algo == VLA_ALGO_TWO_LEVEL) {
            TRY(ws(b, OCL_WS_MAPS, ocl_mul4(BH, p->nchunks, mapsz, f)));
            TRY(ws(b, OCL_WS_SEGMAPS, ocl_mul4(BH, p->nseg, mapsz, f)));
            TRY(ws(b, OCL_WS_STSEG, ocl_mul4(BH, p->nseg, (size_t)dk * dv, f)));
            if (ctx->clblast && p->nseg > 1) TRY(ws(b, OCL_WS_TMP, ocl_mul4(BH, p->nseg / 2, (size_t)dk * dk, f)));
        }
        cl_int err = clEnqueueWriteBuffer(ctx->queue, WS(STARTS), CL_TRUE, 0, sizeof(int) * ((size_t)p->nchunks + 1),
                                          p->starts, 0, NULL, NULL);
        if (err != CL_SUCCESS) return ocl_fail(b, err, "clEnqueueWriteBuffer", "(chunk starts)");
    }
    if (vla && d->refresh > 0) p->rphase = (int)(a->t0 % d->refresh);
    /* The chunk-parallel form (ocl_chunkpar.c) where it applies: kernels and workspace now. */
    ocl_cp_call cp = {.T = T, .H = H, .dk = dk, .dv = dv, .BH = BH, .C = p->C, .nch = p->nchunks,
                      .residual = d->mechanism != VLA_MECH_LINEAR, .has_g = a->g != NULL};
    if (algo == VLA_ALGO_CHUNKED) TRY(ocl_cp_plan(b, d, a, &cp));

    /* 3. Preparation: feature maps and normalisations, [B*H, T, dk]. */
    {
        int flags = 0;
        if (linear || (vla && d->normalize_output)) flags |= 1; /* PREP_KF */
        if (vla || delta) flags |= 2;                          /* PREP_KH */
        if (vla) flags |= 4 | (a->u ? 8 : 0);                  /* PREP_UU, PREP_HAS_U */
        if (delta && a->beta) flags |= 16;                     /* PREP_W */
        const size_t wg = wg_of(b, OCL_K_PREP, 128, &s);
        TRY(s);
        ocl_launch l = ocl_launch_start(b, OCL_K_PREP);
        a_mem(&l, MEM(a->q)), a_mem(&l, MEM(a->k)), a_mem(&l, MEM(a->u)), a_mem(&l, MEM(a->beta));
        a_mem(&l, WS(QF)), a_mem(&l, WS(KF) ? WS(KF) : ctx->dummy), a_mem(&l, WS(KH) ? WS(KH) : ctx->dummy);
        a_mem(&l, WS(UU) ? WS(UU) : ctx->dummy), a_mem(&l, (delta && a->beta) ? WS(W) : ctx->dummy);
        a_int(&l, p->B), a_int(&l, T), a_int(&l, H), a_int(&l, dk), a_int(&l, (int)d->feature_map), a_int(&l, flags);
        a_flt(&l, eps), a_flt(&l, (float)d->u_scale);
        TRY(ocl_launch_run(&l, ocl_prep_groups(ctx, rows, dk, wg), wg));
    }

    /* 4. Start states. */
    const size_t sbytes = ocl_mul4(BH, dk, dv, f), abytes = ocl_mul4(BH, dk, dk, f);
    if (a->S_in) TRY(copy_buf(b, (cl_mem)a->S_in->mem, WS(ST), sbytes));
    else TRY(zero_buf(b, WS(ST), sbytes));
    const float inv_lambda = (float)(1.0 / d->lambda0);
    if (vla) {
        const int real = algo == VLA_ALGO_SEQUENTIAL || algo == VLA_ALGO_SCAN;
        const ocl_kernel_id kid = real ? OCL_K_INIT_A_REAL : OCL_K_INIT_A_F32;
        const size_t wg = wg_of(b, kid, 64, &s);
        TRY(s);
        ocl_launch l = ocl_launch_start(b, kid);
        a_mem(&l, MEM(a->A_in)), a_int(&l, a->A_in != NULL), a_mem(&l, real ? WS(AT) : WS(AF)), a_int(&l, BH),
            a_int(&l, dk), a_flt(&l, inv_lambda);
        TRY(ocl_launch_items(&l, mul(BH, mul(dk, dk)), wg));
    }

    /* 5. The algorithm. */
    cl_mem S_final = WS(ST);
    const cl_mem kr = (vla || delta) ? WS(KH) : ctx->dummy;
    const cl_mem w = linear ? WS(KF) : delta ? (a->beta ? WS(W) : WS(KH)) : WS(AL);
    const int residual = !linear, has_g = a->g != NULL;
    if (algo == VLA_ALGO_SEQUENTIAL && !vla) {
        const size_t wg = wg_of(b, OCL_K_GDR_SEQ, imax(dk, dv), &s);
        TRY(s);
        ocl_launch l = ocl_launch_start(b, OCL_K_GDR_SEQ);
        a_mem(&l, kr), a_mem(&l, w), a_mem(&l, WS(QF)), a_mem(&l, MEM(a->v)), a_mem(&l, MEM(a->g)), a_int(&l, has_g),
            a_int(&l, residual), a_mem(&l, WS(ST)), a_mem(&l, MEM(a->o)), a_int(&l, T), a_int(&l, H), a_int(&l, dk),
            a_int(&l, dv);
        TRY(ocl_launch_run(&l, BH, wg));
    } else if (algo == VLA_ALGO_SEQUENTIAL || algo == VLA_ALGO_SCAN) {
        const int scan = algo == VLA_ALGO_SCAN;
        const size_t wg = wg_of(b, OCL_K_VLA_SEQ, imax(dk, dv), &s);
        TRY(s);
        ocl_launch l = ocl_launch_start(b, OCL_K_VLA_SEQ);
        a_mem(&l, WS(UU)), a_mem(&l, WS(KH)), a_mem(&l, WS(QF)), a_mem(&l, MEM(a->v)), a_mem(&l, WS(AT)),
            a_mem(&l, WS(ST)), a_mem(&l, scan ? ctx->dummy : MEM(a->o)), a_mem(&l, scan ? WS(AL) : ctx->dummy),
            a_int(&l, !scan), a_int(&l, scan), a_int(&l, T), a_int(&l, H), a_int(&l, dk), a_int(&l, dv),
            a_int(&l, d->refresh), a_int(&l, p->rphase), a_flt(&l, (float)d->refresh_size), a_flt(&l, eps);
        TRY(ocl_launch_run(&l, BH, wg));
        if (scan) {
            /* Per-token maps, the Blelloch scan, outputs from the prefix maps, the final state. */
            const size_t wgm = wg_of(b, OCL_K_SCAN_MAPS, dk + dv, &s);
            const size_t wgo = wg_of(b, OCL_K_SCAN_OUT, imax(dk, dv), &s);
            const size_t wga = wg_of(b, OCL_K_AFFINE_APPLY, dv, &s);
            TRY(s);
            ocl_launch m = ocl_launch_start(b, OCL_K_SCAN_MAPS);
            a_mem(&m, WS(AL)), a_mem(&m, WS(KH)), a_mem(&m, MEM(a->v)), a_mem(&m, WS(MAPS)), a_int(&m, T), a_int(&m, H),
                a_int(&m, dk), a_int(&m, dv);
            TRY(ocl_launch_run(&m, rows, wgm));
            TRY(scan_maps_levels(b, p, WS(MAPS), T));
            ocl_launch o = ocl_launch_start(b, OCL_K_SCAN_OUT);
            a_mem(&o, WS(MAPS)), a_mem(&o, WS(QF)), a_mem(&o, WS(ST)), a_mem(&o, MEM(a->o)), a_int(&o, T), a_int(&o, H),
                a_int(&o, dk), a_int(&o, dv);
            TRY(ocl_launch_run(&o, rows, wgo));
            ocl_launch f2 = ocl_launch_start(b, OCL_K_AFFINE_APPLY);
            a_mem(&f2, WS(MAPS)), a_int(&f2, T), a_int(&f2, T - 1), a_int(&f2, 0), a_mem(&f2, WS(ST)),
                a_mem(&f2, WS(ST2)), a_int(&f2, 1), a_int(&f2, dk), a_int(&f2, dv);
            TRY(ocl_launch_run(&f2, BH, wga));
            S_final = WS(ST2);
        }
    } else {
        /* Chunked and two-level: (VLA) the A part chunk to chunk, then the S part. */
        const int C = p->C, nch = p->nchunks;
        if (vla && cp.mode != 2) {
            const size_t wg = wg_of(b, OCL_K_VLA_A_CHUNKED, imax(C, dk), &s);
            TRY(s);
            ocl_launch l = ocl_launch_start(b, OCL_K_VLA_A_CHUNKED);
            a_mem(&l, WS(STARTS)), a_int(&l, nch), a_mem(&l, WS(UU)), a_mem(&l, WS(KH)), a_mem(&l, WS(AF)),
                a_mem(&l, WS(AD)), a_mem(&l, WS(Z)), a_mem(&l, WS(G)), a_mem(&l, WS(M)), a_mem(&l, WS(AL)),
                a_int(&l, T), a_int(&l, dk), a_int(&l, C), a_int(&l, d->refresh), a_int(&l, p->rphase),
                a_flt(&l, (float)d->refresh_size), a_flt(&l, eps), a_int(&l, (int)BH);
            TRY(ocl_launch_run(&l, BH, wg));
        }
        if (cp.mode) {
            cp.residual = residual, cp.has_g = has_g, cp.kr = kr, cp.w = w, cp.q = WS(QF), cp.v = MEM(a->v);
            cp.g = MEM(a->g), cp.o = MEM(a->o), cp.starts = WS(STARTS);
            TRY(ocl_cp_forward(b, d, a, &cp));
        } else {
            {
                const size_t wg = wg_of(b, OCL_K_GDR_CHUNK_PREP, imax(dk + dv, C), &s);
                TRY(s);
                ocl_launch l = ocl_launch_start(b, OCL_K_GDR_CHUNK_PREP);
                a_mem(&l, WS(STARTS)), a_int(&l, nch), a_mem(&l, kr), a_mem(&l, w), a_mem(&l, WS(QF)), a_mem(&l, MEM(a->v)),
                    a_mem(&l, MEM(a->g)), a_int(&l, has_g), a_int(&l, residual), a_mem(&l, WS(WR)), a_mem(&l, WS(Y)),
                    a_mem(&l, WS(MQ)), a_mem(&l, has_g ? WS(DM) : ctx->dummy), a_mem(&l, WS(LM)),
                    a_mem(&l, has_g ? WS(GAM) : ctx->dummy), a_mem(&l, has_g ? WS(DL) : ctx->dummy), a_int(&l, T),
                    a_int(&l, H), a_int(&l, dk), a_int(&l, dv), a_int(&l, C);
                TRY(ocl_launch_run(&l, (size_t)BH * nch, wg));
            }
            cl_mem STs = WS(ST);
            if (algo == VLA_ALGO_TWO_LEVEL) {
                const size_t wgm = wg_of(b, OCL_K_CHUNK_MAP, dk + dv, &s);
                const size_t wgc = wg_of(b, OCL_K_SEG_COMPOSE, dk + dv, &s);
                const size_t wga = wg_of(b, OCL_K_AFFINE_APPLY, dv, &s);
                TRY(s);
                ocl_launch m = ocl_launch_start(b, OCL_K_CHUNK_MAP);
                a_mem(&m, WS(STARTS)), a_int(&m, nch), a_mem(&m, WS(AL)), a_mem(&m, WS(WR)), a_mem(&m, WS(Y)),
                    a_mem(&m, WS(MAPS)), a_int(&m, T), a_int(&m, dk), a_int(&m, dv);
                TRY(ocl_launch_run(&m, (size_t)BH * nch, wgm));
                ocl_launch c = ocl_launch_start(b, OCL_K_SEG_COMPOSE);
                a_mem(&c, WS(MAPS)), a_int(&c, nch), a_int(&c, p->seg_chunks), a_int(&c, p->nseg), a_mem(&c, WS(SEGMAPS)),
                    a_int(&c, dk), a_int(&c, dv);
                TRY(ocl_launch_run(&c, (size_t)BH * p->nseg, wgc));
                TRY(scan_maps_levels(b, p, WS(SEGMAPS), p->nseg));
                ocl_launch ap = ocl_launch_start(b, OCL_K_AFFINE_APPLY);
                a_mem(&ap, WS(SEGMAPS)), a_int(&ap, p->nseg), a_int(&ap, 0), a_int(&ap, 1), a_mem(&ap, WS(ST)),
                    a_mem(&ap, WS(STSEG)), a_int(&ap, p->nseg), a_int(&ap, dk), a_int(&ap, dv);
                TRY(ocl_launch_run(&ap, (size_t)BH * p->nseg, wga));
                STs = WS(STSEG);
            }
            const size_t wg = wg_of(b, OCL_K_GDR_CHUNK_RUN, dv, &s);
            TRY(s);
            ocl_launch l = ocl_launch_start(b, OCL_K_GDR_CHUNK_RUN);
            a_mem(&l, WS(STARTS)), a_int(&l, nch), a_int(&l, p->seg_chunks), a_int(&l, p->nseg), a_mem(&l, WS(QF)),
                a_mem(&l, w), a_mem(&l, WS(WR)), a_mem(&l, WS(Y)), a_mem(&l, WS(MQ)),
                a_mem(&l, has_g ? WS(GAM) : ctx->dummy), a_mem(&l, has_g ? WS(DL) : ctx->dummy), a_int(&l, has_g),
                a_int(&l, residual), a_mem(&l, STs), a_mem(&l, WS(ST)), a_int(&l, STs != WS(ST)), a_mem(&l, MEM(a->o)),
                a_int(&l, T), a_int(&l, H), a_int(&l, dk), a_int(&l, dv), a_int(&l, C);
            TRY(ocl_launch_run(&l, (size_t)BH * p->nseg, wg));
        }
    }

    /* 6. The output normaliser (linear; VLA with normalised output), n in and out. */
    if (has_n && !cp.mode) { /* (the chunk-parallel form has its own) */
        const size_t wg = wg_of(b, OCL_K_NORM_OUT, imax(dk, dv), &s);
        TRY(s);
        ocl_launch l = ocl_launch_start(b, OCL_K_NORM_OUT);
        a_mem(&l, MEM(a->o)), a_mem(&l, WS(QF)), a_mem(&l, WS(KF)), a_mem(&l, MEM(a->n_in)), a_mem(&l, MEM(a->n_out)),
            a_int(&l, a->n_in != NULL), a_int(&l, a->n_out != NULL), a_int(&l, T), a_int(&l, H), a_int(&l, dk),
            a_int(&l, dv), a_flt(&l, eps), a_int(&l, linear);
        TRY(ocl_launch_run(&l, BH, wg));
    }

    /* 7. Final states. */
    if (a->S_out) TRY(copy_buf(b, S_final, (cl_mem)a->S_out->mem, sbytes));
    if (vla && a->A_out) {
        if (chunked) {
            TRY(copy_buf(b, WS(AF), (cl_mem)a->A_out->mem, abytes));
        } else {
            const size_t wg = wg_of(b, OCL_K_STORE_A_REAL, 64, &s);
            TRY(s);
            ocl_launch l = ocl_launch_start(b, OCL_K_STORE_A_REAL);
            a_mem(&l, WS(AT)), a_mem(&l, (cl_mem)a->A_out->mem), a_int(&l, BH), a_int(&l, dk);
            TRY(ocl_launch_items(&l, mul(BH, mul(dk, dk)), wg));
        }
    }
    return VLA_OK;
}

/* The paper's DeltaNet (delta_paper.cl): its own preparation (phi on q only, normalize(k)
 * without phi, so prep.cl's one feature map for both does not fit), then the sequential kernel,
 * its only algorithm (AUTO resolves to it). */
static vla_status forward_delta_paper(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const op *p) {
    ocl_ctx *ctx = b->context;
    const int T = p->T, H = p->H, dk = p->dk, dv = p->dv;
    const size_t BH = (size_t)p->BH, rows = mul(BH, T), f = sizeof(float);
    vla_status s = VLA_OK;
    cl_kernel kern;
    TRY(ocl_kernel(b, OCL_K_DP_PREP, &kern));
    TRY(ocl_kernel(b, OCL_K_DP_SEQ, &kern));
    const size_t wg_prep = wg_of(b, OCL_K_DP_PREP, 64, &s), wg_seq = wg_of(b, OCL_K_DP_SEQ, imax(dk, dv), &s);
    TRY(s);
    const size_t sbytes = ocl_mul4(BH, dk, dv, f);
    TRY(ws(b, OCL_WS_QF, ocl_mul4(rows, dk, f, 1)));
    TRY(ws(b, OCL_WS_KH, ocl_mul4(rows, dk, f, 1)));
    TRY(ws(b, OCL_WS_ST, sbytes));

    ocl_launch l = ocl_launch_start(b, OCL_K_DP_PREP);
    a_mem(&l, MEM(a->q)), a_mem(&l, MEM(a->k)), a_mem(&l, WS(QF)), a_mem(&l, WS(KH)), a_int(&l, p->B), a_int(&l, T),
        a_int(&l, H), a_int(&l, dk), a_int(&l, (int)d->feature_map), a_flt(&l, (float)d->eps);
    TRY(ocl_launch_items(&l, rows, wg_prep));
    /* S_in may be S_out: read into the workspace first, written back last. */
    if (a->S_in) TRY(copy_buf(b, (cl_mem)a->S_in->mem, WS(ST), sbytes));
    else TRY(zero_buf(b, WS(ST), sbytes));
    ocl_launch m = ocl_launch_start(b, OCL_K_DP_SEQ);
    a_mem(&m, WS(KH)), a_mem(&m, WS(QF)), a_mem(&m, MEM(a->v)), a_mem(&m, MEM(a->g)), a_int(&m, a->g != NULL),
        a_mem(&m, WS(ST)), a_mem(&m, MEM(a->o)), a_int(&m, T), a_int(&m, H), a_int(&m, dk), a_int(&m, dv);
    TRY(ocl_launch_run(&m, BH, wg_seq));
    if (a->S_out) TRY(copy_buf(b, WS(ST), (cl_mem)a->S_out->mem, sbytes));
    return VLA_OK;
}

vla_status ocl_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    op p = {.B = a->B, .T = a->T, .H = a->H, .dk = a->dk, .dv = a->dv, .BH = a->B * a->H};
    if ((long long)a->B * a->H > INT32_MAX)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "vla_attention_forward: B*H = %lld is too large for the opencl backend",
                        (long long)a->B * a->H);
    if (d->mechanism == VLA_MECH_DELTA_PAPER) return forward_delta_paper(b, d, a, &p);
    vla_status s = forward(b, d, a, &p);
    free(p.starts);
    return s;
}
