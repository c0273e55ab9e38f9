/* Chunk-parallel VLA: the CUDA backend's `chunked` algorithm for R = 0 and dk <= 64 (also linear
 * attention and DeltaNet without g: the S part alone, no A part).
 *
 * VLA-MATH 2.3 carries (A, S) chunk to chunk, so one block per head walks every chunk in turn
 * and most of the device idles (the engine in vla_engine.cu still does that for R > 0, dk > 64
 * and chunks longer than 64). Here the carry is taken apart:
 *   - A: with R = 0, A at the start of chunk j is exactly (A_0^{-1} + sum_{j' < j} U_j'^T U_j')^{-1}
 *     (VLA-MATH 1 and 2.4), so every chunk's A part (the Woodbury step that yields its a_t) runs at
 *     once, after a prefix sum of Grams (double) and one inversion (blocked_inverse, double) per
 *     segment of chunks; a segment's block carries A over its chunks (A_end = A0 - Z^T Z). With u not
 *     given (u = s_u k^) a_t comes from Z's rows alone (apart_kernel's UK form, step 3's comment).
 *   - S: given a_t, the S recurrence is the generalised delta rule. Its per-chunk factors
 *     W = (I + strict(K Al^T))^{-1} K and Y = (I + strict(K Al^T))^{-1} V come out of the same
 *     block, and with them the chunk's affine map on X = S^T: X_end = P X + Q, P = I - Al^T W,
 *     Q = Al^T Y. Only X_{j+1} = P_j X_j + Q_j is walked chunk to chunk (one small product a
 *     step), and the value columns are independent, so BV columns go to each block of the walk.
 *     The outputs then use the stored chunk-start states, one block per chunk:
 *     O = Q~ X_j + tril(Q~ Al^T)(Y - W X_j).
 *
 * Kernels (one-dimensional grids):
 *   cp_gram    [BH x (nseg-1) x gparts]   U^T U over a part of segment g's chunks -> Gp (float: its
 *                                float sums as they are; every sum of them is double)
 *   cp_prefix  [BH x DK^2 R/256] Md slot g <- A_0^{-1} + the Gram parts of segments < g (= A_g^{-1});
 *                                with few parts (P.fold) cp_apart sums them itself instead
 *   cp_apart   [BH x nseg]       (VLA) A at the segment start = M_g^{-1}, carried over its chunks;
 *                                per chunk a_t -> Al, W, Y, and the map P, Q (FOLD, beside the
 *                                segmented walk: Q' = Q~ - Pm W and Pm Y instead of Al, W, Y)
 *   cp_sfac    [BH x nch]        (delta) a chunk's Al = beta k^, W, Y, P, Q
 *   cp_walk    [BH x dv/BV]      X_j -> Xst; X_{j+1} = P_j X_j + Q_j; S_out, A_out (with few heads
 *                                and many chunks: three launches over segments, see walk_kernel)
 *   cp_linmap  [BH x nch]        (linear) Q = phi(K)^T V: P = I, W = 0, Y = V, Al = phi(k)
 *   cp_sumwalk [BH x DK dv/256]  (linear) X_j -> Xst; X_{j+1} = X_j + Q_j, a thread per entry
 *   cp_output  [BH x nch]        o; on small shapes in two halves (output_split_kernel: OUT_PRE
 *                                beside the walk on a second stream, or folded into cp_apart;
 *                                OUT_FIN after the walk)
 * DK is dk padded to 32 or 64 with zeros: padded key coordinates stay 0 in every product, and
 * A's padded block is the identity, decoupled (exact). C = 64 rows per chunk block; a shorter
 * chunk has zero rows past its end (exact: a zero u leaves A alone, a zero key writes nothing).
 * Block products (vla_mma.cuh): 3xTF32 on tensor cores on sm_80+, float32 FMA on sm_75. The
 * Cholesky's panels are float32 on CUDA cores everywhere (the A part cancels: A = A0 - Z^T Z); on
 * sm_80+ the Cholesky and the Z solve are one left-looking pass by blocks of 16 rows
 * (chol_z_blocked) whose small products are 4xTF32 tiles, on sm_75 a blocked Cholesky and a
 * substitution a thread a column. The Gram prefix and the inversion are double, as the two-level
 * form's (float32 prefix sums drift over long T).
 *
 * Files, in the order a call runs them: this header (what the kernels and the launcher share: the
 * shared-memory layouts, the modes, the kernels' handles), vla_chunkpar_tiles.cuh (the kernels' device
 * helpers), vla_chunkpar_gram.cu (cp_gram, cp_prefix), vla_chunkpar_factors.cu (cp_apart, cp_sfac, cp_linmap),
 * vla_chunkpar_walk.cu (cp_walk in its forms, cp_sumwalk), vla_chunkpar_output.cu (cp_output), and
 * vla_chunkpar.cu (the host side: the plan and the launches). */
