/* Test helper for test_vla_run.sh (no Python needed):
 *
 *   npy_relerr X.npy REF.npy TOL            prints ||X - REF|| / ||REF||; exit 1 if it exceeds
 *                                           TOL, the shapes differ or X holds a NaN/Inf
 *   npy_relerr --slice IN.npy AXIS START END OUT.npy     OUT = IN[..., START:END, ...] (float32)
 *   npy_relerr --concat AXIS A.npy B.npy OUT.npy         OUT = concatenate(A, B, AXIS)  (float32)
 *   npy_relerr --elu1-sum K.npy OUT.npy     K [B,T,H,dk] -> OUT [B,H,dk] = sum_t elu(k_t) + 1: the
 *                                           final normaliser n of linear attention and of VLA
 *                                           with phi = elu1 (an independent reference for n)
 *
 * Exit 2 on a usage or file error. */
#include "npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: npy_relerr X.npy REF.npy TOL\n"
                    "       npy_relerr --slice IN.npy AXIS START END OUT.npy\n"
                    "       npy_relerr --concat AXIS A.npy B.npy OUT.npy\n"
                    "       npy_relerr --elu1-sum K.npy OUT.npy\n");
    return 2;
}

static int load(const char *path, npy_array *a) {
    char err[512];
    if (npy_read_f64(path, a, err, sizeof err) == 0) return 0;
    fprintf(stderr, "npy_relerr: %s\n", err);
    return 2;
}

