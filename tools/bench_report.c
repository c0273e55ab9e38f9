/* vla-bench's results (bench_report.h): the summary of each shape (crossover with softmax,
 * slope of log latency vs log T, VLA's fastest algorithm vs sequential at T = 4096) and the
 * three formats, md, csv and json.
 *
 * CSV: columns backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,
 * tokens_per_s,gflops,gbps. When a run skipped a point, the header gains a trailing `note`
 * column and every row has it (empty for measured rows; the skipped row's numeric fields are
 * empty). Commas inside a field (the device description) are written as ';', so every row
 * splits on commas.
 * --backward adds, before the note, fwdbwd_median_ms,fwdbwd_min_ms,fwdbwd_max_ms,ratio,bwd_gflop,
 * fwdbwd_gflops,fwdbwd_gbps: forward + backward timed in one interval, ratio = its median over the
 * forward's, the backward's FLOP count (GFLOP, bench_bwd_flops), and the rates of forward and
 * backward's work together. The md table gains the same columns; each json result a "backward"
 * object. */
#include "bench_report.h"

#include "bench_common.h"
#include "bench_count.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef VLA_BENCH_BUILD_TYPE
#define VLA_BENCH_BUILD_TYPE "unknown"
#endif

#if defined(__clang__)
#define BENCH_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER "unknown compiler"
#endif

/* ---- summary --------------------------------------------------------------------------------- */

typedef struct series_summary {
    int series;
    double slope;
    int slope_n;
    double slope_from; /* the smallest T fitted */
    bench_cross cross;
    double t_cross;
    int has_cross;     /* 1: a linear-time series compared with softmax; -1: no softmax in the run */
    double T_min, T_max; /* the common T range compared */
} series_summary;

typedef struct shape_summary {
    series_summary s[BENCH_MAX_SERIES];
    int n;
    /* VLA at T = 4096: fastest algorithm vs sequential */
    int ratio_state;   /* 0 ok; 1 T = 4096 not in run; 2 sequential not measured; 3 no VLA */
    int fastest;       /* series index */
    double ratio;
    double algo_ratio[BENCH_MAX_SERIES]; /* sequential / algo for each VLA series (NAN if not measured) */
} shape_summary;

/* The latencies a summary reads: the forward's medians (fb = 0) or forward + backward's (fb = 1). */
static int points_of(const bench *x, int sh, int si, int fb, double *T, double *ms, int max) {
    int n = bench_series_points(x, sh, si, T, ms, max);
    if (fb)
        for (int i = 0; i < n; i++) ms[i] = NAN;
    for (int i = 0, k = 0; fb && i < x->npts && k < n; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && !p->skipped && p->nsamples > 0) ms[k++] = p->fb_median;
    }
    return n;
}
static double median_of(const bench *x, int sh, int si, int T, int fb) {
    if (!fb) return bench_median_at(x, sh, si, T);
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && p->T == T && !p->skipped && p->nsamples > 0) return p->fb_median;
    }
    return NAN;
}

/* The summary of shape sh from the forward's latencies (fb = 0) or forward + backward's (fb = 1,
 * --backward: softmax's fwd+bwd against each series' fwd+bwd). */
