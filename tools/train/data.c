/* The trainer's tasks (layouts in data.h) and its random-number generator. */
#include "data.h"
#include "../rng.h" /* by path: tests/test_nn_backends.c compiles this file in without tools/ */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ---------------------------------------------------------------------- */

void tr_rng_seed(tr_rng *r, uint64_t seed) { rng_xoshiro_seed(r->s, seed); }

uint64_t tr_rng_next(tr_rng *r) { return rng_xoshiro_next(r->s); }

uint32_t tr_rng_below(tr_rng *r, uint32_t n) {
    /* Reject the low 2^32 mod n values of a 32-bit draw, so every residue is equally likely. */
    const uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = (uint32_t)(tr_rng_next(r) >> 32);
        if (x >= threshold) return x % n;
    }
}

double tr_rng_uniform(tr_rng *r) { return (double)(tr_rng_next(r) >> 11) * 0x1.0p-53; }

double tr_rng_normal(tr_rng *r) {
    const double u1 = 1.0 - tr_rng_uniform(r), u2 = tr_rng_uniform(r); /* u1 in (0, 1]: log is finite */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- tasks ---------------------------------------------------------------------------------- */

static const char *const task_names[TR_N_TASKS] = {"mqar", "mqar-zoology", "copy", "copy-paper"};

const char *tr_task_name(tr_task_kind k) { return (unsigned)k < TR_N_TASKS ? task_names[k] : "?"; }

int tr_task_from_name(const char *name, tr_task_kind *out) {
    for (int i = 0; i < TR_N_TASKS; i++)
        if (strcmp(name, task_names[i]) == 0) {
            *out = (tr_task_kind)i;
            return 0;
        }
    return -1;
}

int tr_task_default_T(tr_task_kind k, int pairs) {
    switch (k) {
    case TR_TASK_MQAR: return 3 * pairs + 1;
    case TR_TASK_MQAR_ZOOLOGY: return 4 * pairs;
    default: return 64;
    }
}

int tr_task_check(const tr_task *t, char *err, size_t errlen) {
    const int V = t->V, n = t->pairs, T = t->T;
    if ((unsigned)t->kind >= TR_N_TASKS) return snprintf(err, errlen, "unknown task %d", (int)t->kind), -1;
    if (V < 4) return snprintf(err, errlen, "vocabulary V = %d is too small (>= 4)", V), -1;
    if (T < 1) return snprintf(err, errlen, "sequence length %d must be >= 1", T), -1;
    switch (t->kind) {
    case TR_TASK_MQAR:
        if (n < 1 || n > V - 1)
            return snprintf(err, errlen, "mqar: %d pairs: keys are distinct tokens of 0..%d, so 1 <= pairs <= %d", n,
                            V - 2, V - 1),
                   -1;
        if (T < 2 * n + 2)
            return snprintf(err, errlen,
                            "mqar: %d pairs do not fit a sequence of %d: it needs 2n + 1 = %d tokens for the pairs and "
                            "the separator and at least one query (T >= %d)",
                            n, T, 2 * n + 1, 2 * n + 2),
                   -1;
        return 0;
    case TR_TASK_MQAR_ZOOLOGY:
        if (n < 1 || n > V / 2 - 1)
            return snprintf(err, errlen,
                            "mqar-zoology: %d pairs: keys are distinct tokens of 1..%d, so 1 <= pairs <= %d", n,
                            V / 2 - 1, V / 2 - 1),
                   -1;
        if (T < 4 * n || T % 2)
            return snprintf(err, errlen,
                            "mqar-zoology: %d pairs do not fit a sequence of %d: Zoology needs an even T >= 4n = %d", n,
                            T, 4 * n),
                   -1;
        return 0;
    case TR_TASK_COPY:
    case TR_TASK_COPY_PAPER:
        if (T < 4)
            return snprintf(err, errlen, "%s: a sequence of %d is too short (prefix, separator, copy: T >= 4)",
                            task_names[t->kind], T),
                   -1;
        return 0;
    default: return -1;
    }
}

int tr_data_init(tr_data *d, const tr_task *t) {
    char err[256];
    memset(d, 0, sizeof *d);
    if (tr_task_check(t, err, sizeof err)) return -1;
    d->task = *t;
    d->perm = malloc((size_t)t->V * sizeof *d->perm);
    d->keys = malloc((size_t)t->V * sizeof *d->keys);
    d->vals = malloc((size_t)t->V * sizeof *d->vals);
    d->weight = malloc((size_t)t->T * sizeof *d->weight);
    d->gaps = malloc((size_t)t->T * sizeof *d->gaps);
    if (!d->perm || !d->keys || !d->vals || !d->weight || !d->gaps) {
        tr_data_free(d);
        return -1;
    }
    return 0;
}

void tr_data_free(tr_data *d) {
    free(d->perm), free(d->keys), free(d->vals), free(d->weight), free(d->gaps);
    memset(d, 0, sizeof *d);
}

/* The first k entries of a uniformly random permutation of lo..hi-1 into out (a partial
 * Fisher-Yates shuffle of the scratch perm[0..hi-lo)). */
static void distinct(tr_data *d, tr_rng *r, int lo, int hi, int k, int32_t *out) {
    const int m = hi - lo;
    for (int i = 0; i < m; i++) d->perm[i] = lo + i;
    for (int i = 0; i < k; i++) {
        const int j = i + (int)tr_rng_below(r, (uint32_t)(m - i));
        const int32_t x = d->perm[j];
        d->perm[j] = d->perm[i], d->perm[i] = x;
        out[i] = x;
    }
}

static void mqar(tr_data *d, tr_rng *r, int32_t *tok, int32_t *tgt) {
    const int V = d->task.V, n = d->task.pairs, T = d->task.T;
    distinct(d, r, 0, V - 1, n, d->keys);
    for (int i = 0; i < n; i++) d->vals[i] = (int32_t)tr_rng_below(r, (uint32_t)(V - 1));
    for (int i = 0; i < n; i++) tok[2 * i] = d->keys[i], tok[2 * i + 1] = d->vals[i];
    for (int t = 0; t <= 2 * n; t++) tgt[t] = -1;
    tok[2 * n] = V - 1; /* separator */
    for (int t = 2 * n + 1; t < T; t++) {
        const int i = (int)tr_rng_below(r, (uint32_t)n);
        tok[t] = d->keys[i], tgt[t] = d->vals[i];
    }
}

static void mqar_zoology(tr_data *d, tr_rng *r, int32_t *tok, int32_t *tgt) {
    const int V = d->task.V, n = d->task.pairs, T = d->task.T, half = V / 2;
    const int ctx = 2 * n, space = (T - ctx) / 2;
    distinct(d, r, 1, half, n, d->keys);
    distinct(d, r, half, V, n, d->vals);
    for (int t = 0; t < T; t++) tgt[t] = -1;
    for (int i = 0; i < n; i++) tok[2 * i] = d->keys[i], tok[2 * i + 1] = d->vals[i];
    /* Gaps without replacement, weight (g + 1)^(a - 1): one weighted draw at a time, the drawn
     * gap's weight then set to 0 (the law numpy's choice(replace=False, p) samples from). */
    const double a = 0.01;
    for (int g = 0; g < space; g++) d->weight[g] = a * pow((double)(g + 1), a - 1.0);
    for (int i = 0; i < n; i++) {
        double total = 0.0;
        for (int g = 0; g < space; g++) total += d->weight[g];
        double x = tr_rng_uniform(r) * total;
        int g, last = 0;
        for (g = 0; g < space; g++) {
            if (d->weight[g] == 0.0) continue;
            last = g;
            if (x < d->weight[g]) break;
            x -= d->weight[g];
        }
        if (g == space) g = last; /* rounding ran past the end: the last gap still free */
        d->weight[g] = 0.0;
        d->gaps[i] = g;
    }
    for (int t = ctx; t < T; t++) tok[t] = -1;
    for (int i = 0; i < n; i++) {
        const int t = ctx + 2 * d->gaps[i];
        tok[t] = d->keys[i], tgt[t] = d->vals[i];
    }
    for (int t = ctx; t < T; t++)
        if (tok[t] < 0) tok[t] = (int32_t)tr_rng_below(r, (uint32_t)V);
}

static void copy(tr_data *d, tr_rng *r, int32_t *tok, int32_t *tgt, int identity) {
    const int V = d->task.V, T = d->task.T, P = T / 2;
    for (int t = 0; t < P; t++) tok[t] = (int32_t)tr_rng_below(r, (uint32_t)(V - 1));
    tok[P] = V - 1;
    for (int t = P + 1; t < T; t++) tok[t] = tok[t - P - 1];
    for (int t = 0; t < T; t++) tgt[t] = -1;
    if (identity) { /* the copy positions, each scored against its own token */
        for (int t = P + 1; t < T; t++) tgt[t] = tok[t];
    } else {
        for (int i = 0; i < P && P + i < T; i++) tgt[P + i] = tok[i];
    }
}

void tr_data_batch(tr_data *d, tr_rng *r, int B, int32_t *tokens, int32_t *targets) {
    const int T = d->task.T;
    for (int b = 0; b < B; b++) {
        int32_t *tok = tokens + (size_t)b * T, *tgt = targets + (size_t)b * T;
        switch (d->task.kind) {
        case TR_TASK_MQAR: mqar(d, r, tok, tgt); break;
        case TR_TASK_MQAR_ZOOLOGY: mqar_zoology(d, r, tok, tgt); break;
        case TR_TASK_COPY: copy(d, r, tok, tgt, 0); break;
        case TR_TASK_COPY_PAPER: copy(d, r, tok, tgt, 1); break;
        default: break;
        }
    }
}
