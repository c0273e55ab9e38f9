/* vla-run: runs one attention op of libvla on .npy files.
 *
 *   vla-run --mechanism vla --q q.npy --k k.npy --v v.npy --o o.npy [options]
 *
 * Inputs are float32 or float64 .npy files: q, k, u [B,T,H,dk]; v [B,T,H,dv]; beta, g [B,T,H]
 * (delta-paper's gate g [B,T,H,dv]); states S [B,H,dk,dv], A [B,H,dk,dk], n [B,H,dk]. Outputs are
 * float32 .npy files.
 *
 * With --grad-o (the loss's gradient with respect to o) the backward op runs after the forward
 * (vla_attention_backward, docs/VLA-MATH.md section 5) and writes the gradients asked for with
 * --grad-q ... --grad-n-state-in, each in the layout of the matching input; --grad-state-out,
 * --grad-a-state-out and --grad-n-state-out give the loss's gradients with respect to the final
 * states (absent: zero).
 *
 * Contract with scripts: on any failure the exit status is non-zero, stderr holds exactly
 * one line "vla-run: <file or flag>: <problem>", and no output file of this run is left
 * behind (outputs are written only after the op succeeded, each atomically). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "npy.h"

#include <vla/vla.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_FAILED 1   /* bad input, or the op failed */
#define EXIT_USAGE 2 /* bad command line */

/* The one line a failure prints: "vla-run: <what>: <msg>", or "vla-run: <msg>" when the
 * message already starts with the file it is about (npy errors do). Returns `code`. */
