/* Streaming (VLA-MATH, "Streaming"): a sequence processed in pieces, carrying S, A, n and t0,
 * equals the whole run, for every algorithm, for algorithms mixed between pieces, and with the
 * state updated in place (S_out == S_in). Tolerance 1e-5 relative against the library's whole
 * run and against ref64. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref64.h"
#include "test_util.h"

#define TOL 1e-5
#define MAXP 128

/* The pieces of a run: cut points (strictly inside (0, T)), one algorithm per piece. */
typedef struct plan {
    const char *name;
    int ncuts;
    int cuts[MAXP];
    int nalg; /* algorithms cycle through alg[0..nalg) piece by piece */
    vla_algorithm alg[4];
    int inplace;
} plan;

typedef struct stream_out {
    float *o, *S, *A, *n;
    size_t o_unwritten;
} stream_out;

static vla_buffer *piece_buf(vla_backend *be, const float *x, int B, int T, int H, int D, int ta, int tb) {
    if (!x) return NULL;
    float *s = tu_slice_time(x, B, T, H, D, ta, tb);
    vla_buffer *b = tu_buf_from(be, s, (size_t)B * (tb - ta) * H * D);
    free(s);
    return b;
}

/* Runs p in the pieces of `pl` with desc d (its algorithm replaced per piece), carrying the
 * states through backend buffers: ping-pong between two buffers, or one buffer updated in
 * place (S_out == S_in from the second piece on; from the first when p has initial states). */
static void run_stream(vla_backend *be, vla_attn_desc d, const tu_problem *p, const plan *pl, stream_out *out) {
    const int B = p->B, T = p->T, H = p->H, dk = p->dk, dv = p->dv;
    int hS = tu_has_S(&d), hA = tu_has_A(&d), hn = tu_has_n(&d);
    const int gw = d.mechanism == VLA_MECH_DELTA_PAPER ? dv : 1; /* g's row: [B,T,H] or [B,T,H,dv] */
    size_t nS = tu_nS(p), nA = tu_nA(p), nn = tu_nn(p);
    vla_buffer *Sb[2] = {hS ? tu_buf_new(be, nS) : NULL, hS ? tu_buf_new(be, nS) : NULL};
    vla_buffer *Ab[2] = {hA ? tu_buf_new(be, nA) : NULL, hA ? tu_buf_new(be, nA) : NULL};
    vla_buffer *nb[2] = {hn ? tu_buf_new(be, nn) : NULL, hn ? tu_buf_new(be, nn) : NULL};
    int cur = 0, have_state = 0;
    if (p->S0 && hS) tu_buf_upload(Sb[0], p->S0, nS), have_state = 1;
    if (p->A0 && hA) tu_buf_upload(Ab[0], p->A0, nA), have_state = 1;
    if (p->n0 && hn) tu_buf_upload(nb[0], p->n0, nn), have_state = 1;
    out->o = malloc(tu_nvo(p) * sizeof(float));
    ck_assert_ptr_nonnull(out->o);
    tu_poison(out->o, tu_nvo(p));

    for (int i = 0; i <= pl->ncuts; i++) {
        int ta = i == 0 ? 0 : pl->cuts[i - 1], tb = i == pl->ncuts ? T : pl->cuts[i];
        int Tp = tb - ta;
        d.algorithm = pl->alg[i % pl->nalg];
        vla_attn_args a;
        memset(&a, 0, sizeof a);
        a.B = B, a.T = Tp, a.H = H, a.dk = dk, a.dv = dv, a.t0 = p->t0 + ta;
        vla_buffer *q = piece_buf(be, p->q, B, T, H, dk, ta, tb), *k = piece_buf(be, p->k, B, T, H, dk, ta, tb);
        vla_buffer *v = piece_buf(be, p->v, B, T, H, dv, ta, tb), *u = piece_buf(be, p->u, B, T, H, dk, ta, tb);
        vla_buffer *beta = piece_buf(be, p->beta, B, T, H, 1, ta, tb), *g = piece_buf(be, p->g, B, T, H, gw, ta, tb);
        size_t nvo_p = (size_t)B * Tp * H * dv;
        vla_buffer *o = tu_buf_new(be, nvo_p);
        int in = cur, outi = pl->inplace ? cur : 1 - cur;
        /* The initial states of the first piece: p's (uploaded above) or none. */
        int state_in = i > 0 || have_state;
        a.q = q, a.k = k, a.v = v, a.u = u, a.beta = beta, a.g = g, a.o = o;
        if (state_in) a.S_in = Sb[in], a.A_in = Ab[in], a.n_in = nb[in];
        if (i == 0 && !have_state) a.S_in = NULL, a.A_in = NULL, a.n_in = NULL;
        if (i == 0 && have_state) { /* only the states p gives */
            if (!p->S0) a.S_in = NULL;
            if (!p->A0) a.A_in = NULL;
            if (!p->n0) a.n_in = NULL;
        }
        a.S_out = Sb[outi], a.A_out = Ab[outi], a.n_out = nb[outi];
        vla_status s = vla_attention_forward(be, &d, &a);
        ck_assert_msg(s == VLA_OK, "%s: piece %d [%d, %d) (%s): %s: %s", pl->name, i, ta, tb,
                      vla_algorithm_name(d.algorithm), vla_status_string(s), vla_backend_message(be));
        float *op = tu_buf_download_new(o, nvo_p);
        tu_place_time(out->o, op, B, T, H, dv, ta, tb);
        free(op);
        cur = outi;
        vla_buffer_free(q), vla_buffer_free(k), vla_buffer_free(v), vla_buffer_free(u), vla_buffer_free(beta);
        vla_buffer_free(g), vla_buffer_free(o);
    }
    out->o_unwritten = tu_count_poison(out->o, tu_nvo(p));
    out->S = hS ? tu_buf_download_new(Sb[cur], nS) : NULL;
    out->A = hA ? tu_buf_download_new(Ab[cur], nA) : NULL;
    out->n = hn ? tu_buf_download_new(nb[cur], nn) : NULL;
    for (int i = 0; i < 2; i++) vla_buffer_free(Sb[i]), vla_buffer_free(Ab[i]), vla_buffer_free(nb[i]);
}

