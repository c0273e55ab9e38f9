/* What every tool does on failure: one line on stderr, "prog: what: message" (or "prog: message"
 * when what is NULL), newlines in the message folded so it stays one line. Returns `code`, so a
 * tool can write `return cli_fail("vla-run", "--q", 1, "...")`. */
#ifndef VLA_CLI_H
#define VLA_CLI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

int cli_vfail(const char *prog, const char *what, int code, const char *fmt, va_list ap);

/* A library message without its "vla_function: " prefix: a tool reports it under the flag or
 * file it is about, which tells the user more. */
const char *cli_lib_message(const char *msg);

/* Whole-string number parsing for flag values: NULL on success, else the problem in words
 * ("not a number", "out of range"). *out is written only on success. */
const char *cli_parse_double(const char *s, double *out);
const char *cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* A table of long flags (vla-run, vla-train): each stores its value into one field of the
 * tool's options struct. */
typedef enum cli_kind { CLI_STR, CLI_INT, CLI_I64, CLI_DBL, CLI_BOOL } cli_kind;

typedef struct cli_flag {
    const char *name; /* "--flag" */
    cli_kind kind;
    size_t off;       /* offsetof the field in the options struct */
    const char *arg;  /* value placeholder in --help (NULL for CLI_BOOL) */
    const char *def;  /* the default, as --help shows it */
    const char *help;
} cli_flag;

/* Stores `val` into the field of `opts` that f names (CLI_BOOL: 1, val ignored). NULL on
 * success, else the problem in words ("empty value", "not a number", ...). */
const char *cli_store_flag(void *opts, const cli_flag *f, const char *val);
/* --help's flag list: "  --flag ARG   help (default: def)", the left column `width` wide. */
void cli_print_flags(const cli_flag *flags, int n, int width);

#endif
