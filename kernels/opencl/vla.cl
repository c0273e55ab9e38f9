/* vla.cl: Variational Linear Attention (VLA-MATH 1 and 2): the A recurrence (sequential, and the
 * chunked Woodbury form), the sequential algorithm, the per-token maps and outputs of the
 * scan, and the chunk and segment maps of the two-level algorithm. The S part of chunked and
 * two-level is linear_delta.cl's gdr_chunk_prep / gdr_chunk_run with w = a_t.
 *
 *   z_t = A_{t-1} u_t;  A_t = A_{t-1} - z z^T / max(1 + u.z, eps);  (+ rho I at a refresh)
 *   a_t = normalize(A_t k^_t);  ST_t = ST_{t-1} + a_t (v_t - ST_{t-1}^T k^_t)^T;  o_t = ST_t^T q~_t */

/* One token of the A recurrence on a work-group. At is one head's A in real_t, transposed
 * (At[j*dk + i] = A[i][j]); work-item i owns row i of A (i = lid, lid + WG, ...), so the
 * downdate and A k need no barrier, and neighbouring items read neighbouring addresses.
 * lu, lk: u_t and k^_t staged in local memory. Writes a_t to la; ends with a barrier. */
void vla_a_step(__global real_t *At, __local const float *lu, __local const float *lk, int refresh,
                       real_t rho, real_t eps, int dk, __local real_t *zl, __local real_t *yl, __local real_t *red,
                       __local float *la) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    real_t part = 0;
    for (int i = lid; i < dk; i += wg) {
        real_t z = 0;
        for (int j = 0; j < dk; j++) z += At[(size_t)j * dk + i] * (real_t)lu[j];
        zl[i] = z;
        part += (real_t)lu[i] * z;
    }
    const real_t uz = vla_wg_sum_real(part, red); /* its barriers also publish zl */
    const real_t inv = 1 / fmax(1 + uz, eps);
    part = 0;
    for (int i = lid; i < dk; i += wg) {
        const real_t zi = zl[i] * inv;
        real_t y = 0;
        for (int j = 0; j < dk; j++) {
            real_t x = At[(size_t)j * dk + i] - zi * zl[j];
            if (refresh && j == i) x += rho;
            At[(size_t)j * dk + i] = x;
            y += x * (real_t)lk[j];
        }
        yl[i] = y;
        part += y * y;
    }
    const real_t nn = vla_wg_sum_real(part, red);
    const real_t scale = 1 / fmax(sqrt(nn), eps);
    for (int i = lid; i < dk; i += wg) la[i] = (float)(yl[i] * scale);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* VLA-MATH 2.1, and the a_t pass of 2.2. One work-group per head, sequential over t. With do_s
 * the S part follows each A step (work-item j owns column j of ST, as gdr_sequential) and
 * writes o; with write_al the a_t rows go to Al [B*H, T, dk] (scan). */
__kernel void vla_sequential(__global const float *uu, __global const float *kh, __global const float *qf,
                             __global const float *v, __global real_t *At, __global float *ST, __global float *o,
                             __global float *Al, int do_s, int write_al, int T, int H, int dk, int dv, int R,
                             int rphase, float rho, float eps) {
    __local float lu[VLA_MAXD], lk[VLA_MAXD], lq[VLA_MAXD], la[VLA_MAXD];
    __local real_t zl[VLA_MAXD], yl[VLA_MAXD], red[VLA_MAXWG];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    __global real_t *A = At + (size_t)bh * dk * dk;
    __global float *S = ST + (size_t)bh * dk * dv;
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)bh * T + t) * dk;
        for (int i = lid; i < dk; i += wg) {
            lu[i] = uu[row + i];
            lk[i] = kh[row + i];
            if (do_s) lq[i] = qf[row + i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        vla_a_step(A, lu, lk, vla_is_refresh(R, rphase, t), (real_t)rho, (real_t)eps, dk, zl, yl, red, la);
        if (write_al)
            for (int i = lid; i < dk; i += wg) Al[row + i] = la[i];
        if (do_s)
            for (int j = lid; j < dv; j += wg) {
                float sk = 0.0f; /* e = v - S k */
                for (int i = 0; i < dk; i++) sk += S[(size_t)i * dv + j] * lk[i];
                const float e = v[vla_bthd(b, t, h, j, T, H, dv)] - sk;
                float acc = 0.0f;
                for (int i = 0; i < dk; i++) {
                    const size_t ij = (size_t)i * dv + j;
                    const float x = S[ij] + la[i] * e;
                    S[ij] = x;
                    acc += x * lq[i];
                }
                o[vla_bthd(b, t, h, j, T, H, dv)] = acc;
            }
        barrier(CLK_LOCAL_MEM_FENCE); /* before the next token overwrites lu, lk, lq, la */
    }
}

