/* Every argument error returns its own status and a message naming the problem, on the handle
 * (vla_backend_message) and on the thread (vla_last_message); and nothing is written: every
 * buffer, the poisoned outputs included, is byte-for-byte what it was before the call. Also the
 * buffer API's range checks, names <-> enums, status strings and device listing. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { FB = 1, FT = 4, FH = 2, FDK = 4, FDV = 3 };

typedef struct fixture {
    vla_backend *be, *be2;
    vla_buffer *q, *k, *v, *u, *beta, *g, *o, *Si, *So, *Ai, *Ao, *ni, *no, *tiny, *big;
    vla_buffer *q2, *o2; /* on be2 */
    /* The backward's: upstream gradients and one output per gradient. */
    vla_buffer *dO, *dSe, *dAe, *dne, *gq, *gk, *gv, *gu, *gbeta, *gg, *gS, *gA, *gn;
    /* delta-paper's gate g [B,T,H,dv] and its gradient (F.g, F.gg are [B,T,H]: too small for it). */
    vla_buffer *grow, *ggrow;
} fixture;

static fixture F;

static vla_buffer *rand_buf(tu_rng *r, vla_backend *be, size_t n) {
    float *x = malloc(n * sizeof *x);
    tu_randn(r, x, n, 1.0f);
    vla_buffer *b = tu_buf_from(be, x, n);
    free(x);
    return b;
}

static void setup(void) {
    tu_rng r;
    tu_seed(&r, 4242);
    F.be = tu_open_cpu();
    F.be2 = tu_open_cpu();
    size_t nqk = (size_t)FB * FT * FH * FDK, nvo = (size_t)FB * FT * FH * FDV, nbt = (size_t)FB * FT * FH;
    size_t nS = (size_t)FB * FH * FDK * FDV, nA = (size_t)FB * FH * FDK * FDK, nn = (size_t)FB * FH * FDK;
    F.q = rand_buf(&r, F.be, nqk), F.k = rand_buf(&r, F.be, nqk), F.v = rand_buf(&r, F.be, nvo);
    F.u = rand_buf(&r, F.be, nqk);
    float *bt = malloc(nbt * sizeof *bt);
    tu_randu(&r, bt, nbt, 0.0f, 1.0f);
    F.beta = tu_buf_from(F.be, bt, nbt);
    tu_randu(&r, bt, nbt, 0.0f, 1.0f);
    F.g = tu_buf_from(F.be, bt, nbt);
    free(bt);
    float *gr = malloc(nvo * sizeof *gr);
    tu_randu(&r, gr, nvo, 0.0f, 1.0f);
    F.grow = tu_buf_from(F.be, gr, nvo), F.ggrow = tu_buf_new(F.be, nvo);
    free(gr);
    F.Si = rand_buf(&r, F.be, nS);
    float *A0 = tu_rand_A0(&r, FB, FH, FDK, 0.1), *n0 = tu_rand_n0(&r, FB, FH, FDK);
    F.Ai = tu_buf_from(F.be, A0, nA), F.ni = tu_buf_from(F.be, n0, nn);
    free(A0), free(n0);
    F.o = tu_buf_new(F.be, nvo), F.So = tu_buf_new(F.be, nS), F.Ao = tu_buf_new(F.be, nA), F.no = tu_buf_new(F.be, nn);
    F.tiny = tu_buf_new(F.be, 1);
    F.big = tu_buf_new(F.be, 256);
    F.q2 = rand_buf(&r, F.be2, nqk), F.o2 = tu_buf_new(F.be2, nvo);
    F.dO = rand_buf(&r, F.be, nvo), F.dSe = rand_buf(&r, F.be, nS), F.dAe = rand_buf(&r, F.be, nA);
    F.dne = rand_buf(&r, F.be, nn);
    F.gq = tu_buf_new(F.be, nqk), F.gk = tu_buf_new(F.be, nqk), F.gv = tu_buf_new(F.be, nvo);
    F.gu = tu_buf_new(F.be, nqk), F.gbeta = tu_buf_new(F.be, nbt), F.gg = tu_buf_new(F.be, nbt);
    F.gS = tu_buf_new(F.be, nS), F.gA = tu_buf_new(F.be, nA), F.gn = tu_buf_new(F.be, nn);
}

#define N_BUFS 32

static vla_buffer **all_bufs(void);

static void teardown(void) {
    vla_buffer **all = all_bufs();
    for (size_t i = 0; i < N_BUFS; i++) vla_buffer_free(all[i]);
    vla_backend_close(F.be), vla_backend_close(F.be2);
    memset(&F, 0, sizeof F);
}

/* Contents of every buffer of the fixture, to prove a failing call wrote nothing. */
typedef struct snapshot {
    unsigned char *data[N_BUFS];
    size_t size[N_BUFS];
} snapshot;

static vla_buffer **all_bufs(void) {
    static vla_buffer *all[N_BUFS];
    vla_buffer *list[N_BUFS] = {F.q,   F.k,   F.v,   F.u,  F.beta, F.g,  F.o,  F.Si, F.So,    F.Ai,
                                F.Ao,  F.ni,  F.no,  F.tiny, F.big, F.q2, F.o2, F.dO, F.dSe,  F.dAe,
                                F.dne, F.gq,  F.gk,  F.gv, F.gu,   F.gbeta, F.gg, F.gS, F.gA, F.gn,
                                F.grow, F.ggrow};
    memcpy(all, list, sizeof all);
    return all;
}
static const char *const buf_names[N_BUFS] = {"q",    "k",     "v",    "u",      "beta",   "g",  "o",   "S_in",
                                              "S_out", "A_in", "A_out", "n_in",  "n_out",  "tiny", "big", "q(be2)",
                                              "o(be2)", "dO",  "dS_end", "dA_end", "dn_end", "dq", "dk",  "dv",
                                              "du",   "dbeta", "dg",   "dS_0",   "dA_0",   "dn_0",
                                              "g(delta-paper)", "dg(delta-paper)"};

static void take(snapshot *s) {
    vla_buffer **all = all_bufs();
    for (int i = 0; i < N_BUFS; i++) {
        s->size[i] = vla_buffer_size(all[i]);
        s->data[i] = malloc(s->size[i]);
        ck_assert_int_eq(vla_buffer_download(all[i], 0, s->data[i], s->size[i]), VLA_OK);
    }
}

static void same_as(const snapshot *s, const char *what) {
    vla_buffer **all = all_bufs();
    for (int i = 0; i < N_BUFS; i++) {
        unsigned char *now = malloc(s->size[i]);
        ck_assert_int_eq(vla_buffer_download(all[i], 0, now, s->size[i]), VLA_OK);
        int same = memcmp(now, s->data[i], s->size[i]) == 0;
        free(now);
        ck_assert_msg(same, "%s: the failing call wrote buffer %s", what, buf_names[i]);
    }
}

static void drop(snapshot *s) {
    for (int i = 0; i < N_BUFS; i++) free(s->data[i]);
}

static int any_word(const char *msg, const char *const *kws) {
    for (int i = 0; kws[i]; i++)
        if (tu_has_word(msg, kws[i])) return 1;
    return 0;
}

