/* The CUDA backend against the speed targets of the CUDA issue, on the device it runs on, with
 * the device's own measured limits in the same run:
 *   - copy bandwidth: a large cudaMemcpy device to device (bytes read + written / time);
 *   - FP32 and TF32 GEMM: cublasSgemm and cublasGemmEx(CUBLAS_COMPUTE_32F_FAST_TF32), n = 8192;
 *   - VLA fp32 forward at (B,H,d; T) = (1,4,32; 2048, 8192, 32768, 131072) and (8,16,64; 2048,
 *     32768), every VLA algorithm (scan skipped where its maps do not fit or it would take
 *     > 10 s), plus softmax (fused), linear and delta (chunked);
 *   - the VLA decode step: T = 1, B=8, H=16, d=64, S and A carried in place, 1000 back-to-back
 *     calls, each timed with CUDA events (launch and the library's host work included).
 * Timing: CUDA events on the legacy default stream, which is ordered with the backend's
 * (blocking) stream; warm-up first (each input set twice, so the backend's graph cache has
 * captured every call the timed loop makes); median of the repetitions, which rotate over 3
 * input sets so that repeated runs do not read a warm L2. Inputs are N(0,1), never zeros. Each
 * row also gives the median host time of the call (stderr, and "host_us" in --json).
 *
 * Each result is also given as a fraction of the measured limits, from the FLOP and byte count
 * of its algorithm (the formula is printed beside each row; per head, K = dk, V = dv, C = 64
 * tokens a chunk, n_c = ceil(T/C) chunks; FLOP = 2 x multiply-adds).
 *
 * Output: a markdown table on stdout (progress on stderr); --json FILE writes every row with
 * its raw samples. --quick: fewer repetitions and shapes (a smoke run). --gate US: each timed call
 * is enqueued behind a host function that holds the stream for US microseconds, so the events
 * time the GPU's work alone (the library's host work and the launches are then hidden; the
 * difference from an ungated run is what the host adds to a call's latency). --help. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "vla/vla.h"

#include <cuda_runtime_api.h>
#ifdef VLA_BENCH_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXS 64

static int quick = 0;
static int gate_us = 0; /* --gate */
static FILE *json = NULL;
static int json_rows = 0;

static void die_cuda(cudaError_t e, const char *what) {
    fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}
#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) die_cuda(e_, #x);                                                                       \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
static float median(float *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_float);
    return n % 2 ? x[n / 2] : 0.5f * (x[n / 2 - 1] + x[n / 2]);
}

