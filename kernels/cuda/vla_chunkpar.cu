/* The chunk-parallel form's host side (vla_chunkpar.cuh describes the form; its kernels are in
 * vla_chunkpar_gram.cu, vla_chunkpar_factors.cu, vla_chunkpar_walk.cu and vla_chunkpar_output.cu): run<DK> plans and
 * launches one call's kernels, and the chunkpar_* functions (vla_kernels.cuh) decide whether the
 * form applies and how a call is cut (segments, walk width, register caps). Development timers
 * (VLA_CUDA_KERNEL_TIMES, VLA_CP_TIMELINE) print here too. */
#include "vla_chunkpar.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace vlacu {
namespace cp {

/* A launch of one of the form's kernels; pdl: with programmatic stream serialization (sm_90+, see
 * pdl_enter: every kernel here starts with it). */
static cudaError_t launch_one(void (*kern)(const cp_params), unsigned grid, size_t smem, cudaStream_t st,
                              const cp_params &P, bool pdl, unsigned block = NT) {
#ifndef VLA_CUDA_EMU
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = smem, cfg.stream = st;
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at, cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, kern, P);
    }
#else
    (void)pdl;
#endif
    VLACU_LAUNCH(kern, grid, block, smem, st, P);
    return cudaGetLastError();
}

static std::atomic<size_t> smem_set[44][64]; /* per kernel instance and device */

static cudaError_t raise(int slot, void (*kern)(const cp_params), size_t bytes) {
    return raise_smem_limit((const void *)kern, smem_set[slot], bytes);
}

/* VLA_CUDA_KERNEL_TIMES=1 (development): each kernel of a call timed with events on the stream,
 * printed to stderr after the call (which then synchronises). */
struct ktimer {
    bool on;
    cudaEvent_t ev[8];
    int n;
    const char *name[8];
    void start(cudaStream_t st) {
        static const bool env_on = [] {
            const char *e = getenv("VLA_CUDA_KERNEL_TIMES");
            return e && e[0] == '1';
        }(); /* read once a process */
        on = env_on;
        n = 0;
        if (on) mark("start", st);
    }
    void mark(const char *what, cudaStream_t st) {
        if (!on || n >= 8) return;
        cudaEventCreate(&ev[n]);
        cudaEventRecord(ev[n], st);
        name[n++] = what;
    }
    long long *prof = nullptr;
    void finish(const vlacu_args &a) {
        if (!on) return;
        cudaEventSynchronize(ev[n - 1]);
        if (prof) {
            long long h[64];
            cudaMemcpy(h, prof, sizeof h, cudaMemcpyDeviceToHost);
            fprintf(stderr, "apart block cycles:");
            for (int i = 1; i <= 11; i++) fprintf(stderr, " %d:%lld", i, h[i] - h[i - 1]);
            if (h[16] && h[18]) /* phase 11's parts; the inverse on tensor-core devices only */
                fprintf(stderr, " (11: inverse %lld, V wait %lld, W Y %lld, rest %lld)", h[17] ? h[17] - h[10] : 0LL,
                        h[16] - (h[17] ? h[17] : h[10]), h[18] - h[16], h[11] - h[18]);
            if (h[53]) /* phase 1's blocked inverse (at N = 32: its stages) */
                fprintf(stderr, " (1: before the inverse %lld, 16 x 16 inverse %lld, X %lld, S %lld, 16 x 16 inverse %lld,"
                        " Y %lld, out %lld)", h[48] - h[0], h[49] - h[48], h[50] - h[49], h[51] - h[50], h[52] - h[51],
                        h[53] - h[52], h[1] - h[53]);
            if (h[32]) { /* phase 4: chol_z_blocked's stages */
                fprintf(stderr, " (4: diagonal blocks %lld, panel 0 %lld", h[32] - h[3], h[35] - h[32]);
                for (int b = 1; b < 4; b++)
                    fprintf(stderr, ", P_%d %lld R/S %lld panel %lld", b, h[33 + 3 * b] - h[32 + 3 * b], h[34 + 3 * b] - h[33 + 3 * b],
                            h[35 + 3 * b] - h[34 + 3 * b]);
                fprintf(stderr, ")");
            }
            if (h[61] > h[60]) /* phases 1-11 in cycles over the same span on the global timer */
                fprintf(stderr, " (clock %.0f MHz)", 1e3 * (double)(h[11] - h[0]) / (double)(h[61] - h[60]));
            fprintf(stderr, "\nwalk cycles: all steps %lld, step 1 %lld\n", h[13] - h[12], h[15] - h[14]);
            cudaFree(prof);
        }
        fprintf(stderr, "chunkpar B=%d T=%d H=%d dk=%d dv=%d:", a.B, a.T, a.H, a.dk, a.dv);
        for (int i = 1; i < n; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev[i - 1], ev[i]);
            fprintf(stderr, " %s %.1f us", name[i], 1e3 * ms);
        }
        fprintf(stderr, "\n");
        for (int i = 0; i < n; i++) cudaEventDestroy(ev[i]);
    }
};

/* Whether the segmented walk's scan (its middle launch) runs as walk_quad_kernel<2, W_SCAN>: dk <= 32,
 * sm_80+, dv a multiple of 4 (16-byte loads of the map rows), and its dv / 2 blocks a head fit two a
 * multiprocessor. VLA_CP_QSCAN=0 (development) turns it off. */
