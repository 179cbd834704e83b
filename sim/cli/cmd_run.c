/* cmd_run.c — `dlsim run`: parse options, load the workload and platform, run one executor,
 * print the summary and write the result JSON. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/analytic/analytic.h"
#include "cli/cmds.h"
#include "cli/options.h"
#include "core/config.h"
#include "exec/context.h"
#include "core/dl_common.h"
#include "exec/exec.h"
#include "out/result.h"

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
static gboolean simulate_best_grids(const run_ctx *x, cfg_run *c, res_result *r, GError **err) {
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
    ok = exec_for(CFG_MODE_SIM)->run(x, &t, &tr, err);
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
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  GError *e = NULL;
  res_result r;
  res_init(&r);
  gboolean ok = FALSE;

  if (!cfg_parse_args(&parsed, "run", &argc, &argv, &e)) goto out;
  if (!check_out_path("--out", parsed.out, &e) || !check_out_path("--trace", parsed.trace, &e) ||
      !check_out_path("--dump-weights", parsed.dump_weights, &e))
    goto out;
  if (parsed.dump_weights && parsed.mode != CFG_MODE_REAL) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                "--dump-weights: only --mode real has weights to write");
    goto out;
  }
  if (!ctx_open(&x, &parsed, &e)) goto out;
  if (x.note) fprintf(stderr, "dlsim: note: %s\n", x.note);
  cfg_run *c = &x.cfg;
  const exec_ops *ex = exec_for(c->mode);
  if (!ex->check(&x, c, &e)) goto out;
  /* The closed form runs first in every mode: it checks the configuration against the planner
   * and the platform, gives the memory figures, and for --grid auto picks the grid. */
  if (!(c->grid_auto ? an_grid_search(&x, c, &r, &e) : an_run(&x, c, &r, &e))) goto out;
  if (!r.fits_in_memory && !c->ignore_memory) {
    not_fitting(&r, x.model, &e);
    goto out;
  }
  /* --grid auto in simulation: the closed form ranks every grid, the best few are simulated */
  if (c->mode == CFG_MODE_SIM && c->grid_auto && !simulate_best_grids(&x, c, &r, &e)) goto out;
  if (c->mode != CFG_MODE_ANALYTIC) {
    /* the executor's measurements replace the closed form's; memory stays the planner's */
    res_result m;
    res_init(&m);
    ok = ex->run(&x, c, &m, &e);
    if (ok) res_take_measured(&r, &m);
    res_release(&m);
    if (!ok) goto out;
    ok = FALSE;
  }
  res_print(&r, c, x.model, stdout);
  if (c->out) {
    char *json = res_to_json(&r, c, x.model);
    gboolean w = dl_write_file_atomic(c->out, json, strlen(json), &e);
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
  ctx_release(&x);
  cfg_release(&parsed);
  return status;
}