static void stream_free(stream_out *s) { free(s->o), free(s->S), free(s->A), free(s->n); }

typedef struct scase {
    const char *name;
    vla_mechanism mech;
    int paper, R;
    double rho;
    int B, T, H, dk, dv, chunk, t0;
    int with_u, with_beta, with_g, with_states;
} scase;

static const scase scases[] = {
    {"vla paper R4 rho0.5 u, T77 C16", VLA_MECH_VLA, 1, 4, 0.5, 2, 77, 2, 16, 12, 16, 0, 1, 0, 0, 0},
    {"vla paper R4 rho0.5 u + states, t0=5, T77 C16", VLA_MECH_VLA, 1, 4, 0.5, 1, 77, 2, 12, 16, 16, 5, 1, 0, 0, 1},
    {"vla default (no u, R0), T77 C16", VLA_MECH_VLA, 0, 0, 0, 1, 77, 2, 16, 12, 16, 0, 0, 0, 0, 0},
    {"linear T77 C16", VLA_MECH_LINEAR, 0, 0, 0, 2, 77, 2, 16, 12, 16, 0, 0, 0, 0, 0},
    {"linear + states T77 C16", VLA_MECH_LINEAR, 0, 0, 0, 1, 77, 2, 12, 8, 16, 0, 0, 0, 0, 1},
    {"delta beta g T77 C16", VLA_MECH_DELTA, 0, 0, 0, 2, 77, 2, 16, 12, 16, 0, 0, 1, 1, 0},
    {"delta beta g + states T77 C16", VLA_MECH_DELTA, 0, 0, 0, 1, 77, 2, 12, 8, 16, 0, 0, 1, 1, 1},
    {"delta-paper g T77", VLA_MECH_DELTA_PAPER, 0, 0, 0, 2, 77, 2, 16, 12, 16, 0, 0, 0, 1, 0},
    {"delta-paper g + states t0=5 T77", VLA_MECH_DELTA_PAPER, 0, 0, 0, 1, 77, 2, 12, 8, 16, 5, 0, 0, 1, 1},
    {"delta-paper no g T77", VLA_MECH_DELTA_PAPER, 0, 0, 0, 1, 77, 3, 8, 8, 16, 0, 0, 0, 0, 0},
};
#define N_SCASES ((int)(sizeof scases / sizeof scases[0]))

#define SEQ VLA_ALGO_SEQUENTIAL
#define SCN VLA_ALGO_SCAN
#define CHK VLA_ALGO_CHUNKED
#define TWO VLA_ALGO_TWO_LEVEL
#define AUT VLA_ALGO_AUTO

/* Builds the plans for a mechanism: every algorithm alone at each cut (23; 50; 23 and 50),
 * in place and not; algorithms mixed between pieces. */
