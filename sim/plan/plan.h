/* plan.h — the planner: a pure function from (workload, configuration, rank) to the rank's op
 * list. It never calls MPI, so its communication volumes can be checked against closed-form
 * formulas, and the three executors (sim, real, analytic) consume the same lists.
 *
 * An op list is in program order. Ops on one stream run in order; ops on different streams
 * overlap. An op may wait for an event recorded by an earlier op of another stream (as
 * cudaStreamWaitEvent) and may record one when it completes. A list is a valid schedule when it is
 * executed in list order with those rules, which every executor does.
 *
 * Rank layout (tp fastest, then dp, then pp): rank = (pp_i · dp + dp_i) · tp + tp_i, so a tensor-
 * parallel group (Gholami's Pr "column" group) sits inside a node and pipeline stages sit across
 * nodes. Gholami's Pr×Pc grid is tp = Pr, dp = Pc with --tp-style gholami.
 */
#ifndef PLAN_H
#define PLAN_H

#include <glib.h>
#include <stdint.h>

#include "coll/coll.h"
#include "core/config.h"
#include "model/workload.h"
#include "plan/shard.h"

#define PLAN_OP_KINDS(X) \
  X(PLAN_KERNEL, "kernel") X(PLAN_COLL, "coll") X(PLAN_SEND, "send") X(PLAN_RECV, "recv")
#define PLAN_PHASES(X) \
  X(PLAN_PH_FWD, "forward") X(PLAN_PH_BWD, "backward") X(PLAN_PH_OPT, "optimizer")
/* Communicators (shard.h lists them): in Gholami's grid, tp is the Pr (model/domain) group: the
 * ranks of one grid column, which share a batch shard; dp is the Pc (batch) group: one grid row,
 * same weights. */

/* Which part of its layer's work a kernel op does: all of it; a domain-parallel layer's interior
 * rows (computed while the halo rows travel) or its rows next to the boundary; an MoE layer's
 * router or its experts. A collective of sharded data parallelism marked root moves the root
 * unit: the layers of its bucket range that are outside every block (they need not be
 * contiguous: a CNN's stem and head). */
#define PLAN_PARTS(X) X(PLAN_PART_WHOLE, "whole") X(PLAN_PART_INTERIOR, "interior") \
  X(PLAN_PART_BOUNDARY, "boundary") X(PLAN_PART_ROUTER, "router") X(PLAN_PART_EXPERTS, "experts") \
  X(PLAN_PART_ROOT, "root")

#define PLAN_ENUM(e, s) e,
typedef enum { PLAN_OP_KINDS(PLAN_ENUM) PLAN_N_OP_KINDS } plan_op_kind;
typedef enum { PLAN_PARTS(PLAN_ENUM) PLAN_N_PARTS } plan_part;
typedef enum { PLAN_PHASES(PLAN_ENUM) PLAN_N_PHASES } plan_phase;
#undef PLAN_ENUM

const char *plan_op_kind_name(plan_op_kind k);
const char *plan_phase_name(plan_phase p);
const char *plan_part_name(plan_part p);

enum { PLAN_STREAM_COMPUTE = 0, PLAN_STREAM_COMM = 1, PLAN_N_STREAMS = 2 };

/* The layers whose gradients a gradient collective carries: the weighted layers of
 * [first_layer, end_layer) (an MoE layer's router only when the purpose is grad_sync, its
 * experts only for expert_grad_sync). */
typedef struct {
  int first_layer, end_layer; /* [first, end); first = end = 0 for other ops */
} plan_bucket;

/* Context parallelism's ring messages: one tag per pass, PLAN_CP_TAG_BASE + 2 in backward, + 1
 * in a recomputed forward, near MPI's smallest tag bound; a pair's messages of one tag are
 * received in the order they were sent, as MPI guarantees and every executor keeps. */
#define PLAN_CP_TAG_BASE 32000

/* A kernel's name is shorter than this (a trace's dlsim_kernel included). */
#define PLAN_KNAME_MAX 40

