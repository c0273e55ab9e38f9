/* vla-train: trains the paper's TinyLM (docs/TRAINER.md) with one of libvla's attention
 * mechanisms on a recall or copy task, on any backend, and reports exact-match accuracy.
 *
 *   vla-train --mechanism vla --task mqar --pairs 24 --steps 3000 --out runs/vla-24
 *
 * The model, its forward and backward on the library's ops: train/model.c. The tasks and the
 * random numbers: train/data.c. Checkpoints: train/checkpoint.c. Status line, CSV, the summary
 * and the profile files: train/log.c.
 *
 * One step, as the paper's code: a fresh batch from the training stream, forward, mean
 * cross-entropy over the target positions, backward, global-norm clip, AdamW at the learning
 * rate of the schedule (linear warmup over W steps from 0, then cosine to 0 at N; torch LambdaLR
 * semantics: step s uses lambda(s), s counted from 0). Everything that decides the numbers is a
 * function of the settings and the seed: three random streams are derived from the seed
 * (parameter init, training batches, evaluation batches), and the checkpoint saves the training
 * stream's state, so a resumed run continues the same stream.
 *
 * Contract with scripts: exit 0 when done (or stopped by --stop-after), 1 on bad input or a
 * failure, 2 on a bad command line, 130 when interrupted (SIGINT/SIGTERM: checkpoint saved
 * first). On failure stderr holds one line "vla-train: <what>: <problem>", and no existing file
 * in --out has been changed. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/log.h"
#include "train/model.h"

#include <vla/nn.h>
#include <vla/vla.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

static const char *const PROG = "vla-train";

static int fail(int code, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(int code, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    code = cli_vfail(PROG, what, code, fmt, ap);
    va_end(ap);
    return code;
}

/* A library failure: the library's message, without its "vla_function: " prefix. */
static int lib_fail(const char *what, vla_status s) {
    const char *msg = cli_lib_message(vla_last_message());
    return fail(EXIT_FAILED, what, "%s", msg[0] ? msg : vla_status_string(s));
}

/* ---- options ------------------------------------------------------------------------------ */

typedef struct opts {
    const char *backend, *mechanism, *task, *out, *algo;
    int pairs, seq_len, batch, eval_batches, eval_batch, threads;
    int64_t steps, warmup, seed, eval_every, log_every, ckpt_every, stop_after;
    double lr, weight_decay, clip;
    int resume, profile, help, version;
    unsigned char set[64]; /* set[i]: flags[i] was given */
} opts;

#define OFF(f) offsetof(opts, f)
static const cli_flag flags[] = {
    {"--backend", CLI_STR, OFF(backend), "NAME", "cpu", "backend/device: cpu, cuda[:N], opencl[:P:D], auto"},
    {"--mechanism", CLI_STR, OFF(mechanism), "M", "vla", "softmax|linear|delta|vla|deltanet (below)"},
    {"--task", CLI_STR, OFF(task), "T", "mqar", "mqar|mqar-zoology|copy|copy-paper (below)"},
    {"--algo", CLI_STR, OFF(algo), "A", "auto", "the attention op's algorithm, forward and backward: auto, sequential, chunked"},
    {"--pairs", CLI_INT, OFF(pairs), "N", "24", "key-value pairs (mqar, mqar-zoology)"},
    {"--seq-len", CLI_INT, OFF(seq_len), "T", "mqar 3n+1, mqar-zoology 4n, copy 64", "sequence length"},
    {"--steps", CLI_I64, OFF(steps), "N", "3000", "optimizer steps (the schedule's length)"},
    {"--batch", CLI_INT, OFF(batch), "B", "64", "sequences per step (a fresh batch every step)"},
    {"--lr", CLI_DBL, OFF(lr), "X", "3e-4", "peak learning rate"},
    {"--warmup", CLI_I64, OFF(warmup), "W", "steps/10", "linear warmup steps, then cosine to 0"},
    {"--weight-decay", CLI_DBL, OFF(weight_decay), "X", "1e-2", "AdamW's decoupled weight decay (every parameter)"},
    {"--clip", CLI_DBL, OFF(clip), "X", "1.0", "clip the gradient to this global norm; 0 = off"},
    {"--seed", CLI_I64, OFF(seed), "S", "42", "seed of the init, the training and the evaluation streams"},
    {"--eval-batches", CLI_INT, OFF(eval_batches), "N", "20", "evaluation batches"},
    {"--eval-batch", CLI_INT, OFF(eval_batch), "B", "32", "sequences per evaluation batch"},
    {"--eval-every", CLI_I64, OFF(eval_every), "N", "0: at the end only", "also evaluate every N steps"},
    {"--log-every", CLI_I64, OFF(log_every), "N", "10", "status line and CSV row every N steps (and the last)"},
    {"--ckpt-every", CLI_I64, OFF(ckpt_every), "N", "500", "checkpoint every N steps (and at the end); 0 = end only"},
    {"--stop-after", CLI_I64, OFF(stop_after), "S", "0: run to --steps",
     "stop after step S with a checkpoint, as an interrupt would"},
    {"--threads", CLI_INT, OFF(threads), "N", "0: OpenMP's default", "cpu threads"},
    {"--out", CLI_STR, OFF(out), "DIR", "train-<mechanism>-<task>-seed<seed>",
     "run directory: train.csv, checkpoint.bin, summary.csv (profile.csv)"},
    {"--resume", CLI_BOOL, OFF(resume), NULL, "off", "continue the run in --out from its checkpoint"},
    {"--profile", CLI_BOOL, OFF(profile), NULL, "off",
     "time each step's attention op, matrix products and the rest (below; slows the run)"},
    {"--version", CLI_BOOL, OFF(version), NULL, "", "print the version and exit"},
    {"--help", CLI_BOOL, OFF(help), NULL, "", "print this help and exit"},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))
_Static_assert(sizeof flags / sizeof flags[0] <= sizeof((opts *)0)->set, "opts.set is too small for the flag table");

