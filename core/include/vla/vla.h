/* libvla: Variational Linear Attention and the attention mechanisms it is measured against.
 *
 * The maths every op computes is defined in docs/VLA-MATH.md; this header only says how to
 * call it.
 *
 * Shape conventions (row-major, last index fastest):
 *   q, k, u   [B, T, H, dk]        v, o   [B, T, H, dv]        beta, g   [B, T, H]
 *   S         [B, H, dk, dv]  (S transposed, as flash-linear-attention stores it)
 *   A         [B, H, dk, dk]       n      [B, H, dk]
 *
 * Every call returns a vla_status. Nothing in the library aborts or exits the process.
 * On failure the backend handle keeps a message naming the argument and the problem
 * (vla_backend_message), and the calling thread keeps the same text (vla_last_message),
 * which also covers failures that happen before there is a handle. */
#ifndef VLA_VLA_H
#define VLA_VLA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VLA_VERSION_MAJOR 0
#define VLA_VERSION_MINOR 1
#define VLA_VERSION_PATCH 0
#define VLA_VERSION_STRING "0.1.0"
/* One integer that orders versions: major*10000 + minor*100 + patch. */
#define VLA_VERSION (VLA_VERSION_MAJOR * 10000 + VLA_VERSION_MINOR * 100 + VLA_VERSION_PATCH)

/* The version of the library actually linked (may differ from the header's). */
const char *vla_version(void);
int vla_version_number(void);

/* ---- status ------------------------------------------------------------------------ */
/* Bands: 0 ok; 1..99 argument errors (the caller can fix the call); 100..199 library and
 * backend errors (the machine or the library). Each value has its own test. */
typedef enum vla_status {
    VLA_OK = 0,
    VLA_ERR_NULL_ARGUMENT = 1,       /* a required pointer is NULL */
    VLA_ERR_INVALID_DIMENSION = 2,   /* B, T, H <= 0, or dk, dv outside 1..256 */
    VLA_ERR_SHAPE_MISMATCH = 3,      /* a buffer is too small for the shape it is given */
    VLA_ERR_INVALID_PARAMETER = 4,   /* lambda0 <= 0, eps <= 0, chunk < 1, R < 0, NaN, ... */
    VLA_ERR_INVALID_COMBINATION = 5, /* parameters valid alone but not together */
    VLA_ERR_UNKNOWN_BACKEND = 6,     /* no backend or device of that name on this machine */
    VLA_ERR_UNKNOWN_NAME = 7,        /* unknown mechanism, algorithm, feature map or preset */
    VLA_ERR_UNSUPPORTED = 8,         /* defined, but this backend or build lacks it */
    VLA_ERR_WRONG_BACKEND = 9,       /* a buffer belongs to another backend handle */
    VLA_ERR_OUT_OF_RANGE = 10,       /* buffer offset + size past the buffer's end */
    VLA_ERR_ALIASING = 11,           /* an output buffer overlaps an input it must not */
    VLA_ERR_OUT_OF_MEMORY = 100,     /* host or device allocation failed */
    VLA_ERR_BACKEND = 101,           /* the driver (CUDA, OpenCL) reported an error */
    VLA_ERR_INTERNAL = 102           /* a bug in libvla: please report it */
} vla_status;

/* A short fixed description of a status ("invalid parameter"). Never NULL. */
const char *vla_status_string(vla_status s);
/* The message of the last failing call on this thread ("" if none). */
const char *vla_last_message(void);

/* ---- backends and devices -------------------------------------------------------------- */
typedef struct vla_backend vla_backend;

/* Names: "cpu"; "cuda", "cuda:N"; "opencl", "opencl:P:D" (platform, device index), when built
 * in. "auto" (or NULL) picks the best backend present: CUDA, then an OpenCL GPU, then CPU. */
vla_status vla_backend_open(const char *name, vla_backend **out);
void vla_backend_close(vla_backend *b); /* NULL is fine */
/* The canonical name of an open backend ("cpu", "cuda:0", ...) and its device in words. */
const char *vla_backend_name(const vla_backend *b);
const char *vla_backend_device(const vla_backend *b);
/* The last error message on this handle ("" if none). */
const char *vla_backend_message(const vla_backend *b);
/* Waits until all work queued on the backend is done. */
vla_status vla_backend_synchronize(vla_backend *b);
/* Times the work queued on the backend between the two calls by the device's own clock: CUDA
 * events on CUDA, profiling events of OpenCL markers on OpenCL, CLOCK_MONOTONIC on the CPU (and
 * wherever the driver cannot time, which *device_clock then says with 0). timer_stop waits for
 * that work and writes the elapsed milliseconds. device_clock may be NULL. */
vla_status vla_backend_timer_start(vla_backend *b);
vla_status vla_backend_timer_stop(vla_backend *b, double *ms, int *device_clock);
/* CPU backend: number of threads used (0 = OpenMP's default). Others ignore it. */
vla_status vla_backend_set_threads(vla_backend *b, int threads);

