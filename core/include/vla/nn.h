/* libvla nn: the ops a small transformer needs around the attention op, forward and backward,
 * on any backend: a matrix product with bias, LayerNorm, GELU, sigmoid, residual add, token and
 * position embeddings, softmax cross-entropy, the global norm of a gradient and a fused AdamW
 * step. Enough to train the paper's TinyLM (pre-LN blocks, tied head) or another model built
 * the same way.
 *
 * Conventions, the same for every call:
 * - Tensors are (buffer, element offset) pairs: `x, x_off` names the elements x_off, x_off + 1,
 *   ... of `x`, so one flat buffer can hold every parameter (and another every gradient) at the
 *   offsets of a size table, as llm.c does. Elements are float32, except token ids and targets,
 *   which are int32; an offset counts elements (4 bytes), not bytes. Tensors are dense,
 *   row-major, last index fastest; shapes are given in the comments below ([M, K] = M rows of K).
 * - Outputs first, then inputs, then sizes (llm.c's order). Matrix sizes are int (>= 1, as BLAS
 *   takes them); flat lengths n are size_t (>= 1).
 * - Forward outputs are overwritten. Backward outputs ACCUMULATE (+=), as in llm.c: zero the
 *   gradient buffer once per step (vla_nn_fill), and a tensor used twice (a residual stream, the
 *   tied embedding) gathers both gradients without extra calls. Every backward output may be NULL
 *   (that gradient is not computed). (The attention op's backward, in vla.h, overwrites instead.)
 * - Buffers must belong to the backend the call runs on. Every element range must lie inside its
 *   buffer (VLA_ERR_OUT_OF_RANGE otherwise). An output must not overlap an input or another
 *   output (VLA_ERR_ALIASING), with the exceptions each call states (elementwise forwards may run
 *   in place: the output exactly the input, same buffer and offset).
 * - Every call validates all of this first; on an argument error nothing is written and the
 *   status comes with a message naming the argument (vla_backend_message, vla_last_message).
 *   A backend without these ops returns VLA_ERR_UNSUPPORTED.
 * - Token ids and targets are data the library only sees on the device: a value out of range is
 *   VLA_ERR_INVALID_PARAMETER, found by the backend. The CPU finds it before writing anything; a
 *   GPU backend may find it only after its kernels ran (the outputs are then unspecified), but
 *   never reads or writes outside a tensor because of it.
 * - Like the attention op, a GPU backend may return once the work is queued; downloads wait. */
#ifndef VLA_NN_H
#define VLA_NN_H

#include "vla/vla.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- utility ------------------------------------------------------------------------------ */
/* x[n] = value (any value, NaN included: to zero gradients, set LayerNorm weights to 1, poison). */
vla_status vla_nn_fill(vla_backend *b, vla_buffer *x, size_t x_off, size_t n, float value);

/* ---- matrix product with bias (nn.Linear) -------------------------------------------------- */
/* y[M, N] = x[M, K] W[N, K]^T + bias[N]. W is stored as torch's Linear weight and llm.c's
 * matmul: one row of K inputs per output. bias may be NULL (no bias). The tied head of a language
 * model is this call with W = the token embedding [V, C] and no bias: logits[M, V] = x E^T.
 * y must not overlap x, W or bias. */
vla_status vla_nn_matmul_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                 const vla_buffer *W, size_t W_off, const vla_buffer *bias, size_t bias_off, int M,
                                 int N, int K);
/* dx[M, K] += dy[M, N] W[N, K];  dW[N, K] += dy^T x;  dbias[N] += sum over rows of dy.
 * Outputs optional; no output may overlap dy, x, W or another output. */
vla_status vla_nn_matmul_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dW, size_t dW_off,
                                  vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy, size_t dy_off,
                                  const vla_buffer *x, size_t x_off, const vla_buffer *W, size_t W_off, int M, int N,
                                  int K);

