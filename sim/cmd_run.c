/* cmd_run.c — `dlsim run`: parse options, load the workload and platform, run one executor,
 * print the summary and write the result JSON. */
#include <math.h>
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

#define SIM_BEST_GRIDS 3 /* grids simulated after the closed form's search */

static int row_by_time(gconstpointer a, gconstpointer b) {
  double x = (*(res_grid_row *const *)a)->iteration_time_s;
  double y = (*(res_grid_row *const *)b)->iteration_time_s;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* Simulates the SIM_BEST_GRIDS fastest grids of the closed form's table and leaves the fastest
 * simulated one in c (grid_pr, grid_pc, tp, dp). */
static gboolean simulate_best_grids(const wl_model *m, cfg_run *c, const plat *pl, res_result *r,
                                    GError **err) {
  GPtrArray *order = g_ptr_array_new();
  for (guint i = 0; i < r->grid_search->len; i++)
    g_ptr_array_add(order, &g_array_index(r->grid_search, res_grid_row, i));
  g_ptr_array_sort(order, row_by_time);
  double best = INFINITY;
  int best_pr = c->grid_pr;
  gboolean ok = TRUE;
  for (guint k = 0; k < order->len && k < SIM_BEST_GRIDS && ok; k++) {
    res_grid_row *row = order->pdata[k];
    cfg_run t = *c;
    t.trace = NULL;
    if (sscanf(row->grid, "%dx%d", &t.grid_pr, &t.grid_pc) != 2) continue;
    t.tp = t.grid_pr;
    t.dp = t.grid_pc;
    t.grid_auto = FALSE;
    res_result tr;
    res_init(&tr);
    fprintf(stderr, "dlsim: simulating grid %s (%u of %d)\n", row->grid, k + 1,
            MIN((int)order->len, SIM_BEST_GRIDS));
    ok = sr_run(m, &t, pl, &tr, err);
    if (ok) {
      row->simulated = TRUE;
      row->sim_iteration_time_s = tr.iteration_time_s;
      if (tr.iteration_time_s < best) {
        best = tr.iteration_time_s;
        best_pr = t.grid_pr;
      }
    }
    res_release(&tr);
  }
  g_ptr_array_free(order, TRUE);
  c->grid_pr = c->tp = best_pr;
  c->grid_pc = c->dp = c->gpus / best_pr;
  return ok;
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
  cfg_resolve_style(&c, wl_has_tp_roles(m));
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
  if (c.gpus > plat_n_hosts(pl) && !strchr(c.platform, '/') && !strchr(c.platform, ':')) {
    /* a named cluster design (a preset) grows to the GPUs asked for, with the same nodes and
     * network; a platform file stays what it is */
    plat_gen_params gp;
    if (plat_gen_preset(c.platform, &gp, NULL)) {
      int per = plat_gpus_per_node(pl);
      char *scaled = g_strdup_printf("%s:%d", c.platform, (c.gpus + per - 1) / per);
      fprintf(stderr, "dlsim: note: %s has %d GPUs; simulating %d on %s (same nodes and "
              "network, more of them)\n", c.platform, plat_n_hosts(pl), c.gpus, scaled);
      plat_free(pl);
      pl = plat_load(scaled, &e);
      g_free(c.platform);
      c.platform = scaled;
      if (!pl) goto out;
    }
  }
  /* The closed form runs first in every mode: it checks the configuration against the planner
   * and the platform, gives the memory figures, and for --grid auto picks the grid. */
  if (!(c.grid_auto ? an_grid_search(m, &c, pl, &r, &e) : an_run(m, &c, pl, &r, &e))) goto out;
  if (!r.fits_in_memory && !c.ignore_memory) {
    not_fitting(&r, m, &e);
    goto out;
  }
  /* --grid auto in simulation: the closed form ranks every grid, the best few are simulated */
  if (c.mode == CFG_MODE_SIM && c.grid_auto && !simulate_best_grids(m, &c, pl, &r, &e)) goto out;
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
