/* The chunk engine: VLA-MATH 2.3 (chunked) on one block per head, and the per-segment phases of
 * 2.4 (two-level) and of the scan's a_t, all built from two chunk-level pieces:
 *
 *   a_part  (vla)  A at the chunk start -> the chunk's a_t and A at its end (exact Woodbury):
 *           G = I + U A0 U^T = L L^T;  Z = L^{-1} U A0;  Al = rownorm(K A0 - tril(K Z^T) Z);
 *           A_end = A0 - Z^T Z  (+ rho at a refresh, which always falls on a chunk's last token)
 *   sstep   the generalised delta rule on one chunk (cpu_chunk_step), on a state X [dk, ncols]:
 *           E = V - diag(gam) K X;  (I + strict(K W^T) o D) E' = E;
 *           O = diag(gam) Q X + (tril(Q W^T) o D) E';  X = gam_last X + W^T diag(D_last) E'
 *
 * Storage: X is S transposed ([dk, dv]); for a segment map X = [M | N] ([dk, dk + dv]) starts
 * at [I | 0] with values [0 | V], so the same sstep composes the chunks' affine maps
 * (S_end^T = M S_start^T + N). Each block's working arrays live where bufplan says.
 * One block = VLACU_NT threads. */
#include "vla_kernels.cuh"

namespace vlacu {

/* ---- the A part of one chunk (VLA-MATH 2.3) ---- */
__device__ void a_part(int c, int dk, float *U, int ldu, const float *K, int ldk, float *A, int lda, float *Z,
                       int ldz, float *G, int ldg, bool refresh_last, float rho, float eps, double *zbuf,
                       double *part) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    /* Z = U A0 */
    gemm<float, false, false>(c, dk, dk, 1.0f, U, ldu, A, lda, 0.0f, Z, ldz, ep_none());
    __syncthreads();
    /* G = I + Z U^T, lower triangle (the Cholesky reads no more) */
    gemm_ep eg = ep_none();
    eg.mask = 1;
    eg.diag = 1.0f;
    gemm<float, false, true>(c, c, dk, 1.0f, Z, ldz, U, ldu, 0.0f, G, ldg, eg);
    if (!cholesky<float>(G, ldg, c)) {
        /* A0 is not positive definite (a caller's A_in can be anything): the recurrence with its
         * eps floor is still defined; run it token by token, as cpu_vla.c does. a_t replaces u_t. */
        for (int t = 0; t < c; t++)
            a_step<float>(A, lda, dk, U + (size_t)t * ldu, K + (size_t)t * ldk, refresh_last && t == c - 1,
                          (double)rho, (double)eps, zbuf, part, U + (size_t)t * ldu);
        return;
    }
    trsm_lower<float>(G, ldg, false, Z, ldz, c, dk); /* Z = L^{-1} U A0 */
    /* Al = K A0 (U is no longer needed); M = tril(K Z^T) into G (L is no longer needed) */
    gemm<float, false, false>(c, dk, dk, 1.0f, K, ldk, A, lda, 0.0f, U, ldu, ep_none());
    gemm_ep em = ep_none();
    em.mask = 1;
    gemm<float, false, true>(c, c, dk, 1.0f, K, ldk, Z, ldz, 0.0f, G, ldg, em);
    __syncthreads();
    /* Al -= M Z;  A -= Z^T Z */
    gemm_ep lo = ep_none();
    lo.a_lower = true;
    gemm<float, false, false>(c, dk, c, -1.0f, G, ldg, Z, ldz, 1.0f, U, ldu, lo);
    gemm<float, true, false>(dk, dk, c, -1.0f, Z, ldz, Z, ldz, 1.0f, A, lda, ep_none());
    __syncthreads();
    /* The refresh: the last a gains rho k^ before it is normalised, and A gains rho I. */
    for (int r = warp; r < c; r += nw) {
        float *al = U + (size_t)r * ldu;
        const float *kr = K + (size_t)r * ldk;
        const bool add = refresh_last && r == c - 1;
        float ss = 0.0f;
        for (int i = lane; i < dk; i += 32) {
            float x = al[i];
            if (add) {
                x += rho * kr[i];
                al[i] = x;
            }
            ss += x * x;
        }
        ss = warp_sum(ss);
        const float inv = 1.0f / fmaxf(sqrtf(ss), eps);
        for (int i = lane; i < dk; i += 32) al[i] *= inv;
    }
    if (refresh_last)
        for (int i = threadIdx.x; i < dk; i += blockDim.x) A[(size_t)i * lda + i] += rho;
    __syncthreads();
}

