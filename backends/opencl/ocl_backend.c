/* The OpenCL backend: device selection by name, context and in-order queue (profiling on),
 * cl_mem buffers, and the programs built from the kernels embedded at build time
 * (kernels/opencl/<name>.cl -> vla_opencl_kernels.c, see opencl.cmake). The op itself is in
 * ocl_ops.c, its backward in ocl_grad.c. Every OpenCL error becomes a status whose message
 * names the call and the error; nothing here aborts.
 *
 * Environment: VLA_OPENCL_NO_FP64=1 runs the A recurrence in float even on a device with
 * cl_khr_fp64, as it runs on a device without it (for tests). VLA_OPENCL_CP_FP64=0|1 runs the
 * chunk form's A part (chunkpar.cl's real_t) in float or, where the device has fp64, in double:
 * by default float on GPUs (as CUDA's; 1.09-1.18x VLA chunked on an H200, errors against float64
 * up to 2.1e-6 from 2.2e-7, CUDA's 1.9e-6), double elsewhere. VLA_OPENCL_PROFILE=1 times every
 * kernel with profiling events and prints the totals to stderr at vla_backend_close.
 * VLA_OPENCL_NO_CLBLAST=1 keeps the scans in the own kernels in a build with CLBlast.
 * VLA_OPENCL_CHUNKPAR_GPU=1 runs the chunk-parallel kernels in their GPU form (many items a
 * group) on any device, for tests; VLA_OPENCL_NO_CHUNKPAR=1 turns that form off (ocl_chunkpar.c). */
#include "ocl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* From the generated vla_opencl_kernels.c. */
extern const char *const vla_ocl_source_names[];
extern const char *const vla_ocl_source_texts[];
extern const size_t vla_ocl_source_count;

/* ---- errors ---- */

const char *ocl_error_name(cl_int err) {
    switch (err) {
#define E(x) \
    case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
        E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
        E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
        E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
        E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: {
        static _Thread_local char buf[32];
        snprintf(buf, sizeof buf, "CL error %d", (int)err);
        return buf;
    }
    }
}

static int is_oom(cl_int err) {
    /* Not CL_OUT_OF_RESOURCES: drivers also return it for launch failures that are not about memory. */
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE;
}

vla_status ocl_fail(vla_backend *b, cl_int err, const char *call, const char *what) {
    if (is_oom(err))
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "opencl: %s failed with %s (out of device memory or resources) %s",
                        call, ocl_error_name(err), what);
    return vla_fail(b, VLA_ERR_BACKEND, "opencl: %s failed with %s %s", call, ocl_error_name(err), what);
}

/* ---- devices ---- */

#define OCL_MAX_PLATFORMS 16
#define OCL_MAX_DEVICES 64

static cl_uint get_platforms(cl_platform_id *p) {
    cl_uint n = 0;
    if (clGetPlatformIDs(OCL_MAX_PLATFORMS, p, &n) != CL_SUCCESS) return 0; /* no ICD: none */
    return n < OCL_MAX_PLATFORMS ? n : OCL_MAX_PLATFORMS;
}

static cl_uint get_devices(cl_platform_id p, cl_device_id *d) {
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, d, &n) != CL_SUCCESS) return 0;
    return n < OCL_MAX_DEVICES ? n : OCL_MAX_DEVICES;
}

static int device_is_gpu(cl_device_id d) {
    cl_device_type t = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    return (t & CL_DEVICE_TYPE_GPU) != 0;
}

static int device_has_fp64(cl_device_id d) {
    char ext[4096] = "";
    clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
    ext[sizeof ext - 1] = '\0';
    return strstr(ext, "cl_khr_fp64") != NULL;
}

static void describe(cl_platform_id p, cl_device_id d, char *out, size_t n) {
    char dev[96] = "?", plat[64] = "?";
    cl_uint cu = 0;
    cl_ulong mem = 0;
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dev - 1, dev, NULL);
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    dev[sizeof dev - 1] = plat[sizeof plat - 1] = '\0';
    snprintf(out, n, "%s (%s, %s, %u compute units, %.1f GiB, %s)", dev, plat, device_is_gpu(d) ? "GPU" : "not a GPU",
             cu, (double)mem / 1073741824.0, device_has_fp64(d) ? "fp64" : "no fp64");
}

