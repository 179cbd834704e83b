/* ktime.c — kernel durations for the executors (see ktime.h). */
#include "ktime.h"

double kt_kernel_s(const kt_source *k, const pl_op *op, kt_origin *origin) {
  if (origin) *origin = KT_ESTIMATED;
  return gs_roofline_s(k->gpu, k->precision, op->gemm_like, op->flops, op->mem_bytes);
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
    op.flops = l->fwd_flops * mbs;
    op.mem_bytes = io;
    t[i] = kt_kernel_s(k, &op, NULL);
    op.flops = l->bwd_flops * mbs;
    op.mem_bytes = 2 * io;
    t[i] += kt_kernel_s(k, &op, NULL);
  }
  return t;
}
