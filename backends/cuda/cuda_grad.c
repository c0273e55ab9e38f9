/* The backward op on CUDA (VLA-MATH 5), host side: the call's arguments for the kernels
 * (kernels/cuda/vla_grad_*.cu, planned and launched by vlacu_backward), the workspace (the handle's,
 * shared with the forward) and the statuses. The kernels are queued on the handle's stream; the call
 * returns without waiting for them, as the forward does.
 *
 * A failing call writes nothing: the plan and the workspace come first; the first kernel of the
 * recurrent mechanisms writes only the workspace, and softmax sets both kernels' shared-memory limits
 * before it queues either. */
#include "cuda_grad.h"

#include <cuda_runtime_api.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

static vla_status grad_fail(vla_backend *b, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    const vla_status s = e == cudaErrorMemoryAllocation ? VLA_ERR_OUT_OF_MEMORY : VLA_ERR_BACKEND;
    return vla_fail(b, s, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
}

static const float *dptr(const vla_buffer *buf) { return buf ? (const float *)buf->mem : NULL; }
static float *mptr(vla_buffer *buf) { return buf ? (float *)buf->mem : NULL; }

vla_status vla_cuda_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g) {
    const char *fn = "vla_attention_backward";
    vla_cuda_grad_host host;
    vla_cuda_grad_host_of(b, &host);
    cudaError_t ce = cudaSetDevice(host.device);
    if (ce != cudaSuccess) return grad_fail(b, ce, "vla_attention_backward: cudaSetDevice");
    (void)cudaGetLastError(); /* a stale, non-sticky error must not be blamed on this call */

    const long long BH = (long long)a->B * a->H;
    const int dmax = a->dk > a->dv ? a->dk : a->dv;
    if (BH * a->T > INT_MAX || (long long)a->H * dmax > INT_MAX)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: B*H*T = %lld is too large for the cuda backend's grids (max %d)",
                        fn, BH * a->T, INT_MAX);

    const int vla = d->mechanism == VLA_MECH_VLA;
    vlacu_args x;
    memset(&x, 0, sizeof x);
    x.mech = (int)d->mechanism;
    x.algo = (int)d->algorithm;
    x.B = a->B, x.T = a->T, x.H = a->H, x.dk = a->dk, x.dv = a->dv;
    x.t0 = a->t0;
    x.chunk = d->chunk;
    x.segment_chunks = d->segment_chunks;
    x.refresh = vla ? d->refresh : 0;
    x.elu1 = d->feature_map == VLA_FMAP_ELU1;
    x.normalize = vla && d->normalize_output;
    x.lambda0 = d->lambda0, x.eps = d->eps, x.rho = d->refresh_size, x.u_scale = d->u_scale, x.scale = d->scale;
    x.q = dptr(a->q), x.k = dptr(a->k), x.v = dptr(a->v), x.u = dptr(a->u), x.beta = dptr(a->beta), x.g = dptr(a->g);
    x.S_in = dptr(a->S_in), x.A_in = dptr(a->A_in), x.n_in = dptr(a->n_in);

    vlacu_grads y;
    memset(&y, 0, sizeof y);
    y.dO = dptr(g->dO), y.dS_end = dptr(g->dS_end), y.dA_end = dptr(g->dA_end), y.dn_end = dptr(g->dn_end);
    y.dq = mptr(g->dq), y.dk = mptr(g->dk), y.dv = mptr(g->dv), y.du = mptr(g->du);
    y.dbeta = mptr(g->dbeta), y.dg = mptr(g->dg);
    y.dS_0 = mptr(g->dS_0), y.dA_0 = mptr(g->dA_0), y.dn_0 = mptr(g->dn_0);

    size_t need = 0;
    int e = vlacu_backward_workspace_bytes(&x, &host.info, &need);
    if (e == (int)cudaErrorInvalidConfiguration)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: %s with dk = %d, dv = %d needs more shared memory than %s has", fn,
                        vla_mechanism_name(d->mechanism), a->dk, a->dv, b->device);
    if (e != 0) return grad_fail(b, (cudaError_t)e, "vla_attention_backward: planning");
    if (need == SIZE_MAX)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "%s: the workspace for T = %d, chunk %d overflows size_t", fn, a->T,
                        d->chunk);
    void *ws = NULL;
    size_t ws_bytes = 0;
    vla_status s = vla_cuda_grad_workspace(b, need, &ws, &ws_bytes);
    if (s != VLA_OK) return s;
    e = vlacu_backward(&x, &y, &host.info, ws, ws_bytes, host.stream);
    if (e != 0) {
        char what[128];
        snprintf(what, sizeof what, "%s (%s)", fn, vla_mechanism_name(d->mechanism));
        return grad_fail(b, (cudaError_t)e, what);
    }
    return VLA_OK;
}
