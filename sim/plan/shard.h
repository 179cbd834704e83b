/* shard.h — how each layer is split, for one rank: the one table that the planner builds its op
 * lists from and the real executor sizes its tensors from.
 *
 * A strategy is a row of the table in shard.c ({name, applies, refuse, roles}) with its own file:
 *   data parallel  every layer whole on every rank, gradients all-reduced over dp (the default);
 *   gholami.c      Gholami et al.'s Pr×Pc grid (--grid, --tp with --tp-style gholami);
 *   megatron.c     Megatron tensor parallelism (--tp with --tp-style megatron);
 *   domain.c       domain parallelism over the grid's Pr group (--domain conv);
 *   moe.c          expert parallelism (--ep): each rank holds E/ep experts of every MoE layer;
 *   fsdp.c         sharded data parallelism (--zero, --fsdp): the same splits, with parameters,
 *                  gradients and optimizer state sharded over the data-parallel (or shard) group.
 * A new strategy adds a row and a file here; build.c asks each layer's entry what to emit.
 *
 * Two quantities are kept apart: `split` is how many ways the model divides the layer's work,
 * parameters and stash (what the planner charges a rank), while `kind` and the slice say which
 * part of the layer's tensors the rank holds. They differ where the real build replicates work
 * the model divides: on Gholami's grid the layers between the conv/linear layers work on 1/Pr of
 * the channels in the model, and the real executor runs them whole on identical data.
 */
#ifndef DL_PLAN_SHARD_H
#define DL_PLAN_SHARD_H

#include <glib.h>
#include <stdint.h>

#include "coll/coll.h"
#include "core/config.h"
#include "model/workload.h"

/* The communicators (plan.h has their meaning). */
#define PLAN_GROUPS(X) X(PLAN_GRP_WORLD, "world") X(PLAN_GRP_DP, "dp") X(PLAN_GRP_TP, "tp") \
  X(PLAN_GRP_PP, "pp") X(PLAN_GRP_EP, "ep") X(PLAN_GRP_EMBED, "embed")                   \
  X(PLAN_GRP_EDP, "expert_dp") X(PLAN_GRP_TRACE, "trace") X(PLAN_GRP_SHARD, "shard")     \
  X(PLAN_GRP_REPL, "replicate") X(PLAN_GRP_CP, "cp")
/* Why a collective exists: lets results and tests attribute bytes to Gholami's terms. */
#define PLAN_PURPOSES(X) X(PLAN_WHY_NONE, "none") X(PLAN_WHY_GRAD, "grad_sync") \
  X(PLAN_WHY_FWD_GATHER, "fwd_allgather") X(PLAN_WHY_BWD_DX, "bwd_dx_allreduce") \
  X(PLAN_WHY_REDIST, "redistribute") X(PLAN_WHY_FWD_REDUCE, "fwd_allreduce") \
  X(PLAN_WHY_ACT, "activation") X(PLAN_WHY_ACT_GRAD, "activation_grad") \
  X(PLAN_WHY_TIED, "tied_grad_sync") X(PLAN_WHY_MOE_DISPATCH, "moe_dispatch") \
  X(PLAN_WHY_MOE_COMBINE, "moe_combine") X(PLAN_WHY_EXPERT_GRAD, "expert_grad_sync") \
  X(PLAN_WHY_HALO, "halo") X(PLAN_WHY_BN_STATS, "bn_stats") X(PLAN_WHY_TRACE, "traced") \
  X(PLAN_WHY_PARAM_GATHER, "param_allgather") X(PLAN_WHY_BWD_DY_GATHER, "bwd_dy_allgather") \
  X(PLAN_WHY_SP_REGATHER, "sp_input_regather") X(PLAN_WHY_SP_NORM_GRAD, "sp_norm_grad_sync") \
  X(PLAN_WHY_CP_KV, "cp_kv_exchange") X(PLAN_WHY_CP_ALLTOALL, "cp_alltoall")
/* How a rank holds a layer's tensors. */
#define PLAN_SPLITS(X)                                                                   \
  X(PLAN_SPLIT_FULL, "full")                                                             \
  X(PLAN_SPLIT_ROWS, "rows") X(PLAN_SPLIT_COL, "column") X(PLAN_SPLIT_QKV, "qkv")        \
      X(PLAN_SPLIT_ROW, "row") X(PLAN_SPLIT_LOCAL, "local") X(PLAN_SPLIT_VOCAB, "vocab") \
          X(PLAN_SPLIT_CE, "vocab_ce") X(PLAN_SPLIT_EXPERTS, "experts")                  \
              X(PLAN_SPLIT_DOMAIN, "domain")

#define PLAN_ENUM(e, s) e,
typedef enum { PLAN_GROUPS(PLAN_ENUM) PLAN_N_GROUPS } plan_group;
typedef enum { PLAN_PURPOSES(PLAN_ENUM) PLAN_N_PURPOSES } plan_purpose;
typedef enum { PLAN_SPLITS(PLAN_ENUM) PLAN_N_SPLITS } plan_split;
#undef PLAN_ENUM

