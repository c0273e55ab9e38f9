/* vla-probe: measures the paper's stability and capacity claims on stated inputs and prints
 * what it finds beside what the paper reports.
 *
 *   vla-probe states   [options]   ||S_t||_F and ||A_t||_F per token (paper 4.1, 6.2, Figure 4)
 *   vla-probe jacobian [options]   spectral norms of dS_t/dS_{t-1} and of window products
 *                                  (paper 4.2, Proposition 2, Table 2; VLA-MATH 4)
 *   vla-probe capacity [options]   recall of n pairs written into the state (paper 4.3, Prop. 3)
 *
 * The library (CPU backend by default) runs the mechanisms' forward ops and returns their
 * states; the measurements on them, and the Jacobians' a_t (the A recurrence), are computed in
 * double by tools/probe_math.c. Contract with scripts: on bad input or a failed op the exit
 * status is non-zero and stderr holds exactly one line "vla-probe: ...". */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "probe_math.h"

#include <vla/vla.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_FAILED 1   /* the library or the machine failed */
#define EXIT_USAGE 2 /* bad command line */
#define MAX_LIST 16

static int fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    code = cli_vfail("vla-probe", NULL, code, fmt, ap);
    va_end(ap);
    return code;
}

/* A library failure under `what` (a flag or a mechanism), without the library's "vla_fn: "
 * prefix: `what` tells the user more. */
static int lib_fail(const char *what, vla_status st) {
    const char *m = vla_last_message();
    m = m && m[0] ? cli_lib_message(m) : vla_status_string(st);
    return fail(EXIT_FAILED, "%s: %s", what, m);
}

/* ---- options ------------------------------------------------------------------------------ */

enum { SUB_STATES = 1, SUB_JACOBIAN = 2, SUB_CAPACITY = 4, SUB_ALL = 7 };

typedef struct opts {
    int sub;
    const char *dims, *seeds, *backend, *preset, *output, *u, *keys;
    int T, every, window, nmax, refresh, threads, help;
    double lambda0, eps;
    unsigned char set[32]; /* set[i]: flags[i] was given */
    /* parsed from the strings above */
    int dim[MAX_LIST], ndim, nseed, csv, u_random, orthonormal;
    unsigned long long seed[MAX_LIST];
} opts;

typedef enum kind { K_STR, K_INT, K_DBL, K_BOOL } kind;

typedef struct flag {
    const char *name, *alias; /* alias may be NULL */
    kind kind;
    size_t off;
    int subs;        /* the subcommands that take it */
    const char *arg; /* value placeholder in --help */
    const char *def; /* the default, as --help shows it */
    const char *help;
} flag;

#define OFF(f) offsetof(opts, f)
static const flag flags[] = {
    {"--d", "-d", K_STR, OFF(dims), SUB_STATES | SUB_CAPACITY, "N", "32", "head size dk = dv, 1..256"},
    {"--d", "-d", K_STR, OFF(dims), SUB_JACOBIAN, "LIST", "32,64,96,128", "head sizes, each 2..256"},
    {"--T", "-T", K_INT, OFF(T), SUB_STATES | SUB_JACOBIAN, "N", "1000", "sequence length"},
    {"--seeds", NULL, K_STR, OFF(seeds), SUB_ALL, "LIST", "42,123,999", "random seeds (at most 16)"},
    {"--lambda0", NULL, K_DBL, OFF(lambda0), SUB_ALL, "X", "0.1", "VLA: A_0 = I / lambda0, > 0"},
    {"--eps", NULL, K_DBL, OFF(eps), SUB_ALL, "X", "1e-4", "normalisation floor and denominator, > 0"},
    {"--refresh", NULL, K_INT, OFF(refresh), SUB_ALL, "R", "0 (never)", "VLA: refresh period"},
    {"--u", NULL, K_STR, OFF(u), SUB_ALL, "khat|random", "khat (u not given); random with --preset",
     "VLA penalty vectors: u = s_u k^, or drawn N(0,1) and given"},
    {"--preset", NULL, K_STR, OFF(preset), SUB_ALL, "paper", "none",
     "VLA with the paper's settings (vla_attn_desc_preset); explicit flags override it"},
    {"--every", NULL, K_INT, OFF(every), SUB_STATES, "N", "1", "record the states every N tokens"},
    {"--window", NULL, K_INT, OFF(window), SUB_JACOBIAN, "N", "25", "steps per Jacobian product"},
    {"--keys", NULL, K_STR, OFF(keys), SUB_CAPACITY, "random|orthonormal", "random", "keys written"},
    {"--nmax", NULL, K_INT, OFF(nmax), SUB_CAPACITY, "N", "2d", "pairs written: n = 1..N"},
    {"--backend", NULL, K_STR, OFF(backend), SUB_ALL, "NAME", "cpu", "libvla backend: cpu, cuda[:N], ..."},
    {"--threads", NULL, K_INT, OFF(threads), SUB_ALL, "N", "1", "CPU backend threads (0 = OpenMP's)"},
    {"--output", NULL, K_STR, OFF(output), SUB_ALL, "md|csv", "md", "output format"},
    {"--help", "-h", K_BOOL, OFF(help), SUB_ALL, NULL, "", "print this help and exit"},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))
_Static_assert(sizeof flags / sizeof flags[0] <= sizeof((opts *)0)->set, "opts.set is too small");

static const char *sub_names[] = {"states", "jacobian", "capacity"};
static const char *sub_about[] = { /* lines; printed indented */
    "||S_t||_F per token for linear attention, DeltaNet (beta = 1) and VLA, and VLA's ||A_t||_F\n"
    "(the paper's Figure 4), from the op run in streaming pieces that carry S/A/n and t0.",
    "spectral norms of each step's Jacobian dS_t/dS_{t-1} (normalised VLA and the unnormalised\n"
    "VLAv2 of VLA-MATH 4) and of products of --window consecutive steps, checked against\n"
    "VLA-MATH 4's closed forms; beside the paper's Table 2.",
    "n key/value pairs written into each mechanism's state, read back as r_i = S phi(k_i):\n"
    "fraction recalled (nearest stored value by cosine) and mean cosine, n = 1..--nmax.",
};

