/* nn.cl: the kernels of the nn ops (vla/nn.h) on OpenCL, launched by backends/opencl/ocl_nn.c.
 * Built as a program of its own (not prefixed by common.cl: it shares nothing with the
 * attention kernels), once per handle at the first nn call.
 *
 * OpenCL C 1.2. Build options set by the host:
 *   -DVLA_FP64=1   the device has cl_khr_fp64: reductions accumulate in double (acc_t), as the
 *                  CPU backend's do; without it they accumulate in float.
 *   -cl-fp32-correctly-rounded-divide-sqrt where the device offers it, so that AdamW's divide
 *                  and sqrt round as the CPU's do.
 *
 * Conventions:
 *   - Tensors are (buffer, element offset) pairs, the offset a ulong argument `<name>o`.
 *   - Elementwise kernels loop with a grid stride (ulong indices: n may exceed 2^32).
 *   - Reductions have one owner per output and a fixed order (strided partial sums, then a
 *     tree in local memory): the same inputs give the same bits on the same device. No float
 *     atomics anywhere; integer atomics only count (the count does not depend on the order)
 *     or keep the smallest index of an invalid token.
 *   - Work-groups are powers of two up to NN_WG items; barriers sit in uniform control flow.
 *   - Out-of-range token ids and targets are never used as an index: the item that meets one
 *     records its position in ctl[0] (atomic_min, so the first one wins) and writes zeros
 *     where the token's data would go; the host reads ctl[0] after the launch. */

#ifdef VLA_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

/* a * b + c stays two roundings, as in the CPU backend (C without contraction): AdamW and the
 * elementwise ops then match it to the last bit where the built-ins do. */
#pragma OPENCL FP_CONTRACT OFF

#define NN_WG 256   /* largest work-group the host launches */
#define NN_COLS 16  /* columns per work-group of the column-sum kernels */
#define NN_TILE 16  /* tile of the fallback GEMM: 16 x 16 work-items */
#define NN_NOPOS 0xffffffffu /* ctl[0] when every token was in range */

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* Position i of an invalid token, clamped below NN_NOPOS. */
void nn_flag(volatile __global uint *ctl, ulong i) {
    atomic_min(ctl, i < (ulong)NN_NOPOS ? (uint)i : NN_NOPOS - 1u);
}

/* Sum / maximum over the work-group (a tree in red[get_local_size(0)]); every item gets it.
 * The leading barrier lets a caller reuse red right after a previous call. */
acc_t nn_wg_sum(acc_t x, __local acc_t *red) {
    const int lid = get_local_id(0), n = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

float nn_wg_max(float x, __local float *red) {
    const int lid = get_local_id(0), n = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

/* ---- elementwise ---- */

/* y[n] = GELU(x), exact (erf) form. y may be x: each item reads its element before writing it. */
__kernel void nn_gelu_fwd(__global float *y, ulong yo, __global const float *x, ulong xo, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float xi = x[xo + i];
        y[yo + i] = 0.5f * xi * (1.0f + erf(xi * INV_SQRT2));
    }
}

/* dx[n] += dy (Phi(x) + x phi(x)). */
__kernel void nn_gelu_bwd(__global float *dx, ulong dxo, __global const float *dy, ulong dyo,
                          __global const float *x, ulong xo, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float xi = x[xo + i];
        const float cdf = 0.5f * (1.0f + erf(xi * INV_SQRT2));
        const float pdf = INV_SQRT_2PI * exp(-0.5f * xi * xi);
        dx[dxo + i] += dy[dyo + i] * (cdf + xi * pdf);
    }
}

/* y[n] = 1 / (1 + exp(-x)); exp overflows to inf for x < -88 and y is then 0, as it should. */
__kernel void nn_sigmoid_fwd(__global float *y, ulong yo, __global const float *x, ulong xo, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) y[yo + i] = 1.0f / (1.0f + exp(-x[xo + i]));
}

/* dx[n] += dy y (1 - y), from the forward's output y. */
__kernel void nn_sigmoid_bwd(__global float *dx, ulong dxo, __global const float *dy, ulong dyo,
                             __global const float *y, ulong yo, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float yi = y[yo + i];
        dx[dxo + i] += dy[dyo + i] * yi * (1.0f - yi);
    }
}