#ifndef VLA_CHUNKPAR_CUH
#define VLA_CHUNKPAR_CUH

#include "vla_kernels.cuh"
#include "vla_mma.cuh"

namespace vlacu {
namespace cp {

/* Development (a build with -DVLA_CP_TIMELINE, run with VLA_CP_TIMELINE=1): each kernel's span on
 * the GPU's global timer, in the real launch sequence (programmatic dependent launch and the second
 * stream as in production; no events between the kernels). Slot k of P.tl: [k] the first block's
 * entry, [TL_N + k] its griddepcontrol.wait returning, [2 TL_N + k] the last warp's exit (ns).
 * Compiled out otherwise (the scope is pdl_enter() alone): even two tests of P.tl moved register
 * counts (walk_kernel<32, 32, W_MAP> 81 to 85, one block a multiprocessor fewer). */
enum { TL_GRAM, TL_PREFIX, TL_APART, TL_OUTPRE, TL_WALK, TL_WMAP, TL_WSCAN, TL_WLOCAL, TL_OUT, TL_LINMAP, TL_SUMWALK, TL_N };
constexpr int TL_BLOCKS = 4096; /* apart_kernel's first blocks: each one's entry, wait done and exit, after the spans */
/* A block's record has TL_REC slots: entry, wait done, exit, its inversion done (TL_INV_DONE in
 * apart_kernel), its multiprocessor + 1, the first chunk's phases 3, 4, 9 and 11 ending (TL_PHASE
 * 0-3), and TL_PHASE 4-7: chol_z_blocked's end before V's loads
 * are issued, V waited for in s_factors, its unit-lower inverse, W and Y stored. Then TL_WBLOCKS
 * slots for the plain walk's blocks' multiprocessors + 1 (they are resident, waiting, while the A
 * part runs). */
constexpr int TL_REC = 13, TL_WBLOCKS = 1024;
/* VLA_CP_SEG_REV (development): apart_kernel's block x takes segment nseg - 1 - x % nseg,
 * to tell a segment's own cost from its block's place in the launch */
#ifdef VLA_CP_SEG_REV
#define TL_SEG(x, n) ((n) - 1 - (x))
#else
#define TL_SEG(x, n) (x)
#endif

constexpr int C = 64;   /* rows of a chunk block */
constexpr int GRAM_SUB = 4; /* chunks a gram_kernel block, at most (8 was no faster) */

/* prefix_kernel's threads an entry for nq Gram parts (vla_chunkpar_gram.cu): 1 up to 16 parts, at most 8 */
__host__ __device__ inline int prefix_runs(int nq) {
    int r = 1;
    while (r < 8 && (nq + r - 1) / r > 16) r *= 2;
    return r;
}

/* Whether apart_kernel<DK> can sum the Gram parts itself (P.fold; vla_chunkpar_factors.cu says why dk = 32 alone) */
template <int DK> __host__ __device__ constexpr bool fold_here() { return DK == 32; }

/* The kernels' dynamic shared memory, bytes (the launcher raises each kernel's limit to it; the
 * kernel files say why each layout is as it is). apart_kernel: */
template <int DK> struct apart_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    static constexpr size_t mats = (size_t)3 * C * ld + (size_t)C * ldc; /* U, K, UA(->Z), G */
    static constexpr size_t region1 = mats * 4 > 4 * DK * 8 ? mats * 4 : 4 * DK * 8; /* or the inversion's buffers */
    static constexpr size_t bytes = region1 + ((size_t)DK * ld + (size_t)C * ld + C) * 4; /* + A0, Al, rdiag */
    static constexpr size_t qbytes = (size_t)C * ld * 4; /* P.outfold: Q~ after them */
};

/* sfac_kernel: K, Al, V (Y in place), G and the unit-lower inverse's scratch */
template <int DK> struct sfac_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD;
    static constexpr size_t bytes = ((size_t)3 * C * ld + (size_t)C * ldc + (size_t)16 * (48 + LD_PAD)) * 4;
};

/* linmap_kernel */
template <int DK> struct linmap_smem {
    static constexpr int ld = DK + LD_PAD;
    static constexpr size_t bytes = (size_t)2 * C * ld * 4; /* phi(K), V's columns */
};

/* walk_kernel on BV value columns */
template <int DK, int BV> struct walk_smem {
    static constexpr int ld = DK + LD_PAD, ldv = BV + LD_PAD;
    /* two stages of [P | Q] tiles and of X */
    static constexpr size_t bytes = (size_t)2 * ((size_t)DK * ld + 2 * (size_t)DK * ldv) * 4;
};

