/* The CUDA runtime side of `vla-bench --targets`: the device's measured limits (copy
 * bandwidth; FP32 and TF32 GEMM through cuBLAS), CUDA events, and --gate's host hold.
 * bench_cuda.c is compiled only when the CUDA backend is (it links CUDA::cudart and, where
 * the toolkit has it, CUDA::cublas); otherwise bench_cuda_stub.c answers every call with
 * "needs the CUDA backend", so vla-bench itself builds and runs without the toolkit.
 *
 * Everything runs on the legacy default stream, which is ordered with the backend's blocking
 * stream: an event recorded before and after vla_attention_forward times the call, and a host
 * function enqueued before it holds the call back. Functions returning int give 0, or -1 with
 * the reason in bench_cuda_error(). */
#ifndef VLA_BENCH_CUDA_H
#define VLA_BENCH_CUDA_H

/* 1 when this vla-bench was built with the CUDA runtime (bench_cuda.c), 0 for the stub. */
int bench_cuda_built(void);
/* Why the last call failed (one line). */
const char *bench_cuda_error(void);

typedef struct bench_limits {
    double copy_gbs;     /* device-to-device cudaMemcpy: (read + write) bytes / s / 1e9 */
    double sgemm_tflops; /* cublasSgemm, n = 8192 (0: built without cuBLAS) */
    double tf32_tflops;  /* cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32, n = 8192 (0: as above) */
} bench_limits;
/* Measures the three (medians of 10, 8 and 8 runs after 2 warm-up runs). Leaves *out zero on
 * failure. */
int bench_cuda_limits(bench_limits *out);

/* n CUDA events (with timing). */
typedef struct bench_events bench_events;
int bench_events_create(int n, bench_events **out);
void bench_events_destroy(bench_events *e); /* NULL is fine */
int bench_events_record(bench_events *e, int i);
int bench_events_wait(bench_events *e, int i);
/* Milliseconds between events i and j (both recorded and complete). */
int bench_events_ms(bench_events *e, int i, int j, double *ms);

/* Enqueues a host function that sleeps `us` microseconds: what is enqueued after it cannot
 * start before it ends (--gate). */
int bench_cuda_gate(int us);
/* cudaDeviceSynchronize. */
int bench_cuda_synchronize(void);

#endif
