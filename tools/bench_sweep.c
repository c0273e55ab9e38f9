/* vla-bench's scaling sweep: runs and times every point (bench_sweep.h).
 *
 * Order: for each shape (B, H, d), T ascending, and at each T every (mechanism, algorithm)
 * series, so a budget that runs out cuts the largest T of every series rather than whole
 * series. Each point: --warmup runs, then -r timed runs on inputs rotated over three random
 * N(0, 1) sets; median, min and max kept with every sample. Progress goes to stderr, one line
 * a point.
 *
 * A point is skipped, with a note, when its buffers or the op run out of memory, or when its
 * estimated time (warm-up + timed runs) exceeds the budget left: the estimate scales the
 * series' previous point by (T / T_prev)^slope, slope the larger of the fitted slope and the
 * default (1 for linear-time series, 2 for softmax), or, for a series' first point, divides
 * its FLOP count by the best GFLOP/s measured so far in the run. After the first warm-up run
 * of a point the estimate is checked again against that run. Once a series is over the
 * budget its larger T are skipped too.
 *
 * --backward: only the series the backward has (bench_bwd_defined), and each run times the
 * forward alone, then forward + backward in one interval (vla_attention_forward, then
 * vla_attention_backward with dq, dk, dv from a random dO [B,T,H,dv]: what a training step asks
 * of the op); both after the same warm-up, medians of each. The estimates count both. A point
 * whose backward fails (out of memory, a backend without it) is skipped with the reason. */
#define _POSIX_C_SOURCE 200809L
#include "bench_sweep.h"

#include "bench_common.h"
#include "bench_count.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- the timer: one forward call (or forward + backward), start to finished -------------------
 * vla_backend_timer_*: CUDA events on CUDA, OpenCL profiling events on OpenCL, CLOCK_MONOTONIC
 * on the CPU (and where a driver cannot time). The clock actually used is recorded per run. */

const char *bench_timer_desc(const bench *x) {
    if (x->device_clock == 1) return "device clock via vla_backend_timer (CUDA events / OpenCL profiling events)";
    if (x->device_clock == 0) return "CLOCK_MONOTONIC around forward + synchronize via vla_backend_timer";
    return "vla_backend_timer (no sample timed)";
}

/* One timed forward call, or with `g` one forward call and one backward call in one interval.
 * *bwd (may be NULL) says whether the failing call, if any, was the backward. */
static vla_status time_call(bench *x, const vla_attn_desc *d, const vla_attn_args *a, const vla_attn_grads *g,
                            double *ms, int *bwd) {
    if (bwd) *bwd = 0;
    vla_status s = vla_backend_synchronize(x->b); /* nothing earlier inside the interval */
    if (s != VLA_OK) return s;
    (void)vla_backend_timer_start(x->b);
    s = vla_attention_forward(x->b, d, a);
    if (s == VLA_OK && g) {
        s = vla_attention_backward(x->b, d, a, g);
        if (bwd) *bwd = s != VLA_OK;
    }
    if (s != VLA_OK) return s; /* the timer's stop would replace the handle's message */
    double elapsed = 0;
    int dev = 0;
    const vla_status s2 = vla_backend_timer_stop(x->b, &elapsed, &dev);
    if (s2 == VLA_OK) x->device_clock = x->device_clock == -1 ? dev : (x->device_clock && dev);
    *ms = elapsed;
    return s != VLA_OK ? s : s2;
}

/* ---- points ------------------------------------------------------------------------------- */

static double budget_left(const bench *x) { return x->o.budget - (bench_now_s() - x->t_start); }

