/* The CUDA backend, host side: devices ("cuda" = "cuda:0", "cuda:N"), one stream per handle,
 * device buffers, a workspace cached in the handle and grown as needed, and the algorithm
 * choice. Kernels and their planning are in kernels/cuda/ (vla_cuda.h is the interface).
 *
 * Errors: every CUDA error becomes a status (VLA_ERR_OUT_OF_MEMORY for
 * cudaErrorMemoryAllocation, else VLA_ERR_BACKEND) with CUDA's own message; nothing aborts.
 * Work is enqueued on the handle's stream: uploads and downloads wait for it (so they see every
 * earlier call's results), vla_backend_synchronize waits for it, and a forward call returns as
 * soon as its kernels are queued. The stream is an ordinary (blocking) stream, so work on the
 * legacy default stream (stream 0) is ordered with it: events recorded on stream 0 around a
 * call time the call. The nn ops of vla/nn.h are in cuda_nn.c (the .nn table); a bad token id
 * their kernels find is reported by the next vla_backend_synchronize or download. */
#include "cuda_nn.h"
#include "cuda_grad.h"
#include "vla_cuda.h"
#include "vla_impl.h"

#include <cuda_runtime_api.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The graph cache: a call repeated with the same arguments, buffers and workspace
 * replays the kernels captured (cudaStreamBeginCapture) on its second occurrence, one
 * cudaGraphLaunch instead of a launch per kernel. The kernels read their inputs when they run,
 * so new data in the same buffers is seen; any other argument or buffer is another key. */
#define GRAPH_SLOTS 16
typedef struct graph_slot {
    vlacu_args key;          /* zeroed before it is filled: compared with memcmp */
    void *ws;
    int used;                /* the slot holds a key */
    cudaGraphExec_t exec;    /* NULL until the key's second call */
    unsigned long long last; /* least recently used goes first */
} graph_slot;

typedef struct cuda_context {
    int device;
    cudaStream_t stream;
    vlacu_device info;
    void *ws; /* workspace, grown as needed */
    size_t ws_bytes;
    cudaEvent_t ev_start, ev_stop; /* vla_backend_timer_*, created on first use */
    int have_events;
    cudaStream_t aux;           /* a second stream for work beside the main one (vlacu_aux) */
    cudaEvent_t fork, join;
    int have_aux;               /* 0: could not be created, everything runs on `stream` */
    graph_slot graphs[GRAPH_SLOTS];
    unsigned long long graph_tick;
    int graphs_off;             /* a capture failed on this handle: launch directly from then on */
    vla_cuda_nn *nn;            /* the nn ops' state (cuda_nn.c), made by the first nn call */
} cuda_context;

static cuda_context *ctx_of(const vla_backend *b) { return (cuda_context *)b->context; }

/* The status for a CUDA error, with CUDA's message, recorded on the handle. Clears the runtime's
 * last error (a sticky error stays: the next call reports it again). */
static vla_status cuda_fail(vla_backend *b, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    const vla_status s = e == cudaErrorMemoryAllocation ? VLA_ERR_OUT_OF_MEMORY : VLA_ERR_BACKEND;
    return vla_fail(b, s, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(b, call, what)                                                                                        \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return cuda_fail((b), e_, (what));                                                      \
    } while (0)

static vla_status use_device(vla_backend *b) {
    CUDA_TRY(b, cudaSetDevice(ctx_of(b)->device), "cudaSetDevice");
    return VLA_OK;
}

void vla_cuda_nn_host_of(vla_backend *b, vla_cuda_nn_host *h) {
    cuda_context *c = ctx_of(b);
    h->device = c->device;
    h->stream = (void *)c->stream;
    h->state = &c->nn;
}

/* ---- buffers ---- */

static vla_status cuda_buffer_alloc(vla_backend *b, size_t bytes, void **mem) {
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "vla_buffer_alloc: cudaMalloc(%zu bytes)", bytes);
        return cuda_fail(b, e, what);
    }
    *mem = p;
    return VLA_OK;
}

