/* The chunk-parallel form's walk (vla_chunkpar.cuh describes the form): the only sequential part,
 * X_{j+1} = P_j X_j + Q_j over a head's chunks, X_j to Xst for the output kernels
 * (vla_chunkpar_output.cu), S_out and A_out at the end. Its forms:
 *   walk_kernel       BV value columns a block, P_j staged in shared memory; also the segmented
 *                     walk's three launches (W_MAP, W_SCAN, W_LOCAL) for few heads and many chunks
 *   walk_rows_kernel  dk <= 32, 8 or 16 columns a block: P's rows in registers
 *   walk_quad_kernel  dk <= 32, few heads (sm_80+): four threads an entry of X; also the segmented
 *                     walk's middle launch
 *   sumwalk_kernel    linear attention: X_{j+1} = X_j + Q_j, a thread an entry */
#include "vla_chunkpar_tiles.cuh"

namespace vlacu {
namespace cp {

/* The walk's end, by its first column block: A_out <- A after the last token (VLA; every A part has
 * run, in an earlier launch, so A_in may be A_out). */
__device__ __forceinline__ void a_out_from_aend(const cp_params &P, int bh, int nthreads = NT) {
    const vlacu_args &a = P.a;
    if (a.mech != VLACU_VLA || !a.A_out) return;
    const size_t n = (size_t)a.dk * a.dk;
    for (size_t e = threadIdx.x; e < n; e += (size_t)nthreads) a.A_out[(size_t)bh * n + e] = P.Aend[(size_t)bh * n + e];
}

/* [BH x DK dv / NT]: one thread per entry (r, c) of X = S (DK x dv): X_j -> Xst, X += Qm_j; S_in
 * and S_out. The entries are independent: no shared memory, no barrier; SW loads in flight a
 * thread. */
__global__ void __launch_bounds__(NT) sumwalk_kernel(const cp_params P, int DK) {
    tl_scope<TL_SUMWALK> tl_(P);
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, per = DK * dv, nb = (per + NT - 1) / NT;
    const int bh = blockIdx.x / nb, e = (blockIdx.x % nb) * NT + (int)threadIdx.x;
    if (e >= per) return;
    const int r = e / dv, cc = e - r * dv;
    float x = a.S_in && r < dk ? a.S_in[(size_t)bh * dk * dv + (size_t)r * dv + cc] : 0.0f;
    const size_t step = (size_t)per, base = (size_t)bh * P.nch * step + e;
    const float *qg = P.Qm + base;
    float *xg = P.Xst + base;
    constexpr int SW = 8;
    int j = 0;
    for (; j + SW <= P.nch; j += SW) {
        float q[SW];
#pragma unroll
        for (int u = 0; u < SW; u++) q[u] = qg[(size_t)(j + u) * step];
#pragma unroll
        for (int u = 0; u < SW; u++) {
            xg[(size_t)(j + u) * step] = x;
            x += q[u];
        }
    }
    for (; j < P.nch; j++) {
        xg[(size_t)j * step] = x;
        x += qg[(size_t)j * step];
    }
    if (a.S_out && r < dk) a.S_out[(size_t)bh * dk * dv + (size_t)r * dv + cc] = x;
}

/* VLA_WALK_DIAG (development, timing only; results wrong): walk_kernel leaves out, by
 * bit, 1 the fetches of P_j and Q_j after the first steps, 2 the stores of X_j, 4 the product */
#ifndef VLA_WALK_DIAG
#define VLA_WALK_DIAG 0
#endif
/* VLA_WALK_VEC: the plain walk's loads of P_j, Q_j and stores of X_j by 16 bytes at dk = 64 on 32
 * columns (walk_kernel<64, 32, W_PLAIN>, see WVEC there); 0 (development): 4 bytes a load and store
 * in the accumulator layout. */
#ifndef VLA_WALK_VEC
#define VLA_WALK_VEC 1
#endif

/* ---- cp_walk: walk_kernel on BV value columns, in the modes of vla_chunkpar.cuh (W_PLAIN, the
 * whole walk; W_MAP, W_SCAN, W_LOCAL, the segmented walk's three launches) ---- */
/* MODE is a template argument so that W_PLAIN compiles to the plain walk with no test of the mode
 * (with a runtime mode, one profile at (1,4,32) T = 2048 counted 50.8k cycles for the 32 steps of
 * a block, against 34.6k with the mode a template argument). */
template <int DK, int BV, int MODE> __global__ void __launch_bounds__(NT, 2) walk_kernel(const cp_params P) {
    tl_scope<MODE == W_PLAIN ? TL_WALK : MODE == W_MAP ? TL_WMAP : MODE == W_SCAN ? TL_WSCAN : TL_WLOCAL> tl_(P);
    VLACU_DYNSMEM(smem);
    typedef walk_smem<DK, BV> S;
    constexpr int ld = S::ld, ldv = S::ldv, mode = MODE;
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + BV - 1) / BV;
    const int ncb = mode == W_MAP ? DK / BV + nvb : nvb; /* column blocks */
    const int nsg = mode == W_MAP || mode == W_LOCAL ? P.wnseg : 1;
    const int g = blockIdx.x % nsg, cb = (blockIdx.x / nsg) % ncb, bh = blockIdx.x / nsg / ncb;
    if (head_skipped(P, bh)) return;
    const bool pblock = mode == W_MAP && cb < DK / BV; /* identity columns v0.. of P_seg */
    const int v0 = (pblock ? cb : mode == W_MAP ? cb - DK / BV : cb) * BV, nv = pblock ? BV : imin(BV, dv - v0);
    /* the steps: chunks, a segment's chunks, or the segments */
    const int j0 = mode == W_MAP || mode == W_LOCAL ? g * P.wlen : 0;
    const int j1 = mode == W_SCAN ? P.wnseg : mode == W_PLAIN ? P.nch : imin(j0 + P.wlen, P.nch);
    const int segld = DK + dv; /* row stride of a segment map */
    constexpr int stage = DK * ld + 2 * DK * ldv;
    float *const base = (float *)smem;
#define PB(s) (base + (s) * stage)
#define QB(s) (base + (s) * stage + DK * ld)
#define XB(s) (base + (s) * stage + DK * ld + DK * ldv)
    typedef blk<DK, BV> tx; /* X, Q [DK][BV] */
    constexpr int NP = DK * DK / NT, NQ = DK * BV / NT;
    /* P and Q of the next AH steps in registers, by step mod AH. Two for the plain walk at dk = 64
     * ((8,16,64): 0.7% faster at T = 2048 and 32768); one elsewhere (at dk = 32
     * two were 3-4% slower at T = 8192 and 131072, and W_MAP at dk = 64 spilled 8 bytes) */
    constexpr int AH = DK == 64 && MODE == W_PLAIN ? 2 : 1;
    float rp[AH][NP], rq[AH][NQ];

