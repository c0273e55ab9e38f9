#include "cli.h"

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
