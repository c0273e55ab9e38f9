/* The chunk-parallel form of the chunked algorithm on OpenCL (kernels in chunkpar.cl; the maths
 * in docs/VLA-MATH.md 2.3-2.4, the design as the CUDA backend's, backends/cuda/README.md).
 *
 * The per-head chunked form (vla_a_chunked, gdr_chunk_run) walks a head's chunks in one
 * work-group, so a call has B*H groups of serial work. Here only the carry X_{j+1} = P_j X_j + N_j
 * (dk x dv a step) is serial; the S factors and chunk maps (cp_sfac), the outputs and,
 * for VLA with R = 0, the A part run one work-group per (head, chunk):
 *
 *   VLA, mode 2: cp_gram -> cp_prefix -> cp_apart (-> cp_aend when A_out is asked for)
 *   then every mechanism: cp_sfac -> cp_walk -> cp_out
 *
 * Mode 1 keeps VLA's A part in vla_a_chunked (one group a head, ocl_ops.c) where the Gram prefix
 * does not give A: R > 0 (refresh), u given, A_in given (it may not be SPD; the sequential A part
 * has the fallback), s_u = 0. VLA_OPENCL_NO_CHUNKPAR=1 turns the form off (the per-head path
 * runs; the tests compare the two). VLA_OPENCL_CHUNKPAR_GPU=1 (read in ocl_backend.c) takes the
 * GPU form (tune_gpu, chunkpar.cl built without CP_ONE_ITEM) on any device, so that PoCL checks
 * it (tests/test_opencl.c, vla-check). On GPUs --algo chunked runs the GPU form, and auto takes it
 * where it was timed faster (ocl_cp_auto_chunked_gpu).
 *
 * The GPU form has two sets of kernels. The global-memory ones above work on any shape, but each
 * of their row updates waits on global memory (on an H100 the walk alone took 70 of a 75 ms VLA
 * call at (1,4,32) T = 32768). Where the arrays fit local memory they are replaced (the plans
 * below; VLA_OPENCL_CP_GLOBAL=1 keeps the global ones, which the tests compare): cp_walk_local*
 * (dk <= 64; in segments of chunks where few heads would leave the device idle, walk_segments),
 * cp_sfac_local and cp_out_local (no g; dk, dv, C <= 64), cp_gram_local, cp_apart_local and
 * cp_aend_local (VLA, mode 2). */
#include "ocl_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Work-group sizes by device class (the program is built to match: CP_ONE_ITEM, ocl_backend.c).
 * CPU devices (PoCL): one item a group, so each kernel's innermost row loops are plain loops the
 * compiler vectorises, and (head, chunk) groups spread over the cores; VLA at (1,4,32) T = 4096
 * took about 150 ms with 64 items a group, 11-13 ms with one. GPUs: several warps a group over
 * the same loops (the global-memory kernels; the local ones set their own groups). */
typedef struct cp_tune {
    int chunk_wg; /* per (head, chunk) kernels */
    int walk_wg;  /* cp_walk: items a group (GPUs: as many value columns) */
    int flat_wg;  /* cp_prefix: entries a group (GPUs) */
} cp_tune;
static const cp_tune tune_cpu = {1, 1, 64};
static const cp_tune tune_gpu = {128, 32, 256};

/* cp_walk_local's group (WALK_WG in chunkpar.cl) and its local arrays, double-buffered:
 * P [2][dk][dk + 1], X [2][dk][vb]. */
#define WALK_WG 128
/* Local memory left unplanned: what a driver may take for itself beside a kernel's arrays. */
#define LOCAL_SPARE 4096
static size_t walk_local_bytes(int dk, int vb) {
    return 2 * sizeof(float) * ((size_t)dk * (dk + 1) + (size_t)dk * vb);
}

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

/* A switch that is on unless set to 0. */
static int env_default_on(const char *name) {
    const char *v = getenv(name);
    return !v || !v[0] || strcmp(v, "0") != 0;
}

/* The whole call chunk-parallel (mode 2 for VLA): R = 0, u and A_in not given, s_u != 0. */
static int vla_apart_parallel(const vla_attn_desc *d, const vla_attn_args *a) {
    return d->refresh == 0 && !a->u && !a->A_in && d->u_scale != 0.0;
}

/* Measured on PoCL, 2 cores, B=1 H=4 d=32, load average below 0.5 (median ms, chunked vs
 * sequential): T = 4: VLA 0.137 vs 0.141, DeltaNet 0.071 vs 0.031; T = 8: 0.234 vs 0.217, 0.076
 * vs 0.071; T = 16: 0.28 vs 0.42, 0.092 vs 0.131, linear 0.093 vs 0.178; T = 64 to 4096: chunked
 * 2.0-3.9x faster for all three. The per-head VLA A part (mode 1) is slower than the sequential
 * algorithm (README's OpenCL table). */
int ocl_cp_auto_chunked(const vla_attn_desc *d, const vla_attn_args *a) {
    if (a->T < 16 || env_on("VLA_OPENCL_NO_CHUNKPAR")) return 0;
    if (d->mechanism == VLA_MECH_LINEAR || d->mechanism == VLA_MECH_DELTA) return 1;
    return d->mechanism == VLA_MECH_VLA && vla_apart_parallel(d, a);
}

/* GPUs. Where the local-memory kernels apply (no g; dk, dv and the chunk at most 64), the
 * chunked form was faster than the sequential one at every row timed with NVIDIA's driver on an
 * H100 (forward, benchmarks/results/2026-12-06-h100-opencl-speed/: VLA 1.6-48x, linear
 * 2.5-64x, DeltaNet 1.5-40x); without them (the global-memory kernels),
 * as before they existed: linear and VLA chunked only while
 * their heads would leave most of the device idle in the sequential form (B H at most half the
 * compute units), DeltaNet sequential. VLA chunked only where the whole call is chunk-parallel. */
