/* grad_chunk.cl: the chunked backward (VLA-MATH 5, docs/BACKWARD.md "Chunked S part") of linear
 * attention and DeltaNet: backends/cpu/cpu_grad_chunk.c's chunk forward and vector-Jacobian
 * product, driven as backends/cpu/cpu_grad_delta.c's rule_chunked drives them, in real_t.
 *
 * One work-group per head. A forward pass keeps ST = S^T [dk, dv] at every chunk start (CK
 * [nch, dk, dv] real_t per head); then the chunks are walked last to first, each recomputed
 * from its checkpoint in matrix form and differentiated. For one chunk of c tokens with rows
 * Kr, W, Q [c, dk], V [c, dv], D [c, c] (decay products), gam [c]:
 *   E = (I + strict_lower(Lr o D))^{-1} (V - diag(gam) Kr ST0),  Lr = Kr W^T   (E = V: linear)
 *   O = diag(gam) Q ST0 + (Pq o D) E,  Pq = Q W^T;   ST_end = gam_{c-1} ST0 + W^T diag(D[c-1, :]) E
 * and the VJP is cpu_grad_chunk_vjp's, step for step (its header has the equations). The
 * normaliser of linear attention stays outside, as in the recurrent form: dO arrives scaled by
 * 1 / den_t, r_t = dO'_t . O_t goes out, and grad_norm (grad_prep.cl) does the rest.
 *
 * The chunk's matrices live in one per-head workspace (gc_carve; ocl_grad_chunk.c sizes it): in
 * local memory when it fits (built with GC_LOCAL), else a slice of a global buffer. Two forms:
 * on GPUs every product is one output a work-item over the group, then a barrier, and the
 * triangular solves are a column a work-item (columns do not interact), no barrier inside; on
 * other devices (CP_ONE_ITEM) one item a group runs 4 x 8 register tiles and row-by-row solves
 * (on PoCL, 2 cores: DeltaNet's backward at (1,4,32) T = 4096 took 104 ms a call with 256
 * items one output each, 18.5 ms so). Barriers are never inside a branch that differs between
 * work-items (common.cl; PoCL). */

#ifdef GC_LOCAL
#define GCS __local
#else
#define GCS __global
#endif
#define GC_SYNC() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
/* CP_ONE_ITEM (the host's build option on devices that are not GPUs, as for chunkpar.cl): one
 * item a group, and the products and solves become unit-stride row loops (axpy over a row of
 * the output) that the compiler vectorises; item loops below reduce to plain loops. */
#ifdef CP_ONE_ITEM
#define GC_LID 0
#define GC_WG 1
#else
#define GC_LID ((int)get_local_id(0))
#define GC_WG ((int)get_local_size(0))
#endif

/* Bits of grad_chunk's `outs` (ocl_grad.c's GO_*). */
#define GC_DQ 1
#define GC_DK 2
#define GC_DV 4
#define GC_DBETA 8
#define GC_DG 16
#define GC_DS0 32
#define GC_DW 256 /* dW to its own output (VLA: da_t for grad_vla's A part); dkey then dKr alone */

/* gc_mm's `tri`: which triangle of a c x c operand is zero, or of the output is wanted. The one
 * item form skips the rest (about a third of a chunk's multiply-adds); the many-item form
 * computes everything, which gives the same values where they are used. */
#define GC_PLO 1 /* A(i, p) = 0 for p > i */
#define GC_PUP 2 /* A(i, p) = 0 for p < i */
#define GC_CLO 4 /* only outputs j <= i are read (one item: the others are set to 0; only with !acc) */

#ifdef VLA_FP64
typedef double8 gc_real8;
#else
typedef float8 gc_real8;
#endif

/* Cm [m, n] (ldc) = (acc ? Cm : 0) + alpha sum_p A(i, p) B(p, j), with A(i, p) = A[i ai + p ap],
 * B(p, j) = B[p bp + j bj] (strides give the transposes). Ends with a barrier.
 * One item: a B with bj != 1 is first transposed into Bt (kk n reals); then tiles of 4 rows x 8
 * columns are summed in vector registers over p (one 8-wide load of B and four scalar loads of A
 * a step, for four 8-wide multiply-adds), the last n % 8 columns one at a time. A tile takes the
 * union of its rows' p ranges: the extra terms are the zeros that `tri` names. */