static void kw_list(const char *const *kws, char *buf, size_t len) {
    buf[0] = '\0';
    for (int i = 0; kws[i]; i++) {
        strncat(buf, i ? "|" : "", len - strlen(buf) - 1);
        strncat(buf, kws[i], len - strlen(buf) - 1);
    }
}

/* Checks a status and the messages of a failing call: the thread's (tm) and, when the call
 * had a handle, the handle's (bm; NULL when there is none). Both must be non-empty and name the
 * problem (one of kws as a word). */
static void check_msgs(const char *tm, const char *bm, vla_status got, vla_status want, const char *what,
                       const char *const *kws) {
    char kl[256];
    kw_list(kws, kl, sizeof kl);
    fprintf(stderr, "  %-44s -> %-34s \"%s\"\n", what, vla_status_string(got), tm);
    ck_assert_msg(got == want, "%s: status %d (%s), expected %d (%s); message \"%s\"", what, (int)got,
                  vla_status_string(got), (int)want, vla_status_string(want), tm);
    ck_assert_msg(tm[0] != '\0', "%s: vla_last_message is empty", what);
    ck_assert_msg(any_word(tm, kws), "%s: vla_last_message \"%s\" names none of [%s]", what, tm, kl);
    if (bm) {
        ck_assert_msg(bm[0] != '\0', "%s: vla_backend_message is empty", what);
        ck_assert_msg(any_word(bm, kws), "%s: vla_backend_message \"%s\" names none of [%s]", what, bm, kl);
    }
}

/* The same, reading the messages now: call it right after the failing call (any later call,
 * a buffer download included, clears them). */
static void check_msg(vla_backend *be, vla_status got, vla_status want, const char *what, const char *const *kws) {
    char tm[1024], bm[1024];
    snprintf(tm, sizeof tm, "%s", vla_last_message());
    snprintf(bm, sizeof bm, "%s", be ? vla_backend_message(be) : "");
    check_msgs(tm, be ? bm : NULL, got, want, what, kws);
}

static void expect_fwd(const vla_attn_desc *d, const vla_attn_args *a, vla_status want, const char *what,
                       const char *const *kws) {
    snapshot s;
    take(&s);
    vla_status got = vla_attention_forward(F.be, d, a);
    char tm[1024], bm[1024];
    snprintf(tm, sizeof tm, "%s", vla_last_message());
    snprintf(bm, sizeof bm, "%s", vla_backend_message(F.be));
    same_as(&s, what);
    drop(&s);
    check_msgs(tm, bm, got, want, what, kws);
    /* resolve_algorithm validates the same way. */
    if (d && a) {
        vla_algorithm alg = VLA_ALGO_AUTO;
        vla_status got2 = vla_attention_resolve_algorithm(F.be, d, a, &alg);
        ck_assert_msg(got2 == want, "%s: vla_attention_resolve_algorithm returned %s, forward %s", what,
                      vla_status_string(got2), vla_status_string(want));
    }
}

#define KW(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPECT(d, a, st, what, ...) expect_fwd(d, a, st, what, KW(__VA_ARGS__))

/* A valid call of mechanism m with every state output the mechanism has. */
static void base(vla_mechanism m, vla_attn_desc *d, vla_attn_args *a) {
    ck_assert_int_eq(vla_attn_desc_init(d, m), VLA_OK);
    memset(a, 0, sizeof *a);
    a->B = FB, a->T = FT, a->H = FH, a->dk = FDK, a->dv = FDV;
    a->q = F.q, a->k = F.k, a->v = F.v, a->o = F.o;
    if (m != VLA_MECH_SOFTMAX) a->S_out = F.So;
    if (m == VLA_MECH_VLA) a->A_out = F.Ao;
    if (m == VLA_MECH_LINEAR) a->n_out = F.no;
}

/* The baselines the other tests mutate are valid (run on fresh outputs, so F's stay poisoned). */
START_TEST(test_baselines_valid) {
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        vla_attn_desc d;
        vla_attn_args a;
        base((vla_mechanism)m, &d, &a);
        vla_buffer *o = tu_buf_new(F.be, 64), *S = tu_buf_new(F.be, 64), *A = tu_buf_new(F.be, 64);
        vla_buffer *n = tu_buf_new(F.be, 64);
        a.o = o;
        if (a.S_out) a.S_out = S;
        if (a.A_out) a.A_out = A;
        if (a.n_out) a.n_out = n;
        if (m == VLA_MECH_VLA) a.u = F.u, a.S_in = F.Si, a.A_in = F.Ai, a.t0 = 5;
        if (m == VLA_MECH_DELTA) a.beta = F.beta, a.g = F.g, a.S_in = F.Si;
        if (m == VLA_MECH_LINEAR) a.S_in = F.Si, a.n_in = F.ni;
        if (m == VLA_MECH_DELTA_PAPER) a.g = F.grow, a.S_in = F.Si, a.t0 = 5;
        vla_status s = vla_attention_forward(F.be, &d, &a);
        ck_assert_msg(s == VLA_OK, "baseline %s: %s: %s", vla_mechanism_name((vla_mechanism)m), vla_status_string(s),
                      vla_backend_message(F.be));
        float *out = tu_buf_download_new(o, (size_t)FB * FT * FH * FDV);
        ck_assert_msg(tu_all_finite(out, (size_t)FB * FT * FH * FDV), "baseline %s: o not finite",
                      vla_mechanism_name((vla_mechanism)m));
        free(out);
        vla_buffer_free(o), vla_buffer_free(S), vla_buffer_free(A), vla_buffer_free(n);
    }
}
END_TEST

START_TEST(test_null_arguments) {
    vla_attn_desc d;
    vla_attn_args a;
    base(VLA_MECH_VLA, &d, &a);
    snapshot s;
    take(&s);
    vla_status st = vla_attention_forward(NULL, &d, &a);
    char tm[1024];
    snprintf(tm, sizeof tm, "%s", vla_last_message());
    same_as(&s, "backend NULL");
    drop(&s);
    check_msgs(tm, NULL, st, VLA_ERR_NULL_ARGUMENT, "backend NULL", KW("backend"));
    vla_algorithm alg;
    st = vla_attention_resolve_algorithm(NULL, &d, &a, &alg);
    check_msg(NULL, st, VLA_ERR_NULL_ARGUMENT, "resolve: backend NULL", KW("backend"));
    st = vla_attention_resolve_algorithm(F.be, &d, &a, NULL);
    check_msg(F.be, st, VLA_ERR_NULL_ARGUMENT, "resolve: out NULL", KW("out"));
    EXPECT(NULL, &a, VLA_ERR_NULL_ARGUMENT, "desc NULL", "desc");
    EXPECT(&d, NULL, VLA_ERR_NULL_ARGUMENT, "args NULL", "args");
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        vla_attn_args x;
        char what[64];
        base((vla_mechanism)m, &d, &x), x.q = NULL;
        snprintf(what, sizeof what, "%s: q NULL", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &x, VLA_ERR_NULL_ARGUMENT, what, "q");
        base((vla_mechanism)m, &d, &x), x.k = NULL;
        snprintf(what, sizeof what, "%s: k NULL", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &x, VLA_ERR_NULL_ARGUMENT, what, "k");
        base((vla_mechanism)m, &d, &x), x.v = NULL;
        snprintf(what, sizeof what, "%s: v NULL", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &x, VLA_ERR_NULL_ARGUMENT, what, "v");
        base((vla_mechanism)m, &d, &x), x.o = NULL;
        snprintf(what, sizeof what, "%s: o NULL", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &x, VLA_ERR_NULL_ARGUMENT, what, "o");
    }
    /* Other entry points. */
    check_msg(NULL, vla_attn_desc_init(NULL, VLA_MECH_VLA), VLA_ERR_NULL_ARGUMENT, "desc_init(NULL)", KW("desc"));
    check_msg(NULL, vla_attn_desc_preset(NULL, "paper"), VLA_ERR_NULL_ARGUMENT, "desc_preset(NULL)",
              KW("NULL", "desc"));
    check_msg(NULL, vla_attn_desc_preset(&d, NULL), VLA_ERR_NULL_ARGUMENT, "desc_preset(d, NULL)",
              KW("NULL", "preset"));
    check_msg(NULL, vla_backend_open("cpu", NULL), VLA_ERR_NULL_ARGUMENT, "backend_open(cpu, NULL)", KW("out"));
    vla_mechanism m;
    check_msg(NULL, vla_mechanism_from_name(NULL, &m), VLA_ERR_NULL_ARGUMENT, "mechanism_from_name(NULL)",
              KW("NULL", "mechanism"));
    check_msg(NULL, vla_backend_synchronize(NULL), VLA_ERR_NULL_ARGUMENT, "synchronize(NULL)", KW("backend"));
    check_msg(NULL, vla_backend_set_threads(NULL, 1), VLA_ERR_NULL_ARGUMENT, "set_threads(NULL)", KW("backend"));
    check_msg(F.be, vla_backend_set_threads(F.be, -1), VLA_ERR_INVALID_PARAMETER, "set_threads(-1)", KW("threads"));
}
END_TEST

