#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* Backend registry (open by name, list devices) and buffers. */
#include "vla_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* In order of preference for "auto". */
static const vla_backend_entry *const entries[] = {
#ifdef VLA_HAVE_CUDA
    &vla_cuda_backend_entry,
#endif
#ifdef VLA_HAVE_OPENCL
    &vla_opencl_backend_entry,
#endif
    &vla_cpu_backend_entry,
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

static vla_status open_entry(const vla_backend_entry *e, const char *device, vla_backend **out) {
    vla_backend *b = calloc(1, sizeof *b);
    if (!b) return vla_fail(NULL, VLA_ERR_OUT_OF_MEMORY, "vla_backend_open: out of host memory");
    b->timer_host_start = -1.0;
    vla_status s = e->open(device, b);
    if (s != VLA_OK) {
        /* The backend wrote its message into b; keep it as the thread's message. */
        vla_fail(NULL, s, "%s", b->message);
        free(b);
        return s;
    }
    *out = b;
    return VLA_OK;
}

vla_status vla_backend_open(const char *name, vla_backend **out) {
    vla_clear_message(NULL);
    if (!out) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_backend_open: out is NULL");
    *out = NULL;
    if (!name || !*name || strcmp(name, "auto") == 0) {
        /* The first GPU device found, else the CPU. */
        vla_device_info info[32];
        int n = 0;
        vla_list_devices(info, 32, &n);
        for (int i = 0; i < n && i < 32; i++)
            if (info[i].is_gpu && vla_backend_open(info[i].name, out) == VLA_OK) return VLA_OK;
        return vla_backend_open("cpu", out);
    }
    size_t len = strcspn(name, ":");
    if (name[len] == ':' && name[len + 1] == '\0')
        return vla_fail(NULL, VLA_ERR_UNKNOWN_BACKEND,
                        "vla_backend_open: '%s' names no device after the ':' (e.g. '%.*s:0')", name, (int)len, name);
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (strlen(entries[i]->name) == len && strncmp(entries[i]->name, name, len) == 0)
            return open_entry(entries[i], name[len] == ':' ? name + len + 1 : "", out);
    }
    return vla_fail(NULL, VLA_ERR_UNKNOWN_BACKEND,
                    "vla_backend_open: unknown backend '%s' (this build has: %s%s%s)", name,
                    "cpu",
#ifdef VLA_HAVE_CUDA
                    ", cuda",
#else
                    "",
#endif
#ifdef VLA_HAVE_OPENCL
                    ", opencl"
#else
                    ""
#endif
    );
}

void vla_backend_close(vla_backend *b) {
    if (!b) return;
    if (b->iface && b->iface->close) b->iface->close(b);
    free(b);
}

const char *vla_backend_name(const vla_backend *b) { return b ? b->name : ""; }
const char *vla_backend_device(const vla_backend *b) { return b ? b->device : ""; }
const char *vla_backend_message(const vla_backend *b) { return b ? b->message : ""; }

vla_status vla_backend_synchronize(vla_backend *b) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_backend_synchronize: backend is NULL");
    vla_clear_message(b);
    return b->iface->synchronize ? b->iface->synchronize(b) : VLA_OK;
}

vla_status vla_backend_set_threads(vla_backend *b, int threads) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_backend_set_threads: backend is NULL");
    vla_clear_message(b);
    if (threads < 0)
        return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "vla_backend_set_threads: threads = %d < 0", threads);
    return b->iface->set_threads ? b->iface->set_threads(b, threads) : VLA_OK;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

vla_status vla_backend_timer_start(vla_backend *b) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_backend_timer_start: backend is NULL");
    vla_clear_message(b);
    if (b->iface->timer_start) {
        vla_status s = b->iface->timer_start(b);
        if (s != VLA_OK) return s;
    }
    b->timer_host_start = monotonic_s();
    return VLA_OK;
}