/* y[n] = a + c; y may be a or c. */
__kernel void nn_add_fwd(__global float *y, ulong yo, __global const float *a, ulong ao, __global const float *c,
                         ulong co, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) y[yo + i] = a[ao + i] + c[co + i];
}

/* dst[n] += src: add's backward, once per requested output. */
__kernel void nn_accumulate(__global float *dst, ulong dsto, __global const float *src, ulong srco, ulong n) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) dst[dsto + i] += src[srco + i];
}

/* ---- matmul helpers ---- */

/* y[M, N] = bias[N] in every row: the start the product then adds to (beta = 1). */
__kernel void nn_bias_rows(__global float *y, ulong yo, __global const float *bias, ulong bo, ulong M, ulong N) {
    const ulong n = M * N;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) y[yo + i] = bias[bo + i % N];
}

/* out[N] += sum over rows m of A[M, N] (the bias gradient; the position embedding's gradient
 * with A = dout viewed as [B, T C]). Work-group g owns columns 16 g .. 16 g + 15: item lid sums
 * column 16 g + lid % 16 over rows lid / 16, + lanes, ... (neighbouring items read neighbouring
 * columns), then the lanes are added as a tree. */
__kernel void nn_colsum_add(__global float *out, ulong oo, __global const float *A, ulong ao, ulong M, ulong N) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), lanes = get_local_size(0) / NN_COLS;
    const int cl = lid % NN_COLS, lane = lid / NN_COLS;
    const ulong col = (ulong)get_group_id(0) * NN_COLS + cl;
    acc_t s = 0;
    if (col < N)
        for (ulong m = lane; m < M; m += lanes) s += A[ao + m * N + col];
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = lanes / 2; h > 0; h >>= 1) {
        if (lane < h) red[lid] += red[lid + h * NN_COLS];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && col < N) out[oo + col] += (float)red[cl];
}

/* The fallback GEMM (a build without CLBlast, or VLA_OPENCL_NO_CLBLAST=1), row-major:
 * C[M, N] = op(A)[M, K] op(B)[K, N] (+ C when beta_one), op = transpose when ta / tb (A is then
 * stored [K, M], B [N, K]). 16 x 16 tiles through local memory; k ascending per element. */
__kernel __attribute__((reqd_work_group_size(NN_TILE, NN_TILE, 1))) void nn_gemm(
    __global float *C, ulong co, int ldc, __global const float *A, ulong ao, int lda, int ta, __global const float *B,
    ulong bo, int ldb, int tb, int M, int N, int K, int beta_one) {
    __local float As[NN_TILE][NN_TILE], Bs[NN_TILE][NN_TILE + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int n = get_group_id(0) * NN_TILE + tx, m = get_group_id(1) * NN_TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += NN_TILE) {
        const int ka = k0 + tx, kb = k0 + ty;
        As[ty][tx] = (m < M && ka < K) ? (ta ? A[ao + (ulong)ka * lda + m] : A[ao + (ulong)m * lda + ka]) : 0.0f;
        Bs[ty][tx] = (n < N && kb < K) ? (tb ? B[bo + (ulong)n * ldb + kb] : B[bo + (ulong)kb * ldb + n]) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int kn = min(NN_TILE, K - k0);
        for (int kk = 0; kk < kn; kk++) acc += As[ty][kk] * Bs[kk][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (m < M && n < N) {
        const ulong ci = co + (ulong)m * ldc + n;
        C[ci] = beta_one ? C[ci] + acc : acc;
    }
}

/* ---- LayerNorm ---- */

/* One work-group per row of x[M, C] (groups loop over rows when M exceeds their number): the
 * mean, then the centred squares (two passes: no cancellation far from 0), in acc_t as the CPU. */
__kernel void nn_ln_fwd(__global float *y, ulong yo, __global float *mean, ulong mo, int has_mean,
                        __global float *rstd, ulong ro, int has_rstd, __global const float *x, ulong xo,
                        __global const float *w, ulong wo, __global const float *b, ulong bo, int M, int C,
                        float eps) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int row = get_group_id(0); row < M; row += get_num_groups(0)) {
        __global const float *xr = x + xo + (ulong)row * C;
        __global float *yr = y + yo + (ulong)row * C;
        acc_t s = 0;
        for (int i = lid; i < C; i += wg) s += xr[i];
        const float mu = (float)(nn_wg_sum(s, red) / C);
        acc_t ss = 0;
        for (int i = lid; i < C; i += wg) {
            const acc_t d = (acc_t)xr[i] - mu;
            ss += d * d;
        }
        const float rs = (float)((acc_t)1 / sqrt(nn_wg_sum(ss, red) / C + (acc_t)eps));
        for (int i = lid; i < C; i += wg) yr[i] = (xr[i] - mu) * rs * w[wo + i] + b[bo + i];
        if (lid == 0) {
            if (has_mean) mean[mo + row] = mu;
            if (has_rstd) rstd[ro + row] = rs;
        }
    }
}

