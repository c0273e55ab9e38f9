/* Uses an installed libvla the way a user would: header from the install, "cpu" backend, one
 * small VLA op on random data. Prints OK and exits 0 when everything worked. */
#include <vla/vla.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, T = 16, H = 2, DK = 8, DV = 8 };

static int check(vla_status s, const char *what) {
    if (s == VLA_OK) return 0;
    fprintf(stderr, "install test: %s: %s: %s\n", what, vla_status_string(s), vla_last_message());
    return 1;
}

/* Uniform in [-1, 1), from a fixed LCG so every run sees the same data. */
static float rnd(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) / 8388608.0 - 1.0);
}

/* One forward over q, k [B,T,H,DK] and v [B,T,H,DV]; o [B,T,H,DV] comes back in o. */
static int run_op(vla_backend *b, const float *q, const float *k, const float *v, float *o) {
    vla_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL;
    size_t nqk = sizeof(float) * B * T * H * DK, nvo = sizeof(float) * B * T * H * DV;
    vla_attn_desc d;
    vla_attn_args a;
    memset(&a, 0, sizeof a);
    int bad = check(vla_attn_desc_init(&d, VLA_MECH_VLA), "vla_attn_desc_init") ||
              check(vla_buffer_alloc(b, nqk, &bq), "alloc q") || check(vla_buffer_alloc(b, nqk, &bk), "alloc k") ||
              check(vla_buffer_alloc(b, nvo, &bv), "alloc v") || check(vla_buffer_alloc(b, nvo, &bo), "alloc o") ||
              check(vla_buffer_upload(bq, 0, q, nqk), "upload q") || check(vla_buffer_upload(bk, 0, k, nqk), "upload k") ||
              check(vla_buffer_upload(bv, 0, v, nvo), "upload v");
    if (!bad) {
        a.B = B, a.T = T, a.H = H, a.dk = DK, a.dv = DV;
        a.q = bq, a.k = bk, a.v = bv, a.o = bo;
        bad = check(vla_attention_forward(b, &d, &a), "vla_attention_forward") ||
              check(vla_buffer_download(bo, 0, o, nvo), "download o");
    }
    vla_buffer_free(bq);
    vla_buffer_free(bk);
    vla_buffer_free(bv);
    vla_buffer_free(bo);
    return bad;
}

int main(void) {
    if (strcmp(vla_version(), VLA_VERSION_STRING) != 0) {
        fprintf(stderr, "install test: library version %s, header version %s\n", vla_version(), VLA_VERSION_STRING);
        return 1;
    }
    static float q[B * T * H * DK], k[B * T * H * DK], v[B * T * H * DV], o[B * T * H * DV];
    unsigned seed = 12345;
    for (int i = 0; i < B * T * H * DK; i++) q[i] = rnd(&seed), k[i] = rnd(&seed);
    for (int i = 0; i < B * T * H * DV; i++) v[i] = rnd(&seed), o[i] = NAN; /* poisoned */

    vla_backend *b = NULL;
    if (check(vla_backend_open("cpu", &b), "vla_backend_open(\"cpu\")")) return 1;
    int bad = run_op(b, q, k, v, o);
    vla_backend_close(b);
    if (bad) return 1;

    /* Every output written and finite. */
    for (int i = 0; i < B * T * H * DV; i++)
        if (!isfinite(o[i])) {
            fprintf(stderr, "install test: o[%d] = %g is not finite\n", i, o[i]);
            return 1;
        }
    /* The first token has a closed form (VLA-MATH 1): k^ is an eigenvector of A_0 = (I/lambda0 +
     * k^ k^T)^-1, so a_0 = k^, S_0 = v_0 k^T and o_0 = v_0 (k^ . q_0). */
    for (int h = 0; h < H; h++) {
        const float *qh = q + h * DK, *kh = k + h * DK, *vh = v + h * DV, *oh = o + h * DV;
        double kk = 0, kq = 0;
        for (int i = 0; i < DK; i++) kk += (double)kh[i] * kh[i], kq += (double)kh[i] * qh[i];
        double c = kq / fmax(sqrt(kk), 1e-4);
        for (int j = 0; j < DV; j++)
            if (fabs(oh[j] - vh[j] * c) > 1e-5 * (1 + fabs(vh[j] * c))) {
                fprintf(stderr, "install test: o[t=0,h=%d,%d] = %g, expected %g\n", h, j, oh[j], vh[j] * c);
                return 1;
            }
    }
    printf("OK libvla %s\n", vla_version());
    return 0;
}
