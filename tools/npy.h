/* Reading and writing numpy .npy files (format versions 1.0-3.0), little-endian float32 and
 * float64, C order. Shared by the tools and the tests. Every failure returns non-zero and
 * writes a one-line reason (naming the file) into err. */
#ifndef VLA_NPY_H
#define VLA_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8

typedef struct npy_array {
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t count;  /* product of shape */
    int src_bits;   /* 32 or 64: the dtype found in the file */
    float *f32;     /* the data converted to float32 (npy_read_f32) */
    double *f64;    /* the data converted to float64 (npy_read_f64) */
} npy_array;

/* Loads a float32 or float64 array; converts to float32. Caller frees with npy_free. */
int npy_read_f32(const char *path, npy_array *out, char *err, size_t errlen);
/* Loads a float32 or float64 array; converts to float64. */
int npy_read_f64(const char *path, npy_array *out, char *err, size_t errlen);
void npy_free(npy_array *a);

/* Writes float32 data atomically: to "<path>.tmp.<pid>", then renamed, so a failure never
 * leaves a partial file at path. */
int npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape, char *err, size_t errlen);

#endif
