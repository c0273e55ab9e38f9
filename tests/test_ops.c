/* Every mechanism x every algorithm VLA-MATH defines, against the float64 reference (ref64),
 * on fresh random inputs and many shapes: o and every final state to < 1e-5 relative (looser
 * only where VLA-MATH says so), every element written, all finite. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"

typedef struct op_case {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv;
    int64_t t0;
    int chunk;       /* 0: the default (64) */
    int seg;         /* two-level segment_chunks; 0: the backend's choice */
    int paper;       /* vla_attn_desc_preset(&d, "paper") */
    double lambda0;  /* 0: default */
    int R;           /* refresh period */
    double rho;      /* refresh size (with R) */
    int elu1;        /* feature map elu1 */
    int fmap_none;   /* feature map none (delta-paper's default is elu1) */
    int norm;        /* normalize_output */
    double scale;    /* softmax scale; 0: default */
    int with_u, with_beta, with_g, g_zeros, with_states;
    vla_algorithm only; /* AUTO (0): every algorithm of the mechanism; else only this one */
    double tol;      /* 0: 1e-5 */
} op_case;

#define SM VLA_MECH_SOFTMAX
#define LI VLA_MECH_LINEAR
#define DE VLA_MECH_DELTA
#define VL VLA_MECH_VLA
#define DP VLA_MECH_DELTA_PAPER