static int fail(int code, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(int code, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    code = cli_vfail("vla-run", what, code, fmt, ap);
    va_end(ap);
    return code;
}

/* A library failure, under `what`. The library prefixes its messages with the function's
 * name ("vla_backend_open: ..."); `what` (a flag) tells the user more, so that prefix goes. */
static int lib_fail(int code, const char *what, const char *msg) {
    msg = cli_lib_message(msg);
    return fail(code, what, "%s", msg[0] ? msg : "failed (the library gave no message)");
}

/* ---- options ------------------------------------------------------------------------------ */

typedef struct opts {
    const char *backend, *mechanism, *algo, *preset, *feature_map;
    const char *q, *k, *v, *u, *beta, *g, *o;
    const char *S_in, *S_out, *A_in, *A_out, *n_in, *n_out;
    const char *dO, *dS_end, *dA_end, *dn_end; /* backward: upstream gradients */
    const char *dq, *dk, *dv, *du, *dbeta, *dg, *dS_0, *dA_0, *dn_0; /* backward: outputs */
    int chunk, refresh, threads, segment_chunks;
    int64_t position;
    double lambda0, eps, refresh_size, u_scale, scale;
    int normalize_output, no_normalize_output, verbose;
    int help, version, list_devices;
    unsigned char set[64]; /* set[i]: flags[i] was given (explicit flags override the preset) */
} opts;

#define OFF(f) offsetof(opts, f)
static const cli_flag flags[] = {
    {"--backend", CLI_STR, OFF(backend), "NAME", "cpu", "backend/device: cpu, cuda[:N], opencl[:P:D], auto"},
    {"--mechanism", CLI_STR, OFF(mechanism), "M", "none; vla with --preset",
     "softmax|linear|delta|vla|delta-paper, required without --preset"},
    {"--algo", CLI_STR, OFF(algo), "A", "auto", "auto|sequential|scan|chunked|two-level|fused"},
    {"--preset", CLI_STR, OFF(preset), "P", "none", "paper: the paper's VLA settings; explicit flags override it"},
    {"--q", CLI_STR, OFF(q), "FILE", "required", "queries [B,T,H,dk]"},
    {"--k", CLI_STR, OFF(k), "FILE", "required", "keys [B,T,H,dk]"},
    {"--v", CLI_STR, OFF(v), "FILE", "required", "values [B,T,H,dv]"},
    {"--u", CLI_STR, OFF(u), "FILE", "u = s_u * normalize(k)", "vla penalty vectors [B,T,H,dk]"},
    {"--beta", CLI_STR, OFF(beta), "FILE", "1", "delta write strength [B,T,H], in (0,1]"},
    {"--g", CLI_STR, OFF(g), "FILE", "1", "delta decay [B,T,H]; delta-paper gate per value row [B,T,H,dv]; in (0,1]"},
    {"--o", CLI_STR, OFF(o), "FILE", "required", "output [B,T,H,dv], float32"},
    {"--state-in", CLI_STR, OFF(S_in), "FILE", "S = 0", "initial state S [B,H,dk,dv]"},
    {"--state-out", CLI_STR, OFF(S_out), "FILE", "not written", "final state S [B,H,dk,dv]"},
    {"--a-state-in", CLI_STR, OFF(A_in), "FILE", "A = I/lambda0", "vla: initial A [B,H,dk,dk]"},
    {"--a-state-out", CLI_STR, OFF(A_out), "FILE", "not written", "vla: final A [B,H,dk,dk]"},
    {"--n-state-in", CLI_STR, OFF(n_in), "FILE", "n = 0", "initial normaliser n [B,H,dk]"},
    {"--n-state-out", CLI_STR, OFF(n_out), "FILE", "not written", "final normaliser n [B,H,dk]"},
    {"--grad-o", CLI_STR, OFF(dO), "FILE", "no backward", "run the backward too: dL/do [B,T,H,dv]"},
    {"--grad-state-out", CLI_STR, OFF(dS_end), "FILE", "0", "backward: dL/dS of the final state [B,H,dk,dv]"},
    {"--grad-a-state-out", CLI_STR, OFF(dA_end), "FILE", "0", "backward: dL/dA of the final A [B,H,dk,dk]"},
    {"--grad-n-state-out", CLI_STR, OFF(dn_end), "FILE", "0", "backward: dL/dn of the final n [B,H,dk]"},
    {"--grad-q", CLI_STR, OFF(dq), "FILE", "not written", "backward: dL/dq [B,T,H,dk]"},
    {"--grad-k", CLI_STR, OFF(dk), "FILE", "not written", "backward: dL/dk [B,T,H,dk]"},
    {"--grad-v", CLI_STR, OFF(dv), "FILE", "not written", "backward: dL/dv [B,T,H,dv]"},
    {"--grad-u", CLI_STR, OFF(du), "FILE", "not written", "backward: dL/du [B,T,H,dk] (needs --u)"},
    {"--grad-beta", CLI_STR, OFF(dbeta), "FILE", "not written", "backward: dL/dbeta [B,T,H] (needs --beta)"},
    {"--grad-g", CLI_STR, OFF(dg), "FILE", "not written", "backward: dL/dg [B,T,H] (delta-paper [B,T,H,dv]; needs --g)"},
    {"--grad-state-in", CLI_STR, OFF(dS_0), "FILE", "not written", "backward: dL/dS of the initial state [B,H,dk,dv]"},
    {"--grad-a-state-in", CLI_STR, OFF(dA_0), "FILE", "not written",
     "backward: dL/dA of the initial A [B,H,dk,dk] (symmetric part)"},
    {"--grad-n-state-in", CLI_STR, OFF(dn_0), "FILE", "not written", "backward: dL/dn of the initial n [B,H,dk]"},
    {"--position", CLI_I64, OFF(position), "T0", "0", "absolute position of the first token (streaming)"},
    {"--chunk", CLI_INT, OFF(chunk), "C", "64", "chunk size of the chunked forms"},
    {"--segment-chunks", CLI_INT, OFF(segment_chunks), "N", "0 (backend picks)", "two-level: chunks per segment"},
    {"--lambda0", CLI_DBL, OFF(lambda0), "X", "0.1", "vla: A_0 = I / lambda0, > 0"},
    {"--eps", CLI_DBL, OFF(eps), "X", "1e-4", "normalisation floor and denominator, > 0"},
    {"--refresh", CLI_INT, OFF(refresh), "R", "0 (never)", "vla: refresh period"},
    {"--refresh-size", CLI_DBL, OFF(refresh_size), "RHO", "1e-3", "vla: refresh size"},
    {"--u-scale", CLI_DBL, OFF(u_scale), "S", "1", "vla: scale s_u of u; 0 = 1/sqrt(dk)"},
    {"--feature-map", CLI_STR, OFF(feature_map), "F", "elu1 for linear and delta-paper, else none",
     "none|elu1 (delta-paper: on q only)"},
    {"--normalize-output", CLI_BOOL, OFF(normalize_output), NULL, "off", "vla: o = S q~ / max(q~ . n, eps)"},
    {"--no-normalize-output", CLI_BOOL, OFF(no_normalize_output), NULL, "", "vla: unnormalised output (over a preset)"},
    {"--scale", CLI_DBL, OFF(scale), "X", "0 = 1/sqrt(dk)", "softmax logit scale"},
    {"--threads", CLI_INT, OFF(threads), "N", "0 (OpenMP default)", "cpu threads"},
    {"--verbose", CLI_BOOL, OFF(verbose), NULL, "off", "one-line summary on stderr"},
    {"--list-devices", CLI_BOOL, OFF(list_devices), NULL, "", "print the backends/devices and exit"},
    {"--version", CLI_BOOL, OFF(version), NULL, "", "print the version and exit"},
    {"--help", CLI_BOOL, OFF(help), NULL, "", "print this help and exit"},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))
