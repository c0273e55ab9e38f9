/* An independent float64 reference for the mechanisms of VLA-MATH section 1 (the four and the
 * paper's DeltaNet, delta-paper) and their gradients (section 5): a plain token-by-token loop per
 * (batch, head), written from the maths alone (it shares no code with any backend). The float
 * entry points take the float32 tensors the library sees; everything is then computed in double.
 * The _f64 entry points take double inputs (a finite-difference test perturbs inputs by less than
 * a float's rounding step). */
#ifndef VLA_REF64_H
#define VLA_REF64_H

#include <stdint.h>

#include "vla/vla.h"

/* Computes the op `d` describes (d->algorithm is ignored: every algorithm computes this).
 * Uses d->mechanism, lambda0, eps, refresh, refresh_size, u_scale (0 = 1/sqrt(dk)),
 * feature_map, normalize_output, scale (0 = 1/sqrt(dk)).
 *   q, k, u [B,T,H,dk]; v [B,T,H,dv]; beta, g [B,T,H] (delta-paper: g [B,T,H,dv]); u, beta, g
 *   may be NULL (VLA-MATH defaults). S0 [B,H,dk,dv] (S transposed), A0 [B,H,dk,dk], n0 [B,H,dk]; NULL: S = 0,
 *   A = I/lambda0, n = 0. t0: absolute position of the first token (VLA refresh).
 * Outputs (each may be NULL): o [B,T,H,dv]; final states S [B,H,dk,dv], A [B,H,dk,dk],
 * n [B,H,dk] in the same storage layout. Returns 0, or -1 on a bad argument. */
int ref64_forward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                  const float *k, const float *v, const float *u, const float *beta, const float *g,
                  const float *S0, const float *A0, const float *n0, double *o, double *S, double *A, double *n);
/* The same with double inputs. */
int ref64_forward_f64(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const double *q,
                      const double *k, const double *v, const double *u, const double *beta, const double *g,
                      const double *S0, const double *A0, const double *n0, double *o, double *S, double *A,
                      double *n);

/* Upstream gradients and the gradients returned, in the library's layouts (vla_attn_grads).
 * dO [B,T,H,dv] is required; dS_end [B,H,dk,dv], dA_end [B,H,dk,dk], dn_end [B,H,dk] may be
 * NULL (zero). Every output may be NULL and is overwritten: dq, dk, du [B,T,H,dk], dv [B,T,H,dv],
 * dbeta, dg [B,T,H] (delta-paper: dg [B,T,H,dv]), dS_0 [B,H,dk,dv], dA_0 [B,H,dk,dk], dn_0 [B,H,dk]. */
typedef struct ref64_grads {
    const double *dO, *dS_end, *dA_end, *dn_end;
    double *dq, *dk, *dv, *du, *dbeta, *dg;
    double *dS_0, *dA_0, *dn_0;
} ref64_grads;

/* The vector-Jacobian product of ref64_forward (same arguments) for the loss
 *   L = <dO, o> + <dS_end, S_T> + <dA_end, A_T> + <dn_end, n_T>,
 * by reverse mode over the token loop (every per-token state is kept: O(T d^2) memory per head,
 * meant for tests). Conventions of VLA-MATH 5: a max(x, eps) floor that binds has derivative
 * 0; elu + 1 has derivative exp(x) at x <= 0; u = s_u k^ (u not given) passes its gradient to
 * k. dA_0 is the symmetric part (A is symmetric), the gradient along symmetric perturbations.
 * Outputs for what the forward does not use: du without u, dbeta without beta, dg without g are
 * zero; so are dS_0 (softmax) and dA_0 (not VLA). dn_0 is dn_end where n is carried through
 * unchanged (delta; VLA without normalised output), as the forward returns n_T = n_0 there.
 * Returns 0, or -1 on a bad argument. */
int ref64_backward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                   const float *k, const float *v, const float *u, const float *beta, const float *g,
                   const float *S0, const float *A0, const float *n0, const ref64_grads *gr);
int ref64_backward_f64(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const double *q,
                       const double *k, const double *v, const double *u, const double *beta, const double *g,
                       const double *S0, const double *A0, const double *n0, const ref64_grads *gr);

#endif
