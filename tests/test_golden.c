/* The golden cases of tests/data/golden (float64 outputs computed from VLA-MATH by the project
 * that wrote the maths): every algorithm of each case's mechanism, at two chunk sizes, must
 * match o and the final states to 1e-5 relative. The same cases also check ref64 (the tests'
 * own reference) against the golden outputs to 1e-10, so the two references vouch for each
 * other.
 *
 * The folder comes from argv[1], else the compile definition VLA_GOLDEN_DIR. The list of cases
 * is written out below and checked against cases.json (names, mechanisms, shapes, params). */
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"
#include "ref64.h"
#include "test_util.h"

#ifndef VLA_GOLDEN_DIR
#define VLA_GOLDEN_DIR "data/golden"
#endif

static const char *golden_dir = VLA_GOLDEN_DIR;

typedef struct gcase {
    const char *dir;
    const char *mech;
    int shape[5]; /* B, T, H, dk, dv */
    int R;
    double rho;
    int paper;
} gcase;

static const gcase gcases[] = {
    {"softmax_b2t37h3_dk16_dv24", "softmax", {2, 37, 3, 16, 24}, 0, 0, 0},
    {"linear_b2t37h3_dk16_dv24", "linear", {2, 37, 3, 16, 24}, 0, 0, 0},
    {"delta_b2t37h3_dk16_dv24", "delta", {2, 37, 3, 16, 24}, 0, 0, 0},
    {"delta_gated_b1t50h2_dk8_dv8", "delta", {1, 50, 2, 8, 8}, 0, 0, 0},
    {"vla_b2t37h3_dk16_dv24", "vla", {2, 37, 3, 16, 24}, 0, 0, 0},
    {"vla_u_b1t130h2_dk32_dv32", "vla", {1, 130, 2, 32, 32}, 0, 0, 0},
    {"vla_refresh20_b1t100h1_dk8_dv8", "vla", {1, 100, 1, 8, 8}, 20, 0.001, 0},
    {"vla_refresh4_rho0.5_b2t45h2_dk8_dv12", "vla", {2, 45, 2, 8, 12}, 4, 0.5, 0},
    {"vla_preset_paper_b2t61h2_dk16_dv16", "vla", {2, 61, 2, 16, 16}, 0, 0, 1},
};
#define N_GCASES ((int)(sizeof gcases / sizeof gcases[0]))

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    if (s && fread(s, 1, (size_t)len, f) != (size_t)len) {
        free(s);
        s = NULL;
    }
    if (s) s[len] = '\0';
    fclose(f);
    return s;
}

/* The text of the JSON object that follows "key": (up to its closing brace; the case objects
 * hold no nested objects). NULL if absent. malloc'ed. */
static char *json_object(const char *json, const char *key) {
    char pat[256];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return NULL;
    p = strchr(p + strlen(pat), '{');
    if (!p) return NULL;
    const char *e = strchr(p, '}');
    if (!e) return NULL;
    char *s = malloc((size_t)(e - p) + 2);
    memcpy(s, p, (size_t)(e - p) + 1);
    s[e - p + 1] = '\0';
    return s;
}

/* Pointer just after "field": in obj, or NULL. */
static const char *json_field(const char *obj, const char *field) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", field);
    const char *p = strstr(obj, pat);
    if (!p) return NULL;
    p = strchr(p + strlen(pat), ':');
    return p ? p + 1 : NULL;
}

