/* Block matrix products for the chunk-parallel kernels, on tensor cores where the device has
 * float32-class ones (sm_80+: TF32 mma.sync) and on FMA units elsewhere (sm_75).
 *
 * Precision: 3xTF32 (4xTF32 where FOUR says so, see mmb). Each float32 operand x is split into
 * big = tf32(x) (tf32: 10 stored mantissa bits, round to nearest, ties away) and small = x - big,
 * which the tensor core reads truncated to tf32 (rounded costs an instruction more, see
 * split_tf32), and a b ~ big_a big_b + big_a small_b + small_a big_b; the dropped small_a small_b
 * term is below 2^-22 of |a b|. So a product keeps about 21 of float32's 24 bits, where plain TF32
 * keeps 11 (relative error 2^-11: far outside the 1e-5 the issue asks for). The steps are summed
 * from zero in the tensor core and added to the float32 accumulator on the CUDA cores, rounded to
 * nearest (the tensor core's own additions truncate; see mmt): every 8-deep step in the A part's
 * 4xTF32 products, every four (32 deep) in the others (VLA_SPLIT_CFG).
 *
 * Layout: a block of 8 warps computes an M x N product (M, N multiples of 16 and 8; M/16 tiles
 * spread over the warps first, then N/8). Each warp owns MT x NTL tiles of 16 x 8 and holds them
 * in the mma accumulator layout (PTX ISA, mma.m16n8k8 .f32): lane (g = lane/4, t = lane%4) keeps
 * rows g and g + 8, columns 2t and 2t + 1 of a tile. blk<M, N>::row(e) / col(e) name the output
 * entry of accumulator e, so that an epilogue is written once for both forms.
 *
 * Shared-memory leading dimensions of operands: ld = 4 (mod 32). A K-contiguous fragment
 * (A[r * ld + p]: rows g, columns t) is then conflict-free (bank 4g + t) and the transpose
 * (B[p * ld + c]: bank 4t + g (+ 16)) 2-way; ld = 5 (mod 32) gives 2-way on both, and the H200 ran
 * 1-3% slower with it (git: 48278ba; 8 (mod 32), the other way round, was between the two). Even
 * ld costs the FMA form (sm_75) its conflict-free column reads (TB: B[c * ld + p] over 16
 * consecutive c, 2-way with an even ld, free with ld = 5); a T4 has not timed either. */
#ifndef VLA_MMA_CUH
#define VLA_MMA_CUH

#include <string.h>

#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || (defined(VLA_CUDA_EMU) && VLA_EMU_TC)
#define VLA_CP_TC 1
#else
#define VLA_CP_TC 0
#endif