_Static_assert(sizeof flags / sizeof flags[0] <= sizeof((opts *)0)->set, "opts.set is too small for the flag table");

static void print_help(void) {
    printf("usage: vla-run --mechanism M --q FILE --k FILE --v FILE --o FILE [options]\n"
           "Runs one libvla attention op on .npy files (float32/float64 in, float32 out).\n\n");
    cli_print_flags(flags, N_FLAGS, 26);
    printf("\nFlags take their value as --flag VALUE or --flag=VALUE. With --preset, explicit flags\n"
           "override the preset whatever their order. --grad-o runs the backward after the forward\n"
           "(the gradients of L = <grad-o, o> + <grad-state-out, S> + ...; --algo picks its algorithm:\n"
           "sequential, chunked, fused for softmax, or auto). Exit status: 0 ok, 1 bad input or failed\n"
           "op, 2 bad command line; on failure one line on stderr and no output file.\n");
}

/* Stores one flag's value into o. */
static int set_value(opts *o, const cli_flag *f, const char *val) {
    const char *bad = cli_store_flag(o, f, val);
    return bad ? fail(EXIT_USAGE, f->name, "%s: '%s'", bad, val) : 0;
}

static const cli_flag *find_flag(const char *name, size_t len) {
    for (int i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) return &flags[i];
    return NULL;
}

/* argv -> opts. Accepts --flag VALUE and --flag=VALUE; a repeated flag keeps its last value. */
static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (strcmp(a, "-h") == 0) a = "--help";
        size_t len = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
        const cli_flag *f = strncmp(a, "--", 2) == 0 ? find_flag(a, len) : NULL;
        if (!f) {
            if (strncmp(a, "-", 1) == 0) return fail(EXIT_USAGE, a, "unknown flag (see --help)");
            return fail(EXIT_USAGE, a, "unexpected argument (every input is given with a flag; see --help)");
        }
        o->set[f - flags] = 1;
        if (f->kind == CLI_BOOL) {
            if (a[len]) return fail(EXIT_USAGE, f->name, "takes no value");
            set_value(o, f, "");
            continue;
        }
        const char *val = a[len] == '=' ? a + len + 1 : (i + 1 < argc ? argv[++i] : NULL);
        /* "--q --k k.npy": the value is missing, it is not a file named "--k" */
        if (!val || (a[len] != '=' && strncmp(val, "--", 2) == 0 && find_flag(val, strcspn(val, "="))))
            return fail(EXIT_USAGE, f->name, "missing value");
        int rc = set_value(o, f, val);
        if (rc) return rc;
    }
    return 0;
}

static int is_set(const opts *o, size_t off) {
    for (int i = 0; i < N_FLAGS; i++)
        if (flags[i].off == off) return o->set[i];
    return 0;
}

