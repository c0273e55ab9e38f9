/* Plans one call (the workspace it needs, where each kernel's working arrays live) and enqueues
 * the kernels of the resolved algorithm. The same layout function serves the size query and
 * the launch, so the two always agree. */
#include "vla_delta_paper.cuh"
#include "vla_kernels.cuh"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

using namespace vlacu;

namespace {

const size_t kAlign = 256;
const size_t kSmemMargin = 1024; /* kept free below the device's per-block limit */

/* Saturating size arithmetic: SIZE_MAX stays SIZE_MAX. */
size_t sat_add(size_t x, size_t y) { return x > SIZE_MAX - y ? SIZE_MAX : x + y; }
size_t sat_mul(size_t x, size_t y) { return (x != 0 && y > SIZE_MAX / x) ? SIZE_MAX : x * y; }
size_t align_up(size_t x, size_t al) { return x > SIZE_MAX - al ? SIZE_MAX : (x + al - 1) / al * al; }

/* rows x ld_of(cols) elements of `elt` bytes: a working array's footprint. */
size_t mat_bytes(size_t rows, int cols, size_t elt) { return sat_mul(sat_mul(rows, (size_t)ld_of(cols)), elt); }

/* Shared memory first, in priority order, while it fits; the rest in the block's global slice. */
bufplan place(const size_t bytes[B_NBUF], const int *prio, int nprio, size_t budget) {
    bufplan p;
    for (int i = 0; i < B_NBUF; i++) p.off[i] = -1, p.smem[i] = 0;
    size_t s = 0, g = 0;
    for (int k = 0; k < nprio; k++) {
        const int id = prio[k];
        if (bytes[id] == 0) continue;
        const size_t sz = align_up(bytes[id], 16);
        if (sz <= budget && s + sz <= budget) {
            p.off[id] = (long long)s;
            p.smem[id] = 1;
            s += sz;
        } else {
            p.off[id] = (long long)g;
            g = sat_add(g, align_up(sz, kAlign));
        }
    }
    p.smem_bytes = s;
    p.gbytes = align_up(g, kAlign);
    return p;
}

size_t smem_budget(const vlacu_device *dev, size_t static_smem) {
    const size_t used = static_smem + kSmemMargin;
    return dev->smem_optin > used ? dev->smem_optin - used : 0;
}

bufplan engine_plan(const vlacu_args *a, int mode, int cmax, int ncols, size_t budget) {
    size_t by[B_NBUF];
    memset(by, 0, sizeof by);
    const int dk = a->dk;
    const bool vla = a->mech == VLACU_VLA, chunked = mode == M_CHUNKED;
    const bool a_modes = mode == M_CHUNKED || mode == M_CARRY || mode == M_SEGMAP || mode == M_ALONLY;
    if (mode == M_CHUNKED || mode == M_SEGMAP || mode == M_SEGOUT) by[B_X] = mat_bytes(dk, ncols, 4);
    if ((vla && a_modes) || mode == M_GRAM) by[B_A] = mat_bytes(dk, dk, 4);
    if (mode != M_GRAM) by[B_K] = mat_bytes(cmax, dk, 4);
    if (mode == M_CHUNKED || mode == M_SEGOUT) by[B_Q] = mat_bytes(cmax, dk, 4);
    if (vla || (chunked && a->mech == VLACU_DELTA && a->beta)) by[B_U] = mat_bytes(cmax, dk, 4);
    if (vla && a_modes) by[B_Z] = mat_bytes(cmax, dk, 4);
    if (mode == M_CHUNKED || mode == M_SEGMAP || mode == M_SEGOUT) by[B_E] = mat_bytes(cmax, ncols, 4);
    if (mode != M_GRAM) by[B_C] = mat_bytes(cmax, cmax, 4);
    if (chunked && a->mech == VLACU_DELTA && a->g) {
        by[B_D] = mat_bytes(cmax, cmax, 4);
        by[B_GV] = (size_t)cmax * 4;
        by[B_GAM] = (size_t)cmax * 4;
    }
    static const int prio[] = {B_GV, B_GAM, B_C, B_K, B_U, B_E, B_Z, B_Q, B_X, B_A, B_D};
    return place(by, prio, (int)(sizeof prio / sizeof prio[0]), budget);
}

bufplan seq_plan(const vlacu_args *a, size_t budget) {
    size_t by[B_NBUF];
    memset(by, 0, sizeof by);
    by[B_X] = mat_bytes(a->dk, a->dv, 4);
    if (a->mech == VLACU_VLA) by[B_A] = mat_bytes(a->dk, a->dk, 8);
    static const int prio[] = {B_A, B_X};
    return place(by, prio, 2, budget);
}

struct layout {
    size_t total;
    size_t spill, AlG, Ast, gram, Minv, dscr, maps, mtmp, Sst, tmpS, flags, normw;
    bufplan pl_main, pl_gram, pl_carry, pl_map, pl_out;
    int64_t nchunks;
    int seg, nseg, cmax;
    int tile;
    size_t tile_smem;
    int smx_split;   /* softmax: 0 = softmax_kernel, else the tensor-core form's key parts */
    size_t smx_part; /* its partial results (smx_split > 1) */
    size_t engine_smem_max;
    bool cp; /* the chunk-parallel form (vla_chunkpar.cu) */
    size_t cpMd, cpGp, cpAl, cpW, cpY, cpXst, cpAend, cpPm, cpQm, cpSeg, cpSst;
    int bv, wlen, wnseg; /* the walk's value columns a block and segments (chunkpar_walk) */
};

/* Bump allocation of the workspace, 256-byte aligned. */
struct bump {
    size_t off;
    size_t take(size_t bytes) {
        const size_t at = off;
        off = sat_add(off, align_up(bytes, kAlign));
        return at;
    }
};

bool needs_norm(const vlacu_args *a) {
    if (a->algo == VLACU_SEQUENTIAL || a->algo == VLACU_FUSED) return false; /* the recurrence normalises inline */
    return a->mech == VLACU_LINEAR || (a->mech == VLACU_VLA && a->normalize);
}

int make_layout(const vlacu_args *a, const vlacu_device *dev, layout *L) {
    memset(L, 0, sizeof *L);
    const size_t BH = (size_t)a->B * a->H, T = (size_t)a->T, dk = (size_t)a->dk, dv = (size_t)a->dv;
    const size_t f4 = 4;
    bump w = {0};
    L->cmax = a->chunk < a->T ? a->chunk : a->T;
    if (a->mech == VLACU_DELTA_PAPER) { /* sequential only: vla_delta_paper.cu plans its own call */
        L->total = dpaper_forward_workspace(*a, *dev);
        return 0;
    }
    switch (a->algo) {
    case VLACU_FUSED: {
        const size_t budget = smem_budget(dev, softmax_static_smem());
        L->tile = softmax_pick_tile(a->dk, a->dv, budget, &L->tile_smem);
        if (L->tile == 0) return (int)cudaErrorInvalidConfiguration;
        size_t part = 0;
        L->smx_split = softmax_tc_plan(*a, *dev, &part);
        if (part) L->smx_part = w.take(part);
        break;
    }
    case VLACU_SEQUENTIAL: {
        if (seq_regs_applies(*a)) break; /* states in registers: no workspace */
        L->pl_main = seq_plan(a, smem_budget(dev, seq_static_smem()));
        L->spill = w.take(sat_mul(BH, L->pl_main.gbytes));
        break;
    }
    case VLACU_CHUNKED: {
        const size_t budget = smem_budget(dev, engine_static_smem());
        L->nchunks = count_chunks(a->T, a->chunk, a->refresh, a->t0); /* refresh = 0 unless vla */
        L->seg = (int)(L->nchunks < INT32_MAX ? L->nchunks : INT32_MAX);
        L->nseg = 1;
        L->pl_main = engine_plan(a, M_CHUNKED, L->cmax, a->dv, budget);
        L->engine_smem_max = L->pl_main.smem_bytes;
        L->cp = chunkpar_applies(*a, *dev);
        /* chunk-parallel with A_in: the engine still runs the heads whose A_in is not SPD */
        if (!L->cp || a->A_in) L->spill = w.take(sat_mul(BH, L->pl_main.gbytes));
        if (L->cp) {
            const size_t DK = (size_t)chunkpar_dk(*a), nch = (size_t)L->nchunks;
            L->seg = chunkpar_seg(*a, *dev, (int)L->nchunks);
            L->nseg = (int)((L->nchunks + L->seg - 1) / L->seg);
            if (a->mech == VLACU_VLA) {
                L->cpMd = w.take(sat_mul(sat_mul(BH, (size_t)L->nseg), DK * DK * 8));
                if (L->nseg > 1)
                    L->cpGp = w.take(sat_mul(sat_mul(BH, (size_t)(L->nseg - 1) * chunkpar_gram_parts(L->seg)), DK * DK * 4));
            }
            /* VLA_CP_WS_PAD=bytes (development): that much unused space before each of the
             * arrays the A part writes, to see whether a block's speed follows where they lie */
            static const size_t ws_pad = [] {
                const char *e = getenv("VLA_CP_WS_PAD");
                return e && *e ? (size_t)strtoull(e, nullptr, 10) : (size_t)0;
            }();
            auto padded = [&](size_t bytes) {
                if (ws_pad) w.take(ws_pad);
                return w.take(bytes);
            };
            if (a->mech != VLACU_LINEAR) { /* linear: P = I, W = 0, Y = V, Al = phi(k) (none stored) */
                L->cpAl = padded(sat_mul(sat_mul(BH, T), DK * f4));
                L->cpW = padded(sat_mul(sat_mul(BH, T), DK * f4));
                L->cpY = padded(sat_mul(sat_mul(BH, T), dv * f4));
                L->cpPm = padded(sat_mul(sat_mul(BH, nch), DK * DK * f4));
            }
            L->cpXst = padded(sat_mul(sat_mul(BH, nch), DK * dv * f4));
            L->cpQm = padded(sat_mul(sat_mul(BH, nch), DK * dv * f4));
            if (a->mech == VLACU_VLA) L->cpAend = w.take(sat_mul(BH, dk * dk * f4));
            chunkpar_walk(*a, *dev, (int)L->nchunks, &L->bv, &L->wlen, &L->wnseg);
            if (L->wnseg > 1) {
                L->cpSeg = w.take(sat_mul(sat_mul(BH, (size_t)L->wnseg), DK * (DK + dv) * f4));
                L->cpSst = w.take(sat_mul(sat_mul(BH, (size_t)L->wnseg), DK * dv * f4));
            }
            if (a->A_in) {
                L->Minv = w.take(sat_mul(BH, dk * dk * 8));
                L->dscr = w.take(sat_mul(BH, dk * dk * 8));
                L->flags = w.take(BH * 4);
            }
        }
        break;
    }
    case VLACU_TWO_LEVEL:
    case VLACU_SCAN: {
        const size_t budget = smem_budget(dev, engine_static_smem());
        const bool tl = a->algo == VLACU_TWO_LEVEL, gram_path = a->refresh == 0;
        L->nchunks = count_chunks(a->T, a->chunk, a->refresh, a->t0);
        const int64_t seg = a->segment_chunks > 0 ? a->segment_chunks : vlacu_pick_segment(a, dev, L->nchunks);
        L->seg = (int)(seg < L->nchunks ? seg : L->nchunks);
        if (L->seg < 1) L->seg = 1;
        L->nseg = (int)((L->nchunks + L->seg - 1) / L->seg);
        const size_t nseg = (size_t)L->nseg;
        L->pl_gram = engine_plan(a, M_GRAM, L->cmax, a->dv, budget);
        L->pl_carry = engine_plan(a, M_CARRY, L->cmax, a->dv, budget);
        L->pl_map = engine_plan(a, tl ? M_SEGMAP : M_ALONLY, L->cmax, tl ? a->dk + a->dv : a->dv, budget);
        L->pl_out = engine_plan(a, M_SEGOUT, L->cmax, a->dv, budget);
        size_t spill = sat_mul(BH, L->pl_carry.gbytes);
        const size_t per_seg[3] = {gram_path ? L->pl_gram.gbytes : 0, L->pl_map.gbytes, tl ? L->pl_out.gbytes : 0};
        for (int i = 0; i < 3; i++) {
            const size_t s = sat_mul(sat_mul(BH, nseg), per_seg[i]);
            if (s > spill) spill = s;
        }
        size_t smax = L->pl_carry.smem_bytes;
        if (gram_path && L->pl_gram.smem_bytes > smax) smax = L->pl_gram.smem_bytes;
        if (L->pl_map.smem_bytes > smax) smax = L->pl_map.smem_bytes;
        if (tl && L->pl_out.smem_bytes > smax) smax = L->pl_out.smem_bytes;
        L->engine_smem_max = smax;
        L->spill = w.take(spill);
        L->AlG = w.take(sat_mul(sat_mul(BH, T), dk * f4));
        L->Ast = w.take(sat_mul(sat_mul(BH, nseg), dk * dk * f4));
        if (gram_path) {
            L->gram = w.take(sat_mul(sat_mul(BH, nseg), dk * dk * 8));
            if (a->A_in) L->Minv = w.take(sat_mul(BH, dk * dk * 8));
            L->dscr = w.take(sat_mul(sat_mul(BH, nseg), dk * dk * 8));
        }
        L->flags = w.take(BH * 4);
        const size_t map_f = dk * (dk + dv) * f4;
        if (tl) {
            L->maps = w.take(sat_mul(sat_mul(BH, nseg), map_f));
            L->mtmp = w.take(sat_mul(sat_mul(BH, (nseg + 1) / 2), map_f));
            L->Sst = w.take(sat_mul(sat_mul(BH, nseg), dk * dv * f4));
        } else {
            L->maps = w.take(sat_mul(sat_mul(BH, T), map_f));
            L->mtmp = w.take(sat_mul(sat_mul(BH, (T + 1) / 2), map_f));
            L->tmpS = w.take(sat_mul(BH, dk * dv * f4));
        }
        break;
    }
    default: return (int)cudaErrorInvalidValue;
    }
    if (needs_norm(a)) {
        const size_t nb = (T + VLACU_NORM_NB - 1) / VLACU_NORM_NB;
        L->normw = w.take(sat_mul(sat_mul(BH, nb), dk * f4));
    }
    L->total = w.off;
    return 0;
}

struct host_clock {
    int n = 0;
    const char *what[16];
    struct timespec t[16];
};
host_clock g_marks; /* (development: one caller at a time) */

} // namespace

