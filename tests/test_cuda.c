/* The CUDA backend against the CPU backend (which test_ops checks against float64) and against
 * ref64 itself: every mechanism x every algorithm VLA-MATH defines, on fresh random inputs,
 * dk != dv, T not a multiple of the chunk, chunk sizes 1..>T, dk and dv from 1 to 256 (working
 * arrays that do not fit shared memory), u, beta, g, the paper preset, R = 4 / rho = 0.5 with
 * t0, initial states and in-place state updates; decoding one token at a time with carried
 * states; streaming in two pieces; long sequences (1e-5 at T <= 1024, 1e-4 beyond); the backward
 * op (tcase "backward": every gradient against the CPU backend's and ref64's, 1e-4 per tensor); the
 * paper's DeltaNet, forward and backward (tcase "delta-paper"); and the statuses specific to this
 * backend.
 *
 * Needs a CUDA device: without one it prints why and exits 77, which CTest reports as skipped
 * (SKIP_RETURN_CODE 77), never as passed. It never forks (STYLE.md: CUDA must not be
 * initialised before Check forks), so a failure ends the whole suite's run of that test. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"

static vla_backend *g_cu, *g_cpu;
static int g_emulated; /* the CPU emulator (backends/cuda/emu): smaller sizes */
/* VLA_CUDA_TEST_QUICK=1: the small cases only, no long sequences, no out-of-memory probe (for
 * runs under compute-sanitizer, which is 10-100 times slower). */
static int g_quick;
/* VLA_CUDA_TEST_ONLY=<text> (development): only the ops cases whose name contains it. */
static const char *g_only;
static uint64_t seed_base = 7000;

typedef struct cu_case {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv;
    int64_t t0;
    int chunk, seg, paper;
    double lambda0;
    int R;
    double rho;
    int elu1, norm;
    double scale;
    double su; /* VLA u_scale (s_u), when > 0 */
    int with_u, with_beta, with_g, g_zeros, with_states, inplace;
    vla_algorithm only;
    double tol;
} cu_case;

#define SM VLA_MECH_SOFTMAX
#define LI VLA_MECH_LINEAR
#define DE VLA_MECH_DELTA
#define VL VLA_MECH_VLA
#define TL VLA_ALGO_TWO_LEVEL

