/* fsdp.c — sharded data parallelism as a strategy of the split table: ZeRO stages 1–3
 * (Rajbhandari et al. 2020) and PyTorch FSDP's FULL_SHARD, SHARD_GRAD_OP and HYBRID_SHARD
 * (Zhao et al. 2023). Layers are split as the other strategies say; what changes is who holds
 * the model states and the collectives that move them.
 *
 * With N = plan_shard_degree ranks sharing one copy (dp, or the shard group of --fsdp hybrid):
 *   --zero 1   optimizer state sharded: each bucket's gradients are reduce-scattered over dp in
 *              the last backward (the all-reduce's first half), the step updates 1/N of the
 *              parameters, and each bucket's updated parameters are all-gathered before the next
 *              forward (the second half), as Megatron's distributed optimizer does;
 *   --zero 2   also gradients: the buckets are reduce-scattered in every micro-batch's backward,
 *              so only the shard is accumulated;
 *   --zero 3, --fsdp full, --fsdp hybrid
 *              also parameters, gathered unit by unit: before a unit's forward and again before
 *              its backward; each unit's gradients are reduce-scattered once its backward is done
 *              (hybrid: then all-reduced over the replicas of the shard, PLAN_GRP_REPL);
 *   --fsdp grad-op
 *              gathered before each forward and kept through backward (no second gather).
 * A unit is a residual block (FSDP wraps each transformer block); the layers outside every block
 * form the root unit, gathered at the start of each forward and kept through backward, as
 * FSDP2's root is (--zero 3 gathers it again for backward, as DeepSpeed gathers every module it
 * uses). A model without blocks is cut into units of --bucket-mb of parameters in layer order,
 * as DeepSpeed's buckets. The next unit's gather is issued on the communication stream when the
 * previous unit's compute is done, so at most two block units are gathered at a time (the one
 * computing and the one prefetched: FSDP's limit_all_gathers); a unit's first kernel waits for
 * its gather.
 *
 * Folding stays exact: every member of a shard group runs the same op list, and the groups are
 * made of data-parallel ranks, which the closed form and the simulation already fold; the
 * simulation folds the channels of ZeRO's and FSDP's collectives over all of dp, but not those of
 * --fsdp hybrid's groups of part of it (exec.c sim_fold_channels, which says so in the result).
 */
#include <string.h>

#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/build.h"
#include "plan/strategy.h"

static gboolean sharded_applies(const cfg_run *c) {
  return c->zero > 0 || c->fsdp != CFG_FSDP_NONE;
}

static gboolean sharded_check(const wl_model *m, const cfg_run *c, GError **err) {
  char opt[32];
  cfg_sharding_option(c, opt, sizeof opt);
  if (c->grid_pr > 0 || c->grid_auto || (c->tp > 1 && c->tp_style == CFG_TP_GHOLAMI) ||
      c->domain_conv) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: shards data-parallel states; Gholami's grid and "
                "domain splits reduce gradients layer by layer; use --tp with --tp-style megatron, "
                "or leave out %s", opt, opt);
    return FALSE;
  }
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == WL_MOE) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: workload %s: layer '%s' is a mixture of "
                  "experts, whose expert gradients are reduced apart; sharding them is not "
                  "modelled, leave out %s", opt, m->name, m->layers[i].name, opt);
      return FALSE;
    }
  if (c->pp > 1 && (c->zero >= 2 || c->fsdp != CFG_FSDP_NONE)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s --pp %d: sharded gradients and parameters are not "
                "combined with a pipeline (DeepSpeed refuses ZeRO-2 and 3 with its pipeline "
                "engine); use --zero 1 (the distributed optimizer) with --pp", opt, c->pp);
    return FALSE;
  }
  return TRUE;
}

/* The layers keep their splits; gradients go to the shard group. */
static gboolean sharded_roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i,
                              plan_shard *out, GError **err) {
  (void)tp_i, (void)ep_i, (void)err;
  for (int i = 0; i < m->n_layers; i++) {
    out[i].grad_group = plan_shard_group(c);
    out[i].grad_degree = plan_shard_degree(c);
  }
  return TRUE;
}