static void summarize(const bench *x, int sh, shape_summary *out, int fb) {
    memset(out, 0, sizeof *out);
    const int smx = bench_softmax_series(x);
    for (int si = 0; si < x->nser; si++) {
        series_summary *s = &out->s[out->n++];
        s->series = si;
        double T[256], ms[256];
        int n = points_of(x, sh, si, fb, T, ms, 256);
        s->slope = bench_slope(T, ms, n, SLOPE_T_MIN, SLOPE_MIN_POINTS, &s->slope_n);
        int big = 0;
        for (int i = 0; i < n; i++) big += T[i] >= SLOPE_T_MIN;
        s->slope_from = n ? (big >= SLOPE_MIN_POINTS ? SLOPE_T_MIN : T[0]) : NAN;
        if (si == smx) continue;
        if (smx < 0) {
            s->has_cross = -1;
            continue;
        }
        /* Common T of this series and softmax. */
        double cT[256], cl[256], cs[256];
        int m = 0;
        for (int i = 0; i < n; i++) {
            const double soft = median_of(x, sh, smx, (int)T[i], fb);
            if (!isnan(soft)) {
                cT[m] = T[i];
                cl[m] = ms[i];
                cs[m] = soft;
                m++;
            }
        }
        s->has_cross = 1;
        s->cross = bench_crossover(cT, cl, cs, m, &s->t_cross);
        s->T_min = m ? cT[0] : NAN;
        s->T_max = m ? cT[m - 1] : NAN;
    }
    /* Fused-vs-sequential, VLA, T = 4096. */
    int in_run = 0;
    for (int i = 0; i < x->npts; i++) in_run |= x->pts[i].shape == sh && x->pts[i].T == RATIO_T;
    int seq = -1, nvla = 0;
    for (int si = 0; si < x->nser; si++) {
        out->algo_ratio[si] = NAN;
        if (x->ser[si].m != VLA_MECH_VLA) continue;
        nvla++;
        if (x->ser[si].a == VLA_ALGO_SEQUENTIAL) seq = si;
    }
    out->fastest = -1;
    if (!nvla) out->ratio_state = 3;
    else if (!in_run) out->ratio_state = 1;
    else if (seq < 0 || isnan(median_of(x, sh, seq, RATIO_T, fb))) out->ratio_state = 2;
    else {
        const double tseq = median_of(x, sh, seq, RATIO_T, fb);
        double best = INFINITY;
        for (int si = 0; si < x->nser; si++) {
            if (x->ser[si].m != VLA_MECH_VLA) continue;
            const double t = median_of(x, sh, si, RATIO_T, fb);
            if (isnan(t)) continue;
            out->algo_ratio[si] = tseq / t;
            if (t < best) {
                best = t;
                out->fastest = si;
            }
        }
        out->ratio = tseq / best;
    }
}

/* --backward: (fwd+bwd)/fwd of series si at the largest T measured in shape sh (*T gets it), or NAN. */
static double last_ratio(const bench *x, int sh, int si, int *T) {
    double r = NAN;
    *T = 0;
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && !p->skipped && p->nsamples > 0 && p->T > *T) *T = p->T, r = p->ratio;
    }
    return r;
}

/* The crossover in words. */
static void cross_text(const series_summary *s, char *buf, size_t n) {
    if (s->has_cross == 0) snprintf(buf, n, "-");
    else if (s->has_cross < 0) snprintf(buf, n, "no softmax in this run");
    else if (isnan(s->T_min)) snprintf(buf, n, "no T measured for both");
    else if (s->cross == BENCH_CROSS_FOUND) snprintf(buf, n, "%.0f", s->t_cross);
    else if (s->cross == BENCH_CROSS_BELOW_MIN) snprintf(buf, n, "< %.0f", s->T_min);
    else snprintf(buf, n, "not within the sweep (T <= %.0f)", s->T_max);
}

static void slope_text(const series_summary *s, char *buf, size_t n) {
    if (isnan(s->slope)) snprintf(buf, n, "- (fewer than 2 points)");
    else snprintf(buf, n, "%.2f (%d points, T >= %.0f)", s->slope, s->slope_n, s->slope_from);
}

