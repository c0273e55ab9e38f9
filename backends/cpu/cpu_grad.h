/* CPU backward internals (VLA-MATH 5): one head of one sequence, prepared and contiguous, in double.
 *
 * The dispatcher (cpu_grad_backend.c) gathers each (batch, head) slice, applies the feature map and
 * the normalisations of VLA-MATH 1 exactly as the forward's dispatcher does (in double), and hands a
 * kernel a cpu_grad_head. A kernel returns the gradients with respect to the prepared quantities
 * (q~, k~, k^, the scaled u, v, beta, g) and the initial states; the dispatcher then applies the
 * chain rule back through normalize and elu+1 to the raw inputs. Kernels accumulate (+=) into the
 * per-token gradients, which the dispatcher zeroes first, and write (=) the state gradients.
 * States are in the library's storage layout: ST is S transposed ([dk][dv]), A is [dk][dk]. */
#ifndef VLA_CPU_GRAD_H
#define VLA_CPU_GRAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_grad_head {
    int T, dk, dv;
    int64_t t0;             /* absolute position of token 0 (the VLA refresh) */
    const double *q;        /* [T, dk] q~ = phi(q) (softmax: q) */
    const double *kf;       /* [T, dk] k~ = phi(k) (softmax: k) */
    const double *kh;       /* [T, dk] k^ = normalize(k~) (delta, vla; delta-paper: normalize(k)) */
    const double *u;        /* [T, dk] u_t = s_u normalize(u) or s_u k^ (vla) */
    const double *v;        /* [T, dv] */
    const double *beta;     /* [T] or NULL (delta: 1) */
    const double *g;        /* [T] or NULL (delta: 1); [T, dv] or NULL (delta-paper) */
    const double *dO;       /* [T, dv] upstream gradient of o */
    const double *ST0;      /* [dk, dv] initial state */
    const double *A0;       /* [dk, dk] (vla) */
    const double *n0;       /* [dk] (linear; vla with normalised output) */
    const double *dST_end;  /* [dk, dv] upstream gradient of the final state, or NULL (zero) */
    const double *dA_end;   /* [dk, dk] or NULL */
    const double *dn_end;   /* [dk] or NULL */
    /* Per-token gradients, accumulated into (+=), in the shapes of their inputs (delta-paper's dg
     * [T, dv]). NULL where the mechanism has no such input. */
    double *dq, *dkf, *dkh, *du, *dval, *dbeta, *dg; /* dval: of v */
    /* Initial-state gradients, written (=) by the kernel; NULL where the mechanism has none. */
    double *dST0, *dA0, *dn0;
} cpu_grad_head;

typedef struct cpu_grad_params {
    int chunk;          /* C: checkpoint interval (and chunk size of the chunked forms) */
    double eps;
    int refresh;        /* R */
    double rho;
    int normalize;      /* vla: normalised output */
    double scale;       /* softmax logit scale */
    int inner_threads;  /* threads a kernel may use inside one head */
    int apart_segment;  /* vla chunked: the A part in matrix form (VLA_CPU_APART=segment, cpu_grad_vla.c) */
} cpu_grad_params;

/* Every kernel computes one head with the work memory its *_work function asks for (doubles),
 * allocated by the caller before anything is written, so a kernel never fails. */
typedef void (*cpu_grad_fn)(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
typedef size_t (*cpu_grad_work_fn)(int T, int dk, int dv, const cpu_grad_params *p);

void cpu_grad_softmax_fused(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_softmax_fused_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_linear_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_linear_sequential_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_delta_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_delta_sequential_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_delta_paper_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_delta_paper_sequential_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_vla_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_vla_sequential_work(int T, int dk, int dv, const cpu_grad_params *p);

void cpu_grad_linear_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_linear_chunked_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_delta_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_delta_chunked_work(int T, int dk, int dv, const cpu_grad_params *p);
void cpu_grad_vla_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work);
size_t cpu_grad_vla_chunked_work(int T, int dk, int dv, const cpu_grad_params *p);

/* ---- one chunk of the residual delta rule, forward and VJP (cpu_grad_chunk.c) ----
 *   e_t = v_t - r g_t ST_{t-1}^T kr_t,  ST_t = g_t ST_{t-1} + w_t e_t^T,  o_t = ST_t^T q_t
 * for c tokens (r = residual: 1 for delta and vla, 0 for linear), in the matrix form of
 * VLA-MATH 2.3. Rows Kr (residual only), W, Q [c, dk], V [c, dv]; g [c] or NULL. */
typedef struct cpu_grad_chunk {
    int c, dk, dv, residual;
    const double *Kr, *W, *V, *Q, *g;
} cpu_grad_chunk;
size_t cpu_grad_chunk_work(int c, int dk, int dv);
/* O [c, dv] (may be NULL) and ST_end [dk, dv] (may be NULL, or ST0 itself) from ST0; keeps in
 * `work` what cpu_grad_chunk_vjp needs. */
void cpu_grad_chunk_forward(const cpu_grad_chunk *ch, const double *ST0, double *O, double *ST_end, double *work);
/* After cpu_grad_chunk_forward with the same chunk, ST0 and work: given dO [c, dv] and dST = the
 * gradient of ST_end, sets dST to the gradient of ST0 and accumulates (+=) dQ, dKr (residual),
 * dW [c, dk], dV [c, dv] and dg [c] (when g is given; may be NULL). */
void cpu_grad_chunk_vjp(const cpu_grad_chunk *ch, const double *ST0, const double *dO, double *dST, double *dQ,
                        double *dKr, double *dW, double *dV, double *dg, double *work);

/* Small helpers shared by the kernels (cpu_grad_backend.c). */
/* Work arrays are carved at offsets rounded to 8 doubles (64 bytes). */
static inline size_t cpu_grad_pad(size_t n) { return (n + 7) / 8 * 8; }
/* y[n] = x^T M for M [k, n]; y[k] = M x for M [k, n]. */
void cpu_grad_vecmat(const double *x, const double *M, int k, int n, double *y);
void cpu_grad_matvec(const double *M, const double *x, int k, int n, double *y);
/* M[k, n] += alpha x y^T. */
void cpu_grad_ger(double *M, double alpha, const double *x, const double *y, int k, int n);
double cpu_grad_dot(const double *x, const double *y, int n);

#endif
