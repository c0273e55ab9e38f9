/* The attention op's descriptor, names, validation and dispatch. Validation lives here, once,
 * so every backend receives only arguments that VLA-MATH gives a meaning to. */
#include "vla_impl.h"

#include <math.h>
#include <string.h>

static const char *const mech_names[] = {"softmax", "linear", "delta", "vla", "delta-paper"};
static const char *const algo_names[] = {"auto", "sequential", "scan", "chunked", "two-level", "fused"};
static const char *const fmap_names[] = {"none", "elu1"};

#define N_MECH 5
#define N_ALGO 6
#define N_FMAP 2

const char *vla_mechanism_name(vla_mechanism m) {
    return (unsigned)m < N_MECH ? mech_names[m] : "?";
}
const char *vla_algorithm_name(vla_algorithm a) {
    return (unsigned)a < N_ALGO ? algo_names[a] : "?";
}
const char *vla_feature_map_name(vla_feature_map f) {
    return (unsigned)f < N_FMAP ? fmap_names[f] : "?";
}

static vla_status from_name(const char *what, const char *const *names, int n, const char *name, int *out) {
    if (!name || !out) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "%s name lookup: NULL argument", what);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) {
            *out = i;
            return VLA_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return vla_fail(NULL, VLA_ERR_UNKNOWN_NAME, "unknown %s '%s' (one of: %s)", what, name, list);
}

vla_status vla_mechanism_from_name(const char *name, vla_mechanism *out) {
    int i = 0;
    vla_status s = from_name("mechanism", mech_names, N_MECH, name, &i);
    if (s == VLA_OK) *out = (vla_mechanism)i;
    return s;
}
vla_status vla_algorithm_from_name(const char *name, vla_algorithm *out) {
    int i = 0;
    vla_status s = from_name("algorithm", algo_names, N_ALGO, name, &i);
    if (s == VLA_OK) *out = (vla_algorithm)i;
    return s;
}
vla_status vla_feature_map_from_name(const char *name, vla_feature_map *out) {
    int i = 0;
    vla_status s = from_name("feature map", fmap_names, N_FMAP, name, &i);
    if (s == VLA_OK) *out = (vla_feature_map)i;
    return s;
}

/* VLA-MATH 2: softmax has one algorithm; linear and delta sequential and chunked; VLA all four;
 * the paper's DeltaNet only sequential (its per-row gate has no shared chunk form). */
int vla_algorithm_defined(vla_mechanism m, vla_algorithm a) {
    if (a == VLA_ALGO_AUTO) return (unsigned)m < N_MECH;
    switch (m) {
    case VLA_MECH_SOFTMAX: return a == VLA_ALGO_FUSED;
    case VLA_MECH_LINEAR:
    case VLA_MECH_DELTA: return a == VLA_ALGO_SEQUENTIAL || a == VLA_ALGO_CHUNKED;
    case VLA_MECH_VLA:
        return a == VLA_ALGO_SEQUENTIAL || a == VLA_ALGO_SCAN || a == VLA_ALGO_CHUNKED ||
               a == VLA_ALGO_TWO_LEVEL;
    case VLA_MECH_DELTA_PAPER: return a == VLA_ALGO_SEQUENTIAL;
    }
    return 0;
}

vla_status vla_attn_desc_init(vla_attn_desc *d, vla_mechanism m) {
    vla_clear_message(NULL);
    if (!d) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_attn_desc_init: desc is NULL");
    if ((unsigned)m >= N_MECH)
        return vla_fail(NULL, VLA_ERR_UNKNOWN_NAME, "vla_attn_desc_init: unknown mechanism %d", (int)m);
    memset(d, 0, sizeof *d);
    d->mechanism = m;
    d->algorithm = VLA_ALGO_AUTO;
    d->dtype = VLA_F32;
    d->chunk = 64;
    d->lambda0 = 0.1;
    d->eps = 1e-4;
    d->refresh = 0;
    d->refresh_size = 1e-3;
    d->u_scale = 1.0;
    d->feature_map = m == VLA_MECH_LINEAR || m == VLA_MECH_DELTA_PAPER ? VLA_FMAP_ELU1 : VLA_FMAP_NONE;
    d->normalize_output = 0;
    d->scale = 0.0;
    d->segment_chunks = 0;
    return VLA_OK;
}