static void print_indented(const char *text, int indent) {
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n') printf("%*s", indent, "");
    }
    putchar('\n');
}

static int sub_index(int sub) { return sub == SUB_STATES ? 0 : sub == SUB_JACOBIAN ? 1 : 2; }

static void print_help(int sub) {
    int i = sub_index(sub);
    printf("usage: vla-probe %s [options]\n\n  ", sub_names[i]);
    print_indented(sub_about[i], 2);
    printf("\n");
    printf("Inputs unless a flag says otherwise: q, k, v ~ N(0, 1); VLA with lambda0 = 0.1, eps = 1e-4,\n"
           "R = 0, phi none, u not given (u = k^), unnormalised output.\n\noptions:\n");
    for (int f = 0; f < N_FLAGS; f++) {
        if (!(flags[f].subs & sub)) continue;
        char head[64];
        snprintf(head, sizeof head, "%s%s%s %s", flags[f].alias ? flags[f].alias : "", flags[f].alias ? ", " : "",
                 flags[f].name, flags[f].arg ? flags[f].arg : "");
        printf("  %-30s %s", head, flags[f].help);
        if (flags[f].def[0]) printf(" (default %s)", flags[f].def);
        printf("\n");
    }
}

static void print_top_help(void) {
    printf("usage: vla-probe SUBCOMMAND [options]     (vla-probe SUBCOMMAND --help for its options)\n\n");
    for (int i = 0; i < 3; i++) {
        printf("  %-9s ", sub_names[i]);
        print_indented(sub_about[i], 12);
    }
}

static void set_defaults(opts *o, int sub) {
    memset(o, 0, sizeof *o);
    o->sub = sub;
    o->dims = sub == SUB_JACOBIAN ? "32,64,96,128" : "32";
    o->seeds = "42,123,999";
    o->backend = "cpu";
    o->output = "md";
    o->u = NULL;
    o->keys = "random";
    o->T = 1000;
    o->every = 1;
    o->window = 25;
    o->threads = 1;
    o->lambda0 = 0.1;
    o->eps = 1e-4;
}

static int find_flag(const char *name, size_t len, int sub) {
    for (int f = 0; f < N_FLAGS; f++) {
        if (!(flags[f].subs & sub)) continue;
        if ((strlen(flags[f].name) == len && !strncmp(flags[f].name, name, len)) ||
            (flags[f].alias && strlen(flags[f].alias) == len && !strncmp(flags[f].alias, name, len)))
            return f;
    }
    return -1;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int store_value(opts *o, const flag *f, const char *val) {
    void *dst = (char *)o + f->off;
    if (f->kind == K_STR) {
        *(const char **)dst = val;
        return 0;
    }
    if (f->kind == K_INT)
        return parse_int(val, -1000000000L, 1000000000L, (int *)dst) ? fail(EXIT_USAGE, "%s: '%s' is not an integer", f->name, val) : 0;
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v)) return fail(EXIT_USAGE, "%s: '%s' is not a finite number", f->name, val);
    *(double *)dst = v;
    return 0;
}

static int parse_args(opts *o, int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
        int f = a[0] == '-' ? find_flag(a, len, o->sub) : -1;
        if (f < 0) return fail(EXIT_USAGE, "%s: unknown option for '%s' (see vla-probe %s --help)", a,
                               sub_names[sub_index(o->sub)], sub_names[sub_index(o->sub)]);
        o->set[f] = 1;
        if (flags[f].kind == K_BOOL) {
            if (eq) return fail(EXIT_USAGE, "%s takes no value", flags[f].name);
            *(int *)((char *)o + flags[f].off) = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) return fail(EXIT_USAGE, "%s needs a value (%s)", flags[f].name, flags[f].arg);
        int rc = store_value(o, &flags[f], val);
        if (rc) return rc;
    }
    return 0;
}

static int was_set(const opts *o, const char *name) {
    for (int f = 0; f < N_FLAGS; f++)
        if (o->set[f] && !strcmp(flags[f].name, name)) return 1;
    return 0;
}

/* "a,b,c" -> up to MAX_LIST integers in [lo, hi]. */
static int parse_list(const char *flagname, const char *s, long lo, long hi, int *out, int *n,
                      unsigned long long *out64) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return fail(EXIT_USAGE, "%s: list too long", flagname);
    strcpy(buf, s);
    *n = 0;
    for (char *tok = buf, *next; tok; tok = next) {
        next = strchr(tok, ',');
        if (next) *next++ = '\0';
        char *end;
        errno = 0;
        long long v = strtoll(tok, &end, 10);
        if (errno || end == tok || *end || v < lo || v > hi)
            return fail(EXIT_USAGE, "%s: '%s' is not an integer in %ld..%ld", flagname, tok, lo, hi);
        if (*n == MAX_LIST) return fail(EXIT_USAGE, "%s: at most %d values", flagname, MAX_LIST);
        if (out) out[*n] = (int)v;
        if (out64) out64[*n] = (unsigned long long)v;
        (*n)++;
    }
    return 0;
}

static int check_choice(const char *flagname, const char *v, const char *a, const char *b) {
    if (strcmp(v, a) && strcmp(v, b)) return fail(EXIT_USAGE, "%s: '%s' is not one of %s, %s", flagname, v, a, b);
    return 0;
}

