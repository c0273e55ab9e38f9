/* CPU emulator of the CUDA runtime subset libvla uses (see emu_device.h, README.md).
 * Environment: VLA_EMU_SMEM  per-block shared-memory limit in bytes (default 232448 - 1024,
 *                            an H200's opt-in limit); small values force the global-memory
 *                            placement of the kernels' working arrays.
 *              VLA_EMU_SMS   multiprocessors reported (default 132).
 *              VLA_EMU_NODEV 1: report no device (the "no GPU" paths).
 *              VLA_EMU_MAXALLOC  cudaMalloc fails above this many bytes (default 2 GiB). */
#include "cuda_runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <mutex>
#include <thread>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace {

thread_local cudaError_t last_error = cudaSuccess;

size_t env_size(const char *name, size_t dflt) {
    const char *s = getenv(name);
    return s && *s ? (size_t)strtoull(s, nullptr, 10) : dflt;
}
size_t smem_limit() { return env_size("VLA_EMU_SMEM", 232448 - 1024); }
const size_t kStaticSmem = 8192; /* what cudaFuncGetAttributes reports for every kernel */

struct Warp {
    pthread_barrier_t bar;
    alignas(8) unsigned char slot[32][32]; /* a lane's value: a shuffle's, or a gathered mma fragment */
};

/* One block at a time: a pool of blockDim.x worker threads. */
struct Pool {
    int n = 0;
    std::vector<std::thread> threads;
    pthread_barrier_t start, end, block, first64; /* first64: threads 0..63 (n >= 64) */
    std::vector<Warp> warps;
    const std::function<void()> *body = nullptr;
    unsigned bx = 0, gx = 0;
    unsigned char *smem = nullptr;
    bool quit = false;

    void worker(int i) {
        threadIdx = uint3{(unsigned)i, 0, 0};
        blockDim = dim3((unsigned)n);
        for (;;) {
            pthread_barrier_wait(&start);
            if (quit) break;
            blockIdx = uint3{bx, 0, 0};
            gridDim = dim3(gx);
            (*body)();
            pthread_barrier_wait(&end);
        }
    }
    void stop() {
        if (!n) return;
        quit = true;
        pthread_barrier_wait(&start);
        for (auto &t : threads) t.join();
        threads.clear();
        pthread_barrier_destroy(&start);
        pthread_barrier_destroy(&end);
        pthread_barrier_destroy(&block);
        if (n >= 64) pthread_barrier_destroy(&first64);
        for (auto &w : warps) pthread_barrier_destroy(&w.bar);
        warps.clear();
        n = 0;
        quit = false;
    }
    void ensure(int nthreads) {
        if (n == nthreads) return;
        stop();
        n = nthreads;
        pthread_barrier_init(&start, nullptr, (unsigned)n + 1);
        pthread_barrier_init(&end, nullptr, (unsigned)n + 1);
        pthread_barrier_init(&block, nullptr, (unsigned)n);
        if (n >= 64) pthread_barrier_init(&first64, nullptr, 64);
        warps = std::vector<Warp>((size_t)n / 32);
        for (auto &w : warps) pthread_barrier_init(&w.bar, nullptr, 32);
        for (int i = 0; i < n; i++) threads.emplace_back(&Pool::worker, this, i);
    }
    ~Pool() { stop(); }
};

Pool &pool() {
    static Pool p;
    return p;
}
std::mutex launch_mutex;

} // namespace

void __syncthreads() { pthread_barrier_wait(&pool().block); }
void __syncwarp(unsigned) { pthread_barrier_wait(&pool().warps[threadIdx.x / 32].bar); }
void emu_bar_first64() {
    if (pool().n < 64 || threadIdx.x >= 64) abort(); /* (a kernel bug: no such barrier) */
    pthread_barrier_wait(&pool().first64);
}

