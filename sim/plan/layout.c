/* layout.c — where ranks sit: coordinates, groups and their sizes (plan.h's rank layout).
 *
 * rank = (pp_i · dp·cp + dpc) · tp + tp_i, where dpc = dp_i · cp + cp_i: tensor parallelism
 * innermost, then context parallelism, then data parallelism, then the pipeline (Megatron-Core's
 * tp-cp-dp-pp order). The "data-parallel index" of plan_coords and plan_rank_of is dpc, which
 * is dp_i without context parallelism. The gradients of the replicated weights are summed over
 * all dp·cp ranks of the dp group; the cp group is the cp ranks of one sequence. */
#include "plan/plan.h"

#include <string.h>

int plan_dpc(const cfg_run *c) { return c->dp * c->cp; }

void plan_coords(const cfg_run *c, int rank, int *dp_i, int *tp_i, int *pp_i) {
  *tp_i = rank % c->tp;
  *dp_i = (rank / c->tp) % plan_dpc(c);
  *pp_i = rank / (c->tp * plan_dpc(c));
}

int plan_rank_of(const cfg_run *c, int dp_i, int tp_i, int pp_i) {
  return (pp_i * plan_dpc(c) + dp_i) * c->tp + tp_i;
}

int plan_cp_neighbour(const cfg_run *c, int rank, int step) {
  int dp_i, tp_i, pp_i;
  plan_coords(c, rank, &dp_i, &tp_i, &pp_i);
  const int cp_i = dp_i % c->cp, at = ((cp_i + step) % c->cp + c->cp) % c->cp;
  return plan_rank_of(c, dp_i - cp_i + at, tp_i, pp_i);
}

int plan_group_members(const cfg_run *c, plan_group g, int rank, int *members) {
  int dp_i, tp_i, pp_i, n = 0;
  plan_coords(c, rank, &dp_i, &tp_i, &pp_i);
  switch (g) {
  case PLAN_GRP_WORLD:
    for (int r = 0; r < c->gpus; r++) members[n++] = r;
    break;
  case PLAN_GRP_EP: /* ep consecutive data-parallel ranks: together they hold every expert */
    for (int i = 0; i < c->ep; i++)
      members[n++] = plan_rank_of(c, dp_i / c->ep * c->ep + i, tp_i, pp_i);
    break;
  case PLAN_GRP_EDP: /* the data-parallel ranks holding the same experts */
    for (int i = dp_i % c->ep; i < c->dp; i += c->ep) members[n++] = plan_rank_of(c, i, tp_i, pp_i);
    break;
  case PLAN_GRP_DP: /* with context parallelism, every cp rank of every replica */
    for (int i = 0; i < plan_dpc(c); i++) members[n++] = plan_rank_of(c, i, tp_i, pp_i);
    break;
  case PLAN_GRP_CP: /* the cp ranks of one replica's sequence */
    for (int i = 0; i < c->cp; i++)
      members[n++] = plan_rank_of(c, dp_i / c->cp * c->cp + i, tp_i, pp_i);
    break;
  case PLAN_GRP_TP:
    for (int i = 0; i < c->tp; i++) members[n++] = plan_rank_of(c, dp_i, i, pp_i);
    break;
  case PLAN_GRP_PP:
    for (int i = 0; i < c->pp; i++) members[n++] = plan_rank_of(c, dp_i, tp_i, i);
    break;
  case PLAN_GRP_EMBED: /* first and last stage of the rank's pipeline (tied embeddings) */
    members[n++] = plan_rank_of(c, dp_i, tp_i, 0);
    if (c->pp > 1) members[n++] = plan_rank_of(c, dp_i, tp_i, c->pp - 1);
    break;
  case PLAN_GRP_SHARD: { /* --fsdp hybrid: consecutive data-parallel ranks share one copy */
    const int S = plan_shard_degree(c);
    for (int i = 0; i < S; i++) members[n++] = plan_rank_of(c, dp_i / S * S + i, tp_i, pp_i);
    break;
  }
  case PLAN_GRP_REPL: { /* and the ranks holding the same shard in the other groups */
    const int S = plan_shard_degree(c);
    for (int i = dp_i % S; i < c->dp; i += S) members[n++] = plan_rank_of(c, i, tp_i, pp_i);
    break;
  }
  case PLAN_GRP_TRACE: /* a trace's communicators are explicit (plan_op_members) */
  case PLAN_N_GROUPS:
    members[n++] = rank;
    break;
  }
  return n;
}

int plan_op_members(const plan_rank *p, const cfg_run *c, const plan_op *op, int rank,
                    int *members) {
  if (op->comm >= 0 && p->comms && op->comm < p->comms->n) {
    const int n = p->comms->size[op->comm];
    memcpy(members, p->comms->members[op->comm], sizeof(int) * (size_t)n);
    return n;
  }
  return plan_group_members(c, op->group, rank, members);
}

int plan_group_degree(const cfg_run *c, plan_group g) {
  switch (g) {
  case PLAN_GRP_WORLD: return c->gpus;
  case PLAN_GRP_DP: return plan_dpc(c);
  case PLAN_GRP_CP: return c->cp;
  case PLAN_GRP_TP: return c->tp;
  case PLAN_GRP_PP: return c->pp;
  case PLAN_GRP_EP: return c->ep;
  case PLAN_GRP_EMBED: return c->pp > 1 ? 2 : 1;
  case PLAN_GRP_EDP: return c->ep > 1 ? c->dp / c->ep : 1;
  case PLAN_GRP_SHARD: return c->fsdp == CFG_FSDP_HYBRID ? plan_shard_degree(c) : 1;
  case PLAN_GRP_REPL: return c->fsdp == CFG_FSDP_HYBRID ? c->dp / plan_shard_degree(c) : 1;
  case PLAN_GRP_TRACE:
  case PLAN_N_GROUPS: break;
  }
  return 1;
}

int plan_op_slot(const plan_op *op) {
  return op->comm >= 0 ? PLAN_N_GROUPS + op->comm : (int)op->group;
}

int plan_n_slots(const plan_rank *p) { return PLAN_N_GROUPS + (p->comms ? p->comms->n : 0); }

gboolean plan_tp_alike(const wl_model *m, const cfg_run *c) {
  if (c->tp < 2 || c->tp_style != CFG_TP_MEGATRON || c->domain_conv) return FALSE;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == WL_MOE) return FALSE;
  return TRUE;
}

int plan_representative(const wl_model *m, const cfg_run *c, int rank) {
  int dp_i, tp_i, pp_i;
  plan_coords(c, rank, &dp_i, &tp_i, &pp_i);
  /* the same data-parallel replica as far as experts go, the same place in the cp ring */
  const int rep = (dp_i / c->cp) % c->ep * c->cp + dp_i % c->cp;
  return plan_rank_of(c, rep, plan_tp_alike(m, c) ? 0 : tp_i, pp_i);
}

int plan_shard_degree(const cfg_run *c) {
  if (c->fsdp == CFG_FSDP_HYBRID && c->fsdp_shard > 0 && c->dp % c->fsdp_shard == 0)
    return c->fsdp_shard;
  return c->zero > 0 || c->fsdp != CFG_FSDP_NONE ? plan_dpc(c) : 1;
}

plan_group plan_shard_group(const cfg_run *c) {
  return c->fsdp == CFG_FSDP_HYBRID ? PLAN_GRP_SHARD : PLAN_GRP_DP;
}