/* Flags that must be present, and pairs that cannot be. */
static int check_required(const opts *o) {
    if (!o->mechanism && !o->preset)
        return fail(EXIT_USAGE, "--mechanism", "required (softmax|linear|delta|vla|delta-paper; see --help)");
    const char *names[] = {"--q", "--k", "--v", "--o"};
    const char *vals[] = {o->q, o->k, o->v, o->o};
    for (int i = 0; i < 4; i++)
        if (!vals[i]) return fail(EXIT_USAGE, names[i], "required (see --help)");
    if (o->normalize_output && o->no_normalize_output)
        return fail(EXIT_USAGE, "--no-normalize-output", "contradicts --normalize-output");
    /* The backward's flags need --grad-o; and the gradient of an input needs that input. */
    const char *bwd[] = {o->dS_end, o->dA_end, o->dn_end, o->dq, o->dk, o->dv, o->du, o->dbeta, o->dg,
                         o->dS_0, o->dA_0, o->dn_0};
    const char *bwd_names[] = {"--grad-state-out", "--grad-a-state-out", "--grad-n-state-out", "--grad-q",
                               "--grad-k", "--grad-v", "--grad-u", "--grad-beta", "--grad-g", "--grad-state-in",
                               "--grad-a-state-in", "--grad-n-state-in"};
    for (int i = 0; i < 12 && !o->dO; i++)
        if (bwd[i]) return fail(EXIT_USAGE, bwd_names[i], "needs --grad-o (the backward runs only with it)");
    if (o->du && !o->u) return fail(EXIT_USAGE, "--grad-u", "needs --u (u = s_u normalize(k) has no input of its own)");
    if (o->dbeta && !o->beta) return fail(EXIT_USAGE, "--grad-beta", "needs --beta");
    if (o->dg && !o->g) return fail(EXIT_USAGE, "--grad-g", "needs --g");
    /* Two outputs with one path would overwrite each other. */
    const char *out[] = {o->o, o->S_out, o->A_out, o->n_out, o->dq, o->dk, o->dv, o->du, o->dbeta, o->dg,
                         o->dS_0, o->dA_0, o->dn_0};
    const char *out_names[] = {"--o", "--state-out", "--a-state-out", "--n-state-out", "--grad-q", "--grad-k",
                               "--grad-v", "--grad-u", "--grad-beta", "--grad-g", "--grad-state-in",
                               "--grad-a-state-in", "--grad-n-state-in"};
    enum { N_OUT_FLAGS = 13 };
    for (int i = 0; i < N_OUT_FLAGS; i++)
        for (int j = i + 1; j < N_OUT_FLAGS; j++)
            if (out[i] && out[j] && strcmp(out[i], out[j]) == 0)
                return fail(EXIT_USAGE, out_names[j], "'%s' is also the file of %s", out[j], out_names[i]);
    return 0;
}

/* ---- the descriptor: defaults, then the preset, then explicit flags ----------------------- */

static int desc_names(const opts *o, vla_attn_desc *d) {
    vla_mechanism m = VLA_MECH_VLA; /* the paper preset's mechanism when none is named */
    if (o->mechanism && vla_mechanism_from_name(o->mechanism, &m) != VLA_OK)
        return lib_fail(EXIT_USAGE, "--mechanism", vla_last_message());
    if (vla_attn_desc_init(d, m) != VLA_OK) return lib_fail(EXIT_FAILED, "--mechanism", vla_last_message());
    if (o->preset && vla_attn_desc_preset(d, o->preset) != VLA_OK)
        return lib_fail(EXIT_USAGE, "--preset", vla_last_message());
    if (o->mechanism) d->mechanism = m; /* explicit beats the preset */
    if (o->algo && vla_algorithm_from_name(o->algo, &d->algorithm) != VLA_OK)
        return lib_fail(EXIT_USAGE, "--algo", vla_last_message());
    if (o->feature_map && vla_feature_map_from_name(o->feature_map, &d->feature_map) != VLA_OK)
        return lib_fail(EXIT_USAGE, "--feature-map", vla_last_message());
    return 0;
}

