/* The VLA backward (VLA-MATH 5), sequential and chunked forms, in double. This block is the
 * derivation the GPU backends port.
 *
 * Forward of one token (VLA-MATH 1), in the maths' orientation (S is dv x dk):
 *   z_t = A_{t-1} u_t,  c_t = 1 + u_t . z_t,  den_t = max(c_t, eps)
 *   A'_t = A_{t-1} - z_t z_t^T / den_t,  A_t = A'_t (+ rho I at a refresh point)
 *   y_t = A_t k^_t,  a_t = y_t / max(||y_t||, eps)
 *   e_t = v_t - S_{t-1} k^_t,  S_t = S_{t-1} + e_t a_t^T
 *   n_t = n_{t-1} + k~_t,  r_t = q~_t . n_t,  D_t = max(r_t, eps)  (normalised output only)
 *   o_t = S_t q~_t / D_t   (D_t = 1 unnormalised)
 *
 * Adjoints, walking t = T-1 .. 0 with running dS (of S_t), dA (of A_t), dn (of n_t), started at
 * dS_end, dA_end, dn_end (0 when absent). "[x > eps]" is the max floor's derivative (VLA-MATH 5).
 *   output:   dnum = dO_t / D_t;  dr = -[r_t > eps] (dO_t . o_t) / D_t;  dq~_t += S_t^T dnum + dr n_t
 *             dn += dr q~_t;  dS += dnum q~_t^T
 *   n:        dk~_t += dn                       (dn then carries to n_{t-1} unchanged)
 *   S:        de = dS a_t,  da = dS^T e_t,  dv_t += de,  dk^_t -= S_{t-1}^T de,  dS <- dS - de k^_t^T
 *   a:        dy = (da - a_t (a_t . da)) / ||y_t||  where ||y_t|| > eps,  dy = da / eps  where not
 *   y:        dA += dy k^_t^T,  dk^_t += A_t^T dy
 *   A (G = dA, the adjoint of A_t and of A'_t: the refresh adds a constant):
 *             dz = -(G + G^T) z_t / den_t,  dc = [c_t > eps] z_t^T G z_t / den_t^2
 *             du_t += dc z_t,  dz += dc u_t
 *             du_t += A_{t-1}^T dz,  dA <- G + dz u_t^T   (the adjoint of A_{t-1})
 * At the end dS_0 = dS (stored transposed), dA_0 = (dA + dA^T) / 2 (the dispatcher symmetrises:
 * A is symmetric), dn_0 = dn. The transposes are kept general so a non-symmetric A_in is still
 * differentiated exactly. u_t, k^_t, q~_t and k~_t are then mapped back to the raw inputs by the
 * dispatcher (u_t = s_u k^_t when u is not given: dk^ += s_u du).
 *
 * What is kept (memory per head, besides the O(T (dk + dv)) inputs and gradients): S, A and n at
 * the start of every chunk of C tokens ((T / C) (dk dv + dk^2 + dk) doubles, one forward pass), and
 * for the chunk being walked its per-token vectors z_t, den_t, a_t, ||y_t||, e_t, n_t (C (3 dk + dv)).
 * Each chunk is recomputed forward from its checkpoint, then walked backwards; S_{t-1} and A_{t-1}
 * are recovered from S_t and A_t by undoing the step, S_{t-1} = S_t - e_t a_t^T and
 * A_{t-1} = A_t (- rho I) + z_t z_t^T / den_t, exact up to rounding in double over at most C tokens,
 * so no d x d matrix is stored per token. Work: about three forward passes.
 *
 * Chunked: the same checkpoints and A part (token by token: its cost is that of the forward's A
 * recurrence), with the S part of each chunk differentiated in matrix form by cpu_grad_chunk_vjp
 * (cpu_grad_chunk.c), which returns da_t for the whole chunk before the A part walks it back.
 *
 * Storage orientation in the code: ST = S^T [dk][dv] (as the library stores it), so
 * S_t q~ = ST^T q~, dS a = dST^T a, dS^T e = dST e, and the update is ST += a e^T. */
#include "cpu_grad.h"

#include <math.h>
#include <string.h>

