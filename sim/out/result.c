/* result.c — the result document and the human summary. */
#include "out/result.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"

void res_init(res_result *r) {
  memset(r, 0, sizeof *r);
  r->colls = g_array_new(FALSE, FALSE, sizeof(res_coll));
  r->rank_rows = g_array_new(FALSE, FALSE, sizeof(res_rank));
  r->grid_search = g_array_new(FALSE, FALSE, sizeof(res_grid_row));
  r->loss = g_array_new(FALSE, FALSE, sizeof(double));
  r->gholami_comm_s = -1;
  r->folded = 1;
  r->folded_channels = 1;
  r->folded_rails = 1;
}

void res_release(res_result *r) {
  if (r->colls) g_array_free(r->colls, TRUE);
  if (r->rank_rows) g_array_free(r->rank_rows, TRUE);
  if (r->grid_search) g_array_free(r->grid_search, TRUE);
  if (r->loss) g_array_free(r->loss, TRUE);
  if (r->degraded_links) g_ptr_array_free(r->degraded_links, TRUE);
  if (r->degraded_factors) g_array_free(r->degraded_factors, TRUE);
  if (r->samples_s) g_array_free(r->samples_s, TRUE);
  g_free(r->interval_source);
  res_kdb_release(&r->kdb);
  memset(r, 0, sizeof *r);
}

void res_set_degraded(res_result *r, const char *const *names, const double *factors, int n) {
  if (r->degraded_links) g_ptr_array_free(r->degraded_links, TRUE);
  if (r->degraded_factors) g_array_free(r->degraded_factors, TRUE);
  r->degraded_links = NULL;
  r->degraded_factors = NULL;
  if (n <= 0) return;
  r->degraded_links = g_ptr_array_new_with_free_func(g_free);
  r->degraded_factors = g_array_new(FALSE, FALSE, sizeof(double));
  for (int i = 0; i < n; i++) g_ptr_array_add(r->degraded_links, g_strdup(names[i]));
  g_array_append_vals(r->degraded_factors, factors, (guint)n);
}

void res_set_samples(res_result *r, const double *t, int n) {
  if (r->samples_s) g_array_free(r->samples_s, TRUE);
  r->samples_s = NULL;
  if (n <= 0) return;
  r->samples_s = g_array_sized_new(FALSE, FALSE, sizeof(double), (guint)n);
  g_array_append_vals(r->samples_s, t, (guint)n);
}

static int dbl_cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double res_percentile(const double *t, int n, double p) {
  double *s = g_memdup2(t, sizeof *t * (gsize)n);
  qsort(s, (size_t)n, sizeof *s, dbl_cmp);
  const double h = (n - 1) * p / 100.0;
  const int i = (int)floor(h);
  const double v = i + 1 < n ? s[i] + (h - i) * (s[i + 1] - s[i]) : s[n - 1];
  g_free(s);
  return v;
}

/* The draws' figures: their count and percentiles, as the result holds them. */
static void samples_json(cJSON *root, const GArray *a) {
  const double *t = (const double *)a->data;
  const int n = (int)a->len;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += t[i];
  cJSON *o = cJSON_AddObjectToObject(root, "iteration_time_samples_s");
  cJSON_AddNumberToObject(o, "samples", n);
  cJSON_AddNumberToObject(o, "min", res_percentile(t, n, 0));
  cJSON_AddNumberToObject(o, "p5", res_percentile(t, n, 5));
  cJSON_AddNumberToObject(o, "p50", res_percentile(t, n, 50));
  cJSON_AddNumberToObject(o, "p95", res_percentile(t, n, 95));
  cJSON_AddNumberToObject(o, "max", res_percentile(t, n, 100));
  cJSON_AddNumberToObject(o, "mean", sum / n);
}

void res_kdb_release(res_kdb *k) {
  g_free(k->name);
  g_free(k->file);
  g_free(k->device);
  g_free(k->provenance);
  g_free(k->note);
  memset(k, 0, sizeof *k);
}

void res_kdb_set_shares(res_kdb *k, const double *kernel_s) {
  double total = 0;
  for (int o = 0; o < KDB_N_ORIGINS; o++) total += kernel_s[o];
  for (int o = 0; o < KDB_N_ORIGINS; o++) k->share[o] = total > 0 ? kernel_s[o] / total : 0;
}

