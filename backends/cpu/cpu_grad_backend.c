/* The CPU backward's dispatcher (VLA-MATH 5): per (batch, head), gather the forward's inputs in
 * double, prepare them as the forward does (feature map, normalize, u), run a kernel that returns
 * the gradients with respect to the prepared quantities, apply the chain rule back to the raw
 * inputs, and scatter the requested gradients as float32.
 *
 * Chain rule at the non-smooth points, as VLA-MATH 5 fixes it:
 *   normalize(x) = s x / max(||x||, eps): dx = s (dy - x^ (x^ . dy)) / ||x|| where ||x|| > eps, with
 *   x^ = x / ||x||, and dx = s dy / eps where the floor binds (the floor is a constant);
 *   elu(x) + 1: derivative 1 for x > 0, exp(x) for x <= 0. */
#include "cpu_grad.h"
#include "cpu_kernels.h"
#include "vla_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef VLA_HAVE_CBLAS
#include <cblas.h>
#endif

/* ---- small dense helpers in double ---- */

void cpu_grad_vecmat(const double *restrict x, const double *restrict M, int k, int n, double *restrict y) {
    for (int j = 0; j < n; j++) y[j] = 0.0;
    for (int i = 0; i < k; i++) {
        const double xi = x[i], *row = M + (size_t)i * n;
        for (int j = 0; j < n; j++) y[j] += xi * row[j];
    }
}

void cpu_grad_matvec(const double *restrict M, const double *restrict x, int k, int n, double *restrict y) {
    for (int i = 0; i < k; i++) y[i] = cpu_grad_dot(M + (size_t)i * n, x, n);
}

void cpu_grad_ger(double *restrict M, double alpha, const double *restrict x, const double *restrict y, int k,
                  int n) {
    for (int i = 0; i < k; i++) {
        const double ax = alpha * x[i];
        double *row = M + (size_t)i * n;
        for (int j = 0; j < n; j++) row[j] += ax * y[j];
    }
}