/* ---- LayerNorm over the last dimension ----------------------------------------------------- */
/* Per row m of x[M, C]: mean_m, rstd_m = 1 / sqrt(var_m + eps) (var the biased variance, as
 * torch), y[m, :] = (x[m, :] - mean_m) rstd_m * weight[C] + bias[C]. mean[M] and rstd[M] are saved
 * for the backward (each may be NULL: not saved). eps finite, > 0 (torch's default 1e-5).
 * y must not overlap any input; mean and rstd overlap nothing. */
vla_status vla_nn_layernorm_forward(vla_backend *b, vla_buffer *y, size_t y_off, vla_buffer *mean, size_t mean_off,
                                    vla_buffer *rstd, size_t rstd_off, const vla_buffer *x, size_t x_off,
                                    const vla_buffer *weight, size_t weight_off, const vla_buffer *bias,
                                    size_t bias_off, int M, int C, float eps);
/* dx[M, C] += ..., dweight[C] += ..., dbias[C] += ..., from dy[M, C], the forward's x and weight
 * and its saved mean and rstd (all required). Outputs optional; none may overlap an input. */
vla_status vla_nn_layernorm_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, vla_buffer *dweight,
                                     size_t dweight_off, vla_buffer *dbias, size_t dbias_off, const vla_buffer *dy,
                                     size_t dy_off, const vla_buffer *x, size_t x_off, const vla_buffer *weight,
                                     size_t weight_off, const vla_buffer *mean, size_t mean_off,
                                     const vla_buffer *rstd, size_t rstd_off, int M, int C);

/* ---- elementwise ----------------------------------------------------------------------------- */
/* y[n] = GELU(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): the exact form (torch's default, not
 * the tanh approximation). y may be x (in place); the backward then needs x kept elsewhere. */
vla_status vla_nn_gelu_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                               size_t n);
/* dx[n] += dy GELU'(x), GELU'(x) = Phi(x) + x phi(x), from the forward's input x. */
vla_status vla_nn_gelu_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy, size_t dy_off,
                                const vla_buffer *x, size_t x_off, size_t n);
/* y[n] = 1 / (1 + exp(-x)). y may be x (in place). */
vla_status vla_nn_sigmoid_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *x, size_t x_off,
                                  size_t n);
/* dx[n] += dy y (1 - y), from the forward's OUTPUT y (what an in-place forward leaves). */
vla_status vla_nn_sigmoid_backward(vla_backend *b, vla_buffer *dx, size_t dx_off, const vla_buffer *dy,
                                   size_t dy_off, const vla_buffer *y, size_t y_off, size_t n);
/* y[n] = a + c: the residual connection. y may be a or c (in place: x = x + f(x)); a and c may
 * overlap each other. */
vla_status vla_nn_add_forward(vla_backend *b, vla_buffer *y, size_t y_off, const vla_buffer *a, size_t a_off,
                              const vla_buffer *c, size_t c_off, size_t n);
/* da[n] += dy; dc[n] += dy. Outputs optional. (With accumulating gradients a residual stream's
 * gradient needs no call at all: the branch's backward adds into it.) */
vla_status vla_nn_add_backward(vla_backend *b, vla_buffer *da, size_t da_off, vla_buffer *dc, size_t dc_off,
                               const vla_buffer *dy, size_t dy_off, size_t n);

/* ---- embeddings ------------------------------------------------------------------------------ */
/* out[B, T, C] = wte[tokens[b, t], :] + wpe[t, :]: token embedding wte[V, C] and learned
 * position embedding wpe (its first T rows [T, C] are read; it may hold more, as a table for the
 * longest sequence does). tokens[B, T] int32 in 0..V-1. wpe may be NULL (no position term).
 * out must not overlap any input. */
vla_status vla_nn_embedding_forward(vla_backend *b, vla_buffer *out, size_t out_off, const vla_buffer *tokens,
                                    size_t tokens_off, const vla_buffer *wte, size_t wte_off, const vla_buffer *wpe,
                                    size_t wpe_off, int B, int T, int C, int V);
/* dwte[V, C]: row tokens[b, t] += dout[b, t, :] (a scatter-add: repeated tokens sum);
 * dwpe[T, C] += sum over b of dout[b, :, :]. Outputs optional; they overlap no input and not each
 * other. */
