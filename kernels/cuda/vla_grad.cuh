/* Internal to kernels/cuda: the backward op's kernels (VLA-MATH 5), their parameter blocks and the
 * block-level helpers they share. vla_grad_launch.cu plans and sequences them:
 *
 *   softmax             vla_grad_softmax.cu: row statistics and dq by query tiles, dk and dv by key
 *                       tiles (flash-attention style; the T x T matrix is never stored); tensor-core
 *                       (3xTF32) block products where dk, dv <= 64.
 *   linear, delta, vla  vla_grad_prep.cu (prepare q~, k~, k^, u into [BH][T][dk] rows), then
 *                       vla_grad_seq.cu (one block per head: the recurrent backward with
 *                       checkpoints) or, with the chunked algorithm, vla_grad_chunk.cu (the S part
 *                       in chunk form, parallel over chunks; vla's A part token by token in
 *                       vla_grad_chunk_apart.cu), then vla_grad_prep.cu
 *                       again (the chain rule back through the feature map, normalize(k~),
 *                       normalize(u) and s_u to the raw inputs).
 *
 * The helpers here follow vla_common.cuh's conventions (called by every thread of the block with the
 * same arguments). They avoid warp shuffles in loops over rows: partial sums go through shared
 * memory, one barrier each, which is also what keeps the CPU emulator fast enough to test them. */
#ifndef VLA_GRAD_CUH
#define VLA_GRAD_CUH

#include "vla_common.cuh"

namespace vlacu {
namespace grad {

/* ---- y_v[o] = sum_p M(o, p) x_v[p] for o < nout, p < nin, v < NV (1 or 2 vectors sharing one
 * read of M), M(o, p) = TR ? M[p * ld + o] : M[o * ld + p]. Sums in AT. red: NV * blockDim.x
 * AT of shared scratch. Starts without a barrier (the caller has synced x and M) and ends with
 * one. Threads own outputs; when there are fewer outputs than threads, np = blockDim / nout
 * threads split each sum and add their parts through red. */
template <bool TR, int NV, typename AT, typename MT, typename XT, typename YT>
__device__ __noinline__ void mv(const MT *M, size_t ld, int nout, int nin, const XT *x0, const XT *x1, YT *y0,
                                YT *y1, AT *red) {
    const int tid = threadIdx.x, nt = blockDim.x;
    const int np = nt / nout;
    if (np <= 1) {
        for (int o = tid; o < nout; o += nt) {
            AT s0 = AT(0), s1 = AT(0);
            for (int p = 0; p < nin; p++) {
                const AT m = (AT)(TR ? M[(size_t)p * ld + o] : M[(size_t)o * ld + p]);
                s0 = fma(m, (AT)x0[p], s0);
                if (NV > 1) s1 = fma(m, (AT)x1[p], s1);
            }
            y0[o] = (YT)s0;
            if (NV > 1) y1[o] = (YT)s1;
        }
        __syncthreads();
        return;
    }
    if (tid < np * nout) {
        const int pp = tid / nout, o = tid - pp * nout;
        AT s0 = AT(0), s1 = AT(0);
        for (int p = pp; p < nin; p += np) {
            const AT m = (AT)(TR ? M[(size_t)p * ld + o] : M[(size_t)o * ld + p]);
            s0 = fma(m, (AT)x0[p], s0);
            if (NV > 1) s1 = fma(m, (AT)x1[p], s1);
        }
        red[tid] = s0;
        if (NV > 1) red[nt + tid] = s1;
    }
    __syncthreads();
    if (tid < nout) {
        AT s0 = AT(0), s1 = AT(0);
        for (int pp = 0; pp < np; pp++) {
            s0 += red[pp * nout + tid];
            if (NV > 1) s1 += red[nt + pp * nout + tid];
        }
        y0[tid] = (YT)s0;
        if (NV > 1) y1[tid] = (YT)s1;
    }
    __syncthreads();
}

/* ---- K block-wide sums of one double per thread each; every thread gets the totals. sc: 32 K
 * doubles of shared scratch. Starts with a barrier (sc may still be read by the previous call) and
 * leaves the last reads unbarriered, as vla_common.cuh's block_sum. */
template <int K> __device__ __forceinline__ void block_sums(double (&v)[K], double *sc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = warp_sum(v[k]);
    __syncthreads();
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < K; k++) sc[k * 32 + warp] = v[k];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; k++) {
        double s = 0.0;
        for (int w = 0; w < nw; w++) s += sc[k * 32 + w];
        v[k] = s;
    }
}

