/* What every tool does on failure: one line on stderr, "prog: what: message" (or "prog: message"
 * when what is NULL), newlines in the message folded so it stays one line. Returns `code`, so a
 * tool can write `return cli_fail("vla-run", "--q", 1, "...")`. */
#ifndef VLA_CLI_H
#define VLA_CLI_H

#include <stdarg.h>
#include <stdint.h>

int cli_vfail(const char *prog, const char *what, int code, const char *fmt, va_list ap);

/* Whole-string number parsing for flag values: NULL on success, else the problem in words
 * ("not a number", "out of range"). *out is written only on success. */
const char *cli_parse_double(const char *s, double *out);
const char *cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