typedef struct {
  plan_op_kind kind;
  int stream;          /* PLAN_STREAM_COMPUTE or PLAN_STREAM_COMM */
  plan_phase phase;      /* when in the iteration: a recomputed forward runs in backward */
  int layer;           /* workload layer index, -1 for none (optimizer, a bucket's remainder) */
  int wait_event;      /* event to wait for before starting, -1 none */
  int record_event;    /* event recorded when this op completes, -1 none */
  int microbatch;      /* micro-batch the op belongs to (every kernel, collective and message of
                          a forward or backward step), -1 for iteration-level ops (optimizer,
                          tied-weight sums) */
  /* PLAN_KERNEL (the fields of each kind ordered to leave no padding: lists hold millions) */
  gboolean gemm_like;  /* compute-bound class (conv, linear, attention, moe) */
  const char *kname;   /* "<layer kind>.<fwd|bwd|step>", the kernel-database key (interned,
                          g_intern_string), "" for other ops */
  double flops;        /* FLOP this rank executes */
  double mem_bytes;    /* bytes this kernel moves to and from device memory */
  int64_t samples;     /* samples (or micro-batch) the kernel processes on this rank */
  int split;           /* the layer's output channels/features are split this many ways (Pr) */
  int seq;             /* context parallelism's split of the kernel's tokens (kdb_kernel's seq) */
  plan_part part;        /* which part of the layer's work */
  gboolean recompute;  /* a forward kernel, or its tp collective, re-run in backward (--recompute) */
  int64_t params;      /* optimizer step: parameters it updates; 0 otherwise */
  double warm_bytes;   /* bytes of its input that the previous kernel of the stream just wrote
                          (a producer's output before its forward, a consumer's input gradient
                          before its backward; unsplit layers), 0 for none (plan_mark_warm) */
  double out_bytes;    /* with warm_bytes: the bytes this kernel writes (output, or input
                          gradient), which must fit in the L2 beside them */
  /* PLAN_COLL, PLAN_SEND, PLAN_RECV */
  coll_op coll;        /* which collective (coll.h) */
  plan_group group;
  plan_purpose purpose;
  int comm;            /* collective: its communicator in the plan's `comms` (-1: `group`'s) */
  double bytes;        /* collective buffer size n (the result's size for allgather, the input's for
                          reduce-scatter), or message size for send/recv */
  int peer;            /* send/recv partner rank, -1 otherwise */
  int tag;             /* send/recv: micro-batch · 2 + (0 activation, 1 its gradient); halo,
                          ring attention (PLAN_CP_TAG_BASE) and trace messages their own; always
                          below COLL_TAG_BASE (coll.h) */
  const double *peer_send_bytes; /* all-to-all with uneven blocks: bytes to each group member
                                    (group order), NULL when blocks are even (owned by the plan) */
  const double *peer_recv_bytes; /* and bytes from each member */
  plan_bucket bucket;    /* gradient collectives (grad_sync, expert_grad_sync, tied_grad_sync) */
  /* ops read from an execution trace (plan/trace.h) */
  double fixed_s;        /* kernel: the duration the trace recorded, s (-1: none, the usual case) */
  const char *kdb_key;   /* kernel: its kernel-database key, if the trace says (borrowed), or NULL */
} plan_op;

/* Communicators listed explicitly (a trace's), rather than derived from the layout: members[i]
 * holds size[i] ranks in increasing order. */
typedef struct {
  int n;
  int **members;
  int *size;
} plan_comms;

typedef struct {
  double params;       /* bytes of weights on the GPU */
  double grads;        /* bytes of gradients */
  double optimizer;    /* bytes of optimizer state (master weights, moments) */
  double activations;  /* bytes of activations stashed for backward (peak) */
  double gathered;     /* bytes of unsharded parameters and gradients held beyond this rank's
                          shards at their peak (--zero 2 and 3, --fsdp: gathered units, their
                          prefetch, gradients before their reduce-scatter); 0 without sharding */
} plan_memory;

/* Memory per GPU at its peak: the sum of the parts. */
static inline double plan_memory_peak(const plan_memory *m) {
  return m->params + m->grads + m->optimizer + m->activations + m->gathered;
}

/* Pipeline units of a model: maximal runs of one residual block, or single layers outside
 * blocks (what stages and model chunks are cut from). */
int plan_pipeline_units(const wl_model *m);