/* --gate: holds the legacy stream (and so the backend's blocking stream) while the host enqueues. */
static void CUDART_CB gate_fn(void *arg) {
    (void)arg;
    struct timespec ts = {gate_us / 1000000, (long)(gate_us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

/* xorshift normal(0,1) via Box-Muller; never exactly 0. */
static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng_s ^= rng_s << 13, rng_s ^= rng_s >> 7, rng_s ^= rng_s << 17;
    return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static void fill_randn(float *x, size_t n) {
    for (size_t i = 0; i < n; i += 2) {
        const double r = sqrt(-2.0 * log(urand())), t = 6.283185307179586 * urand();
        x[i] = (float)(r * cos(t));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(t));
    }
}

/* ---- the device's limits ---- */
typedef struct limits {
    double bw_gbs;      /* copy: (read + write) bytes / s / 1e9 */
    double sgemm_tfs;   /* FP32 FMA GEMM, TFLOP/s */
    double tf32_tfs;    /* TF32 tensor-core GEMM, TFLOP/s */
} limits;

static double time_copy(size_t bytes) {
    void *a = NULL, *b = NULL;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[12];
    for (int i = -2; i < 10; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 0) CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b);
    return 2.0 * (double)bytes / (median(t, 10) * 1e-3) / 1e9;
}

#ifdef VLA_BENCH_HAVE_CUBLAS
static double time_gemm(int n, int tf32) {
    const size_t nn = (size_t)n * n;
    float *h = malloc(nn * sizeof *h), *A, *B, *C;
    if (!h) return 0;
    fill_randn(h, nn);
    CK(cudaMalloc((void **)&A, nn * 4));
    CK(cudaMalloc((void **)&B, nn * 4));
    CK(cudaMalloc((void **)&C, nn * 4));
    CK(cudaMemcpy(A, h, nn * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, h, nn * 4, cudaMemcpyHostToDevice));
    free(h);
    cublasHandle_t hd;
    if (cublasCreate(&hd) != CUBLAS_STATUS_SUCCESS) return 0;
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[8];
    int ok = 1;
    for (int i = -2; i < 8 && ok; i++) {
        CK(cudaEventRecord(e0, 0));
        cublasStatus_t s;
        if (tf32)
            s = cublasGemmEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero, C,
                             CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasSgemm(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
        ok = s == CUBLAS_STATUS_SUCCESS;
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 0) CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    cublasDestroy(hd);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(A), cudaFree(B), cudaFree(C);
    return ok ? 2.0 * (double)n * n * n / (median(t, 8) * 1e-3) / 1e12 : 0;
}
#endif

/* ---- FLOP and byte counts (per head; multiply-adds, x2 for FLOP). K = dk, V = dv. ---- */
typedef struct count {
    double flop, bytes;
    const char *formula;
} count;

static int u_given = 0; /* --u-given: VLA rows get penalty vectors u (another input set's q), as the paper preset */
static double chunk_s_macs(double c, double K, double V) { /* sstep: E = V - K X; Lw; solve; O; M; O += M E; X += W^T E */
    return 3 * c * K * V + 2 * c * c * K + c * c * V + c * c * V / 2;
}
static double chunk_a_macs(double c, double K) { /* a_part: Z = U A; G; Cholesky; solve; K A; K Z^T; M Z; Z^T Z */
    return 3 * c * K * K + 3 * c * c * K + c * c * c / 6 + c * c * K / 2;
}

static count count_of(vla_mechanism m, vla_algorithm a, double T, double K, double V, double heads) {
    const double C = 64, nc = ceil(T / C), io = 4.0 * T * (2 * K + 2 * V); /* q, k, v read; o written */
    count r = {0, 0, ""};
    if (m == VLA_MECH_SOFTMAX) {
        r.flop = 2 * (T * (T + 1) / 2) * (K + V);
        r.bytes = io;
        r.formula = "2*T(T+1)/2*(K+V)  ; 4T(2K+2V)";
    } else if (m != VLA_MECH_VLA && a == VLA_ALGO_SEQUENTIAL) {
        /* per token: linear S += k v^T, o = S^T q (2KV); delta also y = S^T k (3KV) */
        r.flop = 2 * T * (m == VLA_MECH_LINEAR ? 2 : 3) * K * V;
        r.bytes = io + 4 * (K * V + (m == VLA_MECH_LINEAR ? K : 0));
        r.formula = m == VLA_MECH_LINEAR ? "2*T*2KV  ; 4T(2K+2V) + 4(KV+K)" : "2*T*3KV  ; 4T(2K+2V) + 4KV";
    } else if (m == VLA_MECH_LINEAR) {
        r.flop = 2 * nc * (2 * C * K * V + C * C * (K + V));
        r.bytes = io + 4 * (K * V + K);
        r.formula = "2*n_c*(2CKV + C^2(K+V))  ; 4T(2K+2V) + 4(KV+K)";
    } else if (m == VLA_MECH_DELTA) {
        r.flop = 2 * nc * chunk_s_macs(C, K, V);
        r.bytes = io + 4 * K * V;
        r.formula = "2*n_c*(3CKV + 2C^2K + 1.5C^2V)  ; 4T(2K+2V) + 4KV";
    } else {
        const double st = 4 * (K * V + K * K);
        switch (a) {
        case VLA_ALGO_SEQUENTIAL:
            r.flop = 2 * T * (3 * K * K + 3 * K * V);
            r.bytes = io + st;
            r.formula = "2*T*(3K^2 + 3KV)  ; 4T(2K+2V) + 4(KV+K^2)";
            break;
        case VLA_ALGO_CHUNKED:
            /* The chunk-parallel form (kernels/cuda/vla_chunkpar.cu; R = 0, K <= 64), operations as
             * executed (full C x C products, not their triangles), a chunk: Gram C K^2; inversion
             * K^3 (one a segment: counted a chunk, an upper bound); A part U A0, K A0, Z^T Z 3CK^2 +
             * G, K Z^T, M Z 3C^2K + Cholesky C^3/6 + Z solve C^2K/2; S factors Lw C^2K + solves
             * C^2(K+V)/2 + P, Q CK^2 + CKV; walk K^2 V; output Q Al^T, Pm W 2C^2K + Q X CKV + Pm Y
             * C^2V. Bytes: q k v o, the A^{-1} prefix (double: written twice, read twice), a_t and
             * W (written, read twice), Y (written, read), the maps and chunk-start states.
             * With u = k^ (u not given, since session 23) the A part takes a_t from Z's rows: no K A0,
             * K Z^T or M Z (CK^2 + 2C^2K less; before that session the general count was printed for
             * every row). */
            if (u_given) {
                r.flop = 2 * nc * (5 * C * K * K + K * K * K + 7 * C * C * K + C * C * C / 6 + 2 * C * K * V + K * K * V +
                                   1.5 * C * C * V);
                r.formula = "2*n_c*(5CK^2+K^3+7C^2K+C^3/6+2CKV+K^2V+1.5C^2V)  ; 4T(2K+2V) + 32n_cK^2 + 24TK + 8TV + 8n_cK(K+2V)";
            } else {
                r.flop = 2 * nc * (4 * C * K * K + K * K * K + 5 * C * C * K + C * C * C / 6 + 2 * C * K * V + K * K * V +
                                   1.5 * C * C * V);
                r.formula = "2*n_c*(4CK^2+K^3+5C^2K+C^3/6+2CKV+K^2V+1.5C^2V)  ; 4T(2K+2V) + 32n_cK^2 + 24TK + 8TV + 8n_cK(K+2V)";
            }
            r.bytes = io + st + 32 * nc * K * K + 24 * T * K + 8 * T * V + 8 * nc * K * (K + 2 * V);
            break;
        case VLA_ALGO_TWO_LEVEL:
            /* Gram (C K^2 a chunk) + A part + the chunk map on [M|N] (S part at width K+V) +
             * the S part again for the outputs; segment inverses and the map scan are O(K^3)
             * per segment and left out. Bytes: a_t written once, read once (8TK). */
            r.flop = 2 * nc * (C * K * K + chunk_a_macs(C, K) + chunk_s_macs(C, K, K + V) + chunk_s_macs(C, K, V));
            r.bytes = io + st + 8 * T * K;
            r.formula = "2*n_c*(CK^2 + A part + S part(K+V) + S part(V))  ; 4T(2K+2V) + 8TK + 4(KV+K^2)";
            break;
        case VLA_ALGO_SCAN: {
            /* a_t as two-level; maps built (TK(K+V)); Brent-Kung ~2T compositions of K^2(K+V);
             * outputs T(K(K+V) + KV). Bytes: the maps written once and read once. */
            const double ncomb = 2 * T;
            r.flop = 2 * (nc * (C * K * K + chunk_a_macs(C, K)) + T * K * (K + V) + ncomb * K * K * (K + V) +
                          T * (K * (K + V) + K * V));
            r.bytes = io + st + 8 * T * K * (K + V) + 8 * T * K;
            r.formula = "2*(A part + 2T*K^2(K+V) + 2T*K(K+V))  ; 4T(2K+2V) + 8TK(K+V) + 8TK";
            break;
        }
        default: break;
        }
    }
    r.flop *= heads;
    r.bytes *= heads;
    return r;
}

/* ---- one (mechanism, algorithm, shape) measurement ---- */
typedef struct shape {
    int B, H, d, T;
    double target_ms; /* VLA target (0: none) */
} shape;

typedef struct inputs {
    vla_buffer *q[3], *k[3], *v[3], *o, *S, *A, *n;
    vla_buffer *pad[9]; /* VLA_BENCH_PAD (development): unused buffers between the inputs */
} inputs;

static vla_backend *be;
static limits lim;
static float *host_rand; /* shared random source for every upload */
static size_t host_n;

static void upload_rand(vla_buffer *b, size_t n, size_t shift) {
    if (n + shift > host_n) shift = 0;
    if (vla_buffer_upload(b, 0, host_rand + shift, n * sizeof(float)) != VLA_OK) {
        fprintf(stderr, "bench: upload failed: %s\n", vla_last_message());
        exit(1);
    }
}

static vla_buffer *alloc_buf(size_t n) {
    vla_buffer *b = NULL;
    if (vla_buffer_alloc(be, n * sizeof(float), &b) != VLA_OK) return NULL;
    return b;
}

static int make_inputs(const shape *s, inputs *in) {
    memset(in, 0, sizeof *in);
    const size_t nt = (size_t)s->B * s->T * s->H * s->d;
    /* VLA_BENCH_PAD=bytes (development, session 18): an unused buffer of that size allocated before
     * each of q, k and v, to move the inputs in memory */
    const char *pe = getenv("VLA_BENCH_PAD");
    const size_t pad = pe && *pe ? (size_t)strtoull(pe, NULL, 10) / sizeof(float) : 0;
    for (int i = 0; i < 3; i++) {
        if (pad && (!(in->pad[3 * i] = alloc_buf(pad)))) return -1;
        if (!(in->q[i] = alloc_buf(nt))) return -1;
        if (pad && (!(in->pad[3 * i + 1] = alloc_buf(pad)))) return -1;
        if (!(in->k[i] = alloc_buf(nt))) return -1;
        if (pad && (!(in->pad[3 * i + 2] = alloc_buf(pad)))) return -1;
        if (!(in->v[i] = alloc_buf(nt))) return -1;
        upload_rand(in->q[i], nt, 1000 * i + 1), upload_rand(in->k[i], nt, 1000 * i + 7);
        upload_rand(in->v[i], nt, 1000 * i + 13);
    }
    const size_t ns = (size_t)s->B * s->H * s->d * s->d;
    if (!(in->o = alloc_buf(nt)) || !(in->S = alloc_buf(ns)) || !(in->A = alloc_buf(ns)) ||
        !(in->n = alloc_buf((size_t)s->B * s->H * s->d)))
        return -1;
    return 0;
}

static void free_inputs(inputs *in) {
    for (int i = 0; i < 3; i++) vla_buffer_free(in->q[i]), vla_buffer_free(in->k[i]), vla_buffer_free(in->v[i]);
    for (int i = 0; i < 9; i++) vla_buffer_free(in->pad[i]);
    vla_buffer_free(in->o), vla_buffer_free(in->S), vla_buffer_free(in->A), vla_buffer_free(in->n);
    memset(in, 0, sizeof *in);
}

typedef struct row {
    char shape[48], mech[12], algo[16], status[96];
    double ms, ms_min, ms_max, target, flop, bytes;
    double host_us; /* median host time of vla_attention_forward (its checks, planning and launches) */
    const char *formula;
    int nsamp;
    float samp[MAXS];
} row;

static row rows[256];
static int nrows = 0;
static int dec_B = 8, dec_H = 16, dec_d = 64; /* the decode step's shape */

static void print_row_json(const row *r) {
    if (!json) return;
    fprintf(json, "%s\n  {\"shape\": \"%s\", \"mechanism\": \"%s\", \"algorithm\": \"%s\", \"status\": \"%s\", "
                  "\"median_ms\": %.6g, \"min_ms\": %.6g, \"max_ms\": %.6g, \"target_ms\": %.6g, \"flop\": %.6g, "
                  "\"bytes\": %.6g, \"host_us\": %.4g, \"formula\": \"%s\", \"samples_ms\": [",
            json_rows++ ? "," : "", r->shape, r->mech, r->algo, r->status, r->ms, r->ms_min, r->ms_max, r->target,
            r->flop, r->bytes, r->host_us, r->formula);
    for (int i = 0; i < r->nsamp; i++) fprintf(json, "%s%.6g", i ? ", " : "", r->samp[i]);
    fprintf(json, "]}");
}

/* Times one configuration; fills a row. est_ms: a prediction (from a smaller T) or 0. */
static void run_one(const shape *s, inputs *in, vla_mechanism m, vla_algorithm a, double est_ms) {
    row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "(%d,%d,%d) T=%d", s->B, s->H, s->d, s->T);
    snprintf(r->mech, sizeof r->mech, "%s", vla_mechanism_name(m));
    snprintf(r->algo, sizeof r->algo, "%s", vla_algorithm_name(a));
    r->target = m == VLA_MECH_VLA ? s->target_ms : 0;
    const count c = count_of(m, a, s->T, s->d, s->d, (double)s->B * s->H);
    r->flop = c.flop, r->bytes = c.bytes, r->formula = c.formula;
    r->ms = NAN;
    if (est_ms > 10000) {
        snprintf(r->status, sizeof r->status, "skipped (est. %.0f s > 10 s)", est_ms / 1e3);
        fprintf(stderr, "  %-22s %-8s %-11s %s\n", r->shape, r->mech, r->algo, r->status);
        return;
    }
    vla_attn_desc d;
    vla_attn_desc_init(&d, m);
    d.algorithm = a;
    vla_attn_args args = {.B = s->B, .T = s->T, .H = s->H, .dk = s->d, .dv = s->d, .o = in->o};
    if (m != VLA_MECH_SOFTMAX) args.S_out = in->S;
    if (m == VLA_MECH_VLA) args.A_out = in->A;
    if (m == VLA_MECH_LINEAR) args.n_out = in->n;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* warm-up (module load, workspace growth; since session 17 each input set twice, so that the
     * backend's graph cache has captured every call the timed loop makes), which also gives the
     * first estimate */
    float t1 = 0;
    for (int w = 0; w < 6; w++) {
        args.q = in->q[w % 3], args.k = in->k[w % 3], args.v = in->v[w % 3];
        if (m == VLA_MECH_VLA && u_given) args.u = in->q[(w + 1) % 3];
        CK(cudaEventRecord(e0, 0));
        const vla_status st = vla_attention_forward(be, &d, &args);
        CK(cudaEventRecord(e1, 0));
        if (st != VLA_OK) {
            snprintf(r->status, sizeof r->status, "%s", st == VLA_ERR_OUT_OF_MEMORY ? "skipped (out of memory)" : vla_status_string(st));
            fprintf(stderr, "  %-22s %-8s %-11s %s: %s\n", r->shape, r->mech, r->algo, r->status, vla_backend_message(be));
            cudaEventDestroy(e0), cudaEventDestroy(e1);
            return;
        }
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t1, e0, e1));
        if (t1 > 5000) break; /* one long warm-up is enough */
    }
    float host[MAXS];
    int reps = quick ? 3 : (int)(2000.0 / (t1 > 0.01 ? t1 : 0.01));
    if (reps > (quick ? 5 : 30)) reps = quick ? 5 : 30;
    if (reps < 3) reps = 3;
    if (t1 > 3000) reps = 1;
    for (int i = 0; i < reps; i++) {
        args.q = in->q[i % 3], args.k = in->k[i % 3], args.v = in->v[i % 3];
        if (m == VLA_MECH_VLA && u_given) args.u = in->q[(i + 1) % 3];
        if (gate_us > 0) CK(cudaLaunchHostFunc(0, gate_fn, NULL));
        CK(cudaEventRecord(e0, 0));
        struct timespec h0, h1;
        clock_gettime(CLOCK_MONOTONIC, &h0);
        vla_attention_forward(be, &d, &args);
        clock_gettime(CLOCK_MONOTONIC, &h1);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&r->samp[i], e0, e1));
        host[i] = (float)(1e6 * ((double)(h1.tv_sec - h0.tv_sec) + 1e-9 * (double)(h1.tv_nsec - h0.tv_nsec)));
    }
    r->host_us = median(host, reps);
    r->nsamp = reps;
    float tmp[MAXS];
    memcpy(tmp, r->samp, sizeof(float) * reps);
    r->ms = median(tmp, reps);
    r->ms_min = tmp[0], r->ms_max = tmp[reps - 1];
    snprintf(r->status, sizeof r->status, "ok");
    fprintf(stderr, "  %-22s %-8s %-11s %10.4f ms (%d reps)\n", r->shape, r->mech, r->algo, r->ms, reps);
    fprintf(stderr, "    host %.1f us a call (median: the library's checks, planning and launches)\n", r->host_us);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

