/* grad_vla.cl: the backward op (VLA-MATH 5) of Variational Linear Attention. Built after
 * common.cl and grad_linear_delta.cl, whose per-token steps do the S part (w = a_t, kr = k^_t,
 * g = 1). The A part, per token (u = u_t, k = k^_t; A symmetric):
 *
 *   z = A_{t-1} u,  delta = 1 + u . z,  A_t = A_{t-1} - z z^T / max(delta, eps) (+ rho I),
 *   y = A_t k,      a_t = normalize(y)
 *
 * and its adjoint, with G the gradient with respect to A_t (kept symmetric: A only moves along
 * symmetric matrices, so only G's symmetric part matters, and dA_0 is that part) and da_t from
 * the S part:
 *
 *   dy = (da - a (a . da)) / ||y||   (da / eps where the floor binds)
 *   dk += A_t dy;                    G += sym(dy k^T)
 *   dz = -2 G z / den;               dden = z^T G z / den^2  (0 where max(delta, eps) = eps)
 *   du = dden z + A_{t-1} dz';       dz' = dz + dden u
 *   G_{t-1} = G + sym(dz' u^T)       (the refresh adds a constant: G passes through)
 *
 * sym(x y^T) = (x y^T + y x^T) / 2. Memory as grad_linear_delta.cl: checkpoints of S (float) and
 * A (real_t, transposed as vla_sequential keeps it) every C tokens, and each chunk's per-token
 * states A_t [C, dk, dk], S_t [C, dk, dv], with its z_t, a_t, e_t, delta_t and ||y_t||, recomputed
 * with the forward's arithmetic. G [dk, dk] and dST [dk, dv] are real_t in global memory; G's row
 * i belongs to work-item i, so its updates need no barrier. */

/* One token of the A recurrence, recomputed from Ap into Ac (both [dk, dk] transposed, real_t);
 * vla_sequential's vla_a_step with separate input and output. Writes a_t to la and Al [dk], z
 * to Z [dk], and delta and ||y|| to sc[0], sc[1]. Ends with a barrier. a_t goes to Al here,
 * before that barrier, not in a loop of the caller's after it: PoCL 3.1 dropped such a store
 * loop (placed between this barrier and the caller's next one, it left Al unwritten and every
 * gradient through a_t wrong), while the same store here is kept. */