START_TEST(test_dimensions) {
    vla_attn_desc d;
    vla_attn_args a;
    static const struct {
        int which, val;
        const char *what, *kw;
    } cases[] = {{0, 0, "B = 0", "B"},     {0, -1, "B = -1", "B"},     {1, 0, "T = 0", "T"},
                 {1, -3, "T = -3", "T"},   {2, 0, "H = 0", "H"},       {2, -1, "H = -1", "H"},
                 {3, 0, "dk = 0", "dk"},   {3, 257, "dk = 257", "dk"}, {3, -4, "dk = -4", "dk"},
                 {4, 0, "dv = 0", "dv"},   {4, 300, "dv = 300", "dv"}, {4, 257, "dv = 257", "dv"}};
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            base((vla_mechanism)m, &d, &a);
            int *f[] = {&a.B, &a.T, &a.H, &a.dk, &a.dv};
            *f[cases[i].which] = cases[i].val;
            char what[80];
            snprintf(what, sizeof what, "%s: %s", vla_mechanism_name((vla_mechanism)m), cases[i].what);
            EXPECT(&d, &a, VLA_ERR_INVALID_DIMENSION, what, cases[i].kw);
        }
}
END_TEST

START_TEST(test_shape_mismatch) {
    vla_attn_desc d;
    vla_attn_args a;
    /* Each buffer too small in turn (the 4-byte `tiny`). */
    static const char *const names[] = {"q", "k", "v", "o", "u", "beta", "g", "S_in", "S_out", "A_in", "A_out",
                                        "n_in", "n_out"};
    static const vla_mechanism mech[] = {VLA_MECH_VLA,   VLA_MECH_VLA,   VLA_MECH_VLA,    VLA_MECH_VLA,  VLA_MECH_VLA,
                                         VLA_MECH_DELTA, VLA_MECH_DELTA, VLA_MECH_LINEAR, VLA_MECH_DELTA, VLA_MECH_VLA,
                                         VLA_MECH_VLA,   VLA_MECH_LINEAR, VLA_MECH_LINEAR};
    for (int i = 0; i < 13; i++) {
        base(mech[i], &d, &a);
        const vla_buffer **in[] = {&a.q, &a.k, &a.v, NULL, &a.u, &a.beta, &a.g, &a.S_in, NULL, &a.A_in, NULL, &a.n_in, NULL};
        vla_buffer **out[] = {NULL, NULL, NULL, &a.o, NULL, NULL, NULL, NULL, &a.S_out, NULL, &a.A_out, NULL, &a.n_out};
        if (in[i]) *in[i] = F.tiny;
        else *out[i] = F.tiny;
        char what[64];
        snprintf(what, sizeof what, "%s: %s too small", vla_mechanism_name(mech[i]), names[i]);
        EXPECT(&d, &a, VLA_ERR_SHAPE_MISMATCH, what, names[i]);
    }
    /* delta-paper's gate is [B,T,H,dv]: delta's [B,T,H] gate is too small for it. */
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.g = F.g;
    EXPECT(&d, &a, VLA_ERR_SHAPE_MISMATCH, "delta-paper: g of [B,T,H] (needs [B,T,H,dv])", "g");
    /* T larger than the buffers hold. */
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.T = FT + 1;
    EXPECT(&d, &a, VLA_ERR_SHAPE_MISMATCH, "softmax: T past the buffers", "q");
    base(VLA_MECH_VLA, &d, &a);
    a.dk = FDK + 1;
    EXPECT(&d, &a, VLA_ERR_SHAPE_MISMATCH, "vla: dk past the buffers", "q");
    base(VLA_MECH_VLA, &d, &a);
    a.dv = FDV + 2;
    EXPECT(&d, &a, VLA_ERR_SHAPE_MISMATCH, "vla: dv past v", "v");
}
END_TEST