/* Ranges and choices; fills the parsed fields. */
static int validate(opts *o) {
    int rc, one_dim = o->sub != SUB_JACOBIAN;
    if ((rc = parse_list("--d", o->dims, one_dim ? 1 : 2, 256, o->dim, &o->ndim, NULL))) return rc;
    if (one_dim && o->ndim != 1) return fail(EXIT_USAGE, "--d: one head size for %s", sub_names[sub_index(o->sub)]);
    if ((rc = parse_list("--seeds", o->seeds, 0, 0x7fffffffffffffffLL, NULL, &o->nseed, o->seed))) return rc;
    if (o->T < 1 || o->T > 1000000) return fail(EXIT_USAGE, "--T: %d is outside 1..1000000", o->T);
    if (o->every < 1 || o->every > o->T) return fail(EXIT_USAGE, "--every: %d is outside 1..T (%d)", o->every, o->T);
    if (o->window < 1 || (o->sub == SUB_JACOBIAN && o->window > o->T))
        return fail(EXIT_USAGE, "--window: %d is outside 1..T (%d)", o->window, o->T);
    if (!(o->lambda0 > 0)) return fail(EXIT_USAGE, "--lambda0: %g is not > 0", o->lambda0);
    if (!(o->eps > 0)) return fail(EXIT_USAGE, "--eps: %g is not > 0", o->eps);
    if (o->refresh < 0) return fail(EXIT_USAGE, "--refresh: %d is not >= 0", o->refresh);
    if (o->threads < 0) return fail(EXIT_USAGE, "--threads: %d is not >= 0", o->threads);
    if ((rc = check_choice("--output", o->output, "md", "csv"))) return rc;
    if ((rc = check_choice("--keys", o->keys, "random", "orthonormal"))) return rc;
    if (o->u && (rc = check_choice("--u", o->u, "khat", "random"))) return rc;
    if (o->preset && strcmp(o->preset, "paper")) return fail(EXIT_USAGE, "--preset: '%s' is not a preset (paper)", o->preset);
    if (!was_set(o, "--nmax")) o->nmax = 2 * o->dim[0];
    if (o->nmax < 1 || o->nmax > 4096) return fail(EXIT_USAGE, "--nmax: %d is outside 1..4096", o->nmax);
    o->csv = !strcmp(o->output, "csv");
    o->orthonormal = !strcmp(o->keys, "orthonormal");
    o->u_random = o->u ? !strcmp(o->u, "random") : o->preset != NULL; /* the paper's model gives u */
    return 0;
}

/* ---- descs and what they mean in words ------------------------------------------------------ */

/* The desc of mechanism m: VLA-MATH defaults, the preset for VLA, then the explicit flags. */
static int make_desc(const opts *o, vla_mechanism m, vla_attn_desc *d) {
    vla_status st = vla_attn_desc_init(d, m);
    if (!st && m == VLA_MECH_VLA && o->preset) st = vla_attn_desc_preset(d, o->preset);
    if (st) return lib_fail("desc", st);
    if (m == VLA_MECH_VLA && (!o->preset || was_set(o, "--lambda0"))) d->lambda0 = o->lambda0;
    if (m == VLA_MECH_VLA && (!o->preset || was_set(o, "--refresh"))) d->refresh = o->refresh;
    if (!o->preset || was_set(o, "--eps")) d->eps = o->eps;
    return 0;
}

static void describe_vla(const opts *o, const vla_attn_desc *d, int dk) {
    printf("- VLA: %s; lambda0 = %g, eps = %g, R = %d%s, phi = %s, %s output, ", o->preset ? "--preset paper" : "defaults",
           d->lambda0, d->eps, d->refresh, d->refresh ? (d->refresh_size == 1e-3 ? " (rho 1e-3)" : "") : " (never)",
           vla_feature_map_name(d->feature_map), d->normalize_output ? "normalised" : "unnormalised");
    char su[64]; /* s_u = 0 in the desc means 1/sqrt(dk); dk = 0: several head sizes */
    if (d->u_scale != 0) snprintf(su, sizeof su, "%g", d->u_scale);
    else if (dk > 0) snprintf(su, sizeof su, "1/sqrt(dk) = %.4g", 1.0 / sqrt((double)dk));
    else snprintf(su, sizeof su, "1/sqrt(dk)");
    if (o->u_random) printf("u drawn N(0, 1) and given (u_t = s_u normalize(u_t), s_u = %s).\n", su);
    else printf("u not given (u_t = s_u k^_t, s_u = %s).\n", su);
}

static void print_seeds(const opts *o) {
    for (int i = 0; i < o->nseed; i++) printf("%s%llu", i ? ", " : "", o->seed[i]);
}

/* Short numbers for tables: large ones with fewer decimals, huge ones in e-notation. */
static const char *num(double x) {
    static char ring[16][32];
    static int at;
    char *b = ring[at++ % 16];
    if (isnan(x)) snprintf(b, 32, "-");
    else if (fabs(x) >= 1e6) snprintf(b, 32, "%.2e", x);
    else if (fabs(x) >= 100) snprintf(b, 32, "%.1f", x);
    else snprintf(b, 32, "%.4f", x);
    return b;
}

static void header(const opts *o, vla_backend *be, const char *what) {
    if (o->csv) return;
    printf("# vla-probe %s\n\nlibvla %s, backend %s (%s); library threads set to %d (--threads). Seeds ", what,
           vla_version(), vla_backend_name(be), vla_backend_device(be), o->threads);
    print_seeds(o);
    printf(".\n\n");
}

/* ---- states ---------------------------------------------------------------------------------- */

#define NMECH 3
static const vla_mechanism mechs[NMECH] = {VLA_MECH_LINEAR, VLA_MECH_DELTA, VLA_MECH_VLA};
static const char *mech_title[NMECH] = {"linear attention", "DeltaNet", "VLA"};

typedef struct states_data {
    int np;         /* recorded points: ceil(T / every) */
    double *S[NMECH]; /* [nseed][np] */
    double *A;        /* [nseed][np], VLA */
} states_data;

static int record_t(const opts *o, int j) { return (j + 1) * o->every < o->T ? (j + 1) * o->every : o->T; }

