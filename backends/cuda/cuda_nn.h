/* Private to the CUDA backend: what its two host files share for the nn ops (vla/nn.h).
 * cuda_backend.c owns the handle (device, stream) and keeps a pointer to the nn state;
 * cuda_nn.c owns that state (created by the first nn call) and the ops. */
#ifndef VLA_CUDA_NN_H
#define VLA_CUDA_NN_H

#include "nn_impl.h"

typedef struct vla_cuda_nn vla_cuda_nn;

/* cuda_backend.c: the handle's device index, its stream (a cudaStream_t) and the slot where the
 * handle keeps its nn state (NULL until the first nn call). */
typedef struct vla_cuda_nn_host {
    int device;
    void *stream;
    vla_cuda_nn **state;
} vla_cuda_nn_host;
void vla_cuda_nn_host_of(vla_backend *b, vla_cuda_nn_host *h);

/* cuda_nn.c: the table (backend iface .nn). */
extern const vla_nn_iface vla_cuda_nn_iface;

/* cuda_nn.c: called once the handle's stream has been waited for (vla_backend_synchronize, a
 * download). VLA_ERR_INVALID_PARAMETER, with a message naming the nn call and the first bad
 * position, when an earlier embedding or cross-entropy call's kernels found a token or target out
 * of range (then the record is cleared: reported once); VLA_OK otherwise, and for s == NULL.
 * `where` names the call that waited. */
vla_status vla_cuda_nn_check(vla_backend *b, vla_cuda_nn *s, const char *where);

/* cuda_nn.c: frees the state; at close, with the stream idle. NULL: nothing. */
void vla_cuda_nn_free(vla_cuda_nn *s);

#endif /* VLA_CUDA_NN_H */