void res_kdb_clear_source(res_kdb *k) {
  g_clear_pointer(&k->name, g_free);
  g_clear_pointer(&k->file, g_free);
  g_clear_pointer(&k->device, g_free);
  g_clear_pointer(&k->provenance, g_free);
  g_clear_pointer(&k->note, g_free);
}

void res_kdb_set_source(res_kdb *dst, const res_kdb *src) {
  res_kdb_clear_source(dst);
  dst->name = g_strdup(src->name);
  dst->file = g_strdup(src->file);
  dst->device = g_strdup(src->device);
  dst->provenance = g_strdup(src->provenance);
  dst->note = g_strdup(src->note);
}

int64_t res_epoch_iterations(const cfg_run *c, const wl_model *m) {
  return (m->dataset_samples + c->batch - 1) / c->batch;
}

char *res_to_json(const res_result *r, const cfg_run *c, const wl_model *m) {
  return res_to_json_with(r, c, m, NULL, NULL);
}

char *res_to_json_with(const res_result *r, const cfg_run *c, const wl_model *m, const char *key,
                       void *item) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "dlsim_version", DL_VERSION);
  cJSON_AddStringToObject(root, "mode", cfg_mode_name(c->mode));

  cJSON_AddItemToObject(root, "config", cfg_to_json(c));

  double T = r->iteration_time_s;
  cJSON_AddNumberToObject(root, "iteration_time_s", T);
  if (r->samples_s) samples_json(root, r->samples_s);
  if (r->interval) {
    cJSON *o = cJSON_AddObjectToObject(root, "iteration_time_interval_s");
    cJSON_AddNumberToObject(o, "coverage", 0.9);
    cJSON_AddNumberToObject(o, "p5", r->interval_p5_s);
    cJSON_AddNumberToObject(o, "p50", r->interval_p50_s);
    cJSON_AddNumberToObject(o, "p95", r->interval_p95_s);
    cJSON_AddNumberToObject(o, "kernel_draws", r->samples_s ? (int)r->samples_s->len : 0);
    if (r->interval_source) cJSON_AddStringToObject(o, "validation", r->interval_source);
    else cJSON_AddNullToObject(o, "validation");
    cJSON_AddNumberToObject(o, "validation_cases", r->interval_cases);
    if (r->interval_cases > 0)
      cJSON_AddNumberToObject(o, "leave_one_out_coverage",
                              (double)r->interval_loo_covered / r->interval_cases);
    else cJSON_AddNullToObject(o, "leave_one_out_coverage");
  }
  cJSON_AddNumberToObject(root, "throughput_samples_per_s", T > 0 ? c->batch / T : 0);
  cJSON_AddNumberToObject(root, "iterations_per_epoch", (double)res_epoch_iterations(c, m));
  cJSON_AddNumberToObject(root, "epoch_time_s", T * (double)res_epoch_iterations(c, m));
  double model_flops = (m->fwd_flops + m->bwd_flops) * (double)c->batch;
  cJSON_AddNumberToObject(root, "model_flops_per_iteration", model_flops);
  cJSON_AddNumberToObject(root, "achieved_flops_per_gpu", T > 0 ? model_flops / T / c->gpus : 0);

  cJSON *mo = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(mo, "name", m->name);
  cJSON_AddNumberToObject(mo, "params", (double)m->params);
  cJSON_AddNumberToObject(mo, "fwd_flops_per_sample", m->fwd_flops);
  cJSON_AddNumberToObject(mo, "bwd_flops_per_sample", m->bwd_flops);
  cJSON_AddNumberToObject(mo, "activation_bytes_per_sample",
                          (double)m->act_elems * gpu_precision_bytes(c->precision));
  cJSON_AddStringToObject(mo, "dataset", m->dataset);
  cJSON_AddNumberToObject(mo, "dataset_samples", (double)m->dataset_samples);

  cJSON *bd = cJSON_AddObjectToObject(root, "breakdown_s");
  cJSON_AddNumberToObject(bd, "compute", r->compute_s);
  cJSON_AddNumberToObject(bd, "exposed_comm", r->exposed_comm_s);
  cJSON_AddNumberToObject(bd, "overlapped_comm", r->overlapped_comm_s);
  cJSON_AddNumberToObject(bd, "bubble", r->bubble_s);
  cJSON_AddNumberToObject(bd, "idle", r->idle_s);
  cJSON *ph = cJSON_AddObjectToObject(root, "compute_by_phase_s");
  for (int i = 0; i < PLAN_N_PHASES; i++)
    cJSON_AddNumberToObject(ph, plan_phase_name((plan_phase)i), r->phase_compute_s[i]);
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
  cJSON_AddNumberToObject(mem, "gathered", r->mem.gathered);
  cJSON_AddNumberToObject(mem, "capacity", r->gpu_mem_bytes);
  cJSON_AddBoolToObject(root, "fits_in_memory", r->fits_in_memory);

  cJSON *kd = cJSON_AddObjectToObject(root, "kernel_db");
  cJSON_AddStringToObject(kd, "name", r->kdb.name ? r->kdb.name : "");
  cJSON_AddStringToObject(kd, "file", r->kdb.file ? r->kdb.file : "");
  cJSON_AddStringToObject(kd, "device", r->kdb.device ? r->kdb.device : "");
  for (int o = 0; o < KDB_N_ORIGINS; o++)
    cJSON_AddNumberToObject(kd, kdb_origin_name((kdb_origin)o), r->kdb.count[o]);
  cJSON *share = cJSON_AddObjectToObject(kd, "time_share");
  for (int o = 0; o < KDB_N_ORIGINS; o++)
    cJSON_AddNumberToObject(share, kdb_origin_name((kdb_origin)o), r->kdb.share[o]);
  cJSON_AddStringToObject(kd, "note", r->kdb.note ? r->kdb.note : "");
  cJSON *prov = r->kdb.provenance ? cJSON_Parse(r->kdb.provenance) : NULL;
  cJSON_AddItemToObject(kd, "provenance", prov ? prov : cJSON_CreateObject());

  cJSON *co = cJSON_AddArrayToObject(root, "collectives");
  for (guint i = 0; i < r->colls->len; i++) {
    const res_coll *x = &g_array_index(r->colls, res_coll, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", coll_op_name(x->op));
    cJSON_AddStringToObject(o, "group", plan_group_name(x->group));
    cJSON_AddStringToObject(o, "purpose", plan_purpose_name(x->purpose));
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
    cJSON_AddNumberToObject(o, "kernel_flops", x->kernel_flops);
    cJSON_AddNumberToObject(o, "kernel_mem_bytes", x->kernel_mem_bytes);
    cJSON_AddNumberToObject(o, "gemm_kernel_s", x->gemm_kernel_s);
    cJSON_AddNumberToObject(o, "elementwise_mem_bytes", x->elementwise_mem_bytes);
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
  cJSON_AddNumberToObject(si, "folded", r->folded);
  cJSON_AddNumberToObject(si, "folded_channels", r->folded_channels);
  cJSON_AddNumberToObject(si, "folded_rails", r->folded_rails);
  cJSON_AddNumberToObject(si, "computed_phases", r->computed_phases);
  if (r->degraded_links) { /* --degrade: the links drawn or named, and their factors */
    cJSON *dl = cJSON_AddArrayToObject(si, "degraded_links");
    for (guint i = 0; i < r->degraded_links->len; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "link", r->degraded_links->pdata[i]);
      cJSON_AddNumberToObject(o, "bandwidth_factor", g_array_index(r->degraded_factors, double, i));
      cJSON_AddItemToArray(dl, o);
    }
  }
  if (key && item) cJSON_AddItemToObject(root, key, (cJSON *)item);

  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(txt, "\n", NULL);
  cJSON_free(txt);
  return out;
}