vla_status vla_backend_timer_stop(vla_backend *b, double *ms, int *device_clock) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_backend_timer_stop: backend is NULL");
    vla_clear_message(b);
    if (!ms) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "vla_backend_timer_stop: ms is NULL");
    if (b->timer_host_start < 0)
        return vla_fail(b, VLA_ERR_INVALID_COMBINATION, "vla_backend_timer_stop: no vla_backend_timer_start before it");
    const double t0 = b->timer_host_start;
    b->timer_host_start = -1.0;
    if (device_clock) *device_clock = 0;
    if (b->iface->timer_stop) {
        vla_status s = b->iface->timer_stop(b, ms);
        if (s == VLA_OK) {
            if (device_clock) *device_clock = 1;
            return VLA_OK;
        }
        if (s != VLA_ERR_UNSUPPORTED) return s;
        vla_clear_message(b); /* the driver could not time it: the host clock below does */
    } else {
        vla_status s = vla_backend_synchronize(b);
        if (s != VLA_OK) return s;
    }
    *ms = 1e3 * (monotonic_s() - t0);
    return VLA_OK;
}

vla_status vla_list_devices(vla_device_info *out, int max, int *count) {
    vla_clear_message(NULL);
    if (!count) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_list_devices: count is NULL");
    if (max < 0) return vla_fail(NULL, VLA_ERR_INVALID_PARAMETER, "vla_list_devices: max = %d < 0", max);
    if (max > 0 && !out) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_list_devices: out is NULL with max = %d", max);
    *count = 0;
    for (size_t i = 0; i < N_ENTRIES; i++) entries[i]->list(out, max, count);
    return VLA_OK;
}

/* ---- buffers ---- */

vla_status vla_buffer_alloc(vla_backend *b, size_t bytes, vla_buffer **out) {
    if (!b) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "vla_buffer_alloc: backend is NULL");
    vla_clear_message(b);
    if (!out) return vla_fail(b, VLA_ERR_NULL_ARGUMENT, "vla_buffer_alloc: out is NULL");
    *out = NULL;
    if (bytes == 0) return vla_fail(b, VLA_ERR_INVALID_PARAMETER, "vla_buffer_alloc: bytes = 0");
    vla_buffer *buf = calloc(1, sizeof *buf);
    if (!buf) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_buffer_alloc: out of host memory");
    vla_status s = b->iface->buffer_alloc(b, bytes, &buf->mem);
    if (s != VLA_OK) {
        free(buf);
        return s;
    }
    buf->backend = b;
    buf->size = bytes;
    *out = buf;
    return VLA_OK;
}

void vla_buffer_free(vla_buffer *buf) {
    if (!buf) return;
    buf->backend->iface->buffer_free(buf->backend, buf->mem);
    free(buf);
}

size_t vla_buffer_size(const vla_buffer *buf) { return buf ? buf->size : 0; }

static vla_status check_copy(const char *fn, const vla_buffer *buf, size_t off, const void *host, size_t n) {
    if (!buf) return vla_fail(NULL, VLA_ERR_NULL_ARGUMENT, "%s: buffer is NULL", fn);
    vla_clear_message(buf->backend);
    if (!host && n) return vla_fail(buf->backend, VLA_ERR_NULL_ARGUMENT, "%s: host pointer is NULL", fn);
    if (off > buf->size || n > buf->size - off)
        return vla_fail(buf->backend, VLA_ERR_OUT_OF_RANGE,
                        "%s: offset %zu + %zu bytes is past the buffer's %zu bytes", fn, off, n, buf->size);
    return VLA_OK;
}

vla_status vla_buffer_upload(vla_buffer *buf, size_t off, const void *src, size_t n) {
    vla_status s = check_copy("vla_buffer_upload", buf, off, src, n);
    if (s != VLA_OK || n == 0) return s;
    return buf->backend->iface->buffer_upload(buf->backend, buf->mem, off, src, n);
}

vla_status vla_buffer_download(const vla_buffer *buf, size_t off, void *dst, size_t n) {
    vla_status s = check_copy("vla_buffer_download", buf, off, dst, n);
    if (s != VLA_OK || n == 0) return s;
    return buf->backend->iface->buffer_download(buf->backend, buf->mem, off, dst, n);
}

void *vla_buffer_host_ptr(vla_buffer *buf) {
    if (!buf || !buf->backend->iface->buffer_host_ptr) return NULL;
    return buf->backend->iface->buffer_host_ptr(buf->backend, buf->mem);
}
