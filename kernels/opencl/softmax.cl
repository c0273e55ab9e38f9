/* softmax.cl: causal softmax attention as a fused online softmax (flash-attention style): no
 * T x T matrix is stored. o_t = sum_{s<=t} softmax_s(q_t . k_s * scale) v_s (VLA-MATH 1).
 *
 * One work-group per (head, tile of QB query rows); WG = QB * SM_NC work-items: item
 * (r, lane) = (lid / SM_NC, lid % SM_NC) owns query row i0 + r and the output columns
 * lane, lane + SM_NC, ... Everything lives in local memory (dynamic: `lmem`, sized by the host):
 * the tile's queries, a tile of KB keys and values (KB chosen by the host to fit), the scores,
 * the accumulators [QB, dv], and each item's running max and sum. Per key tile:
 *   1. stage K and V rows;       2. scores sc = Q K^T * scale (causal part);
 *   3. each item: its row's new running max m (NaN check; the row's items all compute it);
 *   4. sc = exp(sc - m), each element once;
 *   5. each item: acc = acc * exp(m_old - m) + P V on its columns, l likewise.
 * The same recurrence as the CPU backend's query_tile; P V runs over the causal keys only, so a
 * NaN in a future value does not reach earlier outputs (0 * NaN is NaN).
 *
 * Padded strides: K rows dk + 1 floats apart and score rows KB + 1. In step 2 (KB = 32) the 32
 * items of a warp share a query row and take 32 consecutive keys: at a stride of dk = 32 or 64
 * floats all of them read one bank at each p (32-way conflicts: the inner loop run 32 times over
 * on NVIDIA's 32 banks); at dk + 1 they fall in 32 banks. In steps 3-5 a warp holds 4 query rows
 * that read their scores at the same c: at a stride of KB = 32, one bank (4-way), at KB + 1,
 * four. The gain is counted, not timed (benchmarks/opencl_speed.sh times it on a GPU).
 *
 * Used on GPUs only. PoCL 5.0 (Ubuntu 24.04's pocl-opencl-icd) returns wrong outputs for this
 * kernel (all softmax cases of vla-check, errors of ~1 or inf), in every variant tried: state in
 * private or local memory, fmax or comparisons, with or without the NaN check, each work-group
 * method (cbs, loopvec), and the outputs change with the number of compute units (one: the
 * 64-item cases pass, the 128-item ones fail); PoCL 3.1 (Debian 12, our CI) and NVIDIA's OpenCL
 * (H200) pass every case. The cause is not found; CPU devices run softmax_rows below instead
 * (VLA_OPENCL_SOFTMAX_TILED=1 runs this kernel there too, for tests: ocl_ops.c). */

#define SM_NC 8 /* work-items per query row */

