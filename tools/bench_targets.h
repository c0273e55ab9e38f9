/* `vla-bench --targets`: the CUDA backend against the speed targets of the CUDA issue, with the
 * device's measured limits in the same run (bench_targets.c; the CUDA runtime calls are in
 * bench_cuda.c). */
#ifndef VLA_BENCH_TARGETS_H
#define VLA_BENCH_TARGETS_H

#include <stdio.h>

/* bench_targets_main's answer to -h/--help: print vla-bench's whole --help. */
#define BENCH_TARGETS_HELP (-1)

/* Runs `vla-bench ... --targets ...` (argv as main got it; "--targets" anywhere in it).
 * Returns the exit status (after the one line when it is not 0), or BENCH_TARGETS_HELP. */
int bench_targets_main(int argc, char **argv);

/* Is `flag` one of --targets' own flags (so the sweep can say it needs --targets)? */
int bench_targets_flag(const char *flag);

/* The --targets part of --help: every flag with its default. */
void bench_targets_usage(FILE *f);

#endif