START_TEST(test_names) {
    vla_mechanism m;
    vla_algorithm al;
    vla_feature_map fm;
    check_msg(NULL, vla_mechanism_from_name("foo", &m), VLA_ERR_UNKNOWN_NAME, "mechanism 'foo'", KW("foo"));
    check_msg(NULL, vla_mechanism_from_name("", &m), VLA_ERR_UNKNOWN_NAME, "mechanism ''", KW("mechanism"));
    check_msg(NULL, vla_algorithm_from_name("bogus", &al), VLA_ERR_UNKNOWN_NAME, "algorithm 'bogus'", KW("bogus"));
    check_msg(NULL, vla_feature_map_from_name("relu", &fm), VLA_ERR_UNKNOWN_NAME, "feature map 'relu'", KW("relu"));
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    check_msg(NULL, vla_attn_desc_preset(&d, "nope"), VLA_ERR_UNKNOWN_NAME, "preset 'nope'", KW("nope"));
    check_msg(NULL, vla_attn_desc_init(&d, (vla_mechanism)9), VLA_ERR_UNKNOWN_NAME, "desc_init(9)",
              KW("mechanism"));
    /* Every name round-trips. */
    for (int i = 0; i <= VLA_MECH_DELTA_PAPER; i++) {
        ck_assert_int_eq(vla_mechanism_from_name(vla_mechanism_name((vla_mechanism)i), &m), VLA_OK);
        ck_assert_int_eq(m, i);
    }
    for (int i = 0; i <= VLA_ALGO_FUSED; i++) {
        ck_assert_int_eq(vla_algorithm_from_name(vla_algorithm_name((vla_algorithm)i), &al), VLA_OK);
        ck_assert_int_eq(al, i);
    }
    for (int i = 0; i <= VLA_FMAP_ELU1; i++) {
        ck_assert_int_eq(vla_feature_map_from_name(vla_feature_map_name((vla_feature_map)i), &fm), VLA_OK);
        ck_assert_int_eq(fm, i);
    }
    ck_assert_str_eq(vla_mechanism_name(VLA_MECH_VLA), "vla");
    ck_assert_str_eq(vla_mechanism_name(VLA_MECH_DELTA_PAPER), "delta-paper");
    ck_assert_str_eq(vla_algorithm_name(VLA_ALGO_TWO_LEVEL), "two-level");
    ck_assert_str_eq(vla_feature_map_name(VLA_FMAP_ELU1), "elu1");

    /* Bad enum values inside the desc. */
    vla_attn_args a;
    base(VLA_MECH_VLA, &d, &a);
    d.mechanism = (vla_mechanism)5;
    EXPECT(&d, &a, VLA_ERR_UNKNOWN_NAME, "desc.mechanism = 5", "mechanism");
    base(VLA_MECH_VLA, &d, &a);
    d.mechanism = (vla_mechanism)-1;
    EXPECT(&d, &a, VLA_ERR_UNKNOWN_NAME, "desc.mechanism = -1", "mechanism");
    base(VLA_MECH_VLA, &d, &a);
    d.algorithm = (vla_algorithm)6;
    EXPECT(&d, &a, VLA_ERR_UNKNOWN_NAME, "desc.algorithm = 6", "algorithm");
    base(VLA_MECH_VLA, &d, &a);
    d.feature_map = (vla_feature_map)2;
    EXPECT(&d, &a, VLA_ERR_UNKNOWN_NAME, "desc.feature_map = 2", "feature map");
    base(VLA_MECH_VLA, &d, &a);
    d.dtype = (vla_dtype)1;
    EXPECT(&d, &a, VLA_ERR_UNSUPPORTED, "desc.dtype = 1", "dtype");
}
END_TEST

START_TEST(test_parameters) {
    vla_attn_desc d;
    vla_attn_args a;
    const double bad_lambda[] = {0.0, -1.0, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        base(VLA_MECH_VLA, &d, &a);
        d.lambda0 = bad_lambda[i];
        char what[64];
        snprintf(what, sizeof what, "vla: lambda0 = %g", bad_lambda[i]);
        EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "lambda0");
    }
    const double bad_eps[] = {0.0, -1e-4, NAN};
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++)
        for (int i = 0; i < 3; i++) {
            base((vla_mechanism)m, &d, &a);
            d.eps = bad_eps[i];
            char what[64];
            snprintf(what, sizeof what, "%s: eps = %g", vla_mechanism_name((vla_mechanism)m), bad_eps[i]);
            EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "eps");
        }
    for (int m = 1; m < 4; m++) {
        base((vla_mechanism)m, &d, &a);
        d.chunk = 0;
        d.algorithm = VLA_ALGO_CHUNKED;
        char what[64];
        snprintf(what, sizeof what, "%s: chunk = 0", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "chunk");
        base((vla_mechanism)m, &d, &a);
        d.chunk = -5;
        snprintf(what, sizeof what, "%s: chunk = -5", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "chunk");
    }
    /* delta-paper's chunk is the backward's checkpoint interval: checked for the sequential form too. */
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    d.chunk = 0;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "delta-paper: chunk = 0", "chunk");
    base(VLA_MECH_VLA, &d, &a);
    d.refresh = -1;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: refresh = -1", "refresh", "R");
    base(VLA_MECH_VLA, &d, &a);
    d.refresh = 4, d.refresh_size = -1;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: refresh_size = -1", "refresh_size", "rho");
    base(VLA_MECH_VLA, &d, &a);
    d.refresh = 4, d.refresh_size = NAN;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: refresh_size = NaN", "refresh_size", "rho");
    base(VLA_MECH_VLA, &d, &a);
    d.u_scale = -1;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: u_scale = -1", "u_scale");
    base(VLA_MECH_VLA, &d, &a);
    d.u_scale = NAN;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: u_scale = NaN", "u_scale");
    base(VLA_MECH_SOFTMAX, &d, &a);
    d.scale = -1;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "softmax: scale = -1", "scale");
    base(VLA_MECH_SOFTMAX, &d, &a);
    d.scale = NAN;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "softmax: scale = NaN", "scale");
    base(VLA_MECH_VLA, &d, &a);
    d.segment_chunks = -1;
    d.algorithm = VLA_ALGO_TWO_LEVEL;
    EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, "vla: segment_chunks = -1", "segment_chunks");
    for (int m = 1; m <= VLA_MECH_DELTA_PAPER; m++) {
        base((vla_mechanism)m, &d, &a);
        a.t0 = -1;
        char what[64];
        snprintf(what, sizeof what, "%s: t0 = -1", vla_mechanism_name((vla_mechanism)m));
        EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "t0");
    }
    for (int i = 0; i < 8; i += 7) {
        base(VLA_MECH_VLA, &d, &a);
        d.reserved[i] = 1;
        char what[64];
        snprintf(what, sizeof what, "reserved[%d] = 1", i);
        EXPECT(&d, &a, VLA_ERR_INVALID_PARAMETER, what, "reserved");
    }
}
END_TEST

