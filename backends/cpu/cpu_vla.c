/* Variational Linear Attention, the four algorithms of VLA-MATH 2. Per head, storage layout:
 * ST [dk, dv] (S transposed), A [dk, dk], rows a_t of Al [T, dk].
 *
 *   z_t = A_{t-1} u_t;  A_t = A_{t-1} - z z^T / max(1 + u.z, eps);  (+ rho I at a refresh)
 *   a_t = normalize(A_t k^_t);  ST_t = ST_{t-1} + a_t (v_t - ST_{t-1}^T k^_t)^T;  o_t = ST_t^T q~_t
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* 1 when token t of this piece is a refresh point: (t0 + t + 1) % R == 0 (absolute position). */
static int is_refresh(const cpu_head *h, const cpu_params *p, int t) {
    return p->refresh > 0 && (h->t0 + t + 1) % p->refresh == 0;
}

/* One token of the A recurrence (Sherman-Morrison, then the refresh); writes a_t.
 * A is kept in double here: in float32 the rank-1 downdates drift (relative error of o about
 * 1e-5 at T = 4096 and 4e-5 at T = 8192, d = 32..64, growing with T). Double costs little beside
 * the S update and keeps the sequential form the reference it should be (the chunked forms' A
 * part is double too: see a_part). z [dk] is work. */
static void a_step(double *A, const float *u, const float *k, int refresh, double rho, double eps, int dk,
                   double *z, float *a) {
    double uz = 0.0;
    for (int i = 0; i < dk; i++) {
        const double *row = A + (size_t)i * dk;
        double s = 0.0;
        for (int j = 0; j < dk; j++) s += row[j] * u[j];
        z[i] = s;
        uz += u[i] * s;
    }
    const double inv = 1.0 / fmax(1.0 + uz, eps);
    for (int i = 0; i < dk; i++) {
        const double zi = z[i] * inv;
        double *row = A + (size_t)i * dk;
        for (int j = 0; j < dk; j++) row[j] -= zi * z[j];
    }
    if (refresh)
        for (int i = 0; i < dk; i++) A[(size_t)i * dk + i] += rho;
    double nn = 0.0;
    for (int i = 0; i < dk; i++) {
        const double *row = A + (size_t)i * dk;
        double s = 0.0;
        for (int j = 0; j < dk; j++) s += row[j] * k[j];
        z[i] = s;
        nn += s * s;
    }
    const double scale = 1.0 / fmax(sqrt(nn), eps);
    for (int i = 0; i < dk; i++) a[i] = (float)(z[i] * scale);
}

/* The float A state <-> the double copy the recurrence runs on. */
static void a_load(double *Ad, const float *A, int dk) {
    for (size_t i = 0; i < (size_t)dk * dk; i++) Ad[i] = A[i];
}
static void a_store(float *A, const double *Ad, int dk) {
    for (size_t i = 0; i < (size_t)dk * dk; i++) A[i] = (float)Ad[i];
}

/* ---- 2.1 sequential ---- */

/* Work arrays are carved with offsets rounded to 16 floats: 64-byte aligned, and a double
 * array may start at any of them. */
static size_t pad16(size_t n) { return (n + 15) / 16 * 16; }

/* Doubles (A and z) first, so they stay 8-byte aligned, then floats. */
static size_t a_double_work(int dk) { return 2 * ((size_t)dk * dk + dk); }

size_t cpu_vla_sequential_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T; (void)p;
    return a_double_work(dk) + (size_t)dk + dv;
}

void cpu_vla_sequential(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv;
    double *Ad = (double *)work, *z = Ad + (size_t)dk * dk;
    float *a = work + a_double_work(dk), *e = a + dk;
    a_load(Ad, h->A, dk);
    for (int t = 0; t < h->T; t++) {
        const float *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        a_step(Ad, h->u + (size_t)t * dk, k, is_refresh(h, p, t), p->rho, p->eps, dk, z, a);
        cpu_vecmat(k, h->ST, dk, dv, e); /* e = v - S k */
        for (int j = 0; j < dv; j++) e[j] = v[j] - e[j];
        for (int i = 0; i < dk; i++) {
            float *row = h->ST + (size_t)i * dv;
            for (int j = 0; j < dv; j++) row[j] += a[i] * e[j];
        }
        cpu_vecmat(h->q + (size_t)t * dk, h->ST, dk, dv, h->o + (size_t)t * dv);
    }
    a_store(h->A, Ad, dk);
    if (p->normalize) cpu_normalize_output(h, p->eps, 0);
}

/* ---- chunk boundaries: at most C tokens, and every refresh point ends a chunk ---- */