bool vlacu::host_marks_on() {
    static const bool on = [] {
        const char *e = getenv("VLA_CUDA_HOST_TIMES");
        return e && e[0] == '1';
    }();
    return on;
}

void vlacu::host_mark(const char *what) {
    if (!host_marks_on() || g_marks.n >= 16) return;
    clock_gettime(CLOCK_MONOTONIC, &g_marks.t[g_marks.n]);
    g_marks.what[g_marks.n++] = what;
}

static void host_marks_print() {
    if (!host_marks_on() || g_marks.n < 1) return;
    fprintf(stderr, "host (us since vlacu_forward began):");
    for (int i = 1; i < g_marks.n; i++)
        fprintf(stderr, " %s %.2f;", g_marks.what[i],
                1e6 * (double)(g_marks.t[i].tv_sec - g_marks.t[0].tv_sec) + 1e-3 * (double)(g_marks.t[i].tv_nsec - g_marks.t[0].tv_nsec));
    fprintf(stderr, "\n");
    g_marks.n = 0;
}

extern "C" int vlacu_graph_ok(const vlacu_args *a) {
#ifdef VLA_CUDA_EMU
    (void)a;
    return 0; /* (the emulator has no graphs) */
#else
    static const bool on = [] {
        const char *g = getenv("VLA_CUDA_GRAPHS");
        if (g && g[0] == '0') return false;
        for (const char *v : {"VLA_CUDA_KERNEL_TIMES", "VLA_CP_TIMELINE", "VLA_CUDA_HOST_TIMES"}) {
            const char *e = getenv(v);
            if (e && e[0] == '1') return false;
        }
        return true;
    }();
    return on && a->algo != VLACU_SEQUENTIAL && a->algo != VLACU_FUSED;
#endif
}