/* ---- the generalised delta rule on one chunk ---- */
struct sstep_io {
    const float *K;
    int ldk; /* read keys (residual form) */
    const float *W;
    int ldw; /* write directions */
    const float *Q;
    int ldq;
    float *E;
    int lde; /* values in, residuals after */
    float *X;
    int ldx; /* state [dk, ncols] */
    float *C;
    int ldc; /* c x c scratch */
    const float *D;
    int ldd;          /* decay products D[t][s] = prod_{s<r<=t} g_r, or null */
    const float *gam; /* prod_{r<=t} g_r, or null */
    float *out;
    int ldo; /* output rows (global), or null */
};

__device__ void sstep(int c, int dk, int ncols, bool residual, const sstep_io &s) {
    const bool decay = s.D != nullptr;
    if (residual) {
        gemm_ep lw = ep_none();
        lw.mask = 2;
        if (decay) lw.had = s.D, lw.ldh = s.ldd;
        gemm<float, false, true>(c, c, dk, 1.0f, s.K, s.ldk, s.W, s.ldw, 0.0f, s.C, s.ldc, lw);
        gemm_ep eg = ep_none();
        eg.rs = s.gam;
        gemm<float, false, false>(c, ncols, dk, -1.0f, s.K, s.ldk, s.X, s.ldx, 1.0f, s.E, s.lde, eg);
        __syncthreads();
        trsm_lower<float>(s.C, s.ldc, true, s.E, s.lde, c, ncols);
    }
    if (s.out) {
        gemm_ep og = ep_none();
        og.rs = s.gam;
        gemm<float, false, false>(c, ncols, dk, 1.0f, s.Q, s.ldq, s.X, s.ldx, 0.0f, s.out, s.ldo, og);
        gemm_ep mm = ep_none();
        mm.mask = 1;
        if (decay) mm.had = s.D, mm.ldh = s.ldd;
        gemm<float, false, true>(c, c, dk, 1.0f, s.Q, s.ldq, s.W, s.ldw, 0.0f, s.C, s.ldc, mm);
        __syncthreads();
        gemm_ep lo = ep_none();
        lo.a_lower = true;
        gemm<float, false, false>(c, ncols, c, 1.0f, s.C, s.ldc, s.E, s.lde, 1.0f, s.out, s.ldo, lo);
        __syncthreads();
    }
    if (decay) {
        const float gl = s.gam[c - 1];
        for (int e = threadIdx.x; e < dk * ncols; e += blockDim.x) {
            const int i = e / ncols, j = e - i * ncols;
            s.X[(size_t)i * s.ldx + j] *= gl;
        }
        for (int e = threadIdx.x; e < c * ncols; e += blockDim.x) {
            const int t = e / ncols, j = e - t * ncols;
            s.E[(size_t)t * s.lde + j] *= s.D[(size_t)(c - 1) * s.ldd + t];
        }
        __syncthreads();
    }
    gemm<float, true, false>(dk, ncols, c, 1.0f, s.W, s.ldw, s.E, s.lde, 1.0f, s.X, s.ldx, ep_none());
    __syncthreads();
}

