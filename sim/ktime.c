/* ktime.c — kernel durations for the executors (see ktime.h). */
#include "ktime.h"

#include "dl_common.h"

double kt_kernel_s(const kt_source *k, const pl_op *op, kdb_origin *origin) {
  return kdb_kernel_s(k->db, k->gpu, k->model, op, k->precision, origin);
}

double *kt_layer_times(const kt_source *k, const cfg_run *c) {
  const wl_model *m = k->model;
  double *t = g_new0(double, m->n_layers);
  const double dt = gs_precision_bytes(k->precision);
  const double mbs = (double)c->batch / c->dp / c->microbatches;
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    pl_op op = {0};
    op.kind = PL_KERNEL;
    op.gemm_like = l->kind == WL_CONV2D || l->kind == WL_LINEAR || l->kind == WL_ATTENTION ||
                   l->kind == WL_MOE;
    op.layer = i;
    op.samples = (int64_t)mbs;
    op.split = 1;
    double io = ((double)l->in.c * l->in.h * l->in.w + (double)l->out_elems) * mbs * dt +
                (double)l->params * dt;
    g_snprintf(op.kname, sizeof op.kname, "%s.fwd", wl_layer_kind_name(l->kind));
    op.flops = l->fwd_flops * mbs;
    op.mem_bytes = io;
    t[i] = kt_kernel_s(k, &op, NULL);
    g_snprintf(op.kname, sizeof op.kname, "%s.bwd", wl_layer_kind_name(l->kind));
    op.flops = l->bwd_flops * mbs;
    op.mem_bytes = 2 * io;
    t[i] += kt_kernel_s(k, &op, NULL);
  }
  return t;
}

gboolean kt_open_db(const char *kernels, const char *gpu_model, kdb **db, GError **err) {
  *db = NULL;
  if (kernels) {
    *db = kdb_load(kernels, err);
    return *db != NULL;
  }
  if (!gpu_model || !*gpu_model) return TRUE;
  char *file = g_strconcat(gpu_model, ".json", NULL);
  char *path = g_build_filename(dl_datadir(), "kernels", "db", file, NULL);
  gboolean ok = TRUE;
  if (g_file_test(path, G_FILE_TEST_IS_REGULAR)) ok = (*db = kdb_load(path, err)) != NULL;
  g_free(path);
  g_free(file);
  return ok;
}