/* The decode step: 1000 back-to-back T = 1 calls, states carried in place. */
static void run_decode(vla_mechanism m) {
    const int B = dec_B, H = dec_H, d = dec_d, N = quick ? 200 : 1000;
    row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "decode (%d,%d,%d) T=1", B, H, d);
    snprintf(r->mech, sizeof r->mech, "%s", vla_mechanism_name(m));
    snprintf(r->algo, sizeof r->algo, "sequential");
    r->target = m == VLA_MECH_VLA ? 0.010 : 0;
    const count c = count_of(m, VLA_ALGO_SEQUENTIAL, 1, d, d, (double)B * H);
    r->flop = c.flop;
    /* per step: S (and A) read and written, q k v read, o written */
    r->bytes = (double)B * H * 4 * (2.0 * d * d * (m == VLA_MECH_VLA ? 2 : 1) + 4 * d);
    r->formula = m == VLA_MECH_VLA ? "per step: 2(3K^2+3KV)  ; 4(2KV + 2K^2 + 2K+2V) per head"
                 : m == VLA_MECH_LINEAR ? "per step: 2*2KV  ; 4(2KV + 2K+2V) per head (n left out)"
                                        : "per step: 2*3KV  ; 4(2KV + 2K+2V) per head";
    shape s = {B, H, d, 1, 0};
    inputs in;
    if (make_inputs(&s, &in) != 0) {
        snprintf(r->status, sizeof r->status, "allocation failed");
        return;
    }
    /* valid states: S = 0.1 N(0,1), A = I / lambda0, n = 1 */
    const size_t ns = (size_t)B * H * d * d;
    float *h = malloc(ns * sizeof *h);
    for (size_t i = 0; i < ns; i++) h[i] = 0.1f * host_rand[i];
    vla_buffer_upload(in.S, 0, h, ns * 4);
    for (size_t i = 0; i < ns; i++) h[i] = (i / d) % d == i % d ? 10.0f : 0.0f;
    vla_buffer_upload(in.A, 0, h, ns * 4);
    for (size_t i = 0; i < (size_t)B * H * d; i++) h[i] = 1.0f;
    vla_buffer_upload(in.n, 0, h, (size_t)B * H * d * 4);
    free(h);
    vla_attn_desc desc;
    vla_attn_desc_init(&desc, m);
    desc.algorithm = VLA_ALGO_SEQUENTIAL;
    vla_attn_args a = {.B = B, .T = 1, .H = H, .dk = d, .dv = d, .o = in.o, .S_in = in.S, .S_out = in.S};
    if (m == VLA_MECH_VLA) a.A_in = in.A, a.A_out = in.A;
    if (m == VLA_MECH_LINEAR) a.n_in = in.n, a.n_out = in.n;
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (N + 1));
    for (int i = 0; i <= N; i++) CK(cudaEventCreate(&ev[i]));
    for (int w = 0; w < 20; w++) { /* warm-up */
        a.q = in.q[w % 3], a.k = in.k[w % 3], a.v = in.v[w % 3], a.t0 = w;
        if (vla_attention_forward(be, &desc, &a) != VLA_OK) {
            snprintf(r->status, sizeof r->status, "failed: %.50s", vla_backend_message(be));
            goto done;
        }
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < N; i++) {
        a.q = in.q[i % 3], a.k = in.k[i % 3], a.v = in.v[i % 3], a.t0 = 20 + i;
        CK(cudaEventRecord(ev[i], 0));
        vla_attention_forward(be, &desc, &a);
    }
    CK(cudaEventRecord(ev[N], 0));
    CK(cudaEventSynchronize(ev[N]));
    {
        float *t = malloc(sizeof(float) * N);
        double sum = 0;
        for (int i = 0; i < N; i++) {
            CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
            sum += t[i];
        }
        for (int i = 0; i < MAXS && i < N; i++) r->samp[i] = t[i];
        r->nsamp = N < MAXS ? N : MAXS;
        r->ms = median(t, N);
        r->ms_min = t[0], r->ms_max = t[N - 1];
        free(t);
        /* The host's share: the same N calls with no events, host clock around the enqueueing
         * (a step cannot take less than this), then the wall time once the queue drains. */
        struct timespec h0, h1, h2;
        clock_gettime(CLOCK_MONOTONIC, &h0);
        for (int i = 0; i < N; i++) {
            a.q = in.q[i % 3], a.k = in.k[i % 3], a.v = in.v[i % 3], a.t0 = 20 + N + i;
            vla_attention_forward(be, &desc, &a);
        }
        clock_gettime(CLOCK_MONOTONIC, &h1);
        CK(cudaDeviceSynchronize());
        clock_gettime(CLOCK_MONOTONIC, &h2);
        const double host_us = 1e6 * ((h1.tv_sec - h0.tv_sec) + 1e-9 * (h1.tv_nsec - h0.tv_nsec)) / N;
        const double wall_us = 1e6 * ((h2.tv_sec - h0.tv_sec) + 1e-9 * (h2.tv_nsec - h0.tv_nsec)) / N;
        snprintf(r->status, sizeof r->status, "ok (mean %.2f us; host %.2f, wall %.2f us/call)", 1e3 * sum / N, host_us,
                 wall_us);
    }
    fprintf(stderr, "  %-22s %-8s decode median %.2f us, %s\n", r->shape, r->mech, r->ms * 1e3, r->status);