/* ---- reading a result document ------------------------------------------------------------ */

typedef struct {
  const char *what; /* the document, for messages */
  GError **err;
  gboolean ok;
} reader;

static const cJSON *item(reader *rd, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  if (!v && rd->ok) {
    g_set_error(rd->err, DL_ERROR, DL_ERR_INPUT, "%s: %s%s%s: missing", rd->what, path,
                *path ? "." : "", key);
    rd->ok = FALSE;
  }
  return v;
}

static double num(reader *rd, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = item(rd, o, path, key);
  if (v && !cJSON_IsNumber(v) && rd->ok) {
    g_set_error(rd->err, DL_ERROR, DL_ERR_INPUT, "%s: %s%s%s: expected a number", rd->what, path,
                *path ? "." : "", key);
    rd->ok = FALSE;
  }
  return rd->ok ? v->valuedouble : 0;
}

static const char *str(reader *rd, const cJSON *o, const char *path, const char *key) {
  const cJSON *v = item(rd, o, path, key);
  if (v && !cJSON_IsString(v) && rd->ok) {
    g_set_error(rd->err, DL_ERROR, DL_ERR_INPUT, "%s: %s%s%s: expected a string", rd->what, path,
                *path ? "." : "", key);
    rd->ok = FALSE;
  }
  return rd->ok ? v->valuestring : "";
}

