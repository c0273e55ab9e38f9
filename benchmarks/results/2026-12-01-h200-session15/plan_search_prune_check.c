/* session 15: the pruned segment-length search against the whole range (the same L in every case) */
#include <stdio.h>
static int full(long long heads, int nch, int DK, int dv, long long sms, double s) {
    const long long nvb = (dv + 31) / 32, slots = 2 * sms; int L = 2; double best = -1;
    for (int l = 2; l < nch; l++) {
        const long long ns = (nch + l - 1) / l;
        const long long wm = (heads * (DK / 32 + nvb) * ns + slots - 1) / slots, wl = (heads * nvb * ns + slots - 1) / slots;
        const double cost = (double)(wm + wl) * l + s * (double)ns;
        if (best < 0 || cost < best) best = cost, L = l;
    }
    return L;
}
static int pruned(long long heads, int nch, int DK, int dv, long long sms, double s) {
    const long long nvb = (dv + 31) / 32, slots = 2 * sms; int L = 2; double best = -1;
    for (int l = 2; l < nch; l++) {
        if (best >= 0 && 2.0 * l >= best) break; /* cost(l) >= 2 l: no later l is cheaper */
        const long long ns = (nch + l - 1) / l;
        const long long wm = (heads * (DK / 32 + nvb) * ns + slots - 1) / slots, wl = (heads * nvb * ns + slots - 1) / slots;
        const double cost = (double)(wm + wl) * l + s * (double)ns;
        if (best < 0 || cost < best) best = cost, L = l;
    }
    return L;
}
int main(void) {
    long n = 0, bad = 0;
    for (long long heads = 1; heads <= 64; heads = heads < 8 ? heads + 1 : heads * 2)
      for (int nch = 3; nch <= 70000; nch = nch < 300 ? nch + 1 : nch * 5 / 4)
        for (int DK = 32; DK <= 64; DK += 32)
          for (int dv = 1; dv <= 256; dv = dv < 40 ? dv + 7 : dv * 2)
            for (long long sms = 40; sms <= 132; sms += 92)
              for (int si = 0; si < 2; si++) {
                double s = si ? 0.5 : 1.0; n++;
                if (full(heads, nch, DK, dv, sms, s) != pruned(heads, nch, DK, dv, sms, s)) { if (bad++ < 5) printf("diff heads %lld nch %d DK %d dv %d sms %lld s %g: %d vs %d\n", heads, nch, DK, dv, sms, s, full(heads, nch, DK, dv, sms, s), pruned(heads, nch, DK, dv, sms, s)); }
              }
    printf("%ld cases, %ld differ\n", n, bad);
}