static void print_help(void) {
    printf("usage: vla-train [options]\n"
           "Trains the paper's TinyLM (V 128, d 128, 4 heads, 2 blocks, FFN 256; docs/TRAINER.md) with one\n"
           "attention mechanism on a recall or copy task and reports exact-match accuracy.\n\n");
    cli_print_flags(flags, N_FLAGS, 22);
    printf(
        "\nMechanisms: softmax (causal, scale 1/sqrt(dh)); linear (elu+1 features); delta (standard DeltaNet,\n"
        "beta = sigmoid(w . x + b) per head; not in the paper: an extra baseline); vla (the library's `paper`\n"
        "preset, u = Wu k_raw, LayerNorm before Wo); deltanet (the paper's DeltaNet: elu+1 on q, k normalised,\n"
        "a gate g = sigmoid(Wg x + bg) per head and state row, S = diag(g) S + (v - S k) k^T, o = S q, no\n"
        "write strength, no denominator; the library's delta-paper op).\n"
        "\nTasks (V = 128, token 127 the separator; targets elsewhere are ignored):\n"
        "  mqar          the paper's MQAR: k1 v1 .. kn vn SEP q1 q2 ..; keys distinct from 0..126, values\n"
        "                uniform with replacement, queries keys drawn with replacement; the target sits at\n"
        "                the query's own position. T = 3n + 1 unless given (T >= 2n + 2).\n"
        "  mqar-zoology  Zoology's MQAR (Arora et al. 2023): keys distinct from 1..63, values distinct from\n"
        "                64..127, every key queried once, queries spread (power law, a = 0.01) over the\n"
        "                rest with random filler between; the answer is the next token after the query.\n"
        "                T = 4n unless given (even, >= 4n).\n"
        "  copy          a prefix of T/2 tokens of 0..126, SEP, the prefix again: next-token prediction of\n"
        "                the copy (targets on the second half only).\n"
        "  copy-paper    the same sequence scored as the paper's code scores its copy task: each position\n"
        "                of the copy has its own input token as target. That is the identity map, which\n"
        "                needs no attention at all; it reproduces the paper's number, it does not test\n"
        "                copying.\n"
        "\nTraining: AdamW (0.9, 0.999, eps 1e-8), mean cross-entropy over target positions, learning\n"
        "rate s/W for step s < W, then 0.5 (1 + cos(pi (s - W) / (N - W))), s counted from 0.\n"
        "Evaluation: exact match (argmax) over the target positions of fresh batches from the seed's\n"
        "evaluation stream (the same batches at every evaluation of a run). Progress: one status line\n"
        "(rewritten in place on a terminal, plain lines otherwise) and DIR/train.csv (columns step, lr,\n"
        "loss, train_acc, grad_norm, eval_acc, steps_per_s, tokens_per_s, elapsed_s). Checkpoints:\n"
        "DIR/checkpoint.bin (weights, AdamW moments, step, the data stream's state), written atomically;\n"
        "--resume continues exactly (bit-identical losses on the CPU with the same thread count). With\n"
        "--resume, settings not given are the checkpoint's; given ones must match it (the reporting\n"
        "flags --log-every, --eval-*, --ckpt-every may change). Ctrl-C saves a checkpoint and stops\n"
        "(exit 130).\n"
        "At the end: the final state norms on the first evaluation batch, one line 'state: layer 0 |S| x |A| y;\n"
        "...' (per layer the mean over batch and heads of ||S_T||_F, and of ||A_T||_F for vla; n/a where a\n"
        "mechanism has no such state), and DIR/summary.csv (one header, one row: backend, mechanism, task,\n"
        "pairs, seq_len, steps, batch, lr, warmup, seed, eval_batches, eval_batch, final_loss,\n"
        "final_train_acc, eval_acc, wall_s, ms_per_step, S_norm_mean, S_norm_max, A_norm_mean, A_norm_max,\n"
        "status), written atomically, also when interrupted (status 'interrupted', what is known; the rest\n"
        "'nan'). wall_s and ms_per_step (the training loop's wall time per step without the evaluations)\n"
        "count this invocation's steps; final_loss and final_train_acc are the last step's. A resumed run\n"
        "with no step left keeps the summary.csv it has.\n"
        "--profile: each step's host time in the attention op (forward and backward), in the matrix products\n"
        "(the nn GEMM calls) and the rest (batch generation and upload, the other ops, the update), with a\n"
        "device synchronisation before every timer read: the profiled run is slower than an unprofiled one\n"
        "(a GPU no longer overlaps its work with the host's), so take the speed from an unprofiled run and\n"
        "the shares from this one. At the end a line 'profile: attention X ms/step (P%%), gemm Y ms/step\n"
        "(P%%), rest Z ms/step (P%%), total T ms/step' (means over the steps, the first left out as warm-up\n"
        "when there are more) and DIR/profile.csv (step,attention_ms,gemm_ms,rest_ms,total_ms: a row a step).\n"
        "Exit status: 0 done, 1 bad input or failure, 2 bad command line, 130 interrupted; on failure\n"
        "one line on stderr and no existing file changed.\n");
}

static int set_value(opts *o, const cli_flag *f, const char *val) {
    const char *bad = cli_store_flag(o, f, val);
    return bad ? fail(EXIT_USAGE, f->name, "%s: '%s'", bad, val) : 0;
}

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu", o->mechanism = "vla", o->task = "mqar", o->algo = "auto";
    o->pairs = 24, o->batch = 64, o->eval_batches = 20, o->eval_batch = 32;
    o->steps = 3000, o->warmup = -1, o->seed = 42, o->log_every = 10, o->ckpt_every = 500;
    o->lr = 3e-4, o->weight_decay = 1e-2, o->clip = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) != 0) return fail(EXIT_USAGE, a, "unexpected argument (flags start with --)");
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int k = -1;
        for (int j = 0; j < N_FLAGS; j++)
            if (strlen(flags[j].name) == len && strncmp(flags[j].name, a, len) == 0) k = j;
        if (k < 0) return fail(EXIT_USAGE, a, "unknown flag (see --help)");
        const cli_flag *f = &flags[k];
        const char *val = NULL;
        if (f->kind == CLI_BOOL) {
            if (eq) return fail(EXIT_USAGE, f->name, "takes no value");
        } else if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc) return fail(EXIT_USAGE, f->name, "needs a value");
            val = argv[++i];
        }
        if (set_value(o, f, val ? val : "")) return EXIT_USAGE;
        o->set[k] = 1;
    }
    return 0;
}