void vg_a_step(__global const real_t *Ap, __global real_t *Ac, __local const float *lu, __local const float *lk,
               int refresh, real_t rho, real_t eps, int dk, __local real_t *zl, __local real_t *yl,
               __local real_t *red, __local float *la, __global real_t *Z, __global real_t *sc,
               __global float *Al) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    real_t part = 0;
    for (int i = lid; i < dk; i += wg) {
        real_t z = 0;
        for (int j = 0; j < dk; j++) z += Ap[(size_t)j * dk + i] * (real_t)lu[j];
        zl[i] = z;
        Z[i] = z;
        part += (real_t)lu[i] * z;
    }
    const real_t uz = vla_wg_sum_real(part, red);
    const real_t inv = 1 / fmax(1 + uz, eps);
    part = 0;
    for (int i = lid; i < dk; i += wg) {
        const real_t zi = zl[i] * inv;
        real_t y = 0;
        for (int j = 0; j < dk; j++) {
            real_t x = Ap[(size_t)j * dk + i] - zi * zl[j];
            if (refresh && j == i) x += rho;
            Ac[(size_t)j * dk + i] = x;
            y += x * (real_t)lk[j];
        }
        yl[i] = y;
        part += y * y;
    }
    const real_t nn = vla_wg_sum_real(part, red);
    const real_t scale = 1 / fmax(sqrt(nn), eps);
    for (int i = lid; i < dk; i += wg) {
        const float a = (float)(yl[i] * scale);
        la[i] = a;
        Al[i] = a;
    }
    if (lid == 0) {
        sc[0] = 1 + uz;
        sc[1] = sqrt(nn);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* One work-group per head. Inputs: the prepared uu, kh, qf [B*H, T, dk] (prep), v, dO; the start
 * states (A_in or I / lambda0, S_in or 0); upstream dS_end, dA_end; qn [B*H, T] when the output
 * is normalised (den_mode 2). Outputs: dqf, dkh, duu [B*H, T, dk] (prepared layout: grad_prep
 * takes them to dq, dk, du), dv, r [B*H, T] (den_mode), dS0, dA0 (symmetric). Scratch per head:
 * CKS [nch, dk, dv], CKA [nch, dk, dk], Wst [C, dk, dv], Wa [C, dk, dk], Wal [C, dk], Wz [C, dk],
 * Wsc [C, 2], We [C, dv], dSTs [dk, dv], Gs [dk, dk].
 *
 * amode: 0, the whole backward (the recurrent form); 1 and 2, the A part of the chunked form,
 * around grad_chunk.cl's S part (w = a_t), two launches: 1 runs the A recurrence forward, leaving
 * the checkpoints and a_t in alo [B*H, T, dk]; 2 walks it back with da_t from dal [B*H, T, dk]
 * (grad_chunk's dW), adding A_t dy to dkh (grad_chunk's dk^ of the read) and writing duu, dA0.
 * Neither touches S, dq, dv, r or dS0 (grad_chunk's). */
__kernel void grad_vla(__global const float *uu, __global const float *kh, __global const float *qf,
                       __global const float *v, __global const float *S_in, int has_S_in, __global const float *A_in,
                       int has_A_in, float inv_lambda, __global const float *dS_end, int has_dS_end,
                       __global const float *dA_end, int has_dA_end, __global const float *dO,
                       __global const float *qn, int den_mode, int R, int rphase, float rho, float eps,
                       __global float *CKSs, __global real_t *CKAs, __global float *Wsts, __global real_t *Was,
                       __global float *Wals, __global real_t *Wzs, __global real_t *Wscs, __global float *Wes,
                       __global real_t *dSTs, __global real_t *Gs, __global float *dqf, __global float *dkh,
                       __global float *duu, __global float *dvo, __global float *r, __global float *dS0,
                       __global float *dA0, int outs, int T, int H, int dk, int dv, int C, int nch, int amode,
                       __global float *alo, __global const float *dal) {
    __local float lq[VLA_MAXD], lw[VLA_MAXD], lk[VLA_MAXD], lu[VLA_MAXD], le[VLA_MAXD];
    __local real_t ldo[VLA_MAXD], lde[VLA_MAXD], lz[VLA_MAXD], ly[VLA_MAXD], red[VLA_MAXWG];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = get_local_id(0), wg = get_local_size(0);
    const size_t ssz = (size_t)dk * dv, asz = (size_t)dk * dk;
    __global float *CKS = CKSs + (size_t)bh * nch * ssz, *Wst = Wsts + (size_t)bh * C * ssz;
    __global real_t *CKA = CKAs + (size_t)bh * nch * asz, *Wa = Was + (size_t)bh * C * asz;
    __global float *Wal = Wals + (size_t)bh * C * dk, *We = Wes + (size_t)bh * C * dv;
    __global real_t *Wz = Wzs + (size_t)bh * C * dk, *Wsc = Wscs + (size_t)bh * C * 2;
    __global real_t *dST = dSTs + (size_t)bh * ssz, *G = Gs + (size_t)bh * asz;
    for (size_t e = lid; e < (amode == 0 ? ssz : 0); e += wg) { /* amode 1, 2: S is grad_chunk's */
        CKS[e] = has_S_in ? S_in[(size_t)bh * ssz + e] : 0.0f;
        dST[e] = has_dS_end ? (real_t)dS_end[(size_t)bh * ssz + e] : 0;
    }
    for (size_t e = lid; e < asz; e += wg) {
        const int i = (int)(e / dk), j = (int)(e % dk);
        /* CKA holds A transposed: CKA[j][i] = A[i][j]. */
        CKA[(size_t)j * dk + i] = has_A_in ? (real_t)A_in[(size_t)bh * asz + e] : (i == j ? (real_t)inv_lambda : 0);
        G[e] = has_dA_end ? ((real_t)dA_end[(size_t)bh * asz + e] + (real_t)dA_end[(size_t)bh * asz + (size_t)j * dk + i]) / 2
                          : 0;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);

    const int spart = amode == 0; /* the S part here (else grad_chunk's) */
    for (int pass = amode == 2 ? 1 : 0; pass < (amode == 1 ? 1 : 2); pass++)
        for (int n = 0; n < nch; n++) {
            const int ci = pass == 0 ? n : nch - 1 - n, ts = ci * C, c = min(C, T - ts);
            /* amode 1 leaves a_t in alo, not Wal: amode 2 recomputes the last chunk too */
            const int nrec = (pass == 0 || ci < nch - 1 || amode == 2) ? c : 0;
            /* Recompute the chunk's states (pass 0: every chunk, to leave the checkpoints; pass 1:
             * all but the last, which pass 0 left in the workspace). */
            for (int tl = 0; tl < nrec; tl++) {
                const int t = ts + tl;
                const size_t row = ((size_t)bh * T + t) * dk;
                for (int i = lid; i < dk; i += wg) {
                    lu[i] = uu[row + i];
                    lk[i] = kh[row + i];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                vg_a_step(tl == 0 ? CKA + (size_t)ci * asz : Wa + (size_t)(tl - 1) * asz, Wa + (size_t)tl * asz, lu, lk,
                          vla_is_refresh(R, rphase, t), (real_t)rho, (real_t)eps, dk, lz, ly, red, lw,
                          Wz + (size_t)tl * dk, Wsc + (size_t)tl * 2, amode == 1 ? alo + row : Wal + (size_t)tl * dk);
                if (spart)
                    gd_fwd_token(tl == 0 ? CKS + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz, Wst + (size_t)tl * ssz,
                             lk, lw, v, vla_bthd(b, t, h, 0, T, H, dv), 1.0f, 0, 1, We + (size_t)tl * dv, dk, dv);
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
            const int last = pass == 0 && ci + 1 < nch;
            for (size_t e = lid; e < (last && spart ? ssz : 0); e += wg)
                CKS[(size_t)(ci + 1) * ssz + e] = Wst[(size_t)(c - 1) * ssz + e];
            for (size_t e = lid; e < (last ? asz : 0); e += wg)
                CKA[(size_t)(ci + 1) * asz + e] = Wa[(size_t)(c - 1) * asz + e];
            barrier(CLK_GLOBAL_MEM_FENCE);

            /* Walk the chunk's tokens backwards. */
            const int nb = pass == 1 ? c : 0;
            for (int kk = 0; kk < nb; kk++) {
                const int tl = c - 1 - kk, t = ts + tl;
                const size_t row = ((size_t)bh * T + t) * dk;
                const real_t inv = gd_inv_den(qn, (size_t)bh * T + t, den_mode, eps);
                for (int i = lid; i < dk; i += wg) {
                    lq[i] = qf[row + i];
                    lk[i] = kh[row + i];
                    lu[i] = uu[row + i];
                    lw[i] = Wal[(size_t)tl * dk + i];
                    lz[i] = Wz[(size_t)tl * dk + i];
                }
                for (int j = lid; j < (spart ? dv : 0); j += wg) {
                    ldo[j] = (real_t)dO[vla_bthd(b, t, h, j, T, H, dv)] * inv;
                    le[j] = We[(size_t)tl * dv + j];
                }
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                const real_t delta = Wsc[(size_t)tl * 2], ynorm = Wsc[(size_t)tl * 2 + 1];
                __global const float *STp = tl == 0 ? CKS + (size_t)ci * ssz : Wst + (size_t)(tl - 1) * ssz;
                __global const float *STc = Wst + (size_t)tl * ssz;
                __global const real_t *Ap = tl == 0 ? CKA + (size_t)ci * asz : Wa + (size_t)(tl - 1) * asz;
                __global const real_t *Ac = Wa + (size_t)tl * asz;

                /* S part: columns, then rows (dq, da, dk^ through e); with grad_chunk's (amode 2),
                 * da and dk^ so far from its outputs. */
                real_t pdg, pr = 0;
                if (spart)
                    gd_bwd_cols(STp, STc, dST, lq, lw, lk, ldo, lde, 0, den_mode != 0, dvo, (outs & GO_DV) != 0, b, t,
                                h, T, H, dk, dv, &pdg, &pr);
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
                const real_t rr = vla_wg_sum_real(pr, red);
                real_t da[VLA_PER], dkr[VLA_PER], gz[VLA_PER], du[VLA_PER];
                real_t pad = 0;
                for (int m = 0, i = lid; i < dk; m++, i += wg) {
                    if (spart) {
                        real_t dq;
                        gd_bwd_row(STp, STc, dST, ldo, le, lde, 1, i, dv, &dq, &da[m], &dkr[m]);
                        if (outs & GO_DQ) dqf[row + i] = (float)dq;
                    } else {
                        da[m] = (real_t)dal[row + i];
                        dkr[m] = (outs & GO_DK) ? (real_t)dkh[row + i] : 0;
                    }
                    pad += (real_t)lw[i] * da[m];
                }
                const real_t ada = vla_wg_sum_real(pad, red); /* a . da */
                barrier(CLK_GLOBAL_MEM_FENCE);                /* every row has read dST */
                if (spart) gd_bwd_carry(dST, lk, lde, 1.0f, 0, 1, dk, dv);

                /* A part. dy (into ly), then dk^ += A_t dy, G += sym(dy k^T), gz = G z. */
                for (int m = 0, i = lid; i < dk; m++, i += wg)
                    ly[i] = !(ynorm <= (real_t)eps) ? (da[m] - (real_t)lw[i] * ada) / ynorm : da[m] / (real_t)eps;
                barrier(CLK_LOCAL_MEM_FENCE);
                real_t pz = 0;
                for (int m = 0, i = lid; i < dk; m++, i += wg) {
                    __global real_t *Gi = G + (size_t)i * dk;
                    const real_t dyi = ly[i], ki = (real_t)lk[i];
                    real_t ad = 0, s = 0;
                    for (int j = 0; j < dk; j++) {
                        ad += Ac[(size_t)j * dk + i] * ly[j];
                        const real_t x = Gi[j] + (dyi * (real_t)lk[j] + ki * ly[j]) / 2;
                        Gi[j] = x;
                        s += x * lz[j];
                    }
                    dkr[m] += ad;
                    gz[m] = s;
                    pz += lz[i] * s;
                }
                const real_t zgz = vla_wg_sum_real(pz, red); /* its barriers end every read of ly */
                const real_t den = fmax(delta, (real_t)eps);
                const real_t dden = !(delta <= (real_t)eps) ? zgz / (den * den) : 0; /* NaN stays NaN */
                for (int m = 0, i = lid; i < dk; m++, i += wg) {
                    ly[i] = -2 * gz[m] / den + dden * (real_t)lu[i]; /* dz' */
                    du[m] = dden * lz[i];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int m = 0, i = lid; i < dk; m++, i += wg) {
                    __global real_t *Gi = G + (size_t)i * dk;
                    const real_t dzi = ly[i], ui = (real_t)lu[i];
                    real_t s = 0;
                    for (int j = 0; j < dk; j++) {
                        s += Ap[(size_t)j * dk + i] * ly[j];
                        Gi[j] += (dzi * (real_t)lu[j] + ui * ly[j]) / 2;
                    }
                    if (outs & GO_DU) duu[row + i] = (float)(du[m] + s);
                    if (outs & GO_DK) dkh[row + i] = (float)dkr[m];
                }
                if (lid == 0 && den_mode && spart) r[(size_t)bh * T + t] = (float)rr;
                barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            }
        }
    if ((outs & GO_DS0) && spart)
        for (size_t e = lid; e < ssz; e += wg) dS0[(size_t)bh * ssz + e] = (float)dST[e];
    if ((outs & GO_DA0) && amode != 1)
        for (size_t e = lid; e < asz; e += wg) {
            const int i = (int)(e / dk), j = (int)(e % dk);
            dA0[(size_t)bh * asz + e] = (float)((G[e] + G[(size_t)j * dk + i]) / 2);
        }
}
