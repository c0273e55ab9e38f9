/* The backward op's plan (the workspace and where each working array lives) and its launch sequence
 * (vla_grad.cuh lists the kernels). One layout function serves the size query and the launch, so the
 * two always agree. Every algorithm of a mechanism computes the same gradient (VLA-MATH 5): linear,
 * delta and vla run the chunk form (vla_grad_chunk.cu, vla's A part in vla_grad_chunk_apart.cu) when
 * the algorithm is chunked and a chunk block fits shared memory, else the recurrent backward.
 *
 * Workspace (recurrent mechanisms): the prepared rows and their gradients, [BH][T][dk] each (q~ always;
 * k~ for linear and vla's normalised output; k^ for delta and vla; u for vla), then
 *   recurrent  one slice per head: the state matrices that do not fit in shared memory, checkpoints
 *              every C tokens, the chunk store (seq_layout). C is the descriptor's chunk, at most T.
 *   chunk form N, dr (with a normaliser), Y, Wt (delta, vla), Wd ([BH][T][.] each), gamL [BH][nck],
 *              ckX and ckH [BH][nck][dk][dv]; vla: a_t, da_t (float), z_t (double) [BH][T][dk],
 *              (den, ||y||, gate) [BH][T][3] doubles, ckA [BH][nck + 1][dk][dk] doubles, and A, dA
 *              per head when they do not fit shared memory. C is the descriptor's chunk, at most 64
 *              and at most T, halved until the per-chunk blocks fit shared memory.
 * Softmax: lse and D, [BH][T] each. */
#include "vla_delta_paper.cuh"
#include "vla_grad.cuh"

#include <stdint.h>
#include <string.h>

using namespace vlacu;
using namespace vlacu::grad;