static int is_refresh(const cpu_grad_head *h, const cpu_grad_params *p, int t) {
    return p->refresh > 0 && (h->t0 + t + 1) % p->refresh == 0;
}

#define SEG_MAX 8 /* a_backward_chunk's segments (refresh points + 1) a chunk; more: token by token */

static size_t checkpoint_size(int dk, int dv) { return (size_t)dk * dv + (size_t)dk * dk + dk; }
static int n_chunks(int T, int C) { return (T + C - 1) / C; }

/* Per-token vectors of the chunk being walked, C tokens at most. */
typedef struct chunk_store {
    double *Z, *den, *gate, *yn, *Al, *E, *N;
} chunk_store;

static size_t store_size(int C, int dk, int dv) { return (size_t)C * (3 * (size_t)dk + dv + 3); }

static chunk_store carve_store(int C, int dk, int dv, double *w) {
    chunk_store cs;
    cs.Z = w, cs.Al = cs.Z + (size_t)C * dk, cs.N = cs.Al + (size_t)C * dk, cs.E = cs.N + (size_t)C * dk;
    cs.den = cs.E + (size_t)C * dv, cs.gate = cs.den + C, cs.yn = cs.gate + C;
    return cs;
}

/* The work both forms share: checkpoints, states and their gradients, the chunk's store, scratch
 * (6 dk + 3 dv). */
static size_t common_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return cpu_grad_pad((size_t)n_chunks(T, p->chunk) * checkpoint_size(dk, dv)) +
           2 * cpu_grad_pad(checkpoint_size(dk, dv)) + cpu_grad_pad(store_size(p->chunk, dk, dv)) +
           cpu_grad_pad(6 * (size_t)dk + 3 * (size_t)dv);
}

size_t cpu_grad_vla_sequential_work(int T, int dk, int dv, const cpu_grad_params *p) {
    return common_work(T, dk, dv, p);
}

size_t cpu_grad_vla_chunked_work(int T, int dk, int dv, const cpu_grad_params *p) {
    const size_t C = (size_t)p->chunk;
    return common_work(T, dk, dv, p) + 2 * cpu_grad_pad(C * dv) + cpu_grad_pad(C * dk) +
           cpu_grad_chunk_work(p->chunk, dk, dv) + /* num, dnum, da, the chunk's work */
           cpu_grad_pad(4 * C * (size_t)dk + 3 * (size_t)dk * dk) + cpu_grad_pad(SEG_MAX * (size_t)dk * dk); /* a_backward_chunk's */
}

/* The A part and n over tokens [ts, te) from (A, n), which are advanced: z_t, den_t, a_t, ||y_t||
 * and n_t into cs. */
static void a_forward(const cpu_grad_head *h, const cpu_grad_params *p, int ts, int te, double *A, double *n,
                      const chunk_store *cs) {
    const int dk = h->dk;
    for (int t = ts; t < te; t++) {
        const int i = t - ts;
        const double *u = h->u + (size_t)t * dk, *k = h->kh + (size_t)t * dk;
        double *z = cs->Z + (size_t)i * dk, *a = cs->Al + (size_t)i * dk;
        cpu_grad_matvec(A, u, dk, dk, z); /* z = A_{t-1} u */
        const double c = 1.0 + cpu_grad_dot(u, z, dk);
        const double den = fmax(c, p->eps);
        cs->den[i] = den;
        cs->gate[i] = c > p->eps;
        cpu_grad_ger(A, -1.0 / den, z, z, dk, dk);
        if (is_refresh(h, p, t))
            for (int j = 0; j < dk; j++) A[(size_t)j * dk + j] += p->rho;
        cpu_grad_matvec(A, k, dk, dk, a); /* y = A_t k^ */
        const double yn = sqrt(cpu_grad_dot(a, a, dk));
        cs->yn[i] = yn;
        const double inv = 1.0 / fmax(yn, p->eps);
        for (int j = 0; j < dk; j++) a[j] *= inv;
        if (p->normalize) {
            const double *kf = h->kf + (size_t)t * dk;
            double *nt = cs->N + (size_t)i * dk;
            for (int j = 0; j < dk; j++) nt[j] = n[j] += kf[j];
        }
    }
}

