/* bench_cuda.h in a build without the CUDA backend: every call fails with the reason, so that
 * `vla-bench --targets` says why in one line instead of vla-bench not building. */
#include "bench_cuda.h"

#include <stddef.h>

#define NO_CUDA "needs the CUDA backend (this vla-bench was built with VLA_CUDA=OFF)"

int bench_cuda_built(void) { return 0; }
const char *bench_cuda_error(void) { return NO_CUDA; }

int bench_cuda_limits(bench_limits *out) {
    out->copy_gbs = out->sgemm_tflops = out->tf32_tflops = 0;
    return -1;
}

int bench_events_create(int n, bench_events **out) {
    (void)n;
    *out = NULL;
    return -1;
}
void bench_events_destroy(bench_events *e) { (void)e; }
int bench_events_record(bench_events *e, int i) { return (void)e, (void)i, -1; }
int bench_events_wait(bench_events *e, int i) { return (void)e, (void)i, -1; }
int bench_events_ms(bench_events *e, int i, int j, double *ms) {
    (void)e, (void)i, (void)j;
    *ms = 0;
    return -1;
}

int bench_cuda_gate(int us) { return (void)us, -1; }
int bench_cuda_synchronize(void) { return -1; }
