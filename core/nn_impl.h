/* Private: the table of nn ops (vla/nn.h) a backend implements.
 *
 * Each slot has the public function's signature and meaning, without its name's vla_nn_ prefix.
 * core/nn.c has already checked everything the signature shows: the handle, NULLs, that each
 * buffer is on this backend, sizes >= 1, every element range inside its buffer, aliasing, the
 * parameters. A slot therefore only computes. What the core cannot check is the content of the
 * int32 tensors: a token or target out of range must give VLA_ERR_INVALID_PARAMETER (through
 * vla_fail), never an access outside a tensor. Offsets are in elements: a backend addresses
 * (float *)mem + off (CUDA, the CPU) or passes the offset to its kernel (OpenCL, CLBlast).
 *
 * The table is optional as a whole (vla_backend_iface.nn == NULL) and slot by slot (a NULL slot
 * answers VLA_ERR_UNSUPPORTED), so a backend can bring the ops one at a time. */
#ifndef VLA_NN_IMPL_H
#define VLA_NN_IMPL_H

#include "vla/nn.h"
#include "vla_impl.h"

typedef struct vla_nn_iface {
    vla_status (*fill)(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value);
    vla_status (*matmul_forward)(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                 const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off, int M,
                                 int N, int K);
    vla_status (*matmul_backward)(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                  vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                  const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M,
                                  int N, int K);
    vla_status (*layernorm_forward)(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean, size_t mean_off,
                                    vla_buffer *rstd, size_t rstd_off, const vla_buffer *x, size_t x_off,
                                    const vla_buffer *weight, size_t weight_off, const vla_buffer *bias,
                                    size_t bias_off, int M, int C, float eps);
    vla_status (*layernorm_backward)(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                     size_t dweight_off, vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy,
                                     size_t dy_off, const vla_buffer *x, size_t x_off, const vla_buffer *weight,
                                     size_t weight_off, const vla_buffer *mean, size_t mean_off,
                                     const vla_buffer *rstd, size_t rstd_off, int M, int C);
    vla_status (*gelu_forward)(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                               size_t n);
    vla_status (*gelu_backward)(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy, size_t dy_off,
                                const vla_buffer *x, size_t x_off, size_t n);
    vla_status (*sigmoid_forward)(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                  size_t n);
    vla_status (*sigmoid_backward)(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                   size_t dy_off, const vla_buffer *y, size_t y_off, size_t n);
    vla_status (*add_forward)(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                              const vla_buffer *c, size_t c_off, size_t n);
    vla_status (*add_backward)(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                               const vla_buffer *dy, size_t dy_off, size_t n);
    vla_status (*embedding_forward)(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                    size_t tokens_off, const vla_buffer *wte, size_t wte_off, const vla_buffer *wpe,
                                    size_t wpe_off, int B, int T, int C, int V);
    vla_status (*embedding_backward)(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                     size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                     const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V);
    vla_status (*crossentropy)(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                               size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                               const vla_buffer *targets, size_t targets_off, int M, int V);
    vla_status (*global_norm)(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x, size_t x_off,
                              size_t n);
    /* p is validated (reserved fields zero, ranges); norm is non-NULL exactly when p->max_norm > 0. */
    vla_status (*adamw_step)(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                             vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                             const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p);
} vla_nn_iface;

/* The CPU backend's table (backends/cpu/cpu_nn.c). */
extern const vla_nn_iface vla_cpu_nn_iface;

#endif /* VLA_NN_IMPL_H */
