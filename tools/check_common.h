/* vla-check's parts shared by the forward checks (vla-check.c) and the gradient checks
 * (check_grad.c): cases, seeded inputs, guarded buffers and error norms. */
#ifndef VLA_TOOLS_CHECK_COMMON_H
#define VLA_TOOLS_CHECK_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <vla/vla.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_SKIP 77

#define GUARD_BYTES 256 /* past the end of every output buffer */
#define GUARD_BYTE 0xA5
/* A device without fp64 runs VLA's A recurrence in float (see vla-check.c); its VLA cases get
 * this factor on their tolerance. */
#define NO_FP64_FACTOR 3.0

/* ---- random numbers: splitmix64, reproducible across machines ---- */
typedef struct rng {
    uint64_t s;
} rng;
uint64_t next64(rng *r);
double uniform(rng *r);
int irange(rng *r, int lo, int hi);
double normal(rng *r);

/* ---- cases ---- */
typedef struct check_case {
    char name[64];
    vla_mechanism mech;
    vla_algorithm algo;
    int B, T, H, dk, dv;
    int chunk, seg_chunks;
    int refresh;
    double rho, lambda0, u_scale, scale;
    double eps;    /* 0: the default */
    vla_feature_map fmap;
    int normalize;
    int has_u, has_beta, has_g;
    int paper;     /* vla_attn_desc_preset(&d, "paper") */
    int prefix;    /* > 0: states come in from a reference run over this many earlier tokens */
    int64_t t0;    /* absolute position of the first token (after the prefix) */
    int split;     /* > 0: streaming, two pieces [0, split) and [split, T) (forward only) */
    int upstream;  /* gradients: dS_end, dA_end, dn_end given (where the mechanism has them) */
    int partial;   /* gradients: only some outputs requested (the others NULL) */
    double tol;
    uint64_t seed; /* of the case's data */
} check_case;

/* Which cases run: --mechanism, --algo (a list), --case. */
typedef struct check_filter {
    int has_mech;
    vla_mechanism mech;
    int nalgo; /* 0: every algorithm */
    vla_algorithm algos[8];
    const char *text;
} check_filter;
int filter_match(const check_filter *f, const check_case *c);

typedef struct case_data {
    int Tall;                        /* prefix + T */
    float *q, *k, *v, *u, *beta, *g; /* the case's T tokens, [B, T, H, .] */
    float *S0, *A0, *n0;             /* initial states (prefix cases) or NULL */
    double *o, *S, *A, *n;           /* the forward reference */
} case_data;

void *xmalloc(size_t n);
float *rand_tensor(rng *r, size_t n, double lo, double hi, int gaussian);
void desc_for(const check_case *c, vla_attn_desc *d);
int has_S(const check_case *c);
int has_A(const check_case *c);
int has_n(const check_case *c);
/* Length of g's row: 1 (delta's g [B,T,H]) or dv (delta-paper's g [B,T,H,dv]). */
int gate_width(const check_case *c);
/* Inputs of the case (and of its prefix), the prefix's states, and the forward reference. */
void make_data(const check_case *c, case_data *cd);
void free_data(case_data *cd);
void shape_str(const check_case *c, char *out, size_t n);
void err_str(double e, char *out, size_t n);
void describe_case(const check_case *c, char *out, size_t n);
/* The case's tolerance on backend be (NO_FP64_FACTOR for VLA on a device without fp64). */
double tolerance(const check_case *c, vla_backend *be);

/* ---- buffers and errors ---- */
uint64_t fnv1a(uint64_t h, const void *p, size_t n);
#define FNV_OFFSET 0xcbf29ce484222325ULL
/* ||x - ref|| / ||ref|| (||x|| when ref = 0); INFINITY and *nonfinite = 1 on a NaN or Inf in x. */
double relerr(const float *x, const double *ref, size_t n, int *nonfinite);
/* `bytes` for the op, NaN-poisoned (or init), then GUARD_BYTES of GUARD_BYTE it must not touch. */
vla_buffer *guarded(vla_backend *be, size_t bytes, const float *init);
/* Downloads the first `bytes` into out; returns 0 if the guard is intact. */
int fetch_guarded(const vla_buffer *buf, size_t bytes, float *out);
vla_buffer *input(vla_backend *be, const float *x, size_t n); /* NULL x: NULL */
int unchanged(const vla_buffer *buf, const float *x, size_t n); /* 1 if buf still holds x */

/* ---- --grad (check_grad.c) ---- */
/* The gradient cases that pass the filter (malloc'ed, *out); returns the count. long_cases adds
 * the T = 32768 cases (--long). */
int grad_select(const check_filter *f, uint64_t seed, int long_cases, check_case **out);
void grad_list(const check_case *cases, int n);
/* Runs the cases on every backend, prints the table and "N passed, M failed"; returns the
 * number failed. */
int grad_run(const check_case *cases, int n, vla_backend **bes, const char (*names)[64], int nbe, int hash);

#endif
