#include "test_util.h"

#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ---- */

void tu_seed(tu_rng *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; }

uint64_t tu_next(tu_rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_uniform(tu_rng *r) { return ((double)(tu_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double tu_normal(tu_rng *r) {
    double u1 = tu_uniform(r), u2 = tu_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_randn(tu_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float f;
        do f = (float)(tu_normal(r) * scale);
        while (f == 0.0f);
        x[i] = f;
    }
}

void tu_randu(tu_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        float f;
        do f = (float)(lo + (hi - lo) * tu_uniform(r));
        while (f == 0.0f || f == lo || f == hi);
        x[i] = f;
    }
}

float *tu_randn_new(tu_rng *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    tu_randn(r, x, n, 1.0f);
    return x;
}

/* ---- poison ---- */

void tu_poison(float *x, size_t n) {
    uint32_t bits = TU_POISON_BITS;
    for (size_t i = 0; i < n; i++) memcpy(&x[i], &bits, sizeof bits);
}

int tu_is_poison(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits == TU_POISON_BITS;
}

size_t tu_count_poison(const float *x, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += tu_is_poison(x[i]) ? 1 : 0;
    return c;
}

/* ---- comparisons ---- */

int tu_all_finite(const float *x, size_t n) { return tu_count_nonfinite(x, n) == 0; }

size_t tu_count_nonfinite(const float *x, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += isfinite(x[i]) ? 0 : 1;
    return c;
}

double tu_relerr(const float *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        double e = (double)x[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_relerr_ff(const float *x, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i])) return INFINITY;
        double e = (double)x[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_relerr_dd(const double *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        double e = x[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

int tu_has_word(const char *s, const char *word) {
    if (!s || !word || !*word) return 0;
    size_t wl = strlen(word);
    for (const char *p = strstr(s, word); p; p = strstr(p + 1, word)) {
        int before_ok = p == s || !ident(p[-1]);
        int after_ok = !ident(p[wl]);
        if (before_ok && after_ok) return 1;
    }
    return 0;
}

/* ---- backends and buffers ---- */

vla_backend *tu_open_cpu(void) {
    vla_backend *b = NULL;
    vla_status s = vla_backend_open("cpu", &b);
    ck_assert_msg(s == VLA_OK && b, "vla_backend_open(\"cpu\") failed: %s: %s", vla_status_string(s),
                  vla_last_message());
    return b;
}

vla_buffer *tu_buf_new(vla_backend *b, size_t nfloats) {
    vla_buffer *buf = NULL;
    vla_status s = vla_buffer_alloc(b, nfloats * sizeof(float), &buf);
    ck_assert_msg(s == VLA_OK && buf, "vla_buffer_alloc(%zu floats) failed: %s", nfloats, vla_status_string(s));
    tu_buf_poison(buf);
    return buf;
}

void tu_buf_upload(vla_buffer *buf, const float *x, size_t nfloats) {
    vla_status s = vla_buffer_upload(buf, 0, x, nfloats * sizeof(float));
    ck_assert_msg(s == VLA_OK, "vla_buffer_upload failed: %s", vla_status_string(s));
}

vla_buffer *tu_buf_from(vla_backend *b, const float *x, size_t nfloats) {
    vla_buffer *buf = tu_buf_new(b, nfloats);
    tu_buf_upload(buf, x, nfloats);
    return buf;
}

void tu_buf_poison(vla_buffer *buf) {
    size_t n = vla_buffer_size(buf) / sizeof(float);
    float *tmp = malloc((n ? n : 1) * sizeof *tmp);
    ck_assert_ptr_nonnull(tmp);
    tu_poison(tmp, n);
    vla_status s = vla_buffer_upload(buf, 0, tmp, n * sizeof(float));
    free(tmp);
    ck_assert_msg(s == VLA_OK, "poisoning a buffer failed: %s", vla_status_string(s));
}

float *tu_buf_download_new(const vla_buffer *buf, size_t nfloats) {
    float *x = malloc((nfloats ? nfloats : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    vla_status s = vla_buffer_download(buf, 0, x, nfloats * sizeof(float));
    ck_assert_msg(s == VLA_OK, "vla_buffer_download failed: %s", vla_status_string(s));
    return x;
}

/* ---- one forward call ---- */

int tu_has_S(const vla_attn_desc *d) { return d->mechanism != VLA_MECH_SOFTMAX; }
int tu_has_A(const vla_attn_desc *d) { return d->mechanism == VLA_MECH_VLA; }
int tu_has_n(const vla_attn_desc *d) {
    return d->mechanism == VLA_MECH_LINEAR || (d->mechanism == VLA_MECH_VLA && d->normalize_output);
}

size_t tu_nqk(const tu_problem *p) { return (size_t)p->B * p->T * p->H * p->dk; }
size_t tu_nvo(const tu_problem *p) { return (size_t)p->B * p->T * p->H * p->dv; }
size_t tu_nbt(const tu_problem *p) { return (size_t)p->B * p->T * p->H; }
size_t tu_ng(const vla_attn_desc *d, const tu_problem *p) {
    return d->mechanism == VLA_MECH_DELTA_PAPER ? tu_nvo(p) : tu_nbt(p);
}
size_t tu_nS(const tu_problem *p) { return (size_t)p->B * p->H * p->dk * p->dv; }
size_t tu_nA(const tu_problem *p) { return (size_t)p->B * p->H * p->dk * p->dk; }
size_t tu_nn(const tu_problem *p) { return (size_t)p->B * p->H * p->dk; }

vla_status tu_run(vla_backend *b, const vla_attn_desc *d, const tu_problem *p, int inplace, tu_result *r) {
    memset(r, 0, sizeof *r);
    int hS = tu_has_S(d), hA = tu_has_A(d), hn = tu_has_n(d);
    size_t nqk = tu_nqk(p), nvo = tu_nvo(p), nbt = tu_nbt(p);
    size_t nS = tu_nS(p), nA = tu_nA(p), nn = tu_nn(p);
    vla_attn_args a;
    memset(&a, 0, sizeof a);
    a.B = p->B, a.T = p->T, a.H = p->H, a.dk = p->dk, a.dv = p->dv, a.t0 = p->t0;
    vla_buffer *q = tu_buf_from(b, p->q, nqk), *k = tu_buf_from(b, p->k, nqk), *v = tu_buf_from(b, p->v, nvo);
    vla_buffer *u = p->u ? tu_buf_from(b, p->u, nqk) : NULL;
    vla_buffer *beta = p->beta ? tu_buf_from(b, p->beta, nbt) : NULL;
    vla_buffer *g = p->g ? tu_buf_from(b, p->g, tu_ng(d, p)) : NULL;
    vla_buffer *Si = p->S0 && hS ? tu_buf_from(b, p->S0, nS) : NULL;
    vla_buffer *Ai = p->A0 && hA ? tu_buf_from(b, p->A0, nA) : NULL;
    vla_buffer *ni = p->n0 && hn ? tu_buf_from(b, p->n0, nn) : NULL;
    vla_buffer *o = tu_buf_new(b, nvo);
    vla_buffer *So = NULL, *Ao = NULL, *no = NULL;
    if (inplace) {
        ck_assert_msg(!hS || Si, "tu_run: in-place needs S0");
        ck_assert_msg(!hA || Ai, "tu_run: in-place needs A0");
        ck_assert_msg(!hn || ni, "tu_run: in-place needs n0");
        So = Si, Ao = Ai, no = ni;
    } else {
        So = hS ? tu_buf_new(b, nS) : NULL;
        Ao = hA ? tu_buf_new(b, nA) : NULL;
        no = hn ? tu_buf_new(b, nn) : NULL;
    }
    a.q = q, a.k = k, a.v = v, a.u = u, a.beta = beta, a.g = g, a.o = o;
    a.S_in = Si, a.A_in = Ai, a.n_in = ni, a.S_out = So, a.A_out = Ao, a.n_out = no;

    r->resolved = d->algorithm;
    vla_status rs = vla_attention_resolve_algorithm(b, d, &a, &r->resolved);
    (void)rs;
    /* In place: the outputs are the inputs and so are not poisoned; every element must still
     * come out finite. Otherwise poison is already in place from tu_buf_new. */
    r->status = vla_attention_forward(b, d, &a);
    if (r->status == VLA_OK) {
        r->o = tu_buf_download_new(o, nvo);
        r->o_unwritten = tu_count_poison(r->o, nvo);
        if (So) {
            r->S = tu_buf_download_new(So, nS);
            r->S_unwritten = tu_count_poison(r->S, nS);
        }
        if (Ao) {
            r->A = tu_buf_download_new(Ao, nA);
            r->A_unwritten = tu_count_poison(r->A, nA);
        }
        if (no) {
            r->n = tu_buf_download_new(no, nn);
            r->n_unwritten = tu_count_poison(r->n, nn);
        }
    }
    vla_buffer_free(q), vla_buffer_free(k), vla_buffer_free(v), vla_buffer_free(u);
    vla_buffer_free(beta), vla_buffer_free(g), vla_buffer_free(o);
    vla_buffer_free(Si), vla_buffer_free(Ai), vla_buffer_free(ni);
    if (!inplace) vla_buffer_free(So), vla_buffer_free(Ao), vla_buffer_free(no);
    return r->status;
}

void tu_result_free(tu_result *r) {
    free(r->o), free(r->S), free(r->A), free(r->n);
    memset(r, 0, sizeof *r);
}

float *tu_slice_time(const float *x, int B, int T, int H, int D, int ta, int tb) {
    int Tp = tb - ta;
    size_t row = (size_t)H * D;
    float *y = malloc((size_t)B * (Tp > 0 ? Tp : 1) * row * sizeof *y);
    ck_assert_ptr_nonnull(y);
    for (int bb = 0; bb < B; bb++)
        memcpy(y + (size_t)bb * Tp * row, x + ((size_t)bb * T + ta) * row, (size_t)Tp * row * sizeof *y);
    return y;
}

void tu_place_time(float *dst, const float *piece, int B, int T, int H, int D, int ta, int tb) {
    int Tp = tb - ta;
    size_t row = (size_t)H * D;
    for (int bb = 0; bb < B; bb++)
        memcpy(dst + ((size_t)bb * T + ta) * row, piece + (size_t)bb * Tp * row, (size_t)Tp * row * sizeof *dst);
}

float *tu_rand_S0(tu_rng *r, int B, int H, int dk, int dv) {
    size_t n = (size_t)B * H * dk * dv;
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    tu_randn(r, x, n, 0.3f);
    return x;
}

/* A0 = (1/lambda0) (I + 0.5 W W^T / dk)^{-1}-like: here simply (1/lambda0)(0.6 I + 0.4 M M^T/dk)
 * with M random, symmetric positive definite and of the same scale as I/lambda0. */
float *tu_rand_A0(tu_rng *r, int B, int H, int dk, double lambda0) {
    size_t n = (size_t)B * H * dk * dk;
    float *x = malloc(n * sizeof *x);
    double *M = malloc((size_t)dk * dk * sizeof *M);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(M);
    for (int bh = 0; bh < B * H; bh++) {
        for (int i = 0; i < dk * dk; i++) M[i] = tu_normal(r);
        float *A = x + (size_t)bh * dk * dk;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j <= i; j++) {
                double s = 0;
                for (int m = 0; m < dk; m++) s += M[i * dk + m] * M[j * dk + m];
                double val = (0.4 * s / dk + (i == j ? 0.6 : 0.0)) / lambda0;
                A[i * dk + j] = A[j * dk + i] = (float)val;
            }
    }
    free(M);
    return x;
}

float *tu_rand_n0(tu_rng *r, int B, int H, int dk) {
    size_t n = (size_t)B * H * dk;
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    tu_randu(r, x, n, 0.5f, 3.0f);
    return x;
}

double *tu_to_double(const float *x, size_t n) {
    double *y = malloc((n ? n : 1) * sizeof *y);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

#include <stdarg.h>
#include <stdio.h>

#include "ref64.h"

/* Appends "label: what; " to the failure text. */
static void add_fail(char *why, size_t len, const char *label, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void add_fail(char *why, size_t len, const char *label, const char *fmt, ...) {
    if (!why || !len) return;
    size_t used = strlen(why);
    if (used + 1 >= len) return;
    int w = snprintf(why + used, len - used, "%s: ", label);
    if (w < 0 || (size_t)w >= len - used) return;
    used += (size_t)w;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + used, len - used, fmt, ap);
    va_end(ap);
    used = strlen(why);
    if (used + 3 < len) strcat(why, "; ");
}

int tu_check_vs_ref(const vla_attn_desc *d, const tu_problem *p, const tu_result *r, double tol, const char *label,
                    double *worst_out, char *why, size_t whylen) {
    if (worst_out) *worst_out = INFINITY;
    if (r->status != VLA_OK) {
        fprintf(stderr, "  %-58s status %s: %s  FAIL\n", label, vla_status_string(r->status), vla_last_message());
        add_fail(why, whylen, label, "status %s (%s)", vla_status_string(r->status), vla_last_message());
        return 0;
    }
    size_t nvo = tu_nvo(p), nS = tu_nS(p), nA = tu_nA(p), nn = tu_nn(p);
    double *o = malloc(nvo * sizeof *o), *S = malloc(nS * sizeof *S), *A = malloc(nA * sizeof *A);
    double *n = malloc(nn * sizeof *n);
    ck_assert(o && S && A && n);
    int rc = ref64_forward(d, p->B, p->T, p->H, p->dk, p->dv, p->t0, p->q, p->k, p->v, p->u, p->beta, p->g, p->S0,
                           p->A0, p->n0, o, S, A, n);
    ck_assert_int_eq(rc, 0);
    double eo = tu_relerr(r->o, o, nvo);
    double eS = r->S ? tu_relerr(r->S, S, nS) : 0, eA = r->A ? tu_relerr(r->A, A, nA) : 0;
    double en = r->n ? tu_relerr(r->n, n, nn) : 0;
    double worst = eo;
    if (eS > worst) worst = eS;
    if (eA > worst) worst = eA;
    if (en > worst) worst = en;
    if (worst_out) *worst_out = worst;
    free(o), free(S), free(A), free(n);

    int ok = 1;
    if (r->o_unwritten) ok = 0, add_fail(why, whylen, label, "%zu of %zu elements of o never written", r->o_unwritten, nvo);
    if (r->S_unwritten) ok = 0, add_fail(why, whylen, label, "%zu elements of S_out never written", r->S_unwritten);
    if (r->A_unwritten) ok = 0, add_fail(why, whylen, label, "%zu elements of A_out never written", r->A_unwritten);
    if (r->n_unwritten) ok = 0, add_fail(why, whylen, label, "%zu elements of n_out never written", r->n_unwritten);
    if (!tu_all_finite(r->o, nvo))
        ok = 0, add_fail(why, whylen, label, "o has %zu non-finite elements", tu_count_nonfinite(r->o, nvo));
    if (r->S && !tu_all_finite(r->S, nS)) ok = 0, add_fail(why, whylen, label, "S_out has non-finite elements");
    if (r->A && !tu_all_finite(r->A, nA)) ok = 0, add_fail(why, whylen, label, "A_out has non-finite elements");
    if (r->n && !tu_all_finite(r->n, nn)) ok = 0, add_fail(why, whylen, label, "n_out has non-finite elements");
    if (!(eo < tol)) ok = 0, add_fail(why, whylen, label, "o rel. error %.3e >= %.0e", eo, tol);
    if (!(eS < tol)) ok = 0, add_fail(why, whylen, label, "S_final rel. error %.3e >= %.0e", eS, tol);
    if (!(eA < tol)) ok = 0, add_fail(why, whylen, label, "A_final rel. error %.3e >= %.0e", eA, tol);
    if (!(en < tol)) ok = 0, add_fail(why, whylen, label, "n_final rel. error %.3e >= %.0e", en, tol);

    fprintf(stderr, "  %-58s o %.2e", label, eo);
    if (r->S) fprintf(stderr, "  S %.2e", eS);
    if (r->A) fprintf(stderr, "  A %.2e", eA);
    if (r->n) fprintf(stderr, "  n %.2e", en);
    fprintf(stderr, "  (tol %.0e)%s\n", tol, ok ? "" : "  FAIL");
    return ok;
}

int tu_algorithms(vla_mechanism m, vla_algorithm out[6]) {
    /* VLA-MATH 2, written out here rather than asked of the library. */
    int c = 0;
    switch (m) {
    case VLA_MECH_SOFTMAX: out[c++] = VLA_ALGO_FUSED; break;
    case VLA_MECH_LINEAR:
    case VLA_MECH_DELTA:
        out[c++] = VLA_ALGO_SEQUENTIAL;
        out[c++] = VLA_ALGO_CHUNKED;
        break;
    case VLA_MECH_VLA:
        out[c++] = VLA_ALGO_SEQUENTIAL;
        out[c++] = VLA_ALGO_SCAN;
        out[c++] = VLA_ALGO_CHUNKED;
        out[c++] = VLA_ALGO_TWO_LEVEL;
        break;
    case VLA_MECH_DELTA_PAPER: out[c++] = VLA_ALGO_SEQUENTIAL; break;
    }
    out[c++] = VLA_ALGO_AUTO;
    return c;
}
