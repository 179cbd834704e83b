/* fuzz_kdb.c — the kernel-database loader, then every use a run makes of a database it accepted:
 * the kernel times of every op of a pipeline's stages (their layer times cut the stages), and a
 * write-read round trip that must give the same text. */
#include "fuzz.h"

#include "core/config.h"
#include "kdb/kdb.h"
#include "kdb/ktime.h"
#include "plan/plan.h"

static void use(const kdb *db, const char *workload, int pp) {
  const wl_model *m = fuzz_model(workload);
  cfg_run c;
  cfg_init(&c);
  c.gpus = pp;
  c.pp = pp;
  c.microbatches = pp;
  GError *e = NULL;
  if (!cfg_resolve(&c, 16, &e)) abort();
  cfg_resolve_style(&c, wl_has_tp_roles(m));
  ktime_source kt = {gpu_find("a100-40gb"), c.precision, m, db, TRUE, TRUE, NULL, NULL};
  double *layer_t = ktime_layer_times(&kt, &c);
  for (int r = 0; r < pp; r++) {
    plan_rank *p = plan_build(m, &c, layer_t, r, &e);
    if (!p) abort(); /* a database never makes a valid configuration invalid */
    for (int i = 0; i < p->n_ops; i++) {
      if (p->ops[i].kind != PLAN_KERNEL) continue;
      double t = ktime_kernel_s(&kt, &p->ops[i], NULL);
      if (!(t >= 0) || t > 1e12) abort(); /* finite, and bounded by the file's bounds */
    }
    plan_rank_free(p);
  }
  g_free(layer_t);
  cfg_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  GError *e = NULL;
  kdb *db = kdb_load_text("fuzz.json", text, size, &e);
  if (!db) {
    fuzz_refused(e);
  } else {
    use(db, "mlp-deep", 4);
    use(db, "cnn-small", 2);
    char *json = kdb_to_json(db);
    kdb *back = kdb_load_text("fuzz-back.json", json, strlen(json), NULL);
    if (!back) abort();
    char *again = kdb_to_json(back);
    if (strcmp(json, again) != 0) abort();
    g_free(again);
    kdb_free(back);
    g_free(json);
    kdb_free(db);
  }
  g_free(text);
  return 0;
}