/* Index of `name` among `n` printable names, or -1 with an error naming the path. */
static int name_index(reader *rd, const char *name, const char *(*name_of)(int), int n,
                      const char *path) {
  for (int i = 0; i < n; i++)
    if (strcmp(name, name_of(i)) == 0) return i;
  if (rd->ok)
    g_set_error(rd->err, DL_ERROR, DL_ERR_INPUT, "%s: %s: unknown name '%s'", rd->what, path,
                name);
  rd->ok = FALSE;
  return 0;
}
static const char *op_name(int i) { return coll_op_name((coll_op)i); }
static const char *group_name(int i) { return plan_group_name((plan_group)i); }
static const char *purpose_name(int i) { return plan_purpose_name((plan_purpose)i); }
static const char *phase_name(int i) { return plan_phase_name((plan_phase)i); }

gboolean res_from_json(res_result *r, const char *text, const char *what, GError **err) {
  cJSON *root = cJSON_Parse(text);
  reader rd = {what, err, TRUE};
  if (!cJSON_IsObject(root)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: not a JSON object", what);
    cJSON_Delete(root);
    return FALSE;
  }
  r->iteration_time_s = num(&rd, root, "", "iteration_time_s");
  const cJSON *bd = item(&rd, root, "", "breakdown_s");
  r->compute_s = num(&rd, bd, "breakdown_s", "compute");
  r->exposed_comm_s = num(&rd, bd, "breakdown_s", "exposed_comm");
  r->overlapped_comm_s = num(&rd, bd, "breakdown_s", "overlapped_comm");
  r->bubble_s = num(&rd, bd, "breakdown_s", "bubble");
  r->idle_s = num(&rd, bd, "breakdown_s", "idle");
  const cJSON *ph = item(&rd, root, "", "compute_by_phase_s");
  for (int i = 0; i < PLAN_N_PHASES; i++)
    r->phase_compute_s[i] = num(&rd, ph, "compute_by_phase_s", phase_name(i));
  r->comm_s = num(&rd, root, "", "comm_s");
  r->comm_bytes_per_gpu = num(&rd, root, "", "comm_bytes_per_gpu");
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "gholami_eq_comm_s");
  r->gholami_comm_s = cJSON_IsNumber(g) ? g->valuedouble : -1;
  const cJSON *moe = cJSON_GetObjectItemCaseSensitive(root, "moe");
  if (moe) {
    r->moe_max_over_mean = num(&rd, moe, "moe", "imbalance_max_over_mean");
    r->moe_routed_tokens = num(&rd, moe, "moe", "routed_tokens_per_iteration");
    r->moe_dropped_tokens = num(&rd, moe, "moe", "dropped_tokens_per_iteration");
  }
  const cJSON *mem = item(&rd, root, "", "memory_bytes_per_gpu");
  r->peak_mem_bytes = num(&rd, mem, "memory_bytes_per_gpu", "peak");
  r->mem.params = num(&rd, mem, "memory_bytes_per_gpu", "params");
  r->mem.grads = num(&rd, mem, "memory_bytes_per_gpu", "grads");
  r->mem.optimizer = num(&rd, mem, "memory_bytes_per_gpu", "optimizer");
  r->mem.activations = num(&rd, mem, "memory_bytes_per_gpu", "activations");
  /* newer than the rest: a result written before it has none (nothing was gathered) */
  if (cJSON_GetObjectItemCaseSensitive(mem, "gathered"))
    r->mem.gathered = num(&rd, mem, "memory_bytes_per_gpu", "gathered");
  r->gpu_mem_bytes = num(&rd, mem, "memory_bytes_per_gpu", "capacity");
  r->fits_in_memory = cJSON_IsTrue(item(&rd, root, "", "fits_in_memory"));
  const cJSON *kd = item(&rd, root, "", "kernel_db");
  res_kdb_release(&r->kdb);
  r->kdb.name = g_strdup(str(&rd, kd, "kernel_db", "name"));
  r->kdb.file = g_strdup(str(&rd, kd, "kernel_db", "file"));
  r->kdb.device = g_strdup(str(&rd, kd, "kernel_db", "device"));
  const char *note = str(&rd, kd, "kernel_db", "note");
  r->kdb.note = *note ? g_strdup(note) : NULL;
  for (int o = 0; o < KDB_N_ORIGINS; o++)
    r->kdb.count[o] = (int)num(&rd, kd, "kernel_db", kdb_origin_name((kdb_origin)o));
  const cJSON *share = cJSON_GetObjectItemCaseSensitive(kd, "time_share"); /* newer results */
  for (int o = 0; o < KDB_N_ORIGINS && cJSON_IsObject(share); o++)
    r->kdb.share[o] = num(&rd, share, "kernel_db.time_share", kdb_origin_name((kdb_origin)o));
  const cJSON *prov = item(&rd, kd, "kernel_db", "provenance");
  if (cJSON_IsObject(prov)) {
    char *t = cJSON_PrintUnformatted(prov);
    r->kdb.provenance = g_strdup(t);
    cJSON_free(t);
  }
  g_array_set_size(r->colls, 0);
  const cJSON *x;
  int i = 0;
  cJSON_ArrayForEach(x, item(&rd, root, "", "collectives")) {
    char path[48];
    g_snprintf(path, sizeof path, "collectives[%d]", i++);
    res_coll c;
    memset(&c, 0, sizeof c);
    c.op = (coll_op)name_index(&rd, str(&rd, x, path, "op"), op_name, COLL_OP_COUNT, path);
    c.group =
        (plan_group)name_index(&rd, str(&rd, x, path, "group"), group_name, PLAN_N_GROUPS, path);
    c.purpose = (plan_purpose)name_index(&rd, str(&rd, x, path, "purpose"), purpose_name,
                                       PLAN_N_PURPOSES, path);
    c.algo = g_intern_string(str(&rd, x, path, "algo"));
    c.calls = (int)num(&rd, x, path, "calls");
    c.bytes = num(&rd, x, path, "bytes");
    c.wire_bytes = num(&rd, x, path, "wire_bytes");
    c.time_s = num(&rd, x, path, "time_s");
    if (rd.ok) g_array_append_val(r->colls, c);
  }
  g_array_set_size(r->rank_rows, 0);
  i = 0;
  cJSON_ArrayForEach(x, item(&rd, root, "", "ranks")) {
    char path[48];
    g_snprintf(path, sizeof path, "ranks[%d]", i++);
    res_rank k = {(int)num(&rd, x, path, "rank"), num(&rd, x, path, "iteration_time_s"),
                  num(&rd, x, path, "compute_s"), num(&rd, x, path, "comm_s"),
                  num(&rd, x, path, "peak_memory_bytes"), num(&rd, x, path, "activation_bytes"),
                  0, 0, 0, 0};
    if (cJSON_HasObjectItem(x, "kernel_flops")) { /* newer results */
      k.kernel_flops = num(&rd, x, path, "kernel_flops");
      k.kernel_mem_bytes = num(&rd, x, path, "kernel_mem_bytes");
      k.gemm_kernel_s = num(&rd, x, path, "gemm_kernel_s");
      k.elementwise_mem_bytes = num(&rd, x, path, "elementwise_mem_bytes");
    }
    if (rd.ok) g_array_append_val(r->rank_rows, k);
  }
  g_array_set_size(r->grid_search, 0);
  i = 0;
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "grid_search")) {
    char path[48];
    g_snprintf(path, sizeof path, "grid_search[%d]", i++);
    res_grid_row row;
    memset(&row, 0, sizeof row);
    g_strlcpy(row.grid, str(&rd, x, path, "grid"), sizeof row.grid);
    row.iteration_time_s = num(&rd, x, path, "iteration_time_s");
    row.comm_s = num(&rd, x, path, "comm_s");
    row.gholami_comm_s = num(&rd, x, path, "gholami_eq_comm_s");
    row.simulated = cJSON_IsTrue(item(&rd, x, path, "simulated"));
    if (row.simulated) row.sim_iteration_time_s = num(&rd, x, path, "sim_iteration_time_s");
    if (rd.ok) g_array_append_val(r->grid_search, row);
  }
  g_array_set_size(r->loss, 0);
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "loss")) {
    double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    g_array_append_val(r->loss, v);
  }
  const cJSON *si = item(&rd, root, "", "simulation");
  r->wall_s = num(&rd, si, "simulation", "wall_s");
  r->ranks = (int)num(&rd, si, "simulation", "ranks");
  r->slowest_rank = (int)num(&rd, si, "simulation", "slowest_rank");
  r->folded = (int)num(&rd, si, "simulation", "folded");
  r->folded_channels = (int)num(&rd, si, "simulation", "folded_channels");
  r->folded_rails = (int)num(&rd, si, "simulation", "folded_rails");
  r->computed_phases = num(&rd, si, "simulation", "computed_phases");
  cJSON_Delete(root);
  return rd.ok;
}