static bool quad_scan_ok(int dk, int dv, long long heads, int cc, int sms) {
    static const bool env = [] {
        const char *e = getenv("VLA_CP_QSCAN");
        return !(e && e[0] == '0');
    }();
    return env && dk <= 32 && cc >= 8 && dv % 4 == 0 && heads * ((dv + QW_COLS - 1) / QW_COLS) <= 2LL * (sms > 0 ? sms : 1);
}

/* VLA_CP_TIMELINE=1 in a -DVLA_CP_TIMELINE build (development): the kernels' spans on the GPU's global timer for one call, printed
 * after it (the call then waits for its stream): for each kernel, microseconds from the first
 * kernel's entry to its first block's entry, to that block's griddepcontrol.wait returning, and to
 * its last warp's exit. Unlike VLA_CUDA_KERNEL_TIMES, the launches are as in production. */
struct tline {
    unsigned long long *d = nullptr;
    void start(cp_params &p, cudaStream_t st) {
#ifdef VLA_CP_TIMELINE
        static const bool env_on = [] {
            const char *e = getenv("VLA_CP_TIMELINE");
            return e && e[0] == '1';
        }();
#else
        constexpr bool env_on = false;
#endif
        static unsigned long long *buf = nullptr; /* one a process (development), never freed */
        const size_t n = 3 * TL_N + TL_REC * (size_t)TL_BLOCKS + TL_WBLOCKS;
        if (!env_on || (!buf && cudaMalloc((void **)&buf, n * sizeof *buf) != cudaSuccess)) return;
        d = buf;
        cudaMemsetAsync(d, 0xff, 2 * TL_N * sizeof *d, st); /* (not with bench_cuda_targets --gate: finish waits) */
        cudaMemsetAsync(d + 2 * TL_N, 0, (n - 2 * TL_N) * sizeof *d, st);
        p.tl = d;
    }
    /* apart_kernel's blocks: quantiles of entry, wait done, exit and duration (us from t0), and
     * the last blocks to exit with their segment (the Gram parts its fold adds grow with it) */
    static void blocks(const unsigned long long *b, const unsigned long long *wsm, int nblk, int nseg, unsigned long long t0) {
        if (nblk > TL_BLOCKS) nblk = TL_BLOCKS;
        if (nblk < 1 || !b[2]) return;
        static double v[5][TL_BLOCKS];
        static int idx[TL_BLOCKS];
        for (int i = 0; i < nblk; i++) {
            const unsigned long long *r = b + TL_REC * i;
            v[0][i] = 1e-3 * (double)(r[0] - t0), v[1][i] = 1e-3 * (double)(r[1] - t0);
            v[2][i] = 1e-3 * (double)(r[2] - t0), v[3][i] = v[2][i] - v[1][i];
            v[4][i] = r[3] ? 1e-3 * (double)(r[3] - t0) : v[1][i]; /* inversion done (the first segment has none) */
            idx[i] = i;
        }
        /* VLA_CP_TIMELINE_DUMP=file (development): every block's record appended as CSV */
        if (const char *dump = getenv("VLA_CP_TIMELINE_DUMP")) {
            static int call = 0;
            if (FILE *f = fopen(dump, "a")) {
                if (ftell(f) == 0) fprintf(f, "call,nseg,block,segment,smid,entry,wait,inv,p3,p4,p9,p11,exit,cz,vw,tinv,wy\n");
                for (int i = 0; i < nblk; i++) {
                    const unsigned long long *r = b + TL_REC * i;
                    auto us = [&](unsigned long long x) { return x ? 1e-3 * (double)(x - t0) : -1.0; };
                    fprintf(f, "%d,%d,%d,%d,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", call, nseg, i,
                            TL_SEG(i % nseg, nseg), (long long)r[4] - 1, us(r[0]), us(r[1]), us(r[3]), us(r[5]), us(r[6]), us(r[7]),
                            us(r[8]), us(r[2]), us(r[9]), us(r[10]), us(r[11]), us(r[12]));
                }
                fclose(f);
            }
            call++;
        }
        std::sort(idx, idx + nblk, [&](int x, int y) { return v[2][x] > v[2][y]; });
        static const char *const what[4] = {"entry", "wait done", "exit", "run"};
        fprintf(stderr, "apart blocks (%d, us: min / median / max):", nblk);
        for (int k = 0; k < 4; k++) {
            double w[TL_BLOCKS];
            memcpy(w, v[k], nblk * sizeof(double));
            std::sort(w, w + nblk);
            fprintf(stderr, " %s %.1f / %.1f / %.1f;", what[k], w[0], w[nblk / 2], w[nblk - 1]);
        }
        fprintf(stderr, " last out (segment: entry, run):");
        for (int i = 0; i < 6 && i < nblk; i++)
            fprintf(stderr, " %d: %.1f, %.1f;", TL_SEG(idx[i] % nseg, nseg), v[1][idx[i]], v[3][idx[i]]);
        double q[3][4] = {}, c[4] = {};
        for (int i = 0; i < nblk; i++) {
            const int k = 4 * TL_SEG(i % nseg, nseg) / nseg;
            q[0][k] += v[3][i], q[1][k] += v[4][i] - v[1][i], q[2][k] += v[2][i] - v[4][i], c[k]++;
        }
        fprintf(stderr, " by segment quarter, mean run / to the inversion's end / after it:");
        for (int k = 0; k < 4; k++)
            fprintf(stderr, " %.1f / %.1f / %.1f%s", c[k] ? q[0][k] / c[k] : 0.0, c[k] ? q[1][k] / c[k] : 0.0,
                    c[k] ? q[2][k] / c[k] : 0.0, k < 3 ? "," : "");
        /* where the blocks ran: A-part blocks a multiprocessor, and the mean run of the
         * blocks beside the plain walk's waiting blocks against the others */
        static int na[1024], nw[1024];
        memset(na, 0, sizeof na), memset(nw, 0, sizeof nw);
        for (int i = 0; i < nblk; i++)
            if (b[TL_REC * i + 4] && b[TL_REC * i + 4] <= 1024) na[b[TL_REC * i + 4] - 1]++;
        for (int i = 0; i < TL_WBLOCKS; i++)
            if (wsm[i] && wsm[i] <= 1024) nw[wsm[i] - 1]++;
        int used = 0, most = 0, hist[5] = {};
        for (int m = 0; m < 1024; m++) used += na[m] > 0, most = na[m] > most ? na[m] : most, hist[na[m] < 4 ? na[m] : 4]++;
        double rw[2] = {0, 0}, cw[2] = {0, 0};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            const int beside = m && m <= 1024 && nw[m - 1] > 0;
            rw[beside] += v[3][i], cw[beside]++;
        }
        fprintf(stderr, "; on %d multiprocessors (0/1/2/3/4+ blocks: %d/%d/%d/%d/%d); mean run beside a walk block %.1f (%d), not %.1f (%d)",
                used, hist[0], hist[1], hist[2], hist[3], hist[4], cw[1] ? rw[1] / cw[1] : 0.0, (int)cw[1],
                cw[0] ? rw[0] / cw[0] : 0.0, (int)cw[0]);
        /* by the multiprocessor's share: mean run of blocks alone on theirs, and of those with another */
        double rs[2] = {0, 0}, cs[2] = {0, 0};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            if (!m || m > 1024) continue;
            const int shared = na[m - 1] > 1;
            rs[shared] += v[3][i], cs[shared]++;
        }
        fprintf(stderr, "; alone %.1f (%d), shared %.1f (%d)", cs[0] ? rs[0] / cs[0] : 0.0, (int)cs[0],
                cs[1] ? rs[1] / cs[1] : 0.0, (int)cs[1]);
        /* the time after the inversion by the multiprocessor's number (quarters of the highest + 1) */
        unsigned long long top = 1;
        for (int i = 0; i < nblk; i++) top = b[TL_REC * i + 4] > top ? b[TL_REC * i + 4] : top;
        double qa[4] = {}, qc[4] = {};
        for (int i = 0; i < nblk; i++) {
            const unsigned long long m = b[TL_REC * i + 4];
            if (!m) continue;
            const int k = (int)(4 * (m - 1) / top);
            qa[k] += v[2][i] - v[4][i], qc[k]++;
        }
        {
            double pq[5][4] = {}, pc[4] = {};
            for (int i = 0; i < nblk; i++) {
                const unsigned long long *r = b + TL_REC * i;
                if (!r[5] || !r[6] || !r[7] || !r[8]) continue;
                const double t[6] = {v[4][i], 1e-3 * (double)(r[5] - t0), 1e-3 * (double)(r[6] - t0), 1e-3 * (double)(r[7] - t0),
                                     1e-3 * (double)(r[8] - t0), v[2][i]};
                const int k = 4 * TL_SEG(i % nseg, nseg) / nseg;
                for (int x = 0; x < 5; x++) pq[x][k] += t[x + 1] - t[x];
                pc[k]++;
            }
            fprintf(stderr, "; first chunk by segment quarter, us (inversion to phase 3 / 4 / 9 / 11 / exit):");
            for (int k = 0; k < 4; k++)
                if (pc[k]) fprintf(stderr, " %.1f %.1f %.1f %.1f %.1f%s", pq[0][k] / pc[k], pq[1][k] / pc[k], pq[2][k] / pc[k],
                                   pq[3][k] / pc[k], pq[4][k] / pc[k], k < 3 ? "," : "");
        }
        fprintf(stderr, "; after the inversion by multiprocessor quarter:");
        for (int k = 0; k < 4; k++) fprintf(stderr, " %.1f (%d)", qc[k] ? qa[k] / qc[k] : 0.0, (int)qc[k]);
        fprintf(stderr, "\n");
    }
    void finish(cudaStream_t st, const vlacu_args &a, int apart_blocks = 0, int nseg = 1) {
        if (!d) return;
        unsigned long long h[3 * TL_N];
        cudaStreamSynchronize(st);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        static const char *const name[TL_N] = {"gram", "prefix", "apart", "outpre", "walk", "wmap", "wscan", "wlocal", "out", "linmap", "sumwalk"};
        unsigned long long t0 = ~0ull, t1 = 0;
        for (int k = 0; k < TL_N; k++)
            if (h[2 * TL_N + k]) t0 = h[k] < t0 ? h[k] : t0, t1 = h[2 * TL_N + k] > t1 ? h[2 * TL_N + k] : t1;
        fprintf(stderr, "timeline B=%d T=%d H=%d dk=%d dv=%d (us: entry, wait done, exit):", a.B, a.T, a.H, a.dk, a.dv);
        for (int k = 0; k < TL_N; k++)
            if (h[2 * TL_N + k])
                fprintf(stderr, " %s %.1f %.1f %.1f;", name[k], 1e-3 * (double)(h[k] - t0), 1e-3 * (double)(h[TL_N + k] - t0),
                        1e-3 * (double)(h[2 * TL_N + k] - t0));
        fprintf(stderr, " total %.1f\n", 1e-3 * (double)(t1 - t0));
        if (apart_blocks > 0) {
            static unsigned long long hb[TL_REC * TL_BLOCKS + TL_WBLOCKS];
            const int nb = apart_blocks < TL_BLOCKS ? apart_blocks : TL_BLOCKS;
            if (cudaMemcpy(hb, d + 3 * TL_N, sizeof hb, cudaMemcpyDeviceToHost) == cudaSuccess)
                blocks(hb, hb + TL_REC * TL_BLOCKS, nb, nseg, t0);
        }
    }
};