/* The Woodbury update of one chunk (vla_a_chunked, when G's Cholesky factor L is in G):
 *   Z = L^{-1} Z;  Al = rownorm(K A0 - tril(K Z^T) Z (+ rho k^ on the last row at a refresh));
 *   A = A0 - Z^T Z (+ rho I). In real_t (A, Z, G, M and the sums); K and Al are float. Does
 *   nothing unless `go`, but always reaches its barriers: PoCL miscompiles barriers inside
 *   branches (seen as out-of-bounds writes), so no kernel here puts a barrier under an `if`. */
void vla_a_woodbury(int go, __global const float *K, __global real_t *A, __global real_t *Z,
                           __global const real_t *G, __global real_t *M, __global float *AL, int c, int dk, int C,
                           int refresh_last, real_t rho, real_t eps) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    if (!go) c = 0; /* every loop below is then empty, but every barrier is still reached */
    /* Z = L^{-1} Z: forward substitution, one column of Z per work-item. */
    for (int p = lid; p < dk; p += wg)
        for (int i = 0; i < c; i++) {
            real_t x = Z[(size_t)i * dk + p];
            for (int j = 0; j < i; j++) x -= G[(size_t)i * C + j] * Z[(size_t)j * dk + p];
            Z[(size_t)i * dk + p] = x / G[(size_t)i * C + i];
        }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int e = lid; e < c * c; e += wg) { /* M = tril(K Z^T) */
        const int t = e / c, s = e - t * c;
        real_t x = 0;
        if (s <= t)
            for (int i = 0; i < dk; i++) x += (real_t)K[(size_t)t * dk + i] * Z[(size_t)s * dk + i];
        M[(size_t)t * C + s] = x;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int e = lid; e < c * dk; e += wg) { /* Al = K A0 - tril(M) Z (+ rho k^ on a refresh) */
        const int t = e / dk, i = e - t * dk;
        real_t x = 0; /* (the cancellation is here, in real_t; the result is rounded once) */
        for (int j = 0; j < dk; j++) x += (real_t)K[(size_t)t * dk + j] * A[(size_t)j * dk + i];
        for (int s = 0; s <= t; s++) x -= M[(size_t)t * C + s] * Z[(size_t)s * dk + i];
        if (refresh_last && t == c - 1) x += rho * (real_t)K[e];
        AL[e] = (float)x;
    }
    barrier(CLK_GLOBAL_MEM_FENCE); /* every read of A0 is done */
    for (int e = lid; e < (go ? dk * dk : 0); e += wg) { /* A = A0 - Z^T Z (+ rho I) */
        const int i = e / dk, j = e - i * dk;
        real_t x = 0;
        for (int s = 0; s < c; s++) x += Z[(size_t)s * dk + i] * Z[(size_t)s * dk + j];
        real_t a = A[e] - x;
        if (refresh_last && i == j) a += rho;
        A[e] = a;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int t = lid; t < c; t += wg) { /* rows a_t = normalize(.) */
        real_t ss = 0;
        for (int i = 0; i < dk; i++) ss += (real_t)AL[(size_t)t * dk + i] * (real_t)AL[(size_t)t * dk + i];
        const real_t inv = 1 / fmax(sqrt(ss), eps);
        for (int i = 0; i < dk; i++) AL[(size_t)t * dk + i] = (float)((real_t)AL[(size_t)t * dk + i] * inv);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
}

/* VLA-MATH 2.3, the A part (exact Woodbury), chunk after chunk. One work-group per head; the
 * chunk matrices live in global scratch (C may be up to 1024, far beyond local memory), with
 * work-group barriers between the phases. Per chunk [ts, ts + c), with A0 = A at its start:
 *   Z = U A0;  G = I + Z U^T = L L^T;  Z = L^{-1} Z;
 *   Al = rownorm(K A0 - tril(K Z^T) Z);  A = A0 - Z^T Z
 * and when the chunk's last token is a refresh point its unnormalised a gains rho k^ and A
 * gains rho I (chunk boundaries are cut at refresh points by the host). In real_t (double where
 * the device has fp64), as the CPU backend: in float32 the outputs sat at
 * 0.66e-4 to 0.94e-4 of the float64 reference at lambda0 = 1e-3 (PoCL, 8 seeds), against the
 * 1e-4 VLA-MATH 3 expects, because A0 - Z^T Z cancels there. A is carried in Ad [B*H, dk, dk]
 * (real_t) and copied from and back to the float state Af at the ends. When the Cholesky fails
 * (a caller's A_in need not be positive definite) the chunk runs the sequential recurrence
 * instead, on A^T in Ad's second half, exactly as the CPU backend does.
 * Zs [B*H, C, dk], Gs and Ms [B*H, C, C] (real_t), Af [B*H, dk, dk], Ad [2][B*H, dk, dk]. */
