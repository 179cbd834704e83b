/* context.c — opening a run (see context.h). */
#include "exec/context.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "core/dl_common.h"

static gboolean platform_gpu(run_ctx *x, GError **err) {
  const plat_host *h = plat_host_at(x->platform, 0);
  x->gpu = h ? gpu_find(h->gpu_model) : NULL;
  if (!x->gpu) {
    char *known = gpu_known_names();
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "%s: host property gpu_model '%s' has no spec sheet (known: %s)",
                plat_path(x->platform), h ? h->gpu_model : "", known);
    g_free(known);
    return FALSE;
  }
  x->gpu_mem_bytes = h->gpu_mem_bytes > 0 ? h->gpu_mem_bytes : x->gpu->mem_bytes;
  return TRUE;
}

/* A named cluster design (a preset) asked for more GPUs than its file has grows to them, with the
 * same nodes and network; a platform file stays what it is. */
static gboolean grow_preset(run_ctx *x, GError **err) {
  cfg_run *c = &x->cfg;
  plat_gen_params gp;
  if (c->gpus <= plat_n_hosts(x->platform) || strchr(c->platform, '/') ||
      strchr(c->platform, ':') || !plat_gen_preset(c->platform, &gp, NULL))
    return TRUE;
  const int per = plat_gpus_per_node(x->platform);
  char *scaled = g_strdup_printf("%s:%d", c->platform, (c->gpus + per - 1) / per);
  x->note = g_strdup_printf("%s has %d GPUs; simulating %d on %s (same nodes and network, more "
                            "of them)", c->platform, plat_n_hosts(x->platform), c->gpus, scaled);
  plat_free(x->platform);
  x->platform = plat_load(scaled, err);
  g_free(c->platform);
  c->platform = scaled;
  return x->platform != NULL;
}

/* x->kernels: the database's name, file, device and provenance, or the roofline's spec sheet,
 * and a note when the times are not measurements of this GPU. */
static void describe_kernels(run_ctx *x) {
  res_kdb *k = &x->kernels;
  if (!x->db) {
    k->name = g_strdup_printf("roofline:%s", x->gpu->name);
    k->file = g_strdup("");
    k->device = g_strdup(x->gpu->name);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "spec", x->gpu->source);
    cJSON_AddNumberToObject(p, "eff_compute", GPU_EFF_COMPUTE);
    cJSON_AddNumberToObject(p, "eff_memory", GPU_EFF_MEMORY);
    cJSON_AddNumberToObject(p, "launch_s", GPU_LAUNCH_S);
    char *t = cJSON_PrintUnformatted(p);
    k->provenance = g_strdup(t);
    cJSON_free(t);
    cJSON_Delete(p);
    return;
  }
  const char *path = kdb_path(x->db) ? kdb_path(x->db) : "", *dir = dl_datadir();
  gsize n = strlen(dir);
  gboolean inside = strncmp(path, dir, n) == 0 && path[n] == '/';
  k->name = g_strdup(kdb_name(x->db));
  k->file = g_strdup(inside ? path + n + 1 : path);
  k->device = g_strdup(kdb_device(x->db));
  k->provenance = kdb_provenance_json(x->db);
  GString *note = g_string_new(NULL);
  if (g_ascii_strcasecmp(k->device, x->gpu->name) != 0)
    g_string_append_printf(note, "times for %s, used for %s (--kernels-any-device)",
                           k->device, x->gpu->name);
  if (kdb_is_derived(x->db)) {
    const char *from = kdb_prov_str(x->db, "derived_from");
    g_string_append_printf(note, "%stimes derived from %s by spec-sheet ratios, not measured on "
                           "%s", note->len ? "; " : "", from ? from : "another device's",
                           k->device);
  }
  k->note = note->len ? g_string_free(note, FALSE) : (g_string_free(note, TRUE), NULL);
}

/* Everything after the configuration is settled. */
static gboolean open_rest(run_ctx *x, gboolean grow, GError **err) {
  if (!(x->platform = plat_load(x->cfg.platform, err))) return FALSE;
  if (grow && !grow_preset(x, err)) return FALSE;
  if (!platform_gpu(x, err)) return FALSE;
  if (!ktime_open_db(x->cfg.kernels, x->gpu->name, x->cfg.kernels_any_device, &x->db, err))
    return FALSE;
  x->kt = (ktime_source){x->gpu, x->cfg.precision, x->model, x->db};
  x->layer_t = ktime_layer_times(&x->kt, &x->cfg);
  describe_kernels(x);
  return TRUE;
}

static void take(run_ctx *x, cfg_run *c) {
  memset(x, 0, sizeof *x);
  x->cfg = *c;
  cfg_init(c);
}

gboolean run_ctx_open(run_ctx *x, cfg_run *c, GError **err) {
  take(x, c);
  if (!(x->model = wl_load(x->cfg.workload, err))) return FALSE;
  if (!cfg_resolve(&x->cfg, (long)x->model->default_batch, err)) return FALSE;
  cfg_resolve_style(&x->cfg, wl_has_tp_roles(x->model));
  return open_rest(x, TRUE, err);
}

gboolean run_ctx_open_resolved(run_ctx *x, cfg_run *c, GError **err) {
  take(x, c);
  if (!(x->model = wl_load(x->cfg.workload, err))) return FALSE;
  return open_rest(x, FALSE, err);
}

void run_ctx_release(run_ctx *x) {
  g_free(x->layer_t);
  kdb_free(x->db);
  plat_free(x->platform);
  wl_free(x->model);
  res_kdb_release(&x->kernels);
  g_free(x->note);
  cfg_release(&x->cfg);
  memset(x, 0, sizeof *x);
}