const plan_strategy plan_sharded = {"sharded", sharded_applies, sharded_check, sharded_roles};

gboolean plan_sharded_units(const cfg_run *c) {
  return c->zero == 3 || c->fsdp != CFG_FSDP_NONE;
}

/* ---- units ----------------------------------------------------------------------------------- */

plan_units *plan_units_new(const wl_model *m, const cfg_run *c, const plan_shard *role, int l0,
                           int l1) {
  plan_units *u = g_new0(plan_units, 1);
  const int L = l1 - l0;
  u->l0 = l0;
  u->l1 = l1;
  u->unit_of = g_new(int, L > 0 ? L : 1);
  u->unit = g_new0(plan_unit, L + 1);
  u->blocks = g_new(int, L + 1);
  u->root = -1;
  gboolean any_block = FALSE;
  for (int i = l0; i < l1; i++) any_block = any_block || m->layers[i].block >= 0;
  const double dt = gpu_precision_bytes(c->precision);
  double open = 0; /* parameter bytes of the open unit of a model without blocks */
  for (int i = l0; i < l1; i++) {
    const wl_layer *l = &m->layers[i];
    int k;
    if (any_block && l->block < 0) { /* the root: every layer outside the blocks */
      if (u->root < 0) {
        u->root = u->n++;
        u->unit[u->root].first = i;
        u->unit[u->root].block = -1;
      }
      k = u->root;
    } else {
      /* a new unit where the block changes, or (no blocks) once the open one has its bytes */
      const gboolean fresh = i == l0 || (any_block ? m->layers[i - 1].block != l->block
                                                   : open >= c->bucket_bytes);
      if (fresh) {
        u->unit[u->n].first = i;
        u->unit[u->n].block = u->n_blocks;
        u->blocks[u->n_blocks++] = u->n++;
        open = 0;
      }
      k = u->blocks[u->n_blocks - 1];
    }
    u->unit_of[i - l0] = k;
    u->unit[k].last = i;
    const double p = plan_layer_has_grads(l) ? (double)l->params / role[i].split : 0;
    u->unit[k].params += p;
    open += p * dt;
  }
  return u;
}

void plan_units_free(plan_units *u) {
  if (!u) return;
  g_free(u->unit_of);
  g_free(u->unit);
  g_free(u->blocks);
  g_free(u);
}

/* ---- the ops of a step ----------------------------------------------------------------------- */

/* Index of the op that records event `ev`, searched from the end (it is recent), -1 if none. */
static int op_recording(const plan_builder *b, int ev) {
  if (ev < 0) return -1;
  for (guint i = b->ops->len; i-- > 0;)
    if (g_array_index(b->ops, plan_op, i).record_event == ev) return (int)i;
  return -1;
}

/* Unit k's parameters gathered over the shard group, once the last compute op is done. */
static void gather(plan_builder *b, plan_units *u, const cfg_run *c, plan_phase ph, int k,
                   int *pending) {
  if (k < 0) return;
  u->unit[k].ag_event = -1;
  if (u->unit[k].params <= 0 || plan_shard_degree(c) < 2) return;
  /* not blocking: the unit's first kernel waits for it (wait_gather) */
  plan_op *op = plan_b_coll(b, ph, u->unit[k].first, COLL_ALLGATHER, plan_shard_group(c),
                            PLAN_WHY_PARAM_GATHER,
                            u->unit[k].params * gpu_precision_bytes(c->precision), FALSE, pending);
  op->bucket = (plan_bucket){u->unit[k].first, u->unit[k].last + 1};
  if (k == u->root) op->part = PLAN_PART_ROOT;
  u->unit[k].ag_event = op->record_event;
  u->unit[k].ag_op = (int)b->ops->len - 1;
}