static int chunk_end(const cpu_head *h, const cpu_params *p, int ts) {
    int te = ts + p->chunk < h->T ? ts + p->chunk : h->T;
    if (p->refresh > 0) {
        const int64_t r = (h->t0 + ts + 1) % p->refresh;
        const int64_t next = ts + (p->refresh - r) % p->refresh; /* first refresh token >= ts */
        if (next + 1 < te) te = (int)(next + 1);
    }
    return te;
}

/* ---- 2.3 chunked: the A part (exact Woodbury), in double ---- */

/* Doubles a_part needs besides A: z [dk], G and M [C, C], U, K, Z and KA [C, dk]. The A part
 * runs in double on the CPU: in float32 (sgemm, a float Cholesky and solve, A rounded every chunk)
 * the chunked and two-level outputs sat at 0.75e-4 to 1.03e-4 of the float64 reference at
 * lambda0 = 1e-3 (vla-check's lambda1e-3 case, 8 seeds; 1.03e-4 failed CI's 1e-4),
 * where VLA-MATH 3 expects about 1e-4: A_0 = 1000 I makes the downdates A0 - Z^T Z cancel. In
 * double they are at 2-3e-7, as the sequential form (whose A is double for the same reason). */
static size_t a_part_doubles(int C, int dk) { return (size_t)dk + 2 * (size_t)C * C + 4 * (size_t)C * dk; }
/* In floats: A (double, carried over the chunks), then a_part's doubles. */
static size_t a_part_work(int C, int dk) { return 2 * ((size_t)dk * dk + a_part_doubles(C, dk)); }

/* G = L L^T in place (lower triangle, row-major [c, c]); 0, or -1 when G is not positive definite. */
static int cholesky_d(double *G, int c) {
    for (int j = 0; j < c; j++) {
        double *gj = G + (size_t)j * c;
        double d = gj[j];
        for (int k = 0; k < j; k++) d -= gj[k] * gj[k];
        if (!(d > 0.0) || !isfinite(d)) return -1;
        d = sqrt(d);
        gj[j] = d;
        for (int i = j + 1; i < c; i++) {
            double *gi = G + (size_t)i * c, x = gi[j];
            for (int k = 0; k < j; k++) x -= gi[k] * gj[k];
            gi[j] = x / d;
        }
    }
    return 0;
}

/* Advances A (Ad, double, dk x dk) over tokens [ts, ts + c) and writes their a_t into Al [c, dk].
 *   G = I + U A0 U^T = L L^T,  Z = L^{-1} U A0,  Al = rownorm(K A0 - tril(K Z^T) Z),  A -= Z^T Z
 * dw: a_part_doubles(c, dk) doubles. */