static point *new_point(bench *x, int shape_i, int series_i, int T) {
    if (x->npts == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        point *p = realloc(x->pts, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        x->pts = p;
        x->cap = cap;
    }
    point *p = &x->pts[x->npts++];
    memset(p, 0, sizeof *p);
    const shape *sh = &x->shapes[shape_i];
    p->shape = shape_i;
    p->series = series_i;
    p->B = sh->B;
    p->H = sh->H;
    p->T = T;
    p->dk = p->dv = sh->d;
    p->median = p->min = p->max = p->tokens_per_s = p->gflops = p->gbps = NAN;
    p->fb_median = p->fb_min = p->fb_max = p->ratio = p->fb_gflops = p->fb_gbps = NAN;
    bench_shape bs = {.B = sh->B, .H = sh->H, .T = T, .dk = sh->d, .dv = sh->d, .chunk = 64};
    const series *se = &x->ser[series_i];
    p->flops = bench_flops(se->m, se->a, &bs);
    p->bytes = bench_bytes(se->m, se->a, &bs);
    if (x->o.backward) {
        p->bwd_flops = bench_bwd_flops(se->m, se->a, &bs);
        p->bwd_bytes = bench_bwd_bytes(se->m, se->a, &bs);
    }
    return p;
}

/* Makes `s` safe for one CSV field and one md cell: no commas, bars or line breaks. */
void bench_sanitize(char *s) {
    for (; *s; s++) {
        if (*s == ',') *s = ';';
        else if (*s == '|') *s = '/';
        else if (*s == '\n' || *s == '\r' || *s == '"') *s = ' ';
    }
}

static void skip_point(point *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void skip_point(point *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->note, sizeof p->note, fmt, ap);
    va_end(ap);
    bench_sanitize(p->note);
    p->skipped = 1;
}

static void progress(const bench *x, const point *p) {
    const series *s = &x->ser[p->series];
    fprintf(stderr, "[%7.1f s] %s %s/%s B=%d H=%d T=%d d=%d: ", bench_now_s() - x->t_start, vla_backend_name(x->b),
            vla_mechanism_name(s->m), vla_algorithm_name(s->a), p->B, p->H, p->T, p->dk);
    if (p->skipped) fprintf(stderr, "%s\n", p->note);
    else if (x->o.backward)
        fprintf(stderr,
                "median %.4g ms, %.3g GFLOP/s; fwd+bwd median %.4g ms (min %.4g, max %.4g), %.2fx, %.3g GFLOP/s\n",
                p->median, p->gflops, p->fb_median, p->fb_min, p->fb_max, p->ratio, p->fb_gflops);
    else fprintf(stderr, "median %.4g ms (min %.4g, max %.4g), %.3g GFLOP/s\n", p->median, p->min, p->max, p->gflops);
    fflush(stderr);
}

/* ---- inputs: three random N(0, 1) sets, rotated ---------------------------------------------- */

typedef struct inputs {
    vla_buffer *q[3], *k[3], *v[3];
    vla_buffer *o, *S, *A, *n;
    vla_buffer *dO, *dq, *dk, *dv; /* --backward: upstream gradient (random) and the three outputs */
} inputs;

static void free_inputs(inputs *in) {
    for (int i = 0; i < 3; i++) {
        vla_buffer_free(in->q[i]);
        vla_buffer_free(in->k[i]);
        vla_buffer_free(in->v[i]);
    }
    vla_buffer_free(in->o);
    vla_buffer_free(in->S);
    vla_buffer_free(in->A);
    vla_buffer_free(in->n);
    vla_buffer_free(in->dO);
    vla_buffer_free(in->dq);
    vla_buffer_free(in->dk);
    vla_buffer_free(in->dv);
    memset(in, 0, sizeof *in);
}

/* Host memory available now (MemAvailable), or 0 when unknown. */
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (double)kb * 1024.0;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
}

static double input_bytes(int B, int H, int T, int d, int backward) {
    const double bth = (double)B * T * H;
    /* 3 sets of q, k, v; one o; the final states S, A (d x d) and n; with the backward dO, dq,
     * dk, dv. */
    return 4.0 * (3 * 3 * bth * d + bth * d + 2.0 * B * H * d * d + (double)B * H * d + (backward ? 4 * bth * d : 0));
}