static void ratio_text(const bench *x, const shape_summary *ss, char *buf, size_t n) {
    switch (ss->ratio_state) {
    case 1: snprintf(buf, n, "T = %d not in this run", RATIO_T); break;
    case 2: snprintf(buf, n, "VLA sequential not measured at T = %d", RATIO_T); break;
    case 3: snprintf(buf, n, "VLA not in this run"); break;
    default: {
        size_t k = (size_t)snprintf(buf, n, "fastest VLA algorithm at T = %d: %s, %.2fx sequential's speed (",
                                    RATIO_T, vla_algorithm_name(x->ser[ss->fastest].a), ss->ratio);
        int first = 1;
        for (int si = 0; si < x->nser && k < n; si++) {
            if (isnan(ss->algo_ratio[si]) || x->ser[si].a == VLA_ALGO_SEQUENTIAL) continue;
            k += (size_t)snprintf(buf + k, n - k, "%s%s %.2fx", first ? "" : ", ", vla_algorithm_name(x->ser[si].a),
                                  ss->algo_ratio[si]);
            first = 0;
        }
        if (k < n) snprintf(buf + k, n - k, "%s)", first ? "no other algorithm measured" : "");
    }
    }
}

/* ---- output ---------------------------------------------------------------------------------- */

static const char *build_info(void) {
    static char buf[512];
    snprintf(buf, sizeof buf, "libvla %s (header %s), %s, %s build", vla_version(), VLA_VERSION_STRING, BENCH_COMPILER,
             VLA_BENCH_BUILD_TYPE);
    return buf;
}

static void print_md(const bench *x, FILE *f) {
    fprintf(f, "<!-- vla-bench date: %s -->\n", x->date);
    fprintf(f, "<!-- backend: %s; device: %s -->\n", vla_backend_name(x->b), vla_backend_device(x->b));
    fprintf(f, "<!-- build: %s -->\n", build_info());
    fprintf(f, "<!-- command: %s -->\n", x->command);
    fprintf(f, "<!-- wall time %.1f s; other processes used %.0f%% of the host's CPUs meanwhile (/proc/stat); "
               "load average at the end (1, 5, 15 min): %s -->\n",
            x->wall_s, 100 * x->other_share, x->load_avg);
    fprintf(f, "<!-- %d timed runs after %d warm-up runs per point, inputs N(0,1) rotated over 3 sets, seed %llu; "
               "budget %.0f s; timer: %s -->\n",
            x->o.reps, x->o.warmup, (unsigned long long)x->o.seed, x->o.budget, bench_timer_desc(x));
    if (x->o.backward)
        fprintf(f, "<!-- --backward: each run times the forward alone, then forward + backward (dq, dk, dv from a "
                   "random dO) in one interval; fwd+bwd columns are their medians and rates, ratio = fwd+bwd / "
                   "forward; bwd GFLOP = the CPU backward's count (tools/bench_count.c; OpenCL's VLA runs its "
                   "sequential form for chunked too) -->\n");
    fputc('\n', f);
    fprintf(f, "| backend | mechanism | algo | B | H | T | dk | dv | median ms | min ms | max ms | tokens/s | GFLOP/s | GB/s |%s\n",
            x->o.backward ? " fwd+bwd ms | fwd+bwd min ms | fwd+bwd max ms | (fwd+bwd)/fwd | bwd GFLOP | fwd+bwd GFLOP/s "
                            "| fwd+bwd GB/s |"
                          : "");
    fprintf(f, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|%s\n",
            x->o.backward ? "--:|--:|--:|--:|--:|--:|--:|" : "");
    int nskip = 0;
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->skipped) {
            nskip++;
            continue;
        }
        const series *s = &x->ser[p->series];
        fprintf(f, "| %s | %s | %s | %d | %d | %d | %d | %d | %.4g | %.4g | %.4g | %.0f | %.2f | %.2f |",
                vla_backend_name(x->b), vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk,
                p->dv, p->median, p->min, p->max, p->tokens_per_s, p->gflops, p->gbps);
        if (x->o.backward)
            fprintf(f, " %.4g | %.4g | %.4g | %.2f | %.4g | %.2f | %.2f |", p->fb_median, p->fb_min, p->fb_max, p->ratio,
                    p->bwd_flops / 1e9, p->fb_gflops, p->fb_gbps);
        fputc('\n', f);
    }
    if (nskip) {
        fprintf(f, "\nSkipped points:\n\n");
        for (int i = 0; i < x->npts; i++) {
            const point *p = &x->pts[i];
            if (!p->skipped) continue;
            const series *s = &x->ser[p->series];
            fprintf(f, "- %s/%s B=%d H=%d T=%d d=%d: %s\n", vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B,
                    p->H, p->T, p->dk, p->note);
        }
    }
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss, sb;
        summarize(x, sh, &ss, 0);
        if (x->o.backward) summarize(x, sh, &sb, 1);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "\n### Summary: %s (%s), B=%d H=%d dk=dv=%d\n\n", vla_backend_name(x->b), vla_backend_device(x->b),
                shp->B, shp->H, shp->d);
        fprintf(f, "| mechanism | algo | crossover T (latency below softmax) | slope of log latency vs log T |%s\n",
                x->o.backward ? " fwd+bwd crossover T (below softmax's fwd+bwd) | fwd+bwd slope | (fwd+bwd)/fwd at the "
                                "largest T |"
                              : "");
        fprintf(f, "|---|---|---|---|%s\n", x->o.backward ? "---|---|---|" : "");
        for (int i = 0; i < ss.n; i++) {
            const series_summary *s = &ss.s[i];
            const series *se = &x->ser[s->series];
            char c[96], sl[96];
            cross_text(s, c, sizeof c);
            slope_text(s, sl, sizeof sl);
            fprintf(f, "| %s | %s | %s%s | %s |", vla_mechanism_name(se->m), vla_algorithm_name(se->a), c,
                    se->m == VLA_MECH_VLA ? " (paper: ~43000, Triton on a T4)" : "", sl);
            if (x->o.backward) {
                int Tl;
                const double rl = last_ratio(x, sh, s->series, &Tl);
                cross_text(&sb.s[i], c, sizeof c);
                slope_text(&sb.s[i], sl, sizeof sl);
                if (isnan(rl)) fprintf(f, " %s | %s | - |", c, sl);
                else fprintf(f, " %s | %s | %.2f (T = %d) |", c, sl, rl, Tl);
            }
            fputc('\n', f);
        }
        char r[512];
        ratio_text(x, &ss, r, sizeof r);
        fprintf(f, "\nVLA fused-vs-sequential: %s. Paper: 14x (its Triton kernel vs its sequential Python, T4, T = 4096).\n", r);
        if (x->o.backward) {
            ratio_text(x, &sb, r, sizeof r);
            fprintf(f, "\nVLA fused-vs-sequential, forward + backward: %s.\n", r);
        }
    }
}