static const op_case cases[] = {
    /* ---- softmax ---- */
    {.name = "softmax T=1", .mech = SM, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "softmax B2 T37 H3 dk16 dv24", .mech = SM, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24},
    {.name = "softmax B1 T100 H2 dk24 dv16", .mech = SM, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16},
    {.name = "softmax dk5 dv3", .mech = SM, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3},
    {.name = "softmax dk1 dv1", .mech = SM, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1},
    {.name = "softmax scale 0.5", .mech = SM, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .scale = 0.5},
    {.name = "softmax B3 T70 H1 dk32 dv8", .mech = SM, .B = 3, .T = 70, .H = 1, .dk = 32, .dv = 8},

    {.name = "softmax dk256 dv256 T9", .mech = SM, .B = 1, .T = 9, .H = 1, .dk = 256, .dv = 256},

    /* ---- linear ---- */
    {.name = "linear T=1", .mech = LI, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "linear B2 T37 H3 dk16 dv24 C16", .mech = LI, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24, .chunk = 16},
    {.name = "linear B1 T100 H2 dk24 dv16 C64", .mech = LI, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16, .chunk = 64},
    {.name = "linear dk5 dv3 C8", .mech = LI, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .chunk = 8},
    {.name = "linear dk1 dv1 C4", .mech = LI, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4},
    {.name = "linear states S0 n0 C16", .mech = LI, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 16,
     .with_states = 1},
    {.name = "linear C1", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 1},
    {.name = "linear C7", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 7},
    {.name = "linear C64", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 64},
    {.name = "linear C50 > T", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50},

    {.name = "linear B1 T150 H2 dk128 dv64", .mech = LI, .B = 1, .T = 150, .H = 2, .dk = 128, .dv = 64},

    /* ---- delta ---- */
    {.name = "delta T=1 beta g", .mech = DE, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .with_beta = 1, .with_g = 1},
    {.name = "delta B2 T37 H3 dk16 dv24 C16 beta g", .mech = DE, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24,
     .chunk = 16, .with_beta = 1, .with_g = 1},
    {.name = "delta B1 T100 H2 dk24 dv16 C64 beta g", .mech = DE, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16,
     .chunk = 64, .with_beta = 1, .with_g = 1},
    {.name = "delta dk5 dv3 C8 beta g", .mech = DE, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .chunk = 8,
     .with_beta = 1, .with_g = 1},
    {.name = "delta dk1 dv1 C4 beta g", .mech = DE, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4,
     .with_beta = 1, .with_g = 1},
    {.name = "delta beta only (g absent) C16", .mech = DE, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16,
     .with_beta = 1},
    {.name = "delta no beta no g C16", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .chunk = 16},
    {.name = "delta g with exact zeros C16", .mech = DE, .B = 1, .T = 45, .H = 2, .dk = 12, .dv = 8, .chunk = 16,
     .with_beta = 1, .with_g = 1, .g_zeros = 1},
    {.name = "delta states S0 C16", .mech = DE, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 16,
     .with_beta = 1, .with_g = 1, .with_states = 1},
    {.name = "delta feature map elu1 C16", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .chunk = 16,
     .with_beta = 1, .with_g = 1, .elu1 = 1},
    {.name = "delta C1", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 1, .with_beta = 1,
     .with_g = 1},
    {.name = "delta C7", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 7, .with_beta = 1,
     .with_g = 1},
    {.name = "delta C64", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 64, .with_beta = 1,
     .with_g = 1},
    {.name = "delta C50 > T", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50, .with_beta = 1,
     .with_g = 1},

    {.name = "delta B1 T150 H2 dk128 dv64 beta g", .mech = DE, .B = 1, .T = 150, .H = 2, .dk = 128, .dv = 64,
     .with_beta = 1, .with_g = 1},

    /* ---- delta-paper: phi (elu1 by default) on q only, g [B,T,H,dv], sequential only ---- */
    {.name = "delta-paper T=1 g", .mech = DP, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .with_g = 1},
    {.name = "delta-paper B2 T37 H3 dk16 dv24 g", .mech = DP, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24,
     .with_g = 1},
    {.name = "delta-paper B1 T100 H2 dk24 dv16 no g", .mech = DP, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16},
    {.name = "delta-paper dk5 dv3 g", .mech = DP, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .with_g = 1},
    {.name = "delta-paper dk1 dv1 g", .mech = DP, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .with_g = 1},
    {.name = "delta-paper g with exact zeros", .mech = DP, .B = 1, .T = 45, .H = 2, .dk = 12, .dv = 8, .with_g = 1,
     .g_zeros = 1},
    {.name = "delta-paper states S0 t0=5 g", .mech = DP, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .t0 = 5,
     .with_g = 1, .with_states = 1},
    {.name = "delta-paper feature map none g", .mech = DP, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .with_g = 1,
     .fmap_none = 1},
    {.name = "delta-paper B64 T73 H4 dk32 dv32 g (training shape)", .mech = DP, .B = 64, .T = 73, .H = 4, .dk = 32,
     .dv = 32, .with_g = 1},
    {.name = "delta-paper dk256 dv256 T9 g", .mech = DP, .B = 1, .T = 9, .H = 1, .dk = 256, .dv = 256, .with_g = 1},
    {.name = "delta-paper dk256 dv1 T20 g", .mech = DP, .B = 1, .T = 20, .H = 2, .dk = 256, .dv = 1, .with_g = 1},
    {.name = "delta-paper dk1 dv256 T20 g", .mech = DP, .B = 1, .T = 20, .H = 2, .dk = 1, .dv = 256, .with_g = 1},

    /* ---- vla ---- */
    {.name = "vla T=1", .mech = VL, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "vla B2 T37 H3 dk16 dv24 C16", .mech = VL, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24, .chunk = 16},
    {.name = "vla B1 T100 H2 dk24 dv16 C64", .mech = VL, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16, .chunk = 64},
    {.name = "vla dk5 dv3 C8", .mech = VL, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .chunk = 8},
    {.name = "vla dk1 dv1 C4", .mech = VL, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4},
    {.name = "vla lambda0 0.1 explicit C16", .mech = VL, .B = 1, .T = 40, .H = 2, .dk = 12, .dv = 12, .chunk = 16,
     .lambda0 = 0.1},
    {.name = "vla lambda0 1 C16", .mech = VL, .B = 1, .T = 40, .H = 2, .dk = 12, .dv = 12, .chunk = 16, .lambda0 = 1.0},
    {.name = "vla u given C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16, .with_u = 1},
    {.name = "vla R4 rho0.5 t0=3 u C16", .mech = VL, .B = 2, .T = 45, .H = 2, .dk = 8, .dv = 12, .chunk = 16, .t0 = 3,
     .R = 4, .rho = 0.5, .with_u = 1},
    {.name = "vla R4 rho0.5 t0=3 no u C16", .mech = VL, .B = 1, .T = 45, .H = 2, .dk = 8, .dv = 12, .chunk = 16,
     .t0 = 3, .R = 4, .rho = 0.5},
    {.name = "vla R20 rho1e-3 t0=15 C16", .mech = VL, .B = 1, .T = 50, .H = 2, .dk = 8, .dv = 8, .chunk = 16, .t0 = 15,
     .R = 20, .rho = 1e-3},
    {.name = "vla paper preset + u C16", .mech = VL, .B = 2, .T = 61, .H = 2, .dk = 16, .dv = 16, .chunk = 16,
     .paper = 1, .with_u = 1},
    {.name = "vla paper preset + u, default chunk", .mech = VL, .B = 1, .T = 90, .H = 2, .dk = 16, .dv = 16,
     .paper = 1, .with_u = 1},
    {.name = "vla paper + u + states S0 A0 n0, t0=7 C16", .mech = VL, .B = 1, .T = 61, .H = 2, .dk = 16, .dv = 12,
     .chunk = 16, .paper = 1, .with_u = 1, .with_states = 1, .t0 = 7},
    {.name = "vla elu1 normalised output C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16,
     .elu1 = 1, .norm = 1},
    {.name = "vla elu1 unnormalised C16", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 24, .dv = 16, .chunk = 16,
     .elu1 = 1},
    {.name = "vla states S0 A0, t0=5 C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 16,
     .with_states = 1, .t0 = 5},
    {.name = "vla lambda0 1e-3 C16 (VLA-MATH: ~1e-4)", .mech = VL, .B = 1, .T = 64, .H = 2, .dk = 16, .dv = 16,
     .chunk = 16, .lambda0 = 1e-3, .tol = 2e-4},
    {.name = "vla C1", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 1},
    {.name = "vla C7", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 7},
    {.name = "vla C64", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 64},
    {.name = "vla C50 > T", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50},
    {.name = "vla C7 R4 rho0.5 t0=3 u", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 7, .t0 = 3,
     .R = 4, .rho = 0.5, .with_u = 1},
    {.name = "vla R5 rho0.5 t0=5000000003 (past int32) u C16", .mech = VL, .B = 1, .T = 45, .H = 2, .dk = 8,
     .dv = 12, .chunk = 16, .t0 = 5000000003LL, .R = 5, .rho = 0.5, .with_u = 1},
    {.name = "vla B3 H5 (15 heads) T40 dk8 dv8 C16", .mech = VL, .B = 3, .T = 40, .H = 5, .dk = 8, .dv = 8, .chunk = 16,
     .with_u = 1},
    /* larger and boundary sizes (dk, dv up to 256) */
    {.name = "vla B1 T200 H2 dk64 dv64 u", .mech = VL, .B = 1, .T = 200, .H = 2, .dk = 64, .dv = 64, .with_u = 1},
    {.name = "vla dk256 dv4 T12 C8", .mech = VL, .B = 1, .T = 12, .H = 1, .dk = 256, .dv = 4, .chunk = 8},
    {.name = "vla dk4 dv256 T30 C8 paper + u", .mech = VL, .B = 1, .T = 30, .H = 1, .dk = 4, .dv = 256, .chunk = 8,
     .paper = 1, .with_u = 1},
    /* two-level: segment_chunks 1, 2, 3 (and the backend's choice) */
    {.name = "vla two-level seg1 C8 u", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10, .chunk = 8, .seg = 1,
     .with_u = 1, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg2 C8 u", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10, .chunk = 8, .seg = 2,
     .with_u = 1, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg3 C8 u", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10, .chunk = 8, .seg = 3,
     .with_u = 1, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg0 C8 u", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10, .chunk = 8, .seg = 0,
     .with_u = 1, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg1 C8 R4 rho0.5 t0=3", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10,
     .chunk = 8, .seg = 1, .R = 4, .rho = 0.5, .t0 = 3, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg2 C8 R4 rho0.5 t0=3", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10,
     .chunk = 8, .seg = 2, .R = 4, .rho = 0.5, .t0 = 3, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg3 C8 R4 rho0.5 t0=3", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10,
     .chunk = 8, .seg = 3, .R = 4, .rho = 0.5, .t0 = 3, .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg2 C8 paper + u + states t0=5", .mech = VL, .B = 2, .T = 77, .H = 1, .dk = 12,
     .dv = 10, .chunk = 8, .seg = 2, .paper = 1, .with_u = 1, .with_states = 1, .t0 = 5,
     .only = VLA_ALGO_TWO_LEVEL},
    {.name = "vla two-level seg3 C7 R20 t0=15 normalised", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12,
     .dv = 10, .chunk = 7, .seg = 3, .R = 20, .rho = 1e-3, .t0 = 15, .elu1 = 1, .norm = 1,
     .only = VLA_ALGO_TWO_LEVEL},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* VLA_TEST_SEED=N picks other random inputs (to probe margins); default 1000. */
static uint64_t seed_base = 1000;

static void make_desc(const op_case *c, vla_attn_desc *d) {
    ck_assert_int_eq(vla_attn_desc_init(d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(d, "paper"), VLA_OK);
    if (c->chunk) d->chunk = c->chunk;
    d->segment_chunks = c->seg;
    if (c->lambda0 > 0) d->lambda0 = c->lambda0;
    if (c->R) {
        d->refresh = c->R;
        d->refresh_size = c->rho;
    }
    if (c->elu1) d->feature_map = VLA_FMAP_ELU1;
    if (c->fmap_none) d->feature_map = VLA_FMAP_NONE;
    if (c->norm) d->normalize_output = 1;
    if (c->scale > 0) d->scale = c->scale;
}

START_TEST(test_case) {
    const op_case *c = &cases[_i];
    tu_rng rng;
    tu_seed(&rng, seed_base + (uint64_t)_i);
    vla_attn_desc d;
    make_desc(c, &d);
    tu_problem p = {.B = c->B, .T = c->T, .H = c->H, .dk = c->dk, .dv = c->dv, .t0 = c->t0};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p), nbt = tu_nbt(&p), ng = tu_ng(&d, &p);
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = c->with_u ? tu_randn_new(&rng, nqk) : NULL;
    float *beta = NULL, *g = NULL;
    if (c->with_beta) {
        beta = malloc(nbt * sizeof *beta);
        tu_randu(&rng, beta, nbt, 0.0f, 1.0f);
    }
    if (c->with_g) {
        g = malloc(ng * sizeof *g);
        tu_randu(&rng, g, ng, 0.0f, 1.0f);
        if (c->g_zeros)
            for (size_t i = 3; i < ng; i += 7) g[i] = 0.0f;
    }
    float *S0 = NULL, *A0 = NULL, *n0 = NULL;
    if (c->with_states) {
        S0 = tu_rand_S0(&rng, c->B, c->H, c->dk, c->dv);
        A0 = tu_rand_A0(&rng, c->B, c->H, c->dk, d.lambda0);
        n0 = tu_rand_n0(&rng, c->B, c->H, c->dk);
    }
    p.q = q, p.k = k, p.v = v, p.u = u, p.beta = beta, p.g = g, p.S0 = S0, p.A0 = A0, p.n0 = n0;
    double tol = c->tol > 0 ? c->tol : 1e-5;

    vla_backend *be = tu_open_cpu();
    vla_algorithm algos[6];
    int na = tu_algorithms(c->mech, algos);
    if (c->only != VLA_ALGO_AUTO) {
        algos[0] = c->only;
        na = 1;
    }
    fprintf(stderr, "[ops] %s\n", c->name);
    char why[4096] = "";
    int failures = 0;
    double case_worst = 0;
    vla_algorithm worst_algo = algos[0];
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result r;
        tu_run(be, &d, &p, 0, &r);
        char label[160];
        snprintf(label, sizeof label, "%s%s%s", vla_algorithm_name(algos[ai]), algos[ai] == VLA_ALGO_AUTO ? "->" : "",
                 algos[ai] == VLA_ALGO_AUTO ? vla_algorithm_name(r.resolved) : "");
        if (algos[ai] == VLA_ALGO_AUTO)
            ck_assert_msg(r.resolved != VLA_ALGO_AUTO && vla_algorithm_defined(c->mech, r.resolved),
                          "%s: auto resolved to '%s'", c->name, vla_algorithm_name(r.resolved));
        double worst;
        if (!tu_check_vs_ref(&d, &p, &r, tol, label, &worst, why, sizeof why)) failures++;
        if (worst > case_worst) case_worst = worst, worst_algo = algos[ai];
        tu_result_free(&r);
    }
    fprintf(stderr, "  => worst %.2e (%s), tol %.0e, margin x%.1f\n", case_worst, vla_algorithm_name(worst_algo), tol,
            case_worst > 0 ? tol / case_worst : INFINITY);
    vla_backend_close(be);
    free(q), free(k), free(v), free(u), free(beta), free(g), free(S0), free(A0), free(n0);
    ck_assert_msg(failures == 0, "%s: %s", c->name, why);
}
END_TEST

/* Inputs are never written (VLA-MATH: inputs are read-only), checked on one VLA call with
 * every optional input present. */
START_TEST(test_inputs_untouched) {
    tu_rng rng;
    tu_seed(&rng, 77);
    const int B = 1, T = 33, H = 2, dk = 8, dv = 6;
    size_t nqk = (size_t)B * T * H * dk, nvo = (size_t)B * T * H * dv, nS = (size_t)B * H * dk * dv;
    size_t nA = (size_t)B * H * dk * dk, nn = (size_t)B * H * dk;
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = tu_randn_new(&rng, nqk), *S0 = tu_rand_S0(&rng, B, H, dk, dv), *A0 = tu_rand_A0(&rng, B, H, dk, 0.1);
    float *n0 = tu_rand_n0(&rng, B, H, dk);
    vla_backend *be = tu_open_cpu();
    vla_buffer *bq = tu_buf_from(be, q, nqk), *bk = tu_buf_from(be, k, nqk), *bv = tu_buf_from(be, v, nvo);
    vla_buffer *bu = tu_buf_from(be, u, nqk), *bS = tu_buf_from(be, S0, nS), *bA = tu_buf_from(be, A0, nA);
    vla_buffer *bn = tu_buf_from(be, n0, nn);
    vla_buffer *bo = tu_buf_new(be, nvo), *So = tu_buf_new(be, nS), *Ao = tu_buf_new(be, nA), *no = tu_buf_new(be, nn);
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    vla_attn_desc_preset(&d, "paper");
    d.refresh = 4;
    d.chunk = 8;
    vla_algorithm algos[6];
    int na = tu_algorithms(VLA_MECH_VLA, algos);
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        vla_attn_args a = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = 2, .q = bq, .k = bk, .v = bv, .u = bu,
                           .o = bo, .S_in = bS, .A_in = bA, .n_in = bn, .S_out = So, .A_out = Ao, .n_out = no};
        vla_status s = vla_attention_forward(be, &d, &a);
        ck_assert_msg(s == VLA_OK, "%s: %s", vla_algorithm_name(algos[ai]), vla_backend_message(be));
        const struct {
            vla_buffer *b;
            const float *x;
            size_t n;
            const char *name;
        } ins[] = {{bq, q, nqk, "q"}, {bk, k, nqk, "k"}, {bv, v, nvo, "v"}, {bu, u, nqk, "u"},
                   {bS, S0, nS, "S_in"}, {bA, A0, nA, "A_in"}, {bn, n0, nn, "n_in"}};
        for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
            float *back = tu_buf_download_new(ins[i].b, ins[i].n);
            ck_assert_msg(memcmp(back, ins[i].x, ins[i].n * sizeof(float)) == 0, "%s wrote its input %s",
                          vla_algorithm_name(algos[ai]), ins[i].name);
            free(back);
        }
    }
    vla_buffer_free(bq), vla_buffer_free(bk), vla_buffer_free(bv), vla_buffer_free(bu), vla_buffer_free(bS);
    vla_buffer_free(bA), vla_buffer_free(bn), vla_buffer_free(bo), vla_buffer_free(So), vla_buffer_free(Ao);
    vla_buffer_free(no);
    vla_backend_close(be);
    free(q), free(k), free(v), free(u), free(S0), free(A0), free(n0);
}
END_TEST