int ocl_cp_auto_chunked_gpu(const vla_attn_desc *d, const vla_attn_args *a, unsigned compute_units) {
    if (a->T < 16 || env_on("VLA_OPENCL_NO_CHUNKPAR")) return 0;
    if (d->mechanism == VLA_MECH_VLA && !vla_apart_parallel(d, a)) return 0;
    const int local = !a->g && a->dk <= 64 && a->dv <= 64 && d->chunk <= 64 && !env_on("VLA_OPENCL_CP_GLOBAL");
    if (local) return d->mechanism == VLA_MECH_LINEAR || d->mechanism == VLA_MECH_DELTA || d->mechanism == VLA_MECH_VLA;
    if (2 * (long long)a->B * a->H > (long long)compute_units) return 0;
    return d->mechanism == VLA_MECH_LINEAR || d->mechanism == VLA_MECH_VLA;
}

/* The segmented walk (chunkpar.cl, walk_local): where a head's value blocks leave most compute
 * units idle (few heads), each head's nch steps become three launches, compose (every segment of
 * L chunks its own map, dk + dv columns), carry (nseg steps over those maps) and expand (every
 * segment again from its start state): about 2L + nseg dependent steps, with nseg times the
 * groups, at the cost of 3x the multiply-adds. Steps cost about the same at these group counts
 * (one wave), so L near sqrt(nch / 2) and only where it saves a quarter of the steps, a launch
 * counted as two steps. On an H100 at (1,4,32), VLA chunked ms, one walk a head -> segments of
 * L = 4, 8, 16, 32: T = 2048 (32 chunks) 0.343 -> 0.328, 0.359, 0.364, 0.357; T = 8192 0.636 ->
 * 0.553, 0.549, 0.556, 0.585; T = 32768 2.195 -> 1.829, 1.776, 1.738, 1.727 (the walk 0.576 ->
 * 0.135 ms at L = 16); DeltaNet at T = 32768 1.230 -> 0.774 (L = 16). At (8,16,64) T = 8192,
 * already 512 groups, L = 32 lost (29.0 -> 35.3). VLA_OPENCL_WALK_SEG=L sets L (0: off), for
 * the tests and timings. Returns L, or 0 for one walk a head. */
static int walk_segments(const ocl_cp_call *c, int vb, unsigned compute_units) {
    const char *force = getenv("VLA_OPENCL_WALK_SEG");
    if (force && force[0]) {
        const int L = atoi(force);
        return L > 0 && L < c->nch ? L : 0;
    }
    const long long groups = (long long)c->BH * ((c->dv + vb - 1) / vb);
    if (2 * groups > (long long)compute_units || c->nch < 16) return 0;
    int best = 0;
    double best_cost = 0.75 * c->nch;
    for (int L = 2; L < c->nch; L++) {
        const int nseg = (c->nch + L - 1) / L;
        const long long compose = (long long)c->BH * nseg * ((c->dk + c->dv + vb - 1) / vb);
        if (compose > 8LL * compute_units) continue; /* more than a wave or so: steps slow down */
        const double cost = 2.0 * L + nseg + 4.0; /* compose, carry, expand; two more launches */
        if (cost < best_cost) best = L, best_cost = cost;
    }
    return best;
}

/* The walk's form: cp_walk_local on GPUs where dk is a power of two <= 64 (its flat loads of P
 * need dk to divide WALK_WG) and its local arrays fit, with vb value columns a group: the widest
 * of 32, 16, 8 that still gives every compute unit a group (few heads: narrower blocks, more
 * groups; each step's cost falls with vb), no wider than dv needs, 8 at dk = 64, and narrower
 * while the arrays do not fit; else cp_walk. VLA_OPENCL_CP_GLOBAL=1 keeps cp_walk (the tests
 * compare the two). */
