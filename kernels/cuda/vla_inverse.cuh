/* Dense inversion of a symmetric positive definite N x N matrix (double) by one block of the
 * chunk-parallel kernels: A at a segment's start, A_g = M_g^{-1} (apart_kernel, vla_chunkpar_factors.cu).
 * In a header of its own so that benchmarks/gj_inverse_bench.cu times this very code against
 * other forms (a row-a-lane form with the steps unrolled was twice as fast in
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

/* ---- The blocked form: the same inverse by 2 x 2 blocks of N / 2, recursively down
 * to 16 x 16 blocks that one warp inverts in registers. gj_inverse's N steps each wait on a barrier,
 * a shared-memory round trip and a double division (about 640 cycles a step at N = 32, 20k a block,
 * git: 4ae431f); here the 16 x 16 inversions
 * step within one warp (no block barrier), and the rest is four small products per level, a
 * barrier each:
 *   X = M11^{-1} M12,  S = M22 - M12^T X,  Y = X S^{-1};
 *   M^{-1} = [M11^{-1} + Y X^T, -Y; -Y^T, S^{-1}]
 * (block Gaussian elimination without pivoting: exact for symmetric positive definite M, whose
 * Schur complement S is again positive definite). Rounding differs from gj_inverse's in the last
 * bits of the double result. ---- */

#ifdef VLA_CUDA_EMU
static inline double vla_drcp(double x) { return 1.0 / x; }
#else
__device__ __forceinline__ double vla_drcp(double x) { return __drcp_rn(x); } /* = 1.0 / x, correctly rounded, no division */
#endif

/* In place: the 16 x 16 block at B (ld) <- its inverse, by the first W warps of the block (below).
 * With W = 1 (one warp) lane l keeps row l & 15, columns
 * 8 (l >> 4) .. + 7, in registers. At step k the threads holding row k publish it
 * to buf (double[2][16], by k's parity, as gj_inverse), and after a __syncwarp every lane reads its
 * eight pivot-row entries (four 16-byte loads), the pivot, and its pivot-column entry: no barrier.
 * The column comes from the row because in-place Gauss-Jordan on a symmetric matrix keeps entries
 * (i, j) symmetric while i and j are both pivoted or both not, and antisymmetric otherwise: so
 * M[r][k] = M[k][r] for r > k and -M[k][r] for r < k. (The first form, ten double shuffles a step,
 * took 5.4-6.3k cycles a call on the H200, this one 5.1-5.5k. What is left is
 * mostly each step's chain of dependent double operations, the reciprocal's six among them.) */
/* VLA_INV16_UNROLL (development): the steps unrolled. The first call in a block pays for
 * fetching the code (3.5-7k cycles on top of 5.1k at 16, 19 KB); rolled (1) it is 3.7 KB but a step
 * took 1,050 cycles instead of 320 (the forward 15-19% slower; 2: 6-9%), its selects no longer
 * constant. 8 keeps the step's column constant in 10.5 KB: the forward 0.2-0.6%
 * faster than 16 (gated, (1,4,32) T = 2048 to 32768, two runs), the same bits. */
#ifndef VLA_INV16_UNROLL
#define VLA_INV16_UNROLL 8
#endif
/* W warps (VLA_INV16_WARPS, default 2; 1: the one-warp form above): 8 / W entries a thread (row
 * l & 15 of warp w's lane l, columns (8 / W) ((l >> 4) + 2 w) ..), and with W > 1 a barrier a step
 * (__syncthreads(), or the W warps' named barrier: VLA_INV16_BLOCKBAR below) where one warp takes a
 * __syncwarp: fewer double operations and selects a thread a step, for a barrier that costs more.
 * The same sums, so the same bits. H200, with the named barrier as the step barrier (git: 69d0502):
 * blocked_inverse at N = 32 12.7k cycles a
 * block against 13.5k with one warp (N = 64: 39.8k against 41.3k; four warps 13.8k, 40.5k; at three
 * blocks a multiprocessor no faster), the forward at (1,4,32) T = 2048 0.0506 / 0.0506 ms against
 * 0.0512 / 0.0511 gated, T = 8192 0.3% faster, the rest level. */
#ifndef VLA_INV16_WARPS
#define VLA_INV16_WARPS 2
#endif
#if defined(VLA_CUDA_EMU) && VLA_INV16_WARPS > 2 && defined(VLA_INV16_BLOCKBAR) && VLA_INV16_BLOCKBAR == 0
#error "the emulator has a named barrier for the first 64 threads only: VLA_INV16_WARPS 1 or 2"
#endif
/* VLA_INV16_BLOCKBAR (default 1): with W > 1 every thread of the block calls inv16_warps
 * and each step's barrier is __syncthreads() (the threads past the W warps only wait there). 0: the
 * named barrier of the W warps alone (bar.sync 1, 32 W). compute-sanitizer's
 * racecheck (CUDA 13.0) reported 188 hazards in that form's blocks over vla-check --mechanism vla
 * --algo chunked, every one a pair of accesses on the two sides of a __syncthreads() after the
 * inversion: the first, X = M11^{-1} M12 (dprod) written by a thread < 32 W and read by a thread
 * >= 32 W in S = M22 - M12^T X; later ones in chol_z_blocked, s_factors and the tensor-core tiles'
 * loads. With __syncthreads() as the step barrier (no other change; or one warp, W = 1) it reports
 * none, and vla-check prints the same errors to the last digit. We read them as racecheck's model of
 * the named barrier, and keep the form it can check. H200, gated (git: 9acd110, two
 * runs): (1,4,32) T = 2048 0.0507-0.0510 ms against 0.0498-0.0502
 * with the named barrier, the other target rows level. Eight warps (VLA_INV16_WARPS=8, one entry a
 * thread, __syncthreads a step) measured 0.0498 / 0.0501 there and racecheck reported none over the
 * VLA chunked cases; not the default: test_cuda and the other sanitizers have not run it. */
