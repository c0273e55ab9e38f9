/* grad_prep.cl: the backward op's (VLA-MATH 5) kernels around the recurrences: the output
 * normaliser of linear attention and VLA's normalised output, and the chain rule back through
 * prep.cl's preparation (feature map, normalize(k), normalize(u), s_u). Built after common.cl.
 *
 * The recurrent kernels (grad_linear_delta.cl, grad_vla.cl) leave gradients with respect to the
 * prepared arrays, [B*H, T, dk] like prep.cl's outputs: dqf (of q~ = phi(q)), dkf (of k~ =
 * phi(k)), dkh (of k^ = normalize(k~)), duu (of the penalty vectors u_t). */

/* The normaliser's denominators, recomputed by norm_out's own code (vla_norm_step, common.cl:
 * the same float sums): qn_t = q~_t . n_t, n_t = n_{t-1} + k~_t.
 * qn [B*H, T]. One work-group per head, work-item i owns n_i (i = lid, lid + WG, ...). */
__kernel void grad_norm_den(__global const float *qf, __global const float *kf, __global const float *n_in,
                            int has_in, __global float *qn, int T, int dk) {
    __local float red[VLA_MAXWG];
    const int bh = get_group_id(0), lid = get_local_id(0);
    float n[VLA_PER];
    vla_norm_load(n, n_in, has_in, bh, dk);
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)bh * T + t) * dk;
        const float s = vla_norm_step(n, qf, kf, row, dk, red);
        if (lid == 0) qn[(size_t)bh * T + t] = s;
    }
}

/* d(loss)/d(den_t), from r_t = do'_t . o'_t (the recurrent kernel's dot of the scaled upstream
 * gradient do' = dO / den with the unnormalised output o' = S q~): o = o' / den gives
 * dden = -dO . o' / den^2 = -r / den. den = qn + eps (linear) or max(qn, eps) (VLA: 0 where
 * the floor binds, VLA-MATH 5). */
real_t grad_dden(float qn, float r, float eps, int linear_style) {
    if (linear_style) return -(real_t)r / ((real_t)qn + (real_t)eps);
    return !(qn <= eps) ? -(real_t)r / (real_t)qn : (real_t)0; /* NaN stays NaN */
}

/* Backward of the normaliser's n recurrence: dqf_t += dden_t n_t (forward over t), then
 * dn_{t-1} = dn_t + dden_t q~_t and dkf_t (+)= dn_t (backward over t, from dn_end); dn_0 at the
 * end. Elementwise in i once the dden_t are known, so one work-item per (head, i), no group
 * communication. dkf is added to when add_dkf (linear: the write direction's gradient is there
 * already), else overwritten. */
__kernel void grad_norm(__global const float *qf, __global const float *kf, __global const float *qn,
                        __global const float *r, __global const float *n_in, int has_n_in,
                        __global const float *dn_end, int has_dn_end, __global float *dqf, __global float *dkf,
                        int add_dkf, __global float *dn0, int has_dn0, int BH, int T, int dk, float eps,
                        int linear_style) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)BH * dk) return;
    const int bh = (int)(gid / dk), i = (int)(gid % dk);
    real_t n = has_n_in ? (real_t)n_in[gid] : 0;
    for (int t = 0; t < T; t++) {
        const size_t e = ((size_t)bh * T + t) * dk + i;
        n += (real_t)kf[e];
        const real_t dd = grad_dden(qn[(size_t)bh * T + t], r[(size_t)bh * T + t], eps, linear_style);
        dqf[e] = (float)((real_t)dqf[e] + dd * n);
    }
    real_t dn = has_dn_end ? (real_t)dn_end[gid] : 0;
    for (int t = T - 1; t >= 0; t--) {
        const size_t e = ((size_t)bh * T + t) * dk + i;
        const real_t dd = grad_dden(qn[(size_t)bh * T + t], r[(size_t)bh * T + t], eps, linear_style);
        dn += dd * (real_t)qf[e];
        dkf[e] = (float)((add_dkf ? (real_t)dkf[e] : 0) + dn);
    }
    if (has_dn0) dn0[gid] = (float)dn;
}

/* d normalize(x): dx = (dy - y (y . dy)) / ||x|| where ||x|| > eps, dy / eps where the floor
 * binds (VLA-MATH 5). With xx = x . x and xd = x . dy this is dx = ca dy - cx x; returns ca,
 * writes cx. A NaN norm takes the first branch, so the NaN reaches dx. */