__kernel void softmax_fused(__global const float *q, __global const float *k, __global const float *v,
                            __global float *o, int T, int H, int dk, int dv, float scale, int ntiles, int KB,
                            __local float *lmem) {
    const int wg = get_local_size(0), QB = wg / SM_NC, lid = get_local_id(0);
    const int g = get_group_id(0), bh = g / ntiles, tile = g % ntiles, b = bh / H, h = bh % H;
    const int i0 = tile * QB, i1 = min(i0 + QB, T), nq = i1 - i0;
    const int r = lid / SM_NC, lane = lid % SM_NC, i = i0 + r;
    const int ks = dk + 1, ss1 = KB + 1;       /* padded row strides of Kt and sc (above) */
    __local float *Qt = lmem;                 /* [QB, dk] */
    __local float *Kt = Qt + (size_t)QB * dk; /* [KB, dk + 1] */
    __local float *Vt = Kt + (size_t)KB * ks; /* [KB, dv] */
    __local float *sc = Vt + (size_t)KB * dv; /* [QB, KB + 1] scores, then probabilities */
    __local float *acc = sc + (size_t)QB * ss1; /* [QB, dv] accumulators: item (r, lane) owns columns lane + m SM_NC */
    __local float *mL = acc + (size_t)QB * dv; /* [WG] each item's running max */
    __local float *lL = mL + wg;               /* [WG] each item's running sum */
    __local float *xL = lL + wg;               /* [WG] each item's new max within a tile */
    __local float *ar = acc + (size_t)r * dv;
    __local float *pr = sc + r * ss1;

    for (int col = lane; col < dv; col += SM_NC) ar[col] = 0.0f;
    mL[lid] = -INFINITY;
    lL[lid] = 0.0f;
    for (int e = lid; e < nq * dk; e += wg) {
        const int rr = e / dk, p = e - rr * dk;
        Qt[e] = q[vla_bthd(b, i0 + rr, h, p, T, H, dk)];
    }
    for (int j0 = 0; j0 < i1; j0 += KB) {
        const int nk = min(KB, i1 - j0);
        const int last = r < nq ? min(i - j0 + 1, nk) : 0; /* causal: keys j <= i */
        for (int e = lid; e < nk * dk; e += wg) {
            const int ss = e / dk, p = e - ss * dk;
            Kt[ss * ks + p] = k[vla_bthd(b, j0 + ss, h, p, T, H, dk)];
        }
        for (int e = lid; e < nk * dv; e += wg) {
            const int ss = e / dv, p = e - ss * dv;
            Vt[e] = v[vla_bthd(b, j0 + ss, h, p, T, H, dv)];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < QB * KB; e += wg) { /* scores, causal part */
            const int rr = e / KB, ss = e - rr * KB;
            float s = 0.0f;
            if (rr < nq && ss < nk && j0 + ss <= i0 + rr) {
                for (int p = 0; p < dk; p++) s += Qt[rr * dk + p] * Kt[ss * ks + p];
                s *= scale;
            }
            sc[rr * ss1 + ss] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        {
            float mx = mL[lid];
            int isn = 0;
            for (int c = 0; c < last; c++) {
                mx = fmax(mx, pr[c]);
                isn |= isnan(pr[c]) ? 1 : 0;
            }
            xL[lid] = isn ? NAN : mx; /* NaN propagates: never finite garbage from a NaN input */
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* every item has read its row's scores */
        for (int c = lane; c < KB; c += SM_NC) pr[c] = c < last ? exp(pr[c] - xL[lid]) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (last > 0) {
            const float mx = xL[lid];
            /* The first tile's correction multiplies zeros: 0, not exp(-inf - mx). */
            const float corr = j0 == 0 ? 0.0f : exp(mL[lid] - mx);
            float sum = 0.0f;
            for (int c = 0; c < last; c++) sum += pr[c];
            for (int col = lane; col < dv; col += SM_NC) {
                float x = ar[col] * corr;
                for (int c = 0; c < last; c++) x += pr[c] * Vt[c * dv + col]; /* not masked keys: 0 * NaN */
                ar[col] = x;
            }
            lL[lid] = lL[lid] * corr + sum;
            mL[lid] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* before the next tile overwrites Kt, Vt, sc */
    }
    if (r < nq) {
        const float inv = 1.0f / lL[lid];
        __global float *oi = o + vla_bthd(b, i, h, 0, T, H, dv);
        for (int col = lane; col < dv; col += SM_NC) oi[col] = ar[col] * inv;
    }
}

/* One work-item per query row, for devices that are not GPUs: the same online softmax in private
 * memory, no local memory and no barriers (a CPU runs rows as work-items well, and PoCL 5.0
 * computes this one correctly where it gets softmax_fused wrong). acc: dv <= 256 floats. A NaN
 * score makes the whole row NaN; future keys and values are never read. */
__kernel void softmax_rows(__global const float *q, __global const float *k, __global const float *v,
                           __global float *o, int T, int H, int dk, int dv, float scale, int nrows) {
    const int gid = get_global_id(0);
    if (gid >= nrows) return;
    const int bh = gid / T, i = gid - bh * T, b = bh / H, h = bh % H;
    __global const float *qi = q + vla_bthd(b, i, h, 0, T, H, dk);
    float acc[256];
    for (int c = 0; c < dv; c++) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int isn = 0;
    for (int j = 0; j <= i; j++) {
        __global const float *kj = k + vla_bthd(b, j, h, 0, T, H, dk);
        __global const float *vj = v + vla_bthd(b, j, h, 0, T, H, dv);
        float s = 0.0f;
        for (int p = 0; p < dk; p++) s += qi[p] * kj[p];
        s *= scale;
        isn |= isnan(s) ? 1 : 0;
        const float mn = fmax(m, s);
        const float corr = j == 0 ? 0.0f : exp(m - mn); /* the first key: nothing to rescale */
        const float pj = exp(s - mn);
        l = l * corr + pj;
        for (int c = 0; c < dv; c++) acc[c] = acc[c] * corr + pj * vj[c];
        m = mn;
    }
    __global float *oi = o + vla_bthd(b, i, h, 0, T, H, dv);
    const float inv = 1.0f / l;
    for (int c = 0; c < dv; c++) oi[c] = isn ? NAN : acc[c] * inv;
}