namespace {

const size_t kAlign = 256;
const size_t kSmemMargin = 1024;

size_t sat_add(size_t x, size_t y) { return x > SIZE_MAX - y ? SIZE_MAX : x + y; }
size_t sat_mul(size_t x, size_t y) { return (x != 0 && y > SIZE_MAX / x) ? SIZE_MAX : x * y; }
size_t align_up(size_t x, size_t al) { return x > SIZE_MAX - al ? SIZE_MAX : (x + al - 1) / al * al; }

struct bump {
    size_t off;
    size_t take(size_t bytes) {
        const size_t at = off;
        off = sat_add(off, align_up(bytes, kAlign));
        return at;
    }
};

struct glayout {
    size_t total;
    size_t lse, D; /* softmax */
    int tile;
    size_t smem_rows, smem_keys;
    size_t Qp, Kf, Kh, Up, dQp, dKf, dKh, dU, slices; /* recurrent; Kf .. dU: SIZE_MAX when unused */
    gplan plan;
    seq_layout lay;
    int C, nck;
    bool chunked; /* the chunk form */
    size_t N, dr, Y, Wt, Wd, gamL, ckX, ckH; /* its arrays; N, dr, Wt: SIZE_MAX when unused */
    int ctile;                               /* its walks' column tile */
    size_t Aw, dAw, Zs, tok, ckA, Aws, smem_a; /* vla's A part (SIZE_MAX / 0 when unused) */
    size_t Sg;                                 /* its segment form's slices (SIZE_MAX when not run) */
    size_t smem_fac, smem_vjp, smem_walk;
};

/* The chunk form's chunk: the descriptor's, at most 64 and T, halved until the factors, vjp and walk
 * blocks fit `budget` bytes of dynamic shared memory; 0 when not even C = 1 fits. */
int chunk_form_C(const vlacu_args *a, size_t budget, int tile, size_t *fac, size_t *vjp, size_t *walk) {
    int C = a->chunk < 64 ? a->chunk : 64;
    if (C > a->T) C = a->T;
    if (C < 1) C = 1;
    for (;;) {
        grad_chunk_smem(C, a->dk, a->dv, tile, fac, vjp, walk);
        if (*fac <= budget && *vjp <= budget && *walk <= budget) return C;
        if (C == 1) return 0;
        C = (C + 1) / 2;
    }
}

size_t smem_budget(const vlacu_device *dev, size_t static_smem) {
    const size_t used = static_smem + kSmemMargin;
    return dev->smem_optin > used ? dev->smem_optin - used : 0;
}

/* X, dX [dk][ld_of(dv)] float; A, dA [dk][ld_of(dk)] double (vla): shared memory in the order
 * A, dA, dX, X (the matrices read most per token first) while they fit, else the head's slice. */
gplan seq_plan(const vlacu_args *a, size_t budget) {
    gplan p;
    size_t by[GB_N];
    by[GB_X] = by[GB_DX] = sat_mul(sat_mul((size_t)a->dk, (size_t)ld_of(a->dv)), 4);
    by[GB_A] = by[GB_DA] = a->mech == VLACU_VLA ? sat_mul(sat_mul((size_t)a->dk, (size_t)ld_of(a->dk)), 8) : 0;
    static const int prio[GB_N] = {GB_A, GB_DA, GB_DX, GB_X};
    size_t s = 0, g = 0;
    for (int k = 0; k < GB_N; k++) {
        const int id = prio[k];
        p.off[id] = -1, p.smem[id] = 0;
        if (by[id] == 0) continue;
        const size_t sz = align_up(by[id], 16);
        if (sz <= budget && s + sz <= budget) {
            p.off[id] = (long long)s, p.smem[id] = 1;
            s += sz;
        } else {
            p.off[id] = (long long)g;
            g = sat_add(g, align_up(sz, kAlign));
        }
    }
    p.smem_bytes = s;
    p.spill_bytes = align_up(g, kAlign);
    return p;
}

int make_layout(const vlacu_args *a, const vlacu_device *dev, glayout *L) {
    memset(L, 0, sizeof *L);
    const size_t BH = (size_t)a->B * a->H, T = (size_t)a->T, dk = (size_t)a->dk, dv = (size_t)a->dv;
    bump w = {0};
    if (a->mech == VLACU_SOFTMAX) {
        L->tile = grad_softmax_pick_tile(a->dk, a->dv, smem_budget(dev, grad_softmax_static_smem()), &L->smem_rows,
                                         &L->smem_keys);
        if (L->tile == 0) return (int)cudaErrorInvalidConfiguration;
        L->lse = w.take(sat_mul(sat_mul(BH, T), 4));
        L->D = w.take(sat_mul(sat_mul(BH, T), 4));
        L->total = w.off;
        return 0;
    }
    const bool vla = a->mech == VLACU_VLA, linear = a->mech == VLACU_LINEAR;
    const bool has_n = linear || (vla && a->normalize);
    const size_t rows = sat_mul(sat_mul(sat_mul(BH, T), dk), 4);
    const bool need_kf = linear || (vla && a->normalize), need_kh = !linear;
    L->Qp = w.take(rows);
    L->Kf = need_kf ? w.take(rows) : SIZE_MAX;
    L->Kh = need_kh ? w.take(rows) : SIZE_MAX;
    L->Up = vla ? w.take(rows) : SIZE_MAX;
    L->dQp = w.take(rows);
    L->dKf = need_kf ? w.take(rows) : SIZE_MAX;
    L->dKh = need_kh ? w.take(rows) : SIZE_MAX;
    L->dU = vla ? w.take(rows) : SIZE_MAX;

    if (a->algo == VLACU_CHUNKED) {
        /* The walks' column tile: 32 value columns, narrower (down to 8) while the heads' tiles would
         * leave multiprocessors idle; a narrower tile also shortens each chunk's step, which is the
         * walk's latency when there are few heads. */
        int tile = 32;
        while (tile > 8 && (long long)BH * ((a->dv + tile - 1) / tile) < dev->sm_count) tile /= 2;
        if (tile > a->dv) tile = a->dv;
        const int C = chunk_form_C(a, smem_budget(dev, grad_chunk_static_smem()), tile, &L->smem_fac, &L->smem_vjp,
                                   &L->smem_walk);
        if (C > 0) {
            L->chunked = true;
            L->C = C, L->ctile = tile;
            L->nck = (a->T + C - 1) / C;
            const size_t nck = (size_t)L->nck, st = sat_mul(sat_mul(sat_mul(BH, nck), dk * dv), 4);
            L->N = has_n ? w.take(rows) : SIZE_MAX;
            L->dr = has_n ? w.take(sat_mul(sat_mul(BH, T), 4)) : SIZE_MAX;
            L->Y = w.take(sat_mul(sat_mul(sat_mul(BH, T), dv), 4));
            L->Wt = linear ? SIZE_MAX : w.take(rows);
            L->Wd = w.take(rows);
            L->gamL = w.take(sat_mul(sat_mul(BH, nck), 4));
            L->ckX = w.take(st);
            L->ckH = w.take(st);
            if (vla) {
                const size_t am = sat_mul(sat_mul(dk, (size_t)ld_of(a->dk)), 8);
                L->Aw = w.take(rows);
                L->dAw = w.take(rows);
                L->Zs = w.take(sat_mul(rows, 2));
                L->tok = w.take(sat_mul(sat_mul(BH, T), 24));
                L->ckA = w.take(sat_mul(sat_mul(sat_mul(BH, nck + 1), dk * dk), 8));
                L->smem_a = sat_mul(am, 2) <= smem_budget(dev, grad_chunk_apart_static_smem()) ? 2 * am : 0;
                L->Aws = L->smem_a ? SIZE_MAX : w.take(sat_mul(sat_mul(BH, am), 2));
                L->Sg = grad_chunk_apart_segment()
                            ? w.take(sat_mul(sat_mul(BH, grad_chunk_apart_segment_doubles(C, a->dk)), 8))
                            : SIZE_MAX;
            }
            L->total = w.off;
            return 0;
        }
    }

    L->C = a->chunk < a->T ? a->chunk : a->T;
    if (L->C < 1) L->C = 1;
    L->nck = (a->T + L->C - 1) / L->C;
    const size_t C = (size_t)L->C, nck = (size_t)L->nck;
    L->plan = seq_plan(a, smem_budget(dev, grad_seq_static_smem()));
    bump s = {L->plan.spill_bytes};
    seq_layout &Y = L->lay;
    Y.ckX = s.take(sat_mul(sat_mul(nck, dk * dv), 4));
    Y.ckA = s.take(vla ? sat_mul(sat_mul(nck, dk * dk), 8) : 0);
    Y.ckN = s.take(has_n ? sat_mul(nck, dk * 4) : 0);
    Y.sX = s.take(sat_mul(C, dk * dv * 4));
    Y.sZ = s.take(vla ? C * dk * 8 : 0);
    Y.sDen = s.take(vla ? C * 8 : 0);
    Y.sYn = s.take(vla ? C * 8 : 0);
    Y.sGate = s.take(vla ? C * 8 : 0);
    Y.sW = s.take(C * dk * 4);
    Y.sE = s.take(C * dv * 4);
    Y.sN = s.take(has_n ? C * dk * 4 : 0);
    Y.bytes = align_up(s.off, kAlign);
    L->slices = w.take(sat_mul(BH, Y.bytes));
    L->total = w.off;
    return 0;
}

} // namespace

