/* vla-bench's results: the summary and the md, csv and json formats (bench_report.c). */
#ifndef VLA_BENCH_REPORT_H
#define VLA_BENCH_REPORT_H

#include "bench_sweep.h"

/* Writes --save's three files (when asked; each whole or not at all), then the results in
 * --output's format on stdout (csv: the summary as text on stderr). Returns 0, or an exit
 * status after the one line. */
int bench_report(const bench *x);

#endif
