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
 * Used on GPUs where softmax_rb below does not fit (dv > 128, dk > 132) or where
 * VLA_OPENCL_SOFTMAX_KERNEL=fused asks for it. PoCL 5.0 (Ubuntu 24.04's pocl-opencl-icd) returns
 * wrong outputs for this kernel (all softmax cases of vla-check, errors of ~1 or inf), in every
 * variant tried: state in private or local memory, fmax or comparisons, with or without the NaN
 * check, each work-group method (cbs, loopvec), and the outputs change with the number of compute
 * units (one: the 64-item cases pass, the 128-item ones fail); PoCL 3.1 (Debian 12, our CI) and
 * NVIDIA's OpenCL (H200) pass every case, and Oclgrind 21.10 (--data-races --uninitialized, with
 * its checks of barriers every item reaches and of bounds) reports nothing on vla-check's softmax
 * cases. The cause is not found; CPU devices run softmax_rows below instead
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

/* ---- softmax_rb64, softmax_rb128: the same online softmax, register-blocked ----
 *
 * One work-group per (head, tile of QB query rows), WG = 4 QB items (QB = 64, 32 or 16: the host
 * takes the largest whose local memory fits, see ocl_ops.c) laid out as a grid of QB/4 x 16:
 * item (ty, tx) = (lid / 16, lid % 16) owns query rows 4 ty .. 4 ty + 3 of the tile, keys
 * tx, tx + 16, tx + 32, tx + 48 of each 64-key tile, and output columns 4 tx + 64 j .. + 3
 * (j < NJ: softmax_rb64 takes dv <= 64, NJ = 1; softmax_rb128 dv <= 128, NJ = 2). Per key tile:
 *   1. stage K rows [64][dks] (zero past the keys and past dk);
 *   2. scores: a 4 x 4 block in registers, over dk in steps of 4: four float4 of Q (one a row) and
 *      four of K (one a key), 64 multiply-adds; causal mask per element; each row's partial max
 *      over the item's 4 keys goes to red;
 *   3. each row's new max from the 16 partial maxima (the 16 items of a row compute the same
 *      value in the same order, so m and the correction agree without further exchange); p =
 *      exp(s - m) for unmasked scores, 0 for masked ones; p goes to Pt [64][qbs] (key-major, four
 *      rows a float4); V rows are staged where K was;
 *   4. P V: per key one float4 of P (the item's 4 rows) and NJ float4 of V, 16 NJ multiply-adds.
 * Each item keeps its own partial row sums l (its keys only; the same m, so the same rescaling);
 * the 16 partials of a row are added through red at the end.
 *
 * NaN: a NaN score of an unmasked key gives p = NaN, so l and every accumulator of its row are
 * NaN from there (p * v is NaN for any v) and so is the row's output, as with softmax_fused
 * (fmax skips the NaN, so m itself stays finite). Masked scores are replaced (a select), not
 * multiplied, and in step 4 a masked key's term is skipped by a select, so a NaN in a future key
 * or value never reaches an earlier output. Keys past T (zero rows) are masked by the same test.
 *
 * Bank conflicts (NVIDIA: 32 banks of 4 bytes): K, Q, Pt and red rows are dks or qbs floats
 * apart, a multiple of 4 whose quarter is odd (rb_pad), so the 16 float4 a half-warp reads at
 * consecutive keys (K) or writes at consecutive keys (Pt) cover all 32 banks in two passes; the
 * Q, Pt and red float4 a half-warp reads are one address (a broadcast).
 *
 * Counted per work-item and 64-key tile at dk = dv = 64 (no timing): softmax_fused (WG 128,
 * QB 16, two 32-key tiles) does 1024 multiply-adds (512 Q K, 512 P V) with about 2200 scalar
 * local loads (two per multiply-add in both products, plus the row reads of the max and sum
 * steps): ~2.1 loads a multiply-add. softmax_rb64 (WG 128, QB 32) does 2048 multiply-adds (1024
 * Q K, 1024 P V) with 128 + 16 + 128 = 272 float4 local loads (Q K, the row maxima, P V): 0.13
 * load instructions and 0.53 words a multiply-add, 16x fewer load instructions; and a group
 * stages each K and V tile for 32 query rows, not 16 (half the global/L2 reads). On a GPU the
 * old kernel is bound by local-memory instructions; this one should be bound by the
 * multiply-adds. On an H100 it runs 1.9-2.3x softmax_fused's speed, so it is GPUs' default
 * (ocl_ops.c's softmax_rb; VLA_OPENCL_SOFTMAX_KERNEL=fused|rb forces either). Shapes whose tiles
 * do not fit (dv > 128, or dk > 132 in 48 KiB) run softmax_fused. */

/* RB_NATIVE_EXP (the host's, on NVIDIA's driver): native_exp, which took softmax_rb at (1,4,32)
 * T = 32768 from 43.4 to 27.5 ms on an H100 (exp compiles to a longer, more exact sequence there),
 * at a largest vla-check error of 1.8e-7 (tolerance 1e-5). Elsewhere native_exp's precision is
 * the implementation's, so exp. */