static double seed_mean(const opts *o, const double *x, int np, int j) {
    double s = 0;
    for (int i = 0; i < o->nseed; i++) s += x[(size_t)i * np + j];
    return s / o->nseed;
}

/* Draws one seed's q, k, v (and u) and runs the three mechanisms on them. */
static int states_seed(const opts *o, vla_backend *be, const vla_attn_desc *desc, int si, states_data *sd) {
    int d = o->dim[0], T = o->T, rc = 0;
    size_t n = (size_t)T * d;
    float *x = malloc(4 * n * sizeof *x);
    if (!x) return fail(EXIT_FAILED, "out of memory");
    pm_rng r;
    pm_seed(&r, o->seed[si]);
    pm_randn(&r, x, (o->u_random ? 4 : 3) * n); /* q, k, v, then u */
    for (int m = 0; m < NMECH && !rc; m++) {
        pm_seq s = {T, d, d, x, x + n, x + 2 * n, m == 2 && o->u_random ? x + 3 * n : NULL};
        vla_status st = pm_state_norms(be, &desc[m], &s, o->every, sd->S[m] + (size_t)si * sd->np,
                                       m == 2 ? sd->A + (size_t)si * sd->np : NULL);
        if (st) rc = lib_fail(mech_title[m], st);
    }
    free(x);
    return rc;
}

static int nice_t(int t) { /* 1, 2, 5 x 10^k */
    while (t >= 10 && t % 10 == 0) t /= 10;
    return t == 1 || t == 2 || t == 5;
}

static void states_csv(const opts *o, const states_data *sd) {
    printf("t,linear_S,delta_S,vla_S,vla_A\n");
    for (int j = 0; j < sd->np; j++) {
        printf("%d", record_t(o, j));
        for (int m = 0; m < NMECH; m++) printf(",%.9g", seed_mean(o, sd->S[m], sd->np, j));
        printf(",%.9g\n", seed_mean(o, sd->A, sd->np, j));
    }
}

static void states_md_table(const opts *o, const states_data *sd) {
    printf("## Norms by token (mean over the seeds; every recorded token: --output csv)\n\n");
    printf("| t | linear attention ‖S_t‖_F | DeltaNet ‖S_t‖_F | VLA ‖S_t‖_F | VLA ‖A_t‖_F |\n");
    printf("|---:|---:|---:|---:|---:|\n");
    for (int j = 0; j < sd->np; j++) {
        int t = record_t(o, j);
        if (!nice_t(t) && t != o->T) continue;
        printf("| %d | %s | %s | %s | %s |\n", t, num(seed_mean(o, sd->S[0], sd->np, j)),
               num(seed_mean(o, sd->S[1], sd->np, j)), num(seed_mean(o, sd->S[2], sd->np, j)),
               num(seed_mean(o, sd->A, sd->np, j)));
    }
    printf("\n");
}

static void states_md_final(const opts *o, const states_data *sd) {
    int L = sd->np - 1;
    printf("## Final norms at t = %d\n\n| seed | linear ‖S‖_F | DeltaNet ‖S‖_F | VLA ‖S‖_F | VLA ‖A‖_F | "
           "linear / VLA |\n|---:|---:|---:|---:|---:|---:|\n", o->T);
    for (int i = 0; i < o->nseed; i++) {
        const double *lin = sd->S[0] + (size_t)i * sd->np, *v = sd->S[2] + (size_t)i * sd->np;
        printf("| %llu | %s | %s | %s | %s | %.1fx |\n", o->seed[i], num(lin[L]),
               num(sd->S[1][(size_t)i * sd->np + L]), num(v[L]), num(sd->A[(size_t)i * sd->np + L]), lin[L] / v[L]);
    }
    double ml = seed_mean(o, sd->S[0], sd->np, L), mv = seed_mean(o, sd->S[2], sd->np, L);
    printf("| mean | %s | %s | %s | %s | %.1fx |\n\n", num(ml), num(seed_mean(o, sd->S[1], sd->np, L)), num(mv),
           num(seed_mean(o, sd->A, sd->np, L)), ml / mv);
}

/* Slope of log ||S|| against log t from the point nearest T/10 to T: 1 is O(T), 0.5 sqrt(T). */
static void states_md_growth(const opts *o, const states_data *sd) {
    int L = sd->np - 1, j0 = (o->T / 10 + o->every - 1) / o->every - 1;
    if (o->T < 20 || j0 < 0 || j0 >= L) return;
    double t0 = record_t(o, j0), t1 = o->T;
    printf("Growth exponent of the mean ‖S_t‖_F between t = %g and t = %g (slope on log-log axes; "
           "1 = linear growth, 0.5 = sqrt(t), 0 = flat):", t0, t1);
    for (int m = 0; m < NMECH; m++) {
        double a = seed_mean(o, sd->S[m], sd->np, j0), b = seed_mean(o, sd->S[m], sd->np, L);
        printf(" %s %.2f%s", mech_title[m], log(b / a) / log(t1 / t0), m + 1 < NMECH ? ";" : ".\n\n");
    }
}

