/* The OpenCL backend's own behaviour (its numbers are vla-check's job): device names and
 * listing, unknown devices, buffers, out-of-memory before anything is written, NaN propagation,
 * the fp64 switch, synchronisation; the paper's DeltaNet (delta-paper), forward and backward,
 * and the chunk-parallel form of the chunked algorithm, against the float64 reference (ref64). Skips (exit 77) when this machine has no
 * OpenCL device.
 * Runs without fork (CK_NOFORK): an OpenCL runtime must not be initialised before a fork. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"

static char first_name[64]; /* the first OpenCL device, "opencl:P:D" */

static int count_opencl(vla_device_info *info, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += strncmp(info[i].name, "opencl:", 7) == 0;
    return c;
}

static vla_backend *open_ocl(void) {
    vla_backend *b = NULL;
    ck_assert_msg(vla_backend_open(first_name, &b) == VLA_OK, "open %s: %s", first_name, vla_last_message());
    return b;
}

START_TEST(test_list) {
    int total = 0;
    ck_assert_int_eq(vla_list_devices(NULL, 0, &total), VLA_OK);
    vla_device_info *info = calloc((size_t)total, sizeof *info);
    int n = 0;
    ck_assert_int_eq(vla_list_devices(info, total, &n), VLA_OK);
    ck_assert_int_eq(n, total);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(info[i].name, "opencl:", 7) != 0) continue;
        unsigned p, d;
        char extra;
        ck_assert_msg(sscanf(info[i].name, "opencl:%u:%u%c", &p, &d, &extra) == 2, "name %s", info[i].name);
        ck_assert_msg(info[i].description[0] != '\0', "%s has no description", info[i].name);
        ck_assert(info[i].is_gpu == 0 || info[i].is_gpu == 1);
        seen++;
    }
    ck_assert_int_gt(seen, 0);
    free(info);
}
END_TEST

START_TEST(test_open_names) {
    vla_backend *b = NULL;
    ck_assert_int_eq(vla_backend_open("opencl", &b), VLA_OK);
    ck_assert_msg(strncmp(vla_backend_name(b), "opencl:", 7) == 0, "canonical name %s", vla_backend_name(b));
    ck_assert(vla_backend_device(b)[0] != '\0');
    ck_assert_int_eq(vla_backend_synchronize(b), VLA_OK);
    vla_backend_close(b);
    b = open_ocl();
    ck_assert_str_eq(vla_backend_name(b), first_name);
    vla_backend_close(b);
}
END_TEST

/* Unknown devices: VLA_ERR_UNKNOWN_BACKEND, and the message lists what exists. */
START_TEST(test_open_unknown) {
    const char *bad[] = {"opencl:99:0", "opencl:0:99", "opencl:0", "opencl:a:b", "opencl:0:0:0", "opencl:-1:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vla_backend *b = (vla_backend *)&b; /* must come back NULL */
        ck_assert_int_eq(vla_backend_open(bad[i], &b), VLA_ERR_UNKNOWN_BACKEND);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(vla_last_message(), first_name) != NULL, "'%s': message does not list %s: %s", bad[i],
                      first_name, vla_last_message());
    }
}
END_TEST

START_TEST(test_buffers) {
    vla_backend *b = open_ocl();
    vla_buffer *buf = NULL;
    ck_assert_int_eq(vla_buffer_alloc(b, 1000, &buf), VLA_OK);
    ck_assert_ptr_null(vla_buffer_host_ptr(buf)); /* device memory */
    unsigned char in[1000], out[1000];
    for (int i = 0; i < 1000; i++) in[i] = (unsigned char)(i * 7);
    ck_assert_int_eq(vla_buffer_upload(buf, 0, in, 1000), VLA_OK);
    ck_assert_int_eq(vla_buffer_upload(buf, 13, in, 100), VLA_OK); /* at an offset */
    ck_assert_int_eq(vla_buffer_download(buf, 0, out, 1000), VLA_OK);
    ck_assert_int_eq(memcmp(out, in, 13), 0);
    ck_assert_int_eq(memcmp(out + 13, in, 100), 0);
    ck_assert_int_eq(memcmp(out + 113, in + 113, 887), 0);
    ck_assert_int_eq(vla_buffer_download(buf, 990, out, 20), VLA_ERR_OUT_OF_RANGE);
    vla_buffer_free(buf);
    /* More than the device allocates at once: out of memory, with a message, no crash. */
    buf = (vla_buffer *)&buf;
    ck_assert_int_eq(vla_buffer_alloc(b, SIZE_MAX / 2, &buf), VLA_ERR_OUT_OF_MEMORY);
    ck_assert_ptr_null(buf);
    ck_assert(strstr(vla_backend_message(b), "bytes") != NULL);
    vla_backend_close(b);
}
END_TEST