/* cases.json lists exactly these cases, with these mechanisms, shapes and parameters. */
START_TEST(test_cases_json) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.json", golden_dir);
    char *json = read_text(path);
    ck_assert_msg(json != NULL, "cannot read %s", path);
    int listed = 0;
    for (const char *p = json; (p = strstr(p, "\"mechanism\"")); p++) listed++;
    ck_assert_msg(listed == N_GCASES, "cases.json lists %d cases, this test knows %d", listed, N_GCASES);
    for (int i = 0; i < N_GCASES; i++) {
        const gcase *c = &gcases[i];
        char *obj = json_object(json, c->dir);
        ck_assert_msg(obj != NULL, "cases.json has no case '%s'", c->dir);
        const char *m = json_field(obj, "mechanism");
        ck_assert_msg(m != NULL, "%s: no mechanism", c->dir);
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", c->mech);
        ck_assert_msg(strncmp(m + strspn(m, " \t\r\n"), want, strlen(want)) == 0, "%s: mechanism differs", c->dir);
        const char *s = json_field(obj, "shape_BTHdkdv");
        ck_assert_msg(s != NULL, "%s: no shape", c->dir);
        for (int j = 0; j < 5; j++) {
            while (*s && !isdigit((unsigned char)*s)) s++;
            char *end;
            long val = strtol(s, &end, 10);
            ck_assert_msg(val == c->shape[j], "%s: shape[%d] is %ld in cases.json, %d here", c->dir, j, val,
                          c->shape[j]);
            s = end;
        }
        const char *r = json_field(obj, "refresh");
        ck_assert_msg((r ? atoi(r) : 0) == c->R, "%s: refresh differs", c->dir);
        const char *rs = json_field(obj, "refresh_size");
        ck_assert_msg(!rs == !c->R && (!rs || fabs(strtod(rs, NULL) - c->rho) < 1e-12), "%s: refresh_size differs",
                      c->dir);
        const char *pr = json_field(obj, "preset");
        ck_assert_msg(!pr == !c->paper && (!pr || strstr(pr, "\"paper\"")), "%s: preset differs", c->dir);
        free(obj);
    }
    free(json);
}
END_TEST

typedef struct loaded {
    npy_array q, k, v, u, beta, g;           /* float32 inputs */
    npy_array o, S, A, n;                    /* float64 references */
    int has_u, has_beta, has_g, has_S, has_A, has_n;
    char n_problem[512];                     /* why n_final.npy could not be used, if so */
} loaded;

static int file_exists(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", golden_dir, dir, name);
    return access(path, R_OK) == 0;
}

static void load_f32(const char *dir, const char *name, npy_array *a) {
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s/%s", golden_dir, dir, name);
    ck_assert_msg(npy_read_f32(path, a, err, sizeof err) == 0, "%s", err);
}

static int load_f64(const char *dir, const char *name, npy_array *a, char *err, size_t errlen) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", golden_dir, dir, name);
    return npy_read_f64(path, a, err, errlen);
}