/* dx[M, C] += rstd (g - mean(g) - n mean(g n)), g = w dy, n = (x - mean) rstd; a group per row. */
__kernel void nn_ln_bwd_dx(__global float *dx, ulong dxo, __global const float *dy, ulong dyo,
                           __global const float *x, ulong xo, __global const float *w, ulong wo,
                           __global const float *mean, ulong mo, __global const float *rstd, ulong ro, int M, int C) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int row = get_group_id(0); row < M; row += get_num_groups(0)) {
        __global const float *xr = x + xo + (ulong)row * C, *dyr = dy + dyo + (ulong)row * C;
        __global float *dxr = dx + dxo + (ulong)row * C;
        const float mu = mean[mo + row], rs = rstd[ro + row];
        acc_t sg = 0, sgn = 0;
        for (int i = lid; i < C; i += wg) {
            const float g = w[wo + i] * dyr[i];
            sg += g;
            sgn += (acc_t)g * ((xr[i] - mu) * rs);
        }
        const float mg = (float)(nn_wg_sum(sg, red) / C);
        const float mgn = (float)(nn_wg_sum(sgn, red) / C);
        for (int i = lid; i < C; i += wg) {
            const float nrm = (xr[i] - mu) * rs;
            dxr[i] += rs * (w[wo + i] * dyr[i] - mg - nrm * mgn);
        }
    }
}

/* dweight[C] += sum over rows of dy n; dbias[C] += sum over rows of dy: nn_colsum_add's layout. */
__kernel void nn_ln_bwd_params(__global float *dw, ulong dwo, int has_dw, __global float *db, ulong dbo, int has_db,
                               __global const float *dy, ulong dyo, __global const float *x, ulong xo,
                               __global const float *mean, ulong mo, __global const float *rstd, ulong ro, int M,
                               int C) {
    __local acc_t rw[NN_WG], rb[NN_WG];
    const int lid = get_local_id(0), lanes = get_local_size(0) / NN_COLS;
    const int cl = lid % NN_COLS, lane = lid / NN_COLS;
    const int col = get_group_id(0) * NN_COLS + cl;
    acc_t sw = 0, sb = 0;
    if (col < C)
        for (int m = lane; m < M; m += lanes) {
            const ulong e = (ulong)m * C + col;
            const float d = dy[dyo + e];
            sw += (acc_t)d * ((x[xo + e] - mean[mo + m]) * rstd[ro + m]);
            sb += d;
        }
    rw[lid] = sw;
    rb[lid] = sb;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = lanes / 2; h > 0; h >>= 1) {
        if (lane < h) {
            rw[lid] += rw[lid + h * NN_COLS];
            rb[lid] += rb[lid + h * NN_COLS];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && col < C) {
        if (has_dw) dw[dwo + col] += (float)rw[cl];
        if (has_db) db[dbo + col] += (float)rb[cl];
    }
}

/* ---- embeddings ---- */

/* out[B T, C] = wte[tokens[i], :] + wpe[i mod T, :] (no wpe term without has_wpe). An invalid
 * token gives a row of zeros and is flagged (by its column-0 item). */
__kernel void nn_emb_fwd(__global float *out, ulong oo, __global const int *tok, ulong to,
                         __global const float *wte, ulong eo, __global const float *wpe, ulong po, int has_wpe,
                         ulong BT, int T, int C, int V, volatile __global uint *ctl) {
    const ulong n = BT * (ulong)C;
    for (ulong e = get_global_id(0); e < n; e += get_global_size(0)) {
        const ulong i = e / (ulong)C;
        const int c = (int)(e - i * (ulong)C);
        const int t = tok[to + i];
        if (t < 0 || t >= V) {
            out[oo + e] = 0.0f;
            if (c == 0) nn_flag(ctl, i);
            continue;
        }
        const float v = wte[eo + (ulong)t * C + c];
        out[oo + e] = has_wpe ? v + wpe[po + (i % (ulong)T) * C + c] : v;
    }
}

