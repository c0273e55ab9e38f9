/* Development benchmark (not part of the library or the tests): does CLBlast's batched SGEMM
 * beat the backend's own kernels for the products where it could be used?
 *
 *   (1) the scan's map composition, one Blelloch level: npairs x ([d, d] x [d, 2d]);
 *       own: affine_level (kernels/opencl/prep.cl, in place); CLBlast: SgemmStridedBatched out
 *       of place (the in-place update would need a further copy, not counted here).
 *   (2) the chunk products of the chunked forms, Q W^T per chunk: batch x ([C, d] x [d, C]^T);
 *       own: the loop gdr_chunk_prep uses (one work-group per chunk, one item per element);
 *       CLBlast: SgemmStridedBatched (NT).
 *   (3) the device's SGEMM rate: one CLBlast SGEMM of n x n x n (n = 256, 512, 1024), in GFLOP/s
 *       (2 n^3 / time), the reference the chunk-parallel kernels' GFLOP/s are set against.
 *
 * Build and run (from the repository root; PoCL or any OpenCL device):
 *   cc -O2 -std=c11 -DCL_TARGET_OPENCL_VERSION=120 backends/opencl/bench_clblast.c \
 *      -lclblast -lOpenCL -lm -o /tmp/bench_clblast && /tmp/bench_clblast kernels/opencl 0 0
 * A fifth argument `sgemm` runs (3) alone. Prints median milliseconds over 9 runs after 2
 * warm-ups (OpenCL profiling events; (3) by the host clock). */