static void states_md_paper(const opts *o, const states_data *sd) {
    int L = sd->np - 1;
    double ml = seed_mean(o, sd->S[0], sd->np, L), mv = seed_mean(o, sd->S[2], sd->np, L);
    printf("## The paper's numbers beside ours\n\n");
    printf("The paper's inputs: untrained two-layer models (d_h = 32, lambda0 = 0.1, R = 20) fed random\n"
           "tokens at inference (its 6.2 and Figure 4); q, k, v are the models' projections of token\n"
           "embeddings. Ours: q, k, v drawn N(0, 1) directly, d = %d, T = %d, one head, mean over the seeds.\n\n",
           o->dim[0], o->T);
    printf("| quantity | paper (T = 1000) | measured (t = %d) |\n|---|---|---|\n", o->T);
    printf("| linear attention ‖S‖_F | ~1,600 (4.1, Fig. 2b); 1,630 (6.2, Fig. 4) | %s |\n", num(ml));
    printf("| VLA ‖S‖_F | below 15 (4.1, 6.2) | %s |\n", num(mv));
    printf("| linear / VLA | ~110x (6.2); 1,630 / 15 = 109 | %.1fx |\n", ml / mv);
    printf("| DeltaNet ‖S‖_F | bounded, \"near zero\" on Figure 4's scale | %s |\n",
           num(seed_mean(o, sd->S[1], sd->np, L)));
    printf("| VLA ‖A‖_F | ~56 at the start, ~10 at T = 1000 (6.2) | %s at t = %d, %s at t = %d (‖A_0‖_F = %s) "
           "|\n\n", num(seed_mean(o, sd->A, sd->np, 0)), record_t(o, 0), num(seed_mean(o, sd->A, sd->np, L)), o->T,
           num(sqrt((double)o->dim[0]) / o->lambda0));
}

static int run_states(const opts *o, vla_backend *be) {
    vla_attn_desc desc[NMECH];
    states_data sd = {(o->T + o->every - 1) / o->every, {NULL, NULL, NULL}, NULL};
    int rc = 0;
    for (int m = 0; m < NMECH && !rc; m++) rc = make_desc(o, mechs[m], &desc[m]);
    if (rc) return rc;
    size_t n = (size_t)o->nseed * sd.np;
    for (int m = 0; m < NMECH; m++) sd.S[m] = malloc(n * sizeof(double));
    sd.A = malloc(n * sizeof(double));
    if (!sd.S[0] || !sd.S[1] || !sd.S[2] || !sd.A) rc = fail(EXIT_FAILED, "out of memory");
    for (int i = 0; i < o->nseed && !rc; i++) rc = states_seed(o, be, desc, i, &sd);
    if (!rc && o->csv) states_csv(o, &sd);
    if (!rc && !o->csv) {
        header(o, be, "states");
        printf("Inputs: q, k, v ~ N(0, 1) i.i.d., d = dk = dv = %d, T = %d, one head; the op runs in pieces of %d "
               "token(s), carrying S (A, n) and t0 through the API.\n\n- linear attention: phi = elu+1 (its "
               "definition).\n- DeltaNet: beta = 1, g = 1, keys L2-normalised by the op.\n",
               o->dim[0], o->T, o->every);
        describe_vla(o, &desc[2], o->dim[0]);
        printf("\n");
        states_md_table(o, &sd);
        states_md_final(o, &sd);
        states_md_growth(o, &sd);
        states_md_paper(o, &sd);
    }
    for (int m = 0; m < NMECH; m++) free(sd.S[m]);
    free(sd.A);
    return rc;
}

/* ---- jacobian -------------------------------------------------------------------------------- */

/* The paper's Table 2 (section 4.2, "Jacobian spectral norm under unnormalised (VLAv2) and
 * normalised (VLAv3) formulations"), quoted: d_h, VLAv2 ||J_t||_2, after T = 25, VLAv3 ||J_t||_2,
 * after T = 25. */
static const struct {
    int d;
    double v2, v2_25, v3, v3_25;
} paper_table2[4] = {
    {32, 5.36, 1.7e18, 1.000, 1.000},
    {64, 13.50, 1.8e28, 1.000, 1.000},
    {96, 20.48, 6.1e32, 1.000, 1.000},
    {128, 26.47, 3.7e35, 1.000, 1.000},
};

typedef struct jac_stats {
    double step_med, step_max, win_med, win_max;
    double closed_diff; /* max relative |numeric - closed form| */
    double dense_diff;  /* max relative |dense SVD - subspace reduction| on sampled steps/windows */
    double lib_diff;    /* max |a_t(library, float32) - a_t(double)|; NAN if not checked */
    int nsteps, nwin;
} jac_stats;

typedef struct jac_acc { /* pooled over the seeds */
    double *step, *win;
    int nstep, nwin;
    jac_stats st;
} jac_acc;

/* Dense d x d Jacobi SVD against the subspace reduction on a few steps and the first window. */
static double dense_check(const double *K, const double *W, int T, int d, int window) {
    double worst = 0;
    int ts[4] = {0, T / 3, 2 * T / 3, T - 1};
    for (int i = 0; i < 4; i++) {
        const double *k = K + (size_t)ts[i] * d, *a = W + (size_t)ts[i] * d;
        double x = pm_window_norm(k, a, 1, d), y = pm_window_norm_dense(k, a, 1, d);
        worst = fmax(worst, fabs(x - y) / y);
    }
    if (T >= window) {
        double x = pm_window_norm(K, W, window, d), y = pm_window_norm_dense(K, W, window, d);
        worst = fmax(worst, fabs(x - y) / y);
    }
    return worst;
}

static double max_abs_diff(const double *x, const double *y, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i] - y[i]));
    return m;
}

