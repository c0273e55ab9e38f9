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
 * Matrices live in global scratch, one slice per (head, chunk) (chunks up to 1024 tokens, d up
 * to 256 do not fit local memory). real_t is double where the device has fp64 (common.cl).
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
 * carries the running sum. A group owns `span` entries of one head's slots (groups = heads x
 * per_head), its items stride them. */
__kernel void cp_prefix(__global real_t *restrict Gr, int nch, int dk, int per_head, int span, float inv_lambda) {
    const int grp = get_group_id(0), bh = grp / per_head, lid = CP_LID, wg = CP_WG;
    const int e0 = (grp % per_head) * span, e1 = min(e0 + span, dk * dk);
    const size_t n2 = (size_t)dk * dk;
    __global real_t *G = Gr + (size_t)bh * (nch + 2) * n2, *acc = G + (size_t)(nch + 1) * n2;
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
