/* VLA-MATH 2.1 with the states in registers: the sequential algorithm (and so the decode step,
 * T = 1 with carried states) for dk, dv <= 64. Same per-token maths as vla_seq.cu, laid out for
 * latency rather than generality: a call of one token is one memory round trip in (every state
 * element a thread owns is loaded at once), five barriers, and one trip out. vla_seq.cu (states
 * in shared memory or a workspace slice, any dk, dv <= 256) does the other shapes; there, the
 * loads of S and A into a generic pointer cannot be batched and one token cost ~24 us.
 *
 * One block of RG_NT = 256 threads per head. Thread tid: c = tid % 64, s = tid / 64 (a slice of
 * RG_R = 16 rows or columns).
 *   X = S^T [dk, dv]: the thread holds X[s*16 + r][c], r < 16 (a column, so y = X^T k^ and
 *                     o = X^T q are per-thread partial sums + one exchange of 4 slices)
 *   A [dk, dk]:       the thread holds A[c][s*16 + r] in double (a row piece; A u and A k^ the
 *                     same way)
 *   n [dk]:           threads 0..63, n[c]
 * Per token: A u and A k^ -> z, A k^;  A -= z z^T / max(1 + u.z, eps) (+ rho I at a refresh);
 * w = A_new k^ = A k^ - z (z.k^) / max(1 + u.z, eps) (+ rho k^);  a = w / max(|w|, eps);
 * then the S write of each mechanism and o = X^T q~ (/ the normaliser). */
#include "vla_kernels.cuh"