static const cu_case cases[] = {
    /* ---- softmax (fused online softmax) ---- */
    {.name = "softmax T=1", .mech = SM, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "softmax B2 T37 H3 dk16 dv24", .mech = SM, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24},
    {.name = "softmax B1 T150 H2 dk64 dv48 (several tiles)", .mech = SM, .B = 1, .T = 150, .H = 2, .dk = 64, .dv = 48},
    {.name = "softmax dk1 dv1", .mech = SM, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1},
    {.name = "softmax dk5 dv3 scale 0.5", .mech = SM, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .scale = 0.5},
    {.name = "softmax dk256 dv256 T70", .mech = SM, .B = 1, .T = 70, .H = 1, .dk = 256, .dv = 256},
    /* the tensor-core form (sm_80+, dk and dv <= 64): 128 query rows a block, key tiles of 64 */
    {.name = "softmax T150 dk32 dv32 (two query blocks)", .mech = SM, .B = 1, .T = 150, .H = 1, .dk = 32, .dv = 32},
    {.name = "softmax T140 dk64 dv64", .mech = SM, .B = 1, .T = 140, .H = 1, .dk = 64, .dv = 64},
    {.name = "softmax B2 T300 H2 dk64 dv64", .mech = SM, .B = 2, .T = 300, .H = 2, .dk = 64, .dv = 64},
    {.name = "softmax T200 H2 dk33 dv40 scale 2", .mech = SM, .B = 1, .T = 200, .H = 2, .dk = 33, .dv = 40, .scale = 2.0},
    {.name = "softmax T129 H3 dk64 dv20", .mech = SM, .B = 1, .T = 129, .H = 3, .dk = 64, .dv = 20},
    {.name = "softmax T140 dk64 dv65 (generic form)", .mech = SM, .B = 1, .T = 140, .H = 1, .dk = 64, .dv = 65},
    /* few query tiles: each one's key tiles split over blocks, then combined (2 parts here) */
    {.name = "softmax T512 dk16 dv16 (keys in 2 parts)", .mech = SM, .B = 1, .T = 512, .H = 1, .dk = 16, .dv = 16},
    {.name = "softmax T700 H2 dk64 dv40 (keys in 2 parts)", .mech = SM, .B = 1, .T = 700, .H = 2, .dk = 64, .dv = 40},
    /* 33 key tiles in 8 parts of 5: the last query tile's last part has none (an address clamped
     * inside the tensor; compute-sanitizer memcheck runs this case on the H200) */
    {.name = "softmax T2100 dk16 dv16 (8 key parts, one empty)", .mech = SM, .B = 1, .T = 2100, .H = 1, .dk = 16, .dv = 16},

    /* ---- linear ---- */
    {.name = "linear T=1", .mech = LI, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "linear B2 T37 H3 dk16 dv24 C16", .mech = LI, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24, .chunk = 16},
    {.name = "linear T100 dk24 dv16 C64", .mech = LI, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16, .chunk = 64},
    {.name = "linear dk1 dv1 C4", .mech = LI, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4},
    {.name = "linear states S0 n0 in place C16", .mech = LI, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10,
     .chunk = 16, .with_states = 1, .inplace = 1},
    {.name = "linear C1", .mech = LI, .B = 1, .T = 21, .H = 2, .dk = 8, .dv = 12, .chunk = 1},
    {.name = "linear C50 > T", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50},
    /* dv > DK on the chunk-parallel form: Q = phi(K)^T V in three column blocks, outputs in two */
    {.name = "linear T90 dk20 dv70 C32 elu1", .mech = LI, .B = 1, .T = 90, .H = 1, .dk = 20, .dv = 70, .chunk = 32, .elu1 = 1},
    {.name = "linear T150 dk64 dv64", .mech = LI, .B = 1, .T = 150, .H = 1, .dk = 64, .dv = 64},
    {.name = "linear dk256 dv200 T40 C16", .mech = LI, .B = 1, .T = 40, .H = 1, .dk = 256, .dv = 200, .chunk = 16},
    /* 75 chunks on one head: the chunked walk runs in segments (maps, scan, local walks) */
    {.name = "linear C4 T300 (75 chunks), states in place", .mech = LI, .B = 1, .T = 300, .H = 1, .dk = 16,
     .dv = 40, .chunk = 4, .with_states = 1, .inplace = 1},

    /* ---- delta ---- */
    {.name = "delta T=1 beta g", .mech = DE, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .with_beta = 1, .with_g = 1},
    {.name = "delta B2 T37 H3 dk16 dv24 C16 beta g", .mech = DE, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24,
     .chunk = 16, .with_beta = 1, .with_g = 1},
    {.name = "delta no beta no g C16", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .chunk = 16},
    {.name = "delta beta only C16", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16,
     .with_beta = 1},
    {.name = "delta g with exact zeros C16", .mech = DE, .B = 1, .T = 45, .H = 2, .dk = 12, .dv = 8, .chunk = 16,
     .with_beta = 1, .with_g = 1, .g_zeros = 1},
    {.name = "delta states in place elu1 C16", .mech = DE, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 16,
     .with_beta = 1, .with_g = 1, .with_states = 1, .inplace = 1, .elu1 = 1},
    {.name = "delta dk1 dv1 C4", .mech = DE, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4, .with_beta = 1,
     .with_g = 1},
    {.name = "delta C4 T300 beta walk segments", .mech = DE, .B = 1, .T = 300, .H = 1, .dk = 16, .dv = 24, .chunk = 4,
     .with_beta = 1},
    /* 45 chunks of 4, dv odd: the plain walk at dk <= 32 (walk_quad_kernel, seven steps of P in flight)
     * over more steps than its unrolled groups of eight, ending inside one, and a
     * last column pair with one live column */
    {.name = "delta C4 T180 H2 dk24 dv31 beta, plain walk of 45 steps", .mech = DE, .B = 1, .T = 180, .H = 2,
     .dk = 24, .dv = 31, .chunk = 4, .with_beta = 1, .with_states = 1},
    {.name = "delta C7", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 7, .with_beta = 1,
     .with_g = 1},
    {.name = "delta dk200 dv256 T40 C16 beta g", .mech = DE, .B = 1, .T = 40, .H = 1, .dk = 200, .dv = 256,
     .chunk = 16, .with_beta = 1, .with_g = 1},

    /* ---- vla ---- */
    {.name = "vla T=1", .mech = VL, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "vla B2 T37 H3 dk16 dv24 C16", .mech = VL, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24, .chunk = 16},
    {.name = "vla T100 dk24 dv16 C64", .mech = VL, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 16, .chunk = 64},
    {.name = "vla dk5 dv3 C8", .mech = VL, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .chunk = 8},
    {.name = "vla dk1 dv1 C4", .mech = VL, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4},
    {.name = "vla C4 T300 walk segments, states in place", .mech = VL, .B = 1, .T = 300, .H = 1, .dk = 20, .dv = 40,
     .chunk = 4, .with_states = 1, .inplace = 1},
    {.name = "vla C4 T260 dk48 walk segments", .mech = VL, .B = 1, .T = 260, .H = 1, .dk = 48, .dv = 24, .chunk = 4},
    /* 65 chunks of 4 at dk, dv <= 32: the segmented walk with the A part forming the output's first
     * half (P.outfold, sm_80+; (1,4,32) T = 8192 and 32768 run it) and summing the Gram prefix itself
     * (P.fold; T = 8192), which no case above takes (dv or dk > 32 there) */
    {.name = "vla C4 T260 dk20 dv24 walk segments, output folded, states", .mech = VL, .B = 1, .T = 260, .H = 1,
     .dk = 20, .dv = 24, .chunk = 4, .with_states = 1, .t0 = 2},
    {.name = "vla C4 T258 B2 dk32 dv32 u elu1 walk segments, output folded", .mech = VL, .B = 2, .T = 258, .H = 1,
     .dk = 32, .dv = 32, .chunk = 4, .with_u = 1, .elu1 = 1},
    {.name = "vla C4 T200 dk32 dv30 states, plain walk of 50 steps", .mech = VL, .B = 1, .T = 200,
     .H = 1, .dk = 32, .dv = 30, .chunk = 4, .with_states = 1},
    {.name = "vla lambda0 1 C16", .mech = VL, .B = 1, .T = 40, .H = 2, .dk = 12, .dv = 12, .chunk = 16,
     .lambda0 = 1.0},
    /* u = s_u k^ with s_u != 1 on the chunk-parallel form, whose A part then takes a_t from Z's rows
     * over s_u L_tt, and A0 = I / lambda0 small enough that ||A_t k^_t|| < eps all along
     * (the normalisation's clamp binds: a_t = A_t k^_t / eps, which that prescale keeps exact) */
    {.name = "vla s_u 0.3 T150 dk32 dv24", .mech = VL, .B = 1, .T = 150, .H = 2, .dk = 32, .dv = 24, .su = 0.3},
    /* (chunked alone: scan and two-level, float32 products of per-token or per-chunk maps, reached
     * 1.25e-5 against the float64 reference here on the H200, and as far from the CPU backend's
     * result; with the default s_u = 1 they stay within 1e-5) */
    {.name = "vla s_u 3 T200 dk64 dv64", .mech = VL, .B = 1, .T = 200, .H = 2, .dk = 64, .dv = 64, .su = 3.0,
     .only = VLA_ALGO_CHUNKED},
    {.name = "vla lambda0 3e4 T150 dk32 (eps clamp binds)", .mech = VL, .B = 1, .T = 150, .H = 2, .dk = 32, .dv = 32,
     .lambda0 = 3e4},
    /* both: a_t = A_t k^_t / eps, whose length the prescale's 1 / s_u sets (a factor 3.3 without it) */
    {.name = "vla lambda0 3e4 s_u 0.3 T150 dk64 (clamp, s_u)", .mech = VL, .B = 1, .T = 150, .H = 2, .dk = 64,
     .dv = 48, .lambda0 = 3e4, .su = 0.3},
    {.name = "vla u given C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16, .with_u = 1},
    {.name = "vla R4 rho0.5 t0=3 u C16", .mech = VL, .B = 2, .T = 45, .H = 2, .dk = 8, .dv = 12, .chunk = 16, .t0 = 3,
     .R = 4, .rho = 0.5, .with_u = 1},
    {.name = "vla R4 rho0.5 t0=6 no u C7", .mech = VL, .B = 1, .T = 45, .H = 2, .dk = 8, .dv = 12, .chunk = 7,
     .t0 = 6, .R = 4, .rho = 0.5},
    {.name = "vla R5 rho0.5 t0=5000000003 u C16", .mech = VL, .B = 1, .T = 45, .H = 2, .dk = 8, .dv = 12,
     .chunk = 16, .t0 = 5000000003LL, .R = 5, .rho = 0.5, .with_u = 1},
    {.name = "vla paper preset + u C16", .mech = VL, .B = 2, .T = 61, .H = 2, .dk = 16, .dv = 16, .chunk = 16,
     .paper = 1, .with_u = 1},
    {.name = "vla paper + u + states in place t0=7", .mech = VL, .B = 1, .T = 61, .H = 2, .dk = 16, .dv = 12,
     .chunk = 16, .paper = 1, .with_u = 1, .with_states = 1, .t0 = 7, .inplace = 1},
    {.name = "vla elu1 normalised output C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16,
     .elu1 = 1, .norm = 1},
    {.name = "vla states S0 A0 t0=5 C16", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 16,
     .with_states = 1, .t0 = 5},
    {.name = "vla lambda0 1e-3 C16 (~1e-4)", .mech = VL, .B = 1, .T = 64, .H = 2, .dk = 16, .dv = 16, .chunk = 16,
     .lambda0 = 1e-3, .tol = 2e-4},
    {.name = "vla C1", .mech = VL, .B = 1, .T = 21, .H = 2, .dk = 8, .dv = 12, .chunk = 1},
    {.name = "vla C50 > T", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50},
    {.name = "vla B1 T150 H2 dk64 dv64 u", .mech = VL, .B = 1, .T = 150, .H = 2, .dk = 64, .dv = 64, .with_u = 1},
    {.name = "vla dk256 dv16 T20 C8", .mech = VL, .B = 1, .T = 20, .H = 1, .dk = 256, .dv = 16, .chunk = 8},
    {.name = "vla dk8 dv256 T30 C8 paper + u", .mech = VL, .B = 1, .T = 30, .H = 1, .dk = 8, .dv = 256, .chunk = 8,
     .paper = 1, .with_u = 1},
    /* two-level: one segment per chunk and more; the Gram path, A_in, R > 0 (carry path) */
    {.name = "vla two-level seg1 C8 u", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10, .chunk = 8, .seg = 1,
     .with_u = 1, .only = TL},
    {.name = "vla two-level seg3 C8 states", .mech = VL, .B = 2, .T = 77, .H = 1, .dk = 12, .dv = 10, .chunk = 8,
     .seg = 3, .with_states = 1, .t0 = 4, .only = TL},
    {.name = "vla two-level seg2 C8 R4 rho0.5 t0=3", .mech = VL, .B = 1, .T = 77, .H = 2, .dk = 12, .dv = 10,
     .chunk = 8, .seg = 2, .R = 4, .rho = 0.5, .t0 = 3, .only = TL},
    {.name = "vla two-level seg2 C8 paper + u + states in place", .mech = VL, .B = 2, .T = 77, .H = 1, .dk = 12,
     .dv = 10, .chunk = 8, .seg = 2, .paper = 1, .with_u = 1, .with_states = 1, .t0 = 5, .inplace = 1, .only = TL},
    {.name = "vla two-level seg5 C16 dk64 dv32 normalised", .mech = VL, .B = 1, .T = 200, .H = 2, .dk = 64, .dv = 32,
     .chunk = 16, .seg = 5, .elu1 = 1, .norm = 1, .only = TL},
    /* 134 heads at dk = 64: the plain walk on 32 value columns a block (walk_kernel<64, 32>, whose
     * loads and stores go 16 bytes at a time where dv is a multiple of 4): dv = 60, the
     * second block 28 columns wide; dv = 62, 4 bytes at a time. (Last, so that the cases above keep
     * their seeds.) */
    {.name = "vla B2 H67 dk64 dv60 T70 states (walk, 16-byte moves)", .mech = VL, .B = 2, .T = 70, .H = 67, .dk = 64,
     .dv = 60, .with_states = 1, .only = VLA_ALGO_CHUNKED},
    {.name = "vla B2 H67 dk64 dv62 T70 (walk, dv % 4 = 2)", .mech = VL, .B = 2, .T = 70, .H = 67, .dk = 64, .dv = 62,
     .only = VLA_ALGO_CHUNKED},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void make_desc(const cu_case *c, vla_attn_desc *d) {
    ck_assert_int_eq(vla_attn_desc_init(d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(d, "paper"), VLA_OK);
    if (c->chunk) d->chunk = c->chunk;
    d->segment_chunks = c->seg;
    if (c->lambda0 > 0) d->lambda0 = c->lambda0;
    if (c->R) d->refresh = c->R, d->refresh_size = c->rho;
    if (c->elu1) d->feature_map = VLA_FMAP_ELU1;
    if (c->norm) d->normalize_output = 1;
    if (c->scale > 0) d->scale = c->scale;
    if (c->su > 0) d->u_scale = c->su;
}

/* Random inputs for a case; every array malloc'ed (free_problem). */
static void make_problem(tu_rng *rng, const cu_case *c, const vla_attn_desc *d, tu_problem *p) {
    memset(p, 0, sizeof *p);
    p->B = c->B, p->T = c->T, p->H = c->H, p->dk = c->dk, p->dv = c->dv, p->t0 = c->t0;
    const size_t nqk = tu_nqk(p), nvo = tu_nvo(p), nbt = tu_nbt(p);
    p->q = tu_randn_new(rng, nqk);
    p->k = tu_randn_new(rng, nqk);
    p->v = tu_randn_new(rng, nvo);
    if (c->with_u) p->u = tu_randn_new(rng, nqk);
    if (c->with_beta) {
        float *beta = malloc(nbt * sizeof *beta);
        ck_assert_ptr_nonnull(beta);
        tu_randu(rng, beta, nbt, 0.05f, 1.0f);
        p->beta = beta;
    }
    if (c->with_g) {
        float *g = malloc(nbt * sizeof *g);
        ck_assert_ptr_nonnull(g);
        tu_randu(rng, g, nbt, 0.5f, 1.0f);
        if (c->g_zeros)
            for (size_t i = 3; i < nbt; i += 7) g[i] = 0.0f;
        p->g = g;
    }
    if (c->with_states) {
        if (tu_has_S(d)) p->S0 = tu_rand_S0(rng, c->B, c->H, c->dk, c->dv);
        if (tu_has_A(d)) p->A0 = tu_rand_A0(rng, c->B, c->H, c->dk, d->lambda0);
        if (tu_has_n(d)) p->n0 = tu_rand_n0(rng, c->B, c->H, c->dk);
    }
}

static void free_problem(tu_problem *p) {
    free((void *)p->q), free((void *)p->k), free((void *)p->v), free((void *)p->u);
    free((void *)p->beta), free((void *)p->g), free((void *)p->S0), free((void *)p->A0), free((void *)p->n0);
    memset(p, 0, sizeof *p);
}

static void add_why(char *why, size_t n, const char *fmt, const char *label, double x) {
    size_t len = strlen(why);
    if (len + 2 < n) snprintf(why + len, n - len, fmt, label, x);
}

/* d on the CUDA backend vs ref64 (tu_check_vs_ref: status, every element written, finite, each
 * output < tol) and vs the CPU backend (each output < tol). 1 when both pass. */
static int check_one(const vla_attn_desc *d, const tu_problem *p, int inplace, double tol, const char *label,
                     char *why, size_t whylen) {
    tu_result rg, rc;
    tu_run(g_cu, d, p, inplace, &rg);
    int ok = tu_check_vs_ref(d, p, &rg, tol, label, NULL, why, whylen);
    if (rg.status == VLA_OK) {
        tu_run(g_cpu, d, p, inplace, &rc);
        if (rc.status != VLA_OK) {
            ok = 0;
            add_why(why, whylen, "%s: the cpu backend failed (%g)\n", label, (double)rc.status);
        } else {
            const double eo = tu_relerr_ff(rg.o, rc.o, tu_nvo(p));
            const double eS = rg.S && rc.S ? tu_relerr_ff(rg.S, rc.S, tu_nS(p)) : 0.0;
            const double eA = rg.A && rc.A ? tu_relerr_ff(rg.A, rc.A, tu_nA(p)) : 0.0;
            const double en = rg.n && rc.n ? tu_relerr_ff(rg.n, rc.n, tu_nn(p)) : 0.0;
            const double worst = fmax(fmax(eo, eS), fmax(eA, en));
            fprintf(stderr, "  %-58s vs cpu: o %.2e S %.2e A %.2e n %.2e\n", label, eo, eS, eA, en);
            if (!(worst < tol)) {
                ok = 0;
                add_why(why, whylen, "%s: cuda vs cpu rel. error %.3e\n", label, worst);
            }
        }
        tu_result_free(&rc);
    }
    tu_result_free(&rg);
    return ok;
}

static int algorithms_of(const cu_case *c, vla_algorithm out[6]) {
    if (c->only != VLA_ALGO_AUTO) {
        out[0] = c->only;
        return 1;
    }
    return tu_algorithms(c->mech, out); /* AUTO last */
}

START_TEST(test_case) {
    const cu_case *c = &cases[_i];
    if (g_quick && (size_t)c->B * c->T * c->H * (c->dk + c->dv) > 20000) return;
    if (g_only && !strstr(c->name, g_only)) return;
    tu_rng rng;
    tu_seed(&rng, seed_base + (uint64_t)_i);
    vla_attn_desc d;
    make_desc(c, &d);
    tu_problem p;
    make_problem(&rng, c, &d, &p);
    vla_algorithm algos[6];
    const int na = algorithms_of(c, algos);
    char why[4096] = "";
    int ok = 1;
    for (int a = 0; a < na; a++) {
        if (g_quick && na > 1 && algos[a] == VLA_ALGO_AUTO) continue; /* AUTO repeats another one */
        d.algorithm = algos[a];
        char label[160];
        snprintf(label, sizeof label, "%s [%s]", c->name, vla_algorithm_name(algos[a]));
        ok &= check_one(&d, &p, c->inplace, c->tol > 0 ? c->tol : 1e-5, label, why, sizeof why);
    }
    free_problem(&p);
    ck_assert_msg(ok, "%s", why);
}
END_TEST

/* ---- decoding: T = 1 calls with the states carried in place, against one whole run ---- */

typedef struct dec_case {
    const char *name;
    vla_mechanism mech;
    int dk, dv, paper, with_u, with_beta, with_g;
    vla_algorithm algo; /* SEQUENTIAL, or AUTO (which must pick it for T = 1) */
} dec_case;

static const dec_case dec_cases[] = {
    {"decode vla", VL, 16, 12, 0, 0, 0, 0, VLA_ALGO_SEQUENTIAL},
    {"decode vla auto", VL, 16, 12, 0, 0, 0, 0, VLA_ALGO_AUTO},
    {"decode vla paper + u (R20, normalised)", VL, 16, 16, 1, 1, 0, 0, VLA_ALGO_SEQUENTIAL},
    {"decode vla dk64 dv64 + u", VL, 64, 64, 0, 1, 0, 0, VLA_ALGO_AUTO},
    {"decode vla dk64 dv48 paper (R20, normalised)", VL, 64, 48, 1, 0, 0, 0, VLA_ALGO_SEQUENTIAL},
    {"decode delta beta g", DE, 16, 24, 0, 0, 1, 1, VLA_ALGO_AUTO},
    {"decode linear", LI, 12, 10, 0, 0, 0, 0, VLA_ALGO_AUTO},
};

START_TEST(test_decode) {
    const dec_case *c = &dec_cases[_i];
    const int B = 2, H = 3, T = g_quick ? 6 : 24, dk = c->dk, dv = c->dv;
    const int64_t t0 = 11;
    tu_rng rng;
    tu_seed(&rng, seed_base + 500 + (uint64_t)_i);
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    cu_case cc = {.mech = c->mech, .B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = t0, .with_u = c->with_u,
                  .with_beta = c->with_beta, .with_g = c->with_g, .with_states = 1};
    tu_problem p;
    make_problem(&rng, &cc, &d, &p);
    const int hS = tu_has_S(&d), hA = tu_has_A(&d), hn = tu_has_n(&d);

    /* the whole sequence, in float64 */
    double *o_ref = malloc(tu_nvo(&p) * sizeof(double)), *S_ref = malloc(tu_nS(&p) * sizeof(double));
    double *A_ref = malloc(tu_nA(&p) * sizeof(double)), *n_ref = malloc(tu_nn(&p) * sizeof(double));
    ck_assert(o_ref && S_ref && A_ref && n_ref);
    ck_assert_int_eq(ref64_forward(&d, B, T, H, dk, dv, t0, p.q, p.k, p.v, p.u, p.beta, p.g, p.S0, p.A0, p.n0,
                                   o_ref, S_ref, A_ref, n_ref),
                     0);

    /* token by token on the device, states updated in place */
    vla_buffer *Sb = hS ? tu_buf_from(g_cu, p.S0, tu_nS(&p)) : NULL;
    vla_buffer *Ab = hA ? tu_buf_from(g_cu, p.A0, tu_nA(&p)) : NULL;
    vla_buffer *nb = hn ? tu_buf_from(g_cu, p.n0, tu_nn(&p)) : NULL;
    float *o = malloc(tu_nvo(&p) * sizeof(float));
    ck_assert_ptr_nonnull(o);
    tu_poison(o, tu_nvo(&p));
    d.algorithm = c->algo;
    for (int t = 0; t < T; t++) {
        float *qs = tu_slice_time(p.q, B, T, H, dk, t, t + 1), *ks = tu_slice_time(p.k, B, T, H, dk, t, t + 1);
        float *vs = tu_slice_time(p.v, B, T, H, dv, t, t + 1);
        float *us = p.u ? tu_slice_time(p.u, B, T, H, dk, t, t + 1) : NULL;
        float *bs = p.beta ? tu_slice_time(p.beta, B, T, H, 1, t, t + 1) : NULL;
        float *gs = p.g ? tu_slice_time(p.g, B, T, H, 1, t, t + 1) : NULL;
        tu_problem one = {.B = B, .T = 1, .H = H, .dk = dk, .dv = dv, .t0 = t0 + t};
        vla_buffer *qb = tu_buf_from(g_cu, qs, tu_nqk(&one)), *kb = tu_buf_from(g_cu, ks, tu_nqk(&one));
        vla_buffer *vb = tu_buf_from(g_cu, vs, tu_nvo(&one));
        vla_buffer *ub = us ? tu_buf_from(g_cu, us, tu_nqk(&one)) : NULL;
        vla_buffer *bb = bs ? tu_buf_from(g_cu, bs, tu_nbt(&one)) : NULL;
        vla_buffer *gb = gs ? tu_buf_from(g_cu, gs, tu_nbt(&one)) : NULL;
        vla_buffer *ob = tu_buf_new(g_cu, tu_nvo(&one));
        vla_attn_args a = {.B = B, .T = 1, .H = H, .dk = dk, .dv = dv, .t0 = t0 + t, .q = qb, .k = kb, .v = vb,
                           .u = ub, .beta = bb, .g = gb, .o = ob, .S_in = Sb, .A_in = Ab, .n_in = nb,
                           .S_out = Sb, .A_out = Ab, .n_out = nb};
        vla_algorithm resolved = VLA_ALGO_AUTO;
        ck_assert_int_eq(vla_attention_resolve_algorithm(g_cu, &d, &a, &resolved), VLA_OK);
        ck_assert_int_eq(resolved, VLA_ALGO_SEQUENTIAL);
        const vla_status s = vla_attention_forward(g_cu, &d, &a);
        ck_assert_msg(s == VLA_OK, "%s step %d: %s: %s", c->name, t, vla_status_string(s), vla_last_message());
        float *os = tu_buf_download_new(ob, tu_nvo(&one));
        tu_place_time(o, os, B, T, H, dv, t, t + 1);
        free(os), free(qs), free(ks), free(vs), free(us), free(bs), free(gs);
        vla_buffer_free(qb), vla_buffer_free(kb), vla_buffer_free(vb), vla_buffer_free(ub);
        vla_buffer_free(bb), vla_buffer_free(gb), vla_buffer_free(ob);
    }
    const double eo = tu_relerr(o, o_ref, tu_nvo(&p));
    double eS = 0, eA = 0, en = 0;
    if (hS) {
        float *S = tu_buf_download_new(Sb, tu_nS(&p));
        eS = tu_relerr(S, S_ref, tu_nS(&p));
        free(S);
    }
    if (hA) {
        float *A = tu_buf_download_new(Ab, tu_nA(&p));
        eA = tu_relerr(A, A_ref, tu_nA(&p));
        free(A);
    }
    if (hn) {
        float *n = tu_buf_download_new(nb, tu_nn(&p));
        en = tu_relerr(n, n_ref, tu_nn(&p));
        free(n);
    }
    fprintf(stderr, "  %-58s o %.2e S %.2e A %.2e n %.2e (tol 1e-5)\n", c->name, eo, eS, eA, en);
    vla_buffer_free(Sb), vla_buffer_free(Ab), vla_buffer_free(nb);
    free(o), free(o_ref), free(S_ref), free(A_ref), free(n_ref);
    free_problem(&p);
    ck_assert_msg(eo < 1e-5 && eS < 1e-5 && eA < 1e-5 && en < 1e-5, "%s: o %.3e S %.3e A %.3e n %.3e", c->name, eo,
                  eS, eA, en);
}
END_TEST

/* ---- streaming: two pieces, states carried in place, vs one whole float64 run ---- */

typedef struct stream_case {
    const char *name;
    vla_mechanism mech;
    int T, cut, chunk, R, paper, with_u, with_beta, with_g, norm;
    double rho;
    int64_t t0;
    vla_algorithm first, second;
} stream_case;

#define SQ VLA_ALGO_SEQUENTIAL
#define SC VLA_ALGO_SCAN
#define CH VLA_ALGO_CHUNKED
static const stream_case stream_cases[] = {
    {"stream vla chunked|chunked R4 rho0.5 t0=3 u", VL, 61, 26, 8, 4, 0, 1, 0, 0, 0, 0.5, 3, CH, CH},
    {"stream vla two-level|two-level R4 rho0.5 t0=3", VL, 61, 27, 8, 4, 0, 0, 0, 0, 0, 0.5, 3, TL, TL},
    {"stream vla scan|sequential R4 rho0.5 t0=3 u", VL, 61, 30, 8, 4, 0, 1, 0, 0, 0, 0.5, 3, SC, SQ},
    {"stream vla sequential|two-level paper + u", VL, 70, 33, 16, 0, 1, 1, 0, 0, 0, 0.0, 9, SQ, TL},
    {"stream vla two-level|chunked (Gram path, A_in)", VL, 80, 41, 8, 0, 0, 1, 0, 0, 0, 0.0, 0, TL, TL},
    {"stream vla scan|scan elu1 normalised", VL, 50, 21, 8, 0, 0, 0, 0, 0, 1, 0.0, 0, SC, SC},
    {"stream delta chunked|sequential beta g", DE, 50, 19, 8, 0, 0, 0, 1, 1, 0, 0.0, 0, CH, SQ},
    {"stream linear sequential|chunked", LI, 50, 23, 8, 0, 0, 0, 0, 0, 0, 0.0, 0, SQ, CH},
};

START_TEST(test_stream) {
    const stream_case c = stream_cases[_i];
    const int B = 2, H = 2, dk = 12, dv = 10, T = c.T;
    tu_rng rng;
    tu_seed(&rng, seed_base + 800 + (uint64_t)_i);
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, c.mech), VLA_OK);
    if (c.paper) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    d.chunk = c.chunk;
    if (c.R) d.refresh = c.R, d.refresh_size = c.rho;
    if (c.norm) d.feature_map = VLA_FMAP_ELU1, d.normalize_output = 1;
    cu_case cc = {.mech = c.mech, .B = B, .T = T, .H = H, .dk = dk, .dv = dv, .t0 = c.t0, .with_u = c.with_u,
                  .with_beta = c.with_beta, .with_g = c.with_g, .with_states = 1};
    tu_problem p;
    make_problem(&rng, &cc, &d, &p);
    const int hS = tu_has_S(&d), hA = tu_has_A(&d), hn = tu_has_n(&d);
    double *o_ref = malloc(tu_nvo(&p) * sizeof(double)), *S_ref = malloc(tu_nS(&p) * sizeof(double));
    double *A_ref = malloc(tu_nA(&p) * sizeof(double)), *n_ref = malloc(tu_nn(&p) * sizeof(double));
    ck_assert(o_ref && S_ref && A_ref && n_ref);
    ck_assert_int_eq(ref64_forward(&d, B, T, H, dk, dv, c.t0, p.q, p.k, p.v, p.u, p.beta, p.g, p.S0, p.A0, p.n0,
                                   o_ref, S_ref, A_ref, n_ref),
                     0);
    vla_buffer *Sb = hS ? tu_buf_from(g_cu, p.S0, tu_nS(&p)) : NULL;
    vla_buffer *Ab = hA ? tu_buf_from(g_cu, p.A0, tu_nA(&p)) : NULL;
    vla_buffer *nb = hn ? tu_buf_from(g_cu, p.n0, tu_nn(&p)) : NULL;
    float *o = malloc(tu_nvo(&p) * sizeof(float));
    ck_assert_ptr_nonnull(o);
    tu_poison(o, tu_nvo(&p));
    for (int piece = 0; piece < 2; piece++) {
        const int ta = piece ? c.cut : 0, tb = piece ? T : c.cut, Tp = tb - ta;
        d.algorithm = piece ? c.second : c.first;
        float *qs = tu_slice_time(p.q, B, T, H, dk, ta, tb), *ks = tu_slice_time(p.k, B, T, H, dk, ta, tb);
        float *vs = tu_slice_time(p.v, B, T, H, dv, ta, tb);
        float *us = p.u ? tu_slice_time(p.u, B, T, H, dk, ta, tb) : NULL;
        float *bs = p.beta ? tu_slice_time(p.beta, B, T, H, 1, ta, tb) : NULL;
        float *gs = p.g ? tu_slice_time(p.g, B, T, H, 1, ta, tb) : NULL;
        tu_problem pc = {.B = B, .T = Tp, .H = H, .dk = dk, .dv = dv};
        vla_buffer *qb = tu_buf_from(g_cu, qs, tu_nqk(&pc)), *kb = tu_buf_from(g_cu, ks, tu_nqk(&pc));
        vla_buffer *vb = tu_buf_from(g_cu, vs, tu_nvo(&pc));
        vla_buffer *ub = us ? tu_buf_from(g_cu, us, tu_nqk(&pc)) : NULL;
        vla_buffer *bb = bs ? tu_buf_from(g_cu, bs, tu_nbt(&pc)) : NULL;
        vla_buffer *gb = gs ? tu_buf_from(g_cu, gs, tu_nbt(&pc)) : NULL;
        vla_buffer *ob = tu_buf_new(g_cu, tu_nvo(&pc));
        vla_attn_args a = {.B = B, .T = Tp, .H = H, .dk = dk, .dv = dv, .t0 = c.t0 + ta, .q = qb, .k = kb, .v = vb,
                           .u = ub, .beta = bb, .g = gb, .o = ob, .S_in = Sb, .A_in = Ab, .n_in = nb,
                           .S_out = Sb, .A_out = Ab, .n_out = nb};
        const vla_status s = vla_attention_forward(g_cu, &d, &a);
        ck_assert_msg(s == VLA_OK, "%s piece %d: %s: %s", c.name, piece, vla_status_string(s), vla_last_message());
        float *os = tu_buf_download_new(ob, tu_nvo(&pc));
        tu_place_time(o, os, B, T, H, dv, ta, tb);
        free(os), free(qs), free(ks), free(vs), free(us), free(bs), free(gs);
        vla_buffer_free(qb), vla_buffer_free(kb), vla_buffer_free(vb), vla_buffer_free(ub);
        vla_buffer_free(bb), vla_buffer_free(gb), vla_buffer_free(ob);
    }
    const double eo = tu_relerr(o, o_ref, tu_nvo(&p));
    double eS = 0, eA = 0, en = 0;
    if (hS) {
        float *S = tu_buf_download_new(Sb, tu_nS(&p));
        eS = tu_relerr(S, S_ref, tu_nS(&p));
        free(S);
    }
    if (hA) {
        float *A = tu_buf_download_new(Ab, tu_nA(&p));
        eA = tu_relerr(A, A_ref, tu_nA(&p));
        free(A);
    }
    if (hn) {
        float *n = tu_buf_download_new(nb, tu_nn(&p));
        en = tu_relerr(n, n_ref, tu_nn(&p));
        free(n);
    }
    fprintf(stderr, "  %-58s o %.2e S %.2e A %.2e n %.2e (tol 1e-5)\n", c.name, eo, eS, eA, en);
    vla_buffer_free(Sb), vla_buffer_free(Ab), vla_buffer_free(nb);
    free(o), free(o_ref), free(S_ref), free(A_ref), free(n_ref);
    free_problem(&p);
    ck_assert_msg(eo < 1e-5 && eS < 1e-5 && eA < 1e-5 && en < 1e-5, "%s: o %.3e S %.3e A %.3e n %.3e", c.name, eo,
                  eS, eA, en);
}
END_TEST

/* ---- long sequences (lambda0 = 0.1): 1e-5 up to T = 1024, 1e-4 beyond, vs float64 ---- */

typedef struct long_case {
    int T, H, d;
    vla_algorithm algo;
    double tol;
    int gpu_only; /* too slow for the CPU emulator */
    int mech;     /* 0: VLA; else the mechanism (DeltaNet with beta) */
    int softmax;  /* 1: softmax (whose enum value is 0) */
} long_case;

static const long_case long_cases[] = {
    {1024, 2, 32, VLA_ALGO_SEQUENTIAL, 1e-5, 1, 0, 0}, {1024, 2, 32, VLA_ALGO_CHUNKED, 1e-5, 1, 0, 0},
    {1024, 2, 32, VLA_ALGO_TWO_LEVEL, 1e-5, 1, 0, 0},  {1024, 2, 16, VLA_ALGO_SCAN, 1e-5, 1, 0, 0},
    {300, 2, 16, VLA_ALGO_TWO_LEVEL, 1e-5, 0, 0, 0},   {300, 1, 16, VLA_ALGO_SCAN, 1e-5, 0, 0, 0},
    {16384, 1, 32, VLA_ALGO_CHUNKED, 1e-4, 1, 0, 0},   {16384, 1, 32, VLA_ALGO_TWO_LEVEL, 1e-4, 1, 0, 0},
    {131072, 1, 32, VLA_ALGO_TWO_LEVEL, 1e-4, 1, 0, 0}, {131072, 1, 32, VLA_ALGO_CHUNKED, 1e-4, 1, 0, 0},
    {131072, 1, 32, VLA_ALGO_SEQUENTIAL, 1e-4, 1, 0, 0},
    /* dk = 64 on the chunk-parallel form: one chunk a block, and segments of 4 chunks (H200) */
    {1024, 16, 64, VLA_ALGO_CHUNKED, 1e-5, 1, 0, 0},   {8192, 8, 64, VLA_ALGO_CHUNKED, 1e-4, 1, 0, 0},
    /* (8,16,64) T = 2048, a target shape: two A-part segments of 16 chunks a head (H200), the
     * second's A at its start from cp_gram's parts and cp_prefix */
    {2048, 128, 64, VLA_ALGO_CHUNKED, 1e-4, 1, 0, 0},
    /* (1,4,32) T = 8192, a target shape: segments of two chunks, 64 a head (cp_prefix), the walk
     * in segments, the output split beside it (output_split_kernel) */
    {8192, 4, 32, VLA_ALGO_CHUNKED, 1e-4, 1, 0, 0},
    /* 320 heads of 4 chunks: more A-part blocks than two a multiprocessor hold, so the dk = 32
     * instance at three blocks a multiprocessor (80 registers) runs (chunkpar_apart_minb; 21
     * minutes in the emulator, where it passed at 1.2e-6) */
    {256, 320, 32, VLA_ALGO_CHUNKED, 1e-5, 1, 0, 0},
    /* DeltaNet and linear on sfac_kernel: up to two blocks a multiprocessor (T = 1024: 256 chunks in
     * all) and as many as the shared memory holds (T = 4096 at dk = 64, 2048 at dk = 32) */
    {1024, 16, 64, VLA_ALGO_CHUNKED, 1e-5, 1, DE, 0}, {4096, 16, 64, VLA_ALGO_CHUNKED, 1e-4, 1, DE, 0},
    {2048, 16, 32, VLA_ALGO_CHUNKED, 1e-4, 1, DE, 0}, {2048, 16, 32, VLA_ALGO_CHUNKED, 1e-4, 1, LI, 0},
    /* softmax's tensor-core form on few query tiles, so their keys go in parts: 4 parts (T = 1024,
     * H = 4), 5 (T = 2048, H = 4; T = 4096, H = 2) */
    {1024, 4, 64, VLA_ALGO_FUSED, 1e-5, 1, 0, 1},  {2048, 4, 32, VLA_ALGO_FUSED, 1e-4, 1, 0, 1},
    {4096, 2, 32, VLA_ALGO_FUSED, 1e-4, 1, 0, 1},
};

START_TEST(test_long) {
    const long_case *c = &long_cases[_i];
    if ((c->gpu_only && g_emulated) || g_quick) return;
    tu_rng rng;
    tu_seed(&rng, seed_base + 900 + (uint64_t)_i);
    vla_attn_desc d;
    const vla_mechanism mech = c->softmax ? SM : c->mech ? (vla_mechanism)c->mech : VL;
    ck_assert_int_eq(vla_attn_desc_init(&d, mech), VLA_OK);
    d.algorithm = c->algo;
    cu_case cc = {.mech = mech, .B = 1, .T = c->T, .H = c->H, .dk = c->d, .dv = c->d, .with_beta = mech == DE};
    tu_problem p;
    make_problem(&rng, &cc, &d, &p);
    tu_result r;
    tu_run(g_cu, &d, &p, 0, &r);
    char label[96], why[1024] = "";
    snprintf(label, sizeof label, "long %s T%d H%d d%d [%s]", vla_mechanism_name(mech), c->T, c->H, c->d,
             vla_algorithm_name(c->algo));
    const int ok = tu_check_vs_ref(&d, &p, &r, c->tol, label, NULL, why, sizeof why);
    tu_result_free(&r);
    free_problem(&p);
    ck_assert_msg(ok, "%s", why);
}
END_TEST

/* ---- softmax with non-finite inputs: the same entries non-finite as on the CPU backend, the
 * others within 1e-5 of it. A NaN in q (token 40, head 0) makes that row NaN; a NaN in k (token
 * 200, head 0) every later row of head 0; a NaN in v (token 150, head 1, column 5) column 5 from
 * token 150 on, and never an earlier row (which a 0 x NaN in a product would). _i = 0: the
 * tensor-core form (dk = dv = 64 on sm_80+, where token 150 lies in a diagonal key tile of the
 * second query block); 1: the generic form (dk = 80); 2: the tensor-core form with T = 600, whose
 * query tiles' keys go in two parts. ---- */
START_TEST(test_softmax_nonfinite) {
    cu_case c = {.mech = SM, .B = 1, .T = _i == 2 ? 600 : 300, .H = 2, .dk = _i == 1 ? 80 : 64, .dv = 64};
    tu_rng rng;
    tu_seed(&rng, seed_base + 1700 + (uint64_t)_i);
    vla_attn_desc d;
    make_desc(&c, &d);
    tu_problem p;
    make_problem(&rng, &c, &d, &p);
    const int H = c.H, dk = c.dk, dv = c.dv;
    ((float *)p.q)[((size_t)40 * H + 0) * dk + 3] = NAN;
    ((float *)p.k)[((size_t)200 * H + 0) * dk + 7] = NAN;
    ((float *)p.v)[((size_t)150 * H + 1) * dv + 5] = NAN;
    tu_result rg, rc;
    ck_assert_int_eq(tu_run(g_cu, &d, &p, 0, &rg), VLA_OK);
    ck_assert_int_eq(tu_run(g_cpu, &d, &p, 0, &rc), VLA_OK);
    const size_t n = tu_nvo(&p);
    size_t differ = 0, nonfinite = 0, early = 0;
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < n; e++) {
        const int fg = isfinite(rg.o[e]) != 0, fc = isfinite(rc.o[e]) != 0;
        const size_t t = e / ((size_t)H * dv), h = e / dv % H;
        if (fg != fc) differ++;
        if (!fg) nonfinite++;
        if (!fg && h == 1 && t < 150) early++;
        if (fg && fc) {
            num += ((double)rg.o[e] - rc.o[e]) * ((double)rg.o[e] - rc.o[e]);
            den += (double)rc.o[e] * rc.o[e];
        }
    }
    const double err = sqrt(num / den);
    fprintf(stderr, "  softmax non-finite T%d dk%d: %zu non-finite, %zu differ from cpu, %zu early, finite vs cpu %.2e\n",
            c.T, dk, nonfinite, differ, early, err);
    /* head 0: row 40 (64) and rows 200.. ((T - 200) x 64); head 1: column 5 of rows 150.. */
    ck_assert_uint_eq(nonfinite, 64 + (size_t)(c.T - 200) * 64 + (size_t)(c.T - 150));
    ck_assert_uint_eq(differ, 0);
    ck_assert_uint_eq(early, 0);
    ck_assert_msg(err < 1e-5, "finite entries vs cpu: %.3e", err);
    tu_result_free(&rg);
    tu_result_free(&rc);
    free_problem(&p);
}
END_TEST

