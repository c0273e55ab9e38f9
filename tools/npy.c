/* numpy .npy reader and writer (see npy.h). Format: magic "\x93NUMPY", version (1|2|3).0,
 * header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (d0, d1, ...), } padded with spaces and a
 * newline, then the raw little-endian data in C order.
 *
 * The reader trusts nothing in the file: every length is checked against the file's real
 * size before anything is allocated, so no input bytes can make it crash or allocate more
 * than about twice the file's size. */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define IO_CHUNK 65536 /* bytes converted per fread/fwrite */

static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* "<path>: <reason>", one line. */
static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    int n = snprintf(err, errlen, "%s: ", path ? path : "(null)");
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++) /* a path or a header excerpt must not break the line */
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* ---- header parsing: a tiny scanner for the Python dict literal ---- */

/* Text copied from a file into a message: anything but printable ASCII becomes '?'. */
static const char *printable(char *s) {
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
    return s;
}

typedef struct scanner {
    const char *p, *end;
} scanner;

static void skip_ws(scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

/* Consumes `c` after optional whitespace; 0 if it is not there. */
static int accept(scanner *s, char c) {
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes ('...' or "..."), copied into out (NUL-terminated). */
static int scan_string(scanner *s, char *out, size_t outlen) {
    skip_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return 0;
    char q = *s->p++;
    size_t n = 0;
    while (s->p < s->end && *s->p != q) {
        if (*s->p == '\\' || n + 1 >= outlen) return 0; /* escapes never occur in valid keys or dtypes */
        out[n++] = *s->p++;
    }
    if (s->p >= s->end) return 0;
    s->p++;
    out[n] = '\0';
    return 1;
}

/* A Python identifier-like word (True, False). */
static int scan_word(scanner *s, const char *word) {
    skip_ws(s);
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return 0;
    const char *after = s->p + n;
    if (after < s->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return 0;
    s->p = after;
    return 1;
}

/* A non-negative decimal int64 (an 'L' suffix from Python 2 files is allowed). */
static int scan_dim(scanner *s, int64_t *out) {
    skip_ws(s);
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return 0;
    int64_t v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        int d = *s->p++ - '0';
        if (v > (INT64_MAX - d) / 10) return 0; /* overflow */
        v = v * 10 + d;
    }
    if (s->p < s->end && *s->p == 'L') s->p++;
    *out = v;
    return 1;
}

/* (d0, d1, ...) with Python's tuple syntax: "()", "(5,)", "(2, 3)", "(2, 3,)". */
static int scan_shape(scanner *s, npy_array *a, const char *path, char *err, size_t errlen) {
    if (!accept(s, '(')) {
        set_err(err, errlen, path, "header: 'shape' is not a tuple");
        return -1;
    }
    a->ndim = 0;
    if (accept(s, ')')) return 0;
    for (;;) {
        int64_t d;
        if (!scan_dim(s, &d)) {
            set_err(err, errlen, path, "header: 'shape' holds something that is not a non-negative integer");
            return -1;
        }
        if (a->ndim == NPY_MAX_DIMS) {
            set_err(err, errlen, path, "header: more than %d dimensions", NPY_MAX_DIMS);
            return -1;
        }
        a->shape[a->ndim++] = d;
        int comma = accept(s, ',');
        if (accept(s, ')')) break; /* "(5)" (an int in Python) is read as (5,): harmless */
        if (!comma) {
            set_err(err, errlen, path, "header: 'shape' tuple is malformed");
            return -1;
        }
    }
    return 0;
}

typedef struct header {
    char descr[32];
    int fortran;
    int have_descr, have_fortran, have_shape;
} header;

/* One "'key': value" pair of the dict. */
static int scan_pair(scanner *s, header *h, npy_array *a, const char *path, char *err, size_t errlen) {
    char key[32];
    if (!scan_string(s, key, sizeof key) || !accept(s, ':')) {
        set_err(err, errlen, path, "header: expected 'key': value");
        return -1;
    }
    if (strcmp(key, "descr") == 0 && !h->have_descr) {
        h->have_descr = 1;
        if (!scan_string(s, h->descr, sizeof h->descr)) {
            set_err(err, errlen, path, "header: 'descr' is not a simple dtype string (structured dtypes are not supported)");
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "fortran_order") == 0 && !h->have_fortran) {
        h->have_fortran = 1;
        if (scan_word(s, "True")) h->fortran = 1;
        else if (scan_word(s, "False")) h->fortran = 0;
        else {
            set_err(err, errlen, path, "header: 'fortran_order' is not True or False");
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "shape") == 0 && !h->have_shape) {
        h->have_shape = 1;
        return scan_shape(s, a, path, err, errlen);
    }
    set_err(err, errlen, path, "header: unexpected or repeated key '%s'", printable(key));
    return -1;
}

/* The whole dict; only whitespace may follow it. */
static int parse_header(const char *text, size_t len, header *h, npy_array *a, const char *path, char *err,
                        size_t errlen) {
    scanner s = {text, text + len};
    memset(h, 0, sizeof *h);
    if (!accept(&s, '{')) {
        set_err(err, errlen, path, "header: not a Python dict");
        return -1;
    }
    while (!accept(&s, '}')) {
        if (scan_pair(&s, h, a, path, err, errlen)) return -1;
        if (!accept(&s, ',')) {
            if (accept(&s, '}')) break;
            set_err(err, errlen, path, "header: dict is malformed");
            return -1;
        }
    }
    skip_ws(&s);
    if (s.p != s.end) {
        set_err(err, errlen, path, "header: unexpected bytes after the dict");
        return -1;
    }
    if (!h->have_descr || !h->have_fortran || !h->have_shape) {
        set_err(err, errlen, path, "header: missing key '%s'",
                !h->have_descr ? "descr" : !h->have_fortran ? "fortran_order" : "shape");
        return -1;
    }
    return 0;
}

/* Accepts exactly little-endian float32/float64 ('|' is not a valid byte order for floats). */
static int check_dtype(header *h, npy_array *a, const char *path, char *err, size_t errlen) {
    if (strcmp(h->descr, "<f4") == 0) a->src_bits = 32;
    else if (strcmp(h->descr, "<f8") == 0) a->src_bits = 64;
    else if (strcmp(h->descr, ">f4") == 0 || strcmp(h->descr, ">f8") == 0) {
        set_err(err, errlen, path, "dtype '%s' is big-endian (only little-endian float32 or float64)", h->descr);
        return -1;
    } else {
        set_err(err, errlen, path, "dtype '%s' is not float32 or float64", printable(h->descr));
        return -1;
    }
    if (h->fortran) {
        set_err(err, errlen, path, "fortran_order is True (only C order is supported)");
        return -1;
    }
    return 0;
}

/* count = product of shape, with overflow detection. */
static int shape_count(npy_array *a, const char *path, char *err, size_t errlen) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != 0 && n > INT64_MAX / a->shape[i]) {
            set_err(err, errlen, path, "shape product overflows");
            return -1;
        }
        n *= a->shape[i];
    }
    a->count = n;
    return 0;
}