/* Range checks are the library's (it names the parameter); the tool only copies. */
static int build_desc(const opts *o, vla_attn_desc *d) {
    int rc = desc_names(o, d);
    if (rc) return rc;
    if (is_set(o, OFF(chunk))) d->chunk = o->chunk;
    if (is_set(o, OFF(segment_chunks))) d->segment_chunks = o->segment_chunks;
    if (is_set(o, OFF(lambda0))) d->lambda0 = o->lambda0;
    if (is_set(o, OFF(eps))) d->eps = o->eps;
    if (is_set(o, OFF(refresh))) d->refresh = o->refresh;
    if (is_set(o, OFF(refresh_size))) d->refresh_size = o->refresh_size;
    if (is_set(o, OFF(u_scale))) d->u_scale = o->u_scale;
    if (is_set(o, OFF(scale))) d->scale = o->scale;
    if (o->normalize_output) d->normalize_output = 1;
    if (o->no_normalize_output) d->normalize_output = 0;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------------ */

/* Inputs first (the forward's, then the backward's upstream gradients), then outputs. */
enum {
    T_Q, T_K, T_V, T_U, T_BETA, T_G, T_S_IN, T_A_IN, T_N_IN, T_DO, T_DS_END, T_DA_END, T_DN_END,
    T_O, T_S_OUT, T_A_OUT, T_N_OUT, T_DQ, T_DK, T_DV, T_DU, T_DBETA, T_DG, T_DS_0, T_DA_0, T_DN_0, N_TENSORS
};
#define FIRST_OUT T_O

typedef struct tensor {
    const char *flag, *path; /* path NULL: not used in this run */
    int ndim;
    int64_t shape[4]; /* expected shape (inputs: checked against the file; outputs: written) */
    npy_array a;      /* host data (inputs: as loaded; outputs: as downloaded into a.f32) */
    vla_buffer *buf;
} tensor;

typedef struct run {
    opts o;
    vla_attn_desc d;
    tensor t[N_TENSORS];
    int64_t B, T, H, dk, dv;
    vla_backend *b;
    double ms, ms_bwd;
    vla_algorithm algo;
} run;

static void tensors_init(run *r) {
    const opts *o = &r->o;
    const char *flag_of[N_TENSORS] = {"--q", "--k", "--v", "--u", "--beta", "--g",
                                      "--state-in", "--a-state-in", "--n-state-in",
                                      "--grad-o", "--grad-state-out", "--grad-a-state-out", "--grad-n-state-out",
                                      "--o", "--state-out", "--a-state-out", "--n-state-out",
                                      "--grad-q", "--grad-k", "--grad-v", "--grad-u", "--grad-beta", "--grad-g",
                                      "--grad-state-in", "--grad-a-state-in", "--grad-n-state-in"};
    const char *path[N_TENSORS] = {o->q, o->k, o->v, o->u, o->beta, o->g,
                                   o->S_in, o->A_in, o->n_in,
                                   o->dO, o->dS_end, o->dA_end, o->dn_end,
                                   o->o, o->S_out, o->A_out, o->n_out,
                                   o->dq, o->dk, o->dv, o->du, o->dbeta, o->dg,
                                   o->dS_0, o->dA_0, o->dn_0};
    for (int i = 0; i < N_TENSORS; i++) {
        r->t[i].flag = flag_of[i];
        r->t[i].path = path[i];
    }
}

static void tensors_free(run *r) {
    for (int i = 0; i < N_TENSORS; i++) {
        vla_buffer_free(r->t[i].buf);
        npy_free(&r->t[i].a);
    }
}

static void fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

static void set_expect(tensor *t, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4] = {a, b, c, d};
    t->ndim = ndim;
    memcpy(t->shape, s, sizeof s);
}

/* The file's shape must be exactly the expected one. `why` says where the expectation came from. */
static int check_shape(const tensor *t, const char *why) {
    int same = t->a.ndim == t->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = t->a.shape[i] == t->shape[i];
    if (same) return 0;
    char got[160], want[160];
    fmt_shape(got, sizeof got, t->a.ndim, t->a.shape);
    fmt_shape(want, sizeof want, t->ndim, t->shape);
    return fail(EXIT_FAILED, t->path, "shape %s, expected %s (%s)", got, want, why);
}

/* q [B,T,H,dk] and v [B,T,H,dv] fix every dimension. Each must be >= 1 and fit an int, and
 * d <= 256 (the library's limit) is checked here already because it bounds the state sizes
 * allocated before the op validates anything. */
static int take_dims(run *r) {
    const tensor *q = &r->t[T_Q], *v = &r->t[T_V];
    char got[160];
    const tensor *tt[2] = {q, v};
    for (int j = 0; j < 2; j++) {
        int ok = tt[j]->a.ndim == 4;
        for (int i = 0; ok && i < 4; i++) ok = tt[j]->a.shape[i] >= 1 && tt[j]->a.shape[i] <= INT_MAX;
        ok = ok && tt[j]->a.shape[3] <= 256;
        fmt_shape(got, sizeof got, tt[j]->a.ndim, tt[j]->a.shape);
        if (!ok)
            return fail(EXIT_FAILED, tt[j]->path, "shape %s: expected [B,T,H,%s], B,T,H >= 1, %s in 1..256", got,
                        j ? "dv" : "dk", j ? "dv" : "dk");
    }
    r->B = q->a.shape[0], r->T = q->a.shape[1], r->H = q->a.shape[2], r->dk = q->a.shape[3];
    r->dv = v->a.shape[3];
    return 0;
}