/* ---- two-level: a head whose A_in is not symmetric positive definite leaves the Gram path ----
 * The Gram path needs A_in^{-1} of a symmetric positive definite A_in; a head whose A_in is not
 * symmetric is flagged and its A part carried chunk to chunk, as the CPU's two-level form
 * always does. The other heads stay on the Gram path. Against the CPU backend's two-level. */
START_TEST(test_carry_path) {
    cu_case c = {.mech = VL, .B = 1, .T = 70, .H = 3, .dk = 12, .dv = 10, .chunk = 8, .seg = 2, .with_states = 1};
    tu_rng rng;
    tu_seed(&rng, seed_base + 1500);
    vla_attn_desc d;
    make_desc(&c, &d);
    /* _i = 0: two-level; 1: chunked, whose chunk-parallel form hands such a head to the engine */
    d.algorithm = _i == 0 ? VLA_ALGO_TWO_LEVEL : VLA_ALGO_CHUNKED;
    const char *alg = _i == 0 ? "two-level" : "chunked";
    tu_problem p;
    make_problem(&rng, &c, &d, &p);
    float *A0 = (float *)p.A0 + (size_t)1 * c.dk * c.dk; /* head 1 */
    A0[0 * c.dk + 1] *= 1.01f;                           /* A[0][1] != A[1][0] */
    tu_result rg, rc;
    tu_run(g_cu, &d, &p, 0, &rg);
    tu_run(g_cpu, &d, &p, 0, &rc);
    ck_assert_int_eq(rg.status, VLA_OK);
    ck_assert_int_eq(rc.status, VLA_OK);
    const double eo = tu_relerr_ff(rg.o, rc.o, tu_nvo(&p)), eS = tu_relerr_ff(rg.S, rc.S, tu_nS(&p));
    const double eA = tu_relerr_ff(rg.A, rc.A, tu_nA(&p));
    fprintf(stderr, "  %-20s %-37s vs cpu: o %.2e S %.2e A %.2e\n", alg, "one head's A_in not symmetric", eo, eS, eA);
    ck_assert_msg(rg.o_unwritten == 0 && rg.S_unwritten == 0 && rg.A_unwritten == 0, "outputs not written");
    ck_assert_msg(eo < 1e-5 && eS < 1e-5 && eA < 1e-5, "%s carry path vs cpu: o %.3e S %.3e A %.3e", alg, eo, eS, eA);
    tu_result_free(&rg);
    tu_result_free(&rc);
    free_problem(&p);
}
END_TEST