/* A call whose workspace cannot be had fails with VLA_ERR_OUT_OF_MEMORY before it writes: the
 * scan's per-token maps at T = 8192, dk = dv = 256 need 4 GiB in one buffer (B*H*T*dk*(dk+dv)*4),
 * more than PoCL (2 GiB) and most devices allocate at once. The poisoned output stays poisoned. */
START_TEST(test_workspace_oom_writes_nothing) {
    vla_backend *b = open_ocl();
    const int T = 8192, d = 256;
    const size_t n = (size_t)T * d;
    float *x = calloc(n, sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i % 13) - 6) * 0.1f;
    vla_buffer *q = tu_buf_from(b, x, n), *k = tu_buf_from(b, x, n), *v = tu_buf_from(b, x, n);
    vla_buffer *o = tu_buf_new(b, n);
    vla_attn_desc desc;
    vla_attn_desc_init(&desc, VLA_MECH_VLA);
    desc.algorithm = VLA_ALGO_SCAN;
    vla_attn_args a = {.B = 1, .T = T, .H = 1, .dk = d, .dv = d, .q = q, .k = k, .v = v, .o = o};
    const vla_status s = vla_attention_forward(b, &desc, &a);
    if (s == VLA_OK) { /* a device with a very large single allocation: nothing to test here */
        fprintf(stderr, "test_opencl: the device allocated 4 GiB at once; OOM path not exercised\n");
    } else {
        ck_assert_int_eq(s, VLA_ERR_OUT_OF_MEMORY);
        ck_assert_msg(strstr(vla_backend_message(b), "workspace") != NULL, "%s", vla_backend_message(b));
        float *h = tu_buf_download_new(o, n);
        ck_assert_uint_eq(tu_count_poison(h, n), n);
        free(h);
    }
    vla_buffer_free(q), vla_buffer_free(k), vla_buffer_free(v), vla_buffer_free(o);
    free(x);
    vla_backend_close(b);
}
END_TEST

/* Non-finite inputs propagate (as on the CPU backend): never finite garbage. */
START_TEST(test_nan_propagates) {
    vla_backend *b = open_ocl();
    const int T = 5, d = 4;
    const size_t n = (size_t)T * d;
    float x[20];
    for (size_t i = 0; i < n; i++) x[i] = 0.25f * (float)(i % 7) - 0.6f;
    x[2 * d + 1] = NAN; /* token 2 */
    vla_buffer *q = tu_buf_from(b, x, n), *k = tu_buf_from(b, x, n), *v = tu_buf_from(b, x, n);
    for (int m = 0; m <= (int)VLA_MECH_DELTA_PAPER; m++) {
        vla_attn_desc desc;
        vla_attn_desc_init(&desc, (vla_mechanism)m);
        vla_buffer *o = tu_buf_new(b, n);
        vla_attn_args a = {.B = 1, .T = T, .H = 1, .dk = d, .dv = d, .q = q, .k = k, .v = v, .o = o};
        ck_assert_int_eq(vla_attention_forward(b, &desc, &a), VLA_OK);
        float *h = tu_buf_download_new(o, n);
        ck_assert_uint_eq(tu_count_poison(h, n), 0);
        for (int i = 0; i < 2 * d; i++) ck_assert_msg(isfinite(h[i]), "%s: token %d", vla_mechanism_name(desc.mechanism), i / d);
        ck_assert_msg(!isfinite(h[2 * d]) || !isfinite(h[2 * d + 1]), "%s: NaN at token 2 did not propagate",
                      vla_mechanism_name(desc.mechanism));
        free(h);
        vla_buffer_free(o);
    }
    vla_buffer_free(q), vla_buffer_free(k), vla_buffer_free(v);
    vla_backend_close(b);
}
END_TEST

/* vla_backend_timer_* through OpenCL markers: a positive interval, from the device's profiling
 * clock where the driver times markers (PoCL does) or else the host clock; never an error. */