vla_status vla_attn_desc_preset(vla_attn_desc *d, const char *preset) {
    vla_clear_message(NULL);
    if (!d || !preset) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_attn_desc_preset: NULL argument");
    if (strcmp(preset, "paper") != 0)
        return vla_fail(NULL, VLA_ERR_UNKNOWN_NAME, "unknown preset '%s' (one of: paper)", preset);
    /* VLA-MATH 1, preset `paper`: what the paper's VLAv3Attn runs. */
    d->mechanism = VLA_MECH_VLA;
    d->feature_map = VLA_FMAP_ELU1;
    d->normalize_output = 1;
    d->u_scale = 0.0; /* 1/sqrt(dk) */
    d->lambda0 = 0.1;
    d->eps = 1e-4;
    d->refresh = 20;
    d->refresh_size = 1e-3;
    return VLA_OK;
}

/* ---- validation ---- */

static int finite(double x) { return isfinite(x); }

/* bytes = a*b*c*d*4 without overflow; 0 on overflow. */
static size_t tensor_bytes(int64_t a, int64_t b, int64_t c, int64_t d) {
    uint64_t n = 4;
    int64_t f[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        if (f[i] <= 0) return 0;
        if (n > SIZE_MAX / (uint64_t)f[i]) return 0;
        n *= (uint64_t)f[i];
    }
    return (size_t)n;
}

static vla_status check_buffer(vla_backend *b, const char *fn, const vla_buffer *buf, const char *name, size_t need,
                               int required) {
    if (!buf) {
        if (required) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "%s: %s is NULL", fn, name);
        return VLA_OK;
    }
    if (buf->backend != b)
        return vla_fail(b, VLA_ERR_WRONG_BACKEND, "%s: %s was allocated on backend '%s', the op runs on '%s'", fn,
                        name, buf->backend ? buf->backend->name : "?", b->name);
    if (buf->size < need)
        return vla_fail(b, VLA_ERR_SHAPE_MISMATCH, "%s: %s holds %zu bytes, the shape needs %zu", fn, name, buf->size,
                        need);
    return VLA_OK;
}

/* Which states a mechanism carries (VLA-MATH 1). */
static int mech_has_S(const vla_attn_desc *d) { return d->mechanism != VLA_MECH_SOFTMAX; }
static int mech_has_A(const vla_attn_desc *d) { return d->mechanism == VLA_MECH_VLA; }
static int mech_has_n(const vla_attn_desc *d) {
    return d->mechanism == VLA_MECH_LINEAR || (d->mechanism == VLA_MECH_VLA && d->normalize_output);
}

/* Everything about the call that does not depend on the backend, shared by the forward and the
 * backward (`fn` names the caller in messages). The backward reads the forward's inputs and
 * initial states but neither reads nor writes o and the final states, so it passes
 * forward_outputs = 0 and they are not looked at. */
