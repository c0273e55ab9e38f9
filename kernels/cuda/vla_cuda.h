/* The CUDA kernels' C interface: what backends/cuda/cuda_backend.c (C) calls in the .cu files
 * (C++). The host side owns devices, streams, buffers and the workspace; this side plans each
 * call (workspace size, where each working array lives) and launches the kernels of VLA-MATH 2.
 *
 * Layouts are the library's: q, k, u [B,T,H,dk]; v, o [B,T,H,dv]; beta, g [B,T,H] (delta-paper's g
 * [B,T,H,dv]);
 * S [B,H,dk,dv] (S transposed); A [B,H,dk,dk]; n [B,H,dk]. All pointers are device pointers.
 * Nothing here allocates: the caller provides a workspace of vlacu_workspace_bytes() bytes
 * (or more), 256-byte aligned. Every function returns a cudaError_t as an int (0 = success). */
#ifndef VLA_CUDA_H
#define VLA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same numbering as vla_mechanism / vla_algorithm / vla_feature_map (vla.h). */
enum { VLACU_SOFTMAX = 0, VLACU_LINEAR = 1, VLACU_DELTA = 2, VLACU_VLA = 3, VLACU_DELTA_PAPER = 4 };
enum { VLACU_SEQUENTIAL = 1, VLACU_SCAN = 2, VLACU_CHUNKED = 3, VLACU_TWO_LEVEL = 4, VLACU_FUSED = 5 };

typedef struct vlacu_device {
    int sm_count;          /* multiprocessors */
    size_t smem_optin;     /* largest dynamic + static shared memory one block may use (bytes) */
    int cc_major, cc_minor;
} vlacu_device;

typedef struct vlacu_args {
    int mech, algo;        /* resolved: never AUTO */
    int B, T, H, dk, dv;
    int64_t t0;
    int chunk;             /* C */
    int segment_chunks;    /* two-level: chunks per segment; 0 = choose */
    int refresh;           /* R */
    int elu1;              /* feature map elu+1 on q and k */
    int normalize;         /* VLA normalised output */
    double lambda0, eps, rho, u_scale, scale; /* u_scale and scale already resolved (> 0) */
    const float *q, *k, *v, *u, *beta, *g;   /* u, beta, g may be NULL */
    float *o;
    const float *S_in, *A_in, *n_in;         /* may be NULL */
    float *S_out, *A_out, *n_out;            /* may be NULL; may equal the matching *_in */
} vlacu_args;

/* Bytes of device workspace the call needs (0 is possible). Returns 0 on success, or a
 * cudaError_t (a kernel's attributes could not be read). *bytes = SIZE_MAX when the sizes
 * overflow. */
int vlacu_workspace_bytes(const vlacu_args *a, const vlacu_device *dev, size_t *bytes);

/* A second stream and two events (cudaStream_t, cudaEvent_t created without timing) the caller
 * owns, for work that can run beside the main stream's: the chunk-parallel form's output
 * precomputation runs there while the S walk runs on the main stream (fork: recorded on the main
 * stream, waited on by `stream`; join: the other way). */
typedef struct vlacu_aux {
    void *stream, *fork, *join;
} vlacu_aux;

/* Enqueues the call on `stream` (a cudaStream_t). Does not wait for it. aux may be NULL (then
 * everything runs on `stream`). */
int vlacu_forward(const vlacu_args *a, const vlacu_device *dev, void *workspace, size_t workspace_bytes,
                  void *stream, const vlacu_aux *aux);

/* ---- the backward op (VLA-MATH 5; kernels/cuda/vla_grad_*.cu) ----
 * The gradients of one forward call with arguments `a` (its o and final states are not used). Upstream:
 * dO [B,T,H,dv] (required), dS_end [B,H,dk,dv], dA_end [B,H,dk,dk], dn_end [B,H,dk] (null: zero).
 * Outputs, each null when not requested, overwritten: dq, dk, du [B,T,H,dk]; dv [B,T,H,dv];
 * dbeta, dg [B,T,H] (delta-paper: dg [B,T,H,dv]); dS_0, dA_0 (its symmetric part), dn_0 in the states'
 * layouts. None may overlap
 * an input or another output. */
typedef struct vlacu_grads {
    const float *dO, *dS_end, *dA_end, *dn_end;
    float *dq, *dk, *dv, *du, *dbeta, *dg, *dS_0, *dA_0, *dn_0;
} vlacu_grads;

/* Bytes of device workspace the backward of `a` needs, as vlacu_workspace_bytes (SIZE_MAX on
 * overflow; cudaErrorInvalidConfiguration when the shared memory of the device cannot hold a kernel's
 * smallest form). */
int vlacu_backward_workspace_bytes(const vlacu_args *a, const vlacu_device *dev, size_t *bytes);

/* Enqueues the backward on `stream`; does not wait for it. Every algorithm gives the same gradient:
 * linear, delta and vla run the chunk form (vla_grad_chunk*.cu) when a->algo is chunked and its blocks
 * fit shared memory, else the recurrent backward with checkpoints every a->chunk tokens. */
int vlacu_backward(const vlacu_args *a, const vlacu_grads *g, const vlacu_device *dev, void *workspace,
                   size_t workspace_bytes, void *stream);