/* The S part over tokens [ts, te), token by token: e_t into cs, ST advanced. */
static void s_forward(const cpu_grad_head *h, int ts, int te, double *ST, const chunk_store *cs) {
    const int dk = h->dk, dv = h->dv;
    for (int t = ts; t < te; t++) {
        const int i = t - ts;
        const double *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv, *a = cs->Al + (size_t)i * dk;
        double *e = cs->E + (size_t)i * dv;
        cpu_grad_vecmat(k, ST, dk, dv, e); /* e = v - S_{t-1} k^ */
        for (int j = 0; j < dv; j++) e[j] = v[j] - e[j];
        cpu_grad_ger(ST, 1.0, a, e, dk, dv);
    }
}

/* The output normaliser of token t (i in the chunk): given num = S_t q~, returns dnum = dO / D in
 * dnum and adds its q~ and n terms (dn is the adjoint of n_t; dk~_t collects it). */
static void normaliser_backward(const cpu_grad_head *h, const cpu_grad_params *p, int t, const double *nt,
                                const double *num, double *dnum, double *dn) {
    const int dk = h->dk, dv = h->dv;
    const double *q = h->q + (size_t)t * dk, *dO = h->dO + (size_t)t * dv;
    const double r = cpu_grad_dot(q, nt, dk), D = fmax(r, p->eps);
    for (int j = 0; j < dv; j++) dnum[j] = dO[j] / D;
    if (r > p->eps) {
        const double dr = -cpu_grad_dot(dO, num, dv) / (D * D);
        double *dq = h->dq + (size_t)t * dk;
        for (int j = 0; j < dk; j++) dq[j] += dr * nt[j], dn[j] += dr * q[j];
    }
    double *dkf = h->dkf + (size_t)t * dk;
    for (int j = 0; j < dk; j++) dkf[j] += dn[j];
}

/* dy_t from da_t through a_t = y_t / max(||y_t||, eps), in place (a_backward and a_backward_chunk). */
static void dy_of_da(const chunk_store *cs, int i, int dk, double eps, double *da) {
    const double *a = cs->Al + (size_t)i * dk, yn = cs->yn[i];
    if (yn > eps) {
        const double proj = cpu_grad_dot(a, da, dk);
        for (int j = 0; j < dk; j++) da[j] = (da[j] - a[j] * proj) / yn;
    } else {
        for (int j = 0; j < dk; j++) da[j] /= eps;
    }
}

/* Token t (i in the chunk) of the A part backwards: da (the gradient of a_t; clobbered) through
 * the normalisation of y_t, y_t = A_t k^_t, the refresh and Sherman-Morrison. A is A_t on entry
 * and A_{t-1} on return; dA likewise. sc: 3 dk doubles. */
static void a_backward(const cpu_grad_head *h, const cpu_grad_params *p, int t, int i, const chunk_store *cs,
                       double *A, double *dA, double *da, double *sc) {
    const int dk = h->dk;
    const double eps = p->eps;
    const double *k = h->kh + (size_t)t * dk, *u = h->u + (size_t)t * dk;
    const double *z = cs->Z + (size_t)i * dk;
    double *dkh = h->dkh + (size_t)t * dk, *du = h->du + (size_t)t * dk;
    double *dy = da, *dz = sc, *Gz = sc + dk, *tmp = sc + 2 * (size_t)dk;

    dy_of_da(cs, i, dk, eps, da); /* a = y / max(||y||, eps); dy in da's place */
    /* y = A_t k^. */
    cpu_grad_ger(dA, 1.0, dy, k, dk, dk);
    cpu_grad_vecmat(dy, A, dk, dk, tmp); /* A_t^T dy */
    for (int j = 0; j < dk; j++) dkh[j] += tmp[j];

    /* A: back through the refresh and Sherman-Morrison, G = dA. */
    if (is_refresh(h, p, t))
        for (int j = 0; j < dk; j++) A[(size_t)j * dk + j] -= p->rho;
    const double den = cs->den[i];
    cpu_grad_matvec(dA, z, dk, dk, Gz); /* G z */
    cpu_grad_vecmat(z, dA, dk, dk, tmp); /* G^T z */
    const double zGz = cpu_grad_dot(z, Gz, dk);
    const double dc = cs->gate[i] != 0.0 ? zGz / (den * den) : 0.0;
    for (int j = 0; j < dk; j++) {
        dz[j] = -(Gz[j] + tmp[j]) / den + dc * u[j];
        du[j] += dc * z[j];
    }
    cpu_grad_ger(A, 1.0 / den, z, z, dk, dk); /* A <- A_{t-1} */
    cpu_grad_ger(dA, 1.0, dz, u, dk, dk);
    cpu_grad_vecmat(dz, A, dk, dk, tmp); /* A_{t-1}^T dz */
    for (int j = 0; j < dk; j++) du[j] += tmp[j];
}