static void csv_field_device(char *out, size_t n, const char *dev) {
    snprintf(out, n, "%s", dev);
    bench_sanitize(out);
}

static void print_csv(const bench *x, FILE *f) {
    int any_skip = 0;
    for (int i = 0; i < x->npts; i++) any_skip |= x->pts[i].skipped;
    char dev[256];
    csv_field_device(dev, sizeof dev, vla_backend_device(x->b));
    fprintf(f, "backend,device,mechanism,algo,B,H,T,dk,dv,median_ms,min_ms,max_ms,tokens_per_s,gflops,gbps%s%s\n",
            x->o.backward ? ",fwdbwd_median_ms,fwdbwd_min_ms,fwdbwd_max_ms,ratio,bwd_gflop,fwdbwd_gflops,fwdbwd_gbps"
                          : "",
            any_skip ? ",note" : "");
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        const series *s = &x->ser[p->series];
        fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,", vla_backend_name(x->b), dev, vla_mechanism_name(s->m),
                vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk, p->dv);
        if (p->skipped) fprintf(f, ",,,,,%s", x->o.backward ? ",,,,,,," : "");
        else {
            fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g", p->median, p->min, p->max, p->tokens_per_s, p->gflops, p->gbps);
            if (x->o.backward)
                fprintf(f, ",%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g", p->fb_median, p->fb_min, p->fb_max, p->ratio,
                        p->bwd_flops / 1e9, p->fb_gflops, p->fb_gbps);
        }
        if (any_skip) fprintf(f, ",%s", p->skipped ? p->note : "");
        fputc('\n', f);
    }
}