static int same_shape(const npy_array *a, const npy_array *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int parse_long(const char *s, long *out) {
    char *end;
    *out = strtol(s, &end, 10);
    return end != s && !*end;
}

static int relerr(const char *xp, const char *rp, const char *tols) {
    char *end;
    double tol = strtod(tols, &end);
    if (end == tols || *end) return usage();
    npy_array x, r;
    if (load(xp, &x)) return 2;
    if (load(rp, &r)) {
        npy_free(&x);
        return 2;
    }
    int rc = 1;
    if (!same_shape(&x, &r)) {
        fprintf(stderr, "npy_relerr: %s and %s differ in shape\n", xp, rp);
    } else {
        double num = 0, den = 0;
        int bad = 0;
        for (int64_t i = 0; i < x.count; i++) {
            bad |= !isfinite(x.f64[i]) || !isfinite(r.f64[i]);
            num += (x.f64[i] - r.f64[i]) * (x.f64[i] - r.f64[i]);
            den += r.f64[i] * r.f64[i];
        }
        double e = den > 0 ? sqrt(num / den) : sqrt(num); /* all-zero reference: absolute error */
        printf("%.3e\n", e);
        rc = bad || !(e <= tol);
        if (bad) fprintf(stderr, "npy_relerr: %s or %s holds a NaN or Inf\n", xp, rp);
    }
    npy_free(&x);
    npy_free(&r);
    return rc;
}

/* [outer, n, inner] view of a C-order array around `axis`. */
static void split(const npy_array *a, int axis, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= a->shape[i];
    for (int i = axis + 1; i < a->ndim; i++) *inner *= a->shape[i];
}

static int write_f32(const char *path, const double *d, int64_t n, int ndim, const int64_t *shape) {
    float *f = malloc(n > 0 ? (size_t)n * sizeof *f : 1);
    char err[512];
    if (!f) return 2;
    for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
    int rc = npy_write_f32(path, f, ndim, shape, err, sizeof err);
    free(f);
    if (rc) fprintf(stderr, "npy_relerr: %s\n", err);
    return rc ? 2 : 0;
}

static int slice(const char *in, const char *axs, const char *s0, const char *s1, const char *out) {
    long axis, start, end;
    if (!parse_long(axs, &axis) || !parse_long(s0, &start) || !parse_long(s1, &end)) return usage();
    npy_array a;
    if (load(in, &a)) return 2;
    int rc = 2;
    if (axis < 0 || axis >= a.ndim || start < 0 || end <= start || end > a.shape[axis]) {
        fprintf(stderr, "npy_relerr: %s: slice %ld:%ld of axis %ld is out of range\n", in, start, end, axis);
    } else {
        int64_t outer, inner, len = a.shape[axis], n = end - start;
        split(&a, (int)axis, &outer, &inner);
        double *d = malloc((size_t)(outer * n * inner) * sizeof *d + 1);
        for (int64_t o = 0; d && o < outer; o++)
            memcpy(d + o * n * inner, a.f64 + (o * len + start) * inner, (size_t)(n * inner) * sizeof *d);
        int64_t shape[NPY_MAX_DIMS];
        memcpy(shape, a.shape, sizeof shape);
        shape[axis] = n;
        if (d) rc = write_f32(out, d, outer * n * inner, a.ndim, shape);
        free(d);
    }
    npy_free(&a);
    return rc;
}

/* Same shape except along axis. */
static int concat_compatible(const npy_array *a, const npy_array *b, long axis) {
    if (a->ndim != b->ndim || axis < 0 || axis >= a->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (i != axis && a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int concat(const char *axs, const char *ap, const char *bp, const char *out) {
    long axis;
    if (!parse_long(axs, &axis)) return usage();
    npy_array a, b;
    if (load(ap, &a)) return 2;
    if (load(bp, &b)) {
        npy_free(&a);
        return 2;
    }
    int rc = 2;
    if (!concat_compatible(&a, &b, axis)) {
        fprintf(stderr, "npy_relerr: %s and %s cannot be concatenated along axis %ld\n", ap, bp, axis);
    } else {
        int64_t outer, inner, na = a.shape[axis], nb = b.shape[axis];
        split(&a, (int)axis, &outer, &inner);
        double *d = malloc((size_t)(a.count + b.count) * sizeof *d + 1);
        for (int64_t o = 0; d && o < outer; o++) {
            memcpy(d + o * (na + nb) * inner, a.f64 + o * na * inner, (size_t)(na * inner) * sizeof *d);
            memcpy(d + (o * (na + nb) + na) * inner, b.f64 + o * nb * inner, (size_t)(nb * inner) * sizeof *d);
        }
        int64_t shape[NPY_MAX_DIMS];
        memcpy(shape, a.shape, sizeof shape);
        shape[axis] = na + nb;
        if (d) rc = write_f32(out, d, a.count + b.count, a.ndim, shape);
        free(d);
    }
    npy_free(&a);
    npy_free(&b);
    return rc;
}

/* n [B,H,dk] = sum over t of elu(k[b,t,h,:]) + 1, in float64. */
static int elu1_sum(const char *kp, const char *out) {
    npy_array k;
    if (load(kp, &k)) return 2;
    if (k.ndim != 4) {
        fprintf(stderr, "npy_relerr: %s: expected [B,T,H,dk]\n", kp);
        npy_free(&k);
        return 2;
    }
    int64_t B = k.shape[0], T = k.shape[1], H = k.shape[2], D = k.shape[3];
    double *n = calloc((size_t)(B * H * D) + 1, sizeof *n);
    for (int64_t b = 0; n && b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    double x = k.f64[((b * T + t) * H + h) * D + d];
                    n[(b * H + h) * D + d] += x > 0 ? x + 1 : exp(x);
                }
    int64_t shape[3] = {B, H, D};
    int rc = n ? write_f32(out, n, B * H * D, 3, shape) : 2;
    free(n);
    npy_free(&k);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[1], "--slice") == 0) return slice(argv[2], argv[3], argv[4], argv[5], argv[6]);
    if (argc == 6 && strcmp(argv[1], "--concat") == 0) return concat(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 4 && strcmp(argv[1], "--elu1-sum") == 0) return elu1_sum(argv[2], argv[3]);
    if (argc == 4 && argv[1][0] != '-') return relerr(argv[1], argv[2], argv[3]);
    return usage();
}
