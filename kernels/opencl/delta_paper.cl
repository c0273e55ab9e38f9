/* delta_paper.cl: the paper's DeltaNet (VLA-MATH 1, last subsection; "delta-paper"), forward
 * and backward (VLA-MATH 5). Built after common.cl. On the transposed state ST [dk][dv]
 * (ST[i][j] = S[j][i], the library's storage), with a per-value-row gate g_t [dv]:
 *
 *   q~_t = phi(q_t),  k^_t = normalize(k_t)   (phi on q only)
 *   e_t  = v_t - ST_{t-1}^T k^_t
 *   ST_t[i][j] = g_t[j] ST_{t-1}[i][j] + k^_t[i] e_t[j],   o_t = ST_t^T q~_t
 *
 * Column j of ST (value row j of S) evolves on its own once k^_t is known, so work-item j owns
 * it, as in linear_delta.cl. The gate is per column: unlike DeltaNet's scalar decay it does not
 * multiply the read ST_{t-1}^T k^_t.
 *
 * Backward, running t = T-1 .. 0 with dST = dL/dST_t (from dS_end or 0):
 *   dST += q~_t do_t^T;        dq~_t = ST_t do_t
 *   dv_t = dST^T k^_t          dg_t[j] = sum_i dST[i][j] ST_{t-1}[i][j]
 *   dk^_t = dST e_t - ST_{t-1} dv_t
 *   dST  = dST diag(g_t) - k^_t dv_t^T   (now dL/dST_{t-1}); dS_0 is the last.
 * dg_t and dv_t are per column (no reduction), dq~_t and dk^_t per row.
 *
 * Layouts: q, k [B,T,H,dk], v, g, o [B,T,H,dv] (the user's); prepared q~, k^ and their
 * gradients [B*H, T, dk] (head-major: a head's tokens contiguous). */

/* q~ = phi(q), k^ = k / max(||k||, eps) (prep.cl's normalisation). One work-item per token
 * row (b, t, h): B*T*H items fill the device. */
__kernel void dp_prep(__global const float *q, __global const float *k, __global float *qf, __global float *kh,
                      int B, int T, int H, int dk, int fmap, float eps) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * T * H) return;
    const int h = (int)(gid % H), t = (int)((gid / H) % T), b = (int)(gid / ((size_t)H * T));
    const size_t src = gid * dk, dst = (((size_t)b * H + h) * T + t) * dk;
    float ss = 0.0f;
    for (int i = 0; i < dk; i++) {
        qf[dst + i] = vla_phi(q[src + i], fmap);
        ss += k[src + i] * k[src + i];
    }
    const float inv = 1.0f / fmax(sqrt(ss), eps);
    for (int i = 0; i < dk; i++) kh[dst + i] = k[src + i] * inv;
}

/* One token for column j: e = v_j - (STp^T k)_j, STc[.][j] = g_j STp[.][j] + k e. Returns e and,
 * when want_o, leaves (STc^T q)_j in *o. The forward and the backward's recomputation both call
 * this, so the recomputed states are the forward's. STp may equal STc. */
float dp_column(__global const float *STp, __global float *STc, __local const float *lk, __local const float *lq,
                int want_o, float vj, float gj, int j, int dk, int dv, float *o) {
    float sk = 0.0f;
    for (int i = 0; i < dk; i++) sk += STp[(size_t)i * dv + j] * lk[i];
    const float e = vj - sk;
    float acc = 0.0f;
    for (int i = 0; i < dk; i++) {
        const size_t ij = (size_t)i * dv + j;
        const float x = gj * STp[ij] + lk[i] * e;
        STc[ij] = x;
        if (want_o) acc += x * lq[i];
    }
    *o = acc;
    return e;
}

/* Sequential forward (VLA-MATH 2.1). One work-group per head, ST [B*H, dk, dv] in global memory
 * updated in place (at dk = dv = 256 a head's state is 256 KiB, more than local memory holds);
 * per token the group stages k^ and q~ in local memory. */
