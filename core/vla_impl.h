/* Private: what a backend implements, and helpers the core shares with backends.
 * Objects are { iface; context } as in ggml: the core owns validation and dispatch, a
 * backend only computes on arguments that are already known to be valid. */
#ifndef VLA_IMPL_H
#define VLA_IMPL_H

#include "vla/vla.h"

#include <stdarg.h>

#define VLA_MSG_LEN 1024

typedef struct vla_backend_iface {
    /* Buffers. alloc returns an opaque device handle in *mem. */
    vla_status (*buffer_alloc)(vla_backend *b, size_t bytes, void **mem);
    void (*buffer_free)(vla_backend *b, void *mem);
    vla_status (*buffer_upload)(vla_backend *b, void *mem, size_t off, const void *src, size_t n);
    vla_status (*buffer_download)(vla_backend *b, const void *mem, size_t off, void *dst, size_t n);
    void *(*buffer_host_ptr)(vla_backend *b, void *mem); /* optional: NULL when not host memory */

    vla_status (*synchronize)(vla_backend *b); /* optional */
    vla_status (*set_threads)(vla_backend *b, int threads); /* optional */
    /* Optional device-clock timing (vla_backend_timer_*). timer_stop waits for the work and
     * returns VLA_ERR_UNSUPPORTED when the driver could not time it (the core then uses the host
     * clock it started beside). */
    vla_status (*timer_start)(vla_backend *b);
    vla_status (*timer_stop)(vla_backend *b, double *ms);

    /* Resolves AUTO (and checks the algorithm is implemented). */
    vla_status (*resolve_algorithm)(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                    vla_algorithm *out);
    /* The op, on validated arguments, with d->algorithm already resolved (never AUTO), and
     * d->u_scale and d->scale resolved to their numeric values. */
    vla_status (*attention_forward)(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a);
    /* Optional: the backward op, validated and resolved as the forward (d->algorithm is SEQUENTIAL
     * or CHUNKED, or FUSED for softmax). NULL: VLA_ERR_UNSUPPORTED. */
    vla_status (*attention_backward)(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                     const vla_attn_grads *g);
    /* Optional: whether the backward's AUTO keeps the chunked form where the forward's AUTO chose it
     * (nonzero), or takes the sequential form (0), from where the backend's timings put them. NULL:
     * it keeps it. */
    int (*backward_auto_chunked)(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a);
    /* Optional: the nn ops of vla/nn.h (core/nn_impl.h). NULL: VLA_ERR_UNSUPPORTED. */
    const struct vla_nn_iface *nn;

    void (*close)(vla_backend *b);
} vla_backend_iface;

struct vla_backend {
    const vla_backend_iface *iface;
    void *context;
    char name[64];
    char device[192];
    char message[VLA_MSG_LEN];
    double timer_host_start; /* seconds, CLOCK_MONOTONIC; < 0 when no timer is running */
};

struct vla_buffer {
    vla_backend *backend;
    void *mem;
    size_t size;
};

/* Records a failure: formats the message into the handle (if any) and the thread's last
 * message, and returns `s` so callers can write `return vla_fail(b, VLA_ERR_..., "...")`. */
vla_status vla_fail(vla_backend *b, vla_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void vla_clear_message(vla_backend *b);

/* Backend entry points (one per backend folder). `device` is the text after "name:" or "". */
typedef struct vla_backend_entry {
    const char *name;
    vla_status (*open)(const char *device, vla_backend *b);
    /* Appends this backend's devices to out[*count..max) and adds them to *count. */
    void (*list)(vla_device_info *out, int max, int *count);
} vla_backend_entry;

extern const vla_backend_entry vla_cpu_backend_entry;
#ifdef VLA_HAVE_CUDA
extern const vla_backend_entry vla_cuda_backend_entry;
#endif
#ifdef VLA_HAVE_OPENCL
extern const vla_backend_entry vla_opencl_backend_entry;
#endif

#endif /* VLA_IMPL_H */
