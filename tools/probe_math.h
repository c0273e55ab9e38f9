/* probe_math: the measurements behind vla-probe (tools/vla-probe.c), in a module of its own so
 * that tests/test_probe.c can check them against direct float64 loops.
 *
 * Two kinds of functions:
 *  - pure float64 maths (random inputs, spectral norms, the VLA A recurrence, the closed forms of
 *    VLA-MATH 4). vla-probe is a measurement tool, so what it measures about the Jacobians is
 *    computed here in double, not taken from the float32 library;
 *  - drivers that run the library's forward op (one head, B = H = 1) and read its states.
 *
 * Shapes: a sequence is rows t = 0..T-1; q, k, u are [T, dk], v is [T, dv], all row-major.
 * A state S as the library stores it is [dk, dv] (S transposed: element (i, j) of the maths'
 * dv x dk matrix S is at [j * dv + i]); A is [dk, dk]; n is [dk]. */
#ifndef VLA_PROBE_MATH_H
#define VLA_PROBE_MATH_H

#include <stddef.h>
#include <stdint.h>

#include <vla/vla.h>

/* ---- random numbers: splitmix64 + Box-Muller; the same stream on every platform ---------- */
typedef struct pm_rng {
    uint64_t s;
} pm_rng;

void pm_seed(pm_rng *r, uint64_t seed);
double pm_uniform(pm_rng *r); /* in (0, 1) */
double pm_normal(pm_rng *r);  /* N(0, 1) */
void pm_randn(pm_rng *r, float *x, size_t n);

/* ---- small dense linear algebra in double ------------------------------------------------ */
double pm_dot(const double *x, const double *y, int n);
double pm_norm(const double *x, int n);
/* 2-norm of n floats accumulated in double (the Frobenius norm of a stored matrix). */
double pm_norm_f(const float *x, size_t n);
/* Median of x[0..n) (sorts x in place); NAN when n == 0. */
double pm_median(double *x, int n);
double pm_max(const double *x, int n); /* -INFINITY when n == 0 */
/* Largest singular value of the rows x cols row-major matrix M, by a one-sided (Hestenes)
 * Jacobi SVD in double, swept until every column pair is orthogonal to 1e-15. */
double pm_svd_max(const double *M, int rows, int cols);

/* ---- spectral norms of the S recurrence's Jacobians (VLA-MATH 4) ------------------------ */
/* One step: dS_t/dS_{t-1} is S -> S F_t with F_t = I - k_t a_t^T (its norm as a map on S with
 * the Frobenius norm is ||F_t||_2 = ||I - a_t k_t^T||_2). A window of m steps is
 * S -> S F_0 F_1 ... F_{m-1}. K and W hold the rows k_s and a_s, [m, d]. */

/* Closed form for unit a, k with c = a . k: (1 + sqrt(5 - 4c)) / 2. */
double pm_rank1_norm_unit_closed(double c);
/* Closed form for any a, k: (sqrt(s + 2p) + sqrt(s - 2p)) / 2, s = 2 - 2c + |a|^2 |k|^2,
 * p = |1 - c|, c = a . k (the largest singular value on span{a, k}; >= 1 for d >= 2). */
double pm_rank1_norm_closed(const double *a, const double *k, int d);
/* ||F_0 ... F_{m-1}||_2 numerically and exactly: the product is the identity on the complement
 * of span{k_s, a_s} and maps that span (dimension r <= min(2m, d)) to itself, so its norm is
 * max(sigma_max(Q^T P Q), 1 if r < d), Q an orthonormal basis of the span (Gram-Schmidt twice),
 * sigma_max by pm_svd_max on the r x r matrix. O(m r d + r^3), not O(d^3). */
double pm_window_norm(const double *K, const double *W, int m, int d);
/* The same from the dense d x d product and a d x d Jacobi SVD: O(d^3), for checks. */
double pm_window_norm_dense(const double *K, const double *W, int m, int d);

/* ---- the VLA write vectors a_t, in double (VLA-MATH 1) ----------------------------------- */
typedef struct pm_vla {
    double lambda0, eps, rho; /* A_0 = I / lambda0; floors; refresh size */
    double u_scale;           /* the s_u actually used (resolved: never 0) */
    int refresh;              /* R; 0 = never */
    int elu;                  /* phi = elu + 1 on k (and on q) */
    int unnormalised;         /* VLA-MATH 4's "VLAv2": a_t = A_t k_t with the raw k, u = k^ */
} pm_vla;