done:
    for (int i = 0; i <= N; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free_inputs(&in);
}

static void print_table(void) {
    printf("\n## libvla CUDA backend on %s\n\n", vla_backend_device(be));
    printf("Device limits measured in this run: copy %.0f GB/s (read+write); FP32 SGEMM %.1f TFLOP/s; "
           "TF32 GEMM %.1f TFLOP/s.\n",
           lim.bw_gbs, lim.sgemm_tfs, lim.tf32_tfs);
    printf("%%FP32 = achieved FLOP/s over the SGEMM rate; %%BW = the algorithm's minimum bytes over the copy rate.\n");
    if (gate_us > 0)
        printf("Gated (--gate %d): each call was enqueued while the stream was held, so these are GPU times without the\n"
               "host's part of a call's latency; the targets are ungated.\n", gate_us);
    printf("\n");
    printf("| shape | mech | algorithm | median ms | min..max ms | target ms | vs target | GFLOP/s | %%FP32 | GB/s | %%BW | FLOP ; bytes formula |\n");
    printf("|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (isnan(r->ms)) {
            printf("| %s | %s | %s | %s | | %s | | | | | | %s |\n", r->shape, r->mech, r->algo, r->status,
                   r->target > 0 ? "" : "", r->formula);
            continue;
        }
        const double s = r->ms * 1e-3, gf = r->flop / s / 1e9, gb = r->bytes / s / 1e9;
        char tgt[32] = "", vs[32] = "";
        if (r->target > 0) {
            snprintf(tgt, sizeof tgt, "%.3g", r->target);
            snprintf(vs, sizeof vs, "%s %.2fx", r->ms <= r->target ? "MET" : "missed", r->ms / r->target);
        }
        printf("| %s | %s | %s | %.4f | %.4f..%.4f | %s | %s | %.0f | %.1f%% | %.0f | %.1f%% | %s |\n", r->shape,
               r->mech, r->algo, r->ms, r->ms_min, r->ms_max, tgt, vs, gf,
               lim.sgemm_tfs > 0 ? 100 * gf / (lim.sgemm_tfs * 1e3) : 0, gb, lim.bw_gbs > 0 ? 100 * gb / lim.bw_gbs : 0,
               r->formula);
    }
    int said = 0;
    for (int i = 0; i < nrows; i++) {
        if (strncmp(rows[i].shape, "decode", 6)) continue;
        if (!said++)
            printf("\nDecode steps: mean of the per-call event times; host = time to enqueue one call (no events); "
                   "wall = the same calls' total over their count.\n\n");
        printf("- %s %s: %s\n", rows[i].shape, rows[i].mech, rows[i].status);
    }
    /* VLA targets: the best algorithm per shape */
    printf("\n### VLA targets (best algorithm per shape)\n\n| shape | best | median ms | target ms | result |\n|---|---|---:|---:|---|\n");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (strcmp(r->mech, "vla") || r->target <= 0) continue;
        int first = 1;
        for (int j = 0; j < i; j++)
            if (!strcmp(rows[j].shape, r->shape) && !strcmp(rows[j].mech, "vla")) first = 0;
        if (!first) continue;
        const row *best = NULL;
        for (int j = i; j < nrows; j++)
            if (!strcmp(rows[j].shape, r->shape) && !strcmp(rows[j].mech, "vla") && !isnan(rows[j].ms) &&
                (!best || rows[j].ms < best->ms))
                best = &rows[j];
        if (!best) {
            printf("| %s | - | - | %.3g | no result |\n", r->shape, r->target);
            continue;
        }
        printf("| %s | %s | %.4f | %.3g | %s (%.2fx) |\n", r->shape, best->algo, best->ms, r->target,
               best->ms <= r->target ? "MET" : "missed", best->ms / r->target);
    }
}