    /* WVEC (fetch4, stash4, put_x4): each thread takes four consecutive entries e .. e + 3
     * of a row of P, Q and X_j, moved by one 16-byte load or store where dv is a multiple of 4 and the
     * arrays lie on 16 bytes (vec), else by four (the mapping is the same either way, so the
     * registers are too); X_j is stored from XB(s) in whole rows, where the accumulator layout stored
     * half a 32-byte sector a lane. The same values land in the same places: the same bits (44 of 44
     * output files). At (8,16,64) the plain walk's steps took 3.7-3.8k cycles a block
     * instead of 4.5-4.6k (T = 2048, 32 steps: 118-123k against 144-148k), and without X_j's stores
     * 3.4k (VLA_WALK_DIAG=2): the accumulator-layout stores were a quarter of a step. Forward, gated, rounds 1 / 2: (8,16,64)
     * T = 2048 1.0404 / 1.0397 ms against 1.0566 / 1.0586, T = 32768 15.28 / 15.29 against 15.54 /
     * 15.54. The same form in walk_kernel<32, 32> (the segmented walk's first and last launches) made
     * (1,4,32) T = 8192 and 32768 2-3% slower (0.1128 / 0.1123 against 0.1092 / 0.1094 ms) and
     * T = 131072 2% faster: so the plain walk at dk = 64 on 32 columns alone, where it was measured. */
    constexpr bool WVEC = VLA_WALK_VEC && DK == 64 && BV == 32 && MODE == W_PLAIN;
    static_assert(!WVEC || (NP % 4 == 0 && NQ % 4 == 0), "four entries a thread");
    const bool vec = (dv & 3) == 0 && (((uintptr_t)P.Pm | (uintptr_t)P.Qm | (uintptr_t)P.Xst) & 15u) == 0u;
    auto ld4 = [&](const float *src, int n) { /* src[0..3], zero past n (n >= 4: all) */
        vf4 x;
        if (vec && n >= 4) return *reinterpret_cast<const vf4 *>(src);
        x.x = n > 0 ? src[0] : 0.0f, x.y = n > 1 ? src[1] : 0.0f, x.z = n > 2 ? src[2] : 0.0f, x.w = n > 3 ? src[3] : 0.0f;
        return x;
    };
    auto fetch4 = [&](int jj, int u) {
        const float *pg = P.Pm + ((size_t)bh * P.nch + jj) * DK * DK, *qg = P.Qm + ((size_t)bh * P.nch + jj) * DK * dv + v0;
#pragma unroll
        for (int r = 0; r < NP / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / DK, k = e - i * DK;
            const vf4 x = ld4(pg + (size_t)i * DK + k, 4);
            rp[u][4 * r] = x.x, rp[u][4 * r + 1] = x.y, rp[u][4 * r + 2] = x.z, rp[u][4 * r + 3] = x.w;
        }
#pragma unroll
        for (int r = 0; r < NQ / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / BV, cc = e - i * BV;
            const vf4 x = ld4(qg + (size_t)i * dv + cc, nv - cc);
            rq[u][4 * r] = x.x, rq[u][4 * r + 1] = x.y, rq[u][4 * r + 2] = x.z, rq[u][4 * r + 3] = x.w;
        }
    };
    auto stash4 = [&](int s, int u) {
#pragma unroll
        for (int r = 0; r < NP / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / DK, k = e - i * DK;
            vf4 x;
            x.x = rp[u][4 * r], x.y = rp[u][4 * r + 1], x.z = rp[u][4 * r + 2], x.w = rp[u][4 * r + 3];
            *reinterpret_cast<vf4 *>(PB(s) + i * ld + k) = x;
        }
#pragma unroll
        for (int r = 0; r < NQ / 4; r++) {
            const int e = 4 * ((int)threadIdx.x + NT * r), i = e / BV, cc = e - i * BV;
            vf4 x;
            x.x = rq[u][4 * r], x.y = rq[u][4 * r + 1], x.z = rq[u][4 * r + 2], x.w = rq[u][4 * r + 3];
            *reinterpret_cast<vf4 *>(QB(s) + i * ldv + cc) = x;
        }
    };
    /* X_j (in XB(s), written before the last barrier) to xst, whole rows of BV: columns < nv */
    auto put_x4 = [&](float *xst, int s) {
        for (int e4 = (int)threadIdx.x; e4 < DK * BV / 4; e4 += NT) {
            const int i = 4 * e4 / BV, cc = 4 * e4 - i * BV;
            const float *x = XB(s) + i * ldv + cc;
            float *dst = xst + (size_t)i * dv + cc;
            if (vec && cc < nv) *reinterpret_cast<vf4 *>(dst) = *reinterpret_cast<const vf4 *>(x);
            else if (!vec)
                for (int q = 0; q < 4 && cc + q < nv; q++) dst[q] = x[q];
        }
    };
    /* registers slot u <- step jj's P and Q columns v0.. (columns < nv; Q = 0 for identity columns) */
    auto fetch = [&](int jj, int u) {
        if constexpr (WVEC) {
            fetch4(jj, u);
        } else {
            if (mode == W_SCAN) { /* a segment map [P_seg | Q_seg], rows of DK + dv */
                const float *pg = P.Seg + ((size_t)bh * P.wnseg + jj) * DK * segld, *qg = pg + DK + v0;
#pragma unroll
                for (int r = 0; r < NP; r++) {
                    const int e = threadIdx.x + NT * r, i = e / DK, k = e - i * DK;
                    rp[u][r] = pg[(size_t)i * segld + k];
                }
#pragma unroll
                for (int r = 0; r < NQ; r++) {
                    const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                    rq[u][r] = cc < nv ? qg[(size_t)i * segld + cc] : 0.0f;
                }
                return;
            }
            const float *pg = P.Pm + ((size_t)bh * P.nch + jj) * DK * DK;
            const float *qg = P.Qm + ((size_t)bh * P.nch + jj) * DK * dv + v0;
#pragma unroll
            for (int r = 0; r < NP; r++) rp[u][r] = pg[threadIdx.x + NT * r];
#pragma unroll
            for (int r = 0; r < NQ; r++) {
                const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                rq[u][r] = !pblock && cc < nv ? qg[(size_t)i * dv + cc] : 0.0f;
            }
        }
    };
    auto stash = [&](int s, int u) {
        if constexpr (WVEC) {
            stash4(s, u);
        } else {
#pragma unroll
            for (int r = 0; r < NP; r++) {
                const int e = threadIdx.x + NT * r, i = e / DK, k = e - i * DK;
                PB(s)[i * ld + k] = rp[u][r];
            }
#pragma unroll
            for (int r = 0; r < NQ; r++) {
                const int e = threadIdx.x + NT * r, i = e / BV, cc = e - i * BV;
                QB(s)[i * ldv + cc] = rq[u][r];
            }
        }
    };