template <int DK> cudaError_t run(const cp_params &P, int bv, cudaStream_t st, const vlacu_aux *aux) {
    const unsigned BH = (unsigned)(P.a.B * P.a.H), nch = (unsigned)P.nch;
    const int slot = DK == 32 ? 0 : 6, slot2 = DK == 32 ? 12 : 15; /* smem_set slots of this DK's kernels */
    cudaError_t e;
    ktimer kt;
    kt.start(st);
    cp_params Pp = P;
    tline tl;
    tl.start(Pp, st);
    const bool vla = P.a.mech == VLACU_VLA;
    /* The Gram prefix summed in apart_kernel (no cp_prefix launch) when the last segment's block
     * has at most fold_max parts to add (dk = 32: 8 parts a round trip; cp_prefix is a launch and
     * about 5 us). 64: with the 63 parts of (1,4,32) T = 8192 the forward was 2.4% faster than with a
     * limit that left them to cp_prefix (0.1301 / 0.1297 against 0.1332 / 0.1333 ms gated; 64 was no
     * faster while the fold loaded its parts one at a time); 128 made T = 32768's 126 parts 0.8% slower */
    static const int fold_env = [] {
        const char *e = getenv("VLA_CP_FOLD");
        return e && *e ? atoi(e) : -1;
    }();
    const int fold_max = !fold_here<DK>() ? 0 : fold_env >= 0 ? fold_env : 64;
    Pp.fold = vla && P.nseg > 1 && (P.nseg - 1) * P.gparts <= fold_max ? 1 : 0;
    if (kt.on && cudaMalloc((void **)&kt.prof, 64 * sizeof(long long)) == cudaSuccess) {
        cudaMemset(kt.prof, 0, 64 * sizeof(long long));
        Pp.prof = kt.prof;
        /* head 0's second segment; VLA_CP_PROF_LAST=1: its last (the longest Gram prefix) */
        static const bool last = [] {
            const char *e = getenv("VLA_CP_PROF_LAST");
            return e && e[0] == '1';
        }();
        Pp.prof_block = P.nseg > 1 ? (last ? P.nseg - 1 : 1) : 0;
    }
    const cp_params &PP = Pp;
    /* The walk's blocks (its widest launch): at most one a multiprocessor means the device is
     * mostly idle around the walk, and the launch gaps and the output are worth hiding there. */
    const unsigned nvb = (unsigned)((P.a.dv + bv - 1) / bv);
    const unsigned walk_blocks = BH * nvb * (unsigned)(P.wnseg > 1 ? P.wnseg : 1);
    const bool small = walk_blocks <= (unsigned)P.sms;
    /* Every launch after the first with programmatic serialization (sm_90+) on small shapes
     * (-1 to -2% at (1,4,32) T >= 8192; +0.5% at (8,16,64) T = 2048); not while the
     * kernels are timed one by one. VLA_CP_PDL=0/1 (development) forces it off or on. */
    static const int pdl_env = [] {
        const char *e = getenv("VLA_CP_PDL");
        return e && *e ? atoi(e) : -1;
    }();
    const bool pdl = P.cc >= 9 && !kt.on && pdl_env != 0 && (pdl_env == 1 || small);
    bool chained = false;
    auto cp_launch = [&](kfn kern, unsigned grid, size_t smem, cudaStream_t s, const cp_params &p, unsigned block = NT) {
        const cudaError_t r = launch_one(kern, grid, smem, s, p, pdl && chained, block);
        chained = true;
        host_mark("launch"); /* (development, VLA_CUDA_HOST_TIMES) */
        return r;
    };
    const unsigned nseg = (unsigned)P.nseg;
    if (nseg > 1 && P.a.mech == VLACU_VLA) {
        const kfn kg = gram_fn<DK>(), kp = prefix_fn<DK>();
        if ((e = cp_launch(kg, BH * (nseg - 1) * (unsigned)P.gparts, (size_t)2 * C * (DK + LD_PAD) * 4, st, PP)) != cudaSuccess) return e;
        kt.mark("gram", st);
        if (!Pp.fold) {
            if ((e = cp_launch(kp, BH * (unsigned)(DK * DK * prefix_runs((nseg - 1) * P.gparts) / NT), 0, st, PP)) != cudaSuccess) return e;
            kt.mark("prefix", st);
        }
    }
    if (P.a.mech == VLACU_LINEAR) { /* Q maps, their running sum, the outputs */
        const kfn km = linmap_fn<DK>();
        if ((e = raise(DK == 32 ? 23 : 24, km, linmap_smem<DK>::bytes)) != cudaSuccess) return e;
        if ((e = cp_launch(km, BH * nch, linmap_smem<DK>::bytes, st, PP)) != cudaSuccess) return e;
        kt.mark("linmap", st);
        const unsigned nb = (unsigned)((DK * P.a.dv + NT - 1) / NT);
        VLACU_LAUNCH(sumwalk_kernel, BH * nb, NT, 0, st, PP, DK); /* (launched plainly: it takes an int too) */
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        kt.mark("walk", st);
        const kfn ko = P.a.dv <= 32 ? output_fn<DK, 32, true>() : output_fn<DK, 64, true>();
        const size_t so = P.a.dv <= 32 ? output_smem<DK, 32>::bytes : output_smem<DK, 64>::bytes;
        if ((e = raise((DK == 32 ? 25 : 27) + (P.a.dv <= 32 ? 0 : 1), ko, so)) != cudaSuccess) return e;
        if ((e = cp_launch(ko, BH * nch, so, st, PP)) != cudaSuccess) return e;
        kt.mark("output", st);
        kt.finish(P.a);
        tl.finish(st, P.a);
        return cudaGetLastError();
    }
    /* The output's split (output_split_kernel: OUT_PRE beside the walk on the second stream,
     * OUT_FIN after it) on small shapes. VLA_CP_SPLIT=0/1 (development) forces it off or on. */
    static const int split_env = [] {
        const char *e = getenv("VLA_CP_SPLIT");
        return e && *e ? atoi(e) : -1;
    }();
    const bool split = aux && split_env != 0 && (split_env == 1 || small);
    /* With the segmented walk (its launches step 3 x fewer chunks, with more blocks), OUT_PRE's
     * blocks (one a chunk) beside it slowed it down and ended after it ((1,4,32) T = 8192: the walk
     * about 23 us alone, 28-33 beside OUT_PRE, in timelines). There, at dk = 32 and dv <= 32
     * (Y in one tile), apart_kernel forms Q' and Pm Y itself (P.outfold: the same sums, so the same
     * bits) and the walk runs alone. VLA_CP_OUTFOLD=0/1 (development) forces it off, or on for
     * every split shape. */
    static const int outfold_env = [] {
        const char *e = getenv("VLA_CP_OUTFOLD");
        return e && *e ? atoi(e) : -1;
    }();
    const bool outfold = DK == 32 && vla && split && P.a.dv <= DK && P.cc >= 8 && outfold_env != 0 &&
                         (outfold_env == 1 || P.wnseg > 1);
    Pp.outfold = outfold ? 1 : 0;
    if (vla) {
        /* uk: u not given (u = s_u k^), the A part's shorter form (apart_kernel, step 3) */
        const bool uk = !P.a.u;
        kfn ka = uk ? apart_fn<DK, 2, false, true>() : apart_fn<DK, 2>();
        int aslot = uk ? (DK == 32 ? 39 : 43) : slot;
        if constexpr (DK == 32) {
            if (outfold) {
                if (uk) ka = P.apart_minb == 3 ? apart_fn<32, 3, true, true>() : apart_fn<32, 2, true, true>(), aslot = P.apart_minb == 3 ? 40 : 41;
                else ka = P.apart_minb == 3 ? apart_fn<32, 3, true>() : apart_fn<32, 2, true>(), aslot = P.apart_minb == 3 ? 37 : 38;
            } else if (P.apart_minb == 3) {
                if (uk) ka = apart_fn<32, 3, false, true>(), aslot = 42;
                else ka = apart_fn<32, 3>(), aslot = 18;
            }
        }
        const size_t sa = apart_smem<DK>::bytes + (outfold ? apart_smem<DK>::qbytes : 0);
        if ((e = raise(aslot, ka, sa)) != cudaSuccess) return e;
        if ((e = cp_launch(ka, BH * nseg, sa, st, PP)) != cudaSuccess) return e;
#ifdef VLA_CP_TIMELINE
        /* VLA_CP_APART_TWICE=1 (development, timeline build): the A part launched a
         * second time, the same work over the same outputs, so that its blocks' records are those
         * of a launch whose code the multiprocessors have just run (the instruction-fetch test) */
        if (const char *tw = getenv("VLA_CP_APART_TWICE"))
            if (tw[0] == '1' && (e = cp_launch(ka, BH * nseg, sa, st, PP)) != cudaSuccess) return e;
#endif
        kt.mark("apart", st);
    } else {
        const bool many = P.sfac_minb > 2;
        const kfn kf = many ? sfac_fn<DK, DK == 32 ? 4 : 3>() : sfac_fn<DK, 2>();
        if ((e = raise((DK == 32 ? 19 : 21) + (many ? 0 : 1), kf, sfac_smem<DK>::bytes)) != cudaSuccess) return e;
        if ((e = cp_launch(kf, BH * nch, sfac_smem<DK>::bytes, st, PP)) != cudaSuccess) return e;
        kt.mark("sfac", st);
    }
    /* walk_quad_kernel for the plain walk at dk <= 32 when its dv / 2 blocks a head fit two a
     * multiprocessor (sm_80+; the T4 keeps walk_rows_kernel, not measured there). VLA_CP_QUAD=0
     * (development) turns it off. */
    static const bool quad_env = [] {
        const char *e = getenv("VLA_CP_QUAD");
        return !(e && e[0] == '0');
    }();
    const bool quad = quad_env && P.cc >= 8 && P.wnseg <= 1 &&
                      BH * (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS) <= 2u * (unsigned)P.sms;
    const int VT = P.a.dv <= 32 ? 32 : 64;
    const size_t so = VT == 32 ? output_smem<DK, 32>::bytes : output_smem<DK, 64>::bytes;
    const int oslot = 29 + (DK == 32 ? 0 : 4) + (VT == 32 ? 0 : 2); /* OUT_PRE; OUT_FIN + 1 */
    if (split && !outfold) { /* Q' and Pm Y on the second stream, from the A part's (or cp_sfac's) W, Y, Al */
        const cudaStream_t as = (cudaStream_t)aux->stream;
        const kfn kpre = VT == 32 ? output_split_fn<DK, 32, OUT_PRE>() : output_split_fn<DK, 64, OUT_PRE>();
        if ((e = raise(oslot, kpre, so)) != cudaSuccess) return e;
        if ((e = cudaEventRecord((cudaEvent_t)aux->fork, st)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(as, (cudaEvent_t)aux->fork, 0)) != cudaSuccess)
            return e;
        if ((e = launch_one(kpre, BH * nch, so, as, PP, false)) != cudaSuccess) return e;
        if ((e = cudaEventRecord((cudaEvent_t)aux->join, as)) != cudaSuccess) return e;
    }
    if (P.wnseg > 1) { /* segments (bv = 32): their maps, the scan over them, each segment's walk */
        const unsigned ns = (unsigned)P.wnseg;
        const size_t sc = walk_smem<DK, 32>::bytes;
        const kfn km = walk_fn<DK, 32, W_MAP>(), ks = walk_fn<DK, 32, W_SCAN>(), kl = walk_fn<DK, 32, W_LOCAL>();
        if ((e = raise(slot2, km, sc)) != cudaSuccess || (e = raise(slot2 + 1, ks, sc)) != cudaSuccess ||
            (e = raise(slot2 + 2, kl, sc)) != cudaSuccess)
            return e;
        if ((e = cp_launch(km, BH * ((unsigned)(DK / 32) + nvb) * ns, sc, st, PP)) != cudaSuccess) return e;
        if (quad_scan_ok(DK, P.a.dv, (long long)BH, P.cc, P.sms)) { /* four threads an entry of X */
            const unsigned nq = (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS);
            if ((e = cp_launch(walk_quad_fn<VLA_QW_SCAN_AHEAD, W_SCAN>(), BH * nq, 0, st, PP, QW_NT)) != cudaSuccess) return e;
        } else if ((e = cp_launch(ks, BH * nvb, sc, st, PP)) != cudaSuccess)
            return e;
        if ((e = cp_launch(kl, BH * nvb * ns, sc, st, PP)) != cudaSuccess) return e;
    } else if (DK == 32 && quad) { /* four threads an entry of X (walk_quad_kernel) */
        const unsigned nq = (unsigned)((P.a.dv + QW_COLS - 1) / QW_COLS);
        /* seven steps of P in flight (three against two: 15.2k against 16.9k cycles for the 32 steps
         * of (1,4,32) T = 2048). The loads of a step ahead were what a step waited on: with none at
         * all (VLA_WQ_DIAG=2) the steps took 9.8-10.4k cycles; 4, 5 and 7 ahead 14.6k, 13.2k and 12.5k
         * against three's 14.9k, and the forward 0.0545, 0.0540 and 0.0536 ms gated against 0.0560
         * (the scan over segment maps keeps two: three there made T = 8192 1.5% slower). The same sums,
         * the same bits. VLA_QW_AHEAD=n (development, compile time) sets it; VLA_CP_QW_AHEAD=2
         * (development, environment): two */
        static const bool ahead2 = [] {
            const char *e = getenv("VLA_CP_QW_AHEAD");
            return e && e[0] == '2';
        }();
        const kfn kq = ahead2 ? walk_quad_fn<2, W_PLAIN>() : walk_quad_fn<VLA_QW_AHEAD, W_PLAIN>();
        if ((e = cp_launch(kq, BH * nq, 0, st, PP, QW_NT)) != cudaSuccess) return e;
    } else if (DK == 32 && bv <= 16) { /* P's rows in registers (walk_rows_kernel); static shared memory only */
        /* two chunks ahead (96 registers of P rows, one block a multiprocessor) when the blocks fit one a
         * multiprocessor: one ahead left each step waiting on its loads (about 900 cycles a step) */
        const bool one = BH * nvb <= (unsigned)P.sms;
        const kfn kw = bv == 8 ? (one ? walk_rows_fn<8, 2>() : walk_rows_fn<8, 1>())
                               : (one ? walk_rows_fn<16, 2>() : walk_rows_fn<16, 1>());
        if ((e = cp_launch(kw, BH * nvb, 0, st, PP)) != cudaSuccess) return e;
    } else {
        const kfn kc = bv == 8 ? walk_fn<DK, 8, W_PLAIN>() : bv == 16 ? walk_fn<DK, 16, W_PLAIN>() : walk_fn<DK, 32, W_PLAIN>();
        const size_t sc = bv == 8 ? walk_smem<DK, 8>::bytes : bv == 16 ? walk_smem<DK, 16>::bytes : walk_smem<DK, 32>::bytes;
        if ((e = raise(slot + (bv == 8 ? 1 : bv == 16 ? 2 : 5), kc, sc)) != cudaSuccess) return e;
        if ((e = cp_launch(kc, BH * nvb, sc, st, PP)) != cudaSuccess) return e;
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    kt.mark("walk", st);
    if (split) { /* after the walk and the second stream's part */
        const kfn kfin = VT == 32 ? output_split_fn<DK, 32, OUT_FIN>() : output_split_fn<DK, 64, OUT_FIN>();
        if ((e = raise(oslot + 1, kfin, so)) != cudaSuccess) return e;
        if (outfold) {
            if ((e = cp_launch(kfin, BH * nch, so, st, PP)) != cudaSuccess) return e;
        } else {
            if ((e = cudaStreamWaitEvent(st, (cudaEvent_t)aux->join, 0)) != cudaSuccess) return e;
            if ((e = launch_one(kfin, BH * nch, so, st, PP, false)) != cudaSuccess) return e;
        }
    } else {
        const kfn ko = VT == 32 ? output_fn<DK, 32, false>() : output_fn<DK, 64, false>();
        if ((e = raise(slot + (VT == 32 ? 3 : 4), ko, so)) != cudaSuccess) return e;
        if ((e = cp_launch(ko, BH * nch, so, st, PP)) != cudaSuccess) return e;
    }
    kt.mark(split ? "output (fin)" : "output", st);
    kt.finish(P.a);
    tl.finish(st, P.a, vla ? (int)(BH * nseg) : 0, (int)nseg);
    return cudaGetLastError();
}

} // namespace cp