START_TEST(test_timer) {
    vla_backend *b = open_ocl();
    const int T = 64, d = 8;
    const size_t n = (size_t)T * d;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = 0.25f * (float)(i % 7) - 0.6f;
    vla_buffer *q = tu_buf_from(b, x, n), *o = tu_buf_new(b, n);
    vla_attn_desc desc;
    vla_attn_desc_init(&desc, VLA_MECH_VLA);
    vla_attn_args a = {.B = 1, .T = T, .H = 1, .dk = d, .dv = d, .q = q, .k = q, .v = q, .o = o};
    double ms = -1.0;
    int dev = -1;
    ck_assert_int_eq(vla_backend_timer_start(b), VLA_OK);
    ck_assert_int_eq(vla_attention_forward(b, &desc, &a), VLA_OK);
    ck_assert_msg(vla_backend_timer_stop(b, &ms, &dev) == VLA_OK, "%s", vla_backend_message(b));
    ck_assert(ms > 0.0 && ms < 60e3);
    ck_assert(dev == 0 || dev == 1);
    fprintf(stderr, "opencl timer: %.4f ms by the %s clock\n", ms, dev ? "device" : "host");
    free(x);
    vla_buffer_free(q), vla_buffer_free(o);
    vla_backend_close(b);
}
END_TEST

/* VLA_OPENCL_NO_FP64=1 is visible in the device description (vla-check widens the sequential
 * and scan tolerances on such devices). */
START_TEST(test_fp64_switch) {
    vla_backend *b = open_ocl();
    const int has64 = strstr(vla_backend_device(b), "fp64") && !strstr(vla_backend_device(b), "no fp64");
    vla_backend_close(b);
    setenv("VLA_OPENCL_NO_FP64", "1", 1);
    b = open_ocl();
    if (has64) ck_assert_msg(strstr(vla_backend_device(b), "fp64 off") != NULL, "%s", vla_backend_device(b));
    vla_backend_close(b);
    unsetenv("VLA_OPENCL_NO_FP64");
}
END_TEST

/* ---- the paper's DeltaNet (delta-paper), forward and backward, against ref64 ----
 * Metric: ||x - ref|| / ||ref|| per tensor (2-norm over all elements), ref = ref64's float64
 * loop on the same float32 inputs. Tolerances: 2e-5 for o and S_T (float32 sequential, VLA-MATH
 * 3's "well under 1e-5" with room for T ~ 100), 1e-4 for every gradient (VLA-MATH 5's target for
 * float32 gradients, the CPU backward's tolerance). Every output is poisoned first and must be
 * written everywhere. Inputs: q, k, v, dO ~ N(0, 1), g uniform in (0.3, 1), S_0 and dS_end
 * ~ N(0, 0.3^2), drawn afresh for each case from VLA_TEST_SEED (default 1000). */
#define DP_FWD_TOL 2e-5
#define DP_GRAD_TOL 1e-4

typedef struct dp_case {
    const char *name;
    int B, T, H, dk, dv;
    int has_g, states, upstream; /* g given; S_in given (and S_out); dS_end given */
    int chunk;                   /* the backward's checkpoint interval */
    vla_feature_map fmap;
    double eps; /* normalize's floor; 0: the default. Large where the floor must bind for some tokens */
} dp_case;

static const dp_case dp_cases[] = {
    {"g-states-upstream", 2, 37, 3, 16, 24, 1, 1, 1, 8, VLA_FMAP_ELU1, 0}, /* dk != dv, ragged last chunk */
    {"no-g-no-states", 1, 40, 2, 24, 16, 0, 0, 0, 64, VLA_FMAP_ELU1, 0},
    {"training-shape", 2, 73, 4, 32, 32, 1, 0, 0, 64, VLA_FMAP_ELU1, 0}, /* B = 64 in training */
    /* dk = 1: k^ = sign(k) and dk = 0 where ||k|| > eps; eps = 0.5 makes the floor bind at
     * about 38% of the tokens, so dk is not all rounding noise around 0. */
    {"dk1", 2, 19, 2, 1, 8, 1, 1, 1, 5, VLA_FMAP_ELU1, 0.5},
    {"d48", 1, 20, 2, 48, 48, 1, 1, 1, 8, VLA_FMAP_ELU1, 0}, /* the largest adjoint in local memory */
    {"dk256", 1, 9, 2, 256, 64, 1, 1, 1, 4, VLA_FMAP_ELU1, 0}, /* adjoint in global memory */
    {"dk256-dv256", 1, 5, 1, 256, 256, 1, 1, 1, 2, VLA_FMAP_ELU1, 0},
    {"dv256", 1, 7, 1, 8, 256, 0, 1, 1, 3, VLA_FMAP_ELU1, 0},
    {"T1", 2, 1, 3, 8, 12, 1, 1, 1, 64, VLA_FMAP_ELU1, 0},
    {"fmap-none", 1, 21, 2, 12, 12, 1, 1, 1, 4, VLA_FMAP_NONE, 0},
    {"chunk1-floor", 1, 6, 1, 4, 5, 1, 1, 1, 1, VLA_FMAP_ELU1, 1.5}, /* ||k|| ~ 2: the floor binds at some */
};

