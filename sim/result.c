/* result.c — the result document and the human summary. */
#include "result.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "dl_common.h"

void res_init(res_result *r) {
  memset(r, 0, sizeof *r);
  r->colls = g_array_new(FALSE, FALSE, sizeof(res_coll));
  r->rank_rows = g_array_new(FALSE, FALSE, sizeof(res_rank));
  r->grid_search = g_array_new(FALSE, FALSE, sizeof(res_grid_row));
  r->loss = g_array_new(FALSE, FALSE, sizeof(double));
  r->gholami_comm_s = -1;
}

void res_release(res_result *r) {
  if (r->colls) g_array_free(r->colls, TRUE);
  if (r->rank_rows) g_array_free(r->rank_rows, TRUE);
  if (r->grid_search) g_array_free(r->grid_search, TRUE);
  if (r->loss) g_array_free(r->loss, TRUE);
  g_free(r->kdb_name);
  memset(r, 0, sizeof *r);
}

static int64_t epoch_iters(const cfg_run *c, const wl_model *m) {
  return (m->dataset_samples + c->batch - 1) / c->batch;
}

char *res_to_json(const res_result *r, const cfg_run *c, const wl_model *m) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "dlsim_version", DL_VERSION);
  cJSON_AddStringToObject(root, "mode", cfg_mode_name(c->mode));

  cJSON_AddItemToObject(root, "config", cfg_to_json(c));

  double T = r->iteration_time_s;
  cJSON_AddNumberToObject(root, "iteration_time_s", T);
  cJSON_AddNumberToObject(root, "throughput_samples_per_s", T > 0 ? c->batch / T : 0);
  cJSON_AddNumberToObject(root, "iterations_per_epoch", (double)epoch_iters(c, m));
  cJSON_AddNumberToObject(root, "epoch_time_s", T * (double)epoch_iters(c, m));
  double model_flops = (m->fwd_flops + m->bwd_flops) * (double)c->batch;
  cJSON_AddNumberToObject(root, "model_flops_per_iteration", model_flops);
  cJSON_AddNumberToObject(root, "achieved_flops_per_gpu", T > 0 ? model_flops / T / c->gpus : 0);

  cJSON *mo = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(mo, "name", m->name);
  cJSON_AddNumberToObject(mo, "params", (double)m->params);
  cJSON_AddNumberToObject(mo, "fwd_flops_per_sample", m->fwd_flops);
  cJSON_AddNumberToObject(mo, "bwd_flops_per_sample", m->bwd_flops);
  cJSON_AddNumberToObject(mo, "activation_bytes_per_sample",
                          (double)m->act_elems * gs_precision_bytes(c->precision));
  cJSON_AddStringToObject(mo, "dataset", m->dataset);
  cJSON_AddNumberToObject(mo, "dataset_samples", (double)m->dataset_samples);

  cJSON *bd = cJSON_AddObjectToObject(root, "breakdown_s");
  cJSON_AddNumberToObject(bd, "compute", r->compute_s);
  cJSON_AddNumberToObject(bd, "exposed_comm", r->exposed_comm_s);
  cJSON_AddNumberToObject(bd, "overlapped_comm", r->overlapped_comm_s);
  cJSON_AddNumberToObject(bd, "bubble", r->bubble_s);
  cJSON_AddNumberToObject(bd, "idle", r->idle_s);
  cJSON *ph = cJSON_AddObjectToObject(root, "compute_by_phase_s");
  for (int i = 0; i < PL_N_PHASES; i++)
    cJSON_AddNumberToObject(ph, pl_phase_name((pl_phase)i), r->phase_compute_s[i]);
  cJSON_AddNumberToObject(root, "comm_s", r->comm_s);
  cJSON_AddNumberToObject(root, "comm_bytes_per_gpu", r->comm_bytes_per_gpu);
  if (r->gholami_comm_s >= 0) cJSON_AddNumberToObject(root, "gholami_eq_comm_s", r->gholami_comm_s);

  if (r->moe_routed_tokens > 0) {
    cJSON *moe = cJSON_AddObjectToObject(root, "moe");
    cJSON_AddStringToObject(moe, "routing", c->routing ? c->routing : "uniform");
    cJSON_AddNumberToObject(moe, "imbalance_max_over_mean", r->moe_max_over_mean);
    cJSON_AddNumberToObject(moe, "routed_tokens_per_iteration", r->moe_routed_tokens);
    cJSON_AddNumberToObject(moe, "dropped_tokens_per_iteration", r->moe_dropped_tokens);
    cJSON_AddNumberToObject(moe, "dropped_fraction",
                            r->moe_dropped_tokens / r->moe_routed_tokens);
  }
  cJSON *mem = cJSON_AddObjectToObject(root, "memory_bytes_per_gpu");
  cJSON_AddNumberToObject(mem, "peak", r->peak_mem_bytes);
  cJSON_AddNumberToObject(mem, "params", r->mem.params);
  cJSON_AddNumberToObject(mem, "grads", r->mem.grads);
  cJSON_AddNumberToObject(mem, "optimizer", r->mem.optimizer);
  cJSON_AddNumberToObject(mem, "activations", r->mem.activations);
  cJSON_AddNumberToObject(mem, "capacity", r->gpu_mem_bytes);
  cJSON_AddBoolToObject(root, "fits_in_memory", r->fits_in_memory);

  cJSON *kd = cJSON_AddObjectToObject(root, "kernel_db");
  cJSON_AddStringToObject(kd, "name", r->kdb_name ? r->kdb_name : "");
  cJSON_AddNumberToObject(kd, "measured", r->kdb_measured);
  cJSON_AddNumberToObject(kd, "interpolated", r->kdb_interpolated);
  cJSON_AddNumberToObject(kd, "estimated", r->kdb_estimated);

  cJSON *co = cJSON_AddArrayToObject(root, "collectives");
  for (guint i = 0; i < r->colls->len; i++) {
    const res_coll *x = &g_array_index(r->colls, res_coll, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", coll_op_name(x->op));
    cJSON_AddStringToObject(o, "group", pl_group_name(x->group));
    cJSON_AddStringToObject(o, "purpose", pl_purpose_name(x->purpose));
    cJSON_AddStringToObject(o, "algo", x->algo);
    cJSON_AddNumberToObject(o, "calls", x->calls);
    cJSON_AddNumberToObject(o, "bytes", x->bytes);
    cJSON_AddNumberToObject(o, "wire_bytes", x->wire_bytes);
    cJSON_AddNumberToObject(o, "time_s", x->time_s);
    cJSON_AddItemToArray(co, o);
  }
  cJSON *rk = cJSON_AddArrayToObject(root, "ranks");
  for (guint i = 0; i < r->rank_rows->len; i++) {
    const res_rank *x = &g_array_index(r->rank_rows, res_rank, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", x->rank);
    cJSON_AddNumberToObject(o, "iteration_time_s", x->iteration_time_s);
    cJSON_AddNumberToObject(o, "compute_s", x->compute_s);
    cJSON_AddNumberToObject(o, "comm_s", x->comm_s);
    cJSON_AddNumberToObject(o, "peak_memory_bytes", x->peak_mem_bytes);
    cJSON_AddNumberToObject(o, "activation_bytes", x->activation_bytes);
    cJSON_AddItemToArray(rk, o);
  }
  if (r->grid_search && r->grid_search->len) {
    cJSON *gs = cJSON_AddArrayToObject(root, "grid_search");
    for (guint i = 0; i < r->grid_search->len; i++) {
      const res_grid_row *x = &g_array_index(r->grid_search, res_grid_row, i);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "grid", x->grid);
      cJSON_AddNumberToObject(o, "iteration_time_s", x->iteration_time_s);
      cJSON_AddNumberToObject(o, "comm_s", x->comm_s);
      cJSON_AddNumberToObject(o, "gholami_eq_comm_s", x->gholami_comm_s);
      cJSON_AddBoolToObject(o, "simulated", x->simulated);
      if (x->simulated) cJSON_AddNumberToObject(o, "sim_iteration_time_s", x->sim_iteration_time_s);
      cJSON_AddItemToArray(gs, o);
    }
  }
  if (r->loss && r->loss->len) {
    cJSON *ls = cJSON_AddArrayToObject(root, "loss");
    for (guint i = 0; i < r->loss->len; i++)
      cJSON_AddItemToArray(ls, cJSON_CreateNumber(g_array_index(r->loss, double, i)));
  }
  cJSON *si = cJSON_AddObjectToObject(root, "simulation");
  cJSON_AddNumberToObject(si, "wall_s", c->reproducible ? 0.0 : r->wall_s);
  cJSON_AddNumberToObject(si, "ranks", r->ranks);
  cJSON_AddNumberToObject(si, "slowest_rank", r->slowest_rank);

  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(txt, "\n", NULL);
  cJSON_free(txt);
  return out;
}