int chunkpar_dk(const vlacu_args &a) { return a.dk <= 32 ? 32 : 64; }

/* A kernel's static shared memory, asked once (each launch adds it to the dynamic bytes). */
template <cp::kfn (*F)()> static size_t static_of() {
    static const size_t s = static_smem_of((const void *)F(), 0);
    return s;
}

template <int DK> static size_t max_smem(int dv) {
    size_t m = cp::apart_smem<DK>::bytes + static_of<cp::apart_fn<DK, 2>>();
    const size_t f = cp::sfac_smem<DK>::bytes + static_of<cp::sfac_fn<DK, DK == 32 ? 4 : 3>>();
    if (f > m) m = f;
    const size_t w = cp::walk_smem<DK, 16>::bytes + static_of<cp::walk_fn<DK, 16, cp::W_PLAIN>>();
    const size_t o = dv <= 32 ? cp::output_smem<DK, 32>::bytes + static_of<cp::output_fn<DK, 32, false>>()
                              : cp::output_smem<DK, 64>::bytes + static_of<cp::output_fn<DK, 64, false>>();
    if (w > m) m = w;
    if (o > m) m = o;
    return m;
}

/* The most shared memory (dynamic + static) one block of the form needs for this shape. */
static size_t chunkpar_max_smem(const vlacu_args &a) {
    return chunkpar_dk(a) == 32 ? max_smem<32>(a.dv) : max_smem<64>(a.dv);
}

