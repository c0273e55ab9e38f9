/* The CUDA kernels' C interface: what backends/cuda/cuda_backend.c (C) calls in the .cu files
 * (C++). The host side owns devices, streams, buffers and the workspace; this side plans each
 * call (workspace size, where each working array lives) and launches the kernels of VLA-MATH 2.
 *
 * Layouts are the library's: q, k, u [B,T,H,dk]; v, o [B,T,H,dv]; beta, g [B,T,H];
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
enum { VLACU_SOFTMAX = 0, VLACU_LINEAR = 1, VLACU_DELTA = 2, VLACU_VLA = 3 };
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

#ifdef __cplusplus
}
#endif
#endif /* VLA_CUDA_H */