static void ocl_list(vla_device_info *out, int max, int *count) {
    cl_platform_id plats[OCL_MAX_PLATFORMS];
    const cl_uint np = get_platforms(plats);
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devs[OCL_MAX_DEVICES];
        const cl_uint nd = get_devices(plats[p], devs);
        for (cl_uint d = 0; d < nd; d++) {
            if (*count < max) {
                vla_device_info *info = &out[*count];
                memset(info, 0, sizeof *info);
                snprintf(info->name, sizeof info->name, "opencl:%u:%u", p, d);
                describe(plats[p], devs[d], info->description, sizeof info->description);
                info->is_gpu = device_is_gpu(devs[d]);
            }
            (*count)++;
        }
    }
}

/* "what exists here", for an unknown device's message. */
static void list_names(char *out, size_t n) {
    vla_device_info info[16];
    int count = 0;
    ocl_list(info, 16, &count);
    out[0] = '\0';
    if (count == 0) {
        snprintf(out, n, "this machine has no OpenCL device (no platform or ICD found)");
        return;
    }
    snprintf(out, n, "OpenCL devices here:");
    for (int i = 0; i < count && i < 16; i++) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s %s = %.60s", i ? ";" : "", info[i].name, info[i].description);
    }
}

/* Parses "P:D" into indices; 0 if malformed. */
static int parse_pd(const char *s, unsigned *p, unsigned *d) {
    char *end;
    if (*s < '0' || *s > '9') return 0;
    unsigned long a = strtoul(s, &end, 10);
    if (*end != ':' || end[1] < '0' || end[1] > '9') return 0;
    unsigned long c = strtoul(end + 1, &end, 10);
    if (*end || a > 1000 || c > 1000) return 0;
    *p = (unsigned)a;
    *d = (unsigned)c;
    return 1;
}

/* ---- buffers ---- */

static vla_status ocl_buffer_alloc(vla_backend *b, size_t bytes, void **mem) {
    ocl_ctx *ctx = b->context;
    if (bytes > ctx->max_alloc)
        return vla_fail(b, VLA_ERR_OUT_OF_MEMORY,
                        "vla_buffer_alloc: %zu bytes is more than this OpenCL device allocates at once (%llu bytes)",
                        bytes, (unsigned long long)ctx->max_alloc);
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS || !m) return ocl_fail(b, err, "clCreateBuffer", "(vla_buffer_alloc)");
    *mem = m;
    return VLA_OK;
}

static void ocl_buffer_free(vla_backend *b, void *mem) {
    (void)b;
    if (mem) clReleaseMemObject((cl_mem)mem);
}

