/* main.c — `dlsim COMMAND ...`: dispatches to the subcommands (cmds.h). */
#include <xbt/base.h>
#include <simgrid/version.h>
#include <stdio.h>
#include <string.h>

#include "cli/dl_version.h" /* generated in the build tree (version.cmake) */

#include "cli/cmds.h"
#include "core/child.h"
#include "core/dl_common.h"

typedef struct {
  const char *name;
  const char *summary;
  int (*fn)(int argc, char **argv); /* NULL: not built yet */
} command;

static const command commands[] = {
    {"run", "simulate (default), or run for real, or evaluate the closed-form model", cmd_run},
    {"export", "write a configuration's op lists as Chakra execution traces (one per rank)",
     cmd_export},
    {"sweep", "run many configurations into one CSV/JSONL", cmd_sweep},
    {"search", "the fastest parallel layout of a model on a cluster: every layout in closed form, "
               "the best simulated", cmd_search},
    {"kbench", "measure kernel times on this machine's device into a kernel database", cmd_kbench},
    {"platform", "write a SimGrid platform file for a cluster of DGX-like nodes", cmd_platform},
    {"validate", "run real and simulated flavours of the same configurations, print the error",
     cmd_validate},
    {"compare", "compare two result files, attribute the difference", cmd_compare},
    {"coll", "nccl-tests-style collective benchmark on a platform", cmd_coll},
    {"workload", "describe a workload: layers, parameters, FLOPs, activation sizes", cmd_workload},
};

static void usage(FILE *out) {
  fprintf(out, "Usage: dlsim COMMAND [OPTIONS]   (dlsim COMMAND --help for its options;\n"
               "       dlsim --version)\n\n"
               "dlsim %s predicts distributed deep-learning training time on GPU clusters.\n\n"
               "Commands:\n", DL_VERSION);
  for (size_t i = 0; i < G_N_ELEMENTS(commands); i++)
    fprintf(out, "  %-10s %s%s\n", commands[i].name, commands[i].summary,
            commands[i].fn ? "" : " (not built yet)");
}

int main(int argc, char **argv) {
  dl_child_init(); /* an interrupted dlsim takes its children and temporary files with it */
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
    printf("dlsim %s (commit %s), built against SimGrid %d.%d.%d\n", DL_VERSION, DL_COMMIT,
           SIMGRID_VERSION_MAJOR, SIMGRID_VERSION_MINOR, SIMGRID_VERSION_PATCH);
    return 0;
  }
  for (size_t i = 0; i < G_N_ELEMENTS(commands); i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    if (!commands[i].fn) {
      fprintf(stderr, "dlsim: %s: not built yet in this version\n", commands[i].name);
      return 2;
    }
    char *prg = g_strdup_printf("dlsim %s", commands[i].name); /* "Usage: dlsim run ..." */
    g_set_prgname(prg);
    g_free(prg);
    return commands[i].fn(argc - 1, argv + 1);
  }
  fprintf(stderr, "dlsim: unknown command '%s' (see dlsim --help)\n", argv[1]);
  return 2;
}