    /* X at the first step: S_in^T columns v0.. (zero rows past dk, columns past nv), the segment's
     * start state, or [I | 0]; each thread its own entries */
    float xs[tx::NE];
#pragma unroll
    for (int i = 0; i < tx::NE; i++) {
            const int r = tx::row(i), cc = tx::col(i);
            float x0 = 0.0f;
            if (mode == W_PLAIN || mode == W_SCAN)
                x0 = (a.S_in && r < dk && cc < nv) ? a.S_in[(size_t)bh * dk * dv + (size_t)r * dv + v0 + cc] : 0.0f;
            else if (mode == W_LOCAL)
                x0 = cc < nv ? P.Sst[((size_t)bh * P.wnseg + g) * DK * dv + (size_t)r * dv + v0 + cc] : 0.0f;
            else if (pblock)
                x0 = r == v0 + cc ? 1.0f : 0.0f;
            xs[i] = x0;
            XB(0)[r * ldv + cc] = x0;
        }
    /* step j0 stashed; steps j0 + 1 .. j0 + AH - 1 in registers (slot (j - j0) mod AH) */
    if (j0 < j1) {
        fetch(j0, 0);
        stash(0, 0);
    }
#pragma unroll
    for (int u = 1; u < AH; u++)
        if (j0 + u < j1) fetch(j0 + u, u);
    __syncthreads();
    PROF(12);
    /* step j (u = (j - j0) mod AH, a constant in the unrolled body): P_{j+AH} into slot u, whose
     * step is stashed; the next step's P from slot (u + 1) mod AH to the other stage */
    for (int jb = j0; jb < j1; jb += AH) {
#pragma unroll
        for (int u = 0; u < AH; u++) {
            const int j = jb + u;
            if (j >= j1) break;
            const int s = (j - j0) & 1;
            if (j - j0 == 1) PROF(14);
            float *xst = mode == W_SCAN  ? P.Sst + ((size_t)bh * P.wnseg + j) * DK * dv + v0
                         : mode == W_MAP ? nullptr
                                         : P.Xst + ((size_t)bh * P.nch + j) * DK * dv + v0;
            if (xst && !(VLA_WALK_DIAG & 2)) {
                if constexpr (WVEC) {
                    put_x4(xst, s);
                } else {
#pragma unroll
                    for (int i = 0; i < tx::NE; i++)
                        if (tx::col(i) < nv) xst[(size_t)tx::row(i) * dv + tx::col(i)] = xs[i];
                }
            }
            if (j + AH < j1 && !(VLA_WALK_DIAG & 1)) fetch(j + AH, u);
            /* X <- P X + Q */
#pragma unroll
            for (int i = 0; i < tx::NE; i++) xs[i] = QB(s)[tx::row(i) * ldv + tx::col(i)];
            if (!(VLA_WALK_DIAG & 4)) mmb<DK, BV, DK, false, false>(PB(s), ld, XB(s), ldv, xs);
#pragma unroll
            for (int i = 0; i < tx::NE; i++) XB(s ^ 1)[tx::row(i) * ldv + tx::col(i)] = xs[i];
            if (j + 1 < j1) stash(s ^ 1, (u + 1) % AH);
            __syncthreads();
            if (j - j0 == 1) PROF(15);
        }
    }
    PROF(13);
    if (mode == W_MAP) {
        float *sg = P.Seg + ((size_t)bh * P.wnseg + g) * DK * segld + (pblock ? v0 : DK + v0);
#pragma unroll
        for (int i = 0; i < tx::NE; i++)
                if (tx::col(i) < nv) sg[(size_t)tx::row(i) * segld + tx::col(i)] = xs[i];
        return;
    }
    if (mode == W_LOCAL) return;
    if (a.S_out)
#pragma unroll
        for (int i = 0; i < tx::NE; i++) {
                const int r = tx::row(i), cc = tx::col(i);
                if (r < dk && cc < nv) a.S_out[(size_t)bh * dk * dv + (size_t)r * dv + v0 + cc] = xs[i];
            }
    if (v0 == 0) a_out_from_aend(P, bh);
#undef PB
#undef QB
#undef XB
}

/* The plain walk (W_PLAIN) at DK = 32 with 8 or 16 value columns a block, P's rows in registers.
 * walk_kernel stashes each P_j in shared memory and its product reads two shared
 * values for every multiply-add (RM = RN = 1 there): 226 instructions a warp a step, about 1000
 * cycles (Nsight Compute: mostly waits on those dependent loads). Here thread
 * (i, cq) keeps row i of P_j in 32 registers (the next chunk's row comes from global memory
 * into 32 more while this step computes) and reads its columns cq + 8 u of X from shared memory
 * as X^T rows, 16 bytes a load: a step is 8 vector loads of P, 8 of X a column, 32 FMA a column
 * and one barrier (X^T double-buffered). The sums are mm's (KS partial sums, the same order),
 * so X and the outputs are bitwise walk_kernel's. X_j to Xst; S_out, A_out at the end. */
template <int BV, int AHEAD> __global__ void __launch_bounds__(NT, AHEAD == 1 ? 2 : 1) walk_rows_kernel(const cp_params P) {
    tl_scope<TL_WALK> tl_(P);
    constexpr int DK = 32, TPR = NT / DK, NC = BV / TPR, KS = NC >= 4 ? 1 : 4 / NC, ldx = DK + 4;
    static_assert(AHEAD == 1 || AHEAD == 2, "P_{j+1} or P_{j+2} in flight");
    static_assert(NC * TPR == BV && (BV == 8 || BV == 16), "8 or 16 value columns, 1 or 2 a thread");
    __shared__ __align__(16) float xt[2][BV][ldx]; /* X^T: [column][row], by step parity */
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + BV - 1) / BV, nch = P.nch;
    const int cb = blockIdx.x % nvb, bh = blockIdx.x / nvb;
    if (head_skipped(P, bh)) return;
    const int v0 = cb * BV, nv = imin(BV, dv - v0);
    const int i = (int)threadIdx.x / TPR, cq = (int)threadIdx.x % TPR; /* row i, columns cq + TPR u */
    const float *pg = P.Pm + (size_t)bh * nch * DK * DK + i * DK;
    const float *qg = P.Qm + (size_t)bh * nch * DK * dv + (size_t)i * dv + v0;
    float *xg = P.Xst + (size_t)bh * nch * DK * dv + (size_t)i * dv + v0;
    float x[NC], qa[NC], qb[NC], qc[NC];
    vf4 pa[DK / 4], pb[DK / 4], pc[DK / 4]; /* pc: with AHEAD = 2 only */
    auto fetch = [&](int j, vf4 (&pd)[DK / 4], float (&qd)[NC]) { /* P_j's row i, Q_j's entries */
        const vf4 *p4 = reinterpret_cast<const vf4 *>(pg + (size_t)j * DK * DK);
#pragma unroll
        for (int k = 0; k < DK / 4; k++) pd[k] = p4[k];
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            qd[u] = c < nv ? qg[(size_t)j * DK * dv + c] : 0.0f;
        }
    };