static void a_part(const cpu_head *h, const cpu_params *p, int ts, int c, float *Al, double *Ad, double *dw) {
    const int dk = h->dk;
    const float *U = h->u + (size_t)ts * dk, *K = h->kh + (size_t)ts * dk;
    const int refresh_last = is_refresh(h, p, ts + c - 1);
    double *zw = dw, *G = zw + dk, *M = G + (size_t)c * c, *Ud = M + (size_t)c * c, *Kd = Ud + (size_t)c * dk;
    double *Z = Kd + (size_t)c * dk, *KA = Z + (size_t)c * dk;
    for (size_t e = 0; e < (size_t)c * dk; e++) Ud[e] = U[e], Kd[e] = K[e];
    cpu_gemm_d(0, 0, c, dk, dk, 1.0, Ud, dk, Ad, dk, 0.0, Z, dk); /* Z = U A0 */
    cpu_gemm_d(0, 1, c, c, dk, 1.0, Z, dk, Ud, dk, 0.0, G, c);   /* G = U A0 U^T */
    for (int i = 0; i < c; i++) G[(size_t)i * c + i] += 1.0;
    if (cholesky_d(G, c) != 0) {
        /* A0 is not positive definite (a caller's A_in can be anything): the sequential
         * recurrence, with its eps floor, is still defined; run it for this chunk. */
        for (int t = 0; t < c; t++)
            a_step(Ad, U + (size_t)t * dk, K + (size_t)t * dk, is_refresh(h, p, ts + t), p->rho, p->eps, dk, zw,
                   Al + (size_t)t * dk);
        return;
    }
    for (int t = 0; t < c; t++) { /* Z = L^{-1} Z, row by row */
        double *z = Z + (size_t)t * dk;
        for (int r = 0; r < t; r++) {
            const double l = G[(size_t)t * c + r], *zr = Z + (size_t)r * dk;
            for (int j = 0; j < dk; j++) z[j] -= l * zr[j];
        }
        const double inv = 1.0 / G[(size_t)t * c + t];
        for (int j = 0; j < dk; j++) z[j] *= inv;
    }
    cpu_gemm_d(0, 0, c, dk, dk, 1.0, Kd, dk, Ad, dk, 0.0, KA, dk); /* KA = K A0 */
    cpu_gemm_d(0, 1, c, c, dk, 1.0, Kd, dk, Z, dk, 0.0, M, c);     /* M = K Z^T */
    for (int t = 0; t < c; t++)
        for (int r = t + 1; r < c; r++) M[(size_t)t * c + r] = 0.0; /* keep r <= t */
    cpu_gemm_d(0, 0, c, dk, c, -1.0, M, c, Z, dk, 1.0, KA, dk);    /* KA -= tril(M) Z */
    cpu_gemm_d(1, 0, dk, dk, c, -1.0, Z, dk, Z, dk, 1.0, Ad, dk);  /* A -= Z^T Z */
    if (refresh_last) {
        /* The refresh falls on the chunk's last token: its a gains rho k^ before it is normalised. */
        double *al = KA + (size_t)(c - 1) * dk;
        for (int i = 0; i < dk; i++) al[i] += p->rho * Kd[(size_t)(c - 1) * dk + i];
        for (int i = 0; i < dk; i++) Ad[(size_t)i * dk + i] += p->rho;
    }
    for (int t = 0; t < c; t++) { /* a_t = KA row t / max(||.||, eps) */
        const double *ka = KA + (size_t)t * dk;
        double nn = 0.0;
        for (int j = 0; j < dk; j++) nn += ka[j] * ka[j];
        const double scale = 1.0 / fmax(sqrt(nn), p->eps);
        for (int j = 0; j < dk; j++) Al[(size_t)t * dk + j] = (float)(ka[j] * scale);
    }
}

/* ---- 2.3 chunked ---- */

size_t cpu_vla_chunked_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T;
    return pad16((size_t)p->chunk * dk) + pad16(a_part_work(p->chunk, dk)) + cpu_chunk_work(p->chunk, dk, dv);
}

void cpu_vla_chunked(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv;
    float *Al = work, *aw = Al + pad16((size_t)p->chunk * dk), *sw = aw + pad16(a_part_work(p->chunk, dk));
    double *Ad = (double *)aw, *dw = Ad + (size_t)dk * dk;
    a_load(Ad, h->A, dk);
    for (int ts = 0; ts < h->T;) {
        const int te = chunk_end(h, p, ts), c = te - ts;
        a_part(h, p, ts, c, Al, Ad, dw);
        cpu_chunk_step(c, dk, dv, 1, h->kh + (size_t)ts * dk, Al, h->v + (size_t)ts * dv, h->q + (size_t)ts * dk,
                       NULL, h->ST, h->o + (size_t)ts * dv, sw);
        ts = te;
    }
    a_store(h->A, Ad, dk);
    if (p->normalize) cpu_normalize_output(h, p->eps, 0);
}

/* ---- 2.2 Blelloch scan over per-token affine maps ---- */

static size_t map_floats(int dk, int dv) { return (size_t)dk * dk + (size_t)dk * dv; }

size_t cpu_vla_scan_work(int T, int dk, int dv, const cpu_params *p) {
    (void)p;
    return a_double_work(dk) + (size_t)T * map_floats(dk, dv) + (size_t)T * dk + map_floats(dk, dv) + (size_t)dk + dv;
}