double cpu_grad_dot(const double *restrict x, const double *restrict y, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

/* ---- the kernels ---- */

typedef struct grad_entry {
    vla_mechanism mech;
    vla_algorithm algo;
    cpu_grad_fn run;
    cpu_grad_work_fn work;
} grad_entry;

static const grad_entry grad_kernels[] = {
    {VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, cpu_grad_softmax_fused, cpu_grad_softmax_fused_work},
    {VLA_MECH_LINEAR, VLA_ALGO_SEQUENTIAL, cpu_grad_linear_sequential, cpu_grad_linear_sequential_work},
    {VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, cpu_grad_linear_chunked, cpu_grad_linear_chunked_work},
    {VLA_MECH_DELTA, VLA_ALGO_SEQUENTIAL, cpu_grad_delta_sequential, cpu_grad_delta_sequential_work},
    {VLA_MECH_DELTA, VLA_ALGO_CHUNKED, cpu_grad_delta_chunked, cpu_grad_delta_chunked_work},
    {VLA_MECH_DELTA_PAPER, VLA_ALGO_SEQUENTIAL, cpu_grad_delta_paper_sequential, cpu_grad_delta_paper_sequential_work},
    {VLA_MECH_VLA, VLA_ALGO_SEQUENTIAL, cpu_grad_vla_sequential, cpu_grad_vla_sequential_work},
    {VLA_MECH_VLA, VLA_ALGO_CHUNKED, cpu_grad_vla_chunked, cpu_grad_vla_chunked_work},
};

/* ---- preparing one head ---- */

static double elu1(double x) { return x > 0.0 ? x + 1.0 : exp(x); }
/* elu(x) + 1's derivative (1 for x > 0, exp(x) for x <= 0) from y = elu(x) + 1 itself: y > 1 exactly
 * when x > 0 (and y = 1 when x + 1 rounds to 1, where both rules give 1), y = exp(x) otherwise. */
static double elu1_grad_of(double y) { return y > 1.0 ? 1.0 : y; }

/* dst[T, D] = src[b, :, h, :] of a [B, T, H, D] float tensor, in double. */
static void gather_d(const vla_buffer *buf, const vla_attn_args *a, int b, int h, int D, double *dst) {
    const float *src = buf->mem;
    for (int t = 0; t < a->T; t++) {
        const float *s = src + cpu_row_offset(a, b, t, h, D);
        double *d = dst + (size_t)t * D;
        for (int i = 0; i < D; i++) d[i] = s[i];
    }
}

/* The inverse: dst[b, :, h, :] = src[T, D] as float. */
static void scatter_f(const double *src, const vla_attn_args *a, int b, int h, int D, vla_buffer *buf) {
    float *dst = buf->mem;
    for (int t = 0; t < a->T; t++) {
        float *d = dst + cpu_row_offset(a, b, t, h, D);
        const double *s = src + (size_t)t * D;
        for (int i = 0; i < D; i++) d[i] = (float)s[i];
    }
}

/* y[T, D] rows = scale * x / max(||x||, eps). */
static void normalize_rows(const double *x, double *y, int T, int D, double eps, double scale) {
    for (int t = 0; t < T; t++) {
        const double *r = x + (size_t)t * D;
        const double inv = scale / fmax(sqrt(cpu_grad_dot(r, r, D)), eps);
        for (int i = 0; i < D; i++) y[(size_t)t * D + i] = r[i] * inv;
    }
}

/* The chain rule of normalize_rows: dx += d/dx (scale x / max(||x||, eps)) applied to dy. */
static void normalize_rows_grad(const double *x, const double *dy, double *dx, int T, int D, double eps,
                                double scale) {
    for (int t = 0; t < T; t++) {
        const double *r = x + (size_t)t * D, *dr = dy + (size_t)t * D;
        double *o = dx + (size_t)t * D;
        const double nrm = sqrt(cpu_grad_dot(r, r, D));
        if (nrm > eps) {
            const double proj = cpu_grad_dot(r, dr, D) / (nrm * nrm); /* x^ . dy / ||x|| */
            for (int i = 0; i < D; i++) o[i] += scale * (dr[i] - r[i] * proj) / nrm;
        } else {
            for (int i = 0; i < D; i++) o[i] += scale * dr[i] / eps;
        }
    }
}

/* The per-head arrays (doubles), laid out in one allocation. */
typedef struct grad_layout {
    size_t q, kf, kh, ur, u, v, beta, g, dO, ST0, A0, n0, dST_end, dA_end, dn_end;
    size_t dq, dkf, dkh, du, dv, dbeta, dg, dST0, dA0, dn0, work, total;
} grad_layout;

/* gate_width: g's (and dg's) row length (1; delta-paper dv). */
static grad_layout grad_layout_of(const vla_attn_args *a, size_t gate_width, size_t work) {
    grad_layout L;
    const size_t T = (size_t)a->T, dk = (size_t)a->dk, dv = (size_t)a->dv, gw = gate_width;
    size_t off = 0;
#define TAKE(field, n)  \
    L.field = off;      \
    off += cpu_grad_pad(n);
    TAKE(q, T * dk) TAKE(kf, T * dk) TAKE(kh, T * dk) TAKE(ur, T * dk)
    TAKE(u, T * dk) TAKE(v, T * dv) TAKE(beta, T) TAKE(g, T * gw) TAKE(dO, T * dv) TAKE(ST0, dk * dv) TAKE(A0, dk * dk)
    TAKE(n0, dk) TAKE(dST_end, dk * dv) TAKE(dA_end, dk * dk) TAKE(dn_end, dk)
    TAKE(dq, T * dk) TAKE(dkf, T * dk) TAKE(dkh, T * dk) TAKE(du, T * dk) TAKE(dv, T * dv) TAKE(dbeta, T)
    TAKE(dg, T * gw) TAKE(dST0, dk * dv) TAKE(dA0, dk * dk) TAKE(dn0, dk) TAKE(work, work)
#undef TAKE
    L.total = off;
    return L;
}

/* One state slice (n floats) of head bh, in double, and back. */
static void load_state(const vla_buffer *buf, size_t bh, size_t n, double *dst) {
    const float *src = (const float *)buf->mem + bh * n;
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}
static void store_state(const double *src, size_t bh, size_t n, vla_buffer *buf) {
    float *dst = (float *)buf->mem + bh * n;
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void grad_head(const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *gr,
                      const grad_entry *k, const cpu_grad_params *p, const grad_layout *L, double *mem, int b,
                      int hh) {
    const int T = a->T, dk = a->dk, dv = a->dv;
    const size_t bh = (size_t)b * a->H + hh, Tdk = (size_t)T * dk;
    const int vla = d->mechanism == VLA_MECH_VLA, delta = d->mechanism == VLA_MECH_DELTA;
    const int paper_delta = d->mechanism == VLA_MECH_DELTA_PAPER; /* phi on q only; g [T, dv] */
    const int fmap = d->feature_map == VLA_FMAP_ELU1, fmap_k = fmap && !paper_delta;
    const int gw = paper_delta ? dv : 1;
    const int has_n = d->mechanism == VLA_MECH_LINEAR || (vla && d->normalize_output);
    double *q = mem + L->q, *kf = mem + L->kf, *kh = mem + L->kh;
    double *ur = mem + L->ur, *u = mem + L->u, *v = mem + L->v, *beta = mem + L->beta, *g = mem + L->g;
    double *dO = mem + L->dO;

    /* The forward's preparation (cpu_backend.c run_head), in double. */
    gather_d(a->q, a, b, hh, dk, q);
    gather_d(a->k, a, b, hh, dk, kf);
    gather_d(a->v, a, b, hh, dv, v);
    gather_d(gr->dO, a, b, hh, dv, dO);
    if (fmap)
        for (size_t i = 0; i < Tdk; i++) q[i] = elu1(q[i]);
    if (fmap_k)
        for (size_t i = 0; i < Tdk; i++) kf[i] = elu1(kf[i]);
    if (vla || delta || paper_delta) normalize_rows(kf, kh, T, dk, d->eps, 1.0);
    if (vla) {
        if (a->u) {
            gather_d(a->u, a, b, hh, dk, ur);
            normalize_rows(ur, u, T, dk, d->eps, d->u_scale);
        } else {
            for (size_t i = 0; i < Tdk; i++) u[i] = d->u_scale * kh[i];
        }
    }
    if (a->beta) gather_d(a->beta, a, b, hh, 1, beta);
    if (a->g) gather_d(a->g, a, b, hh, gw, g);

    /* Initial states: given, or S_0 = 0, A_0 = I / lambda0, n_0 = 0; upstream state gradients or 0. */
    double *ST0 = mem + L->ST0, *A0 = mem + L->A0, *n0 = mem + L->n0;
    if (a->S_in) load_state(a->S_in, bh, (size_t)dk * dv, ST0);
    else memset(ST0, 0, sizeof(double) * dk * dv);
    if (a->A_in) load_state(a->A_in, bh, (size_t)dk * dk, A0);
    else {
        memset(A0, 0, sizeof(double) * dk * dk);
        for (int i = 0; i < dk; i++) A0[(size_t)i * dk + i] = 1.0 / d->lambda0;
    }
    if (a->n_in) load_state(a->n_in, bh, (size_t)dk, n0);
    else memset(n0, 0, sizeof(double) * dk);
    double *dST_end = NULL, *dA_end = NULL, *dn_end = NULL;
    if (gr->dS_end) load_state(gr->dS_end, bh, (size_t)dk * dv, dST_end = mem + L->dST_end);
    if (gr->dA_end) load_state(gr->dA_end, bh, (size_t)dk * dk, dA_end = mem + L->dA_end);
    if (gr->dn_end) load_state(gr->dn_end, bh, (size_t)dk, dn_end = mem + L->dn_end);

    /* The gradient accumulators start at zero: the per-token ones and the three state ones. */
    memset(mem + L->dq, 0, sizeof(double) * (L->work - L->dq));
    cpu_grad_head h = {.T = T, .dk = dk, .dv = dv, .t0 = a->t0, .q = q, .kf = kf, .kh = kh, .u = u, .v = v,
                       .beta = a->beta ? beta : NULL, .g = a->g ? g : NULL, .dO = dO, .ST0 = ST0, .A0 = A0,
                       .n0 = n0, .dST_end = dST_end, .dA_end = dA_end, .dn_end = dn_end};
    h.dq = mem + L->dq, h.dkf = mem + L->dkf, h.dval = mem + L->dv;
    if (vla || delta || paper_delta) h.dkh = mem + L->dkh;
    if (vla) h.du = mem + L->du, h.dA0 = mem + L->dA0;
    if (a->beta) h.dbeta = mem + L->dbeta;
    if (a->g) h.dg = mem + L->dg;
    if (d->mechanism != VLA_MECH_SOFTMAX) h.dST0 = mem + L->dST0;
    if (has_n) h.dn0 = mem + L->dn0;

    k->run(&h, p, mem + L->work);

    /* Chain rule back to the raw inputs: u -> (raw u | k^), k^ -> k~, k~ -> k, q~ -> q. */
    double *dq = h.dq, *dkf = h.dkf, *dkh = mem + L->dkh, *du = mem + L->du;
    if (vla && !a->u) /* u_t = s_u k^_t: dk collects that path too */
        for (size_t i = 0; i < Tdk; i++) dkh[i] += d->u_scale * du[i];
    if (vla || delta || paper_delta) normalize_rows_grad(kf, dkh, dkf, T, dk, d->eps, 1.0);
    if (fmap)
        for (size_t i = 0; i < Tdk; i++) dq[i] *= elu1_grad_of(q[i]);
    if (fmap_k)
        for (size_t i = 0; i < Tdk; i++) dkf[i] *= elu1_grad_of(kf[i]);
    if (vla && a->u) {
        /* dur = d/d(raw u) = normalize's chain rule with scale s_u; kh's gradient array is free now. */
        double *dur = dkh;
        memset(dur, 0, sizeof(double) * Tdk);
        normalize_rows_grad(ur, du, dur, T, dk, d->eps, d->u_scale);
        if (gr->du) scatter_f(dur, a, b, hh, dk, gr->du);
    }

    if (gr->dq) scatter_f(dq, a, b, hh, dk, gr->dq);
    if (gr->dk) scatter_f(dkf, a, b, hh, dk, gr->dk);
    if (gr->dv) scatter_f(h.dval, a, b, hh, dv, gr->dv);
    if (gr->dbeta) scatter_f(h.dbeta, a, b, hh, 1, gr->dbeta);
    if (gr->dg) scatter_f(h.dg, a, b, hh, gw, gr->dg);
    if (gr->dS_0) store_state(h.dST0, bh, (size_t)dk * dv, gr->dS_0);
    if (gr->dA_0) {
        /* A is symmetric: the gradient returned is the symmetric part (VLA-MATH 5). */
        double *dA = h.dA0;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < i; j++) {
                const double s = 0.5 * (dA[(size_t)i * dk + j] + dA[(size_t)j * dk + i]);
                dA[(size_t)i * dk + j] = dA[(size_t)j * dk + i] = s;
            }
        store_state(dA, bh, (size_t)dk * dk, gr->dA_0);
    }
    if (gr->dn_0) store_state(h.dn0, bh, (size_t)dk, gr->dn_0);
}

vla_status cpu_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g) {
    const grad_entry *k = NULL;
    for (size_t i = 0; i < sizeof grad_kernels / sizeof grad_kernels[0]; i++)
        if (grad_kernels[i].mech == d->mechanism && grad_kernels[i].algo == d->algorithm) k = &grad_kernels[i];
    if (!k)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "vla_attention_backward: the cpu backend has no %s backward for %s",
                        vla_algorithm_name(d->algorithm), vla_mechanism_name(d->mechanism));

    const int heads = a->B * a->H;
    int outer = 1, inner = 1;
    cpu_split_threads(b, heads, &outer, &inner);
    const char *apart = getenv("VLA_CPU_APART"); /* read here, before the threads */
    const cpu_grad_params p = {.chunk = d->chunk, .eps = d->eps, .refresh = d->refresh, .rho = d->refresh_size,
                               .normalize = d->normalize_output, .scale = d->scale, .inner_threads = inner,
                               .apart_segment = apart && strcmp(apart, "segment") == 0};
    const size_t gate_width = d->mechanism == VLA_MECH_DELTA_PAPER ? (size_t)a->dv : 1;
    const grad_layout L = grad_layout_of(a, gate_width, k->work(a->T, a->dk, a->dv, &p));
    void *work = NULL;
    vla_status s = cpu_head_work_alloc(b, "vla_attention_backward", d, a->T, L.total, sizeof(double), outer, &work);
    if (s != VLA_OK) return s;
    double *mem = work;
#ifdef VLA_HAVE_CBLAS
    openblas_set_num_threads(1); /* as the forward: our threads are over heads (or softmax's tiles) */
#endif

#pragma omp parallel for num_threads(outer) schedule(dynamic, 1) if (outer > 1)
    for (int bh = 0; bh < heads; bh++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        grad_head(d, a, g, k, &p, &L, mem + (size_t)me * L.total, bh / a->H, bh % a->H);
    }
    free(mem);
    return VLA_OK;
}