static vla_status walk_plan(vla_backend *b, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    c->walk_vb = c->walk_seg = 0;
    if (!ctx->cp_gpu || c->dk > 64 || WALK_WG % c->dk != 0 || env_on("VLA_OPENCL_CP_GLOBAL")) return VLA_OK;
    int vb = 32; /* a power of two: WALK_WG / vb items a column */
    while (vb > 8 && ((long long)c->BH * ((c->dv + vb - 1) / vb) < (long long)ctx->compute_units || vb / 2 >= c->dv))
        vb /= 2;
    /* dk = 64: 8 columns a group (walk64_4, 37 KB of local arrays against 41 KB at 16, twice the
     * groups). On an H100 at (8,16,64), 16 -> 8: VLA chunked 6.96 -> 6.78 ms at T = 2048, 26.92 ->
     * 25.98 at 8192; DeltaNet 3.34 -> 3.16, 13.22 -> 12.30; linear level (2.34 -> 2.36, 9.51 -> 9.40). */
    if (c->dk > 32 && vb > 8) vb = 8;
    const char *force = getenv("VLA_OPENCL_WALK_VB"); /* 8, 16 or 32: the tests' and timings' way to pick */
    if (force && (atoi(force) == 8 || atoi(force) == 16 || atoi(force) == 32)) vb = atoi(force);
    while (vb > 8 && walk_local_bytes(c->dk, vb) + LOCAL_SPARE > ctx->local_mem) vb /= 2;
    if (walk_local_bytes(c->dk, vb) + LOCAL_SPARE > ctx->local_mem) return VLA_OK;
    const int rs = WALK_WG / vb, nr = (c->dk + rs - 1) / rs;
    const ocl_kernel_id id = c->dk > 32 ? (nr <= 4 ? OCL_K_CP_WALK_LOCAL64_4 : nr <= 8 ? OCL_K_CP_WALK_LOCAL64_8 : OCL_K_CP_WALK_LOCAL64_16)
                             : nr <= 2  ? OCL_K_CP_WALK_LOCAL2
                             : nr <= 4  ? OCL_K_CP_WALK_LOCAL4
                                        : OCL_K_CP_WALK_LOCAL8;
    cl_kernel k;
    vla_status s = ocl_kernel(b, id, &k);
    if (s != VLA_OK) return s;
    size_t wg = 0;
    s = ocl_wg(b, id, WALK_WG, &wg);
    if (s != VLA_OK || wg != WALK_WG) return s;
    c->walk_vb = vb, c->walk_id = id;
    c->walk_seg = walk_segments(c, vb, ctx->compute_units);
    if (c->walk_seg) {
        const size_t f = sizeof(float), nseg = (size_t)((c->nch + c->walk_seg - 1) / c->walk_seg);
        s = ocl_ws_grow(b, OCL_WS_CPSM, ocl_mul4((size_t)c->BH, nseg, (size_t)c->dk * (c->dk + c->dv), f));
        if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPSX, ocl_mul4((size_t)c->BH, nseg, (size_t)c->dk * c->dv, f));
        if (s == VLA_ERR_OUT_OF_MEMORY) c->walk_seg = 0, s = VLA_OK; /* the one walk a head needs none */
    }
    return s;
}

/* cp_sfac_local and cp_out_local (chunkpar.cl) on GPUs: no g, dk, dv, C <= 64. Their operands
 * pass through a local slab of ks columns: the widest of 64, 32, 16 whose arrays (rows padded to
 * 4 floats, for float4 loads) fit the device's local memory less LOCAL_SPARE (at dk = dv = C = 64
 * the whole arrays, 48 KB, did not run on NVIDIA's 48 KB). cp_out_local takes an item a 4 x 4
 * tile of the chunk's output. */
static size_t imax_z(size_t a, size_t b) { return a > b ? a : b; }
static size_t up4(int n) { return (size_t)(n + 3) / 4 * 4; }
static size_t local_bytes(const ocl_cp_call *c, int ks) {
    const size_t dk = (size_t)c->dk, C = (size_t)c->C, C4 = up4(c->C), dv4 = up4(c->dv), k = (size_t)ks;
    return sizeof(float) * imax_z(dk * C4 + C * C4 + C4 * k, dk * dv4 + C * dv4 + C * k);
}
static vla_status local_plan(vla_backend *b, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    c->out_wg = c->ks = 0;
    if (!ctx->cp_gpu || c->has_g || c->dk > 64 || c->dv > 64 || c->C > 64 || env_on("VLA_OPENCL_CP_GLOBAL"))
        return VLA_OK;
    const char *force = getenv("VLA_OPENCL_CP_SLAB"); /* 16, 32 or 64: the tests' way to run every width */
    int ks = force && (atoi(force) == 16 || atoi(force) == 32) ? atoi(force) : 64;
    while (ks >= 16 && local_bytes(c, ks) + LOCAL_SPARE > ctx->local_mem) ks /= 2;
    if (ks < 16) return VLA_OK;
    const int tiles = ((c->C + 3) / 4) * ((c->dv + 3) / 4);
    size_t wg_s = 0, wg_o = 0;
    cl_kernel k;
    vla_status s = ocl_kernel(b, OCL_K_CP_SFAC_LOCAL, &k);
    if (s == VLA_OK) s = ocl_kernel(b, OCL_K_CP_OUT_LOCAL, &k);
    if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_SFAC_LOCAL, 256, &wg_s);
    if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_OUT_LOCAL, tiles, &wg_o);
    if (s == VLA_OK && wg_s == 256 && wg_o >= (size_t)tiles) c->out_wg = (int)wg_o, c->ks = ks;
    return s;
}

/* Bytes of chunkpar.cl's real_t: its A part's matrices (Gram slots, Cholesky pieces). */
static size_t cp_real_size(const ocl_ctx *ctx) { return ctx->cp_fp64 ? sizeof(double) : sizeof(float); }

/* VLA's A part on GPUs (apart_plan): cp_gram_local where dk <= 64 and the chunk's U fits local
 * memory; cp_apart_local where its arrays fit (apart_local_bytes) for pieces of at most 64 tokens
 * (a tile of G an item); cp_aend_local where M and L^{-1} fit as packed triangles. */
static size_t apart_local_bytes(const ocl_ctx *ctx, int dk_, int Ca) {
    const size_t rs = cp_real_size(ctx), dk = (size_t)dk_, C = (size_t)Ca;
    return rs * (dk * (dk + 1) / 2 + dk * (C + 1) + C * (C + 1) / 2);
}
/* cp_gram_local where the chunk's U fits local memory. */
static vla_status gram_plan(vla_backend *b, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    cl_kernel k;
    size_t wg = 0;
    vla_status s = VLA_OK;
    if (sizeof(float) * (size_t)c->C * c->dk + LOCAL_SPARE <= ctx->local_mem) {
        s = ocl_kernel(b, OCL_K_CP_GRAM_LOCAL, &k);
        if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_GRAM_LOCAL, 256, &wg);
        if (s == VLA_OK) c->gram_wg = (int)wg;
    }
    return s;
}