void res_take_measured(res_result *dst, res_result *src) {
  dst->iteration_time_s = src->iteration_time_s;
  dst->compute_s = src->compute_s;
  dst->exposed_comm_s = src->exposed_comm_s;
  dst->overlapped_comm_s = src->overlapped_comm_s;
  dst->bubble_s = src->bubble_s;
  dst->idle_s = src->idle_s;
  dst->comm_s = src->comm_s;
  memcpy(dst->phase_compute_s, src->phase_compute_s, sizeof src->phase_compute_s);
  dst->comm_bytes_per_gpu = src->comm_bytes_per_gpu;
  res_kdb_release(&dst->kdb);
  dst->kdb = src->kdb;
  memset(&src->kdb, 0, sizeof src->kdb);
  dst->slowest_rank = src->slowest_rank;
  dst->ranks = src->ranks;
  dst->folded = src->folded;
  dst->folded_channels = src->folded_channels;
  dst->folded_rails = src->folded_rails;
  dst->computed_phases = src->computed_phases;
  dst->wall_s = src->wall_s;
  GArray *t;
  t = dst->colls, dst->colls = src->colls, src->colls = t;
  t = dst->rank_rows, dst->rank_rows = src->rank_rows, src->rank_rows = t;
  t = dst->loss, dst->loss = src->loss, src->loss = t;
}

