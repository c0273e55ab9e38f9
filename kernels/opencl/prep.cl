/* prep.cl: what every mechanism but softmax shares: the per-token preparation of VLA-MATH 1
 * (feature map, key and penalty normalisation, delta's write directions), the states' start
 * and end, the output normaliser, and the Blelloch scan over affine maps (VLA scan and
 * two-level). Built after common.cl. */

/* Bits of prep's `flags`: which prepared arrays to write. */
#define PREP_KF 1    /* kf = phi(k)                          (linear; vla with normalised output) */
#define PREP_KH 2    /* kh = normalize(phi(k))               (delta, vla) */
#define PREP_UU 4    /* uu = s_u normalize(u) or s_u kh      (vla) */
#define PREP_HAS_U 8 /* u is given */
#define PREP_W 16    /* w = beta kh                          (delta with beta) */

/* A row's lanes: L items a token row (b, t, h) (the power of two >= dk, at most the group), so a
 * group's loads and stores run along contiguous rows; wg / L rows a group. One item a row
 * striding dk floats took 17 ms for (8,16,64) T = 8192 on an H100 (77 GB/s). The host sizes the
 * launch with the same rule (ocl_prep_groups, ocl_internal.h). Devices that are not GPUs build
 * this file with CP_ONE_ITEM (as chunkpar.cl): one item a row, L = 1 (PoCL ran the lanes form
 * 3x slower). */
int prep_lanes(int dk, int wg) {
    int L = 1;
    while (L < dk && L < wg) L <<= 1;
    return L;
}

/* Sum of x over the L lanes of each row (lanes lid - lane .. + L - 1 of red); every lane gets it.
 * Barriers: call from uniform control flow. With CP_ONE_ITEM (L = 1) no barrier: PoCL 3.1 ran
 * this function's barriers with L = 1 into a corrupted heap. */
float prep_row_sum(float x, __local float *red, int lid, int lane, int L) {
#ifdef CP_ONE_ITEM
    return x;
#endif
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L / 2; s > 0; s >>= 1) {
        if (lane < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Outputs are [B*H, T, dk]. Normalisation as the CPU backend: x / max(||x||, eps). */
__kernel void prep(__global const float *q, __global const float *k, __global const float *u,
                   __global const float *beta, __global float *qf, __global float *kf, __global float *kh,
                   __global float *uu, __global float *w, int B, int T, int H, int dk, int fmap, int flags,
                   float eps, float u_scale) {
    __local float red[VLA_MAXWG];
#ifdef CP_ONE_ITEM
    const int lid = get_local_id(0), wg = get_local_size(0), L = 1, lane = 0;
#else
    const int lid = get_local_id(0), wg = get_local_size(0), L = prep_lanes(dk, wg), lane = lid % L;
#endif
    const size_t gid = (size_t)get_group_id(0) * (wg / L) + lid / L; /* the row */
    const int live = gid < (size_t)B * T * H;
    const int h = (int)(gid % H), t = (int)((gid / H) % T), b = (int)(gid / ((size_t)H * T));
    const size_t src = gid * dk;                              /* [B, T, H, dk] row */
    const size_t dst = (((size_t)b * H + h) * T + t) * dk;    /* [B*H, T, dk] row */
    float ss = 0.0f;
    if (live)
        for (int i = lane; i < dk; i += L) {
            qf[dst + i] = vla_phi(q[src + i], fmap);
            const float x = vla_phi(k[src + i], fmap);
            if (flags & PREP_KF) kf[dst + i] = x;
            ss += x * x;
        }
    if (!(flags & (PREP_KH | PREP_UU | PREP_W))) return; /* uniform: flags */
    ss = prep_row_sum(ss, red, lid, lane, L);
    const float inv = 1.0f / fmax(sqrt(ss), eps);
    const float bt = (live && (flags & PREP_W)) ? beta[gid] : 1.0f;
    if (live)
        for (int i = lane; i < dk; i += L) {
            const float x = vla_phi(k[src + i], fmap) * inv;
            if (flags & PREP_KH) kh[dst + i] = x;
            if (flags & PREP_W) w[dst + i] = bt * x;
            if ((flags & PREP_UU) && !(flags & PREP_HAS_U)) uu[dst + i] = u_scale * x;
        }
    if ((flags & PREP_UU) && (flags & PREP_HAS_U)) { /* the raw u: no feature map */
        float su = 0.0f;
        if (live)
            for (int i = lane; i < dk; i += L) su += u[src + i] * u[src + i];
        su = prep_row_sum(su, red, lid, lane, L);
        const float iu = u_scale / fmax(sqrt(su), eps);
        if (live)
            for (int i = lane; i < dk; i += L) uu[dst + i] = u[src + i] * iu;
    }
}

/* The output normaliser shared by linear attention and VLA's normalised output:
 *   n_t = n_{t-1} + kf_t,  o_t /= den_t,  den = q~.n + eps (linear) or max(q~.n, eps) (vla).
 * One work-group per head, sequential over t (n is a running sum); work-item i owns n_i for
 * i = lid, lid + WG, ... (at most VLA_PER of them). n_in may equal n_out (each group reads its
 * head's slice before it writes it). */
__kernel void norm_out(__global float *o, __global const float *qf, __global const float *kf,
                       __global const float *n_in, __global float *n_out, int has_in, int has_out, int T, int H,
                       int dk, int dv, float eps, int linear_style) {
    __local float red[VLA_MAXWG];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    float n[VLA_PER];
    vla_norm_load(n, n_in, has_in, bh, dk);
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)bh * T + t) * dk;
        const float qn = vla_norm_step(n, qf, kf, row, dk, red);
        const float inv = 1.0f / (linear_style ? qn + eps : fmax(qn, eps));
        for (int j = lid; j < dv; j += wg) o[vla_bthd(b, t, h, j, T, H, dv)] *= inv;
    }
    if (has_out)
        for (int m = 0; m < VLA_PER; m++) {
            const int i = lid + m * wg;
            if (i < dk) n_out[(size_t)bh * dk + i] = n[m];
        }
}