/* ---- reading ---- */

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t le64(const unsigned char *b) { return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32; }

/* Converts n little-endian elements of src_bits to float32 (dst32) or float64 (dst64). */
static void decode(const unsigned char *raw, size_t n, int src_bits, float *dst32, double *dst64) {
    for (size_t i = 0; i < n; i++) {
        double x;
        if (src_bits == 32) {
            uint32_t u = le32(raw + 4 * i);
            float f;
            memcpy(&f, &u, 4);
            x = f;
        } else {
            uint64_t u = le64(raw + 8 * i);
            memcpy(&x, &u, 8);
        }
        if (dst32) dst32[i] = (float)x;
        else dst64[i] = x;
    }
}

/* Reads the magic, version and header; leaves f at the first data byte; *data_bytes is what
 * the file holds after the header. */
static int read_prefix(FILE *f, int64_t file_size, npy_array *a, int64_t *data_bytes, const char *path, char *err,
                       size_t errlen) {
    unsigned char pre[12];
    if (file_size < 10 || fread(pre, 1, 10, f) != 10) {
        set_err(err, errlen, path, "too short to be a .npy file");
        return -1;
    }
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        set_err(err, errlen, path, "not a .npy file (bad magic)");
        return -1;
    }
    int major = pre[6], minor = pre[7];
    if ((major < 1 || major > 3) || minor != 0) {
        set_err(err, errlen, path, ".npy format version %d.%d is not supported (1.0, 2.0, 3.0)", major, minor);
        return -1;
    }
    int64_t pre_len = major == 1 ? 10 : 12, hlen;
    if (major == 1) hlen = pre[8] | pre[9] << 8;
    else {
        if (file_size < 12 || fread(pre + 10, 1, 2, f) != 2) {
            set_err(err, errlen, path, "too short to be a .npy file");
            return -1;
        }
        hlen = (int64_t)le32(pre + 8);
    }
    if (hlen > file_size - pre_len) {
        set_err(err, errlen, path, "header length %lld runs past the end of the file", (long long)hlen);
        return -1;
    }
    char *text = malloc((size_t)hlen + 1);
    if (!text) {
        set_err(err, errlen, path, "out of memory for a %lld-byte header", (long long)hlen);
        return -1;
    }
    header h;
    int rc = -1;
    if (fread(text, 1, (size_t)hlen, f) != (size_t)hlen)
        set_err(err, errlen, path, "cannot read the header: %s", ferror(f) ? strerror(errno) : "unexpected end of file");
    else if (parse_header(text, (size_t)hlen, &h, a, path, err, errlen) == 0 &&
             check_dtype(&h, a, path, err, errlen) == 0 && shape_count(a, path, err, errlen) == 0)
        rc = 0;
    free(text);
    *data_bytes = file_size - pre_len - hlen;
    return rc;
}