void gc_mm(int m, int n, int kk, real_t alpha, GCS const real_t *A, int ai, int ap, GCS const real_t *B, int bp, int bj,
           int acc, GCS real_t *Cm, int ldc, GCS real_t *Bt, int tri) {
#ifdef CP_ONE_ITEM
    if (bj != 1) {
        for (int p = 0; p < kk; p++)
            for (int j = 0; j < n; j++) Bt[p * n + j] = B[(size_t)p * bp + (size_t)j * bj];
        B = Bt, bp = n, bj = 1;
    }
    for (int i0 = 0; i0 < m; i0 += 4) {
        const int ni = min(4, m - i0);
        const int p0 = (tri & GC_PUP) ? i0 : 0, p1 = (tri & GC_PLO) ? min(kk, i0 + ni) : kk;
        const int nj = (tri & GC_CLO) ? min(n, i0 + ni) : n, nj8 = nj & ~7;
        GCS const real_t *a0 = A + (size_t)i0 * ai, *a1 = A + (size_t)(i0 + min(1, ni - 1)) * ai;
        GCS const real_t *a2 = A + (size_t)(i0 + min(2, ni - 1)) * ai, *a3 = A + (size_t)(i0 + min(3, ni - 1)) * ai;
        for (int j0 = 0; j0 < nj8; j0 += 8) {
            gc_real8 c0 = 0, c1 = 0, c2 = 0, c3 = 0;
            for (int p = p0; p < p1; p++) {
                const gc_real8 bv = vload8(0, B + (size_t)p * bp + j0);
                const size_t q = (size_t)p * ap;
                c0 += a0[q] * bv;
                c1 += a1[q] * bv;
                c2 += a2[q] * bv;
                c3 += a3[q] * bv;
            }
            for (int r = 0; r < ni; r++) {
                GCS real_t *c = Cm + (size_t)(i0 + r) * ldc + j0;
                const gc_real8 x = alpha * (r == 0 ? c0 : r == 1 ? c1 : r == 2 ? c2 : c3);
                vstore8(acc ? vload8(0, c) + x : x, 0, c);
            }
        }
        for (int r = 0; r < ni; r++) {
            GCS const real_t *a = A + (size_t)(i0 + r) * ai;
            GCS real_t *c = Cm + (size_t)(i0 + r) * ldc;
            for (int j = nj8; j < nj; j++) {
                real_t x = 0;
                for (int p = p0; p < p1; p++) x += a[(size_t)p * ap] * B[(size_t)p * bp + j];
                c[j] = acc ? c[j] + alpha * x : alpha * x;
            }
            if (tri & GC_CLO)
                for (int j = i0 + r + 1; j < n; j++) c[j] = 0;
        }
    }
#else
    (void)Bt, (void)tri;
    const int lid = GC_LID, wg = GC_WG;
    for (int e = lid; e < m * n; e += wg) {
        const int i = e / n, j = e - i * n;
        GCS const real_t *a = A + (size_t)i * ai;
        GCS const real_t *bb = B + (size_t)j * bj;
        real_t s = 0;
        for (int p = 0; p < kk; p++) s += a[(size_t)p * ap] * bb[(size_t)p * bp];
        GCS real_t *c = Cm + (size_t)i * ldc + j;
        *c = acc ? *c + alpha * s : alpha * s;
    }
#endif
    GC_SYNC();
}

/* The upstream gradient's scale 1 / den_t (grad_linear_delta.cl's gd_inv_den): den_mode 1
 * (linear) den = q~ . n_t + eps, 2 (VLA's normalised output) max(q~ . n_t, eps), 0 none. */
real_t gc_inv_den(__global const float *qn, size_t bt, int den_mode, float eps) {
    if (!den_mode) return 1;
    const real_t x = (real_t)qn[bt];
    return den_mode == 1 ? 1 / (x + (real_t)eps) : 1 / fmax(x, (real_t)eps);
}

/* The per-head workspace, in reals, for chunks of at most C tokens (the host sizes it with the
 * same sum). */