/* VLA with R = 0 (the Gram prefix gives A exactly), linear, or delta without g (the decay would
 * need its own chunk maps); dk <= 64, chunks of at most 64 tokens, and the kernels' shared memory
 * fits the device (a T4's 64 KiB a block: dk <= 32 only). */
bool chunkpar_applies(const vlacu_args &a, const vlacu_device &dev) {
    const bool mech = (a.mech == VLACU_VLA && a.refresh == 0) || a.mech == VLACU_LINEAR ||
                      (a.mech == VLACU_DELTA && !a.g);
    return mech && a.algo == VLACU_CHUNKED && a.dk <= 64 && a.chunk <= cp::C && a.chunk >= 1 &&
           chunkpar_max_smem(a) <= dev.smem_optin;
}

/* Shared memory (dynamic + static) of a walk block on 32 value columns. */
static size_t chunkpar_walk32_smem(const vlacu_args &a) {
    return chunkpar_dk(a) == 32 ? cp::walk_smem<32, 32>::bytes + static_of<cp::walk_fn<32, 32, cp::W_MAP>>()
                                : cp::walk_smem<64, 32>::bytes + static_of<cp::walk_fn<64, 32, cp::W_MAP>>();
}

/* The walk's segments: when the heads' value blocks leave most multiprocessors idle and there
 * are enough chunks, segments of wlen chunks on 32 value columns a block (the segments give the
 * parallelism). The three launches take wlen, wnseg and wlen steps a head; wlen minimises
 * (waves of the first launch + waves of the last) x wlen + s x wnseg, two blocks a multiprocessor,
 * s the scan's step against walk_kernel's: 1, or 1/2 with walk_quad_kernel. (With
 * s = 1 and one wave each this is wlen ~ sqrt(nch / 2).) VLA_CP_WLEN=L
 * (development) forces wlen. Else one segment (wlen = nch) and chunkpar_bv's width. */