static uint64_t test_seed(void) {
    const char *s = getenv("VLA_TEST_SEED");
    return s && s[0] ? strtoull(s, NULL, 10) : 1000;
}

/* Relative error of n floats (downloaded from buf, every one written) against ref; failures
 * are appended to why. */
static double dp_check(const vla_buffer *buf, const double *ref, size_t n, double tol, const char *what,
                       const char *label, char *why, size_t whylen) {
    float *x = tu_buf_download_new(buf, n);
    const size_t unwritten = tu_count_poison(x, n);
    const double err = unwritten ? INFINITY : tu_relerr(x, ref, n);
    fprintf(stderr, "  delta-paper %-18s %-5s relerr %.2e (tol %.0e)%s\n", label, what, err, tol,
            unwritten ? " UNWRITTEN" : "");
    if (!(err < tol)) {
        const size_t len = strlen(why);
        snprintf(why + len, whylen - len, " %s %s: %.2e (%zu unwritten);", label, what, err, unwritten);
    }
    free(x);
    return err;
}

START_TEST(test_delta_paper) {
    const dp_case *c = &dp_cases[_i];
    vla_backend *b = open_ocl();
    tu_rng r;
    tu_seed(&r, test_seed() + 7919u * (uint64_t)_i);
    const int B = c->B, T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    const size_t nqk = (size_t)B * T * H * dk, nvo = (size_t)B * T * H * dv, nS = (size_t)B * H * dk * dv;
    float *q = tu_randn_new(&r, nqk), *k = tu_randn_new(&r, nqk), *v = tu_randn_new(&r, nvo);
    float *dO = tu_randn_new(&r, nvo), *g = NULL, *S0 = NULL, *dSe = NULL;
    if (c->has_g) {
        g = malloc(nvo * sizeof *g);
        tu_randu(&r, g, nvo, 0.3f, 1.0f);
    }
    if (c->states) S0 = tu_rand_S0(&r, B, H, dk, dv);
    if (c->upstream) dSe = tu_rand_S0(&r, B, H, dk, dv);
    vla_attn_desc desc;
    ck_assert_int_eq(vla_attn_desc_init(&desc, VLA_MECH_DELTA_PAPER), VLA_OK);
    desc.feature_map = c->fmap;
    desc.chunk = c->chunk;
    if (c->eps > 0) desc.eps = c->eps;

    /* float64 reference: forward and backward. */
    double *o_ref = malloc(nvo * sizeof *o_ref), *S_ref = malloc(nS * sizeof *S_ref);
    double *dq_ref = malloc(nqk * sizeof(double)), *dk_ref = malloc(nqk * sizeof(double));
    double *dv_ref = malloc(nvo * sizeof(double)), *dg_ref = malloc(nvo * sizeof(double));
    double *dS0_ref = malloc(nS * sizeof(double));
    double *dO64 = tu_to_double(dO, nvo), *dSe64 = dSe ? tu_to_double(dSe, nS) : NULL;
    ck_assert_int_eq(ref64_forward(&desc, B, T, H, dk, dv, 0, q, k, v, NULL, NULL, g, S0, NULL, NULL, o_ref, S_ref,
                                   NULL, NULL),
                     0);
    ref64_grads rg = {.dO = dO64, .dS_end = dSe64, .dq = dq_ref, .dk = dk_ref, .dv = dv_ref, .dg = g ? dg_ref : NULL,
                      .dS_0 = dS0_ref};
    ck_assert_int_eq(ref64_backward(&desc, B, T, H, dk, dv, 0, q, k, v, NULL, NULL, g, S0, NULL, NULL, &rg), 0);

    /* The forward. */
    vla_buffer *bq = tu_buf_from(b, q, nqk), *bk = tu_buf_from(b, k, nqk), *bv = tu_buf_from(b, v, nvo);
    vla_buffer *bg = g ? tu_buf_from(b, g, nvo) : NULL, *bS0 = S0 ? tu_buf_from(b, S0, nS) : NULL;
    vla_buffer *bo = tu_buf_new(b, nvo), *bS = tu_buf_new(b, nS);
    vla_attn_args a = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .q = bq, .k = bk, .v = bv, .g = bg, .o = bo,
                       .S_in = bS0, .S_out = bS};
    ck_assert_msg(vla_attention_forward(b, &desc, &a) == VLA_OK, "%s: %s", c->name, vla_backend_message(b));
    char why[1024] = "";
    dp_check(bo, o_ref, nvo, DP_FWD_TOL, "o", c->name, why, sizeof why);
    dp_check(bS, S_ref, nS, DP_FWD_TOL, "S_T", c->name, why, sizeof why);
    if (S0) { /* in place (S_in == S_out): the same bits as out of place */
        float *S_out = tu_buf_download_new(bS, nS), *o_first = tu_buf_download_new(bo, nvo);
        vla_buffer *bSi = tu_buf_from(b, S0, nS);
        vla_attn_args ai = a;
        ai.S_in = bSi, ai.S_out = bSi;
        tu_buf_poison(bo);
        ck_assert_int_eq(vla_attention_forward(b, &desc, &ai), VLA_OK);
        float *S_in_place = tu_buf_download_new(bSi, nS), *o_in_place = tu_buf_download_new(bo, nvo);
        ck_assert_msg(memcmp(S_out, S_in_place, nS * sizeof(float)) == 0, "%s: in-place S differs", c->name);
        ck_assert_msg(memcmp(o_first, o_in_place, nvo * sizeof(float)) == 0, "%s: in-place o differs", c->name);
        free(S_out), free(o_first), free(S_in_place), free(o_in_place);
        vla_buffer_free(bSi);
    }

    /* The backward, every output. */
    vla_buffer *bdO = tu_buf_from(b, dO, nvo), *bdSe = dSe ? tu_buf_from(b, dSe, nS) : NULL;
    vla_buffer *bdq = tu_buf_new(b, nqk), *bdk = tu_buf_new(b, nqk), *bdv = tu_buf_new(b, nvo);
    vla_buffer *bdg = g ? tu_buf_new(b, nvo) : NULL, *bdS0 = tu_buf_new(b, nS);
    vla_attn_grads gr = {.dO = bdO, .dS_end = bdSe, .dq = bdq, .dk = bdk, .dv = bdv, .dg = bdg, .dS_0 = bdS0};
    ck_assert_msg(vla_attention_backward(b, &desc, &a, &gr) == VLA_OK, "%s: %s", c->name, vla_backend_message(b));
    dp_check(bdq, dq_ref, nqk, DP_GRAD_TOL, "dq", c->name, why, sizeof why);
    dp_check(bdk, dk_ref, nqk, DP_GRAD_TOL, "dk", c->name, why, sizeof why);
    dp_check(bdv, dv_ref, nvo, DP_GRAD_TOL, "dv", c->name, why, sizeof why);
    if (g) dp_check(bdg, dg_ref, nvo, DP_GRAD_TOL, "dg", c->name, why, sizeof why);
    dp_check(bdS0, dS0_ref, nS, DP_GRAD_TOL, "dS_0", c->name, why, sizeof why);
    ck_assert_msg(why[0] == '\0', "delta-paper:%s", why);

    /* Partial requests give the same bits, and a buffer not passed stays poisoned. */
    float *dk_all = tu_buf_download_new(bdk, nqk), *dS0_all = tu_buf_download_new(bdS0, nS);
    float *dg_all = g ? tu_buf_download_new(bdg, nvo) : NULL;
    tu_buf_poison(bdk), tu_buf_poison(bdS0), tu_buf_poison(bdq);
    if (g) tu_buf_poison(bdg);
    vla_attn_grads part = {.dO = bdO, .dS_end = bdSe, .dk = bdk, .dg = bdg};
    ck_assert_int_eq(vla_attention_backward(b, &desc, &a, &part), VLA_OK);
    vla_attn_grads part2 = {.dO = bdO, .dS_end = bdSe, .dS_0 = bdS0};
    ck_assert_int_eq(vla_attention_backward(b, &desc, &a, &part2), VLA_OK);
    float *dk_part = tu_buf_download_new(bdk, nqk), *dS0_part = tu_buf_download_new(bdS0, nS);
    float *dq_none = tu_buf_download_new(bdq, nqk);
    ck_assert_msg(memcmp(dk_all, dk_part, nqk * sizeof(float)) == 0, "%s: dk alone differs", c->name);
    ck_assert_msg(memcmp(dS0_all, dS0_part, nS * sizeof(float)) == 0, "%s: dS_0 alone differs", c->name);
    ck_assert_uint_eq(tu_count_poison(dq_none, nqk), nqk);
    if (g) {
        float *dg_part = tu_buf_download_new(bdg, nvo);
        ck_assert_msg(memcmp(dg_all, dg_part, nvo * sizeof(float)) == 0, "%s: dg with dk differs", c->name);
        free(dg_part);
    }
    free(dk_all), free(dS0_all), free(dg_all), free(dk_part), free(dS0_part), free(dq_none);

    vla_buffer *bufs[] = {bq, bk, bv, bg, bS0, bo, bS, bdO, bdSe, bdq, bdk, bdv, bdg, bdS0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) vla_buffer_free(bufs[i]);
    free(q), free(k), free(v), free(dO), free(g), free(S0), free(dSe);
    free(o_ref), free(S_ref), free(dq_ref), free(dk_ref), free(dv_ref), free(dg_ref), free(dS0_ref);
    free(dO64), free(dSe64);
    vla_backend_close(b);
}
END_TEST