typedef struct gc_ws {
    GCS real_t *ST0, *dST, *Kr, *W, *Q, *dQ, *dKr, *dW;    /* [dk, dv] x2, [C, dk] x6 */
    GCS real_t *V, *dO, *E, *KS, *QS, *dE, *dB, *T1, *WdS; /* [C, dv] */
    GCS real_t *D, *Lr, *Pq, *Pm, *G, *dDx, *gam, *dg;     /* [C, C] x5, [C, C + 1], [C] x2 */
    GCS real_t *Bt;                                        /* gc_mm's transposes: max(C dk, C dv, dk dv) */
} gc_ws;

gc_ws gc_carve(GCS real_t *w, int C, int dk, int dv) {
    const size_t sS = (size_t)dk * dv, ck = (size_t)C * dk, cv = (size_t)C * dv, cc = (size_t)C * C;
    gc_ws s;
    s.ST0 = w, w += sS;
    s.dST = w, w += sS;
    s.Kr = w, w += ck;
    s.W = w, w += ck;
    s.Q = w, w += ck;
    s.dQ = w, w += ck;
    s.dKr = w, w += ck;
    s.dW = w, w += ck;
    s.V = w, w += cv;
    s.dO = w, w += cv;
    s.E = w, w += cv;
    s.KS = w, w += cv;
    s.QS = w, w += cv;
    s.dE = w, w += cv;
    s.dB = w, w += cv;
    s.T1 = w, w += cv;
    s.WdS = w, w += cv;
    s.D = w, w += cc;
    s.Lr = w, w += cc;
    s.Pq = w, w += cc;
    s.Pm = w, w += cc;
    s.G = w, w += cc;
    s.dDx = w, w += (size_t)C * (C + 1);
    s.gam = w, w += C;
    s.dg = w, w += C;
    s.Bt = w;
    return s;
}

/* The chunk forward from s.ST0: D, gam, E (and KS, Lr with the residual); with want_o also QS,
 * Pq, Pm and O into T1 [c, dv]; with want_end ST0 becomes ST_end (in place). */
void gc_forward(const gc_ws *s, int c, int dk, int dv, int residual, int has_g, int want_o, int want_end) {
    const int lid = GC_LID, wg = GC_WG;
    /* D[t][r] = prod_{r<q<=t} g_q (1 on the diagonal, 0 above), gam_t = prod_{q<=t} g_q, in
     * cpu_grad_chunk_forward's order of the products. */
    for (int t = 0; t < c; t++)
        for (int r = lid; r < c; r += wg) {
            const int e = t * c + r;
            real_t x = r <= t ? 1 : 0;
            if (has_g)
                for (int q = r + 1; q <= t; q++) x *= s->dg[q];
            s->D[e] = x;
        }
    for (int t = lid; t < c; t += wg) {
        real_t x = 1;
        if (has_g)
            for (int q = 0; q <= t; q++) x *= s->dg[q];
        s->gam[t] = x;
    }
    GC_SYNC();
    if (residual) {
        gc_mm(c, dv, dk, 1, s->Kr, dk, 1, s->ST0, dv, 1, 0, s->KS, dv, s->Bt, 0);  /* KS = Kr ST0 */
        gc_mm(c, c, dk, 1, s->Kr, dk, 1, s->W, 1, dk, 0, s->Lr, c, s->Bt, GC_CLO); /* Lr = Kr W^T */
        /* E = V - diag(gam) KS, then (I + strict_lower(Lr o D)) E = that, column j a work-item
         * (one item: row after row). */
#ifdef CP_ONE_ITEM
        for (int t = 0; t < c; t++) {
            GCS real_t *et = s->E + t * dv;
            for (int j = 0; j < dv; j++) et[j] = s->V[t * dv + j] - s->gam[t] * s->KS[t * dv + j];
            for (int r = 0; r < t; r++) {
                const real_t l = s->Lr[t * c + r] * s->D[t * c + r];
                GCS const real_t *er = s->E + r * dv;
                for (int j = 0; j < dv; j++) et[j] -= l * er[j];
            }
        }
#else
        for (int j = lid; j < dv; j += wg)
            for (int t = 0; t < c; t++) {
                real_t x = s->V[t * dv + j] - s->gam[t] * s->KS[t * dv + j];
                for (int r = 0; r < t; r++) x -= s->Lr[t * c + r] * s->D[t * c + r] * s->E[r * dv + j];
                s->E[t * dv + j] = x;
            }
#endif
    } else {
        for (int e = lid; e < c * dv; e += wg) s->E[e] = s->V[e];
    }
    GC_SYNC();
    if (want_o) {
        gc_mm(c, dv, dk, 1, s->Q, dk, 1, s->ST0, dv, 1, 0, s->QS, dv, s->Bt, 0);  /* QS = Q ST0 */
        gc_mm(c, c, dk, 1, s->Q, dk, 1, s->W, 1, dk, 0, s->Pq, c, s->Bt, GC_CLO); /* Pq = Q W^T */
        for (int e = lid; e < c * c; e += wg) s->Pm[e] = s->Pq[e] * s->D[e];
        for (int t = 0; t < c; t++)
            for (int j = lid; j < dv; j += wg) s->T1[t * dv + j] = s->gam[t] * s->QS[t * dv + j];
        GC_SYNC();
        gc_mm(c, dv, c, 1, s->Pm, c, 1, s->E, dv, 1, 1, s->T1, dv, s->Bt, GC_PLO); /* O = diag(gam) QS + Pm E */
    }
    if (want_end) {
        const real_t gl = s->gam[c - 1];
        for (int e = lid; e < dk * dv; e += wg) s->ST0[e] *= gl;
        for (int t = 0; t < c; t++)
            for (int j = lid; j < dv; j += wg) s->T1[t * dv + j] = s->D[(c - 1) * c + t] * s->E[t * dv + j];
        GC_SYNC();
        gc_mm(dk, dv, c, 1, s->W, 1, dk, s->T1, dv, 1, 1, s->ST0, dv, s->Bt, 0); /* ST_end += W^T diag(D_last) E */
    }
}

