/* The CPU reference backend: host-memory buffers, OpenMP threads over (batch, head), and a
 * dispatcher that gathers each head into contiguous arrays for the kernels. */
#include "cpu_kernels.h"
#include "nn_impl.h"
#include "vla_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef VLA_HAVE_CBLAS
#include <cblas.h>
#endif

typedef struct cpu_context {
    int threads; /* 0: OpenMP's default */
} cpu_context;

/* ---- buffers: 64-byte aligned host memory ---- */

static vla_status cpu_buffer_alloc(vla_backend *b, size_t bytes, void **mem) {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_buffer_alloc: %zu bytes is too large", bytes);
    void *p = aligned_alloc(64, rounded);
    if (!p) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_buffer_alloc: could not allocate %zu bytes of host memory", bytes);
    *mem = p;
    return VLA_OK;
}
static void cpu_buffer_free(vla_backend *b, void *mem) {
    (void)b;
    free(mem);
}
static vla_status cpu_buffer_upload(vla_backend *b, void *mem, size_t off, const void *src, size_t n) {
    (void)b;
    memmove((char *)mem + off, src, n);
    return VLA_OK;
}
static vla_status cpu_buffer_download(vla_backend *b, const void *mem, size_t off, void *dst, size_t n) {
    (void)b;
    memmove(dst, (const char *)mem + off, n);
    return VLA_OK;
}
static void *cpu_buffer_host_ptr(vla_backend *b, void *mem) {
    (void)b;
    return mem;
}

static int max_threads(const vla_backend *b) {
    const cpu_context *ctx = b->context;
#ifdef _OPENMP
    return ctx->threads > 0 ? ctx->threads : omp_get_max_threads();
#else
    (void)ctx;
    return 1;
#endif
}

int cpu_max_threads(const vla_backend *b) { return max_threads(b); }

void cpu_split_threads(const vla_backend *b, int heads, int *outer, int *inner) {
    const int nt = max_threads(b);
    *outer = heads < nt ? heads : nt;
    *inner = *outer == 1 ? nt : 1;
}

vla_status cpu_head_work_alloc(vla_backend *b, const char *fn, const vla_attn_desc *d, int T, size_t per_head,
                               size_t elem, int threads, void **mem) {
    if (per_head > SIZE_MAX / elem / (size_t)threads)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "%s: work memory for T = %d overflows", fn, T);
    *mem = aligned_alloc(64, per_head * elem * threads);
    if (!*mem)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY,
                        "%s: could not allocate %.1f MiB of work memory (%s, T = %d, %d threads)", fn,
                        (double)per_head * elem * threads / 1048576.0, vla_algorithm_name(d->algorithm), T, threads);
    return VLA_OK;
}

static void cpu_describe(char *out, size_t n, int threads);

static vla_status cpu_set_threads(vla_backend *b, int threads) {
    ((cpu_context *)b->context)->threads = threads;
    cpu_describe(b->device, sizeof b->device, max_threads(b)); /* the description names the count */
    return VLA_OK;
}

/* ---- algorithm choice ---- */

/* AUTO, from the CPU measurements in benchmarks/results/2026-11-30-cpu-vla-*.md (2 cores,
 * OpenBLAS): VLA chunked beats sequential from T = 2C on (1.4x at d = 32, 3.2x at d = 64) and
 * beat two-level even with one head (9.3 vs 10.9 ms at B = H = 1, d = 32, T = 8192), so
 * two-level is never picked here. DeltaNet and linear attention: the chunk form only pays at
 * d >= 64 (DeltaNet sequential was faster at every T at d = 32). */
static vla_status cpu_resolve(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, vla_algorithm *out) {
    (void)b;
    if (d->algorithm != VLA_ALGO_AUTO) {
        *out = d->algorithm;
        return VLA_OK;
    }
    const int long_piece = a->T >= 2 * d->chunk;
    switch (d->mechanism) {
    case VLA_MECH_SOFTMAX: *out = VLA_ALGO_FUSED; break;
    case VLA_MECH_LINEAR:
    case VLA_MECH_DELTA: *out = long_piece && a->dk >= 64 ? VLA_ALGO_CHUNKED : VLA_ALGO_SEQUENTIAL; break;
    case VLA_MECH_VLA: *out = long_piece ? VLA_ALGO_CHUNKED : VLA_ALGO_SEQUENTIAL; break;
    case VLA_MECH_DELTA_PAPER: *out = VLA_ALGO_SEQUENTIAL; break; /* its only algorithm */
    }
    return VLA_OK;
}

