/* vla-bench's scaling sweep: the run's settings, its series (mechanism, algorithm) and shapes,
 * and every point it measured or skipped (bench_sweep.c runs and times them; bench_report.c
 * summarises and prints them). With --backward each point also times forward + backward. */
#ifndef VLA_BENCH_SWEEP_H
#define VLA_BENCH_SWEEP_H

#include <vla/vla.h>

#include <stdint.h>

/* The paper's numbers (T4 GPU, Triton): printed beside ours. */
#define PAPER_VLA_CROSSOVER 43000.0
#define PAPER_FUSED_SPEEDUP 14.0
#define RATIO_T 4096          /* where fused-vs-sequential is read */
#define SLOPE_T_MIN 1024.0    /* the slope is fitted over T >= this ... */
#define SLOPE_MIN_POINTS 3    /* ... when there are this many such points */
#define BENCH_MAX_SERIES 16
#define VLA_N_BENCH_MECHS 5 /* softmax .. delta-paper: every vla_mechanism */

typedef enum bench_format { OUT_MD, OUT_CSV, OUT_JSON } bench_format;

typedef struct int_list {
    int *v;
    int n;
} int_list;

typedef struct sweep_opts {
    const char *backend;
    int_list T, B, H, d;
    int mech_on[VLA_N_BENCH_MECHS]; /* --mechanism filter */
    int algo_on[6]; /* --algo filter (softmax's fused always runs when softmax does) */
    int reps, warmup, threads, crossover;
    int backward;     /* --backward: each run also times forward + backward (the backward's series only) */
    double budget;
    uint64_t seed;
    const char *save; /* --save PREFIX: also write PREFIX.md, .csv and .json */
    bench_format out;
} sweep_opts;

typedef struct series {
    vla_mechanism m;
    vla_algorithm a;
} series;

typedef struct shape {
    int B, H, d;
} shape;

typedef struct point {
    int shape, series;
    int B, H, T, dk, dv;
    int skipped;
    char note[256];
    double *samples;
    int nsamples;
    double median, min, max, tokens_per_s, gflops, gbps, flops, bytes;
    /* --backward: forward + backward in one interval, every run after the forward alone. fb_gflops
     * and fb_gbps count the forward's and the backward's work (bwd_flops, bwd_bytes) together;
     * ratio = fb_median / median. */
    double *fb_samples;
    int nfb;
    double fb_median, fb_min, fb_max, ratio, fb_gflops, fb_gbps, bwd_flops, bwd_bytes;
} point;

typedef struct bench {
    sweep_opts o;
    vla_backend *b;
    int device_clock; /* -1 until the first sample; then 1 if every sample came from the device clock */
    int host_memory;  /* the backend's buffers are host memory (the CPU) */
    double t_start;
    double best_gflops; /* best rate measured so far: estimates a series' first point */
    series ser[BENCH_MAX_SERIES];
    int nser;
    shape *shapes;
    int nshapes;
    point *pts;
    int npts, cap;
    char command[2048];
    char date[64];
    /* The conditions of the run, fixed when the sweep ends so every output says the same. */
    double wall_s;
    double other_share; /* share of the host's CPUs other processes used during the sweep */
    char load_avg[128]; /* the host's load average at the end */
} bench;

/* Runs the whole sweep: every shape, every T, every series (and --crossover's extra T), with
 * progress on stderr; fills x->pts and the run's conditions. */
void bench_sweep(bench *x);

/* What clock measured the run, for the md header and the JSON. */
const char *bench_timer_desc(const bench *x);

/* The measured points of series si in shape sh, in sweep order (increasing T); returns how
 * many (at most max). */
int bench_series_points(const bench *x, int sh, int si, double *T, double *ms, int max);
/* The median of series si at T in shape sh, or NAN. */
double bench_median_at(const bench *x, int sh, int si, int T);
/* The softmax series' index, or -1. */
int bench_softmax_series(const bench *x);

/* Makes `s` safe for one CSV field and one md cell: no commas, bars, quotes or line breaks. */
void bench_sanitize(char *s);

#endif