/* The data size the shape promises must be exactly what the file holds. */
static int check_size(const npy_array *a, int64_t data_bytes, const char *path, char *err, size_t errlen) {
    int64_t item = a->src_bits / 8;
    if (a->count > data_bytes / item) {
        set_err(err, errlen, path, "truncated: the shape needs %lld elements (%lld bytes), the file holds %lld bytes",
                (long long)a->count, (long long)(a->count > INT64_MAX / item ? INT64_MAX : a->count * item),
                (long long)data_bytes);
        return -1;
    }
    if (a->count * item != data_bytes) {
        set_err(err, errlen, path, "%lld unexpected bytes after the data", (long long)(data_bytes - a->count * item));
        return -1;
    }
    return 0;
}

/* Reads and converts count elements in chunks. */
static int read_data(FILE *f, npy_array *a, int want64, const char *path, char *err, size_t errlen) {
    size_t n = (size_t)a->count, item = (size_t)a->src_bits / 8, per = IO_CHUNK / item;
    size_t esz = want64 ? sizeof(double) : sizeof(float);
    void *dst = malloc(n ? n * esz : 1);
    unsigned char *raw = malloc(IO_CHUNK);
    if (!dst || !raw) {
        free(dst);
        free(raw);
        set_err(err, errlen, path, "out of memory for %zu elements", n);
        return -1;
    }
    for (size_t done = 0; done < n;) {
        size_t m = n - done < per ? n - done : per;
        if (fread(raw, item, m, f) != m) {
            set_err(err, errlen, path, "cannot read the data: %s", ferror(f) ? strerror(errno) : "unexpected end of file");
            free(dst);
            free(raw);
            return -1;
        }
        decode(raw, m, a->src_bits, want64 ? NULL : (float *)dst + done, want64 ? (double *)dst + done : NULL);
        done += m;
    }
    free(raw);
    if (want64) a->f64 = dst;
    else a->f32 = dst;
    return 0;
}

static int npy_read(const char *path, npy_array *out, int want64, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!out) {
        set_err(err, errlen, path, "no output array given");
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (!path) {
        set_err(err, errlen, path, "no path given");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    int64_t data_bytes = 0;
    int rc = -1;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        set_err(err, errlen, path, "not a regular file");
    else if (read_prefix(f, (int64_t)st.st_size, out, &data_bytes, path, err, errlen) == 0 &&
             check_size(out, data_bytes, path, err, errlen) == 0)
        rc = read_data(f, out, want64, path, err, errlen);
    fclose(f);
    if (rc != 0) {
        npy_free(out);
        return -1;
    }
    return 0;
}

int npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen) {
    return npy_read(path, out, 0, err, errlen);
}

