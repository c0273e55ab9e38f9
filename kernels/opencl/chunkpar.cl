/* chunkpar.cl: the chunk-parallel form of VLA-MATH 2.3 (as the CUDA backend's, in portable
 * OpenCL C 1.2). The S part of linear, DeltaNet and VLA is
 *   cp_sfac  per (head, chunk): Wr, Y, Mq (and with g: gam, dl) as gdr_chunk_prep
 *            (linear_delta.cl), and the chunk's affine map on X = S^T, X_end = P X + N,
 *            P = gl I - W^T diag(dl) Wr (residual) or gl I, N = W^T diag(dl) Y
 *   cp_walk  per (head, value column block): X_{j+1} = P_j X_j + N_j, every X_j kept
 *   cp_out   per (head, chunk): E = Y - Wr X_j, O = diag(gam) Q X_j + Mq E
 * and VLA's A part with R = 0 (u = s_u k^, A_0 = I / lambda0) runs per chunk from its start
 * state: A at chunk j's start is M_j^{-1}, M_j = A_0^{-1} + sum_{i<j} U_i^T U_i (VLA-MATH 2.4):
 *   cp_gram   per (head, chunk): U^T U
 *   cp_prefix per (head, entry block): the exclusive prefix M_j (slot nch holds the total)
 *   cp_apart  per (head, chunk): Cholesky M = L L^T; Y = L^{-1} U^T; G = I + Y^T Y = Lg Lg^T;
 *             Z^T = L^{-T} Y; Z = Lg^{-1} Z; a_t = normalize(z_t / (s_u Lg_tt)) (row t of
 *             Lg^{-1} U A0 is A_t u_t sqrt(delta_t) / delta_t, Sherman-Morrison; VLA-MATH 2.3)
 *   cp_aend   per head: A_end = M_total^{-1}, the float state out
 * (on GPUs cp_apart_seg instead takes a segment of chunks a group, A carried over it).
 * Matrices live in global scratch, one slice per (head, chunk) (chunks up to 1024 tokens, d up
 * to 256 do not fit local memory); on GPUs, where they fit, the *_local kernels further down hold
 * them in local memory instead. real_t is double where the device has fp64 (common.cl), except
 * on GPUs, which build this file in float by default (ocl_backend.c: VLA_OPENCL_CP_FP64).
 * Products run as row updates (x_row += a * y_row) whose innermost loop the items stride along
 * contiguous columns: on a GPU neighbouring items touch neighbouring addresses; on a CPU device
 * the host runs one item a group, and that loop is a plain one the compiler vectorises (PoCL
 * does not vectorise across items around an inner loop); kernel pointers are restrict (the
 * buffers never overlap), without which PoCL's loops ran 2-3x slower (alias checks). Measured on
 * PoCL, 2 cores, (1,4,32) T = 4096, per call: the one-item form took VLA from 150 ms (64 items a
 * group) to 11-13 ms. Every barrier is in uniform control flow (PoCL needs it so). The output
 * normaliser (linear; VLA's normalised output) is cp_nsum and cp_norm, also per (head, chunk). */

/* CP_ONE_ITEM (the host's build option on devices that are not GPUs): the host launches one
 * item a group, and the item loops below become plain unit-stride loops at compile time. */
#ifdef CP_ONE_ITEM
#define CP_LID 0
#define CP_WG 1
#else
#define CP_LID ((int)get_local_id(0))
#define CP_WG ((int)get_local_size(0))
#endif

/* y[j] += sum_u a[u] x_u[j] over j < n (items stride j), four rows x_u a pass: a quarter of the
 * loop overhead and of y's loads and stores of one row at a time. xs: the rows' start, ld apart;
 * a: the coefficients, as, apart (a column of a row-major matrix: as = its leading dim). */
void cp_rows_f(__global float *restrict y, __global const float *restrict xs, size_t ld,
               __global const float *restrict a, size_t as, int m, int n, float sign) {
    const int lid = CP_LID, wg = CP_WG;
    int u = 0;
    for (; u + 4 <= m; u += 4) {
        const float a0 = sign * a[u * as], a1 = sign * a[(u + 1) * as], a2 = sign * a[(u + 2) * as],
                    a3 = sign * a[(u + 3) * as];
        __global const float *x0 = xs + u * ld, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;
        for (int j = lid; j < n; j += wg) y[j] += a0 * x0[j] + a1 * x1[j] + a2 * x2[j] + a3 * x3[j];
    }
    for (; u < m; u++) {
        const float a0 = sign * a[u * as];
        __global const float *x0 = xs + u * ld;
        for (int j = lid; j < n; j += wg) y[j] += a0 * x0[j];
    }
}

void cp_rows_r(__global real_t *restrict y, __global const real_t *restrict xs, size_t ld,
               __global const real_t *restrict a, size_t as, int m, int n, real_t sign) {
    const int lid = CP_LID, wg = CP_WG;
    int u = 0;
    for (; u + 4 <= m; u += 4) {
        const real_t a0 = sign * a[u * as], a1 = sign * a[(u + 1) * as], a2 = sign * a[(u + 2) * as],
                     a3 = sign * a[(u + 3) * as];
        __global const real_t *x0 = xs + u * ld, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;
        for (int j = lid; j < n; j += wg) y[j] += a0 * x0[j] + a1 * x1[j] + a2 * x2[j] + a3 * x3[j];
    }
    for (; u < m; u++) {
        const real_t a0 = sign * a[u * as];
        __global const real_t *x0 = xs + u * ld;
        for (int j = lid; j < n; j += wg) y[j] += a0 * x0[j];
    }
}

/* Cholesky in place, n x n with leading dim lda, right-looking by panels of 4 columns. Per
 * column k of the panel [k0, kend): L_kk, then the column (also copied to row k's upper part,
 * L^T, so the updates read both factors along rows), then its update of the panel's later
 * columns (k, kend), every row below; after the panel's last column, the trailing lower
 * triangle's rank-4 update. Pivots are floored at a tiny positive value (the matrices here are
 * SPD by construction). Between two barriers every entry has one writer, and nothing written is
 * read by another item before the next barrier.
 *
 * The GPU form (many items a group) iterates flat (row, column) pairs, and the columns in one
 * loop of barriers. PoCL 3.1 (LLVM 15) ran a loop of panels around a loop of columns, with items
 * over rows each running its own inner column loop, wrong: whole columns' updates lost from n = 3
 * at 4 items, right at -cl-opt-disable, and right or wrong with the same loop bounds written
 * differently (kend = n against min(k0 + 4, n) at n = 4); inlined into cp_aend, the one-loop
 * form with those per-item inner loops still lost updates. Flat pairs, one level of item loop,
 * run right there. Flat pairs also keep every item busy where rows are shorter than the group
 * (G at chunk 64, L at d = 32). The CPU form (one item) keeps the row loops, which the compiler
 * vectorises, in the nested form's order of operations. */