#pragma unroll
    for (int u = 0; u < NC; u++) { /* X_0 = S_in^T (zero rows past dk, columns past nv) */
        const int c = cq + TPR * u;
        x[u] = (a.S_in && i < dk && c < nv) ? a.S_in[(size_t)bh * dk * dv + (size_t)i * dv + v0 + c] : 0.0f;
        xt[0][c][i] = x[u];
    }
    if (nch > 0) fetch(0, pa, qa);
    if (AHEAD == 2 && nch > 1) fetch(1, pb, qb);
    __syncthreads();
    PROF(12);
    /* X_j to Xst; X <- P_j X + Q_j, with P_{j+AHEAD}, Q_{j+AHEAD} in flight (into pd, qd) */
    auto step = [&](int j, const vf4 (&pc)[DK / 4], const float (&qc)[NC], vf4 (&pd)[DK / 4], float (&qd)[NC]) {
        const int s = j & 1;
#pragma unroll
        for (int u = 0; u < NC; u++)
            if (cq + TPR * u < nv) xg[(size_t)j * DK * dv + cq + TPR * u] = x[u];
        if (j + AHEAD < nch) fetch(j + AHEAD, pd, qd);
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            const vf4 *xv = reinterpret_cast<const vf4 *>(&xt[s][c][0]);
            float part[KS];
#pragma unroll
            for (int t = 0; t < KS; t++) part[t] = t == 0 ? qc[u] : 0.0f;
#pragma unroll
            for (int k = 0; k < DK / 4; k++) {
                const vf4 xk = xv[k], pk = pc[k];
                part[(4 * k + 0) % KS] = fmaf(pk.x, xk.x, part[(4 * k + 0) % KS]);
                part[(4 * k + 1) % KS] = fmaf(pk.y, xk.y, part[(4 * k + 1) % KS]);
                part[(4 * k + 2) % KS] = fmaf(pk.z, xk.z, part[(4 * k + 2) % KS]);
                part[(4 * k + 3) % KS] = fmaf(pk.w, xk.w, part[(4 * k + 3) % KS]);
            }
            float t0 = part[0];
#pragma unroll
            for (int t = 1; t < KS; t++) t0 += part[t];
            x[u] = t0;
            xt[s ^ 1][c][i] = t0;
        }
        __syncthreads();
    };
    int j = 0;
    if (AHEAD == 1) { /* buffers a, b in turn: step j computes from one while P_{j+1} lands in the other */
        for (; j + 1 < nch; j += 2) {
            step(j, pa, qa, pb, qb);
            if (j == 0) PROF(14);
            step(j + 1, pb, qb, pa, qa);
            if (j == 0) PROF(15);
        }
        if (j < nch) step(j, pa, qa, pb, qb);
    } else { /* a, b, c: P_{j+2} lands in the buffer step j - 1 used */
        for (; j + 2 < nch; j += 3) {
            step(j, pa, qa, pc, qc);
            if (j == 0) PROF(14);
            step(j + 1, pb, qb, pa, qa);
            if (j == 0) PROF(15);
            step(j + 2, pc, qc, pb, qb);
        }
        if (j < nch) step(j, pa, qa, pc, qc);
        if (j + 1 < nch) step(j + 1, pb, qb, pa, qa);
    }
    PROF(13);
    if (a.S_out)
