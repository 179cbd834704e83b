/* ktime.c — kernel durations for the executors (see ktime.h). */
#include "kdb/ktime.h"

#include "core/dl_common.h"

#include <string.h>

kdb_kernel ktime_describe(const wl_model *m, const plan_op *op) {
  kdb_kernel k = {op->kname, op->layer >= 0 ? &m->layers[op->layer] : NULL, op->samples,
                  op->split, op->params, op->gemm_like, op->flops, op->mem_bytes, op->seq};
  return k;
}

/* ktime_describe with the layer's twin in its place (the same answers, memoised once). */
static kdb_kernel describe(const ktime_source *k, const plan_op *op) {
  kdb_kernel d = ktime_describe(k->model, op);
  if (k->twin && op->layer >= 0) d.layer = &k->model->layers[k->twin[op->layer]];
  return d;
}

double ktime_kernel_s(const ktime_source *k, const plan_op *op, kdb_origin *origin) {
  if (op->kdb_key || op->fixed_s >= 0) { /* an op read from an execution trace */
    const kdb_entry *e = op->kdb_key ? kdb_find(k->db, op->kdb_key) : NULL;
    if (e) {
      if (origin) *origin = e->derived ? KDB_DERIVED : KDB_MEASURED;
      return e->median_s;
    }
    if (op->fixed_s >= 0) {
      if (origin) *origin = KDB_RECORDED;
      return op->fixed_s;
    }
  }
  kdb_kernel d = describe(k, op);
  double t = kdb_kernel_s(k->db, k->gpu, &d, k->precision, origin);
  double l2, cold, warm;
  if (k->l2 && op->warm_bytes > 0 && kdb_l2(k->db, &l2, &cold, &warm) &&
      op->warm_bytes + op->out_bytes <= l2) {
    const double floor_s = op->warm_bytes / warm;
    const double w = t - op->warm_bytes * (1.0 / cold - 1.0 / warm);
    t = w > floor_s ? w : (floor_s < t ? floor_s : t);
  }
  return t;
}

double ktime_kernel_cv(const ktime_source *k, const plan_op *op) {
  if (op->kdb_key || op->fixed_s >= 0) { /* an op read from an execution trace */
    const kdb_entry *e = op->kdb_key ? kdb_find(k->db, op->kdb_key) : NULL;
    if (e) return e->median_s > 0 && e->stddev_s > 0 ? e->stddev_s / e->median_s : 0;
    if (op->fixed_s >= 0) return 0;
  }
  kdb_kernel d = describe(k, op);
  double cv = 0;
  kdb_kernel_spread_s(k->db, k->gpu, &d, k->precision, NULL, &cv);
  return cv;
}

double ktime_host_s(const ktime_source *k, const plan_op *op) {
  if (!k->host || !kdb_has_host(k->db) || op->kind != PLAN_KERNEL) return 0;
  /* autocast's casts are launched inside the layer's own dispatch, which the table measured */
  if (g_str_has_prefix(op->kname, "cast.")) return 0;
  double tensors = 0;
  if (op->params > 0 && k->model->params > 0 && kdb_host_per_tensor(op->kname)) {
    for (int i = 0; i < k->model->n_layers; i++) {
      const wl_layer *l = &k->model->layers[i];
      if (l->params <= 0) continue;
      tensors += 1 + (l->bias || l->kind == WL_BATCHNORM || l->kind == WL_LAYERNORM);
    }
    tensors *= (double)op->params / (double)k->model->params;
  }
  return kdb_host_s(k->db, op->kname, k->precision, tensors);
}

GHashTable *ktime_layer_memo_new(void) {
  return g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
}

double *ktime_layer_times(const ktime_source *k, const cfg_run *c) {
  const wl_model *m = k->model;
  const double mbs = (double)c->batch / c->dp / c->microbatches;
  gint64 key;
  memcpy(&key, &mbs, sizeof key);
  const double *kept = k->layer_memo ? g_hash_table_lookup(k->layer_memo, &key) : NULL;
  if (kept) return g_memdup2(kept, sizeof(double) * (size_t)m->n_layers);
  double *t = g_new0(double, m->n_layers);
  const double dt = gpu_precision_bytes(k->precision);
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    char kn[40];
    kdb_kernel d = {kn, l, (int64_t)mbs, 1, 0, wl_kind_gemm_like(l->kind), 0, 0, 0};
    double io = ((double)l->in.c * l->in.h * l->in.w + (double)l->out_elems) * mbs * dt +
                (double)l->params * dt;
    wl_kernel_name(kn, sizeof kn, l->kind, "fwd");
    d.flops = l->fwd_flops * mbs;
    d.bytes = io;
    t[i] = kdb_kernel_s(k->db, k->gpu, &d, k->precision, NULL);
    wl_kernel_name(kn, sizeof kn, l->kind, "bwd");
    d.flops = l->bwd_flops * mbs;
    d.bytes = 2 * io;
    t[i] += kdb_kernel_s(k->db, k->gpu, &d, k->precision, NULL);
  }
  if (k->layer_memo)
    g_hash_table_insert(k->layer_memo, g_memdup2(&key, sizeof key),
                        g_memdup2(t, sizeof(double) * (size_t)m->n_layers));
  return t;
}

gboolean ktime_open_db(const char *kernels, const char *gpu_model, gboolean any_device, kdb **db,
                       GError **err) {
  *db = NULL;
  if (kernels && strcmp(kernels, "roofline") == 0) return TRUE; /* the spec sheet alone */
  if (kernels) {
    if (!(*db = kdb_load(kernels, err))) return FALSE;
  } else if (gpu_model && *gpu_model) {
    char *file = g_strconcat(gpu_model, ".json", NULL);
    char *path = g_build_filename(dl_datadir(), "kernels", "db", file, NULL);
    gboolean ok = !g_file_test(path, G_FILE_TEST_IS_REGULAR) || (*db = kdb_load(path, err));
    g_free(path);
    g_free(file);
    if (!ok) return FALSE;
  }
  if (!*db || !gpu_model || any_device || g_ascii_strcasecmp(kdb_device(*db), gpu_model) == 0)
    return TRUE;
  if (kernels)
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--kernels %s: its times are for %s, but the "
                "platform's GPUs are %s (add --kernels-any-device to use them anyway)", kernels,
                kdb_device(*db), gpu_model);
  else
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: holds times for %s, not for %s as its name "
                "says (name a database with --kernels)", kdb_path(*db), kdb_device(*db),
                gpu_model);
  kdb_free(*db);
  *db = NULL;
  return FALSE;
}