/* Fills `buf` (n floats) with normals from `seed` (bench_fill_normal_blocks, on every host
 * thread): in place for host memory, else through a staging block of 16 M floats. */
static vla_status fill_buffer(vla_buffer *buf, uint64_t seed, size_t n) {
    float *host = vla_buffer_host_ptr(buf);
    if (host) {
        bench_fill_normal_blocks(seed, 0, host, n);
        return VLA_OK;
    }
    const size_t block = 256 * BENCH_FILL_BLOCK;
    float *tmp = malloc((n < block ? n : block) * sizeof *tmp);
    if (!tmp) return VLA_ERR_OUT_OF_MEMORY;
    vla_status s = VLA_OK;
    for (size_t off = 0; off < n && s == VLA_OK; off += block) {
        const size_t m = n - off < block ? n - off : block;
        bench_fill_normal_blocks(seed, off / BENCH_FILL_BLOCK, tmp, m);
        s = vla_buffer_upload(buf, off * sizeof(float), tmp, m * sizeof(float));
    }
    free(tmp);
    return s;
}

/* Allocates and fills the inputs of one (B, H, T, d). Returns VLA_OK or the failing status,
 * with a note (why) in `why`. */
static vla_status make_inputs(bench *x, const shape *sh, int T, inputs *in, char *why, size_t why_n) {
    memset(in, 0, sizeof *in);
    const double need = input_bytes(sh->B, sh->H, T, sh->d, x->o.backward);
    if (x->host_memory) {
        /* The host overcommits: a buffer larger than what is free "succeeds" and the process
         * dies when it touches it. Count it as out of memory before that. */
        const double avail = host_available_bytes();
        if (avail > 0 && need > 0.8 * avail) {
            snprintf(why, why_n, "out of memory: inputs need %.2f GiB; the host has %.2f GiB available",
                     need / 1073741824.0, avail / 1073741824.0);
            return VLA_ERR_OUT_OF_MEMORY;
        }
    }
    const size_t bth = (size_t)sh->B * (size_t)T * (size_t)sh->H, d = (size_t)sh->d;
    const size_t qk = bth * d * sizeof(float);
    vla_status s = VLA_OK;
    for (int i = 0; i < 3 && s == VLA_OK; i++) {
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->q[i]);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->k[i]);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->v[i]);
    }
    if (!s) s = vla_buffer_alloc(x->b, qk, &in->o);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * d * sizeof(float), &in->S);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * d * sizeof(float), &in->A);
    if (!s) s = vla_buffer_alloc(x->b, (size_t)sh->B * sh->H * d * sizeof(float), &in->n);
    if (x->o.backward) {
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->dO);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->dq);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->dk);
        if (!s) s = vla_buffer_alloc(x->b, qk, &in->dv);
    }
    if (s) {
        snprintf(why, why_n, "%s allocating %.2f GiB of inputs: %s", s == VLA_ERR_OUT_OF_MEMORY ? "out of memory" : "error",
                 need / 1073741824.0, vla_last_message());
        free_inputs(in);
        return s;
    }
    /* One seed per tensor, drawn from the point's generator. */
    bench_rng r;
    bench_rng_seed(&r, x->o.seed ^ ((uint64_t)T << 32) ^ ((uint64_t)sh->B << 48) ^ ((uint64_t)sh->H << 40) ^ (uint64_t)sh->d);
    for (int i = 0; i < 3 && s == VLA_OK; i++) {
        if (!s) s = fill_buffer(in->q[i], bench_rng_u64(&r), bth * d);
        if (!s) s = fill_buffer(in->k[i], bench_rng_u64(&r), bth * d);
        if (!s) s = fill_buffer(in->v[i], bench_rng_u64(&r), bth * d);
    }
    if (!s && in->dO) s = fill_buffer(in->dO, bench_rng_u64(&r), bth * d);
    if (s) {
        snprintf(why, why_n, "error uploading inputs: %s", vla_last_message());
        free_inputs(in);
    }
    return s;
}