/* ---- the chunk-parallel form of the chunked algorithm (ocl_chunkpar.c) against ref64 ----
 * Each case runs in both forms of the kernels: the CPU form (one item a group, what PoCL runs)
 * and the GPU form (many items a group, barriers between phases; VLA_OPENCL_CHUNKPAR_GPU=1),
 * with the states in place. Metric: ||x - ref|| / ||ref|| over o and every final state, against
 * ref64 on the same float32 inputs. Tolerance 2e-5 (VLA-MATH 3: float32 chunked forms land well
 * under 1e-5 at lambda0 = 0.1, T <= 300), x3 for VLA on a device without fp64 (vla-check's
 * NO_FP64_FACTOR). The per-head path (VLA_OPENCL_NO_CHUNKPAR=1) must give different bits on the
 * many-chunk cases: the two sum in different orders, so equal bits would mean the switch did
 * not take the form under test. */
#define CP_TOL 2e-5

typedef struct cp_case {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv, chunk;
    int paper, normalize, has_u, has_beta, has_g, has_A0;
    int64_t t0;
} cp_case;

static const cp_case cp_cases[] = {
    {"linear", VLA_MECH_LINEAR, 2, 300, 3, 24, 20, 32, 0, 0, 0, 0, 0, 0, 0},
    {"delta-beta-g", VLA_MECH_DELTA, 2, 300, 3, 24, 20, 32, 0, 0, 0, 1, 1, 0, 0},
    {"delta-plain", VLA_MECH_DELTA, 1, 130, 2, 16, 16, 64, 0, 0, 0, 0, 0, 0, 0},
    {"vla", VLA_MECH_VLA, 2, 300, 3, 24, 20, 32, 0, 0, 0, 0, 0, 0, 0},              /* A part chunk-parallel */
    {"vla-d64-c64", VLA_MECH_VLA, 1, 200, 2, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0},
    {"vla-normalized", VLA_MECH_VLA, 1, 150, 2, 16, 12, 16, 0, 1, 0, 0, 0, 0, 0},
    {"vla-tail", VLA_MECH_VLA, 1, 37, 1, 5, 3, 16, 0, 0, 0, 0, 0, 0, 0},
    {"vla-u", VLA_MECH_VLA, 1, 120, 2, 16, 16, 32, 0, 0, 1, 0, 0, 0, 0},            /* A part per head */
    {"vla-A0", VLA_MECH_VLA, 1, 120, 2, 16, 16, 32, 0, 0, 0, 0, 0, 1, 0},
    {"vla-paper-t0", VLA_MECH_VLA, 2, 61, 2, 16, 16, 64, 1, 0, 1, 0, 0, 0, 7},        /* R = 20 cuts chunks */
};

