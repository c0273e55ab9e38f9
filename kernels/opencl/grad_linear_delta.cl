/* grad_linear_delta.cl: the backward op (VLA-MATH 5) of the generalised delta rule that linear
 * attention, DeltaNet and VLA's S part share (linear_delta.cl's forward), on the transposed state:
 *
 *   ST_t = g_t ST_{t-1} + w_t e_t^T,   o'_t = ST_t^T q_t,
 *   e_t  = v_t - g_t ST_{t-1}^T kr_t  (residual: delta, VLA)      e_t = v_t  (linear)
 *
 * Adjoints, with dST the gradient with respect to ST_t (running backwards from dS_end) and do_t
 * the upstream gradient of o'_t:
 *   dST += q_t do_t^T;      dq_t = ST_t do_t;       de_t = dST^T w_t   (= dv_t)
 *   dw_t = dST e_t;         dkr_t = -g_t ST_{t-1} de_t
 *   dg_t = <dST, ST_{t-1}> - de_t . (ST_{t-1}^T kr_t)
 *   dST_{t-1} = g_t (dST - kr_t de_t^T)   (residual; g_t dST without)
 * dS_0 is dST after token 0. This file also holds these per-token steps as functions for
 * grad_vla.cl (the VLA program is built from common.cl, this file and grad_vla.cl).
 *
 * Memory (VLA-MATH 5): one work-group per head walks the sequence forwards once, keeping the
 * state at the start of every chunk of C tokens (CK [nch, dk, dv] per head), then walks the
 * chunks backwards: each chunk's per-token states are recomputed from its checkpoint into
 * Wst [C, dk, dv] (with the residuals e into We [C, dv]), and its tokens are walked backwards.
 * Never a state per token of the whole sequence. The recomputation repeats the forward
 * kernels' float arithmetic; the adjoints accumulate in real_t (dST [dk, dv] in global memory).
 *
 * Work split: per token, work-item j owns column j of ST and dST for the column phases, and
 * row i for the row phases (dq, dw, dkr), with a barrier between; barriers are never inside a
 * branch (common.cl; PoCL). */

/* One token of the forward, recomputed: STc = g STp + w e^T, e into E [dv]. Work-item j
 * writes column j (the same arithmetic as gdr_sequential and vla_sequential). */
void gd_fwd_token(__global const float *STp, __global float *STc, __local const float *lk,
                  __local const float *lw, __global const float *v, size_t vrow, float g, int has_g, int residual,
                  __global float *E, int dk, int dv) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int j = lid; j < dv; j += wg) {
        float e = v[vrow + j];
        if (residual) {
            float sk = 0.0f;
            for (int i = 0; i < dk; i++) sk += STp[(size_t)i * dv + j] * lk[i];
            e -= has_g ? g * sk : sk;
        }
        for (int i = 0; i < dk; i++) {
            const size_t ij = (size_t)i * dv + j;
            STc[ij] = (has_g ? g * STp[ij] : STp[ij]) + lw[i] * e;
        }
        E[j] = e;
    }
}

/* Column phase of a token's backward: dST += q do^T, de = dST^T w into lde (and dv when dvo is
 * not NULL-like: want_dv), and the work-item's parts of dg (<dST, STp> - de . STp^T kr, when
 * has_g) and of r = do . o' (o' = STc^T q, when want_r). */
void gd_bwd_cols(__global const float *STp, __global const float *STc, __global real_t *dST,
                 __local const float *lq, __local const float *lw, __local const float *lk,
                 __local const real_t *ldo, __local real_t *lde, int has_g, int want_r, __global float *dvo,
                 int want_dv, int b, int t, int h, int T, int H, int dk, int dv, real_t *pdg, real_t *pr) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    real_t dgp = 0, rp = 0;
    for (int j = lid; j < dv; j += wg) {
        const real_t doj = ldo[j];
        real_t de = 0, o = 0, sd = 0, sk = 0;
        for (int i = 0; i < dk; i++) {
            const size_t ij = (size_t)i * dv + j;
            const real_t x = dST[ij] + (real_t)lq[i] * doj;
            dST[ij] = x;
            de += x * (real_t)lw[i];
            if (want_r) o += (real_t)STc[ij] * (real_t)lq[i];
            if (has_g) {
                sd += x * (real_t)STp[ij];
                sk += (real_t)STp[ij] * (real_t)lk[i];
            }
        }
        lde[j] = de;
        if (want_dv) dvo[vla_bthd(b, t, h, j, T, H, dv)] = (float)de;
        rp += doj * o;
        dgp += sd - de * sk;
    }
    *pdg = dgp;
    *pr = rp;
}