/* One token t of VLA's A part backwards, a block a head (VLA-MATH 5; the CPU's a_backward in
 * backends/cpu/cpu_grad_vla.c), for the recurrent kernel (vla_grad_seq.cu) and the chunk form's
 * block walk (vla_grad_chunk_apart.cu): da_t through a_t = y / max(||y||, eps), y = A_t k^_t, the
 * refresh and Sherman-Morrison. Shared [dk] inputs w = a_t, dw = da_t, kr = k^_t, u = u_t, z = z_t
 * (visible to every thread); scratch dy, dz, g1, g2 [dk], red [2 blockDim], sc [3 x 32]. A is A_t on
 * entry and A_{t-1} on return, dA likewise. Writes dkh_out[j] = dkh_in[j] + (A_t^T dy)[j] (the S
 * part's dk^ in dkh_in) and du_out. Ends with a barrier. */
__device__ __forceinline__ void a_token_backward(const vlacu_args &a, int dk, int lda, double den, double yn,
                                                 bool gate, bool refresh, const float *w, const float *dw,
                                                 const float *kr, const float *u, const double *z, double *dy,
                                                 double *dz, double *g1, double *g2, double *red, double *sc, double *A,
                                                 double *dA, const float *dkh_in, float *dkh_out, float *du_out) {
    const int tid = threadIdx.x, nt = blockDim.x;
    {
        double s[1] = {0.0};
        for (int j = tid; j < dk; j += nt) s[0] += (double)w[j] * dw[j];
        block_sums<1>(s, sc);
        const double ada = s[0];
        for (int j = tid; j < dk; j += nt)
            dy[j] = yn > a.eps ? ((double)dw[j] - (double)w[j] * ada) / yn : (double)dw[j] / a.eps;
    }
    __syncthreads();
    /* G z and G^T z with G = dA + dy k^^T: dA z, dA^T z, then the rank-one part */
    mv<false, 1, double>(dA, lda, dk, dk, z, z, g1, g1, red);
    mv<true, 1, double>(dA, lda, dk, dk, z, z, g2, g2, red);
    double s[2] = {0.0, 0.0};
    for (int j = tid; j < dk; j += nt) s[0] += (double)kr[j] * z[j], s[1] += dy[j] * z[j];
    block_sums<2>(s, sc);
    const double kz = s[0], dyz = s[1];
    double s3[1] = {0.0};
    for (int j = tid; j < dk; j += nt) {
        g1[j] += dy[j] * kz;          /* G z */
        g2[j] += (double)kr[j] * dyz; /* G^T z */
        s3[0] += z[j] * g1[j];
    }
    block_sums<1>(s3, sc);
    const double dc = gate ? s3[0] / (den * den) : 0.0;
    for (int j = tid; j < dk; j += nt) dz[j] = -(g1[j] + g2[j]) / den + dc * (double)u[j];
    __syncthreads();
    /* A_t^T dy and A_t^T dz; A_{t-1}^T dz = A_t^T dz (- rho dz) + z (z . dz) / den */
    mv<true, 2, double>(A, lda, dk, dk, dy, dz, g1, g2, red);
    double s4[1] = {0.0};
    for (int j = tid; j < dk; j += nt) s4[0] += z[j] * dz[j];
    block_sums<1>(s4, sc);
    const double zdz = s4[0] / den;
    for (int j = tid; j < dk; j += nt) {
        dkh_out[j] = (float)((double)dkh_in[j] + g1[j]);
        const double am1dz = g2[j] - (refresh ? a.rho * dz[j] : 0.0) + z[j] * zdz;
        du_out[j] = (float)(dc * z[j] + am1dz);
    }
    /* A <- A_{t-1};  dA <- G + dz u^T */
    const double inv = 1.0 / den;
    for (int e = tid; e < dk * dk; e += nt) {
        const int i = e / dk, j = e - i * dk;
        double *ap = A + (size_t)i * lda + j;
        double x = *ap;
        if (refresh && i == j) x -= a.rho;
        *ap = x + z[i] * inv * z[j];
        double *gp = dA + (size_t)i * lda + j;
        *gp += dy[i] * (double)kr[j] + dz[i] * (double)u[j];
    }
    __syncthreads();
}