static vla_status ocl_buffer_upload(vla_backend *b, void *mem, size_t off, const void *src, size_t n) {
    ocl_ctx *ctx = b->context;
    cl_int err = clEnqueueWriteBuffer(ctx->queue, (cl_mem)mem, CL_TRUE, off, n, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueWriteBuffer", "(vla_buffer_upload)");
}

static vla_status ocl_buffer_download(vla_backend *b, const void *mem, size_t off, void *dst, size_t n) {
    ocl_ctx *ctx = b->context;
    cl_int err = clEnqueueReadBuffer(ctx->queue, (cl_mem)mem, CL_TRUE, off, n, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueReadBuffer", "(vla_buffer_download)");
}

static vla_status ocl_synchronize(vla_backend *b) {
    ocl_ctx *ctx = b->context;
    cl_int err = clFinish(ctx->queue);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clFinish", "(vla_backend_synchronize)");
}

/* ---- timing: profiling events of two markers on the in-order queue ----
 * elapsed = END(stop marker) - END(start marker): the markers complete when everything queued
 * before them has. A driver that does not time markers (or gives 0) returns
 * VLA_ERR_UNSUPPORTED, and the core falls back to the host clock. */

static vla_status ocl_timer_start(vla_backend *b) {
    ocl_ctx *ctx = b->context;
    if (ctx->timer_ev) clReleaseEvent(ctx->timer_ev);
    ctx->timer_ev = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &ctx->timer_ev);
    return err == CL_SUCCESS ? VLA_OK : ocl_fail(b, err, "clEnqueueMarkerWithWaitList", "(vla_backend_timer_start)");
}

static vla_status ocl_timer_stop(vla_backend *b, double *ms) {
    ocl_ctx *ctx = b->context;
    cl_event stop = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &stop);
    if (err == CL_SUCCESS) err = clWaitForEvents(1, &stop);
    if (err != CL_SUCCESS) {
        if (stop) clReleaseEvent(stop);
        return ocl_fail(b, err, "clEnqueueMarkerWithWaitList/clWaitForEvents", "(vla_backend_timer_stop)");
    }
    cl_ulong t0 = 0, t1 = 0;
    cl_int e0 = ctx->timer_ev ? clGetEventProfilingInfo(ctx->timer_ev, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL)
                              : CL_INVALID_EVENT;
    cl_int e1 = clGetEventProfilingInfo(stop, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    clReleaseEvent(stop);
    if (ctx->timer_ev) clReleaseEvent(ctx->timer_ev);
    ctx->timer_ev = NULL;
    if (e0 != CL_SUCCESS || e1 != CL_SUCCESS || t0 == 0 || t1 < t0) return VLA_ERR_UNSUPPORTED;
    *ms = 1e-6 * (double)(t1 - t0);
    return VLA_OK;
}

/* ---- programs and kernels ---- */

static const struct {
    const char *name;
    ocl_family family;
} kernel_table[OCL_NK] = {
    [OCL_K_PREP] = {"prep", OCL_FAM_PREP},
    [OCL_K_NORM_OUT] = {"norm_out", OCL_FAM_PREP},
    [OCL_K_INIT_A_REAL] = {"init_a_real", OCL_FAM_PREP},
    [OCL_K_STORE_A_REAL] = {"store_a_real", OCL_FAM_PREP},
    [OCL_K_INIT_A_F32] = {"init_a_f32", OCL_FAM_PREP},
    [OCL_K_AFFINE_LEVEL] = {"affine_level", OCL_FAM_PREP},
    [OCL_K_AFFINE_APPLY] = {"affine_apply", OCL_FAM_PREP},
    [OCL_K_SOFTMAX] = {"softmax_fused", OCL_FAM_SOFTMAX},
    [OCL_K_GDR_SEQ] = {"gdr_sequential", OCL_FAM_LINEAR_DELTA},
    [OCL_K_GDR_CHUNK_PREP] = {"gdr_chunk_prep", OCL_FAM_LINEAR_DELTA},
    [OCL_K_GDR_CHUNK_RUN] = {"gdr_chunk_run", OCL_FAM_LINEAR_DELTA},
    [OCL_K_VLA_SEQ] = {"vla_sequential", OCL_FAM_VLA},
    [OCL_K_VLA_A_CHUNKED] = {"vla_a_chunked", OCL_FAM_VLA},
    [OCL_K_SCAN_MAPS] = {"scan_maps", OCL_FAM_VLA},
    [OCL_K_SCAN_OUT] = {"scan_out", OCL_FAM_VLA},
    [OCL_K_CHUNK_MAP] = {"chunk_map", OCL_FAM_VLA},
    [OCL_K_SEG_COMPOSE] = {"seg_compose", OCL_FAM_VLA},
    [OCL_K_SOFTMAX_ROWS] = {"softmax_rows", OCL_FAM_SOFTMAX},
    [OCL_K_GRAD_NORM_DEN] = {"grad_norm_den", OCL_FAM_GRAD_PREP},
    [OCL_K_GRAD_NORM] = {"grad_norm", OCL_FAM_GRAD_PREP},
    [OCL_K_GRAD_PREP] = {"grad_prep", OCL_FAM_GRAD_PREP},
    [OCL_K_GRAD_SM_STATS] = {"sm_grad_stats", OCL_FAM_GRAD_SOFTMAX},
    [OCL_K_GRAD_SM_DQ] = {"sm_grad_dq", OCL_FAM_GRAD_SOFTMAX},
    [OCL_K_GRAD_SM_DKV] = {"sm_grad_dkv", OCL_FAM_GRAD_SOFTMAX},
    [OCL_K_GRAD_GDR] = {"grad_gdr", OCL_FAM_GRAD_LINEAR_DELTA},
    [OCL_K_GRAD_VLA] = {"grad_vla", OCL_FAM_GRAD_VLA},
    [OCL_K_DP_PREP] = {"dp_prep", OCL_FAM_DELTA_PAPER},
    [OCL_K_DP_SEQ] = {"dp_sequential", OCL_FAM_DELTA_PAPER},
    [OCL_K_GRAD_DP] = {"grad_dp", OCL_FAM_DELTA_PAPER},
    [OCL_K_DP_GRAD_PREP] = {"dp_grad_prep", OCL_FAM_DELTA_PAPER},
    [OCL_K_GRAD_DP_LOCAL] = {"grad_dp", OCL_FAM_DELTA_PAPER_LOCAL},
    [OCL_K_CP_GRAM] = {"cp_gram", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_PREFIX] = {"cp_prefix", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_APART] = {"cp_apart", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_AEND] = {"cp_aend", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_SFAC] = {"cp_sfac", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_WALK] = {"cp_walk", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_OUT] = {"cp_out", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_NSUM] = {"cp_nsum", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_NORM] = {"cp_norm", OCL_FAM_CHUNKPAR},
    [OCL_K_SOFTMAX_RB64] = {"softmax_rb64", OCL_FAM_SOFTMAX},
    [OCL_K_SOFTMAX_RB128] = {"softmax_rb128", OCL_FAM_SOFTMAX},
    [OCL_K_GRAD_CHUNK] = {"grad_chunk", OCL_FAM_GRAD_CHUNK},
    [OCL_K_GRAD_CHUNK_LOCAL] = {"grad_chunk", OCL_FAM_GRAD_CHUNK_LOCAL},
    [OCL_K_CP_WALK_LOCAL64_16] = {"cp_walk_local64_16", OCL_FAM_CHUNKPAR_CAPPED},
    [OCL_K_CP_SFAC_LOCAL] = {"cp_sfac_local", OCL_FAM_CHUNKPAR_CAPPED},
    [OCL_K_CP_OUT_LOCAL] = {"cp_out_local", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_GRAM_LOCAL] = {"cp_gram_local", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_WALK_LOCAL8] = {"cp_walk_local8", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_WALK_LOCAL4] = {"cp_walk_local4", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_WALK_LOCAL2] = {"cp_walk_local2", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_WALK_LOCAL64_8] = {"cp_walk_local64_8", OCL_FAM_CHUNKPAR_CAPPED},
    [OCL_K_CP_WALK_LOCAL64_4] = {"cp_walk_local64_4", OCL_FAM_CHUNKPAR_CAPPED},
    [OCL_K_CP_APART_LOCAL] = {"cp_apart_local", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_AEND_LOCAL] = {"cp_aend_local", OCL_FAM_CHUNKPAR},
    [OCL_K_CP_APART_SEG] = {"cp_apart_seg", OCL_FAM_CHUNKPAR},
};

static const char *const family_file[OCL_NFAM] = {
    [OCL_FAM_PREP] = "prep.cl",
    [OCL_FAM_SOFTMAX] = "softmax.cl",
    [OCL_FAM_LINEAR_DELTA] = "linear_delta.cl",
    [OCL_FAM_VLA] = "vla.cl",
    [OCL_FAM_GRAD_PREP] = "grad_prep.cl",
    [OCL_FAM_GRAD_SOFTMAX] = "grad_softmax.cl",
    [OCL_FAM_GRAD_LINEAR_DELTA] = "grad_linear_delta.cl",
    [OCL_FAM_GRAD_VLA] = "grad_vla.cl",
    [OCL_FAM_DELTA_PAPER] = "delta_paper.cl",
    [OCL_FAM_DELTA_PAPER_LOCAL] = "delta_paper.cl",
    [OCL_FAM_CHUNKPAR] = "chunkpar.cl",
    [OCL_FAM_CHUNKPAR_CAPPED] = "chunkpar.cl",
    [OCL_FAM_GRAD_CHUNK] = "grad_chunk.cl",
    [OCL_FAM_GRAD_CHUNK_LOCAL] = "grad_chunk.cl",
};
/* A file a family's program takes between common.cl and its own (NULL: none). */
static const char *const family_shared[OCL_NFAM] = {
    [OCL_FAM_GRAD_VLA] = "grad_linear_delta.cl",
};
/* Definitions a family's program takes right after common.cl (NULL: none): one file built two
 * ways, where OpenCL C 1.2 cannot choose an address space at run time. */
static const char *const family_defines[OCL_NFAM] = {
    [OCL_FAM_DELTA_PAPER_LOCAL] = "#define DP_DST_LOCAL 1\n",
    [OCL_FAM_GRAD_CHUNK_LOCAL] = "#define GC_LOCAL 1\n",
};

static const char *source(const char *name) {
    for (size_t i = 0; i < vla_ocl_source_count; i++)
        if (strcmp(vla_ocl_source_names[i], name) == 0) return vla_ocl_source_texts[i];
    return NULL;
}

static vla_status build_family(vla_backend *b, ocl_family f) {
    ocl_ctx *ctx = b->context;
    if (ctx->programs[f]) return VLA_OK;
    const char *texts[4] = {source("common.cl"), NULL, NULL, NULL};
    cl_uint ntexts = 1;
    if (family_defines[f]) texts[ntexts++] = family_defines[f];
    if (family_shared[f]) texts[ntexts++] = source(family_shared[f]);
    texts[ntexts++] = source(family_file[f]);
    for (cl_uint i = 0; i < ntexts; i++)
        if (!texts[i])
            return vla_fail(b, VLA_ERR_INTERNAL, "opencl: a kernel source of %s is not embedded in this build",
                            family_file[f]);
    cl_int err = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(ctx->context, ntexts, texts, NULL, &err);
    if (err != CL_SUCCESS) return ocl_fail(b, err, "clCreateProgramWithSource", family_file[f]);
    /* No fast-math flags: the kernels must match the CPU backend up to ordinary rounding. */
    /* VLA_OPENCL_BUILD_OPTIONS: more options for every program (development: e.g. NVIDIA's
     * -cl-nv-verbose, whose register and spill counts VLA_OPENCL_BUILD_LOG=1 then prints). */
    const char *extra = getenv("VLA_OPENCL_BUILD_OPTIONS");
    char opts[512], cap[48] = "";
    if (f == OCL_FAM_CHUNKPAR_CAPPED) snprintf(cap, sizeof cap, " -cl-nv-maxrregcount=%d", ctx->reg_cap);
    const int chunkpar = f == OCL_FAM_CHUNKPAR || f == OCL_FAM_CHUNKPAR_CAPPED;
    snprintf(opts, sizeof opts, "-cl-std=CL1.2%s%s%s%s%s%s", (chunkpar ? ctx->cp_fp64 : ctx->fp64) ? " -DVLA_FP64=1" : "",
             f == OCL_FAM_SOFTMAX && ctx->native_exp ? " -DRB_NATIVE_EXP=1" : "",
             /* chunkpar.cl and grad_chunk.cl on CPU devices: one item a group (ocl_chunkpar.c's
              * cp_tune, ocl_grad_chunk.c); prep.cl: one item a row */
             (chunkpar || f == OCL_FAM_GRAD_CHUNK ||
              f == OCL_FAM_GRAD_CHUNK_LOCAL || f == OCL_FAM_PREP) &&
                     !ctx->cp_gpu
                 ? " -DCP_ONE_ITEM=1"
                 : "",
             cap, extra && extra[0] ? " " : "", extra ? extra : "");
    err = clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL);
    if (err == CL_SUCCESS && getenv("VLA_OPENCL_BUILD_LOG")) {
        size_t len = 0;
        clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
        char *log = len ? malloc(len + 1) : NULL;
        if (log && clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, len, log, NULL) == CL_SUCCESS) {
            log[len] = '\0';
            fprintf(stderr, "vla opencl build log of %s (%s):\n%s\n", family_file[f], opts, log);
        }
        free(log);
    }
    if (err != CL_SUCCESS) {
        char log[VLA_MSG_LEN] = "";
        size_t len = 0;
        clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &len);
        log[sizeof log - 1] = '\0';
        clReleaseProgram(prog);
        if (is_oom(err)) return ocl_fail(b, err, "clBuildProgram", family_file[f]);
        return vla_fail(b, VLA_ERR_BACKEND, "opencl: building %s failed with %s; build log: %s", family_file[f],
                        ocl_error_name(err), log[0] ? log : "(empty)");
    }
    ctx->programs[f] = prog;
    return VLA_OK;
}

