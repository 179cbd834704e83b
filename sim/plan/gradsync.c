/* gradsync.c — gradient synchronisation ops: DDP buckets, per-layer all-reduces of the grid and
 * domain splits, MoE expert gradients, and tied weights across pipeline stages.
 *
 * Data parallel: each weighted layer's gradient joins the current bucket during the stage's last
 * backward (layers in reverse order); a bucket that reaches its cap is all-reduced over dp on
 * the communication stream while backward continues (PyTorch DDP: the first bucket is capped at
 * 1 MiB, the others at --bucket-mb). Gholami's grid and domain parallelism all-reduce each
 * layer's gradient on its own (over dp, or over all P where the weights are replicated on every
 * rank). An MoE layer's experts are summed among the replicas of the same experts, its router
 * with the dense layers. Every gradient collective names its layers (plan_bucket). With ZeRO
 * (fsdp.c) a bucket is reduce-scattered instead: the all-reduce's first half, whose second half
 * is the gather of the updated parameters.
 */
#include "core/gpuspec.h"
#include "plan/build.h"

#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0) /* torch.distributed _DEFAULT_FIRST_BUCKET_BYTES */

gboolean plan_layer_has_grads(const wl_layer *l) { return l->weighted && l->params > 0; }

int plan_bucket_layers(const wl_model *m, const plan_op *op, int *layers) {
  int n = 0;
  for (int i = op->bucket.end_layer - 1; i >= op->bucket.first_layer; i--)
    if ((op->purpose == PLAN_WHY_TIED || plan_layer_has_grads(&m->layers[i])) &&
        (op->part != PLAN_PART_ROOT || m->layers[i].block < 0))
      layers[n++] = i;
  return n;
}

int plan_grad_bytes(const cfg_run *c) {
  /* --grad-reduce-dtype, resolved (config.h); the compute precision before it was resolved */
  return gpu_precision_bytes(c->grad_reduce >= 0 ? (gpu_precision)c->grad_reduce : c->precision);
}

int plan_optimizer_bytes(const wl_model *m, const cfg_run *c) {
  const gboolean mixed = c->precision == GPU_FP16 || c->precision == GPU_BF16;
  return (m->optimizer == WL_OPT_ADAM ? 8 : 4) + (mixed ? 4 : 0);
}

/* DDP buckets whole groups of layers: not where the planner all-reduces per layer (Gholami's
 * grid, whose gradients go over dp or all P layer by layer). */
static gboolean bucketed(const cfg_run *c) {
  return !(c->tp > 1 && c->tp_style == CFG_TP_GHOLAMI) && c->grid_pr == 0;
}

void plan_grad_begin(plan_grad_state *g, int end_layer) {
  g->bytes = 0;
  g->cap = DDP_FIRST_BUCKET_BYTES;
  g->end = end_layer;
}

/* Layer i's `bytes` join the open bucket; TRUE when that fills it: the bucket [i, g->end) of
 * g->bytes closes (its bounds in *closed, its bytes left in g->bytes for the caller to take) and
 * the next one, capped at --bucket-mb, opens below it. */
static gboolean bucket_add(plan_grad_state *g, const cfg_run *c, int i, double bytes,
                           plan_bucket *closed) {
  g->bytes += bytes;
  if (g->bytes < g->cap) return FALSE;
  *closed = (plan_bucket){i, g->end};
  g->end = i;
  g->cap = c->bucket_bytes;
  return TRUE;
}

/* The gradient bytes of layer l that go into the dense buckets (an MoE layer's router's and
 * shared experts'). */
static double dense_grad_bytes(const cfg_run *c, const wl_layer *l, const plan_shard *x) {
  const double gb = plan_grad_bytes(c);
  if (l->kind == WL_MOE)
    return (double)(wl_moe_router_params(l) + wl_moe_shared_params(l)) * gb;
  return (double)l->params / x->split * gb;
}

/* The collective of a dense bucket: an all-reduce, or with ZeRO its first half (each rank keeps
 * the sum of its shard). */
static coll_op bucket_coll(const cfg_run *c) {
  return c->zero > 0 ? COLL_REDUCESCATTER : COLL_ALLREDUCE;
}