/* ---- The A part of a chunk backwards in matrix form ----
 * Within a segment of n tokens [s0, s1) with no refresh before its last token and every gate open
 * (c_t > eps, so den_t = c_t), Sherman-Morrison is exact: with P = As^{-1} (As = A at the segment
 * start, symmetric) and U the segment's rows u_r,
 *   A'_t = (P + sum_{r<=t} u_r u_r^T)^{-1} = As - sum_{r<=t} z_r z_r^T / den_r.
 * y'_t = A'_t k^_t (y_t = y'_t + rho k^_t at a refresh on the last token) makes dP_t = -w_t y'_t^T
 * with w_t = A'_t dy_t, and the adjoint G of A_{s1-1} adds -N, N = A' G A' (A' = A'_{s1-1}), to the
 * last P. Since P_t = P + sum_{r<=t} u_r u_r^T and P = As^{-1}:
 *   dk^_t += w_t (+ rho dy_t at the refresh),
 *   du_r  += -sum_{t>=r} [w_t (y'_t . u_r) + y'_t (w_t . u_r)] - (N + N^T) u_r,
 *   dAs    = sum_t (P w_t) (P y'_t)^T + M G M^T,  M = P A' = I - U^T U A',
 * where P A'_t = I - U_{<=t}^T U_{<=t} A'_t, so P w_t = dy_t - sum_{r<=t} u_r (u_r . w_t), and no
 * inverse is formed. Every step is a product of n x n x dk or n x dk x dk: parallel over tokens,
 * where the token-by-token adjoint (a_backward) is a chain of n steps; only dA passes from segment
 * to segment. dAs agrees with a_backward's in its symmetric part, which is all that later steps
 * and the symmetrised dA_0 use. This is the form the GPU backends can run per segment. */

/* out_t = As x_t - sum_{r<=t} z_r (z_r . x_t) / den_r for the n rows x_t of X (A'_t x_t). */
static void apply_at(const double *As, const double *Z, const double *den, const double *X, int n, int dk,
                     double *out) {
    for (int t = 0; t < n; t++) {
        const double *x = X + (size_t)t * dk;
        double *o = out + (size_t)t * dk;
        cpu_grad_matvec(As, x, dk, dk, o);
        for (int r = 0; r <= t; r++) {
            const double *z = Z + (size_t)r * dk;
            const double c = -cpu_grad_dot(z, x, dk) / den[r];
            for (int j = 0; j < dk; j++) o[j] += c * z[j];
        }
    }
}

/* One segment [s0, s1) of the chunk starting at ts; As its start A; dA: the adjoint of A_{s1-1}
 * in, of As out; dy: the segment's rows of da, already through the normalisation. w: 4 n dk + 3 dk^2. */