vla_status ocl_kernel(vla_backend *b, ocl_kernel_id id, cl_kernel *out) {
    ocl_ctx *ctx = b->context;
    if (!ctx->kernels[id]) {
        ocl_family f = kernel_table[id].family;
        if (f == OCL_FAM_CHUNKPAR_CAPPED && !ctx->reg_cap) f = OCL_FAM_CHUNKPAR; /* one build of the file */
        vla_status s = build_family(b, f);
        if (s != VLA_OK) return s;
        cl_int err = CL_SUCCESS;
        cl_kernel k = clCreateKernel(ctx->programs[f], kernel_table[id].name, &err);
        if (err != CL_SUCCESS) return ocl_fail(b, err, "clCreateKernel", kernel_table[id].name);
        size_t wg = 0;
        cl_ulong lmem = 0;
        clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
        clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
        if (lmem > ctx->local_mem) {
            clReleaseKernel(k);
            return vla_fail(b, VLA_ERR_UNSUPPORTED,
                            "opencl: kernel %s needs %llu bytes of local memory; this device has %llu",
                            kernel_table[id].name, (unsigned long long)lmem, (unsigned long long)ctx->local_mem);
        }
        ctx->kernels[id] = k;
        ctx->kernel_max_wg[id] = wg ? wg : ctx->max_wg;
    }
    *out = ctx->kernels[id];
    return VLA_OK;
}

