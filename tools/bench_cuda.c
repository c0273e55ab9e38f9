/* The CUDA runtime side of `vla-bench --targets` (bench_cuda.h). Compiled only with the CUDA
 * backend; VLA_BENCH_HAVE_CUBLAS when the toolkit has cuBLAS (the GEMM limits are 0 without). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "bench_cuda.h"

#include "bench_common.h"

#include <cuda_runtime_api.h>
#ifdef VLA_BENCH_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_error[512];

int bench_cuda_built(void) { return 1; }
const char *bench_cuda_error(void) { return g_error; }

/* Records the first failing call of a sequence; returns -1 so callers can `return check(...)`. */
static int cuda_failed(cudaError_t e, const char *what) {
    snprintf(g_error, sizeof g_error, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}
#define CK(x)                                                                                                          \
    do {                                                                                                               \
        const cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                       \
            rc = cuda_failed(e_, #x);                                                                                  \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

/* ---- the device's limits ---- */

static int time_copy(size_t bytes, double *gbs) {
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double t[10];
    int rc = 0;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = -2; i < 10; i++) { /* two warm-up copies */
        float ms = 0;
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) t[i] = ms;
    }
    *gbs = 2.0 * (double)bytes / (bench_sort_median(t, 10) * 1e-3) / 1e9;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return rc;
}

#ifdef VLA_BENCH_HAVE_CUBLAS
static int time_gemm(int n, int tf32, double *tflops) {
    const size_t nn = (size_t)n * n;
    float *h = malloc(nn * sizeof *h), *A = NULL, *B = NULL, *C = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cublasHandle_t hd = NULL;
    double t[8];
    int rc = 0;
    if (!h) {
        snprintf(g_error, sizeof g_error, "out of host memory for the GEMM inputs");
        return -1;
    }
    bench_rng r;
    bench_rng_seed(&r, 42);
    bench_fill_normal(&r, h, nn);
    CK(cudaMalloc((void **)&A, nn * sizeof *A));
    CK(cudaMalloc((void **)&B, nn * sizeof *B));
    CK(cudaMalloc((void **)&C, nn * sizeof *C));
    CK(cudaMemcpy(A, h, nn * sizeof *A, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, h, nn * sizeof *B, cudaMemcpyHostToDevice));
    if (cublasCreate(&hd) != CUBLAS_STATUS_SUCCESS) {
        hd = NULL;
        snprintf(g_error, sizeof g_error, "cublasCreate failed");
        rc = -1;
        goto done;
    }
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const float one = 1.0f, zero = 0.0f;
    for (int i = -2; i < 8; i++) { /* two warm-up products */
        CK(cudaEventRecord(e0, 0));
        cublasStatus_t s;
        if (tf32)
            s = cublasGemmEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero, C,
                             CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasSgemm(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
        if (s != CUBLAS_STATUS_SUCCESS) {
            snprintf(g_error, sizeof g_error, "%s failed (cuBLAS status %d)",
                     tf32 ? "cublasGemmEx (TF32)" : "cublasSgemm", (int)s);
            rc = -1;
            goto done;
        }
        float ms = 0;
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) t[i] = ms;
    }
    *tflops = 2.0 * (double)n * n * n / (bench_sort_median(t, 8) * 1e-3) / 1e12;
done:
    if (hd) cublasDestroy(hd);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    free(h);
    return rc;
}
#endif

int bench_cuda_limits(bench_limits *out) {
    bench_limits l = {0, 0, 0};
    memset(out, 0, sizeof *out);
    if (time_copy((size_t)2 << 30, &l.copy_gbs)) return -1;
#ifdef VLA_BENCH_HAVE_CUBLAS
    if (time_gemm(8192, 0, &l.sgemm_tflops) || time_gemm(8192, 1, &l.tf32_tflops)) return -1;
#endif
    *out = l;
    return 0;
}

/* ---- events ---- */

struct bench_events {
    int n;
    cudaEvent_t ev[];
};

int bench_events_create(int n, bench_events **out) {
    *out = NULL;
    bench_events *e = calloc(1, sizeof *e + (size_t)n * sizeof(cudaEvent_t));
    if (!e) {
        snprintf(g_error, sizeof g_error, "out of host memory for %d events", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const cudaError_t s = cudaEventCreate(&e->ev[i]);
        if (s != cudaSuccess) {
            bench_events_destroy(e);
            return cuda_failed(s, "cudaEventCreate");
        }
        e->n = i + 1;
    }
    *out = e;
    return 0;
}

void bench_events_destroy(bench_events *e) {
    if (!e) return;
    for (int i = 0; i < e->n; i++) cudaEventDestroy(e->ev[i]);
    free(e);
}

int bench_events_record(bench_events *e, int i) {
    const cudaError_t s = cudaEventRecord(e->ev[i], 0);
    return s == cudaSuccess ? 0 : cuda_failed(s, "cudaEventRecord");
}

int bench_events_wait(bench_events *e, int i) {
    const cudaError_t s = cudaEventSynchronize(e->ev[i]);
    return s == cudaSuccess ? 0 : cuda_failed(s, "cudaEventSynchronize");
}

int bench_events_ms(bench_events *e, int i, int j, double *ms) {
    float f = 0;
    const cudaError_t s = cudaEventElapsedTime(&f, e->ev[i], e->ev[j]);
    *ms = f;
    return s == cudaSuccess ? 0 : cuda_failed(s, "cudaEventElapsedTime");
}

/* ---- --gate and synchronisation ---- */

static void CUDART_CB gate_fn(void *arg) {
    const int us = *(const int *)arg;
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

int bench_cuda_gate(int us) {
    /* The host function reads its argument when it runs, after this call returns. */
    static int gate_us;
    gate_us = us;
    const cudaError_t s = cudaLaunchHostFunc(0, gate_fn, &gate_us);
    return s == cudaSuccess ? 0 : cuda_failed(s, "cudaLaunchHostFunc");
}

int bench_cuda_synchronize(void) {
    const cudaError_t s = cudaDeviceSynchronize();
    return s == cudaSuccess ? 0 : cuda_failed(s, "cudaDeviceSynchronize");
}
