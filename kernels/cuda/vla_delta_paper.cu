/* The paper's DeltaNet (delta-paper; VLA-MATH 1, last subsection, and 5), sequential, one block per
 * head (b, h), forward and backward:
 *
 *   q~ = phi(q),  k^ = normalize(k),  S_t = diag(g_t) S_{t-1} + (v_t - S_{t-1} k^_t) k^_t^T,  o_t = S_t q~_t
 *
 * S is dv x dk and each value row i evolves on its own: it needs k^_t, q~_t and the row's v_t[i],
 * g_t[i] only. So a group of P lanes (a power of two, inside one warp) owns a row and walks it with
 * shuffles inside the group, no barrier. The block's barriers are those of staging a stretch of up to
 * CS tokens' rows in shared memory (one global round trip for all of them). Lane l of group grp holds
 * entries j = l + e P (e < E) of rows i = grp + r G (r < R, G groups a block); m = r E + e numbers a
 * thread's entries, kept thread-major (entry m of thread tid at m * na + tid, na = the threads that
 * have a row) in shared memory when it fits, else in the block's workspace slice (a thread reads back
 * only what it wrote itself).
 *
 * Backward, walking t = T-1 .. 0 with dS = dL/dS_t (from dS_end, or 0):
 *   dS += dO_t q~_t^T;  dv_t = dS k^_t;  dg_t[i] = dS[i,:] . S_{t-1}[i,:]            (inside the group)
 *   dq~_t = S_t^T dO_t;  dk^_t = dS^T e_t - S_{t-1}^T dv_t     (sums over rows: shuffles across the
 *                                                               warp's groups, one barrier across warps)
 *   dS = diag(g_t) dS - dv_t k^_t^T
 * then dq = phi'(q) dq~ and dk = normalize'(k)^T dk^, a warp per token at the end of each stretch.
 * S_{t-1} comes from a chunk store: one forward pass keeps S at the start of every chunk of C tokens
 * (checkpoints in the slice), then each chunk, last first, is recomputed from its checkpoint keeping
 * S_{t-1} and e_t for its tokens, and walked back. Memory per head: T / C checkpoints and one store
 * of C states, never a d x d matrix per token of the sequence (VLA-MATH 5). C is the descriptor's
 * chunk, lowered (not below 8) until the store fits in shared memory beside a second block. */
#include "vla_delta_paper.cuh"

#include <string.h>