/* cp_apart_seg's first segment: the chunks that hold the first dk tokens (chunkpar.cl says why). */
static int seg_first(const ocl_cp_call *c) {
    const int f = (c->dk + c->C - 1) / c->C;
    return f < c->nch ? f : c->nch;
}

/* cp_apart_seg's segments a head at S chunks a segment: the first, then the rest in S's. */
static int seg_count(const ocl_cp_call *c, int S) { return 1 + (c->nch - seg_first(c) + S - 1) / S; }

/* cp_apart_seg's arena (chunkpar.cl): A [dk][dk4], Ut [dk][c4], Zl [Ca][dk4], PT [4][Ca + dk],
 * Dg [c4], Gl [Ca][c4 + 1] floats, or A and the start's two packed triangles of real_t. */
static size_t seg_local_bytes(const ocl_ctx *ctx, int dk_, int Ca) {
    const size_t dk = (size_t)dk_, d4 = up4(dk_), c4 = up4(Ca), C = (size_t)Ca;
    const size_t piece = sizeof(float) * (dk * d4 + dk * c4 + C * (c4 + 1) + C * d4 + 4 * (C + dk) + c4);
    const size_t start = sizeof(float) * dk * d4 + 2 * cp_real_size(ctx) * dk * (dk + 1) / 2;
    return piece > start ? piece : start;
}

/* VLA's A part carried over segments (cp_apart_seg, a group a segment of S chunks of a head):
 * each group inverts M once, at its segment's start, then takes Woodbury's step a piece of Ca
 * tokens (the largest of 64, 32, 16, at most C, whose arena fits). Longer segments do fewer
 * inversions but leave fewer groups: S is the power of two that minimises
 * max(1, groups / slots) x (pieces a segment + r), r the inversion's cost in pieces (about
 * dk / 16), slots 4 groups a compute unit (as CUDA's chunkpar_seg, which counts 2 blocks a
 * multiprocessor). The group count enters as a fraction, not whole waves: a part-filled last wave
 * costs about its share. On an H100 (132 compute units, Ca = 32 at dk = 64), VLA chunked ms at
 * (8,16,64) T = 2048 for S = 2, 4, 8, 16: 4.42, 4.19, 4.09, 4.43 (the model's order: 8, 4, 2, 16;
 * whole waves chose 4); T = 8192, S = 4, 8, 16, 32: 15.54, 15.06, 14.89, 14.84 (the model takes
 * 16); the piece form 4.92 and 18.5. At dk <= 32 the piece form (pieces of 32, twice the groups)
 * was faster in every row timed: (1,4,32) T = 2048 0.266 ms against 0.281-2.10 for the segments,
 * T = 32768 1.216 against 1.238-2.80, (8,16,32) T = 4096 3.93 against 4.14-5.10; so the model
 * leaves dk <= 32 to it. VLA_OPENCL_CP_SEG=S sets S at any dk (0: cp_apart_local's pieces; auto:
 * the model); VLA_OPENCL_CP_ACHUNK=N the piece. Its carried float A is a little less accurate at
 * tiny lambda0: at lambda0 = 1e-3 the outputs' error 4.6e-6 (segments of 2 chunks) to 6.3e-6 (one
 * a head) on PoCL, 2.1e-6 a piece a group (tolerance 1e-4). */
static vla_status seg_plan(vla_backend *b, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    const char *env = getenv("VLA_OPENCL_CP_SEG"), *force = getenv("VLA_OPENCL_CP_ACHUNK");
    /* -1: S by the cost model, the default */
    const int want = env && env[0] && strcmp(env, "auto") != 0 ? atoi(env) : -1;
    if (want == 0 || (want < 0 && c->dk <= 32)) return VLA_OK;
    int Ca = c->C < 64 ? c->C : 64;
    if (force && atoi(force) >= 1 && atoi(force) < Ca) Ca = atoi(force);
    while (Ca > 16 && seg_local_bytes(ctx, c->dk, Ca) + LOCAL_SPARE > ctx->local_mem) Ca /= 2;
    const size_t bytes = seg_local_bytes(ctx, c->dk, Ca);
    if (bytes + LOCAL_SPARE > ctx->local_mem) return VLA_OK;
    cl_kernel k;
    size_t wg = 0;
    vla_status s = ocl_kernel(b, OCL_K_CP_APART_SEG, &k);
    if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_APART_SEG, 256, &wg);
    if (s != VLA_OK || wg != 256) return s;
    int S = 1;
    if (want >= 1)
        S = want < c->nch ? want : c->nch;
    else {
        const double r = c->dk / 16.0, per_piece = (double)c->C / Ca;
        const long long slots = 4LL * (ctx->compute_units ? ctx->compute_units : 1);
        double best = 0;
        for (int t = 1;; t *= 2) {
            const long long groups = (long long)c->BH * seg_count(c, t);
            const double waves = groups > slots ? (double)groups / slots : 1.0;
            const double cost = waves * (t * per_piece + r);
            if (t == 1 || cost < best) S = t, best = cost;
            if (t >= c->nch) break;
        }
    }
    c->apart_seg = S, c->Ca = Ca, c->seg_bytes = bytes;
    return VLA_OK;
}