namespace vlacu {

enum { RG_NT = 256, RG_K = 64, RG_R = 16 };

__global__ void __launch_bounds__(RG_NT) seq_regs_kernel(const vlacu_args a) {
    __shared__ float qv[RG_K], kf[RG_K], kh[RG_K], uv[RG_K], vv[RG_K];
    __shared__ float stage[RG_K * (RG_K + 1)]; /* A in and out, coalesced */
    __shared__ double red1[4][RG_K], red2[4][RG_K], wb[RG_K];
    __shared__ float red3[4][RG_K], red4[4][RG_K];
    __shared__ double part[3][2];
    __shared__ float pq[2];
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int c = tid & (RG_K - 1), s = tid >> 6, r0 = s * RG_R;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int mech = a.mech;
    const bool vla = mech == VLACU_VLA, linear = mech == VLACU_LINEAR, delta = mech == VLACU_DELTA;
    const bool has_n = linear || (vla && a.normalize);
    const size_t sS = (size_t)bh * dk * dv, sA = (size_t)bh * dk * dk, sn = (size_t)bh * dk;
    const float eps = (float)a.eps, su = (float)a.u_scale;
    const bool elu = a.elu1 != 0;

    /* ---- the states, all loads issued together ---- */
    float x[RG_R];
#pragma unroll
    for (int r = 0; r < RG_R; r++) {
        const int i = r0 + r;
        x[r] = (a.S_in && i < dk && c < dv) ? a.S_in[sS + (size_t)i * dv + c] : 0.0f;
    }
    double A[RG_R];
    if (vla && a.A_in) {
        /* A_in [dk][dk] row-major: coalesced loads (thread (c, s) reads rows s, s + 4, ... at
         * column c; all issued, then stored), then each thread reads its row piece from the stage
         * (stride RG_K + 1: no bank conflicts). No division by dk anywhere: an integer division
         * by a runtime value is ~20 instructions, and this kernel is a few thousand. */
        float tmp[RG_R];
#pragma unroll
        for (int q = 0; q < RG_R; q++) {
            const int i = s + 4 * q;
            tmp[q] = (i < dk && c < dk) ? a.A_in[sA + (size_t)i * dk + c] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < RG_R; q++) stage[(s + 4 * q) * (RG_K + 1) + c] = tmp[q];
        __syncthreads();
#pragma unroll
        for (int r = 0; r < RG_R; r++) A[r] = (double)stage[c * (RG_K + 1) + r0 + r]; /* zero padded */
    } else if (vla) {
        const double a_init = (double)(float)(1.0 / a.lambda0); /* as the CPU backend starts from */
#pragma unroll
        for (int r = 0; r < RG_R; r++) {
            const int j = r0 + r;
            A[r] = (c < dk && c == j) ? a_init : 0.0;
        }
    }
    float nreg = (has_n && tid < dk && a.n_in) ? a.n_in[sn + tid] : 0.0f;

    /* The token's raw rows, one job a warp (0 q, 1 k, 2 u, 3 v), two elements a lane; the next
     * token's are loaded while this one is worked on. */
    const int job = warp;
    const float *src = job == 0 ? a.q : job == 1 ? a.k : job == 2 ? (vla ? a.u : nullptr) : job == 3 ? a.v : nullptr;
    const int D = job == 3 ? dv : dk;
    float raw0 = 0.0f, raw1 = 0.0f, gnext = 1.0f, bnext = 1.0f;
    auto fetch = [&](int t) {
        const size_t r = ((size_t)b * T + t) * H + h;
        if (src) {
            raw0 = lane < D ? src[r * D + lane] : 0.0f;
            raw1 = lane + 32 < D ? src[r * D + lane + 32] : 0.0f;
        }
        if (delta) gnext = a.g ? a.g[r] : 1.0f, bnext = a.beta ? a.beta[r] : 1.0f;
    };
    fetch(0);
    /* padding rows read as zero in every product */
    if (tid < RG_K) qv[tid] = kf[tid] = kh[tid] = uv[tid] = vv[tid] = 0.0f;
    __syncthreads();

    for (int t = 0; t < T; t++) {
        const size_t r = ((size_t)b * T + t) * H + h;
        float e0 = raw0, e1 = raw1;
        const float g = gnext, beta = bnext;
        if (t + 1 < T) fetch(t + 1);

        /* ---- P0: q~, k~, k^, u, v into shared memory ---- */
        if (job == 0) {
            if (elu) e0 = elu1f(e0), e1 = elu1f(e1);
            if (lane < dk) qv[lane] = e0;
            if (lane + 32 < dk) qv[lane + 32] = e1;
        } else if (job == 1) {
            if (elu) e0 = elu1f(e0), e1 = elu1f(e1);
            if (lane >= dk) e0 = 0.0f;
            if (lane + 32 >= dk) e1 = 0.0f;
            if (lane < dk) kf[lane] = e0;
            if (lane + 32 < dk) kf[lane + 32] = e1;
            if (!linear) {
                const float inv = 1.0f / fmaxf(sqrtf(warp_sum(e0 * e0 + e1 * e1)), eps);
                const float h0 = e0 * inv, h1 = e1 * inv;
                if (lane < dk) kh[lane] = h0;
                if (lane + 32 < dk) kh[lane + 32] = h1;
                if (vla && !a.u) {
                    if (lane < dk) uv[lane] = su * h0;
                    if (lane + 32 < dk) uv[lane + 32] = su * h1;
                }
            }
        } else if (job == 2 && src) {
            const float mul = su / fmaxf(sqrtf(warp_sum(e0 * e0 + e1 * e1)), eps);
            if (lane < dk) uv[lane] = e0 * mul;
            if (lane + 32 < dk) uv[lane + 32] = e1 * mul;
        } else if (job == 3) {
            if (lane < dv) vv[lane] = e0;
            if (lane + 32 < dv) vv[lane + 32] = e1;
        }
        __syncthreads();

        /* ---- PA: partial products over this thread's slice ---- */
        if (!linear) {
            float p = 0.0f;
#pragma unroll
            for (int q = 0; q < RG_R; q++) p = fmaf(x[q], kh[r0 + q], p);
            red3[s][c] = p;
        }
        if (vla) {
            double pu = 0.0, pk = 0.0;
#pragma unroll
            for (int q = 0; q < RG_R; q++) {
                pu = fma(A[q], (double)uv[r0 + q], pu);
                pk = fma(A[q], (double)kh[r0 + q], pk);
            }
            red1[s][c] = pu;
            red2[s][c] = pk;
        }
        if (has_n && tid < RG_K) {
            nreg += kf[tid];
            const float p = warp_sum(qv[tid] * nreg);
            if (lane == 0) pq[warp] = p;
        }
        __syncthreads();

        /* ---- PB, PC: the A step (VLA) ---- */
        float y = 0.0f;
        if (!linear) y = red3[0][c] + red3[1][c] + red3[2][c] + red3[3][c];
        float av[RG_R];
        if (vla) {
            const double z = red1[0][c] + red1[1][c] + red1[2][c] + red1[3][c];
            const double ak = red2[0][c] + red2[1][c] + red2[2][c] + red2[3][c];
            if (tid < RG_K) {
                const double pu = warp_sum((double)uv[c] * z), pk = warp_sum(z * (double)kh[c]);
                if (lane == 0) part[0][warp] = pu, part[1][warp] = pk;
            }
            __syncthreads();
            const double uz = part[0][0] + part[0][1], zk = part[1][0] + part[1][1];
            const double inv = 1.0 / fmax(1.0 + uz, a.eps);
            const bool refresh = a.refresh > 0 && (a.t0 + t + 1) % a.refresh == 0;
            const double zi = z * inv;
#pragma unroll
            for (int q = 0; q < RG_R; q++) {
                const int j = r0 + q;
                const double zj = red1[0][j] + red1[1][j] + red1[2][j] + red1[3][j];
                A[q] -= zi * zj;
                if (refresh && j == c && c < dk) A[q] += a.rho;
            }
            if (tid < RG_K) {
                const double w = ak - zi * zk + (refresh ? a.rho * (double)kh[c] : 0.0);
                wb[c] = w;
                const double pw = warp_sum(w * w);
                if (lane == 0) part[2][warp] = pw;
            }
            __syncthreads();
            const double sc = 1.0 / fmax(sqrt(part[2][0] + part[2][1]), a.eps);
#pragma unroll
            for (int q = 0; q < RG_R; q++) av[q] = (float)(wb[r0 + q] * sc);
        }

        /* ---- PD: the S write, then the partial o = X^T q~ ---- */
        const float vj = vv[c];
        if (vla) {
            const float d = vj - y;
#pragma unroll
            for (int q = 0; q < RG_R; q++) x[q] += av[q] * d;
        } else if (delta) {
            const float d = vj - g * y;
#pragma unroll
            for (int q = 0; q < RG_R; q++) x[q] = g * x[q] + (beta * kh[r0 + q]) * d;
        } else {
#pragma unroll
            for (int q = 0; q < RG_R; q++) x[q] += kf[r0 + q] * vj;
        }
        {
            float p = 0.0f;
#pragma unroll
            for (int q = 0; q < RG_R; q++) p = fmaf(x[q], qv[r0 + q], p);
            red4[s][c] = p;
        }
        __syncthreads();

        /* ---- PE: the output row ---- */
        if (tid < dv) {
            const float o = red4[0][tid] + red4[1][tid] + red4[2][tid] + red4[3][tid];
            float den = 1.0f;
            if (has_n) {
                const float qn = pq[0] + pq[1];
                den = linear ? qn + eps : fmaxf(qn, eps);
            }
            a.o[r * dv + tid] = has_n ? o / den : o;
        }
        /* No barrier here: the next token's P0 writes only the vectors (last read before the
         * barrier above), and its PA (red1..3, pq) comes after its own first barrier. */
    }

    /* ---- the states out: every load of the block happened before the first barrier, so
     * S_in, A_in, n_in may be S_out, A_out, n_out ---- */
    if (a.S_out)
#pragma unroll
        for (int r = 0; r < RG_R; r++) {
            const int i = r0 + r;
            if (i < dk && c < dv) a.S_out[sS + (size_t)i * dv + c] = x[r];
        }
    if (vla && a.A_out) {
        __syncthreads(); /* the stage was last read before the token loop */
#pragma unroll
        for (int r = 0; r < RG_R; r++) stage[c * (RG_K + 1) + r0 + r] = (float)A[r];
        __syncthreads();
#pragma unroll
        for (int q = 0; q < RG_R; q++) {
            const int i = s + 4 * q;
            if (i < dk && c < dk) a.A_out[sA + (size_t)i * dk + c] = stage[i * (RG_K + 1) + c];
        }
    }
    if (has_n && a.n_out && tid < dk) a.n_out[sn + tid] = nreg;
}

bool seq_regs_applies(const vlacu_args &a) {
    return a.algo == VLACU_SEQUENTIAL && a.mech != VLACU_SOFTMAX && a.dk <= RG_K && a.dv <= RG_K;
}

cudaError_t launch_seq_regs(const vlacu_args &a, cudaStream_t st) {
    VLACU_LAUNCH(seq_regs_kernel, (unsigned)(a.B * a.H), RG_NT, 0, st, a);
    return cudaGetLastError();
}

} // namespace vlacu