static int cp_run_case(const cp_case *c, const tu_problem *p, const vla_attn_desc *d, int inplace, int gpu_form,
                       int off, tu_result *res) {
    if (gpu_form) setenv("VLA_OPENCL_CHUNKPAR_GPU", "1", 1);
    if (off) setenv("VLA_OPENCL_NO_CHUNKPAR", "1", 1);
    vla_backend *b = open_ocl();
    unsetenv("VLA_OPENCL_CHUNKPAR_GPU");
    const vla_status s = tu_run(b, d, p, inplace, res);
    ck_assert_msg(s == VLA_OK, "%s: %s", c->name, vla_backend_message(b));
    unsetenv("VLA_OPENCL_NO_CHUNKPAR");
    const int no64 = strstr(vla_backend_device(b), "no fp64") || strstr(vla_backend_device(b), "fp64 off");
    vla_backend_close(b);
    return no64;
}

START_TEST(test_chunkpar) {
    const cp_case *c = &cp_cases[_i];
    tu_rng r;
    tu_seed(&r, test_seed() + 104729u * (uint64_t)_i);
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    if (c->normalize) d.normalize_output = 1, d.feature_map = VLA_FMAP_ELU1;
    d.algorithm = VLA_ALGO_CHUNKED;
    d.chunk = c->chunk;
    tu_problem p = {.B = c->B, .T = c->T, .H = c->H, .dk = c->dk, .dv = c->dv, .t0 = c->t0};
    const size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p), nbt = tu_nbt(&p);
    float *q = tu_randn_new(&r, nqk), *k = tu_randn_new(&r, nqk), *v = tu_randn_new(&r, nvo);
    float *u = c->has_u ? tu_randn_new(&r, nqk) : NULL, *beta = NULL, *g = NULL;
    if (c->has_beta) beta = malloc(nbt * sizeof *beta), tu_randu(&r, beta, nbt, 0.1f, 1.0f);
    if (c->has_g) g = malloc(nbt * sizeof *g), tu_randu(&r, g, nbt, 0.5f, 1.0f);
    float *S0 = tu_rand_S0(&r, c->B, c->H, c->dk, c->dv);
    float *A0 = tu_has_A(&d) && c->has_A0 ? tu_rand_A0(&r, c->B, c->H, c->dk, d.lambda0) : NULL;
    float *n0 = tu_has_n(&d) ? tu_rand_n0(&r, c->B, c->H, c->dk) : NULL;
    p.q = q, p.k = k, p.v = v, p.u = u, p.beta = beta, p.g = g, p.S0 = S0, p.A0 = A0, p.n0 = n0;
    /* In place needs every state as an input; VLA without A0 (the chunk-parallel A part) runs
     * out of place. */
    const int inplace = !(tu_has_A(&d) && !A0);

    const size_t nS = tu_nS(&p), nA = tu_nA(&p), nn = tu_nn(&p);
    double *o_ref = malloc(nvo * sizeof(double)), *S_ref = malloc(nS * sizeof(double));
    double *A_ref = malloc(nA * sizeof(double)), *n_ref = malloc(nn * sizeof(double));
    ck_assert_int_eq(ref64_forward(&d, p.B, p.T, p.H, p.dk, p.dv, p.t0, q, k, v, u, beta, g, p.S0, A0, n0, o_ref,
                                   S_ref, tu_has_A(&d) ? A_ref : NULL, tu_has_n(&d) ? n_ref : NULL),
                     0);
    float *o_form[2] = {NULL, NULL};
    for (int form = 0; form < 2; form++) {
        tu_result res;
        const int no64 = cp_run_case(c, &p, &d, inplace, form, 0, &res);
        const double tol = CP_TOL * (no64 && c->mech == VLA_MECH_VLA ? 3 : 1);
        const double eo = res.o_unwritten ? INFINITY : tu_relerr(res.o, o_ref, nvo);
        const double eS = res.S_unwritten ? INFINITY : tu_relerr(res.S, S_ref, nS);
        const double eA = !res.A ? 0 : res.A_unwritten ? INFINITY : tu_relerr(res.A, A_ref, nA);
        const double en = !res.n ? 0 : res.n_unwritten ? INFINITY : tu_relerr(res.n, n_ref, nn);
        fprintf(stderr, "  chunkpar %-15s %s form: o %.2e S %.2e A %.2e n %.2e (tol %.0e)\n", c->name,
                form ? "GPU" : "CPU", eo, eS, eA, en, tol);
        ck_assert_msg(eo < tol && eS < tol && eA < tol && en < tol, "%s (%s form): o %.2e S %.2e A %.2e n %.2e", c->name,
                      form ? "GPU" : "CPU", eo, eS, eA, en);
        o_form[form] = res.o;
        res.o = NULL;
        tu_result_free(&res);
    }
    if (c->T >= 4 * c->chunk) {
        tu_result res;
        cp_run_case(c, &p, &d, inplace, 0, 1, &res);
        ck_assert_msg(memcmp(res.o, o_form[0], nvo * sizeof(float)) != 0,
                      "%s: the per-head path gave the same bits: is the chunk-parallel form switched off?", c->name);
        tu_result_free(&res);
    }
    free(o_form[0]), free(o_form[1]);
    free(q), free(k), free(v), free(u), free(beta), free(g), free(S0), free(A0), free(n0);
    free(o_ref), free(S_ref), free(A_ref), free(n_ref);
}
END_TEST

