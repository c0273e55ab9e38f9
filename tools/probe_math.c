/* probe_math: see probe_math.h. Everything here is float64 except what the library returns. */
#include "probe_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ----------------------------------------------------------------------- */

void pm_seed(pm_rng *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; }

static uint64_t next_u64(pm_rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double pm_uniform(pm_rng *r) { return ((double)(next_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double pm_normal(pm_rng *r) { /* Box-Muller, one value per pair: simple and reproducible */
    double u1 = pm_uniform(r), u2 = pm_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void pm_randn(pm_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)pm_normal(r);
}

/* ---- small dense linear algebra ----------------------------------------------------------- */

double pm_dot(const double *x, const double *y, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

double pm_norm(const double *x, int n) { return sqrt(pm_dot(x, x, n)); }

double pm_norm_f(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pm_median(double *x, int n) {
    if (n <= 0) return NAN;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double pm_max(const double *x, int n) {
    double m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* One Jacobi rotation of columns x, y (length n) that makes them orthogonal. Returns 0 when
 * they already are (to 1e-15 relative), 1 after rotating. */
static int jacobi_pair(double *x, double *y, int n) {
    double al = pm_dot(x, x, n), be = pm_dot(y, y, n), ga = pm_dot(x, y, n);
    if (ga == 0.0 || fabs(ga) <= 1e-15 * sqrt(al * be)) return 0;
    double zeta = (be - al) / (2.0 * ga);
    double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
    double c = 1.0 / sqrt(1.0 + t * t), s = c * t;
    for (int i = 0; i < n; i++) {
        double xi = x[i], yi = y[i];
        x[i] = c * xi - s * yi;
        y[i] = s * xi + c * yi;
    }
    return 1;
}

double pm_svd_max(const double *M, int rows, int cols) {
    /* Columns stored contiguously (cols x rows) so each rotation touches two rows of W. */
    double *W = malloc((size_t)rows * cols * sizeof *W);
    if (!W) return NAN;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) W[(size_t)j * rows + i] = M[(size_t)i * cols + j];
    for (int sweep = 0; sweep < 100; sweep++) {
        int rotated = 0;
        for (int p = 0; p < cols; p++)
            for (int q = p + 1; q < cols; q++)
                rotated |= jacobi_pair(W + (size_t)p * rows, W + (size_t)q * rows, rows);
        if (!rotated) break;
    }
    double best = 0.0; /* the singular values are now the column norms */
    for (int j = 0; j < cols; j++) {
        double nj = pm_norm(W + (size_t)j * rows, rows);
        if (nj > best) best = nj;
    }
    free(W);
    return best;
}

/* ---- Jacobian spectral norms -------------------------------------------------------------- */

double pm_rank1_norm_unit_closed(double c) {
    double r = 5.0 - 4.0 * c;
    return 0.5 * (1.0 + sqrt(r > 0 ? r : 0.0));
}

double pm_rank1_norm_closed(const double *a, const double *k, int d) {
    double c = pm_dot(a, k, d);
    double s = 2.0 - 2.0 * c + pm_dot(a, a, d) * pm_dot(k, k, d), p = fabs(1.0 - c);
    double lo = s - 2.0 * p; /* (sigma1 - sigma2)^2 >= 0; rounding may dip below */
    return 0.5 * (sqrt(s + 2.0 * p) + sqrt(lo > 0 ? lo : 0.0));
}

/* Appends v to the orthonormal rows Q[0..r) (d each) unless it lies in their span (relative
 * residual below 1e-10 after two Gram-Schmidt passes). Returns the new row count. */
static int basis_add(double *Q, int r, int d, const double *v) {
    double nv = pm_norm(v, d);
    if (r >= d || nv == 0.0) return r;
    double *w = Q + (size_t)r * d;
    memcpy(w, v, (size_t)d * sizeof *w);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < r; i++) {
            double h = pm_dot(Q + (size_t)i * d, w, d);
            for (int j = 0; j < d; j++) w[j] -= h * Q[(size_t)i * d + j];
        }
    double nw = pm_norm(w, d);
    if (nw <= 1e-10 * nv) return r;
    for (int j = 0; j < d; j++) w[j] /= nw;
    return r + 1;
}

/* y <- F_0 F_1 ... F_{m-1} y with F_s = I - k_s a_s^T (the innermost factor first). */
static void apply_window(const double *K, const double *W, int m, int d, double *y) {
    for (int s = m - 1; s >= 0; s--) {
        double h = pm_dot(W + (size_t)s * d, y, d);
        for (int j = 0; j < d; j++) y[j] -= h * K[(size_t)s * d + j];
    }
}

double pm_window_norm(const double *K, const double *W, int m, int d) {
    int cap = 2 * m < d ? 2 * m : d;
    double *Q = malloc((size_t)cap * d * sizeof *Q), *Y = malloc((size_t)cap * d * sizeof *Y);
    double *B = malloc((size_t)cap * cap * sizeof *B);
    double out = NAN;
    if (!Q || !Y || !B) goto done;
    int r = 0; /* Q: orthonormal rows spanning {k_s, a_s} */
    for (int s = 0; s < m; s++) {
        r = basis_add(Q, r, d, K + (size_t)s * d);
        r = basis_add(Q, r, d, W + (size_t)s * d);
    }
    memcpy(Y, Q, (size_t)r * d * sizeof *Y);
    for (int j = 0; j < r; j++) apply_window(K, W, m, d, Y + (size_t)j * d);
    for (int i = 0; i < r; i++) /* B = Q^T P Q, r x r */
        for (int j = 0; j < r; j++) B[(size_t)i * r + j] = pm_dot(Q + (size_t)i * d, Y + (size_t)j * d, d);
    out = r > 0 ? pm_svd_max(B, r, r) : 1.0;
    if (r < d && out < 1.0) out = 1.0; /* the identity on the complement */
done:
    free(Q), free(Y), free(B);
    return out;
}

double pm_window_norm_dense(const double *K, const double *W, int m, int d) {
    double *P = calloc((size_t)d * d, sizeof *P), *Pk = malloc((size_t)d * sizeof *Pk);
    double out = NAN;
    if (!P || !Pk) goto done;
    for (int i = 0; i < d; i++) P[(size_t)i * d + i] = 1.0;
    for (int s = 0; s < m; s++) { /* P <- P F_s = P - (P k_s) a_s^T */
        const double *k = K + (size_t)s * d, *a = W + (size_t)s * d;
        for (int i = 0; i < d; i++) Pk[i] = pm_dot(P + (size_t)i * d, k, d);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) P[(size_t)i * d + j] -= Pk[i] * a[j];
    }
    out = pm_svd_max(P, d, d);
done:
    free(P), free(Pk);
    return out;
}

/* ---- the A recurrence in double -------------------------------------------------------------- */

void pm_vla_from_desc(pm_vla *p, const vla_attn_desc *d, int dk) {
    p->lambda0 = d->lambda0;
    p->eps = d->eps;
    p->rho = d->refresh_size;
    p->refresh = d->refresh;
    p->u_scale = d->u_scale == 0.0 ? 1.0 / sqrt((double)dk) : d->u_scale;
    p->elu = d->feature_map == VLA_FMAP_ELU1;
    p->unnormalised = 0;
}

static double elu1(double x) { return x > 0 ? x + 1.0 : exp(x); }

/* out = s * x / max(||x||, eps) */
static void normalize_to(const double *x, int d, double eps, double s, double *out) {
    double n = pm_norm(x, d);
    double f = s / (n > eps ? n : eps);
    for (int j = 0; j < d; j++) out[j] = f * x[j];
}

/* A <- A - z z^T / max(1 + u.z, eps), z = A u (Sherman-Morrison); z is scratch [d]. */
static void sm_update(double *A, const double *u, int d, double eps, double *z) {
    for (int i = 0; i < d; i++) z[i] = pm_dot(A + (size_t)i * d, u, d);
    double den = 1.0 + pm_dot(u, z, d);
    if (den < eps) den = eps;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) A[(size_t)i * d + j] -= z[i] * z[j] / den;
}

/* One token's k (as used in J), u, and the vector A_t is applied to, per p's variant. */
static void token_vectors(const pm_vla *p, const float *k, const float *u, int d, double *kraw, double *kh,
                          double *uu) {
    for (int j = 0; j < d; j++) kraw[j] = p->elu && !p->unnormalised ? elu1(k[j]) : k[j];
    normalize_to(kraw, d, p->eps, 1.0, kh);
    if (p->unnormalised) {
        memcpy(uu, kh, (size_t)d * sizeof *uu); /* u = normalize(k), unscaled (VLA-MATH 4) */
    } else if (u) {
        for (int j = 0; j < d; j++) uu[j] = u[j];
        normalize_to(uu, d, p->eps, p->u_scale, uu);
    } else {
        for (int j = 0; j < d; j++) uu[j] = p->u_scale * kh[j];
    }
}

int pm_vla_write_vectors(const pm_vla *p, const float *K, const float *U, int T, int d, double *kout,
                         double *aout) {
    double *A = calloc((size_t)d * d, sizeof *A), *v = malloc((size_t)4 * d * sizeof *v);
    if (!A || !v) {
        free(A), free(v);
        return -1;
    }
    double *kraw = v, *kh = v + d, *uu = v + 2 * d, *z = v + 3 * d;
    for (int i = 0; i < d; i++) A[(size_t)i * d + i] = 1.0 / p->lambda0;
    for (int t = 0; t < T; t++) {
        token_vectors(p, K + (size_t)t * d, U ? U + (size_t)t * d : NULL, d, kraw, kh, uu);
        sm_update(A, uu, d, p->eps, z);
        if (p->refresh > 0 && (t + 1) % p->refresh == 0)
            for (int i = 0; i < d; i++) A[(size_t)i * d + i] += p->rho;
        const double *kt = p->unnormalised ? kraw : kh; /* post-update A_t (paper A.1) */
        double *a = aout + (size_t)t * d;
        for (int i = 0; i < d; i++) a[i] = pm_dot(A + (size_t)i * d, kt, d);
        if (!p->unnormalised) normalize_to(a, d, p->eps, 1.0, a);
        memcpy(kout + (size_t)t * d, kt, (size_t)d * sizeof *kout);
    }
    free(A), free(v);
    return 0;
}

void pm_jacobian_norms(const double *K, const double *W, int T, int d, int window, int unit, double *step,
                       double *win, double *closed_diff) {
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        const double *k = K + (size_t)t * d, *a = W + (size_t)t * d;
        step[t] = pm_window_norm(k, a, 1, d);
        double cf = unit ? pm_rank1_norm_unit_closed(pm_dot(a, k, d)) : pm_rank1_norm_closed(a, k, d);
        double rel = fabs(step[t] - cf) / cf;
        if (!(rel <= worst)) worst = rel; /* NaN sticks */
    }
    for (int w = 0; window > 0 && w < T / window; w++)
        win[w] = pm_window_norm(K + (size_t)w * window * d, W + (size_t)w * window * d, window, d);
    *closed_diff = worst;
}

/* ---- drivers of the library ------------------------------------------------------------------ */

typedef struct bufset {
    vla_buffer *q, *k, *v, *u, *o, *S, *A, *n;
} bufset;

static int desc_has_n(const vla_attn_desc *d) {
    return d->mechanism == VLA_MECH_LINEAR || (d->mechanism == VLA_MECH_VLA && d->normalize_output);
}

static void bufs_free(bufset *b) {
    vla_buffer *all[8] = {b->q, b->k, b->v, b->u, b->o, b->S, b->A, b->n};
    for (int i = 0; i < 8; i++) vla_buffer_free(all[i]);
    memset(b, 0, sizeof *b);
}

static vla_status alloc_f(vla_backend *be, size_t n, vla_buffer **out) {
    return vla_buffer_alloc(be, n * sizeof(float), out);
}

/* Buffers for pieces of up to Tp tokens and the carried states. */
static vla_status bufs_alloc(vla_backend *be, const vla_attn_desc *d, int Tp, int dk, int dv, int with_u,
                             bufset *b) {
    vla_status st = VLA_OK;
    int vla = d->mechanism == VLA_MECH_VLA;
    size_t nqk = (size_t)Tp * dk, nvo = (size_t)Tp * dv;
    memset(b, 0, sizeof *b);
    if (!st) st = alloc_f(be, nqk, &b->q);
    if (!st) st = alloc_f(be, nqk, &b->k);
    if (!st) st = alloc_f(be, nvo, &b->v);
    if (!st) st = alloc_f(be, nvo, &b->o);
    if (!st) st = alloc_f(be, (size_t)dk * dv, &b->S);
    if (!st && with_u) st = alloc_f(be, nqk, &b->u);
    if (!st && vla) st = alloc_f(be, (size_t)dk * dk, &b->A);
    if (!st && desc_has_n(d)) st = alloc_f(be, (size_t)dk, &b->n);
    if (st) bufs_free(b);
    return st;
}

static vla_status upload_rows(vla_buffer *buf, const float *x, int t, int len, int D) {
    if (!buf || !x) return VLA_OK;
    return vla_buffer_upload(buf, 0, x + (size_t)t * D, (size_t)len * D * sizeof(float));
}

/* Tokens [t, t + len) of s into the piece buffers. */
static vla_status upload_piece(bufset *b, const pm_seq *s, int t, int len) {
    vla_status st = upload_rows(b->q, s->q, t, len, s->dk);
    if (!st) st = upload_rows(b->k, s->k, t, len, s->dk);
    if (!st) st = upload_rows(b->v, s->v, t, len, s->dv);
    if (!st) st = upload_rows(b->u, s->u, t, len, s->dk);
    return st;
}

/* The args of a piece at position t: states carried in place (none in for the first piece). */
static void piece_args(vla_attn_args *a, const bufset *b, const pm_seq *s, int t, int len) {
    memset(a, 0, sizeof *a);
    a->B = a->H = 1;
    a->T = len;
    a->dk = s->dk;
    a->dv = s->dv;
    a->t0 = t;
    a->q = b->q, a->k = b->k, a->v = b->v, a->u = b->u, a->o = b->o;
    a->S_out = b->S, a->A_out = b->A, a->n_out = b->n;
    if (t > 0) a->S_in = b->S, a->A_in = b->A, a->n_in = b->n;
}

static vla_status download_norm(const vla_buffer *buf, float *host, size_t n, double *norm) {
    vla_status st = vla_buffer_download(buf, 0, host, n * sizeof(float));
    if (!st) *norm = pm_norm_f(host, n);
    return st;
}

vla_status pm_state_norms(vla_backend *be, const vla_attn_desc *d, const pm_seq *s, int every, double *S_norm,
                          double *A_norm) {
    const int dk = s->dk, dv = s->dv;
    int with_u = s->u && d->mechanism == VLA_MECH_VLA;
    bufset b;
    vla_status st = bufs_alloc(be, d, every, dk, dv, with_u, &b);
    if (st) return st;
    size_t nh = (size_t)dk * (dv > dk ? dv : dk);
    float *host = malloc(nh * sizeof *host);
    if (!host) st = VLA_ERR_OUT_OF_MEMORY;
    for (int t = 0, j = 0; !st && t < s->T; t += every, j++) {
        int len = s->T - t < every ? s->T - t : every;
        vla_attn_args a;
        st = upload_piece(&b, s, t, len);
        piece_args(&a, &b, s, t, len);
        if (!st) st = vla_attention_forward(be, d, &a);
        if (!st) st = download_norm(b.S, host, (size_t)dk * dv, &S_norm[j]);
        if (A_norm) A_norm[j] = NAN;
        if (!st && A_norm && b.A) st = download_norm(b.A, host, (size_t)dk * dk, &A_norm[j]);
    }
    free(host);
    bufs_free(&b);
    return st;
}

vla_status pm_final_state(vla_backend *be, const vla_attn_desc *d, const pm_seq *s, float *S) {
    bufset b;
    vla_status st = bufs_alloc(be, d, s->T, s->dk, s->dv, s->u && d->mechanism == VLA_MECH_VLA, &b);
    if (st) return st;
    vla_attn_args a;
    st = upload_piece(&b, s, 0, s->T);
    piece_args(&a, &b, s, 0, s->T);
    if (!st) st = vla_attention_forward(be, d, &a);
    if (!st) st = vla_buffer_download(b.S, 0, S, (size_t)s->dk * s->dv * sizeof(float));
    bufs_free(&b);
    return st;
}

vla_status pm_library_write_vectors(vla_backend *be, const vla_attn_desc *d, const float *K, const float *U,
                                    int T, int dk, double *aout) {
    float *ones = malloc((size_t)T * sizeof *ones), *a = malloc((size_t)dk * sizeof *a);
    if (!ones || !a) {
        free(ones), free(a);
        return VLA_ERR_OUT_OF_MEMORY;
    }
    for (int t = 0; t < T; t++) ones[t] = 1.0f;
    pm_seq s = {T, dk, 1, K, K, ones, U};
    bufset b;
    vla_status st = bufs_alloc(be, d, 1, dk, 1, U != NULL, &b);
    for (int t = 0; !st && t < T; t++) {
        vla_attn_args args;
        st = upload_piece(&b, &s, t, 1);
        piece_args(&args, &b, &s, t, 1);
        args.S_in = NULL; /* S_{t-1} = 0, so S_t = (v_t - 0) a_t^T = a_t^T */
        if (!st) st = vla_attention_forward(be, d, &args);
        if (!st) st = vla_buffer_download(b.S, 0, a, (size_t)dk * sizeof *a);
        for (int j = 0; !st && j < dk; j++) aout[(size_t)t * dk + j] = a[j];
    }
    bufs_free(&b);
    free(ones), free(a);
    return st;
}

/* ---- capacity -------------------------------------------------------------------------------- */

void pm_make_keys(pm_rng *r, int n, int d, int orthonormal, float *K) {
    /* blk: this block's rows so far (double, so the Gram-Schmidt is exact to 1e-16); g: a draw */
    double *blk = malloc((size_t)(d + 1) * d * sizeof *blk), *g = blk ? blk + (size_t)d * d : NULL;
    if (!blk) return;
    for (int i = 0; i < n; i++) {
        int row = i % d;
        double *w = blk + (size_t)row * d;
        for (;;) {
            for (int j = 0; j < d; j++) g[j] = pm_normal(r);
            if (!orthonormal) {
                memcpy(w, g, (size_t)d * sizeof *w);
                break;
            }
            if (basis_add(blk, row, d, g) > row) break; /* else g was in the span (probability 0) */
        }
        normalize_to(w, d, 0.0, 1.0, w);
        for (int j = 0; j < d; j++) K[(size_t)i * d + j] = (float)w[j];
    }
    free(blk);
}

static double cosine(const double *x, const double *y, int n) {
    double nx = pm_norm(x, n), ny = pm_norm(y, n);
    return nx > 0 && ny > 0 ? pm_dot(x, y, n) / (nx * ny) : 0.0;
}

/* R [n, dv]: r_i = S phi(k_i), S stored [dk, dv]. */
static void read_all(const float *S, const float *K, int n, int dk, int dv, vla_feature_map phi, double *R) {
    for (int i = 0; i < n; i++) {
        double *r = R + (size_t)i * dv;
        memset(r, 0, (size_t)dv * sizeof *r);
        for (int a = 0; a < dk; a++) {
            double x = K[(size_t)i * dk + a];
            if (phi == VLA_FMAP_ELU1) x = elu1(x);
            for (int j = 0; j < dv; j++) r[j] += (double)S[(size_t)a * dv + j] * x;
        }
    }
}

void pm_recall(const float *S, const float *K, const float *V, int n, int dk, int dv, vla_feature_map phi,
               pm_recall_stats *out) {
    double *R = malloc((size_t)n * dv * sizeof *R), *Vd = malloc((size_t)n * dv * sizeof *Vd);
    out->recall = out->mean_cos = out->mean_relerr = NAN;
    if (!R || !Vd) goto done;
    read_all(S, K, n, dk, dv, phi, R);
    for (size_t i = 0; i < (size_t)n * dv; i++) Vd[i] = V[i];
    int hits = 0;
    double csum = 0.0, esum = 0.0;
    for (int i = 0; i < n; i++) {
        const double *r = R + (size_t)i * dv, *v = Vd + (size_t)i * dv;
        double own = cosine(r, v, dv), e2 = 0.0;
        int hit = 1; /* strictly nearer to v_i than to every other value: a zero read never hits */
        for (int j = 0; j < n && hit; j++)
            if (j != i && cosine(r, Vd + (size_t)j * dv, dv) >= own) hit = 0;
        for (int j = 0; j < dv; j++) e2 += (r[j] - v[j]) * (r[j] - v[j]);
        hits += hit;
        csum += own;
        esum += sqrt(e2) / pm_norm(v, dv);
    }
    out->recall = (double)hits / n;
    out->mean_cos = csum / n;
    out->mean_relerr = esum / n;
done:
    free(R), free(Vd);
}

vla_status pm_capacity_point(vla_backend *be, const vla_attn_desc *d, const float *K, const float *V,
                             const float *U, int n, int dk, int dv, pm_recall_stats *out) {
    float *S = malloc((size_t)dk * dv * sizeof *S);
    if (!S) return VLA_ERR_OUT_OF_MEMORY;
    pm_seq s = {n, dk, dv, K, K, V, d->mechanism == VLA_MECH_VLA ? U : NULL};
    vla_status st = pm_final_state(be, d, &s, S);
    /* DeltaNet reads with o = S q (no feature map); the others as they map their queries. */
    vla_feature_map phi = d->mechanism == VLA_MECH_DELTA ? VLA_FMAP_NONE : d->feature_map;
    if (!st) pm_recall(S, K, V, n, dk, dv, phi, out);
    free(S);
    return st;
}