/* Expected shapes of every tensor, from q and v. */
static void expect_all(run *r) {
    int64_t B = r->B, T = r->T, H = r->H, dk = r->dk, dv = r->dv;
    set_expect(&r->t[T_Q], 4, B, T, H, dk);
    set_expect(&r->t[T_K], 4, B, T, H, dk);
    set_expect(&r->t[T_V], 4, B, T, H, dv);
    set_expect(&r->t[T_U], 4, B, T, H, dk);
    set_expect(&r->t[T_BETA], 3, B, T, H, 0);
    if (r->d.mechanism == VLA_MECH_DELTA_PAPER) set_expect(&r->t[T_G], 4, B, T, H, dv); /* a gate per value row */
    else set_expect(&r->t[T_G], 3, B, T, H, 0);
    set_expect(&r->t[T_S_IN], 4, B, H, dk, dv);
    set_expect(&r->t[T_A_IN], 4, B, H, dk, dk);
    set_expect(&r->t[T_N_IN], 3, B, H, dk, 0);
    set_expect(&r->t[T_O], 4, B, T, H, dv);
    set_expect(&r->t[T_S_OUT], 4, B, H, dk, dv);
    set_expect(&r->t[T_A_OUT], 4, B, H, dk, dk);
    set_expect(&r->t[T_N_OUT], 3, B, H, dk, 0);
    /* The backward's tensors have the layouts of what they are gradients of. */
    static const int like[][2] = {{T_DO, T_O},       {T_DS_END, T_S_OUT}, {T_DA_END, T_A_OUT}, {T_DN_END, T_N_OUT},
                                  {T_DQ, T_Q},       {T_DK, T_K},         {T_DV, T_V},         {T_DU, T_U},
                                  {T_DBETA, T_BETA}, {T_DG, T_G},         {T_DS_0, T_S_IN},    {T_DA_0, T_A_IN},
                                  {T_DN_0, T_N_IN}};
    for (size_t i = 0; i < sizeof like / sizeof like[0]; i++) {
        r->t[like[i][0]].ndim = r->t[like[i][1]].ndim;
        memcpy(r->t[like[i][0]].shape, r->t[like[i][1]].shape, sizeof r->t[0].shape);
    }
}

/* Loads every input file (q and v first: they fix the shapes) and checks its shape. */
static int load_inputs(run *r) {
    static const char *why[T_O] = {"(q fixes the shapes)", "must equal q's shape", "v shares B,T,H with q", "must equal q's shape",
                                   "[B,T,H] of q", "[B,T,H] of q", "S is [B,H,dk,dv]", "A is [B,H,dk,dk]",
                                   "n is [B,H,dk]", "the shape of o", "the shape of S", "the shape of A",
                                   "the shape of n"};
    static const int order[T_O] = {T_Q,    T_V,    T_K,  T_U,      T_BETA,   T_G,     T_S_IN,
                                   T_A_IN, T_N_IN, T_DO, T_DS_END, T_DA_END, T_DN_END};
    char err[1024];
    for (int j = 0; j < T_O; j++) {
        tensor *t = &r->t[order[j]];
        if (!t->path) continue;
        if (npy_read_f32(t->path, &t->a, err, sizeof err)) return fail(EXIT_FAILED, NULL, "%s", err); /* "file: why" */
        if (order[j] == T_V) {
            int rc = take_dims(r);
            if (rc) return rc;
            expect_all(r);
        }
        if (order[j] != T_Q) {
            const int row_gate = order[j] == T_G && r->d.mechanism == VLA_MECH_DELTA_PAPER;
            int rc = check_shape(t, row_gate ? "delta-paper's gate is [B,T,H,dv]" : why[order[j]]);
            if (rc) return rc;
        }
    }
    return 0;
}

/* ---- the op ------------------------------------------------------------------------------- */

static int64_t count_of(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n; /* no overflow: made of q's and v's dimensions (files that exist), dk, dv <= 256 (take_dims) */
}

static int open_backend(run *r) {
    const char *name = r->o.backend ? r->o.backend : "cpu";
    if (vla_backend_open(name, &r->b) != VLA_OK) return lib_fail(EXIT_FAILED, "--backend", vla_last_message());
    if (is_set(&r->o, OFF(threads)) && vla_backend_set_threads(r->b, r->o.threads) != VLA_OK)
        return lib_fail(EXIT_FAILED, "--threads", vla_backend_message(r->b));
    return 0;
}