/* The chunk's VJP (cpu_grad_chunk_vjp), after gc_forward(want_o) on the same chunk: from dO [c, dv]
 * and dST = dST_end, writes dQ, dKr, dW [c, dk], dB (= dV) [c, dv], dg [c] (with has_g) and
 * turns dST into dST0. red: a work-group sum's scratch. */
void gc_vjp(const gc_ws *s, int c, int dk, int dv, int residual, int has_g, __local real_t *red) {
    const int lid = GC_LID, wg = GC_WG, cx = c + 1;
    GCS const real_t *Dl = s->D + (c - 1) * c;
#define DDX(t, j) s->dDx[(t) * cx + (j) + 1] /* column -1 is dgam */
    for (int e = lid; e < c * cx; e += wg) s->dDx[e] = 0;

    /* The ST_end term. */
    gc_mm(c, dv, dk, 1, s->W, dk, 1, s->dST, dv, 1, 0, s->WdS, dv, s->Bt, 0); /* W dST_end */
    for (int t = 0; t < c; t++)
        for (int j = lid; j < dv; j += wg) {
            s->dE[t * dv + j] = Dl[t] * s->WdS[t * dv + j];
            s->T1[t * dv + j] = Dl[t] * s->E[t * dv + j];
        }
    GC_SYNC();
    gc_mm(c, dk, dv, 1, s->T1, dv, 1, s->dST, 1, dv, 0, s->dW, dk, s->Bt, 0); /* dW = diag(D_last) E dST^T */
    real_t part = 0;
    if (has_g) {
        for (int t = lid; t < c; t += wg) {
            real_t x = 0;
            for (int j = 0; j < dv; j++) x += s->WdS[t * dv + j] * s->E[t * dv + j];
            DDX(c - 1, t) += x;
        }
        for (int e = lid; e < dk * dv; e += wg) part += s->ST0[e] * s->dST[e];
    }
    const real_t dgl = vla_wg_sum_real(part, red); /* <ST0, dST_end> */
    if (lid == 0)
        if (has_g) DDX(c - 1, -1) += dgl;
    const real_t gl = s->gam[c - 1];
    for (int e = lid; e < dk * dv; e += wg) s->dST[e] *= gl; /* dST is dST0 from here on */
    GC_SYNC();

    /* O = diag(gam) Q ST0 + Pm E. */
    gc_mm(c, dv, c, 1, s->Pm, 1, c, s->dO, dv, 1, 1, s->dE, dv, s->Bt, GC_PUP); /* dE += Pm^T dO */
    for (int t = 0; t < c; t++)
        for (int j = lid; j < dv; j += wg) s->T1[t * dv + j] = s->gam[t] * s->dO[t * dv + j];
    GC_SYNC();
    gc_mm(c, dk, dv, 1, s->T1, dv, 1, s->ST0, 1, dv, 0, s->dQ, dk, s->Bt, 0); /* dQ = diag(gam) dO ST0^T */
    gc_mm(dk, dv, c, 1, s->Q, 1, dk, s->T1, dv, 1, 1, s->dST, dv, s->Bt, 0);  /* dST0 += Q^T diag(gam) dO */
    if (has_g)
        for (int t = lid; t < c; t += wg) {
            real_t x = 0;
            for (int j = 0; j < dv; j++) x += s->dO[t * dv + j] * s->QS[t * dv + j];
            DDX(t, -1) += x;
        }
    gc_mm(c, c, dv, 1, s->dO, dv, 1, s->E, 1, dv, 0, s->G, c, s->Bt, GC_CLO); /* G = dO E^T */
    for (int t = 0; t < c; t++)
        for (int j = lid; j < c; j += wg) {
            const int e = t * c + j;
            if (j > t) {
                s->G[e] = 0;
            } else {
                if (has_g) DDX(t, j) += s->G[e] * s->Pq[e];
                s->G[e] *= s->D[e]; /* dPq */
            }
        }
    GC_SYNC();
    gc_mm(c, dk, c, 1, s->G, c, 1, s->W, dk, 1, 1, s->dQ, dk, s->Bt, GC_PLO); /* dQ += dPq W */
    gc_mm(c, dk, c, 1, s->G, 1, c, s->Q, dk, 1, 1, s->dW, dk, s->Bt, GC_PUP); /* dW += dPq^T Q */

    /* The triangular solve, and B = V - diag(gam) Kr ST0. */
    if (residual) {
        /* (I + strict_lower(Lr o D))^T dB = dE, column j a work-item (one item: row after row). */
#ifdef CP_ONE_ITEM
        for (int t = c - 1; t >= 0; t--) {
            GCS real_t *bt = s->dB + t * dv;
            for (int j = 0; j < dv; j++) bt[j] = s->dE[t * dv + j];
            for (int r = t + 1; r < c; r++) {
                const real_t l = s->Lr[r * c + t] * s->D[r * c + t];
                GCS const real_t *br = s->dB + r * dv;
                for (int j = 0; j < dv; j++) bt[j] -= l * br[j];
            }
        }
#else
        for (int j = lid; j < dv; j += wg)
            for (int t = c - 1; t >= 0; t--) {
                real_t x = s->dE[t * dv + j];
                for (int r = t + 1; r < c; r++) x -= s->Lr[r * c + t] * s->D[r * c + t] * s->dB[r * dv + j];
                s->dB[t * dv + j] = x;
            }
#endif
        GC_SYNC();
        gc_mm(c, c, dv, 1, s->dB, dv, 1, s->E, 1, dv, 0, s->G, c, s->Bt, GC_CLO); /* G = dB E^T */
        for (int t = 0; t < c; t++)
            for (int j = lid; j < c; j += wg) {
                const int e = t * c + j;
                if (j >= t) {
                    s->G[e] = 0;
                } else {
                    if (has_g) DDX(t, j) -= s->G[e] * s->Lr[e];
                    s->G[e] *= -s->D[e]; /* dLr */
                }
            }
        GC_SYNC();
        gc_mm(c, dk, c, 1, s->G, c, 1, s->W, dk, 1, 0, s->dKr, dk, s->Bt, GC_PLO); /* dKr = dLr W */
        gc_mm(c, dk, c, 1, s->G, 1, c, s->Kr, dk, 1, 1, s->dW, dk, s->Bt, GC_PUP); /* dW += dLr^T Kr */
        for (int t = 0; t < c; t++)
            for (int j = lid; j < dv; j += wg) s->T1[t * dv + j] = -s->gam[t] * s->dB[t * dv + j];
        GC_SYNC();
        gc_mm(c, dk, dv, 1, s->T1, dv, 1, s->ST0, 1, dv, 1, s->dKr, dk, s->Bt, 0); /* dKr -= diag(gam) dB ST0^T */
        gc_mm(dk, dv, c, 1, s->Kr, 1, dk, s->T1, dv, 1, 1, s->dST, dv, s->Bt, 0);  /* dST0 -= Kr^T diag(gam) dB */
        if (has_g)
            for (int t = lid; t < c; t += wg) {
                real_t x = 0;
                for (int j = 0; j < dv; j++) x += s->dB[t * dv + j] * s->KS[t * dv + j];
                DDX(t, -1) -= x;
            }
    } else {
        for (int e = lid; e < c * dv; e += wg) s->dB[e] = s->dE[e];
    }
    GC_SYNC();

    /* The gate: dg_r = sum_{t>=r} D[t][r] Y[t][r], Y = dDext Fext^T with Fext[r][-1] = gam_{r-1}
     * (1 at r = 0), Fext[r][q] = D[r-1][q] for q < r. Y (t >= r) goes into G. */
    if (has_g) {
        for (int t = 0; t < c; t++)
            for (int r = lid; r < c; r += wg) {
                const int e = t * c + r;
                if (r <= t) {
                    real_t y = DDX(t, -1) * (r ? s->gam[r - 1] : (real_t)1);
                    for (int q = 0; q < r; q++) y += DDX(t, q) * s->D[(r - 1) * c + q];
                    s->G[e] = y;
                }
            }
        GC_SYNC();
        for (int r = lid; r < c; r += wg) {
            real_t x = 0;
            for (int t = r; t < c; t++) x += s->D[t * c + r] * s->G[t * c + r];
            s->dg[r] = x;
        }
        GC_SYNC();
    }
#undef DDX
}

