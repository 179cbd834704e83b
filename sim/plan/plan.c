/* plan.c — the op list's names and its builder (build.h), and freeing a plan. The planner's
 * other files: build.c (a rank's plan), shard.c with gholami.c, megatron.c, domain.c and moe.c
 * (how layers are split), schedule.c, partition.c, gradsync.c, memory.c, layout.c. */
#include <string.h>

#include "plan/build.h"

#define PLAN_NAME(e, s) s,
static const char *const op_kind_names[] = {PLAN_OP_KINDS(PLAN_NAME)};
static const char *const phase_names[] = {PLAN_PHASES(PLAN_NAME)};
static const char *const part_names[] = {PLAN_PARTS(PLAN_NAME)};
#undef PLAN_NAME

const char *plan_op_kind_name(plan_op_kind k) { return op_kind_names[k]; }
const char *plan_phase_name(plan_phase p) { return phase_names[p]; }
const char *plan_part_name(plan_part p) { return part_names[p]; }

/* ---- the builder ---------------------------------------------------------------------------- */

void plan_op_init(plan_op *op) {
  memset(op, 0, sizeof *op);
  op->kname = "";
  op->layer = -1;
  op->wait_event = -1;
  op->record_event = -1;
  op->peer = -1;
  op->fixed_s = -1;
  op->comm = -1;
}

plan_op *plan_b_push(plan_builder *b, plan_op_kind kind, int stream, plan_phase phase, int layer) {
  plan_op op;
  plan_op_init(&op);
  op.kind = kind;
  op.stream = stream;
  op.phase = phase;
  op.layer = layer;
  op.microbatch = b->mb;
  g_array_append_val(b->ops, op);
  return &g_array_index(b->ops, plan_op, b->ops->len - 1);
}

int plan_b_last_compute_event(plan_builder *b) {
  for (guint i = b->ops->len; i-- > 0;) {
    plan_op *op = &g_array_index(b->ops, plan_op, i);
    if (op->stream != PLAN_STREAM_COMPUTE) continue;
    if (op->record_event < 0) op->record_event = b->n_events++;
    return op->record_event;
  }
  return -1;
}

plan_op *plan_b_kernel(plan_builder *b, plan_phase phase, int layer, const char *kname,
                   gboolean gemm_like, double flops, double mem_bytes, int64_t samples, int split,
                   int *pending) {
  plan_op *op = plan_b_push(b, PLAN_KERNEL, PLAN_STREAM_COMPUTE, phase, layer);
  const char **slot = &b->knames[g_str_hash(kname) % G_N_ELEMENTS(b->knames)];
  if (!*slot || strcmp(*slot, kname) != 0) *slot = g_intern_string(kname);
  op->kname = *slot;
  op->gemm_like = gemm_like;
  op->flops = flops;
  op->mem_bytes = mem_bytes;
  op->samples = samples;
  op->split = split;
  op->wait_event = *pending;
  *pending = -1;
  return op;
}

plan_op *plan_b_coll(plan_builder *b, plan_phase phase, int layer, coll_op cop, plan_group g,
                 plan_purpose why, double bytes, gboolean blocking, int *pending) {
  int ev = plan_b_last_compute_event(b);
  plan_op *op = plan_b_push(b, PLAN_COLL, PLAN_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = cop;
  op->group = g;
  op->purpose = why;
  op->bytes = bytes;
  op->record_event = b->n_events++;
  if (blocking) *pending = op->record_event;
  return op;
}

plan_op *plan_b_p2p(plan_builder *b, plan_op_kind kind, plan_phase phase, int layer, int peer,
                    int mb, int grad, double bytes, int *pending) {
  int ev = kind == PLAN_SEND ? plan_b_last_compute_event(b) : -1;
  plan_op *op = plan_b_push(b, kind, PLAN_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = COLL_SENDRECV; /* how results name point-to-point traffic */
  op->group = PLAN_GRP_PP;
  op->purpose = grad ? PLAN_WHY_ACT_GRAD : PLAN_WHY_ACT;
  op->peer = peer;
  op->tag = mb * 2 + grad;
  op->bytes = bytes;
  if (kind == PLAN_RECV) {
    op->record_event = b->n_events++;
    *pending = op->record_event;
  }
  return op;
}

gboolean plan_holds_layer(const plan_rank *p, int i) {
  for (int v = 0; v < p->n_chunks; v++) {
    int l0, l1;
    plan_chunk_layers(p, v, &l0, &l1);
    if (i >= l0 && i < l1) return TRUE;
  }
  return FALSE;
}

void plan_rank_free(plan_rank *p) {
  if (!p) return;
  if (p->viewed) { /* borrows everything it points to */
    g_free(p);
    return;
  }
  if (p->pool) g_ptr_array_free(p->pool, TRUE);
  g_free(p->stage_first);
  g_free(p->ops);
  g_free(p);
}

plan_rank *plan_view(const plan_rank *rep, int rep_rank, int rank) {
  plan_rank *v = g_memdup2(rep, sizeof *v);
  v->viewed = rep->viewed ? rep->viewed : rep;
  v->peer_shift = rep->peer_shift + (rank - rep_rank);
  return v;
}

int plan_op_peer(const plan_rank *p, const plan_op *op) {
  return op->peer < 0 ? -1 : op->peer + p->peer_shift;
}
