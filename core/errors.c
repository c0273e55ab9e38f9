/* Status strings and the two places a failure's message is kept: the handle and the thread. */
#include "vla_impl.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[VLA_MSG_LEN];

const char *vla_status_string(vla_status s) {
    switch (s) {
    case VLA_OK: return "ok";
    case VLA_ERR_NULL_ARGUMENT: return "null argument";
    case VLA_ERR_INVALID_DIMENSION: return "invalid dimension";
    case VLA_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case VLA_ERR_INVALID_PARAMETER: return "invalid parameter";
    case VLA_ERR_INVALID_COMBINATION: return "invalid combination of parameters";
    case VLA_ERR_UNKNOWN_BACKEND: return "unknown backend";
    case VLA_ERR_UNKNOWN_NAME: return "unknown name";
    case VLA_ERR_UNSUPPORTED: return "not supported";
    case VLA_ERR_WRONG_BACKEND: return "buffer belongs to another backend";
    case VLA_ERR_OUT_OF_RANGE: return "out of range";
    case VLA_ERR_ALIASING: return "aliased buffers";
    case VLA_ERR_OUT_OF_MEMORY: return "out of memory";
    case VLA_ERR_BACKEND: return "backend error";
    case VLA_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *vla_last_message(void) { return last_message; }

vla_status vla_fail(vla_backend *b, vla_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    if (b) memcpy(b->message, last_message, sizeof b->message);
    return s;
}

void vla_clear_message(vla_backend *b) {
    last_message[0] = '\0';
    if (b) b->message[0] = '\0';
}

const char *vla_version(void) { return VLA_VERSION_STRING; }
int vla_version_number(void) { return VLA_VERSION; }