#ifdef RB_NATIVE_EXP
#define RB_EXP native_exp
#else
#define RB_EXP exp
#endif
#define RB_NTX 16          /* items along the keys of a tile and along the output columns */
#define RB_KB (4 * RB_NTX) /* keys per tile */

/* A local row stride for n floats: a multiple of 4 (float4 access) whose quarter is odd (above).
 * ocl_ops.c's sm_rb_pad is the same. */
int rb_pad(int n) {
    const int n4 = (n + 3) & ~3;
    return (n4 & 7) ? n4 : n4 + 4;
}

/* Rows t0 .. t0 + rows - 1 of a [B, T, H, D] tensor into dst (row stride ds): w columns a row, zero
 * from column D and from row n on. Consecutive items take consecutive columns (coalesced reads). */
void rb_stage(__local float *dst, int ds, __global const float *src, int b, int t0, int h, int T, int H, int D,
              int n, int rows, int w) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    const int dr = wg / w, dc = wg - dr * w;
    int r = lid / w, c = lid - r * w;
    while (r < rows) {
        dst[r * ds + c] = r < n && c < D ? src[vla_bthd(b, t0 + r, h, c, T, H, D)] : 0.0f;
        r += dr;
        c += dc;
        if (c >= w) {
            c -= w;
            r++;
        }
    }
}

/* NJ: 1 or 2, a constant at each call below, so acc is NJ * 16 registers. lmem must be 16-byte
 * aligned (the float4 accesses below): the kernels take it as __local float4 *, since OpenCL only
 * promises a __local float * argument 4-byte alignment (OpenCL C 6.1.5); every region and row
 * stride below is a multiple of 4 floats, so each float4 access stays aligned. */
