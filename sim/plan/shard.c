/* shard.c — the split table and its strategies (see shard.h). */
#include "plan/shard.h"

#include <string.h>

#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/strategy.h"

#define PL_NAME(e, s) s,
static const char *const group_names[] = {PL_GROUPS(PL_NAME)};
static const char *const purpose_names[] = {PL_PURPOSES(PL_NAME)};
static const char *const split_names[] = {PL_SPLITS(PL_NAME)};
#undef PL_NAME

const char *pl_group_name(pl_group g) { return group_names[g]; }
const char *pl_purpose_name(pl_purpose p) { return purpose_names[p]; }
const char *pl_split_name(pl_split s) { return split_names[s]; }

/* In the order their checks run and their roles apply: the tensor-parallel styles, then the
 * domain split that overrides their convolutional part, then the experts of MoE layers. */
static const pl_strategy *const strategies[] = {&pl_gholami, &pl_megatron, &pl_domain,
                                                &pl_experts};

void pl_shard_slice(pl_shard *s, pl_split kind, int64_t dim, int parts, int idx) {
  s->kind = kind;
  s->parts = parts;
  s->dim = dim;
  s->c0 = idx * dim / parts;
  s->cn = (idx + 1) * dim / parts - s->c0;
  s->cmax = (dim + parts - 1) / parts;
}

gboolean pl_shard_check(const wl_model *m, const cfg_run *c, GError **err) {
  for (size_t k = 0; k < G_N_ELEMENTS(strategies); k++)
    if (strategies[k]->applies(c) && !strategies[k]->check(m, c, err)) return FALSE;
  return TRUE;
}

gboolean pl_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, pl_shard *out,
                       GError **err) {
  /* data parallel: every layer whole, B/dp/m samples, gradients over dp */
  for (int i = 0; i < m->n_layers; i++) {
    pl_shard *x = &out[i];
    memset(x, 0, sizeof *x);
    x->kind = PL_SPLIT_FULL;
    x->parts = 1;
    x->split = 1;
    x->samples = pl_row_samples(c);
    x->grad_group = PL_GRP_DP;
    x->grad_degree = c->dp;
    x->fwd_coll = x->bwd_coll = COLL_OP_COUNT;
  }
  for (size_t k = 0; k < G_N_ELEMENTS(strategies); k++)
    if (strategies[k]->applies(c) && !strategies[k]->roles(m, c, tp_i, ep_i, out, err))
      return FALSE;
  return TRUE;
}