vla_status vla_nn_embedding_backward(vla_backend *b, vla_buffer *dwte, size_t dwte_off, vla_buffer *dwpe,
                                     size_t dwpe_off, const vla_buffer *dout, size_t dout_off,
                                     const vla_buffer *tokens, size_t tokens_off, int B, int T, int C, int V);

/* ---- loss ------------------------------------------------------------------------------------ */
/* Softmax cross-entropy over the positions that have a target, forward and its gradient in one
 * call. logits[M, V]; targets[M] int32, each in 0..V-1 or -1 (no target: ignored, torch's
 * ignore_index). With P the positions whose target is not -1:
 *   loss[1]        = (1/|P|) sum over m in P of -log softmax(logits[m, :])[targets[m]]
 *   dlogits[M, V]  = d loss / d logits: (softmax(logits[m, :]) - onehot(targets[m])) / |P| on the
 *                    rows of P, 0 on the others. OVERWRITTEN (it starts the backward pass).
 * When P is empty both are 0 (torch gives NaN). loss and dlogits are optional. dlogits may be
 * logits (in place: saves a [M, V] tensor); loss overlaps nothing. */
vla_status vla_nn_crossentropy(vla_backend *b, vla_buffer *loss, size_t loss_off, vla_buffer *dlogits,
                               size_t dlogits_off, const vla_buffer *logits, size_t logits_off,
                               const vla_buffer *targets, size_t targets_off, int M, int V);

/* ---- optimiser ------------------------------------------------------------------------------- */
/* norm[1] = sqrt(sum of x[i]^2): the global gradient norm over one flat gradient buffer, as
 * torch.nn.utils.clip_grad_norm_ computes it over all parameters. It stays on the device, where
 * vla_nn_adamw_step reads it: no round trip per step. norm must not overlap x. */
vla_status vla_nn_global_norm(vla_backend *b, vla_buffer *norm, size_t norm_off, const vla_buffer *x, size_t x_off,
                              size_t n);

/* AdamW's hyperparameters. Fill with vla_adamw_params_init (torch.optim.AdamW's defaults), then
 * change what differs. */
typedef struct vla_adamw_params {
    double lr;           /* learning rate of this step (a schedule changes it per call); >= 0 */
    double beta1, beta2; /* in [0, 1); defaults 0.9, 0.999 */
    double eps;          /* > 0; default 1e-8 */
    double weight_decay; /* decoupled, >= 0; default 1e-2 */
    int64_t step;        /* t of the bias corrections, counted from 1 (torch's state['step'] after
                            its increment); default 1 */
    double max_norm;     /* > 0: clip the gradient to this global norm with the norm the call is
                            given; 0: no clipping (default) */
    int reserved[4];     /* zero; room for later parameters without breaking the ABI */
} vla_adamw_params;

vla_status vla_adamw_params_init(vla_adamw_params *p);

/* One AdamW step over n parameters, exactly torch.optim.AdamW's (amsgrad off, maximize off):
 *   s      = max_norm > 0 ? min(1, max_norm / (norm + 1e-6)) : 1   (clip_grad_norm_'s factor)
 *   g      = s grad
 *   param *= 1 - lr weight_decay
 *   m      = m + (1 - beta1) (g - m)        v = beta2 v + (1 - beta2) g^2
 *   param -= (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * param, m, v [n] are updated in place (m and v start at 0); grad [n] is read, never written (torch
 * scales it in place; here the scale is applied on the fly). norm[1] is vla_nn_global_norm's
 * output, required when max_norm > 0 and not allowed otherwise. param, m, v and grad are four
 * disjoint ranges (they may share a buffer); norm overlaps none of param, m, v. */
vla_status vla_nn_adamw_step(vla_backend *b, vla_buffer *param, size_t param_off, vla_buffer *m, size_t m_off,
                             vla_buffer *v, size_t v_off, const vla_buffer *grad, size_t grad_off,
                             const vla_buffer *norm, size_t norm_off, size_t n, const vla_adamw_params *p);

#ifdef __cplusplus
}
#endif
#endif /* VLA_NN_H */