__kernel void dp_sequential(__global const float *kh, __global const float *qf, __global const float *v,
                            __global const float *gate, int has_g, __global float *ST, __global float *o, int T,
                            int H, int dk, int dv) {
    __local float lk[VLA_MAXD], lq[VLA_MAXD];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    __global float *S = ST + (size_t)bh * dk * dv;
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)bh * T + t) * dk;
        for (int i = lid; i < dk; i += wg) {
            lk[i] = kh[row + i];
            lq[i] = qf[row + i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = lid; j < dv; j += wg) {
            const size_t vj = vla_bthd(b, t, h, j, T, H, dv);
            float oj;
            dp_column(S, S, lk, lq, 1, v[vj], has_g ? gate[vj] : 1.0f, j, dk, dv, &oj);
            o[vj] = oj;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Bits of grad_dp's `outs`. */
#define DP_DQ 1
#define DP_DK 2
#define DP_DV 4
#define DP_DG 8
#define DP_DS0 16

/* The adjoint dST [dk, dv] of the backward: in local memory where the host prepends
 * "#define DP_DST_LOCAL" (the program is built twice, with and without; OpenCL C 1.2 has no
 * generic address space to choose at run time), else in global memory, a slice per head. In
 * local memory every store of the token walk goes there, so the compiler can keep the global
 * loads of the states in flight (with it in global memory a load may alias the previous
 * store). ocl_grad.c picks the form and gives the measured times. */
#ifdef DP_DST_LOCAL
#define DP_DST_SPACE __local
#else
#define DP_DST_SPACE __global
#endif

/* The backward, checkpointed as grad_linear_delta.cl's grad_gdr (VLA-MATH 5 memory): one
 * work-group per head walks the sequence forwards once, keeping the state at the start of every
 * chunk of C tokens (CK [nch, dk, dv] per head), then walks the chunks backwards, recomputing
 * each chunk's per-token states into Wst [C, dk, dv] (residuals e into We [C, dv]) and walking
 * its tokens backwards. The adjoint dST [dk, dv] is real_t (double where the device has fp64);
 * dSTs is [B*H, dk, dv] in global memory, or the group's [dk, dv + 1] in local memory.
 * Outputs: dqf, dkh [B*H, T, dk] (gradients of q~, k^; dp_grad_prep takes them to dq, dk),
 * dv and dg [B,T,H,dv], dS0 [B*H, dk, dv]; each written only when its bit of outs is set.
 * Barriers sit in uniform control flow (PoCL). */
__kernel void grad_dp(__global const float *kh, __global const float *qf, __global const float *v,
                      __global const float *gate, int has_g, __global const float *S_in, int has_S_in,
                      __global const float *dS_end, int has_dS_end, __global const float *dO, __global float *CKs,
                      __global float *Wsts, __global float *Wes, DP_DST_SPACE real_t *dSTs, __global float *dqf,
                      __global float *dkh, __global float *dvo, __global float *dgo, __global float *dS0, int outs,
                      int T, int H, int dk, int dv, int C, int nch) {
    __local float lq[VLA_MAXD], lk[VLA_MAXD], le[VLA_MAXD];
    __local real_t ldo[VLA_MAXD], ldv[VLA_MAXD];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    const size_t ssz = (size_t)dk * dv;
    __global float *CK = CKs + (size_t)bh * nch * ssz, *Wst = Wsts + (size_t)bh * C * ssz;
    __global float *We = Wes + (size_t)bh * C * dv;
#ifdef DP_DST_LOCAL
    /* Rows padded to dv + 1: the row phase's work-items read one column at a time, and rows of
     * an even number of words would all start in the same local-memory bank. */
    __local real_t *dST = dSTs;
    const int ld = dv + 1;
#else
    __global real_t *dST = dSTs + (size_t)bh * ssz;
    const int ld = dv;
#endif
    for (size_t e = lid; e < ssz; e += wg) {
        CK[e] = has_S_in ? S_in[(size_t)bh * ssz + e] : 0.0f;
        dST[e / dv * ld + e % dv] = has_dS_end ? (real_t)dS_end[(size_t)bh * ssz + e] : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);

    /* pass 0: every chunk recomputed, its end state kept as the next checkpoint; pass 1: chunks
     * backwards, each recomputed (the last one is still in Wst) and walked backwards. */
    for (int pass = 0; pass < 2; pass++)
        for (int n = 0; n < nch; n++) {
            const int ci = pass == 0 ? n : nch - 1 - n, ts = ci * C, c = min(C, T - ts);
            const int nrec = (pass == 0 || ci < nch - 1) ? c : 0;
            for (int tl = 0; tl < nrec; tl++) {
                const size_t row = ((size_t)bh * T + ts + tl) * dk;
                for (int i = lid; i < dk; i += wg) lk[i] = kh[row + i];
                barrier(CLK_LOCAL_MEM_FENCE);
                __global const float *STp = tl == 0 ? CK + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz;
                for (int j = lid; j < dv; j += wg) {
                    const size_t vj = vla_bthd(b, ts + tl, h, j, T, H, dv);
                    float unused;
                    We[(size_t)tl * dv + j] = dp_column(STp, Wst + (size_t)tl * ssz, lk, lk, 0, v[vj],
                                                        has_g ? gate[vj] : 1.0f, j, dk, dv, &unused);
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
            for (size_t e = lid; e < ((pass == 0 && ci + 1 < nch) ? ssz : 0); e += wg)
                CK[(size_t)(ci + 1) * ssz + e] = Wst[(size_t)(c - 1) * ssz + e];
            barrier(CLK_GLOBAL_MEM_FENCE);
            const int nb = pass == 1 ? c : 0;
            for (int s = 0; s < nb; s++) {
                const int tl = c - 1 - s, t = ts + tl;
                const size_t row = ((size_t)bh * T + t) * dk;
                for (int i = lid; i < dk; i += wg) {
                    lq[i] = qf[row + i];
                    lk[i] = kh[row + i];
                }
                for (int j = lid; j < dv; j += wg) {
                    ldo[j] = (real_t)dO[vla_bthd(b, t, h, j, T, H, dv)];
                    le[j] = We[(size_t)tl * dv + j];
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                __global const float *STp = tl == 0 ? CK + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz;
                __global const float *STc = Wst + (size_t)tl * ssz;
                /* Columns: dST += q~ do^T, dv = dST^T k^, dg = <dST, STp> per column. */
                for (int j = lid; j < dv; j += wg) {
                    const real_t doj = ldo[j];
                    real_t dvj = 0, dgj = 0;
                    for (int i = 0; i < dk; i++) {
                        const size_t ij = (size_t)i * dv + j, dij = (size_t)i * ld + j;
                        const real_t x = dST[dij] + (real_t)lq[i] * doj;
                        dST[dij] = x;
                        dvj += x * (real_t)lk[i];
                        dgj += x * (real_t)STp[ij];
                    }
                    ldv[j] = dvj;
                    const size_t vj = vla_bthd(b, t, h, j, T, H, dv);
                    if (outs & DP_DV) dvo[vj] = (float)dvj;
                    if (outs & DP_DG) dgo[vj] = has_g ? (float)dgj : 0.0f;
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                /* Rows: dq~ = ST_t do, dk^ = dST e - STp dv. */
                for (int i = lid; i < dk; i += wg) {
                    real_t dq = 0, dkr = 0;
                    const size_t r = (size_t)i * dv, dr = (size_t)i * ld;
                    for (int j = 0; j < dv; j++) {
                        dq += (real_t)STc[r + j] * ldo[j];
                        dkr += dST[dr + j] * (real_t)le[j] - (real_t)STp[r + j] * ldv[j];
                    }
                    if (outs & DP_DQ) dqf[row + i] = (float)dq;
                    if (outs & DP_DK) dkh[row + i] = (float)dkr;
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE); /* every row has read dST */
                /* Columns: dST = dST diag(g) - k^ dv^T. */
                for (int j = lid; j < dv; j += wg) {
                    const real_t gj = has_g ? (real_t)gate[vla_bthd(b, t, h, j, T, H, dv)] : 1;
                    const real_t dvj = ldv[j];
                    for (int i = 0; i < dk; i++) {
                        const size_t dij = (size_t)i * ld + j;
                        dST[dij] = gj * dST[dij] - (real_t)lk[i] * dvj;
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
        }
    if (outs & DP_DS0)
        for (size_t e = lid; e < ssz; e += wg) dS0[(size_t)bh * ssz + e] = (float)dST[e / dv * ld + e % dv];
}

/* Back through dp_prep, per token row (one work-item, as dp_prep): dq = phi'(q) dq~,
 * dk = dnormalize(k; dk^) = ca dk^ - cx k with ca = 1/||k||, cx = (k . dk^)/||k||^3 where
 * ||k|| > eps, and dk^ / eps where the floor binds (VLA-MATH 5; a NaN norm takes the first
 * branch, so NaN reaches dk). Outputs [B,T,H,dk], each only when asked for. */
__kernel void dp_grad_prep(__global const float *q, __global const float *k, __global const float *dqf,
                           __global const float *dkh, __global float *dq, __global float *dk, int want_dq,
                           int want_dk, int B, int T, int H, int d, int fmap, float eps) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * T * H) return;
    const int h = (int)(gid % H), t = (int)((gid / H) % T), b = (int)(gid / ((size_t)H * T));
    const size_t src = gid * d, pre = (((size_t)b * H + h) * T + t) * d;
    if (want_dq)
        for (int i = 0; i < d; i++) {
            const float x = q[src + i];
            const real_t dphi = fmap == 1 && !(x > 0.0f) ? (real_t)exp(x) : (real_t)1;
            dq[src + i] = (float)(dphi * (real_t)dqf[pre + i]);
        }
    if (!want_dk) return;
    real_t xx = 0, xd = 0;
    for (int i = 0; i < d; i++) {
        const real_t x = (real_t)k[src + i];
        xx += x * x;
        xd += x * (real_t)dkh[pre + i];
    }
    const real_t nx = sqrt(xx);
    const int floor_binds = nx <= (real_t)eps;
    const real_t ca = floor_binds ? 1 / (real_t)eps : 1 / nx, cx = floor_binds ? 0 : xd / (nx * nx * nx);
    for (int i = 0; i < d; i++) dk[src + i] = (float)(ca * (real_t)dkh[pre + i] - cx * (real_t)k[src + i]);
}