static void cuda_buffer_free(vla_backend *b, void *mem) {
    if (use_device(b) != VLA_OK) return;
    /* Work still queued may read the buffer: let it finish first. */
    (void)cudaStreamSynchronize(ctx_of(b)->stream);
    (void)cudaFree(mem);
    (void)cudaGetLastError();
}

static vla_status cuda_buffer_upload(vla_backend *b, void *mem, size_t off, const void *src, size_t n) {
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    cuda_context *c = ctx_of(b);
    CUDA_TRY(b, cudaMemcpyAsync((char *)mem + off, src, n, cudaMemcpyHostToDevice, c->stream), "vla_buffer_upload");
    CUDA_TRY(b, cudaStreamSynchronize(c->stream), "vla_buffer_upload: cudaStreamSynchronize");
    return VLA_OK;
}

static vla_status cuda_buffer_download(vla_backend *b, const void *mem, size_t off, void *dst, size_t n) {
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    cuda_context *c = ctx_of(b);
    CUDA_TRY(b, cudaMemcpyAsync(dst, (const char *)mem + off, n, cudaMemcpyDeviceToHost, c->stream),
             "vla_buffer_download");
    CUDA_TRY(b, cudaStreamSynchronize(c->stream), "vla_buffer_download: cudaStreamSynchronize");
    return vla_cuda_nn_check(b, c->nn, "vla_buffer_download"); /* a bad token an nn call's kernels found */
}

static vla_status cuda_synchronize(vla_backend *b) {
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    CUDA_TRY(b, cudaStreamSynchronize(ctx_of(b)->stream), "vla_backend_synchronize");
    return vla_cuda_nn_check(b, ctx_of(b)->nn, "vla_backend_synchronize");
}

/* ---- algorithm choice ---- */

/* AUTO: the recurrence for short pieces (decoding: one launch) and for delta-paper (its only
 * algorithm: kernels/cuda/vla_delta_paper.cu). VLA: the chunked form wherever
 * the chunk-parallel kernels apply (R = 0, dk <= 64): the fastest VLA algorithm at every target
 * shape on the H200 (benchmarks/results/2026-11-30-h200-chunkpar/). Otherwise (and for linear
 * and delta) the chunked form when the heads fill at least half the multiprocessors (one block
 * per head); the two-level form when they do not and the sequence is long enough to split. */
static vla_status cuda_resolve(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, vla_algorithm *out) {
    if (d->algorithm != VLA_ALGO_AUTO) {
        *out = d->algorithm;
        return VLA_OK;
    }
    const cuda_context *c = ctx_of(b);
    const long long heads = (long long)a->B * a->H;
    switch (d->mechanism) {
    case VLA_MECH_SOFTMAX: *out = VLA_ALGO_FUSED; break;
    case VLA_MECH_LINEAR:
    case VLA_MECH_DELTA: *out = a->T <= 16 ? VLA_ALGO_SEQUENTIAL : VLA_ALGO_CHUNKED; break;
    case VLA_MECH_DELTA_PAPER: *out = VLA_ALGO_SEQUENTIAL; break; /* its only algorithm */
    case VLA_MECH_VLA: {
        const long long nchunks = (long long)vlacu_count_chunks(a->T, d->chunk, d->refresh, a->t0);
        if (a->T <= 16) *out = VLA_ALGO_SEQUENTIAL;
        else if (vlacu_chunkpar_ok(a->dk, a->dv, d->chunk, d->refresh, &c->info)) *out = VLA_ALGO_CHUNKED;
        else if (d->refresh == 0 && 2 * heads <= c->info.sm_count && nchunks >= 4) *out = VLA_ALGO_TWO_LEVEL;
        else *out = VLA_ALGO_CHUNKED;
        break;
    }
    }
    return VLA_OK;
}

/* ---- the op ---- */

static void graph_drop(graph_slot *g) {
    if (g->exec) (void)cudaGraphExecDestroy(g->exec); /* (an in-flight launch still completes) */
    memset(g, 0, sizeof *g);
}

static void graphs_clear(cuda_context *c) {
    for (int i = 0; i < GRAPH_SLOTS; i++) graph_drop(&c->graphs[i]);
}