typedef struct vla_device_info {
    char name[64];         /* what vla_backend_open takes: "cpu", "cuda:0", "opencl:0:1" */
    char description[192]; /* the device in words */
    int is_gpu;
} vla_device_info;

/* Lists the backends/devices this machine has. Writes at most `max` entries to `out` (may be
 * NULL when max == 0) and the total available to *count. */
vla_status vla_list_devices(vla_device_info *out, int max, int *count);

/* ---- buffers: memory owned by one backend ------------------------------------------------ */
typedef struct vla_buffer vla_buffer;

vla_status vla_buffer_alloc(vla_backend *b, size_t bytes, vla_buffer **out);
void vla_buffer_free(vla_buffer *buf); /* NULL is fine */
size_t vla_buffer_size(const vla_buffer *buf);
/* Copies between host memory and the buffer, at a byte offset into the buffer. Synchronous. */
vla_status vla_buffer_upload(vla_buffer *buf, size_t offset, const void *src, size_t bytes);
vla_status vla_buffer_download(const vla_buffer *buf, size_t offset, void *dst, size_t bytes);
/* The CPU backend's buffers are host memory: this returns it (NULL for other backends). */
void *vla_buffer_host_ptr(vla_buffer *buf);

/* ---- the attention op ---------------------------------------------------------------------- */
typedef enum vla_mechanism {
    VLA_MECH_SOFTMAX = 0,
    VLA_MECH_LINEAR = 1,
    VLA_MECH_DELTA = 2,
    VLA_MECH_VLA = 3,
    /* "delta-paper": the DeltaNet the paper's code trains (VLA-MATH 1, last subsection), for
     * reproducing its baseline; not the published DeltaNet (that is VLA_MECH_DELTA):
     *   q~ = phi(q) (phi = desc.feature_map, default elu1, on q only), k^ = normalize(k),
     *   S_t = diag(g_t) S_{t-1} + (v_t - S_{t-1} k^_t) k^_t^T,  o_t = S_t q~_t,
     * with a per-row gate g [B,T,H,dv] (NULL: 1) and no write strength (beta is refused).
     * Sequential only: a gate per value row gives every row its own transition matrix, so
     * there is no shared chunk (WY) form. */
    VLA_MECH_DELTA_PAPER = 4
} vla_mechanism;

typedef enum vla_algorithm {
    VLA_ALGO_AUTO = 0,       /* the backend picks the fastest exact one for the shape */
    VLA_ALGO_SEQUENTIAL = 1, /* token by token (linear, delta, vla) */
    VLA_ALGO_SCAN = 2,       /* Blelloch scan over per-token affine maps (vla) */
    VLA_ALGO_CHUNKED = 3,    /* UT/WY chunk form (linear, delta, vla) */
    VLA_ALGO_TWO_LEVEL = 4,  /* chunks inside, scan across segments (vla) */
    VLA_ALGO_FUSED = 5       /* softmax's one algorithm: fused online softmax */
} vla_algorithm;

typedef enum vla_feature_map {
    VLA_FMAP_NONE = 0,
    VLA_FMAP_ELU1 = 1 /* elu(x) + 1 */
} vla_feature_map;

typedef enum vla_dtype { VLA_F32 = 0 } vla_dtype; /* bf16 later */

/* Every parameter of VLA-MATH. Fill it with vla_attn_desc_init, then change what differs.
 * Parameters a mechanism does not use are ignored. */
typedef struct vla_attn_desc {
    vla_mechanism mechanism;
    vla_algorithm algorithm; /* default AUTO */
    vla_dtype dtype;         /* default F32 */
    int chunk;               /* chunk size C of the chunked forms; default 64 */
    double lambda0;          /* VLA: A_0 = I / lambda0; default 0.1; must be > 0 */
    double eps;              /* every normalisation floor and denominator; default 1e-4 */
    int refresh;             /* VLA refresh period R; 0 = never (default) */
    double refresh_size;     /* VLA refresh size rho; default 1e-3 */
    double u_scale;          /* VLA s_u; default 1; 0 = 1/sqrt(dk) (the paper's setting) */
    vla_feature_map feature_map; /* default ELU1 for linear (its definition), NONE otherwise */
    int normalize_output;    /* VLA only: o = S q~ / max(q~ . n, eps); needs a feature map */
    double scale;            /* softmax logit scale; 0 = 1/sqrt(dk) (default) */
    int segment_chunks;      /* two-level: chunks per segment; 0 = chosen by the backend */
    int reserved[8];         /* zero; room for later parameters without breaking the ABI */
} vla_attn_desc;