/* The summary as text lines (stderr in CSV mode). */
static void print_summary_text(const bench *x, FILE *f) {
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss, sb;
        summarize(x, sh, &ss, 0);
        if (x->o.backward) summarize(x, sh, &sb, 1);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "summary: %s (%s), B=%d H=%d dk=dv=%d\n", vla_backend_name(x->b), vla_backend_device(x->b), shp->B,
                shp->H, shp->d);
        for (int i = 0; i < ss.n; i++) {
            const series_summary *s = &ss.s[i];
            const series *se = &x->ser[s->series];
            char c[96], sl[96];
            cross_text(s, c, sizeof c);
            slope_text(s, sl, sizeof sl);
            fprintf(f, "  %s/%s: crossover %s%s; slope %s", vla_mechanism_name(se->m), vla_algorithm_name(se->a), c,
                    se->m == VLA_MECH_VLA ? " (paper: ~43000, T4)" : "", sl);
            if (x->o.backward) {
                int Tl;
                const double rl = last_ratio(x, sh, s->series, &Tl);
                cross_text(&sb.s[i], c, sizeof c);
                slope_text(&sb.s[i], sl, sizeof sl);
                fprintf(f, "; fwd+bwd: crossover %s, slope %s, (fwd+bwd)/fwd %.2f at T = %d", c, sl, rl, Tl);
            }
            fputc('\n', f);
        }
        char r[512];
        ratio_text(x, &ss, r, sizeof r);
        fprintf(f, "  VLA fused-vs-sequential: %s (paper: 14x at T = 4096)\n", r);
        if (x->o.backward) {
            ratio_text(x, &sb, r, sizeof r);
            fprintf(f, "  VLA fused-vs-sequential, forward + backward: %s\n", r);
        }
    }
}

/* One series' slope and crossover, as json members. */
static void json_series(FILE *f, const series_summary *s) {
    char c[96];
    cross_text(s, c, sizeof c);
    fprintf(f, "\"slope\": ");
    bench_json_number(f, s->slope);
    fprintf(f, ", \"slope_points\": %d, \"slope_T_from\": ", s->slope_n);
    bench_json_number(f, s->slope_from);
    if (s->has_cross > 0) {
        static const char *st[] = {"found", "below_min", "not_found"};
        fprintf(f, ", \"crossover\": {\"status\": \"%s\", \"T\": ", st[s->cross]);
        bench_json_number(f, s->cross == BENCH_CROSS_FOUND ? s->t_cross : NAN);
        fprintf(f, ", \"text\": ");
        bench_json_string(f, c);
        fprintf(f, "}");
    }
}

/* VLA's fastest algorithm vs sequential at T = 4096, as a json object. */
static void json_ratio(FILE *f, const bench *x, const shape_summary *ss) {
    char r[512];
    ratio_text(x, ss, r, sizeof r);
    fprintf(f, "{\"T\": %d, \"fastest_algo\": ", RATIO_T);
    if (ss->fastest >= 0) bench_json_string(f, vla_algorithm_name(x->ser[ss->fastest].a));
    else fputs("null", f);
    fprintf(f, ", \"ratio\": ");
    bench_json_number(f, ss->ratio_state == 0 ? ss->ratio : NAN);
    fprintf(f, ", \"text\": ");
    bench_json_string(f, r);
    fprintf(f, "}");
}