static void a_backward_segment(const cpu_grad_head *h, const cpu_grad_params *p, int ts, int s0, int s1,
                               const chunk_store *cs, const double *As, double *dA, const double *dy, double *w) {
    const int dk = h->dk, n = s1 - s0, i0 = s0 - ts;
    const size_t nk = (size_t)n * dk, kk = (size_t)dk * dk;
    const double *Z = cs->Z + (size_t)i0 * dk, *den = cs->den + i0;
    const double *U = h->u + (size_t)s0 * dk, *K = h->kh + (size_t)s0 * dk;
    double *W = w, *Yp = W + nk, *Wt = Yp + nk, *Yt = Wt + nk, *Ae = Yt + nk, *N = Ae + kk, *M = N + kk;
    apply_at(As, Z, den, dy, n, dk, W);
    apply_at(As, Z, den, K, n, dk, Yp);
    for (int t = 0; t < n; t++) {
        double *dkh = h->dkh + (size_t)(s0 + t) * dk;
        const double *wt = W + (size_t)t * dk, *dyt = dy + (size_t)t * dk;
        const double rho = t == n - 1 && is_refresh(h, p, s0 + t) ? p->rho : 0.0;
        for (int j = 0; j < dk; j++) dkh[j] += wt[j] + rho * dyt[j];
    }
    /* Ae = A' of the last token; N = Ae G Ae (into M as scratch first). */
    memcpy(Ae, As, sizeof(double) * kk);
    for (int r = 0; r < n; r++) cpu_grad_ger(Ae, -1.0 / den[r], Z + (size_t)r * dk, Z + (size_t)r * dk, dk, dk);
    for (int i = 0; i < dk; i++) cpu_grad_vecmat(Ae + (size_t)i * dk, dA, dk, dk, M + (size_t)i * dk); /* Ae G */
    for (int i = 0; i < dk; i++) cpu_grad_vecmat(M + (size_t)i * dk, Ae, dk, dk, N + (size_t)i * dk); /* (Ae G) Ae */
    /* du_r */
    for (int r = 0; r < n; r++) {
        const double *u = U + (size_t)r * dk;
        double *du = h->du + (size_t)(s0 + r) * dk;
        for (int t = r; t < n; t++) {
            const double *wt = W + (size_t)t * dk, *yt = Yp + (size_t)t * dk;
            const double cy = cpu_grad_dot(yt, u, dk), cw = cpu_grad_dot(wt, u, dk);
            for (int j = 0; j < dk; j++) du[j] -= wt[j] * cy + yt[j] * cw;
        }
        for (int i = 0; i < dk; i++) {
            double acc = 0.0;
            for (int j = 0; j < dk; j++) acc += (N[(size_t)i * dk + j] + N[(size_t)j * dk + i]) * u[j];
            du[i] -= acc;
        }
    }
    /* P w_t and P y'_t */
    for (int t = 0; t < n; t++) {
        double *wt = Wt + (size_t)t * dk, *yt = Yt + (size_t)t * dk;
        memcpy(wt, dy + (size_t)t * dk, sizeof(double) * dk);
        memcpy(yt, K + (size_t)t * dk, sizeof(double) * dk);
        for (int r = 0; r <= t; r++) {
            const double *u = U + (size_t)r * dk;
            const double cw = cpu_grad_dot(u, W + (size_t)t * dk, dk), cy = cpu_grad_dot(u, Yp + (size_t)t * dk, dk);
            for (int j = 0; j < dk; j++) wt[j] -= cw * u[j], yt[j] -= cy * u[j];
        }
    }
    /* M = I - U^T U Ae = I - sum_r u_r (Ae u_r)^T (Ae symmetric); N <- M G; dA <- N M^T + Wt^T Yt */
    memset(M, 0, sizeof(double) * kk);
    for (int i = 0; i < dk; i++) M[(size_t)i * dk + i] = 1.0;
    double *Au = N; /* N is free once du has it */
    for (int r = 0; r < n; r++) {
        cpu_grad_matvec(Ae, U + (size_t)r * dk, dk, dk, Au);
        cpu_grad_ger(M, -1.0, U + (size_t)r * dk, Au, dk, dk);
    }
    for (int i = 0; i < dk; i++) cpu_grad_vecmat(M + (size_t)i * dk, dA, dk, dk, Ae + (size_t)i * dk); /* M G */
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dk; j++) dA[(size_t)i * dk + j] = cpu_grad_dot(Ae + (size_t)i * dk, M + (size_t)j * dk, dk);
    for (int t = 0; t < n; t++) cpu_grad_ger(dA, 1.0, Wt + (size_t)t * dk, Yt + (size_t)t * dk, dk, dk);
}

