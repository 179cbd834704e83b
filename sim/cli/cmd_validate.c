/* cmd_validate.c — `dlsim validate`: the options of the validation study (study/validate.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"
#include "platform/platform.h"
#include "study/validate.h"

int cmd_validate(int argc, char **argv) {
  val_opts o = {FALSE, FALSE, FALSE, 3, 5, NULL, NULL, NULL, NULL};
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