extern "C" int vlacu_backward_workspace_bytes(const vlacu_args *a, const vlacu_device *dev, size_t *bytes) {
    if (a->mech == VLACU_DELTA_PAPER) { /* vla_delta_paper.cu plans its own call */
        *bytes = dpaper_backward_workspace(*a, *dev);
        return 0;
    }
    glayout L;
    const int e = make_layout(a, dev, &L);
    if (e) return e;
    *bytes = L.total;
    return 0;
}

extern "C" int vlacu_backward(const vlacu_args *a, const vlacu_grads *g, const vlacu_device *dev, void *workspace,
                              size_t workspace_bytes, void *stream) {
    if (a->mech == VLACU_DELTA_PAPER)
        return (int)dpaper_backward(*a, *g, *dev, workspace, workspace_bytes, (cudaStream_t)stream);
    glayout L;
    int e = make_layout(a, dev, &L);
    if (e) return e;
    if (L.total == SIZE_MAX || workspace_bytes < L.total) return (int)cudaErrorInvalidValue;
    unsigned char *W = (unsigned char *)workspace;
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t ce = cudaSuccess;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        ce = (x);                                                                                                      \
        if (ce != cudaSuccess) return (int)ce;                                                                         \
    } while (0)

    if (a->mech == VLACU_SOFTMAX) {
        if (!g->dq && !g->dk && !g->dv) return 0;
        gsm_params p;
        memset(&p, 0, sizeof p);
        p.a = *a;
        p.dO = g->dO;
        p.dq = g->dq, p.dk = g->dk, p.dv = g->dv;
        p.lse = (float *)(W + L.lse), p.D = (float *)(W + L.D);
        p.tile = L.tile, p.smem_rows = L.smem_rows, p.smem_keys = L.smem_keys;
        TRY(launch_grad_softmax(p, st));
        return 0;
    }

    if (!g->dq && !g->dk && !g->dv && !g->du && !g->dbeta && !g->dg && !g->dS_0 && !g->dA_0 && !g->dn_0) return 0;
    auto at = [&](size_t off) { return off == SIZE_MAX ? (float *)nullptr : (float *)(W + off); };
    gprep_params pp;
    memset(&pp, 0, sizeof pp);
    pp.a = *a;
    pp.Qp = at(L.Qp), pp.Kf = at(L.Kf), pp.Kh = at(L.Kh), pp.Up = at(L.Up);
    pp.dQp = at(L.dQp), pp.dKf = at(L.dKf), pp.dKh = at(L.dKh), pp.dU = at(L.dU);
    pp.dq = g->dq, pp.dk = g->dk, pp.du = g->du;
    TRY(launch_grad_prep(pp, st));

    gseq_params sp;
    memset(&sp, 0, sizeof sp);
    sp.a = *a;
    sp.Qp = pp.Qp, sp.Kf = pp.Kf, sp.Kh = pp.Kh, sp.Up = pp.Up;
    sp.dO = g->dO, sp.dS_end = g->dS_end, sp.dA_end = g->dA_end, sp.dn_end = g->dn_end;
    sp.dQp = at(L.dQp), sp.dKf = at(L.dKf), sp.dKh = at(L.dKh), sp.dU = at(L.dU);
    sp.dv = g->dv, sp.dbeta = g->dbeta, sp.dg = g->dg, sp.dS0 = g->dS_0, sp.dA0 = g->dA_0, sp.dn0 = g->dn_0;
    if (L.chunked) {
        gchunk_params cp;
        memset(&cp, 0, sizeof cp);
        cp.a = *a;
        cp.Qp = pp.Qp, cp.Kh = pp.Kh, cp.Kf = pp.Kf;
        cp.dO = g->dO, cp.dS_end = g->dS_end, cp.dn_end = g->dn_end;
        cp.dQp = at(L.dQp), cp.dKh = at(L.dKh), cp.dKf = at(L.dKf);
        cp.dv = g->dv, cp.dbeta = g->dbeta, cp.dg = g->dg, cp.dS0 = g->dS_0, cp.dn0 = g->dn_0;
        cp.N = at(L.N), cp.dr = at(L.dr), cp.Y = at(L.Y), cp.Wt = at(L.Wt), cp.Wd = at(L.Wd), cp.gamL = at(L.gamL);
        cp.ckX = at(L.ckX), cp.ckH = at(L.ckH);
        cp.C = L.C, cp.nck = L.nck, cp.tile = L.ctile;
        cp.smem_fac = L.smem_fac, cp.smem_vjp = L.smem_vjp, cp.smem_walk = L.smem_walk;
        if (a->mech == VLACU_VLA) {
            auto atd = [&](size_t off) { return off == SIZE_MAX ? (double *)nullptr : (double *)(W + off); };
            cp.Up = pp.Up, cp.dU = at(L.dU), cp.dA_end = g->dA_end, cp.dA0 = g->dA_0;
            cp.Aw = at(L.Aw), cp.dAw = at(L.dAw);
            cp.Zs = atd(L.Zs), cp.tok = atd(L.tok), cp.ckA = atd(L.ckA), cp.Aws = atd(L.Aws), cp.Sg = atd(L.Sg);
            cp.smem_a = L.smem_a;
        }
        TRY(launch_grad_chunk(cp, st));
        if (g->dq || g->dk || g->du) TRY(launch_grad_prep_back(pp, st));
        return 0;
    }
    sp.C = L.C, sp.nck = L.nck;
    sp.plan = L.plan;
    sp.lay = L.lay;
    sp.slices = W + L.slices;
    TRY(launch_grad_seq(sp, st));

    if (g->dq || g->dk || g->du) TRY(launch_grad_prep_back(pp, st));
    return 0;
#undef TRY
}