/* Row phase, for row i: dq_i = (ST_t do)_i, dw_i = (dST e)_i, dkr_i = -(STp de)_i (without g). */
void gd_bwd_row(__global const float *STp, __global const float *STc, __global const real_t *dST,
                __local const real_t *ldo, __local const float *le, __local const real_t *lde, int residual,
                int i, int dv, real_t *dq, real_t *dw, real_t *dkr) {
    real_t a = 0, c = 0, e = 0;
    const size_t r = (size_t)i * dv;
    for (int j = 0; j < dv; j++) {
        a += (real_t)STc[r + j] * ldo[j];
        c += dST[r + j] * (real_t)le[j];
        if (residual) e += (real_t)STp[r + j] * lde[j];
    }
    *dq = a;
    *dw = c;
    *dkr = -e;
}

/* Last column phase: dST_{t-1} = g (dST - kr de^T) (residual), g dST (not). */
void gd_bwd_carry(__global real_t *dST, __local const float *lk, __local const real_t *lde, float g, int has_g,
                  int residual, int dk, int dv) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int j = lid; j < dv; j += wg) {
        const real_t dej = lde[j];
        for (int i = 0; i < dk; i++) {
            const size_t ij = (size_t)i * dv + j;
            real_t x = dST[ij];
            if (residual) x -= (real_t)lk[i] * dej;
            dST[ij] = has_g ? (real_t)g * x : x;
        }
    }
}

/* The upstream gradient of o' = ST^T q: dO itself, or dO / den with the normaliser's den
 * (den_mode 1: qn + eps, linear; 2: max(qn, eps), VLA's normalised output). */
real_t gd_inv_den(__global const float *qn, size_t bt, int den_mode, float eps) {
    if (den_mode == 0) return 1;
    const real_t x = (real_t)qn[bt];
    return den_mode == 1 ? 1 / (x + (real_t)eps) : 1 / fmax(x, (real_t)eps);
}

/* Bits of the recurrent backward kernels' `outs`. */
#define GO_DQ 1
#define GO_DK 2
#define GO_DV 4
#define GO_DBETA 8
#define GO_DG 16
#define GO_DS0 32
#define GO_DU 64
#define GO_DA0 128

/* Linear attention (residual = 0, w = k~) and DeltaNet (residual = 1, kr = k^, w = beta k^ or
 * k^, optional decay g). One work-group per head (B*H groups); tokens [ts, ts + c) of chunk ci
 * have ts = ci C. Outputs: dqf, and dkey = dkf (linear: dw) or dkh (delta: beta dw + dkr), in
 * the prepared [B*H, T, dk] layout; dv, dbeta, dg in the user's layouts; r [B*H, T] for the
 * normaliser (den_mode != 0); dS0. Scratch per head: CK [nch, dk, dv], Wst [C, dk, dv],
 * We [C, dv] (float), dSTs [dk, dv] (real_t). */