const char *plan_group_name(plan_group g);
const char *plan_purpose_name(plan_purpose p);
const char *plan_split_name(plan_split s);

/* One layer on one rank. Tensor slices (`kind`):
 *   ROWS     grid conv/linear with Pr > 1: output channels/rows [c0, c0 + cn) of dim = out.c;
 *            the output block is all-gathered in the tp group (uneven splits allowed);
 *   COL      Megatron column linear: output features of dim = out.c; QKV a column linear that
 *            feeds attention (fused q|k|v): rows of each of Q, K and V (dim = out.c / 3), so
 *            every head stays whole; ROW row linear: input features of dim = in.c (the bias is
 *            whole, added by tp_i = 0); LOCAL attention heads, GELU, ReLU between a column and a
 *            row linear: features of dim = out.c; VOCAB token embedding rows of dim = vocab;
 *            CE softmax cross-entropy over a vocabulary-split output: dim = in.c;
 *   EXPERTS  an MoE layer with ep > 1: the router whole, experts [c0, c0 + cn) of dim = E;
 *   DOMAIN   a layer before the first linear under --domain conv with Pr > 1: whole parameters,
 *            output rows [c0, c0 + cn) of dim = out.h (plan_domain_slab);
 *   FULL     everything whole. */
typedef struct {
  plan_split kind;        /* which part of the layer's tensors the rank holds */
  int parts;            /* ways `dim` is cut (tp, or ep for experts); 1 for FULL */
  int64_t dim;          /* the split dimension's full size */
  int64_t c0, cn;       /* this rank's slice [c0, c0 + cn) of it */
  int64_t cmax;         /* the largest slice of any member (all-gather block) */
  int split;            /* the model divides the layer's work and parameters this many ways */
  int seq_parts;        /* and its tokens this many ways (sequence parallelism: work and stash
                           divided, parameters whole); 1 otherwise */
  int cp_parts;         /* of seq_parts, context parallelism's share (cp); 1 without */
  int64_t samples;      /* samples of one micro-batch on this rank */
  int64_t sub;          /* the first of them within its data-parallel row's micro-batch */
  plan_group grad_group;  /* gradient all-reduce group (dp, or world) */
  int grad_degree;      /* its size */
  coll_op fwd_coll;     /* collective after the forward kernel, or COLL_OP_COUNT for none */
  plan_purpose fwd_why;
  double fwd_bytes;
  coll_op bwd_coll;     /* collective after the backward kernel, or COLL_OP_COUNT */
  plan_purpose bwd_why;
  double bwd_bytes;
  coll_op bwd_pre_coll; /* collective before the backward kernel (sequence parallelism: the
                           output gradient's, or the input's again), or COLL_OP_COUNT */
  plan_purpose bwd_pre_why;
  double bwd_pre_bytes;
  gboolean redistribute;/* the input is all-gathered in the tp group first (Eq. 6, or the end
                           of the domain part) */
  double redist_bytes;
  gboolean redist_rows; /* that input arrives as DOMAIN row slabs */
  gboolean replicated_stash; /* its saved input is the whole (replicated) activation */
  /* domain parallelism */
  gboolean domain;      /* the layer's rows are split across the Pr group */
  double row_share;     /* fraction of the layer's output rows (and work) on this rank */
  int halo[2][2][2];    /* [fwd=0/bwd=1][recv=0/send=1][up=0/down=1]: rows exchanged */
  double halo_row_bytes[2]; /* bytes of one row: [0] input row (forward), [1] output row */
  int boundary_rows;    /* output rows that need halo rows */
  int out_rows;         /* output rows on this rank */
} plan_shard;

/* What the configuration's strategies refuse for model `m` (DL_ERR_INPUT naming the option,
 * file and layer): splits a strategy cannot make, combinations that do not go together. */
gboolean plan_shard_check(const wl_model *m, const cfg_run *c, GError **err);

/* Fills out[0..n_layers-1] for the rank with tensor-parallel index tp_i and expert index ep_i
 * (plan_coords). DL_ERR_INPUT when a layer cannot be split for this rank (too few image rows for
 * Pr, halo rows beyond a neighbour). The configuration passed plan_shard_check. */
gboolean plan_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                       GError **err);

/* Elements of a layer's input per sample. */
static inline int64_t plan_in_elems(const wl_layer *l) { return l->in.c * l->in.h * l->in.w; }

/* Domain parallelism (--domain conv): the first layer after the domain part; rows [lo, hi) of
 * slab i when n rows are split into `parts`; the rows a windowed layer's slab i needs from its
 * neighbours' (dir 0: input rows for its output rows; dir 1: output-gradient rows whose windows
 * reach its input rows), clipped to the image; whether a layer is windowed (exchanges halo
 * rows). */
int plan_domain_end(const wl_model *m);
void plan_domain_slab(int n, int parts, int i, int *lo, int *hi);
void plan_domain_needs(const wl_layer *l, int parts, int i, int dir, int *lo, int *hi);
gboolean plan_domain_windowed(const wl_layer *l);

#endif