/* ---- the engine kernel ---- */
__global__ void __launch_bounds__(VLACU_NT) engine_kernel(const engine_params P) {
    VLACU_DYNSMEM(smem);
    __shared__ double zbuf[VLACU_MAXD];
    __shared__ double part[32];
    const vlacu_args &a = P.a;
    const int mode = P.mode, T = a.T, H = a.H, dk = a.dk, dv = a.dv, ncols = P.ncols;
    const int tid = threadIdx.x, nt = blockDim.x;
    const bool vla = a.mech == VLACU_VLA;

    int bh, sg = 0;
    int64_t k0 = 0, k1 = P.nchunks;
    if (mode == M_CHUNKED || mode == M_CARRY) {
        bh = blockIdx.x;
    } else {
        bh = blockIdx.x / P.nseg;
        sg = blockIdx.x % P.nseg;
        k0 = (int64_t)sg * P.seg;
        k1 = k0 + P.seg < P.nchunks ? k0 + P.seg : P.nchunks;
    }
    /* Carry only where the Gram path does not apply (R > 0, or this head's flag). The whole
     * block returns here, before any barrier. */
    if (mode == M_CARRY && !(a.refresh > 0 || P.flags[bh])) return;
    /* The chunk-parallel form's fallback: only the heads whose A_in it could not invert. */
    if (mode == M_CHUNKED && P.flags && !P.flags[bh]) return;
    const int b = bh / H, h = bh % H;

    unsigned char *gs = P.spill + (size_t)blockIdx.x * P.plan.gbytes;
    float *X = bufp<float>(P.plan, B_X, smem, gs), *A = bufp<float>(P.plan, B_A, smem, gs);
    float *Kb = bufp<float>(P.plan, B_K, smem, gs), *Qb = bufp<float>(P.plan, B_Q, smem, gs);
    float *Ub = bufp<float>(P.plan, B_U, smem, gs), *Zb = bufp<float>(P.plan, B_Z, smem, gs);
    float *Eb = bufp<float>(P.plan, B_E, smem, gs), *Cb = bufp<float>(P.plan, B_C, smem, gs);
    float *Db = bufp<float>(P.plan, B_D, smem, gs), *GV = bufp<float>(P.plan, B_GV, smem, gs);
    float *GAM = bufp<float>(P.plan, B_GAM, smem, gs);
    const int ldk = ld_of(dk), ldx = ld_of(ncols), lda = ld_of(dk), ldcc = ld_of(P.cmax);

    const size_t sS = (size_t)bh * dk * dv, sA = (size_t)bh * dk * dk;
    const float a_init = (float)(1.0 / a.lambda0);

    /* ---- initial states ---- */
    if (mode == M_CHUNKED) {
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            X[(size_t)i * ldx + j] = a.S_in ? a.S_in[sS + e] : 0.0f;
        }
    }
    if (vla && (mode == M_CHUNKED || mode == M_CARRY)) {
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            A[(size_t)i * lda + j] = a.A_in ? a.A_in[sA + e] : (i == j ? a_init : 0.0f);
        }
    }
    if (mode == M_SEGMAP || mode == M_ALONLY) {
        const float *src = P.Ast + ((size_t)bh * P.nseg + sg) * dk * dk;
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            A[(size_t)i * lda + j] = src[e];
        }
    }
    if (mode == M_SEGMAP) {
        for (int e = tid; e < dk * ncols; e += nt) {
            const int i = e / ncols, j = e - i * ncols;
            X[(size_t)i * ldx + j] = (i == j) ? 1.0f : 0.0f;
        }
    }
    if (mode == M_SEGOUT) {
        const float *src = P.Sst + ((size_t)bh * P.nseg + sg) * dk * dv;
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            X[(size_t)i * ldx + j] = src[e];
        }
    }
    double *gram = nullptr;
    if (mode == M_GRAM) {
        gram = P.gram + ((size_t)bh * P.nseg + sg) * dk * dk;
        for (int e = tid; e < dk * dk; e += nt) gram[e] = 0.0;
    }
    __syncthreads();

    const float eps = (float)a.eps, rho = (float)a.rho, su = (float)a.u_scale;
    const int fm = a.elu1 ? ROW_ELU1 : ROW_COPY;
    const size_t sk = (size_t)H * dk, sv = (size_t)H * dv;

    for (int64_t kc = k0; kc < k1; kc++) {
        int ts, te;
        chunk_bounds(kc, T, a.chunk, a.refresh, a.t0, &ts, &te);
        const int c = te - ts;
        const bool refresh_last = vla && refresh_at_end(a.refresh, a.t0, te);
        const size_t r0 = ((size_t)b * T + ts) * H + h; /* row index of token ts in [B, T, H] */

        if (mode == M_CARRY && kc % P.seg == 0) {
            float *dst = P.Ast + ((size_t)bh * P.nseg + kc / P.seg) * dk * dk;
            for (int e = tid; e < dk * dk; e += nt) {
                const int i = e / dk, j = e - i * dk;
                dst[e] = A[(size_t)i * lda + j];
            }
        }

        /* ---- load the chunk's rows: every global load first, then the per-row maps ---- */
        rowload L[4];
        int nl = 0;
        if (mode == M_GRAM) {
            if (a.u) L[nl++] = rows_plain(a.u + r0 * dk, sk, dk, ROW_NORM, eps, su, Ub, ldk);
            else L[nl++] = rows_plain(a.k + r0 * dk, sk, dk, fm | ROW_NORM, eps, su, Ub, ldk);
        } else if (a.mech == VLACU_LINEAR) {
            L[nl++] = rows_plain(a.k + r0 * dk, sk, dk, fm, eps, 1.0f, Kb, ldk);
        } else {
            /* k^ into K, and with it: u = s_u k^ (vla without u) or w = beta k^ (delta) */
            rowload lk = rows_plain(a.k + r0 * dk, sk, dk, fm | ROW_NORM, eps, 1.0f, Kb, ldk);
            const bool want_u = vla && mode != M_SEGOUT && !a.u;
            const bool want_w = a.mech == VLACU_DELTA && a.beta;
            if (want_u) lk.dst2 = Ub, lk.ld2 = ldk, lk.scale2 = su;
            if (want_w) lk.dst2 = Ub, lk.ld2 = ldk, lk.scale2 = 1.0f, lk.rs = a.beta + r0, lk.rs_stride = (size_t)H;
            L[nl++] = lk;
            if (vla && mode != M_SEGOUT && a.u) L[nl++] = rows_plain(a.u + r0 * dk, sk, dk, ROW_NORM, eps, su, Ub, ldk);
            if (mode == M_SEGOUT) /* the a_t the map phase stored */
                L[nl++] = rows_plain(P.AlG + ((size_t)bh * T + ts) * dk, (size_t)dk, dk, ROW_COPY, eps, 1.0f, Ub, ldk);
        }
        if (mode == M_CHUNKED || mode == M_SEGOUT) { /* at most 4 loads in all: k, u or a, q, v */
            L[nl++] = rows_plain(a.q + r0 * dk, sk, dk, fm, eps, 1.0f, Qb, ldk);
            L[nl++] = rows_plain(a.v + r0 * dv, sv, dv, ROW_COPY, eps, 1.0f, Eb, ldx);
        }
        if (mode == M_SEGMAP) /* values [0 | V] */
            L[nl++] = rows_plain(a.v + r0 * dv, sv, dv, ROW_COPY, eps, 1.0f, Eb + dk, ldx);
        for (int l = 0; l < nl; l++) load_raw(L[l], c);
        if (mode == M_SEGMAP)
            for (int e = tid; e < c * dk; e += nt) {
                const int t = e / dk, j = e - t * dk;
                Eb[(size_t)t * ldx + j] = 0.0f;
            }
        const bool decay = mode == M_CHUNKED && a.mech == VLACU_DELTA && a.g;
        if (decay)
            for (int t = tid; t < c; t += nt) GV[t] = a.g[(r0 + (size_t)t * H)];
        __syncthreads();
        for (int l = 0; l < nl; l++) finish_rows(L[l], c);
        __syncthreads();

        if (decay) { /* products in order, as cpu_chunk_step: exact for any g */
            for (int t = tid; t < c; t += nt) {
                float p = 1.0f;
                for (int r = 0; r <= t; r++) p *= GV[r];
                GAM[t] = p;
            }
            for (int e = tid; e < c * c; e += nt) {
                const int t = e / c, s = e - t * c;
                float p = 0.0f;
                if (s <= t) {
                    p = 1.0f;
                    for (int r = s + 1; r <= t; r++) p *= GV[r];
                }
                Db[(size_t)t * ldcc + s] = p;
            }
            __syncthreads();
        }

        /* ---- compute ---- */
        if (mode == M_GRAM) {
            gemm<float, true, false>(dk, dk, c, 1.0f, Ub, ldk, Ub, ldk, 0.0f, A, lda, ep_none());
            __syncthreads();
            for (int e = tid; e < dk * dk; e += nt) {
                const int i = e / dk, j = e - i * dk;
                gram[e] += (double)A[(size_t)i * lda + j];
            }
            __syncthreads();
            continue;
        }
        if (vla && mode != M_SEGOUT)
            a_part(c, dk, Ub, ldk, Kb, ldk, A, lda, Zb, ldk, Cb, ldcc, refresh_last, rho, eps, zbuf, part);
        if (mode == M_SEGMAP || mode == M_ALONLY) {
            float *dst = P.AlG + ((size_t)bh * T + ts) * dk;
            for (int e = tid; e < c * dk; e += nt) {
                const int t = e / dk, i = e - t * dk;
                dst[(size_t)t * dk + i] = Ub[(size_t)t * ldk + i];
            }
        }
        if (mode == M_CHUNKED || mode == M_SEGMAP || mode == M_SEGOUT) {
            sstep_io io;
            io.K = Kb, io.ldk = ldk;
            io.W = (vla || (a.mech == VLACU_DELTA && a.beta)) ? Ub : Kb, io.ldw = ldk;
            io.Q = Qb, io.ldq = ldk;
            io.E = Eb, io.lde = ldx;
            io.X = X, io.ldx = ldx;
            io.C = Cb, io.ldc = ldcc;
            io.D = decay ? Db : nullptr, io.ldd = ldcc;
            io.gam = decay ? GAM : nullptr;
            io.out = mode == M_SEGMAP ? nullptr : a.o + r0 * dv;
            io.ldo = (int)sv;
            sstep(c, dk, ncols, a.mech != VLACU_LINEAR, io);
        }
        __syncthreads(); /* the next chunk's loads overwrite every buffer */
    }

    /* ---- final states ---- */
    if (mode == M_CHUNKED && a.S_out)
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            a.S_out[sS + e] = X[(size_t)i * ldx + j];
        }
    if (mode == M_SEGOUT && a.S_out && sg == P.nseg - 1)
        for (int e = tid; e < dk * dv; e += nt) {
            const int i = e / dv, j = e - i * dv;
            a.S_out[sS + e] = X[(size_t)i * ldx + j];
        }
    if (vla && a.A_out && (mode == M_CHUNKED || ((mode == M_SEGMAP || mode == M_ALONLY) && sg == P.nseg - 1)))
        for (int e = tid; e < dk * dk; e += nt) {
            const int i = e / dk, j = e - i * dk;
            a.A_out[sA + e] = A[(size_t)i * lda + j];
        }
    if (mode == M_SEGMAP) {
        float *dst = P.maps + ((size_t)bh * P.nseg + sg) * dk * ncols;
        for (int e = tid; e < dk * ncols; e += nt) {
            const int i = e / ncols, j = e - i * ncols;
            dst[e] = X[(size_t)i * ldx + j];
        }
    }
}