/* Tokens [ts, ts + c) of head bh into the workspace: Kr (residual), W, Q, V, dO' = dO / den
 * (want_do) and the gates g into s.dg (which gc_forward reads before the VJP writes dg). */
void gc_load(const gc_ws *s, __global const float *kr, __global const float *w, __global const float *qf,
             __global const float *v, __global const float *gdec, __global const float *dO, __global const float *qn,
             int has_den, float eps, int residual, int has_g, int want_do, int bh, int ts, int c, int T, int H, int dk,
             int dv) {
    const int lid = GC_LID, wg = GC_WG, b = bh / H, h = bh % H;
    const size_t row0 = ((size_t)bh * T + ts) * dk;
    for (int e = lid; e < c * dk; e += wg) {
        s->W[e] = (real_t)w[row0 + e];
        s->Q[e] = (real_t)qf[row0 + e];
        s->Kr[e] = residual ? (real_t)kr[row0 + e] : (real_t)0;
    }
    for (int t = 0; t < c; t++)
        for (int j = lid; j < dv; j += wg) {
            const int e = t * dv + j;
            const size_t x = vla_bthd(b, ts + t, h, j, T, H, dv);
            s->V[e] = (real_t)v[x];
            if (want_do) s->dO[e] = (real_t)dO[x] * gc_inv_den(qn, (size_t)bh * T + ts + t, has_den, eps);
        }
    for (int t = lid; t < c; t += wg) s->dg[t] = has_g ? (real_t)gdec[((size_t)b * T + ts + t) * H + h] : (real_t)1;
    GC_SYNC();
}