#define _POSIX_C_SOURCE 200809L
#include <CL/cl.h>
#include <clblast_c.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                               \
    do {                                                                       \
        cl_int e_ = (x);                                                       \
        if (e_ != CL_SUCCESS) {                                                \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_);   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static char *slurp(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
    s[n] = '\0';
    fclose(f);
    return s;
}

static const char *chunk_kernel =
    "__kernel void qwt(__global const float *Q, __global const float *W, __global float *M, int c, int dk) {\n"
    "  const int g = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);\n"
    "  __global const float *q = Q + (size_t)g * c * dk, *w = W + (size_t)g * c * dk;\n"
    "  for (int e = lid; e < c * c; e += wg) {\n"
    "    const int t = e / c, s = e - t * c; float x = 0.0f;\n"
    "    for (int i = 0; i < dk; i++) x += q[(size_t)t * dk + i] * w[(size_t)s * dk + i];\n"
    "    M[(size_t)g * c * c + e] = x; } }\n";

static double event_ms(cl_event ev) {
    cl_ulong a = 0, b = 0;
    CHECK(clWaitForEvents(1, &ev));
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    clReleaseEvent(ev);
    return (double)(b - a) * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return x[n / 2];
}

static cl_mem rand_buf(cl_context ctx, cl_command_queue q, size_t n) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * sizeof *h, NULL, &err);
    CHECK(err);
    CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n * sizeof *h, h, 0, NULL, NULL));
    free(h);
    return m;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s KERNEL_DIR PLATFORM DEVICE [sgemm]\n", argv[0]);
        return 2;
    }
    const int only_sgemm = argc > 4 && strcmp(argv[4], "sgemm") == 0; /* (3) alone */
    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    cl_device_id devs[8];
    cl_uint nd = 0;
    CHECK(clGetDeviceIDs(plats[atoi(argv[2])], CL_DEVICE_TYPE_ALL, 8, devs, &nd));
    cl_device_id dev = devs[atoi(argv[3])];
    char name[256];
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue queue = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    const char *srcs[3] = {slurp(argv[1], "common.cl"), slurp(argv[1], "prep.cl"), chunk_kernel};
    cl_program prog = clCreateProgramWithSource(ctx, 3, srcs, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL));
    cl_kernel level = clCreateKernel(prog, "affine_level", &err);
    CHECK(err);
    cl_kernel qwt = clCreateKernel(prog, "qwt", &err);
    CHECK(err);
    printf("device: %s\n\n", name);
    printf("| product | shape | batch | own kernel ms | CLBlast ms |\n|---|---|--:|--:|--:|\n");

    const int reps = 9, warm = 2;
    double t_own[16], t_blas[16];
    /* (1) map composition, level s = 1 of a scan over n maps per head, 4 heads. */
    for (int d = 32; !only_sgemm && d <= 64; d *= 2) {
        const int n = 2048, heads = 4, W = 2 * d, npairs = n / 2;
        const size_t msz = (size_t)d * W;
        cl_mem maps = rand_buf(ctx, queue, (size_t)heads * n * msz);
        cl_mem tmp = rand_buf(ctx, queue, (size_t)heads * npairs * msz);
        int s = 1, first = 1, step = 2, dv = d;
        CHECK(clSetKernelArg(level, 0, sizeof maps, &maps));
        CHECK(clSetKernelArg(level, 1, sizeof n, &n));
        CHECK(clSetKernelArg(level, 2, sizeof d, &d));
        CHECK(clSetKernelArg(level, 3, sizeof dv, &dv));
        CHECK(clSetKernelArg(level, 4, sizeof s, &s));
        CHECK(clSetKernelArg(level, 5, sizeof first, &first));
        CHECK(clSetKernelArg(level, 6, sizeof step, &step));
        CHECK(clSetKernelArg(level, 7, sizeof npairs, &npairs));
        for (int r = 0; r < warm + reps; r++) {
            size_t wg = 64, global = (size_t)heads * npairs * wg;
            cl_event ev;
            CHECK(clEnqueueNDRangeKernel(queue, level, 1, NULL, &global, &wg, 0, NULL, &ev));
            const double ms = event_ms(ev);
            if (r >= warm) t_own[r - warm] = ms;
        }
        for (int r = 0; r < warm + reps; r++) {
            /* Per head: C_p = M_{2p+1} [M_{2p} | N_{2p}] for p < npairs; heads back to back. */
            double ms = 0;
            for (int h = 0; h < heads; h++) {
                cl_event ev;
                CLBlastStatusCode st = CLBlastSgemmStridedBatched(
                    CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, (size_t)d, (size_t)W, (size_t)d, 1.0f,
                    maps, ((size_t)h * n + 1) * msz, (size_t)W, 2 * msz, maps, (size_t)h * n * msz, (size_t)W, 2 * msz,
                    0.0f, tmp, (size_t)h * npairs * msz, (size_t)W, msz, (size_t)npairs, &queue, &ev);
                if (st != CLBlastSuccess) {
                    fprintf(stderr, "CLBlast status %d\n", (int)st);
                    return 1;
                }
                ms += event_ms(ev);
            }
            if (r >= warm) t_blas[r - warm] = ms;
        }
        printf("| scan compose [d,d]x[d,2d] | d=%d | %d | %.2f | %.2f |\n", d, heads * npairs, median(t_own, reps),
               median(t_blas, reps));
        clReleaseMemObject(maps);
        clReleaseMemObject(tmp);
    }
    /* (2) chunk products Q W^T: T = 2048 in chunks of 64, 4 heads. */
    for (int d = 32; !only_sgemm && d <= 64; d *= 2) {
        const int c = 64, batch = 4 * (2048 / 64);
        cl_mem Q = rand_buf(ctx, queue, (size_t)batch * c * d), Wm = rand_buf(ctx, queue, (size_t)batch * c * d);
        cl_mem M = rand_buf(ctx, queue, (size_t)batch * c * c);
        CHECK(clSetKernelArg(qwt, 0, sizeof Q, &Q));
        CHECK(clSetKernelArg(qwt, 1, sizeof Wm, &Wm));
        CHECK(clSetKernelArg(qwt, 2, sizeof M, &M));
        CHECK(clSetKernelArg(qwt, 3, sizeof c, &c));
        CHECK(clSetKernelArg(qwt, 4, sizeof d, &d));
        for (int r = 0; r < warm + reps; r++) {
            size_t wg = 64, global = (size_t)batch * wg;
            cl_event ev;
            CHECK(clEnqueueNDRangeKernel(queue, qwt, 1, NULL, &global, &wg, 0, NULL, &ev));
            const double ms = event_ms(ev);
            if (r >= warm) t_own[r - warm] = ms;
        }
        for (int r = 0; r < warm + reps; r++) {
            cl_event ev;
            CLBlastStatusCode st = CLBlastSgemmStridedBatched(
                CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, (size_t)c, (size_t)c, (size_t)d, 1.0f, Q,
                0, (size_t)d, (size_t)c * d, Wm, 0, (size_t)d, (size_t)c * d, 0.0f, M, 0, (size_t)c, (size_t)c * c,
                (size_t)batch, &queue, &ev);
            if (st != CLBlastSuccess) {
                fprintf(stderr, "CLBlast status %d\n", (int)st);
                return 1;
            }
            const double ms = event_ms(ev);
            if (r >= warm) t_blas[r - warm] = ms;
        }
        printf("| chunk Q W^T [C,d]x[d,C] | C=64 d=%d | %d | %.2f | %.2f |\n", d, batch, median(t_own, reps),
               median(t_blas, reps));
        clReleaseMemObject(Q), clReleaseMemObject(Wm), clReleaseMemObject(M);
    }
    /* (3) SGEMM rate, by the host clock around clFinish: CLBlast may enqueue several kernels
     * (padding, transposes) for one call, and its event covers only the last. */
    printf("\n| SGEMM n x n x n | ms | GFLOP/s |\n|--:|--:|--:|\n");
    for (int n = 256; n <= 1024; n *= 2) {
        cl_mem A = rand_buf(ctx, queue, (size_t)n * n), Bm = rand_buf(ctx, queue, (size_t)n * n);
        cl_mem Cm = rand_buf(ctx, queue, (size_t)n * n);
        for (int r = 0; r < warm + reps; r++) {
            CHECK(clFinish(queue));
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            CLBlastStatusCode st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, (size_t)n,
                                                (size_t)n, (size_t)n, 1.0f, A, 0, (size_t)n, Bm, 0, (size_t)n, 0.0f, Cm,
                                                0, (size_t)n, &queue, NULL);
            if (st != CLBlastSuccess) {
                fprintf(stderr, "CLBlast status %d\n", (int)st);
                return 1;
            }
            CHECK(clFinish(queue));
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
            if (r >= warm) t_blas[r - warm] = ms;
        }
        const double ms = median(t_blas, reps);
        printf("| %d | %.2f | %.1f |\n", n, ms, 2.0 * n * n * (double)n / (ms * 1e6));
        clReleaseMemObject(A), clReleaseMemObject(Bm), clReleaseMemObject(Cm);
    }
    return 0;
}
