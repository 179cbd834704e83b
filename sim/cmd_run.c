/* cmd_run.c — `dlsim run`: parse options, load the workload and platform, run one executor,
 * print the summary and write the result JSON. */
#include <stdio.h>
#include <string.h>

#include "analytic.h"
#include "cmds.h"
#include "config.h"
#include "dl_common.h"
#include "platform.h"
#include "result.h"
#include "realrun.h"
#include "simrun.h"
#include "workload.h"

static gboolean check_out_path(const char *opt, const char *path, GError **err) {
  if (!path) return TRUE;
  char *dir = g_path_get_dirname(path);
  gboolean ok = g_file_test(dir, G_FILE_TEST_IS_DIR);
  if (!ok)
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: directory '%s' does not exist", opt, path,
                dir);
  else if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    ok = FALSE;
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: is a directory", opt, path);
  }
  g_free(dir);
  return ok;
}

static gboolean not_fitting(const res_result *r, const wl_model *m, GError **err) {
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "%s does not fit in GPU memory: %.2f GB needed per GPU (params %.2f, grads %.2f, "
              "optimizer %.2f, activations %.2f) > %.2f GB on %s; use more GPUs, a smaller "
              "--batch, --recompute or model parallelism (or --ignore-memory)",
              m->name, r->peak_mem_bytes / 1e9, r->mem.params / 1e9, r->mem.grads / 1e9,
              r->mem.optimizer / 1e9, r->mem.activations / 1e9, r->gpu_mem_bytes / 1e9,
              r->gpu_model);
  return FALSE;
}

int cmd_run(int argc, char **argv) {
  cfg_run c;
  cfg_init(&c);
  GError *e = NULL;
  wl_model *m = NULL;
  plat *pl = NULL;
  res_result r;
  res_init(&r);
  gboolean ok = FALSE;

  if (!cfg_parse_args(&c, &argc, &argv, &e)) goto out;
  if (!check_out_path("--out", c.out, &e) || !check_out_path("--trace", c.trace, &e) ||
      !check_out_path("--dump-weights", c.dump_weights, &e))
    goto out;
  m = wl_load(c.workload, &e);
  if (!m) goto out;
  if (!cfg_resolve(&c, (long)m->default_batch, &e)) goto out;
  if (c.dump_weights && c.mode != CFG_MODE_REAL) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                "--dump-weights: only --mode real has weights to write");
    goto out;
  }
  if (c.mode == CFG_MODE_REAL && !rr_check(m, &c, &e)) goto out;
  if (c.mode == CFG_MODE_ANALYTIC && c.trace) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                "--trace: the closed form has no timeline; traces come from --mode sim");
    goto out;
  }
  pl = plat_load(c.platform, &e);
  if (!pl) goto out;
  /* The closed form runs first in every mode: it checks the configuration against the planner
   * and the platform, gives the memory figures, and for --grid auto picks the grid. */
  if (!(c.grid_auto ? an_grid_search(m, &c, pl, &r, &e) : an_run(m, &c, pl, &r, &e))) goto out;
  if (!r.fits_in_memory && !c.ignore_memory) {
    not_fitting(&r, m, &e);
    goto out;
  }
  /* the simulation replaces the closed form's times; memory figures stay the planner's */
  if (c.mode == CFG_MODE_SIM && !sr_run(m, &c, pl, &r, &e)) goto out;
  if (c.mode == CFG_MODE_REAL && !rr_run(m, &c, pl, &r, &e)) goto out;
  res_print(&r, &c, m, stdout);
  if (c.out) {
    char *json = res_to_json(&r, &c, m);
    gboolean w = dl_write_file_atomic(c.out, json, strlen(json), &e);
    g_free(json);
    if (!w) goto out;
  }
  ok = TRUE;

out:;
  int status = 0;
  if (!ok) {
    fprintf(stderr, "dlsim: %s\n", e ? e->message : "run failed");
    status = (!e || e->code == DL_ERR_INPUT) ? 2 : 1;
    if (e) g_error_free(e);
  }
  res_release(&r);
  plat_free(pl);
  wl_free(m);
  cfg_release(&c);
  return status;
}
