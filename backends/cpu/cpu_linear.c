/* Linear attention (Katharopoulos et al. 2020), VLA-MATH 1:
 *   S_t = S_{t-1} + v_t phi(k_t)^T,  n_t = n_{t-1} + phi(k_t),  o_t = S_t phi(q_t) / (phi(q_t) . n_t + eps).
 * Stored transposed: ST [dk, dv]. The numerator comes from the kernels below; the shared
 * normaliser pass divides. */
#include "cpu_kernels.h"

#include <stddef.h>

size_t cpu_linear_sequential_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T; (void)dk; (void)dv; (void)p;
    return 0;
}

void cpu_linear_sequential(const cpu_head *h, const cpu_params *p, float *work) {
    (void)work;
    const int dk = h->dk, dv = h->dv;
    for (int t = 0; t < h->T; t++) {
        const float *k = h->kf + (size_t)t * dk, *v = h->v + (size_t)t * dv;
        for (int i = 0; i < dk; i++) /* ST += k v^T */
            for (int j = 0; j < dv; j++) h->ST[(size_t)i * dv + j] += k[i] * v[j];
        cpu_vecmat(h->q + (size_t)t * dk, h->ST, dk, dv, h->o + (size_t)t * dv);
    }
    cpu_normalize_output(h, p->eps, 1);
}

size_t cpu_linear_chunked_work(int T, int dk, int dv, const cpu_params *p) {
    (void)T;
    return cpu_chunk_work(p->chunk, dk, dv);
}

void cpu_linear_chunked(const cpu_head *h, const cpu_params *p, float *work) {
    const int dk = h->dk, dv = h->dv;
    for (int t0 = 0; t0 < h->T; t0 += p->chunk) {
        const int c = h->T - t0 < p->chunk ? h->T - t0 : p->chunk;
        /* No residual: e_t = v_t, written along k~_t. */
        cpu_chunk_step(c, dk, dv, 0, NULL, h->kf + (size_t)t0 * dk, h->v + (size_t)t0 * dv, h->q + (size_t)t0 * dk,
                       NULL, h->ST, h->o + (size_t)t0 * dv, work);
    }
    cpu_normalize_output(h, p->eps, 1);
}