namespace vlacu {
namespace dpaper {

/* The working arrays of a call. Staging (CS tokens): K = k^, KR = k (backward), Q = q~, V = v, GT = g,
 * DO = dO, DQK = dq~ and dk^ per token (backward). RED: column sums of each warp, two tokens' worth;
 * RV: each thread's rows' dv_t; S, DS: the state and its adjoint; EC, ST: e_t [C][dv] and S_{t-1}
 * [C][thread-major] of the chunk being walked. */
enum { A_K, A_KR, A_Q, A_V, A_GT, A_DO, A_DQK, A_RED, A_RV, A_S, A_DS, A_EC, A_ST, A_N };

struct plan {
    int P, lgP, E, R;  /* lanes a row group (2^lgP), entries of a row a lane, rows a group */
    int na;            /* threads with a row (the first na; the stride of the thread-major arrays) */
    int CS;            /* tokens a staging stretch */
    int C, nck;        /* backward: checkpoint interval (tokens a chunk) and chunks */
    long long off[A_N];           /* byte offset; -1: unused */
    unsigned char smem[A_N];      /* 1: dynamic shared memory; 0: the head's slice */
    size_t smem_bytes, slice_bytes; /* per block; slice_bytes a multiple of 256 */
    size_t ck_off;                /* backward: the checkpoints, (nck - 1) states, in the slice */
};

struct params {
    vlacu_args a;
    const float *dO, *dS_end;
    float *dq, *dk, *dv, *dg, *dS0; /* null: not requested */
    plan p;
    unsigned char *slices;          /* a slice of p.slice_bytes per head */
};

template <typename T> __device__ __forceinline__ T *arr(const plan &p, int id, unsigned char *smem, unsigned char *gs) {
    return p.off[id] < 0 ? nullptr : (T *)((p.smem[id] ? smem : gs) + p.off[id]);
}

/* The sum over the P lanes of the caller's group, in every lane of it (all lanes of the warp call). */
__device__ __forceinline__ float group_sum(float v, int P) {
    for (int o = P >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Where a thread's entries lie in the head: rows i = grp + r G, columns j = lg + e P. */
struct pos {
    int tid, nt, na, lg, grp, G;
};
__device__ __forceinline__ pos pos_of(const plan &p) {
    pos q;
    q.tid = threadIdx.x, q.nt = blockDim.x, q.na = p.na;
    q.lg = q.tid & (p.P - 1), q.grp = q.tid >> p.lgP, q.G = q.nt >> p.lgP;
    return q;
}

/* X (thread-major) = the thread's entries of a state stored [dk][dv] (S transposed) at src + base; 0
 * where src is null and past dk. No barrier (each thread reads back only its own entries). Rows past
 * dv have no entries anywhere. */
__device__ void state_in(float *X, const float *src, size_t base, const plan &p, const pos &q, int dk, int dv) {
    for (int r = 0; r < p.R; r++) {
        const int i = q.grp + r * q.G;
        if (i >= dv) continue;
        for (int e = 0; e < p.E; e++) {
            const int j = q.lg + e * p.P;
            X[(size_t)(r * p.E + e) * q.na + q.tid] = (src && j < dk) ? src[base + (size_t)j * dv + i] : 0.0f;
        }
    }
}

__device__ void state_out(float *dst, const float *X, size_t base, const plan &p, const pos &q, int dk, int dv) {
    for (int r = 0; r < p.R; r++) {
        const int i = q.grp + r * q.G;
        for (int e = 0; e < p.E; e++) {
            const int j = q.lg + e * p.P;
            if (i < dv && j < dk) dst[base + (size_t)j * dv + i] = X[(size_t)(r * p.E + e) * q.na + q.tid];
        }
    }
}

const int kInFlight = 16; /* loads a thread issues before their stores */

/* dst = src over the thread's own entries of two thread-major states (no barrier: a thread copies only
 * what it alone writes and reads). */
__device__ __forceinline__ void copy_own(float *dst, const float *src, const plan &p, const pos &q) {
    if (q.tid >= q.na) return;
    const int n = p.E * p.R;
    for (int m = 0; m < n; m++) dst[(size_t)m * q.na + q.tid] = src[(size_t)m * q.na + q.tid];
}

/* Tokens [ts, ts + n) of head (b, h) into the staging arrays that are not null: K = normalize(k),
 * KR = k, Q = phi(q), V = v, GT = g (1 without g), DO = dO; [n][D] each. A stretch of 32 tokens at
 * dk = dv = 32 (forward: 4096 floats) is one round of 256 threads' loads. Barriers before (the
 * previous stretch may still be read) and after. */
struct rows {
    const float *k, *q, *v, *g, *dO;
    int T, H, dk, dv, elu1;
    float eps;
};
__device__ __forceinline__ rows rows_of(const params &P) {
    const vlacu_args &a = P.a;
    rows x;
    x.k = a.k, x.q = a.q, x.v = a.v, x.g = a.g, x.dO = P.dO;
    x.T = a.T, x.H = a.H, x.dk = a.dk, x.dv = a.dv, x.elu1 = a.elu1, x.eps = (float)a.eps;
    return x;
}

/* (the rows by value: a reference to the kernel's parameters would copy them all to the stack) */
__device__ __noinline__ void stage(const rows a, int b, int h, int ts, int n, float *K, float *KR, float *Q, float *V,
                                   float *GT, float *DO) {
    const int dk = a.dk, dv = a.dv, tid = threadIdx.x, nt = blockDim.x;
    const size_t r0 = ((size_t)b * a.T + ts) * a.H + h;
    const float *src[5] = {a.k, a.q, a.v, a.g, a.dO};
    float *dst[5] = {KR ? KR : K, Q, V, GT, DO};
    const int D[5] = {dk, dk, dv, dv, dv};
    int end[5], total = 0;
    for (int x = 0; x < 5; x++) end[x] = total += dst[x] ? n * D[x] : 0;
    __syncthreads();
    for (int e0 = tid; e0 < total; e0 += kInFlight * nt) {
        float val[kInFlight];
        int which[kInFlight], el[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; u++) {
            const int e = e0 + u * nt;
            which[u] = -1, el[u] = 0, val[u] = 0.0f;
            if (e >= total) continue;
            int x = 0;
            while (e >= end[x]) x++;
            const int f = e - (x ? end[x - 1] : 0), r = f / D[x], i = f - r * D[x];
            which[u] = x, el[u] = f;
            val[u] = src[x] ? src[x][(r0 + (size_t)r * a.H) * D[x] + i] : 1.0f; /* (only g may be absent) */
        }
#pragma unroll
        for (int u = 0; u < kInFlight; u++) {
            const int x = which[u];
            if (x < 0) continue;
            dst[x][el[u]] = (x == 1 && a.elu1) ? elu1f(val[u]) : val[u];
        }
    }
    __syncthreads();
    if (K) { /* k^ = k * (1 / max(||k||, eps)), a warp a token */
        const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
        const float eps = a.eps;
        for (int c = warp; c < n; c += nw) {
            const float *kr = (KR ? KR : K) + (size_t)c * dk;
            float *kc = K + (size_t)c * dk, ss = 0.0f;
            for (int j = lane; j < dk; j += 32) ss += kr[j] * kr[j];
            const float mul = 1.0f / fmaxf(sqrtf(warp_sum(ss)), eps);
            for (int j = lane; j < dk; j += 32) kc[j] = kr[j] * mul;
        }
        __syncthreads();
    }
}

/* Token c of the stretch on the thread's rows: e_t = v_t - S k^_t, S = diag(g_t) S + e_t k^_t^T, and
 * o_t = S q~_t into o (the token's output row; null: none). With ST: S_{t-1} into ST (the chunk store
 * slot of the token) and e_t into EC. No barrier. */
__device__ __forceinline__ void fwd_token(const plan &p, const pos &q, int dk, int dv, float *S, const float *K,
                                          const float *Q, const float *V, const float *GT, int c, float *ST, float *EC,
                                          float *o) {
    const float *kc = K + (size_t)c * dk, *qc = Q ? Q + (size_t)c * dk : nullptr;
    for (int r = 0; r < p.R; r++) {
        const int i = q.grp + r * q.G;
        const bool row = i < dv;
        float y = 0.0f;
        for (int e = 0; e < p.E; e++) {
            const int j = q.lg + e * p.P;
            if (row && j < dk) y = fmaf(S[(size_t)(r * p.E + e) * q.na + q.tid], kc[j], y);
        }
        y = group_sum(y, p.P);
        const float vi = row ? V[(size_t)c * dv + i] : 0.0f, gi = row ? GT[(size_t)c * dv + i] : 1.0f, ei = vi - y;
        if (EC && row && q.lg == 0) EC[i] = ei;
        float out = 0.0f;
        for (int e = 0; e < p.E; e++) {
            const int j = q.lg + e * p.P;
            if (!row || j >= dk) continue;
            const size_t m = (size_t)(r * p.E + e) * q.na + q.tid;
            const float x = S[m];
            if (ST) ST[m] = x;
            const float s = fmaf(gi, x, ei * kc[j]);
            S[m] = s;
            if (o) out = fmaf(s, qc[j], out);
        }
        if (o) {
            out = group_sum(out, p.P);
            if (row && q.lg == 0) o[i] = out;
        }
    }
}

__global__ void __launch_bounds__(VLACU_NT) forward_kernel(const params P) {
    VLACU_DYNSMEM(smem);
    const vlacu_args &a = P.a;
    const plan &p = P.p;
    const pos q = pos_of(p);
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv, bh = blockIdx.x, b = bh / H, h = bh - b * H;
    unsigned char *gs = P.slices + (size_t)bh * p.slice_bytes;
    float *K = arr<float>(p, A_K, smem, gs), *Q = arr<float>(p, A_Q, smem, gs), *V = arr<float>(p, A_V, smem, gs);
    float *GT = arr<float>(p, A_GT, smem, gs), *S = arr<float>(p, A_S, smem, gs);
    const size_t sS = (size_t)bh * dk * dv;
    const rows R = rows_of(P);
    state_in(S, a.S_in, sS, p, q, dk, dv);
    for (int ts = 0; ts < T; ts += p.CS) {
        const int n = imin(p.CS, T - ts);
        stage(R, b, h, ts, n, K, nullptr, Q, V, GT, nullptr);
        for (int c = 0; c < n; c++)
            fwd_token(p, q, dk, dv, S, K, Q, V, GT, c, nullptr, nullptr, a.o + (((size_t)b * T + ts + c) * H + h) * dv);
    }
    /* each thread wrote only its own entries, which it alone read from S_in: S_out may be S_in */
    if (a.S_out) state_out(a.S_out, S, sS, p, q, dk, dv);
}

/* Token t (c in the stretch, tc in the chunk) backwards: dS is dL/dS_t on entry, dL/dS_{t-1} on return.
 * Writes dv_t, dg_t and the stretch's DQK[c] = (dq~_t, dk^_t). One barrier (the column sums across
 * warps, in RED's half `par`: the other half is the next token's, so no second barrier). */
__device__ __forceinline__ void bwd_token(const params &P, const pos &q, int b, int h, int t, int c, int tc, int par,
                                          float *dS, const float *ST, const float *EC, const float *K, const float *Q,
                                          const float *GT, const float *DO, float *RED, float *RV, float *DQK) {
    const vlacu_args &a = P.a;
    const plan &p = P.p;
    const int dk = a.dk, dv = a.dv;
    const float *kc = K + (size_t)c * dk, *qc = Q + (size_t)c * dk;
    const float *ec = EC + (size_t)tc * dv, *gc = GT + (size_t)c * dv, *oc = DO + (size_t)c * dv;
    const size_t orow = ((size_t)b * a.T + t) * a.H + h;
    /* rows: dS += dO q~^T, then dv_t[i] = dS[i,:] . k^ and dg_t[i] = dS[i,:] . S_{t-1}[i,:] */
    for (int r = 0; r < p.R; r++) {
        const int i = q.grp + r * q.G;
        const bool row = i < dv;
        const float doi = row ? oc[i] : 0.0f;
        float pv = 0.0f, pg = 0.0f;
        for (int e = 0; e < p.E; e++) {
            const int j = q.lg + e * p.P;
            if (!row || j >= dk) continue;
            const size_t m = (size_t)(r * p.E + e) * q.na + q.tid;
            const float x = fmaf(doi, qc[j], dS[m]);
            dS[m] = x;
            pv = fmaf(x, kc[j], pv);
            pg = fmaf(x, ST[m], pg);
        }
        pv = group_sum(pv, p.P);
        pg = group_sum(pg, p.P);
        RV[(size_t)r * q.nt + q.tid] = pv;
        if (row && q.lg == 0) {
            if (P.dv) P.dv[orow * dv + i] = pv;
            if (P.dg) P.dg[orow * dv + i] = pg;
        }
    }
    /* columns: this thread's part of dq~[j] and dk^[j] over its rows, and the dS step */
    const int lane = q.tid & 31, warp = q.tid >> 5, nw = q.nt >> 5;
    float *red = RED + ((size_t)par * nw + warp) * 2 * dk;
    for (int e = 0; e < p.E; e++) {
        const int j = q.lg + e * p.P;
        const bool col = j < dk;
        const float kj = col ? kc[j] : 0.0f;
        float pq = 0.0f, pk = 0.0f;
        for (int r = 0; r < p.R; r++) {
            const int i = q.grp + r * q.G;
            if (!col || i >= dv) continue;
            const size_t m = (size_t)(r * p.E + e) * q.na + q.tid;
            const float gi = gc[i], ei = ec[i], dvi = RV[(size_t)r * q.nt + q.tid];
            const float s0 = ST[m], x = dS[m];
            pq = fmaf(fmaf(gi, s0, ei * kj), oc[i], pq); /* S_t[i][j] dO_t[i] */
            pk = fmaf(x, ei, pk);
            pk = fmaf(-s0, dvi, pk);
            dS[m] = fmaf(gi, x, -dvi * kj);
        }
        for (int o = p.P; o < 32; o <<= 1) { /* across the warp's groups (same j in each) */
            pq += __shfl_xor_sync(0xffffffffu, pq, o);
            pk += __shfl_xor_sync(0xffffffffu, pk, o);
        }
        if (lane < p.P && col) red[j] = pq, red[dk + j] = pk;
    }
    __syncthreads();
    const float *rb = RED + (size_t)par * nw * 2 * dk;
    for (int x = q.tid; x < 2 * dk; x += q.nt) {
        float s = 0.0f;
        for (int w = 0; w < nw; w++) s += rb[(size_t)w * 2 * dk + x];
        DQK[(size_t)c * 2 * dk + x] = s;
    }
}

/* The chain rule of a stretch's tokens [s, s + n), a warp a token: dq = phi'(q) dq~ (phi' of elu + 1 is
 * 1 for q > 0 and exp(q) = q~ below, so min(q~, 1)); dk = (dk^ - k (k . dk^) / ||k||^2) / ||k|| where
 * ||k|| > eps, dk^ / eps where the floor binds, from the raw k in double (as vla_grad_prep.cu: at dk = 1
 * it is 0 up to double rounding). Needs a barrier after the stretch's last token. */
__device__ void chain(const params &P, int b, int h, int s, int n, const float *KR, const float *Q, const float *DQK) {
    const vlacu_args &a = P.a;
    const int dk = a.dk, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const double eps = a.eps;
    for (int c = warp; c < n; c += nw) {
        const size_t row = ((size_t)b * a.T + s + c) * a.H + h;
        const float *dqt = DQK + (size_t)c * 2 * dk, *dkh = dqt + dk;
        const float *kr = KR + (size_t)c * dk, *qc = Q + (size_t)c * dk;
        if (P.dq)
            for (int j = lane; j < dk; j += 32) P.dq[row * dk + j] = a.elu1 ? dqt[j] * fminf(qc[j], 1.0f) : dqt[j];
        if (P.dk) {
            double kk = 0.0, kd = 0.0;
            for (int j = lane; j < dk; j += 32) kk += (double)kr[j] * kr[j], kd += (double)kr[j] * dkh[j];
            kk = warp_sum(kk), kd = warp_sum(kd);
            const double nrm = sqrt(kk);
            for (int j = lane; j < dk; j += 32)
                P.dk[row * dk + j] =
                    nrm > eps ? (float)(((double)dkh[j] - (double)kr[j] * (kd / kk)) / nrm) : (float)(dkh[j] / eps);
        }
    }
}

/* (two blocks a multiprocessor: registers capped at 128, as the shared memory plan prefers) */
__global__ void __launch_bounds__(VLACU_NT, 2) backward_kernel(const params P) {
    VLACU_DYNSMEM(smem);
    const vlacu_args &a = P.a;
    const plan &p = P.p;
    const pos q = pos_of(p);
    const int T = a.T, H = a.H, dk = a.dk, dv = a.dv, bh = blockIdx.x, b = bh / H, h = bh - b * H;
    const int C = p.C, nck = p.nck, CS = p.CS;
    unsigned char *gs = P.slices + (size_t)bh * p.slice_bytes;
    float *K = arr<float>(p, A_K, smem, gs), *KR = arr<float>(p, A_KR, smem, gs), *Q = arr<float>(p, A_Q, smem, gs);
    float *V = arr<float>(p, A_V, smem, gs), *GT = arr<float>(p, A_GT, smem, gs), *DO = arr<float>(p, A_DO, smem, gs);
    float *DQK = arr<float>(p, A_DQK, smem, gs), *RED = arr<float>(p, A_RED, smem, gs);
    float *RV = arr<float>(p, A_RV, smem, gs);
    float *S = arr<float>(p, A_S, smem, gs), *dS = arr<float>(p, A_DS, smem, gs);
    float *EC = arr<float>(p, A_EC, smem, gs), *ST = arr<float>(p, A_ST, smem, gs);
    float *CK = (float *)(gs + p.ck_off);
    const size_t per = (size_t)p.E * p.R * q.na; /* floats of one thread-major state */
    const size_t sS = (size_t)bh * dk * dv;
    const rows R = rows_of(P);

    /* forward pass: the state at the start of chunks 1 .. nck-1 (chunk 0's is S_in); the last chunk
     * is walked from the state this pass ends with */
    state_in(S, a.S_in, sS, p, q, dk, dv);
    for (int ck = 0; ck < nck - 1; ck++) {
        const int ts = ck * C, te = ts + C;
        if (ck > 0) copy_own(CK + (size_t)(ck - 1) * per, S, p, q);
        for (int s = ts; s < te; s += CS) {
            const int n = imin(CS, te - s);
            stage(R, b, h, s, n, K, nullptr, nullptr, V, GT, nullptr);
            for (int c = 0; c < n; c++) fwd_token(p, q, dk, dv, S, K, nullptr, V, GT, c, nullptr, nullptr, nullptr);
        }
    }

    state_in(dS, P.dS_end, sS, p, q, dk, dv);
    int par = 0;
    for (int ck = nck - 1; ck >= 0; ck--) {
        const int ts = ck * C, te = imin(ts + C, T), len = te - ts;
        if (ck < nck - 1) { /* back to the chunk's start */
            if (ck == 0) state_in(S, a.S_in, sS, p, q, dk, dv);
            else copy_own(S, CK + (size_t)(ck - 1) * per, p, q);
        }
        const bool once = len <= CS; /* one stretch: staged once for both passes */
        for (int s = ts; s < te; s += CS) {
            const int n = imin(CS, te - s);
            if (once) stage(R, b, h, s, n, K, KR, Q, V, GT, DO);
            else stage(R, b, h, s, n, K, nullptr, nullptr, V, GT, nullptr);
            for (int c = 0; c < n; c++) {
                const int tc = s - ts + c;
                fwd_token(p, q, dk, dv, S, K, nullptr, V, GT, c, ST + (size_t)tc * per, EC + (size_t)tc * dv, nullptr);
            }
        }
        /* (each thread reads back its own ST entries; EC[i] is read by row i's group, whose lane 0
         * wrote it: the warp's shuffles since then order it, and the stage or the barrier below too) */
        __syncthreads();
        for (int s = ts + (len - 1) / CS * CS; s >= ts; s -= CS) {
            const int n = imin(CS, te - s);
            if (!once) stage(R, b, h, s, n, K, KR, Q, nullptr, GT, DO);
            for (int c = n - 1; c >= 0; c--) {
                bwd_token(P, q, b, h, s + c, c, s - ts + c, par, dS, ST + (size_t)(s - ts + c) * per, EC, K, Q, GT, DO,
                          RED, RV, DQK);
                par ^= 1;
            }
            __syncthreads();
            chain(P, b, h, s, n, KR, Q, DQK);
        }
    }
    if (P.dS0) state_out(P.dS0, dS, sS, p, q, dk, dv);
}

/* ---- host: the plan ---- */

const size_t kAlign = 256;
const size_t kSmemMargin = 1024;
/* A backward block's preferred shared memory: two blocks a multiprocessor on sm_90 (228 KB), so that
 * 256 heads (B = 64, H = 4) run in one wave on 132 multiprocessors. */
const size_t kBwdPreferred = 100 * 1024;

static size_t sat_add(size_t x, size_t y) { return x > SIZE_MAX - y ? SIZE_MAX : x + y; }
static size_t sat_mul(size_t x, size_t y) { return (x != 0 && y > SIZE_MAX / x) ? SIZE_MAX : x * y; }
static size_t align_up(size_t x, size_t al) { return x > SIZE_MAX - al ? SIZE_MAX : (x + al - 1) / al * al; }

/* The thread mapping: groups of P lanes with up to 8 entries of a row a lane (a group's sum is log2 P
 * dependent shuffles, ~25 cycles each, against E dependent FMAs of 4: at dk = 32, P = 4 is the shortest
 * chain), narrower while the groups would not cover the value rows. */
static void map_threads(const vlacu_args &a, plan *p) {
    const int nt = VLACU_NT;
    int P = 1, lg = 0;
    while (P < 32 && 8 * P < a.dk && 2 * P * a.dv <= nt) P *= 2, lg++;
    p->P = P, p->lgP = lg;
    p->E = (a.dk + P - 1) / P;
    const int G = nt / P;
    p->R = (a.dv + G - 1) / G;
    p->na = P * a.dv < nt ? P * a.dv : nt;
}

/* Places the arrays of `bytes` (0: unused) in priority order: shared memory while they fit in
 * `budget`, else the slice. Returns the slice bytes they take. */
static size_t place(plan *p, const size_t bytes[A_N], const int *prio, int nprio, size_t budget) {
    size_t s = 0, g = 0;
    for (int k = 0; k < A_N; k++) p->off[k] = -1, p->smem[k] = 0;
    for (int k = 0; k < nprio; k++) {
        const int id = prio[k];
        if (bytes[id] == 0) continue;
        const size_t sz = align_up(bytes[id], 16);
        if (sz <= budget && s + sz <= budget) {
            p->off[id] = (long long)s, p->smem[id] = 1;
            s += sz;
        } else {
            p->off[id] = (long long)g, p->smem[id] = 0;
            g = sat_add(g, align_up(sz, kAlign));
        }
    }
    p->smem_bytes = s;
    return g;
}

static size_t static_smem(const void *kern) { return static_smem_of(kern, 0); }

static size_t budget_of(const vlacu_device &dev, const void *kern) {
    const size_t used = static_smem(kern) + kSmemMargin;
    return dev.smem_optin > used ? dev.smem_optin - used : 0;
}

/* Forward: staging of CS tokens (up to 32; fewer while it would take more than half the shared
 * memory), then the state. */
static plan forward_plan(const vlacu_args &a, const vlacu_device &dev) {
    plan p;
    memset(&p, 0, sizeof p);
    map_threads(a, &p);
    const size_t budget = budget_of(dev, (const void *)forward_kernel);
    const size_t dk = (size_t)a.dk, dv = (size_t)a.dv, state = (size_t)p.E * p.R * p.na * 4;
    p.CS = a.T < 32 ? a.T : 32;
    while (p.CS > 1 && (size_t)p.CS * (2 * dk + 2 * dv) * 4 > budget / 2) p.CS = (p.CS + 1) / 2;
    const size_t CS = (size_t)p.CS;
    size_t by[A_N];
    memset(by, 0, sizeof by);
    by[A_K] = by[A_Q] = CS * dk * 4;
    by[A_V] = by[A_GT] = CS * dv * 4;
    by[A_S] = state;
    static const int prio[] = {A_K, A_Q, A_V, A_GT, A_S};
    p.slice_bytes = align_up(place(&p, by, prio, 5, budget), kAlign);
    p.C = a.T, p.nck = 1;
    return p;
}

static size_t backward_bytes(const vlacu_args &a, const plan &p, int C, int CS, size_t by[A_N]) {
    const size_t dk = (size_t)a.dk, dv = (size_t)a.dv, nt = VLACU_NT, state = (size_t)p.E * p.R * p.na * 4;
    memset(by, 0, A_N * sizeof by[0]);
    by[A_K] = by[A_KR] = by[A_Q] = (size_t)CS * dk * 4;
    by[A_V] = by[A_GT] = by[A_DO] = (size_t)CS * dv * 4;
    by[A_DQK] = (size_t)CS * 2 * dk * 4;
    by[A_RED] = 2 * (nt / 32) * 2 * dk * 4;
    by[A_RV] = (size_t)p.R * nt * 4;
    by[A_S] = by[A_DS] = state;
    by[A_EC] = sat_mul((size_t)C, dv * 4);
    by[A_ST] = sat_mul((size_t)C, state);
    size_t total = 0;
    for (int k = 0; k < A_N; k++) total = sat_add(total, align_up(by[k], 16));
    return total;
}

/* Backward: C = the descriptor's chunk (at most T), halved (not below 8) until everything fits in the
 * preferred shared memory; staging stretches of min(C, 32) tokens (fewer while they would take more
 * than half the budget). What does not fit goes to the slice, the chunk store first. */
static plan backward_plan(const vlacu_args &a, const vlacu_device &dev) {
    plan p;
    memset(&p, 0, sizeof p);
    map_threads(a, &p);
    const size_t budget = budget_of(dev, (const void *)backward_kernel);
    const size_t pref = budget < kBwdPreferred ? budget : kBwdPreferred;
    int C = a.chunk < a.T ? a.chunk : a.T;
    if (C < 1) C = 1;
    size_t by[A_N];
    auto stretch = [&](int c) {
        int cs = c < 32 ? c : 32;
        while (cs > 1 && (size_t)cs * (5 * (size_t)a.dk + 3 * (size_t)a.dv) * 4 > budget / 2) cs = (cs + 1) / 2;
        return cs;
    };
    while (C > 8 && backward_bytes(a, p, C, stretch(C), by) > pref) C = (C + 1) / 2;
    p.C = C;
    p.CS = stretch(C);
    p.nck = (a.T + C - 1) / C;
    backward_bytes(a, p, p.C, p.CS, by);
    static const int prio[] = {A_K, A_KR, A_Q, A_GT, A_DO, A_DQK, A_RED, A_RV, A_V, A_DS, A_S, A_EC, A_ST};
    const size_t spill = place(&p, by, prio, (int)(sizeof prio / sizeof prio[0]), budget);
    p.ck_off = align_up(spill, kAlign);
    const size_t ck = sat_mul((size_t)(p.nck - 1), (size_t)p.E * p.R * p.na * 4);
    p.slice_bytes = align_up(sat_add(p.ck_off, ck), kAlign);
    return p;
}

static size_t workspace_of(const vlacu_args &a, const plan &p) {
    return p.slice_bytes ? sat_mul((size_t)a.B * a.H, p.slice_bytes) : 0;
}

static std::atomic<size_t> forward_smem_set[64], backward_smem_set[64];

} // namespace dpaper

using namespace dpaper;

size_t dpaper_forward_workspace(const vlacu_args &a, const vlacu_device &dev) {
    return workspace_of(a, forward_plan(a, dev));
}

size_t dpaper_backward_workspace(const vlacu_args &a, const vlacu_device &dev) {
    return workspace_of(a, backward_plan(a, dev));
}

cudaError_t dpaper_forward(const vlacu_args &a, const vlacu_device &dev, void *ws, size_t ws_bytes, cudaStream_t st) {
    params P;
    memset(&P, 0, sizeof P);
    P.a = a;
    P.p = forward_plan(a, dev);
    const size_t need = workspace_of(a, P.p);
    if (need == SIZE_MAX || ws_bytes < need) return cudaErrorInvalidValue;
    P.slices = (unsigned char *)ws;
    const void *kern = (const void *)forward_kernel;
    const cudaError_t e = raise_smem_limit_static(kern, forward_smem_set, P.p.smem_bytes, static_smem(kern));
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(forward_kernel, (unsigned)(a.B * a.H), VLACU_NT, P.p.smem_bytes, st, P);
    return cudaGetLastError();
}

cudaError_t dpaper_backward(const vlacu_args &a, const vlacu_grads &g, const vlacu_device &dev, void *ws,
                            size_t ws_bytes, cudaStream_t st) {
    if (!g.dq && !g.dk && !g.dv && !g.dg && !g.dS_0) return cudaSuccess;
    params P;
    memset(&P, 0, sizeof P);
    P.a = a;
    P.dO = g.dO, P.dS_end = g.dS_end;
    P.dq = g.dq, P.dk = g.dk, P.dv = g.dv, P.dg = a.g ? g.dg : nullptr, P.dS0 = g.dS_0;
    P.p = backward_plan(a, dev);
    const size_t need = workspace_of(a, P.p);
    if (need == SIZE_MAX || ws_bytes < need) return cudaErrorInvalidValue;
    P.slices = (unsigned char *)ws;
    const void *kern = (const void *)backward_kernel;
    const cudaError_t e = raise_smem_limit_static(kern, backward_smem_set, P.p.smem_bytes, static_smem(kern));
    if (e != cudaSuccess) return e;
    VLACU_LAUNCH(backward_kernel, (unsigned)(a.B * a.H), VLACU_NT, P.p.smem_bytes, st, P);
    return cudaGetLastError();
}

} // namespace vlacu