static vla_status validate(vla_backend *b, const char *fn, const vla_attn_desc *d, const vla_attn_args *a,
                           int forward_outputs) {
    if (!d) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "%s: desc is NULL", fn);
    if (!a) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "%s: args is NULL", fn);
    for (int i = 0; i < 8; i++)
        if (d->reserved[i])
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER,
                            "%s: desc.reserved[%d] is not zero (initialise the desc with vla_attn_desc_init)", fn, i);
    if ((unsigned)d->mechanism >= N_MECH)
        return vla_fail(b, VLA_ERR_UNKNOWN_NAME, "%s: unknown mechanism %d", fn, (int)d->mechanism);
    if ((unsigned)d->algorithm >= N_ALGO)
        return vla_fail(b, VLA_ERR_UNKNOWN_NAME, "%s: unknown algorithm %d", fn, (int)d->algorithm);
    if ((unsigned)d->feature_map >= N_FMAP)
        return vla_fail(b, VLA_ERR_UNKNOWN_NAME, "%s: unknown feature map %d", fn, (int)d->feature_map);
    if (d->dtype != VLA_F32)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: dtype %d is not supported (float32 only)", fn, (int)d->dtype);
    const char *mech = mech_names[d->mechanism];
    if (!vla_algorithm_defined(d->mechanism, d->algorithm))
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: algorithm '%s' is not defined for %s (VLA-MATH 2)",
                        fn, algo_names[d->algorithm], mech);

    if (a->B < 1 || a->T < 1 || a->H < 1)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: B = %d, T = %d, H = %d: each must be >= 1", fn, a->B,
                        a->T, a->H);
    if (a->dk < 1 || a->dk > 256)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: dk = %d is outside 1..256", fn, a->dk);
    if (a->dv < 1 || a->dv > 256)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: dv = %d is outside 1..256", fn, a->dv);
    if (a->t0 < 0 || a->t0 > INT64_MAX - a->T)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: t0 = %lld is outside 0..INT64_MAX - T", fn,
                        (long long)a->t0);

    /* Parameters, checked for the mechanisms that use them. */
    if (!finite(d->eps) || d->eps <= 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: eps = %g must be finite and > 0", fn, d->eps);
    if (d->chunk < 1 || d->chunk > 1024)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: chunk = %d is outside 1..1024", fn, d->chunk);
    if (d->segment_chunks < 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: segment_chunks = %d < 0", fn, d->segment_chunks);
    int vla = d->mechanism == VLA_MECH_VLA;
    if (vla) {
        if (!finite(d->lambda0) || d->lambda0 <= 0)
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: lambda0 = %g must be finite and > 0", fn, d->lambda0);
        if (d->refresh < 0)
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: refresh period R = %d < 0", fn, d->refresh);
        if (!finite(d->refresh_size) || d->refresh_size < 0)
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: refresh size rho = %g must be finite and >= 0", fn,
                            d->refresh_size);
        if (!finite(d->u_scale) || d->u_scale < 0)
            return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: u_scale = %g must be finite and >= 0 (0 = 1/sqrt(dk))",
                            fn, d->u_scale);
    }
    if (d->mechanism == VLA_MECH_SOFTMAX && (!finite(d->scale) || d->scale < 0))
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "%s: softmax scale = %g must be finite and >= 0 (0 = 1/sqrt(dk))",
                        fn, d->scale);

    /* Combinations. */
    if (d->normalize_output && !vla)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: normalize_output is a VLA option (linear attention always normalises; %s does not)", fn, mech);
    if (d->normalize_output && d->feature_map == VLA_FMAP_NONE)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: normalize_output needs a positive feature map (elu1): with none, q . n can be <= 0", fn);
    if (d->mechanism == VLA_MECH_LINEAR && d->feature_map == VLA_FMAP_NONE)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: linear attention divides by phi(q) . n and needs a positive feature map (elu1)", fn);
    if (d->mechanism == VLA_MECH_SOFTMAX && d->feature_map != VLA_FMAP_NONE)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: softmax takes no feature map", fn);
    if (a->u && !vla) return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: u is given but only vla uses it", fn);
    const int paper_delta = d->mechanism == VLA_MECH_DELTA_PAPER;
    if (a->beta && d->mechanism != VLA_MECH_DELTA)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: beta is given but only delta uses it%s", fn,
                        paper_delta ? " (delta-paper has no write strength)" : "");
    if (a->g && d->mechanism != VLA_MECH_DELTA && !paper_delta)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: g is given but only delta and delta-paper use it", fn);
    /* The backward ignores o and the final states: only look at them for the forward. */
    vla_buffer *const o_arg = forward_outputs ? a->o : NULL, *const S_out = forward_outputs ? a->S_out : NULL;
    vla_buffer *const A_out = forward_outputs ? a->A_out : NULL, *const n_out = forward_outputs ? a->n_out : NULL;
    int has_S = mech_has_S(d);
    int has_n = mech_has_n(d);
    if (!has_S && (a->S_in || S_out || a->A_in || A_out || a->n_in || n_out || a->t0))
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: softmax keeps no state: no S, A, n or t0 (process the sequence in one call)", fn);
    if (!vla && (a->A_in || A_out))
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "%s: %s keeps no A state (only vla does)", fn, mech);
    if (!has_n && (a->n_in || n_out))
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION,
                        "%s: %s keeps no n state (linear does, and vla with normalize_output)", fn,
                        vla ? "vla without normalize_output" : mech);

    /* Buffers: right backend, large enough. */
    size_t qk = tensor_bytes(a->B, a->T, a->H, a->dk), vo = tensor_bytes(a->B, a->T, a->H, a->dv);
    size_t bt = tensor_bytes(a->B, a->T, a->H, 1);
    const size_t gsz = paper_delta ? vo : bt; /* delta-paper's gate is per value row */
    size_t sS = tensor_bytes(a->B, a->H, a->dk, a->dv), sA = tensor_bytes(a->B, a->H, a->dk, a->dk);
    size_t sn = tensor_bytes(a->B, a->H, a->dk, 1);
    if (!qk || !vo || !sA)
        return vla_fail(b, VLA_ERR_INVALID_DIMENSION, "%s: B*T*H*d is too large for this machine's size_t", fn);
    vla_status s;
    if ((s = check_buffer(b, fn, a->q, "q", qk, 1)) || (s = check_buffer(b, fn, a->k, "k", qk, 1)) ||
        (s = check_buffer(b, fn, a->v, "v", vo, 1)) || (s = check_buffer(b, fn, o_arg, "o", vo, forward_outputs)) ||
        (s = check_buffer(b, fn, a->u, "u", qk, 0)) || (s = check_buffer(b, fn, a->beta, "beta", bt, 0)) ||
        (s = check_buffer(b, fn, a->g, "g", gsz, 0)) || (s = check_buffer(b, fn, a->S_in, "S_in", sS, 0)) ||
        (s = check_buffer(b, fn, S_out, "S_out", sS, 0)) || (s = check_buffer(b, fn, a->A_in, "A_in", sA, 0)) ||
        (s = check_buffer(b, fn, A_out, "A_out", sA, 0)) || (s = check_buffer(b, fn, a->n_in, "n_in", sn, 0)) ||
        (s = check_buffer(b, fn, n_out, "n_out", sn, 0)))
        return s;
    if (!forward_outputs) return VLA_OK;

    /* Aliasing: outputs are distinct from each other and from every input, except that a
     * state may be updated in place (X_out == X_in). */
    const vla_buffer *in[] = {a->q, a->k, a->v, a->u, a->beta, a->g, a->S_in, a->A_in, a->n_in};
    const char *in_names[] = {"q", "k", "v", "u", "beta", "g", "S_in", "A_in", "n_in"};
    const vla_buffer *outs[] = {a->o, a->S_out, a->A_out, a->n_out};
    const char *out_names[] = {"o", "S_out", "A_out", "n_out"};
    const vla_buffer *own_in[] = {NULL, a->S_in, a->A_in, a->n_in};
    for (int i = 0; i < 4; i++) {
        if (!outs[i]) continue;
        for (int j = 0; j < 9; j++)
            if (in[j] && outs[i] == in[j] && in[j] != own_in[i])
                return vla_fail(b, VLA_ERR_ALIASING, "%s: output %s is the same buffer as input %s", fn, out_names[i],
                                in_names[j]);
        for (int j = i + 1; j < 4; j++)
            if (outs[j] == outs[i])
                return vla_fail(b, VLA_ERR_ALIASING, "%s: outputs %s and %s are the same buffer", fn, out_names[i],
                                out_names[j]);
    }
    return VLA_OK;
}