int npy_read_f64(const char *path, npy_array *out, char *err, size_t errlen) {
    return npy_read(path, out, 1, err, errlen);
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->f32);
    free(a->f64);
    memset(a, 0, sizeof *a);
}

/* ---- writing ---- */

/* The version 1.0 prefix and header, padded with spaces so that the data starts at a multiple
 * of 64 bytes, ending in '\n'. Returns its total length, or 0 if it does not fit. */
static size_t format_header(char *buf, size_t cap, int ndim, const int64_t *shape) {
    char dims[NPY_MAX_DIMS * 24 + 8] = "";
    size_t dl = 0;
    for (int i = 0; i < ndim; i++)
        dl += (size_t)snprintf(dims + dl, sizeof dims - dl, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (ndim == 1) snprintf(dims + dl, sizeof dims - dl, ","); /* (5,) is a tuple, (5) is not */
    char dict[sizeof dims + 96];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", dims);
    if (n < 0) return 0;
    size_t total = 10 + (size_t)n + 1; /* + the final '\n' */
    total = (total + 63) / 64 * 64;
    if (total > cap || total - 10 > 65535) return 0;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)((total - 10) & 0xff);
    buf[9] = (char)((total - 10) >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

/* Writes count float32 values little-endian, in chunks. */
static int write_data(FILE *f, const float *data, int64_t count) {
    unsigned char raw[IO_CHUNK];
    size_t per = IO_CHUNK / 4;
    for (int64_t done = 0; done < count;) {
        size_t m = (size_t)(count - done) < per ? (size_t)(count - done) : per;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, data + done + (int64_t)i, 4);
            raw[4 * i] = (unsigned char)u;
            raw[4 * i + 1] = (unsigned char)(u >> 8);
            raw[4 * i + 2] = (unsigned char)(u >> 16);
            raw[4 * i + 3] = (unsigned char)(u >> 24);
        }
        if (fwrite(raw, 4, m, f) != m) return -1;
        done += (int64_t)m;
    }
    return 0;
}

static int check_write_args(const char *path, const float *data, int ndim, const int64_t *shape, int64_t *count,
                            char *err, size_t errlen) {
    if (!path || !*path) {
        set_err(err, errlen, path, "no path given");
        return -1;
    }
    if (ndim < 0 || ndim > NPY_MAX_DIMS || (ndim > 0 && !shape)) {
        set_err(err, errlen, path, "cannot write %d dimensions (0..%d)", ndim, NPY_MAX_DIMS);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] != 0 && n > INT64_MAX / 4 / shape[i])) {
            set_err(err, errlen, path, "shape is negative or too large to write");
            return -1;
        }
        n *= shape[i];
    }
    if (n > 0 && !data) {
        set_err(err, errlen, path, "no data given");
        return -1;
    }
    *count = n;
    return 0;
}

int npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    int64_t count = 0;
    if (check_write_args(path, data, ndim, shape, &count, err, errlen)) return -1;
    char head[1024];
    size_t hl = format_header(head, sizeof head, ndim, shape);
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!hl || !tmp) {
        free(tmp);
        set_err(err, errlen, path, hl ? "out of memory" : "cannot format the header");
        return -1;
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        set_err(err, errlen, path, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    /* Any failure from here on removes the temp file, so path is either the old file or the
     * complete new one, never a partial write. */
    int ok = fwrite(head, 1, hl, f) == hl && write_data(f, data, count) == 0 && fflush(f) == 0 && !ferror(f);
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        saved = errno;
        set_err(err, errlen, path, "cannot rename '%s' to it: %s", tmp, strerror(saved));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (!ok) {
        set_err(err, errlen, path, "cannot write '%s': %s", tmp, saved ? strerror(saved) : "I/O error");
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}