/* The slot holding this key with the current workspace, or NULL. */
static graph_slot *graph_find(cuda_context *c, const vlacu_args *x) {
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        graph_slot *g = &c->graphs[i];
        if (g->used && g->ws == c->ws && !memcmp(&g->key, x, sizeof *x)) {
            g->last = ++c->graph_tick;
            return g;
        }
    }
    return NULL;
}

/* A captured call again: 1 when its graph is launched. Before the workspace is sized: a key's
 * workspace fitted when it was captured, and growing the workspace drops every graph. */
static int graph_replay(cuda_context *c, const vlacu_args *x) {
    if (c->graphs_off || !vlacu_graph_ok(x)) return 0;
    graph_slot *g = graph_find(c, x);
    if (!g || !g->exec) return 0;
    if (cudaGraphLaunch(g->exec, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        graph_drop(g);
        return 0;
    }
    return 1;
}

/* The slot of this key, or a fresh one (the least recently used, emptied) with *fresh = 1. */
static graph_slot *graph_slot_for(cuda_context *c, const vlacu_args *x, int *fresh) {
    graph_slot *g = graph_find(c, x);
    if (g) {
        *fresh = 0;
        return g;
    }
    graph_slot *victim = &c->graphs[0];
    for (int i = 1; i < GRAPH_SLOTS; i++) {
        g = &c->graphs[i];
        if (!victim->used) break;
        if (!g->used || g->last < victim->last) victim = g;
    }
    graph_drop(victim);
    c->graph_tick++;
    victim->key = *x;
    victim->ws = c->ws;
    victim->used = 1;
    victim->last = c->graph_tick;
    *fresh = 1;
    return victim;
}

/* Replays or captures the call when the cache applies: 1 when its work is enqueued, 0 when the
 * caller should launch directly (first call of a key, or the capture failed: nothing enqueued). */
static int graph_forward(cuda_context *c, const vlacu_args *x, const vlacu_aux *aux) {
    if (c->graphs_off || !vlacu_graph_ok(x)) return 0;
    int fresh = 0;
    graph_slot *g = graph_slot_for(c, x, &fresh);
    if (fresh) return 0; /* the first call runs directly (and sets every kernel's attributes) */
    if (!g->exec) {
        cudaGraph_t graph = NULL;
        if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
            (void)cudaGetLastError();
            c->graphs_off = 1;
            return 0;
        }
        const int fe = vlacu_forward(x, &c->info, c->ws, c->ws_bytes, (void *)c->stream, aux);
        const cudaError_t ee = cudaStreamEndCapture(c->stream, &graph);
        cudaError_t ie = cudaErrorInvalidValue;
        if (fe == 0 && ee == cudaSuccess && graph)
            ie = cudaGraphInstantiateWithFlags(&g->exec, graph, cudaGraphInstantiateFlagUseNodePriority);
        if (graph) (void)cudaGraphDestroy(graph);
        if (ie != cudaSuccess) {
            (void)cudaGetLastError();
            g->exec = NULL;
            graph_drop(g);
            if (fe == 0) c->graphs_off = 1; /* (a failing call is reported by the direct launch) */
            return 0;
        }
    }
    if (cudaGraphLaunch(g->exec, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        graph_drop(g);
        return 0;
    }
    return 1;
}

/* Grows the cached workspace to `need` bytes. Nothing has been written when this fails. */
static vla_status ensure_workspace(vla_backend *b, size_t need, const char *fn) {
    cuda_context *c = ctx_of(b);
    if (need <= c->ws_bytes) return VLA_OK;
    graphs_clear(c); /* (they hold the old workspace's addresses) */
    if (c->ws) {
        /* Earlier calls may still use it. */
        cudaError_t se = cudaStreamSynchronize(c->stream);
        if (se != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "%s: cudaStreamSynchronize", fn);
            return cuda_fail(b, se, what);
        }
        (void)cudaFree(c->ws);
        c->ws = NULL;
        c->ws_bytes = 0;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, need);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vla_fail(b, e == cudaErrorMemoryAllocation ? VLA_ERR_OUT_OF_MEMORY : VLA_ERR_BACKEND,
                        "%s: could not allocate %.1f MiB of device workspace: CUDA error %d (%s): %s", fn,
                        (double)need / 1048576.0, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    c->ws = p;
    c->ws_bytes = need;
    return VLA_OK;
}

static const float *dptr(const vla_buffer *buf) { return buf ? (const float *)buf->mem : NULL; }

static vla_status cuda_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    cuda_context *c = ctx_of(b);
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    (void)cudaGetLastError(); /* a stale, non-sticky error must not be blamed on this call */

    const long long BH = (long long)a->B * a->H;
    const int dmax = a->dk > a->dv ? a->dk : a->dv;
    if (BH * a->T > INT_MAX || (long long)a->H * dmax > INT_MAX)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "vla_attention_forward: B*H*T = %lld is too large for the cuda backend's grids (max %d)",
                        BH * a->T, INT_MAX);

    const int vla = d->mechanism == VLA_MECH_VLA;
    vlacu_args x;
    memset(&x, 0, sizeof x);
    x.mech = (int)d->mechanism;
    x.algo = (int)d->algorithm;
    x.B = a->B, x.T = a->T, x.H = a->H, x.dk = a->dk, x.dv = a->dv;
    x.t0 = a->t0;
    x.chunk = d->chunk;
    x.segment_chunks = d->segment_chunks;
    x.refresh = vla ? d->refresh : 0; /* the refresh (and its chunk cuts) is VLA's alone */
    x.elu1 = d->feature_map == VLA_FMAP_ELU1;
    x.normalize = vla && d->normalize_output;
    x.lambda0 = d->lambda0, x.eps = d->eps, x.rho = d->refresh_size, x.u_scale = d->u_scale, x.scale = d->scale;
    x.q = dptr(a->q), x.k = dptr(a->k), x.v = dptr(a->v), x.u = dptr(a->u), x.beta = dptr(a->beta), x.g = dptr(a->g);
    x.o = (float *)a->o->mem;
    x.S_in = dptr(a->S_in), x.A_in = dptr(a->A_in), x.n_in = dptr(a->n_in);
    x.S_out = a->S_out ? (float *)a->S_out->mem : NULL;
    x.A_out = a->A_out ? (float *)a->A_out->mem : NULL;
    x.n_out = a->n_out ? (float *)a->n_out->mem : NULL;

    if (graph_replay(c, &x)) return VLA_OK;
    size_t need = 0;
    int e = vlacu_workspace_bytes(&x, &c->info, &need);
    if (e == (int)cudaErrorInvalidConfiguration)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "vla_attention_forward: %s with dk = %d, dv = %d needs more shared memory than %s has",
                        vla_mechanism_name(d->mechanism), a->dk, a->dv, b->device);
    if (e != 0) return cuda_fail(b, (cudaError_t)e, "vla_attention_forward: planning");
    if (need == SIZE_MAX)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_attention_forward: the %s workspace for T = %d overflows size_t",
                        vla_algorithm_name(d->algorithm), a->T);
    s = ensure_workspace(b, need, "vla_attention_forward");
    if (s != VLA_OK) return s;
    const vlacu_aux aux = {(void *)c->aux, (void *)c->fork, (void *)c->join};
    if (graph_forward(c, &x, c->have_aux ? &aux : NULL)) return VLA_OK;
    e = vlacu_forward(&x, &c->info, c->ws, c->ws_bytes, (void *)c->stream, c->have_aux ? &aux : NULL);
    if (e != 0) {
        char what[128];
        snprintf(what, sizeof what, "vla_attention_forward (%s, %s)", vla_mechanism_name(d->mechanism),
                 vla_algorithm_name(d->algorithm));
        return cuda_fail(b, (cudaError_t)e, what);
    }
    return VLA_OK;
}

