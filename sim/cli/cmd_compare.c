/* cmd_compare.c — `dlsim compare A.json B.json`: the difference of two results per phase, per
 * collective and per-rank skew, attributed as in compare.h. */
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "study/compare.h"
#include "core/dl_common.h"

int cmd_compare(int argc, char **argv) {
  GError *err = NULL;
  compare_doc *a = NULL, *b = NULL;
  int status = 2;
  GOptionEntry entries[] = {{NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionContext *ctx = g_option_context_new("A.json B.json - compare two dlsim results");
  g_option_context_set_summary(ctx,
      "Prints both results' iteration time and breakdown (compute, exposed and overlapped\n"
      "communication, bubble, idle), each collective kind (op/group/purpose) and the per-rank\n"
      "spread, with the difference B - A and its share of the iteration-time difference.\n"
      "The difference relative to A is split into compute, communication, overlap and skew\n"
      "(they add up to it; see sim/compare.h). A is the reference, e.g. the real run.");
  g_option_context_add_main_entries(ctx, entries, NULL);
  gboolean help = FALSE;
  if (!cli_parse(ctx, "compare", &argc, &argv, &help, &err)) goto out;
  if (help) {
    status = 0;
    goto out;
  }
  if (argc != 3) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "compare: expected two result files A.json B.json, "
                "got %d", argc - 1);
    goto out;
  }
  a = compare_doc_load(argv[1], &err);
  if (!a) goto out;
  b = compare_doc_load(argv[2], &err);
  if (!b || !compare_check_match(a, b, &err)) goto out;
  compare_print(a, b, stdout);
  status = 0;
out:
  if (err) {
    cli_error(err->message);
    g_error_free(err);
  }
  compare_doc_free(a);
  compare_doc_free(b);
  g_option_context_free(ctx);
  return status;
}