/* vla_algorithm_defined says what VLA-MATH 2 says, and AUTO resolves to one of those. */
START_TEST(test_algorithm_table) {
    for (int m = 0; m <= VLA_MECH_DELTA_PAPER; m++) {
        vla_algorithm mine[6];
        int n = tu_algorithms((vla_mechanism)m, mine);
        for (int a = 0; a <= VLA_ALGO_FUSED; a++) {
            int expect = 0;
            for (int i = 0; i < n; i++) expect |= mine[i] == (vla_algorithm)a;
            ck_assert_msg(vla_algorithm_defined((vla_mechanism)m, (vla_algorithm)a) == expect,
                          "vla_algorithm_defined(%s, %s) != %d", vla_mechanism_name((vla_mechanism)m),
                          vla_algorithm_name((vla_algorithm)a), expect);
        }
    }
}
END_TEST

/* The harness itself: poison survives a buffer round trip and is counted; the error norm
 * refuses non-finite values; word matching; ref64 on cases with a closed form. */
START_TEST(test_harness) {
    vla_backend *be = tu_open_cpu();
    vla_buffer *b = tu_buf_new(be, 10);
    float *x = tu_buf_download_new(b, 10);
    ck_assert_uint_eq(tu_count_poison(x, 10), 10);
    ck_assert(!tu_all_finite(x, 10));
    x[3] = 1.0f;
    ck_assert_uint_eq(tu_count_poison(x, 10), 9);
    free(x);
    vla_buffer_free(b);
    vla_backend_close(be);
    const float f[3] = {1, 2, NAN};
    const double r[3] = {1, 2, 3};
    ck_assert(isinf(tu_relerr(f, r, 3)));
    ck_assert(tu_relerr(f, r, 2) == 0);
    ck_assert(tu_has_word("u is given", "u") && !tu_has_word("u_scale = -1", "u") && !tu_has_word("but", "u"));
    ck_assert(tu_has_word("unknown feature map 5", "feature map"));

    /* T = 1: softmax o = v; linear o = v phi(k).phi(q) / (phi(q).phi(k) + eps); VLA (u = k^):
     * a = k^, S = v k^T, o = v (k^ . q). */
    const float q[2] = {0.5f, -1.0f}, k[2] = {3.0f, 4.0f}, v[1] = {2.0f};
    double o[1];
    vla_attn_desc d;
    vla_attn_desc_init(&d, VLA_MECH_SOFTMAX);
    ck_assert_int_eq(ref64_forward(&d, 1, 1, 1, 2, 1, 0, q, k, v, NULL, NULL, NULL, NULL, NULL, NULL, o, NULL, NULL,
                                   NULL),
                     0);
    ck_assert(fabs(o[0] - 2.0) < 1e-15);
    vla_attn_desc_init(&d, VLA_MECH_LINEAR);
    ref64_forward(&d, 1, 1, 1, 2, 1, 0, q, k, v, NULL, NULL, NULL, NULL, NULL, NULL, o, NULL, NULL, NULL);
    double pq0 = 1.5, pq1 = exp(-1.0), pk0 = 4, pk1 = 5, dotp = pq0 * pk0 + pq1 * pk1;
    ck_assert(fabs(o[0] - 2.0 * dotp / (dotp + 1e-4)) < 1e-14);
    vla_attn_desc_init(&d, VLA_MECH_VLA);
    double S[2], A[4];
    ref64_forward(&d, 1, 1, 1, 2, 1, 0, q, k, v, NULL, NULL, NULL, NULL, NULL, NULL, o, S, A, NULL);
    ck_assert(fabs(o[0] - 2.0 * (0.6 * 0.5 - 0.8)) < 1e-14);
    ck_assert(fabs(S[0] - 1.2) < 1e-14 && fabs(S[1] - 1.6) < 1e-14);
    /* A = (0.1 I + k^ k^T)^{-1} = 10 (I - k^ k^T / 1.1) */
    ck_assert(fabs(A[0] - 10 * (1 - 0.36 / 1.1)) < 1e-12 && fabs(A[1] + 10 * 0.48 / 1.1) < 1e-12);
    /* Delta, T = 1, beta = 0.5, g = 0.3, S0 = 0: S = beta v k^T; o = S q. */
    vla_attn_desc_init(&d, VLA_MECH_DELTA);
    const float beta[1] = {0.5f}, g[1] = {0.3f};
    ref64_forward(&d, 1, 1, 1, 2, 1, 0, q, k, v, NULL, beta, g, NULL, NULL, NULL, o, S, NULL, NULL);
    ck_assert(fabs(o[0] - 0.5 * 2.0 * (0.6 * 0.5 - 0.8)) < 1e-14);
    /* delta-paper, T = 2, dv = 2, elu1 on q only: k^ = (0.6, 0.8) both steps; S_1 = v_1 k^T;
     * e_2 = v_2 - S_1 k^ = v_2 - v_1; S_2 = diag(g_2) S_1 + e_2 k^T = (diag(g_2) v_1 + v_2 - v_1) k^T;
     * o_2 = S_2 phi(q_2), k^ . phi(q_2) = 0.6 * 1.5 + 0.8 * e^-1. */
    vla_attn_desc_init(&d, VLA_MECH_DELTA_PAPER);
    const float q2[4] = {0.5f, -1.0f, 0.5f, -1.0f}, k2[4] = {3.0f, 4.0f, 6.0f, 8.0f}, v2[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    const float g2[4] = {0.9f, 0.9f, 0.25f, 0.5f};
    double o2[4];
    ref64_forward(&d, 1, 2, 1, 2, 2, 0, q2, k2, v2, NULL, NULL, g2, NULL, NULL, NULL, o2, NULL, NULL, NULL);
    const double kq = 0.6 * 1.5 + 0.8 * exp(-1.0);
    ck_assert(fabs(o2[0] - 1.0 * kq) < 1e-14 && fabs(o2[1] - 2.0 * kq) < 1e-14);
    ck_assert(fabs(o2[2] - ((double)g2[2] * 1.0 - 1.0 - 1.0) * kq) < 1e-14);
    ck_assert(fabs(o2[3] - ((double)g2[3] * 2.0 + 0.5 - 2.0) * kq) < 1e-14);
}
END_TEST

Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("vs_ref64");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_case, 0, N_CASES);
    tcase_add_test(tc, test_inputs_untouched);
    tcase_add_test(tc, test_algorithm_table);
    tcase_add_test(tc, test_harness);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    const char *seed = getenv("VLA_TEST_SEED");
    if (seed && *seed) seed_base = strtoull(seed, NULL, 10);
    fprintf(stderr, "[ops] seed base %llu\n", (unsigned long long)seed_base);
    SRunner *sr = srunner_create(ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
