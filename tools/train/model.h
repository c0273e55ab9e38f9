/* TinyLM (docs/TRAINER.md) on libvla's ops: forward, backward and the AdamW update, on any
 * backend through the public API (vla/vla.h for the attention op, vla/nn.h for the rest).
 *
 *   x0 = wte[tok] + wpe[t]                                   [B, T, d]
 *   per block l:  x = x + Mixer(LN1(x));  x = x + W2 GELU(W1 LN2(x) + b1) + b2
 *   logits = LNf(x) wte^T                                     [B, T, V] (tied head, no bias)
 *   loss = mean cross-entropy over the positions with a target
 *
 * Mixers (h = LN1(x), [M, d] with M = B T; split/merge of heads is free: [B, T, d] with the
 * heads contiguous is exactly the op's [B, T, H, dh]):
 *   softmax   q, k, v = h Wqkv^T + bqkv (one d -> 3d Linear, q rows first), causal softmax with
 *             scale 1/sqrt(dh), then Wo.
 *   linear    the same q, k, v; the op's linear attention (elu+1 on q and k inside the op,
 *             denominator q~ . z + 1e-6), then Wo.
 *   delta     the same q, k, v and beta = sigmoid(h Wbeta^T + bbeta) [M, H] (one write
 *             strength per head); the op's standard DeltaNet (k normalised inside), then Wo.
 *   vla       the same q, k, v (k is k_raw) and u = k_raw Wu^T (d -> d, no bias, on the merged
 *             raw keys); the op with the `paper` preset; then Wo(LayerNorm(o)).
 *   deltanet  the paper's variant (VLA-MATH 1, last subsection; the paper code's DeltaNetAttn):
 *             the same q, k, v and a gate g = sigmoid(h Wg^T + bg) [M, d] = [B, T, H, dh], one
 *             per state row; the op delta-paper (elu+1 on q and k normalised inside the op, no
 *             write strength, no denominator), then Wo.
 * The one d -> 3d Linear is stored as one [3d, d] weight and applied as three matmuls over its
 * row blocks (rows 0..d-1 give q, d..2d-1 k, 2d..3d-1 v): the same Linear, written straight
 * into the three buffers the attention op takes (it takes whole buffers, without offsets).
 *
 * Memory: parameters, gradients and AdamW's two moments are flat buffers laid out by one size
 * table (tm_params), so the norm and the update are one call each; the activations the
 * backward needs and the backward's scratch are one flat buffer (tm_acts). The attention op's
 * tensors are whole buffers (its API has no offsets): per layer q, k, v, o (and u for vla,
 * beta for delta, the gate for deltanet), and one shared set of its gradients. Everything is
 * allocated by tm_create, for up to Bmax x Tmax tokens; nothing is allocated per step. */
#ifndef VLA_TRAIN_MODEL_H
#define VLA_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <vla/nn.h>
#include <vla/vla.h>

#include "data.h"

#define TM_MAX_LAYERS 8
#define TM_NONE ((size_t)-1) /* offset of a tensor this mixer does not have */

typedef enum tm_mixer { TM_SOFTMAX = 0, TM_LINEAR, TM_DELTA, TM_VLA, TM_DELTANET, TM_N_MIXERS } tm_mixer;

const char *tm_mixer_name(tm_mixer m);
int tm_mixer_from_name(const char *name, tm_mixer *out); /* 0, or -1 for an unknown name */

typedef struct tm_config {
    tm_mixer mixer;
    int V;     /* vocabulary (128) */
    int d;     /* width (128) */
    int H;     /* heads (4); dh = d / H */
    int L;     /* blocks (2) */
    int F;     /* FFN width (256) */
    int max_T; /* rows of the position table (4096; only the first T are used) */
} tm_config;

/* The paper's TinyLM with mixer m. */
void tm_config_paper(tm_config *c, tm_mixer m);
/* 0 if the configuration can run, else -1 with one line in err. */
int tm_config_check(const tm_config *c, char *err, size_t errlen);

/* Offsets (in floats) of the parameters in the flat buffer; TM_NONE where a mixer has none. */
typedef struct tm_block_params {
    size_t ln1w, ln1b;
    size_t Wqkv, bqkv;   /* [3d, d], [3d] */
    size_t Wbeta, bbeta; /* delta: [H, d], [H] */
    size_t Wg, bg;       /* deltanet: [d, d], [d] */
    size_t Wu;           /* vla: [d, d], no bias */
    size_t lnow, lnob;   /* vla: LayerNorm before Wo, [d] each */
    size_t Wo, bo;       /* [d, d], [d] */
    size_t ln2w, ln2b;
    size_t W1, b1; /* [F, d], [F] */
    size_t W2, b2; /* [d, F], [d] */
} tm_block_params;

typedef struct tm_params {
    size_t wte; /* [V, d]: embedding and tied head */
    size_t wpe; /* [max_T, d] */
    tm_block_params blk[TM_MAX_LAYERS];
    size_t lnfw, lnfb;
    size_t total;
} tm_params;

/* Offsets (in 4-byte elements) in the activation buffer, sized for Mmax = Bmax Tmax rows; a
 * step with M <= Mmax rows uses the first M rows of each tensor. */