static void human_s(char *buf, size_t n, double s) {
  if (s >= 3600) g_snprintf(buf, n, "%.2f h", s / 3600);
  else if (s >= 60) g_snprintf(buf, n, "%.2f min", s / 60);
  else if (s >= 1) g_snprintf(buf, n, "%.3f s", s);
  else if (s >= 1e-3) g_snprintf(buf, n, "%.3f ms", s * 1e3);
  else g_snprintf(buf, n, "%.3f us", s * 1e6);
}

void res_print(const res_result *r, const cfg_run *c, const wl_model *m, FILE *out) {
  char a[32], b[32];
  char *grid = cfg_grid_string(c);
  if (c->grid_auto) {
    g_free(grid);
    grid = g_strdup_printf("%dx%d (auto)", c->grid_pr, c->grid_pc);
  }
  fprintf(out, "dlsim %s (%s): %s on %s, %d GPUs, batch %ld, dp %d tp %d pp %d, grid %s, %s\n",
          DL_VERSION, cfg_mode_name(c->mode), m->name, c->platform, c->gpus, c->batch, c->dp,
          c->tp, c->pp, grid, gs_precision_name(c->precision));
  g_free(grid);
  if (r->grid_search && r->grid_search->len) {
    fprintf(out, "  %-12s %16s %16s %18s %16s\n", "grid PrxPc", "iteration (ms)", "comm (ms)",
            "Gholami Eq. (ms)", "simulated (ms)");
    for (guint i = 0; i < r->grid_search->len; i++) {
      const res_grid_row *x = &g_array_index(r->grid_search, res_grid_row, i);
      char mine[32];
      g_snprintf(mine, sizeof mine, "%dx%d", c->grid_pr, c->grid_pc);
      char simbuf[32] = "";
      if (x->simulated) g_snprintf(simbuf, sizeof simbuf, "%.3f", x->sim_iteration_time_s * 1e3);
      fprintf(out, "  %-12s %16.3f %16.3f %18.3f %16s%s\n", x->grid, x->iteration_time_s * 1e3,
              x->comm_s * 1e3, x->gholami_comm_s * 1e3, simbuf,
              strcmp(x->grid, mine) == 0 ? "  <- best" : "");
    }
  }
  human_s(a, sizeof a, r->iteration_time_s);
  double T = r->iteration_time_s;
  fprintf(out, "  iteration       %s   throughput %.1f samples/s   %.1f TFLOP/s per GPU\n", a,
          T > 0 ? c->batch / T : 0,
          T > 0 ? (m->fwd_flops + m->bwd_flops) * c->batch / T / c->gpus / 1e12 : 0);
  human_s(a, sizeof a, T * (double)epoch_iters(c, m));
  fprintf(out, "  epoch           %s (%ld iterations of %ld samples)\n", a,
          (long)epoch_iters(c, m), c->batch);
  double pct = T > 0 ? 100.0 / T : 0;
  fprintf(out,
          "  breakdown       compute %.1f%%  exposed comm %.1f%%  bubble %.1f%%  idle %.1f%%"
          "  (overlapped comm %.1f%%)\n",
          r->compute_s * pct, r->exposed_comm_s * pct, r->bubble_s * pct, r->idle_s * pct,
          r->overlapped_comm_s * pct);
  human_s(a, sizeof a, r->comm_s);
  fprintf(out, "  communication   %s per iteration, %.3f GB sent per GPU", a,
          r->comm_bytes_per_gpu / 1e9);
  if (r->gholami_comm_s >= 0) {
    human_s(b, sizeof b, r->gholami_comm_s);
    fprintf(out, " (Gholami et al. equation: %s)", b);
  }
  fprintf(out, "\n");
  fprintf(out,
          "  memory per GPU  %.2f GB of %.2f GB (params %.2f, grads %.2f, optimizer %.2f, "
          "activations %.2f)%s\n",
          r->peak_mem_bytes / 1e9, r->gpu_mem_bytes / 1e9, r->mem.params / 1e9,
          r->mem.grads / 1e9, r->mem.optimizer / 1e9, r->mem.activations / 1e9,
          r->fits_in_memory ? "" : "  DOES NOT FIT");
  if (r->moe_routed_tokens > 0)
    fprintf(out, "  experts         routing %s: busiest expert %.2fx the mean, %.2f%% of token copies "
            "dropped by capacity\n", c->routing ? c->routing : "uniform", r->moe_max_over_mean,
            100.0 * r->moe_dropped_tokens / r->moe_routed_tokens);
  fprintf(out, "  kernels         %s: %d measured, %d interpolated, %d estimated\n",
          r->kdb_name ? r->kdb_name : "", r->kdb_measured, r->kdb_interpolated, r->kdb_estimated);
}