namespace vlacu {
namespace cp {

constexpr int NT = 256; /* threads of every chunk-parallel kernel: 8 warps */
/* Leading dimension = columns + LD_PAD (columns are multiples of 32): 4, see the top of this file;
 * VLA_LD_PAD (development) sets it (5: 2-way conflicts on both fragment reads). */
#ifndef VLA_LD_PAD
#define VLA_LD_PAD 4
#endif
constexpr int LD_PAD = VLA_LD_PAD;

/* Thread tiling of an M x N block product over NT threads: TX threads along the columns, TY
 * along the rows; thread (tx, ty) owns rows ty + TY*i (i < RM) and columns tx + TX*j (j < RN).
 * A warp then reads 2 (or 1) rows of a row-major left operand (broadcast) and TX consecutive
 * columns of the right one: with odd leading dimensions no access has a bank conflict. */
template <int M, int N> struct tiling {
    static constexpr int TX = N >= 16 ? 16 : N;
    static constexpr int TY = NT / TX;
    static constexpr int RM = M / TY, RN = N / TX;
    static_assert(RM >= 1 && RM * TY == M && RN * TX == N, "M and N must tile NT threads");
    static __device__ __forceinline__ int row(int i) { return (int)threadIdx.x / TX + TY * i; }
    static __device__ __forceinline__ int col(int j) { return (int)threadIdx.x % TX + TX * j; }
};

/* acc[i][j] += sum_{p < K} op(A)(row i, p) op(B)(p, col j);
 * op(A)(r, p) = TA ? A[p*lda + r] : A[r*lda + p];  op(B)(p, c) = TB ? B[c*ldb + p] : B[p*ldb + c].
 * With fewer than 4 outputs a thread, KS interleaved partial sums keep several FMAs (and their
 * shared loads) in flight instead of one dependent chain. */
template <int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm(const float *A, int lda, const float *B, int ldb,
                                   float (&acc)[tiling<M, N>::RM][tiling<M, N>::RN]) {
    typedef tiling<M, N> tl;
    constexpr int KS = tl::RM * tl::RN >= 4 ? 1 : 4 / (tl::RM * tl::RN);
    static_assert(K % KS == 0, "K must split");
    float part[KS][tl::RM][tl::RN];
#pragma unroll
    for (int s = 0; s < KS; s++)
#pragma unroll
        for (int i = 0; i < tl::RM; i++)
#pragma unroll
            for (int j = 0; j < tl::RN; j++) part[s][i][j] = s == 0 ? acc[i][j] : 0.0f;
#pragma unroll 2
    for (int p0 = 0; p0 < K; p0 += KS) {
#pragma unroll
        for (int s = 0; s < KS; s++) {
            const int p = p0 + s;
            float x[tl::RM], y[tl::RN];
#pragma unroll
            for (int i = 0; i < tl::RM; i++) x[i] = TA ? A[p * lda + tl::row(i)] : A[tl::row(i) * lda + p];
#pragma unroll
            for (int j = 0; j < tl::RN; j++) y[j] = TB ? B[tl::col(j) * ldb + p] : B[p * ldb + tl::col(j)];
#pragma unroll
            for (int i = 0; i < tl::RM; i++)
#pragma unroll
                for (int j = 0; j < tl::RN; j++) part[s][i][j] = fmaf(x[i], y[j], part[s][i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < tl::RM; i++)
#pragma unroll
        for (int j = 0; j < tl::RN; j++) {
            float t = part[0][i][j];
#pragma unroll
            for (int s = 1; s < KS; s++) t += part[s][i][j];
            acc[i][j] = t;
        }
}


/* Whether an M x N product tiles 8 warps of 16 x 8 tensor-core tiles (see ttile). */
__host__ __device__ constexpr bool tc_fits(int M, int N) {
    return M % 16 == 0 && N % 8 == 0 && (M / 16 >= 8 ? 8 : M / 16) > 0 && 8 % (M / 16 >= 8 ? 8 : M / 16) == 0 &&
           (M / 16) % (M / 16 >= 8 ? 8 : M / 16) == 0 && (N / 8) % (8 / (M / 16 >= 8 ? 8 : M / 16)) == 0;
}

#if VLA_CP_TC

#ifdef VLA_CUDA_EMU
static inline unsigned f2u(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float u2f(unsigned u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
/* The tile product as the PTX ISA defines it: the lanes' fragments gathered (each operand's 13 low
 * bits ignored, as the hardware does), each output summed in double and rounded once (the
 * hardware's float32 accumulation differs in the last bits). */
static inline void emu_mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    struct frag {
        unsigned a[4], b[2];
    } mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    emu_warp_gather(&mine, all, sizeof mine);
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 4; q++) {
        const int r = g + (q >> 1) * 8, c = 2 * t + (q & 1);
        double s = 0.0;
        for (int k = 0; k < 8; k++)
            s += (double)u2f(all[(r & 7) * 4 + (k & 3)].a[(r >> 3) + 2 * (k >> 2)] & 0xffffe000u) *
                 (double)u2f(all[c * 4 + (k & 3)].b[k >> 2] & 0xffffe000u); /* the top 19 bits only */
        d[q] = (float)((double)d[q] + s);
    }
}
#else
__device__ __forceinline__ unsigned f2u(float x) { return __float_as_uint(x); }
__device__ __forceinline__ float u2f(unsigned u) { return __uint_as_float(u); }
#endif

/* tf32(x): round the 13 low mantissa bits off, to nearest, ties away (cvt.rna.tf32.f32 on finite
 * values; an infinity stays one). Integer form: two integer operations, so the emulator rounds
 * identically. (The cvt.rna.tf32.f32 instruction was slower on the H200: the (8,16,64) T = 2048
 * VLA forward took 1.80 ms with it against 1.59 ms, git: 77f4698.) */
__device__ __forceinline__ unsigned tf32_of(float x) { return (f2u(x) + 0x1000u) & 0xffffe000u; }
/* big = tf32(x); small = tf32(x - big) with its 13 low bits left as they fall: mma reads a .tf32
 * operand's top 19 bits only (CUTLASS's float-to-tf32 converter leaves them for that reason), so
 * adding half an ulp is the whole rounding and the mask would be one more instruction for the
 * same product. VLA_TF32_FAST3 (development, A/B): CUTLASS's 3xTF32 default instead, big = x
 * truncated, small rounded: three instructions, one bit less on the cross terms (2^-21 of |x|
 * against 2^-22). */
/* The split's cost: every fragment load splits, and at d = 64 the splits and the rounded adds were
 * half of a product's instructions (Nsight Compute) with four instructions a split and a rounded add
 * every step (VLA_SPLIT_CFG = 441). So by default
 * (VLA_SPLIT_CFG = 334, a development switch: xyz = x instructions a split in the 4xTF32
 * products, y in the 3xTF32 ones and softmax, z = the 8-deep steps a 3xTF32 product sums in the
 * tensor core between rounded adds, see mmt):
 *  - OPS = 3: small = x - big is left to the tensor core's truncation instead of rounded (its
 *    error is up to 2^-21 of |x| where rounding gave 2^-22; the fourth instruction goes);
 *  - OPS = 2 (not used): big = x as it is (the tensor core reads its top 19 bits), small =
 *    x - trunc(x), truncated in turn (up to 2^-20): 5.6x some tests' errors;
 *  - OPS = 4: the rounded form above.
 * H200, gated, against 441 (git: cfcbb6a): (1,4,32)
 * T = 2048 ... 131072 -2 to -5%, (8,16,64) T = 2048 and 32768 -8 and -9%; every test error within
 * its bound, the largest 0.40 of it (as with 441); long-sequence errors 6.7e-7 against 3.5e-7. */
#ifndef VLA_SPLIT_CFG
#define VLA_SPLIT_CFG 334
#endif
constexpr int SPLIT_OPS_A = VLA_SPLIT_CFG / 100, SPLIT_OPS_S = VLA_SPLIT_CFG / 10 % 10, MMA_KG_S = VLA_SPLIT_CFG % 10;
static_assert(SPLIT_OPS_A >= 2 && SPLIT_OPS_A <= 4 && SPLIT_OPS_S >= 2 && SPLIT_OPS_S <= 4 && MMA_KG_S >= 1 && MMA_KG_S <= 4,
              "VLA_SPLIT_CFG");

template <int OPS = 4>
__device__ __forceinline__ void split_tf32(float x, unsigned &big, unsigned &small) {
    if constexpr (OPS == 2) {
        big = f2u(x);
        small = f2u(x - u2f(f2u(x) & 0xffffe000u));
    } else if constexpr (OPS == 3) {
        big = tf32_of(x);
        small = f2u(x - u2f(big));
    } else {
#ifdef VLA_TF32_FAST3
        big = f2u(x) & 0xffffe000u;
#else
        big = tf32_of(x);
#endif
        small = f2u(x - u2f(big)) + 0x1000u;
    }
}

/* Fragment loads of one 8-deep step at k1 (PTX ISA, mma.m16n8k8 .tf32), unsplit: the left
 * operand's rows r and r + 8 (A[r * lda + p], or A[p * lda + r] when TA) into a[0..3], the right
 * operand's column c (B[p * ldb + c], or B[c * ldb + p] when TB) into b[0..1]. (Each step's k in
 * pairs, mma slot t <-> column 2t and t + 4 <-> 2t + 1, so that a K-contiguous
 * operand's two values are one 8-byte load, was 1% slower to 1% faster on VLA with LD_PAD 4 or 8
 * and up to 7% slower on DeltaNet, git: 48278ba.) */
template <bool TA>
__device__ __forceinline__ void frag_a(const float *A, int lda, int r, int k1, int t, float (&a)[4]) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int rr = r + (q & 1) * 8, p = k1 + t + (q >> 1) * 4;
        a[q] = TA ? A[p * lda + rr] : A[rr * lda + p];
    }
}
template <bool TB>
__device__ __forceinline__ void frag_b(const float *B, int ldb, int c, int k1, int t, float (&b)[2]) {
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const int p = k1 + t + q * 4;
        b[q] = TB ? B[c * ldb + p] : B[p * ldb + c];
    }
}

/* d += a b on one 16 x 8 x 8 tile (fragments as in the PTX ISA for mma.m16n8k8 .tf32). */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#ifdef VLA_CUDA_EMU
    emu_mma_tf32(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* d += a b on one 16 x 8 x 8 tile from split fragments (big ab, bb; small as, bs), all inside the
 * tensor core: the three products (four with FOUR == 1: small small too). FOUR, here and below: 0
 * the S part's 3xTF32, 1 the A part's 4xTF32, 2 the A part's 3xTF32 (its rounded adds, see mmb). */
template <int FOUR = 0>
__device__ __forceinline__ void mma_chain(float (&d)[4], const unsigned (&ab)[4], const unsigned (&as)[4],
                                          const unsigned (&bb)[2], const unsigned (&bs)[2]) {
    if (FOUR == 1) mma_tf32(d, as, bs);
    mma_tf32(d, as, bb);
    mma_tf32(d, ab, bs);
    mma_tf32(d, ab, bb);
}

/* acc[0..3] += a b on one tile: mma_chain summed from zero, then added to acc on the CUDA cores,
 * rounded to nearest (see mmt). */
template <int FOUR = 0>
__device__ __forceinline__ void mma_split(float *acc, const unsigned (&ab)[4], const unsigned (&as)[4],
                                          const unsigned (&bb)[2], const unsigned (&bs)[2]) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_chain<FOUR>(d, ab, as, bb, bs);
#pragma unroll
    for (int q = 0; q < 4; q++) acc[q] += d[q];
}

/* 8-deep steps a product sums inside the tensor core before each rounded add to its accumulator:
 * one in the A part's 4xTF32 products (whose cancellation shows every rounding), MMA_KG_S in the
 * others. */
template <int FOUR> constexpr int MMA_KG = FOUR ? 1 : MMA_KG_S;

template <int M, int N> struct ttile {
    static constexpr int WARPS = 8;
    static constexpr int TM = M / 16, TN = N / 8;
    static constexpr int WM = TM >= WARPS ? WARPS : TM, WN = WARPS / WM;
    static constexpr int MT = TM / WM, NTL = TN / WN;
    static_assert(tc_fits(M, N), "M, N must tile 8 warps of 16 x 8");
    static constexpr int NE = MT * NTL * 4;
    static __device__ __forceinline__ int mrow(int mi) { return ((int)(threadIdx.x >> 5) % WM + WM * mi) * 16; }
    static __device__ __forceinline__ int ncol(int ni) { return ((int)(threadIdx.x >> 5) / WM * NTL + ni) * 8; }
    static __device__ __forceinline__ int row(int e) {
        return mrow(e / (NTL * 4)) + (int)(threadIdx.x & 31) / 4 + ((e >> 1) & 1) * 8;
    }
    static __device__ __forceinline__ int col(int e) {
        return ncol((e >> 2) % NTL) + 2 * ((int)threadIdx.x & 3) + (e & 1);
    }
};

/* acc += op(A)[M x K] op(B)[K x N] (op as in mm: TA reads A[p*lda + r], TB reads B[c*ldb + p]).
 * FOUR: 4xTF32, the small small term too (for the A part, see mmb). */
template <int M, int N, int K, bool TA, bool TB, int FOUR = 0>
__device__ __forceinline__ void mmt(const float *A, int lda, const float *B, int ldb, float (&acc)[ttile<M, N>::NE]) {
    typedef ttile<M, N> bl;
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    /* The tensor core adds with truncation: a 64-deep chain inside it drifted 5x past the float32
     * error (A_final 2.2e-5 against 4.7e-6 at one ill-conditioned test case on the H200, a 4xTF32
     * product). So KG 8-deep steps (one in the A part, MMA_KG_S elsewhere) start from zero there
     * and are added to the accumulator here, rounded to nearest. */
    constexpr int KG = K % (8 * MMA_KG<FOUR>) == 0 ? MMA_KG<FOUR> : 1, NT = bl::MT * bl::NTL;
    const int g = (int)(threadIdx.x & 31) >> 2, t = (int)threadIdx.x & 3;
#pragma unroll(KG == 1 ? 2 : 1)
    for (int k0 = 0; k0 < K; k0 += 8 * KG) {
        float d[KG > 1 ? NT : 1][4]; /* KG > 1: the tiles' sums in the tensor core */
#pragma unroll
        for (int i = 0; i < (KG > 1 ? NT : 0); i++) d[i][0] = d[i][1] = d[i][2] = d[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KG; kk++) {
            const int k1 = k0 + 8 * kk;
            unsigned ab[bl::MT][4], as[bl::MT][4];
#pragma unroll
            for (int mi = 0; mi < bl::MT; mi++) {
                float x[4];
                frag_a<TA>(A, lda, bl::mrow(mi) + g, k1, t, x);
#pragma unroll
                for (int q = 0; q < 4; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(x[q], ab[mi][q], as[mi][q]);
            }
#pragma unroll
            for (int ni = 0; ni < bl::NTL; ni++) {
                unsigned bb[2], bs[2];
                float y[2];
                frag_b<TB>(B, ldb, bl::ncol(ni) + g, k1, t, y);
#pragma unroll
                for (int q = 0; q < 2; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(y[q], bb[q], bs[q]);
#pragma unroll
                for (int mi = 0; mi < bl::MT; mi++) {
                    if constexpr (KG == 1)
                        mma_split<FOUR>(acc + (mi * bl::NTL + ni) * 4, ab[mi], as[mi], bb, bs);
                    else
                        mma_chain<FOUR>(d[mi * bl::NTL + ni], ab[mi], as[mi], bb, bs);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < (KG > 1 ? NT : 0); i++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i * 4 + q] += d[i][q];
    }
}

/* Two products at once: acc1 += op(A1) op(B1), acc2 += op(A2) op(B2), where SAME_A (A2 is A1) or
 * SAME_B (B2 is B1) loads and splits the shared operand's fragments once. Each product's sums are
 * mmt's, in mmt's order (the same bits); the two products' tensor-core chains interleave, where a
 * tile's steps alone are a dependent chain (about 24 cycles a step against 6 when independent,
 * benchmarks/mma_chain_bench.cu). */
template <int M, int N, int K, bool TA, bool TB, int FOUR, bool SAME_A, bool SAME_B>
__device__ __forceinline__ void mmt2(const float *A1, const float *A2, int lda, const float *B1, const float *B2, int ldb,
                                     float (&acc1)[ttile<M, N>::NE], float (&acc2)[ttile<M, N>::NE]) {
    typedef ttile<M, N> bl;
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    static_assert(!(SAME_A && SAME_B), "two different products");
    constexpr int KG = K % (8 * MMA_KG<FOUR>) == 0 ? MMA_KG<FOUR> : 1, NT = bl::MT * bl::NTL;
    const int g = (int)(threadIdx.x & 31) >> 2, t = (int)threadIdx.x & 3;
#pragma unroll(KG == 1 ? 2 : 1)
    for (int k0 = 0; k0 < K; k0 += 8 * KG) {
        float d1[KG > 1 ? NT : 1][4], d2[KG > 1 ? NT : 1][4]; /* as mmt's d */
#pragma unroll
        for (int i = 0; i < (KG > 1 ? NT : 0); i++)
#pragma unroll
            for (int q = 0; q < 4; q++) d1[i][q] = d2[i][q] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KG; kk++) {
            const int k1 = k0 + 8 * kk;
            unsigned ab[2][bl::MT][4], as[2][bl::MT][4];
#pragma unroll
            for (int o = 0; o < (SAME_A ? 1 : 2); o++) {
                const float *A = o == 0 ? A1 : A2;
#pragma unroll
                for (int mi = 0; mi < bl::MT; mi++) {
                    float x[4];
                    frag_a<TA>(A, lda, bl::mrow(mi) + g, k1, t, x);
#pragma unroll
                    for (int q = 0; q < 4; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(x[q], ab[o][mi][q], as[o][mi][q]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < bl::NTL; ni++) {
                unsigned bb[2][2], bs[2][2];
#pragma unroll
                for (int o = 0; o < (SAME_B ? 1 : 2); o++) {
                    const float *B = o == 0 ? B1 : B2;
                    float y[2];
                    frag_b<TB>(B, ldb, bl::ncol(ni) + g, k1, t, y);
#pragma unroll
                    for (int q = 0; q < 2; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(y[q], bb[o][q], bs[o][q]);
                }
                constexpr int a2 = SAME_A ? 0 : 1, b2 = SAME_B ? 0 : 1;
#pragma unroll
                for (int mi = 0; mi < bl::MT; mi++) {
                    const int e = mi * bl::NTL + ni;
                    if constexpr (KG == 1) {
                        mma_split<FOUR>(acc1 + e * 4, ab[0][mi], as[0][mi], bb[0], bs[0]);
                        mma_split<FOUR>(acc2 + e * 4, ab[a2][mi], as[a2][mi], bb[b2], bs[b2]);
                    } else {
                        mma_chain<FOUR>(d1[e], ab[0][mi], as[0][mi], bb[0], bs[0]);
                        mma_chain<FOUR>(d2[e], ab[a2][mi], as[a2][mi], bb[b2], bs[b2]);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < (KG > 1 ? NT : 0); i++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc1[i * 4 + q] += d1[i][q], acc2[i * 4 + q] += d2[i][q];
    }
}

/* d += A[16 x kn] op(B)[kn x 8] for one 16 x 8 tile (A[r * lda + p]; B[p * ldb + c], or B[c * ldb + p]
 * when TB), kn a multiple of 8, accumulated as mmb does; called by a whole warp. d[q] is row
 * g + 8 (q / 2), column 2 t + q % 2. */
template <bool TB = false, int FOUR = 0>
__device__ __forceinline__ void warp_mma(const float *A, int lda, const float *B, int ldb, int kn, float (&d)[4]) {
    const int g = (int)(threadIdx.x & 31) >> 2, t = (int)threadIdx.x & 3;
#pragma unroll 2 /* two 8-deep steps in one block: their tensor-core chains overlap (kn is often not a constant) */
    for (int k0 = 0; k0 < kn; k0 += 8) {
        unsigned ab[4], as[4], bb[2], bs[2];
        float x[4], y[2];
        frag_a<false>(A, lda, g, k0, t, x);
        frag_b<TB>(B, ldb, g, k0, t, y);
#pragma unroll
        for (int q = 0; q < 4; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(x[q], ab[q], as[q]);
#pragma unroll
        for (int q = 0; q < 2; q++) split_tf32<FOUR ? SPLIT_OPS_A : SPLIT_OPS_S>(y[q], bb[q], bs[q]);
        mma_split<FOUR>(d, ab, as, bb, bs);
    }
}

#endif /* VLA_CP_TC */

/* The FMA form: mm's register tiling. */
template <int M, int N> struct ftile {
    typedef tiling<M, N> tl;
    static constexpr int NE = tl::RM * tl::RN;
    static __device__ __forceinline__ int row(int e) { return tl::row(e / tl::RN); }
    static __device__ __forceinline__ int col(int e) { return tl::col(e % tl::RN); }
};

/* blk<M, N>: the tensor-core tiling where the device has it and M x N tiles 8 warps (the walk's
 * 8- and 16-column blocks do not at dk = 32), else the FMA one; mmb is the matching product. */
template <bool TC, int M, int N> struct pick_tile { typedef ftile<M, N> type; };
#if VLA_CP_TC
template <int M, int N> struct pick_tile<true, M, N> { typedef ttile<M, N> type; };
#endif
template <int M, int N> using blk = typename pick_tile<VLA_CP_TC && tc_fits(M, N), M, N>::type;

/* FOUR (tensor-core form): 1 = 4xTF32, a b = big big + big small + small big + small small, for the
 * products of VLA's A part (and its Gram sums). There a_t = normalize(K A0 - tril(K Z^T) Z) cancels
 * (with u = s_u k^ the first token's two terms agree to 1 / (1 + s_u^2 / lambda0), 1/11 at the
 * defaults), which multiplies the products' rounding; in 3xTF32 one random input at T = 1, dk = 8
 * gave 1.18e-5 against the 1e-5 bound on the H200, 3.6e-7 with the fourth term (in the
 * emulator 8.4e-6 and 2.3e-6, and 9.2e-7 in FP32 FMA). 2 = 3xTF32 with the A part's rounded add
 * after every 8-deep step: the A part's products that do not form that difference (VLA_CP_A3 in
 * vla_chunkpar_tiles.cuh). */
template <int M, int N, int K, bool TA, bool TB, int FOUR = 0>
__device__ __forceinline__ void mmb(const float *A, int lda, const float *B, int ldb, float (&acc)[blk<M, N>::NE]) {
#if VLA_CP_TC
    if constexpr (tc_fits(M, N)) {
        mmt<M, N, K, TA, TB, FOUR>(A, lda, B, ldb, acc);
        return;
    }
#endif
    typedef tiling<M, N> tl;
    mm<M, N, K, TA, TB>(A, lda, B, ldb, *reinterpret_cast<float(*)[tl::RM][tl::RN]>(&acc[0]));
}

/* mmt2 where the device has tensor cores and M x N tiles 8 warps, else the two products one after
 * the other (the FMA form). SAME_A / SAME_B as mmt2: A2 (or B2) is then ignored. */
template <int M, int N, int K, bool TA, bool TB, bool SAME_A, bool SAME_B, int FOUR = 0>
__device__ __forceinline__ void mmb2(const float *A1, const float *A2, int lda, const float *B1, const float *B2, int ldb,
                                     float (&acc1)[blk<M, N>::NE], float (&acc2)[blk<M, N>::NE]) {
#if VLA_CP_TC
    if constexpr (tc_fits(M, N)) {
        mmt2<M, N, K, TA, TB, FOUR, SAME_A, SAME_B>(A1, A2, lda, B1, B2, ldb, acc1, acc2);
        return;
    }
#endif
    mmb<M, N, K, TA, TB, FOUR>(A1, lda, B1, ldb, acc1);
    mmb<M, N, K, TA, TB, FOUR>(SAME_A ? A1 : A2, lda, SAME_B ? B1 : B2, ldb, acc2);
}

template <int M, int N> __device__ __forceinline__ void zerob(float (&acc)[blk<M, N>::NE]) {
#pragma unroll
    for (int e = 0; e < blk<M, N>::NE; e++) acc[e] = 0.0f;
}

} // namespace cp
} // namespace vlacu

#endif