void emu_warp_exchange(const void *in, void *out, size_t size, int src_lane) {
    Warp &w = pool().warps[threadIdx.x / 32];
    memcpy(w.slot[threadIdx.x & 31], in, size);
    pthread_barrier_wait(&w.bar);
    memcpy(out, w.slot[src_lane & 31], size);
    pthread_barrier_wait(&w.bar);
}

void emu_warp_gather(const void *in, void *all, size_t size) {
    Warp &w = pool().warps[threadIdx.x / 32];
    if (size > sizeof w.slot[0]) abort();
    memcpy(w.slot[threadIdx.x & 31], in, size);
    pthread_barrier_wait(&w.bar);
    for (int l = 0; l < 32; l++) memcpy((unsigned char *)all + (size_t)l * size, w.slot[l], size);
    pthread_barrier_wait(&w.bar);
}

unsigned char *emu_dynamic_smem() { return pool().smem; }

void emu_launch(const std::function<void()> &body, dim3 grid, dim3 block, size_t smem, cudaStream_t) {
    if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1 || block.x == 0 || block.x % 32 != 0 ||
        block.x > 1024) {
        fprintf(stderr, "emu: unsupported launch shape\n");
        abort();
    }
    if (smem + kStaticSmem > smem_limit() + 1024) {
        last_error = cudaErrorInvalidValue; /* as CUDA: too much shared memory for the launch */
        return;
    }
    std::lock_guard<std::mutex> lock(launch_mutex);
    Pool &p = pool();
    p.ensure((int)block.x);
    p.body = &body;
    p.gx = grid.x;
    for (unsigned b = 0; b < grid.x; b++) {
        const size_t sz = smem ? smem : 1;
        p.smem = (unsigned char *)malloc(sz);
        memset(p.smem, 0xff, sz);
        p.bx = b;
        pthread_barrier_wait(&p.start);
        pthread_barrier_wait(&p.end);
        free(p.smem);
        p.smem = nullptr;
    }
}

/* ---- the runtime API ---- */

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    if (getenv("VLA_EMU_NODEV") && atoi(getenv("VLA_EMU_NODEV"))) {
        *count = 0;
        return ret(cudaErrorNoDevice);
    }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    if (device != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator of a CUDA device");
    p->totalGlobalMem = (size_t)8 << 30;
    p->sharedMemPerBlock = 48 * 1024 < smem_limit() ? 48 * 1024 : smem_limit();
    p->sharedMemPerBlockOptin = smem_limit();
    p->multiProcessorCount = (int)env_size("VLA_EMU_SMS", 132);
    p->major = 9;
    p->minor = 0;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (bytes > env_size("VLA_EMU_MAXALLOC", (size_t)2 << 30)) return ret(cudaErrorMemoryAllocation);
    void *m = malloc(bytes ? bytes : 1);
    if (!m) return ret(cudaErrorMemoryAllocation);
    memset(m, 0xff, bytes); /* NaN: unwritten device memory shows */
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    void *m = malloc(bytes ? bytes : 1);
    if (!m) return ret(cudaErrorMemoryAllocation);
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind) {
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(dst, src, n, k);
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t) {
    memset(p, value, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t n) {
    memset(p, value, n);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *st) {
    *st = (cudaStream_t)malloc(16);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *st, unsigned, int) { return cudaStreamCreate(st); }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) { /* one queue: no priorities */
    *least = 0, *greatest = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st) {
    free(st);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "emulated error";
    }
}

cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && (size_t)value + kStaticSmem > smem_limit() + 1024)
        return ret(cudaErrorInvalidValue);
    return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *) {
    a->sharedSizeBytes = kStaticSmem;
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 64;
    return cudaSuccess;
}

struct CUevent_st {
    double t;
};
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st{0.0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; } /* launches run at once */
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void *arg) {
    fn(arg);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    e->t = now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

/* no graphs here (cuda_runtime_api.h) */
cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode) { return cudaErrorNotSupported; }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *graph) {
    *graph = nullptr;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t, unsigned long long) {
    *exec = nullptr;
    return cudaErrorNotSupported;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }

} // extern "C"