/* One seed, one d, one variant: draws k (and u), runs the A recurrence, measures. */
static int jac_seed(const opts *o, vla_backend *be, const vla_attn_desc *desc, int d, int unnorm, int si,
                    jac_acc *acc) {
    int T = o->T, rc = 0;
    size_t n = (size_t)T * d;
    float *x = malloc(2 * n * sizeof *x);
    double *K = malloc(3 * n * sizeof *K), *W = K ? K + n : NULL, *L = K ? K + 2 * n : NULL;
    if (!x || !K) {
        free(x), free(K);
        return fail(EXIT_FAILED, "out of memory");
    }
    pm_rng r;
    pm_seed(&r, o->seed[si]);
    pm_randn(&r, x, (o->u_random ? 2 : 1) * n); /* k, then u */
    const float *U = o->u_random && !unnorm ? x + n : NULL;
    pm_vla p;
    pm_vla_from_desc(&p, desc, d);
    p.unnormalised = unnorm;
    if (pm_vla_write_vectors(&p, x, U, T, d, K, W)) rc = fail(EXIT_FAILED, "out of memory");
    double cd = 0;
    if (!rc) pm_jacobian_norms(K, W, T, d, o->window, !unnorm, acc->step + acc->nstep, acc->win + acc->nwin, &cd);
    acc->nstep += T, acc->nwin += T / o->window;
    acc->st.closed_diff = fmax(acc->st.closed_diff, cd);
    if (!rc) acc->st.dense_diff = fmax(acc->st.dense_diff, dense_check(K, W, T, d, o->window));
    if (!rc && !unnorm) { /* the library's a_t: the same recurrence in float32 */
        vla_status st = pm_library_write_vectors(be, desc, x, U, T, d, L);
        if (st) rc = lib_fail("library a_t cross-check", st);
        else acc->st.lib_diff = fmax(isnan(acc->st.lib_diff) ? 0 : acc->st.lib_diff, max_abs_diff(L, W, n));
    }
    free(x), free(K);
    return rc;
}

static int jac_measure(const opts *o, vla_backend *be, const vla_attn_desc *desc, int d, int unnorm,
                       jac_stats *out) {
    int nw = o->T / o->window, rc = 0;
    jac_acc acc;
    memset(&acc, 0, sizeof acc);
    acc.step = malloc((size_t)o->nseed * o->T * sizeof(double));
    acc.win = malloc(((size_t)o->nseed * nw + 1) * sizeof(double));
    acc.st.lib_diff = NAN;
    if (!acc.step || !acc.win) rc = fail(EXIT_FAILED, "out of memory");
    for (int i = 0; i < o->nseed && !rc; i++) rc = jac_seed(o, be, desc, d, unnorm, i, &acc);
    if (!rc) {
        acc.st.step_max = pm_max(acc.step, acc.nstep);
        acc.st.step_med = pm_median(acc.step, acc.nstep);
        acc.st.win_max = acc.nwin ? pm_max(acc.win, acc.nwin) : NAN;
        acc.st.win_med = pm_median(acc.win, acc.nwin);
        acc.st.nsteps = acc.nstep, acc.st.nwin = acc.nwin;
        *out = acc.st;
    }
    free(acc.step), free(acc.win);
    return rc;
}

static int paper_row(int d) {
    for (int i = 0; i < 4; i++)
        if (paper_table2[i].d == d) return i;
    return -1;
}

static void jac_md_paper(void) {
    printf("## The paper's Table 2 (quoted from its section 4.2)\n\n");
    printf("| d_h | unnormalised (VLAv2) ‖J_t‖_2 | after T = 25 | normalised (VLAv3) ‖J_t‖_2 | after T = 25 |\n");
    printf("|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < 4; i++)
        printf("| %d | %.2f | %.1e | %.3f | %.3f |\n", paper_table2[i].d, paper_table2[i].v2, paper_table2[i].v2_25,
               paper_table2[i].v3, paper_table2[i].v3_25);
    printf("\n(\"After T = 25\" is ‖J_t‖_2^25, a bound; the paper's Proposition 2 claims ‖J_t‖_2 = 1 exactly for\n"
           "the normalised form.)\n\n");
}

static void jac_md_table(const opts *o, const char *title, const jac_stats *st) {
    printf("## Measured: %s\n\n", title);
    printf("| d | steps | step median | step max | (step median)^%d | windows of %d | product median | product max "
           "| closed form: max rel. diff |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", o->window, o->window);
    for (int i = 0; i < o->ndim; i++)
        printf("| %d | %d | %s | %s | %s | %d | %s | %s | %.1e |\n", o->dim[i], st[i].nsteps, num(st[i].step_med),
               num(st[i].step_max), num(pow(st[i].step_med, o->window)), st[i].nwin, num(st[i].win_med),
               num(st[i].win_max), st[i].closed_diff);
    printf("\n");
}

static void jac_md_checks(const opts *o, const jac_stats *st) {
    double cd = 0, dd = 0, ld = 0;
    for (int i = 0; i < 2 * o->ndim; i++) {
        cd = fmax(cd, st[i].closed_diff), dd = fmax(dd, st[i].dense_diff);
        if (!isnan(st[i].lib_diff)) ld = fmax(ld, st[i].lib_diff);
    }
    printf("## Checks\n\n- Numerical norms (one-sided Jacobi SVD in double on span{k_s, a_s}, the identity on its "
           "complement) against VLA-MATH 4's closed forms, every step: max relative difference %.1e.\n", cd);
    printf("- The same against a dense d x d Jacobi SVD on steps 0, T/3, 2T/3, T-1 and the first window of each "
           "run: max relative difference %.1e.\n", dd);
    printf("- The a_t are computed in double here (a measurement tool); the library's own a_t (float32, backend "
           "run token by token with A carried and S_in = 0, v = 1) differ from them by at most %.1e (max abs, "
           "unit vectors, normalised VLA).\n\n", ld);
}

static void jac_md_verdict(const opts *o, const jac_stats *nrm, const jac_stats *un) {
    printf("## The paper's claims beside ours\n\n");
    for (int i = 0; i < o->ndim; i++) {
        int p = paper_row(o->dim[i]);
        printf("- d = %d: normalised ‖J_t‖_2 median %s, max %s (paper: 1.000 exactly); %d-step product median %s, "
               "max %s (paper: 1.000). Unnormalised median %s, max %s (paper: ", o->dim[i], num(nrm[i].step_med),
               num(nrm[i].step_max), o->window, num(nrm[i].win_med), num(nrm[i].win_max), num(un[i].step_med),
               num(un[i].step_max));
        if (p >= 0) printf("%.2f, after 25 steps %.1e); product median %s.\n", paper_table2[p].v2,
                           paper_table2[p].v2_25, num(un[i].win_med));
        else printf("not in Table 2); product median %s.\n", num(un[i].win_med));
    }
    printf("\nVLA-MATH 4 expects, at d = 32, T = 1000 with these inputs: normalised median about 1.03, max about "
           "1.33.\n");
}

static void jac_csv(const opts *o, const jac_stats *nrm, const jac_stats *un) {
    printf("variant,d,T,steps,step_median,step_max,step_median_pow_window,window,windows,window_median,window_max,"
           "closed_form_max_reldiff,dense_check_max_reldiff,library_a_max_absdiff,paper_step_norm,paper_after_25\n");
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < o->ndim; i++) {
            const jac_stats *s = v ? &un[i] : &nrm[i];
            int p = paper_row(o->dim[i]);
            printf("%s,%d,%d,%d,%.9g,%.9g,%.6g,%d,%d,%.9g,%.9g,%.3g,%.3g,", v ? "unnormalised" : "normalised", o->dim[i],
                   o->T, s->nsteps, s->step_med, s->step_max, pow(s->step_med, o->window), o->window, s->nwin,
                   s->win_med, s->win_max, s->closed_diff, s->dense_diff);
            if (isnan(s->lib_diff)) printf(",");
            else printf("%.3g,", s->lib_diff);
            if (p >= 0) printf("%.4g,%.2g\n", v ? paper_table2[p].v2 : paper_table2[p].v3,
                               v ? paper_table2[p].v2_25 : paper_table2[p].v3_25);
            else printf(",\n");
        }
}