/* One device buffer per tensor in use; inputs uploaded. */
static int alloc_upload(run *r) {
    for (int i = 0; i < N_TENSORS; i++) {
        tensor *t = &r->t[i];
        if (!t->path) continue;
        size_t bytes = (size_t)count_of(t) * sizeof(float);
        if (vla_buffer_alloc(r->b, bytes, &t->buf) != VLA_OK)
            return lib_fail(EXIT_FAILED, t->flag, vla_backend_message(r->b));
        if (i < FIRST_OUT && vla_buffer_upload(t->buf, 0, t->a.f32, bytes) != VLA_OK)
            return lib_fail(EXIT_FAILED, t->flag, vla_backend_message(r->b));
    }
    return 0;
}

static void fill_args(run *r, vla_attn_args *a) {
    memset(a, 0, sizeof *a);
    a->B = (int)r->B, a->T = (int)r->T, a->H = (int)r->H, a->dk = (int)r->dk, a->dv = (int)r->dv;
    a->t0 = r->o.position;
    a->q = r->t[T_Q].buf, a->k = r->t[T_K].buf, a->v = r->t[T_V].buf;
    a->u = r->t[T_U].buf, a->beta = r->t[T_BETA].buf, a->g = r->t[T_G].buf;
    a->S_in = r->t[T_S_IN].buf, a->A_in = r->t[T_A_IN].buf, a->n_in = r->t[T_N_IN].buf;
    a->o = r->t[T_O].buf;
    a->S_out = r->t[T_S_OUT].buf, a->A_out = r->t[T_A_OUT].buf, a->n_out = r->t[T_N_OUT].buf;
}