__kernel void grad_gdr(__global const float *kr, __global const float *w, __global const float *qf,
                       __global const float *v, __global const float *gdec, __global const float *beta, int has_g,
                       int has_beta, int residual, __global const float *S_in, int has_S_in,
                       __global const float *dS_end, int has_dS_end, __global const float *dO,
                       __global const float *qn, int den_mode, float eps, __global float *CKs,
                       __global float *Wsts, __global float *Wes, __global real_t *dSTs, __global float *dqf,
                       __global float *dkey, __global float *dvo, __global float *dbeta, __global float *dgo,
                       __global float *r, __global float *dS0, int outs, int T, int H, int dk, int dv, int C,
                       int nch) {
    __local float lq[VLA_MAXD], lw[VLA_MAXD], lk[VLA_MAXD], le[VLA_MAXD];
    __local real_t ldo[VLA_MAXD], lde[VLA_MAXD], red[VLA_MAXWG];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    const size_t ssz = (size_t)dk * dv;
    __global float *CK = CKs + (size_t)bh * nch * ssz, *Wst = Wsts + (size_t)bh * C * ssz;
    __global float *We = Wes + (size_t)bh * C * dv;
    __global real_t *dST = dSTs + (size_t)bh * ssz;
    for (size_t e = lid; e < ssz; e += wg) {
        CK[e] = has_S_in ? S_in[(size_t)bh * ssz + e] : 0.0f;
        dST[e] = has_dS_end ? (real_t)dS_end[(size_t)bh * ssz + e] : 0;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);

    /* Forwards: the checkpoints. Backwards: recompute (the last chunk is still in Wst), walk. */
    for (int pass = 0; pass < 2; pass++)
        for (int n = 0; n < nch; n++) {
            const int ci = pass == 0 ? n : nch - 1 - n, ts = ci * C, c = min(C, T - ts);
            const int nrec = (pass == 0 || ci < nch - 1) ? c : 0;
            for (int tl = 0; tl < nrec; tl++) {
                const int t = ts + tl;
                const size_t row = ((size_t)bh * T + t) * dk;
                for (int i = lid; i < dk; i += wg) {
                    lk[i] = residual ? kr[row + i] : 0.0f;
                    lw[i] = w[row + i];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                const float g = has_g ? gdec[((size_t)b * T + t) * H + h] : 1.0f;
                gd_fwd_token(tl == 0 ? CK + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz, Wst + (size_t)tl * ssz,
                             lk, lw, v, vla_bthd(b, t, h, 0, T, H, dv), g, has_g, residual, We + (size_t)tl * dv, dk,
                             dv);
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
            for (size_t e = lid; e < ((pass == 0 && ci + 1 < nch) ? ssz : 0); e += wg)
                CK[(size_t)(ci + 1) * ssz + e] = Wst[(size_t)(c - 1) * ssz + e];
            barrier(CLK_GLOBAL_MEM_FENCE);
            const int nb = pass == 1 ? c : 0;
            for (int k = 0; k < nb; k++) {
                const int tl = c - 1 - k, t = ts + tl;
                const size_t row = ((size_t)bh * T + t) * dk, bt = ((size_t)b * T + t) * H + h;
                const float g = has_g ? gdec[bt] : 1.0f;
                const real_t inv = gd_inv_den(qn, (size_t)bh * T + t, den_mode, eps);
                for (int i = lid; i < dk; i += wg) {
                    lq[i] = qf[row + i];
                    lw[i] = w[row + i];
                    lk[i] = residual ? kr[row + i] : 0.0f;
                }
                for (int j = lid; j < dv; j += wg) {
                    ldo[j] = (real_t)dO[vla_bthd(b, t, h, j, T, H, dv)] * inv;
                    le[j] = We[(size_t)tl * dv + j];
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                __global const float *STp = tl == 0 ? CK + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz;
                __global const float *STc = Wst + (size_t)tl * ssz;
                real_t pdg, pr;
                gd_bwd_cols(STp, STc, dST, lq, lw, lk, ldo, lde, has_g, den_mode != 0, dvo, (outs & GO_DV) != 0, b,
                            t, h, T, H, dk, dv, &pdg, &pr);
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                const real_t dg = vla_wg_sum_real(pdg, red), rr = vla_wg_sum_real(pr, red);
                const real_t bet = has_beta ? (real_t)beta[bt] : 1;
                real_t pb = 0;
                for (int i = lid; i < dk; i += wg) {
                    real_t dq, dw, dkr;
                    gd_bwd_row(STp, STc, dST, ldo, le, lde, residual, i, dv, &dq, &dw, &dkr);
                    if (outs & GO_DQ) dqf[row + i] = (float)dq;
                    if (outs & GO_DK) dkey[row + i] = (float)(residual ? bet * dw + (real_t)g * dkr : dw);
                    pb += dw * (real_t)lk[i];
                }
                const real_t db = vla_wg_sum_real(pb, red);
                if (lid == 0) {
                    if (outs & GO_DG) dgo[bt] = (float)dg;
                    if (outs & GO_DBETA) dbeta[bt] = (float)db;
                    if (den_mode) r[(size_t)bh * T + t] = (float)rr;
                }
                barrier(CLK_GLOBAL_MEM_FENCE); /* every row has read dST */
                gd_bwd_carry(dST, lk, lde, g, has_g, residual, dk, dv);
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
        }
    if (outs & GO_DS0)
        for (size_t e = lid; e < ssz; e += wg) dS0[(size_t)bh * ssz + e] = (float)dST[e];
}