/* ---- the graph cache: repeated calls replay a captured graph (backends/cuda/README.md) ----
 * K keys (T differs; the same buffers, sized for the longest), three rounds: round 0 runs each
 * key directly (its first call), round 1 captures and replays it on new data in the same buffers,
 * round 2 replays it on round 0's data again. Round 1 against ref64 (1e-5 relative: o, S, A),
 * round 2 bitwise against round 0 (a replay runs the same kernels on the same data). Then more
 * keys than the cache holds (every earlier key evicted) and key 0 twice more: bitwise again. In
 * the emulator (no graphs) and with VLA_CUDA_GRAPHS=0 the same calls run directly. */
START_TEST(test_graph_replay) {
    const vla_mechanism mech = _i == 0 ? VL : _i == 1 ? DE : VL;
    const vla_algorithm algo = _i == 2 ? VLA_ALGO_TWO_LEVEL : VLA_ALGO_CHUNKED;
    const int B = 1, H = 2, dk = 16, dv = 12, Tmax = 120, K = 6, KX = 20;
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, mech), VLA_OK);
    d.algorithm = algo;
    d.chunk = 16;
    tu_problem pm = {.B = B, .T = Tmax, .H = H, .dk = dk, .dv = dv};
    const size_t nqk = tu_nqk(&pm), nvo = tu_nvo(&pm), nS = tu_nS(&pm), nA = tu_nA(&pm);
    const int hA = tu_has_A(&d);
    tu_rng rng;
    tu_seed(&rng, seed_base + 1700 + (uint64_t)_i);
    float *x[2][3]; /* two data sets of q, k, v */
    for (int s2 = 0; s2 < 2; s2++)
        for (int j = 0; j < 3; j++) x[s2][j] = tu_randn_new(&rng, j < 2 ? nqk : nvo);
    vla_buffer *q = tu_buf_from(g_cu, x[0][0], nqk), *k = tu_buf_from(g_cu, x[0][1], nqk);
    vla_buffer *v = tu_buf_from(g_cu, x[0][2], nvo), *o = tu_buf_new(g_cu, nvo), *S = tu_buf_new(g_cu, nS);
    vla_buffer *A = hA ? tu_buf_new(g_cu, nA) : NULL;
    float *first[6][3]; /* round 0's o, S, A of each key */
    double *o_ref = malloc(nvo * sizeof(double)), *S_ref = malloc(nS * sizeof(double)), *A_ref = malloc(nA * sizeof(double));
    ck_assert(o_ref && S_ref && A_ref);
    const char *what = _i == 0 ? "vla chunked" : _i == 1 ? "delta chunked" : "vla two-level";
    for (int round = 0; round < 3; round++) {
        const int set = round == 1;
        tu_buf_upload(q, x[set][0], nqk), tu_buf_upload(k, x[set][1], nqk), tu_buf_upload(v, x[set][2], nvo);
        double worst = 0.0;
        int same = 1;
        for (int key = 0; key < K; key++) {
            const int T = Tmax - 7 * key; /* the same buffers, a prefix of them */
            tu_problem p = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv};
            vla_attn_args a = {.B = B, .T = T, .H = H, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .o = o, .S_out = S, .A_out = A};
            tu_buf_poison(o), tu_buf_poison(S);
            if (A) tu_buf_poison(A);
            ck_assert_int_eq(vla_attention_forward(g_cu, &d, &a), VLA_OK);
            float *got[3] = {tu_buf_download_new(o, tu_nvo(&p)), tu_buf_download_new(S, nS), A ? tu_buf_download_new(A, nA) : NULL};
            if (round == 0) {
                for (int j = 0; j < 3; j++) first[key][j] = got[j];
                continue;
            }
            if (round == 1) {
                /* B = 1: the first T tokens of the buffers are the T-token problem's inputs */
                ck_assert_int_eq(ref64_forward(&d, B, T, H, dk, dv, 0, x[1][0], x[1][1], x[1][2], NULL, NULL, NULL, NULL,
                                               NULL, NULL, o_ref, S_ref, A ? A_ref : NULL, NULL),
                                 0);
                worst = fmax(worst, tu_relerr(got[0], o_ref, tu_nvo(&p)));
                worst = fmax(worst, tu_relerr(got[1], S_ref, nS));
                if (A) worst = fmax(worst, tu_relerr(got[2], A_ref, nA));
            } else {
                same &= !memcmp(got[0], first[key][0], tu_nvo(&p) * sizeof(float)) &&
                        !memcmp(got[1], first[key][1], nS * sizeof(float)) &&
                        (!A || !memcmp(got[2], first[key][2], nA * sizeof(float)));
            }
            for (int j = 0; j < 3; j++) free(got[j]);
        }
        if (round == 1) {
            fprintf(stderr, "  %-14s graph replay, new data in the same buffers: worst rel. error %.2e vs ref64\n", what, worst);
            ck_assert_msg(worst < 1e-5, "%s: replay on new data: rel. error %.3e", what, worst);
        }
        if (round == 2) {
            fprintf(stderr, "  %-14s graph replay, round 0's data again: %s\n", what, same ? "bitwise the same" : "DIFFERENT");
            ck_assert_msg(same, "%s: a replay differs from the direct call on the same data", what);
        }
    }
    /* round 0's data is in the buffers: KX other keys (other chunk lengths), then key 0 twice */
    for (int key = 0; key < KX; key++) {
        vla_attn_desc d2 = d;
        d2.chunk = 2 + key;
        vla_attn_args a = {.B = B, .T = Tmax, .H = H, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .o = o, .S_out = S, .A_out = A};
        ck_assert_int_eq(vla_attention_forward(g_cu, &d2, &a), VLA_OK);
    }
    for (int rep = 0; rep < 2; rep++) {
        vla_attn_args a = {.B = B, .T = Tmax, .H = H, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .o = o, .S_out = S, .A_out = A};
        tu_buf_poison(o);
        ck_assert_int_eq(vla_attention_forward(g_cu, &d, &a), VLA_OK);
        float *got = tu_buf_download_new(o, nvo);
        ck_assert_msg(!memcmp(got, first[0][0], nvo * sizeof(float)), "%s: key 0 after evictions (call %d) differs", what, rep);
        free(got);
    }
    for (int key = 0; key < K; key++)
        for (int j = 0; j < 3; j++) free(first[key][j]);
    for (int s2 = 0; s2 < 2; s2++)
        for (int j = 0; j < 3; j++) free(x[s2][j]);
    free(o_ref), free(S_ref), free(A_ref);
    vla_buffer_free(q), vla_buffer_free(k), vla_buffer_free(v), vla_buffer_free(o), vla_buffer_free(S);
    if (A) vla_buffer_free(A);
}
END_TEST

