/* Shared helpers of the libvla test suites: random inputs, poison, error norms, buffers, and
 * one-call runners that upload host arrays, poison the outputs, run the op and download. */
#ifndef VLA_TEST_UTIL_H
#define VLA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "vla/vla.h"

/* ---- random numbers (xoshiro-like, seeded, reproducible) ---- */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;

void tu_seed(tu_rng *r, uint64_t seed);
uint64_t tu_next(tu_rng *r);
double tu_uniform(tu_rng *r); /* in (0, 1), never 0 or 1 */
double tu_normal(tu_rng *r);  /* N(0, 1) */
/* n floats of N(0, 1) * scale; never an exact zero. */
void tu_randn(tu_rng *r, float *x, size_t n, float scale);
/* n floats uniform in (lo, hi); never exactly lo or 0. */
void tu_randu(tu_rng *r, float *x, size_t n, float lo, float hi);
/* malloc'ed array of n normals (scale 1). */
float *tu_randn_new(tu_rng *r, size_t n);

/* ---- poison ---- */
/* The poison: a quiet NaN with a payload no computation produces. */
#define TU_POISON_BITS 0x7fc5a5a5u
void tu_poison(float *x, size_t n);
int tu_is_poison(float x);
size_t tu_count_poison(const float *x, size_t n); /* elements never written */

/* ---- comparisons ---- */
int tu_all_finite(const float *x, size_t n);
size_t tu_count_nonfinite(const float *x, size_t n);
/* ||x - ref|| / ||ref|| (2-norms over all elements); INFINITY if x has a non-finite element;
 * if ||ref|| == 0, the absolute norm ||x||. */
double tu_relerr(const float *x, const double *ref, size_t n);
double tu_relerr_ff(const float *x, const float *ref, size_t n);
double tu_relerr_dd(const double *x, const double *ref, size_t n);
/* A word (or phrase) occurs in s with non-identifier characters (or the ends) around it. */
int tu_has_word(const char *s, const char *word);

/* ---- backends and buffers ---- */
vla_backend *tu_open_cpu(void); /* aborts the test (ck_assert) on failure */
vla_buffer *tu_buf_new(vla_backend *b, size_t nfloats);                   /* poisoned */
vla_buffer *tu_buf_from(vla_backend *b, const float *x, size_t nfloats);  /* uploaded */
void tu_buf_upload(vla_buffer *buf, const float *x, size_t nfloats);
void tu_buf_poison(vla_buffer *buf);
float *tu_buf_download_new(const vla_buffer *buf, size_t nfloats); /* malloc'ed */

/* ---- one forward call from host arrays ---- */
typedef struct tu_problem {
    int B, T, H, dk, dv;
    int64_t t0;
    const float *q, *k, *v;     /* required: [B,T,H,dk], [B,T,H,dk], [B,T,H,dv] */
    const float *u, *beta, *g;  /* optional; g [B,T,H] (delta-paper [B,T,H,dv]) */
    const float *S0, *A0, *n0;  /* optional initial states, storage layout */
} tu_problem;

/* Which outputs a mechanism has. */
int tu_has_S(const vla_attn_desc *d);
int tu_has_A(const vla_attn_desc *d);
int tu_has_n(const vla_attn_desc *d);

typedef struct tu_result {
    vla_status status;
    float *o, *S, *A, *n;       /* malloc'ed; NULL when the mechanism has no such state */
    size_t o_unwritten, S_unwritten, A_unwritten, n_unwritten;
    vla_algorithm resolved;     /* what AUTO resolved to */
} tu_result;

/* Runs the op. States the mechanism has are always requested. inplace: the state outputs use
 * the same buffers as the state inputs (needs S0, and A0/n0 where the mechanism has them).
 * Every output is poisoned before the call; *_unwritten counts poison left after it. */
vla_status tu_run(vla_backend *b, const vla_attn_desc *d, const tu_problem *p, int inplace, tu_result *r);
void tu_result_free(tu_result *r);

/* Sizes. */
size_t tu_nqk(const tu_problem *p); /* B*T*H*dk */
size_t tu_nvo(const tu_problem *p); /* B*T*H*dv */
size_t tu_nbt(const tu_problem *p); /* B*T*H */
size_t tu_ng(const vla_attn_desc *d, const tu_problem *p); /* g's size: B*T*H (delta-paper B*T*H*dv) */
size_t tu_nS(const tu_problem *p);  /* B*H*dk*dv */
size_t tu_nA(const tu_problem *p);  /* B*H*dk*dk */
size_t tu_nn(const tu_problem *p);  /* B*H*dk */

/* Rows [ta, tb) along T of a [B, T, H, D] tensor: malloc'ed [B, tb-ta, H, D]. */
float *tu_slice_time(const float *x, int B, int T, int H, int D, int ta, int tb);
/* Writes a [B, tb-ta, H, D] piece into rows [ta, tb) of a [B, T, H, D] tensor. */
void tu_place_time(float *dst, const float *piece, int B, int T, int H, int D, int ta, int tb);

/* Random initial states that keep every mechanism well defined: S0 ~ N(0, 0.3^2);
 * A0 symmetric positive definite, about I/lambda0; n0 positive. malloc'ed. */
float *tu_rand_S0(tu_rng *r, int B, int H, int dk, int dv);
float *tu_rand_A0(tu_rng *r, int B, int H, int dk, double lambda0);
float *tu_rand_n0(tu_rng *r, int B, int H, int dk);

/* Runs ref64 on p with d and compares every output of r (o and the states the mechanism has)
 * with it; prints the errors to stderr under `label`. Passes (returns 1) when: status OK, every
 * element written, all finite, each relative error < tol. On failure appends the reasons to
 * `why` (may be NULL). *worst (may be NULL) gets the worst relative error. Never aborts. */
int tu_check_vs_ref(const vla_attn_desc *d, const tu_problem *p, const tu_result *r, double tol, const char *label,
                    double *worst, char *why, size_t whylen);
/* The algorithms VLA-MATH defines for a mechanism, AUTO last. Returns the count (<= 6). */
int tu_algorithms(vla_mechanism m, vla_algorithm out[6]);

/* Float arrays to double (malloc'ed). */
double *tu_to_double(const float *x, size_t n);

#endif