/* The backward's chunked form against its sequential one on 2 cores (backward = fwd+bwd minus the
 * forward, median ms; benchmarks/results/2026-12-06-cpu-backward-algos): at (B,H,d) = (1,4,32),
 * T = 1024 / 4096, chunked is slower for VLA (18.3 / 72.8 against 12.4 / 51.1) and DeltaNet
 * (11.8 / 46.3 against 7.0 / 28.8), and for linear attention even, then slower (8.0 / 31.7 against
 * 8.9 / 23.0); at (2,4,64) it
 * is faster for linear attention (36.1 / 161 against 46.7 / 189) and DeltaNet (55.3 / 229 against
 * 59.2 / 253) and still slower for VLA (106 / 448 against 94.0 / 405). So AUTO keeps chunked for
 * linear attention and DeltaNet from dk = 64, and takes sequential for VLA. */
static int cpu_backward_auto_chunked(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    (void)b;
    return d->mechanism != VLA_MECH_VLA && a->dk >= 64;
}

typedef struct kernel_entry {
    vla_mechanism mech;
    vla_algorithm algo;
    cpu_kernel_fn run;
    cpu_work_fn work;
} kernel_entry;

static const kernel_entry kernels[] = {
    {VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, cpu_softmax_fused, cpu_softmax_fused_work},
    {VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, cpu_linear_sequential, cpu_linear_sequential_work},
    {VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, cpu_linear_chunked, cpu_linear_chunked_work},
    {VLA_MECH_DELTA, VLA_ALGO_SEQUENTIAL, cpu_delta_sequential, cpu_delta_sequential_work},
    {VLA_MECH_DELTA, VLA_ALGO_CHUNKED, cpu_delta_chunked, cpu_delta_chunked_work},
    {VLA_MECH_DELTA_PAPER, VLA_ALGO_SEQUENTIAL, cpu_delta_paper_sequential, cpu_delta_paper_sequential_work},
    {VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, cpu_vla_sequential, cpu_vla_sequential_work},
    {VLA_MECH_VLA, VLA_ALGO_SCAN, cpu_vla_scan, cpu_vla_scan_work},
    {VLA_MECH_VLA, VLA_ALGO_CHUNKED, cpu_vla_chunked, cpu_vla_chunked_work},
    {VLA_MECH_VLA, VLA_ALGO_TWO_LEVEL, cpu_vla_two_level, cpu_vla_two_level_work},
};

/* ---- gathering one head ---- */

static float elu1(float x) { return x > 0.0f ? x + 1.0f : expf(x); }

/* dst[T, D] = src[b, :, h, :] of a [B, T, H, D] tensor, with the feature map applied. */
static void gather(const float *src, const vla_attn_args *a, int b, int h, int D, vla_feature_map f, float *dst) {
    for (int t = 0; t < a->T; t++) {
        const float *s = src + cpu_row_offset(a, b, t, h, D);
        float *d = dst + (size_t)t * D;
        if (f == VLA_FMAP_ELU1)
            for (int i = 0; i < D; i++) d[i] = elu1(s[i]);
        else
            memcpy(d, s, sizeof(float) * D);
    }
}

/* x[T, D] rows -> scale * x / max(||x||, eps). */
static void normalize_rows(const float *x, float *y, int T, int D, float eps, float scale) {
    for (int t = 0; t < T; t++) {
        const float *r = x + (size_t)t * D;
        const float inv = scale / fmaxf(sqrtf(cpu_dot(r, r, D)), eps);
        for (int i = 0; i < D; i++) y[(size_t)t * D + i] = r[i] * inv;
    }
}

/* The contiguous per-head arrays one thread needs, laid out in one allocation. */
typedef struct head_layout {
    size_t q, kf, kh, u, v, beta, g, o, ST, A, n, work, total;
} head_layout;