/* ---- statuses specific to this backend ---- */

START_TEST(test_open_errors) {
    static const char *bad[] = {"cuda:99", "cuda:x", "cuda:-1", "cuda:0x", "cuda:1234567890"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vla_backend *b = (vla_backend *)1;
        const vla_status s = vla_backend_open(bad[i], &b);
        ck_assert_msg(s == VLA_ERR_UNKNOWN_BACKEND, "%s: %s", bad[i], vla_status_string(s));
        ck_assert_ptr_null(b);
        ck_assert_msg(strlen(vla_last_message()) > 0, "%s: no message", bad[i]);
        fprintf(stderr, "  %-12s -> %s: %s\n", bad[i], vla_status_string(s), vla_last_message());
    }
    ck_assert_str_eq(vla_backend_name(g_cu), "cuda:0");
    vla_device_info info[16];
    int n = 0, found = 0;
    ck_assert_int_eq(vla_list_devices(info, 16, &n), VLA_OK);
    for (int i = 0; i < n && i < 16; i++)
        if (strcmp(info[i].name, "cuda:0") == 0) {
            found = 1;
            ck_assert_int_eq(info[i].is_gpu, 1);
            ck_assert(strlen(info[i].description) > 0);
            fprintf(stderr, "  listed: %s  %s\n", info[i].name, info[i].description);
        }
    ck_assert(found);
    ck_assert_int_eq(vla_backend_synchronize(g_cu), VLA_OK);
}
END_TEST

START_TEST(test_out_of_memory) {
    /* Failing allocations on purpose: not under compute-sanitizer (quick runs), which reports
     * every failing CUDA call. */
    if (g_quick) return;
    /* A buffer no device has. */
    vla_buffer *buf = NULL;
    vla_status s = vla_buffer_alloc(g_cu, (size_t)1 << 52, &buf);
    ck_assert_msg(s == VLA_ERR_OUT_OF_MEMORY, "huge buffer: %s", vla_status_string(s));
    ck_assert_ptr_null(buf);
    fprintf(stderr, "  huge buffer -> %s: %s\n", vla_status_string(s), vla_last_message());

    /* The scan's per-token maps (T dk (dk + dv) floats per head) past the device's memory:
     * VLA_ERR_OUT_OF_MEMORY before anything is written. */
    const int T = g_emulated ? 4096 : 262144, dk = 256, dv = 256;
    tu_problem p = {.B = 1, .T = T, .H = 1, .dk = dk, .dv = dv};
    tu_rng rng;
    tu_seed(&rng, seed_base + 1234);
    float *x = tu_randn_new(&rng, tu_nqk(&p));
    vla_buffer *q = tu_buf_from(g_cu, x, tu_nqk(&p)), *o = tu_buf_new(g_cu, tu_nvo(&p));
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, VL), VLA_OK);
    d.algorithm = VLA_ALGO_SCAN;
    vla_attn_args a = {.B = 1, .T = T, .H = 1, .dk = dk, .dv = dv, .q = q, .k = q, .v = q, .o = o};
    s = vla_attention_forward(g_cu, &d, &a);
    fprintf(stderr, "  scan T=%d d=%d -> %s: %s\n", T, dk, vla_status_string(s), vla_backend_message(g_cu));
    ck_assert_msg(s == VLA_ERR_OUT_OF_MEMORY, "scan past memory: %s", vla_status_string(s));
    float *od = tu_buf_download_new(o, tu_nvo(&p));
    ck_assert_msg(tu_count_poison(od, tu_nvo(&p)) == tu_nvo(&p), "o was written by a call that failed");
    free(od), free(x);
    vla_buffer_free(q), vla_buffer_free(o);

    /* The backend still works. */
    cu_case c = {.mech = VL, .B = 1, .T = 40, .H = 2, .dk = 8, .dv = 8};
    vla_attn_desc d2;
    make_desc(&c, &d2);
    tu_problem p2;
    make_problem(&rng, &c, &d2, &p2);
    char why[512] = "";
    const int ok = check_one(&d2, &p2, 0, 1e-5, "vla after a failed call", why, sizeof why);
    free_problem(&p2);
    ck_assert_msg(ok, "%s", why);
}
END_TEST

/* ---- the backward op (VLA-MATH 5) against the CPU backend's ----
 * Every gradient the forward has, on random inputs with random upstream gradients (dO and, with
 * `up`, dS_end, dA_end, dn_end), against the CPU backend's sequential backward (double inside, itself
 * checked against finite differences by test_grad_cpu) and, where the shapes are small, ref64's:
 * 1e-4 norm-wise per tensor (VLA-MATH 5's target for float32 gradients); every requested element
 * written (outputs poisoned first). A gradient that vanishes in exact arithmetic, or nearly does by
 * cancellation, is measured on the scale of the call's gradients instead of its own: the error norm
 * over max(||ref||, f G sqrt(n)), G the largest RMS of the call's reference gradients, f = 1e-6, or
 * 1e-3 for the tensors a case lists in `cancel` (linear attention's dq at dk = 1 is O(eps): q~ cancels
 * from S_t q~ / (q~ n_t + eps) but for eps; VLA's dS_0 at dk = 1 is 0, a_t = +-k^_t making
 * 1 - a_t k^_t vanish, and float32 leaves rounding there). The recurrent backward's checkpoint interval is the descriptor's
 * chunk: cases with T not a multiple of it, refresh points inside chunks and on their last token, and
 * t0 > 0 with states in. */

typedef struct bw_case {
    const char *name;
    vla_mechanism mech;
    int B, T, H, dk, dv;
    int64_t t0;
    int chunk, paper;
    double lambda0;
    int R;
    double rho;
    int elu1, norm;
    double scale, su;
    int with_u, with_beta, with_g, g_zeros, states, up;
    int no_fmap;        /* feature map none (delta-paper's default is elu1) */
    int inplace;        /* delta-paper forward: S_out is the S_in buffer */
    unsigned cancel;    /* (1 << BX_*): gradients that vanish by cancellation (above) */
    vla_algorithm algo; /* AUTO when 0 */
    int big;            /* not in quick runs; smaller T in the emulator */
} bw_case;