static int make_plans(vla_mechanism m, plan *pl, int max) {
    vla_algorithm algos[6];
    int na = tu_algorithms(m, algos);
    int np = 0;
    static const int cutsets[3][2] = {{23, 0}, {50, 0}, {23, 50}};
    static const int ncut[3] = {1, 1, 2};
    for (int ai = 0; ai < na; ai++)
        for (int cs = 0; cs < 3; cs++)
            for (int ip = 0; ip < 2; ip++) {
                if (ip && cs != 2) continue; /* in place: the three-piece run only */
                ck_assert_int_lt(np, max);
                plan *x = &pl[np++];
                memset(x, 0, sizeof *x);
                x->name = vla_algorithm_name(algos[ai]);
                x->ncuts = ncut[cs];
                x->cuts[0] = cutsets[cs][0], x->cuts[1] = cutsets[cs][1];
                x->nalg = 1, x->alg[0] = algos[ai];
                x->inplace = ip;
            }
    /* Mixed. */
    const vla_algorithm mixes_vla[][3] = {{SEQ, CHK, SCN}, {CHK, SEQ, TWO}, {SCN, TWO, CHK}, {TWO, SCN, SEQ}};
    const vla_algorithm mixes_ld[][3] = {{SEQ, CHK, SEQ}, {CHK, SEQ, CHK}};
    const vla_algorithm mixes_dp[][3] = {{SEQ, AUT, SEQ}, {AUT, SEQ, AUT}}; /* delta-paper: sequential only */
    int nm = m == VLA_MECH_VLA ? 4 : 2;
    for (int i = 0; i < nm; i++)
        for (int cs = 0; cs < 3; cs++) {
            ck_assert_int_lt(np, max);
            plan *x = &pl[np++];
            memset(x, 0, sizeof *x);
            x->name = "mixed";
            x->ncuts = ncut[cs];
            x->cuts[0] = cutsets[cs][0], x->cuts[1] = cutsets[cs][1];
            x->nalg = 3;
            for (int j = 0; j < 3; j++)
                x->alg[j] = m == VLA_MECH_VLA           ? mixes_vla[i][j]
                            : m == VLA_MECH_DELTA_PAPER ? mixes_dp[i][j]
                                                        : mixes_ld[i][j];
            x->inplace = cs == 2 && i == 0;
        }
    /* Decoding: token by token, after a prompt of 20 tokens, in place. */
    for (int ai = 0; ai < na; ai++) {
        if (algos[ai] == AUT) continue;
        ck_assert_int_lt(np, max);
        plan *x = &pl[np++];
        memset(x, 0, sizeof *x);
        x->name = "decode";
        x->ncuts = 0;
        for (int t = 20; t < 77 && x->ncuts < MAXP; t += 1) x->cuts[x->ncuts++] = t;
        x->nalg = 1, x->alg[0] = algos[ai];
        x->inplace = 1;
    }
    return np;
}

static void describe(const plan *pl, char *buf, size_t len) {
    int w = snprintf(buf, len, "%s%s", pl->name, pl->inplace ? " in-place" : "");
    if (pl->nalg > 1) {
        w += snprintf(buf + w, len - (size_t)w, " (");
        for (int j = 0; j < pl->nalg; j++)
            w += snprintf(buf + w, len - (size_t)w, "%s%s", j ? ">" : "", vla_algorithm_name(pl->alg[j]));
        w += snprintf(buf + w, len - (size_t)w, ")");
    }
    if (!strcmp(pl->name, "decode")) {
        snprintf(buf + w, len - (size_t)w, " %s, 20 + 1 x %d", vla_algorithm_name(pl->alg[0]), pl->ncuts);
        return;
    }
    w += snprintf(buf + w, len - (size_t)w, " cut at");
    for (int j = 0; j < pl->ncuts; j++) w += snprintf(buf + w, len - (size_t)w, " %d", pl->cuts[j]);
}