static void print_json(const bench *x, FILE *f) {
    fprintf(f, "{\n  \"tool\": \"vla-bench\",\n  \"date\": ");
    bench_json_string(f, x->date);
    fprintf(f, ",\n  \"backend\": ");
    bench_json_string(f, vla_backend_name(x->b));
    fprintf(f, ",\n  \"device\": ");
    bench_json_string(f, vla_backend_device(x->b));
    fprintf(f, ",\n  \"build\": {\"libvla\": ");
    bench_json_string(f, vla_version());
    fprintf(f, ", \"header\": ");
    bench_json_string(f, VLA_VERSION_STRING);
    fprintf(f, ", \"compiler\": ");
    bench_json_string(f, BENCH_COMPILER);
    fprintf(f, ", \"build_type\": ");
    bench_json_string(f, VLA_BENCH_BUILD_TYPE);
    fprintf(f, "},\n  \"command\": ");
    bench_json_string(f, x->command);
    fprintf(f, ",\n  \"host_other_cpu_share\": ");
    bench_json_number(f, x->other_share);
    fprintf(f, ",\n  \"load_average\": ");
    bench_json_string(f, x->load_avg);
    fprintf(f, ",\n  \"wall_s\": ");
    bench_json_number(f, x->wall_s);
    fprintf(f, ",\n  \"settings\": {\"reps\": %d, \"warmup\": %d, \"budget_s\": ", x->o.reps, x->o.warmup);
    bench_json_number(f, x->o.budget);
    fprintf(f, ", \"threads\": %d, \"seed\": %llu, \"crossover\": %s, \"backward\": %s, \"input_sets\": 3, \"timer\": ",
            x->o.threads, (unsigned long long)x->o.seed, x->o.crossover ? "true" : "false",
            x->o.backward ? "true" : "false");
    bench_json_string(f, bench_timer_desc(x));
    fprintf(f, "},\n  \"results\": [");
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        const series *s = &x->ser[p->series];
        fprintf(f, "%s\n    {\"mechanism\": \"%s\", \"algo\": \"%s\", \"B\": %d, \"H\": %d, \"T\": %d, \"dk\": %d, \"dv\": %d, ",
                i ? "," : "", vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk, p->dv);
        fprintf(f, "\"skipped\": %s, ", p->skipped ? "true" : "false");
        if (p->skipped) {
            fprintf(f, "\"note\": ");
            bench_json_string(f, p->note);
            fprintf(f, ", ");
        }
        fprintf(f, "\"flops\": ");
        bench_json_number(f, p->flops);
        fprintf(f, ", \"bytes\": ");
        bench_json_number(f, p->bytes);
        const double *vals[] = {&p->median, &p->min, &p->max, &p->tokens_per_s, &p->gflops, &p->gbps};
        const char *names[] = {"median_ms", "min_ms", "max_ms", "tokens_per_s", "gflops", "gbps"};
        for (int k = 0; k < 6; k++) {
            fprintf(f, ", \"%s\": ", names[k]);
            bench_json_number(f, *vals[k]);
        }
        fprintf(f, ", \"samples_ms\": [");
        for (int k = 0; k < p->nsamples; k++) {
            if (k) fputs(", ", f);
            bench_json_number(f, p->samples[k]);
        }
        fputc(']', f);
        if (x->o.backward) {
            /* Forward + backward in one interval; flops and bytes are the backward's alone. */
            fprintf(f, ", \"backward\": {\"flops\": ");
            bench_json_number(f, p->bwd_flops);
            fprintf(f, ", \"bytes\": ");
            bench_json_number(f, p->bwd_bytes);
            const double *bv[] = {&p->fb_median, &p->fb_min, &p->fb_max, &p->ratio, &p->fb_gflops, &p->fb_gbps};
            const char *bn[] = {"fwdbwd_median_ms", "fwdbwd_min_ms", "fwdbwd_max_ms", "ratio", "fwdbwd_gflops",
                                "fwdbwd_gbps"};
            for (int k = 0; k < 6; k++) {
                fprintf(f, ", \"%s\": ", bn[k]);
                bench_json_number(f, *bv[k]);
            }
            fprintf(f, ", \"fwdbwd_samples_ms\": [");
            for (int k = 0; k < p->nfb; k++) {
                if (k) fputs(", ", f);
                bench_json_number(f, p->fb_samples[k]);
            }
            fprintf(f, "]}");
        }
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"summary\": {\n    \"backend\": ");
    bench_json_string(f, vla_backend_name(x->b));
    fprintf(f, ",\n    \"device\": ");
    bench_json_string(f, vla_backend_device(x->b));
    fprintf(f, ",\n    \"paper\": {\"vla_crossover_T\": %.0f, \"fused_vs_sequential\": %.0f, \"at_T\": %d, "
               "\"hardware\": \"NVIDIA T4, Triton kernel vs sequential Python\"},\n    \"shapes\": [",
            PAPER_VLA_CROSSOVER, PAPER_FUSED_SPEEDUP, RATIO_T);
    for (int sh = 0; sh < x->nshapes; sh++) {
        shape_summary ss, sb;
        summarize(x, sh, &ss, 0);
        if (x->o.backward) summarize(x, sh, &sb, 1);
        const shape *shp = &x->shapes[sh];
        fprintf(f, "%s\n      {\"B\": %d, \"H\": %d, \"dk\": %d, \"dv\": %d, \"series\": [", sh ? "," : "", shp->B,
                shp->H, shp->d, shp->d);
        for (int i = 0; i < ss.n; i++) {
            const series *se = &x->ser[ss.s[i].series];
            fprintf(f, "%s\n        {\"mechanism\": \"%s\", \"algo\": \"%s\", ", i ? "," : "",
                    vla_mechanism_name(se->m), vla_algorithm_name(se->a));
            json_series(f, &ss.s[i]);
            if (x->o.backward) {
                int Tl;
                const double rl = last_ratio(x, sh, ss.s[i].series, &Tl);
                fprintf(f, ", \"fwdbwd\": {");
                json_series(f, &sb.s[i]);
                fprintf(f, ", \"ratio_at_T_max\": ");
                bench_json_number(f, rl);
                fprintf(f, ", \"T_max\": %d}", Tl);
            }
            fprintf(f, "}");
        }
        fprintf(f, "\n      ], \"fused_vs_sequential\": ");
        json_ratio(f, x, &ss);
        if (x->o.backward) {
            fprintf(f, ", \"fwdbwd_fused_vs_sequential\": ");
            json_ratio(f, x, &sb);
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n    ]\n  }\n}\n");
}


