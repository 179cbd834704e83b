/* build.h — inside the planner: the op-list builder and the pieces build.c assembles a rank's
 * plan from. Not for use outside sim/plan/.
 *
 * The builder appends ops in program order. `pending` is the event the next compute op must
 * wait for (a receive, a blocking collective), -1 for none: kernel() consumes it.
 */
#ifndef DL_PLAN_BUILD_H
#define DL_PLAN_BUILD_H

#include "plan/plan.h"

typedef struct {
  GArray *ops;   /* plan_op, in program order */
  int n_events;  /* events numbered so far */
  int mb;        /* micro-batch of the step being built, -1 after the schedule */
  /* kernel names interned lately, by a hash of the name: GLib's global table (behind a lock) is
   * asked once per name and builder */
  const char *knames[64];
} plan_builder;

/* An op of `kind` on `stream`, no events, this step's micro-batch. */
plan_op *plan_b_push(plan_builder *b, plan_op_kind kind, int stream, plan_phase phase, int layer);

/* The event recorded when the last compute op completes (created if needed), -1 if none. */
int plan_b_last_compute_event(plan_builder *b);

/* A kernel on the compute stream; it waits for *pending, which is then cleared. */
plan_op *plan_b_kernel(plan_builder *b, plan_phase phase, int layer, const char *kname,
                   gboolean gemm_like, double flops, double mem_bytes, int64_t samples, int split,
                   int *pending);

/* A collective on the communication stream once the last compute op is done. If `blocking`,
 * the next compute op waits for it (activations the next layer needs); otherwise it overlaps. */
plan_op *plan_b_coll(plan_builder *b, plan_phase phase, int layer, coll_op cop, plan_group g,
                 plan_purpose why, double bytes, gboolean blocking, int *pending);

/* Point-to-point: a send leaves once the last compute op is done and never blocks compute; the
 * next compute op waits for a receive. */
plan_op *plan_b_p2p(plan_builder *b, plan_op_kind kind, plan_phase phase, int layer, int peer,
                    int mb, int grad, double bytes, int *pending);

/* Halo messages of domain layer `layer` for micro-batch `mb` in direction `dir` (domain.c). */
void plan_domain_halo(plan_builder *b, int rank, const plan_shard *x, int layer, int mb, int dir,
                    int *pending);

/* Kernels and all-to-alls of MoE layer `li` for micro-batch `mb`, forward or backward; a
 * recomputed forward runs in the backward phase and leaves the routing statistics of `p`
 * alone (moe.c). */
void plan_moe_layer(plan_builder *b, plan_rank *p, const cfg_run *c, const wl_layer *l, int li,
                  int mb, gboolean fwd, gboolean recompute, const plan_shard *x, int ep_index,
                  int *pending);

/* The stage's steps (schedule.c): 2·m·V entries of (forward?, micro-batch, model chunk); the
 * chunk is 0 but with --schedule interleaved. */
typedef struct {
  gboolean fwd;
  int mb;
  int chunk;
} plan_step;
void plan_schedule(const cfg_run *c, int stage, plan_step *out);
/* TRUE when step `s` is the last backward of its chunk (gradients are synchronised during it). */
gboolean plan_schedule_last_backward(const cfg_run *c, plan_step s);

/* Gradient synchronisation (gradsync.c): during the last backward, the gradient collectives of
 * layer i, after its backward kernels; plan_grad_flush after the stage's last layer. */
typedef struct {
  double bytes;     /* gradients in the open DDP bucket */
  double cap;       /* its cap: 1 MiB for the first bucket, --bucket-mb after */
  int end;          /* the open bucket holds the weighted layers of [i, end) */
} plan_grad_state;
void plan_grad_begin(plan_grad_state *g, int end_layer);
void plan_grad_layer(plan_builder *b, plan_grad_state *g, const cfg_run *c, const wl_layer *l,
                     int i, const plan_shard *x, int *pending);
