/* What every tool does on failure: one line on stderr, "prog: what: message" (or "prog: message"
 * when what is NULL), newlines in the message folded so it stays one line. Returns `code`, so a
 * tool can write `return cli_fail("vla-run", "--q", 1, "...")`. */
#ifndef VLA_CLI_H
#define VLA_CLI_H

#include <stdarg.h>

int cli_vfail(const char *prog, const char *what, int code, const char *fmt, va_list ap);

#endif