/* dst[i] = src[i], i < n (no barrier). */
template <typename D, typename S> __device__ __forceinline__ void ldvec(D *dst, const S *src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = (D)src[i];
}

/* ---- where the recurrent backward's four state matrices live: dynamic shared memory when they
 * fit (in priority order), else the head's global slice. */
enum { GB_X = 0, GB_DX = 1, GB_A = 2, GB_DA = 3, GB_N = 4 };
struct gplan {
    long long off[GB_N];       /* byte offset; -1: unused */
    unsigned char smem[GB_N];  /* 1: dynamic shared memory, 0: the head's global slice */
    size_t smem_bytes;         /* dynamic shared memory per block */
    size_t spill_bytes;        /* bytes at the start of each head's slice (a multiple of 256) */
};

template <typename T> __device__ __forceinline__ T *gbuf(const gplan &p, int id, unsigned char *smem, unsigned char *gs) {
    if (p.off[id] < 0) return nullptr;
    return (T *)((p.smem[id] ? smem : gs) + p.off[id]);
}

/* The rest of a head's global slice (byte offsets from its start): checkpoints of X = S^T (float,
 * [dk][dv]), A (double, [dk][dk]) and n (float, [dk]) at the start of every chunk of C tokens, and
 * the chunk store, the per-token values of the chunk being walked: X_{t-1} [C][dk][dv], z_t [C][dk]
 * (double), den_t, ||y_t||, gate_t [C] (double), a_t (or w_t) [C][dk], e_t [C][dv], n_t [C][dk]. */
struct seq_layout {
    size_t ckX, ckA, ckN;
    size_t sX, sZ, sDen, sYn, sGate, sW, sE, sN;
    size_t bytes; /* per head (a multiple of 256) */
};

struct gseq_params {
    vlacu_args a;                          /* the forward's arguments (inputs, initial states, options) */
    const float *Qp, *Kf, *Kh, *Up;        /* prepared rows [BH][T][dk]: q~, k~, k^, u (null: unused) */
    const float *dO, *dS_end, *dA_end, *dn_end;
    float *dQp, *dKf, *dKh, *dU;           /* gradients of the prepared rows [BH][T][dk] (null: unused) */
    float *dv, *dbeta, *dg, *dS0, *dA0, *dn0; /* the op's outputs written here (null: not requested) */
    int C, nck;                            /* checkpoint interval, checkpoints */
    gplan plan;
    seq_layout lay;
    unsigned char *slices;                 /* BH slices of lay.bytes */
};
size_t grad_seq_static_smem();
cudaError_t launch_grad_seq(const gseq_params &p, cudaStream_t st);

/* ---- the chunked backward (vla_grad_chunk.cu, vla_grad_chunk_apart.cu) ----
 * Chunks of C tokens (the last holds the rest), per head: the chunk form of vla_grad_seq.cu's rule
 * (backends/cpu/cpu_grad_chunk.c derives it). Kernels, in launch order:
 *   vla     A forward  (head)  a_t = w_t rows, z_t, den_t, ||y_t||, A at every chunk start
 *   n prefix  (linear; vla normalised)  N [BH][T][dk]: n_t = n_0 + sum_{s<=t} k~_s  (thread per (head, column))
 *   factors  (head, chunk)  Y, Wt, Wd, gamL, and H = the chunk's carry-free part of dX_start
 *   fwd walk (head, dv tile)  ckX: X = S^T at every chunk start
 *   bwd walk (head, dv tile)  ckH: dX at every chunk end (over H, read first); dS_0
 *   vjp      (head, chunk)  dq~, dk^ (or dk~), dv, dbeta, dg, dr_t (normaliser), da_t (vla)
 *   vla     A backward (head)  tokens backwards with da_t: dk^ += the A part, du, dA_0
 *   dn suffix (linear; vla normalised)  dk~_t += dn_t (vla: =), dn_0        (thread per (head, column)) */
