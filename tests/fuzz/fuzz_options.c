/* fuzz_options.c — `dlsim run`'s option parser on any argument list (one argument per line of the
 * input), then what a run does with options it accepted: resolve them against a workload, and
 * write the configuration echo and read it back, which must give the same echo. */
#include "fuzz.h"

#include <cjson/cJSON.h>

#include "cli/options.h"
#include "core/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* file: inputs too: --routing file:/dev/stdin (or a FIFO) is refused as not a regular file
   * instead of waiting for input */
  char *text = fuzz_text(data, size);
  char **lines = g_strsplit(text, "\n", 64);
  int argc = 1;
  for (char **l = lines; *l; l++) argc++;
  char **argv = g_new0(char *, argc + 1);
  argv[0] = "run";
  for (int i = 1; i < argc; i++) argv[i] = lines[i - 1];
  cfg_run c;
  cfg_init(&c);
  GError *e = NULL;
  gboolean help = FALSE;
  FILE *saved = stdout;
  stdout = fopen("/dev/null", "w"); /* --help prints the options */
  gboolean ok = cfg_parse_args(&c, "run", NULL, NULL, &argc, &argv, &help, &e);
  fclose(stdout);
  stdout = saved;
  if (!ok) {
    fuzz_refused(e);
  } else if (!help) {
    const wl_model *m = fuzz_model("mlp-small");
    if (cfg_resolve(&c, (long)m->default_batch, &e)) {
      cfg_resolve_style(&c, wl_has_tp_roles(m));
      cJSON *echo = cfg_to_json(&c);
      cfg_run back;
      cfg_init(&back);
      if (!cfg_from_json(&back, echo, "echo", NULL)) abort();
      cJSON *again = cfg_to_json(&back);
      char *a = cJSON_PrintUnformatted(echo), *b = cJSON_PrintUnformatted(again);
      if (strcmp(a, b) != 0) abort(); /* what a result says is what ran */
      cJSON_free(a);
      cJSON_free(b);
      cJSON_Delete(again);
      cJSON_Delete(echo);
      cfg_release(&back);
    } else {
      fuzz_refused(e);
    }
  }
  cfg_release(&c);
  g_free(argv);
  g_strfreev(lines);
  g_free(text);
  return 0;
}