void plan_grad_flush(plan_builder *b, plan_grad_state *g, const cfg_run *c, int first_layer,
                   int *pending);
/* The dense buckets a stage's last backward makes (the same rule as plan_grad_layer), in the
 * order it makes them: highest layers first. `n` is set to their count; the caller frees. */
plan_bucket *plan_grad_buckets(const wl_model *m, const cfg_run *c, const plan_shard *role,
                               int l0, int l1, int *n);
/* Tied weights whose layers sit on different stages: their gradient sums (after the schedule). */
void plan_grad_tied(plan_builder *b, const plan_rank *p, const wl_model *m, const cfg_run *c,
                    const plan_shard *role, int *pending);

/* Sharded data parallelism (fsdp.c). Under --zero 3 and --fsdp the stage's layers form units
 * whose parameters are gathered before use and whose gradients are reduce-scattered after. */
typedef struct {
  int first, last;     /* its first and last layer (the root's layers need not be contiguous) */
  double params;       /* its parameters on this rank's slices (whole over the shards) */
  int block;           /* its place among the block units (blocks[block]), -1 for the root */
  int ag_event;        /* during a step: the event of its gather, -1 for none */
  int ag_op;           /* and the index of that op */
  gboolean waited;     /* during a step: a kernel of the unit has waited for it */
} plan_unit;
typedef struct {
  int l0, l1;          /* the stage's layers */
  int n;               /* units */
  int *unit_of;        /* layer l0 + j is in unit unit_of[j] */
  plan_unit *unit;     /* the units */
  int root;            /* the unit of the layers outside every block, -1 for none */
  int *blocks;         /* the other units in layer order, n_blocks of them */
  int n_blocks;
} plan_units;
/* TRUE when the configuration gathers parameters by units (--zero 3, --fsdp). */
gboolean plan_sharded_units(const cfg_run *c);
plan_units *plan_units_new(const wl_model *m, const cfg_run *c, const plan_shard *role, int l0,
                           int l1);
void plan_units_free(plan_units *u);
/* A forward step: its gathers before its first layer, then before each layer i's kernels (the
 * prefetch of the next unit where a unit starts, and the wait for the unit's own gather). */
void plan_units_fwd_begin(plan_builder *b, plan_units *u, const cfg_run *c, int *pending);
void plan_units_fwd_layer(plan_builder *b, plan_units *u, const cfg_run *c, int i, int *pending);
/* A backward step, likewise, with each unit's reduce-scatter after its first layer's backward
 * (plan_units_bwd_layer_done) and the root's at the end. */
void plan_units_bwd_begin(plan_builder *b, plan_units *u, const cfg_run *c, int *pending);
void plan_units_bwd_layer(plan_builder *b, plan_units *u, const cfg_run *c, int i, int *pending);
void plan_units_bwd_layer_done(plan_builder *b, const plan_units *u, const cfg_run *c, int i,
                               int *pending);
void plan_units_bwd_end(plan_builder *b, const plan_units *u, const cfg_run *c, int *pending);
/* --zero 1 and 2: the gathers of the updated parameters, bucket by bucket, before the
 * iteration's first forward (which waits for them). */
void plan_zero_gathers(plan_builder *b, const wl_model *m, const cfg_run *c,
                       const plan_shard *role, int l0, int l1, int *pending);
/* The sharded model states and the whole buffers beyond them, over plan_memory_fill's figures. */
void plan_sharded_memory(plan_rank *p, const wl_model *m, const cfg_run *c,
                         const plan_shard *role);

/* Memory (memory.c): the parameters this rank holds (tied copies included) and its weights,
 * gradients, optimizer state and activations, into p->local_params and p->mem; `steps` is the
 * stage's schedule (plan_schedule), whose chunks in flight set the activations' peak. */
void plan_memory_fill(plan_rank *p, const wl_model *m, const cfg_run *c, const plan_shard *role,
                      const plan_step *steps);

#endif