#pragma unroll
        for (int u = 0; u < NC; u++) {
            const int c = cq + TPR * u;
            if (i < dk && c < nv) a.S_out[(size_t)bh * dk * dv + (size_t)i * dv + v0 + c] = x[u];
        }
    if (v0 == 0) a_out_from_aend(P, bh);
}

/* The walk at DK = 32 with few heads (sm_80+), each entry of X by four threads: thread
 * (i, c, q) holds the quarter k = 8q .. 8q + 7 of row i of P_j (two 16-byte loads, AHEAD chunks
 * ahead: 7 for the plain walk, see run<DK>; 2 for W_SCAN), reads the same quarter of X's column
 * c from shared memory (two 16-byte loads), makes 8 multiply-adds, and the four quarters meet by
 * two shuffles. Two columns a block (QW_COLS), so a head's walk spreads over dv / 2 blocks. A step
 * is about 25 instructions a warp where walk_rows_kernel's was 94 (one thread an entry: 32
 * multiply-adds behind 16 vector loads); 512 against 840 cycles a step at (1,4,32) T = 2048.
 * (Giving walk_rows_kernel a deeper prefetch, a ring of chunk slots in shared memory filled by
 * cp.async, made it slower, 930 cycles a step: the loads were not what it waited on.) The plain
 * walk only: the same form for the segmented walk's three launches read each P_j once a column pair
 * (16 times as often as walk_kernel's 32-column blocks) over 16 times as many blocks, and (1,4,32)
 * T = 32768 ran 17% slower. The sums: Q_j + the quarter's products in k order, then (q0 + q1) + (q2
 * + q3); the four threads get the same bits. X_j to Xst; S_out, A_out at the end. Its own block
 * size (QW_NT), launched as such. MODE W_SCAN: the segmented walk's middle launch, X
 * over the segment maps [P_seg | Q_seg] (rows of DK + dv: dv a multiple of 4 for the 16-byte
 * loads), X at each segment start to Sst. It has the plain walk's block count (the segments' maps
 * are its steps), where the first and last launches have a block per segment too and keep
 * walk_kernel. */