void chunkpar_walk(const vlacu_args &a, const vlacu_device &dev, int nch, int *bv, int *wlen, int *wnseg) {
    const long long heads = (long long)a.B * a.H, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    *bv = chunkpar_bv(a, dev);
    *wlen = nch > 0 ? nch : 1;
    *wnseg = 1;
    if (a.mech == VLACU_LINEAR) return; /* sumwalk_kernel: a thread per entry of S, no segments */
    if (nch < 64 || heads * ((a.dv + 31) / 32) * 4 > sms || chunkpar_walk32_smem(a) > dev.smem_optin)
        return; /* (from 32 chunks it was slower at T = 2048; with walk_quad_kernel, leaving 64 and
                 * 128 chunks unsegmented was 8% and 19% slower) */
    const int DK = chunkpar_dk(a);
    const long long nvb = (a.dv + 31) / 32, slots = 2 * sms;
    const double s = cp::quad_scan_ok(DK, a.dv, heads, dev.cc_major, (int)sms) ? 0.5 : 1.0;
    int L = 2;
    double best = -1;
    for (int l = 2; l < nch; l++) {
        /* cost(l) >= 2 l (a wave each launch at least), so no l from best / 2 on is cheaper: the same
         * L as the whole range, in O(sqrt(nch)) steps. (The whole range, searched twice a call (the
         * workspace size and the launch plan), took 20 us a search at 2048 chunks on a development
         * host; at (1,4,32) T = 131072 ungated calls were 42-48 us longer than gated ones with it,
         * 11-20 us without.) */
        if (best >= 0 && 2.0 * l >= best) break;
        const long long ns = (nch + l - 1) / l;
        const long long wm = (heads * (DK / 32 + nvb) * ns + slots - 1) / slots, wl = (heads * nvb * ns + slots - 1) / slots;
        const double cost = (double)(wm + wl) * l + s * (double)ns;
        if (best < 0 || cost < best) best = cost, L = l;
    }
    static const int wlen_env = [] {
        const char *e = getenv("VLA_CP_WLEN");
        return e && *e ? atoi(e) : 0;
    }();
    if (wlen_env >= 2 && wlen_env < nch) L = wlen_env;
    *bv = 32;
    *wlen = L;
    *wnseg = (nch + L - 1) / L;
}