/* Linear attention (residual = 0, W = k~, no gate) and DeltaNet (residual = 1, Kr = k^, W = beta k^
 * or k^, optional g). One work-group per head (B*H groups). Inputs in the prepared [B*H, T, dk]
 * layout (kr, w, qf) and the user's (v, g, beta, dO); qn = q~ . n_t with has_den (the den_mode
 * of gc_inv_den). VLA's S part runs here too (Kr = k^, W = a_t, outs with GC_DW).
 * Outputs: dqf and dkey (linear: dk~ of the write; delta: dk^ = dKr + beta dW) prepared, dv,
 * dbeta, dg in the user's layouts, r [B*H, T] = dO'_t . O_t (has_den), dS0 [B*H, dk, dv]. CKs:
 * [B*H, nch, dk, dv] real_t; wsall: the workspace (local: one; global: ws_stride reals a head). */
__kernel void grad_chunk(__global const float *kr, __global const float *w, __global const float *qf,
                         __global const float *v, __global const float *gdec, __global const float *beta, int has_g,
                         int has_beta, int residual, __global const float *S_in, int has_S_in,
                         __global const float *dS_end, int has_dS_end, __global const float *dO,
                         __global const float *qn, int has_den, float eps, __global real_t *CKs, GCS real_t *wsall,
                         long ws_stride, __global float *dqf, __global float *dkey, __global float *dvo,
                         __global float *dbeta, __global float *dgo, __global float *r, __global float *dS0, int outs,
                         int T, int H, int dk, int dv, int C, int nch, __global float *dwo) {
    __local real_t red[VLA_MAXWG];
    const int bh = get_group_id(0), b = bh / H, h = bh % H, lid = GC_LID, wg = GC_WG;
    const size_t sS = (size_t)dk * dv;
    GCS real_t *wsp = wsall;
#ifdef GC_LOCAL
    (void)ws_stride; /* one workspace a group */
#else
    wsp += (size_t)bh * (size_t)ws_stride;
#endif
    const gc_ws s = gc_carve(wsp, C, dk, dv);
    __global real_t *CK = CKs + (size_t)bh * nch * sS;
    for (size_t e = lid; e < sS; e += wg) {
        s.ST0[e] = has_S_in ? (real_t)S_in[(size_t)bh * sS + e] : (real_t)0;
        s.dST[e] = has_dS_end ? (real_t)dS_end[(size_t)bh * sS + e] : (real_t)0;
    }
    GC_SYNC();

    /* Forwards: the checkpoints (the state after the last chunk is not needed). */
    for (int ci = 0; ci < nch; ci++) {
        const int ts = ci * C, c = min(C, T - ts);
        for (size_t e = lid; e < sS; e += wg) CK[(size_t)ci * sS + e] = s.ST0[e];
        if (ci + 1 < nch) {
            gc_load(&s, kr, w, qf, v, gdec, dO, qn, has_den, eps, residual, has_g, 0, bh, ts, c, T, H, dk, dv);
            gc_forward(&s, c, dk, dv, residual, has_g, 0, 1);
        }
    }
    GC_SYNC();

    /* Backwards: each chunk recomputed from its checkpoint, then its VJP. */
    for (int ci = nch - 1; ci >= 0; ci--) {
        const int ts = ci * C, c = min(C, T - ts);
        for (size_t e = lid; e < sS; e += wg) s.ST0[e] = CK[(size_t)ci * sS + e];
        gc_load(&s, kr, w, qf, v, gdec, dO, qn, has_den, eps, residual, has_g, 1, bh, ts, c, T, H, dk, dv);
        gc_forward(&s, c, dk, dv, residual, has_g, 1, 0);
        for (int t = lid; t < (has_den ? c : 0); t += wg) { /* r_t = dO'_t . O_t, O in T1 */
            real_t x = 0;
            for (int j = 0; j < dv; j++) x += s.dO[t * dv + j] * s.T1[t * dv + j];
            r[(size_t)bh * T + ts + t] = (float)x;
        }
        GC_SYNC();
        gc_vjp(&s, c, dk, dv, residual, has_g, red);
        for (int e = lid; e < c * dk; e += wg) {
            const int t = e / dk;
            const size_t x = ((size_t)bh * T + ts) * dk + e;
            if (outs & GC_DQ) dqf[x] = (float)s.dQ[e];
            if (outs & GC_DW) {
                dwo[x] = (float)s.dW[e];
                if (outs & GC_DK) dkey[x] = (float)s.dKr[e];
            } else if (outs & GC_DK) {
                const real_t bet = has_beta ? (real_t)beta[((size_t)b * T + ts + t) * H + h] : (real_t)1;
                dkey[x] = (float)(residual ? s.dKr[e] + bet * s.dW[e] : s.dW[e]);
            }
        }
        if (outs & GC_DV)
            for (int t = 0; t < c; t++)
                for (int j = lid; j < dv; j += wg) {
                    const int e = t * dv + j;
                    dvo[vla_bthd(b, ts + t, h, j, T, H, dv)] = (float)s.dB[e];
                }
        for (int t = lid; t < c; t += wg) {
            const size_t bt = ((size_t)b * T + ts + t) * H + h;
            if (outs & GC_DG) dgo[bt] = has_g ? (float)s.dg[t] : 0.0f; /* s.dg holds 1s without g */
            if (outs & GC_DBETA) {                                     /* w = beta k^: dbeta = k^ . dW */
                real_t x = 0;
                for (int i = 0; i < dk; i++) x += s.Kr[t * dk + i] * s.dW[t * dk + i];
                dbeta[bt] = (float)x;
            }
        }
        GC_SYNC();
    }
    if (outs & GC_DS0)
        for (size_t e = lid; e < sS; e += wg) dS0[(size_t)bh * sS + e] = (float)s.dST[e];
}
