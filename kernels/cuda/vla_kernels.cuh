/* Internal to kernels/cuda: the parameter blocks of the kernels and the host-side launchers
 * that vla_launch.cu sequences. Not part of the library's interface. */
#ifndef VLA_KERNELS_CUH
#define VLA_KERNELS_CUH

#include "vla_common.cuh"

namespace vlacu {

/* ---- where each working array of a kernel lives: shared memory when it fits, else a slice of
 * the workspace that belongs to the block (byte offsets in either). */
enum { B_X, B_A, B_K, B_Q, B_U, B_Z, B_E, B_C, B_D, B_GV, B_GAM, B_NBUF };

struct bufplan {
    long long off[B_NBUF];      /* byte offset; -1: unused */
    unsigned char smem[B_NBUF]; /* 1: in dynamic shared memory; 0: in the block's global slice */
    size_t smem_bytes;          /* dynamic shared memory per block */
    size_t gbytes;              /* global bytes per block (a multiple of 256) */
};

template <typename T>
__device__ __forceinline__ T *bufp(const bufplan &p, int id, unsigned char *smem, unsigned char *gslice) {
    if (p.off[id] < 0) return nullptr;
    return (T *)((p.smem[id] ? smem : gslice) + p.off[id]);
}

/* ---- the chunk engine (vla_engine.cu): one kernel, several roles ---- */
enum {
    M_CHUNKED = 0, /* VLA-MATH 2.3, one block per head over all chunks (linear, delta, vla) */
    M_CARRY = 1,   /* vla: the A part chunk to chunk per head; A at every segment start -> Ast */
    M_SEGMAP = 2,  /* vla two-level: per segment, a_t -> AlG and the segment's affine map -> maps */
    M_ALONLY = 3,  /* vla scan: per segment, a_t -> AlG only */
    M_SEGOUT = 4,  /* vla two-level: per segment from its true start state, outputs */
    M_GRAM = 5     /* vla: per segment, sum of u u^T -> gram (double) */
};

struct engine_params {
    vlacu_args a;
    int mode;
    int cmax, ncols;     /* longest chunk; columns of the state X (dv, or dk + dv for maps) */
    int64_t nchunks;
    int seg, nseg;       /* chunks per segment; segments */
    bufplan plan;
    unsigned char *spill; /* per-block global slices, plan.gbytes each */
    float *AlG;          /* [BH][T][dk] rows a_t */
    float *Ast;          /* [BH][nseg][dk*dk] A at each segment start */
    double *gram;        /* [BH][nseg][dk*dk] */
    float *maps;         /* [BH][nseg][dk*(dk+dv)] segment maps [M | N] */
    float *Sst;          /* [BH][nseg][dk*dv] state at each segment start */
    int *flags;          /* [BH] 1: the Gram path cannot be used for this head (carry A instead) */
};

size_t engine_static_smem();
cudaError_t engine_set_smem(size_t bytes);
cudaError_t launch_engine(const engine_params &p, unsigned blocks, cudaStream_t st);

/* ---- small kernels of the two-level and scan algorithms (vla_engine.cu) ---- */
struct aux_params {
    vlacu_args a;
    int nseg;
    int64_t nmaps;   /* maps per head in the scan */
    float *AlG, *Ast, *maps, *mtmp, *Sst, *tmpS;
    double *gram, *Minv, *dscratch;
    int *flags;
};
cudaError_t launch_ain_inverse(const aux_params &p, cudaStream_t st);
cudaError_t launch_gram_prefix(const aux_params &p, cudaStream_t st);
cudaError_t launch_seg_inverse(const aux_params &p, cudaStream_t st);
/* Blelloch (Brent-Kung) scan over p.nmaps maps [M | N] per head, in place; mtmp holds
 * ceil(nmaps / 2) maps per head. */
cudaError_t launch_map_scan(const aux_params &p, int64_t nmaps, cudaStream_t st);
cudaError_t launch_seg_starts(const aux_params &p, cudaStream_t st);
cudaError_t launch_scan_build(const aux_params &p, cudaStream_t st);
cudaError_t launch_scan_out(const aux_params &p, cudaStream_t st);
cudaError_t launch_scan_final(const aux_params &p, cudaStream_t st);

/* ---- chunk-parallel VLA (vla_chunkpar.cuh; launcher vla_chunkpar.cu): the chunked algorithm when chunkpar_applies ---- */
struct cp_params {
    vlacu_args a;
    int nch;            /* chunks per head (R = 0: chunk j is tokens j*C .. min(j*C + C, T) - 1) */
    int C;              /* chunk length, <= 64 */
    int seg, nseg;      /* chunks a segment (one block of the A part), segments per head */
    double *Md;         /* [BH][nseg][DK*DK] M_g = (A at segment g's start)^{-1} (slots g >= 1) */
    float *Gp;          /* [BH][nseg-1][gparts][DK*DK] Gram sums of the parts of each segment (float, as
                         * summed; every sum over parts is double) */
    int gparts;         /* gram_kernel blocks a segment (chunkpar_gram_parts) */
    const double *Minv; /* [BH][dk*dk] A_in^{-1} (double), or null without A_in */
    const int *flags;   /* [BH] 1: A_in is not positive definite, the engine does the head; or null */
    float *Al, *W;      /* [BH][T][DK] a_t rows; W rows */
    float *Y;           /* [BH][T][dv] Y = (I + Lw)^{-1} V */
    float *Pm, *Qm;     /* [BH][nch][DK*DK], [BH][nch][DK][dv]: chunk maps X_end = P X + Q */
    float *Xst;         /* [BH][nch][DK][dv] X = S^T at each chunk start */
    float *Aend;        /* [BH][dk*dk] A after the last token (for A_out) */
    int wlen, wnseg;    /* the walk's segments: wlen chunks each, wnseg of them (1: no split) */
    int apart_minb;     /* apart_kernel blocks a multiprocessor: 2 or 3 (chunkpar_apart_minb) */
    int sfac_minb;      /* sfac_kernel blocks a multiprocessor: 2, or 3 (dk = 64) / 4 (dk = 32) (chunkpar_sfac_minb) */
    int fold;           /* VLA: apart_kernel sums the Gram parts itself (no cp_prefix; set by launch_chunkpar) */
    int outfold;        /* VLA, dk <= 32, dv <= 32: apart_kernel forms the output's first half (Q', Pm Y over W, Y;
                         * no OUT_PRE launch; set by launch_chunkpar) */
    int sms;            /* the device's multiprocessors (walk_rows_kernel's prefetch depth) */
    int cc;             /* the device's compute capability, major (walk_quad_kernel: 8 and up; programmatic
                         * dependent launch: 9 and up) */
    float *Seg;         /* [BH][wnseg][DK][DK + dv] segment maps [P_seg | Q_seg] (wnseg > 1) */
    float *Sst;         /* [BH][wnseg][DK][dv] X at each segment start (wnseg > 1) */
    long long *prof;    /* development timing (VLA_CUDA_KERNEL_TIMES=1), else null */
    unsigned long long *tl; /* development: each kernel's span on the global timer (VLA_CP_TIMELINE=1), else null */
    int prof_block;
};
bool chunkpar_applies(const vlacu_args &a, const vlacu_device &dev);
int chunkpar_dk(const vlacu_args &a); /* DK: 32 or 64 */
int chunkpar_bv(const vlacu_args &a, const vlacu_device &dev);
void chunkpar_walk(const vlacu_args &a, const vlacu_device &dev, int nch, int *bv, int *wlen, int *wnseg);
int chunkpar_seg(const vlacu_args &a, const vlacu_device &dev, int nch);
int chunkpar_apart_minb(const vlacu_args &a, const vlacu_device &dev, int nseg);
int chunkpar_sfac_minb(const vlacu_args &a, const vlacu_device &dev, int nch);
int chunkpar_gram_parts(int seg);
cudaError_t launch_chunkpar(const cp_params &p, int bv, cudaStream_t st, const vlacu_aux *aux);

/* Development (VLA_CUDA_HOST_TIMES=1): the host clock at named points of a call (after each
 * launch of the chunk-parallel form), printed to stderr when vlacu_forward returns. Off: one test. */
bool host_marks_on();
void host_mark(const char *what);

/* ---- sequential (vla_seq.cu) ---- */
struct seq_params {
    vlacu_args a;
    bufplan plan;
    unsigned char *spill;
};
size_t seq_static_smem();
cudaError_t launch_seq(const seq_params &p, cudaStream_t st);

/* ---- sequential with the states in registers (vla_seq_regs.cu): dk, dv <= 64, the decode path ---- */
bool seq_regs_applies(const vlacu_args &a);
cudaError_t launch_seq_regs(const vlacu_args &a, cudaStream_t st);

/* ---- output normaliser (vla_norm.cu): n_t = n_{t-1} + k~_t; o_t /= max(q~.n, eps) (vla) or
 * (q~.n + eps) (linear). work: BH * ceil(T / NORM_NB) * dk floats. */
#define VLACU_NORM_NB 64
cudaError_t launch_normalize(const vlacu_args &a, float *work, cudaStream_t st);

/* ---- softmax (vla_softmax.cu) ---- */
size_t softmax_static_smem();
/* Largest tile (64, 32, 16, 8, 4) whose shared memory fits in `budget` bytes; 0 if none. */
int softmax_pick_tile(int dk, int dv, size_t budget, size_t *smem_bytes);
/* The tensor-core form (sm_80+, dk and dv <= 64): 0 where it does not apply, else the parts each
 * query tile's keys are split into (>= 1), with the workspace their partial results need. */
int softmax_tc_plan(const vlacu_args &a, const vlacu_device &dev, size_t *part_bytes);
/* nsplit > 0 (softmax_tc_plan): the tensor-core form, part = its workspace; else softmax_kernel
 * with `tile`. */
cudaError_t launch_softmax(const vlacu_args &a, int tile, size_t smem_bytes, int nsplit,
                           float *part, cudaStream_t st);

} // namespace vlacu

#endif /* VLA_KERNELS_CUH */