/* count[V] (zeroed by the host) += occurrences of each token; invalid tokens are flagged. */
__kernel void nn_emb_count(__global int *count, __global const int *tok, ulong to, ulong BT, int V,
                           volatile __global uint *ctl) {
    for (ulong i = get_global_id(0); i < BT; i += get_global_size(0)) {
        const int t = tok[to + i];
        if (t < 0 || t >= V) nn_flag(ctl, i);
        else atomic_inc(&count[t]);
    }
}

/* dwte[v, :] += dout[i, :] for every position i with tokens[i] = v, in increasing i: the CPU's
 * order, without float atomics. One work-group per vocabulary row (rows that occur nowhere
 * return at once): it walks the tokens a tile of wg at a time, lists the tile's matches in order
 * (item 0, only in tiles that have one), and every item adds those rows' entries to its columns.
 * It stops once it has seen count[v] matches, so the scan reads at most (distinct tokens) x B T
 * ids: for GPT-2-like sizes (B T = 8192) well under a thousandth of the tied head's product. */
__kernel void nn_emb_scatter(__global float *dwte, ulong eo, __global const float *dout, ulong doo,
                             __global const int *tok, ulong to, __global const int *count, ulong BT, int C) {
    __local int match[NN_WG];
    __local ulong list[NN_WG];
    __local int nmatch;
    const int lid = get_local_id(0), wg = get_local_size(0);
    const int v = get_group_id(0);
    const int total = count[v];
    if (total == 0) return; /* uniform: every item of the group reads the same count */
    __global float *row = dwte + eo + (ulong)v * C;
    int seen = 0;
    for (ulong base = 0; base < BT && seen < total; base += wg) {
        const ulong i = base + lid;
        if (lid == 0) nmatch = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int hit = i < BT && tok[to + i] == v;
        match[lid] = hit;
        if (hit) atomic_inc(&nmatch);
        barrier(CLK_LOCAL_MEM_FENCE);
        const int k = nmatch;
        if (k > 0) {
            if (lid == 0) {
                int j = 0;
                for (int q = 0; q < wg; q++)
                    if (match[q]) list[j++] = base + q;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int c = lid; c < C; c += wg) {
                float acc = row[c];
                for (int j = 0; j < k; j++) acc += dout[doo + list[j] * C + c];
                row[c] = acc;
            }
        }
        seen += k;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* ---- cross-entropy ---- */

/* ctl[1] = number of targets in 0..V-1 (one work-group: an integer tree, order-free); targets
 * other than those and -1 are flagged. */
__kernel void nn_ce_count(__global const int *tg, ulong to, int M, int V, volatile __global uint *ctl) {
    __local int red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    int c = 0;
    for (int m = lid; m < M; m += wg) {
        const int t = tg[to + m];
        if (t >= 0 && t < V) c++;
        else if (t != -1) nn_flag(ctl, (ulong)m);
    }
    red[lid] = c;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = wg / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) ctl[1] = (uint)red[0];
}

/* One work-group per row of logits[M, V]: log-sum-exp around the row's maximum; rowloss[m] =
 * -log softmax(z)[t] (0 without a target), dlogits = (softmax - onehot) / count (0 without a
 * target). dlogits may be logits: every read of the row (maximum, sum, z[t]) happens before the
 * barrier that precedes the writes, and each item then rewrites only elements it reads itself.
 * One row per group, and rows without a target return before any barrier: a loop over rows
 * with barriers and a `continue` crashed PoCL 3.1's work-group compiler here. */
__kernel void nn_ce_rows(__global acc_t *rowloss, __global float *dz, ulong dzo, int has_dz,
                         __global const float *z, ulong zo, __global const int *tg, ulong to, int V,
                         __global const uint *ctl) {
    __local acc_t red[NN_WG];
    __local float redm[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    const ulong row = get_group_id(0);
    __global const float *zr = z + zo + row * V;
    __global float *dr = dz + dzo + row * V;
    const int t = tg[to + row];
    if (t < 0 || t >= V) { /* no target (or an invalid one, already flagged): uniform per group */
        if (has_dz)
            for (int j = lid; j < V; j += wg) dr[j] = 0.0f;
        if (lid == 0) rowloss[row] = 0;
        return;
    }
    const uint cnt = ctl[1]; /* >= 1: this row has a target */
    const acc_t inv = (acc_t)1 / (acc_t)cnt;
    float mx = -INFINITY;
    for (int j = lid; j < V; j += wg) mx = fmax(mx, zr[j]);
    mx = nn_wg_max(mx, redm);
    acc_t se = 0;
    for (int j = lid; j < V; j += wg) se += exp((acc_t)zr[j] - mx);
    se = nn_wg_sum(se, red);
    const float zt = zr[t];
    barrier(CLK_GLOBAL_MEM_FENCE); /* every read of the row before any write (in place) */
    if (lid == 0) rowloss[row] = mx + log(se) - zt;
    if (has_dz)
        for (int j = lid; j < V; j += wg) {
            const acc_t p = exp((acc_t)zr[j] - mx) / se;
            dr[j] = (float)((j == t ? p - 1 : p) * inv);
        }
}

/* loss = (sum of rowloss[M] in a fixed order) / count, 0 without targets. One work-group. */
__kernel void nn_ce_loss(__global float *loss, ulong lo, __global const acc_t *rowloss, int M,
                         __global const uint *ctl) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    acc_t s = 0;
    for (int m = lid; m < M; m += wg) s += rowloss[m];
    s = nn_wg_sum(s, red);
    const uint cnt = ctl[1];
    if (lid == 0) loss[lo] = cnt ? (float)(s / (acc_t)cnt) : 0.0f;
}

/* ---- global norm ---- */

/* part[g] = sum of x^2 over part g of num_groups near-equal contiguous parts of x[n]; items of
 * a group stride through their part (coalesced). */
__kernel void nn_sumsq(__global acc_t *part, __global const float *x, ulong xo, ulong n) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    const ulong G = get_num_groups(0), g = get_group_id(0);
    const ulong q = n / G, r = n % G;
    const ulong i0 = q * g + min(g, r), i1 = q * (g + 1) + min(g + 1, r);
    acc_t s = 0;
    for (ulong i = i0 + lid; i < i1; i += wg) {
        const acc_t v = x[xo + i];
        s += v * v;
    }
    s = nn_wg_sum(s, red);
    if (lid == 0) part[g] = s;
}

