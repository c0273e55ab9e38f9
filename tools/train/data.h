/* The trainer's tasks and its random numbers: host C, deterministic from a seed, so that a
 * checkpoint that saves the generator's state resumes the exact same stream of batches.
 *
 * Every task writes, per sequence b, tokens[b, 0..T-1] in 0..V-1 and targets[b, 0..T-1] in
 * 0..V-1 or -1 (no target: ignored by the loss and by the accuracy). Layouts (docs/TRAINER.md):
 *
 *   mqar          the paper's MQAR. SEP = V-1. Keys: the first n of a random permutation of
 *                 0..V-2 (distinct); values: uniform on 0..V-2 with replacement. Layout
 *                 k1 v1 .. kn vn SEP q1 .. q_{T-2n-1}, each query a key drawn uniformly with
 *                 replacement; the target sits at the query's own position (its value).
 *                 T = 3n + 1 unless given; T >= 2n + 2 (at least one query); n <= V - 1.
 *   mqar-zoology  Arora et al. (Zoology, 2023), as its multiquery_ar generator: keys distinct
 *                 from 1..V/2-1, values distinct from V/2..V-1, layout k1 v1 .. kn vn then
 *                 T - 2n positions where every key is queried once at an even offset 2 g_i,
 *                 the gaps g_i drawn without replacement from 0..(T-2n)/2-1 with weight
 *                 proportional to (g+1)^(a-1), a = 0.01 (queries crowd the start, as Zoology's
 *                 power_a); every other position is filler drawn uniformly from 0..V-1. The
 *                 target of a query position is its key's value: the next token to predict.
 *                 T = 4n unless given; T even, T >= 4n, n <= V/2 - 1.
 *   copy          a prefix of P = T/2 tokens uniform on 0..V-2, SEP at position P, then the
 *                 prefix again; position P + i has target prefix[i] (next-token prediction of
 *                 the copy), for i < min(P, T - P). T >= 4.
 *   copy-paper    the same sequence scored as the paper's code scores its copy task (notebook
 *                 07, make_copy_batch): every copy position P+1..T-1 has its own input token as
 *                 target. That is the identity map (VLA-MATH 4): it needs no memory at all; it is
 *                 offered to reproduce the paper's number, not to test copying. */
#ifndef VLA_TRAIN_DATA_H
#define VLA_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

/* xoshiro256** seeded through splitmix64: 32 bytes of state, saved whole in a checkpoint. */
typedef struct tr_rng {
    uint64_t s[4];
} tr_rng;

void tr_rng_seed(tr_rng *r, uint64_t seed);
uint64_t tr_rng_next(tr_rng *r);
/* Uniform on 0..n-1, n >= 1, without modulo bias. */
uint32_t tr_rng_below(tr_rng *r, uint32_t n);
/* Uniform in [0, 1), 53 bits. */
double tr_rng_uniform(tr_rng *r);
/* N(0, 1) by Box-Muller (no cached second value: the state is the 32 bytes alone). */
double tr_rng_normal(tr_rng *r);

typedef enum tr_task_kind {
    TR_TASK_MQAR = 0,
    TR_TASK_MQAR_ZOOLOGY,
    TR_TASK_COPY,
    TR_TASK_COPY_PAPER,
    TR_N_TASKS
} tr_task_kind;

typedef struct tr_task {
    tr_task_kind kind;
    int V;     /* vocabulary; the separator (mqar, copy) is V - 1 */
    int pairs; /* n: key-value pairs (mqar, mqar-zoology) */
    int T;     /* sequence length */
} tr_task;

const char *tr_task_name(tr_task_kind k);
/* 0 and *out set, or -1 for an unknown name. */
int tr_task_from_name(const char *name, tr_task_kind *out);
/* The default T of a task for n pairs (mqar 3n + 1, mqar-zoology 4n, copy 64). */
int tr_task_default_T(tr_task_kind k, int pairs);
/* 0 if the task is well formed, else -1 with one line in err (what is wrong and what fits). */
int tr_task_check(const tr_task *t, char *err, size_t errlen);

/* A generator: the task and its scratch (allocated once, never per batch). */
typedef struct tr_data {
    tr_task task;
    int32_t *perm;  /* [V] key permutation / distinct draws */
    int32_t *keys;  /* [V] */
    int32_t *vals;  /* [V] */
    double *weight; /* [T] zoology gap weights */
    int32_t *gaps;  /* [T] */
} tr_data;

/* 0, or -1 (allocation failed or the task is malformed: call tr_task_check first). */
int tr_data_init(tr_data *d, const tr_task *t);
void tr_data_free(tr_data *d);
/* One batch of B sequences from r: tokens[B, T], targets[B, T] (int32). */
void tr_data_batch(tr_data *d, tr_rng *r, int B, int32_t *tokens, int32_t *targets);

#endif