vla_status ocl_wg(vla_backend *b, ocl_kernel_id id, int want, size_t *out) {
    ocl_ctx *ctx = b->context;
    size_t lim = ctx->kernel_max_wg[id] < ctx->max_wg ? ctx->kernel_max_wg[id] : ctx->max_wg;
    if (lim > 256) lim = 256;
    size_t wg = 32;
    while (wg < (size_t)want && wg < 256) wg *= 2;
    while (wg > lim) wg /= 2;
    if (wg < 32)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "opencl: kernel %s can run only %zu work-items per group on this device; libvla's kernels need 32",
                        kernel_table[id].name, lim);
    *out = wg;
    return VLA_OK;
}

/* ---- open and close ---- */

static void ocl_close(vla_backend *b) {
    ocl_ctx *ctx = b->context;
    if (!ctx) return;
    if (ctx->queue) clFinish(ctx->queue);
    if (ctx->profile)
        for (int i = 0; i <= OCL_NK; i++)
            if (ctx->prof_calls[i])
                fprintf(stderr, "vla opencl profile: %-16s %8ld launches %12.3f ms\n", ocl_kernel_names[i],
                        ctx->prof_calls[i], ctx->prof_ns[i] * 1e-6);
    ocl_ws_release(ctx);
    ocl_gws_release(ctx);
    ocl_nn_release(ctx);
    for (int i = 0; i < OCL_NK; i++)
        if (ctx->kernels[i]) clReleaseKernel(ctx->kernels[i]);
    for (int i = 0; i < OCL_NFAM; i++)
        if (ctx->programs[i]) clReleaseProgram(ctx->programs[i]);
    if (ctx->dummy) clReleaseMemObject(ctx->dummy);
    if (ctx->timer_ev) clReleaseEvent(ctx->timer_ev);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    free(ctx);
    b->context = NULL;
}

