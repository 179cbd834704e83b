/* memory.c — what a rank holds on its GPU: weights, gradients, optimizer state and the
 * activations stashed for backward.
 *
 * Parameters: the layers of the stage divided as the split table says (an MoE layer: its router,
 * its shared experts and E/ep routed experts), plus a copy of a tied layer's weights that sits
 * on another stage. Optimizer state: momentum (SGD) or two moments (Adam) in fp32, plus an fp32
 * master copy of the weights in mixed precision (Micikevicius et al. 2018; ZeRO's 16 bytes/param
 * for Adam). Activations: what the stage keeps per micro-batch times the micro-batches in
 * flight; with recomputation, each block's input per micro-batch in flight plus the largest
 * block's own stash; with selective recomputation everything but attention's probabilities;
 * a sequence split (sequence or context parallelism) divides a layer's stash. With model chunks
 * (interleaved 1F1B) the chunks in flight differ: the peak over the schedule of their sum.
 */
#include "core/gpuspec.h"
#include "plan/build.h"

/* What layers [l0, l1) stash for backward per micro-batch: everything (*per_mb); under
 * recomputation each block's input (*keep) and, for the block being recomputed, its own stash
 * (the largest block's, *worst). */
static void stash(const wl_model *m, const cfg_run *c, const plan_shard *role, int l0, int l1,
                  double *per_mb, double *keep, double *worst) {
  const double dt = gpu_precision_bytes(c->precision);
  double cur = 0;
  int blk = -2;
  *per_mb = *keep = *worst = 0;
  for (int i = l0; i < l1; i++) {
    const wl_layer *l = &m->layers[i];
    const plan_shard *x = &role[i];
    /* selective recomputation keeps attention's QKV, not its probabilities */
    const double bytes = plan_selective_attention(c, l)
                             ? (double)plan_in_elems(l) * dt
                                   : (double)l->saved_elems * dt + (double)l->mask_bytes;
    double saved = bytes * x->samples * (x->domain ? x->row_share : 1.0) / x->seq_parts;
    *per_mb += x->replicated_stash ? saved : saved / x->split;
    if (l->block < 0 || l->block != blk) { /* recomputation keeps each block's input */
      *keep += (double)plan_in_elems(l) * x->samples * dt / x->seq_parts;
      cur = 0;
      blk = l->block < 0 ? -2 - i : l->block;
    }
    cur += x->replicated_stash ? saved : saved / x->split;
    if (cur > *worst) *worst = cur;
  }
}

void plan_memory_fill(plan_rank *p, const wl_model *m, const cfg_run *c, const plan_shard *role,
                      const plan_step *steps) {
  int64_t local_params = 0;
  for (int v = 0; v < p->n_chunks; v++) {
    int l0, l1;
    plan_chunk_layers(p, v, &l0, &l1);
    for (int i = l0; i < l1; i++) {
      const wl_layer *l = &m->layers[i];
      if (l->kind == WL_MOE) /* the router, and E/ep experts */
        local_params += wl_moe_router_params(l) + wl_moe_shared_params(l) +
                        l->experts / c->ep * wl_moe_expert_params(l);
      else
        local_params += l->params / role[i].split;
    }
  }
  for (int i = 0; i < m->n_layers && c->pp > 1; i++) { /* a copy of tied weights from elsewhere */
    int t = m->layers[i].tied_to;
    if (t >= 0 && plan_holds_layer(p, i) && !plan_holds_layer(p, t))
      local_params += m->layers[t].params / role[t].split;
  }
  const double dt = gpu_precision_bytes(c->precision);
  p->local_params = local_params;
  p->mem.params = (double)local_params * dt;
  p->mem.grads = (double)local_params * plan_grad_bytes(c);
  p->mem.optimizer = (double)local_params * plan_optimizer_bytes(m, c);
  if (p->n_chunks == 1) {
    double per_mb, keep, worst;
    stash(m, c, role, p->first_layer, p->end_layer, &per_mb, &keep, &worst);
    p->mem.activations = c->recompute ? keep * p->max_stash + worst : per_mb * p->max_stash;
    return;
  }
  /* model chunks: the peak over the schedule of what the chunks in flight keep */
  const int V = p->n_chunks, nsteps = 2 * c->microbatches * V;
  double *per_mb = g_new(double, V), *keep = g_new(double, V), worst = 0, cur = 0, peak = 0;
  for (int v = 0; v < V; v++) {
    int l0, l1;
    double w;
    plan_chunk_layers(p, v, &l0, &l1);
    stash(m, c, role, l0, l1, &per_mb[v], &keep[v], &w);
    worst = MAX(worst, w);
  }
  for (int k = 0; k < nsteps; k++) {
    const int v = steps[k].chunk;
    cur += (steps[k].fwd ? 1 : -1) * (c->recompute ? keep[v] : per_mb[v]);
    peak = MAX(peak, cur);
  }
  p->mem.activations = peak + (c->recompute ? worst : 0);
  g_free(per_mb);
  g_free(keep);
}