static int given(const opts *o, const char *name) {
    for (int i = 0; i < N_FLAGS; i++)
        if (strcmp(flags[i].name, name) == 0) return o->set[i];
    return 0;
}

/* ---- the run's settings ---------------------------------------------------------------------- */

typedef struct run {
    tm_config cfg;
    tr_task task;
    int64_t steps, warmup;
    int batch;
    uint64_t seed;
    double lr, weight_decay, clip;
} run;

static int check_ranges(const opts *o) {
    if (o->steps < 1) return fail(EXIT_USAGE, "--steps", "%lld: must be >= 1", (long long)o->steps);
    if (o->batch < 1) return fail(EXIT_USAGE, "--batch", "%d: must be >= 1", o->batch);
    if (o->seed < 0) return fail(EXIT_USAGE, "--seed", "%lld: must be >= 0", (long long)o->seed);
    if (!(o->lr >= 0)) return fail(EXIT_USAGE, "--lr", "%g: must be >= 0", o->lr);
    if (!(o->weight_decay >= 0)) return fail(EXIT_USAGE, "--weight-decay", "%g: must be >= 0", o->weight_decay);
    if (!(o->clip >= 0)) return fail(EXIT_USAGE, "--clip", "%g: must be >= 0", o->clip);
    if (o->eval_batches < 1) return fail(EXIT_USAGE, "--eval-batches", "%d: must be >= 1", o->eval_batches);
    if (o->eval_batch < 1) return fail(EXIT_USAGE, "--eval-batch", "%d: must be >= 1", o->eval_batch);
    if (o->eval_every < 0) return fail(EXIT_USAGE, "--eval-every", "%lld: must be >= 0", (long long)o->eval_every);
    if (o->log_every < 1) return fail(EXIT_USAGE, "--log-every", "%lld: must be >= 1", (long long)o->log_every);
    if (o->ckpt_every < 0) return fail(EXIT_USAGE, "--ckpt-every", "%lld: must be >= 0", (long long)o->ckpt_every);
    if (o->stop_after < 0) return fail(EXIT_USAGE, "--stop-after", "%lld: must be >= 0", (long long)o->stop_after);
    if (o->threads < 0) return fail(EXIT_USAGE, "--threads", "%d: must be >= 0", o->threads);
    return 0;
}

/* --algo for this mixer: auto, sequential or chunked where the mechanism has that form (softmax runs
 * its fused kernel only, the paper's DeltaNet its sequential form only). */
static int algo_for(const char *name, tm_mixer mix, vla_algorithm *out) {
    if (vla_algorithm_from_name(name, out) != VLA_OK ||
        (*out != VLA_ALGO_AUTO && *out != VLA_ALGO_SEQUENTIAL && *out != VLA_ALGO_CHUNKED))
        return fail(EXIT_USAGE, "--algo", "'%s': auto, sequential or chunked", name);
    if (mix == TM_SOFTMAX && *out != VLA_ALGO_AUTO)
        return fail(EXIT_USAGE, "--algo", "'%s': softmax runs its fused kernel (auto) only", name);
    if (mix == TM_DELTANET && *out == VLA_ALGO_CHUNKED)
        return fail(EXIT_USAGE, "--algo", "'%s': the paper's DeltaNet has a sequential form only", name);
    return 0;
}

/* The settings from the command line (a fresh run). */
static int settings_from_opts(const opts *o, run *r) {
    tm_mixer mix;
    tr_task_kind tk;
    char err[512];
    if (tm_mixer_from_name(o->mechanism, &mix))
        return fail(EXIT_USAGE, "--mechanism", "unknown mechanism '%s' (softmax, linear, delta, vla, deltanet)",
                    o->mechanism);
    if (tr_task_from_name(o->task, &tk))
        return fail(EXIT_USAGE, "--task", "unknown task '%s' (mqar, mqar-zoology, copy, copy-paper)", o->task);
    tm_config_paper(&r->cfg, mix);
    if (tm_config_check(&r->cfg, err, sizeof err)) return fail(EXIT_FAILED, "--mechanism", "%s", err);
    r->task.kind = tk, r->task.V = r->cfg.V, r->task.pairs = o->pairs;
    r->task.T = given(o, "--seq-len") ? o->seq_len : tr_task_default_T(tk, o->pairs);
    if (tr_task_check(&r->task, err, sizeof err))
        return fail(EXIT_FAILED, given(o, "--seq-len") ? "--seq-len" : "--pairs", "%s", err);
    if (r->task.T > r->cfg.max_T)
        return fail(EXIT_FAILED, "--seq-len", "%d is longer than the position table (%d)", r->task.T, r->cfg.max_T);
    r->steps = o->steps;
    r->warmup = o->warmup >= 0 ? o->warmup : o->steps / 10;
    if (r->warmup > r->steps)
        return fail(EXIT_USAGE, "--warmup", "%lld is longer than --steps %lld", (long long)r->warmup,
                    (long long)r->steps);
    r->batch = o->batch, r->seed = (uint64_t)o->seed;
    r->lr = o->lr, r->weight_decay = o->weight_decay, r->clip = o->clip;
    return 0;
}