static int run_jacobian(const opts *o, vla_backend *be) {
    vla_attn_desc desc;
    jac_stats nrm[MAX_LIST], un[MAX_LIST];
    int rc = make_desc(o, VLA_MECH_VLA, &desc);
    for (int i = 0; i < o->ndim && !rc; i++) {
        rc = jac_measure(o, be, &desc, o->dim[i], 0, &nrm[i]);
        if (!rc) rc = jac_measure(o, be, &desc, o->dim[i], 1, &un[i]);
    }
    if (rc) return rc;
    if (o->csv) {
        jac_csv(o, nrm, un);
        return 0;
    }
    header(o, be, "jacobian");
    printf("Inputs: k%s ~ N(0, 1) i.i.d., T = %d per run, one run per seed and d. dS_t/dS_{t-1} is S -> S (I - k_t a_t^T) "
           "(S from the right); its norm is ‖I - a_t k_t^T‖_2.\n\n", o->u_random ? " (and u)" : "", o->T);
    describe_vla(o, &desc, o->ndim == 1 ? o->dim[0] : 0);
    printf("- normalised (VLAv3, the library's VLA): k_t -> k^_t, a_t = normalize(A_t k^_t).\n"
           "- unnormalised (VLAv2 as VLA-MATH 4 defines it): a_t = A_t k_t with the raw k_t, e_t = v_t - S_{t-1} k_t, "
           "u_t = normalize(k_t), same lambda0, eps and R; no feature map.\n\n");
    jac_md_paper();
    jac_md_table(o, "normalised VLA (VLAv3)", nrm);
    jac_md_table(o, "unnormalised (VLAv2 of VLA-MATH 4)", un);
    jac_stats all[2 * MAX_LIST];
    memcpy(all, nrm, (size_t)o->ndim * sizeof *all);
    memcpy(all + o->ndim, un, (size_t)o->ndim * sizeof *all);
    jac_md_checks(o, all);
    jac_md_verdict(o, nrm, un);
    return 0;
}

/* ---- capacity -------------------------------------------------------------------------------- */

typedef struct cap_inputs { /* one seed's pairs, nmax rows each; the first n are used */
    float *K, *V, *U;
} cap_inputs;

static int cap_draw(const opts *o, int si, cap_inputs *in) {
    int d = o->dim[0];
    size_t n = (size_t)o->nmax * d;
    in->K = malloc(n * sizeof(float)), in->V = malloc(n * sizeof(float)), in->U = malloc(n * sizeof(float));
    if (!in->K || !in->V || !in->U) return fail(EXIT_FAILED, "out of memory");
    pm_rng r;
    pm_seed(&r, o->seed[si]);
    pm_make_keys(&r, o->nmax, d, o->orthonormal, in->K);
    pm_seed(&r, o->seed[si] ^ 0x5bd1e9955bd1e995ull); /* values and u: their own stream */
    pm_randn(&r, in->V, n);
    pm_randn(&r, in->U, n);
    return 0;
}

/* res[(n-1) * NMECH + m]: mean over the seeds; exact[m]: largest N with recall 1 for all n <= N. */
static int cap_measure(const opts *o, vla_backend *be, const vla_attn_desc *desc, pm_recall_stats *res) {
    int d = o->dim[0], rc = 0;
    memset(res, 0, (size_t)o->nmax * NMECH * sizeof *res);
    for (int si = 0; si < o->nseed && !rc; si++) {
        cap_inputs in = {NULL, NULL, NULL};
        rc = cap_draw(o, si, &in);
        for (int n = 1; n <= o->nmax && !rc; n++)
            for (int m = 0; m < NMECH && !rc; m++) {
                pm_recall_stats s;
                vla_status st = pm_capacity_point(be, &desc[m], in.K, in.V, o->u_random ? in.U : NULL, n, d, d, &s);
                if (st) rc = lib_fail(mech_title[m], st);
                pm_recall_stats *r = &res[(size_t)(n - 1) * NMECH + m];
                r->recall += s.recall / o->nseed, r->mean_cos += s.mean_cos / o->nseed;
                r->mean_relerr += s.mean_relerr / o->nseed;
            }
        free(in.K), free(in.V), free(in.U);
    }
    return rc;
}

/* Relative error is shown only where the read is S k_i itself (no feature map). */
static int cap_has_relerr(const vla_attn_desc *d) {
    return d->mechanism != VLA_MECH_LINEAR && (d->mechanism == VLA_MECH_DELTA || d->feature_map == VLA_FMAP_NONE);
}