typedef struct plan_rank {
  int stage;           /* pipeline stage of the rank */
  int first_layer;     /* the stage's layers: [first_layer, end_layer); with interleaving, those
                          of its first model chunk (plan_chunk_layers has each) */
  int end_layer;
  int *stage_first;    /* the partition (plan_partition): (virtual) stage j holds
                          [stage_first[j], stage_first[j + 1]), pp·V + 1 entries (owned) */
  int n_chunks;        /* V: the rank's model chunks, virtual stages stage + v·chunk_stride */
  int chunk_stride;    /* pp (1 for a trace) */
  int max_stash;       /* most micro-batches (micro-batch chunks) whose activations are kept */
  plan_op *ops;          /* owned */
  int n_ops;
  int n_events;        /* events are numbered 0..n_events-1 */
  int step_event;      /* the event the optimizer step records where the next iteration's first
                          communication reads what the step wrote (ZeRO and FSDP's parameter
                          gathers): each executor starts iteration k + 1's communication stream
                          once iteration k's step has recorded it; -1 for none */
  plan_memory mem;
  int64_t local_params;/* parameters whose gradients this rank holds */
  double moe_max_over_mean; /* MoE: largest (tokens of the busiest expert / mean per expert)
                               over the MoE layers and micro-batches of the stage, 0 without MoE */
  double moe_dropped_tokens; /* MoE: routed token copies dropped by expert capacity per
                                iteration, this rank's share */
  double moe_routed_tokens;  /* MoE: routed token copies per iteration, this rank's share */
  GPtrArray *pool;     /* storage behind peer_*_bytes (owned) */
  const plan_comms *comms; /* explicit communicators of ops with comm >= 0 (borrowed), or NULL */
  const struct plan_rank *viewed; /* a view (plan_view): the equivalent rank's plan whose ops,
                                     partition and pool this one borrows; NULL: owns them */
  int peer_shift;      /* added to every op's peer (plan_op_peer): 0 unless a view */
} plan_rank;

/* The layers [*l0, *l1) of model chunk v of plan `p` (v < p->n_chunks), below; TRUE when `p`
 * holds layer `i` in one of its chunks. */
gboolean plan_holds_layer(const plan_rank *p, int i);

/* An op with nothing set: no layer, event, peer, recorded time or explicit communicator. */
void plan_op_init(plan_op *op);

/* The call-counter slot of collective `op`: its communicator kind, or PLAN_N_GROUPS + its
 * explicit communicator; plan_n_slots(p) of them in plan `p`. Collectives are ordered per slot
 * (MPI's order of collectives on one communicator). */
int plan_op_slot(const plan_op *op);
int plan_n_slots(const plan_rank *p);

static inline void plan_chunk_layers(const plan_rank *p, int v, int *l0, int *l1) {
  const int j = v * p->chunk_stride + p->stage;
  *l0 = p->stage_first[j];
  *l1 = p->stage_first[j + 1];
}

/* Builds rank `rank`'s op list for one training iteration. The configuration must have passed
 * cfg_resolve(). `layer_time_s` (may be NULL: FLOPs are used instead) gives each layer's forward
 * plus backward time per sample; pipeline stages are balanced with it. DL_ERR_INPUT when the
 * combination is not supported (the message names the option). Returns a newly allocated plan
 * (plan_rank_free). */
plan_rank *plan_build(const wl_model *m, const cfg_run *c, const double *layer_time_s, int rank,
                       GError **err);
/* The same plan without its ops (n_ops 0, no events): its partition, stash and memory, which
 * do not depend on them, at a fraction of the cost (a search's memory check). */
plan_rank *plan_build_memory(const wl_model *m, const cfg_run *c, const double *layer_time_s,
                             int rank, GError **err);

/* The pipeline partition: stage_first[s] is the first layer of stage s, stage_first[pp] =
 * n_layers; with --schedule interleaved the same over pp·V virtual stages (pipeline rank s holds
 * virtual stages s, s + pp, ..., its model chunks). Residual blocks stay whole; stages minimise
 * the largest stage cost (or follow --pp-balance). DL_ERR_INPUT when the model cannot be cut. */
gboolean plan_partition(const wl_model *m, const cfg_run *c, const double *layer_time_s,
                      int *stage_first, GError **err);
void plan_rank_free(plan_rank *p);

/* Equivalent ranks: plan_build gives rank `rank` the op list of the rank returned here, with
 * every peer shifted by their difference (peers lie along the pipeline and within a tensor-
 * parallel group, so the shift carries them over). That rank is the one with the same pipeline
 * stage and tensor-parallel coordinate in data-parallel replica 0 (with expert parallelism, the
 * first replica holding the same experts); under Megatron tensor parallelism without MoE layers
 * (plan_tp_alike) coordinate 0 of its tensor-parallel group. `rank` itself when nothing is
 * shared. tests/unit/test_plan.c checks the equivalence rank by rank. */