/* Before the first kernel of unit k in this step: wait for its gather as well as for *pending
 * (the communication stream runs in order: the later of the two covers the other). */
static void wait_gather(plan_builder *b, plan_units *u, int k, int *pending) {
  if (u->unit[k].waited) return;
  u->unit[k].waited = TRUE;
  if (u->unit[k].ag_event < 0) return;
  if (*pending < 0 || op_recording(b, *pending) < u->unit[k].ag_op) *pending = u->unit[k].ag_event;
}

/* Unit k's gradients reduce-scattered over the shard group (and, hybrid, the shard all-reduced
 * over its replicas) once its backward kernels are done. */
static void reduce(plan_builder *b, const plan_units *u, const cfg_run *c, int k, int *pending) {
  const int N = plan_shard_degree(c);
  if (u->unit[k].params <= 0 || plan_dpc(c) < 2) return;
  const double bytes = u->unit[k].params * plan_grad_bytes(c);
  const plan_bucket bk = {u->unit[k].first, u->unit[k].last + 1};
  const plan_part part = k == u->root ? PLAN_PART_ROOT : PLAN_PART_WHOLE;
  if (N > 1) {
    plan_op *op = plan_b_coll(b, PLAN_PH_BWD, u->unit[k].first, COLL_REDUCESCATTER,
                              plan_shard_group(c), PLAN_WHY_GRAD, bytes, FALSE, pending);
    op->bucket = bk, op->part = part;
  }
  if (plan_dpc(c) / N > 1) {
    plan_op *op = plan_b_coll(b, PLAN_PH_BWD, u->unit[k].first, COLL_ALLREDUCE, PLAN_GRP_REPL,
                              PLAN_WHY_GRAD, bytes / N, FALSE, pending);
    op->bucket = bk, op->part = part;
  }
}

static void step_begin(plan_units *u) {
  for (int k = 0; k < u->n; k++) {
    u->unit[k].waited = FALSE;
    u->unit[k].ag_event = -1;
  }
}

void plan_units_fwd_begin(plan_builder *b, plan_units *u, const cfg_run *c, int *pending) {
  step_begin(u);
  gather(b, u, c, PLAN_PH_FWD, u->root, pending);
  for (int j = 0; j < 2 && j < u->n_blocks; j++) gather(b, u, c, PLAN_PH_FWD, u->blocks[j], pending);
}

void plan_units_fwd_layer(plan_builder *b, plan_units *u, const cfg_run *c, int i, int *pending) {
  const int k = u->unit_of[i - u->l0];
  const int j = u->unit[k].block;
  if (j >= 1 && u->unit[k].first == i && j + 1 < u->n_blocks) /* prefetch block j + 1 */
    gather(b, u, c, PLAN_PH_FWD, u->blocks[j + 1], pending);
  wait_gather(b, u, k, pending);
}

/* Whether parameters are gathered again for backward: not under SHARD_GRAD_OP. */
static gboolean regather(const cfg_run *c) { return c->fsdp != CFG_FSDP_GRAD_OP; }

void plan_units_bwd_begin(plan_builder *b, plan_units *u, const cfg_run *c, int *pending) {
  step_begin(u);
  if (!regather(c)) return;
  if (c->zero == 3) gather(b, u, c, PLAN_PH_BWD, u->root, pending);
  for (int j = u->n_blocks - 1; j >= 0 && j >= u->n_blocks - 2; j--)
    gather(b, u, c, PLAN_PH_BWD, u->blocks[j], pending);
}

void plan_units_bwd_layer(plan_builder *b, plan_units *u, const cfg_run *c, int i, int *pending) {
  const int k = u->unit_of[i - u->l0];
  const int j = u->unit[k].block;
  if (regather(c) && j >= 1 && j <= u->n_blocks - 2 && u->unit[k].last == i) /* prefetch j - 1 */
    gather(b, u, c, PLAN_PH_BWD, u->blocks[j - 1], pending);
  wait_gather(b, u, k, pending);
}