/* gate_width: g's row length (1; delta-paper dv). */
static head_layout layout(const vla_attn_args *a, size_t gate_width, size_t work) {
    head_layout L;
    const size_t T = (size_t)a->T, dk = (size_t)a->dk, dv = (size_t)a->dv;
    size_t off = 0;
#define TAKE(field, n)             \
    L.field = off;                 \
    off += ((n) + 15) / 16 * 16; /* keep every array 64-byte aligned */
    TAKE(q, T * dk) TAKE(kf, T * dk) TAKE(kh, T * dk) TAKE(u, T * dk) TAKE(v, T * dv) TAKE(beta, T) TAKE(g, T * gate_width)
    TAKE(o, T * dv) TAKE(ST, dk * dv) TAKE(A, dk * dk) TAKE(n, dk) TAKE(work, work)
#undef TAKE
    L.total = off;
    return L;
}

static const float *host(const vla_buffer *buf) { return buf ? (const float *)buf->mem : NULL; }

/* Runs one (batch, head): gather, initial states, kernel, scatter. */
static void run_head(const vla_attn_desc *d, const vla_attn_args *a, const kernel_entry *k, const cpu_params *p,
                     const head_layout *L, float *mem, int b, int hh) {
    const int T = a->T, dk = a->dk, dv = a->dv;
    const size_t bh = (size_t)b * a->H + hh;
    const int vla = d->mechanism == VLA_MECH_VLA, delta = d->mechanism == VLA_MECH_DELTA;
    const int paper_delta = d->mechanism == VLA_MECH_DELTA_PAPER; /* phi on q only; g [T, dv] */
    cpu_head h = {.T = T, .dk = dk, .dv = dv, .t0 = a->t0};
    float *q = mem + L->q, *kf = mem + L->kf, *kh = mem + L->kh, *u = mem + L->u, *v = mem + L->v;
    float *beta = mem + L->beta, *g = mem + L->g;

    gather(host(a->q), a, b, hh, dk, d->feature_map, q);
    gather(host(a->k), a, b, hh, dk, paper_delta ? VLA_FMAP_NONE : d->feature_map, kf);
    gather(host(a->v), a, b, hh, dv, VLA_FMAP_NONE, v);
    if (vla || delta || paper_delta) normalize_rows(kf, kh, T, dk, (float)d->eps, 1.0f);
    if (vla) {
        if (a->u) { /* u_t = s_u normalize(u_t): the raw u, no feature map */
            gather(host(a->u), a, b, hh, dk, VLA_FMAP_NONE, u);
            normalize_rows(u, u, T, dk, (float)d->eps, (float)d->u_scale);
        } else {
            for (size_t i = 0; i < (size_t)T * dk; i++) u[i] = (float)d->u_scale * kh[i];
        }
    }
    if (a->beta) gather(host(a->beta), a, b, hh, 1, VLA_FMAP_NONE, beta);
    if (a->g) gather(host(a->g), a, b, hh, paper_delta ? dv : 1, VLA_FMAP_NONE, g);

    h.q = q; h.kf = kf; h.kh = kh; h.u = u; h.v = v;
    h.beta = a->beta ? beta : NULL;
    h.g = a->g ? g : NULL;
    h.o = mem + L->o;
    h.ST = mem + L->ST;
    h.A = mem + L->A;
    h.n = mem + L->n;

    /* Initial states: given, or S_0 = 0, A_0 = I / lambda0, n_0 = 0. */
    if (a->S_in) memcpy(h.ST, host(a->S_in) + bh * dk * dv, sizeof(float) * dk * dv);
    else memset(h.ST, 0, sizeof(float) * dk * dv);
    if (a->A_in) memcpy(h.A, host(a->A_in) + bh * dk * dk, sizeof(float) * dk * dk);
    else {
        memset(h.A, 0, sizeof(float) * dk * dk);
        for (int i = 0; i < dk; i++) h.A[(size_t)i * dk + i] = (float)(1.0 / d->lambda0);
    }
    if (a->n_in) memcpy(h.n, host(a->n_in) + bh * dk, sizeof(float) * dk);
    else memset(h.n, 0, sizeof(float) * dk);

    k->run(&h, p, mem + L->work);

    /* Scatter o [T, dv] into [B, T, H, dv] and the states into their slices. */
    float *o = (float *)a->o->mem;
    for (int t = 0; t < T; t++)
        memcpy(o + cpu_row_offset(a, b, t, hh, dv), h.o + (size_t)t * dv, sizeof(float) * dv);
    if (a->S_out) memcpy((float *)a->S_out->mem + bh * dk * dv, h.ST, sizeof(float) * dk * dv);
    if (a->A_out) memcpy((float *)a->A_out->mem + bh * dk * dk, h.A, sizeof(float) * dk * dk);
    if (a->n_out) memcpy((float *)a->n_out->mem + bh * dk, h.n, sizeof(float) * dk);
}