START_TEST(test_combinations) {
    vla_attn_desc d;
    vla_attn_args a;
    const vla_status C = VLA_ERR_INVALID_COMBINATION;
    base(VLA_MECH_VLA, &d, &a);
    d.normalize_output = 1; /* phi none */
    EXPECT(&d, &a, C, "vla: normalize_output with phi none", "normalize_output");
    base(VLA_MECH_LINEAR, &d, &a);
    d.normalize_output = 1;
    EXPECT(&d, &a, C, "linear: normalize_output", "normalize_output");
    base(VLA_MECH_DELTA, &d, &a);
    d.normalize_output = 1, d.feature_map = VLA_FMAP_ELU1;
    EXPECT(&d, &a, C, "delta: normalize_output", "normalize_output");
    base(VLA_MECH_LINEAR, &d, &a);
    d.feature_map = VLA_FMAP_NONE;
    EXPECT(&d, &a, C, "linear: feature map none", "feature map");
    base(VLA_MECH_SOFTMAX, &d, &a);
    d.feature_map = VLA_FMAP_ELU1;
    EXPECT(&d, &a, C, "softmax: feature map elu1", "feature map");
    /* Algorithms VLA-MATH does not define for the mechanism. */
    static const struct {
        vla_mechanism m;
        vla_algorithm al;
    } undef[] = {{VLA_MECH_LINEAR, VLA_ALGO_SCAN},       {VLA_MECH_DELTA, VLA_ALGO_SCAN},
                 {VLA_MECH_SOFTMAX, VLA_ALGO_SCAN},      {VLA_MECH_SOFTMAX, VLA_ALGO_SEQUENTIAL},
                 {VLA_MECH_SOFTMAX, VLA_ALGO_CHUNKED},   {VLA_MECH_LINEAR, VLA_ALGO_TWO_LEVEL},
                 {VLA_MECH_DELTA, VLA_ALGO_TWO_LEVEL},   {VLA_MECH_VLA, VLA_ALGO_FUSED},
                 {VLA_MECH_LINEAR, VLA_ALGO_FUSED},      {VLA_MECH_DELTA_PAPER, VLA_ALGO_CHUNKED},
                 {VLA_MECH_DELTA_PAPER, VLA_ALGO_SCAN},  {VLA_MECH_DELTA_PAPER, VLA_ALGO_TWO_LEVEL},
                 {VLA_MECH_DELTA_PAPER, VLA_ALGO_FUSED}};
    for (size_t i = 0; i < sizeof undef / sizeof undef[0]; i++) {
        base(undef[i].m, &d, &a);
        d.algorithm = undef[i].al;
        char what[64];
        snprintf(what, sizeof what, "%s: algorithm %s", vla_mechanism_name(undef[i].m),
                 vla_algorithm_name(undef[i].al));
        EXPECT(&d, &a, C, what, vla_algorithm_name(undef[i].al));
    }
    /* Inputs and states a mechanism does not use. */
    base(VLA_MECH_DELTA, &d, &a);
    a.u = F.u;
    EXPECT(&d, &a, C, "delta: u given", "u");
    base(VLA_MECH_LINEAR, &d, &a);
    a.u = F.u;
    EXPECT(&d, &a, C, "linear: u given", "u");
    base(VLA_MECH_VLA, &d, &a);
    a.beta = F.beta;
    EXPECT(&d, &a, C, "vla: beta given", "beta");
    base(VLA_MECH_VLA, &d, &a);
    a.g = F.g;
    EXPECT(&d, &a, C, "vla: g given", "g");
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.beta = F.beta;
    EXPECT(&d, &a, C, "softmax: beta given", "beta");
    base(VLA_MECH_LINEAR, &d, &a);
    a.A_in = F.Ai;
    EXPECT(&d, &a, C, "linear: A_in", "A_in", "A");
    base(VLA_MECH_DELTA, &d, &a);
    a.A_out = F.Ao;
    EXPECT(&d, &a, C, "delta: A_out", "A_out", "A");
    base(VLA_MECH_VLA, &d, &a);
    a.n_in = F.ni;
    EXPECT(&d, &a, C, "vla (not normalised): n_in", "n_in", "n");
    base(VLA_MECH_VLA, &d, &a);
    a.n_out = F.no;
    EXPECT(&d, &a, C, "vla (not normalised): n_out", "n_out", "n");
    base(VLA_MECH_DELTA, &d, &a);
    a.n_in = F.ni;
    EXPECT(&d, &a, C, "delta: n_in", "n_in", "n");
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.S_in = F.Si;
    EXPECT(&d, &a, C, "softmax: S_in", "S_in", "S", "state");
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.S_out = F.So;
    EXPECT(&d, &a, C, "softmax: S_out", "S_out", "S", "state");
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.t0 = 5;
    EXPECT(&d, &a, C, "softmax: t0 = 5", "t0", "state");
    /* delta-paper: no write strength, no u, no A or n, no normalised output. */
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.beta = F.beta;
    EXPECT(&d, &a, C, "delta-paper: beta given", "beta");
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.beta = F.beta, a.g = F.grow;
    EXPECT(&d, &a, C, "delta-paper: beta and g given", "beta");
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.u = F.u;
    EXPECT(&d, &a, C, "delta-paper: u given", "u");
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.A_in = F.Ai;
    EXPECT(&d, &a, C, "delta-paper: A_in", "A_in", "A");
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    a.n_out = F.no;
    EXPECT(&d, &a, C, "delta-paper: n_out", "n_out", "n");
    base(VLA_MECH_DELTA_PAPER, &d, &a);
    d.normalize_output = 1;
    EXPECT(&d, &a, C, "delta-paper: normalize_output", "normalize_output");
}
END_TEST

START_TEST(test_backends) {
    vla_backend *b = (vla_backend *)0x1;
    check_msg(NULL, vla_backend_open("nope", &b), VLA_ERR_UNKNOWN_BACKEND, "backend 'nope'", KW("nope"));
    ck_assert_ptr_null(b);
    b = (vla_backend *)0x1;
    check_msg(NULL, vla_backend_open("nope:3", &b), VLA_ERR_UNKNOWN_BACKEND, "backend 'nope:3'", KW("nope"));
    ck_assert_ptr_null(b);

    /* A buffer from another handle. */
    vla_attn_desc d;
    vla_attn_args a;
    base(VLA_MECH_VLA, &d, &a);
    a.q = F.q2;
    EXPECT(&d, &a, VLA_ERR_WRONG_BACKEND, "vla: q from another handle", "q");
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.o = F.o2;
    EXPECT(&d, &a, VLA_ERR_WRONG_BACKEND, "softmax: o from another handle", "o");

    /* Devices; open NULL / "auto". */
    int count = -1;
    ck_assert_int_eq(vla_list_devices(NULL, 0, &count), VLA_OK);
    ck_assert_int_ge(count, 1);
    vla_device_info *info = calloc((size_t)count, sizeof *info);
    int count2 = -1, has_cpu = 0;
    ck_assert_int_eq(vla_list_devices(info, count, &count2), VLA_OK);
    ck_assert_int_eq(count2, count);
    for (int i = 0; i < count; i++) {
        fprintf(stderr, "  device %d: %s (%s)%s\n", i, info[i].name, info[i].description, info[i].is_gpu ? " gpu" : "");
        if (!strcmp(info[i].name, "cpu")) {
            has_cpu = 1;
            ck_assert_int_eq(info[i].is_gpu, 0);
        }
        ck_assert_msg(info[i].description[0] != '\0', "device %s has no description", info[i].name);
    }
    free(info);
    ck_assert_msg(has_cpu, "vla_list_devices does not list \"cpu\"");
    check_msg(NULL, vla_list_devices(NULL, 0, NULL), VLA_ERR_NULL_ARGUMENT, "list_devices count NULL", KW("count"));
    check_msg(NULL, vla_list_devices(NULL, 2, &count), VLA_ERR_NULL_ARGUMENT, "list_devices out NULL, max 2",
              KW("out"));
    const char *autos[] = {NULL, "auto", ""};
    for (int i = 0; i < 3; i++) {
        vla_backend *x = NULL;
        vla_status s = vla_backend_open(autos[i], &x);
        ck_assert_msg(s == VLA_OK && x, "vla_backend_open(%s) failed: %s", autos[i] ? autos[i] : "NULL",
                      vla_last_message());
        ck_assert_msg(vla_backend_name(x)[0] != '\0', "auto backend has no name");
        ck_assert_msg(vla_backend_device(x)[0] != '\0', "auto backend has no device description");
        ck_assert_int_eq(vla_backend_synchronize(x), VLA_OK);
        vla_backend_close(x);
    }
    ck_assert_str_eq(vla_backend_name(F.be), "cpu");
    vla_backend_close(NULL);
    ck_assert_int_eq(vla_backend_set_threads(F.be, 1), VLA_OK);
    ck_assert_int_eq(vla_backend_set_threads(F.be, 0), VLA_OK);
    ck_assert_str_eq(vla_version(), VLA_VERSION_STRING);
    ck_assert_int_eq(vla_version_number(), VLA_VERSION);
}
END_TEST