void cpu_vla_scan(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv, T = h->T;
    const size_t mf = map_floats(dk, dv);
    double *Ad = (double *)work, *z = Ad + (size_t)dk * dk;
    float *E = work + a_double_work(dk);   /* [T] maps (M_t, N_t) */
    float *Al = E + (size_t)T * mf;        /* [T, dk] */
    float *tmp = Al + (size_t)T * dk;      /* [mf] */
    float *y = tmp + mf, *o2 = y + dk;
    /* The a_t first, by the sequential A recurrence (O(T dk^2), as the paper's code does). */
    a_load(Ad, h->A, dk);
    for (int t = 0; t < T; t++)
        a_step(Ad, h->u + (size_t)t * dk, h->kh + (size_t)t * dk, is_refresh(h, p, t), p->rho, p->eps, dk, z,
               Al + (size_t)t * dk);
    a_store(h->A, Ad, dk);
    /* Per token, on the transposed state: ST_t = (I - a k^T) ST_{t-1} + a v^T. */
    for (int t = 0; t < T; t++) {
        float *M = E + (size_t)t * mf, *N = M + (size_t)dk * dk;
        const float *a = Al + (size_t)t * dk, *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        for (int i = 0; i < dk; i++) {
            for (int j = 0; j < dk; j++) M[(size_t)i * dk + j] = (i == j) - a[i] * k[j];
            for (int j = 0; j < dv; j++) N[(size_t)i * dv + j] = a[i] * v[j];
        }
    }
    cpu_affine_scan(E, T, dk, dv, tmp);
    /* o_t = (M_t ST0 + N_t)^T q = ST0^T (M_t^T q) + N_t^T q. */
    for (int t = 0; t < T; t++) {
        const float *M = E + (size_t)t * mf, *N = M + (size_t)dk * dk, *q = h->q + (size_t)t * dk;
        float *o = h->o + (size_t)t * dv;
        cpu_vecmat(q, M, dk, dk, y);
        cpu_vecmat(y, h->ST, dk, dv, o);
        cpu_vecmat(q, N, dk, dv, o2);
        for (int j = 0; j < dv; j++) o[j] += o2[j];
    }
    cpu_affine_apply(E + (size_t)(T - 1) * mf, h->ST, dk, dv, tmp);
    if (p->normalize) cpu_normalize_output(h, p->eps, 0);
}

/* ---- 2.4 two-level: chunks inside, a scan across segments ---- */

/* Chunks per segment when the caller does not say: about sqrt(chunks), so the segment maps
 * (O(d^3) each) and the per-segment work stay balanced. */
static int default_segment_chunks(int nchunks) {
    int s = 1;
    while (s * s < nchunks) s++;
    return s;
}

static int count_chunks(const cpu_head *h, const cpu_params *p) {
    int n = 0;
    for (int ts = 0; ts < h->T; ts = chunk_end(h, p, ts)) n++;
    return n;
}

/* At most ceil(T / C) chunks, plus one more for every refresh point that cuts one. */
static size_t max_chunks(int T, const cpu_params *p) {
    size_t n = ((size_t)T + p->chunk - 1) / p->chunk;
    if (p->refresh > 0) n += (size_t)T / p->refresh + 1;
    return n < (size_t)T ? n : (size_t)T;
}

size_t cpu_vla_two_level_work(int T, int dk, int dv, const cpu_params *p) {
    /* Al [T, dk]; chunk starts [T + 1] (as floats' room); segment maps; per-thread scratch. */
    const int C = p->chunk;
    const size_t nchunk_max = max_chunks(T, p);
    const size_t per_thread = (size_t)dk * dv + cpu_chunk_work(C, dk, dv) + (size_t)C * (dk + dv) +
                              (size_t)C * C + map_floats(dk, dv) * 2;
    const int nt = p->inner_threads > 0 ? p->inner_threads : 1;
    return pad16((size_t)T * dk) + pad16(nchunk_max + 1) + pad16(nchunk_max * map_floats(dk, dv)) +
           pad16(a_part_work(C, dk)) + pad16((size_t)dk * dv) + per_thread * (size_t)nt;
}

/* The affine map of one chunk on the transposed state, from S_start = anything:
 *   ST_end = (I - Al^T W) ST_start + Al^T Y,  W = (I + Lw)^{-1} K,  Y = (I + Lw)^{-1} V. */
static void chunk_map(int c, int dk, int dv, const float *K, const float *Al, const float *V, float *map, float *X,
                      float *Lw) {
    float *M = map, *N = map + (size_t)dk * dk;
    cpu_gemm(0, 1, c, c, dk, 1.0f, K, dk, Al, dk, 0.0f, Lw, c); /* Lw = strictly_lower(K Al^T), unit diagonal */
    for (int t = 0; t < c; t++) {
        memcpy(X + (size_t)t * (dk + dv), K + (size_t)t * dk, sizeof(float) * dk);
        memcpy(X + (size_t)t * (dk + dv) + dk, V + (size_t)t * dv, sizeof(float) * dv);
    }
    cpu_trsm_lower(Lw, c, 1, X, c, dk + dv, dk + dv); /* X = [W | Y] */
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dk; j++) M[(size_t)i * dk + j] = (i == j);
    cpu_gemm(1, 0, dk, dk, c, -1.0f, Al, dk, X, dk + dv, 1.0f, M, dk);     /* M = I - Al^T W */
    cpu_gemm(1, 0, dk, dv, c, 1.0f, Al, dk, X + dk, dk + dv, 0.0f, N, dv); /* N = Al^T Y */
}

