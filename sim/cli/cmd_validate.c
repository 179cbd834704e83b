/* cmd_validate.c — `dlsim validate`: the options of the validation study (study/validate.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"
#include "platform/platform.h"
#include "study/interval.h"
#include "study/validate.h"

/* --intervals: the validation cases of database `name`, each against the 90 % interval the
 * others give it (study/interval.h), and the leave-one-out coverage. */
static gboolean print_intervals(const char *name, GError **err) {
  kdb *db = kdb_load(name, err);
  if (!db) return FALSE;
  const double *real, *pred;
  const char *vname = NULL;
  const int n = kdb_validation(db, &real, &pred, &vname);
  if (n < 2) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--kernels %s: no validation cases beside it "
                "(validation/%s.json next to its db/ folder)", name, kdb_name(db));
    kdb_free(db);
    return FALSE;
  }
  double *e = g_new(double, n), *lo = g_new(double, n), *hi = g_new(double, n);
  for (int i = 0; i < n; i++) e[i] = log(real[i] / pred[i]);
  const int covered = interval_loo(e, n, lo, hi);
  printf("validation cases of %s: %d (error = (predicted - real) / real; each case's interval: "
         "its prediction times the 5th to 95th percentile of the others' real / predicted)\n",
         vname, n);
  printf("%-40s %11s %15s %9s %25s %8s\n", "case", "real (ms)", "predicted (ms)", "error",
         "90 % interval (ms)", "covered");
  for (int i = 0; i < n; i++) {
    char iv[64];
    g_snprintf(iv, sizeof iv, "%.2f to %.2f", pred[i] * exp(lo[i]) * 1e3,
               pred[i] * exp(hi[i]) * 1e3);
    printf("%-40s %11.2f %15.2f %+8.1f%% %25s %8s\n", kdb_validation_case(db, i), real[i] * 1e3,
           pred[i] * 1e3, 100 * (pred[i] / real[i] - 1), iv,
           e[i] >= lo[i] && e[i] <= hi[i] ? "yes" : "no");
  }
  printf("leave-one-out coverage: %d of %d (%.0f %%) for a stated 90 %%\n", covered, n,
         100.0 * covered / n);
  g_free(e);
  g_free(lo);
  g_free(hi);
  kdb_free(db);
  return TRUE;
}

int cmd_validate(int argc, char **argv) {
  val_opts o = {FALSE, FALSE, FALSE, 3, 5, NULL, NULL, NULL, NULL};
  gboolean intervals = FALSE;
  GError *err = NULL;
  int status = 2;
  GOptionEntry entries[] = {
      {"quick", 0, 0, G_OPTION_ARG_NONE, &o.quick,
       "A subset (4 configurations) and quick calibration and kernel measurements", NULL},
      {"repeats", 0, 0, G_OPTION_ARG_INT, &o.repeats, "Real runs per configuration (median; 3)",
       "R"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &o.iters,
       "Iterations per run (the first is warm-up; default 5)", "K"},
      {"platform", 0, 0, G_OPTION_ARG_FILENAME, &o.platform,
       "Platform for the simulation (default: calibrate into DIR/platform.xml)", "FILE"},
      {"kernels", 0, 0, G_OPTION_ARG_FILENAME, &o.kernels,
       "Kernel database (default: kbench into DIR/kernels.json; 'roofline' for none)", "FILE"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &o.out, "Output directory (default validation-out)",
       "DIR"},
      {"all-ranks", 0, 0, G_OPTION_ARG_NONE, &o.all_ranks,
       "Also time configurations with more ranks than cores (oversubscribed)", NULL},
      {"reference", 0, 0, G_OPTION_ARG_STRING, &o.reference,
       "Flavour taken as measured: real (default), or analytic to try the pipeline", "MODE"},
      {"list", 0, 0, G_OPTION_ARG_NONE, &o.list, "Print the configurations and exit", NULL},
      {"intervals", 0, 0, G_OPTION_ARG_NONE, &intervals,
       "Run nothing: print the validation cases of --kernels (real GPU iterations and their "
       "predictions), each against the 90 % interval the others give it, and the leave-one-out "
       "coverage of the prediction intervals", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  GOptionContext *ctx =
      g_option_context_new("- dlsim validate: real against simulated runs, the error table");
  g_option_context_set_summary(ctx,
      "Runs data parallel on 1, 2 and 4 ranks over mlp-small and cnn-small at several batches\n"
      "in the real flavour (median of --repeats runs) and in the simulated flavour (calibrated\n"
      "platform, measured kernel database), and prints per configuration: real and simulated\n"
      "iteration time, the error and its split into compute, communication, overlap and skew\n"
      "(dlsim compare), then the mean and max absolute error. Writes DIR/validate.csv,\n"
      "DIR/validate.json and every result under DIR/runs/. Progress goes to stderr.");
  g_option_context_add_main_entries(ctx, entries, NULL);
  gboolean help = FALSE;
  if (!cli_parse(ctx, "validate", &argc, &argv, &help, &err)) goto out;
  if (help) {
    status = 0;
    goto out;
  }
  if (argc > 1) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "validate: unexpected argument '%s'", argv[1]);
    goto out;
  }
  if (intervals) {
    if (!o.kernels) {
      g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--intervals: name the kernel database "
                  "(--kernels NAME, e.g. h100-sxm-pytorch)");
      goto out;
    }
    if (print_intervals(o.kernels, &err)) status = 0;
    goto out;
  }
  if (!o.reference) o.reference = g_strdup("real");
  if (!o.out) o.out = g_strdup("validation-out");
  if (strcmp(o.reference, "real") != 0 && strcmp(o.reference, "analytic") != 0) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--reference: expected real or analytic, got '%s'",
                o.reference);
    goto out;
  }
  if (o.repeats < 1 || o.repeats > 100) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--repeats: expected 1..100, got %d", o.repeats);
    goto out;
  }
  if (o.iters < 2 || o.iters > 1000) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--iters: expected 2..1000, got %d", o.iters);
    goto out;
  }
  /* the inputs named, before any run or calibration writes anything */
  if (o.platform) {
    plat *pl = plat_load(o.platform, &err);
    if (!pl) goto out;
    plat_free(pl);
  }
  if (o.kernels && strcmp(o.kernels, "roofline") != 0) {
    kdb *db = kdb_load(o.kernels, &err);
    if (!db) goto out;
    kdb_free(db);
  }
  status = validate_run(&o, &err);
out:
  if (err) {
    cli_error(err->message);
    status = err->code == DL_ERR_INPUT ? 2 : 1;
    g_error_free(err);
  }
  g_option_context_free(ctx);
  g_free(o.platform);
  g_free(o.kernels);
  g_free(o.out);
  g_free(o.reference);
  return status;
}