/* ---- what the backward (cuda_grad.c) takes from the handle ---- */

void vla_cuda_grad_host_of(vla_backend *b, vla_cuda_grad_host *h) {
    const cuda_context *c = ctx_of(b);
    h->device = c->device;
    h->stream = (void *)c->stream;
    h->info = c->info;
}

vla_status vla_cuda_grad_workspace(vla_backend *b, size_t need, void **ws, size_t *bytes) {
    const vla_status s = ensure_workspace(b, need, "vla_attention_backward");
    if (s != VLA_OK) return s;
    *ws = ctx_of(b)->ws;
    *bytes = ctx_of(b)->ws_bytes;
    return VLA_OK;
}

/* ---- timing: CUDA events on the handle's stream ---- */

static vla_status cuda_timer_start(vla_backend *b) {
    cuda_context *c = ctx_of(b);
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    if (!c->have_events) {
        CUDA_TRY(b, cudaEventCreate(&c->ev_start), "vla_backend_timer_start: cudaEventCreate");
        cudaError_t e = cudaEventCreate(&c->ev_stop);
        if (e != cudaSuccess) {
            (void)cudaEventDestroy(c->ev_start);
            return cuda_fail(b, e, "vla_backend_timer_start: cudaEventCreate");
        }
        c->have_events = 1;
    }
    CUDA_TRY(b, cudaEventRecord(c->ev_start, c->stream), "vla_backend_timer_start: cudaEventRecord");
    return VLA_OK;
}

