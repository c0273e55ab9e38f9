#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

const char *cli_lib_message(const char *msg) {
    const char *colon = strstr(msg, ": ");
    if (strncmp(msg, "vla_", 4) == 0 && colon && !memchr(msg, ' ', (size_t)(colon - msg))) msg = colon + 2;
    return msg;
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

const char *cli_store_flag(void *opts, const cli_flag *f, const char *val) {
    void *p = (char *)opts + f->off;
    const char *bad = NULL;
    int64_t i = 0;
    switch (f->kind) {
    case CLI_STR:
        if (!*val) bad = "empty value";
        else *(const char **)p = val;
        break;
    case CLI_INT:
        if (!(bad = cli_parse_i64(val, INT_MIN, INT_MAX, &i))) *(int *)p = (int)i;
        break;
    case CLI_I64: bad = cli_parse_i64(val, INT64_MIN, INT64_MAX, (int64_t *)p); break;
    case CLI_DBL: bad = cli_parse_double(val, (double *)p); break;
    case CLI_BOOL: *(int *)p = 1; break;
    }
    return bad;
}

void cli_print_flags(const cli_flag *flags, int n, int width) {
    for (int i = 0; i < n; i++) {
        char lhs[48];
        snprintf(lhs, sizeof lhs, "%s%s%s", flags[i].name, flags[i].arg ? " " : "", flags[i].arg ? flags[i].arg : "");
        printf("  %-*s %s", width, lhs, flags[i].help);
        if (flags[i].def[0]) printf(" (default: %s)", flags[i].def);
        printf("\n");
    }
}