static const vla_backend_iface ocl_iface = {
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_free = ocl_buffer_free,
    .buffer_upload = ocl_buffer_upload,
    .buffer_download = ocl_buffer_download,
    .buffer_host_ptr = NULL,
    .synchronize = ocl_synchronize,
    .set_threads = NULL,
    .timer_start = ocl_timer_start,
    .timer_stop = ocl_timer_stop,
    .resolve_algorithm = ocl_resolve,
    .backward_auto_chunked = ocl_backward_auto_chunked,
    .attention_forward = ocl_forward,
    .attention_backward = ocl_backward,
    .nn = &ocl_nn_iface,
    .close = ocl_close,
};

/* Checks what the kernels need: OpenCL C 1.2, float with round-to-nearest and Inf/NaN. */
static vla_status check_features(vla_backend *b, cl_device_id d, const char *name) {
    char ver[128] = "";
    clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_VERSION, sizeof ver - 1, ver, NULL);
    ver[sizeof ver - 1] = '\0';
    int major = 0, minor = 0;
    if (sscanf(ver, "OpenCL C %d.%d", &major, &minor) != 2 || major * 10 + minor < 12)
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "vla_backend_open: %s supports '%s'; libvla's kernels need OpenCL C 1.2", name, ver);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    if (!(fp & CL_FP_ROUND_TO_NEAREST) || !(fp & CL_FP_INF_NAN))
        return vla_fail(b, VLA_ERR_UNSUPPORTED,
                        "vla_backend_open: %s lacks IEEE float32 (round to nearest, Inf and NaN), which the kernels need",
                        name);
    return VLA_OK;
}