void cp_chol(__global real_t *A, int n, int lda) {
    const int lid = CP_LID, wg = CP_WG;
    for (int k = 0; k < n; k++) {
        const int k0 = k - k % 4, kend = min(k0 + 4, n);
        __global real_t *rk = A + (size_t)k * lda;
        const real_t d = sqrt(fmax(rk[k], (real_t)1e-300)), inv = 1 / d;
        barrier(CLK_GLOBAL_MEM_FENCE); /* every item has read rk[k] before item 0 writes it */
        for (int j = k + 1 + lid; j < n; j += wg) {
            const real_t l = A[(size_t)j * lda + k] * inv;
            A[(size_t)j * lda + k] = l;
            rk[j] = l;
        }
        if (lid == 0) rk[k] = d;
        barrier(CLK_GLOBAL_MEM_FENCE);
        /* The panel's later columns (k, kend), every row below. */
#ifdef CP_ONE_ITEM
        for (int i = k + 1; i < n; i++) {
            __global real_t *ri = A + (size_t)i * lda;
            const real_t l = ri[k];
            for (int j = k + 1; j < kend && j <= i; j++) ri[j] -= l * rk[j];
        }
#else
        /* Items over the (row, column) pairs, row-major, the upper ones skipped. */
        const int pw = kend - k - 1;
        for (int e = lid; e < (n - k - 1) * pw; e += wg) {
            const int i = k + 1 + e / pw, j = k + 1 + e % pw;
            if (j > i) continue;
            __global real_t *ri = A + (size_t)i * lda;
            ri[j] -= ri[k] * rk[j];
        }
#endif
        /* After the panel's last column (the update above then writes nothing): rows i >= kend,
         * columns [kend, i] -= sum_{u in panel} L[i][u] L[j][u], L[j][u] read from row u's
         * upper copy. */
        if (k + 1 == kend && kend < n) {
#ifdef CP_ONE_ITEM
            for (int i = kend; i < n; i++) { /* unit-stride rows the compiler vectorises */
                __global real_t *ri = A + (size_t)i * lda;
                cp_rows_r(ri + kend, A + (size_t)k0 * lda + kend, lda, ri + k0, 1, kend - k0, i - kend + 1, -1);
            }
#else
            /* Items over the (n - kend)^2 square, row-major (neighbouring items, neighbouring
             * columns), the upper half skipped. */
            const int m = n - kend;
            for (int e = lid; e < m * m; e += wg) {
                const int i = kend + e / m, j = kend + e % m;
                if (j > i) continue;
                __global real_t *ri = A + (size_t)i * lda;
                real_t x = 0;
                for (int u = k0; u < kend; u++) x += ri[u] * A[(size_t)u * lda + j];
                ri[j] -= x;
            }
#endif
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

/* ---- VLA's A part ---- */

/* Gr [BH, nch + 2, dk, dk] real: slot j = U_j^T U_j, four tokens a pass. One work-group per
 * (head, chunk). */
__kernel void cp_gram(__global const int *restrict starts, int nch, __global const float *restrict uu,
                      __global real_t *restrict Gr, int T, int dk) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, lid = CP_LID, wg = CP_WG;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    __global const float *U = uu + ((size_t)bh * T + ts) * dk;
    __global real_t *G = Gr + ((size_t)bh * (nch + 2) + ci) * dk * dk;
    for (int i = 0; i < dk; i++) {
        __global real_t *gi = G + (size_t)i * dk;
        for (int j = lid; j < dk; j += wg) gi[j] = 0;
        int t = 0;
        for (; t + 4 <= c; t += 4) {
            __global const float *u0 = U + (size_t)t * dk, *u1 = u0 + dk, *u2 = u1 + dk, *u3 = u2 + dk;
            const real_t a0 = u0[i], a1 = u1[i], a2 = u2[i], a3 = u3[i];
            for (int j = lid; j < dk; j += wg)
                gi[j] += a0 * (real_t)u0[j] + a1 * (real_t)u1[j] + a2 * (real_t)u2[j] + a3 * (real_t)u3[j];
        }
        for (; t < c; t++) {
            __global const float *u0 = U + (size_t)t * dk;
            const real_t a0 = u0[i];
            for (int j = lid; j < dk; j += wg) gi[j] += a0 * (real_t)u0[j];
        }
    }
}

/* In place: slot j becomes M_j = A_0^{-1} + sum_{i<j} G_i, slot nch the total; slot nch + 1
 * carries the running sum on CPU devices. A group owns `span` entries of one head's slots
 * (groups = heads x per_head), its items stride them. GPUs keep an entry's running sum in a
 * register and read four slots ahead of their stores, so each slot is read and written once:
 * with the sum in slot nch + 1 (a global read-modify-write a slot, reloaded after every store)
 * the prefix took 1.3 ms of 26 at (8,16,64) T = 8192 on an H100 in double, about 4x the time of
 * its 1.07 GB of slot traffic at 3 TB/s. Same sums in the same order either way. */
__kernel void cp_prefix(__global real_t *restrict Gr, int nch, int dk, int per_head, int span, float inv_lambda) {
    const int grp = get_group_id(0), bh = grp / per_head, lid = CP_LID, wg = CP_WG;
    const int e0 = (grp % per_head) * span, e1 = min(e0 + span, dk * dk);
    const size_t n2 = (size_t)dk * dk;
    __global real_t *G = Gr + (size_t)bh * (nch + 2) * n2;
#ifdef CP_ONE_ITEM
    __global real_t *acc = G + (size_t)(nch + 1) * n2; /* slot by slot: each a contiguous sweep */
    for (int e = e0 + lid; e < e1; e += wg) acc[e] = (e / dk == e % dk) ? 1 / (real_t)inv_lambda : 0; /* lambda0 I */
    for (int j = 0; j < nch; j++) {
        __global real_t *g = G + (size_t)j * n2;
        for (int e = e0 + lid; e < e1; e += wg) {
            const real_t x = g[e];
            g[e] = acc[e];
            acc[e] += x;
        }
    }
    for (int e = e0 + lid; e < e1; e += wg) G[(size_t)nch * n2 + e] = acc[e];
#else
    for (int e = e0 + lid; e < e1; e += wg) {
        __global real_t *g = G + e;
        real_t acc = (e / dk == e % dk) ? 1 / (real_t)inv_lambda : 0; /* lambda0 I */
        int j = 0;
        for (; j + 4 <= nch; j += 4) {
            const real_t x0 = g[(size_t)j * n2], x1 = g[(size_t)(j + 1) * n2], x2 = g[(size_t)(j + 2) * n2],
                         x3 = g[(size_t)(j + 3) * n2];
            g[(size_t)j * n2] = acc;
            acc += x0;
            g[(size_t)(j + 1) * n2] = acc;
            acc += x1;
            g[(size_t)(j + 2) * n2] = acc;
            acc += x2;
            g[(size_t)(j + 3) * n2] = acc;
            acc += x3;
        }
        for (; j < nch; j++) {
            const real_t x = g[(size_t)j * n2];
            g[(size_t)j * n2] = acc;
            acc += x;
        }
        g[(size_t)nch * n2] = acc;
    }
#endif
}

/* The a_t of one chunk from M_j. Scratch: Gr's slot (Cholesky in place), Zs [2][dk][C] (Y, then
 * Z^T, and Z [C][dk]) and Gs [C][C] real per (head, chunk). Al [B*H, T, dk] float. Items own a
 * column of what they update, so the solves need no barrier between their steps. */
__kernel void cp_apart(__global const int *restrict starts, int nch, __global const float *restrict uu, __global real_t *restrict Gr,
                       __global real_t *restrict Zs, __global real_t *restrict Gs, __global float *restrict Al, int T, int dk, int C, float s_u,
                       float eps) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, lid = CP_LID, wg = CP_WG;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *U = uu + tok * dk;
    __global real_t *L = Gr + ((size_t)bh * (nch + 2) + ci) * dk * dk;
    __global real_t *Zt = Zs + (size_t)grp * 2 * dk * C, *Z = Zt + (size_t)dk * C, *G = Gs + (size_t)grp * C * C;
    cp_chol(L, dk, dk); /* L lower, L^T in the upper part */
    for (int r = 0; r < dk; r++) { /* Y = L^{-1} U^T, row r over the chunk's tokens */
        __global real_t *yr = Zt + (size_t)r * C;
        for (int t = lid; t < c; t += wg) yr[t] = (real_t)U[(size_t)t * dk + r];
        cp_rows_r(yr, Zt, C, L + (size_t)r * dk, 1, r, c, -1);
        const real_t inv = 1 / L[(size_t)r * dk + r];
        for (int t = lid; t < c; t += wg) yr[t] *= inv;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int t = 0; t < c; t++) { /* G = I + Y^T Y, lower half */
        __global real_t *gt = G + (size_t)t * C;
        for (int s = lid; s <= t; s += wg) gt[s] = s == t ? 1 : 0;
        cp_rows_r(gt, Zt, C, Zt + t, C, dk, t + 1, 1);
    }
    barrier(CLK_GLOBAL_MEM_FENCE); /* Y is read above before it is overwritten below */
    for (int r = dk - 1; r >= 0; r--) { /* Z^T = L^{-T} Y, in place, rows from the last */
        __global real_t *zr = Zt + (size_t)r * C;
        /* L[r][p] = L[p][r] for p > r (cp_chol's upper copy) */
        cp_rows_r(zr, Zt + (size_t)(r + 1) * C, C, L + (size_t)r * dk + r + 1, 1, dk - r - 1, c, -1);
        const real_t inv = 1 / L[(size_t)r * dk + r];
        for (int t = lid; t < c; t += wg) zr[t] *= inv;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int t = 0; t < c; t++) /* Z = (Z^T)^T */
        for (int r = lid; r < dk; r += wg) Z[(size_t)t * dk + r] = Zt[(size_t)r * C + t];
    cp_chol(G, c, C); /* its barriers also publish Z */
    for (int t = 0; t < c; t++) { /* Z = Lg^{-1} Z, row t from the earlier ones */
        __global real_t *zt = Z + (size_t)t * dk;
        cp_rows_r(zt, Z, dk, G + (size_t)t * C, 1, t, dk, -1);
        const real_t inv = 1 / G[(size_t)t * C + t];
        for (int r = lid; r < dk; r += wg) zt[r] *= inv;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int t = lid; t < c; t += wg) { /* a_t = normalize(z_t / (s_u Lg_tt)) */
        __global const real_t *zt = Z + (size_t)t * dk;
        const real_t sc = 1 / ((real_t)s_u * G[(size_t)t * C + t]);
        real_t ss = 0;
        for (int r = 0; r < dk; r++) {
            const real_t x = zt[r] * sc;
            ss += x * x;
        }
        const real_t inv = sc / fmax(sqrt(ss), (real_t)eps);
        for (int r = 0; r < dk; r++) Al[(tok + t) * dk + r] = (float)(zt[r] * inv);
    }
}

/* A_end = M_total^{-1} (slot nch; slot nch + 1 is scratch for L^{-1}) into Af [B*H, dk, dk]
 * float. One work-group per head. */
__kernel void cp_aend(__global real_t *restrict Gr, int nch, int dk, __global float *restrict Af) {
    const int bh = get_group_id(0), lid = CP_LID, wg = CP_WG;
    const size_t n2 = (size_t)dk * dk;
    __global real_t *L = Gr + ((size_t)bh * (nch + 2) + nch) * n2, *X = L + n2;
    cp_chol(L, dk, dk);
    for (int r = 0; r < dk; r++) { /* X = L^{-1}, row r */
        const real_t inv = 1 / L[(size_t)r * dk + r];
        for (int col = lid; col < dk; col += wg) {
            real_t x = col == r ? 1 : 0;
            for (int p = col; p < r; p++) x -= L[(size_t)r * dk + p] * X[(size_t)p * dk + col];
            X[(size_t)r * dk + col] = col <= r ? x * inv : 0;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    for (int e = lid; e < dk * dk; e += wg) { /* A = X^T X */
        const int i = e / dk, j = e - i * dk;
        real_t x = 0;
        for (int p = max(i, j); p < dk; p++) x += X[(size_t)p * dk + i] * X[(size_t)p * dk + j];
        Af[(size_t)bh * n2 + e] = (float)x;
    }
}

/* ---- the S part ---- */

/* The S factors and the map of one chunk (as gdr_chunk_prep, linear_delta.cl, which says
 * what each array is; here every loop runs along contiguous rows):
 *   D[t][s] = prod_{s<r<=t} g_r, gam[t] = prod_{r<=t} g_r, dl[s] = D[c-1][s]       (with g)
 *   L = strict(Kr W^T) o D, Mq = tril(Q W^T) o D                 (W^T staged in Wt [dk][C])
 *   [Wr | Y] = (I + L)^{-1} [diag(gam) Kr | V]                  (residual; else Y = V)
 *   maps [B*H, nch, dk, dk + dv] rows [P | N]: P = gl I - W^T diag(dl) Wr (gl I without the
 *   residual), N = W^T diag(dl) Y.
 * One work-group per (head, chunk). Items own columns: the same item updates column col of
 * [Wr | Y] and of [P | N], so only the staging needs barriers. */
__kernel void cp_sfac(__global const int *restrict starts, int nch, __global const float *restrict kr, __global const float *restrict w,
                      __global const float *restrict q, __global const float *restrict v, __global const float *restrict gdec, int has_g,
                      int residual, __global float *restrict Wr, __global float *restrict Y, __global float *restrict Mq, __global float *restrict Dm,
                      __global float *restrict Lm, __global float *restrict gam, __global float *restrict dl, __global float *restrict WtS,
                      __global float *restrict maps, int T, int H, int dk, int dv, int C) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, b = bh / H, h = bh % H;
    const int lid = CP_LID, wg = CP_WG, W = dk + dv;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *KR = kr + tok * dk, *Wd = w + tok * dk, *Q = q + tok * dk;
    __global float *D = Dm + tok * C, *L = Lm + tok * C, *Mc = Mq + tok * C;
    __global float *WR = Wr + tok * dk, *YY = Y + tok * dv, *G = gam + tok, *DL = dl + tok;
    __global float *Wt = WtS + (size_t)grp * dk * C, *m = maps + (size_t)grp * dk * W;
    if (has_g)
        for (int t = 0; t < c; t++) { /* item s keeps column s of D */
            const float g = gdec[((size_t)b * T + ts + t) * H + h];
            __global float *dt = D + (size_t)t * C;
            for (int s = lid; s <= t; s += wg) dt[s] = s < t ? D[(size_t)(t - 1) * C + s] * g : 1.0f;
            if (lid == 0) G[t] = (t ? D[(size_t)(t - 1) * C] * g : 1.0f) * gdec[((size_t)b * T + ts) * H + h];
        }
    for (int i = 0; i < dk; i++)
        for (int s = lid; s < c; s += wg) Wt[(size_t)i * C + s] = Wd[(size_t)s * dk + i];
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (has_g)
        for (int s = lid; s < c; s += wg) DL[s] = D[(size_t)(c - 1) * C + s];
    for (int t = 0; t < c; t++) {
        __global float *mt = Mc + (size_t)t * C, *lt = L + (size_t)t * C;
        for (int s = lid; s < C; s += wg) mt[s] = 0.0f;
        cp_rows_f(mt, Wt, C, Q + (size_t)t * dk, 1, dk, t + 1, 1.0f);
        if (has_g) {
            __global const float *dt = D + (size_t)t * C;
            for (int s = lid; s <= t; s += wg) mt[s] *= dt[s];
        }
        if (!residual) continue;
        for (int s = lid; s < t; s += wg) lt[s] = 0.0f;
        cp_rows_f(lt, Wt, C, KR + (size_t)t * dk, 1, dk, t, 1.0f);
        if (has_g) {
            __global const float *dt = D + (size_t)t * C;
            for (int s = lid; s < t; s += wg) lt[s] *= dt[s];
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    /* [Wr | Y] by forward substitution, row by row; item j owns column j of Wr and of Y. */
    for (int t = 0; t < c; t++) {
        __global float *wrt = WR + (size_t)t * dk, *yt = YY + (size_t)t * dv;
        for (int j = lid; j < dv; j += wg) yt[j] = v[vla_bthd(b, ts + t, h, j, T, H, dv)];
        if (!residual) continue;
        const float gt = has_g ? G[t] : 1.0f;
        for (int j = lid; j < dk; j += wg) wrt[j] = gt * KR[(size_t)t * dk + j];
        cp_rows_f(wrt, WR, dk, L + (size_t)t * C, 1, t, dk, -1.0f);
        cp_rows_f(yt, YY, dv, L + (size_t)t * C, 1, t, dv, -1.0f);
    }
    /* The map, row i: P_i = gl e_i - sum_t a_ti Wr_t, N_i = sum_t a_ti Y_t, a_ti = W[t][i] dl[t]
     * (with g staged as Wg [c][dk] in Wt's place, which the products above are done with). */
    __global float *Wg = Wt;
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (has_g)
        for (int t = 0; t < c; t++)
            for (int i = lid; i < dk; i += wg) Wg[(size_t)t * dk + i] = Wd[(size_t)t * dk + i] * DL[t];
    barrier(CLK_GLOBAL_MEM_FENCE);
    const float gl = has_g ? G[c - 1] : 1.0f;
    for (int i = 0; i < dk; i++) {
        __global float *pi = m + (size_t)i * W, *ni = pi + dk;
        for (int j = lid; j < dk; j += wg) pi[j] = j == i ? gl : 0.0f;
        for (int j = lid; j < dv; j += wg) ni[j] = 0.0f;
        __global const float *ai = (has_g ? Wg : Wd) + i; /* a_ti, t = 0..c-1, dk apart */
        if (residual) cp_rows_f(pi, WR, dk, ai, dk, c, dk, -1.0f);
        cp_rows_f(ni, YY, dv, ai, dk, c, dv, 1.0f);
    }
}

/* The carry, the only sequential part: Xs [B*H, nch, dk, dv] gets every chunk's start state,
 * ST [B*H, dk, dv] holds X_0 and gets the final state. A group owns `span` value columns of one
 * head (groups = heads x ceil(dv / span)); its items stride them, so no barrier is needed (a
 * column's steps touch only that column). With identity maps (linear attention without g) the
 * product is skipped. */
__kernel void cp_walk(__global const float *restrict maps, int nch, __global float *restrict Xs, __global float *restrict ST, int dk, int dv,
                      int per_head, int span, int p_identity) {
    const int grp = get_group_id(0), bh = grp / per_head, lid = CP_LID, wg = CP_WG;
    const int j0 = (grp % per_head) * span, j1 = min(j0 + span, dv), W = dk + dv;
    __global float *S = ST + (size_t)bh * dk * dv;
    __global float *X = Xs + (size_t)bh * nch * dk * dv;
    for (int i = 0; i < dk; i++)
        for (int j = j0 + lid; j < j1; j += wg) X[(size_t)i * dv + j] = S[(size_t)i * dv + j];
    for (int ci = 0; ci < nch; ci++) {
        __global const float *m = maps + ((size_t)bh * nch + ci) * dk * W;
        __global const float *x0 = X + (size_t)ci * dk * dv;
        __global float *x1 = ci + 1 < nch ? X + (size_t)(ci + 1) * dk * dv : S;
        for (int i = 0; i < dk; i++) {
            __global const float *mi = m + (size_t)i * W;
            __global float *xo = x1 + (size_t)i * dv;
            if (p_identity)
                for (int j = j0 + lid; j < j1; j += wg) xo[j] = mi[dk + j] + x0[(size_t)i * dv + j];
            else {
                for (int j = j0 + lid; j < j1; j += wg) xo[j] = mi[dk + j];
                for (int p = 0; p < dk; p++) {
                    const float a = mi[p];
                    __global const float *xp = x0 + (size_t)p * dv;
                    for (int j = j0 + lid; j < j1; j += wg) xo[j] += a * xp[j];
                }
            }
        }
    }
}

#ifndef CP_ONE_ITEM
/* The walk on GPUs for dk a power of two <= 64 (the host's choice, ocl_chunkpar.c): cp_walk above
 * reads and writes X in global memory, one dependent update after another, which left it at about
 * 130 ns a multiply-add on an H100 (70 ms of a 75 ms VLA call at (1,4,32) T = 32768). Here a group
 * of WALK_WG items owns vb value columns of one head (groups = heads x per_head). Item
 * (jj = lid % vb, r0 = lid / vb) computes column jj of rows r0, r0 + rs, ... (rs = WALK_WG / vb).
 * Local memory, double-buffered by the chunk's parity: P [2][dk][dk + 1] (the odd stride: items of
 * one warp read different rows) and X [2][dk][vb]. Step j reads buffer j & 1 and writes the other,
 * whose last readers were before the previous step's barrier: one barrier a step. The next map is
 * in flight in registers during a step: the item's flat share of P (elements lid + k WALK_WG,
 * coalesced; dk divides WALK_WG, so they lie S = (WALK_WG / dk) W apart) and N's entries of its own
 * rows (read from registers, never staged). The form that loaded a column of P an item (64 loads,
 * all addresses live across the loop) took 255 registers and spilled; the map's row stride is
 * read back from local memory (wl) after each step's barrier, so that the compiler recomputes the
 * loads' offsets each step instead of holding them in registers (-cl-nv-verbose on an H100: 122
 * to 108 registers at 4 rows an item, 156 to 141 at 8; 255 to 253 at dk = 64). */
#define WALK_WG 128
#define WALK_NR 16 /* the most rows an item, and P's loads an item (dk = 64) */
#define WALK_FP 32

/* pf[k] = P's flat element lid + k WALK_WG, row pr + k prs, column pc (k < fp; rows past dk
 * clamped to the last: a valid address); nf[k] = N (r0 + k rs, jn) (rows past dk clamped; 0 where
 * the item's column has no N, jn < 0). m: the map [dk][W]. */
void walk_fetch(float *pf, float *nf, __global const float *m, int W, int dk, int fp, int pr, int prs, int pc, int r0,
                int rs, int jn, const int NR, const int FP) {
#pragma unroll
    for (int k = 0; k < FP; k++)
        if (k < fp) pf[k] = m[min(pr + k * prs, dk - 1) * W + pc];
#pragma unroll
    for (int k = 0; k < NR; k++) nf[k] = jn >= 0 ? m[min(r0 + k * rs, dk - 1) * W + dk + jn] : 0.0f;
}
#define WALK_FETCH(mm, ww) walk_fetch(pf, nf, mm, ww, dk, fp, pr, prs, pc, r0, rs, jn, NR, FP)

/* The walk over segments (the host's choice where a head's value blocks would leave most compute
 * units idle: few heads, many chunks). A head's nmap maps run in segments of seg; group
 * (head, segment, value block) walks its segment's maps from the segment's start state. The same
 * kernel runs three ways (ocl_chunkpar.c):
 *   compose: state [P_s | N_s] (dx = dk + dv, from [I | 0], N added to columns >= ncol0 = dk):
 *            the segment's own map, X_end = P_s X_start + N_s, into Xio [BH][nseg][dk][dk + dv]
 *   carry:   the plain walk (one segment) over those maps from ST: every segment's start state
 *            into Xs, the final state into ST
 *   expand:  every segment again from its start state (Xio), every chunk's start state into Xs
 * and with one segment, from ST, it is the plain walk. Maps are [dk][W], W = dk + dx - ncol0.
 * flags: WALK_FROM_I (start from [I | 0], Xio not read), WALK_KEEP (start states into Xs
 * [BH][nmap][dk][dx]), WALK_END (the end state into Xio). */
#define WALK_FROM_I 1
#define WALK_KEEP 2
#define WALK_END 4

/* NR: rows an item at most; FP: P's loads an item at most (dk^2 / WALK_WG: 8 at dk <= 32, 32 at
 * dk = 64). Constants where the kernels below inline it, so every register array has constant
 * indices (loops of 16 predicated rows at dk = 32, 8 columns a group, spent 8x the issue slots). */
void walk_local(__global const float *restrict maps, int nmap, int seg, __global float *restrict Xs,
                __global float *restrict Xio, int dk, int dx, int ncol0, int per_head, int vb, int p_identity,
                int flags, __local float *Pl, __local float *Xl, __local int *wl, const int NR, const int FP) {
    const int nseg = (nmap + seg - 1) / seg, grp = get_group_id(0), lid = get_local_id(0);
    const int bh = grp / (nseg * per_head), sg = (grp / per_head) % nseg, c0 = sg * seg, len = min(seg, nmap - c0);
    const int j0 = (grp % per_head) * vb, nv = min(vb, dx - j0), W = dk + dx - ncol0, ldp = dk + 1;
    const int jj = lid % vb, r0 = lid / vb, rs = WALK_WG / vb, nr = (dk - r0 + rs - 1) / rs;
    const int jc = j0 + min(jj, nv - 1); /* the column this item loads N for (past nv: computed, not stored) */
    const int jn = jc - ncol0;           /* its column of N (< 0: none) */
    const int prs = WALK_WG / dk, pr = lid / dk, pc = lid - pr * dk;
    const int fp = p_identity ? 0 : (dk * dk + WALK_WG - 1) / WALK_WG;
    const size_t pstride = (size_t)dk * ldp, xstride = (size_t)dk * vb, xsz = (size_t)dk * dx;
    __global float *S = Xio + ((size_t)bh * nseg + sg) * xsz;
    __global float *X = Xs + ((size_t)bh * nmap + c0) * xsz;
    const int keep = flags & WALK_KEEP;
    for (int e = lid; e < dk * vb; e += WALK_WG) { /* the start state */
        const int i = e / vb, col = e - i * vb;
        float x = 0.0f;
        if (col < nv) {
            x = flags & WALK_FROM_I ? (j0 + col == i ? 1.0f : 0.0f) : S[(size_t)i * dx + j0 + col];
            if (keep) X[(size_t)i * dx + j0 + col] = x;
        }
        Xl[e] = x;
    }
    if (lid == 0) wl[0] = W;
    float pf[WALK_FP], nf[WALK_NR], ncur[WALK_NR]; /* FP, NR of them used */
    __global const float *m = maps + ((size_t)bh * nmap + c0) * dk * W;
    WALK_FETCH(m, W);
#pragma unroll
    for (int k = 0; k < FP; k++)
        if (k < fp && pr + k * prs < dk) Pl[(pr + k * prs) * ldp + pc] = pf[k];
#pragma unroll
    for (int k = 0; k < NR; k++) ncur[k] = nf[k];
    if (len > 1) WALK_FETCH(m + (size_t)dk * W, W);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int ci = 0; ci < len; ci++) {
        const int cur = ci & 1;
        __local const float *P = Pl + cur * pstride, *Xc = Xl + cur * xstride;
        __local float *Xn = Xl + (cur ^ 1) * xstride;
        float acc[WALK_NR];
#pragma unroll
        for (int k = 0; k < NR; k++) acc[k] = ncur[k] + (p_identity && k < nr ? Xc[(r0 + k * rs) * vb + jj] : 0.0f);
        if (!p_identity)
            for (int p = 0; p < dk; p++) {
                const float x = Xc[p * vb + jj];
#pragma unroll
                for (int k = 0; k < NR; k++)
                    if (k < nr) acc[k] += P[(r0 + k * rs) * ldp + p] * x;
            }
        const int last = ci + 1 == len;
        __global float *x1 = last ? S : X + (size_t)(ci + 1) * xsz;
        if (last ? flags & WALK_END : keep) {
#pragma unroll
            for (int k = 0; k < NR; k++)
                if (k < nr && jj < nv) x1[(size_t)(r0 + k * rs) * dx + j0 + jj] = acc[k];
        }
        if (!last) {
#pragma unroll
            for (int k = 0; k < NR; k++)
                if (k < nr) Xn[(r0 + k * rs) * vb + jj] = acc[k];
            /* the next map into the other buffer and registers */
            __local float *Pn = Pl + (cur ^ 1) * pstride;
#pragma unroll
            for (int k = 0; k < FP; k++)
                if (k < fp && pr + k * prs < dk) Pn[(pr + k * prs) * ldp + pc] = pf[k];
#pragma unroll
            for (int k = 0; k < NR; k++) ncur[k] = nf[k];
        }
        if (ci + 2 < len) {
            const int Ws = wl[0]; /* = W (above) */
            WALK_FETCH(m + (size_t)(ci + 2) * dk * Ws, Ws);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

#define WALK_ARGS                                                                                       \
    __global const float *restrict maps, int nmap, int seg, __global float *restrict Xs,                \
        __global float *restrict Xio, int dk, int dx, int ncol0, int per_head, int vb, int p_identity,  \
        int flags, __local float *Pl, __local float *Xl
#define WALK_PASS maps, nmap, seg, Xs, Xio, dk, dx, ncol0, per_head, vb, p_identity, flags, Pl, Xl, wl
/* The host takes the one for its dk (<= 32, or 64) with the fewest rows an item that covers
 * ceil(dk / (WALK_WG / vb)). */
#define WALK_KERNEL(name, NR, FP)                                                                       \
    __kernel void name(WALK_ARGS) {                                                                     \
        __local int wl[1]; /* walk_local's row stride */                                                \
        walk_local(WALK_PASS, NR, FP);                                                                  \
    }
WALK_KERNEL(cp_walk_local2, 2, 8)
WALK_KERNEL(cp_walk_local4, 4, 8)
WALK_KERNEL(cp_walk_local8, 8, 8)
WALK_KERNEL(cp_walk_local64_4, 4, 32)
WALK_KERNEL(cp_walk_local64_8, 8, 32)
WALK_KERNEL(cp_walk_local64_16, 16, 32)
#endif

/* Outputs of one chunk from its start state X_j: E = Y - Wr X_j (in place in Y), then
 * O = diag(gam) Q X_j + Mq E, staged in Ob [B*H, T, dv] (then scattered to o). One work-group
 * per (head, chunk); items stride the value columns, the innermost loop. */
__kernel void cp_out(__global const int *restrict starts, int nch, __global const float *restrict q, __global const float *restrict Wr,
                     __global float *restrict Y, __global const float *restrict Mq, __global const float *restrict gam, int has_g, int residual,
                     __global const float *restrict Xs, __global float *restrict Ob, __global float *restrict o, int T, int H, int dk, int dv,
                     int C) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, b = bh / H, h = bh % H;
    const int lid = CP_LID, wg = CP_WG;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *Q = q + tok * dk, *WR = Wr + tok * dk, *Mc = Mq + tok * C;
    __global const float *X = Xs + (size_t)grp * dk * dv;
    __global float *E = Y + tok * dv, *O = Ob + tok * dv;
    for (int t = 0; t < c; t++) {
        __global float *et = E + (size_t)t * dv, *ot = O + (size_t)t * dv;
        for (int j = lid; j < dv; j += wg) ot[j] = 0.0f;
        if (residual) cp_rows_f(et, X, dv, WR + (size_t)t * dk, 1, dk, dv, -1.0f);
        cp_rows_f(ot, X, dv, Q + (size_t)t * dk, 1, dk, dv, 1.0f);
        if (has_g) {
            const float gt = gam[tok + t];
            for (int j = lid; j < dv; j += wg) ot[j] *= gt;
        }
        cp_rows_f(ot, E, dv, Mc + (size_t)t * C, 1, t + 1, dv, 1.0f); /* E's rows <= t: this item's */
        for (int j = lid; j < dv; j += wg) o[vla_bthd(b, ts + t, h, j, T, H, dv)] = ot[j];
    }
}

#ifndef CP_ONE_ITEM
/* ---- GPU forms of cp_sfac and cp_out in local memory (no g; dk, dv, C <= 64: the host's
 * choice, ocl_chunkpar.c). Measured on an H100 with NVIDIA's driver, the global-memory forms
 * above took 33 and 14 ms of a 164 ms VLA call at (8,16,64) T = 8192: each row update waits on
 * global memory. Here a group stages its chunk's operands in local memory, and the products run
 * as LT x LT register tiles, one tile an item. ---- */
#define LT 4

/* acc[r] += sum_{p < kd} A(i0 + r, p) B(p, j0 .. j0 + 3) for the item's tile i0 = LT ti, j0 = LT tj
 * (rows past m clamped: the caller drops them); A [.][lda] and B [.][ldb] row-major in local
 * memory, 16-byte aligned, lda and ldb multiples of 4, B's rows at least j0 + 4 long. Steps of 4
 * p read float4s: a step's 4 rows of A and 4 of B, 8 loads for 64 multiply-adds (scalar loads, a
 * column of A and a row of B a p, would take 8 for 16). Items of one warp share ti (A's loads
 * broadcast) and take consecutive tj (B's along a row). */
void lt_tile(float4 *acc, __local const float *A, int lda, __local const float *B, int ldb, int ti, int tj, int m,
             int kd) {
    const int j0 = LT * tj;
    int ao[LT];
#pragma unroll
    for (int r = 0; r < LT; r++) ao[r] = min(LT * ti + r, m - 1) * lda;
    int p = 0;
    for (; p + 4 <= kd; p += 4) {
        const float4 b0 = *(__local const float4 *)(B + p * ldb + j0), b1 = *(__local const float4 *)(B + (p + 1) * ldb + j0);
        const float4 b2 = *(__local const float4 *)(B + (p + 2) * ldb + j0), b3 = *(__local const float4 *)(B + (p + 3) * ldb + j0);
#pragma unroll
        for (int r = 0; r < LT; r++) {
            const float4 a = *(__local const float4 *)(A + ao[r] + p);
            acc[r] = fma((float4)(a.x), b0, fma((float4)(a.y), b1, fma((float4)(a.z), b2, fma((float4)(a.w), b3, acc[r]))));
        }
    }
    for (; p < kd; p++) {
        const float4 b0 = *(__local const float4 *)(B + p * ldb + j0);
#pragma unroll
        for (int r = 0; r < LT; r++) acc[r] = fma((float4)(A[ao[r] + p]), b0, acc[r]);
    }
}

void lt_zero(float4 *acc) {
#pragma unroll
    for (int r = 0; r < LT; r++) acc[r] = (float4)(0.0f);
}

/* Entry s of a float4 (s a constant after unrolling). */
#define F4_AT(v, s) ((s) == 0 ? (v).x : (s) == 1 ? (v).y : (s) == 2 ? (v).z : (v).w)
/* n rounded up to a multiple of 4: the row length of the local arrays lt_tile reads. */
#define UP4(n) (((n) + 3) & ~3)

/* D[i ldd + t] = S[t lds + i] (i < n, t < c): a c x n block of a row-major global array,
 * transposed into local memory. Items take consecutive t, so the local stores fall in distinct
 * banks (items along i would store 64 floats apart at C = 64: one bank, a 32-way conflict), and
 * read 4 entries of a row a step (a float4 where rows are 16-byte aligned). */
void stage_transposed(__local float *D, int ldd, __global const float *S, int lds, int n, int c) {
    const int lid = get_local_id(0), wg = get_local_size(0), nb = (n + 3) / 4;
    const int vec = ((lds | n) & 3) == 0; /* S itself is a token's row start: aligned when lds is */
    for (int e = lid; e < c * nb; e += wg) {
        const int t = e % c, i = 4 * (e / c);
        __global const float *st = S + (size_t)t * lds + i;
        if (vec) {
            const float4 x = *(__global const float4 *)st;
            D[i * ldd + t] = x.x, D[(i + 1) * ldd + t] = x.y, D[(i + 2) * ldd + t] = x.z, D[(i + 3) * ldd + t] = x.w;
        } else
            for (int r = 0; r < 4 && i + r < n; r++) D[(i + r) * ldd + t] = st[r];
    }
}

/* cp_gram on GPUs (dk <= 64, the chunk's U in local memory, Ul [C][dk] float): the global form's
 * row updates took 5.3 ms of a 48 ms VLA call at (8,16,64) T = 8192 on an H100. Items take
 * LT x LT tiles of U^T U, in real_t. */
__kernel void cp_gram_local(__global const int *restrict starts, int nch, __global const float *restrict uu,
                            __global real_t *restrict Gr, int T, int dk, __local float *Ul) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, lid = get_local_id(0), wg = get_local_size(0);
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    __global const float *U = uu + ((size_t)bh * T + ts) * dk;
    __global real_t *G = Gr + ((size_t)bh * (nch + 2) + ci) * dk * dk;
    for (int e = lid; e < c * dk; e += wg) Ul[e] = U[e];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int NI = (dk + LT - 1) / LT;
    for (int tile = lid; tile < NI * NI; tile += wg) {
        const int ti = tile / NI, tj = tile - ti * NI;
        int ao[LT], bo[LT];
        real_t acc[LT * LT];
#pragma unroll
        for (int r = 0; r < LT; r++) {
            ao[r] = min(ti + r * NI, dk - 1);
            bo[r] = min(tj + r * NI, dk - 1);
        }
#pragma unroll
        for (int e = 0; e < LT * LT; e++) acc[e] = 0;
        for (int t = 0; t < c; t++) {
            real_t a[LT], b2[LT];
#pragma unroll
            for (int r = 0; r < LT; r++) {
                a[r] = Ul[t * dk + ao[r]];
                b2[r] = Ul[t * dk + bo[r]];
            }
#pragma unroll
            for (int r = 0; r < LT; r++)
#pragma unroll
                for (int s2 = 0; s2 < LT; s2++) acc[r * LT + s2] += a[r] * b2[s2];
        }
        for (int r = 0; r < LT; r++)
            for (int s2 = 0; s2 < LT; s2++) {
                const int i = ti + r * NI, j = tj + s2 * NI;
                if (i < dk && j < dk) G[(size_t)i * dk + j] = acc[r * LT + s2];
            }
    }
}

/* Cholesky in place of a packed lower triangle (entry (i, j), j <= i, at i (i + 1) / 2 + j) in
 * local memory: cp_chol's GPU form (panels of 4 columns, the flat (row, column) item loops), with
 * L[j][u] read from the lower triangle where cp_chol reads its upper copy. */
#define PK(i, j) ((i) * ((i) + 1) / 2 + (j))
void lchol_packed(__local real_t *A, int n) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int k = 0; k < n; k++) {
        const int k0 = k - k % 4, kend = min(k0 + 4, n);
        const real_t d = sqrt(fmax(A[PK(k, k)], (real_t)1e-300)), inv = 1 / d;
        barrier(CLK_LOCAL_MEM_FENCE); /* every item has read the pivot before item 0 writes it */
        for (int j = k + 1 + lid; j < n; j += wg) A[PK(j, k)] *= inv;
        if (lid == 0) A[PK(k, k)] = d;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int pw = kend - k - 1; /* the panel's later columns, every row below */
        for (int e = lid; e < (n - k - 1) * pw; e += wg) {
            const int i = k + 1 + e / pw, j = k + 1 + e % pw;
            if (j <= i) A[PK(i, j)] -= A[PK(i, k)] * A[PK(j, k)];
        }
        if (k + 1 == kend && kend < n) { /* the trailing triangle's rank-4 update */
            const int m = n - kend;
            for (int e = lid; e < m * m; e += wg) {
                const int i = kend + e / m, j = kend + e % m;
                if (j > i) continue;
                real_t x = 0;
                for (int u = k0; u < kend; u++) x += A[PK(i, u)] * A[PK(j, u)];
                A[PK(i, j)] -= x;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Xp = L^{-1} of the n x n packed lower triangle Lp (packed; X row by row from the rows above, a
 * barrier a row). Ends with a barrier where n > 0. */
void linv_packed(__local const real_t *Lp, __local real_t *Xp, int n) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int r = 0; r < n; r++) {
        const real_t inv = 1 / Lp[PK(r, r)];
        for (int col = lid; col <= r; col += wg) {
            real_t x = col == r ? 1 : 0;
            for (int p = col; p < r; p++) x -= Lp[PK(r, p)] * Xp[PK(p, col)];
            Xp[PK(r, col)] = x * inv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The inverse of the SPD dk x dk matrix M (global, row-major; its lower triangle is read): Lp
 * gets M's lower triangle packed, then its Cholesky factor L, and Xp = L^{-1}; M^{-1} = X^T X,
 * entry by entry from lspd_inv_at. Ends with a barrier. */
void lspd_inverse(__global const real_t *M, __local real_t *Lp, __local real_t *Xp, int dk) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    for (int e = lid; e < dk * dk; e += wg) {
        const int i = e / dk, j = e - i * dk;
        if (j <= i) Lp[PK(i, j)] = M[e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    lchol_packed(Lp, dk);
    linv_packed(Lp, Xp, dk);
}

/* Entry (i, j) of X^T X, X = Xp packed lower (lspd_inverse's M^{-1}). */
real_t lspd_inv_at(__local const real_t *Xp, int dk, int i, int j) {
    real_t x = 0;
    for (int p = max(i, j); p < dk; p++) x += Xp[PK(p, i)] * Xp[PK(p, j)];
    return x;
}

/* cp_aend on GPUs where M and L^{-1} fit local memory as packed lower triangles (dk = 64 in fp64:
 * 33 KB): the global form's serial steps took 0.08 ms of a 1.1 ms VLA call at (1,4,32) T = 2048
 * on an H100. Lp: M, then L; Xp: X = L^{-1} row by row; A_end = X^T X. One group a head. */
__kernel void cp_aend_local(__global const real_t *restrict Gr, int nch, int dk, __global float *restrict Af,
                            __local real_t *Lp, __local real_t *Xp) {
    const int bh = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
    const size_t n2 = (size_t)dk * dk;
    lspd_inverse(Gr + ((size_t)bh * (nch + 2) + nch) * n2, Lp, Xp, dk);
    for (int e = lid; e < dk * dk; e += wg) Af[(size_t)bh * n2 + e] = (float)lspd_inv_at(Xp, dk, e / dk, e % dk);
}

/* cp_apart on GPUs where its arrays fit local memory, over the A part's pieces of at most C
 * tokens (the host's apart_plan: 32 at dk <= 32; at dk = 64, 64 in float, 32 in fp64, 38 KB):
 * Ld real, M's lower triangle packed (then its Cholesky), Yd [dk][C + 1] real (Y, then Z^T; the
 * odd stride spreads the Z solve's rows over banks), Gp real, G's lower triangle packed (then its
 * Cholesky). GPUs build this file with real_t float by default (VLA_OPENCL_CP_FP64,
 * ocl_backend.c), as CUDA's A part: 1.1-1.2x VLA chunked on an H200, the outputs' error against
 * float64 up to 2.1e-6 at lambda0 = 1e-3 (2.2e-7 in double; a_t comes from a cancelling
 * difference there). The global form's serial row updates took 0.36 ms of a 1.1 ms VLA call at
 * (1,4,32) T = 2048 on an H100. Steps as cp_apart's; the solves run an item a column of Y
 * (tokens) or a row of Z^T, which needs no barrier inside a solve. */
__kernel void cp_apart_local(__global const int *restrict starts, int nch, int ppc, __global const float *restrict uu,
                             __global const real_t *restrict Gr, __global float *restrict Al, int T, int dk, int C,
                             float s_u, float eps, int ngr, __global float *restrict Af, __local real_t *Ld,
                             __local real_t *Yd, __local real_t *Gp) {
    /* Groups past ngr (one a head, when the host fuses A_end in: the default where it fits) take
     * cp_aend_local's A_end = M_end^{-1} of head grp - ngr: A_end needs only the Gram prefix, and
     * in its own launch after this one its ~3 dk barriers ran alone (timings: apart_plan in
     * ocl_chunkpar.c). Such a group runs the same steps: M_end's Cholesky into Ld, a piece of
     * c = 0 tokens, then L^{-1} into Yd (dk (C + 1) reals hold its dk (dk + 1) / 2: the host's
     * check) and X^T X. Both kinds take one path with trip counts that differ (no branch
     * around barriers: PoCL 3.1 computes cp_apart_local wrong with one). */
    const int grp = get_group_id(0), end = grp >= ngr, pg = end ? 0 : grp;
    const int per = nch * ppc, bh = end ? grp - ngr : pg / per, ci = pg % per / ppc, q = pg % ppc;
    const int lid = get_local_id(0), wg = get_local_size(0);
    /* c = 0: a last chunk with fewer pieces (the group writes nothing), or an A_end group (no early
     * return either: PoCL 3.1 computed every group wrong with one before the barriers) */
    const int cs = starts[ci], ce = starts[ci + 1], ts = min(cs + q * C, ce), ldy = C + 1;
    const int c = end ? 0 : min(C, ce - ts), earlier = end ? 0 : ts - cs;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *U = uu + tok * dk, *U0 = uu + ((size_t)bh * T + cs) * dk;
    __global const real_t *Mg = Gr + ((size_t)bh * (nch + 2) + (end ? nch : ci)) * dk * dk;
    for (int e = lid; e < dk * dk; e += wg) { /* M at the piece's start: M_j + the chunk's earlier U^T U */
        const int i = e / dk, j = e - i * dk;
        if (j > i) continue;
        real_t x = Mg[e];
        for (int t = 0; t < earlier; t++) x += (real_t)U0[(size_t)t * dk + i] * (real_t)U0[(size_t)t * dk + j];
        Ld[PK(i, j)] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    lchol_packed(Ld, dk);
    for (int t = lid; t < c; t += wg) /* Y = L^{-1} U^T, column t */
        for (int r = 0; r < dk; r++) {
            __local const real_t *lr = Ld + PK(r, 0);
            real_t s0 = 0, s1 = 0;
            int p = 0;
            for (; p + 2 <= r; p += 2) {
                s0 += lr[p] * Yd[p * ldy + t];
                s1 += lr[p + 1] * Yd[(p + 1) * ldy + t];
            }
            if (p < r) s0 += lr[p] * Yd[p * ldy + t];
            Yd[r * ldy + t] = ((real_t)U[(size_t)t * dk + r] - (s0 + s1)) / lr[r];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int NI = (c + LT - 1) / LT;
    for (int tile = lid; tile < NI * NI; tile += wg) { /* G = I + Y^T Y, lower */
        const int ti = tile / NI, tj = tile - ti * NI;
        int ao[LT], bo[LT];
        real_t acc[LT * LT];
#pragma unroll
        for (int r = 0; r < LT; r++) {
            ao[r] = min(ti + r * NI, c - 1);
            bo[r] = min(tj + r * NI, c - 1);
        }
#pragma unroll
        for (int e = 0; e < LT * LT; e++) acc[e] = 0;
        for (int r = 0; r < dk; r++) {
            real_t a[LT], b2[LT];
#pragma unroll
            for (int u = 0; u < LT; u++) {
                a[u] = Yd[r * ldy + ao[u]];
                b2[u] = Yd[r * ldy + bo[u]];
            }
#pragma unroll
            for (int u = 0; u < LT; u++)
#pragma unroll
                for (int s2 = 0; s2 < LT; s2++) acc[u * LT + s2] += a[u] * b2[s2];
        }
        for (int u = 0; u < LT; u++)
            for (int s2 = 0; s2 < LT; s2++) {
                const int i = ti + u * NI, j = tj + s2 * NI;
                if (i < c && j <= i) Gp[PK(i, j)] = (i == j ? 1 : 0) + acc[u * LT + s2];
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* Y is read above before it is overwritten below */
    for (int t = lid; t < c; t += wg) /* Z^T = L^{-T} Y in place, column t, rows from the last */
        for (int r = dk - 1; r >= 0; r--) {
            real_t s0 = 0, s1 = 0; /* L[p][r], p > r: column r of the packed rows */
            int p = r + 1;
            for (; p + 2 <= dk; p += 2) {
                s0 += Ld[PK(p, r)] * Yd[p * ldy + t];
                s1 += Ld[PK(p + 1, r)] * Yd[(p + 1) * ldy + t];
            }
            if (p < dk) s0 += Ld[PK(p, r)] * Yd[p * ldy + t];
            Yd[r * ldy + t] = (Yd[r * ldy + t] - (s0 + s1)) / Ld[PK(r, r)];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    lchol_packed(Gp, c);
    for (int r = lid; r < dk; r += wg) { /* Z = Lg^{-1} Z on Z^T's row r, tokens in order */
        __local real_t *zr = Yd + r * ldy;
        for (int t = 0; t < c; t++) {
            __local const real_t *gt = Gp + PK(t, 0);
            real_t s0 = 0, s1 = 0;
            int s = 0;
            for (; s + 2 <= t; s += 2) {
                s0 += gt[s] * zr[s];
                s1 += gt[s + 1] * zr[s + 1];
            }
            if (s < t) s0 += gt[s] * zr[s];
            zr[t] = (zr[t] - (s0 + s1)) / gt[t];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < c; t += wg) { /* a_t = normalize(z_t / (s_u Lg_tt)) */
        const real_t sc = 1 / ((real_t)s_u * Gp[PK(t, t)]);
        real_t ss = 0;
        for (int r = 0; r < dk; r++) {
            const real_t x = Yd[r * ldy + t] * sc;
            ss += x * x;
        }
        const real_t inv = sc / fmax(sqrt(ss), (real_t)eps);
        for (int r = 0; r < dk; r++) Al[(tok + t) * dk + r] = (float)(Yd[r * ldy + t] * inv);
    }
    /* A_end groups: X = L^{-1} packed into Yd, A_end = X^T X (piece groups: n = 0, no steps) */
    const int ne = end ? dk : 0;
    linv_packed(Ld, Yd, ne);
    for (int e = lid; e < ne * ne; e += wg) Af[(size_t)bh * dk * dk + e] = (float)lspd_inv_at(Yd, dk, e / dk, e % dk);
}

/* ---- VLA's A part carried over segments (GPUs; the host's choice, apart_plan) ---- */

/* acc[r] += sum_{p < kd} At(p, i0 + r) B(p, j0 .. j0 + 3), i0 = LT ti, j0 = LT tj: lt_tile with A
 * given transposed, At [kd][lda], so a step's 4 rows of A are one float4 of At's row p: 2 loads
 * for 16 multiply-adds. Both 16-byte aligned, lda and ldb multiples of 4; At's rows at least
 * i0 + 4 long (entries past the caller's rows are read and dropped). Items of one warp share ti
 * (At's loads broadcast) and take consecutive tj. */
void lt_tile_tn(float4 *acc, __local const float *At, int lda, __local const float *B, int ldb, int ti, int tj,
                int kd) {
    const int i0 = LT * ti, j0 = LT * tj;
#pragma unroll 4
    for (int p = 0; p < kd; p++) {
        const float4 a = *(__local const float4 *)(At + p * lda + i0), b = *(__local const float4 *)(B + p * ldb + j0);
        acc[0] = fma((float4)(a.x), b, acc[0]);
        acc[1] = fma((float4)(a.y), b, acc[1]);
        acc[2] = fma((float4)(a.z), b, acc[2]);
        acc[3] = fma((float4)(a.w), b, acc[3]);
    }
}

/* G = L L^T (c x c, the lower triangle of Gl, row stride ldg) and Z = L^{-1} Zl (c x dk, Zl
 * row-major, stride ldz) in one factorisation: a Cholesky of the (c + dk) x c panel [G; Zl^T]
 * leaves Z^T below L, so the solve takes no steps (barriers) of its own. Right-looking by panels
 * of 4 columns: column k scaled (L's column k and Z's row k, final then), the panel's later
 * columns updated, and after the panel's last column the trailing part's rank-4 update. Column k
 * also goes to PT [4][c + dk] (G's rows at i, Z's at c + i), which the updates read: its entries
 * broadcast or contiguous, where reading L's columns in Gl would put a warp on one bank. Z's
 * updates run items along Zl's rows (contiguous). Dg[k] = L_kk. Pivots are floored at a tiny
 * value (G = I + U A U^T >= I). Ends with a barrier. */
void lchol_gz(__local float *Gl, int ldg, __local float *Zl, int ldz, int c, int dk, __local float *PT,
              __local float *Dg) {
    const int lid = get_local_id(0), wg = get_local_size(0), np = c + dk;
    /* the trailing update's lanes: G's columns (32 or 64 items a row), Z's columns */
    const int gw = c > 32 ? 64 : 32, gsh = c > 32 ? 6 : 5, zw = dk > 32 ? 64 : 32, zsh = dk > 32 ? 6 : 5;
    for (int k0 = 0; k0 < c; k0 += 4) {
        const int kend = min(k0 + 4, c);
        for (int k = k0; k < kend; k++) {
            __local float *pk = PT + (k - k0) * np;
            /* every item reads the pivot; nobody writes it in this step */
            const float d = sqrt(fmax(Gl[k * ldg + k], 1e-30f)), inv = 1.0f / d;
            for (int e = k + 1 + lid; e < np; e += wg) {
                float l;
                if (e < c) {
                    l = Gl[e * ldg + k] * inv;
                    Gl[e * ldg + k] = l;
                } else {
                    l = Zl[k * ldz + e - c] * inv;
                    Zl[k * ldz + e - c] = l;
                }
                pk[e] = l;
            }
            if (lid == 0) Dg[k] = d;
            barrier(CLK_LOCAL_MEM_FENCE);
            const int pw = kend - k - 1; /* the panel's later columns k + 1 .. kend - 1, rows past k */
            if (pw > 0) {
                for (int e = lid; e < (np - k - 1) * pw; e += wg) {
                    const int r = e / pw, i = k + 1 + r, j = k + 1 + e - r * pw;
                    if (i >= c) Zl[j * ldz + i - c] -= pk[i] * pk[j];
                    else if (j <= i) Gl[i * ldg + j] -= pk[i] * pk[j];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }
        if (kend < c) {
            const int nu = kend - k0;
            /* G: rows i >= kend, columns kend <= j <= i */
            for (int i = kend + (lid >> gsh); i < c; i += wg >> gsh) {
                const int j = kend + (lid & (gw - 1));
                if (j > i) continue;
                float x = 0.0f;
                for (int u = 0; u < nu; u++) x += PT[u * np + i] * PT[u * np + j];
                Gl[i * ldg + j] -= x;
            }
            /* Z: Zl's rows kend <= j < c, columns i < dk */
            for (int j = kend + (lid >> zsh); j < c; j += wg >> zsh) {
                const int i = lid & (zw - 1);
                if (i >= dk) continue;
                float x = 0.0f;
                for (int u = 0; u < nu; u++) x += PT[u * np + c + i] * PT[u * np + j];
                Zl[j * ldz + i] -= x;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

/* Ut [dk][c4] = U^T of a piece's c tokens (U [c][dk] global), its columns past c zeroed (read by
 * the tiles, whose entries there are dropped). */
void stage_piece(__local float *Ut, int c4, __global const float *U, int dk, int c) {
    const int lid = get_local_id(0), wg = get_local_size(0), pad = c4 - c;
    stage_transposed(Ut, c4, U, dk, dk, c);
    for (int e = lid; e < dk * pad; e += wg) Ut[(e / pad) * c4 + c + e % pad] = 0.0f;
}

/* VLA's A part, a group a segment of chunks of one head (groups = heads x segments), A carried
 * over the segment's tokens, as the CUDA backend's apart_kernel. A at the segment start: A_0 =
 * I / lambda0 in the first segment, else M_j^{-1} from the Gram prefix (Gr's slot j: its
 * lspd_inverse, as cp_aend_local). The first segment has f0 chunks (the host's:
 * those holding the first dk tokens), the others seg: A falls from I / lambda0 by orders of
 * magnitude while the first dk tokens fill its span, and the float A that this cancellation
 * leaves is carried no further (lambda0 = 1e-3 on PoCL, segments of 2 chunks: outputs' error
 * 3.1e-5 with a first segment as long as the others, 4.6e-6 with f0 = 1). Then, a piece of at
 * most Ca tokens at a time (VLA-MATH 2.4, Woodbury):
 *   UA = U A (c x dk), G = I + UA U^T = L L^T, Z = L^{-1} UA (lchol_gz),
 *   a_t = normalize(z_t / (s_u L_tt))  (as cp_apart),   A <- A - Z^T Z.
 * Against cp_apart_local (a group a piece, from M_j: M's Cholesky, G's, three triangular solves)
 * a piece costs one Cholesky of G and three register-tile products, and M's Cholesky and inverse
 * come once a segment. A is float (as CUDA's), the start's inverse real_t.
 * Local, one arena (floats, rows padded to 4): A [dk][dk4], Ut [dk][c4] (the piece's U^T), Zl
 * [Ca][dk4] (UA, then Z), PT [4][Ca + dk], Dg [c4] (L's diagonal, then a_t's scale), Gl
 * [Ca][c4 + 1] (G, then L); the start's inverse uses two packed triangles of real_t after A (the
 * host sizes the arena for both). The group has 256 items. */
__kernel void cp_apart_seg(__global const int *restrict starts, int nch, int f0, int seg, __global const float *restrict uu,
                           __global const real_t *restrict Gr, __global float *restrict Al, int T, int dk, int Ca,
                           float s_u, float eps, float inv_lambda, __local float4 *arena4) {
    __local float *arena = (__local float *)arena4;
    /* nseg as the host's seg_count; passed in as an argument instead, NVIDIA's build of this kernel
     * ran 15% slower on an H100 */
    const int nseg = 1 + (nch - f0 + seg - 1) / seg, grp = get_group_id(0), bh = grp / nseg, g = grp - bh * nseg;
    const int lid = get_local_id(0), wg = get_local_size(0), dk4 = UP4(dk), c4 = UP4(Ca), np = Ca + dk;
    const int j0 = g ? f0 + (g - 1) * seg : 0, t0 = starts[j0], t1 = starts[g ? min(j0 + seg, nch) : f0];
    const int ldg = c4 + 1; /* Gl's rows: odd, so lchol_gz's column reads fall in distinct banks */
    __local float *A = arena, *Ut = A + dk * dk4, *Zl = Ut + dk * c4, *PT = Zl + Ca * dk4, *Dg = PT + 4 * np;
    __local float *Gl = Dg + c4; /* last: the float4 arrays before it stay 16-byte aligned */
    __global const float *U = uu + (size_t)bh * T * dk;
    if (g == 0) {
        for (int e = lid; e < dk * dk4; e += wg) {
            const int i = e / dk4, j = e - i * dk4;
            A[e] = i == j ? inv_lambda : 0.0f;
        }
    } else {
        __local real_t *Lp = (__local real_t *)Ut, *Xp = Lp + dk * (dk + 1) / 2;
        lspd_inverse(Gr + ((size_t)bh * (nch + 2) + j0) * dk * dk, Lp, Xp, dk);
        for (int e = lid; e < dk * dk4; e += wg) { /* padding columns 0 */
            const int i = e / dk4, j = e - i * dk4;
            A[e] = j < dk ? (float)lspd_inv_at(Xp, dk, i, j) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* Lp and Xp (Ut's place) read before U^T is staged */
    }
    const int NA = dk4 / LT; /* A's tiles a side */
    for (int ts = t0; ts < t1; ts += Ca) {
        const int c = min(Ca, t1 - ts), NI = (c + LT - 1) / LT;
        if (ts == t0) stage_piece(Ut, c4, U + (size_t)ts * dk, dk, c); /* later pieces': the previous piece's last step */
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int tile = lid; tile < NI * NA; tile += wg) { /* UA = U A: rows t < c of Zl */
            const int ti = tile / NA, tj = tile - ti * NA;
            float4 acc[LT];
            lt_zero(acc);
            lt_tile_tn(acc, Ut, c4, A, dk4, ti, tj, dk);
            for (int r = 0; r < LT; r++)
                if (LT * ti + r < c) *(__local float4 *)(Zl + (LT * ti + r) * dk4 + LT * tj) = acc[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int tile = lid; tile < NI * NI; tile += wg) { /* G = I + UA U^T, the lower tiles */
            const int ti = tile / NI, tj = tile - ti * NI;
            if (tj > ti) continue;
            float4 acc[LT];
            lt_zero(acc);
            lt_tile(acc, Zl, dk4, Ut, c4, ti, tj, c, dk);
            for (int r = 0; r < LT; r++)
                for (int s2 = 0; s2 < LT; s2++) {
                    const int i = LT * ti + r, j = LT * tj + s2;
                    if (i < c && j <= i) Gl[i * ldg + j] = F4_AT(acc[r], s2) + (i == j ? 1.0f : 0.0f);
                }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        lchol_gz(Gl, ldg, Zl, dk4, c, dk, PT, Dg);
        for (int t = lid; t < c; t += wg) { /* a_t's scale: x = z_t / (s_u L_tt), a_t = x / max(|x|, eps) */
            const float sc = 1.0f / (s_u * Dg[t]);
            float ss = 0.0f;
            for (int i = 0, ii = t % dk; i < dk; i++, ii = ii + 1 == dk ? 0 : ii + 1) { /* skewed: distinct banks */
                const float z = Zl[t * dk4 + ii];
                ss += z * z;
            }
            Dg[t] = sc / fmax(fabs(sc) * sqrt(ss), eps);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        __global float *at = Al + ((size_t)bh * T + ts) * dk;
        for (int e = lid; e < c * dk; e += wg) {
            const int t = e / dk, i = e - t * dk;
            at[e] = Zl[t * dk4 + i] * Dg[t];
        }
        for (int tile = lid; tile < NA * NA; tile += wg) { /* A <- A - Z^T Z (Z's padding columns 0) */
            const int ui = tile / NA, uj = tile - ui * NA;
            float4 acc[LT];
            lt_zero(acc);
            lt_tile_tn(acc, Zl, dk4, Zl, dk4, ui, uj, c);
            for (int r = 0; r < LT; r++)
                if (LT * ui + r < dk) {
                    __local float4 *a4 = (__local float4 *)(A + (LT * ui + r) * dk4 + LT * uj);
                    *a4 -= acc[r];
                }
        }
        if (ts + Ca < t1) /* the next piece's U^T (Ut was last read by G's product) */
            stage_piece(Ut, c4, U + (size_t)(ts + Ca) * dk, dk, min(Ca, t1 - ts - Ca));
    }
}

/* Tl [C][C], strictly lower L in its first c rows and columns, becomes T = (I + L)^{-1} there (unit
 * lower, its zeros above the diagonal written), by blocks of 16 rows: each diagonal block inverted
 * by forward substitution, an item a column (16 steps in registers), then block row i's
 * off-diagonal part T_i,<i = -T_ii (L_i,<i T_<i,<i) by two small products through scr
 * [16][C]. Applied to the chunk's [Kr | V] as products (T X), the solve runs on every item of the
 * group; substituting an item a column (32 of 256 items busy, 64 dependent steps each) took most
 * of cp_sfac_local's 18.6 ms at (8,16,64) T = 8192 on an H100. Barriers: uniform control flow;
 * ends with one. */
void lt_unit_inverse(__local float *Tl, int C, int c, __local float *scr) {
    const int lid = get_local_id(0), wg = get_local_size(0), nb = (c + 15) / 16;
    for (int e = lid; e < c * c; e += wg) { /* the zeros above the diagonal blocks */
        const int i = e / c, j = e - i * c;
        if (j / 16 > i / 16) Tl[i * C + j] = 0.0f;
    }
    float x[16];
    const int blk = lid / 16, j = lid % 16, r0 = 16 * blk, bs = min(16, c - r0);
    const int own = blk < nb && j < bs;
    if (own) {
        __local const float *D = Tl + r0 * C + r0;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float acc = i == j ? 1.0f : 0.0f;
#pragma unroll
            for (int r = 0; r < i; r++) acc -= D[min(i, bs - 1) * C + min(r, bs - 1)] * x[r]; /* rows past bs: discarded */
            x[i] = i < j ? 0.0f : acc;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* the diagonal blocks read before they are overwritten */
    if (own)
#pragma unroll
        for (int i = 0; i < 16; i++)
            if (i < bs) Tl[(r0 + i) * C + r0 + j] = x[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int ib = 1; ib < nb; ib++) {
        const int q0 = 16 * ib, qs = min(16, c - q0);
        for (int e = lid; e < qs * q0; e += wg) { /* scr = L_i,<i T_<i,<i (T lower: p >= jc) */
            const int i = e / q0, jc = e - i * q0;
            __local const float *li = Tl + (q0 + i) * C;
            float acc = 0.0f;
            for (int p = jc; p < q0; p++) acc += li[p] * Tl[p * C + jc];
            scr[i * C + jc] = acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < qs * q0; e += wg) { /* T_i,<i = -T_ii scr (T_ii unit lower) */
            const int i = e / q0, jc = e - i * q0;
            __local const float *ti = Tl + (q0 + i) * C + q0;
            float acc = scr[i * C + jc];
            for (int p = 0; p < i; p++) acc += ti[p] * scr[p * C + jc];
            Tl[(q0 + i) * C + jc] = -acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* cp_sfac without g (see there for the arrays). Local, in rows of C4 = UP4(C) floats (lt_tile
 * reads float4s): Wt [dk][C4] (W^T), Ll [C][C4] (L, then T = (I + L)^{-1}) and a slab Hb [C4][ks]
 * through which the chunk's Q, Kr and V pass ks columns at a time: Mq = tril(Q W^T) and L =
 * strict(Kr W^T) accumulate over dk's slabs (A: the slab, B: Wt), then each column slab of Kr and
 * V becomes T times itself in place (Wr, Y; A: Ll, over p up to the tile's last row, T being
 * lower) and gives its columns of P and N (W^T times the slab; A: Wt). ks is the host's (64 where
 * it fits, else 32): at dk = dv = C = 64, whole arrays (48 KB) did not run on NVIDIA's driver,
 * whose local memory is 48 KB. The group has 256 items and at least one a tile of Mq (C <= 64). */
__kernel void cp_sfac_local(__global const int *restrict starts, int nch, __global const float *restrict kr,
                            __global const float *restrict w, __global const float *restrict q,
                            __global const float *restrict v, int residual, __global float *restrict Wr,
                            __global float *restrict Y, __global float *restrict Mq, __global float *restrict maps,
                            int T, int H, int dk, int dv, int C, int ks, __local float4 *Wt4, __local float4 *Ll4,
                            __local float4 *Hb4) {
    __local float *Wt = (__local float *)Wt4, *Ll = (__local float *)Ll4, *Hb = (__local float *)Hb4;
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0), Wm = dk + dv, C4 = UP4(C);
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *KR = kr + tok * dk, *Wd = w + tok * dk, *Q = q + tok * dk;
    __global float *Mc = Mq + tok * C, *WR = Wr + tok * dk, *YY = Y + tok * dv;
    __global float *mp = maps + (size_t)grp * dk * Wm;
    stage_transposed(Wt, C4, Wd, dk, dk, c);
    const int NI = (c + LT - 1) / LT, ti = lid / NI, tj = lid - ti * NI, mine = lid < NI * NI;
    for (int pass = 0; pass <= residual; pass++) { /* 0: Mq from Q; 1: L from Kr */
        __global const float *src = pass ? KR : Q;
        float4 acc[LT];
        lt_zero(acc);
        for (int s0 = 0; s0 < dk; s0 += ks) {
            const int kw = min(ks, dk - s0);
            barrier(CLK_LOCAL_MEM_FENCE); /* the slab's last readers done (and Wt staged) */
            for (int e = lid; e < c * kw; e += wg) {
                const int t = e / kw, i = e - t * kw;
                Hb[t * ks + i] = src[(size_t)t * dk + s0 + i];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (mine) lt_tile(acc, Hb, ks, Wt + s0 * C4, C4, ti, tj, c, kw);
        }
        if (mine)
            for (int r = 0; r < LT; r++)
                for (int s2 = 0; s2 < LT; s2++) {
                    const int i = LT * ti + r, j = LT * tj + s2;
                    if (i >= c || j >= c) continue;
                    if (pass) {
                        if (j < i) Ll[i * C4 + j] = F4_AT(acc[r], s2);
                    } else
                        Mc[(size_t)i * C + j] = j <= i ? F4_AT(acc[r], s2) : 0.0f;
                }
    }
    if (residual) {
        barrier(CLK_LOCAL_MEM_FENCE); /* L complete; the slab's last readers done (it is scr) */
        lt_unit_inverse(Ll, C4, c, Hb); /* Ll <- T = (I + L)^{-1} */
    } else
        for (int e = lid; e < dk * dk; e += wg) {
            const int i = e / dk, j = e - i * dk;
            mp[(size_t)i * Wm + j] = i == j ? 1.0f : 0.0f;
        }
    /* Column slabs of [Kr | V] (global column g < dk: Kr's; without the residual only V's): each
     * solved in place (a slab spanning both solves them in one pass, an item a column: slabs that
     * stop at Kr's end took VLA at (1,4,32) T = 32768 from 3.88 to 4.23 ms on an H100), stored to
     * Wr and Y, and its columns of [P | N]. */
    for (int g0 = residual ? 0 : dk; g0 < Wm; g0 += ks) {
        const int kw = min(ks, Wm - g0);
        barrier(CLK_LOCAL_MEM_FENCE); /* Ll complete; the last slab's readers done */
        for (int e = lid; e < c * kw; e += wg) {
            const int t = e / kw, g = g0 + e - t * kw;
            Hb[t * ks + g - g0] = g >= dk ? v[vla_bthd(b, ts + t, h, g - dk, T, H, dv)] : KR[(size_t)t * dk + g];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (residual) { /* Wr = T Kr, Y = T V: the slab's product in registers, then over the slab */
            float4 acc[LT];
            const int SJ = (kw + LT - 1) / LT, si = lid / SJ, sj = lid - si * SJ, smine = lid < NI * SJ;
            if (smine) {
                lt_zero(acc);
                lt_tile(acc, Ll, C4, Hb, ks, si, sj, c, min(c, LT * si + LT));
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (smine)
                for (int r = 0; r < LT; r++)
                    for (int s2 = 0; s2 < LT; s2++) {
                        const int i = LT * si + r, j = LT * sj + s2;
                        if (i < c && j < kw) Hb[i * ks + j] = F4_AT(acc[r], s2);
                    }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        for (int e = lid; e < c * kw; e += wg) {
            const int t = e / kw, g = g0 + e - t * kw;
            if (g >= dk) YY[(size_t)t * dv + g - dk] = Hb[t * ks + g - g0];
            else WR[(size_t)t * dk + g] = Hb[t * ks + g - g0];
        }
        const int MI = (dk + LT - 1) / LT, MJ = (kw + LT - 1) / LT;
        for (int tile = lid; tile < MI * MJ; tile += wg) { /* P = I - W^T Wr, N = W^T Y: the slab's columns */
            float4 acc[LT];
            lt_zero(acc);
            const int ui = tile / MJ, uj = tile - ui * MJ;
            lt_tile(acc, Wt, C4, Hb, ks, ui, uj, dk, c);
            for (int r = 0; r < LT; r++)
                for (int s2 = 0; s2 < LT; s2++) {
                    const int i = LT * ui + r, g = g0 + LT * uj + s2;
                    if (i >= dk || g >= g0 + kw) continue;
                    const float x = F4_AT(acc[r], s2);
                    mp[(size_t)i * Wm + g] = g >= dk ? x : (i == g ? 1.0f : 0.0f) - x;
                }
        }
    }
}

/* acc = A B for this item's tile (mine) of a c x n product, A [c][kd] (row stride lda) in global
 * memory, passed through the local slab Ab [c][ks] ks columns at a time; B [kd][ldb] in local
 * memory. lower: A is lower triangular (0 past the diagonal), so a tile's sum stops after its last
 * row's diagonal. Barriers: uniform control flow. */
void lt_slabs(float4 *acc, __global const float *A, int lda, int kd, __local float *Ab, int ks, __local const float *B,
              int ldb, int c, int ti, int tj, int mine, int lower) {
    const int lid = get_local_id(0), wg = get_local_size(0), kend = lower ? min(kd, LT * ti + LT) : kd;
    lt_zero(acc);
    for (int s0 = 0; s0 < kd; s0 += ks) {
        const int kw = min(ks, kd - s0);
        barrier(CLK_LOCAL_MEM_FENCE); /* the slab's last readers done; B written */
        for (int e = lid; e < c * kw; e += wg) {
            const int t = e / kw, i = e - t * kw;
            Ab[t * ks + i] = A[(size_t)t * lda + s0 + i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (mine && kend > s0) lt_tile(acc, Ab, ks, B + s0 * ldb, ldb, ti, tj, c, min(kw, kend - s0));
    }
}

/* cp_out without g: O = Q X_j + Mq (Y - Wr X_j). Local, in rows of dv4 = UP4(dv) floats: Xl
 * [dk][dv4] (X_j), El [C][dv4] (E) and a slab Ab [C][ks] (Wr, Q, then Mq, ks columns at a time).
 * One LT x LT tile of O an item: the host launches at least ceil(C / LT) ceil(dv / LT) items. */
__kernel void cp_out_local(__global const int *restrict starts, int nch, __global const float *restrict q,
                           __global const float *restrict Wr, __global const float *restrict Y,
                           __global const float *restrict Mq, int residual, __global const float *restrict Xs,
                           __global float *restrict o, int T, int H, int dk, int dv, int C, int ks,
                           __local float4 *Xl4, __local float4 *El4, __local float4 *Ab4) {
    __local float *Xl = (__local float *)Xl4, *El = (__local float *)El4, *Ab = (__local float *)Ab4;
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0), dv4 = UP4(dv);
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *Q = q + tok * dk, *WR = Wr + tok * dk, *YY = Y + tok * dv, *Mc = Mq + tok * C;
    __global const float *X = Xs + (size_t)grp * dk * dv;
    for (int e = lid; e < dk * dv; e += wg) {
        const int k = e / dv, j = e - k * dv;
        Xl[k * dv4 + j] = X[e];
    }
    const int NI = (c + LT - 1) / LT, NJ = (dv + LT - 1) / LT, ti = lid / NJ, tj = lid - ti * NJ;
    const int mine = lid < NI * NJ;
    float4 acc[LT], acc2[LT];
    if (residual) { /* E = Y - Wr X */
        lt_slabs(acc, WR, dk, dk, Ab, ks, Xl, dv4, c, ti, tj, mine, 0);
        if (mine)
            for (int r = 0; r < LT; r++)
                for (int s2 = 0; s2 < LT; s2++) {
                    const int i = LT * ti + r, j = LT * tj + s2;
                    if (i < c && j < dv) El[i * dv4 + j] = YY[(size_t)i * dv + j] - F4_AT(acc[r], s2);
                }
    } else
        for (int e = lid; e < c * dv; e += wg) {
            const int t = e / dv, j = e - t * dv;
            El[t * dv4 + j] = YY[e];
        }
    lt_slabs(acc, Q, dk, dk, Ab, ks, Xl, dv4, c, ti, tj, mine, 0);  /* Q X */
    lt_slabs(acc2, Mc, C, c, Ab, ks, El, dv4, c, ti, tj, mine, 1); /* Mq E (Mq is 0 above its diagonal) */
    if (mine)
        for (int r = 0; r < LT; r++)
            for (int s2 = 0; s2 < LT; s2++) {
                const int i = LT * ti + r, j = LT * tj + s2;
                if (i < c && j < dv) o[vla_bthd(b, ts + i, h, j, T, H, dv)] = F4_AT(acc[r], s2) + F4_AT(acc2[r], s2);
            }
}
#endif

/* ---- the output normaliser (linear; VLA's normalised output) ----
 * n_t = n_in + sum_{s<=t} kf_s, o_t /= den_t, den = q~.n + eps (linear) or max(q~.n, eps).
 * cp_nsum: each chunk's sum of kf rows, ns [B*H, nch + 1, dk] (slot nch: the final n).
 * One work-group per (head, chunk). */
__kernel void cp_nsum(__global const int *restrict starts, int nch, __global const float *restrict kf, __global float *restrict ns, int T,
                      int dk) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, lid = CP_LID, wg = CP_WG;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    __global const float *K = kf + ((size_t)bh * T + ts) * dk;
    __global float *n = ns + ((size_t)bh * (nch + 1) + ci) * dk;
    for (int i = lid; i < dk; i += wg) n[i] = 0.0f;
    for (int t = 0; t < c; t++)
        for (int i = lid; i < dk; i += wg) n[i] += K[(size_t)t * dk + i];
}

/* cp_norm: the chunk's start n from n_in and the earlier chunks' sums, then its tokens; the last
 * chunk's group writes the final n to slot nch (the host copies it out: n_in may be n_out). */
__kernel void cp_norm(__global const int *restrict starts, int nch, __global const float *restrict kf, __global const float *restrict qf,
                      __global float *restrict ns, __global const float *restrict n_in, int has_in, __global float *restrict o, int T, int H,
                      int dk, int dv, float eps, int linear_style) {
    const int grp = get_group_id(0), bh = grp / nch, ci = grp % nch, b = bh / H, h = bh % H;
    const int lid = CP_LID, wg = CP_WG;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *K = kf + tok * dk, *Q = qf + tok * dk;
    __global float *base = ns + (size_t)bh * (nch + 1) * dk;
#ifdef CP_ONE_ITEM
    float n[VLA_MAXD];
    for (int i = 0; i < dk; i++) n[i] = has_in ? n_in[(size_t)bh * dk + i] : 0.0f;
    for (int j = 0; j < ci; j++)
        for (int i = 0; i < dk; i++) n[i] += base[(size_t)j * dk + i];
    for (int t = 0; t < c; t++) {
        float qn = 0.0f;
        for (int i = 0; i < dk; i++) {
            n[i] += K[(size_t)t * dk + i];
            qn += Q[(size_t)t * dk + i] * n[i];
        }
        const float inv = 1.0f / (linear_style ? qn + eps : fmax(qn, eps));
        __global float *ot = o + vla_bthd(b, ts + t, h, 0, T, H, dv);
        for (int j = 0; j < dv; j++) ot[j] *= inv;
    }
    if (ci == nch - 1)
        for (int i = 0; i < dk; i++) base[(size_t)nch * dk + i] = n[i];
#else
    /* Items over tokens: den_t = q_t . n_start + sum_{s<=t} q_t . kf_s. */
    for (int t = lid; t < c; t += wg) {
        float qn = 0.0f;
        for (int i = 0; i < dk; i++) {
            float x = has_in ? n_in[(size_t)bh * dk + i] : 0.0f;
            for (int j = 0; j < ci; j++) x += base[(size_t)j * dk + i];
            for (int s = 0; s <= t; s++) x += K[(size_t)s * dk + i];
            qn += Q[(size_t)t * dk + i] * x;
        }
        const float inv = 1.0f / (linear_style ? qn + eps : fmax(qn, eps));
        __global float *ot = o + vla_bthd(b, ts + t, h, 0, T, H, dv);
        for (int j = 0; j < dv; j++) ot[j] *= inv;
    }
    if (ci == nch - 1)
        for (int i = lid; i < dk; i += wg) {
            float x = has_in ? n_in[(size_t)bh * dk + i] : 0.0f;
            for (int j = 0; j <= ci; j++) x += base[(size_t)j * dk + i];
            base[(size_t)nch * dk + i] = x;
        }
#endif
}