int chunkpar_bv(const vlacu_args &a, const vlacu_device &dev) {
    /* Value columns a block of the S walk: 32 when that still gives every multiprocessor a block
     * (fewer shared loads per FMA), else 16 when that gives two, else 8: the walk is the
     * sequential part, and narrower blocks step faster. */
    const long long heads = (long long)a.B * a.H, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    const size_t b32 = chunkpar_walk32_smem(a);
    if (heads * ((a.dv + 31) / 32) >= sms && a.dv > 16 && b32 <= dev.smem_optin) return 32;
    return heads * ((a.dv + 15) / 16) >= 2 * sms ? 16 : 8;
}

extern "C" int vlacu_chunkpar_ok(int dk, int dv, int chunk, int refresh, const vlacu_device *dev) {
    vlacu_args a;
    memset(&a, 0, sizeof a);
    a.mech = VLACU_VLA, a.algo = VLACU_CHUNKED, a.dk = dk, a.dv = dv, a.chunk = chunk, a.refresh = refresh;
    return chunkpar_applies(a, *dev) ? 1 : 0;
}

/* Chunks per segment of the A part. A segment is one block: it inverts M once, then carries A
 * over its chunks (A_end = A0 - Z^T Z), so longer segments do fewer inversions (each costs about
 * r chunks' worth of the rest) but expose less parallelism. Picks the S (a power of two) that
 * minimises waves x (S + r), two blocks a multiprocessor. */