static const bw_case bw_cases[] = {
    /* ---- softmax ---- */
    {.name = "bwd softmax T=1", .mech = SM, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "bwd softmax B2 T37 H3 dk16 dv24", .mech = SM, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24},
    {.name = "bwd softmax T150 H2 dk64 dv48 (tiles)", .mech = SM, .B = 1, .T = 150, .H = 2, .dk = 64, .dv = 48},
    {.name = "bwd softmax dk1 dv1", .mech = SM, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1},
    {.name = "bwd softmax dk5 dv3 scale 0.5", .mech = SM, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .scale = 0.5},
    {.name = "bwd softmax dk256 dv256 T70", .mech = SM, .B = 1, .T = 70, .H = 1, .dk = 256, .dv = 256},
    /* ---- linear ---- */
    {.name = "bwd linear T=1 states", .mech = LI, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .states = 1},
    {.name = "bwd linear B2 T37 H3 dk16 dv24 C16 states up", .mech = LI, .B = 2, .T = 37, .H = 3, .dk = 16,
     .dv = 24, .chunk = 16, .states = 1, .up = 1},
    {.name = "bwd linear dk1 dv1 C4 states up", .mech = LI, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4,
     .states = 1, .up = 1, .cancel = 1u << 0 /* dq */},
    {.name = "bwd linear C50 > T", .mech = LI, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50},
    {.name = "bwd linear dk256 dv200 T40 C16 states up", .mech = LI, .B = 1, .T = 40, .H = 1, .dk = 256, .dv = 200,
     .chunk = 16, .states = 1, .up = 1},
    /* ---- delta ---- */
    {.name = "bwd delta T=1 beta g", .mech = DE, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .with_beta = 1,
     .with_g = 1},
    {.name = "bwd delta B2 T37 H3 dk16 dv24 C16 beta g states up", .mech = DE, .B = 2, .T = 37, .H = 3, .dk = 16,
     .dv = 24, .chunk = 16, .with_beta = 1, .with_g = 1, .states = 1, .up = 1},
    {.name = "bwd delta no beta no g C16", .mech = DE, .B = 1, .T = 37, .H = 2, .dk = 16, .dv = 16, .chunk = 16},
    {.name = "bwd delta g with exact zeros C16", .mech = DE, .B = 1, .T = 45, .H = 2, .dk = 12, .dv = 8, .chunk = 16,
     .with_beta = 1, .with_g = 1, .g_zeros = 1, .up = 1},
    {.name = "bwd delta elu1 states C7", .mech = DE, .B = 2, .T = 37, .H = 2, .dk = 12, .dv = 10, .chunk = 7,
     .with_beta = 1, .with_g = 1, .states = 1, .elu1 = 1, .up = 1},
    {.name = "bwd delta dk1 dv1 C4", .mech = DE, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4,
     .with_beta = 1, .with_g = 1, .states = 1, .up = 1},
    {.name = "bwd delta dk200 dv256 T40 C16 beta g", .mech = DE, .B = 1, .T = 40, .H = 1, .dk = 200, .dv = 256,
     .chunk = 16, .with_beta = 1, .with_g = 1, .states = 1, .up = 1},
    /* ---- vla ---- */
    {.name = "bwd vla T=1", .mech = VL, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8},
    {.name = "bwd vla B2 T37 H3 dk16 dv24 C16", .mech = VL, .B = 2, .T = 37, .H = 3, .dk = 16, .dv = 24,
     .chunk = 16},
    {.name = "bwd vla dk5 dv3 C8 states up", .mech = VL, .B = 2, .T = 20, .H = 1, .dk = 5, .dv = 3, .chunk = 8,
     .states = 1, .up = 1},
    {.name = "bwd vla dk1 dv1 C4 states up", .mech = VL, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4,
     .states = 1, .up = 1, .cancel = 1u << 6 /* dS_0 */},
    {.name = "bwd vla dk1 dv7 u states", .mech = VL, .B = 1, .T = 9, .H = 1, .dk = 1, .dv = 7, .chunk = 4,
     .with_u = 1, .states = 1, .up = 1, .cancel = 1u << 6 /* dS_0 */},
    {.name = "bwd vla u s_u 0.5 C16 up", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24, .chunk = 16,
     .with_u = 1, .su = 0.5, .up = 1},
    {.name = "bwd vla s_u 0.7 (u = s_u k^) states up", .mech = VL, .B = 1, .T = 30, .H = 2, .dk = 12, .dv = 8,
     .chunk = 8, .su = 0.7, .states = 1, .up = 1},
    /* refresh points inside chunks (R = 4, C = 16) and on a chunk's last token (R = C = 8) */
    {.name = "bwd vla R4 rho0.5 t0=3 u C16 states up", .mech = VL, .B = 2, .T = 45, .H = 2, .dk = 8, .dv = 12,
     .chunk = 16, .t0 = 3, .R = 4, .rho = 0.5, .with_u = 1, .states = 1, .up = 1},
    {.name = "bwd vla R8 rho0.2 C8 (refresh at chunk ends) up", .mech = VL, .B = 1, .T = 43, .H = 2, .dk = 8,
     .dv = 6, .chunk = 8, .R = 8, .rho = 0.2, .up = 1},
    {.name = "bwd vla R5 rho0.5 t0=5000000003 states", .mech = VL, .B = 1, .T = 45, .H = 2, .dk = 8, .dv = 12,
     .chunk = 16, .t0 = 5000000003LL, .R = 5, .rho = 0.5, .states = 1, .up = 1},
    {.name = "bwd vla elu1 normalised C16 states up", .mech = VL, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24,
     .chunk = 16, .elu1 = 1, .norm = 1, .states = 1, .up = 1},
    {.name = "bwd vla paper + u + states t0=7 up", .mech = VL, .B = 1, .T = 61, .H = 2, .dk = 16, .dv = 12,
     .chunk = 16, .paper = 1, .with_u = 1, .states = 1, .t0 = 7, .up = 1},
    {.name = "bwd vla paper, no u, chunked", .mech = VL, .B = 1, .T = 50, .H = 1, .dk = 16, .dv = 16, .chunk = 16,
     .paper = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd vla lambda0 1 C16", .mech = VL, .B = 1, .T = 40, .H = 2, .dk = 12, .dv = 12, .chunk = 16,
     .lambda0 = 1.0, .up = 1},
    {.name = "bwd vla C1 states up", .mech = VL, .B = 1, .T = 21, .H = 2, .dk = 8, .dv = 12, .chunk = 1, .states = 1,
     .up = 1},
    {.name = "bwd vla C50 > T sequential", .mech = VL, .B = 1, .T = 37, .H = 2, .dk = 8, .dv = 12, .chunk = 50,
     .algo = VLA_ALGO_SEQUENTIAL},
    {.name = "bwd vla T150 dk64 dv64 u", .mech = VL, .B = 1, .T = 150, .H = 2, .dk = 64, .dv = 64, .with_u = 1,
     .up = 1},
    {.name = "bwd vla dk256 dv16 T20 C8 states up", .mech = VL, .B = 1, .T = 20, .H = 1, .dk = 256, .dv = 16,
     .chunk = 8, .states = 1, .up = 1},
    {.name = "bwd vla dk8 dv256 T30 C8 paper + u", .mech = VL, .B = 1, .T = 30, .H = 1, .dk = 8, .dv = 256,
     .chunk = 8, .paper = 1, .with_u = 1, .up = 1},
    {.name = "bwd vla dk256 dv256 T12 C5 u states up", .mech = VL, .B = 1, .T = 12, .H = 1, .dk = 256, .dv = 256,
     .chunk = 5, .with_u = 1, .states = 1, .up = 1},
    /* long pieces: VLA-MATH 5's 1e-4 for float32 at lambda0 = 0.1, T up to 4096 (1024 in the emulator) */
    {.name = "bwd long vla T4096 dk64 dv64 C64 up", .mech = VL, .B = 1, .T = 4096, .H = 1, .dk = 64, .dv = 64,
     .chunk = 64, .up = 1, .big = 1},
    {.name = "bwd long vla paper T4096 dk32 dv32 u states up", .mech = VL, .B = 1, .T = 4096, .H = 2, .dk = 32,
     .dv = 32, .chunk = 64, .paper = 1, .with_u = 1, .states = 1, .up = 1, .big = 1},
    {.name = "bwd long delta T4096 dk64 dv64 beta g up", .mech = DE, .B = 1, .T = 4096, .H = 1, .dk = 64, .dv = 64,
     .chunk = 64, .with_beta = 1, .with_g = 1, .up = 1, .big = 1},
    {.name = "bwd long linear T4096 dk64 dv64 up", .mech = LI, .B = 1, .T = 4096, .H = 1, .dk = 64, .dv = 64,
     .chunk = 64, .states = 1, .up = 1, .big = 1},
    {.name = "bwd long softmax T2048 dk64 dv64", .mech = SM, .B = 1, .T = 2048, .H = 1, .dk = 64, .dv = 64,
     .big = 1},
    /* ---- the chunk form (vla_grad_chunk.cu; vla's A part in vla_grad_chunk_apart.cu), forced: on CUDA
     * AUTO takes it wherever the forward's AUTO is chunked (T > 16), and test_backward runs every AUTO
     * case above also as the recurrent kernel; these add shapes only the chunk form has to handle.
     * Chunks of C = min(chunk, 64, T) (halved to fit shared memory); T not a multiple of C, one token,
     * dk != dv, more than one walk tile of 32 value columns, t0 > 0 with S_in, g with exact zeros. bw_check's metric, as above: 1e-4 norm-wise per
     * tensor against the CPU backend's sequential backward and ref64. Then the recurrent kernel asked
     * for by name (sequential). Listed last: the seeds of the cases above stay theirs. */
    {.name = "bwd chunk linear T=1 states up", .mech = LI, .B = 1, .T = 1, .H = 2, .dk = 8, .dv = 5, .states = 1,
     .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk delta T=1 beta g states up", .mech = DE, .B = 1, .T = 1, .H = 2, .dk = 6, .dv = 9,
     .with_beta = 1, .with_g = 1, .states = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk linear t0=5 T45 C16 dk12 dv20 states up", .mech = LI, .B = 2, .T = 45, .H = 2, .dk = 12,
     .dv = 20, .chunk = 16, .t0 = 5, .states = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk linear elu1 T100 dk24 dv40 (C64)", .mech = LI, .B = 1, .T = 100, .H = 2, .dk = 24, .dv = 40,
     .elu1 = 1, .states = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk delta t0=9 T45 C16 dk12 dv20 beta g0 states up", .mech = DE, .B = 2, .T = 45, .H = 2,
     .dk = 12, .dv = 20, .chunk = 16, .t0 = 9, .with_beta = 1, .with_g = 1, .g_zeros = 1, .states = 1, .up = 1,
     .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk delta T70 dk8 dv40 (C64) beta g up", .mech = DE, .B = 1, .T = 70, .H = 1, .dk = 8, .dv = 40,
     .with_beta = 1, .with_g = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk delta g only T29 C8 dk16 dv16 g0", .mech = DE, .B = 1, .T = 29, .H = 2, .dk = 16, .dv = 16,
     .chunk = 8, .with_g = 1, .g_zeros = 1, .states = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk delta beta only T100 C32 dk32 dv16 states up", .mech = DE, .B = 1, .T = 100, .H = 1,
     .dk = 32, .dv = 16, .chunk = 32, .with_beta = 1, .states = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk vla T=1 u states up", .mech = VL, .B = 1, .T = 1, .H = 2, .dk = 6, .dv = 9, .with_u = 1,
     .states = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk vla elu1 normalised R4 t0=3 T45 C16 dk12 dv20 states up", .mech = VL, .B = 2, .T = 45,
     .H = 2, .dk = 12, .dv = 20, .chunk = 16, .t0 = 3, .R = 4, .rho = 0.5, .elu1 = 1, .norm = 1, .states = 1,
     .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk vla dk40 dv8 T70 (C64) u up", .mech = VL, .B = 1, .T = 70, .H = 1, .dk = 40, .dv = 8,
     .with_u = 1, .up = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk long vla T4096 dk64 dv64 C64 u up", .mech = VL, .B = 1, .T = 4096, .H = 1, .dk = 64,
     .dv = 64, .chunk = 64, .with_u = 1, .up = 1, .big = 1, .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd chunk long delta T4096 dk32 dv32 beta g states up", .mech = DE, .B = 1, .T = 4096, .H = 2,
     .dk = 32, .dv = 32, .chunk = 64, .with_beta = 1, .with_g = 1, .states = 1, .up = 1, .big = 1,
     .algo = VLA_ALGO_CHUNKED},
    {.name = "bwd long linear T4096 dk64 dv64 states up sequential", .mech = LI, .B = 1, .T = 4096, .H = 1,
     .dk = 64, .dv = 64, .chunk = 64, .states = 1, .up = 1, .big = 1, .algo = VLA_ALGO_SEQUENTIAL},
    {.name = "bwd linear T37 C16 states up sequential", .mech = LI, .B = 2, .T = 37, .H = 2, .dk = 16, .dv = 24,
     .chunk = 16, .states = 1, .up = 1, .algo = VLA_ALGO_SEQUENTIAL},
    {.name = "bwd delta T45 C16 beta g0 states up sequential", .mech = DE, .B = 1, .T = 45, .H = 2, .dk = 12,
     .dv = 8, .chunk = 16, .with_beta = 1, .with_g = 1, .g_zeros = 1, .states = 1, .up = 1,
     .algo = VLA_ALGO_SEQUENTIAL},
    /* softmax widths that pad to 64 x 32 and 32 x 64 (the mma kernels' DK, DV), two tiles and a part */
    {.name = "bwd softmax T100 H2 dk40 dv20", .mech = SM, .B = 1, .T = 100, .H = 2, .dk = 40, .dv = 20},
    {.name = "bwd softmax B2 T70 dk24 dv33", .mech = SM, .B = 2, .T = 70, .H = 1, .dk = 24, .dv = 33},
};
#define N_BW ((int)(sizeof bw_cases / sizeof bw_cases[0]))

enum { BX_Q, BX_K, BX_V, BX_U, BX_BETA, BX_G, BX_S0, BX_A0, BX_N0, BX_N };
enum { BU_DO, BU_DS, BU_DA, BU_DN, BU_N };
static const char *const bw_names[BX_N] = {"dq", "dk", "dv", "du", "dbeta", "dg", "dS_0", "dA_0", "dn_0"};

typedef struct bw_problem {
    vla_attn_desc d;
    int B, T, H, dk, dv;
    int64_t t0;
    size_t n[BX_N], nup[BU_N];
    float *x[BX_N], *up[BU_N]; /* NULL where not used */
} bw_problem;

/* Away from elu's kink at 0 (its two sides differ in float32 rounding only, but a gradient there is
 * a convention). */
static void bw_away_from_zero(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0.05f) x[i] = x[i] < 0 ? -0.05f - x[i] : 0.05f + x[i];
}

static void bw_make(const bw_case *c, int T, uint64_t seed, bw_problem *p) {
    memset(p, 0, sizeof *p);
    ck_assert_int_eq(vla_attn_desc_init(&p->d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(&p->d, "paper"), VLA_OK);
    if (c->chunk) p->d.chunk = c->chunk;
    if (c->lambda0 > 0) p->d.lambda0 = c->lambda0;
    if (c->R) p->d.refresh = c->R, p->d.refresh_size = c->rho;
    if (c->elu1) p->d.feature_map = VLA_FMAP_ELU1;
    if (c->no_fmap) p->d.feature_map = VLA_FMAP_NONE;
    if (c->norm) p->d.normalize_output = 1;
    if (c->scale > 0) p->d.scale = c->scale;
    if (c->su > 0) p->d.u_scale = c->su;
    p->d.algorithm = c->algo;
    p->B = c->B, p->T = T, p->H = c->H, p->dk = c->dk, p->dv = c->dv, p->t0 = c->t0;
    const size_t BTH = (size_t)c->B * T * c->H, BH = (size_t)c->B * c->H;
    const size_t nqk = BTH * c->dk, nvo = BTH * c->dv;
    const size_t ng = c->mech == VLA_MECH_DELTA_PAPER ? nvo : BTH; /* delta-paper's gate is per value row */
    const size_t ns[BX_N] = {nqk, nqk, nvo, nqk, BTH, ng, BH * c->dk * c->dv, BH * c->dk * c->dk, BH * c->dk};
    memcpy(p->n, ns, sizeof ns);
    const size_t nu[BU_N] = {nvo, ns[BX_S0], ns[BX_A0], ns[BX_N0]};
    memcpy(p->nup, nu, sizeof nu);
    tu_rng r;
    tu_seed(&r, seed);
    p->x[BX_Q] = tu_randn_new(&r, nqk), p->x[BX_K] = tu_randn_new(&r, nqk), p->x[BX_V] = tu_randn_new(&r, nvo);
    bw_away_from_zero(p->x[BX_Q], nqk), bw_away_from_zero(p->x[BX_K], nqk);
    if (c->with_u) p->x[BX_U] = tu_randn_new(&r, nqk);
    if (c->with_beta) {
        p->x[BX_BETA] = malloc(BTH * sizeof(float));
        tu_randu(&r, p->x[BX_BETA], BTH, 0.2f, 1.0f);
    }
    if (c->with_g) {
        p->x[BX_G] = malloc(ng * sizeof(float));
        tu_randu(&r, p->x[BX_G], ng, 0.5f, 1.0f);
        if (c->g_zeros)
            for (size_t i = 3; i < ng; i += 7) p->x[BX_G][i] = 0.0f;
    }
    const vla_attn_desc *d = &p->d;
    if (c->states && tu_has_S(d)) p->x[BX_S0] = tu_rand_S0(&r, c->B, c->H, c->dk, c->dv);
    if (c->states && tu_has_A(d)) p->x[BX_A0] = tu_rand_A0(&r, c->B, c->H, c->dk, d->lambda0);
    if (c->states && tu_has_n(d)) p->x[BX_N0] = tu_rand_n0(&r, c->B, c->H, c->dk);
    p->up[BU_DO] = tu_randn_new(&r, nvo);
    if (c->up && tu_has_S(d)) p->up[BU_DS] = tu_randn_new(&r, ns[BX_S0]);
    if (c->up && tu_has_A(d)) p->up[BU_DA] = tu_randn_new(&r, ns[BX_A0]);
    if (c->up && tu_has_n(d)) p->up[BU_DN] = tu_randn_new(&r, ns[BX_N0]);
}

static void bw_free(bw_problem *p) {
    for (int i = 0; i < BX_N; i++) free(p->x[i]);
    for (int i = 0; i < BU_N; i++) free(p->up[i]);
}

/* Every gradient of an input the forward uses (states: every one the mechanism has). */
static unsigned bw_all(const bw_problem *p) {
    unsigned w = 1u << BX_Q | 1u << BX_K | 1u << BX_V;
    if (p->x[BX_U]) w |= 1u << BX_U;
    if (p->x[BX_BETA]) w |= 1u << BX_BETA;
    if (p->x[BX_G]) w |= 1u << BX_G;
    if (tu_has_S(&p->d)) w |= 1u << BX_S0;
    if (tu_has_A(&p->d)) w |= 1u << BX_A0;
    if (tu_has_n(&p->d)) w |= 1u << BX_N0;
    return w;
}

/* The backward on `be` with algorithm `algo`, the outputs in `want` poisoned first; out[i] malloc'ed
 * (downloaded) for each requested i, unwritten[i] the poison left. */
static vla_status bw_run(vla_backend *be, const bw_problem *p, vla_algorithm algo, unsigned want, float *out[BX_N],
                         size_t unwritten[BX_N]) {
    vla_attn_desc d = p->d;
    d.algorithm = algo;
    vla_buffer *xb[BX_N] = {0}, *ub[BU_N] = {0}, *gb[BX_N] = {0};
    for (int i = 0; i < BX_N; i++)
        if (p->x[i]) xb[i] = tu_buf_from(be, p->x[i], p->n[i]);
    for (int i = 0; i < BU_N; i++)
        if (p->up[i]) ub[i] = tu_buf_from(be, p->up[i], p->nup[i]);
    for (int i = 0; i < BX_N; i++)
        if (want >> i & 1) gb[i] = tu_buf_new(be, p->n[i]);
    vla_attn_args a = {.B = p->B, .T = p->T, .H = p->H, .dk = p->dk, .dv = p->dv, .t0 = p->t0};
    a.q = xb[BX_Q], a.k = xb[BX_K], a.v = xb[BX_V], a.u = xb[BX_U], a.beta = xb[BX_BETA], a.g = xb[BX_G];
    a.S_in = xb[BX_S0], a.A_in = xb[BX_A0], a.n_in = xb[BX_N0];
    vla_attn_grads g = {.dO = ub[BU_DO], .dS_end = ub[BU_DS], .dA_end = ub[BU_DA], .dn_end = ub[BU_DN]};
    g.dq = gb[BX_Q], g.dk = gb[BX_K], g.dv = gb[BX_V], g.du = gb[BX_U], g.dbeta = gb[BX_BETA], g.dg = gb[BX_G];
    g.dS_0 = gb[BX_S0], g.dA_0 = gb[BX_A0], g.dn_0 = gb[BX_N0];
    const vla_status s = vla_attention_backward(be, &d, &a, &g);
    if (s != VLA_OK) fprintf(stderr, "  backward on %s: %s\n", vla_backend_name(be), vla_backend_message(be));
    for (int i = 0; i < BX_N; i++) {
        out[i] = NULL, unwritten[i] = 0;
        if (!gb[i]) continue;
        out[i] = tu_buf_download_new(gb[i], p->n[i]);
        unwritten[i] = tu_count_poison(out[i], p->n[i]);
    }
    for (int i = 0; i < BX_N; i++) vla_buffer_free(xb[i]), vla_buffer_free(gb[i]);
    for (int i = 0; i < BU_N; i++) vla_buffer_free(ub[i]);
    return s;
}

/* ref64's gradients (double) where the shapes are small enough for its per-token states. */
static int bw_ref64(const bw_problem *p, double *ref[BX_N]) {
    for (int i = 0; i < BX_N; i++) ref[i] = NULL;
    if ((double)p->B * p->H * p->T * p->dk * (p->dk + p->dv) > 4e7) return 0;
    for (int i = 0; i < BX_N; i++) ref[i] = calloc(p->n[i], sizeof(double));
    double *up[BU_N] = {0};
    for (int i = 0; i < BU_N; i++)
        if (p->up[i]) up[i] = tu_to_double(p->up[i], p->nup[i]);
    ref64_grads r = {.dO = up[BU_DO], .dS_end = up[BU_DS], .dA_end = up[BU_DA], .dn_end = up[BU_DN]};
    r.dq = ref[BX_Q], r.dk = ref[BX_K], r.dv = ref[BX_V], r.du = ref[BX_U], r.dbeta = ref[BX_BETA];
    r.dg = ref[BX_G], r.dS_0 = ref[BX_S0], r.dA_0 = ref[BX_A0], r.dn_0 = ref[BX_N0];
    const int rc = ref64_backward(&p->d, p->B, p->T, p->H, p->dk, p->dv, p->t0, p->x[BX_Q], p->x[BX_K], p->x[BX_V],
                                  p->x[BX_U], p->x[BX_BETA], p->x[BX_G], p->x[BX_S0], p->x[BX_A0], p->x[BX_N0], &r);
    for (int i = 0; i < BU_N; i++) free(up[i]);
    ck_assert_int_eq(rc, 0);
    return 1;
}

/* ||x - ref|| (ref NULL: ||x||); non-finite x gives INFINITY. */
static double bw_norm(const float *x, const double *ref, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        const double d = (double)x[i] - (ref ? ref[i] : 0.0);
        s += d * d;
    }
    return sqrt(s);
}

