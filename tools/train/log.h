/* vla-train's progress: the status line (one line rewritten in place on a terminal, plain lines
 * otherwise) and the CSV log of every logged step; the run's summary and profile files.
 *
 * CSV columns (header line first): step,lr,loss,train_acc,grad_norm,eval_acc,steps_per_s,
 * tokens_per_s,elapsed_s. The first five are a function of the run's settings alone (on the CPU
 * they are bit-identical between a run and the same run stopped and resumed); eval_acc is empty
 * on rows without an evaluation; the last three are timings. Floats are printed with %.9g, which
 * round-trips a float32 exactly. */
#ifndef VLA_TRAIN_LOG_H
#define VLA_TRAIN_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tl_row {
    int64_t step, steps; /* steps done, of steps */
    double lr, loss, train_acc, grad_norm;
    double eval_acc; /* NaN: no evaluation at this step */
    double steps_per_s, tokens_per_s, elapsed_s, eta_s;
} tl_row;

typedef struct tl_log {
    FILE *csv;
    int tty;       /* stdout is a terminal: the status line is rewritten in place */
    int line_open; /* a status line is on screen without its newline */
} tl_log;

/* Opens path for the CSV. keep_through < 0: a new file (its header written). keep_through >= 0
 * (a resume): the existing file keeps its header and the rows of steps <= keep_through (later rows
 * were logged after the checkpoint and will be logged again); rewritten atomically. A missing file
 * is created. 0, or -1 with one line in err (a file that is not this CSV is left untouched). */
int tl_open(tl_log *g, const char *path, int64_t keep_through, char *err, size_t errlen);
/* The status line for a logged step, and its CSV row (flushed). */
void tl_row_write(tl_log *g, const tl_row *r);
/* Prints a full line (ending any status line first). printf-style. */
void tl_print(tl_log *g, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void tl_close(tl_log *g);

/* The last row of the CSV log at path: its step, loss and train_acc. 0, or -1 when there is no
 * row (or no file). */
int tl_last_row(const char *path, int64_t *step, double *loss, double *train_acc);

/* DIR/summary.csv: one header line and one row describing a run (the experiment scripts read it):
 *   backend,mechanism,task,pairs,seq_len,steps,batch,lr,warmup,seed,eval_batches,eval_batch,
 *   final_loss,final_train_acc,eval_acc,wall_s,ms_per_step,S_norm_mean,S_norm_max,A_norm_mean,
 *   A_norm_max,status
 * NaN doubles are written "nan"; status is "done" or "interrupted". Written atomically (a
 * temporary file, then rename). 0, or -1 with one line in err. */
typedef struct tl_summary {
    const char *backend, *mechanism, *task, *status;
    int pairs, seq_len, batch, eval_batches, eval_batch;
    int64_t steps, warmup;
    uint64_t seed;
    double lr, final_loss, final_train_acc, eval_acc, wall_s, ms_per_step;
    double S_norm_mean, S_norm_max, A_norm_mean, A_norm_max;
} tl_summary;
int tl_summary_write(const char *path, const tl_summary *s, char *err, size_t errlen);

/* DIR/profile.csv (vla-train --profile): a header and one row per profiled step,
 *   step,attention_ms,gemm_ms,rest_ms,total_ms
 * (host milliseconds; rest = total - attention - gemm). steps[i] and ms[4 i .. 4 i + 3] are row
 * i. Written atomically. 0, or -1 with one line in err. */
int tl_profile_write(const char *path, const int64_t *steps, const double *ms, size_t n, char *err, size_t errlen);

#endif
