/* CPU emulator, device side: every thread of a block is a host thread; __syncthreads and
 * __syncwarp are barriers; warp shuffles go through a per-warp exchange between two warp
 * barriers; __shared__ variables are statics (blocks run one after another); dynamic shared
 * memory is a fresh heap block per thread block, filled with NaN bytes (0xff) so that reads of
 * unwritten shared memory show. One-dimensional grids and blocks of a multiple of 32 threads. */
#ifndef VLA_EMU_DEVICE_H
#define VLA_EMU_DEVICE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
void emu_bar_first64(); /* bar.sync among threads 0..63 alone (a block of 64 threads or more) */
void emu_warp_exchange(const void *in, void *out, size_t size, int src_lane);
void emu_warp_gather(const void *in, void *all, size_t size); /* all[32 * size]: every lane's value, by lane */
unsigned char *emu_dynamic_smem();
void emu_launch(const std::function<void()> &body, dim3 grid, dim3 block, size_t smem, cudaStream_t st);

template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    (void)mask;
    (void)width;
    T r;
    emu_warp_exchange(&v, &r, sizeof(T), (int)(threadIdx.x & 31) ^ lane_mask);
    return r;
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    (void)mask;
    T r;
    const int lane = (int)(threadIdx.x & 31);
    emu_warp_exchange(&v, &r, sizeof(T), (lane / width) * width + src % width);
    return r;
}

#define VLACU_DYNSMEM(name) unsigned char *name = emu_dynamic_smem()
#define VLACU_LAUNCH(kern, grid, block, smem, stream, ...)                                                             \
    emu_launch([=]() { kern(__VA_ARGS__); }, dim3(grid), dim3(block), (smem), (stream))

#endif