static vla_status cuda_timer_stop(vla_backend *b, double *ms) {
    cuda_context *c = ctx_of(b);
    vla_status s = use_device(b);
    if (s != VLA_OK) return s;
    float f = 0.0f;
    CUDA_TRY(b, cudaEventRecord(c->ev_stop, c->stream), "vla_backend_timer_stop: cudaEventRecord");
    CUDA_TRY(b, cudaEventSynchronize(c->ev_stop), "vla_backend_timer_stop: cudaEventSynchronize");
    CUDA_TRY(b, cudaEventElapsedTime(&f, c->ev_start, c->ev_stop), "vla_backend_timer_stop: cudaEventElapsedTime");
    *ms = f;
    return VLA_OK;
}

/* ---- registration ---- */

static void cuda_close(vla_backend *b) {
    cuda_context *c = ctx_of(b);
    if (!c) return;
    if (cudaSetDevice(c->device) == cudaSuccess) {
        (void)cudaStreamSynchronize(c->stream);
        graphs_clear(c);
        vla_cuda_nn_free(c->nn);
        if (c->ws) (void)cudaFree(c->ws);
        if (c->have_events) {
            (void)cudaEventDestroy(c->ev_start);
            (void)cudaEventDestroy(c->ev_stop);
        }
        if (c->have_aux) {
            (void)cudaStreamSynchronize(c->aux);
            (void)cudaEventDestroy(c->fork);
            (void)cudaEventDestroy(c->join);
            (void)cudaStreamDestroy(c->aux);
        }
        (void)cudaStreamDestroy(c->stream);
    }
    (void)cudaGetLastError();
    free(c);
    b->context = NULL;
}

static const vla_backend_iface cuda_iface = {
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .buffer_upload = cuda_buffer_upload,
    .buffer_download = cuda_buffer_download,
    .buffer_host_ptr = NULL,
    .synchronize = cuda_synchronize,
    .set_threads = NULL,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
    .resolve_algorithm = cuda_resolve,
    .attention_forward = cuda_forward,
    .attention_backward = vla_cuda_backward,
    /* No backward_auto_chunked: the chunk form of the backward (kernels/cuda/vla_grad_chunk*.cu)
     * against the recurrent kernel, on an H100 (benchmarks/results/2026-12-06-h100-backward): fwd + bwd
     * faster at every point timed, (B,H,d) = (1,4,32) T = 2048..32768 and (8,16,64) T = 2048, 8192
     * (1.9-3.8x for VLA, 4-48x for linear attention and DeltaNet), and the trainer's whole step at
     * T = 73 (vla-train, VLA 6.46 -> 4.38 ms, linear 3.43 -> 2.03, DeltaNet 3.37 -> 2.59: commit
     * 8c8452e's benchmarks/results/2026-12-06-h100-train-speed, in git history). So AUTO's
     * backward follows the forward's choice (recurrent at T <= 16, chunked above). */
    .nn = &vla_cuda_nn_iface,
    .close = cuda_close,
};