/* The A part of the chunk [ts, te) backwards, da in dAl (clobbered). Under VLA_CPU_APART=segment:
 * in matrix form segment by segment (segments end at refresh points and at te) when every gate is
 * open, A at the chunk start (Ac) is symmetric and there are at most SEG_MAX segments. Otherwise,
 * and by default, token by token through a_backward: on the CPU the matrix form does about 1.7x
 * the arithmetic (fwd+bwd at (1,4,32) T = 1024: 61 against 42 ms on 2 cores), so it is there as the
 * reference of the GPU form, checked by the ctest vla_check_grad_cpu_segment. (Token by token:
 * A: A_{te-1} on entry.) dA: the adjoint of A_{te-1} in, of A_{ts-1} out. */
static void a_backward_chunk(const cpu_grad_head *h, const cpu_grad_params *p, int ts, int te, const chunk_store *cs,
                             const double *Ac, double *A, double *dA, double *dAl, double *sc, double *w) {
    const int dk = h->dk, n = te - ts;
    const size_t kk = (size_t)dk * dk;
    int ok = p->apart_segment, nseg = 0, ends[SEG_MAX];
    for (int i = 0; i < n && ok; i++) ok = cs->gate[i] != 0.0;
    /* Symmetric up to the rounding of the rank-one updates (z_i z_j / den and z_j z_i / den round
     * apart); an A_in that is not symmetric takes the token walk, which differentiates it exactly. */
    double amax = 0.0;
    for (size_t e = 0; e < kk; e++) amax = fmax(amax, fabs(Ac[e]));
    for (int i = 0; i < dk && ok; i++)
        for (int j = 0; j < i && ok; j++) ok = fabs(Ac[(size_t)i * dk + j] - Ac[(size_t)j * dk + i]) <= 1e-12 * amax;
    for (int t = ts; t < te && ok; t++)
        if (is_refresh(h, p, t) || t == te - 1) {
            if (nseg == SEG_MAX) ok = 0;
            else ends[nseg++] = t + 1;
        }
    if (!ok) {
        for (int t = te - 1; t >= ts; t--) a_backward(h, p, t, t - ts, cs, A, dA, dAl + (size_t)(t - ts) * dk, sc);
        return;
    }
    double *Ast = w + cpu_grad_pad(4 * (size_t)n * dk + 3 * kk); /* SEG_MAX segment starts */
    memcpy(Ast, Ac, sizeof(double) * kk);
    for (int g = 1; g < nseg; g++) { /* A at each later segment's start: the earlier ones' updates */
        double *Ag = Ast + (size_t)g * kk;
        memcpy(Ag, Ag - kk, sizeof(double) * kk);
        for (int t = g == 1 ? ts : ends[g - 2]; t < ends[g - 1]; t++) {
            const double *z = cs->Z + (size_t)(t - ts) * dk;
            cpu_grad_ger(Ag, -1.0 / cs->den[t - ts], z, z, dk, dk);
        }
        for (int j = 0; j < dk; j++) Ag[(size_t)j * dk + j] += p->rho; /* ends[g - 1] - 1 is a refresh */
    }
    for (int i = 0; i < n; i++) dy_of_da(cs, i, dk, p->eps, dAl + (size_t)i * dk);
    for (int g = nseg - 1; g >= 0; g--) {
        const int s0 = g ? ends[g - 1] : ts, s1 = ends[g];
        a_backward_segment(h, p, ts, s0, s1, cs, Ast + (size_t)g * kk, dA, dAl + (size_t)(s0 - ts) * dk, w);
    }
}

/* The two forms differ only in the S part of a chunk's backward walk. */
typedef struct vla_state {
    double *ckpt, *ST, *A, *n, *dST, *dA, *dn, *sc;
    chunk_store cs;
    double *extra; /* the chunked form's arrays */
} vla_state;

