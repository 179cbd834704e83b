/* plan.c — the op list's names and its builder (build.h), and freeing a plan. The planner's
 * other files: build.c (a rank's plan), shard.c with gholami.c, megatron.c, domain.c and moe.c
 * (how layers are split), schedule.c, partition.c, gradsync.c, memory.c, layout.c. */
#include <string.h>

#include "plan/build.h"

#define PL_NAME(e, s) s,
static const char *const op_kind_names[] = {PL_OP_KINDS(PL_NAME)};
static const char *const phase_names[] = {PL_PHASES(PL_NAME)};
static const char *const part_names[] = {PL_PARTS(PL_NAME)};
#undef PL_NAME

const char *pl_op_kind_name(pl_op_kind k) { return op_kind_names[k]; }
const char *pl_phase_name(pl_phase p) { return phase_names[p]; }
const char *pl_part_name(pl_part p) { return part_names[p]; }

/* ---- the builder ---------------------------------------------------------------------------- */

pl_op *pl_b_push(pl_builder *b, pl_op_kind kind, int stream, pl_phase phase, int layer) {
  pl_op op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.stream = stream;
  op.phase = phase;
  op.layer = layer;
  op.wait_event = -1;
  op.record_event = -1;
  op.peer = -1;
  op.microbatch = b->mb;
  g_array_append_val(b->ops, op);
  return &g_array_index(b->ops, pl_op, b->ops->len - 1);
}

int pl_b_last_compute_event(pl_builder *b) {
  for (guint i = b->ops->len; i-- > 0;) {
    pl_op *op = &g_array_index(b->ops, pl_op, i);
    if (op->stream != PL_STREAM_COMPUTE) continue;
    if (op->record_event < 0) op->record_event = b->n_events++;
    return op->record_event;
  }
  return -1;
}

pl_op *pl_b_kernel(pl_builder *b, pl_phase phase, int layer, const char *kname,
                   gboolean gemm_like, double flops, double mem_bytes, int64_t samples, int split,
                   int *pending) {
  pl_op *op = pl_b_push(b, PL_KERNEL, PL_STREAM_COMPUTE, phase, layer);
  g_strlcpy(op->kname, kname, sizeof op->kname);
  op->gemm_like = gemm_like;
  op->flops = flops;
  op->mem_bytes = mem_bytes;
  op->samples = samples;
  op->split = split;
  op->wait_event = *pending;
  *pending = -1;
  return op;
}

pl_op *pl_b_coll(pl_builder *b, pl_phase phase, int layer, coll_op cop, pl_group g,
                 pl_purpose why, double bytes, gboolean blocking, int *pending) {
  int ev = pl_b_last_compute_event(b);
  pl_op *op = pl_b_push(b, PL_COLL, PL_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = cop;
  op->group = g;
  op->purpose = why;
  op->bytes = bytes;
  op->record_event = b->n_events++;
  if (blocking) *pending = op->record_event;
  return op;
}

pl_op *pl_b_p2p(pl_builder *b, pl_op_kind kind, pl_phase phase, int layer, int peer, int mb,
                int grad, double bytes, int *pending) {
  int ev = kind == PL_SEND ? pl_b_last_compute_event(b) : -1;
  pl_op *op = pl_b_push(b, kind, PL_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = COLL_SENDRECV; /* how results name point-to-point traffic */
  op->group = PL_GRP_PP;
  op->purpose = grad ? PL_WHY_ACT_GRAD : PL_WHY_ACT;
  op->peer = peer;
  op->tag = mb * 2 + grad;
  op->bytes = bytes;
  if (kind == PL_RECV) {
    op->record_event = b->n_events++;
    *pending = op->record_event;
  }
  return op;
}

void pl_rank_plan_free(pl_rank_plan *p) {
  if (!p) return;
  if (p->pool) g_ptr_array_free(p->pool, TRUE);
  g_free(p->stage_first);
  g_free(p->ops);
  g_free(p);
}
