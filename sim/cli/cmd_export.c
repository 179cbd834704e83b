/* cmd_export.c — `dlsim export --format chakra --out DIR` plus the run options: every rank's op
 * list as a Chakra execution trace (exec/export.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "exec/context.h"
#include "exec/export.h"

int cmd_export(int argc, char **argv) {
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  GError *e = NULL;
  gboolean ok = FALSE, help = FALSE;
  char *format = NULL, *prefix = NULL;
  GOptionEntry entries[] = {
      {"format", 0, 0, G_OPTION_ARG_STRING, &format,
       "the trace format: chakra (MLCommons Chakra ET, schema 0.0.4)", "chakra"},
      {"prefix", 0, 0, G_OPTION_ARG_STRING, &prefix,
       "file names PREFIX.<rank>.et (default dlsim)", "PREFIX"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  if (!cfg_parse_args(&parsed, "export", entries,
                      "Writes every rank's op list of one configuration as a Chakra execution\n"
                      "trace: --out DIR gets PREFIX.<rank>.et per rank and comm_groups.json\n"
                      "(the ranks of each pg_name). The run options that shape the op lists\n"
                      "apply; --mode and --iters change nothing here, and those of running\n"
                      "(--trace, --dump-weights, --simgrid-cfg, --message-level) are refused.\n"
                      "`dlsim run --workload chakra:DIR` runs the traces again; ASTRA-sim reads\n"
                      "them with --workload-configuration=DIR/PREFIX\n"
                      "--comm-group-configuration=DIR/comm_groups.json (README.md, \"Chakra\n"
                      "execution traces\").",
                      &argc, &argv, &help, &e))
    goto out;
  if (help) {
    ok = TRUE;
    goto out;
  }
  if (!format || strcmp(format, "chakra") != 0) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--format %s: expected chakra",
                format ? format : "(missing)");
    goto out;
  }
  if (!parsed.out) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "export: --out DIR is required");
    goto out;
  }
  /* what only a run uses would be silently dropped here */
  /* stragglers stay: the exported kernel durations carry them */
  const char *whatif = cfg_whatif_option(&parsed, FALSE);
  if (parsed.trace || parsed.dump_weights || parsed.simgrid_cfg || parsed.message_level ||
      whatif) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "export: %s belongs to a run, not to its op lists; "
                "leave it out",
                parsed.trace          ? "--trace"
                : parsed.dump_weights ? "--dump-weights"
                : parsed.simgrid_cfg  ? "--simgrid-cfg"
                : whatif              ? whatif
                                      : "--message-level");
    goto out;
  }
  const char *pfx = prefix ? prefix : "dlsim";
  if (!*pfx || strchr(pfx, '/')) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--prefix '%s': expected a file name prefix", pfx);
    goto out;
  }
  /* the directory is made only when the export runs (exec_export_chakra) */
  if (g_file_test(parsed.out, G_FILE_TEST_EXISTS) &&
      !g_file_test(parsed.out, G_FILE_TEST_IS_DIR)) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--out %s: not a directory", parsed.out);
    goto out;
  }
  if (!exec_export_dir_free(parsed.out, pfx, &e)) goto out;
  if (!run_ctx_open(&x, &parsed, &e)) goto out;
  if (x.note) fprintf(stderr, "dlsim: note: %s\n", x.note);
  const cfg_run *c = &x.cfg;
  if (c->grid_auto) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "export: --grid auto searches grids; name one grid, "
                "e.g. --grid 2x2");
    goto out;
  }
  if (!analytic_check(&x, c, &e)) goto out;
  if (!exec_export_chakra(&x, c->out, pfx, TRUE, &e)) goto out;
  printf("export: %d rank traces %s/%s.{0..%d}.et and %s/comm_groups.json (Chakra ET %s)\n",
         c->gpus, c->out, pfx, c->gpus - 1, c->out, ET_VERSION);
  ok = TRUE;
out:;
  int status = 0;
  if (!ok) {
    cli_error(e ? e->message : "export failed");
    status = (!e || e->code == DL_ERR_INPUT) ? 2 : 1;
    if (e) g_error_free(e);
  }
  g_free(format);
  g_free(prefix);
  run_ctx_release(&x);
  cfg_release(&parsed);
  return status;
}