static void settings_to_ck(const run *r, ck_state *c) {
    c->mixer = r->cfg.mixer, c->V = r->cfg.V, c->d = r->cfg.d, c->H = r->cfg.H, c->L = r->cfg.L, c->F = r->cfg.F;
    c->max_T = r->cfg.max_T;
    c->task = r->task.kind, c->pairs = r->task.pairs, c->T = r->task.T;
    c->steps = r->steps, c->warmup = r->warmup, c->batch = r->batch, c->seed = r->seed;
    c->lr = r->lr, c->weight_decay = r->weight_decay, c->clip = r->clip;
}

/* A resume: the checkpoint's settings; every flag given must agree with them. */
static int settings_from_ck(opts *o, const ck_state *c, const char *path, run *r) {
    char err[512];
    if (c->mixer < 0 || c->mixer >= TM_N_MIXERS || c->task < 0 || c->task >= TR_N_TASKS)
        return fail(EXIT_FAILED, path, "names a mechanism or task this vla-train does not know");
    tm_config paper;
    tm_config_paper(&paper, (tm_mixer)c->mixer);
    if (c->V != paper.V || c->d != paper.d || c->H != paper.H || c->L != paper.L || c->F != paper.F ||
        c->max_T != paper.max_T)
        return fail(EXIT_FAILED, path, "holds a model of another size (V %lld, d %lld, H %lld, L %lld, F %lld)",
                    (long long)c->V, (long long)c->d, (long long)c->H, (long long)c->L, (long long)c->F);
    r->cfg = paper;
    r->task.kind = (tr_task_kind)c->task, r->task.V = (int)c->V, r->task.pairs = (int)c->pairs, r->task.T = (int)c->T;
    r->steps = c->steps, r->warmup = c->warmup, r->batch = (int)c->batch, r->seed = c->seed;
    r->lr = c->lr, r->weight_decay = c->weight_decay, r->clip = c->clip;
    if (tm_config_check(&r->cfg, err, sizeof err)) return fail(EXIT_FAILED, path, "%s", err);
    if (tr_task_check(&r->task, err, sizeof err)) return fail(EXIT_FAILED, path, "%s", err);
    /* Flags given on the command line must match. */
    const char *mech = tm_mixer_name(r->cfg.mixer), *task = tr_task_name(r->task.kind);
#define MISMATCH(flag, fmt, mine, theirs)                                                                             \
    return fail(EXIT_FAILED, flag, fmt " differs from the checkpoint's " fmt " (%s); drop the flag to take its value", \
                mine, theirs, path)
    if (given(o, "--mechanism") && strcmp(o->mechanism, mech)) MISMATCH("--mechanism", "%s", o->mechanism, mech);
    if (given(o, "--task") && strcmp(o->task, task)) MISMATCH("--task", "%s", o->task, task);
    if (given(o, "--pairs") && o->pairs != r->task.pairs) MISMATCH("--pairs", "%d", o->pairs, r->task.pairs);
    if (given(o, "--seq-len") && o->seq_len != r->task.T) MISMATCH("--seq-len", "%d", o->seq_len, r->task.T);
    if (given(o, "--steps") && o->steps != r->steps)
        MISMATCH("--steps", "%lld", (long long)o->steps, (long long)r->steps);
    if (given(o, "--warmup") && o->warmup != r->warmup)
        MISMATCH("--warmup", "%lld", (long long)o->warmup, (long long)r->warmup);
    if (given(o, "--batch") && o->batch != r->batch) MISMATCH("--batch", "%d", o->batch, r->batch);
    if (given(o, "--seed") && (uint64_t)o->seed != r->seed)
        MISMATCH("--seed", "%llu", (unsigned long long)o->seed, (unsigned long long)r->seed);
    if (given(o, "--lr") && o->lr != r->lr) MISMATCH("--lr", "%g", o->lr, r->lr);
    if (given(o, "--weight-decay") && o->weight_decay != r->weight_decay)
        MISMATCH("--weight-decay", "%g", o->weight_decay, r->weight_decay);
    if (given(o, "--clip") && o->clip != r->clip) MISMATCH("--clip", "%g", o->clip, r->clip);
#undef MISMATCH
    /* Reporting: the checkpoint's unless given (within the ranges check_ranges enforces). */
    if (!given(o, "--log-every") && c->log_every >= 1) o->log_every = c->log_every;
    if (!given(o, "--eval-every") && c->eval_every >= 0) o->eval_every = c->eval_every;
    if (!given(o, "--eval-batches") && c->eval_batches >= 0 && c->eval_batches <= INT_MAX)
        o->eval_batches = (int)c->eval_batches;
    if (!given(o, "--eval-batch") && c->eval_batch >= 1 && c->eval_batch <= INT_MAX) o->eval_batch = (int)c->eval_batch;
    if (!given(o, "--ckpt-every") && c->ckpt_every >= 0) o->ckpt_every = c->ckpt_every;
    if (c->step < 0 || c->step > c->steps)
        return fail(EXIT_FAILED, path, "step %lld is outside 0..%lld", (long long)c->step, (long long)c->steps);
    return 0;
}

/* ---- the run directory ------------------------------------------------------------------------ */