static void describe(const struct cudaDeviceProp *p, char *out, size_t n) {
    snprintf(out, n, "%.120s (CUDA, sm_%d%d, %d SMs, %.1f GiB)", p->name, p->major, p->minor, p->multiProcessorCount,
             (double)p->totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

/* "" -> 0; otherwise a plain decimal index. -1 when the text is not one. */
static int parse_index(const char *s) {
    if (!s[0]) return 0;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || p - s > 8) return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

static vla_status cuda_open(const char *device, vla_backend *b) {
    const int idx = parse_index(device);
    if (idx < 0)
        return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND,
                        "vla_backend_open: 'cuda:%s' is not a CUDA device name (use cuda or cuda:N)", device);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND, "vla_backend_open: no CUDA device usable on this machine: %s (%s)",
                        cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (idx >= count)
        return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND, "vla_backend_open: no device cuda:%d (this machine has %d CUDA device%s)",
                        idx, count, count == 1 ? "" : "s");
    cuda_context *c = calloc(1, sizeof *c);
    if (!c) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_backend_open: out of host memory");
    c->device = idx;
    struct cudaDeviceProp prop;
    /* Stream priorities: the main stream (the calls' critical path) at the device's highest, the
     * second one (work beside it: the chunk-parallel output's first half) at its lowest, so that
     * when both have blocks waiting for a multiprocessor the main stream's go first. Timelines
     * (VLA_CP_TIMELINE) showed the segmented walk's last launch waiting up to 40 us behind the second
     * stream's output blocks ((1,4,32) T = 32768); DeltaNet, which still runs that half beside the
     * walk there, is 2% faster at T = 8192 and 32768 with the priorities (VLA now folds it into its
     * A part at those shapes: no change). VLA_CUDA_PRIO=0 (development) leaves both at the default. */
    int prio_lo = 0, prio_hi = 0;
    const char *pe = getenv("VLA_CUDA_PRIO");
    if ((e = cudaSetDevice(idx)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, idx)) != cudaSuccess ||
        (!(pe && pe[0] == '0') && (e = cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi)) != cudaSuccess) ||
        (e = cudaStreamCreateWithPriority(&c->stream, cudaStreamDefault, prio_hi)) != cudaSuccess) {
        free(c);
        return cuda_fail(b, e, "vla_backend_open");
    }
    /* the second stream and its events: optional (without them the kernels run in one stream) */
    c->have_aux = cudaStreamCreateWithPriority(&c->aux, cudaStreamDefault, prio_lo) == cudaSuccess;
    if (c->have_aux && cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaStreamDestroy(c->aux);
        c->have_aux = 0;
    } else if (c->have_aux && cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaEventDestroy(c->fork);
        (void)cudaStreamDestroy(c->aux);
        c->have_aux = 0;
    }
    (void)cudaGetLastError();
    c->info.sm_count = prop.multiProcessorCount;
    c->info.smem_optin = prop.sharedMemPerBlockOptin > prop.sharedMemPerBlock ? prop.sharedMemPerBlockOptin
                                                                              : prop.sharedMemPerBlock;
    c->info.cc_major = prop.major;
    c->info.cc_minor = prop.minor;
    b->iface = &cuda_iface;
    b->context = c;
    snprintf(b->name, sizeof b->name, "cuda:%d", idx);
    describe(&prop, b->device, sizeof b->device);
    return VLA_OK;
}

static void cuda_list(vla_device_info *out, int max, int *count) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return; /* no driver or no device: nothing to list */
    }
    for (int i = 0; i < n; i++) {
        if (*count < max) {
            vla_device_info *d = &out[*count];
            memset(d, 0, sizeof *d);
            snprintf(d->name, sizeof d->name, "cuda:%d", i);
            struct cudaDeviceProp prop;
            if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) describe(&prop, d->description, sizeof d->description);
            else snprintf(d->description, sizeof d->description, "CUDA device %d", i);
            (void)cudaGetLastError();
            d->is_gpu = 1;
        }
        (*count)++;
    }
}

const vla_backend_entry vla_cuda_backend_entry = {"cuda", cuda_open, cuda_list};