extern "C" int64_t vlacu_count_chunks(int T, int C, int R, int64_t t0) { return count_chunks(T, C, R, t0); }

extern "C" void vlacu_chunk_bounds(int64_t k, int T, int C, int R, int64_t t0, int *ts, int *te) {
    chunk_bounds(k, T, C, R, t0, ts, te);
}

extern "C" int vlacu_pick_segment(const vlacu_args *a, const vlacu_device *dev, int64_t nchunks) {
    /* Enough segments that the per-segment phases fill the device (a few blocks per
     * multiprocessor), and no more: the scan across segments grows with their number. */
    const int64_t BH = (int64_t)a->B * a->H;
    const int64_t target = 4 * (int64_t)(dev->sm_count > 0 ? dev->sm_count : 1);
    int64_t nseg = (target + BH - 1) / BH;
    if (nseg > nchunks) nseg = nchunks;
    if (nseg < 1) nseg = 1;
    const int64_t seg = (nchunks + nseg - 1) / nseg;
    return (int)(seg < INT32_MAX ? seg : INT32_MAX);
}

extern "C" int vlacu_workspace_bytes(const vlacu_args *a, const vlacu_device *dev, size_t *bytes) {
    layout L;
    const int e = make_layout(a, dev, &L);
    if (e) return e;
    *bytes = L.total;
    return 0;
}