static int mkdir_p(const char *dir, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return snprintf(err, errlen, "path too long"), -1;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            const char c = *s;
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return snprintf(err, errlen, "cannot create directory '%.900s': %s", p, strerror(errno)), -1;
            *s = c;
            if (!c) break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return snprintf(err, errlen, "'%.900s' is not a directory", dir), -1;
    /* Writable: a probe file, removed at once. */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.vla-train-probe.%ld", dir, (long)getpid());
    FILE *f = fopen(probe, "w");
    if (!f) return snprintf(err, errlen, "cannot write into '%.900s': %s", dir, strerror(errno)), -1;
    fclose(f);
    unlink(probe);
    return 0;
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- training ---------------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupt = 0;
static void on_signal(int sig) { g_interrupt = sig; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Independent streams from one seed: the init, the training batches, the evaluation batches. */
enum { STREAM_INIT = 1, STREAM_TRAIN = 2, STREAM_EVAL = 3 };
static void seed_stream(tr_rng *r, uint64_t seed, int stream) {
    tr_rng_seed(r, seed ^ ((uint64_t)stream * 0x9e3779b97f4a7c15ull));
}

typedef struct ctx {
    run r;
    opts o;
    tm_model m;
    tr_data data;
    int32_t *tok, *tgt;
    float *host_logits, *host_params, *host_moments;
    long eval_hits, eval_count; /* of the last evaluation */
    char ckpt_path[4200], csv_path[4200], summary_path[4200], profile_path[4200];
    /* --profile: the model's running sums, and per profiled step its step number and
     * (attention, gemm, rest, total) ms */
    tm_profile prof;
    int64_t *prof_step;
    double *prof_ms;
    size_t prof_n, prof_cap;
} ctx;

/* Exact-match accuracy over the target positions of the evaluation batches. */
static vla_status evaluate(ctx *c, double *acc) {
    tr_rng r;
    seed_stream(&r, c->r.seed, STREAM_EVAL);
    const int B = c->o.eval_batch, T = c->r.task.T;
    long hits = 0, count = 0;
    for (int i = 0; i < c->o.eval_batches; i++) {
        long h, n;
        tr_data_batch(&c->data, &r, B, c->tok, c->tgt);
        vla_status s = tm_set_batch(&c->m, c->tok, c->tgt, B, T);
        if (!s) s = tm_forward(&c->m, B, T);
        if (!s) s = tm_accuracy(&c->m, B, T, c->tgt, c->host_logits, &h, &n);
        if (s) return s;
        hits += h, count += n;
    }
    *acc = count ? (double)hits / (double)count : NAN;
    c->eval_hits = hits, c->eval_count = count;
    return VLA_OK;
}

static int save(ctx *c, int64_t step, const tr_rng *train_rng) {
    const size_t n = c->m.P.total;
    vla_status s = vla_buffer_download(c->m.params, 0, c->host_params, n * sizeof(float));
    if (!s) s = vla_buffer_download(c->m.moments, 0, c->host_moments, 2 * n * sizeof(float));
    if (s) return lib_fail("checkpoint", s);
    ck_state st;
    memset(&st, 0, sizeof st);
    settings_to_ck(&c->r, &st);
    st.log_every = c->o.log_every, st.eval_every = c->o.eval_every, st.eval_batches = c->o.eval_batches;
    st.eval_batch = c->o.eval_batch, st.ckpt_every = c->o.ckpt_every;
    st.step = step, st.train_rng = *train_rng, st.n_params = n;
    char err[1024];
    if (ck_save(c->ckpt_path, &st, c->host_params, c->host_moments, err, sizeof err))
        return fail(EXIT_FAILED, "checkpoint", "%s", err);
    return 0;
}

/* "mqar n=24 T=73" or "copy T=64": the pair count only where the task has pairs. */
static const char *task_words(const tr_task *t, char *buf, size_t n) {
    if (t->kind == TR_TASK_MQAR || t->kind == TR_TASK_MQAR_ZOOLOGY)
        snprintf(buf, n, "%s n=%d T=%d", tr_task_name(t->kind), t->pairs, t->T);
    else
        snprintf(buf, n, "%s T=%d", tr_task_name(t->kind), t->T);
    return buf;
}

/* What the paper reports for this setting (TRAINER.md), or NULL. */
static const char *paper_number(const run *r, char *buf, size_t n) {
    static const int pairs[5] = {8, 16, 24, 32, 48};
    /* Rows indexed by tm_mixer; delta (the standard DeltaNet) is not in the paper. */
    static const char *const t11[TM_N_MIXERS][5] = {{"0.152", "0.091", "0.070", "0.057", "0.043"},
                                                    {"0.150", "0.091", "0.069", "0.056", "0.043"},
                                                    {NULL, NULL, NULL, NULL, NULL},
                                                    {"0.997", "0.990", "0.994", "0.623", "0.044"},
                                                    {"0.965", "0.009", "0.007", "0.008", "0.008"}};
    static const char *const t9[TM_N_MIXERS] = {"0.081 +- 0.002", "0.074 +- 0.003", NULL, "1.000 +- 0.000",
                                                "0.011 +- 0.002"};
    const int mix = r->cfg.mixer;
    if (r->task.kind == TR_TASK_COPY_PAPER)
        return snprintf(buf, n, "paper (Table 7): every model at 100%% by about step 150"), buf;
    if (r->task.kind != TR_TASK_MQAR || r->task.T != 3 * r->task.pairs + 1 || mix < 0 || mix >= TM_N_MIXERS)
        return NULL;
    if (r->task.pairs == 24 && r->steps == 3000 && t9[mix])
        return snprintf(buf, n, "paper (Table 9, n = 24, seeds 42/123/999): %s", t9[mix]), buf;
    if (r->steps == 1000)
        for (int i = 0; i < 5; i++)
            if (r->task.pairs == pairs[i] && t11[mix][i])
                return snprintf(buf, n, "paper (Table 11, n = %d, 1000 steps, seed 42): %s", pairs[i], t11[mix][i]),
                       buf;
    return NULL;
}

static double now_ms(void) { return 1e3 * now_s(); }

/* "state: layer 0 |S| x |A| y; layer 1 ...": the final state norms (tm_state_norms) of the
 * first evaluation batch; their mean and max over layers into the summary. */
static vla_status state_norms(ctx *c, tl_log *log, tl_summary *sum) {
    tr_rng r;
    seed_stream(&r, c->r.seed, STREAM_EVAL);
    const int B = c->o.eval_batch, T = c->r.task.T, L = c->r.cfg.L;
    double S[TM_MAX_LAYERS], A[TM_MAX_LAYERS];
    tr_data_batch(&c->data, &r, B, c->tok, c->tgt);
    vla_status s = tm_set_batch(&c->m, c->tok, c->tgt, B, T);
    if (!s) s = tm_state_norms(&c->m, B, T, S, A);
    if (s) return s;
    char line[64 * TM_MAX_LAYERS + 16] = "state:";
    size_t n = strlen(line);
    sum->S_norm_mean = sum->A_norm_mean = 0.0, sum->S_norm_max = sum->A_norm_max = -INFINITY;
    for (int l = 0; l < L; l++) {
        char sv[32] = "n/a", av[32] = "n/a";
        if (!isnan(S[l])) snprintf(sv, sizeof sv, "%.4g", S[l]);
        if (!isnan(A[l])) snprintf(av, sizeof av, "%.4g", A[l]);
        n += (size_t)snprintf(line + n, sizeof line - n, "%s layer %d |S| %s |A| %s", l ? ";" : "", l, sv, av);
        sum->S_norm_mean += S[l] / L, sum->A_norm_mean += A[l] / L; /* NaN stays NaN: no such state */
        sum->S_norm_max = fmax(sum->S_norm_max, S[l]), sum->A_norm_max = fmax(sum->A_norm_max, A[l]);
    }
    if (isnan(S[0])) sum->S_norm_max = NAN; /* fmax drops NaNs; a mechanism has a state in every layer or none */
    if (isnan(A[0])) sum->A_norm_max = NAN;
    tl_print(log, "%s\n", line);
    return VLA_OK;
}

/* --profile's closing line and DIR/profile.csv. Means over the profiled steps, the first left out
 * when there are more (it compiles kernels, captures graphs, warms caches). */
static int profile_report(ctx *c, tl_log *log) {
    if (!c->o.profile || !c->prof_n) return 0;
    const size_t first = c->prof_n > 1 ? 1 : 0, n = c->prof_n - first;
    double mean[4] = {0, 0, 0, 0};
    for (size_t i = first; i < c->prof_n; i++)
        for (int j = 0; j < 4; j++) mean[j] += c->prof_ms[4 * i + j] / (double)n;
    const double tot = mean[3] > 0 ? mean[3] : 1.0;
    tl_print(log,
             "profile: attention %.3f ms/step (%.1f%%), gemm %.3f ms/step (%.1f%%), rest %.3f ms/step (%.1f%%), "
             "total %.3f ms/step (mean of %zu steps%s; synchronised timers: slower than an unprofiled run)\n",
             mean[0], 100 * mean[0] / tot, mean[1], 100 * mean[1] / tot, mean[2], 100 * mean[2] / tot, mean[3], n,
             first ? ", the first left out" : "");
    char err[1024];
    if (tl_profile_write(c->profile_path, c->prof_step, c->prof_ms, c->prof_n, err, sizeof err))
        return fail(EXIT_FAILED, "--profile", "%s", err);
    return 0;
}

static int train(ctx *c, int64_t step, tr_rng train_rng) {
    const run *r = &c->r;
    const opts *o = &c->o;
    const int B = r->batch, T = r->task.T;
    const int64_t N = r->steps, stop = o->stop_after > 0 && o->stop_after < N ? o->stop_after : N;
    tm_optim opt = {r->weight_decay, r->clip, 0.9, 0.999, 1e-8};
    char err[1024];
    tl_log log;
    if (o->profile) {
        c->prof_cap = (size_t)(stop > step ? stop - step : 0);
        c->prof_step = malloc((c->prof_cap ? c->prof_cap : 1) * sizeof *c->prof_step);
        c->prof_ms = malloc((c->prof_cap ? c->prof_cap : 1) * 4 * sizeof *c->prof_ms);
        if (!c->prof_step || !c->prof_ms) return fail(EXIT_FAILED, "--profile", "out of host memory");
        c->m.prof = &c->prof;
    }
    if (tl_open(&log, c->csv_path, o->resume ? step : -1, err, sizeof err))
        return fail(EXIT_FAILED, "--out", "%s", err);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills at once (the checkpoint write is atomic) */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc = 0;
    vla_status s = VLA_OK;
    const char *what = NULL;
    double t_last = now_s(), t_start = t_last, eval_s = 0.0, eval_total_s = 0.0;
    const int64_t first_step = step;
    int64_t s_last = step, last_logged = -1;
    long hits = 0, count = 0;
    double eval_acc = NAN, last_eval_acc = NAN, last_train_acc = NAN;
    while (step < N) {
        /* --profile: the step's clock starts with the device idle and stops after its last read. */
        double p0 = 0.0;
        const double attn0 = c->prof.attention_ms, gemm0 = c->prof.gemm_ms;
        what = "training";
        if (o->profile) {
            if ((s = vla_backend_synchronize(c->m.be))) break;
            p0 = now_ms();
        }
        tr_data_batch(&c->data, &train_rng, B, c->tok, c->tgt);
        const int logged = (step + 1) % o->log_every == 0 || step + 1 == N;
        const double lr = tm_lr_at(r->lr, step, N, r->warmup);
        /* The accuracy reads the logits before the backward turns them into their gradient. */
        s = tm_set_batch(&c->m, c->tok, c->tgt, B, T);
        if (!s) s = tm_forward(&c->m, B, T);
        if (!s && logged) s = tm_accuracy(&c->m, B, T, c->tgt, c->host_logits, &hits, &count);
        if (!s) s = tm_backward(&c->m, B, T);
        if (!s) s = tm_update(&c->m, &opt, lr, step + 1);
        if (s) break;
        step++;
        float loss = NAN, norm = NAN;
        if (logged) {
            s = tm_read_loss(&c->m, &loss);
            if (!s && r->clip > 0) s = vla_buffer_download(c->m.norm, 0, &norm, sizeof norm);
            if (s) break;
        }
        if (o->profile && c->prof_n < c->prof_cap) {
            if ((s = vla_backend_synchronize(c->m.be))) break;
            double *row = c->prof_ms + 4 * c->prof_n;
            row[3] = now_ms() - p0;
            row[0] = c->prof.attention_ms - attn0, row[1] = c->prof.gemm_ms - gemm0;
            row[2] = row[3] - row[0] - row[1];
            c->prof_step[c->prof_n++] = step;
        }
        if (logged) {
            eval_acc = NAN;
            if (step == N || (o->eval_every > 0 && step % o->eval_every == 0)) {
                const double t0 = now_s();
                what = "evaluation";
                if ((s = evaluate(c, &eval_acc))) break;
                eval_s += now_s() - t0;
                last_eval_acc = eval_acc;
            }
            const double t = now_s(), dt = t - t_last - eval_s;
            tl_row row;
            row.step = step, row.steps = N, row.lr = lr, row.loss = loss;
            row.train_acc = count ? (double)hits / (double)count : NAN;
            row.grad_norm = norm, row.eval_acc = eval_acc;
            row.steps_per_s = dt > 0 ? (double)(step - s_last) / dt : NAN;
            row.tokens_per_s = row.steps_per_s * B * T;
            row.elapsed_s = t - t_start;
            row.eta_s = row.steps_per_s > 0 ? (double)(N - step) / row.steps_per_s : NAN;
            tl_row_write(&log, &row);
            t_last = t, s_last = step, eval_total_s += eval_s, eval_s = 0.0;
            last_logged = step, last_train_acc = row.train_acc;
        }
        const int stopping = g_interrupt || step == stop;
        if (stopping || step == N || (o->ckpt_every > 0 && step % o->ckpt_every == 0)) {
            if ((rc = save(c, step, &train_rng))) break;
        }
        if (g_interrupt) {
            tl_print(&log,
                     "interrupted after step %lld of %lld: checkpoint saved in %s; continue with --resume --out %s\n",
                     (long long)step, (long long)N, c->o.out, c->o.out);
            rc = EXIT_INTERRUPTED;
            break;
        }
        if (step == stop && step < N) {
            tl_print(&log, "stopped after step %lld of %lld (--stop-after): checkpoint saved in %s; continue with "
                           "--resume --out %s\n",
                     (long long)step, (long long)N, c->o.out, c->o.out);
            break;
        }
    }
    const double loop_s = now_s() - t_start - eval_total_s - eval_s;
    if (!rc && s) {
        tl_close(&log);
        return lib_fail(what, s);
    }
    if (rc && rc != EXIT_INTERRUPTED) { /* a failed checkpoint: no summary */
        tl_close(&log);
        return rc;
    }
    tl_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.final_loss = sum.final_train_acc = sum.eval_acc = sum.ms_per_step = NAN;
    sum.S_norm_mean = sum.S_norm_max = sum.A_norm_mean = sum.A_norm_max = NAN;
    if (step > first_step) { /* the loss of the last step done; its accuracy if it was logged */
        float loss;
        if ((s = tm_read_loss(&c->m, &loss))) {
            tl_close(&log);
            return lib_fail("training", s);
        }
        sum.final_loss = loss;
        if (last_logged == step) sum.final_train_acc = last_train_acc;
        sum.ms_per_step = 1e3 * loop_s / (double)(step - first_step);
    } else { /* a resumed run that had no step left: the last logged row, if it is this step's */
        int64_t st;
        double loss, acc;
        if (tl_last_row(c->csv_path, &st, &loss, &acc) == 0 && st == step)
            sum.final_loss = loss, sum.final_train_acc = acc;
    }
    sum.eval_acc = last_eval_acc;
    if (!rc && step == N) {
        long h = 0, n = 0;
        if (isnan(eval_acc) && (s = evaluate(c, &eval_acc))) {
            tl_close(&log);
            return lib_fail("evaluation", s);
        }
        sum.eval_acc = eval_acc;
        h = c->eval_hits, n = c->eval_count;
        char tw[96];
        tl_print(&log, "eval: %s %s seed %llu, %lld steps: accuracy %.4f (%ld of %ld target positions, %d "
                       "batches of %d)\n",
                 tm_mixer_name(r->cfg.mixer), task_words(&r->task, tw, sizeof tw),
                 (unsigned long long)r->seed, (long long)N, eval_acc, h, n, o->eval_batches, o->eval_batch);
        char pb[160];
        if (paper_number(r, pb, sizeof pb)) tl_print(&log, "      %s\n", pb);
        c->m.prof = NULL; /* the closing forward is not a training step */
        if ((s = state_norms(c, &log, &sum))) {
            tl_close(&log);
            return lib_fail("state norms", s);
        }
    }
    int prc = profile_report(c, &log);
    if (prc) {
        tl_close(&log);
        return prc;
    }
    sum.backend = vla_backend_name(c->m.be), sum.mechanism = tm_mixer_name(r->cfg.mixer);
    sum.task = tr_task_name(r->task.kind);
    sum.pairs = r->task.kind == TR_TASK_MQAR || r->task.kind == TR_TASK_MQAR_ZOOLOGY ? r->task.pairs : 0;
    sum.seq_len = T, sum.steps = N, sum.batch = B, sum.lr = r->lr, sum.warmup = r->warmup, sum.seed = r->seed;
    sum.eval_batches = o->eval_batches, sum.eval_batch = o->eval_batch;
    sum.wall_s = now_s() - t_start;
    sum.status = step == N && !rc ? "done" : "interrupted";
    tl_close(&log);
    /* A resumed run that had no step left keeps the summary written when it finished (its timings). */
    if (first_step == N && exists(c->summary_path)) return rc;
    if (tl_summary_write(c->summary_path, &sum, err, sizeof err)) return fail(EXIT_FAILED, "--out", "%s", err);
    return rc;
}

int main(int argc, char **argv) {
    static ctx c; /* large paths: off the stack */
    opts *o = &c.o;
    int rc = parse_args(argc, argv, o);
    if (rc) return rc;
    if (o->help) return print_help(), 0;
    if (o->version) return printf("vla-train (libvla %s)\n", vla_version()), 0;
    if ((rc = check_ranges(o))) return rc;

    char err[1024], outbuf[512];
    if (!o->out) {
        snprintf(outbuf, sizeof outbuf, "train-%s-%s-seed%lld", o->mechanism, o->task, (long long)o->seed);
        o->out = outbuf;
    }
    snprintf(c.ckpt_path, sizeof c.ckpt_path, "%s/checkpoint.bin", o->out);
    snprintf(c.csv_path, sizeof c.csv_path, "%s/train.csv", o->out);
    snprintf(c.summary_path, sizeof c.summary_path, "%s/summary.csv", o->out);
    snprintf(c.profile_path, sizeof c.profile_path, "%s/profile.csv", o->out);

    /* Settings: from the command line, or (resume) from the checkpoint. Nothing is written until
     * they are known to be good. */
    ck_state ck;
    float *ck_params = NULL, *ck_moments = NULL;
    memset(&ck, 0, sizeof ck);
    if (o->resume) {
        int r = ck_load(c.ckpt_path, &ck, &ck_params, &ck_moments, err, sizeof err);
        if (r == 1)
            return fail(EXIT_FAILED, "--resume", "no checkpoint to resume in '%s' (%s is missing)", o->out,
                        c.ckpt_path);
        if (r < 0) return fail(EXIT_FAILED, "--resume", "%s", err);
        if ((rc = settings_from_ck(o, &ck, c.ckpt_path, &c.r))) goto out_done;
    } else {
        if ((rc = settings_from_opts(o, &c.r))) return rc;
        if (exists(c.ckpt_path) || exists(c.csv_path))
            return fail(EXIT_FAILED, "--out",
                        "'%s' already holds a run (%s): pass --resume to continue it, or choose another directory",
                        o->out, exists(c.ckpt_path) ? "checkpoint.bin" : "train.csv");
    }
    vla_backend *be = NULL;
    vla_status s = vla_backend_open(o->backend, &be);
    if (s) {
        rc = lib_fail("--backend", s);
        goto out_done;
    }
    if (o->threads && (s = vla_backend_set_threads(be, o->threads))) {
        rc = lib_fail("--threads", s);
        goto out_close;
    }
    const run *r = &c.r;
    const int Bmax = r->batch > o->eval_batch ? r->batch : o->eval_batch, T = r->task.T;
    vla_algorithm algo;
    if ((rc = algo_for(o->algo, r->cfg.mixer, &algo))) goto out_close;
    if ((s = tm_create(&c.m, be, &r->cfg, Bmax, T))) {
        rc = lib_fail("model", s);
        goto out_close;
    }
    c.m.desc.algorithm = algo;
    const size_t n = c.m.P.total, M = (size_t)Bmax * T;
    c.tok = malloc(M * sizeof *c.tok), c.tgt = malloc(M * sizeof *c.tgt);
    c.host_logits = malloc(M * (size_t)r->cfg.V * sizeof(float));
    c.host_params = malloc(n * sizeof(float)), c.host_moments = malloc(2 * n * sizeof(float));
    if (!c.tok || !c.tgt || !c.host_logits || !c.host_params || !c.host_moments || tr_data_init(&c.data, &r->task)) {
        rc = fail(EXIT_FAILED, NULL, "out of host memory");
        goto out_free;
    }

    /* The run directory last: a run refused for its backend or its size leaves nothing behind. */
    if (mkdir_p(o->out, err, sizeof err)) {
        rc = fail(EXIT_FAILED, "--out", "%s", err);
        goto out_free;
    }

    tr_rng train_rng;
    int64_t step = 0;
    if (o->resume) {
        if (ck.n_params != n) {
            rc = fail(EXIT_FAILED, c.ckpt_path, "holds %llu parameters; this model has %zu",
                      (unsigned long long)ck.n_params, n);
            goto out_free;
        }
        s = vla_buffer_upload(c.m.params, 0, ck_params, n * sizeof(float));
        if (!s) s = vla_buffer_upload(c.m.moments, 0, ck_moments, 2 * n * sizeof(float));
        if (s) {
            rc = lib_fail("--resume", s);
            goto out_free;
        }
        train_rng = ck.train_rng, step = ck.step;
        if (o->stop_after > 0 && o->stop_after <= step && step < r->steps) {
            rc = fail(EXIT_USAGE, "--stop-after", "%lld is not after the checkpoint's step %lld",
                      (long long)o->stop_after, (long long)step);
            goto out_free;
        }
    } else {
        tr_rng init;
        seed_stream(&init, r->seed, STREAM_INIT);
        if ((s = tm_init_params(&c.m, &init))) {
            rc = lib_fail("init", s);
            goto out_free;
        }
        seed_stream(&train_rng, r->seed, STREAM_TRAIN);
    }

    printf("vla-train: TinyLM %s (d %d, H %d, L %d, FFN %d, V %d; %zu parameters) on %s (%s)\n",
           tm_mixer_name(r->cfg.mixer), r->cfg.d, r->cfg.H, r->cfg.L, r->cfg.F, r->cfg.V, n, vla_backend_name(be),
           vla_backend_device(be));
    char tw[96];
    printf("task %s; batch %d; %lld steps, lr %g, warmup %lld, cosine; AdamW wd %g, clip %g; seed %llu\n",
           task_words(&r->task, tw, sizeof tw), r->batch, (long long)r->steps, r->lr, (long long)r->warmup,
           r->weight_decay, r->clip, (unsigned long long)r->seed);
    if (algo != VLA_ALGO_AUTO) printf("attention: --algo %s, forward and backward\n", o->algo);
    if (o->resume) printf("resuming %s at step %lld\n", c.ckpt_path, (long long)step);
    printf("out: %s (train.csv, checkpoint.bin, summary.csv%s)\n", o->out, o->profile ? ", profile.csv" : "");
    fflush(stdout);
    rc = train(&c, step, train_rng);

out_free:
    tr_data_free(&c.data);
    free(c.tok), free(c.tgt), free(c.host_logits), free(c.host_params), free(c.host_moments);
    free(c.prof_step), free(c.prof_ms);
    tm_destroy(&c.m);
out_close:
    vla_backend_close(be);
out_done:
    free(ck_params), free(ck_moments);
    return rc;
}
