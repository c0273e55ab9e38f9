/* vla-train's checkpoint: everything a run needs to continue exactly where it stopped.
 *
 * File (native byte order; the endianness tag refuses a file from a machine of the other order):
 *   "VLATRAIN"                 8 bytes of magic
 *   u32 version (1), u32 endianness tag 0x01020304
 *   u64 header fields           CK_N_FIELDS of them, in the order of ck_state below (doubles as
 *                               their bit patterns)
 *   f32 params[n], m[n], v[n]   the flat parameter buffer and AdamW's two moments
 *   u64 FNV-1a 64 of every byte before it
 * Written atomically: a temporary file in the same directory, fsync, rename over the old one,
 * fsync of the directory. A crash at any moment leaves the previous checkpoint or the new one,
 * never a mix. */
#ifndef VLA_TRAIN_CHECKPOINT_H
#define VLA_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define CK_VERSION 1u

typedef struct ck_state {
    /* What the run is: a resume must agree on all of it. */
    int64_t mixer, V, d, H, L, F, max_T;
    int64_t task, pairs, T;
    int64_t steps, warmup, batch;
    uint64_t seed;
    double lr, weight_decay, clip;
    /* How it reports (a resume keeps these unless the command line gives others). */
    int64_t log_every, eval_every, eval_batches, eval_batch, ckpt_every;
    /* Where it is. */
    int64_t step;      /* optimizer steps done (the next one is 0-based step `step`) */
    tr_rng train_rng;  /* the training data stream after `step` batches */
    uint64_t n_params; /* length of each of params, m, v */
} ck_state;

/* Writes path atomically. params [n], moments [2n] (m then v). 0, or -1 with one line in err;
 * on failure the file at path is untouched. */
int ck_save(const char *path, const ck_state *st, const float *params, const float *moments, char *err,
            size_t errlen);

/* Reads and checks path: magic, version, byte order, size, checksum. On success *params [n] and
 * *moments [2n] are malloc'ed. 0, 1 if path does not exist (nothing else set), or -1 with one
 * line in err. */
int ck_load(const char *path, ck_state *st, float **params, float **moments, char *err, size_t errlen);

#endif