/* norm = sqrt(sum of part[P]), one work-group; the result stays on the device. */
__kernel void nn_norm_final(__global float *norm, ulong no, __global const acc_t *part, int P) {
    __local acc_t red[NN_WG];
    const int lid = get_local_id(0), wg = get_local_size(0);
    acc_t s = 0;
    for (int i = lid; i < P; i += wg) s += part[i];
    s = nn_wg_sum(s, red);
    if (lid == 0) norm[no] = (float)sqrt(s);
}

/* ---- AdamW ---- */

/* One torch.optim.AdamW step over n parameters, float operations in torch's order (the host
 * computes the scalars in double as Python does). The clip factor comes from norm on the device:
 * s = min(1, max_norm / (norm + 1e-6)), as clip_grad_norm_. */
__kernel void nn_adamw(__global float *p, ulong po, __global float *m, ulong mo, __global float *v, ulong vo,
                       __global const float *g, ulong go, __global const float *norm, ulong no, int has_norm,
                       float max_norm, float decay, float w1, float b2, float w2, float step_size, float bc2_sqrt,
                       float eps, ulong n) {
    float clip = 1.0f;
    if (has_norm) {
        const float c = max_norm / (norm[no] + 1e-6f);
        clip = c < 1.0f ? c : 1.0f;
    }
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float gi = g[go + i] * clip;
        const float m0 = m[mo + i];
        float pi = p[po + i] * decay;                                    /* param.mul_(1 - lr wd) */
        const float mi = w1 < 0.5f ? m0 + w1 * (gi - m0) : gi - (gi - m0) * (1.0f - w1); /* lerp */
        const float vi = v[vo + i] * b2 + w2 * gi * gi;                  /* mul_(beta2).addcmul_ */
        const float denom = sqrt(vi) / bc2_sqrt + eps;
        pi = pi + (-step_size * mi) / denom;                             /* addcdiv_(-step_size) */
        p[po + i] = pi;
        m[mo + i] = mi;
        v[vo + i] = vi;
    }
}
