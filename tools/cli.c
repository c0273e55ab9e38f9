#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <stdio.h>

int cli_vfail(const char *prog, const char *what, int code, const char *fmt, va_list ap) {
    char msg[1200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (char *p = msg; *p; p++) /* one line whatever a message holds */
        if (*p == '\n' || *p == '\r') *p = ' ';
    fflush(stdout); /* results already printed come before the reason */
    if (what) fprintf(stderr, "%s: %s: %s\n", prog, what, msg);
    else fprintf(stderr, "%s: %s\n", prog, msg);
    return code;
}

const char *cli_parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (end == s || *end) return "not a number";
    if (errno == ERANGE || !isfinite(x)) return "out of range (not a finite double)";
    *out = x;
    return NULL;
}

const char *cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (end == s || *end) return "not an integer";
    if (errno == ERANGE || x < lo || x > hi) return "out of range";
    *out = (int64_t)x;
    return NULL;
}