/* ---- one point ------------------------------------------------------------------------------- */

/* Median, min and max of n samples (sorted on a copy; without memory for it, the first sample). */
static void sample_stats(const double *samples, int n, double *median, double *min, double *max) {
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        *median = *min = *max = samples[0];
        return;
    }
    memcpy(sorted, samples, (size_t)n * sizeof *sorted);
    *median = bench_sort_median(sorted, n);
    *min = sorted[0];
    *max = sorted[n - 1];
    free(sorted);
}

/* The CPU backward's work memory in flight (backends/cpu/cpu_grad_backend.c): per thread, one
 * head's prepared inputs and gradients in double, T (9 dk + 3 dv + 4), and its checkpoints,
 * (T / C) (dk dv + dk^2 + dk). */
static double cpu_backward_bytes(const bench *x, const point *p) {
    long cpus = x->o.threads > 0 ? x->o.threads : sysconf(_SC_NPROCESSORS_ONLN);
    const double heads = (double)p->B * p->H, conc = cpus > 0 && cpus < heads ? (double)cpus : heads;
    const double K = p->dk, V = p->dv, nc = ceil(p->T / 64.0);
    return conc * 8.0 * ((double)p->T * (9 * K + 3 * V + 4) + nc * (K * V + K * K + K));
}

/* Runs warm-up and timed runs of point p on `in`. */
static void run_point(bench *x, point *p, inputs *in) {
    const series *se = &x->ser[p->series];
    vla_attn_desc d;
    vla_attn_desc_init(&d, se->m);
    d.algorithm = se->a;
    vla_attn_args a = {.B = p->B, .T = p->T, .H = p->H, .dk = p->dk, .dv = p->dv, .o = in->o};
    /* The final states are part of what a forward call delivers (and of the byte count). */
    if (se->m != VLA_MECH_SOFTMAX) a.S_out = in->S;
    if (se->m == VLA_MECH_VLA) a.A_out = in->A;
    if (se->m == VLA_MECH_LINEAR) a.n_out = in->n;
    const int bwd = x->o.backward;
    const vla_attn_grads g = {.dO = in->dO, .dq = in->dq, .dk = in->dk, .dv = in->dv};

    if (x->host_memory && se->m == VLA_MECH_VLA && se->a == VLA_ALGO_SCAN) {
        /* The scan keeps T maps of dk^2 + dk dv floats per head in flight (one head per
         * thread): check it against the host, which would overcommit and kill us. */
        long cpus = x->o.threads > 0 ? x->o.threads : sysconf(_SC_NPROCESSORS_ONLN);
        const double heads = (double)p->B * p->H, conc = cpus > 0 && cpus < heads ? (double)cpus : heads;
        const double need = conc * p->T * ((double)p->dk * p->dk + (double)p->dk * p->dv) * 4.0;
        const double avail = host_available_bytes();
        if (avail > 0 && need > 0.8 * avail) {
            skip_point(p, "skipped: out of memory: the scan's maps need %.2f GiB; the host has %.2f GiB available",
                       need / 1073741824.0, avail / 1073741824.0);
            return;
        }
    }
    if (x->host_memory && bwd) {
        const double need = cpu_backward_bytes(x, p), avail = host_available_bytes();
        if (avail > 0 && need > 0.8 * avail) {
            skip_point(p, "skipped: out of memory: the backward's work memory needs %.2f GiB; the host has %.2f GiB "
                          "available",
                       need / 1073741824.0, avail / 1073741824.0);
            return;
        }
    }
    const int total = x->o.warmup + x->o.reps;
    double *samples = malloc((size_t)x->o.reps * sizeof *samples);
    double *fb = bwd ? malloc((size_t)x->o.reps * sizeof *fb) : NULL;
    if (!samples || (bwd && !fb)) {
        free(samples);
        free(fb);
        skip_point(p, "skipped: out of host memory for the samples");
        return;
    }
    int ns = 0;
    for (int run = 0; run < total; run++) {
        a.q = in->q[run % 3];
        a.k = in->k[run % 3];
        a.v = in->v[run % 3];
        double ms = 0, ms_fb = 0;
        int in_bwd = 0;
        vla_status s = time_call(x, &d, &a, NULL, &ms, NULL);
        if (s == VLA_OK && bwd) s = time_call(x, &d, &a, &g, &ms_fb, &in_bwd);
        if (s != VLA_OK) {
            const char *msg = vla_backend_message(x->b), *what = in_bwd ? "backward " : "";
            if (s == VLA_ERR_OUT_OF_MEMORY) skip_point(p, "skipped: %sout of memory: %s", what, msg);
            else if (s == VLA_ERR_UNSUPPORTED) skip_point(p, "skipped: %snot supported by this backend: %s", what, msg);
            else skip_point(p, "skipped: %serror (%s): %s", what, vla_status_string(s), msg);
            free(samples);
            free(fb);
            return;
        }
        if (run == 0) {
            /* The first run is the best estimate there is: re-check the budget. */
            const double one = (ms + ms_fb) / 1e3, left = budget_left(x), need = (total - 1) * one;
            if (need > left) {
                skip_point(p, "skipped: budget: one run took %.3g s; %d more need %.3g s > %.3g s left", one,
                           total - 1, need, left > 0 ? left : 0.0);
                free(samples);
                free(fb);
                return;
            }
        }
        if (run >= x->o.warmup) {
            if (bwd) fb[ns] = ms_fb;
            samples[ns++] = ms;
        }
    }
    p->samples = samples;
    p->nsamples = ns;
    sample_stats(samples, ns, &p->median, &p->min, &p->max);
    const double sec = p->median / 1e3;
    p->tokens_per_s = (double)p->B * p->T / sec;
    p->gflops = p->flops / sec / 1e9;
    p->gbps = p->bytes / sec / 1e9;
    if (p->gflops > x->best_gflops) x->best_gflops = p->gflops;
    if (bwd) {
        p->fb_samples = fb;
        p->nfb = ns;
        sample_stats(fb, ns, &p->fb_median, &p->fb_min, &p->fb_max);
        const double fsec = p->fb_median / 1e3;
        p->ratio = p->fb_median / p->median;
        p->fb_gflops = (p->flops + p->bwd_flops) / fsec / 1e9;
        p->fb_gbps = (p->bytes + p->bwd_bytes) / fsec / 1e9;
    }
}