/* ---- writing: stdout and --save ----------------------------------------------------------------- */

static void print_format(const bench *x, bench_format fmt, FILE *f) {
    switch (fmt) {
    case OUT_MD: print_md(x, f); break;
    case OUT_CSV: print_csv(x, f); break;
    case OUT_JSON: print_json(x, f); break;
    }
}

static int write_saved(FILE *f, const void *ctx, int i) {
    static const bench_format fmt[] = {OUT_MD, OUT_CSV, OUT_JSON};
    print_format(ctx, fmt[i], f);
    return 0;
}

int bench_report(const bench *x) {
    if (x->o.save) {
        /* The same run in every format, written before stdout so that a failure leaves no file
         * and no table. */
        char paths[3][4096];
        const char *p[3] = {paths[0], paths[1], paths[2]};
        static const char *ext[] = {"md", "csv", "json"};
        for (int i = 0; i < 3; i++)
            if ((size_t)snprintf(paths[i], sizeof paths[i], "%s.%s", x->o.save, ext[i]) >= sizeof paths[i])
                return bench_fail(BENCH_EXIT_FAILED, "--save: prefix too long: '%s'", x->o.save);
        const int rc = bench_write_files("--save", p, 3, write_saved, x);
        if (rc) return rc;
    }
    print_format(x, x->o.out, stdout);
    if (x->o.out == OUT_CSV) print_summary_text(x, stderr);
    if (fflush(stdout) != 0 || ferror(stdout))
        return bench_fail(BENCH_EXIT_FAILED, "error writing the results to stdout");
    return 0;
}