/* cp_apart_local's piece: each chunk's A part in ppc pieces of at most Ca tokens, Ca = C up to 64
 * (32 at dk <= 32) where its arrays fit, else the longest power of two down to 16 that fits (at
 * dk = 64: 64 in float, 32 in fp64). On an H200, VLA chunked ms: at (1,4,32) T = 2048, 8192,
 * 32768 pieces of 64 -> 32 (twice the groups, half the Cholesky of G a group) 0.298 -> 0.262,
 * 0.487 -> 0.441, 1.434 -> 1.384 with the A part in float, 0.326 -> 0.293, 0.533 -> 0.492, 1.608
 * -> 1.511 in double; 16 lost (0.299, 0.557, 1.773 in double); at (8,16,64) T = 2048, 8192 in
 * float, 64 -> 32 lost (5.81 -> 5.88, 22.08 -> 22.42). VLA_OPENCL_CP_ACHUNK=N asks for pieces of
 * N, at most C and 64 (tests run small pieces with it; A/Bs the other sizes). A piece's group
 * adds its chunk's earlier tokens' U^T U to M_j itself, so the Gram sums and their prefix stay
 * per chunk (per piece they doubled the prefix's traffic at dk = 64). Its group: 128 items where
 * there are at least 4 groups a compute unit (more groups a multiprocessor for its serial steps,
 * which use at most dk items), else 256 (each group's steps faster). On an H100, VLA chunked ms,
 * 256 -> 128 items: (8,16,64) T = 2048 7.43 -> 6.95, 8192 28.96 -> 26.88; (1,4,32) T = 32768
 * 1.72 -> 1.63, but T = 2048 0.339 -> 0.369 and 8192 0.533 -> 0.545 (128 and 512 groups on 132
 * compute units). VLA_OPENCL_CP_APART_WG=64|128|256 sets it. A_end (cp_aend_local's work) runs
 * as one more group a head of cp_apart_local's launch, beside the pieces, not after them
 * (VLA_OPENCL_CP_AEND_FUSE=0: its own launch): on an H100, VLA chunked ms, own launch -> fused,
 * (1,4,32) T = 2048 0.247 -> 0.220, 8192 0.396 -> 0.362, 32768 1.188 -> 1.154; (8,16,64) T = 2048
 * takes the segment form, which keeps its own launch. */
static vla_status apart_plan(vla_backend *b, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    c->gram_wg = c->apart_local = c->aend_local = c->aend_fused = c->apart_seg = 0;
    c->Ca = c->C, c->ppc = 1;
    if (!ctx->cp_gpu || c->dk > 64 || env_on("VLA_OPENCL_CP_GLOBAL")) return VLA_OK;
    cl_kernel k;
    size_t wg = 0;
    vla_status s = seg_plan(b, c);
    const char *force = getenv("VLA_OPENCL_CP_ACHUNK");
    const int Cmax = c->dk <= 32 ? 32 : 64, Clim = c->C < 64 ? c->C : 64;
    int Ca = c->C < Cmax ? c->C : Cmax;
    if (force && atoi(force) >= 1) Ca = atoi(force) < Clim ? atoi(force) : Clim;
    while (Ca > 16 && apart_local_bytes(ctx, c->dk, Ca) + LOCAL_SPARE > ctx->local_mem) Ca /= 2;
    if (s == VLA_OK && !c->apart_seg && apart_local_bytes(ctx, c->dk, Ca) + LOCAL_SPARE <= ctx->local_mem) {
        s = ocl_kernel(b, OCL_K_CP_APART_LOCAL, &k);
        const int ppc = (c->C + Ca - 1) / Ca;
        const long long groups = (long long)c->BH * c->nch * ppc;
        const char *awg = getenv("VLA_OPENCL_CP_APART_WG");
        int want = groups >= 4LL * ctx->compute_units ? 128 : 256;
        if (awg && (atoi(awg) == 64 || atoi(awg) == 128 || atoi(awg) == 256)) want = atoi(awg);
        if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_APART_LOCAL, want, &wg);
        if (s == VLA_OK && wg == (size_t)want) c->apart_local = want, c->Ca = Ca, c->ppc = ppc;
        /* A_end in the same launch (chunkpar.cl's cp_apart_local): L^{-1} packed must fit Yd */
        c->aend_fused = c->apart_local && env_default_on("VLA_OPENCL_CP_AEND_FUSE") && 2 * (c->Ca + 1) >= c->dk + 1;
    }
    const size_t rs = cp_real_size(ctx);
    if (s == VLA_OK && 2 * rs * (size_t)c->dk * (c->dk + 1) / 2 + LOCAL_SPARE <= ctx->local_mem) {
        s = ocl_kernel(b, OCL_K_CP_AEND_LOCAL, &k);
        if (s == VLA_OK) s = ocl_wg(b, OCL_K_CP_AEND_LOCAL, 256, &wg);
        if (s == VLA_OK) c->aend_local = wg == 256;
    }
    return s == VLA_OK ? gram_plan(b, c) : s;
}