static void cap_csv(const opts *o, const vla_attn_desc *desc, const pm_recall_stats *res) {
    printf("n,linear_recall,linear_mean_cos,delta_recall,delta_mean_cos,delta_mean_relerr,vla_recall,vla_mean_cos,"
           "vla_mean_relerr\n");
    for (int n = 1; n <= o->nmax; n++) {
        const pm_recall_stats *r = &res[(size_t)(n - 1) * NMECH];
        printf("%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,", n, r[0].recall, r[0].mean_cos, r[1].recall, r[1].mean_cos,
               r[1].mean_relerr, r[2].recall, r[2].mean_cos);
        if (cap_has_relerr(&desc[2])) printf("%.6g\n", r[2].mean_relerr);
        else printf("\n");
    }
}

static const char *relerr_cell(const vla_attn_desc *d, double x) {
    return cap_has_relerr(d) ? num(x) : "-";
}

static void cap_md_table(const opts *o, const vla_attn_desc *desc, const pm_recall_stats *res) {
    printf("| n | linear recall | linear cos | DeltaNet recall | DeltaNet cos | DeltaNet rel. err | VLA recall | VLA cos "
           "| VLA rel. err |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int n = 1; n <= o->nmax; n++) {
        const pm_recall_stats *r = &res[(size_t)(n - 1) * NMECH];
        printf("| %d | %.3f | %s | %.3f | %s | %s | %.3f | %s | %s |\n", n, r[0].recall, num(r[0].mean_cos),
               r[1].recall, num(r[1].mean_cos), relerr_cell(&desc[1], r[1].mean_relerr), r[2].recall,
               num(r[2].mean_cos), relerr_cell(&desc[2], r[2].mean_relerr));
    }
    printf("\n");
}

static void cap_md_summary(const opts *o, const pm_recall_stats *res) {
    int d = o->dim[0];
    printf("## Summary\n\n");
    for (int m = 0; m < NMECH; m++) {
        int exact = 0;
        while (exact < o->nmax && res[(size_t)exact * NMECH + m].recall == 1.0) exact++;
        printf("- %s: recalls every pair, every seed, for n <= %d", mech_title[m], exact);
        for (int n = 1; n <= o->nmax; n++) /* the paper's n = 8 and 24, and n = d */
            if (n == 8 || n == 24 || n == d)
                printf("; at n = %d recall %.3f, cos %s", n, res[(size_t)(n - 1) * NMECH + m].recall,
                       num(res[(size_t)(n - 1) * NMECH + m].mean_cos));
        printf(".\n");
    }
    printf("\nThe paper (4.3, Proposition 3): S_n k^_i = v_i exactly for n <= d_h linearly independent keys. VLA-MATH 1 "
           "and 4: exact for orthonormal keys with u = k^ and phi none (n <= d); not exact for merely independent keys "
           "(about 8%% relative error with 8 random unit keys at d = 32). Its trained-model MQAR numbers (Fig. 2c, 5: "
           "VLA 1.000, DeltaNet 0.010, linear 0.08 at n = 24, d_h = 32) measure a different thing (trained models); "
           "this is the memory alone.\n");
}

static int run_capacity(const opts *o, vla_backend *be) {
    vla_attn_desc desc[NMECH];
    int rc = 0;
    for (int m = 0; m < NMECH && !rc; m++) rc = make_desc(o, mechs[m], &desc[m]);
    pm_recall_stats *res = rc ? NULL : malloc((size_t)o->nmax * NMECH * sizeof *res);
    if (!rc && !res) rc = fail(EXIT_FAILED, "out of memory");
    if (!rc) rc = cap_measure(o, be, desc, res);
    if (!rc && o->csv) cap_csv(o, desc, res);
    if (!rc && !o->csv) {
        header(o, be, "capacity");
        printf("Inputs: d = dk = dv = %d; n = 1..%d pairs written in one call from the zero state (queries = keys, "
               "outputs unused); keys: %s unit vectors%s; values N(0, 1). Reads r_i = S phi(k_i) in double from the "
               "returned S (phi as the mechanism maps queries; linear's output normaliser would not change a "
               "cosine). Recall: r_i's nearest stored value by cosine is v_i. Mean over the seeds.\n\n- linear "
               "attention: phi = elu+1.\n- DeltaNet: beta = 1, g = 1.\n",
               o->dim[0], o->nmax, o->orthonormal ? "orthonormal" : "random (N(0, 1) rows normalised)",
               o->orthonormal ? " (Gram-Schmidt in blocks of d: n > d continues with a second orthonormal basis)" : "");
        describe_vla(o, &desc[2], o->dim[0]);
        printf("\n");
        cap_md_table(o, desc, res);
        cap_md_summary(o, res);
    }
    free(res);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int parse_sub(const char *s) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, sub_names[i])) return 1 << i;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return fail(EXIT_USAGE, "no subcommand (states, jacobian or capacity; --help)");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_top_help();
        return 0;
    }
    opts o;
    int sub = parse_sub(argv[1]), rc;
    if (!sub) return fail(EXIT_USAGE, "%s: unknown subcommand (states, jacobian or capacity)", argv[1]);
    set_defaults(&o, sub);
    if ((rc = parse_args(&o, argc, argv))) return rc;
    if (o.help) {
        print_help(sub);
        return 0;
    }
    if ((rc = validate(&o))) return rc;
    vla_backend *be = NULL;
    vla_status st = vla_backend_open(o.backend, &be);
    if (st) return lib_fail("--backend", st);
    if (o.threads != 1 || !strcmp(vla_backend_name(be), "cpu")) vla_backend_set_threads(be, o.threads);
    rc = sub == SUB_STATES ? run_states(&o, be) : sub == SUB_JACOBIAN ? run_jacobian(&o, be) : run_capacity(&o, be);
    vla_backend_close(be);
    return rc;
}