/* output_kernel and output_split_kernel: Q~, Al, Pm, and one slot for W, then Y's columns; X's columns go to Al's place
 * once Pm is formed. At dk = 64 that is 71 KiB, three blocks a multiprocessor (X in a place of its
 * own took 88 KiB: two); at dk = 32 46 KiB, four (with the register cap MINB sets). */
template <int DK, int VT> struct output_smem {
    static constexpr int ld = DK + LD_PAD, ldc = C + LD_PAD, ldv = VT + LD_PAD;
    static constexpr size_t wy = (size_t)C * (ld > ldv ? ld : ldv); /* W [C][ld], then Y [C][ldv] */
    static_assert((size_t)DK * ldv <= (size_t)C * ld, "X must fit Al's place");
    static constexpr size_t bytes = ((size_t)2 * C * ld + (size_t)C * ldc + wy) * 4;
};

/* ---- cp_walk: the S walk over chunks on BV value columns: X_j -> Xst, X_{j+1} = P_j X_j + Q_j.
 * The only sequential part. With few heads and many chunks it is split into segments of wlen
 * chunks (VLA-MATH 2.4, on the chunks' affine maps), three launches of walk_kernel (vla_chunkpar_walk.cu):
 *   W_MAP    per (head, segment, column block): the segment's map [P_seg | Q_seg] (DK x (DK+dv)),
 *            walking from [I | 0]: column blocks < DK/BV carry the identity columns (Q = 0),
 *            the rest the value columns (from X = 0)
 *   W_SCAN   per (head, value block): X over the segments' maps from S_in; X at each segment
 *            start -> Sst; S_out, A_out
 *   W_LOCAL  per (head, value block, segment): the plain walk over the segment's chunks from its
 *            start state in Sst, X_j -> Xst
 * so a head takes 2 wlen + nch / wlen steps instead of nch. W_PLAIN is the whole walk. ---- */
enum { W_PLAIN = 0, W_MAP = 1, W_SCAN = 2, W_LOCAL = 3 };

/* walk_quad_kernel's block: value columns, threads */
constexpr int QW_COLS = 2, QW_NT = 32 * QW_COLS * 4; /* 256: 32 rows x 2 columns x 4 quarters */
#ifndef VLA_QW_AHEAD
#define VLA_QW_AHEAD 7 /* the plain walk's steps of P in flight (run(); development: other depths) */
#endif
#ifndef VLA_QW_SCAN_AHEAD
#define VLA_QW_SCAN_AHEAD 2 /* the same for the scan over segment maps (development: other depths; 3, 5
                             * and 7 were no faster at (1,4,32) T = 8192 to 131072) */
#endif

/* output_split_kernel's halves (vla_chunkpar_output.cu) */
enum { OUT_PRE = 1, OUT_FIN = 2 };

/* The kernels' handles for the launcher (vla_chunkpar.cu). Each kernel file defines its kernels
 * and these functions, instantiated there for the forms the launcher takes: in whole-program mode
 * (-rdc=false) nvcc 13 gives each instance of a __global__ template a host stub private to its
 * translation unit (-static-global-template-stub=true), so a kernel template is named, and its
 * address taken, only in the file that defines it. A form the launcher asks for and no file
 * instantiates fails to link. */
typedef void (*kfn)(const cp_params);
/* vla_chunkpar_gram.cu */
template <int DK> kfn gram_fn();   /* gram_kernel<DK> (cp_gram) */
template <int DK> kfn prefix_fn(); /* prefix_kernel<DK> (cp_prefix) */
/* vla_chunkpar_factors.cu */
template <int DK, int MINB, bool FOLD = false, bool UK = false> kfn apart_fn(); /* apart_kernel (cp_apart) */
template <int DK, int MINB> kfn sfac_fn(); /* sfac_kernel (cp_sfac) */
template <int DK> kfn linmap_fn();         /* linmap_kernel (cp_linmap) */
/* vla_chunkpar_walk.cu */
template <int DK, int BV, int MODE> kfn walk_fn(); /* walk_kernel (cp_walk) */
template <int BV, int AHEAD> kfn walk_rows_fn();   /* walk_rows_kernel */
template <int AHEAD, int MODE> kfn walk_quad_fn(); /* walk_quad_kernel */
__global__ void sumwalk_kernel(const cp_params P, int DK); /* cp_sumwalk (not a template: launched by name) */
/* vla_chunkpar_output.cu */
template <int DK, int VT, bool LIN> kfn output_fn();        /* output_kernel (cp_output) */
template <int DK, int VT, int MODE> kfn output_split_fn(); /* output_split_kernel */

} // namespace cp
} // namespace vlacu

#endif
