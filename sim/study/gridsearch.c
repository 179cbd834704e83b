/* gridsearch.c — --grid auto: every factorisation Pr×Pc of the GPUs in closed form, then the
 * best few simulated (see gridsearch.h). */
#include "study/gridsearch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "exec/exec.h"

gboolean gridsearch_analytic(const run_ctx *x, cfg_run *c, res_result *r, GError **err) {
  const int P = c->gpus;
  double best = INFINITY;
  int best_pr = 0;
  for (int pr = 1; pr <= P; pr++) {
    if (P % pr) continue;
    int pc = P / pr;
    if (c->batch % pc || (c->grid_fc_only && c->batch % P)) continue;
    cfg_run t = *c;
    t.grid_auto = FALSE;
    t.grid_pr = pr;
    t.grid_pc = pc;
    t.tp = pr;
    t.dp = pc;
    res_result tr;
    res_init(&tr);
    if (!analytic_run(x, &t, &tr, err)) {
      res_release(&tr);
      return FALSE;
    }
    res_grid_row row;
    memset(&row, 0, sizeof row);
    g_snprintf(row.grid, sizeof row.grid, "%dx%d", pr, pc);
    row.iteration_time_s = tr.iteration_time_s;
    row.comm_s = tr.comm_s;
    row.gholami_comm_s = tr.gholami_comm_s;
    g_array_append_val(r->grid_search, row);
    if (tr.iteration_time_s < best) {
      best = tr.iteration_time_s;
      best_pr = pr;
    }
    res_release(&tr);
  }
  if (!best_pr) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--grid auto: no factorisation of --gpus %d divides --batch %ld", P, c->batch);
    return FALSE;
  }
  c->grid_auto = FALSE;
  c->grid_pr = c->tp = best_pr;
  c->grid_pc = c->dp = P / best_pr;
  GArray *rows = r->grid_search;
  r->grid_search = NULL;
  res_release(r);
  res_init(r);
  g_array_free(r->grid_search, TRUE);
  r->grid_search = rows;
  c->grid_auto = FALSE;
  gboolean ok = analytic_run(x, c, r, err);
  c->grid_auto = TRUE; /* the configuration echo says how the grid was chosen */
  return ok;
}

#define SIM_BEST_GRIDS 3 /* grids simulated after the closed form's search */

static int row_by_time(gconstpointer a, gconstpointer b) {
  double x = (*(res_grid_row *const *)a)->iteration_time_s;
  double y = (*(res_grid_row *const *)b)->iteration_time_s;
  return x < y ? -1 : x > y ? 1 : 0;
}

gboolean gridsearch_simulate(const run_ctx *x, cfg_run *c, res_result *r, GError **err) {
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