vla_status ocl_cp_plan(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    c->mode = 0;
    if (d->algorithm != VLA_ALGO_CHUNKED || env_on("VLA_OPENCL_NO_CHUNKPAR")) return VLA_OK;
    if (d->mechanism != VLA_MECH_LINEAR && d->mechanism != VLA_MECH_DELTA && d->mechanism != VLA_MECH_VLA)
        return VLA_OK;
    const int vla = d->mechanism == VLA_MECH_VLA;
    c->mode = vla && vla_apart_parallel(d, a) ? 2 : 1;
    static const ocl_kernel_id s_ids[] = {OCL_K_CP_SFAC, OCL_K_CP_WALK, OCL_K_CP_OUT, OCL_K_CP_NSUM, OCL_K_CP_NORM};
    static const ocl_kernel_id a_ids[] = {OCL_K_CP_GRAM, OCL_K_CP_PREFIX, OCL_K_CP_APART, OCL_K_CP_AEND};
    cl_kernel k;
    for (size_t i = 0; i < sizeof s_ids / sizeof s_ids[0]; i++) {
        vla_status s = ocl_kernel(b, s_ids[i], &k);
        if (s != VLA_OK) return s;
    }
    if (c->mode == 2)
        for (size_t i = 0; i < sizeof a_ids / sizeof a_ids[0]; i++) {
            vla_status s = ocl_kernel(b, a_ids[i], &k);
            if (s != VLA_OK) return s;
        }
    const size_t f = sizeof(float), rs = cp_real_size(ctx);
    const size_t BH = (size_t)c->BH, nch = (size_t)c->nch, dk = (size_t)c->dk, dv = (size_t)c->dv, C = (size_t)c->C;
    vla_status s = c->mode == 2 ? apart_plan(b, c) : VLA_OK;
    if (s != VLA_OK) return s;
    s = ocl_ws_grow(b, OCL_WS_MAPS, ocl_mul4(BH, nch, dk * (dk + dv), f));
    if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPX, ocl_mul4(BH, nch, dk * dv, f));
    if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPN, ocl_mul4(BH, nch + 1, dk, f));
    if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPT, ocl_mul4(BH, nch, dk * C, f));
    if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPO, ocl_mul4(BH, (size_t)c->T, dv, f));
    if (s == VLA_OK && c->mode == 2) {
        s = ocl_ws_grow(b, OCL_WS_CPGR, ocl_mul4(BH, nch + 2, dk * dk, rs));
        if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPZ, ocl_mul4(BH, nch, 2 * dk * C, rs));
        if (s == VLA_OK) s = ocl_ws_grow(b, OCL_WS_CPG, ocl_mul4(BH, nch, C * C, rs));
    }
    if (s == VLA_ERR_OUT_OF_MEMORY) c->mode = 0; /* its scratch does not fit: the per-head path */
    if (s == VLA_OK && c->mode) s = walk_plan(b, c);
    if (s == VLA_OK && c->mode) s = local_plan(b, c);
    return s == VLA_ERR_OUT_OF_MEMORY ? VLA_OK : s;
}

/* ---- launches (ocl_launch, ocl_internal.h): short spellings of the argument setters ---- */

static void m_(ocl_launch *l, cl_mem m) { ocl_launch_arg(l, sizeof m, &m); }
static void i_(ocl_launch *l, int v) { ocl_launch_arg(l, sizeof v, &v); }
static void f_(ocl_launch *l, float v) { ocl_launch_arg(l, sizeof v, &v); }

/* Enqueues `groups` work-groups of `want` items, fitted to the kernel by ocl_wg from 32 up;
 * below 32 as given: a CPU device's one-item groups (cp_tune). */
static vla_status cp_run(ocl_launch *l, size_t groups, int want) {
    size_t wg = (size_t)want;
    if (want >= 32) {
        vla_status s = ocl_wg(l->b, l->id, want, &wg);
        if (s != VLA_OK) return s;
    }
    return ocl_launch_run(l, groups, wg);
}

/* walk_local's flags (chunkpar.cl) */
#define WALK_FROM_I 1
#define WALK_KEEP 2
#define WALK_END 4

/* One launch of cp_walk_local (chunkpar.cl, walk_local, which says what the arguments are): nmap
 * maps a head in segments of seg, a state of dx columns. */
static vla_status walk_local_run(vla_backend *b, const ocl_cp_call *c, cl_mem maps, int nmap, int seg, cl_mem Xs,
                                 cl_mem Xio, int dx, int ncol0, int p_identity, int flags) {
    const int vb = c->walk_vb, dk = c->dk, per_head = (dx + vb - 1) / vb, nseg = (nmap + seg - 1) / seg;
    ocl_launch w = ocl_launch_start(b, (ocl_kernel_id)c->walk_id);
    m_(&w, maps), i_(&w, nmap), i_(&w, seg), m_(&w, Xs), m_(&w, Xio), i_(&w, dk), i_(&w, dx), i_(&w, ncol0),
        i_(&w, per_head), i_(&w, vb), i_(&w, p_identity), i_(&w, flags);
    ocl_launch_arg(&w, 2 * sizeof(float) * (size_t)dk * (dk + 1), NULL);
    ocl_launch_arg(&w, 2 * sizeof(float) * (size_t)dk * vb, NULL);
    return ocl_launch_run(&w, (size_t)c->BH * nseg * per_head, WALK_WG);
}

#define TRY(x)                       \
    do {                             \
        vla_status s_ = (x);         \
        if (s_ != VLA_OK) return s_; \
    } while (0)
#define WS(x) (ctx->ws[OCL_WS_##x])

