/* DeltaNet, gated (VLA-MATH 1): S_t = g_t S_{t-1} (I - beta_t k^_t k^_t^T) + beta_t v_t k^_t^T,
 * o_t = S_t q~_t. Stored transposed: ST [dk, dv]. Written as a residual update,
 *   e_t = v_t - g_t S_{t-1} k^_t,  S_t = g_t S_{t-1} + beta_t e_t k^_t^T,
 * which is the same function and is the form the chunked kernel shares with VLA. */
#include "cpu_kernels.h"

#include <stddef.h>

size_t cpu_delta_sequential_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T; (void)dk; (void)p;
    return (size_t)dv;
}

void cpu_delta_sequential(const cpu_head *h, const cpu_params *p, float *work) {
    (void)p;
    const int dk = h->dk, dv = h->dv;
    float *e = work; /* [dv] */
    for (int t = 0; t < h->T; t++) {
        const float *k = h->kh + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        const float g = h->g ? h->g[t] : 1.0f, beta = h->beta ? h->beta[t] : 1.0f;
        cpu_vecmat(k, h->ST, dk, dv, e); /* e = S k */
        for (int j = 0; j < dv; j++) e[j] = v[j] - g * e[j];
        for (int i = 0; i < dk; i++) {
            const float w = beta * k[i];
            float *row = h->ST + (size_t)i * dv;
            for (int j = 0; j < dv; j++) row[j] = g * row[j] + w * e[j];
        }
        cpu_vecmat(h->q + (size_t)t * dk, h->ST, dk, dv, h->o + (size_t)t * dv);
    }
}

size_t cpu_delta_chunked_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T;
    return cpu_chunk_work(p->chunk, dk, dv) + (size_t)p->chunk * dk;
}

void cpu_delta_chunked(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv;
    float *w = work;                                    /* [C, dk] write directions beta_t k^_t */
    float *chunk_work = work + (size_t)p->chunk * dk;
    for (int t0 = 0; t0 < h->T; t0 += p->chunk) {
        const int c = h->T - t0 < p->chunk ? h->T - t0 : p->chunk;
        const float *kh = h->kh + (size_t)t0 * dk;
        for (int t = 0; t < c; t++) {
            const float beta = h->beta ? h->beta[t0 + t] : 1.0f;
            for (int i = 0; i < dk; i++) w[(size_t)t * dk + i] = beta * kh[(size_t)t * dk + i];
        }
        cpu_chunk_step(c, dk, dv, 1, kh, w, h->v + (size_t)t0 * dv, h->q + (size_t)t0 * dk, h->g ? h->g + t0 : NULL,
                       h->ST, h->o + (size_t)t0 * dv, chunk_work);
    }
}