static vla_state carve_state(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    const int dk = h->dk, dv = h->dv, nc = n_chunks(h->T, p->chunk);
    const size_t ck = checkpoint_size(dk, dv);
    vla_state s;
    s.ckpt = work;
    s.ST = s.ckpt + cpu_grad_pad((size_t)nc * ck), s.A = s.ST + (size_t)dk * dv, s.n = s.A + (size_t)dk * dk;
    s.dST = s.ST + cpu_grad_pad(ck), s.dA = s.dST + (size_t)dk * dv, s.dn = s.dA + (size_t)dk * dk;
    double *cw = s.dST + cpu_grad_pad(ck);
    s.cs = carve_store(p->chunk, dk, dv, cw);
    s.sc = cw + cpu_grad_pad(store_size(p->chunk, dk, dv));
    s.extra = s.sc + cpu_grad_pad(6 * (size_t)dk + 3 * (size_t)dv);
    return s;
}

/* Forward pass with checkpoints at every chunk start (the S part token by token, or with `cw`, the
 * chunk work, in matrix form), then the gradients of the final states loaded. */
static void forward_pass(const cpu_grad_head *h, const cpu_grad_params *p, const vla_state *s, double *cw) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t ck = checkpoint_size(dk, dv), sS = (size_t)dk * dv, sA = (size_t)dk * dk;
    memcpy(s->ST, h->ST0, sizeof(double) * sS);
    memcpy(s->A, h->A0, sizeof(double) * sA);
    memcpy(s->n, h->n0, sizeof(double) * dk);
    for (int c = 0; c < nc; c++) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T;
        memcpy(s->ckpt + (size_t)c * ck, s->ST, sizeof(double) * ck);
        a_forward(h, p, ts, te, s->A, s->n, &s->cs);
        if (cw) {
            const cpu_grad_chunk ch = {.c = te - ts, .dk = dk, .dv = dv, .residual = 1,
                                       .Kr = h->kh + (size_t)ts * dk, .W = s->cs.Al, .V = h->v + (size_t)ts * dv,
                                       .Q = h->q + (size_t)ts * dk};
            cpu_grad_chunk_forward(&ch, s->ST, NULL, s->ST, cw);
        } else {
            s_forward(h, ts, te, s->ST, &s->cs);
        }
    }
    if (h->dST_end) memcpy(s->dST, h->dST_end, sizeof(double) * sS);
    else memset(s->dST, 0, sizeof(double) * sS);
    if (h->dA_end) memcpy(s->dA, h->dA_end, sizeof(double) * sA);
    else memset(s->dA, 0, sizeof(double) * sA);
    if (h->dn_end && p->normalize) memcpy(s->dn, h->dn_end, sizeof(double) * dk);
    else memset(s->dn, 0, sizeof(double) * dk);
}

static void finish(const cpu_grad_head *h, const vla_state *s) {
    memcpy(h->dST0, s->dST, sizeof(double) * h->dk * h->dv);
    memcpy(h->dA0, s->dA, sizeof(double) * h->dk * h->dk);
    if (h->dn0) memcpy(h->dn0, s->dn, sizeof(double) * h->dk);
}