static vla_status ocl_open(const char *device, vla_backend *b) {
    cl_platform_id plats[OCL_MAX_PLATFORMS];
    const cl_uint np = get_platforms(plats);
    char names[600];
    unsigned pi = 0, di = 0;
    int found = 0;
    cl_device_id dev = NULL;
    if (device[0] == '\0') {
        /* "opencl": the first GPU device, else the first device. */
        for (int pass = 0; pass < 2 && !found; pass++)
            for (cl_uint p = 0; p < np && !found; p++) {
                cl_device_id devs[OCL_MAX_DEVICES];
                const cl_uint nd = get_devices(plats[p], devs);
                for (cl_uint d = 0; d < nd && !found; d++)
                    if (pass == 1 || device_is_gpu(devs[d])) {
                        pi = p, di = d, dev = devs[d];
                        found = 1;
                    }
            }
        if (!found) {
            list_names(names, sizeof names);
            return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND, "vla_backend_open: 'opencl': %s", names);
        }
    } else {
        if (!parse_pd(device, &pi, &di)) {
            list_names(names, sizeof names);
            return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND,
                            "vla_backend_open: 'opencl:%s' is not of the form opencl:P:D (platform and device index); %s",
                            device, names);
        }
        cl_device_id devs[OCL_MAX_DEVICES];
        const cl_uint nd = pi < np ? get_devices(plats[pi], devs) : 0;
        if (pi >= np || di >= nd) {
            list_names(names, sizeof names);
            return vla_fail(b, VLA_ERR_UNKNOWN_BACKEND, "vla_backend_open: no OpenCL device opencl:%u:%u; %s", pi, di,
                            names);
        }
        dev = devs[di];
    }
    char name[64];
    snprintf(name, sizeof name, "opencl:%u:%u", pi, di);
    vla_status s = check_features(b, dev, name);
    if (s != VLA_OK) return s;

    ocl_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return vla_fail(b, VLA_ERR_OUT_OF_MEMORY, "vla_backend_open: out of host memory");
    ctx->platform = plats[pi];
    ctx->device = dev;
    const char *no64 = getenv("VLA_OPENCL_NO_FP64");
    ctx->fp64 = device_has_fp64(dev) && !(no64 && no64[0] && strcmp(no64, "0") != 0);
    ctx->is_gpu = device_is_gpu(dev);
    const char *cp64 = getenv("VLA_OPENCL_CP_FP64");
    ctx->cp_fp64 = ctx->fp64 && (cp64 && cp64[0] ? strcmp(cp64, "0") != 0 : !ctx->is_gpu);
    const char *cpg = getenv("VLA_OPENCL_CHUNKPAR_GPU"); /* tests: the GPU form on any device */
    ctx->cp_gpu = ctx->is_gpu || (cpg && cpg[0] && strcmp(cpg, "0") != 0);
    /* native_exp where its precision was measured (softmax.cl, RB_NATIVE_EXP); the switch runs
     * either form on any device (tests, timings). */
    char vendor[128] = "";
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    const char *nex = getenv("VLA_OPENCL_NATIVE_EXP");
    ctx->native_exp = nex && nex[0] ? strcmp(nex, "0") != 0 : ctx->is_gpu && strstr(vendor, "NVIDIA") != NULL;
    /* 128 registers an item for the chunk-parallel kernels that hold big register tiles (the S
     * factors, the dk = 64 walk): on an H100 cp_sfac_local went from 148 registers (one 256-item
     * group a multiprocessor) to 128 (two), 9.7 -> 6.3 ms, and the walk 5.3 -> 4.0 at (8,16,64)
     * T = 8192. An option of NVIDIA's compiler only; VLA_OPENCL_REG_CAP=N sets it (0: none). */
    const char *rc = getenv("VLA_OPENCL_REG_CAP");
    ctx->reg_cap = rc && rc[0] ? atoi(rc) : ctx->is_gpu && strstr(vendor, "NVIDIA") != NULL ? 128 : 0;
    if (ctx->reg_cap < 0) ctx->reg_cap = 0;