void softmax_rb(__global const float *q, __global const float *k, __global const float *v, __global float *o,
                int T, int H, int dk, int dv, float scale, int ntiles, __local float *lmem, const int NJ) {
    const int wg = get_local_size(0), QB = wg / 4, lid = get_local_id(0);
    const int ty = lid / RB_NTX, tx = lid % RB_NTX, r0 = 4 * ty;
    const int g = get_group_id(0), bh = g / ntiles, tile = g % ntiles, b = bh / H, h = bh % H;
    const int i0 = tile * QB, i1 = min(i0 + QB, T), nq = i1 - i0;
    const int dk4 = (dk + 3) & ~3, dks = rb_pad(dk), qbs = rb_pad(QB), dvs = 4 * RB_NTX * NJ;
    __local float *Qs = lmem;                          /* [QB][dks] */
    __local float *KV = Qs + QB * dks;                 /* K [64][dks], then V [64][dvs] */
    __local float *Pt = KV + RB_KB * max(dks, dvs);    /* [64][qbs]: p of key s, rows contiguous */
    __local float *red = Pt + RB_KB * qbs;             /* [16][qbs]: per-item row maxima, then sums */

    float m[4], l[4], acc[4][8];
    for (int a = 0; a < 4; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
        for (int c = 0; c < 8; c++) acc[a][c] = 0.0f;
    }
    rb_stage(Qs, dks, q, b, i0, h, T, H, dk, nq, QB, dk4);
    for (int j0 = 0; j0 < i1; j0 += RB_KB) {
        const int nk = min(RB_KB, i1 - j0);
        rb_stage(KV, dks, k, b, j0, h, T, H, dk, nk, RB_KB, dk4);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[4][4];
        for (int a = 0; a < 4; a++)
            for (int c = 0; c < 4; c++) s[a][c] = 0.0f;
        for (int p = 0; p < dk4; p += 4) {
            float4 qa[4], kc[4];
            for (int a = 0; a < 4; a++) qa[a] = *(__local const float4 *)(Qs + (r0 + a) * dks + p);
            for (int c = 0; c < 4; c++) kc[c] = *(__local const float4 *)(KV + (tx + RB_NTX * c) * dks + p);
            for (int a = 0; a < 4; a++)
                for (int c = 0; c < 4; c++)
                    s[a][c] += qa[a].x * kc[c].x + qa[a].y * kc[c].y + qa[a].z * kc[c].z + qa[a].w * kc[c].w;
        }
        /* Key tx + 16 c is visible to row r0 + a when it exists and is not in the row's future. */
        float mp[4];
        for (int a = 0; a < 4; a++) {
            const int lim = min(i0 + r0 + a - j0, nk - 1); /* last visible key of the row in this tile */
            mp[a] = -INFINITY;
            for (int c = 0; c < 4; c++) {
                s[a][c] = tx + RB_NTX * c <= lim ? s[a][c] * scale : -INFINITY;
                mp[a] = fmax(mp[a], s[a][c]);
            }
        }
        *(__local float4 *)(red + tx * qbs + r0) = (float4)(mp[0], mp[1], mp[2], mp[3]);
        barrier(CLK_LOCAL_MEM_FENCE); /* red written; every item is past its K reads */
        float4 mx = (float4)(m[0], m[1], m[2], m[3]);
        for (int t = 0; t < RB_NTX; t++) mx = fmax(mx, *(__local const float4 *)(red + t * qbs + r0));
        const float mn[4] = {mx.x, mx.y, mx.z, mx.w};
        for (int a = 0; a < 4; a++) {
            const int lim = min(i0 + r0 + a - j0, nk - 1);
            /* The first tile's correction multiplies zeros: 0, not exp(-inf - m). */
            const float corr = j0 == 0 ? 0.0f : RB_EXP(m[a] - mn[a]);
            float sum = 0.0f;
            for (int c = 0; c < 4; c++) {
                s[a][c] = tx + RB_NTX * c <= lim ? RB_EXP(s[a][c] - mn[a]) : 0.0f;
                sum += s[a][c];
            }
            l[a] = l[a] * corr + sum;
            for (int c = 0; c < 4 * NJ; c++) acc[a][c] *= corr;
            m[a] = mn[a];
        }
        for (int c = 0; c < 4; c++)
            *(__local float4 *)(Pt + (tx + RB_NTX * c) * qbs + r0) = (float4)(s[0][c], s[1][c], s[2][c], s[3][c]);
        rb_stage(KV, dvs, v, b, j0, h, T, H, dv, nk, RB_KB, dvs);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (nk == RB_KB && j0 + RB_KB - 1 <= i0) { /* every key visible to every row */
            for (int sk = 0; sk < RB_KB; sk++) {
                const float4 pv = *(__local const float4 *)(Pt + sk * qbs + r0);
                const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
                for (int j = 0; j < NJ; j++) {
                    const float4 vv = *(__local const float4 *)(KV + sk * dvs + 4 * tx + 4 * RB_NTX * j);
                    for (int a = 0; a < 4; a++) {
                        acc[a][4 * j + 0] += pa[a] * vv.x;
                        acc[a][4 * j + 1] += pa[a] * vv.y;
                        acc[a][4 * j + 2] += pa[a] * vv.z;
                        acc[a][4 * j + 3] += pa[a] * vv.w;
                    }
                }
            }
        } else { /* the diagonal tile: a masked key's term is skipped, not weighted by 0 */
            for (int sk = 0; sk < nk; sk++) {
                const float4 pv = *(__local const float4 *)(Pt + sk * qbs + r0);
                const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
                for (int j = 0; j < NJ; j++) {
                    const float4 vv = *(__local const float4 *)(KV + sk * dvs + 4 * tx + 4 * RB_NTX * j);
                    for (int a = 0; a < 4; a++) {
                        const int vis = j0 + sk <= i0 + r0 + a;
                        acc[a][4 * j + 0] = vis ? acc[a][4 * j + 0] + pa[a] * vv.x : acc[a][4 * j + 0];
                        acc[a][4 * j + 1] = vis ? acc[a][4 * j + 1] + pa[a] * vv.y : acc[a][4 * j + 1];
                        acc[a][4 * j + 2] = vis ? acc[a][4 * j + 2] + pa[a] * vv.z : acc[a][4 * j + 2];
                        acc[a][4 * j + 3] = vis ? acc[a][4 * j + 3] + pa[a] * vv.w : acc[a][4 * j + 3];
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* before the next tile overwrites KV, Pt and red */
    }
    /* The row sum: the 16 items' partials (a NaN in any makes the row NaN). */
    *(__local float4 *)(red + tx * qbs + r0) = (float4)(l[0], l[1], l[2], l[3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 lt = (float4)(0.0f);
    for (int t = 0; t < RB_NTX; t++) lt += *(__local const float4 *)(red + t * qbs + r0);
    const float inv[4] = {1.0f / lt.x, 1.0f / lt.y, 1.0f / lt.z, 1.0f / lt.w};
    for (int a = 0; a < 4; a++) {
        if (r0 + a >= nq) break;
        __global float *oi = o + vla_bthd(b, i0 + r0 + a, h, 0, T, H, dv);
        for (int j = 0; j < NJ; j++)
            for (int c = 0; c < 4; c++) {
                const int col = 4 * tx + 4 * RB_NTX * j + c;
                if (col < dv) oi[col] = acc[a][4 * j + c] * inv[a];
            }
    }
}

__kernel void softmax_rb64(__global const float *q, __global const float *k, __global const float *v,
                           __global float *o, int T, int H, int dk, int dv, float scale, int ntiles,
                           __local float4 *lmem) {
    softmax_rb(q, k, v, o, T, H, dk, dv, scale, ntiles, (__local float *)lmem, 1);
}

__kernel void softmax_rb128(__global const float *q, __global const float *k, __global const float *v,
                            __global float *o, int T, int H, int dk, int dv, float scale, int ntiles,
                            __local float4 *lmem) {
    softmax_rb(q, k, v, o, T, H, dk, dv, scale, ntiles, (__local float *)lmem, 2);
}