real_t grad_norm_coef(real_t xx, real_t xd, float eps, real_t *cx) {
    const real_t nx = sqrt(xx);
    if (!(nx <= (real_t)eps)) {
        *cx = xd / (nx * nx * nx);
        return 1 / nx;
    }
    *cx = 0;
    return 1 / (real_t)eps;
}

/* phi'(x): 1 (none); elu + 1: 1 for x > 0, exp(x) for x <= 0 (VLA-MATH 5). */
real_t grad_dphi(float x, int fmap) { return fmap == 1 ? (x > 0.0f ? (real_t)1 : (real_t)exp(x)) : (real_t)1; }

/* Bits of grad_prep's `flags`: which prepared gradients exist and which outputs to write. */
#define GP_DQF 1     /* dqf is given                             */
#define GP_DKF 2     /* dkf is given (linear; VLA normalised)    */
#define GP_DKH 4     /* dkh is given (delta, VLA)                */
#define GP_DUU 8     /* duu is given (VLA)                       */
#define GP_HAS_U 16  /* u is given: duu goes to du, else to dkh  */
#define GP_OUT_DQ 32
#define GP_OUT_DK 64
#define GP_OUT_DU 128

/* The chain rule back through prep: per token row (b, t, h), one work-item (as prep):
 *   dkh += s_u duu (u not given: u = s_u k^),   dkf += dnormalize(k~; dkh),
 *   dk = phi'(k) dkf,   dq = phi'(q) dqf,   du = s_u dnormalize(u; duu) (u given).
 * Two passes over each row (the dots, then the elementwise result), so no private arrays.
 * Outputs in the user's [B, T, H, dk] layout; each is written only when its flag is set. */
__kernel void grad_prep(__global const float *q, __global const float *k, __global const float *u,
                        __global const float *dqf, __global const float *dkf, __global const float *dkh,
                        __global const float *duu, __global float *dq, __global float *dk, __global float *du,
                        int B, int T, int H, int d, int fmap, int flags, float eps, float u_scale) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * T * H) return;
    const int h = (int)(gid % H), t = (int)((gid / H) % T), b = (int)(gid / ((size_t)H * T));
    const size_t src = gid * d;                           /* [B, T, H, dk] row */
    const size_t pre = (((size_t)b * H + h) * T + t) * d; /* [B*H, T, dk] row */
    const real_t su = (real_t)u_scale;
    if (flags & GP_OUT_DQ)
        for (int i = 0; i < d; i++)
            dq[src + i] = (flags & GP_DQF) ? (float)(grad_dphi(q[src + i], fmap) * (real_t)dqf[pre + i]) : 0.0f;
    if ((flags & GP_OUT_DU) && (flags & GP_HAS_U)) {
        real_t xx = 0, xd = 0, cx;
        for (int i = 0; i < d; i++) {
            const real_t x = (real_t)u[src + i], dy = (flags & GP_DUU) ? su * (real_t)duu[pre + i] : 0;
            xx += x * x;
            xd += x * dy;
        }
        const real_t ca = grad_norm_coef(xx, xd, eps, &cx);
        for (int i = 0; i < d; i++) {
            const real_t dy = (flags & GP_DUU) ? su * (real_t)duu[pre + i] : 0;
            du[src + i] = (float)(ca * dy - cx * (real_t)u[src + i]);
        }
    }
    if (!(flags & GP_OUT_DK)) return;
    /* dy = d(loss)/d(k^): its own gradient, and s_u duu when u = s_u k^. */
    const int dkh_on = (flags & GP_DKH) != 0, duu_on = (flags & GP_DUU) && !(flags & GP_HAS_U);
    real_t xx = 0, xd = 0, cx;
    for (int i = 0; i < d; i++) {
        const real_t x = (real_t)vla_phi(k[src + i], fmap);
        const real_t dy = (dkh_on ? (real_t)dkh[pre + i] : 0) + (duu_on ? su * (real_t)duu[pre + i] : 0);
        xx += x * x;
        xd += x * dy;
    }
    const real_t ca = grad_norm_coef(xx, xd, eps, &cx);
    for (int i = 0; i < d; i++) {
        const real_t x = (real_t)vla_phi(k[src + i], fmap);
        const real_t dy = (dkh_on ? (real_t)dkh[pre + i] : 0) + (duu_on ? su * (real_t)duu[pre + i] : 0);
        real_t g = (dkh_on || duu_on) ? ca * dy - cx * x : 0; /* through k^ */
        if (flags & GP_DKF) g += (real_t)dkf[pre + i];       /* k~ used directly */
        dk[src + i] = (float)(grad_dphi(k[src + i], fmap) * g);
    }
}
