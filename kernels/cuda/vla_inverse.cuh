/* Dense inversion of a symmetric positive definite N x N matrix (double) by one block of the
 * chunk-parallel kernels: A at a segment's start, A_g = M_g^{-1} (apart_kernel, vla_chunkpar.cu).
 * In a header of its own so that benchmarks/gj_inverse_bench.cu times this very code against
 * other forms (session 8: a row-a-lane form with the steps unrolled was twice as fast in
 * isolation and no faster in apart_kernel; see that file). */
#ifndef VLA_INVERSE_CUH
#define VLA_INVERSE_CUH

#include "vla_mma.cuh"

namespace vlacu {
namespace cp {

/* The inverse of the N x N matrix M (double; src(r0, c0, m) puts its R x R block at r0, c0 in m) by Gauss-Jordan elimination
 * without pivoting (exact for symmetric positive definite matrices: every pivot is a Schur
 * complement's diagonal, > 0). Each thread keeps an R x R block in registers (R = N / 16: rows
 * R (tid / 16) .., columns R (tid % 16) ..); at step k the owners of row k and of column k publish
 * them to buf (double[2][2N], by k's parity: the buffer a step writes was last read before the
 * previous step's barrier), one barrier, and every thread updates its block. (The shared-memory
 * form, three loads and a store of every entry a step, took 177k cycles a block at N = 64.) Then
 * out(i, j, entry) for the thread's entries; no barrier at the end. A non-positive or NaN pivot
 * gives non-finite entries, which then show in every output of the segment. */
template <int N, typename S, typename F> __device__ __forceinline__ void gj_inverse(S src, double *buf, F out) {
    constexpr int R = N / 16;
    static_assert(R * R * NT == N * N, "N x N must split over NT threads as 16 x 16 blocks");
    const int r0 = R * ((int)threadIdx.x / 16), c0 = R * ((int)threadIdx.x % 16);
    double m[R][R];
    src(r0, c0, m);
#pragma unroll 1
    for (int k = 0; k < N; k++) {
        double *row = buf + (k & 1) * 2 * N, *col = row + N;
#pragma unroll
        for (int i = 0; i < R; i++)
            if (r0 + i == k)
#pragma unroll
                for (int j = 0; j < R; j++) row[c0 + j] = m[i][j];
#pragma unroll
        for (int j = 0; j < R; j++)
            if (c0 + j == k)
#pragma unroll
                for (int i = 0; i < R; i++) col[r0 + i] = m[i][j];
        __syncthreads();
        const double rp = 1.0 / row[k];
        double akj[R], aik[R];
#pragma unroll
        for (int j = 0; j < R; j++) akj[j] = row[c0 + j];
#pragma unroll
        for (int i = 0; i < R; i++) aik[i] = col[r0 + i];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < R; j++) {
                const bool ik = r0 + i == k, jk = c0 + j == k;
                if (ik) m[i][j] = jk ? rp : akj[j] * rp;
                else m[i][j] = jk ? -aik[i] * rp : fma(-aik[i], akj[j] * rp, m[i][j]);
            }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < R; j++) out(r0 + i, c0 + j, m[i][j]);
}

} // namespace cp
} // namespace vlacu

#endif