/* ---- the sweep ----------------------------------------------------------------------------- */

typedef struct series_state {
    int dead;        /* over the budget at some T: larger T are skipped too */
    char why[160];
} series_state;

/* The measured points of series `si` in shape `sh`, in increasing T. */
int bench_series_points(const bench *x, int sh, int si, double *T, double *ms, int max) {
    int n = 0;
    for (int i = 0; i < x->npts && n < max; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && !p->skipped && p->nsamples > 0) { /* measured, not pending */
            T[n] = p->T;
            ms[n] = p->median;
            n++;
        }
    }
    return n;
}

/* The measured points of series si in shape sh with the milliseconds one run of each took: the
 * forward's median, plus forward + backward's with --backward. */
static int run_points(const bench *x, int sh, int si, double *T, double *ms, int max) {
    int n = 0;
    for (int i = 0; i < x->npts && n < max; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && !p->skipped && p->nsamples > 0) {
            T[n] = p->T;
            ms[n] = p->median + (x->o.backward ? p->fb_median : 0.0);
            n++;
        }
    }
    return n;
}

/* Seconds the point (warm-up + timed runs) is expected to take; NAN when there is nothing to go on. */
static double estimate_point_s(const bench *x, int sh, int si, int T) {
    double Ts[256], ms[256];
    const int n = run_points(x, sh, si, Ts, ms, 256);
    const series *se = &x->ser[si];
    double per_run_ms = NAN;
    if (n > 0) {
        double slope = n >= 2 ? bench_slope(Ts, ms, n, SLOPE_T_MIN, SLOPE_MIN_POINTS, NULL) : NAN;
        const double floor_slope = se->m == VLA_MECH_SOFTMAX ? 2.0 : 1.0;
        if (!(slope >= floor_slope)) slope = floor_slope; /* never cheaper than its asymptotic scaling */
        if (slope > 3.0) slope = 3.0;
        per_run_ms = bench_estimate_ms(se->m, Ts[n - 1], ms[n - 1], T, slope);
    } else if (x->best_gflops > 0) {
        const shape *s = &x->shapes[sh];
        bench_shape bs = {.B = s->B, .H = s->H, .T = T, .dk = s->d, .dv = s->d, .chunk = 64};
        double flops = bench_flops(se->m, se->a, &bs);
        if (x->o.backward) flops = 2 * flops + bench_bwd_flops(se->m, se->a, &bs); /* forward; forward + backward */
        per_run_ms = flops / (x->best_gflops * 1e9) * 1e3;
    }
    return per_run_ms * (x->o.warmup + x->o.reps) / 1e3;
}

