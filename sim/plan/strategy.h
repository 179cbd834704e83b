/* strategy.h — inside the planner: a parallel strategy as a row of the split table (shard.c).
 * Not for use outside sim/plan/. */
#ifndef DL_PLAN_STRATEGY_H
#define DL_PLAN_STRATEGY_H

#include "plan/shard.h"

typedef struct {
  const char *name;
  /* TRUE when the configuration uses this strategy */
  gboolean (*applies)(const cfg_run *c);
  /* what it refuses of model `m` (DL_ERR_INPUT naming the option and layer) */
  gboolean (*check)(const wl_model *m, const cfg_run *c, GError **err);
  /* writes its splits over the data-parallel defaults of out[] for the rank at tp_i, ep_i */
  gboolean (*roles)(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                    GError **err);
} plan_strategy;

extern const plan_strategy plan_gholami, plan_megatron, plan_domain, plan_experts, plan_sharded,
    plan_context;

/* --routing file:F gives one weight per expert of every MoE layer (DL_ERR_INPUT otherwise). */
gboolean plan_moe_check_routing(const wl_model *m, const cfg_run *c, GError **err);

/* Slice `idx` of `dim` cut into `parts`: [idx·dim/parts, (idx+1)·dim/parts), uneven allowed. */
void plan_shard_slice(plan_shard *s, plan_split kind, int64_t dim, int parts, int idx);

/* Samples of one micro-batch on a rank of the data-parallel row: B / dp / m. */
static inline int64_t plan_row_samples(const cfg_run *c) {
  return c->batch / c->dp / c->microbatches;
}

#endif