START_TEST(test_aliasing) {
    vla_attn_desc d;
    vla_attn_args a;
    const vla_status AL = VLA_ERR_ALIASING;
    base(VLA_MECH_SOFTMAX, &d, &a);
    a.o = F.q;
    EXPECT(&d, &a, AL, "softmax: o == q", "o");
    base(VLA_MECH_VLA, &d, &a);
    a.o = F.v;
    a.dk = FDV, a.dv = FDV; /* v big enough to be o: keep the shapes consistent */
    EXPECT(&d, &a, AL, "vla: o == v", "o");
    base(VLA_MECH_VLA, &d, &a);
    a.S_out = F.big, a.q = F.big;
    EXPECT(&d, &a, AL, "vla: S_out == q", "S_out");
    base(VLA_MECH_VLA, &d, &a);
    a.o = F.big, a.S_out = F.big;
    EXPECT(&d, &a, AL, "vla: o == S_out", "o", "S_out");
    base(VLA_MECH_VLA, &d, &a);
    a.A_out = F.big, a.S_out = F.big;
    EXPECT(&d, &a, AL, "vla: S_out == A_out", "S_out", "A_out");
    base(VLA_MECH_VLA, &d, &a);
    a.S_in = F.big, a.A_out = F.big;
    EXPECT(&d, &a, AL, "vla: A_out == S_in", "A_out");
    base(VLA_MECH_VLA, &d, &a);
    a.u = F.big, a.A_out = F.big;
    EXPECT(&d, &a, AL, "vla: A_out == u", "A_out");
    base(VLA_MECH_LINEAR, &d, &a);
    a.k = F.big, a.n_out = F.big;
    EXPECT(&d, &a, AL, "linear: n_out == k", "n_out");
    base(VLA_MECH_DELTA, &d, &a);
    a.beta = F.big, a.o = F.big;
    EXPECT(&d, &a, AL, "delta: o == beta", "o");
    base(VLA_MECH_DELTA, &d, &a);
    a.g = F.big, a.S_out = F.big;
    EXPECT(&d, &a, AL, "delta: S_out == g", "S_out");
}
END_TEST

START_TEST(test_buffer_api) {
    vla_buffer *b = NULL;
    check_msg(F.be, vla_buffer_alloc(F.be, 0, &b), VLA_ERR_INVALID_PARAMETER, "buffer_alloc 0 bytes", KW("bytes"));
    ck_assert_ptr_null(b);
    check_msg(NULL, vla_buffer_alloc(NULL, 16, &b), VLA_ERR_NULL_ARGUMENT, "buffer_alloc backend NULL",
              KW("backend"));
    check_msg(F.be, vla_buffer_alloc(F.be, 16, NULL), VLA_ERR_NULL_ARGUMENT, "buffer_alloc out NULL", KW("out"));
    ck_assert_int_eq(vla_buffer_alloc(F.be, 16, &b), VLA_OK);
    ck_assert_uint_eq(vla_buffer_size(b), 16);
    ck_assert_ptr_nonnull(vla_buffer_host_ptr(b)); /* the CPU backend's buffers are host memory */
    unsigned char pat[16], src[32], back[16];
    for (int i = 0; i < 16; i++) pat[i] = (unsigned char)(0xA0 + i);
    for (int i = 0; i < 32; i++) src[i] = (unsigned char)i;
    ck_assert_int_eq(vla_buffer_upload(b, 0, pat, 16), VLA_OK);
    check_msg(F.be, vla_buffer_upload(b, 12, src, 8), VLA_ERR_OUT_OF_RANGE, "upload 8 bytes at 12 of 16",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_upload(b, 17, src, 0), VLA_ERR_OUT_OF_RANGE, "upload at offset 17 of 16",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_upload(b, 0, src, 17), VLA_ERR_OUT_OF_RANGE, "upload 17 bytes into 16",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_upload(b, 8, src, SIZE_MAX), VLA_ERR_OUT_OF_RANGE, "upload SIZE_MAX bytes",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_upload(b, SIZE_MAX, src, 2), VLA_ERR_OUT_OF_RANGE, "upload at offset SIZE_MAX",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_download(b, 12, back, 8), VLA_ERR_OUT_OF_RANGE, "download 8 bytes at 12 of 16",
              KW("offset", "past"));
    check_msg(F.be, vla_buffer_upload(b, 0, NULL, 4), VLA_ERR_NULL_ARGUMENT, "upload from NULL", KW("NULL", "host"));
    check_msg(NULL, vla_buffer_upload(NULL, 0, src, 4), VLA_ERR_NULL_ARGUMENT, "upload to NULL buffer",
              KW("buffer"));
    /* Nothing was written by the failing uploads. */
    ck_assert_int_eq(vla_buffer_download(b, 0, back, 16), VLA_OK);
    ck_assert_msg(memcmp(back, pat, 16) == 0, "a failing upload wrote into the buffer");
    /* Offsets work. */
    ck_assert_int_eq(vla_buffer_upload(b, 12, src, 4), VLA_OK);
    ck_assert_int_eq(vla_buffer_download(b, 8, back, 8), VLA_OK);
    ck_assert_msg(memcmp(back, pat + 8, 4) == 0 && memcmp(back + 4, src, 4) == 0, "upload/download at an offset");
    ck_assert_int_eq(vla_buffer_upload(b, 16, src, 0), VLA_OK); /* empty copy at the end */
    vla_buffer_free(b);
    vla_buffer_free(NULL);
    ck_assert_uint_eq(vla_buffer_size(NULL), 0);
}
END_TEST

START_TEST(test_status_strings) {
    const vla_status all[] = {VLA_OK,
                              VLA_ERR_NULL_ARGUMENT,
                              VLA_ERR_INVALID_DIMENSION,
                              VLA_ERR_SHAPE_MISMATCH,
                              VLA_ERR_INVALID_PARAMETER,
                              VLA_ERR_INVALID_COMBINATION,
                              VLA_ERR_UNKNOWN_BACKEND,
                              VLA_ERR_UNKNOWN_NAME,
                              VLA_ERR_UNSUPPORTED,
                              VLA_ERR_WRONG_BACKEND,
                              VLA_ERR_OUT_OF_RANGE,
                              VLA_ERR_ALIASING,
                              VLA_ERR_OUT_OF_MEMORY,
                              VLA_ERR_BACKEND,
                              VLA_ERR_INTERNAL};
    const int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        const char *s = vla_status_string(all[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(s[0] != '\0', "status %d has an empty string", (int)all[i]);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(s, vla_status_string(all[j])) != 0, "statuses %d and %d share the string \"%s\"",
                          (int)all[i], (int)all[j], s);
    }
    const char *unk = vla_status_string((vla_status)55);
    ck_assert_msg(unk && unk[0], "an unknown status has no string");
}
END_TEST

/* A success clears the previous failure's message. */
START_TEST(test_message_cleared) {
    vla_attn_desc d;
    vla_attn_args a;
    base(VLA_MECH_VLA, &d, &a);
    d.lambda0 = -1;
    ck_assert_int_eq(vla_attention_forward(F.be, &d, &a), VLA_ERR_INVALID_PARAMETER);
    ck_assert(vla_backend_message(F.be)[0] != '\0');
    base(VLA_MECH_VLA, &d, &a);
    vla_buffer *o = tu_buf_new(F.be, 64), *S = tu_buf_new(F.be, 64), *A = tu_buf_new(F.be, 64);
    a.o = o, a.S_out = S, a.A_out = A;
    ck_assert_int_eq(vla_attention_forward(F.be, &d, &a), VLA_OK);
    ck_assert_msg(vla_backend_message(F.be)[0] == '\0', "message after success: \"%s\"", vla_backend_message(F.be));
    ck_assert_msg(vla_last_message()[0] == '\0', "thread message after success: \"%s\"", vla_last_message());
    vla_buffer_free(o), vla_buffer_free(S), vla_buffer_free(A);
}
END_TEST

