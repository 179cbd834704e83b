/* shard.c — the split table and its strategies (see shard.h). */
#include "plan/shard.h"

#include <string.h>

#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/plan.h"
#include "plan/strategy.h"

#define PLAN_NAME(e, s) s,
static const char *const group_names[] = {PLAN_GROUPS(PLAN_NAME)};
static const char *const purpose_names[] = {PLAN_PURPOSES(PLAN_NAME)};
static const char *const split_names[] = {PLAN_SPLITS(PLAN_NAME)};
#undef PLAN_NAME

const char *plan_group_name(plan_group g) { return group_names[g]; }
const char *plan_purpose_name(plan_purpose p) { return purpose_names[p]; }
const char *plan_split_name(plan_split s) { return split_names[s]; }

/* In the order their checks run and their roles apply: the tensor-parallel styles, then the
 * domain split that overrides their convolutional part, then the experts of MoE layers, then the
 * sharding of the data-parallel states, then the sequence split of context parallelism (which
 * scales what the others set). */
static const plan_strategy *const strategies[] = {&plan_gholami, &plan_megatron, &plan_domain,
                                                &plan_experts, &plan_sharded, &plan_context};

void plan_shard_slice(plan_shard *s, plan_split kind, int64_t dim, int parts, int idx) {
  s->kind = kind;
  s->parts = parts;
  s->dim = dim;
  s->c0 = idx * dim / parts;
  s->cn = (idx + 1) * dim / parts - s->c0;
  s->cmax = (dim + parts - 1) / parts;
}

gboolean plan_shard_check(const wl_model *m, const cfg_run *c, GError **err) {
  if (!plan_moe_check_routing(m, c, err)) return FALSE;
  for (size_t k = 0; k < G_N_ELEMENTS(strategies); k++)
    if (strategies[k]->applies(c) && !strategies[k]->check(m, c, err)) return FALSE;
  return TRUE;
}

gboolean plan_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                       GError **err) {
  /* data parallel: every layer whole, B/dp/m samples, gradients over dp */
  for (int i = 0; i < m->n_layers; i++) {
    plan_shard *x = &out[i];
    memset(x, 0, sizeof *x);
    x->kind = PLAN_SPLIT_FULL;
    x->parts = 1;
    x->split = 1;
    x->seq_parts = 1;
    x->cp_parts = 1;
    x->samples = plan_row_samples(c);
    x->grad_group = PLAN_GRP_DP;
    x->grad_degree = plan_dpc(c);
    x->fwd_coll = x->bwd_coll = x->bwd_pre_coll = COLL_OP_COUNT;
  }
  for (size_t k = 0; k < G_N_ELEMENTS(strategies); k++)
    if (strategies[k]->applies(c) && !strategies[k]->roles(m, c, tp_i, ep_i, out, err))
      return FALSE;
  return TRUE;
}
