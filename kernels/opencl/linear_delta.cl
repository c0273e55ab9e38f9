/* linear_delta.cl: the generalised delta rule that linear attention, DeltaNet and VLA's S part
 * share (the CPU backend's cpu_chunk_step), sequential and chunked. On the transposed state:
 *
 *   ST_t = g_t ST_{t-1} + w_t e_t^T,   o_t = ST_t^T q_t,
 *   e_t  = v_t - g_t ST_{t-1}^T kr_t   (residual = 1: delta, vla)    e_t = v_t (residual = 0: linear)
 *
 * with write directions w (linear: k~; delta: beta k^; vla: a_t), read keys kr (k^), and an
 * optional decay g (delta). Linear's normaliser and VLA's a_t come from other kernels.
 * Prepared arrays are [B*H, T, dk] (prep.cl); v, g and o are read/written in the user's
 * [B, T, H, .] layout. */

/* Sequential (VLA-MATH 2.1). One work-group per head; per token the group stages kr, w, q in
 * local memory, then work-item j updates its columns of ST (global memory: at dk = dv = 256 a
 * head's state is 256 KiB, more than local memory holds, and as no column is shared there is
 * nothing to gain from staging it) and writes o_t[j]. */
__kernel void gdr_sequential(__global const float *kr, __global const float *w, __global const float *q,
                             __global const float *v, __global const float *gdec, int has_g, int residual,
                             __global float *ST, __global float *o, int T, int H, int dk, int dv) {
    __local float lk[VLA_MAXD], lw[VLA_MAXD], lq[VLA_MAXD];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    __global float *S = ST + (size_t)bh * dk * dv;
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)bh * T + t) * dk;
        for (int i = lid; i < dk; i += wg) {
            if (residual) lk[i] = kr[row + i];
            lw[i] = w[row + i];
            lq[i] = q[row + i];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const float g = has_g ? gdec[((size_t)b * T + t) * H + h] : 1.0f;
        for (int j = lid; j < dv; j += wg) {
            float e = v[vla_bthd(b, t, h, j, T, H, dv)];
            if (residual) {
                float sk = 0.0f; /* (S k)_j */
                for (int i = 0; i < dk; i++) sk += S[(size_t)i * dv + j] * lk[i];
                e -= has_g ? g * sk : sk;
            }
            float acc = 0.0f;
            for (int i = 0; i < dk; i++) {
                const size_t ij = (size_t)i * dv + j;
                const float x = (has_g ? g * S[ij] : S[ij]) + lw[i] * e;
                S[ij] = x;
                acc += x * lq[i];
            }
            o[vla_bthd(b, t, h, j, T, H, dv)] = acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* ---- chunked (VLA-MATH 2.3, S part), in two kernels ----
 *
 * The CPU's chunk step solves (I + L o D) E = V - diag(gam) Kr ST0 for the chunk's residuals
 * E. Everything but ST0 is known before the chunk-to-chunk carry, so the solve splits:
 *   Wr = (I + L o D)^{-1} diag(gam) Kr,   Y = (I + L o D)^{-1} V,   E = Y - Wr ST0
 * gdr_chunk_prep computes, for every chunk of every head at once (they are independent):
 *   D[t][s] = prod_{s<r<=t} g_r,  gam[t] = prod_{r<=t} g_r,  dl[s] = D[c-1][s]
 *   L[t][s] = (kr_t . w_s) D[t][s] (s < t),  [Wr | Y] by forward substitution,
 *   Mq[t][s] = (q_t . w_s) D[t][s] (s <= t, else 0)
 * and gdr_chunk_run carries the state across chunks:
 *   E = Y - Wr ST,  O = diag(gam) Q ST + Mq E,  ST = gam[c-1] ST + W^T diag(dl) E.
 *
 * Chunk c of a head covers tokens [starts[c], starts[c+1]); per-token arrays are stored at the
 * token's row, and the c x c matrices as rows of width C (the largest chunk) at the token's
 * row: X[(bh*T + ts + t)*C + s]. Products are kept (not exp/log ratios), as on the CPU: exact
 * for every g, including 0. */

__kernel void gdr_chunk_prep(__global const int *starts, int nchunks, __global const float *kr,
                             __global const float *w, __global const float *q, __global const float *v,
                             __global const float *gdec, int has_g, int residual, __global float *Wr,
                             __global float *Y, __global float *Mq, __global float *Dm, __global float *Lm,
                             __global float *gam, __global float *dl, int T, int H, int dk, int dv, int C) {
    const int grp = get_group_id(0), bh = grp / nchunks, ci = grp % nchunks, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0);
    const int ts = starts[ci], c = starts[ci + 1] - ts;
    const size_t tok = (size_t)bh * T + ts; /* the chunk's first row in [B*H, T, .] */
    __global const float *KR = kr + tok * dk, *Wt = w + tok * dk, *Q = q + tok * dk;
    __global float *D = Dm + tok * C, *L = Lm + tok * C, *Mc = Mq + tok * C;
    __global float *WR = Wr + tok * dk, *YY = Y + tok * dv, *G = gam + tok, *DL = dl + tok;

    if (has_g) {
        /* Column s of D: products down the column, no barrier needed inside. */
        for (int s = lid; s < c; s += wg) {
            float d = 1.0f;
            D[(size_t)s * C + s] = 1.0f;
            for (int t = s + 1; t < c; t++) {
                d *= gdec[((size_t)b * T + ts + t) * H + h];
                D[(size_t)t * C + s] = d;
            }
            DL[s] = d; /* = D[c-1][s] */
        }
        if (lid == 0) {
            float p = 1.0f;
            for (int t = 0; t < c; t++) {
                p *= gdec[((size_t)b * T + ts + t) * H + h];
                G[t] = p;
            }
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE); /* outside the branch: PoCL wants barriers unconditional */
    if (residual) {
        for (int e = lid; e < c * c; e += wg) {
            const int t = e / c, s = e - t * c;
            if (s < t) {
                float x = 0.0f;
                for (int i = 0; i < dk; i++) x += KR[(size_t)t * dk + i] * Wt[(size_t)s * dk + i];
                L[(size_t)t * C + s] = has_g ? x * D[(size_t)t * C + s] : x;
            }
        }
        for (int e = lid; e < c * dk; e += wg) {
            const int t = e / dk, i = e - t * dk;
            WR[e] = has_g ? G[t] * KR[e] : KR[e];
        }
    }
    for (int e = lid; e < c * dv; e += wg) {
        const int t = e / dv, j = e - t * dv;
        YY[e] = v[vla_bthd(b, ts + t, h, j, T, H, dv)];
    }
    barrier(CLK_GLOBAL_MEM_FENCE);

    if (residual) {
        /* Forward substitution, one column of [Wr | Y] per work-item: x_t -= sum_{s<t} L[t][s] x_s. */
        for (int col = lid; col < dk + dv; col += wg) {
            __global float *X = col < dk ? WR + col : YY + (col - dk);
            const int ld = col < dk ? dk : dv;
            for (int t = 1; t < c; t++) {
                float x = X[(size_t)t * ld];
                for (int s = 0; s < t; s++) x -= L[(size_t)t * C + s] * X[(size_t)s * ld];
                X[(size_t)t * ld] = x;
            }
        }
    }
    for (int e = lid; e < c * c; e += wg) {
        const int t = e / c, s = e - t * c;
        float x = 0.0f;
        if (s <= t) {
            for (int i = 0; i < dk; i++) x += Q[(size_t)t * dk + i] * Wt[(size_t)s * dk + i];
            if (has_g) x *= D[(size_t)t * C + s];
        }
        Mc[(size_t)t * C + s] = x;
    }
}

/* The chunk-to-chunk carry. One work-group per (head, segment) of seg_chunks chunks (chunked:
 * one segment per head; two-level: several, each started from its own state); work-item j
 * owns column j of the state, so the whole kernel runs without barriers. E overwrites Y.
 * STs holds one state per (head, segment); the last segment's final state also goes to
 * STfinal[bh] when write_final. */
__kernel void gdr_chunk_run(__global const int *starts, int nchunks, int seg_chunks, int nseg,
                            __global const float *q, __global const float *w, __global const float *Wr,
                            __global float *Y, __global const float *Mq, __global const float *gam,
                            __global const float *dl, int has_g, int residual, __global float *STs,
                            __global float *STfinal, int write_final, __global float *o, int T, int H, int dk,
                            int dv, int C) {
    const int grp = get_group_id(0), bh = grp / nseg, seg = grp % nseg, b = bh / H, h = bh % H;
    const int lid = get_local_id(0), wg = get_local_size(0);
    __global float *S = STs + (size_t)grp * dk * dv;
    const int c0 = seg * seg_chunks, c1 = min(c0 + seg_chunks, nchunks);
    for (int ci = c0; ci < c1; ci++) {
        const int ts = starts[ci], c = starts[ci + 1] - ts;
        const size_t tok = (size_t)bh * T + ts;
        __global const float *Q = q + tok * dk, *Wt = w + tok * dk, *WR = Wr + tok * dk, *Mc = Mq + tok * C;
        __global float *E = Y + tok * dv;
        for (int j = lid; j < dv; j += wg) {
            if (residual) /* E = Y - Wr ST */
                for (int t = 0; t < c; t++) {
                    float x = 0.0f;
                    for (int i = 0; i < dk; i++) x += WR[(size_t)t * dk + i] * S[(size_t)i * dv + j];
                    E[(size_t)t * dv + j] -= x;
                }
            for (int t = 0; t < c; t++) { /* O = diag(gam) Q ST + Mq E */
                float x = 0.0f;
                for (int i = 0; i < dk; i++) x += Q[(size_t)t * dk + i] * S[(size_t)i * dv + j];
                if (has_g) x *= gam[tok + t];
                for (int s = 0; s <= t; s++) x += Mc[(size_t)t * C + s] * E[(size_t)s * dv + j];
                o[vla_bthd(b, ts + t, h, j, T, H, dv)] = x;
            }
            const float gl = has_g ? gam[tok + c - 1] : 1.0f; /* ST = gl ST + W^T diag(dl) E */
            for (int i = 0; i < dk; i++) {
                float x = 0.0f;
                for (int s = 0; s < c; s++) {
                    const float es = E[(size_t)s * dv + j];
                    x += Wt[(size_t)s * dk + i] * (has_g ? dl[tok + s] * es : es);
                }
                const size_t ij = (size_t)i * dv + j;
                S[ij] = (has_g ? gl * S[ij] : S[ij]) + x;
            }
        }
    }
    if (write_final && seg == nseg - 1) {
        __global float *F = STfinal + (size_t)bh * dk * dv;
        for (int j = lid; j < dv; j += wg)
            for (int i = 0; i < dk; i++) F[(size_t)i * dv + j] = S[(size_t)i * dv + j];
    }
}