#ifndef VLA_INV16_BLOCKBAR
#define VLA_INV16_BLOCKBAR 1
#endif
template <int W> __device__ __forceinline__ void bar_warps() {
    if constexpr (W == 1) {
        __syncwarp();
    } else if constexpr (VLA_INV16_BLOCKBAR != 0) {
        __syncthreads();
    } else {
#ifdef VLA_CUDA_EMU
        static_assert(W == 2, "the emulator's named barrier: threads 0..63");
        emu_bar_first64();
#else
        asm volatile("bar.sync 1, %0;" ::"n"(32 * W) : "memory");
#endif
    }
}
template <int W> __device__ __noinline__ void inv16_warps(double *B, int ld, double *buf) { /* one copy however often called */
    constexpr int CW = 8 / W, kUnroll = VLA_INV16_UNROLL;
    (void)kUnroll; /* (read by the pragma below only) */
    const int t = (int)threadIdx.x, r = t & 15, c0 = CW * (((t & 31) >> 4) + 2 * (t >> 5));
    const bool on = !(VLA_INV16_BLOCKBAR && W > 1) || t < 32 * W; /* (then every thread of the block calls) */
    double m[CW];
#pragma unroll
    for (int j = 0; j < CW; j++) m[j] = on ? B[r * ld + c0 + j] : 0.0;
#pragma unroll kUnroll
    for (int k = 0; k < 16; k++) {
        double *row = buf + (k & 1) * 16;
        if (on && r == k)
#pragma unroll
            for (int j = 0; j < CW; j++) row[c0 + j] = m[j];
        bar_warps<W>();
        if (!on) continue;
        const double rp = vla_drcp(row[k]);
        const double pcol = r > k ? row[r] : -row[r]; /* M[r][k] (unused where r == k) */
        double prow[CW];
#pragma unroll
        for (int j = 0; j < CW; j++) prow[j] = row[c0 + j];
#pragma unroll
        for (int j = 0; j < CW; j++) {
            const bool jk = c0 + j == k;
            if (r == k) m[j] = jk ? rp : prow[j] * rp;
            else m[j] = jk ? -pcol * rp : fma(-pcol, prow[j] * rp, m[j]);
        }
    }
    bar_warps<W>();
    if (on)
#pragma unroll
        for (int j = 0; j < CW; j++) B[r * ld + c0 + j] = m[j];
    bar_warps<W>();
}

/* out[i][j] (H x H, ld ldo) = SIGN sum_p opA(i, p) opB(p, j) (+ out[i][j] when ACC), SIGN +1 or -1;
 * opA(i, p) = TA ? A[p * lda + i] : A[i * lda + p], opB(p, j) = TB ? B[j * ldb + p] : B[p * ldb + j].
 * H x H / NT entries a thread, two partial sums each. No barrier. */
template <int H, bool TA, bool TB, bool ACC, int SIGN>
__device__ __forceinline__ void dprod(double *out, int ldo, const double *A, int lda, const double *B, int ldb) {
    for (int e = (int)threadIdx.x; e < H * H; e += NT) {
        const int i = e / H, j = e - i * H;
        double s0 = 0.0, s1 = 0.0;
#pragma unroll
        for (int p = 0; p < H; p += 2) {
            s0 = fma(TA ? A[p * lda + i] : A[i * lda + p], TB ? B[j * ldb + p] : B[p * ldb + j], s0);
            s1 = fma(TA ? A[(p + 1) * lda + i] : A[i * lda + p + 1], TB ? B[j * ldb + p + 1] : B[(p + 1) * ldb + j], s1);
        }
        const double s = SIGN > 0 ? s0 + s1 : -(s0 + s1);
        out[i * ldo + j] = ACC ? out[i * ldo + j] + s : s;
    }
}

template <int N> __device__ void spd_inv_inplace(double *M, int ld, double *X);

/* Development: clock64() into pf[n] by thread 0 when pf is set (VLA_CUDA_KERNEL_TIMES). */
__device__ __forceinline__ void inv_stamp(long long *pf, int n) {
#ifndef VLA_CUDA_EMU
    if (pf && threadIdx.x == 0) pf[n] = clock64();
#endif
}