static void expect_shape(const npy_array *a, const char *what, int ndim, const int64_t *shape) {
    ck_assert_msg(a->ndim == ndim, "%s: ndim %d, expected %d", what, a->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_msg(a->shape[i] == shape[i], "%s: shape[%d] = %lld, expected %lld", what, i, (long long)a->shape[i],
                      (long long)shape[i]);
}

START_TEST(test_golden_case) {
    const gcase *c = &gcases[_i];
    const int B = c->shape[0], T = c->shape[1], H = c->shape[2], dk = c->shape[3], dv = c->shape[4];
    loaded L;
    memset(&L, 0, sizeof L);
    char err[512] = "";
    load_f32(c->dir, "q.npy", &L.q);
    load_f32(c->dir, "k.npy", &L.k);
    load_f32(c->dir, "v.npy", &L.v);
    const int64_t sqk[4] = {B, T, H, dk}, svo[4] = {B, T, H, dv}, sbt[3] = {B, T, H};
    const int64_t sS[4] = {B, H, dk, dv}, sA[4] = {B, H, dk, dk};
    expect_shape(&L.q, "q", 4, sqk);
    expect_shape(&L.k, "k", 4, sqk);
    expect_shape(&L.v, "v", 4, svo);
    if ((L.has_u = file_exists(c->dir, "u.npy"))) load_f32(c->dir, "u.npy", &L.u), expect_shape(&L.u, "u", 4, sqk);
    if ((L.has_beta = file_exists(c->dir, "beta.npy")))
        load_f32(c->dir, "beta.npy", &L.beta), expect_shape(&L.beta, "beta", 3, sbt);
    if ((L.has_g = file_exists(c->dir, "g.npy"))) load_f32(c->dir, "g.npy", &L.g), expect_shape(&L.g, "g", 3, sbt);
    ck_assert_msg(load_f64(c->dir, "o.npy", &L.o, err, sizeof err) == 0, "%s", err);
    expect_shape(&L.o, "o", 4, svo);
    if ((L.has_S = file_exists(c->dir, "S_final.npy"))) {
        ck_assert_msg(load_f64(c->dir, "S_final.npy", &L.S, err, sizeof err) == 0, "%s", err);
        expect_shape(&L.S, "S_final", 4, sS);
    }
    if ((L.has_A = file_exists(c->dir, "A_final.npy"))) {
        ck_assert_msg(load_f64(c->dir, "A_final.npy", &L.A, err, sizeof err) == 0, "%s", err);
        expect_shape(&L.A, "A_final", 4, sA);
    }
    int n_listed = file_exists(c->dir, "n_final.npy");
    if (n_listed) {
        /* A broken n_final.npy is a fault of the data, not of the library: say so loudly and
         * check n against ref64 instead (which this case validates against o, S and A). */
        if (load_f64(c->dir, "n_final.npy", &L.n, L.n_problem, sizeof L.n_problem) != 0) {
            fprintf(stderr, "[golden] WARNING %s: n_final.npy is unusable (%s); n_final is checked against ref64\n",
                    c->dir, L.n_problem);
        } else if (L.n.ndim != 3 || L.n.shape[0] != B || L.n.shape[1] != H || L.n.shape[2] != dk) {
            snprintf(L.n_problem, sizeof L.n_problem, "shape is not [B, H, dk]");
            fprintf(stderr, "[golden] WARNING %s: n_final.npy has the wrong shape; checked against ref64\n", c->dir);
            npy_free(&L.n);
        } else {
            L.has_n = 1;
        }
    }

    vla_attn_desc d;
    vla_mechanism mech;
    ck_assert_int_eq(vla_mechanism_from_name(c->mech, &mech), VLA_OK);
    ck_assert_int_eq(vla_attn_desc_init(&d, mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    if (c->R) d.refresh = c->R, d.refresh_size = c->rho;
    /* The files present must match what the mechanism keeps. */
    ck_assert_msg(L.has_S == tu_has_S(&d), "%s: S_final.npy presence", c->dir);
    ck_assert_msg(L.has_A == tu_has_A(&d), "%s: A_final.npy presence", c->dir);
    ck_assert_msg(n_listed == tu_has_n(&d), "%s: n_final.npy presence", c->dir);

    tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = 0, .q = L.q.f32, .k = L.k.f32, .v = L.v.f32,
                    .u = L.has_u ? L.u.f32 : NULL, .beta = L.has_beta ? L.beta.f32 : NULL,
                    .g = L.has_g ? L.g.f32 : NULL};
    size_t nvo = tu_nvo(&p), nS = tu_nS(&p), nA = tu_nA(&p), nn = tu_nn(&p);

    /* ref64 against the golden data: the two references must agree to rounding. */
    double *ro = malloc(nvo * sizeof *ro), *rS = malloc(nS * sizeof *rS), *rA = malloc(nA * sizeof *rA);
    double *rn = malloc(nn * sizeof *rn);
    ck_assert_int_eq(ref64_forward(&d, B, T, H, dk, dv, 0, p.q, p.k, p.v, p.u, p.beta, p.g, NULL, NULL, NULL, ro, rS,
                                   rA, rn),
                     0);
    double eo = tu_relerr_dd(ro, L.o.f64, nvo);
    double eS = L.has_S ? tu_relerr_dd(rS, L.S.f64, nS) : 0, eA = L.has_A ? tu_relerr_dd(rA, L.A.f64, nA) : 0;
    double en = L.has_n ? tu_relerr_dd(rn, L.n.f64, nn) : 0;
    fprintf(stderr, "[golden] %s: ref64 vs golden: o %.1e S %.1e A %.1e n %.1e\n", c->dir, eo, eS, eA, en);
    ck_assert_msg(eo < 1e-10 && eS < 1e-10 && eA < 1e-10 && en < 1e-10,
                  "%s: ref64 disagrees with the golden data (o %.2e S %.2e A %.2e n %.2e)", c->dir, eo, eS, eA, en);

    /* The library, every algorithm, default chunk (64) and 16. */
    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(mech, algos);
    static const int chunks[] = {64, 16};
    char why[4096] = "";
    int failures = 0;
    for (int ci = 0; ci < 2; ci++) {
        d.chunk = chunks[ci];
        for (int ai = 0; ai < na; ai++) {
            d.algorithm = algos[ai];
            if (ci == 1 && (algos[ai] == VLA_ALGO_SEQUENTIAL || algos[ai] == VLA_ALGO_SCAN ||
                            algos[ai] == VLA_ALGO_FUSED))
                continue; /* the chunk size does not apply */
            tu_result r;
            tu_run(be, &d, &p, 0, &r);
            char label[128];
            snprintf(label, sizeof label, "%s C%d%s%s", vla_algorithm_name(algos[ai]), d.chunk,
                     algos[ai] == VLA_ALGO_AUTO ? "->" : "",
                     algos[ai] == VLA_ALGO_AUTO ? vla_algorithm_name(r.resolved) : "");
            int ok = 1;
            double wo = INFINITY, wS = 0, wA = 0, wn = 0;
            if (r.status != VLA_OK) {
                ok = 0;
                fprintf(stderr, "  %-40s status %s: %s  FAIL\n", label, vla_status_string(r.status),
                        vla_backend_message(be));
            } else {
                wo = tu_relerr(r.o, L.o.f64, nvo);
                if (r.S) wS = tu_relerr(r.S, L.S.f64, nS);
                if (r.A) wA = tu_relerr(r.A, L.A.f64, nA);
                if (r.n) wn = L.has_n ? tu_relerr(r.n, L.n.f64, nn) : tu_relerr(r.n, rn, nn);
                ok = wo < 1e-5 && wS < 1e-5 && wA < 1e-5 && wn < 1e-5 && !r.o_unwritten && !r.S_unwritten &&
                     !r.A_unwritten && !r.n_unwritten && (tu_has_S(&d) == (r.S != NULL)) &&
                     (tu_has_A(&d) == (r.A != NULL)) && (tu_has_n(&d) == (r.n != NULL));
                fprintf(stderr, "  %-40s o %.2e", label, wo);
                if (r.S) fprintf(stderr, "  S %.2e", wS);
                if (r.A) fprintf(stderr, "  A %.2e", wA);
                if (r.n) fprintf(stderr, "  n %.2e%s", wn, L.has_n ? "" : " (vs ref64)");
                fprintf(stderr, "%s\n", ok ? "" : "  FAIL");
            }
            if (!ok) {
                failures++;
                size_t used = strlen(why);
                snprintf(why + used, sizeof why - used, "%s: o %.2e S %.2e A %.2e n %.2e (status %s); ", label, wo, wS,
                         wA, wn, vla_status_string(r.status));
            }
            tu_result_free(&r);
        }
    }
    vla_backend_close(be);
    free(ro), free(rS), free(rA), free(rn);
    npy_free(&L.q), npy_free(&L.k), npy_free(&L.v), npy_free(&L.u), npy_free(&L.beta), npy_free(&L.g);
    npy_free(&L.o), npy_free(&L.S), npy_free(&L.A), npy_free(&L.n);
    ck_assert_msg(failures == 0, "%s: %s", c->dir, why);
}
END_TEST

Suite *golden_suite(void) {
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("cases");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cases_json);
    tcase_add_loop_test(tc, test_golden_case, 0, N_GCASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1) golden_dir = argv[1];
    fprintf(stderr, "[golden] data: %s\n", golden_dir);
    SRunner *sr = srunner_create(golden_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