/* Runs every live series of `todo` (flags per series) at T for shape sh. */
static void run_T(bench *x, int sh, int T, const int *todo, series_state *st) {
    int run_idx[BENCH_MAX_SERIES], nrun = 0;
    for (int si = 0; si < x->nser; si++) {
        if (!todo[si]) continue;
        point *p = new_point(x, sh, si, T);
        if (!p) {
            bench_fail(BENCH_EXIT_FAILED, "out of host memory for the results");
            exit(BENCH_EXIT_FAILED);
        }
        const double left = budget_left(x);
        if (st[si].dead) {
            skip_point(p, "skipped: budget: %s", st[si].why);
        } else if (left <= 0) {
            skip_point(p, "skipped: budget: the %.0f s budget is spent", x->o.budget);
            st[si].dead = 1;
            snprintf(st[si].why, sizeof st[si].why, "the %.0f s budget is spent", x->o.budget);
        } else {
            const double est = estimate_point_s(x, sh, si, T);
            if (est > left) {
                skip_point(p, "skipped: budget: estimated %.3g s for %d runs > %.3g s left", est,
                           x->o.warmup + x->o.reps, left);
                st[si].dead = 1;
                snprintf(st[si].why, sizeof st[si].why, "T = %d was already estimated over the budget", T);
            } else {
                run_idx[nrun++] = x->npts - 1;
                continue;
            }
        }
        progress(x, p);
    }
    if (!nrun) return;
    inputs in;
    char why[256] = "";
    vla_status s = make_inputs(x, &x->shapes[sh], T, &in, why, sizeof why);
    for (int i = 0; i < nrun; i++) {
        point *p = &x->pts[run_idx[i]];
        if (s != VLA_OK) skip_point(p, "skipped: %s", why);
        else if (budget_left(x) <= 0) skip_point(p, "skipped: budget: the %.0f s budget is spent", x->o.budget);
        else run_point(x, p, &in);
        if (p->skipped && strstr(p->note, "budget")) {
            st[p->series].dead = 1;
            snprintf(st[p->series].why, sizeof st[p->series].why, "T = %d was already over the budget", T);
        }
        progress(x, p);
    }
    if (s == VLA_OK) free_inputs(&in);
}

/* The median of series si at T in shape sh, or NAN. */
double bench_median_at(const bench *x, int sh, int si, int T) {
    for (int i = 0; i < x->npts; i++) {
        const point *p = &x->pts[i];
        if (p->shape == sh && p->series == si && p->T == T && !p->skipped && p->nsamples > 0) return p->median;
    }
    return NAN;
}

int bench_softmax_series(const bench *x) {
    for (int i = 0; i < x->nser; i++)
        if (x->ser[i].m == VLA_MECH_SOFTMAX) return i;
    return -1;
}