#define MAXSHAPES 16
static shape user_shapes[MAXSHAPES];
static int n_user_shapes = 0, no_limits = 0;

/* --only: is the row `name` selected? (all when --only is not given) */
static const char *only = NULL;
static int selected(const char *name) {
    if (!only) return 1;
    const size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-limits")) no_limits = 1;
        else if (!strcmp(argv[i], "--u-given")) u_given = 1;
        else if (!strcmp(argv[i], "--gate") && i + 1 < argc) {
            gate_us = atoi(argv[++i]);
            if (gate_us < 1 || gate_us > 1000000) {
                fprintf(stderr, "bench: --gate wants microseconds, 1 to 1000000\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && n_user_shapes < MAXSHAPES) {
            shape *s = &user_shapes[n_user_shapes];
            s->target_ms = 0;
            if (sscanf(argv[++i], "%d,%d,%d,%d,%lf", &s->B, &s->H, &s->d, &s->T, &s->target_ms) < 4 || s->B < 1 ||
                s->H < 1 || s->d < 1 || s->d > 256 || s->T < 1) {
                fprintf(stderr, "bench: --shape wants B,H,d,T[,target_ms]\n");
                return 2;
            }
            n_user_shapes++;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--decode") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d,%d,%d", &dec_B, &dec_H, &dec_d) != 3) {
                fprintf(stderr, "bench: --decode wants B,H,d\n");
                return 2;
            }
        } else {
            printf("usage: bench_cuda_targets [options]\n"
                   "  --quick              3-5 repetitions, decode 200 calls, T <= 32768 (a smoke run;\n"
                   "                       default: up to 30 repetitions, 1000 decode calls)\n"
                   "  --json FILE          every row with its raw samples (ms)\n"
                   "  --shape B,H,d,T[,ms] a shape to time instead of the targets' (repeatable)\n"
                   "  --decode B,H,d       the decode step's shape (default 8,16,64)\n"
                   "  --no-limits          skip the copy and GEMM measurements\n"
                   "  --u-given            VLA rows with penalty vectors u given (the paper preset's\n"
                   "                       path; default: u = k^, the targets' setting)\n"
                   "  --gate US            enqueue each timed call behind a US-microsecond host hold:\n"
                   "                       the GPU's time alone, without the host's (not the targets' measure)\n"
                   "  --only LIST          comma-separated rows to run, of vla-sequential, vla-scan,\n"
                   "                       vla-chunked, vla-two-level, softmax, linear, delta, decode\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    { /* VLA_BENCH_U_GIVEN=1 (development): --u-given, for scripts that pass a build's settings as environment */
        const char *ug = getenv("VLA_BENCH_U_GIVEN");
        if (ug && *ug == '1') u_given = 1;
    }
    if (vla_backend_open("cuda:0", &be) != VLA_OK) {
        fprintf(stderr, "bench: cuda:0: %s\n", vla_last_message());
        return 77;
    }
    fprintf(stderr, "bench: %s\n", vla_backend_device(be));
    host_n = (size_t)dec_B * dec_H * dec_d * dec_d + 4096; /* the largest tensor, plus room to shift */
    {
        const shape *ss = n_user_shapes ? user_shapes : NULL;
        const size_t big = (size_t)8 * 16 * 32768 * 64;
        if (!ss) host_n = host_n > big + 4096 ? host_n : big + 4096;
        for (int i = 0; i < n_user_shapes; i++) {
            const size_t n = (size_t)ss[i].B * ss[i].H * ss[i].d * ss[i].T + 4096;
            if (n > host_n) host_n = n;
        }
    }
    host_rand = malloc(host_n * sizeof(float));
    if (!host_rand) return 1;
    fill_randn(host_rand, host_n);

    if (!no_limits) {
        fprintf(stderr, "limits...\n");
        lim.bw_gbs = time_copy((size_t)2 << 30);
#ifdef VLA_BENCH_HAVE_CUBLAS
        lim.sgemm_tfs = time_gemm(8192, 0);
        lim.tf32_tfs = time_gemm(8192, 1);
#endif
    }
    fprintf(stderr, "  copy %.0f GB/s, SGEMM %.1f TFLOP/s, TF32 %.1f TFLOP/s\n", lim.bw_gbs, lim.sgemm_tfs, lim.tf32_tfs);

    static const shape target_shapes[] = {
        {1, 4, 32, 2048, 0.05},  {1, 4, 32, 8192, 0.12},  {1, 4, 32, 32768, 0.6},
        {1, 4, 32, 131072, 2.5}, {8, 16, 64, 2048, 0.5}, {8, 16, 64, 32768, 11.0},
    };
    const shape *shapes = n_user_shapes ? user_shapes : target_shapes;
    const size_t nshapes = n_user_shapes ? (size_t)n_user_shapes : sizeof target_shapes / sizeof target_shapes[0];
    const vla_algorithm valgos[] = {VLA_ALGO_SEQUENTIAL, VLA_ALGO_SCAN, VLA_ALGO_CHUNKED, VLA_ALGO_TWO_LEVEL};
    double last_ms[4] = {0, 0, 0, 0}, last_T = 0;
    int last_d = 0;
    for (size_t si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        if (quick && s->T > 32768) continue;
        if (s->d != last_d) last_T = 0, memset(last_ms, 0, sizeof last_ms);
        inputs in;
        if (make_inputs(s, &in) != 0) {
            fprintf(stderr, "bench: could not allocate the inputs of (%d,%d,%d) T=%d\n", s->B, s->H, s->d, s->T);
            free_inputs(&in);
            continue;
        }
        static const char *const vnames[] = {"vla-sequential", "vla-scan", "vla-chunked", "vla-two-level"};
        for (int ai = 0; ai < 4; ai++) {
            if (!selected(vnames[ai])) continue;
            double est = last_T > 0 && last_ms[ai] > 0 ? last_ms[ai] * s->T / last_T : 0;
            run_one(s, &in, VLA_MECH_VLA, valgos[ai], est);
            last_ms[ai] = rows[nrows - 1].ms > 0 ? rows[nrows - 1].ms : (est > 10000 ? est : 0);
        }
        if (selected("softmax")) run_one(s, &in, VLA_MECH_SOFTMAX, VLA_ALGO_FUSED, 0);
        if (selected("linear")) run_one(s, &in, VLA_MECH_LINEAR, VLA_ALGO_CHUNKED, 0);
        if (selected("delta")) run_one(s, &in, VLA_MECH_DELTA, VLA_ALGO_CHUNKED, 0);
        last_T = s->T, last_d = s->d;
        free_inputs(&in);
    }
    if (selected("decode")) {
        run_decode(VLA_MECH_VLA);
        run_decode(VLA_MECH_DELTA);
        run_decode(VLA_MECH_LINEAR);
    }

    print_table();
    if (json_path && (json = fopen(json_path, "w"))) {
        fprintf(json, "{\"device\": \"%s\", \"copy_gbs\": %.6g, \"sgemm_tflops\": %.6g, \"tf32_tflops\": %.6g, \"rows\": [",
                vla_backend_device(be), lim.bw_gbs, lim.sgemm_tfs, lim.tf32_tfs);
        for (int i = 0; i < nrows; i++) print_row_json(&rows[i]);
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    vla_backend_close(be);
    free(host_rand);
    return 0;
}