typedef struct tm_block_acts {
    size_t h1, m1, r1;   /* LN1 out [M, d], mean, rstd [M] */
    size_t lno, mo, ro;  /* vla: LayerNorm(o) [M, d], mean, rstd */
    size_t x_mid;        /* residual after the mixer [M, d] */
    size_t h2, m2, r2;   /* LN2 */
    size_t a, g;         /* FFN pre-activation and GELU output [M, F] */
} tm_block_acts;

typedef struct tm_acts {
    size_t tokens, targets;             /* int32 [M] */
    size_t res[TM_MAX_LAYERS + 1];      /* residual stream: res[0] the embedding, res[l+1] block l's output */
    tm_block_acts blk[TM_MAX_LAYERS];
    size_t z, mf, rf;                   /* final LayerNorm */
    size_t logits;                      /* [M, V]; the backward turns it into dlogits in place */
    size_t loss;                        /* [1] */
    size_t dres, dh;                    /* backward scratch [M, d] */
    size_t dF1, dF2;                    /* [M, F] */
    size_t dbp;                         /* delta: gradient of beta before the sigmoid [M, H] */
    size_t dgp;                         /* deltanet: gradient of the gate before the sigmoid [M, d] */
    size_t total;
} tm_acts;

typedef struct tm_layer_bufs {
    vla_buffer *q, *k, *v, *o; /* [M, d] each: the attention op's inputs and output */
    vla_buffer *u;             /* vla [M, d] */
    vla_buffer *beta;          /* delta [M, H] */
    vla_buffer *gate;          /* deltanet [M, d] = [B, T, H, dh] */
    vla_buffer *S_out, *A_out; /* final states [B, H, dh, dh], only while tm_state_norms runs */
} tm_layer_bufs;

typedef struct tm_optim {
    double weight_decay; /* 1e-2 */
    double clip;         /* global-norm clip, 1.0; 0 = none */
    double beta1, beta2, eps;
} tm_optim;

/* Host milliseconds spent in the attention op (forward and backward) and in the matrix products
 * (vla_nn_matmul_*), summed over the calls made while tm_model.prof points here. Each timed call
 * is bracketed by vla_backend_synchronize, so that queued work is charged to the call that queued
 * it; the synchronisations slow a step down (GPU backends), which is why profiling is optional. */
typedef struct tm_profile {
    double attention_ms, gemm_ms;
} tm_profile;

typedef struct tm_model {
    tm_config cfg;
    vla_backend *be;
    int Bmax, Tmax;
    tm_params P;
    tm_acts A;
    vla_attn_desc desc;
    vla_buffer *params, *grads, *moments /* m at 0, v at P.total */, *acts, *norm;
    tm_layer_bufs lb[TM_MAX_LAYERS];
    vla_buffer *dO, *dq, *dk, *dv, *du, *dbeta, *dgate; /* the attention backward's, shared by the layers */
    tm_profile *prof; /* NULL: no timing (the default); else the calls add their times here */
} tm_model;

/* Lays out and allocates everything for batches of up to Bmax sequences of up to Tmax tokens
 * (Tmax <= cfg->max_T). On failure everything is freed and the status says why
 * (vla_last_message has the text). */
vla_status tm_create(tm_model *m, vla_backend *be, const tm_config *c, int Bmax, int Tmax);
void tm_destroy(tm_model *m);

/* Fresh parameters (every Linear weight and both embeddings N(0, 0.02), biases 0, LayerNorm
 * weights 1) drawn from r; AdamW moments zeroed. */
vla_status tm_init_params(tm_model *m, tr_rng *r);

/* Uploads one batch: tokens and targets [B, T] int32. */
vla_status tm_set_batch(tm_model *m, const int32_t *tokens, const int32_t *targets, int B, int T);
/* Forward to the logits of the batch set last. */
vla_status tm_forward(tm_model *m, int B, int T);
/* After tm_forward: the loss alone (no gradient), into *loss. */
vla_status tm_loss(tm_model *m, int B, int T, float *loss);
/* After tm_forward: exact-match counts over the target positions (argmax of the logits, the
 * first maximum on ties). host_logits: scratch of B T V floats. Call before tm_backward, which
 * overwrites the logits. */
vla_status tm_accuracy(tm_model *m, int B, int T, const int32_t *targets, float *host_logits, long *hits,
                       long *count);
/* After tm_forward: the loss (read it with tm_read_loss) and every parameter gradient into
 * m->grads (zeroed first). */
vla_status tm_backward(tm_model *m, int B, int T);
vla_status tm_read_loss(tm_model *m, float *loss);
/* One AdamW step at learning rate lr, bias-correction step t (1-based), global-norm clip. */
vla_status tm_update(tm_model *m, const tm_optim *o, double lr, int64_t t);
/* The final states of every layer for the batch set last (B <= Bmax, T <= Tmax): runs the
 * forward with the op's final states returned and writes, per layer l, the mean over (batch,
 * head) of ||S_T||_F into S_norm[l] and of ||A_T||_F into A_norm[l] (the paper's code:
 * S.norm(dim=(-2,-1)).mean()). NaN where the mixer has no such state (softmax: neither; only vla
 * has A). Allocates the state buffers for the call and frees them; the logits are overwritten. */
vla_status tm_state_norms(tm_model *m, int B, int T, double *S_norm, double *A_norm);

/* The learning rate of 0-based step s of N with W warmup steps (TRAINER.md, torch LambdaLR):
 * base s / W for s < W, then base 0.5 (1 + cos(pi (s - W) / (N - W))). */
double tm_lr_at(double base, int64_t s, int64_t N, int64_t W);

#endif