void plan_units_bwd_layer_done(plan_builder *b, const plan_units *u, const cfg_run *c, int i,
                               int *pending) {
  const int k = u->unit_of[i - u->l0];
  if (k != u->root && u->unit[k].first == i) reduce(b, u, c, k, pending);
}

void plan_units_bwd_end(plan_builder *b, const plan_units *u, const cfg_run *c, int *pending) {
  if (u->root >= 0) reduce(b, u, c, u->root, pending);
}

/* ---- ZeRO 1 and 2: the updated parameters, bucket by bucket ---------------------------------- */

/* Parameters of this rank's slices of the weighted layers of bucket `bk`. */
static double bucket_params(const wl_model *m, const plan_shard *role, plan_bucket bk) {
  double n = 0;
  for (int i = bk.first_layer; i < bk.end_layer; i++)
    if (plan_layer_has_grads(&m->layers[i])) n += (double)m->layers[i].params / role[i].split;
  return n;
}

void plan_zero_gathers(plan_builder *b, const wl_model *m, const cfg_run *c,
                       const plan_shard *role, int l0, int l1, int *pending) {
  if (c->zero < 1 || c->zero > 2 || plan_shard_degree(c) < 2) return;
  int n = 0;
  plan_bucket *bk = plan_grad_buckets(m, c, role, l0, l1, &n);
  /* the backward made them from the last layer down: gather from the first layer up */
  for (int k = n - 1; k >= 0; k--)
    plan_b_coll(b, PLAN_PH_FWD, bk[k].first_layer, COLL_ALLGATHER, PLAN_GRP_DP,
                PLAN_WHY_PARAM_GATHER,
                bucket_params(m, role, bk[k]) * gpu_precision_bytes(c->precision), TRUE,
                pending)->bucket = bk[k];
  g_free(bk);
}

/* ---- memory ---------------------------------------------------------------------------------- */

void plan_sharded_memory(plan_rank *p, const wl_model *m, const cfg_run *c, const plan_shard *role) {
  if (!sharded_applies(c)) return;
  const double N = plan_shard_degree(c);
  const double dt = gpu_precision_bytes(c->precision), gb = plan_grad_bytes(c);
  const double P = (double)p->local_params;
  /* the model states (ZeRO's Section 5.1): optimizer state, then gradients, then parameters */
  p->mem.optimizer /= N;
  if (c->zero >= 2 || plan_sharded_units(c)) p->mem.grads /= N;
  if (plan_sharded_units(c)) p->mem.params /= N;
  /* what is held whole beyond this rank's shards, at its peak (its own shard is counted above) */
  if (c->zero == 2) { /* the largest bucket's gradients before their reduce-scatter */
    int n = 0;
    plan_bucket *bk = plan_grad_buckets(m, c, role, p->first_layer, p->end_layer, &n);
    double worst = 0;
    for (int k = 0; k < n; k++) worst = MAX(worst, bucket_params(m, role, bk[k]));
    g_free(bk);
    p->mem.gathered = worst * gb * (1 - 1 / N);
  }
  if (!plan_sharded_units(c)) return;
  plan_units *u = plan_units_new(m, c, role, p->first_layer, p->end_layer);
  double biggest = 0, root = u->root >= 0 ? u->unit[u->root].params : 0;
  for (int j = 0; j < u->n_blocks; j++) biggest = MAX(biggest, u->unit[u->blocks[j]].params);
  const int in_flight = MIN(2, u->n_blocks);
  plan_units_free(u);
  /* parameters: grad-op keeps every unit from its forward through backward, the others the
   * root and two block units (the one computing, the one prefetched); gradients: the root's
   * through backward and one block's before its reduce-scatter */
  const double held = c->fsdp == CFG_FSDP_GRAD_OP ? P : MIN(P, root + in_flight * biggest);
  p->mem.gathered = (held * dt + (root + biggest) * gb) * (1 - 1 / N);
}