static std::atomic<size_t> engine_smem_set[64];

size_t engine_static_smem() {
    static const size_t s = static_smem_of((const void *)engine_kernel, 4096);
    return s;
}

cudaError_t engine_set_smem(size_t bytes) { return raise_smem_limit((const void *)engine_kernel, engine_smem_set, bytes); }

cudaError_t launch_engine(const engine_params &p, unsigned blocks, cudaStream_t st) {
    if (blocks == 0) return cudaSuccess;
    VLACU_LAUNCH(engine_kernel, blocks, VLACU_NT, p.plan.smem_bytes, st, p);
    return cudaGetLastError();
}

/* ======================================================================================
 * Small kernels of the two-level form's Gram path (R = 0), the map scan and the scan form.
 * ====================================================================================== */

/* Inverse of the SPD n x n double matrix M (ld n) in place, with Linv (n x n, ld n) as
 * scratch: M = L L^T, Linv = L^{-1}, M^{-1} = Linv^T Linv. false when M is not numerically
 * SPD (M is then partly overwritten). Ends with a barrier. */
__device__ bool spd_inverse(double *M, double *Linv, int n) {
    if (!cholesky<double>(M, n, n)) return false;
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) Linv[e] = (e / n == e % n) ? 1.0 : 0.0;
    __syncthreads();
    trsm_lower<double>(M, n, false, Linv, n, n, n);
    gemm<double, true, false>(n, n, n, 1.0, Linv, n, Linv, n, 0.0, M, n, ep_none());
    __syncthreads();
    return true;
}

