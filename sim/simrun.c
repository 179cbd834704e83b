/* simrun.c — launching the SMPI executor and reading its exchange file (see simrun.h). */
#include "simrun.h"

#include <cjson/cJSON.h>
#include <glib/gstdio.h>
#include <string.h>

#include "dl_common.h"
#include "launch.h"
#include "plan.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *intern_algo(const char *name) {
  /* result rows borrow static strings: keep one copy per algorithm name */
  return g_intern_string(name ? name : "?");
}

static gboolean read_exchange(const char *path, const cfg_run *cfg, res_result *r, GError **err) {
  gsize len;
  char *txt = dl_read_file(path, &len, err);
  if (!txt) return FALSE;
  cJSON *root = cJSON_Parse(txt);
  g_free(txt);
  if (!root) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "%s: unreadable simulation result", path);
    return FALSE;
  }
  r->iteration_time_s = num(root, "iteration_time_s");
  r->compute_s = num(root, "compute_s");
  r->comm_s = num(root, "comm_s");
  r->overlapped_comm_s = num(root, "overlapped_comm_s");
  r->bubble_s = num(root, "bubble_s");
  r->exposed_comm_s = r->comm_s - r->overlapped_comm_s;
  double rest = r->iteration_time_s - r->compute_s - r->exposed_comm_s;
  if (rest < 0) rest = 0; /* rounding */
  /* with a pipeline, the compute stream's waits for other stages are the bubble */
  r->bubble_s = cfg->pp > 1 ? rest : 0;
  r->idle_s = cfg->pp > 1 ? 0 : rest;
  r->slowest_rank = (int)num(root, "slowest_rank");
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(root, "phase_s");
  for (int i = 0; i < PL_N_PHASES; i++) r->phase_compute_s[i] = num(ph, pl_phase_name((pl_phase)i));
  g_array_set_size(r->colls, 0);
  /* memory per rank stays the planner's (kept from the closed form's rows, in rank order) */
  GArray *mem_rows = r->rank_rows;
  r->rank_rows = g_array_new(FALSE, FALSE, sizeof(res_rank));
  r->comm_bytes_per_gpu = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "colls")) {
    res_coll c;
    memset(&c, 0, sizeof c);
    int op = coll_op_parse(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "op")));
    c.op = op < 0 ? COLL_ALLREDUCE : (coll_op)op;
    const char *g = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "group"));
    const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "purpose"));
    for (int i = 0; i < PL_N_GROUPS; i++)
      if (g && strcmp(g, pl_group_name((pl_group)i)) == 0) c.group = (pl_group)i;
    for (int i = 0; i < PL_N_PURPOSES; i++)
      if (p && strcmp(p, pl_purpose_name((pl_purpose)i)) == 0) c.purpose = (pl_purpose)i;
    c.algo = intern_algo(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "algo")));
    c.calls = (int)(num(x, "calls") + 0.5);
    c.bytes = num(x, "bytes");
    c.wire_bytes = num(x, "wire_bytes");
    c.time_s = num(x, "time_s");
    r->comm_bytes_per_gpu += c.wire_bytes;
    g_array_append_val(r->colls, c);
  }
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "ranks")) {
    res_rank rr = {(int)num(x, "rank"), num(x, "iteration_time_s"), num(x, "compute_s"),
                   num(x, "comm_s"), 0, 0};
    if (rr.rank >= 0 && (guint)rr.rank < mem_rows->len) {
      const res_rank *mr = &g_array_index(mem_rows, res_rank, rr.rank);
      rr.peak_mem_bytes = mr->peak_mem_bytes;
      rr.activation_bytes = mr->activation_bytes;
    }
    g_array_append_val(r->rank_rows, rr);
  }
  g_array_free(mem_rows, TRUE);
  cJSON_Delete(root);
  return TRUE;
}

gboolean sr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err) {
  (void)m;
  gboolean ok = FALSE;
  char *dir = g_dir_make_tmp("dlsim-XXXXXX", NULL);
  if (!dir) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "cannot create a temporary directory");
    return FALSE;
  }
  char *result = g_build_filename(dir, "result.json", NULL);
  char **opts = cfg_to_args(c);
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, "run");
  g_ptr_array_add(argv, result);
  g_ptr_array_add(argv, c->trace ? c->trace : "-");
  for (char **o = opts; *o; o++) g_ptr_array_add(argv, *o);
  g_ptr_array_add(argv, NULL);
  const char **hosts = g_new(const char *, c->gpus);
  for (int i = 0; i < c->gpus; i++) hosts[i] = plat_host_at(pl, i)->id;
  gint64 t0 = g_get_monotonic_time();
  if (launch_smpi(plat_path(pl), c->gpus, hosts, (const char *const *)argv->pdata, NULL, NULL, err) &&
      read_exchange(result, c, r, err)) {
    r->wall_s = (g_get_monotonic_time() - t0) / 1e6;
    r->ranks = c->gpus;
    ok = TRUE;
  }
  g_free(hosts);
  g_ptr_array_free(argv, TRUE);
  g_strfreev(opts);
  g_unlink(result);
  g_rmdir(dir);
  g_free(result);
  g_free(dir);
  return ok;
}