/* Numeric values of the "0 = 1/sqrt(dk)" defaults. */
static void resolve_scales(vla_attn_desc *d, int dk) {
    if (d->u_scale == 0) d->u_scale = 1.0 / sqrt((double)dk);
    if (d->scale == 0) d->scale = 1.0 / sqrt((double)dk);
}

vla_status vla_attention_resolve_algorithm(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                           vla_algorithm *out) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_attention_resolve_algorithm: backend is NULL");
    vla_clear_message(b);
    if (!out) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "vla_attention_resolve_algorithm: out is NULL");
    vla_status s = validate(b, "vla_attention_forward", d, a, 1);
    if (s != VLA_OK) return s;
    return b->iface->resolve_algorithm(b, d, a, out);
}

vla_status vla_attention_forward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_attention_forward: backend is NULL");
    vla_clear_message(b);
    vla_status s = validate(b, "vla_attention_forward", d, a, 1);
    if (s != VLA_OK) return s;
    vla_attn_desc r = *d;
    s = b->iface->resolve_algorithm(b, d, a, &r.algorithm);
    if (s != VLA_OK) return s;
    resolve_scales(&r, a->dk);
    return b->iface->attention_forward(b, &r, a);
}

/* ---- the backward op (VLA-MATH 5) ---- */

