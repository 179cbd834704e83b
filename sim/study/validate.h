/* validate.h — real against simulated runs of a fixed set of configurations: the error table
 * of `dlsim validate` (the steps are in validate.c). */
#ifndef DL_STUDY_VALIDATE_H
#define DL_STUDY_VALIDATE_H

#include <glib.h>

typedef struct {
  gboolean quick;     /* a subset, with quick calibration and kernel measurements */
  gboolean all_ranks; /* also time configurations with more ranks than cores */
  gboolean list;      /* print the configurations and stop */
  int repeats;        /* reference runs per configuration (median) */
  int iters;          /* iterations per run, the first a warm-up */
  char *platform;     /* platform for the simulation, NULL: calibrate into DIR/platform.xml */
  char *kernels;      /* kernel database, NULL: kbench into DIR/kernels.json, "roofline": none */
  char *out;          /* output directory */
  char *reference;    /* "real" or "analytic": the flavour taken as measured */
} val_opts;

/* Runs the validation described by `o` (checked: repeats 1..100, iters 2..1000, reference real
 * or analytic), printing the table on stdout and progress on stderr. Returns the exit status:
 * 0, 1 when no configuration could be compared or a step failed, 2 (with `err` set) for bad
 * input. */
int validate_run(const val_opts *o, GError **err);

#endif