static vla_status cpu_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    const kernel_entry *k = NULL;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (kernels[i].mech == d->mechanism && kernels[i].algo == d->algorithm) k = &kernels[i];
    if (!k)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "vla_attention_forward: the cpu backend has no %s for %s",
                        vla_algorithm_name(d->algorithm), vla_mechanism_name(d->mechanism));

    const int heads = a->B * a->H;
    int outer = 1, inner = 1;
    cpu_split_threads(b, heads, &outer, &inner);
    cpu_params p = {.chunk = d->chunk, .segment_chunks = d->segment_chunks, .eps = (float)d->eps,
                    .refresh = d->refresh, .rho = (float)d->refresh_size, .normalize = d->normalize_output,
                    .scale = (float)d->scale, .inner_threads = inner};
    const size_t gate_width = d->mechanism == VLA_MECH_DELTA_PAPER ? (size_t)a->dv : 1;
    const head_layout L = layout(a, gate_width, k->work(a->T, a->dk, a->dv, &p));
    void *work = NULL;
    vla_status s = cpu_head_work_alloc(b, "vla_attention_forward", d, a->T, L.total, sizeof(float), outer, &work);
    if (s != VLA_OK) return s;
    float *mem = work;
#ifdef VLA_HAVE_CBLAS
    openblas_set_num_threads(1); /* our threads are over heads; nested BLAS threads only contend */
#endif

#pragma omp parallel for num_threads(outer) schedule(dynamic, 1) if (outer > 1)
    for (int bh = 0; bh < heads; bh++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        run_head(d, a, k, &p, &L, mem + (size_t)me * L.total, bh / a->H, bh % a->H);
    }
    free(mem);
    return VLA_OK;
}

/* ---- registration ---- */

static void cpu_close(vla_backend *b) { free(b->context); }

static const vla_backend_iface cpu_iface = {
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_upload = cpu_buffer_upload,
    .buffer_download = cpu_buffer_download,
    .buffer_host_ptr = cpu_buffer_host_ptr,
    .synchronize = NULL,
    .set_threads = cpu_set_threads,
    .resolve_algorithm = cpu_resolve,
    .backward_auto_chunked = cpu_backward_auto_chunked,
    .attention_forward = cpu_forward,
    .nn = &vla_cpu_nn_iface,
    .attention_backward = cpu_backward,
    .close = cpu_close,
};

static void cpu_describe(char *out, size_t n, int threads) {
    snprintf(out, n, "host CPU, %d OpenMP threads%s", threads,
#ifdef VLA_HAVE_CBLAS
             ", OpenBLAS"
#else
             ""
#endif
    );
}

static vla_status cpu_open(const char *device, vla_backend *b) {
    if (device[0] != '\0' && strcmp(device, "0") != 0)
        return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND, "vla_backend_open: the cpu backend has one device (cpu or cpu:0), not 'cpu:%s'",
                        device);
    cpu_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_backend_open: out of host memory");
    b->iface = &cpu_iface;
    b->context = ctx;
    snprintf(b->name, sizeof b->name, "cpu");
    cpu_describe(b->device, sizeof b->device, max_threads(b));
    return VLA_OK;
}

static void cpu_list(vla_device_info *out, int max, int *count) {
    if (*count < max) {
        vla_device_info *d = &out[*count];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "cpu");
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        cpu_describe(d->description, sizeof d->description, threads);
        d->is_gpu = 0;
    }
    (*count)++;
}

const vla_backend_entry vla_cpu_backend_entry = {"cpu", cpu_open, cpu_list};