/* The tiled softmax kernels GPUs run (kernels/opencl/softmax.cl), forced onto the first device
 * (VLA_OPENCL_SOFTMAX_TILED=1): softmax_fused and the register-blocked softmax_rb64/rb128
 * (VLA_OPENCL_SOFTMAX_KERNEL=rb) at the sizes that pick each query tile (QB = 64 at d <= ~40, 32
 * at d = 64, 16 at d = 128), T not a multiple of the tiles, dk != dv, and a dk beyond rb's reach
 * (its fallback to softmax_fused). Against ref64, 1e-5 norm-wise (VLA-MATH 3's float32 bound). */
typedef struct sm_case {
    const char *name;
    int B, T, H, dk, dv;
} sm_case;
static const sm_case sm_cases[] = {
    {"d20x36 T65", 2, 65, 2, 20, 36}, {"d64 T130", 1, 130, 2, 64, 64}, {"d128 T70", 1, 70, 1, 128, 128},
    {"d96x40 T1", 1, 1, 1, 96, 40},   {"dk140 fallback", 1, 33, 1, 140, 64},
};
#define N_SM ((int)(sizeof sm_cases / sizeof sm_cases[0]))

START_TEST(test_softmax_tiles) {
    const sm_case *c = &sm_cases[_i / 2];
    const char *kern = _i % 2 ? "rb" : "fused";
    tu_rng r;
    tu_seed(&r, test_seed() + 7919u * (uint64_t)_i);
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, VLA_MECH_SOFTMAX), VLA_OK);
    tu_problem p = {.B = c->B, .T = c->T, .H = c->H, .dk = c->dk, .dv = c->dv};
    const size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p);
    float *q = tu_randn_new(&r, nqk), *k = tu_randn_new(&r, nqk), *v = tu_randn_new(&r, nvo);
    p.q = q, p.k = k, p.v = v;
    double *o_ref = malloc(nvo * sizeof(double));
    ck_assert_int_eq(ref64_forward(&d, p.B, p.T, p.H, p.dk, p.dv, 0, q, k, v, NULL, NULL, NULL, NULL, NULL, NULL,
                                   o_ref, NULL, NULL, NULL),
                     0);
    setenv("VLA_OPENCL_SOFTMAX_TILED", "1", 1);
    setenv("VLA_OPENCL_SOFTMAX_KERNEL", kern, 1);
    vla_backend *b = open_ocl();
    tu_result res;
    const vla_status s = tu_run(b, &d, &p, 0, &res);
    unsetenv("VLA_OPENCL_SOFTMAX_TILED");
    unsetenv("VLA_OPENCL_SOFTMAX_KERNEL");
    ck_assert_msg(s == VLA_OK, "%s (%s): %s", c->name, kern, vla_backend_message(b));
    const double eo = res.o_unwritten ? INFINITY : tu_relerr(res.o, o_ref, nvo);
    fprintf(stderr, "  softmax tiles %-15s %-5s o %.2e (tol 1e-05)\n", c->name, kern, eo);
    ck_assert_msg(eo < 1e-5, "%s (%s): o %.2e", c->name, kern, eo);
    tu_result_free(&res);
    vla_backend_close(b);
    free(q), free(k), free(v), free(o_ref);
}
END_TEST