void cpu_grad_vla_sequential(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t ck = checkpoint_size(dk, dv);
    const vla_state s = carve_state(h, p, work);
    double *ST = s.ST, *dST = s.dST;
    /* Scratch: a_backward's 3 dk, then da [dk], tk [dk], then num, dnum, de [dv]. */
    double *da = s.sc + 3 * (size_t)dk, *tk = da + dk, *num = s.sc + 6 * (size_t)dk, *dnum = num + dv, *de = dnum + dv;
    forward_pass(h, p, &s, NULL);

    for (int c = nc - 1; c >= 0; c--) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T;
        if (c != nc - 1) { /* the last chunk is current after the forward pass */
            memcpy(ST, s.ckpt + (size_t)c * ck, sizeof(double) * ck);
            a_forward(h, p, ts, te, s.A, s.n, &s.cs);
            s_forward(h, ts, te, ST, &s.cs);
        }
        /* ST, A are now S_{te-1}^T, A_{te-1}; walk back to ts. */
        for (int t = te - 1; t >= ts; t--) {
            const int i = t - ts;
            const double *q = h->q + (size_t)t * dk, *k = h->kh + (size_t)t * dk;
            const double *a = s.cs.Al + (size_t)i * dk, *e = s.cs.E + (size_t)i * dv;
            double *dq = h->dq + (size_t)t * dk, *dkh = h->dkh + (size_t)t * dk, *dvt = h->dval + (size_t)t * dv;

            /* Output: o = S_t q~ / D. */
            if (p->normalize) {
                cpu_grad_vecmat(q, ST, dk, dv, num);
                normaliser_backward(h, p, t, s.cs.N + (size_t)i * dk, num, dnum, s.dn);
            } else {
                memcpy(dnum, h->dO + (size_t)t * dv, sizeof(double) * dv);
            }
            cpu_grad_ger(dST, 1.0, q, dnum, dk, dv);
            cpu_grad_matvec(ST, dnum, dk, dv, tk);
            for (int j = 0; j < dk; j++) dq[j] += tk[j];

            /* S: ST_t = ST_{t-1} + a e^T, e = v - ST_{t-1}^T k^. */
            cpu_grad_vecmat(a, dST, dk, dv, de);  /* de = dS a */
            cpu_grad_matvec(dST, e, dk, dv, da);  /* da = dS^T e */
            cpu_grad_ger(ST, -1.0, a, e, dk, dv); /* ST <- ST_{t-1} */
            cpu_grad_matvec(ST, de, dk, dv, tk);
            for (int j = 0; j < dk; j++) dkh[j] -= tk[j];
            for (int j = 0; j < dv; j++) dvt[j] += de[j];
            cpu_grad_ger(dST, -1.0, k, de, dk, dv);

            a_backward(h, p, t, i, &s.cs, s.A, s.dA, da, s.sc);
        }
    }
    finish(h, &s);
}

void cpu_grad_vla_chunked(const cpu_grad_head *h, const cpu_grad_params *p, double *work) {
    const int T = h->T, dk = h->dk, dv = h->dv, C = p->chunk, nc = n_chunks(T, C);
    const size_t ck = checkpoint_size(dk, dv);
    const vla_state s = carve_state(h, p, work);
    double *num = s.extra, *dnum = num + cpu_grad_pad((size_t)C * dv), *dAl = dnum + cpu_grad_pad((size_t)C * dv);
    double *cw = dAl + cpu_grad_pad((size_t)C * dk), *aw = cw + cpu_grad_chunk_work(C, dk, dv);
    forward_pass(h, p, &s, cw);

    for (int c = nc - 1; c >= 0; c--) {
        const int ts = c * C, te = c + 1 < nc ? (c + 1) * C : T, n = te - ts;
        double *ST0 = s.ckpt + (size_t)c * ck; /* ST, then A and n */
        if (c != nc - 1) {
            memcpy(s.A, ST0 + (size_t)dk * dv, sizeof(double) * ((size_t)dk * dk + dk));
            a_forward(h, p, ts, te, s.A, s.n, &s.cs);
        }
        /* A is A_{te-1}; the S part of the chunk in matrix form, from its checkpoint. */
        const cpu_grad_chunk ch = {.c = n, .dk = dk, .dv = dv, .residual = 1, .Kr = h->kh + (size_t)ts * dk,
                                   .W = s.cs.Al, .V = h->v + (size_t)ts * dv, .Q = h->q + (size_t)ts * dk};
        cpu_grad_chunk_forward(&ch, ST0, p->normalize ? num : NULL, NULL, cw);
        const double *dO = h->dO + (size_t)ts * dv;
        if (p->normalize) {
            for (int i = n - 1; i >= 0; i--)
                normaliser_backward(h, p, ts + i, s.cs.N + (size_t)i * dk, num + (size_t)i * dv,
                                    dnum + (size_t)i * dv, s.dn);
            dO = dnum;
        }
        memset(dAl, 0, sizeof(double) * (size_t)n * dk);
        cpu_grad_chunk_vjp(&ch, ST0, dO, s.dST, h->dq + (size_t)ts * dk, h->dkh + (size_t)ts * dk, dAl,
                           h->dval + (size_t)ts * dv, NULL, cw);
        a_backward_chunk(h, p, ts, te, &s.cs, ST0 + (size_t)dk * dv, s.A, s.dA, dAl, s.sc, aw);
    }
    finish(h, &s);
}