struct gchunk_params {
    vlacu_args a;
    const float *Qp, *Kh, *Kf;             /* prepared rows [BH][T][dk] (Kh: delta, Kf: linear) */
    const float *dO, *dS_end, *dn_end;
    float *dQp, *dKh, *dKf;                /* gradients of the prepared rows (dKh: delta, dKf: linear) */
    float *dv, *dbeta, *dg, *dS0, *dn0;    /* the op's outputs (null: not requested) */
    float *N, *dr;                         /* linear: n_t [BH][T][dk], dr_t [BH][T] */
    float *Y, *Wt, *Wd;                    /* [BH][T][dv], [BH][T][dk] (Wt: delta), [BH][T][dk] */
    float *gamL;                           /* [BH][nck]: the chunk's decay product */
    float *ckX, *ckH;                      /* [BH][nck][dk][dv] */
    int C, nck, tile;                      /* chunk, chunks, walk column tile */
    size_t smem_fac, smem_vjp, smem_walk;  /* dynamic shared memory of the kernels */
    /* vla: the A part (vla_grad_chunk_apart.cu), token by token per head around the S part above */
    const float *Up, *dA_end;
    float *dU, *dA0;                       /* dU: gradient of the prepared u rows [BH][T][dk] */
    float *Aw, *dAw;                       /* a_t and da_t rows [BH][T][dk] */
    double *Zs, *tok;                      /* z_t [BH][T][dk]; (den_t, ||y_t||, gate_t) [BH][T][3] */
    double *ckA;                           /* A at every chunk start and at the end [BH][nck + 1][dk][dk] */
    double *Aws;                           /* A, dA [dk][ld_of(dk)] each, per head, when not in shared memory */
    double *Sg;                            /* the segment form's slices [BH][seg_doubles] (null: not run) */
    size_t smem_a;                         /* A and dA in dynamic shared memory (0: in Aws) */
};
size_t grad_chunk_static_smem();
/* Dynamic shared memory of the factors, vjp and walk kernels at chunk C (vla_grad_chunk.cu). */
void grad_chunk_smem(int C, int dk, int dv, int tile, size_t *fac, size_t *vjp, size_t *walk);
cudaError_t launch_grad_chunk(const gchunk_params &p, cudaStream_t st);
cudaError_t launch_grad_chunk_afwd(const gchunk_params &p, cudaStream_t st); /* vla: a_t, z_t, ckA */
cudaError_t launch_grad_chunk_abwd(const gchunk_params &p, cudaStream_t st); /* vla: dk^ += A part, du, dA_0 */
size_t grad_chunk_apart_static_smem();
bool grad_chunk_apart_segment();                        /* VLA_CUDA_APART=segment */
size_t grad_chunk_apart_segment_doubles(int C, int dk); /* P.Sg's doubles a head */

/* ---- the prep and its chain rule (vla_grad_prep.cu) ---- */
struct gprep_params {
    vlacu_args a;
    float *Qp, *Kf, *Kh, *Up;              /* forward: written where not null */
    const float *dQp, *dKf, *dKh, *dU;     /* backward: read where not null */
    float *dq, *dk, *du;                   /* backward: the op's outputs, written where not null */
};
cudaError_t launch_grad_prep(const gprep_params &p, cudaStream_t st);
cudaError_t launch_grad_prep_back(const gprep_params &p, cudaStream_t st);

/* ---- softmax (vla_grad_softmax.cu) ---- */
struct gsm_params {
    vlacu_args a;
    const float *dO;
    float *dq, *dk, *dv; /* null: not requested */
    float *lse, *D;      /* [BH][T] row statistics (workspace) */
    int tile;            /* the FMA kernels' tile (64 .. 4), or GSM_TILE_MMA: the mma kernels */
    size_t smem_rows, smem_keys; /* dynamic shared memory of the two kernels */
};
constexpr int GSM_TILE_MMA = 1 << 20;
size_t grad_softmax_static_smem();
/* GSM_TILE_MMA where dk, dv <= 64 and the mma kernels fit `budget` bytes of dynamic shared memory,
 * else the largest tile (64 .. 4) whose two FMA kernels fit; 0 if none. */
int grad_softmax_pick_tile(int dk, int dv, size_t budget, size_t *smem_rows, size_t *smem_keys);
cudaError_t launch_grad_softmax(const gsm_params &p, cudaStream_t st);

} // namespace grad
} // namespace vlacu

#endif /* VLA_GRAD_CUH */
