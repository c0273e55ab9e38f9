#include <stdio.h> /* session 15: chunkpar_walk's segment-length search as it was, timed on the host (gcc -O2) */
#include <time.h>
int main(int argc, char **argv) {
    volatile long long heads_v = 4, sms_v = 132; volatile int nch_v = 2048, dk_v = 32, dv_v = 32;
    struct timespec a, b;
    int reps = 1000; double sum = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int r = 0; r < reps; r++) {
        const long long heads = heads_v, sms = sms_v; const int nch = nch_v, DK = dk_v, dv = dv_v;
        const long long nvb = (dv + 31) / 32, slots = 2 * sms;
        const double s = 0.5;
        int L = 2; double best = -1;
        for (int l = 2; l < nch; l++) {
            const long long ns = (nch + l - 1) / l;
            const long long wm = (heads * (DK / 32 + nvb) * ns + slots - 1) / slots, wl = (heads * nvb * ns + slots - 1) / slots;
            const double cost = (double)(wm + wl) * l + s * (double)ns;
            if (best < 0 || cost < best) best = cost, L = l;
        }
        sum += L;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f us per search (L=%g)\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / reps, sum / reps);
}