/* ||x - ref|| / max(||ref||, floor). */
static double bw_err(const float *x, const double *ref, size_t n, double floor) {
    double r = 0.0;
    for (size_t i = 0; i < n; i++) r += ref[i] * ref[i];
    return bw_norm(x, ref, n) / fmax(sqrt(r), floor);
}

static void bw_free_out(float *out[BX_N]) {
    for (int i = 0; i < BX_N; i++) free(out[i]), out[i] = NULL;
}

/* One backward case on the CUDA backend against the CPU backend and ref64 (above); fails the test. */
static void bw_check(const bw_case *c, uint64_t seed) {
    if (c->big && g_quick) return;
    if (g_only && !strstr(c->name, g_only)) return;
    const int T = c->big && g_emulated ? c->T / 4 : c->T;
    bw_problem p;
    bw_make(c, T, seed, &p);
    const unsigned want = bw_all(&p);
    float *gc[BX_N], *gr[BX_N];
    size_t uc[BX_N], ur[BX_N];
    const vla_status sc = bw_run(g_cu, &p, c->algo, want, gc, uc);
    const vla_status sr = bw_run(g_cpu, &p, p.d.mechanism == SM ? VLA_ALGO_FUSED : VLA_ALGO_SEQUENTIAL, want, gr, ur);
    ck_assert_msg(sc == VLA_OK, "%s: cuda backward: %s", c->name, vla_status_string(sc));
    ck_assert_msg(sr == VLA_OK, "%s: cpu backward: %s", c->name, vla_status_string(sr));
    double *ref[BX_N];
    const int have_ref = bw_ref64(&p, ref);
    double G = 0.0; /* the largest RMS of the reference gradients */
    for (int i = 0; i < BX_N; i++)
        if (gr[i]) G = fmax(G, bw_norm(gr[i], NULL, p.n[i]) / sqrt((double)p.n[i]));
    char line[768], why[1024] = "";
    int n = snprintf(line, sizeof line, "  %-52s T=%-5d vs cpu%s:", c->name, T, have_ref ? " (ref64)" : "");
    for (int i = 0; i < BX_N; i++) {
        if (!gc[i]) continue;
        double *rd = tu_to_double(gr[i], p.n[i]);
        const double floor = (c->cancel >> i & 1 ? 1e-3 : 1e-6) * G * sqrt((double)p.n[i]);
        const double e = bw_err(gc[i], rd, p.n[i], floor);
        const double e64 = have_ref ? bw_err(gc[i], ref[i], p.n[i], floor) : 0.0;
        free(rd);
        const int ok = e <= 1e-4 && e64 <= 1e-4 && uc[i] == 0;
        if (have_ref) n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1e (%.1e)%s", bw_names[i], e, e64, ok ? "" : "!");
        else n += snprintf(line + n, sizeof line - (size_t)n, " %s %.1e%s", bw_names[i], e, ok ? "" : "!");
        if (n >= (int)sizeof line) n = (int)sizeof line - 1;
        if (!ok) {
            const size_t len = strlen(why);
            snprintf(why + len, sizeof why - len, " %s: %.3e vs cpu, %.3e vs ref64, %zu unwritten;", bw_names[i], e,
                     e64, uc[i]);
        }
    }
    fprintf(stderr, "%s\n", line);
    for (int i = 0; i < BX_N; i++) free(ref[i]);
    bw_free_out(gc), bw_free_out(gr);
    bw_free(&p);
    ck_assert_msg(!why[0], "%s:%s", c->name, why);
}

/* A case left to AUTO runs twice where the mechanism has two forms: under AUTO (on CUDA the chunk
 * form wherever the forward's AUTO is chunked, T > 16) and as the recurrent kernel asked for by name,
 * so that both kernels see every shape, option and state combination of the list. */
START_TEST(test_backward) {
    const bw_case *c = &bw_cases[_i];
    const uint64_t seed = seed_base + 500 + (uint64_t)_i;
    bw_check(c, seed);
    if (c->algo == VLA_ALGO_AUTO && c->mech != SM && c->mech != VLA_MECH_DELTA_PAPER) {
        bw_case s = *c;
        char name[160];
        snprintf(name, sizeof name, "%s sequential", c->name);
        s.name = name;
        s.algo = VLA_ALGO_SEQUENTIAL;
        bw_check(&s, seed);
    }
}
END_TEST

/* Each requested output alone gives the same values as all of them together (bit for bit), no
 * output at all is a valid request, and a NaN in a later value keeps softmax's earlier rows finite
 * (in a later key: their dq; in an earlier query or dO row: the later keys' dk and dv). */
START_TEST(test_backward_outputs) {
    static const bw_case cs[] = {
        {.name = "vla elu1 normalised R4 u states up", .mech = VL, .B = 2, .T = 19, .H = 2, .dk = 5, .dv = 3,
         .chunk = 8, .elu1 = 1, .norm = 1, .R = 4, .rho = 0.01, .with_u = 1, .states = 1, .up = 1},
        {.name = "delta beta g states up", .mech = DE, .B = 1, .T = 19, .H = 2, .dk = 6, .dv = 4, .chunk = 8,
         .with_beta = 1, .with_g = 1, .states = 1, .up = 1},
        {.name = "softmax", .mech = SM, .B = 1, .T = 19, .H = 2, .dk = 6, .dv = 4},
    };
    const bw_case *c = &cs[_i];
    bw_problem p;
    bw_make(c, c->T, seed_base + 900 + (uint64_t)_i, &p);
    float *full[BX_N], *one[BX_N];
    size_t uf[BX_N], uo[BX_N];
    ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, bw_all(&p), full, uf), VLA_OK);
    for (int i = 0; i < BX_N; i++) {
        if (!full[i]) continue;
        ck_assert_msg(uf[i] == 0, "%s: %s: %zu elements unwritten", c->name, bw_names[i], uf[i]);
        ck_assert_msg(tu_all_finite(full[i], p.n[i]), "%s: %s not finite", c->name, bw_names[i]);
        ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, 1u << i, one, uo), VLA_OK);
        ck_assert_msg(memcmp(one[i], full[i], p.n[i] * sizeof(float)) == 0, "%s: %s alone differs", c->name,
                      bw_names[i]);
        bw_free_out(one);
    }
    ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, 0, one, uo), VLA_OK);
    bw_free_out(full);
    if (c->mech == SM) { /* a NaN in v at token J of head 1: dq of the rows before it stays finite */
        enum { J = 11 };
        const float v_keep = p.x[BX_V][((size_t)J * p.H + 1) * p.dv];
        p.x[BX_V][((size_t)J * p.H + 1) * p.dv] = NAN;
        ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, bw_all(&p), full, uf), VLA_OK);
        size_t bad = 0;
        for (int i = 0; i < BX_N; i++)
            if (full[i]) bad += tu_count_nonfinite(full[i], p.n[i]);
        ck_assert_msg(bad > 0, "softmax: a NaN value gave finite gradients");
        for (int t = 0; t < J; t++)
            ck_assert_msg(tu_all_finite(full[BX_Q] + ((size_t)t * p.H + 1) * p.dk, (size_t)p.dk),
                          "softmax: dq of row %d before the NaN at %d is not finite", t, J);
        bw_free_out(full);
        p.x[BX_V][((size_t)J * p.H + 1) * p.dv] = v_keep;
        /* a NaN in k at J (its masked pairs multiply K in dq's product): dq of the rows before J stays
         * finite; a NaN in q or dO at row J (theirs multiply Q and dO in dk's and dv's): dk and dv of
         * the keys after J stay finite */
        float *const at[3] = {&p.x[BX_K][((size_t)J * p.H + 1) * p.dk + 1],
                              &p.x[BX_Q][((size_t)J * p.H + 1) * p.dk + 2], &p.up[BU_DO][((size_t)J * p.H + 1) * p.dv]};
        for (int w = 0; w < 3; w++) {
            const float keep = *at[w];
            *at[w] = NAN;
            ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, bw_all(&p), full, uf), VLA_OK);
            for (int t = 0; t < p.T; t++) {
                const size_t rq = ((size_t)t * p.H + 1) * p.dk, rv = ((size_t)t * p.H + 1) * p.dv;
                if (w == 0 && t < J)
                    ck_assert_msg(tu_all_finite(full[BX_Q] + rq, (size_t)p.dk), "softmax: NaN k at %d: dq %d", J, t);
                if (w > 0 && t > J)
                    ck_assert_msg(tu_all_finite(full[BX_K] + rq, (size_t)p.dk) &&
                                      tu_all_finite(full[BX_V] + rv, (size_t)p.dv),
                                  "softmax: NaN %s at %d: dk or dv of key %d", w == 1 ? "q" : "dO", J, t);
            }
            ck_assert_msg(tu_count_nonfinite(full[BX_Q], p.n[BX_Q]) > 0, "softmax: a NaN input gave a finite dq");
            bw_free_out(full);
            *at[w] = keep;
        }
    }
    bw_free(&p);
}
END_TEST

/* A workspace past the device's memory (checkpoints every token of a long piece at d = 256):
 * VLA_ERR_OUT_OF_MEMORY, nothing written, and the backend still works. */
START_TEST(test_backward_out_of_memory) {
    if (g_quick) return;
    const bw_case c = {.name = "vla oom", .mech = VL, .B = g_emulated ? 1 : 16, .T = g_emulated ? 4096 : 65536,
                       .H = 1, .dk = 256, .dv = 256, .chunk = 1};
    bw_problem p;
    bw_make(&c, c.T, seed_base + 950, &p);
    float *out[BX_N];
    size_t un[BX_N];
    const vla_status s = bw_run(g_cu, &p, VLA_ALGO_AUTO, 1u << BX_V | 1u << BX_Q, out, un);
    fprintf(stderr, "  backward T=%d C=1 d=256 -> %s (message above)\n", c.T, vla_status_string(s));
    ck_assert_msg(s == VLA_ERR_OUT_OF_MEMORY, "backward past memory: %s", vla_status_string(s));
    ck_assert_msg(un[BX_V] == p.n[BX_V] && un[BX_Q] == p.n[BX_Q], "a failing backward wrote its outputs");
    bw_free_out(out);
    bw_free(&p);
    const bw_case small = {.name = "vla after", .mech = VL, .B = 1, .T = 20, .H = 2, .dk = 8, .dv = 8, .chunk = 8};
    bw_make(&small, small.T, seed_base + 951, &p);
    ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, bw_all(&p), out, un), VLA_OK);
    for (int i = 0; i < BX_N; i++)
        if (out[i]) ck_assert_msg(un[i] == 0 && tu_all_finite(out[i], p.n[i]), "after a failed call: %s", bw_names[i]);
    bw_free_out(out);
    bw_free(&p);
}
END_TEST

