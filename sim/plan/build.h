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
  GArray *ops;   /* pl_op, in program order */
  int n_events;  /* events numbered so far */
  int mb;        /* micro-batch of the step being built, -1 after the schedule */
} pl_builder;

/* An op of `kind` on `stream`, no events, this step's micro-batch. */
pl_op *pl_b_push(pl_builder *b, pl_op_kind kind, int stream, pl_phase phase, int layer);

/* The event recorded when the last compute op completes (created if needed), -1 if none. */
int pl_b_last_compute_event(pl_builder *b);

/* A kernel on the compute stream; it waits for *pending, which is then cleared. */
pl_op *pl_b_kernel(pl_builder *b, pl_phase phase, int layer, const char *kname,
                   gboolean gemm_like, double flops, double mem_bytes, int64_t samples, int split,
                   int *pending);

/* A collective on the communication stream once the last compute op is done. If `blocking`,
 * the next compute op waits for it (activations the next layer needs); otherwise it overlaps. */
pl_op *pl_b_coll(pl_builder *b, pl_phase phase, int layer, coll_op cop, pl_group g,
                 pl_purpose why, double bytes, gboolean blocking, int *pending);

/* Point-to-point: a send leaves once the last compute op is done and never blocks compute; the
 * next compute op waits for a receive. */
pl_op *pl_b_p2p(pl_builder *b, pl_op_kind kind, pl_phase phase, int layer, int peer, int mb,
                int grad, double bytes, int *pending);

/* Halo messages of domain layer `layer` for micro-batch `mb` in direction `dir` (domain.c). */
void pl_domain_halo(pl_builder *b, int rank, const pl_shard *x, int layer, int mb, int dir,
                    int *pending);

/* Kernels and all-to-alls of MoE layer `li` for micro-batch `mb`, forward or backward; a
 * recomputed forward runs in the backward phase and leaves the routing statistics of `p`
 * alone (moe.c). */
void pl_moe_layer(pl_builder *b, pl_rank_plan *p, const cfg_run *c, const wl_layer *l, int li,
                  int mb, gboolean fwd, gboolean recompute, const pl_shard *x, int ep_index,
                  int *pending);

/* The stage's steps (schedule.c): 2m entries of (forward?, micro-batch). */
typedef struct {
  gboolean fwd;
  int mb;
} pl_step;
void pl_schedule(const cfg_run *c, int stage, pl_step *out);
/* TRUE when step `s` is the stage's last backward (gradients are synchronised during it). */
gboolean pl_schedule_last_backward(const cfg_run *c, pl_step s);

/* Gradient synchronisation (gradsync.c): during the last backward, the gradient collectives of
 * layer i, after its backward kernels; pl_grad_flush after the stage's last layer. */
typedef struct {
  double bytes;     /* gradients in the open DDP bucket */
  double cap;       /* its cap: 1 MiB for the first bucket, --bucket-mb after */
  int end;          /* the open bucket holds the weighted layers of [i, end) */
} pl_grad_state;
void pl_grad_begin(pl_grad_state *g, int end_layer);
void pl_grad_layer(pl_builder *b, pl_grad_state *g, const cfg_run *c, const wl_layer *l, int i,
                   const pl_shard *x, int *pending);
void pl_grad_flush(pl_builder *b, pl_grad_state *g, const cfg_run *c, int first_layer,
                   int *pending);
/* Tied weights whose layers sit on different stages: their gradient sums (after the schedule). */
void pl_grad_tied(pl_builder *b, const wl_model *m, const cfg_run *c, const pl_shard *role,
                  int l0, int l1, int *pending);

/* Memory (memory.c): the parameters this rank holds (tied copies included) and its weights,
 * gradients, optimizer state and activations, into p->local_params and p->mem. */
void pl_memory_plan(pl_rank_plan *p, const wl_model *m, const cfg_run *c, const pl_shard *role);

#endif