#ifndef VLA_WQ_DIAG
/* development (timing only, the results are wrong): the plain walk's steps without 1 the X_j
 * stores, 2 any loads, 3 the barrier (a warp's), 4 the second 16 bytes of P's quarter, 5 Q; 6 only
 * the first half of the steps: what a walk of two chunks a step (X_{j+2} from X_j by
 * P_{j+1} P_j, formed off the chain) could save at most */
#define VLA_WQ_DIAG 0
#endif
template <int AHEAD, int MODE> __global__ void __launch_bounds__(QW_NT, 2) walk_quad_kernel(const cp_params P) {
    tl_scope<MODE == W_SCAN ? TL_WSCAN : TL_WALK> tl_(P);
    static_assert(MODE == W_PLAIN || MODE == W_SCAN, "the plain walk or the scan over segment maps");
    constexpr int DK = 32, ldx = DK + 4;
    static_assert(AHEAD >= 1 && AHEAD <= 7, "P_{j+1} .. P_{j+AHEAD} in flight");
    __shared__ __align__(16) float xt[2][QW_COLS][ldx]; /* X^T: [column][row], by step parity */
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, nvb = (dv + QW_COLS - 1) / QW_COLS;
    const int nch = MODE == W_SCAN ? P.wnseg : P.nch; /* the steps */
    /* W_SCAN: step j's map [P_seg | Q_seg], rows of DK + dv */
    const size_t pstride = (size_t)DK * (DK + dv);
    const int pld = DK + dv;
    float *const xbase = MODE == W_SCAN ? P.Sst : P.Xst;
    const int cb = blockIdx.x % nvb, bh = blockIdx.x / nvb;
    if (head_skipped(P, bh)) return;
    const int q = (int)threadIdx.x & 3, c = ((int)threadIdx.x >> 2) & 1, i = (int)threadIdx.x >> 3;
    const int col = cb * QW_COLS + c; /* the value column */
    const bool live = col < dv;
    vf4 pb[AHEAD + 1][2];
    float qb[AHEAD + 1];
    auto fetch = [&](int j, vf4 (&pd)[2], float &qd) { /* step j's P row i (quarter q) and Q entry */
        if constexpr (MODE == W_PLAIN) { /* (the plain walk's loads alone: W_SCAN's are the other branch, chosen at compile time) */
            const vf4 *p4 = reinterpret_cast<const vf4 *>(P.Pm + ((size_t)bh * nch + j) * DK * DK + i * DK + 8 * q);
            pd[0] = p4[0], pd[1] = VLA_WQ_DIAG == 4 ? pd[0] : p4[1];
            qd = VLA_WQ_DIAG != 5 && live && q == 0 ? P.Qm[(((size_t)bh * nch + j) * DK + i) * dv + col] : 0.0f;
        } else {
            const float *pj = P.Seg + ((size_t)bh * nch + j) * pstride + (size_t)i * pld;
            const vf4 *p4 = reinterpret_cast<const vf4 *>(pj + 8 * q);
            pd[0] = p4[0], pd[1] = p4[1];
            qd = live && q == 0 ? pj[DK + col] : 0.0f;
        }
    };
    float x = a.S_in && i < dk && live ? a.S_in[(size_t)bh * dk * dv + (size_t)i * dv + col] : 0.0f; /* X_0 = S_in^T */
    if (q == 0) xt[0][c][i] = x;
    const int nstep = VLA_WQ_DIAG == 6 && MODE == W_PLAIN ? (nch + 1) / 2 : nch; /* (development: 6) */
#pragma unroll
    for (int u = 0; u < AHEAD; u++)
        if (u < nstep) fetch(u, pb[u], qb[u]);
    __syncthreads();
    PROF(12);
    /* buffers by j mod (AHEAD + 1), unrolled so that every index is a constant */
    for (int jb = 0; jb < nstep; jb += AHEAD + 1) {
#pragma unroll
        for (int u = 0; u <= AHEAD; u++) {
            const int j = jb + u;
            if (j >= nstep) break;
            const int s = j & 1;
            if (VLA_WQ_DIAG != 1 && q == 0 && live) xbase[(((size_t)bh * nch + j) * DK + i) * dv + col] = x;
            if (VLA_WQ_DIAG != 2 && j + AHEAD < nstep)
                fetch(j + AHEAD, pb[(u + AHEAD) % (AHEAD + 1)], qb[(u + AHEAD) % (AHEAD + 1)]);
            const vf4 *xv = reinterpret_cast<const vf4 *>(&xt[s][c][8 * q]);
            const vf4 x0 = xv[0], x1 = xv[1], p0 = pb[u][0], p1 = pb[u][1];
            float part = qb[u];
            part = fmaf(p0.x, x0.x, part);
            part = fmaf(p0.y, x0.y, part);
            part = fmaf(p0.z, x0.z, part);
            part = fmaf(p0.w, x0.w, part);
            part = fmaf(p1.x, x1.x, part);
            part = fmaf(p1.y, x1.y, part);
            part = fmaf(p1.z, x1.z, part);
            part = fmaf(p1.w, x1.w, part);
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            x = part;
            if (q == 0) xt[s ^ 1][c][i] = x;
            if (VLA_WQ_DIAG == 3) __syncwarp();
            else __syncthreads();
            if (j == 0) PROF(14);
            if (j == 1) PROF(15);
        }
    }
    PROF(13);
    if (a.S_out && q == 0 && i < dk && live) a.S_out[(size_t)bh * dk * dv + (size_t)i * dv + col] = x;
    if (cb == 0) a_out_from_aend(P, bh, QW_NT);
}