int chunkpar_seg(const vlacu_args &a, const vlacu_device &dev, int nch) {
    if (a.mech != VLACU_VLA) return 1; /* no A part: nothing to amortise */
    /* VLA_CP_SEG=S (development): S chunks a segment. (1,4,32) T = 8192 picks 2: 1 (512 blocks, three
     * a multiprocessor) was 12% slower, 4 was 50% slower */
    static const int seg_env = [] {
        const char *e = getenv("VLA_CP_SEG");
        return e && *e ? atoi(e) : 0;
    }();
    if (seg_env >= 1) return seg_env < nch ? seg_env : (nch > 0 ? nch : 1);
    const double r = chunkpar_dk(a) == 64 ? 1.5 : 0.4;
    const long long heads = (long long)a.B * a.H, slots = 2LL * (dev.sm_count > 0 ? dev.sm_count : 1);
    int best = 1;
    double best_cost = 0;
    for (int S = 1;; S *= 2) {
        const long long blocks = heads * ((nch + S - 1) / S);
        const double cost = (double)((blocks + slots - 1) / slots) * (S + r);
        if (S == 1 || cost < best_cost) best = S, best_cost = cost;
        if (S >= nch) break;
    }
    return best;
}

/* apart_kernel's blocks a multiprocessor (its register cap) for nseg segments a head. */
int chunkpar_apart_minb(const vlacu_args &a, const vlacu_device &dev, int nseg) {
    const long long blocks = (long long)a.B * a.H * nseg, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    return chunkpar_dk(a) == 32 && dev.cc_major >= 8 && blocks > 2 * sms ? 3 : 2;
}

/* sfac_kernel's blocks a multiprocessor (its register cap) for nch chunks a head: as many as the
 * shared memory holds when the launch has more blocks than two a multiprocessor hold; else two
 * (128 registers, no spills: (1,4,32) T = 2048 DeltaNet 0.047 against 0.049 ms with the cap). */
int chunkpar_sfac_minb(const vlacu_args &a, const vlacu_device &dev, int nch) {
    const long long blocks = (long long)a.B * a.H * nch, sms = dev.sm_count > 0 ? dev.sm_count : 1;
    return blocks > 2 * sms ? (chunkpar_dk(a) == 32 ? 4 : 3) : 2;
}

int chunkpar_gram_parts(int seg) {
    /* VLA_CP_GRAM_SUB=N (development): N chunks a gram_kernel block at most. At (1,4,32) T = 8192
     * (segments of 2 chunks) 1 was 1% slower than GRAM_SUB's 2 */
    static const int sub = [] {
        const char *e = getenv("VLA_CP_GRAM_SUB");
        const int n = e && *e ? atoi(e) : 0;
        return n >= 1 ? n : cp::GRAM_SUB;
    }();
    return (seg + sub - 1) / sub;
}

cudaError_t launch_chunkpar(const cp_params &p, int bv, cudaStream_t st, const vlacu_aux *aux) {
    return chunkpar_dk(p.a) == 32 ? cp::run<32>(p, bv, st, aux) : cp::run<64>(p, bv, st, aux);
}

} // namespace vlacu