/* 1 when a call with these arguments may be captured into a CUDA graph and replayed (the backend's
 * graph cache): it enqueues more than one kernel (chunked, two-level, scan), the build is not the
 * CPU emulator, no development timer is on (VLA_CUDA_KERNEL_TIMES, VLA_CP_TIMELINE,
 * VLA_CUDA_HOST_TIMES: they synchronise inside the call) and VLA_CUDA_GRAPHS is not 0. */
int vlacu_graph_ok(const vlacu_args *a);

/* Chunks of a piece: at most C tokens, and every refresh point (t0 + t + 1) % R == 0 ends one
 * (VLA-MATH 2.3). Host and device use the same closed form; exposed for the tests. */
int64_t vlacu_count_chunks(int T, int C, int R, int64_t t0);
void vlacu_chunk_bounds(int64_t k, int T, int C, int R, int64_t t0, int *ts, int *te);

/* 1 when the chunked algorithm runs on the chunk-parallel kernels (vla_chunkpar.cu) for these
 * parameters on this device: VLA with R = 0, dk <= 64, chunk <= 64, and shared memory that fits. */
int vlacu_chunkpar_ok(int dk, int dv, int chunk, int refresh, const vlacu_device *dev);

/* Two-level: chunks per segment the backend picks for this shape (when segment_chunks = 0). */
int vlacu_pick_segment(const vlacu_args *a, const vlacu_device *dev, int64_t nchunks);

/* ---- the nn ops of vla/nn.h (vla_nn.cu; host side backends/cuda/cuda_nn.c) ----
 * Pointers are device pointers to a tensor's first element; sizes and meanings are nn.h's, and
 * so is the order of the arguments. Each function enqueues on `stream` and returns at once
 * (0 or a cudaError_t as an int). No float atomics: every reduction is cut by the sizes alone
 * and summed in a fixed order, so the same inputs give the same bits on every run. Functions
 * with a `scratch` take a device scratch of vlacu_nn_*_scratch() bytes (256-byte aligned),
 * which they may overwrite. `err` is the op's device error word (start: all ones): a token or
 * target out of range lowers it to (index << 32 | (uint32_t)value), atomically, so it ends as
 * the first bad position; the kernels never read or write outside a tensor because of one. */
int vlacu_nn_fill(float *x, size_t n, float value, void *stream);
int vlacu_nn_gelu_forward(float *y, const float *x, size_t n, void *stream);
int vlacu_nn_gelu_backward(float *dx, const float *dy, const float *x, size_t n, void *stream);
int vlacu_nn_sigmoid_forward(float *y, const float *x, size_t n, void *stream);
int vlacu_nn_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n, void *stream);
int vlacu_nn_add_forward(float *y, const float *a, const float *c, size_t n, void *stream);
int vlacu_nn_add_backward(float *da, float *dc, const float *dy, size_t n, void *stream); /* da, dc may be NULL */
/* y[m, :] = row[:] for m < M (y [M, N]). */
int vlacu_nn_rows_set(float *y, const float *row, int M, int N, void *stream);
/* C[m, n] = op(A) op(B) + beta C, row-major (op = transpose when ta / tb), as the CPU backend's
 * cpu_gemm: a plain FP32 tiled kernel, for builds without cuBLAS (the emulator) or when
 * VLA_CUDA_NN_GEMM=own asks for it. beta = 0 does not read C. */
int vlacu_nn_gemm(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc, void *stream);
/* out[N] += the column sums of A[M, N] (a bias gradient). */
size_t vlacu_nn_colsum_scratch(int M, int N);
int vlacu_nn_colsum_add(float *out, const float *A, int M, int N, void *scratch, void *stream);
int vlacu_nn_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                               int M, int C, float eps, void *stream); /* mean, rstd may be NULL */
/* dx, dw, db may be NULL; the scratch is used when dw or db is not. */
size_t vlacu_nn_layernorm_scratch(int M, int C);
int vlacu_nn_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, int M, int C, void *scratch, void *stream);
int vlacu_nn_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                               int V, unsigned long long *err, void *stream); /* wpe may be NULL */
/* B * T <= INT_MAX (the caller checks). dwte, dwpe may be NULL; the tokens are checked anyway. */
size_t vlacu_nn_embedding_scratch(int BT);
int vlacu_nn_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C,
                                int V, void *scratch, unsigned long long *err, void *stream);
/* loss, dlogits may be NULL; dlogits may equal logits. */
size_t vlacu_nn_crossentropy_scratch(int M);
int vlacu_nn_crossentropy(float *loss, float *dlogits, const float *logits, const int32_t *targets, int M, int V,
                          void *scratch, unsigned long long *err, void *stream);
size_t vlacu_nn_global_norm_scratch(size_t n);
int vlacu_nn_global_norm(float *norm, const float *x, size_t n, void *scratch, void *stream);
/* AdamW's per-step scalars, computed on the host as the CPU backend computes them. */
typedef struct vlacu_adamw {
    float decay;     /* 1 - lr weight_decay */
    float w1;        /* 1 - beta1 */
    float beta2, w2; /* beta2, 1 - beta2 */
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;
    float max_norm;  /* used when norm != NULL */
} vlacu_adamw;
int vlacu_nn_adamw(float *param, float *m, float *v, const float *grad, const float *norm, size_t n,
                   const vlacu_adamw *h, void *stream); /* norm (device, 1 float) may be NULL: no clipping */

#ifdef __cplusplus
}
#endif
#endif /* VLA_CUDA_H */
