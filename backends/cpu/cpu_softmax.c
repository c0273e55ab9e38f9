/* Causal softmax attention as a fused online softmax (flash-attention style tiles): no T x T
 * matrix is ever stored. o_t = sum_{s<=t} softmax_s(q_t . k_s * scale) v_s. */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define QB 64 /* query rows per tile */
#define KB 64 /* key rows per tile */

size_t cpu_softmax_fused_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T;
    (void)dk;
    /* Per thread that works on query tiles: scores [QB, KB], acc [QB, dv], m and l [QB]. */
    size_t per = (size_t)QB * KB + (size_t)QB * dv + 2 * QB;
    return per * (size_t)(p->inner_threads > 0 ? p->inner_threads : 1);
}

/* One tile of query rows [i0, i1) against every key up to i1 - 1. */
static void query_tile(const cpu_head *h, float scale, int i0, int i1, float *work) {
    const int dk = h->dk, dv = h->dv, nq = i1 - i0;
    float *Sc = work, *acc = Sc + QB * KB, *m = acc + (size_t)QB * dv, *l = m + QB;
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * dv);
    for (int j0 = 0; j0 < i1; j0 += KB) {
        const int j1 = j0 + KB < i1 ? j0 + KB : i1, nk = j1 - j0;
        /* Sc[nq, nk] = Q K^T * scale */
        cpu_gemm(0, 1, nq, nk, dk, scale, h->q + (size_t)i0 * dk, dk, h->kf + (size_t)j0 * dk, dk, 0.0f, Sc, KB);
        for (int r = 0; r < nq; r++) {
            const int i = i0 + r;
            float *sr = Sc + (size_t)r * KB;
            int last = i - j0 + 1; /* causal: keys j <= i */
            if (last > nk) last = nk;
            if (last <= 0) {
                for (int c = 0; c < nk; c++) sr[c] = 0.0f;
                continue;
            }
            float mx = m[r];
            int nan = 0;
            for (int c = 0; c < last; c++) {
                if (sr[c] > mx) mx = sr[c];
                nan |= isnan(sr[c]);
            }
            if (nan) mx = NAN; /* propagate: never finite garbage from a NaN input */
            const float corr = expf(m[r] - mx);
            float sum = 0.0f;
            for (int c = 0; c < last; c++) {
                sr[c] = expf(sr[c] - mx);
                sum += sr[c];
            }
            for (int c = last; c < nk; c++) sr[c] = 0.0f;
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            float *ar = acc + (size_t)r * dv;
            for (int d = 0; d < dv; d++) ar[d] *= corr;
        }
        /* acc += P V. A tile that reaches past row i0 holds masked keys: there each row sums
         * only its visible keys, so a NaN in a future v cannot reach an earlier output
         * through 0 * NaN. */
        const float *vt = h->v + (size_t)j0 * dv;
        if (j1 <= i0 + 1) {
            cpu_gemm(0, 0, nq, dv, nk, 1.0f, Sc, KB, vt, dv, 1.0f, acc, dv);
        } else {
            for (int r = 0; r < nq; r++) {
                const int last = i0 + r - j0 + 1 < nk ? i0 + r - j0 + 1 : nk;
                float *ar = acc + (size_t)r * dv;
                for (int c = 0; c < last; c++) {
                    const float pc = Sc[(size_t)r * KB + c];
                    const float *vc = vt + (size_t)c * dv;
                    for (int d = 0; d < dv; d++) ar[d] += pc * vc[d];
                }
            }
        }
    }
    for (int r = 0; r < nq; r++) {
        float *o = h->o + (size_t)(i0 + r) * dv;
        const float inv = 1.0f / l[r];
        for (int d = 0; d < dv; d++) o[d] = acc[(size_t)r * dv + d] * inv;
    }
}

void cpu_softmax_fused(const cpu_head *h, const cpu_params *p, float *work) {
    const int ntiles = (h->T + QB - 1) / QB;
    const size_t per = cpu_softmax_fused_work(h->T, h->dk, h->dv, &(cpu_params){.inner_threads = 1});
    const int nt = p->inner_threads > 0 ? p->inner_threads : 1;
    /* Tiles are independent; later tiles cost more, so hand them out dynamically. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && ntiles > 1)
    for (int tile = 0; tile < ntiles; tile++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        const int i0 = tile * QB, i1 = i0 + QB < h->T ? i0 + QB : h->T;
        query_tile(h, p->scale, i0, i1, work + (size_t)me * per);
    }
}
