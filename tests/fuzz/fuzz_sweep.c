/* fuzz_sweep.c — the sweep-spec expander, then what `dlsim sweep` does with each configuration:
 * its CSV and JSONL rows, and its options through `dlsim run`'s parser (the first 64). */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "cli/options.h"
#include "core/config.h"
#include "study/sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  GError *e = NULL;
  GPtrArray *cfgs = memchr(data, '\0', size) ? NULL : sweep_expand(text, "fuzz.json", &e);
  if (!cfgs) {
    if (e) fuzz_refused(e);
  } else {
    for (guint i = 0; i < cfgs->len && i < 64; i++) {
      const sweep_config *c = g_ptr_array_index(cfgs, i);
      g_free(sweep_csv_row(c, "invalid", "x", NULL));
      g_free(sweep_jsonl_row(c, "invalid", "x", NULL));
      int argc = 1;
      for (char **a = c->args; *a; a++) argc++;
      char **argv = g_new0(char *, argc + 1);
      argv[0] = g_strdup("run");
      for (int k = 1; k < argc; k++) argv[k] = g_strdup(c->args[k - 1]);
      char **all = g_memdup2(argv, sizeof(char *) * (argc + 1)); /* parsing reorders argv */
      cfg_run r;
      cfg_init(&r);
      gboolean help = FALSE;
      if (!cfg_parse_args(&r, "run", NULL, NULL, &argc, &argv, &help, &e)) fuzz_refused(e);
      e = NULL;
      cfg_release(&r);
      g_strfreev(all);
      g_free(argv);
    }
    g_ptr_array_unref(cfgs);
  }
  g_free(text);
  return 0;
}