void cpu_vla_two_level(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv, T = h->T, C = p->chunk;
    const size_t mf = map_floats(dk, dv);
    const int nchunks = count_chunks(h, p);
    const int seg = p->segment_chunks > 0 ? p->segment_chunks : default_segment_chunks(nchunks);
    const int nseg = (nchunks + seg - 1) / seg;
    const int nt = p->inner_threads > 0 ? p->inner_threads : 1;

    float *Al = work;                               /* [T, dk] */
    const size_t nchunk_max = max_chunks(T, p);
    float *starts_f = Al + pad16((size_t)T * dk);   /* [nchunks + 1] chunk starts, stored as int */
    int *starts = (int *)starts_f;
    float *maps = starts_f + pad16(nchunk_max + 1); /* [nseg] segment maps */
    float *aw = maps + pad16(nchunk_max * mf);
    float *ST_end = aw + pad16(a_part_work(C, dk)); /* [dk, dv] the last segment's end state */
    float *thread_work = ST_end + pad16((size_t)dk * dv);
    /* Per thread: ST, then scratch for the chunk step (its tail, >= dk*dv floats, also serves
     * cpu_affine_apply), X, Lw and two maps for the segment maps. */
    const size_t per_thread = (size_t)dk * dv + cpu_chunk_work(C, dk, dv) + (size_t)C * (dk + dv) + (size_t)C * C +
                              mf * 2;

    /* Level 0: the A part chunk to chunk (cheap, exact for every R and A_in). */
    int nc = 0;
    double *Ad = (double *)aw, *dw = Ad + (size_t)dk * dk;
    a_load(Ad, h->A, dk);
    for (int ts = 0; ts < T;) {
        const int te = chunk_end(h, p, ts);
        starts[nc++] = ts;
        a_part(h, p, ts, te - ts, Al + (size_t)ts * dk, Ad, dw);
        ts = te;
    }
    a_store(h->A, Ad, dk);
    starts[nc] = T;

    /* Level 1: each segment's affine map, independent of the others. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && nseg > 1)
    for (int sgi = 0; sgi < nseg; sgi++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *tw = thread_work + (size_t)me * per_thread;
        float *X = tw + (size_t)dk * dv + cpu_chunk_work(C, dk, dv), *Lw = X + (size_t)C * (dk + dv);
        float *cm = Lw + (size_t)C * C, *tmp = cm + mf;
        float *map = maps + (size_t)sgi * mf;
        const int c0 = sgi * seg, c1 = c0 + seg < nchunks ? c0 + seg : nchunks;
        for (int ci = c0; ci < c1; ci++) {
            const int ts = starts[ci], c = starts[ci + 1] - ts;
            chunk_map(c, dk, dv, h->kh + (size_t)ts * dk, Al + (size_t)ts * dk, h->v + (size_t)ts * dv,
                      ci == c0 ? map : cm, X, Lw);
            if (ci != c0) {
                cpu_affine_compose(map, cm, dk, dv, tmp); /* map then chunk */
                memcpy(map, cm, sizeof(float) * mf);
            }
        }
    }

    /* Level 2: Blelloch scan across the segment maps: maps[j] = segments 0..j composed. */
    cpu_affine_scan(maps, nseg, dk, dv, thread_work);

    /* Level 3: every segment again from its true start state, writing outputs. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && nseg > 1)
    for (int sgi = 0; sgi < nseg; sgi++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *tw = thread_work + (size_t)me * per_thread;
        float *ST = tw, *cw = ST + (size_t)dk * dv;
        memcpy(ST, h->ST, sizeof(float) * (size_t)dk * dv);
        if (sgi > 0) cpu_affine_apply(maps + (size_t)(sgi - 1) * mf, ST, dk, dv, cw);
        const int c0 = sgi * seg, c1 = c0 + seg < nchunks ? c0 + seg : nchunks;
        for (int ci = c0; ci < c1; ci++) {
            const int ts = starts[ci], c = starts[ci + 1] - ts;
            cpu_chunk_step(c, dk, dv, 1, h->kh + (size_t)ts * dk, Al + (size_t)ts * dk, h->v + (size_t)ts * dv,
                           h->q + (size_t)ts * dk, NULL, ST, h->o + (size_t)ts * dv, cw);
        }
        if (sgi == nseg - 1) memcpy(ST_end, ST, sizeof(float) * (size_t)dk * dv);
    }
    memcpy(h->ST, ST_end, sizeof(float) * (size_t)dk * dv); /* after the loop: every segment read ST0 */
    if (p->normalize) cpu_normalize_output(h, p->eps, 0);
}