vla_status ocl_cp_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const ocl_cp_call *c) {
    ocl_ctx *ctx = b->context;
    const cp_tune *tn = ctx->cp_gpu ? &tune_gpu : &tune_cpu;
    const int T = c->T, dk = c->dk, dv = c->dv, nch = c->nch, C = c->C;
    const size_t BH = (size_t)c->BH, chunks = BH * (size_t)nch;
    const int big = dk + dv > C ? dk + dv : C; /* the widest loop of a per-chunk kernel */
    const int cw = tn->chunk_wg < big ? tn->chunk_wg : big;
    if (c->mode == 2) {
        ocl_launch g = ocl_launch_start(b, c->gram_wg ? OCL_K_CP_GRAM_LOCAL : OCL_K_CP_GRAM);
        m_(&g, c->starts), i_(&g, nch), m_(&g, WS(UU)), m_(&g, WS(CPGR)), i_(&g, T), i_(&g, dk);
        if (c->gram_wg) {
            ocl_launch_arg(&g, sizeof(float) * (size_t)C * dk, NULL);
            TRY(ocl_launch_run(&g, chunks, (size_t)c->gram_wg));
        } else
            TRY(cp_run(&g, chunks, cw));
        const int span = ctx->cp_gpu ? tn->flat_wg : dk * dk; /* CPU devices: one item a head */
        const int per_head = (dk * dk + span - 1) / span;
        ocl_launch p = ocl_launch_start(b, OCL_K_CP_PREFIX);
        m_(&p, WS(CPGR)), i_(&p, nch), i_(&p, dk), i_(&p, per_head), i_(&p, span), f_(&p, (float)(1.0 / d->lambda0));
        TRY(cp_run(&p, BH * (size_t)per_head, ctx->cp_gpu ? tn->flat_wg : 1));
        if (c->apart_seg) {
            const int f0 = seg_first(c), nseg = seg_count(c, c->apart_seg);
            ocl_launch ap = ocl_launch_start(b, OCL_K_CP_APART_SEG);
            m_(&ap, c->starts), i_(&ap, nch), i_(&ap, f0), i_(&ap, c->apart_seg), m_(&ap, WS(UU)), m_(&ap, WS(CPGR)),
                m_(&ap, WS(AL)), i_(&ap, T), i_(&ap, dk), i_(&ap, c->Ca), f_(&ap, (float)d->u_scale),
                f_(&ap, (float)d->eps), f_(&ap, (float)(1.0 / d->lambda0));
            ocl_launch_arg(&ap, c->seg_bytes, NULL);
            TRY(ocl_launch_run(&ap, BH * (size_t)nseg, 256));
        } else if (c->apart_local) {
            const size_t rs = cp_real_size(ctx);
            ocl_launch ap = ocl_launch_start(b, OCL_K_CP_APART_LOCAL);
            const int Ca = c->Ca;
            const size_t pieces = chunks * (size_t)c->ppc, fused = a->A_out && c->aend_fused ? BH : 0;
            m_(&ap, c->starts), i_(&ap, nch), i_(&ap, c->ppc), m_(&ap, WS(UU)), m_(&ap, WS(CPGR)), m_(&ap, WS(AL)),
                i_(&ap, T), i_(&ap, dk), i_(&ap, Ca), f_(&ap, (float)d->u_scale), f_(&ap, (float)d->eps),
                i_(&ap, (int)pieces), m_(&ap, fused ? WS(AF) : ctx->dummy);
            ocl_launch_arg(&ap, rs * (size_t)dk * (dk + 1) / 2, NULL), ocl_launch_arg(&ap, rs * (size_t)dk * (Ca + 1), NULL);
            ocl_launch_arg(&ap, rs * (size_t)Ca * (Ca + 1) / 2, NULL);
            TRY(ocl_launch_run(&ap, pieces + fused, (size_t)c->apart_local));
        } else {
            ocl_launch ap = ocl_launch_start(b, OCL_K_CP_APART);
            m_(&ap, c->starts), i_(&ap, nch), m_(&ap, WS(UU)), m_(&ap, WS(CPGR)), m_(&ap, WS(CPZ)), m_(&ap, WS(CPG)),
                m_(&ap, WS(AL)), i_(&ap, T), i_(&ap, dk), i_(&ap, C), f_(&ap, (float)d->u_scale), f_(&ap, (float)d->eps);
            TRY(cp_run(&ap, chunks, cw));
        }
        const int aend = a->A_out && !c->aend_fused; /* aend_fused: cp_apart_local's groups did it */
        if (aend && c->aend_local) {
            const size_t rs = cp_real_size(ctx), tri = rs * (size_t)dk * (dk + 1) / 2;
            ocl_launch e = ocl_launch_start(b, OCL_K_CP_AEND_LOCAL);
            m_(&e, WS(CPGR)), i_(&e, nch), i_(&e, dk), m_(&e, WS(AF));
            ocl_launch_arg(&e, tri, NULL), ocl_launch_arg(&e, tri, NULL);
            TRY(ocl_launch_run(&e, BH, 256));
        } else if (aend) {
            ocl_launch e = ocl_launch_start(b, OCL_K_CP_AEND);
            m_(&e, WS(CPGR)), i_(&e, nch), i_(&e, dk), m_(&e, WS(AF));
            TRY(cp_run(&e, BH, dk < tn->chunk_wg ? dk : tn->chunk_wg));
        }
    }
    const cl_mem dummy = ctx->dummy, gm = c->has_g ? c->g : dummy;
    const cl_mem gam = c->has_g ? WS(GAM) : dummy, dl = c->has_g ? WS(DL) : dummy;
    const size_t f = sizeof(float);
    if (c->out_wg) {
        ocl_launch l = ocl_launch_start(b, OCL_K_CP_SFAC_LOCAL);
        m_(&l, c->starts), i_(&l, nch), m_(&l, c->kr), m_(&l, c->w), m_(&l, c->q), m_(&l, c->v), i_(&l, c->residual),
            m_(&l, WS(WR)), m_(&l, WS(Y)), m_(&l, WS(MQ)), m_(&l, WS(MAPS)), i_(&l, T), i_(&l, c->H), i_(&l, dk),
            i_(&l, dv), i_(&l, C), i_(&l, c->ks);
        ocl_launch_arg(&l, f * dk * up4(C), NULL), ocl_launch_arg(&l, f * C * up4(C), NULL);
        ocl_launch_arg(&l, f * up4(C) * c->ks, NULL);
        TRY(ocl_launch_run(&l, chunks, 256));
    } else {
        ocl_launch l = ocl_launch_start(b, OCL_K_CP_SFAC);
        m_(&l, c->starts), i_(&l, nch), m_(&l, c->kr), m_(&l, c->w), m_(&l, c->q), m_(&l, c->v), m_(&l, gm),
            i_(&l, c->has_g), i_(&l, c->residual), m_(&l, WS(WR)), m_(&l, WS(Y)), m_(&l, WS(MQ)),
            m_(&l, c->has_g ? WS(DM) : dummy), m_(&l, WS(LM)), m_(&l, gam), m_(&l, dl), m_(&l, WS(CPT)),
            m_(&l, WS(MAPS)), i_(&l, T), i_(&l, c->H), i_(&l, dk), i_(&l, dv), i_(&l, C);
        TRY(cp_run(&l, chunks, cw));
    }
    const int p_identity = !c->residual && !c->has_g; /* linear attention without g: P = I */
    if (c->walk_seg) { /* compose, carry, expand (walk_segments; only with walk_vb) */
        const int L = c->walk_seg, nseg = (nch + L - 1) / L;
        TRY(walk_local_run(b, c, WS(MAPS), nch, L, ctx->dummy, WS(CPSM), dk + dv, dk, p_identity, WALK_FROM_I | WALK_END));
        TRY(walk_local_run(b, c, WS(CPSM), nseg, nseg, WS(CPSX), WS(ST), dv, 0, p_identity, WALK_KEEP | WALK_END));
        TRY(walk_local_run(b, c, WS(MAPS), nch, L, WS(CPX), WS(CPSX), dv, 0, p_identity, WALK_KEEP));
    } else if (c->walk_vb) {
        TRY(walk_local_run(b, c, WS(MAPS), nch, nch, WS(CPX), WS(ST), dv, 0, p_identity, WALK_KEEP | WALK_END));
    } else {
        /* CPU devices: one item a head walks all columns (its loops vectorise); GPUs: walk_wg
         * columns a group. */
        const int span = ctx->cp_gpu ? tn->walk_wg : dv;
        const int per_head = (dv + span - 1) / span;
        ocl_launch w = ocl_launch_start(b, OCL_K_CP_WALK);
        m_(&w, WS(MAPS)), i_(&w, nch), m_(&w, WS(CPX)), m_(&w, WS(ST)), i_(&w, dk), i_(&w, dv), i_(&w, per_head),
            i_(&w, span), i_(&w, p_identity);
        TRY(cp_run(&w, BH * (size_t)per_head, tn->walk_wg));
    }
    if (c->out_wg) {
        ocl_launch o = ocl_launch_start(b, OCL_K_CP_OUT_LOCAL);
        m_(&o, c->starts), i_(&o, nch), m_(&o, c->q), m_(&o, WS(WR)), m_(&o, WS(Y)), m_(&o, WS(MQ)), i_(&o, c->residual),
            m_(&o, WS(CPX)), m_(&o, c->o), i_(&o, T), i_(&o, c->H), i_(&o, dk), i_(&o, dv), i_(&o, C), i_(&o, c->ks);
        ocl_launch_arg(&o, f * dk * up4(dv), NULL), ocl_launch_arg(&o, f * C * up4(dv), NULL);
        ocl_launch_arg(&o, f * C * c->ks, NULL);
        TRY(ocl_launch_run(&o, chunks, (size_t)c->out_wg));
    } else {
        ocl_launch o = ocl_launch_start(b, OCL_K_CP_OUT);
        m_(&o, c->starts), i_(&o, nch), m_(&o, c->q), m_(&o, WS(WR)), m_(&o, WS(Y)), m_(&o, WS(MQ)), m_(&o, gam),
            i_(&o, c->has_g), i_(&o, c->residual), m_(&o, WS(CPX)), m_(&o, WS(CPO)), m_(&o, c->o), i_(&o, T),
            i_(&o, c->H), i_(&o, dk), i_(&o, dv), i_(&o, C);
        TRY(cp_run(&o, chunks, cw));
    }
    const int linear = d->mechanism == VLA_MECH_LINEAR;
    if (linear || (d->mechanism == VLA_MECH_VLA && d->normalize_output)) {
        const int nw = dk < cw ? dk : cw;
        ocl_launch ns = ocl_launch_start(b, OCL_K_CP_NSUM);
        m_(&ns, c->starts), i_(&ns, nch), m_(&ns, WS(KF)), m_(&ns, WS(CPN)), i_(&ns, T), i_(&ns, dk);
        TRY(cp_run(&ns, chunks, nw));
        ocl_launch n = ocl_launch_start(b, OCL_K_CP_NORM);
        m_(&n, c->starts), i_(&n, nch), m_(&n, WS(KF)), m_(&n, c->q), m_(&n, WS(CPN)),
            m_(&n, a->n_in ? (cl_mem)a->n_in->mem : dummy), i_(&n, a->n_in != NULL), m_(&n, c->o), i_(&n, T),
            i_(&n, c->H), i_(&n, dk), i_(&n, dv), f_(&n, (float)d->eps), i_(&n, linear);
        TRY(cp_run(&n, chunks, cw < C ? cw : C));
        if (a->n_out) {
            const size_t f = sizeof(float);
            const size_t src[3] = {(size_t)nch * dk * f, 0, 0}, dst[3] = {0, 0, 0};
            const size_t region[3] = {(size_t)dk * f, BH, 1};
            cl_int err = clEnqueueCopyBufferRect(ctx->queue, WS(CPN), (cl_mem)a->n_out->mem, src, dst, region,
                                                 (size_t)(nch + 1) * dk * f, 0, (size_t)dk * f, 0, 0, NULL, NULL);
            if (err != CL_SUCCESS) return ocl_fail(b, err, "clEnqueueCopyBufferRect", "(n_out)");
        }
    }
    return VLA_OK;
}