START_TEST(test_stream_case) {
    const scase *c = &scases[_i];
    tu_rng rng;
    tu_seed(&rng, 5000 + (uint64_t)_i);
    vla_attn_desc d;
    ck_assert_int_eq(vla_attn_desc_init(&d, c->mech), VLA_OK);
    if (c->paper) ck_assert_int_eq(vla_attn_desc_preset(&d, "paper"), VLA_OK);
    if (c->paper || c->R) d.refresh = c->R, d.refresh_size = c->R ? c->rho : d.refresh_size;
    d.chunk = c->chunk;
    tu_problem p = {.B = c->B, .T = c->T, .H = c->H, .dk = c->dk, .dv = c->dv, .t0 = c->t0};
    size_t nqk = tu_nqk(&p), nvo = tu_nvo(&p), nbt = tu_nbt(&p), nS = tu_nS(&p), nA = tu_nA(&p), nn = tu_nn(&p);
    size_t ng = tu_ng(&d, &p);
    float *q = tu_randn_new(&rng, nqk), *k = tu_randn_new(&rng, nqk), *v = tu_randn_new(&rng, nvo);
    float *u = c->with_u ? tu_randn_new(&rng, nqk) : NULL, *beta = NULL, *g = NULL;
    if (c->with_beta) beta = malloc(nbt * sizeof *beta), tu_randu(&rng, beta, nbt, 0.0f, 1.0f);
    if (c->with_g) g = malloc(ng * sizeof *g), tu_randu(&rng, g, ng, 0.0f, 1.0f);
    float *S0 = NULL, *A0 = NULL, *n0 = NULL;
    if (c->with_states) {
        S0 = tu_rand_S0(&rng, c->B, c->H, c->dk, c->dv);
        if (tu_has_A(&d)) A0 = tu_rand_A0(&rng, c->B, c->H, c->dk, d.lambda0);
        if (tu_has_n(&d)) n0 = tu_rand_n0(&rng, c->B, c->H, c->dk);
    }
    p.q = q, p.k = k, p.v = v, p.u = u, p.beta = beta, p.g = g, p.S0 = S0, p.A0 = A0, p.n0 = n0;

    /* ref64 of the whole sequence. */
    double *ro = malloc(nvo * sizeof *ro), *rS = malloc(nS * sizeof *rS), *rA = malloc(nA * sizeof *rA);
    double *rn = malloc(nn * sizeof *rn);
    ck_assert_int_eq(ref64_forward(&d, p.B, p.T, p.H, p.dk, p.dv, p.t0, q, k, v, u, beta, g, S0, A0, n0, ro, rS, rA, rn),
                     0);

    vla_backend *be = tu_open_cpu();
    /* The library's whole run, per algorithm (index by enum value). */
    tu_result whole[6];
    memset(whole, 0, sizeof whole);
    vla_algorithm algos[6];
    int na = tu_algorithms(c->mech, algos);
    fprintf(stderr, "[streaming] %s\n", c->name);
    char why[4096] = "";
    int failures = 0;
    for (int ai = 0; ai < na; ai++) {
        d.algorithm = algos[ai];
        tu_result *w = &whole[algos[ai]];
        tu_run(be, &d, &p, 0, w);
        char label[64];
        snprintf(label, sizeof label, "whole %s", vla_algorithm_name(algos[ai]));
        if (!tu_check_vs_ref(&d, &p, w, TOL, label, NULL, why, sizeof why)) failures++;
    }

    static plan plans[64];
    int np = make_plans(c->mech, plans, 64);
    for (int pi = 0; pi < np; pi++) {
        const plan *pl = &plans[pi];
        stream_out so;
        run_stream(be, d, &p, pl, &so);
        const tu_result *w = &whole[pl->alg[0]];
        if (w->status != VLA_OK || !w->o) {
            stream_free(&so);
            continue; /* already reported */
        }
        double wo = tu_relerr_ff(so.o, w->o, nvo), ro_e = tu_relerr(so.o, ro, nvo);
        double wS = so.S ? tu_relerr_ff(so.S, w->S, nS) : 0, rS_e = so.S ? tu_relerr(so.S, rS, nS) : 0;
        double wA = so.A ? tu_relerr_ff(so.A, w->A, nA) : 0, rA_e = so.A ? tu_relerr(so.A, rA, nA) : 0;
        double wn = so.n ? tu_relerr_ff(so.n, w->n, nn) : 0, rn_e = so.n ? tu_relerr(so.n, rn, nn) : 0;
        double worst_w = fmax(fmax(wo, wS), fmax(wA, wn)), worst_r = fmax(fmax(ro_e, rS_e), fmax(rA_e, rn_e));
        int ok = so.o_unwritten == 0 && worst_w < TOL && worst_r < TOL;
        char label[1024];
        describe(pl, label, sizeof label);
        fprintf(stderr, "  %-44s vs whole: o %.1e S %.1e A %.1e n %.1e | vs ref64: o %.1e S %.1e A %.1e n %.1e%s\n",
                label, wo, wS, wA, wn, ro_e, rS_e, rA_e, rn_e, ok ? "" : "  FAIL");
        if (!ok) {
            failures++;
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "[%s: worst vs whole %.2e, vs ref64 %.2e, unwritten %zu] ", label,
                     worst_w, worst_r, so.o_unwritten);
        }
        stream_free(&so);
    }
    for (int i = 0; i < 6; i++) tu_result_free(&whole[i]);
    vla_backend_close(be);
    free(ro), free(rS), free(rA), free(rn);
    free(q), free(k), free(v), free(u), free(beta), free(g), free(S0), free(A0), free(n0);
    ck_assert_msg(failures == 0, "%s: %d failures: %s", c->name, failures, why);
}
END_TEST

Suite *streaming_suite(void) {
    Suite *s = suite_create("streaming");
    TCase *tc = tcase_create("pieces");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_stream_case, 0, N_SCASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(streaming_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