static void sweep_shapes(bench *x) {
    const int smx = bench_softmax_series(x);
    for (int sh = 0; sh < x->nshapes; sh++) {
        series_state st[BENCH_MAX_SERIES];
        memset(st, 0, sizeof st);
        int todo[BENCH_MAX_SERIES];
        for (int i = 0; i < x->nser; i++) todo[i] = 1;
        int T_last = 0;
        for (int ti = 0; ti < x->o.T.n; ti++) {
            T_last = x->o.T.v[ti];
            run_T(x, sh, T_last, todo, st);
        }
        if (!x->o.crossover || smx < 0) continue;
        /* --crossover: keep doubling T while a series is not yet below softmax at the largest
         * T where both were measured (or has no such T). Softmax runs first at each new T;
         * when it cannot be measured (budget, memory) the search ends. */
        while (T_last <= (1 << 27) && budget_left(x) > 0 && !st[smx].dead) {
            const int T = 2 * T_last;
            int any = 0;
            for (int si = 0; si < x->nser; si++) {
                todo[si] = 0;
                if (si == smx || st[si].dead) continue;
                /* The largest T where both were measured. */
                int crossed = 0, best_T = 0;
                for (int i = 0; i < x->npts; i++) {
                    const point *p = &x->pts[i];
                    if (p->shape != sh || p->series != si || p->T <= best_T) continue;
                    const double lin = bench_median_at(x, sh, si, p->T), soft = bench_median_at(x, sh, smx, p->T);
                    if (!isnan(lin) && !isnan(soft)) {
                        best_T = p->T;
                        crossed = lin < soft;
                    }
                }
                if (!crossed) todo[si] = any = 1;
            }
            if (!any) break;
            T_last = T;
            fprintf(stderr, "[%7.1f s] --crossover: T = %d\n", bench_now_s() - x->t_start, T);
            int only_soft[BENCH_MAX_SERIES] = {0};
            only_soft[smx] = 1;
            run_T(x, sh, T, only_soft, st);
            if (isnan(bench_median_at(x, sh, smx, T))) break;
            run_T(x, sh, T, todo, st);
        }
    }
}

/* ---- the host during the run ---------------------------------------------------------------- */

/* CPU seconds the whole host has spent busy (/proc/stat: user, nice, system, irq, softirq,
 * steal), or -1 when unknown. */
static double host_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                         &v[6], &v[7]);
    fclose(f);
    const long hz = sysconf(_SC_CLK_TCK);
    if (n < 8 || hz <= 0) return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

/* CPU seconds this process has used. */
static double self_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* The share of the host's CPUs that other processes used during the run, 0..1, or NAN when
 * unknown: on a shared machine this says how far to trust the numbers. */
static double g_busy0 = -1, g_self0 = -1, g_wall0 = 0;
static void host_share_start(void) {
    g_busy0 = host_busy_s();
    g_self0 = self_cpu_s();
    g_wall0 = bench_now_s();
}
static double host_other_share(void) {
    const double busy = host_busy_s(), self = self_cpu_s(), wall = bench_now_s() - g_wall0;
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (g_busy0 < 0 || busy < 0 || g_self0 < 0 || self < 0 || ncpu <= 0 || wall <= 0) return NAN;
    const double other = (busy - g_busy0) - (self - g_self0);
    return other > 0 ? other / (wall * (double)ncpu) : 0.0;
}

/* The host's load average when the run ends: a busy machine explains noisy numbers. */
static void load_average(char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    double l1, l5, l15;
    if (f && fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3) snprintf(buf, n, "%.2f %.2f %.2f", l1, l5, l15);
    if (f) fclose(f);
    if (!buf[0]) snprintf(buf, n, "unknown");
}


void bench_sweep(bench *x) {
    x->device_clock = -1;
    host_share_start();
    sweep_shapes(x);
    x->other_share = host_other_share();
    x->wall_s = bench_now_s() - x->t_start;
    load_average(x->load_avg, sizeof x->load_avg);
}
