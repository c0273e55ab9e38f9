/* Private to the CUDA backend: what cuda_backend.c (the handle) and cuda_grad.c (the backward op,
 * VLA-MATH 5) share. */
#ifndef VLA_CUDA_GRAD_H
#define VLA_CUDA_GRAD_H

#include "vla_cuda.h"
#include "vla_impl.h"

/* cuda_backend.c: the handle's device index, its stream (a cudaStream_t) and device description. */
typedef struct vla_cuda_grad_host {
    int device;
    void *stream;
    vlacu_device info;
} vla_cuda_grad_host;
void vla_cuda_grad_host_of(vla_backend *b, vla_cuda_grad_host *h);

/* cuda_backend.c: the handle's cached workspace grown to at least `need` bytes (the forward's and the
 * backward's: one at a time on the stream). Nothing is written when it fails. */
vla_status vla_cuda_grad_workspace(vla_backend *b, size_t need, void **ws, size_t *bytes);

/* cuda_grad.c: the backend's attention_backward (validated, resolved arguments). */
vla_status vla_cuda_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g);

#endif /* VLA_CUDA_GRAD_H */
