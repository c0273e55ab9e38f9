/* vla-train's status line and CSV log (log.h). */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char HEADER[] = "step,lr,loss,train_acc,grad_norm,eval_acc,steps_per_s,tokens_per_s,elapsed_s\n";

/* Rewrites path keeping the header and the rows of steps <= keep (temporary file and rename). */
static int truncate_csv(const char *path, int64_t keep, char *err, size_t errlen) {
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? 1 : (snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno)), -1);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    char line[1024];
    if (!fgets(line, sizeof line, in) || strcmp(line, HEADER) != 0) {
        fclose(in);
        return snprintf(err, errlen, "'%s' is not vla-train's CSV log (its header differs); not touched", path), -1;
    }
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno)), -1;
    }
    fputs(line, out);
    while (fgets(line, sizeof line, in)) {
        char *end;
        long long step = strtoll(line, &end, 10);
        if (end == line || *end != ',' || step > keep) break; /* rows are in step order */
        fputs(line, out);
    }
    fclose(in);
    int bad = fflush(out) != 0 || fsync(fileno(out)) != 0;
    bad |= fclose(out) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return snprintf(err, errlen, "cannot rewrite '%s': %s", path, strerror(errno)), -1;
    }
    return 0;
}

int tl_open(tl_log *g, const char *path, int64_t keep_through, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    g->tty = isatty(STDOUT_FILENO);
    int fresh = keep_through < 0;
    if (!fresh) {
        int r = truncate_csv(path, keep_through, err, errlen);
        if (r < 0) return -1;
        fresh = r == 1;
    }
    g->csv = fopen(path, fresh ? "w" : "a");
    if (!g->csv) return snprintf(err, errlen, "cannot open '%s' for writing: %s", path, strerror(errno)), -1;
    if (fresh) fputs(HEADER, g->csv), fflush(g->csv);
    return 0;
}

static void fmt_duration(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void tl_row_write(tl_log *g, const tl_row *r) {
    char eta[32], tok[32];
    fmt_duration(eta, sizeof eta, r->eta_s);
    if (r->tokens_per_s >= 1e6) snprintf(tok, sizeof tok, "%.2fM", r->tokens_per_s / 1e6);
    else if (r->tokens_per_s >= 1e3) snprintf(tok, sizeof tok, "%.1fk", r->tokens_per_s / 1e3);
    else snprintf(tok, sizeof tok, "%.0f", r->tokens_per_s);
    char line[256];
    int n = snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  acc %.3f  lr %.2e  %.2f steps/s  %s tok/s  ETA %s",
                     (long long)r->step, (long long)r->steps, r->loss, r->train_acc, r->lr, r->steps_per_s, tok, eta);
    if (!isnan(r->eval_acc) && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, "  eval %.4f", r->eval_acc);
    if (g->tty) {
        printf("\r%s\033[K", line); /* rewrite in place, clear what a longer line left */
        g->line_open = 1;
    } else {
        printf("%s\n", line);
    }
    fflush(stdout);
    if (g->csv) {
        fprintf(g->csv, "%lld,%.9g,%.9g,%.9g,%.9g,", (long long)r->step, r->lr, r->loss, r->train_acc, r->grad_norm);
        if (!isnan(r->eval_acc)) fprintf(g->csv, "%.9g", r->eval_acc);
        fprintf(g->csv, ",%.4g,%.4g,%.3f\n", r->steps_per_s, r->tokens_per_s, r->elapsed_s);
        fflush(g->csv);
    }
}

void tl_print(tl_log *g, const char *fmt, ...) {
    if (g->line_open) printf("\n"), g->line_open = 0;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void tl_close(tl_log *g) {
    if (g->line_open) printf("\n"), g->line_open = 0;
    fflush(stdout);
    if (g->csv) fclose(g->csv);
    g->csv = NULL;
}

int tl_last_row(const char *path, int64_t *step, double *loss, double *train_acc) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024], last[1024] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] >= '0' && line[0] <= '9') memcpy(last, line, sizeof last);
    fclose(f);
    long long st;
    double lr;
    if (sscanf(last, "%lld,%lf,%lf,%lf", &st, &lr, loss, train_acc) != 4) return -1;
    *step = st;
    return 0;
}

/* ---- whole files written at once ------------------------------------------------------------ */

/* Opens a temporary file beside path; commit_tmp renames it over path (or removes it on error). */
static FILE *open_tmp(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen) {
    snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
    return f;
}

static int commit_tmp(FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* %.9g, or "nan" whatever the C library prints for a NaN. */
static void put_num(FILE *f, double x) {
    if (isnan(x)) fputs("nan", f);
    else fprintf(f, "%.9g", x);
}

int tl_summary_write(const char *path, const tl_summary *s, char *err, size_t errlen) {
    char tmp[4200];
    FILE *f = open_tmp(path, tmp, sizeof tmp, err, errlen);
    if (!f) return -1;
    fputs("backend,mechanism,task,pairs,seq_len,steps,batch,lr,warmup,seed,eval_batches,eval_batch,final_loss,"
          "final_train_acc,eval_acc,wall_s,ms_per_step,S_norm_mean,S_norm_max,A_norm_mean,A_norm_max,status\n",
          f);
    fprintf(f, "%s,%s,%s,%d,%d,%lld,%d,%.9g,%lld,%llu,%d,%d", s->backend, s->mechanism, s->task, s->pairs, s->seq_len,
            (long long)s->steps, s->batch, s->lr, (long long)s->warmup, (unsigned long long)s->seed, s->eval_batches,
            s->eval_batch);
    const double nums[] = {s->final_loss, s->final_train_acc, s->eval_acc,  s->wall_s,     s->ms_per_step,
                           s->S_norm_mean, s->S_norm_max,     s->A_norm_mean, s->A_norm_max};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) fputc(',', f), put_num(f, nums[i]);
    fprintf(f, ",%s\n", s->status);
    return commit_tmp(f, tmp, path, err, errlen);
}

int tl_profile_write(const char *path, const int64_t *steps, const double *ms, size_t n, char *err, size_t errlen) {
    char tmp[4200];
    FILE *f = open_tmp(path, tmp, sizeof tmp, err, errlen);
    if (!f) return -1;
    fputs("step,attention_ms,gemm_ms,rest_ms,total_ms\n", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%lld,%.4f,%.4f,%.4f,%.4f\n", (long long)steps[i], ms[4 * i], ms[4 * i + 1], ms[4 * i + 2],
                ms[4 * i + 3]);
    return commit_tmp(f, tmp, path, err, errlen);
}
