/* fuzz_workload.c — the workload loader, then what every run does with a workload it accepted:
 * describe it, write it back as JSON and read that again, and plan rank 0 of a one-GPU run and
 * of a two-stage pipeline. */
#include "fuzz.h"

#include "core/config.h"
#include "plan/plan.h"

static void plan_one(const wl_model *m, int gpus, int pp) {
  cfg_run c;
  cfg_init(&c);
  c.gpus = gpus;
  c.pp = pp;
  if (pp > 1) c.microbatches = pp;
  GError *e = NULL;
  if (cfg_resolve(&c, (long)MIN(m->default_batch, 64), &e)) {
    cfg_resolve_style(&c, wl_has_tp_roles(m));
    plan_rank *p = plan_build(m, &c, NULL, 0, &e);
    if (p) plan_rank_free(p);
    else fuzz_refused(e);
  } else {
    fuzz_refused(e);
  }
  cfg_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  GError *e = NULL;
  wl_model *m = wl_load_text("fuzz.json", text, size, &e);
  if (!m) {
    fuzz_refused(e);
  } else {
    FILE *null = fopen("/dev/null", "w");
    wl_print(m, null);
    fclose(null);
    char *json = wl_to_json(m);
    g_free(json);
    plan_one(m, 1, 1);
    if (m->n_layers >= 2) plan_one(m, 2, 2);
    wl_free(m);
  }
  g_free(text);
  return 0;
}
