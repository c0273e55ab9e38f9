/* grad_softmax.cl: the backward op (VLA-MATH 5) of causal softmax attention, flash-attention
 * style: no T x T matrix. With P_ts = exp(s_ts - m_t) / l_t (s_ts = scale q_t . k_s, s <= t),
 * D_t = dO_t . o_t = sum_s P_ts (dO_t . v_s):
 *
 *   dq_t = scale sum_{s<=t} P_ts (dO_t . v_s - D_t) k_s
 *   dk_s = scale sum_{t>=s} P_ts (dO_t . v_s - D_t) q_t,    dv_s = sum_{t>=s} P_ts dO_t
 *
 * Three kernels, one work-item per row as softmax_rows (the forward on CPU devices): the row
 * statistics m_t, l_t and D_t first (the online softmax of the forward, with D carried the same
 * way), then dq per query row and dk, dv per key row, each recomputing the probabilities it
 * needs. Rows are b*H*T + h*T + t ([B*H, T]); scores are computed in float as the forward
 * computes them, the sums in real_t. Accumulators: real_t arrays of dk (and dv) entries in
 * private memory. A NaN score makes the row's statistics NaN, and with them every gradient the
 * row touches. */

__kernel void sm_grad_stats(__global const float *q, __global const float *k, __global const float *v,
                            __global const float *dO, __global float *mrow, __global float *lrow,
                            __global float *Drow, int T, int H, int dk, int dv, float scale, int nrows) {
    const int gid = get_global_id(0);
    if (gid >= nrows) return;
    const int bh = gid / T, i = gid - bh * T, b = bh / H, h = bh % H;
    __global const float *qi = q + vla_bthd(b, i, h, 0, T, H, dk);
    __global const float *gi = dO + vla_bthd(b, i, h, 0, T, H, dv);
    float m = -INFINITY, l = 0.0f;
    real_t D = 0;
    int isn = 0;
    for (int j = 0; j <= i; j++) {
        __global const float *kj = k + vla_bthd(b, j, h, 0, T, H, dk);
        __global const float *vj = v + vla_bthd(b, j, h, 0, T, H, dv);
        float s = 0.0f;
        for (int p = 0; p < dk; p++) s += qi[p] * kj[p];
        s *= scale;
        isn |= isnan(s) ? 1 : 0;
        const float mn = fmax(m, s);
        const float corr = j == 0 ? 0.0f : exp(m - mn);
        const float pj = exp(s - mn);
        l = l * corr + pj;
        real_t gv = 0;
        for (int c = 0; c < dv; c++) gv += (real_t)gi[c] * (real_t)vj[c];
        D = D * (real_t)corr + (real_t)pj * gv;
        m = mn;
    }
    mrow[gid] = isn ? NAN : m;
    lrow[gid] = l;
    Drow[gid] = (float)(D / (real_t)l);
}

/* P_ts (dO_t . v_s - D_t) for the row statistics of t; writes P_ts to *p. */
real_t sm_grad_ds(__global const float *qt, __global const float *ks, __global const float *gt,
                  __global const float *vs, float m, float l, float D, int dk, int dv, float scale, real_t *p) {
    float s = 0.0f;
    for (int c = 0; c < dk; c++) s += qt[c] * ks[c];
    s *= scale;
    const real_t P = (real_t)exp(s - m) / (real_t)l;
    real_t gv = 0;
    for (int c = 0; c < dv; c++) gv += (real_t)gt[c] * (real_t)vs[c];
    *p = P;
    return P * (gv - (real_t)D);
}

__kernel void sm_grad_dq(__global const float *q, __global const float *k, __global const float *v,
                         __global const float *dO, __global const float *mrow, __global const float *lrow,
                         __global const float *Drow, __global float *dq, int T, int H, int dk, int dv, float scale,
                         int nrows) {
    const int gid = get_global_id(0);
    if (gid >= nrows) return;
    const int bh = gid / T, i = gid - bh * T, b = bh / H, h = bh % H;
    __global const float *qi = q + vla_bthd(b, i, h, 0, T, H, dk);
    __global const float *gi = dO + vla_bthd(b, i, h, 0, T, H, dv);
    const float m = mrow[gid], l = lrow[gid], D = Drow[gid];
    real_t acc[VLA_MAXD];
    for (int c = 0; c < dk; c++) acc[c] = 0;
    for (int j = 0; j <= i; j++) {
        __global const float *kj = k + vla_bthd(b, j, h, 0, T, H, dk);
        real_t p;
        const real_t ds = sm_grad_ds(qi, kj, gi, v + vla_bthd(b, j, h, 0, T, H, dv), m, l, D, dk, dv, scale, &p);
        for (int c = 0; c < dk; c++) acc[c] += ds * (real_t)kj[c];
    }
    __global float *out = dq + vla_bthd(b, i, h, 0, T, H, dk);
    for (int c = 0; c < dk; c++) out[c] = (float)((real_t)scale * acc[c]);
}

/* dk and dv of key row s (want_dk, want_dv say which to write). */
__kernel void sm_grad_dkv(__global const float *q, __global const float *k, __global const float *v,
                          __global const float *dO, __global const float *mrow, __global const float *lrow,
                          __global const float *Drow, __global float *dk_out, __global float *dv_out, int want_dk,
                          int want_dv, int T, int H, int dk, int dv, float scale, int nrows) {
    const int gid = get_global_id(0);
    if (gid >= nrows) return;
    const int bh = gid / T, s = gid - bh * T, b = bh / H, h = bh % H;
    __global const float *ks = k + vla_bthd(b, s, h, 0, T, H, dk);
    __global const float *vs = v + vla_bthd(b, s, h, 0, T, H, dv);
    real_t ak[VLA_MAXD], av[VLA_MAXD];
    for (int c = 0; c < dk; c++) ak[c] = 0;
    for (int c = 0; c < dv; c++) av[c] = 0;
    for (int t = s; t < T; t++) {
        const int row = bh * T + t;
        __global const float *qt = q + vla_bthd(b, t, h, 0, T, H, dk);
        __global const float *gt = dO + vla_bthd(b, t, h, 0, T, H, dv);
        real_t p;
        const real_t ds = sm_grad_ds(qt, ks, gt, vs, mrow[row], lrow[row], Drow[row], dk, dv, scale, &p);
        if (want_dk)
            for (int c = 0; c < dk; c++) ak[c] += ds * (real_t)qt[c];
        if (want_dv)
            for (int c = 0; c < dv; c++) av[c] += p * (real_t)gt[c];
    }
    if (want_dk) {
        __global float *out = dk_out + vla_bthd(b, s, h, 0, T, H, dk);
        for (int c = 0; c < dk; c++) out[c] = (float)((real_t)scale * ak[c]);
    }
    if (want_dv) {
        __global float *out = dv_out + vla_bthd(b, s, h, 0, T, H, dv);
        for (int c = 0; c < dv; c++) out[c] = (float)av[c];
    }
}
