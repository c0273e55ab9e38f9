/* The OpenCL backend's own behaviour (its numbers are vla-check's job): device names and
 * listing, unknown devices, buffers, out-of-memory before anything is written, NaN propagation,
 * the fp64 switch, synchronisation. Skips (exit 77) when this machine has no OpenCL device.
 * Runs without fork (CK_NOFORK): an OpenCL runtime must not be initialised before a fork. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int m = 0; m < 4; m++) {
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