/* ---- the paper's DeltaNet (delta-paper; kernels/cuda/vla_delta_paper.cu), sequential ----
 * Forward: o and S_out against ref64 (float64) and against the CPU backend, each norm-wise relative
 * error < 1e-5 (the ops cases' tolerance), every element written. Backward: bw_check (every gradient
 * within 1e-4 per tensor of the CPU backend's and ref64's). With g and without, S_in and S_out (in
 * place too), dS_end, dk != dv, dk and dv from 1 to 256 (dk = dv = 256: the state in the workspace,
 * not shared memory), T = 1, T not a multiple of the checkpoint interval, phi = none, g with exact
 * zeros, AUTO, a chunk of two staging stretches, and the training shape (B = 64, H = 4, T = 73,
 * dk = dv = 32). At dk = 1, k^ = +-1 and dk vanishes: both backends form it from the raw k in double, so
 * it is ~1e-16 and measured on the call's gradient scale (bw_check's floor). */
#define DP VLA_MECH_DELTA_PAPER
#define DPS VLA_ALGO_SEQUENTIAL
static const bw_case dp_cases[] = {
    {.name = "delta-paper T=1 g states up", .mech = DP, .B = 1, .T = 1, .H = 1, .dk = 8, .dv = 8, .with_g = 1,
     .states = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper B2 T37 H3 dk16 dv24 C16 g states up", .mech = DP, .B = 2, .T = 37, .H = 3, .dk = 16,
     .dv = 24, .chunk = 16, .with_g = 1, .states = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper no g, no states C8", .mech = DP, .B = 1, .T = 29, .H = 2, .dk = 12, .dv = 20, .chunk = 8,
     .algo = DPS},
    {.name = "delta-paper phi none, g zeros, in place C5 up", .mech = DP, .B = 2, .T = 23, .H = 2, .dk = 10, .dv = 6,
     .chunk = 5, .no_fmap = 1, .with_g = 1, .g_zeros = 1, .states = 1, .inplace = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper C50 T70 dk4 dv5 (two stretches a chunk) g states up", .mech = DP, .B = 1, .T = 70, .H = 2,
     .dk = 4, .dv = 5, .chunk = 50, .with_g = 1, .states = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper dk1 dv1 C4 g states up", .mech = DP, .B = 1, .T = 13, .H = 2, .dk = 1, .dv = 1, .chunk = 4,
     .with_g = 1, .states = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper dk1 dv40 C8 g up", .mech = DP, .B = 1, .T = 17, .H = 1, .dk = 1, .dv = 40, .chunk = 8,
     .with_g = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper dk256 dv24 T20 C8 g states up", .mech = DP, .B = 1, .T = 20, .H = 1, .dk = 256, .dv = 24,
     .chunk = 8, .with_g = 1, .states = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper dk40 dv256 T20 C64 g", .mech = DP, .B = 1, .T = 20, .H = 1, .dk = 40, .dv = 256,
     .chunk = 64, .with_g = 1, .algo = DPS},
    {.name = "delta-paper dk256 dv256 T12 C5 g states in place up", .mech = DP, .B = 1, .T = 12, .H = 1, .dk = 256,
     .dv = 256, .chunk = 5, .with_g = 1, .states = 1, .inplace = 1, .up = 1, .algo = DPS},
    {.name = "delta-paper auto B4 T73 H4 dk32 dv32 g states up", .mech = DP, .B = 4, .T = 73, .H = 4, .dk = 32,
     .dv = 32, .with_g = 1, .states = 1, .up = 1},
    {.name = "delta-paper training shape B64 T73 H4 dk32 dv32 g up", .mech = DP, .B = 64, .T = 73, .H = 4, .dk = 32,
     .dv = 32, .with_g = 1, .up = 1, .big = 1},
    {.name = "delta-paper long T1024 dk64 dv48 C64 g states up", .mech = DP, .B = 1, .T = 1024, .H = 2, .dk = 64,
     .dv = 48, .chunk = 64, .with_g = 1, .states = 1, .up = 1, .big = 1},
};
#define N_DP ((int)(sizeof dp_cases / sizeof dp_cases[0]))

/* The forward of a delta-paper problem on `be`: o and the final state downloaded (malloc'ed),
 * *unwritten the poison left in them. */
static vla_status dp_forward(vla_backend *be, const bw_problem *p, int inplace, float **o, float **S,
                             size_t *unwritten) {
    vla_buffer *xb[BX_N] = {0};
    for (int i = 0; i < BX_N; i++)
        if (p->x[i]) xb[i] = tu_buf_from(be, p->x[i], p->n[i]);
    vla_buffer *ob = tu_buf_new(be, p->n[BX_V]);
    vla_buffer *Sb = inplace && xb[BX_S0] ? xb[BX_S0] : tu_buf_new(be, p->n[BX_S0]);
    vla_attn_args a = {.B = p->B, .T = p->T, .H = p->H, .dk = p->dk, .dv = p->dv, .t0 = p->t0};
    a.q = xb[BX_Q], a.k = xb[BX_K], a.v = xb[BX_V], a.g = xb[BX_G], a.S_in = xb[BX_S0];
    a.o = ob, a.S_out = Sb;
    const vla_status s = vla_attention_forward(be, &p->d, &a);
    if (s != VLA_OK) fprintf(stderr, "  forward on %s: %s\n", vla_backend_name(be), vla_backend_message(be));
    *o = tu_buf_download_new(ob, p->n[BX_V]);
    *S = tu_buf_download_new(Sb, p->n[BX_S0]);
    *unwritten = tu_count_poison(*o, p->n[BX_V]) + tu_count_poison(*S, p->n[BX_S0]);
    if (Sb != xb[BX_S0]) vla_buffer_free(Sb);
    vla_buffer_free(ob);
    for (int i = 0; i < BX_N; i++) vla_buffer_free(xb[i]);
    return s;
}

START_TEST(test_dp_forward) {
    const bw_case *c = &dp_cases[_i];
    if (c->big && g_quick) return;
    if (g_only && !strstr(c->name, g_only)) return;
    bw_problem p;
    bw_make(c, c->T, seed_base + 1300 + (uint64_t)_i, &p);
    const size_t nvo = p.n[BX_V], nS = p.n[BX_S0];
    double *ro = malloc(nvo * sizeof(double)), *rS = malloc(nS * sizeof(double));
    ck_assert_ptr_nonnull(ro);
    ck_assert_ptr_nonnull(rS);
    ck_assert_int_eq(ref64_forward(&p.d, p.B, p.T, p.H, p.dk, p.dv, p.t0, p.x[BX_Q], p.x[BX_K], p.x[BX_V], NULL, NULL,
                                   p.x[BX_G], p.x[BX_S0], NULL, NULL, ro, rS, NULL, NULL),
                     0);
    float *oc, *Sc, *ocpu, *Scpu;
    size_t uc, ucpu;
    const vla_status sc = dp_forward(g_cu, &p, c->inplace, &oc, &Sc, &uc);
    const vla_status scpu = dp_forward(g_cpu, &p, c->inplace, &ocpu, &Scpu, &ucpu);
    const double eo = tu_relerr(oc, ro, nvo), eS = tu_relerr(Sc, rS, nS);
    const double eoc = tu_relerr_ff(oc, ocpu, nvo), eSc = tu_relerr_ff(Sc, Scpu, nS);
    fprintf(stderr, "  %-58s vs ref64: o %.2e S %.2e; vs cpu: o %.2e S %.2e\n", c->name, eo, eS, eoc, eSc);
    ck_assert_msg(sc == VLA_OK, "%s: cuda forward: %s", c->name, vla_status_string(sc));
    ck_assert_msg(scpu == VLA_OK, "%s: cpu forward: %s", c->name, vla_status_string(scpu));
    ck_assert_msg(uc == 0, "%s: %zu elements of o and S_out unwritten", c->name, uc);
    ck_assert_msg(eo < 1e-5 && eS < 1e-5, "%s: vs ref64: o %.3e, S %.3e (tolerance 1e-5)", c->name, eo, eS);
    ck_assert_msg(eoc < 1e-5 && eSc < 1e-5, "%s: vs cpu: o %.3e, S %.3e (tolerance 1e-5)", c->name, eoc, eSc);
    free(oc), free(Sc), free(ocpu), free(Scpu), free(ro), free(rS);
    bw_free(&p);
}
END_TEST

START_TEST(test_dp_backward) { bw_check(&dp_cases[_i], seed_base + 1400 + (uint64_t)_i); }
END_TEST

/* Each requested output alone gives the same bits as all of them together, and none at all is a valid
 * request (delta-paper: one kernel computes all of them; the requests only gate the writes). */
START_TEST(test_dp_backward_outputs) {
    const bw_case c = {.name = "delta-paper outputs", .mech = DP, .B = 1, .T = 19, .H = 2, .dk = 6, .dv = 4,
                       .chunk = 8, .with_g = 1, .states = 1, .up = 1};
    bw_problem p;
    bw_make(&c, c.T, seed_base + 1500, &p);
    float *full[BX_N], *one[BX_N];
    size_t uf[BX_N], uo[BX_N];
    ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, bw_all(&p), full, uf), VLA_OK);
    for (int i = 0; i < BX_N; i++) {
        if (!full[i]) continue;
        ck_assert_msg(uf[i] == 0, "%s: %zu elements unwritten", bw_names[i], uf[i]);
        ck_assert_msg(tu_all_finite(full[i], p.n[i]), "%s not finite", bw_names[i]);
        ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, 1u << i, one, uo), VLA_OK);
        ck_assert_msg(memcmp(one[i], full[i], p.n[i] * sizeof(float)) == 0, "%s alone differs", bw_names[i]);
        bw_free_out(one);
    }
    ck_assert_int_eq(bw_run(g_cu, &p, VLA_ALGO_AUTO, 0, one, uo), VLA_OK);
    bw_free_out(full);
    bw_free(&p);
}
END_TEST

static Suite *cuda_suite(void) {
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 3600);
    tcase_add_loop_test(tc, test_case, 0, N_CASES);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("decode");
    tcase_set_timeout(td, 3600);
    tcase_add_loop_test(td, test_decode, 0, (int)(sizeof dec_cases / sizeof dec_cases[0]));
    suite_add_tcase(s, td);
    TCase *ts = tcase_create("streaming");
    tcase_set_timeout(ts, 3600);
    tcase_add_loop_test(ts, test_stream, 0, (int)(sizeof stream_cases / sizeof stream_cases[0]));
    suite_add_tcase(s, ts);
    TCase *tl = tcase_create("long");
    tcase_set_timeout(tl, 3600);
    tcase_add_loop_test(tl, test_long, 0, (int)(sizeof long_cases / sizeof long_cases[0]));
    suite_add_tcase(s, tl);
    TCase *tp = tcase_create("paths");
    tcase_add_loop_test(tp, test_carry_path, 0, 2);
    tcase_add_loop_test(tp, test_softmax_nonfinite, 0, 3);
    tcase_add_loop_test(tp, test_graph_replay, 0, 3);
    suite_add_tcase(s, tp);
    TCase *tb = tcase_create("backward");
    tcase_set_timeout(tb, 3600);
    tcase_add_loop_test(tb, test_backward, 0, N_BW);
    tcase_add_loop_test(tb, test_backward_outputs, 0, 3);
    tcase_add_test(tb, test_backward_out_of_memory);
    suite_add_tcase(s, tb);
    TCase *tdp = tcase_create("delta-paper");
    tcase_set_timeout(tdp, 3600);
    tcase_add_loop_test(tdp, test_dp_forward, 0, N_DP);
    tcase_add_loop_test(tdp, test_dp_backward, 0, N_DP);
    tcase_add_test(tdp, test_dp_backward_outputs);
    suite_add_tcase(s, tdp);
    TCase *te = tcase_create("errors");
    tcase_add_test(te, test_open_errors);
    tcase_add_test(te, test_out_of_memory);
    suite_add_tcase(s, te);
    return s;
}

int main(void) {
    const char *seed = getenv("VLA_TEST_SEED");
    if (seed && *seed) seed_base = strtoull(seed, NULL, 10);
    const char *quick = getenv("VLA_CUDA_TEST_QUICK");
    g_quick = quick && *quick && strcmp(quick, "0") != 0;
    g_only = getenv("VLA_CUDA_TEST_ONLY");
    if (g_only && !*g_only) g_only = NULL;
    /* Skip, never pass, without a device. */
    vla_device_info info[32];
    int n = 0, have = 0;
    if (vla_list_devices(info, 32, &n) == VLA_OK)
        for (int i = 0; i < n && i < 32; i++)
            if (strncmp(info[i].name, "cuda:", 5) == 0) have = 1;
    if (!have) {
        printf("test_cuda: no CUDA device on this machine (or no driver): skipped\n");
        return 77;
    }
    if (vla_backend_open("cuda:0", &g_cu) != VLA_OK) {
        printf("test_cuda: cuda:0 is listed but does not open (%s): failed\n", vla_last_message());
        return 1;
    }
    if (vla_backend_open("cpu", &g_cpu) != VLA_OK) {
        printf("test_cuda: the cpu backend does not open: %s\n", vla_last_message());
        return 1;
    }
    g_emulated = strstr(vla_backend_device(g_cu), "emulator") != NULL;
    fprintf(stderr, "test_cuda: %s = %s%s\n", vla_backend_name(g_cu), vla_backend_device(g_cu),
            g_emulated ? " (smaller sizes)" : "");
    SRunner *sr = srunner_create(cuda_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    vla_backend_close(g_cu);
    vla_backend_close(g_cpu);
    return failed ? 1 : 0;
}