template <int DK, int BV, int MODE> kfn walk_fn() { return walk_kernel<DK, BV, MODE>; }
template <int BV, int AHEAD> kfn walk_rows_fn() { return walk_rows_kernel<BV, AHEAD>; }
template <int AHEAD, int MODE> kfn walk_quad_fn() { return walk_quad_kernel<AHEAD, MODE>; }
/* the forms run<DK> takes (vla_chunkpar.cu) */
template kfn walk_fn<32, 8, W_PLAIN>();
template kfn walk_fn<32, 16, W_PLAIN>();
template kfn walk_fn<32, 32, W_PLAIN>();
template kfn walk_fn<32, 32, W_MAP>();
template kfn walk_fn<32, 32, W_SCAN>();
template kfn walk_fn<32, 32, W_LOCAL>();
template kfn walk_fn<64, 8, W_PLAIN>();
template kfn walk_fn<64, 16, W_PLAIN>();
template kfn walk_fn<64, 32, W_PLAIN>();
template kfn walk_fn<64, 32, W_MAP>();
template kfn walk_fn<64, 32, W_SCAN>();
template kfn walk_fn<64, 32, W_LOCAL>();
template kfn walk_rows_fn<8, 1>();
template kfn walk_rows_fn<8, 2>();
template kfn walk_rows_fn<16, 1>();
template kfn walk_rows_fn<16, 2>();
template kfn walk_quad_fn<2, W_PLAIN>(); /* VLA_CP_QW_AHEAD=2 */
#if VLA_QW_AHEAD != 2
template kfn walk_quad_fn<VLA_QW_AHEAD, W_PLAIN>();
#endif
template kfn walk_quad_fn<VLA_QW_SCAN_AHEAD, W_SCAN>();

} // namespace cp
} // namespace vlacu