static void human_s(char *buf, size_t n, double s) {
  if (s >= 3600) g_snprintf(buf, n, "%.2f h", s / 3600);
  else if (s >= 60) g_snprintf(buf, n, "%.2f min", s / 60);
  else if (s >= 1) g_snprintf(buf, n, "%.3f s", s);
  else if (s >= 1e-3) g_snprintf(buf, n, "%.3f ms", s * 1e3);
  else g_snprintf(buf, n, "%.3f us", s * 1e6);
}

void res_print(const res_result *r, const cfg_run *c, const wl_model *m, FILE *out) {
  char a[128], b[32];
  char *grid = cfg_grid_string(c);
  if (c->grid_auto) {
    g_free(grid);
    grid = g_strdup_printf("%dx%d (auto)", c->grid_pr, c->grid_pc);
  }
  char cp[64] = "";
  if (c->cp > 1) g_snprintf(cp, sizeof cp, " cp %d (%s)", c->cp, cfg_cp_style_name(c->cp_style));
  if (c->sequence_parallel) g_strlcat(cp, " sp", sizeof cp);
  fprintf(out, "dlsim %s (%s): %s on %s, %d GPUs, batch %ld, dp %d tp %d%s pp %d, grid %s, %s\n",
          DL_VERSION, cfg_mode_name(c->mode), m->name, c->platform, c->gpus, c->batch, c->dp,
          c->tp, cp, c->pp, grid, gpu_precision_name(c->precision));
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
  if (r->interval) {
    char lo[32], hi[32];
    human_s(lo, sizeof lo, r->interval_p5_s);
    human_s(hi, sizeof hi, r->interval_p95_s);
    const size_t n = strlen(a);
    g_snprintf(a + n, sizeof a - n, " (90 %% interval %s to %s)", lo, hi);
  }
  double T = r->iteration_time_s;
  fprintf(out, "  iteration       %s   throughput %.1f samples/s   %.1f TFLOP/s per GPU\n", a,
          T > 0 ? c->batch / T : 0,
          T > 0 ? (m->fwd_flops + m->bwd_flops) * c->batch / T / c->gpus / 1e12 : 0);
  if (r->samples_s) {
    const double *t = (const double *)r->samples_s->data;
    const int n = (int)r->samples_s->len;
    char lo[32], mid[32], hi[32];
    human_s(lo, sizeof lo, res_percentile(t, n, 5));
    human_s(mid, sizeof mid, res_percentile(t, n, 50));
    human_s(hi, sizeof hi, res_percentile(t, n, 95));
    fprintf(out, "  kernel spread   %s median of %d draws (90 %% of them %s to %s)\n", mid, n, lo,
            hi);
  }
  if (r->interval && r->interval_cases > 0)
    fprintf(out, "  interval        %s the model's error on %d validation cases of %s "
            "(leave-one-out coverage %d of %d)\n", r->samples_s ? "the draws times" : "times",
            r->interval_cases, r->interval_source, r->interval_loo_covered, r->interval_cases);
  else if (r->interval)
    fprintf(out, "  interval        the kernel draws alone: the kernel database has no validation "
            "cases, so the model's own error is not in it\n");
  human_s(a, sizeof a, T * (double)res_epoch_iterations(c, m));
  if (m->dataset_samples > 0) /* a trace from elsewhere names no dataset */
    fprintf(out, "  epoch           %s (%ld iterations of %ld samples)\n", a,
            (long)res_epoch_iterations(c, m), c->batch);
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
  char gathered[48] = "";
  if (r->mem.gathered > 0)
    g_snprintf(gathered, sizeof gathered, ", gathered %.2f", r->mem.gathered / 1e9);
  fprintf(out,
          "  memory per GPU  %.2f GB of %.2f GB (params %.2f, grads %.2f, optimizer %.2f, "
          "activations %.2f%s)%s\n",
          r->peak_mem_bytes / 1e9, r->gpu_mem_bytes / 1e9, r->mem.params / 1e9,
          r->mem.grads / 1e9, r->mem.optimizer / 1e9, r->mem.activations / 1e9, gathered,
          r->fits_in_memory ? "" : "  DOES NOT FIT");
  if (r->moe_routed_tokens > 0)
    fprintf(out,
            "  experts         routing %s: busiest expert %.2fx the mean, %.2f%% of token copies "
            "dropped by capacity\n",
            c->routing ? c->routing : "uniform", r->moe_max_over_mean,
            100.0 * r->moe_dropped_tokens / r->moe_routed_tokens);
  fprintf(out, "  kernels         %s: %d measured, %d derived, %d interpolated, %d estimated",
          r->kdb.name ? r->kdb.name : "", r->kdb.count[KDB_MEASURED], r->kdb.count[KDB_DERIVED],
          r->kdb.count[KDB_INTERPOLATED], r->kdb.count[KDB_ESTIMATED]);
  if (r->kdb.count[KDB_RECORDED]) fprintf(out, ", %d recorded", r->kdb.count[KDB_RECORDED]);
  /* the share of the kernel time, where more than one origin gave it */
  int origins = 0;
  for (int o = 0; o < KDB_N_ORIGINS; o++) origins += r->kdb.share[o] > 0;
  if (origins > 1) {
    fputs(" (time:", out);
    for (int o = 0, first = 1; o < KDB_N_ORIGINS; o++)
      if (r->kdb.share[o] > 0) {
        fprintf(out, "%s %.1f%% %s", first ? "" : ",", 100 * r->kdb.share[o],
                kdb_origin_name((kdb_origin)o));
        first = 0;
      }
    fputc(')', out);
  }
  fputc('\n', out);
  if (r->kdb.note) fprintf(out, "                  note: %s\n", r->kdb.note);
  if (r->degraded_links) {
    fprintf(out, "  degraded links  %u at part of their bandwidth:", r->degraded_links->len);
    for (guint i = 0; i < r->degraded_links->len && i < 8; i++)
      fprintf(out, " %s x%g", (const char *)r->degraded_links->pdata[i],
              g_array_index(r->degraded_factors, double, i));
    /* folding declines where the degraded links make ranks or channels unlike: say so */
    const gboolean sim = c->mode == CFG_MODE_SIM;
    const gboolean none = sim ? r->folded_channels == 1 && r->folded_rails == 1 : r->folded == 1;
    fprintf(out, "%s%s\n", r->degraded_links->len > 8 ? " ..." : "",
            !none ? "" : sim ? " (every channel and rail simulated)" : " (every rank evaluated)");
  }
  if (r->folded_rails > 1)
    fprintf(out, "  folded          data-parallel groups of GPU 0 simulated, standing for the "
            "node's %d rails (--no-folding runs every group)\n", r->folded_rails);
  if (r->folded_channels > 1)
    fprintf(out, "  folded          channel 0 of each all-reduce's %d simulated, standing for all "
            "(--no-folding runs every channel)\n", r->folded_channels);
}