/* VLA's A state, one element per work-item over B*H*dk*dk.
 * init_a_real: the working copy of the sequential and scan algorithms, real_t and transposed
 * (At[j][i] = A[i][j]) so the work-item that owns row i of A reads coalesced; from A_in or
 * I / lambda0 (inv_lambda is the float the CPU backend uses too). */
__kernel void init_a_real(__global const float *A_in, int has_in, __global real_t *At, int BH, int dk,
                          float inv_lambda) {
    const size_t e = get_global_id(0), n = (size_t)dk * dk;
    if (e >= (size_t)BH * n) return;
    const size_t head = e / n, r = e % n;
    const int i = (int)(r / dk), j = (int)(r % dk);
    At[head * n + (size_t)j * dk + i] = has_in ? (real_t)A_in[e] : (i == j ? (real_t)inv_lambda : (real_t)0);
}

__kernel void store_a_real(__global const real_t *At, __global float *A_out, int BH, int dk) {
    const size_t e = get_global_id(0), n = (size_t)dk * dk;
    if (e >= (size_t)BH * n) return;
    const size_t head = e / n, r = e % n;
    const int i = (int)(r / dk), j = (int)(r % dk);
    A_out[e] = (float)At[head * n + (size_t)j * dk + i];
}

/* init_a_f32: the chunked algorithms' float A, in the library's layout. */
__kernel void init_a_f32(__global const float *A_in, int has_in, __global float *A, int BH, int dk,
                         float inv_lambda) {
    const size_t e = get_global_id(0), n = (size_t)dk * dk;
    if (e >= (size_t)BH * n) return;
    const size_t r = e % n;
    const int i = (int)(r / dk), j = (int)(r % dk);
    A[e] = has_in ? A_in[e] : (i == j ? inv_lambda : 0.0f);
}

/* One level of the Blelloch (Brent-Kung) scan over nmaps affine maps per head, in place:
 * for pair p, i = first_i + p * step, maps[i] = maps[i - s] then maps[i]. Up-sweep levels use
 * first_i = 2s - 1, step = 2s; down-sweep levels first_i = 3s - 1, step = 2s. The pairs of one
 * level are independent: one work-group per (head, pair). */
__kernel void affine_level(__global float *maps, int nmaps, int dk, int dv, int s, int first_i, int step,
                           int npairs) {
    __local float rows[VLA_RB * 2 * VLA_MAXD];
    const int g = get_group_id(0), bh = g / npairs, p = g % npairs, i = first_i + p * step;
    const size_t msz = (size_t)dk * (dk + dv);
    __global float *base = maps + (size_t)bh * nmaps * msz;
    vla_affine_compose(base + (size_t)(i - s) * msz, base + (size_t)i * msz, dk, dv, rows);
}

/* dst[bh, slot] = map applied to ST0[bh]: X -> M X + N. One work-group per (head, slot),
 * nslot slots per head. With copy_first, slot 0 is ST0 itself and slot s > 0 applies map
 * map0 + s - 1 (two-level: the start state of every segment); otherwise slot s applies map
 * map0 + s (scan: the final state from the last prefix map). */
__kernel void affine_apply(__global const float *maps, int nmaps, int map0, int copy_first,
                           __global const float *ST0, __global float *dst, int nslot, int dk, int dv) {
    const int g = get_group_id(0), bh = g / nslot, slot = g % nslot, lid = get_local_id(0), wg = get_local_size(0);
    const size_t ssz = (size_t)dk * dv;
    __global const float *x = ST0 + (size_t)bh * ssz;
    __global float *y = dst + (size_t)g * ssz;
    if (copy_first && slot == 0) {
        for (int e = lid; e < dk * dv; e += wg) y[e] = x[e];
        return;
    }
    const int W = dk + dv;
    __global const float *m = maps + ((size_t)bh * nmaps + map0 + slot - copy_first) * (size_t)dk * W;
    for (int e = lid; e < dk * dv; e += wg) {
        const int i = e / dv, j = e - i * dv;
        float s = m[(size_t)i * W + dk + j];
        for (int p = 0; p < dk; p++) s += m[(size_t)i * W + p] * x[(size_t)p * dv + j];
        y[e] = s;
    }
}