static Suite *opencl_suite(void) {
    Suite *s = suite_create("opencl");
    TCase *tc = tcase_create("backend");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_open_names);
    tcase_add_test(tc, test_open_unknown);
    tcase_add_test(tc, test_buffers);
    tcase_add_test(tc, test_workspace_oom_writes_nothing);
    tcase_add_test(tc, test_nan_propagates);
    tcase_add_test(tc, test_fp64_switch);
    tcase_add_test(tc, test_timer);
    suite_add_tcase(s, tc);
    TCase *dp = tcase_create("delta_paper");
    tcase_set_timeout(dp, 120);
    tcase_add_loop_test(dp, test_delta_paper, 0, (int)(sizeof dp_cases / sizeof dp_cases[0]));
    suite_add_tcase(s, dp);
    TCase *cpt = tcase_create("chunkpar");
    tcase_set_timeout(cpt, 120);
    tcase_add_loop_test(cpt, test_chunkpar, 0, (int)(sizeof cp_cases / sizeof cp_cases[0]));
    suite_add_tcase(s, cpt);
    TCase *smt = tcase_create("softmax_tiles");
    tcase_set_timeout(smt, 120);
    tcase_add_loop_test(smt, test_softmax_tiles, 0, 2 * N_SM);
    suite_add_tcase(s, smt);
    return s;
}

int main(void) {
    vla_device_info info[64];
    int n = 0;
    vla_list_devices(info, 64, &n);
    if (n > 64) n = 64;
    if (count_opencl(info, n) == 0) {
        printf("test_opencl: no OpenCL device on this machine: skipped\n");
        return 77;
    }
    for (int i = 0; i < n; i++)
        if (strncmp(info[i].name, "opencl:", 7) == 0) {
            memcpy(first_name, info[i].name, sizeof first_name);
            first_name[sizeof first_name - 1] = '\0';
            break;
        }
    SRunner *sr = srunner_create(opencl_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