/* The gradient buffers: sizes, which mechanism and option each needs, backends, aliasing.
 * Runs after validate(), so the shapes and the desc are known to be valid. */
static vla_status validate_grads(vla_backend *b, const char *fn, const vla_attn_desc *d, const vla_attn_args *a,
                                 const vla_attn_grads *g) {
    if (!g) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "%s: grads is NULL", fn);
    const int has_S = mech_has_S(d), has_A = mech_has_A(d), has_n = mech_has_n(d);
    const char *mech = !has_n && d->mechanism == VLA_MECH_VLA ? "vla without normalize_output" : mech_names[d->mechanism];
    const vla_status C = VLA_ERR_INVALID_COMBINATION;
    if (g->dS_end && !has_S)
        return vla_fail(b, C, "%s: dS_end is given but %s keeps no S state", fn, mech);
    if (g->dA_end && !has_A) return vla_fail(b, C, "%s: dA_end is given but %s keeps no A state (only vla does)", fn, mech);
    if (g->dn_end && !has_n)
        return vla_fail(b, C, "%s: dn_end is given but %s keeps no n state (linear does, and vla with normalize_output)",
                        fn, mech);
    if (g->du && !a->u) return vla_fail(b, C, "%s: du is requested but args.u is not given", fn);
    if (g->dbeta && !a->beta) return vla_fail(b, C, "%s: dbeta is requested but args.beta is not given", fn);
    if (g->dg && !a->g) return vla_fail(b, C, "%s: dg is requested but args.g is not given", fn);
    if (g->dS_0 && !has_S) return vla_fail(b, C, "%s: dS_0 is requested but %s keeps no S state", fn, mech);
    if (g->dA_0 && !has_A)
        return vla_fail(b, C, "%s: dA_0 is requested but %s keeps no A state (only vla does)", fn, mech);
    if (g->dn_0 && !has_n)
        return vla_fail(b, C,
                        "%s: dn_0 is requested but %s keeps no n state (linear does, and vla with normalize_output)",
                        fn, mech);

    /* validate() has checked that these products fit a size_t. */
    const size_t qk = tensor_bytes(a->B, a->T, a->H, a->dk), vo = tensor_bytes(a->B, a->T, a->H, a->dv);
    const size_t bt = tensor_bytes(a->B, a->T, a->H, 1);
    const size_t sS = tensor_bytes(a->B, a->H, a->dk, a->dv), sA = tensor_bytes(a->B, a->H, a->dk, a->dk);
    const size_t sn = tensor_bytes(a->B, a->H, a->dk, 1);
    const vla_buffer *bufs[] = {g->dO, g->dS_end, g->dA_end, g->dn_end, g->dq, g->dk, g->dv, g->du,
                                g->dbeta, g->dg, g->dS_0, g->dA_0, g->dn_0};
    const char *names[] = {"dO", "dS_end", "dA_end", "dn_end", "dq", "dk", "dv", "du",
                           "dbeta", "dg", "dS_0", "dA_0", "dn_0"};
    const size_t gsz = d->mechanism == VLA_MECH_DELTA_PAPER ? vo : bt; /* per value row */
    const size_t need[] = {vo, sS, sA, sn, qk, qk, vo, qk, bt, gsz, sS, sA, sn};
    enum { N_GRAD_BUFS = 13, FIRST_GRAD_OUT = 4 };
    vla_status s;
    for (int i = 0; i < N_GRAD_BUFS; i++)
        if ((s = check_buffer(b, fn, bufs[i], names[i], need[i], i == 0))) return s;

    /* Aliasing: every output is its own buffer, distinct from every input (the forward's inputs
     * and initial states, and the upstream gradients). o and the final states are not touched. */
    const vla_buffer *in[] = {a->q, a->k, a->v, a->u, a->beta, a->g, a->S_in, a->A_in, a->n_in,
                              g->dO, g->dS_end, g->dA_end, g->dn_end};
    const char *in_names[] = {"q", "k", "v", "u", "beta", "g", "S_in", "A_in", "n_in",
                              "dO", "dS_end", "dA_end", "dn_end"};
    for (int i = FIRST_GRAD_OUT; i < N_GRAD_BUFS; i++) {
        if (!bufs[i]) continue;
        for (int j = 0; j < 13; j++)
            if (in[j] && bufs[i] == in[j])
                return vla_fail(b, VLA_ERR_ALIASING, "%s: output %s is the same buffer as input %s", fn, names[i],
                                in_names[j]);
        for (int j = i + 1; j < N_GRAD_BUFS; j++)
            if (bufs[j] == bufs[i])
                return vla_fail(b, VLA_ERR_ALIASING, "%s: outputs %s and %s are the same buffer", fn, names[i],
                                names[j]);
    }
    return VLA_OK;
}