plan_bucket *plan_grad_buckets(const wl_model *m, const cfg_run *c, const plan_shard *role,
                               int l0, int l1, int *n) {
  plan_bucket *out = g_new(plan_bucket, l1 - l0 + 1);
  plan_grad_state g;
  plan_grad_begin(&g, l1);
  *n = 0;
  for (int i = l1 - 1; i >= l0 && bucketed(c); i--) {
    const wl_layer *l = &m->layers[i];
    if (!plan_layer_has_grads(l)) continue;
    if (bucket_add(&g, c, i, dense_grad_bytes(c, l, &role[i]), &out[*n])) {
      (*n)++;
      g.bytes = 0;
    }
  }
  if (g.bytes > 0) out[(*n)++] = (plan_bucket){l0, g.end};
  return out;
}

void plan_grad_layer(plan_builder *b, plan_grad_state *g, const cfg_run *c, const wl_layer *l,
                     int i, const plan_shard *x, int *pending) {
  if (!plan_layer_has_grads(l)) return;
  const double gb = plan_grad_bytes(c);
  if (l->kind == WL_MOE) {
    /* experts: among the replicas of the same experts; the router joins the bucket below */
    double expert = (double)l->experts / c->ep * (double)wl_moe_expert_params(l) * gb;
    if (c->dp / c->ep > 1) {
      /* with ep = 1 every rank holds every expert: the replicas are the dp group */
      plan_op *op =
          plan_b_coll(b, PLAN_PH_BWD, i, COLL_ALLREDUCE, c->ep > 1 ? PLAN_GRP_EDP : PLAN_GRP_DP,
                      PLAN_WHY_EXPERT_GRAD, expert, FALSE, pending);
      op->bucket = (plan_bucket){i, i + 1};
    }
  }
  const double gbytes = dense_grad_bytes(c, l, x);
  if (x->grad_degree <= 1) return;
  if (!bucketed(c)) {
    plan_op *op = plan_b_coll(b, PLAN_PH_BWD, i, COLL_ALLREDUCE, x->grad_group, PLAN_WHY_GRAD,
                              gbytes, FALSE, pending);
    op->bucket = (plan_bucket){i, i + 1};
    return;
  }
  plan_bucket closed;
  if (bucket_add(g, c, i, gbytes, &closed)) {
    plan_b_coll(b, PLAN_PH_BWD, i, bucket_coll(c), x->grad_group, PLAN_WHY_GRAD, g->bytes, FALSE,
                pending)->bucket = closed;
    g->bytes = 0;
  }
}

void plan_grad_flush(plan_builder *b, plan_grad_state *g, const cfg_run *c, int first_layer,
                   int *pending) {
  if (!bucketed(c) || g->bytes <= 0) return;
  plan_op *op = plan_b_coll(b, PLAN_PH_BWD, -1, bucket_coll(c), PLAN_GRP_DP, PLAN_WHY_GRAD,
                            g->bytes, FALSE, pending);
  op->bucket = (plan_bucket){first_layer, g->end};
}

void plan_grad_tied(plan_builder *b, const plan_rank *p, const wl_model *m, const cfg_run *c,
                    const plan_shard *role, int *pending) {
  const double gb = plan_grad_bytes(c);
  for (int i = 0; i < m->n_layers; i++) {
    int t = m->layers[i].tied_to;
    if (t < 0 || c->pp == 1) continue;
    gboolean here_i = plan_holds_layer(p, i), here_t = plan_holds_layer(p, t);
    if (here_i == here_t) continue; /* both here, or neither */
    double bytes = (double)m->layers[t].params / role[t].split * gb;
    /* the copy is in no bucket: its data-parallel sum first (Megatron does the same) */
    if (here_i && plan_dpc(c) > 1)
      plan_b_coll(b, PLAN_PH_BWD, i, COLL_ALLREDUCE, PLAN_GRP_DP, PLAN_WHY_TIED, bytes, FALSE,
                  pending)
          ->bucket = (plan_bucket){i, i + 1};
    plan_b_coll(b, PLAN_PH_BWD, i, COLL_ALLREDUCE, PLAN_GRP_EMBED, PLAN_WHY_TIED, bytes, FALSE,
                pending)
        ->bucket = (plan_bucket){i, i + 1};
  }
}