/* The parameters of a VLA desc for keys of size dk (u_scale 0 means 1/sqrt(dk)). */
void pm_vla_from_desc(pm_vla *p, const vla_attn_desc *d, int dk);
/* Runs the A recurrence over keys K [T, d] (u from U [T, d], or u = s_u k^ when U is NULL) from
 * A_0 = I / lambda0 and writes, per token, the two vectors of the step's Jacobian:
 *   normalised:   kout_t = k^_t = normalize(phi(k_t)),  aout_t = normalize(A_t k^_t);
 *   unnormalised: kout_t = k_t (raw),                   aout_t = A_t k_t,  u_t = normalize(k_t).
 * kout, aout: [T, d]. Returns 0, or -1 when out of memory. */
int pm_vla_write_vectors(const pm_vla *p, const float *K, const float *U, int T, int d, double *kout,
                         double *aout);

/* Per-step and per-window Jacobian norms of one sequence (K, W: [T, d] rows k_t, a_t).
 * step[T] gets ||F_t||_2 (numerical, pm_window_norm with m = 1); win[T / window] the norm of
 * each non-overlapping window's product. *closed_diff gets the largest relative difference
 * between step[t] and the closed form: the unit one when `unit` (c = a.k), else the general one. */
void pm_jacobian_norms(const double *K, const double *W, int T, int d, int window, int unit, double *step,
                       double *win, double *closed_diff);

/* ---- drivers of the library: one head, B = H = 1 ----------------------------------------- */
typedef struct pm_seq {
    int T, dk, dv;
    const float *q, *k, *v; /* [T, dk], [T, dk], [T, dv] */
    const float *u;         /* VLA's penalty vectors [T, dk], or NULL (u = s_u k^) */
} pm_seq;

/* Runs the op over s in pieces of `every` tokens, carrying S (and A, n where the mechanism has
 * them) and t0 through the API, in place. After piece j (tokens [0, t_j), t_j = min((j+1)*every,
 * T)) it records S_norm[j] = ||S||_F and, for VLA, A_norm[j] = ||A||_F (A_norm may be NULL; it
 * gets NAN for the other mechanisms). ceil(T / every) entries each. */
vla_status pm_state_norms(vla_backend *be, const vla_attn_desc *d, const pm_seq *s, int every, double *S_norm,
                          double *A_norm);

/* One call over the whole sequence from the zero state; the final S in storage layout [dk, dv]. */
vla_status pm_final_state(vla_backend *be, const vla_attn_desc *d, const pm_seq *s, float *S);

/* The library's own VLA write vectors: token t is run alone with A_{t-1} carried in (float32),
 * S_in = 0 and v_t = 1 (dv = 1), so S_out = e_t a_t^T = a_t^T. K, U: [T, dk]; aout: [T, dk]. */
vla_status pm_library_write_vectors(vla_backend *be, const vla_attn_desc *d, const float *K, const float *U,
                                    int T, int dk, double *aout);

/* ---- memory capacity (paper 4.3, Proposition 3) ----------------------------------------- */
/* n unit keys [n, d] from N(0, 1) rows. orthonormal: rows are Gram-Schmidt-orthonormalised in
 * blocks of d (rows 0..d-1 one orthonormal basis, rows d..2d-1 another, ...), since R^d has no
 * more than d orthonormal vectors. The first rows do not depend on n. */
void pm_make_keys(pm_rng *r, int n, int d, int orthonormal, float *K);

/* What reading n stored pairs back gives. */
typedef struct pm_recall_stats {
    double recall;      /* fraction of i whose nearest stored value by cosine is v_i (strictly) */
    double mean_cos;    /* mean of cos(r_i, v_i) */
    double mean_relerr; /* mean of ||r_i - v_i|| / ||v_i|| (meaningful only when r_i is S k_i) */
} pm_recall_stats;

/* Reads every key back from a state S ([dk, dv] storage): r_i = S phi(k_i), phi as the desc
 * applies it to queries (elu+1 or none; a positive output normaliser would not change a cosine).
 * K [n, dk], V [n, dv]. */
void pm_recall(const float *S, const float *K, const float *V, int n, int dk, int dv, vla_feature_map phi,
               pm_recall_stats *out);

/* Writes the n pairs (K, V; U for VLA or NULL) through the op in one call (queries = keys; the
 * outputs are not used) and scores the read-back with pm_recall. */
vla_status pm_capacity_point(vla_backend *be, const vla_attn_desc *d, const float *K, const float *V,
                             const float *U, int n, int dk, int dv, pm_recall_stats *out);

#endif