/* Defaults of VLA-MATH for `mechanism`. */
vla_status vla_attn_desc_init(vla_attn_desc *d, vla_mechanism mechanism);
/* Applies a named preset on top of `d`. "paper": VLA with phi = elu+1 on q and k, normalised
 * output, s_u = 1/sqrt(dk) (u_scale = 0), lambda0 0.1, eps 1e-4, R 20, rho 1e-3. The paper's
 * model computes u from the raw key; pass it as args.u (without it, u = s_u * k^). */
vla_status vla_attn_desc_preset(vla_attn_desc *d, const char *preset);

/* Names <-> enums, for tools. Return VLA_ERR_UNKNOWN_NAME for an unknown name. */
const char *vla_mechanism_name(vla_mechanism m);
const char *vla_algorithm_name(vla_algorithm a);
const char *vla_feature_map_name(vla_feature_map f);
vla_status vla_mechanism_from_name(const char *name, vla_mechanism *out);
vla_status vla_algorithm_from_name(const char *name, vla_algorithm *out);
vla_status vla_feature_map_from_name(const char *name, vla_feature_map *out);
/* 1 if VLA-MATH defines `algo` for `mechanism` (AUTO always is). */
int vla_algorithm_defined(vla_mechanism mechanism, vla_algorithm algo);

/* The tensors of one call. Buffers must belong to the backend the op runs on. Optional ones
 * may be NULL. Inputs are never written. S_out may be S_in (likewise A, n): in-place update
 * for streaming. o must not overlap any input. */
typedef struct vla_attn_args {
    int B, T, H, dk, dv;
    int64_t t0;            /* absolute position of this piece's first token (refresh) */
    const vla_buffer *q, *k, *v; /* required */
    const vla_buffer *u;   /* VLA penalty vectors [B,T,H,dk]; NULL: u = s_u * k^ */
    const vla_buffer *beta;/* DeltaNet write strength [B,T,H]; NULL: 1 */
    const vla_buffer *g;   /* DeltaNet decay [B,T,H] (delta-paper: gate [B,T,H,dv]); NULL: 1 */
    vla_buffer *o;         /* required output [B,T,H,dv] */
    const vla_buffer *S_in, *A_in, *n_in; /* NULL: S_0 = 0, A_0 = I/lambda0, n_0 = 0 */
    vla_buffer *S_out, *A_out, *n_out;    /* NULL: not returned */
} vla_attn_args;

/* Resolves AUTO for a shape: what vla_attention_forward would run. */
vla_status vla_attention_resolve_algorithm(vla_backend *b, const vla_attn_desc *d,
                                           const vla_attn_args *a, vla_algorithm *out);

/* Runs the forward op. Validates everything first; on an error nothing is written. On CUDA the
 * call returns once its kernels are queued, and a call repeated with the same arguments and
 * buffers is captured as a CUDA graph on its second occurrence and replayed after that (new data
 * in the same buffers is read; environment VLA_CUDA_GRAPHS=0 turns the cache off). */
vla_status vla_attention_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a);

/* ---- the backward op (docs/VLA-MATH.md section 5) ------------------------------------------ */
/* Gradients of one forward call. The backward recomputes what it needs from the forward's
 * inputs (nothing has to be saved by the forward): `args` is the forward's argument set, of which
 * q, k, v, u, beta, g and the initial states S_in, A_in, n_in are read; o and S_out, A_out, n_out
 * are neither read nor written. `d` is the forward's descriptor (its algorithm picks the backward's
 * algorithm: sequential, chunked, or AUTO).
 *
 * Every output is optional (NULL: not computed) and is overwritten, not accumulated into:
 *   dq, dk, du [B,T,H,dk]   dv [B,T,H,dv]   dbeta, dg [B,T,H] (delta-paper: dg [B,T,H,dv])
 *   dS_0 [B,H,dk,dv]        dA_0 [B,H,dk,dk] (its symmetric part: A is symmetric)   dn_0 [B,H,dk]
 * du needs args.u; dbeta and dg need args.beta / args.g; dS_0 needs a mechanism with S (not
 * softmax), dA_0 VLA, dn_0 linear or VLA with normalised output. Upstream: dO [B,T,H,dv] is
 * required; dS_end, dA_end, dn_end (the loss's gradients with respect to the final states, same
 * layouts as the states) are optional, absent meaning zero. No output may overlap an input or
 * another output. On an error nothing is written. */
typedef struct vla_attn_grads {
    const vla_buffer *dO;                        /* required [B,T,H,dv] */
    const vla_buffer *dS_end, *dA_end, *dn_end;  /* optional upstream of the final states */
    vla_buffer *dq, *dk, *dv, *du;               /* optional outputs */
    vla_buffer *dbeta, *dg;
    vla_buffer *dS_0, *dA_0, *dn_0;
} vla_attn_grads;

vla_status vla_attention_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                  const vla_attn_grads *g);

#ifdef __cplusplus
}
#endif
#endif /* VLA_VLA_H */
