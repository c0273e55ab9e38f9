/* An independent float64 reference for the four mechanisms of VLA-MATH section 1: a plain
 * token-by-token loop per (batch, head), written from the maths alone (it shares no code
 * with any backend). Inputs are the float32 tensors the library sees; everything is then
 * computed in double. */
#ifndef VLA_REF64_H
#define VLA_REF64_H

#include <stdint.h>

#include "vla/vla.h"

/* Computes the op `d` describes (d->algorithm is ignored: every algorithm computes this).
 * Uses d->mechanism, lambda0, eps, refresh, refresh_size, u_scale (0 = 1/sqrt(dk)),
 * feature_map, normalize_output, scale (0 = 1/sqrt(dk)).
 *   q, k, u [B,T,H,dk]; v [B,T,H,dv]; beta, g [B,T,H]; u, beta, g may be NULL (VLA-MATH
 *   defaults). S0 [B,H,dk,dv] (S transposed), A0 [B,H,dk,dk], n0 [B,H,dk]; NULL: S = 0,
 *   A = I/lambda0, n = 0. t0: absolute position of the first token (VLA refresh).
 * Outputs (each may be NULL): o [B,T,H,dv]; final states S [B,H,dk,dv], A [B,H,dk,dk],
 * n [B,H,dk] in the same storage layout. Returns 0, or -1 on a bad argument. */
int ref64_forward(const vla_attn_desc *d, int B, int T, int H, int dk, int dv, int64_t t0, const float *q,
                  const float *k, const float *v, const float *u, const float *beta, const float *g,
                  const float *S0, const float *A0, const float *n0, double *o, double *S, double *A, double *n);

#endif