#ifdef VLA_HAVE_CLBLAST
    const char *noblas = getenv("VLA_OPENCL_NO_CLBLAST");
    ctx->clblast = !(noblas && noblas[0] && strcmp(noblas, "0") != 0);
#endif
    const char *prof = getenv("VLA_OPENCL_PROFILE");
    ctx->profile = prof && prof[0] && strcmp(prof, "0") != 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_wg, &ctx->max_wg, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ctx->local_mem, &ctx->local_mem, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc, &ctx->max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof ctx->compute_units, &ctx->compute_units, NULL);
    b->context = ctx;
    b->iface = &ocl_iface;

    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plats[pi], 0};
    ctx->context = clCreateContext(props, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        s = ocl_fail(b, err, "clCreateContext", name);
        goto fail;
    }
    ctx->queue = clCreateCommandQueue(ctx->context, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) {
        s = ocl_fail(b, err, "clCreateCommandQueue", name);
        goto fail;
    }
    ctx->dummy = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, 64, NULL, &err);
    if (err != CL_SUCCESS) {
        s = ocl_fail(b, err, "clCreateBuffer", name);
        goto fail;
    }
    snprintf(b->name, sizeof b->name, "%s", name);
    describe(plats[pi], dev, b->device, sizeof b->device);
    if (!ctx->fp64 && device_has_fp64(dev)) {
        size_t len = strlen(b->device);
        snprintf(b->device + len, sizeof b->device - len, " [fp64 off: VLA_OPENCL_NO_FP64]");
    } else if (ctx->fp64 && !ctx->cp_fp64) {
        size_t len = strlen(b->device);
        snprintf(b->device + len, sizeof b->device - len, " [chunked A part in float]");
    }
    if (ctx->clblast) {
        size_t len = strlen(b->device);
        snprintf(b->device + len, sizeof b->device - len, " + CLBlast");
    }
    return VLA_OK;
fail:
    ocl_close(b);
    b->iface = NULL;
    return s;
}

const vla_backend_entry vla_opencl_backend_entry = {"opencl", ocl_open, ocl_list};