static int forward_inner(const vlacu_args *a, const vlacu_device *dev, void *workspace, size_t workspace_bytes,
                         void *stream, const vlacu_aux *aux);

extern "C" int vlacu_forward(const vlacu_args *a, const vlacu_device *dev, void *workspace, size_t workspace_bytes,
                             void *stream, const vlacu_aux *aux) {
    if (host_marks_on()) g_marks.n = 0, host_mark("enter");
    const int r = forward_inner(a, dev, workspace, workspace_bytes, stream, aux);
    host_mark("return");
    host_marks_print();
    return r;
}

static int forward_inner(const vlacu_args *a, const vlacu_device *dev, void *workspace, size_t workspace_bytes,
                         void *stream, const vlacu_aux *aux) {
    layout L;
    int e = make_layout(a, dev, &L);
    host_mark("layout");
    if (e) return e;
    if (L.total == SIZE_MAX || workspace_bytes < L.total) return (int)cudaErrorInvalidValue;
    unsigned char *W = (unsigned char *)workspace;
    cudaStream_t st = (cudaStream_t)stream;
    const unsigned BH = (unsigned)(a->B * a->H);
    cudaError_t ce = cudaSuccess;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        ce = (x);                                                                                                      \
        if (ce != cudaSuccess) return (int)ce;                                                                         \
    } while (0)

    if (a->mech == VLACU_DELTA_PAPER) {
        TRY(dpaper_forward(*a, *dev, workspace, workspace_bytes, st));
        return 0;
    }
    if (a->algo == VLACU_FUSED) {
        TRY(launch_softmax(*a, L.tile, L.tile_smem, L.smx_split, (float *)(W + L.smx_part), st));
        return 0;
    }
    if (a->algo == VLACU_SEQUENTIAL && seq_regs_applies(*a)) {
        TRY(launch_seq_regs(*a, st));
        return 0;
    }
    if (a->algo == VLACU_SEQUENTIAL) {
        seq_params p;
        p.a = *a;
        p.plan = L.pl_main;
        p.spill = W + L.spill;
        TRY(launch_seq(p, st));
        return 0;
    }

    if (L.engine_smem_max > 48 * 1024) TRY(engine_set_smem(L.engine_smem_max));
    engine_params ep;
    memset(&ep, 0, sizeof ep);
    ep.a = *a;
    ep.cmax = L.cmax;
    ep.nchunks = L.nchunks;
    ep.seg = L.seg;
    ep.nseg = L.nseg;
    ep.spill = W + L.spill;

    if (a->algo == VLACU_CHUNKED && L.cp) {
        cp_params cpp;
        memset(&cpp, 0, sizeof cpp);
        cpp.a = *a;
        cpp.nch = (int)L.nchunks;
        cpp.C = L.cmax;
        cpp.seg = L.seg, cpp.nseg = L.nseg;
        cpp.Md = (double *)(W + L.cpMd);
        cpp.Gp = (float *)(W + L.cpGp), cpp.gparts = chunkpar_gram_parts(L.seg);
        cpp.Al = (float *)(W + L.cpAl), cpp.W = (float *)(W + L.cpW), cpp.Y = (float *)(W + L.cpY);
        cpp.Xst = (float *)(W + L.cpXst), cpp.Aend = (float *)(W + L.cpAend);
        cpp.Pm = (float *)(W + L.cpPm), cpp.Qm = (float *)(W + L.cpQm);
        cpp.wlen = L.wlen, cpp.wnseg = L.wnseg;
        cpp.apart_minb = chunkpar_apart_minb(*a, *dev, (int)L.nseg);
        cpp.sfac_minb = chunkpar_sfac_minb(*a, *dev, (int)L.nchunks);
        cpp.sms = dev->sm_count > 0 ? dev->sm_count : 1;
        cpp.cc = dev->cc_major;
        if (L.wnseg > 1) cpp.Seg = (float *)(W + L.cpSeg), cpp.Sst = (float *)(W + L.cpSst);
        if (a->A_in) { /* A_in^{-1} for the Gram prefix; heads where it fails go to the engine */
            aux_params ap;
            memset(&ap, 0, sizeof ap);
            ap.a = *a;
            ap.Minv = (double *)(W + L.Minv), ap.dscratch = (double *)(W + L.dscr), ap.flags = (int *)(W + L.flags);
            TRY(cudaMemsetAsync(ap.flags, 0, (size_t)BH * sizeof(int), st));
            TRY(launch_ain_inverse(ap, st));
            cpp.Minv = ap.Minv;
            cpp.flags = ap.flags;
        }
        TRY(launch_chunkpar(cpp, L.bv, st, aux));
        if (a->A_in) {
            ep.mode = M_CHUNKED;
            ep.ncols = a->dv;
            ep.plan = L.pl_main;
            ep.flags = (int *)(W + L.flags);
            TRY(launch_engine(ep, BH, st));
        }
    } else if (a->algo == VLACU_CHUNKED) {
        ep.mode = M_CHUNKED;
        ep.ncols = a->dv;
        ep.plan = L.pl_main;
        TRY(launch_engine(ep, BH, st));
    } else { /* two-level or scan (vla) */
        const bool tl = a->algo == VLACU_TWO_LEVEL;
        ep.AlG = (float *)(W + L.AlG);
        ep.Ast = (float *)(W + L.Ast);
        ep.gram = a->refresh == 0 ? (double *)(W + L.gram) : nullptr;
        ep.maps = (float *)(W + L.maps);
        ep.Sst = tl ? (float *)(W + L.Sst) : nullptr;
        ep.flags = (int *)(W + L.flags);
        aux_params ap;
        memset(&ap, 0, sizeof ap);
        ap.a = *a;
        ap.nseg = L.nseg;
        ap.AlG = ep.AlG, ap.Ast = ep.Ast, ap.maps = ep.maps, ap.mtmp = (float *)(W + L.mtmp);
        ap.Sst = ep.Sst, ap.tmpS = tl ? nullptr : (float *)(W + L.tmpS);
        ap.gram = ep.gram;
        ap.Minv = a->refresh == 0 && a->A_in ? (double *)(W + L.Minv) : nullptr;
        ap.dscratch = a->refresh == 0 ? (double *)(W + L.dscr) : nullptr;
        ap.flags = ep.flags;
        const unsigned nblk = (unsigned)L.nseg * BH;

        TRY(cudaMemsetAsync(ep.flags, 0, (size_t)BH * sizeof(int), st));
        if (a->refresh == 0) {
            /* A at each segment start = (A_0^{-1} + sum of the earlier segments' U^T U)^{-1} */
            if (a->A_in) TRY(launch_ain_inverse(ap, st));
            ep.mode = M_GRAM;
            ep.ncols = a->dv;
            ep.plan = L.pl_gram;
            TRY(launch_engine(ep, nblk, st));
            TRY(launch_gram_prefix(ap, st));
            TRY(launch_seg_inverse(ap, st));
        }
        /* R > 0, or a head whose A_in (or Gram sum) is not positive definite: carry A chunk to
         * chunk instead. Heads on the Gram path return at once. */
        ep.mode = M_CARRY;
        ep.ncols = a->dv;
        ep.plan = L.pl_carry;
        TRY(launch_engine(ep, BH, st));
        ep.mode = tl ? M_SEGMAP : M_ALONLY;
        ep.ncols = tl ? a->dk + a->dv : a->dv;
        ep.plan = L.pl_map;
        TRY(launch_engine(ep, nblk, st));
        if (tl) {
            TRY(launch_map_scan(ap, L.nseg, st));
            TRY(launch_seg_starts(ap, st));
            ep.mode = M_SEGOUT;
            ep.ncols = a->dv;
            ep.plan = L.pl_out;
            TRY(launch_engine(ep, nblk, st));
        } else {
            TRY(launch_scan_build(ap, st));
            TRY(launch_map_scan(ap, a->T, st));
            TRY(launch_scan_out(ap, st));
            TRY(launch_scan_final(ap, st));
        }
    }
    if (needs_norm(a)) TRY(launch_normalize(*a, (float *)(W + L.normw), st));
    return 0;
#undef TRY
}
