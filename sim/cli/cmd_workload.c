/* cmd_workload.c — `dlsim workload NAME [--json]`: describe a workload (layers, parameters,
 * FLOPs, activation sizes) as a table, or as JSON with --json. */
#include <stdio.h>

#include "core/dl_common.h"
#include "cli/cmds.h"
#include "cli/options.h"
#include "model/workload.h"

int cmd_workload(int argc, char **argv) {
  gboolean json = FALSE;
  GOptionEntry entries[] = {
      {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the model as JSON instead of a table", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  GOptionContext *ctx = g_option_context_new("NAME|FILE");
  g_option_context_set_summary(
      ctx, "Describe a workload: per layer its kind, output shape, parameters, forward and\n"
           "backward FLOPs per sample and activation size. NAME is a file under workloads/\n"
           "(without .json) or a path to a JSON file.");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *err = NULL;
  int status = 2;
  wl_model *m = NULL;
  gboolean help = FALSE;
  if (!cli_parse(ctx, "workload", &argc, &argv, &help, &err)) {
    cli_error(err->message);
    goto out;
  }
  if (help) {
    status = 0;
    goto out;
  }
  if (argc != 2) {
    fprintf(stderr, "dlsim: workload: expected one workload name or file, got %d (try --help)\n",
            argc - 1);
    goto out;
  }
  m = wl_load(argv[1], &err);
  if (!m) {
    cli_error(err->message);
    status = err->code == DL_ERR_INPUT ? 2 : 1;
    goto out;
  }
  if (json) {
    char *text = wl_to_json(m);
    printf("%s\n", text);
    g_free(text);
  } else {
    wl_print(m, stdout);
  }
  status = 0;
out:
  wl_free(m);
  if (err) g_error_free(err);
  g_option_context_free(ctx);
  return status;
}