__kernel void vla_a_chunked(__global const int *starts, int nchunks, __global const float *uu,
                            __global const float *kh, __global float *Af, __global real_t *Ad,
                            __global real_t *Zs, __global real_t *Gs, __global real_t *Ms, __global float *Al, int T,
                            int dk, int C, int R, int rphase, float rho, float eps, int BH) {
    __local float lu[VLA_MAXD], lk[VLA_MAXD], la[VLA_MAXD];
    __local real_t zl[VLA_MAXD], yl[VLA_MAXD], red[VLA_MAXWG];
    __local int failed;
    const int bh = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
    __global float *Afh = Af + (size_t)bh * dk * dk;
    __global real_t *A = Ad + (size_t)bh * dk * dk, *At = Ad + ((size_t)BH + bh) * dk * dk;
    __global real_t *Z = Zs + (size_t)bh * C * dk, *G = Gs + (size_t)bh * C * C, *M = Ms + (size_t)bh * C * C;
    for (int e = lid; e < dk * dk; e += wg) A[e] = (real_t)Afh[e];
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int ci = 0; ci < nchunks; ci++) {
        const int ts = starts[ci], c = starts[ci + 1] - ts;
        const size_t tok = (size_t)bh * T + ts;
        __global const float *U = uu + tok * dk, *K = kh + tok * dk;
        __global float *AL = Al + tok * dk;
        const int refresh_last = vla_is_refresh(R, rphase, ts + c - 1);

        for (int e = lid; e < c * dk; e += wg) { /* Z = U A0 */
            const int t = e / dk, i = e - t * dk;
            real_t x = 0;
            for (int j = 0; j < dk; j++) x += (real_t)U[(size_t)t * dk + j] * A[(size_t)j * dk + i];
            Z[e] = x;
        }
        if (lid == 0) failed = 0;
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < c * c; e += wg) { /* G = I + Z U^T */
            const int t = e / c, s = e - t * c;
            real_t x = t == s ? 1 : 0;
            for (int i = 0; i < dk; i++) x += Z[(size_t)t * dk + i] * (real_t)U[(size_t)s * dk + i];
            G[(size_t)t * C + s] = x;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        /* Cholesky, left-looking by columns: L[j][j] by one item, then the column below it in
         * parallel. `failed` is read after a barrier, so every item takes the same branches. */
        for (int j = 0; j < c; j++) {
            if (lid == 0 && !failed) {
                real_t d = G[(size_t)j * C + j];
                for (int p = 0; p < j; p++) d -= G[(size_t)j * C + p] * G[(size_t)j * C + p];
                if (!(d > 0) || !isfinite(d)) failed = 1;
                G[(size_t)j * C + j] = sqrt(fmax(d, (real_t)0));
            }
            barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
            if (!failed) {
                const real_t djj = G[(size_t)j * C + j];
                for (int i = j + 1 + lid; i < c; i += wg) {
                    real_t x = G[(size_t)i * C + j];
                    for (int p = 0; p < j; p++) x -= G[(size_t)i * C + p] * G[(size_t)j * C + p];
                    G[(size_t)i * C + j] = x / djj;
                }
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
        }
        /* When the Cholesky failed: the sequential recurrence for this chunk on A^T; otherwise
         * the Woodbury update. Both run their barriers either way (nfb = 0 or go = 0 empties
         * their loops), see vla_a_woodbury. */
        const int fb = failed, nfb = fb ? c : 0;
        for (int e = lid; e < (fb ? dk * dk : 0); e += wg) {
            const int i = e / dk, j = e - i * dk;
            At[(size_t)j * dk + i] = A[e];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        for (int t = 0; t < nfb; t++) {
            for (int i = lid; i < dk; i += wg) {
                lu[i] = U[(size_t)t * dk + i];
                lk[i] = K[(size_t)t * dk + i];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            vla_a_step(At, lu, lk, vla_is_refresh(R, rphase, ts + t), (real_t)rho, (real_t)eps, dk, zl, yl, red, la);
            for (int i = lid; i < dk; i += wg) AL[(size_t)t * dk + i] = la[i];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        for (int e = lid; e < (fb ? dk * dk : 0); e += wg) {
            const int i = e / dk, j = e - i * dk;
            A[e] = At[(size_t)j * dk + i];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        vla_a_woodbury(!fb, K, A, Z, G, M, AL, c, dk, C, refresh_last, (real_t)rho, (real_t)eps);
    }
    for (int e = lid; e < dk * dk; e += wg) Afh[e] = (float)A[e];
}

/* VLA-MATH 2.2: per-token maps on the transposed state, ST_t = (I - a_t k^_t^T) ST_{t-1} + a_t v_t^T,
 * stored as [M | N] rows (common.cl). One work-group per (head, token). maps [B*H, T, dk, dk+dv]. */
__kernel void scan_maps(__global const float *Al, __global const float *kh, __global const float *v,
                        __global float *maps, int T, int H, int dk, int dv) {
    const int g = get_group_id(0), bh = g / T, t = g % T, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0), W = dk + dv;
    const size_t row = ((size_t)bh * T + t) * dk;
    __global float *m = maps + (size_t)g * dk * W;
    for (int e = lid; e < dk * W; e += wg) {
        const int i = e / W, c = e - i * W;
        const float a = Al[row + i];
        m[e] = c < dk ? (i == c ? 1.0f : 0.0f) - a * kh[row + c] : a * v[vla_bthd(b, t, h, c - dk, T, H, dv)];
    }
}

/* Outputs of the scan: with the prefix map (M_t, N_t), ST_t = M_t ST0 + N_t, so
 * o_t = ST0^T (M_t^T q~_t) + N_t^T q~_t. One work-group per (head, token). */
__kernel void scan_out(__global const float *maps, __global const float *qf, __global const float *ST0,
                       __global float *o, int T, int H, int dk, int dv) {
    __local float lq[VLA_MAXD], ly[VLA_MAXD];
    const int g = get_group_id(0), bh = g / T, t = g % T, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0), W = dk + dv;
    __global const float *m = maps + (size_t)g * dk * W, *S = ST0 + (size_t)bh * dk * dv;
    const size_t row = ((size_t)bh * T + t) * dk;
    for (int i = lid; i < dk; i += wg) lq[i] = qf[row + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = lid; p < dk; p += wg) { /* y = M^T q */
        float y = 0.0f;
        for (int i = 0; i < dk; i++) y += lq[i] * m[(size_t)i * W + p];
        ly[p] = y;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = lid; j < dv; j += wg) {
        float x = 0.0f;
        for (int i = 0; i < dk; i++) x += ly[i] * S[(size_t)i * dv + j] + lq[i] * m[(size_t)i * W + dk + j];
        o[vla_bthd(b, t, h, j, T, H, dv)] = x;
    }
}

/* VLA-MATH 2.4, level 1: chunk ci's map from any start state, ST_end = P ST_start + H with
 * P = I - Al^T Wr, H = Al^T Y ([Wr | Y] from gdr_chunk_prep, with g = 1). One work-group per
 * (head, chunk); cmaps [B*H, nchunks, dk, dk+dv]. */
__kernel void chunk_map(__global const int *starts, int nchunks, __global const float *Al,
                        __global const float *Wr, __global const float *Y, __global float *cmaps, int T, int dk,
                        int dv) {
    const int g = get_group_id(0), bh = g / nchunks, ci = g % nchunks;
    const int lid = get_local_id(0), wg = get_local_size(0), W = dk + dv;
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts;
    __global const float *AL = Al + tok * dk, *WR = Wr + tok * dk, *YY = Y + tok * dv;
    __global float *m = cmaps + (size_t)g * dk * W;
    for (int e = lid; e < dk * W; e += wg) {
        const int i = e / W, col = e - i * W;
        float x = 0.0f;
        if (col < dk) {
            for (int t = 0; t < c; t++) x += AL[(size_t)t * dk + i] * WR[(size_t)t * dk + col];
            m[e] = (i == col ? 1.0f : 0.0f) - x;
        } else {
            for (int t = 0; t < c; t++) x += AL[(size_t)t * dk + i] * YY[(size_t)t * dv + col - dk];
            m[e] = x;
        }
    }
}

/* Level 1, continued: each segment's map, its chunks composed in order (in place in the chunk
 * maps: chunk ci's slot ends up holding chunks c0..ci), then copied to segmaps [B*H, nseg].
 * One work-group per (head, segment). */
__kernel void seg_compose(__global float *cmaps, int nchunks, int seg_chunks, int nseg, __global float *segmaps,
                          int dk, int dv) {
    __local float rows[VLA_RB * 2 * VLA_MAXD];
    const int g = get_group_id(0), bh = g / nseg, seg = g % nseg, lid = get_local_id(0), wg = get_local_size(0);
    const size_t msz = (size_t)dk * (dk + dv);
    const int c0 = seg * seg_chunks, c1 = min(c0 + seg_chunks, nchunks);
    __global float *base = cmaps + (size_t)bh * nchunks * msz;
    for (int ci = c0 + 1; ci < c1; ci++) vla_affine_compose(base + (ci - 1) * msz, base + ci * msz, dk, dv, rows);
    __global const float *src = base + (size_t)(c1 - 1) * msz;
    __global float *dst = segmaps + (size_t)g * msz;
    for (size_t e = lid; e < msz; e += wg) dst[e] = src[e];
}
