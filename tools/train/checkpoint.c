/* vla-train's checkpoint file (format in checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'V', 'L', 'A', 'T', 'R', 'A', 'I', 'N'};
#define ENDIAN_TAG 0x01020304u
enum { CK_N_FIELDS = 32 }; /* 23 scalars, 4 rng words, n_params, 4 reserved (zero) */
#define HEADER_BYTES (8 + 4 + 4 + 8 * CK_N_FIELDS)

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_START 0xcbf29ce484222325ull

static uint64_t dbits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}
static double bitsd(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}

/* The header fields in file order. */
static void pack(const ck_state *s, uint64_t f[CK_N_FIELDS]) {
    int i = 0;
    f[i++] = (uint64_t)s->mixer, f[i++] = (uint64_t)s->V, f[i++] = (uint64_t)s->d, f[i++] = (uint64_t)s->H;
    f[i++] = (uint64_t)s->L, f[i++] = (uint64_t)s->F, f[i++] = (uint64_t)s->max_T;
    f[i++] = (uint64_t)s->task, f[i++] = (uint64_t)s->pairs, f[i++] = (uint64_t)s->T;
    f[i++] = (uint64_t)s->steps, f[i++] = (uint64_t)s->warmup, f[i++] = (uint64_t)s->batch;
    f[i++] = s->seed;
    f[i++] = dbits(s->lr), f[i++] = dbits(s->weight_decay), f[i++] = dbits(s->clip);
    f[i++] = (uint64_t)s->log_every, f[i++] = (uint64_t)s->eval_every, f[i++] = (uint64_t)s->eval_batches;
    f[i++] = (uint64_t)s->eval_batch, f[i++] = (uint64_t)s->ckpt_every;
    f[i++] = (uint64_t)s->step;
    for (int k = 0; k < 4; k++) f[i++] = s->train_rng.s[k];
    f[i++] = s->n_params;
    while (i < CK_N_FIELDS) f[i++] = 0; /* reserved */
}

static void unpack(ck_state *s, const uint64_t f[CK_N_FIELDS]) {
    int i = 0;
    s->mixer = (int64_t)f[i++], s->V = (int64_t)f[i++], s->d = (int64_t)f[i++], s->H = (int64_t)f[i++];
    s->L = (int64_t)f[i++], s->F = (int64_t)f[i++], s->max_T = (int64_t)f[i++];
    s->task = (int64_t)f[i++], s->pairs = (int64_t)f[i++], s->T = (int64_t)f[i++];
    s->steps = (int64_t)f[i++], s->warmup = (int64_t)f[i++], s->batch = (int64_t)f[i++];
    s->seed = f[i++];
    s->lr = bitsd(f[i++]), s->weight_decay = bitsd(f[i++]), s->clip = bitsd(f[i++]);
    s->log_every = (int64_t)f[i++], s->eval_every = (int64_t)f[i++], s->eval_batches = (int64_t)f[i++];
    s->eval_batch = (int64_t)f[i++], s->ckpt_every = (int64_t)f[i++];
    s->step = (int64_t)f[i++];
    for (int k = 0; k < 4; k++) s->train_rng.s[k] = f[i++];
    s->n_params = f[i++];
}

static int write_all(int fd, const void *p, size_t n, uint64_t *h) {
    const char *c = p;
    *h = fnv1a(*h, p, n);
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

int ck_save(const char *path, const ck_state *st, const float *params, const float *moments, char *err,
            size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return snprintf(err, errlen, "%s: path too long", path), -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return snprintf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno)), -1;
    uint64_t h = FNV_START, f[CK_N_FIELDS];
    const uint32_t ver = CK_VERSION, tag = ENDIAN_TAG;
    pack(st, f);
    const size_t n = (size_t)st->n_params;
    int bad = write_all(fd, MAGIC, 8, &h) || write_all(fd, &ver, 4, &h) || write_all(fd, &tag, 4, &h) ||
              write_all(fd, f, sizeof f, &h) || write_all(fd, params, n * sizeof(float), &h) ||
              write_all(fd, moments, 2 * n * sizeof(float), &h);
    uint64_t sum = h;
    if (!bad) bad = write_all(fd, &sum, 8, &h);
    if (!bad) bad = fsync(fd) != 0;
    const int saved = errno;
    if (close(fd) != 0 && !bad) bad = 1;
    if (bad) {
        unlink(tmp);
        return snprintf(err, errlen, "cannot write '%s': %s", tmp, strerror(saved ? saved : EIO)), -1;
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        return snprintf(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e)), -1;
    }
    /* The rename itself reaches the disk with the directory. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY);
    if (dfd >= 0) fsync(dfd), close(dfd);
    return 0;
}

int ck_load(const char *path, ck_state *st, float **params, float **moments, char *err, size_t errlen) {
    *params = *moments = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (errno == ENOENT) return 1;
        return snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)), -1;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        fclose(fp);
        return snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno)), -1;
    }
    const uint64_t size = (uint64_t)sb.st_size;
    unsigned char head[HEADER_BYTES];
    uint64_t h = FNV_START, f[CK_N_FIELDS];
    uint32_t ver, tag;
    if (size < HEADER_BYTES || fread(head, 1, HEADER_BYTES, fp) != HEADER_BYTES) {
        fclose(fp);
        return snprintf(err, errlen,
                        "%s: truncated or not a vla-train checkpoint (%llu bytes, shorter than its header)", path,
                        (unsigned long long)size),
               -1;
    }
    if (memcmp(head, MAGIC, 8) != 0) {
        fclose(fp);
        return snprintf(err, errlen, "%s: not a vla-train checkpoint (bad magic number)", path), -1;
    }
    memcpy(&ver, head + 8, 4), memcpy(&tag, head + 12, 4), memcpy(f, head + 16, sizeof f);
    if (tag != ENDIAN_TAG) {
        fclose(fp);
        return snprintf(err, errlen, "%s: written on a machine of the other byte order", path), -1;
    }
    if (ver != CK_VERSION) {
        fclose(fp);
        return snprintf(err, errlen, "%s: checkpoint version %u; this vla-train reads version %u", path, ver,
                        CK_VERSION),
               -1;
    }
    h = fnv1a(h, head, HEADER_BYTES);
    unpack(st, f);
    const uint64_t n = st->n_params, want = HEADER_BYTES + 3 * n * sizeof(float) + 8;
    if (n == 0 || n > ((uint64_t)1 << 40) || size != want) {
        fclose(fp);
        return snprintf(err, errlen, "%s: %s (%llu bytes, the header says %llu)", path,
                        size < want ? "truncated" : "damaged: wrong size", (unsigned long long)size,
                        (unsigned long long)want),
               -1;
    }
    float *p = malloc(n * sizeof *p), *m = malloc(2 * n * sizeof *m);
    uint64_t sum = 0;
    int bad = !p || !m;
    if (!bad) bad = fread(p, sizeof *p, n, fp) != n || fread(m, sizeof *m, 2 * n, fp) != 2 * n ||
                    fread(&sum, 8, 1, fp) != 1;
    fclose(fp);
    if (!bad) {
        h = fnv1a(h, p, n * sizeof *p);
        h = fnv1a(h, m, 2 * n * sizeof *m);
    }
    if (bad || h != sum) {
        free(p), free(m);
        return snprintf(err, errlen, "%s: %s", path,
                        bad ? "cannot read it whole" : "damaged (checksum mismatch)"),
               -1;
    }
    *params = p, *moments = m;
    return 0;
}