vla_status vla_attention_backward(vla_backend *b, const vla_attn_desc *d, const vla_attn_args *a,
                                  const vla_attn_grads *g) {
    const char *fn = "vla_attention_backward";
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "%s: backend is NULL", fn);
    vla_clear_message(b);
    vla_status s = validate(b, fn, d, a, 0);
    if (s != VLA_OK) return s;
    if ((s = validate_grads(b, fn, d, a, g))) return s;
    if (!b->iface->attention_backward)
        return vla_fail(b, VLA_ERR_UNSUPPORTED, "%s: the %s backend has no backward op", fn, b->name);

    /* The backward's algorithms: softmax's fused one, and the sequential and chunked forms (every
     * algorithm computes the same gradient). AUTO takes what the forward would run, with the scans
     * mapped to the chunked form they are built on. */
    vla_attn_desc r = *d;
    if (r.algorithm == VLA_ALGO_AUTO) {
        if ((s = b->iface->resolve_algorithm(b, d, a, &r.algorithm))) return s;
        if (r.algorithm == VLA_ALGO_SCAN || r.algorithm == VLA_ALGO_TWO_LEVEL) r.algorithm = VLA_ALGO_CHUNKED;
        if (r.algorithm == VLA_ALGO_CHUNKED && b->iface->backward_auto_chunked && !b->iface->backward_auto_chunked(b, d, a))
            r.algorithm = VLA_ALGO_SEQUENTIAL;
    } else if (r.algorithm == VLA_ALGO_SCAN || r.algorithm == VLA_ALGO_TWO_LEVEL) {
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "%s: algorithm '%s': the backward runs sequential and chunked forms (and fused for softmax)",
                        fn, algo_names[r.algorithm]);
    }
    resolve_scales(&r, a->dk);
    return b->iface->attention_backward(b, &r, a, g);
}