/* Per head with A_in: Minv = A_in^{-1} in double, or flags[bh] = 1 when A_in is not
 * symmetric positive definite (then the A part is carried chunk to chunk instead). */
__global__ void __launch_bounds__(VLACU_NT) ain_inverse_kernel(const aux_params P) {
    __shared__ float red[32];
    const int bh = blockIdx.x, n = P.a.dk;
    const float *Ai = P.a.A_in + (size_t)bh * n * n;
    double *M = P.Minv + (size_t)bh * n * n, *L = P.dscratch + (size_t)bh * n * n;
    float bad = 0.0f;
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
        const int i = e / n, j = e - i * n;
        const float x = Ai[e], y = Ai[(size_t)j * n + i];
        if (!(fabsf(x - y) <= 1e-5f * (fabsf(x) + fabsf(y)))) bad = 1.0f; /* also NaN */
        M[e] = (double)x;
    }
    bad = block_sum(bad, red);
    if (bad > 0.0f || !spd_inverse(M, L, n)) {
        if (threadIdx.x == 0) P.flags[bh] = 1;
    }
}

cudaError_t launch_ain_inverse(const aux_params &p, cudaStream_t st) {
    const unsigned blocks = (unsigned)(p.a.B * p.a.H);
    VLACU_LAUNCH(ain_inverse_kernel, blocks, VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

/* gram[sg] <- A0^{-1} + sum_{s < sg} gram[s] (exclusive prefix in place, double), per element. */
__global__ void __launch_bounds__(VLACU_NT) gram_prefix_kernel(const aux_params P) {
    const int n = P.a.dk, nn = n * n;
    const int per = (nn + blockDim.x - 1) / blockDim.x; /* blocks per head */
    const int bh = blockIdx.x / per, e = (blockIdx.x % per) * blockDim.x + threadIdx.x;
    if (P.flags[bh] || e >= nn) return;
    const int i = e / n, j = e - i * n;
    double acc = P.a.A_in ? P.Minv[(size_t)bh * nn + e] : (i == j ? P.a.lambda0 : 0.0);
    double *g = P.gram + (size_t)bh * P.nseg * nn + e;
    for (int s = 0; s < P.nseg; s++) {
        const double x = g[(size_t)s * nn];
        g[(size_t)s * nn] = acc;
        acc += x;
    }
}

cudaError_t launch_gram_prefix(const aux_params &p, cudaStream_t st) {
    const int nn = p.a.dk * p.a.dk, per = (nn + VLACU_NT - 1) / VLACU_NT;
    const unsigned blocks = (unsigned)(per * p.a.B * p.a.H);
    VLACU_LAUNCH(gram_prefix_kernel, blocks, VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

/* Ast[bh][sg] = (A0^{-1} + Gram prefix)^{-1}; segment 0 starts from A0 itself. */
__global__ void __launch_bounds__(VLACU_NT) seg_inverse_kernel(const aux_params P) {
    __shared__ int skip;
    const int bh = blockIdx.x / P.nseg, sg = blockIdx.x % P.nseg, n = P.a.dk, nn = n * n;
    /* Other blocks of this launch may set flags[bh] while this one runs: read it once, so that
     * the whole block takes the same branch. */
    if (threadIdx.x == 0) skip = P.flags[bh];
    __syncthreads();
    if (skip) return; /* the carry kernel does this head */
    float *dst = P.Ast + ((size_t)bh * P.nseg + sg) * nn;
    if (sg == 0) {
        const float a_init = (float)(1.0 / P.a.lambda0);
        for (int e = threadIdx.x; e < nn; e += blockDim.x)
            dst[e] = P.a.A_in ? P.a.A_in[(size_t)bh * nn + e] : ((e / n == e % n) ? a_init : 0.0f);
        return;
    }
    double *M = P.gram + ((size_t)bh * P.nseg + sg) * nn;
    double *L = P.dscratch + (size_t)blockIdx.x * nn;
    if (!spd_inverse(M, L, n)) {
        if (threadIdx.x == 0) P.flags[bh] = 1; /* every writer writes 1 */
        return;
    }
    for (int e = threadIdx.x; e < nn; e += blockDim.x) dst[e] = (float)M[e];
}

cudaError_t launch_seg_inverse(const aux_params &p, cudaStream_t st) {
    const unsigned blocks = (unsigned)(p.nseg * p.a.B * p.a.H);
    VLACU_LAUNCH(seg_inverse_kernel, blocks, VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

/* One level of the Brent-Kung scan over maps X = [M | N] ([dk, dk + dv], row-major, ld dk + dv):
 * for i = first + pair * 2s: X_i <- X_i o X_{i-s}, i.e. M_i [M_{i-s} | N_{i-s}] + [0 | N_i].
 * The pairs of one level touch disjoint maps. */
__global__ void __launch_bounds__(VLACU_NT) map_combine_kernel(float *maps, float *tmp, int64_t nmaps,
                                                                int64_t npairs, int64_t first, int64_t s, int dk,
                                                                int dv) {
    const int w = dk + dv;
    const size_t msz = (size_t)dk * w;
    const int64_t bh = (int64_t)blockIdx.x / npairs, pair = (int64_t)blockIdx.x % npairs;
    const int64_t i = first + pair * 2 * s;
    float *Xi = maps + ((size_t)bh * nmaps + i) * msz;
    const float *Xp = maps + ((size_t)bh * nmaps + i - s) * msz;
    float *Tm = tmp + ((size_t)bh * ((nmaps + 1) / 2) + pair) * msz;
    gemm<float, false, false>(dk, w, dk, 1.0f, Xi, w, Xp, w, 0.0f, Tm, w, ep_none());
    __syncthreads();
    for (size_t e = threadIdx.x; e < msz; e += blockDim.x) {
        const int j = (int)(e % w);
        Xi[e] = Tm[e] + (j >= dk ? Xi[e] : 0.0f);
    }
}

cudaError_t launch_map_scan(const aux_params &p, int64_t n, cudaStream_t st) {
    const int64_t BH = (int64_t)p.a.B * p.a.H;
    int64_t top = 1;
    for (int64_t s = 1; s < n; s *= 2) { /* up-sweep */
        const int64_t first = 2 * s - 1;
        if (first < n) {
            const int64_t np = (n - 1 - first) / (2 * s) + 1;
            VLACU_LAUNCH(map_combine_kernel, (unsigned)(np * BH), VLACU_NT, 0, st, p.maps, p.mtmp, n, np, first, s,
                         p.a.dk, p.a.dv);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
        }
        top = s;
    }
    for (int64_t s = top / 2; s >= 1; s /= 2) { /* down-sweep */
        const int64_t first = 3 * s - 1;
        if (first < n) {
            const int64_t np = (n - 1 - first) / (2 * s) + 1;
            VLACU_LAUNCH(map_combine_kernel, (unsigned)(np * BH), VLACU_NT, 0, st, p.maps, p.mtmp, n, np, first, s,
                         p.a.dk, p.a.dv);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

/* Sst[bh][sg] = S0 for sg = 0, else (maps 0..sg-1 composed) applied to S0: M S0 + N. */
__global__ void __launch_bounds__(VLACU_NT) seg_starts_kernel(const aux_params P) {
    const int bh = blockIdx.x / P.nseg, sg = blockIdx.x % P.nseg, dk = P.a.dk, dv = P.a.dv, w = dk + dv;
    const size_t nS = (size_t)dk * dv;
    float *dst = P.Sst + ((size_t)bh * P.nseg + sg) * nS;
    const float *S0 = P.a.S_in ? P.a.S_in + (size_t)bh * nS : nullptr;
    if (sg == 0) {
        for (size_t e = threadIdx.x; e < nS; e += blockDim.x) dst[e] = S0 ? S0[e] : 0.0f;
        return;
    }
    const float *Xm = P.maps + ((size_t)bh * P.nseg + sg - 1) * (size_t)dk * w;
    if (S0) {
        gemm<float, false, false>(dk, dv, dk, 1.0f, Xm, w, S0, dv, 0.0f, dst, dv, ep_none());
        __syncthreads();
    }
    for (size_t e = threadIdx.x; e < nS; e += blockDim.x) {
        const size_t i = e / dv, j = e % dv;
        dst[e] = (S0 ? dst[e] : 0.0f) + Xm[i * w + dk + j];
    }
}

cudaError_t launch_seg_starts(const aux_params &p, cudaStream_t st) {
    const unsigned blocks = (unsigned)(p.nseg * p.a.B * p.a.H);
    VLACU_LAUNCH(seg_starts_kernel, blocks, VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

/* ---- the scan form (VLA-MATH 2.2): per-token maps, scanned, then read out ---- */

#define SCAN_NT 128

/* Token t's map on the transposed state: [I - a k^T | a v^T]. One block per token. */
__global__ void __launch_bounds__(SCAN_NT) scan_build_kernel(const aux_params P) {
    __shared__ float kh[VLACU_MAXD], al[VLACU_MAXD], vv[VLACU_MAXD];
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, w = dk + dv;
    const int64_t bh = (int64_t)blockIdx.x / a.T, t = (int64_t)blockIdx.x % a.T;
    const int b = (int)(bh / a.H), h = (int)(bh % a.H);
    const size_t r = ((size_t)b * a.T + t) * a.H + h;
    const rowload lk = rows_plain(a.k + r * dk, 0, dk, (a.elu1 ? ROW_ELU1 : ROW_COPY) | ROW_NORM, (float)a.eps, 1.0f,
                                  kh, dk);
    load_raw(lk, 1);
    for (int i = threadIdx.x; i < dk; i += blockDim.x) al[i] = P.AlG[((size_t)bh * a.T + t) * dk + i];
    for (int j = threadIdx.x; j < dv; j += blockDim.x) vv[j] = a.v[r * dv + j];
    __syncthreads();
    finish_rows(lk, 1); /* warp 0: the normalised key */
    __syncthreads();
    float *X = P.maps + ((size_t)bh * a.T + t) * (size_t)dk * w;
    for (int e = threadIdx.x; e < dk * w; e += blockDim.x) {
        const int i = e / w, j = e - i * w;
        X[e] = j < dk ? (float)(i == j) - al[i] * kh[j] : al[i] * vv[j - dk];
    }
}

cudaError_t launch_scan_build(const aux_params &p, cudaStream_t st) {
    const unsigned blocks = (unsigned)((int64_t)p.a.T * p.a.B * p.a.H);
    VLACU_LAUNCH(scan_build_kernel, blocks, SCAN_NT, 0, st, p);
    return cudaGetLastError();
}

/* o_t = S_t^T q~_t with S_t^T = M_t S0^T + N_t:  o = S0^T-part (M^T q) + N^T q. */
__global__ void __launch_bounds__(SCAN_NT) scan_out_kernel(const aux_params P) {
    __shared__ float qs[VLACU_MAXD], z[2 * VLACU_MAXD];
    const vlacu_args &a = P.a;
    const int dk = a.dk, dv = a.dv, w = dk + dv;
    const int64_t bh = (int64_t)blockIdx.x / a.T, t = (int64_t)blockIdx.x % a.T;
    const int b = (int)(bh / a.H), h = (int)(bh % a.H);
    const size_t r = ((size_t)b * a.T + t) * a.H + h;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
        const float x = a.q[r * dk + i];
        qs[i] = a.elu1 ? elu1f(x) : x;
    }
    __syncthreads();
    const float *X = P.maps + ((size_t)bh * a.T + t) * (size_t)dk * w;
    for (int j = threadIdx.x; j < w; j += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < dk; i++) s += qs[i] * X[(size_t)i * w + j];
        z[j] = s;
    }
    __syncthreads();
    const float *S0 = a.S_in ? a.S_in + (size_t)bh * dk * dv : nullptr;
    for (int j = threadIdx.x; j < dv; j += blockDim.x) {
        float s = 0.0f;
        if (S0)
            for (int i = 0; i < dk; i++) s += z[i] * S0[(size_t)i * dv + j];
        a.o[r * dv + j] = s + z[dk + j];
    }
}

cudaError_t launch_scan_out(const aux_params &p, cudaStream_t st) {
    const unsigned blocks = (unsigned)((int64_t)p.a.T * p.a.B * p.a.H);
    VLACU_LAUNCH(scan_out_kernel, blocks, SCAN_NT, 0, st, p);
    return cudaGetLastError();
}

/* S_out = M_{T-1} S0 + N_{T-1}, through tmpS: S_out may be S_in. */
__global__ void __launch_bounds__(VLACU_NT) scan_final_kernel(const aux_params P) {
    const vlacu_args &a = P.a;
    const int bh = blockIdx.x, dk = a.dk, dv = a.dv, w = dk + dv;
    const size_t nS = (size_t)dk * dv;
    const float *Xm = P.maps + ((size_t)bh * a.T + (a.T - 1)) * (size_t)dk * w;
    const float *S0 = a.S_in ? a.S_in + (size_t)bh * nS : nullptr;
    float *tmp = P.tmpS + (size_t)bh * nS;
    if (S0) gemm<float, false, false>(dk, dv, dk, 1.0f, Xm, w, S0, dv, 0.0f, tmp, dv, ep_none());
    __syncthreads();
    for (size_t e = threadIdx.x; e < nS; e += blockDim.x) {
        const size_t i = e / dv, j = e % dv;
        a.S_out[(size_t)bh * nS + e] = (S0 ? tmp[e] : 0.0f) + Xm[i * w + dk + j];
    }
}

cudaError_t launch_scan_final(const aux_params &p, cudaStream_t st) {
    if (!p.a.S_out) return cudaSuccess;
    VLACU_LAUNCH(scan_final_kernel, (unsigned)(p.a.B * p.a.H), VLACU_NT, 0, st, p);
    return cudaGetLastError();
}

} // namespace vlacu
