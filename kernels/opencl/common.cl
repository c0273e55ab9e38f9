/* common.cl: definitions every libvla OpenCL program shares. The host prepends this file to
 * each kernel family (prep.cl, softmax.cl, linear_delta.cl, vla.cl) when it builds the
 * family's program; it holds no kernels itself.
 *
 * OpenCL C 1.2. Build options set by the host (backends/opencl/ocl_backend.c):
 *   -DVLA_FP64=1   the device has cl_khr_fp64: real_t is double. The VLA A recurrence of the
 *                  sequential and scan algorithms runs in real_t, because in float32 its
 *                  rank-1 downdates drift (relative error of o ~1e-5 at T = 4096, 4e-5 at
 *                  T = 8192, d = 32..64; see backends/cpu/cpu_vla.c); so does the chunked A
 *                  part (vla_a_chunked: its A0 - Z^T Z cancels at small
 *                  lambda0). Without fp64 they run in float and the looser bounds apply.
 *                  chunkpar.cl (the chunk-parallel A part) gets it only where ctx->cp_fp64:
 *                  GPUs build it in float by default, as CUDA's A part (ocl_backend.c).
 *
 * Conventions shared by every kernel:
 *   - Inputs q, k, u [B, T, H, dk], v and o [B, T, H, dv], beta and g [B, T, H], row-major.
 *   - Prepared per-head arrays (written by prep.cl) are [B*H, T, dk], head-major, so one
 *     head's tokens are contiguous.
 *   - The S state is kept transposed, ST [dk][dv] per head, as the library stores it.
 *     Work-item j owns column j of ST (j = lid, lid + WG, ...): the S recurrence of every
 *     mechanism is independent per column once the token's vectors are known, so the S part
 *     needs no communication between work-items; and neighbouring work-items touch
 *     neighbouring addresses (coalesced).
 *   - Work-group sizes are powers of two between 32 and VLA_MAXWG (the host picks them).
 *   - Kernels that loop over tokens keep their work-group on one head; barriers sit in
 *     uniform control flow only (every work-item of the group reaches the same barriers). */

#ifdef VLA_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real_t;
#else
typedef float real_t;
#endif

#define VLA_MAXD 256  /* largest dk, dv (VLA-MATH) */
#define VLA_MAXWG 256 /* largest work-group the host launches */
#define VLA_MINWG 32  /* smallest: private arrays below hold VLA_MAXD / VLA_MINWG entries */
#define VLA_PER (VLA_MAXD / VLA_MINWG)

/* Feature maps of VLA-MATH 1: fmap 0 = none, 1 = elu(x) + 1. */
float vla_phi(float x, int fmap) { return fmap == 1 ? (x > 0.0f ? x + 1.0f : exp(x)) : x; }

/* Index of element (b, t, h, i) of a [B, T, H, D] tensor. */
size_t vla_bthd(int b, int t, int h, int i, int T, int H, int D) {
    return (((size_t)b * T + t) * H + h) * D + i;
}

/* 1 when token t of this piece is a refresh point: (t0 + t + 1) % R == 0 at its absolute
 * position. The host passes rphase = t0 % R (so no 64-bit argument is needed). */
int vla_is_refresh(int R, int rphase, int t) {
    return R > 0 && (((long)rphase + t + 1) % R) == 0;
}

/* Sum of x over the work-group (tree in local memory; red holds get_local_size(0) entries).
 * Every work-item gets the sum. Contains barriers: call from uniform control flow. */
real_t vla_wg_sum_real(real_t x, __local real_t *red) {
    const int lid = get_local_id(0), n = get_local_size(0);
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const real_t r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* red may be reused right after */
    return r;
}

float vla_wg_sum_float(float x, __local float *red) {
    const int lid = get_local_id(0), n = get_local_size(0);
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* ---- the output normaliser's running sum n_t = n_{t-1} + k~_t (linear attention, VLA's
 * normalised output), one head a work-group: work-item i owns n_i for i = lid, lid + WG, ...
 * in a private array n[VLA_PER]. prep.cl's norm_out and grad_prep.cl's grad_norm_den both run
 * it, so the backward recomputes exactly the forward's float sums. ---- */

/* n from head bh's slice of n_in [B*H, dk], or 0. */
void vla_norm_load(float *n, __global const float *n_in, int has_in, int bh, int dk) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int m = 0; m < VLA_PER; m++) {
        const int i = lid + m * wg;
        n[m] = (has_in && i < dk) ? n_in[(size_t)bh * dk + i] : 0.0f;
    }
}

/* n += k~_t, and returns q~_t . n_t summed over the work-group (q~_t, k~_t: the prepared rows at
 * `row` of qf, kf). Contains barriers: call from uniform control flow. */
float vla_norm_step(float *n, __global const float *qf, __global const float *kf, size_t row, int dk,
                    __local float *red) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    float part = 0.0f;
    for (int m = 0; m < VLA_PER; m++) {
        const int i = lid + m * wg;
        if (i < dk) {
            n[m] += kf[row + i];
            part += qf[row + i] * n[m];
        }
    }
    return vla_wg_sum_float(part, red);
}

/* ---- affine maps on the transposed state ----
 * A map X -> M X + N (M [dk, dk], N [dk, dv]) is stored as one dk x (dk + dv) row-major
 * matrix [M | N]: row r holds M's row r then N's row r. compose(first, second) replaces
 * second with "first, then second" = [M2 M1 | M2 N1 + N2]. Row r of the result needs only
 * row r of second (and all of first), so the work-group updates second in place, a block of
 * VLA_RB rows at a time staged in local memory: no global temporary. */
#define VLA_RB 4

void vla_affine_compose(__global const float *first, __global float *second, int dk, int dv,
                               __local float *rows /* VLA_RB * (dk + dv) */) {
    const int lid = get_local_id(0), wg = get_local_size(0), W = dk + dv;
    for (int r0 = 0; r0 < dk; r0 += VLA_RB) {
        const int nr = min(VLA_RB, dk - r0);
        for (int e = lid; e < nr * W; e += wg) rows[e] = second[(size_t)r0 * W + e];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < nr * W; e += wg) {
            const int r = e / W, c = e - r * W;
            __local const float *m2 = rows + r * W;
            float s = c >= dk ? m2[c] : 0.0f; /* + N2 */
            for (int p = 0; p < dk; p++) s += m2[p] * first[(size_t)p * W + c];
            second[(size_t)(r0 + r) * W + c] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
}