static void fill_grads(run *r, vla_attn_grads *g) {
    memset(g, 0, sizeof *g);
    g->dO = r->t[T_DO].buf, g->dS_end = r->t[T_DS_END].buf, g->dA_end = r->t[T_DA_END].buf;
    g->dn_end = r->t[T_DN_END].buf;
    g->dq = r->t[T_DQ].buf, g->dk = r->t[T_DK].buf, g->dv = r->t[T_DV].buf, g->du = r->t[T_DU].buf;
    g->dbeta = r->t[T_DBETA].buf, g->dg = r->t[T_DG].buf;
    g->dS_0 = r->t[T_DS_0].buf, g->dA_0 = r->t[T_DA_0].buf, g->dn_0 = r->t[T_DN_0].buf;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int forward(run *r) {
    vla_attn_args a;
    fill_args(r, &a);
    /* resolve first: it validates like forward does, and names the algorithm AUTO picks */
    if (vla_attention_resolve_algorithm(r->b, &r->d, &a, &r->algo) != VLA_OK)
        return lib_fail(EXIT_FAILED, "vla_attention_forward", vla_backend_message(r->b));
    double t = now_ms();
    if (vla_attention_forward(r->b, &r->d, &a) != VLA_OK || vla_backend_synchronize(r->b) != VLA_OK)
        return lib_fail(EXIT_FAILED, "vla_attention_forward", vla_backend_message(r->b));
    r->ms = now_ms() - t;
    return 0;
}

/* After the forward: the gradients, when --grad-o asks for them. */
static int backward(run *r) {
    if (!r->o.dO) return 0;
    vla_attn_args a;
    vla_attn_grads g;
    fill_args(r, &a);
    fill_grads(r, &g);
    double t = now_ms();
    if (vla_attention_backward(r->b, &r->d, &a, &g) != VLA_OK || vla_backend_synchronize(r->b) != VLA_OK)
        return lib_fail(EXIT_FAILED, "vla_attention_backward", vla_backend_message(r->b));
    r->ms_bwd = now_ms() - t;
    return 0;
}

static int download(run *r) {
    for (int i = FIRST_OUT; i < N_TENSORS; i++) {
        tensor *t = &r->t[i];
        if (!t->path) continue;
        size_t n = (size_t)count_of(t);
        t->a.f32 = malloc(n * sizeof(float));
        if (!t->a.f32) return fail(EXIT_FAILED, t->flag, "out of host memory for %zu floats", n);
        if (vla_buffer_download(t->buf, 0, t->a.f32, n * sizeof(float)) != VLA_OK)
            return lib_fail(EXIT_FAILED, t->flag, vla_backend_message(r->b));
    }
    return 0;
}

/* Writes every output; if one fails, removes those this run already wrote (all or nothing). */
static int write_outputs(run *r) {
    const char *written[N_TENSORS];
    int nw = 0;
    char err[1024];
    for (int i = FIRST_OUT; i < N_TENSORS; i++) {
        tensor *t = &r->t[i];
        if (!t->path) continue;
        if (npy_write_f32(t->path, t->a.f32, t->ndim, t->shape, err, sizeof err)) {
            while (nw > 0) remove(written[--nw]);
            return fail(EXIT_FAILED, NULL, "%s", err); /* "file: why" */
        }
        written[nw++] = t->path;
    }
    return 0;
}

/* Warnings go out only after success, so a failure stays exactly one line. */
static void warn_inputs(const run *r) {
    for (int i = 0; i < FIRST_OUT; i++) {
        const tensor *t = &r->t[i];
        if (!t->path) continue;
        int64_t nonfinite = 0, outside = 0, n = count_of(t);
        for (int64_t j = 0; j < n; j++) {
            float x = t->a.f32[j];
            nonfinite += !isfinite(x);
            outside += !(x > 0.0f && x <= 1.0f);
        }
        if (nonfinite)
            fprintf(stderr, "vla-run: warning: %s: %lld of %lld values are not finite (as float32)\n", t->path,
                    (long long)nonfinite, (long long)n);
        if ((i == T_BETA || i == T_G) && outside)
            fprintf(stderr, "vla-run: warning: %s: %lld of %lld values are outside (0, 1]\n", t->path,
                    (long long)outside, (long long)n);
    }
}

static void summary(const run *r) {
    const vla_attn_desc *d = &r->d;
    fprintf(stderr,
            "vla-run: %s/%s on %s (%s): B=%lld T=%lld H=%lld dk=%lld dv=%lld t0=%lld chunk=%d lambda0=%g eps=%g "
            "R=%d rho=%g u_scale=%g phi=%s norm=%d: %.3f ms%s",
            vla_mechanism_name(d->mechanism), vla_algorithm_name(r->algo), vla_backend_name(r->b),
            vla_backend_device(r->b), (long long)r->B, (long long)r->T, (long long)r->H, (long long)r->dk,
            (long long)r->dv, (long long)r->o.position, d->chunk, d->lambda0, d->eps, d->refresh, d->refresh_size,
            d->u_scale, vla_feature_map_name(d->feature_map), d->normalize_output, r->ms, r->o.dO ? "" : "\n");
    if (r->o.dO) fprintf(stderr, ", backward %.3f ms\n", r->ms_bwd);
}

static int run_op(run *r) {
    int rc;
    tensors_init(r);
    if ((rc = load_inputs(r)) || (rc = open_backend(r)) || (rc = alloc_upload(r)) || (rc = forward(r)) ||
        (rc = backward(r)) || (rc = download(r)) || (rc = write_outputs(r)))
        return rc;
    warn_inputs(r);
    if (r->o.verbose) summary(r);
    return 0;
}

/* ---- informational modes ------------------------------------------------------------------- */

static int list_devices(void) {
    int n = 0;
    if (vla_list_devices(NULL, 0, &n) != VLA_OK) return fail(EXIT_FAILED, "--list-devices", "%s", vla_last_message());
    vla_device_info *info = calloc(n > 0 ? (size_t)n : 1, sizeof *info);
    if (!info) return fail(EXIT_FAILED, "--list-devices", "out of memory");
    int m = 0;
    if (vla_list_devices(info, n, &m) != VLA_OK) {
        free(info);
        return fail(EXIT_FAILED, "--list-devices", "%s", vla_last_message());
    }
    for (int i = 0; i < n && i < m; i++)
        printf("%-16s %s%s\n", info[i].name, info[i].description, info[i].is_gpu ? " (gpu)" : "");
    free(info);
    return 0;
}

int main(int argc, char **argv) {
    static run r; /* static: zeroed, and large arrays stay off the stack */
    int rc = parse_args(argc, argv, &r.o);
    if (rc) return rc;
    if (r.o.help) {
        print_help();
        return 0;
    }
    if (r.o.version) {
        printf("vla-run %s (libvla %s)\n", VLA_VERSION_STRING, vla_version());
        return 0;
    }
    if (r.o.list_devices) return list_devices();
    if ((rc = check_required(&r.o)) || (rc = build_desc(&r.o, &r.d))) return rc;
    rc = run_op(&r);
    tensors_free(&r);
    vla_backend_close(r.b);
    return rc;
}