int plan_representative(const wl_model *m, const cfg_run *c, int rank);
/* TRUE when the members of a tensor-parallel group run the same op list: Megatron splits (each
 * charges 1/tp of the layer), no domain-parallel convolutions, no MoE layer. */
gboolean plan_tp_alike(const wl_model *m, const cfg_run *c);
/* Rank `rank`'s plan as a view of `rep`, the plan of its representative `rep_rank`: the same
 * figures and ops (borrowed: `rep` must outlive the view), peers shifted. Free with
 * plan_rank_free. */
plan_rank *plan_view(const plan_rank *rep, int rep_rank, int rank);
/* The peer of send/receive op `op` of plan `p` (-1 for other ops): what every executor must read
 * instead of op->peer. */
int plan_op_peer(const plan_rank *p, const plan_op *op);

/* MoE routing: the token copies (`assignments` = tokens × top_k) each of the E experts of layer
 * `layer` receives in micro-batch `mb` under c->routing (whole numbers, summing to assignments).
 * Deterministic for a given c->seed. `load` has E entries. */
void plan_moe_loads(const cfg_run *c, int layer, int mb, int E, double assignments, double *load);

/* Coordinates of a rank, the rank at given coordinates (the layout in this file's comment), and
 * the members of its groups (rank-ordered). `members` must hold c->gpus entries; returns the
 * group size. */
void plan_coords(const cfg_run *c, int rank, int *dp_i, int *tp_i, int *pp_i);
/* Ranks along the data dimension of the layout: dp · cp (layout.c). */
int plan_dpc(const cfg_run *c);
/* TRUE when --recompute selective recomputes layer `l`: an attention that keeps its
 * probabilities otherwise (not flash-style, which keeps none). */
static inline gboolean plan_selective_attention(const cfg_run *c, const wl_layer *l) {
  return c->recompute_selective && l->kind == WL_ATTENTION && !l->flash;
}
/* The rank `step` places on from `rank` around its context-parallel ring (negative: back). */
int plan_cp_neighbour(const cfg_run *c, int rank, int step);
int plan_rank_of(const cfg_run *c, int dp_i, int tp_i, int pp_i);
int plan_group_members(const cfg_run *c, plan_group g, int rank, int *members);
/* The members of the communicator of collective op `op` of plan `p`: its explicit one when
 * op->comm >= 0, else its group's (plan_group_members). */
int plan_op_members(const plan_rank *p, const cfg_run *c, const plan_op *op, int rank,
                    int *members);

/* TRUE when layer `l` owns parameters whose gradients are synchronised (weighted, params > 0; a
 * tied copy is summed apart, by the tied_grad_sync collectives). */
gboolean plan_layer_has_grads(const wl_layer *l);

/* The layers whose gradients gradient collective `op` carries (plan_bucket), in the order they
 * are packed: the planner's, highest layer first. `layers` has room for end_layer − first_layer
 * entries; returns how many. */
int plan_bucket_layers(const wl_model *m, const plan_op *op, int *layers);

/* Size of the groups of kind `g` (the same for every rank that belongs to one): P, dp, tp, pp,
 * ep, 2 for the tied embedding's first and last stage (1 without a pipeline), and dp/ep for the
 * replicas of the same experts (1 without expert parallelism, where they are the dp group).
 * Communicators are made for groups larger than 1. */
int plan_group_degree(const cfg_run *c, plan_group g);

/* Sharded data parallelism (--zero, --fsdp; fsdp.c): the ranks among which one copy of the
 * sharded states is split (dp, the shard group of --fsdp hybrid; 1 without sharding), and the
 * group they form (PLAN_GRP_DP, or PLAN_GRP_SHARD for hybrid, whose replicas of one shard form
 * PLAN_GRP_REPL). */
int plan_shard_degree(const cfg_run *c);
plan_group plan_shard_group(const cfg_run *c);

/* Bytes per element of the gradients a rank holds and exchanges (--grad-reduce-dtype). */
int plan_grad_bytes(const cfg_run *c);
/* Bytes of optimizer state per parameter: momentum (SGD) or two moments (Adam) in fp32, plus an
 * fp32 master copy of the weights in mixed precision (fp16, bf16). With the weights' own bytes
 * (gpu_precision_bytes) these are the model states a checkpoint holds. */
int plan_optimizer_bytes(const wl_model *m, const cfg_run *c);

#endif