/* vla_backend_timer_*: misuse has its own status; a real interval is positive and, on the CPU,
 * comes from the host clock (device_clock = 0). */
START_TEST(test_timer) {
    double ms = -1.0;
    int dev = -1;
    ck_assert_int_eq(vla_backend_timer_start(NULL), VLA_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(vla_backend_timer_stop(NULL, &ms, &dev), VLA_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(vla_backend_timer_stop(F.be, &ms, &dev), VLA_ERR_INVALID_COMBINATION);
    ck_assert_ptr_nonnull(strstr(vla_backend_message(F.be), "timer_start"));
    ck_assert_int_eq(vla_backend_timer_start(F.be), VLA_OK);
    ck_assert_int_eq(vla_backend_timer_stop(F.be, NULL, &dev), VLA_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(vla_backend_timer_start(F.be), VLA_OK);
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    vla_attn_args a = {.B = FB, .T = FT, .H = FH, .dk = FDK, .dv = FDV, .q = F.q, .k = F.k, .v = F.v, .o = F.o};
    ck_assert_int_eq(vla_attention_forward(F.be, &d, &a), VLA_OK);
    ck_assert_int_eq(vla_backend_timer_stop(F.be, &ms, &dev), VLA_OK);
    ck_assert(ms > 0.0 && ms < 60e3);
    ck_assert_int_eq(dev, 0);
    /* A stop consumes its start. */
    ck_assert_int_eq(vla_backend_timer_stop(F.be, &ms, NULL), VLA_ERR_INVALID_COMBINATION);
}
END_TEST

/* ---- the backward op: every argument error once, and nothing written ---- */

static void expect_bwd(vla_backend *be, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g,
                       vla_status want, const char *what, const char *const *kws) {
    snapshot s;
    take(&s);
    vla_status got = vla_attention_backward(be, d, a, g);
    char tm[1024], bm[1024];
    snprintf(tm, sizeof tm, "%s", vla_last_message());
    snprintf(bm, sizeof bm, "%s", be ? vla_backend_message(be) : "");
    same_as(&s, what);
    drop(&s);
    check_msgs(tm, be ? bm : NULL, got, want, what, kws);
}
#define EXPECT_BWD(d, a, g, st, what, ...) expect_bwd(F.be, d, a, g, st, what, KW(__VA_ARGS__))

/* A valid backward of mechanism m: every gradient the mechanism has, every optional input given
 * (vla with u; delta with beta and g), upstream of every state. The forward's o and final states
 * stay in args (base): the backward neither reads nor writes them. */
static void bwd_base(vla_mechanism m, vla_attn_desc *d, vla_attn_args *a, vla_attn_grads *g) {
    base(m, d, a);
    memset(g, 0, sizeof *g);
    g->dO = F.dO, g->dq = F.gq, g->dk = F.gk, g->dv = F.gv;
    if (m != VLA_MECH_SOFTMAX) g->dS_end = F.dSe, g->dS_0 = F.gS, a->S_in = F.Si;
    if (m == VLA_MECH_VLA) a->u = F.u, g->du = F.gu, a->A_in = F.Ai, g->dA_end = F.dAe, g->dA_0 = F.gA;
    if (m == VLA_MECH_DELTA) a->beta = F.beta, a->g = F.g, g->dbeta = F.gbeta, g->dg = F.gg;
    if (m == VLA_MECH_LINEAR) a->n_in = F.ni, g->dn_end = F.dne, g->dn_0 = F.gn;
    if (m == VLA_MECH_DELTA_PAPER) a->g = F.grow, g->dg = F.ggrow;
}

/* The baselines are valid (run on fresh outputs, so F's stay poisoned) and write every output. */
START_TEST(test_backward_baselines_valid) {
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        vla_attn_desc d;
        vla_attn_args a;
        vla_attn_grads g;
        bwd_base((vla_mechanism)m, &d, &a, &g);
        vla_buffer **outs[] = {&g.dq, &g.dk, &g.dv, &g.du, &g.dbeta, &g.dg, &g.dS_0, &g.dA_0, &g.dn_0};
        vla_buffer *fresh[9] = {0};
        for (int i = 0; i < 9; i++)
            if (*outs[i]) *outs[i] = fresh[i] = tu_buf_new(F.be, 64);
        vla_status s = vla_attention_backward(F.be, &d, &a, &g);
        ck_assert_msg(s == VLA_OK, "backward baseline %s: %s: %s", vla_mechanism_name((vla_mechanism)m),
                      vla_status_string(s), vla_backend_message(F.be));
        for (int i = 0; i < 9; i++) {
            if (!fresh[i]) continue;
            float *x = tu_buf_download_new(fresh[i], 1);
            ck_assert_msg(!tu_is_poison(x[0]), "backward baseline %s: output %d not written",
                          vla_mechanism_name((vla_mechanism)m), i);
            free(x);
            vla_buffer_free(fresh[i]);
        }
    }
}
END_TEST

START_TEST(test_backward_errors) {
    vla_attn_desc d;
    vla_attn_args a;
    vla_attn_grads g;
    const vla_status C = VLA_ERR_INVALID_COMBINATION, SM = VLA_ERR_SHAPE_MISMATCH;

    /* NULL arguments. */
    bwd_base(VLA_MECH_VLA, &d, &a, &g);
    expect_bwd(NULL, &d, &a, &g, VLA_ERR_NULL_ARGUMENT, "backward: backend NULL", KW("backend"));
    EXPECT_BWD(NULL, &a, &g, VLA_ERR_NULL_ARGUMENT, "backward: desc NULL", "desc");
    EXPECT_BWD(&d, NULL, &g, VLA_ERR_NULL_ARGUMENT, "backward: args NULL", "args");
    EXPECT_BWD(&d, &a, NULL, VLA_ERR_NULL_ARGUMENT, "backward: grads NULL", "grads");
    g.dO = NULL;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_NULL_ARGUMENT, "backward: dO NULL", "dO");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), a.k = NULL;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_NULL_ARGUMENT, "backward: k NULL", "k");

    /* The forward's validation applies: dimensions, parameters, combinations, names. */
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), a.T = 0;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_INVALID_DIMENSION, "backward: T = 0", "T");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), d.lambda0 = -1;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_INVALID_PARAMETER, "backward: lambda0 = -1", "lambda0");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), d.mechanism = (vla_mechanism)7;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_UNKNOWN_NAME, "backward: desc.mechanism = 7", "mechanism");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), a.beta = F.beta, g.dbeta = F.gbeta;
    EXPECT_BWD(&d, &a, &g, C, "backward: vla with beta", "beta");
    bwd_base(VLA_MECH_SOFTMAX, &d, &a, &g), d.algorithm = VLA_ALGO_SEQUENTIAL;
    EXPECT_BWD(&d, &a, &g, C, "backward: softmax sequential", "sequential");

    /* Algorithms the backward does not run. */
    bwd_base(VLA_MECH_VLA, &d, &a, &g), d.algorithm = VLA_ALGO_SCAN;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_UNSUPPORTED, "backward: vla scan", "scan", "sequential", "chunked");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), d.algorithm = VLA_ALGO_TWO_LEVEL;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_UNSUPPORTED, "backward: vla two-level", "two-level", "sequential", "chunked");

    /* Every gradient buffer too small (the 4-byte `tiny`), each on a mechanism that takes it. */
    static const struct {
        vla_mechanism m;
        const char *name;
    } small[] = {{VLA_MECH_SOFTMAX, "dO"}, {VLA_MECH_LINEAR, "dS_end"}, {VLA_MECH_VLA, "dA_end"},
                 {VLA_MECH_LINEAR, "dn_end"}, {VLA_MECH_VLA, "dq"},      {VLA_MECH_DELTA, "dk"},
                 {VLA_MECH_SOFTMAX, "dv"},    {VLA_MECH_VLA, "du"},      {VLA_MECH_DELTA, "dbeta"},
                 {VLA_MECH_DELTA, "dg"},      {VLA_MECH_DELTA, "dS_0"},  {VLA_MECH_VLA, "dA_0"},
                 {VLA_MECH_LINEAR, "dn_0"}};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        bwd_base(small[i].m, &d, &a, &g);
        const vla_buffer **in[] = {&g.dO, &g.dS_end, &g.dA_end, &g.dn_end};
        vla_buffer **out[] = {&g.dq, &g.dk, &g.dv, &g.du, &g.dbeta, &g.dg, &g.dS_0, &g.dA_0, &g.dn_0};
        if (i < 4) *in[i] = F.tiny;
        else *out[i - 4] = F.tiny;
        char what[64];
        snprintf(what, sizeof what, "backward %s: %s too small", vla_mechanism_name(small[i].m), small[i].name);
        EXPECT_BWD(&d, &a, &g, SM, what, small[i].name);
    }
    bwd_base(VLA_MECH_VLA, &d, &a, &g), a.A_in = F.tiny;
    EXPECT_BWD(&d, &a, &g, SM, "backward vla: A_in too small", "A_in");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dg = F.gg;
    EXPECT_BWD(&d, &a, &g, SM, "backward delta-paper: dg of [B,T,H] (needs [B,T,H,dv])", "dg");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), a.g = F.g;
    EXPECT_BWD(&d, &a, &g, SM, "backward delta-paper: g of [B,T,H] (needs [B,T,H,dv])", "g");

    /* delta-paper: beta refused, its one algorithm, no A or n. */
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), a.beta = F.beta;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: beta given", "beta");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), a.beta = F.beta, g.dbeta = F.gbeta;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: beta and dbeta", "beta");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), d.algorithm = VLA_ALGO_CHUNKED;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: chunked", "chunked");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), d.algorithm = VLA_ALGO_SCAN;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: scan", "scan");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), a.g = NULL;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: dg without g", "dg");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dA_0 = F.gA;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: dA_0", "dA_0");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dn_0 = F.gn;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: dn_0", "dn_0");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dA_end = F.dAe;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: dA_end", "dA_end");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dn_end = F.dne;
    EXPECT_BWD(&d, &a, &g, C, "backward delta-paper: dn_end", "dn_end");
    bwd_base(VLA_MECH_DELTA_PAPER, &d, &a, &g), g.dg = F.big, g.dO = F.big;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_ALIASING, "backward delta-paper: dg == dO", "dg");

    /* Gradients of what the call does not have. */
    bwd_base(VLA_MECH_VLA, &d, &a, &g), a.u = NULL;
    EXPECT_BWD(&d, &a, &g, C, "backward vla: du without u", "du");
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), a.beta = NULL;
    EXPECT_BWD(&d, &a, &g, C, "backward delta: dbeta without beta", "dbeta");
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), a.g = NULL;
    EXPECT_BWD(&d, &a, &g, C, "backward delta: dg without g", "dg");
    bwd_base(VLA_MECH_SOFTMAX, &d, &a, &g), g.dS_0 = F.gS;
    EXPECT_BWD(&d, &a, &g, C, "backward softmax: dS_0", "dS_0");
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), g.dA_0 = F.gA;
    EXPECT_BWD(&d, &a, &g, C, "backward delta: dA_0", "dA_0");
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), g.dn_0 = F.gn;
    EXPECT_BWD(&d, &a, &g, C, "backward delta: dn_0", "dn_0");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), g.dn_0 = F.gn;
    EXPECT_BWD(&d, &a, &g, C, "backward vla (not normalised): dn_0", "dn_0");
    bwd_base(VLA_MECH_SOFTMAX, &d, &a, &g), g.dS_end = F.dSe;
    EXPECT_BWD(&d, &a, &g, C, "backward softmax: dS_end", "dS_end");
    bwd_base(VLA_MECH_LINEAR, &d, &a, &g), g.dA_end = F.dAe;
    EXPECT_BWD(&d, &a, &g, C, "backward linear: dA_end", "dA_end");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), g.dn_end = F.dne;
    EXPECT_BWD(&d, &a, &g, C, "backward vla (not normalised): dn_end", "dn_end");

    /* Buffers of another backend handle. */
    bwd_base(VLA_MECH_SOFTMAX, &d, &a, &g), g.dO = F.o2;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_WRONG_BACKEND, "backward: dO from another handle", "dO");
    bwd_base(VLA_MECH_LINEAR, &d, &a, &g), g.dq = F.q2;
    EXPECT_BWD(&d, &a, &g, VLA_ERR_WRONG_BACKEND, "backward: dq from another handle", "dq");

    /* Aliasing: an output on an input, or on another output. */
    const vla_status AL = VLA_ERR_ALIASING;
    bwd_base(VLA_MECH_SOFTMAX, &d, &a, &g), g.dq = F.q;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dq == q", "dq");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), g.dk = F.big, g.dO = F.big;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dk == dO", "dk");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), g.dS_0 = F.Si;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dS_0 == S_in", "dS_0");
    bwd_base(VLA_MECH_VLA, &d, &a, &g), g.dA_0 = F.big, g.dA_end = F.big;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dA_0 == dA_end", "dA_0");
    bwd_base(VLA_MECH_DELTA, &d, &a, &g), g.dbeta = F.big, g.dg = F.big;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dbeta == dg", "dbeta", "dg");
    bwd_base(VLA_MECH_LINEAR, &d, &a, &g), g.dv = F.big, g.dn_0 = F.big;
    EXPECT_BWD(&d, &a, &g, AL, "backward: dv == dn_0", "dv", "dn_0");
}
END_TEST

Suite *errors_suite(void) {
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("arguments");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_baselines_valid);
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test(tc, test_dimensions);
    tcase_add_test(tc, test_shape_mismatch);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_parameters);
    tcase_add_test(tc, test_combinations);
    tcase_add_test(tc, test_backends);
    tcase_add_test(tc, test_aliasing);
    tcase_add_test(tc, test_buffer_api);
    tcase_add_test(tc, test_status_strings);
    tcase_add_test(tc, test_message_cleared);
    tcase_add_test(tc, test_timer);
    tcase_add_test(tc, test_backward_baselines_valid);
    tcase_add_test(tc, test_backward_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(errors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
