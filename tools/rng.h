/* xoshiro256** seeded through splitmix64 (Blackman and Vigna), on a state of four words: the
 * generator behind vla-bench's inputs (bench_rng) and vla-train's streams (tr_rng), so that both
 * draw the same numbers from the same seed on every machine. Header-only: the two link no common
 * library. */
#ifndef VLA_TOOLS_RNG_H
#define VLA_TOOLS_RNG_H

#include <stdint.h>

static inline uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* s from splitmix64 of seed: never all zero. */
static inline void rng_xoshiro_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = rng_splitmix64(&seed);
}

static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_xoshiro_next(uint64_t s[4]) {
    const uint64_t out = rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return out;
}

#endif