/* The blocked elimination of M (N x N in shared memory, ld) up to its last step: M11 <- M11^{-1},
 * M21 <- -Y^T, M22 <- S^{-1}, X (H x (H + 1)) = M11^{-1} M12; M12 is left as it was. Nested levels
 * use X + H (H + 1) as their scratch (inv16_warps' 32 doubles at the end). Ends with a barrier. */
template <int N> __device__ __forceinline__ void spd_inv_core(double *M, int ld, double *X, long long *pf = nullptr) {
    constexpr int H = N / 2, ldx = H + 1;
    double *M11 = M, *M12 = M + H, *M21 = M + H * ld, *M22 = M21 + H;
    inv_stamp(pf, 48);
    spd_inv_inplace<H>(M11, ld, X + H * ldx);
    inv_stamp(pf, 49);
    dprod<H, false, false, false, 1>(X, ldx, M11, ld, M12, ld); /* X = M11^{-1} M12 */
    __syncthreads();
    inv_stamp(pf, 50);
    dprod<H, true, false, true, -1>(M22, ld, M12, ld, X, ldx); /* S = M22 - M12^T X */
    __syncthreads();
    inv_stamp(pf, 51);
    spd_inv_inplace<H>(M22, ld, X + H * ldx);
    inv_stamp(pf, 52);
    /* M21 = -Y^T = -S^{-1} X^T (S^{-1} symmetric): M21[a][b] = -sum_p S^{-1}[a][p] X[b][p] */
    dprod<H, false, true, false, -1>(M21, ld, M22, ld, X, ldx);
    __syncthreads();
    inv_stamp(pf, 53);
}

/* Entry (i, j) of the top-left block of M^{-1} after spd_inv_core: M11^{-1} + Y X^T, i.e.
 * M11[i][j] - sum_p M21[p][i] X[j][p] (M21 = -Y^T), two partial sums. */
template <int H> __device__ __forceinline__ double inv_top_left(const double *M, int ld, const double *X, int i, int j) {
    constexpr int ldx = H + 1;
    const double *M21 = M + H * ld;
    double s0 = M[i * ld + j], s1 = 0.0;
#pragma unroll
    for (int p = 0; p < H; p += 2) {
        s0 = fma(-M21[p * ld + i], X[j * ldx + p], s0);
        s1 = fma(-M21[(p + 1) * ld + i], X[j * ldx + p + 1], s1);
    }
    return s0 + s1;
}

/* In place: M (N x N, ld) <- M^{-1}, N = 16 (one warp) or 2^k 16 (blocked). Ends with a barrier. */
template <int N> __device__ void spd_inv_inplace(double *M, int ld, double *X) {
    if constexpr (N == 16) {
        if ((VLA_INV16_BLOCKBAR && VLA_INV16_WARPS > 1) || threadIdx.x < 32 * VLA_INV16_WARPS)
            inv16_warps<VLA_INV16_WARPS>(M, ld, X); /* X: 32 doubles here */
        __syncthreads();
    } else {
        constexpr int H = N / 2;
        spd_inv_core<N>(M, ld, X);
        double *M12 = M + H, *M21 = M + H * ld;
        for (int e = (int)threadIdx.x; e < H * H; e += NT) { /* M11 <- M11^{-1} + Y X^T; M12 <- -Y = M21^T */
            const int i = e / H, j = e - i * H;
            M[i * ld + j] = inv_top_left<H>(M, ld, X, i, j); /* reads row i's M11 entry j only */
            M12[i * ld + j] = M21[j * ld + i];
        }
        __syncthreads();
    }
}

/* M^{-1} for the symmetric positive definite N x N matrix in Md (doubles, ld N + 1, in shared memory,
 * staged by the caller before a barrier): X (H (H + 1) doubles, + 16 x 17 at N = 64, + 32; H = N / 2) is
 * scratch; then out(i, j, entry) for N x N / NT entries a thread (Md and X are read until the end).
 * No barrier at the end. (The staging is the caller's so that the kernel holds one copy of this code
 * whatever M's source: two copies, with the 16 x 16 inversion inlined, made apart_kernel 2.5 times longer.) */
template <int N, typename F>
__device__ __forceinline__ void blocked_inverse(double *Md, double *X, F out, long long *pf = nullptr) {
    constexpr int H = N / 2, ld = N + 1;
    static_assert(N == 32 || N == 64, "N = 32 or 64");
    spd_inv_core<N>(Md, ld, X, pf); /* pf: development stamps 48-53 (VLA_CUDA_KERNEL_TIMES) */
    const double *M21 = Md + H * ld, *M22 = M21 + H;
    for (int e = (int)threadIdx.x; e < H * H; e += NT) out(e / H, e % H, inv_top_left<H>(Md, ld, X, e / H, e % H));
    for (int e = (int)threadIdx.x; e < H * H; e += NT) {
        const int i = e / H, j = e - i * H;
        out(i, H + j, M21[j * ld + i]);
        out(H + i, j, M21[i * ld + j]);
        out(H + i, H + j, M22[i * ld + j]);
    }
}

} // namespace cp
} // namespace vlacu

#endif
