/* build.c — one rank's op list for one training iteration (plan_build, plan.h).
 *
 * The stage's schedule (schedule.c) is walked step by step. A forward step receives the previous
 * stage's activations, runs each layer's kernels (split as the split table says, shard.c) and the
 * collectives the split needs, and sends its output on; a backward step mirrors it in reverse
 * layer order, with the gradient collectives of the stage's last backward (gradsync.c). After the
 * schedule come the sums of tied weights across stages and the optimizer step, which waits for
 * the last collective. Pipelines (pp > 1) cut the layers into contiguous stages (partition.c);
 * every micro-batch's activations (forward) and their gradients (backward) move between
 * neighbouring stages as point-to-point messages.
 */
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/build.h"

/* How many ways a layer's kernels divide its work: its split, times its sequence split. */
static int kernel_split(const plan_shard *x) { return x->split * x->seq_parts; }

/* A kernel of layer `layer` held as `x` says, its work divided by kernel_split(x): the share of
 * the tokens that context parallelism gives it is named apart (kdb_kernel's seq), as it is
 * another shape than the same split of the channels. */
static plan_op *shard_kernel(plan_builder *b, plan_phase ph, int layer, const char *kn,
                             gboolean gemm_like, double flops, double mem, const plan_shard *x,
                             int *pending) {
  plan_op *k = plan_b_kernel(b, ph, layer, kn, gemm_like, flops, mem, x->samples,
                             kernel_split(x), pending);
  if (x->cp_parts > 1) {
    k->split /= x->cp_parts;
    k->seq = x->cp_parts;
  }
  return k;
}

/* The kernels of one layer in one direction (dir 0 forward, 1 backward) for the layer's work
 * `flops`/`mem` on this rank (divided by the split already). Domain-parallel layers run their
 * share of the rows; a windowed one exchanges halo rows while it computes its interior rows,
 * then computes the rows next to the boundary. */
static void layer_kernels(plan_builder *b, int rank, const plan_shard *x, int layer, int mb,
                          int dir, const char *kn, gboolean gemm_like, double flops, double mem,
                          int *pending) {
  const plan_phase ph = dir ? PLAN_PH_BWD : PLAN_PH_FWD;
  double share = x->domain ? x->row_share : 1.0;
  gboolean halos = x->domain && (x->halo[dir][0][0] || x->halo[dir][0][1] || x->halo[dir][1][0] ||
                                 x->halo[dir][1][1]);
  if (!halos) {
    shard_kernel(b, ph, layer, kn, gemm_like, flops * share, mem * share, x, pending);
    return;
  }
  int before = *pending; /* what the layer waited for anyway */
  *pending = -1;
  plan_domain_halo(b, rank, x, layer, mb, dir, pending);
  int halo_ev = *pending; /* the last receive (the stream completes them in order) */
  double edge = x->out_rows > 0 ? (double)MIN(x->boundary_rows, x->out_rows) / x->out_rows : 0;
  *pending = before;
  plan_op *k = plan_b_kernel(b, ph, layer, kn, gemm_like, flops * share * (1 - edge),
                         mem * share * (1 - edge), x->samples, x->split, pending);
  k->part = PLAN_PART_INTERIOR;
  *pending = halo_ev;
  k = plan_b_kernel(b, ph, layer, kn, gemm_like, flops * share * edge, mem * share * edge,
                  x->samples, x->split, pending);
  k->part = PLAN_PART_BOUNDARY;
}

/* Bytes one layer's kernel moves in forward: its input, its share of the output and of the
 * weights (backward moves twice as much); a sequence split divides the activations. */
static double fwd_mem(const wl_layer *l, const plan_shard *x, double dt) {
  return (((double)plan_in_elems(l) * x->samples +
           (double)l->out_elems * x->samples / x->split) / x->seq_parts +
          (double)l->params / x->split) * dt;
}

/* Everything that stays the same during the build. */
typedef struct {
  const wl_model *m;
  const cfg_run *c;
  const plan_shard *role;
  int rank, ep_i;
  int l0, l1;        /* the stage's layers */
  int prev, next;    /* the previous and next stage's rank, -1 for none */
  double dt;         /* bytes per activation element */
  plan_units *units; /* --zero 3, --fsdp: the stage's units (fsdp.c), NULL otherwise */
  int V;             /* model chunks per rank (1 without interleaving) */
  int tag_prev, tag_next; /* the chunk whose boundary with the previous (next) virtual stage a
                             message crosses: the lower side's; tags are (mb·V + it)·2 + grad */
} stage_ctx;

/* Megatron's scatter/gather of the tensors between stages under tp
 * (scatter_gather_tensors_in_pipeline; Narayanan et al. 2021, Section 4.1): each tp rank sends
 * 1/tp of the boundary tensor to its peer, and the receiving stage all-gathers it over the tp
 * group (NVLink inside the node) before using it. */
static gboolean scatter_gather(const cfg_run *c) {
  return c->pp_scatter_gather > 0 && c->tp > 1 && c->tp_style == CFG_TP_MEGATRON;
}

/* Each tp rank sends 1/tp of the boundary tensor: Megatron's scatter/gather, or the sequence
 * shard that sequence parallelism leaves on it (no gather after: the next stage's first layer
 * works on the shard). */
static gboolean split_boundary(const cfg_run *c) {
  return scatter_gather(c) || c->sequence_parallel;
}

/* The output of layer `at` (or its gradient) crossing a stage boundary: bytes of the whole
 * tensor, and what one rank sends. */
static double boundary_bytes(const stage_ctx *s, int at) {
  return (double)s->m->layers[at].out_elems * s->role[at].samples * s->dt / s->c->cp;
}

static void boundary_send(plan_builder *b, const stage_ctx *s, plan_phase ph, int layer, int peer,
                          int tag_mb, int at, int *pending) {
  const double whole = boundary_bytes(s, at);
  plan_b_p2p(b, PLAN_SEND, ph, layer, peer, tag_mb, ph == PLAN_PH_BWD,
             split_boundary(s->c) ? whole / s->c->tp : whole, pending);
}

/* A receive across a boundary; the next compute op waits for it (and for its gather). */
static void boundary_recv(plan_builder *b, const stage_ctx *s, plan_phase ph, int layer, int peer,
                          int tag_mb, int at, int *pending) {
  const double whole = boundary_bytes(s, at);
  const gboolean grad = ph == PLAN_PH_BWD;
  plan_b_p2p(b, PLAN_RECV, ph, layer, peer, tag_mb, grad,
             split_boundary(s->c) ? whole / s->c->tp : whole, pending);
  if (scatter_gather(s->c) && !s->c->sequence_parallel)
    plan_b_coll(b, ph, layer, COLL_ALLGATHER, PLAN_GRP_TP, grad ? PLAN_WHY_ACT_GRAD : PLAN_WHY_ACT,
                whole, TRUE, pending);
}

/* --autocast: the bytes of layer `l`'s weights on this rank that autocast casts (a GEMM-like
 * layer with weights; a tied output layer casts its table), 0 for none. One cast reads them in
 * fp32 and writes them in 16 bits (6 bytes a parameter); the gradient's cast back in backward
 * the same. MoE experts are not modelled. */
static double autocast_bytes(const wl_model *m, const cfg_run *c, const wl_layer *l,
                             const plan_shard *x) {
  if (!c->autocast || (l->kind != WL_LINEAR && l->kind != WL_CONV2D)) return 0;
  int64_t w = l->params ? l->params : l->tied_to >= 0 ? m->layers[l->tied_to].params : 0;
  return 6.0 * (double)w / x->split;
}

static void autocast_kernel(plan_builder *b, const stage_ctx *s, int i, plan_phase ph,
                            const char *kn, int *pending) {
  const plan_shard *x = &s->role[i];
  const double bytes = autocast_bytes(s->m, s->c, &s->m->layers[i], x);
  if (bytes > 0) plan_b_kernel(b, ph, i, kn, FALSE, 0, bytes, x->samples, x->split, pending);
}

static plan_op *cp_p2p(plan_builder *b, plan_op_kind kind, plan_phase ph, int layer, int peer,
                       int tag, double bytes, int *pending) {
  plan_op *op = plan_b_p2p(b, kind, ph, layer, peer, 0, 0, bytes, pending);
  op->group = PLAN_GRP_CP;
  op->purpose = PLAN_WHY_CP_KV;
  op->tag = tag;
  return op;
}

/* Attention layer i under context parallelism (context.c): forward (dir 0) or backward (dir 1),
 * or a recomputed forward in backward. Ring: cp steps, each the attention of the local queries
 * against one K/V chunk (1/cp of the rank's work) while the chunk moves on around the ring (K
 * and V forward; K, V and their gradients backward, whose last chunk's gradients then go home).
 * Ulysses: all-to-alls over the cp group around the whole attention. */
static void cp_attention(plan_builder *b, const stage_ctx *s, int i, int dir, gboolean recompute,
                         int *pending) {
  const wl_layer *l = &s->m->layers[i];
  const plan_shard *x = &s->role[i];
  const cfg_run *c = s->c;
  const int cp = c->cp, ks = kernel_split(x);
  const plan_phase ph = dir || recompute ? PLAN_PH_BWD : PLAN_PH_FWD;
  char kn[40];
  wl_kernel_name(kn, sizeof kn, l->kind, dir ? "bwd" : "fwd");
  const double flops = (dir ? l->bwd_flops : l->fwd_flops) * x->samples / ks;
  const double mem = (dir ? 2.0 : 1.0) * fwd_mem(l, x, s->dt);
  const double pos = (double)l->in.h * l->in.w;
  if (c->cp_style == CFG_CP_ULYSSES) {
    const double qkv = (double)plan_in_elems(l) * x->samples * s->dt / ks,
                 out = (double)l->out_elems * x->samples * s->dt / ks;
    plan_b_coll(b, ph, i, COLL_ALLTOALL, PLAN_GRP_CP, PLAN_WHY_CP_ALLTOALL, dir ? out : qkv, TRUE,
                pending)->recompute = recompute;
    plan_op *k = plan_b_kernel(b, ph, i, kn, TRUE, flops, mem, x->samples, ks, pending);
    k->recompute = recompute;
    plan_b_coll(b, ph, i, COLL_ALLTOALL, PLAN_GRP_CP, PLAN_WHY_CP_ALLTOALL, dir ? qkv : out, TRUE,
                pending)->recompute = recompute;
    return;
  }
  /* the rank's K and V: the QKV's channels beyond the queries', for its 1/cp of the tokens */
  const double kv = (double)(l->in.c - l->out.c) / x->split * (pos / cp) * x->samples * s->dt;
  const int next = plan_cp_neighbour(c, s->rank, 1), prev = plan_cp_neighbour(c, s->rank, -1);
  const int tag = PLAN_CP_TAG_BASE + (dir ? 2 : 0) + (recompute ? 1 : 0);
  int arrived = *pending; /* what the first step waits for: the layer's input */
  for (int j = 0; j < cp; j++) {
    int got = -1;
    /* forward: this chunk's K and V on to the next rank as soon as they are here, the next
     * chunk's in from the previous rank. Backward, message j carries the K and V of the chunk
     * held (up to j = cp − 2) and, from j = 1, the gradients of the chunk held before, with
     * this rank's share: it leaves once that step's kernel is done (TransformerEngine's ring) */
    const double bytes = dir ? (j < cp - 1 ? kv : 0) + (j > 0 ? kv : 0) : j < cp - 1 ? kv : 0;
    if (bytes > 0) {
      plan_op *snd = cp_p2p(b, PLAN_SEND, ph, i, next, tag, bytes, &got);
      if (j > 0 && !dir) snd->wait_event = -1; /* it forwards what just arrived: stream order */
      cp_p2p(b, PLAN_RECV, ph, i, prev, tag, bytes, &got);
    }
    int wait = arrived;
    /* a block: this rank's 1/cp of the queries against one 1/cp of the keys and values */
    shard_kernel(b, ph, i, kn, TRUE, flops / cp, mem / cp, x, &wait)->recompute = recompute;
    arrived = got;
  }
  *pending = -1;
  if (dir) { /* the gradients of the chunk held last go home once they have this rank's share */
    cp_p2p(b, PLAN_SEND, ph, i, next, tag, kv, pending);
    cp_p2p(b, PLAN_RECV, ph, i, prev, tag, kv, pending);
  }
}

static void forward_step(plan_builder *b, plan_rank *p, const stage_ctx *s, int mb,
                         int *pending) {
  const wl_model *m = s->m;
  if (s->prev >= 0)
    boundary_recv(b, s, PLAN_PH_FWD, s->l0, s->prev, mb * s->V + s->tag_prev, s->l0 - 1, pending);
  if (s->units) plan_units_fwd_begin(b, s->units, s->c, pending);
  for (int i = s->l0; i < s->l1; i++) {
    const wl_layer *l = &m->layers[i];
    const plan_shard *x = &s->role[i];
    if (s->units) plan_units_fwd_layer(b, s->units, s->c, i, pending);
    if (x->redistribute)
      plan_b_coll(b, PLAN_PH_FWD, i, COLL_ALLGATHER, PLAN_GRP_TP, PLAN_WHY_REDIST, x->redist_bytes,
                  TRUE, pending);
    if (l->kind == WL_MOE) {
      plan_moe_layer(b, p, s->c, l, i, mb, TRUE, FALSE, x, s->ep_i, pending);
    } else if (l->kind == WL_ATTENTION && s->c->cp > 1) {
      cp_attention(b, s, i, 0, FALSE, pending);
    } else {
      char kn[40];
      autocast_kernel(b, s, i, PLAN_PH_FWD, "cast.fwd", pending);
      wl_kernel_name(kn, sizeof kn, l->kind, "fwd");
      layer_kernels(b, s->rank, x, i, mb, 0, kn, wl_kind_gemm_like(l->kind),
                    l->fwd_flops * x->samples / kernel_split(x), fwd_mem(l, x, s->dt), pending);
    }
    if (x->fwd_coll != COLL_OP_COUNT)
      plan_b_coll(b, PLAN_PH_FWD, i, x->fwd_coll, PLAN_GRP_TP, x->fwd_why, x->fwd_bytes, TRUE,
                  pending);
  }
  if (s->next >= 0)
    boundary_send(b, s, PLAN_PH_FWD, s->l1 - 1, s->next, mb * s->V + s->tag_next, s->l1 - 1,
                  pending);
}

/* Sequence parallelism: the replicated weights of the layers that saw 1/tp of the tokens (norms,
 * a position table) have partial gradients on each tp rank, summed over tp once per iteration
 * before the data-parallel sync (Megatron's all-reduce of the layer-norm gradients). */
static void sp_norm_grads(plan_builder *b, const stage_ctx *s, int *pending) {
  if (!s->c->sequence_parallel) return;
  double n = 0;
  for (int i = s->l0; i < s->l1; i++) /* split by tp beyond context parallelism's share */
    if (s->role[i].seq_parts > s->c->cp) n += (double)s->m->layers[i].params;
  if (n > 0)
    plan_b_coll(b, PLAN_PH_BWD, s->l0, COLL_ALLREDUCE, PLAN_GRP_TP, PLAN_WHY_SP_NORM_GRAD,
                n * plan_grad_bytes(s->c), TRUE, pending);
}

/* The gradient collectives of stage chunk `s`, after the schedule (see build()). */
static void grad_sync_after(plan_builder *b, const stage_ctx *s, int *pending) {
  plan_grad_state g;
  plan_grad_begin(&g, s->l1);
  for (int i = s->l1 - 1; i >= s->l0; i--)
    plan_grad_layer(b, &g, s->c, &s->m->layers[i], i, &s->role[i], pending);
  sp_norm_grads(b, s, pending);
  plan_grad_flush(b, &g, s->c, s->l0, pending);
}

static void backward_step(plan_builder *b, plan_rank *p, const stage_ctx *s, int mb,
                          gboolean sync_grads, int *pending) {
  const wl_model *m = s->m;
  const cfg_run *c = s->c;
  if (s->next >= 0)
    boundary_recv(b, s, PLAN_PH_BWD, s->l1 - 1, s->next, mb * s->V + s->tag_next, s->l1 - 1,
                  pending);
  plan_grad_state g;
  plan_grad_begin(&g, s->l1);
  if (s->units) plan_units_bwd_begin(b, s->units, c, pending);
  for (int i = s->l1 - 1; i >= s->l0; i--) {
    const wl_layer *l = &m->layers[i];
    const plan_shard *x = &s->role[i];
    if (s->units) plan_units_bwd_layer(b, s->units, c, i, pending);
    if (x->bwd_pre_coll != COLL_OP_COUNT) /* sequence parallel: the whole input or dY first */
      plan_b_coll(b, PLAN_PH_BWD, i, x->bwd_pre_coll, PLAN_GRP_TP, x->bwd_pre_why,
                  x->bwd_pre_bytes, TRUE, pending);
    if (l->kind == WL_MOE) {
      if (c->recompute) plan_moe_layer(b, p, c, l, i, mb, TRUE, TRUE, x, s->ep_i, pending);
      plan_moe_layer(b, p, c, l, i, mb, FALSE, FALSE, x, s->ep_i, pending);
    } else if (l->kind == WL_ATTENTION && c->cp > 1) {
      /* recomputation (selective or full) runs the ring or the all-to-alls again */
      if (c->recompute || plan_selective_attention(c, l)) cp_attention(b, s, i, 0, TRUE, pending);
      cp_attention(b, s, i, 1, FALSE, pending);
    } else {
      char kn[40];
      /* the forward again: full, from the stashed block input; selective, the attention core
       * from its kept QKV, its probabilities not kept (Korthikanti et al. 2022, §5) */
      if (c->recompute || plan_selective_attention(c, l)) {
        autocast_kernel(b, s, i, PLAN_PH_BWD, "cast.fwd", pending);
        wl_kernel_name(kn, sizeof kn, l->kind, "fwd");
        const double share = x->domain ? x->row_share : 1.0;
        shard_kernel(b, PLAN_PH_BWD, i, kn, wl_kind_gemm_like(l->kind),
                     l->fwd_flops * x->samples / kernel_split(x) * share,
                     fwd_mem(l, x, s->dt) * share, x, pending)->recompute = TRUE;
        /* full: the forward's tensor-parallel sum again, as Megatron's checkpointed forward
         * runs its all-reduces (reduce-scatters under sp) again (the selective core has none) */
        if (c->recompute && x->fwd_coll != COLL_OP_COUNT)
          plan_b_coll(b, PLAN_PH_BWD, i, x->fwd_coll, PLAN_GRP_TP, x->fwd_why, x->fwd_bytes, TRUE,
                      pending)->recompute = TRUE;
      }
      wl_kernel_name(kn, sizeof kn, l->kind, "bwd");
      layer_kernels(b, s->rank, x, i, mb, 1, kn, wl_kind_gemm_like(l->kind),
                    l->bwd_flops * x->samples / kernel_split(x), 2.0 * fwd_mem(l, x, s->dt),
                    pending);
      autocast_kernel(b, s, i, PLAN_PH_BWD, "cast.bwd", pending);
    }
    if (x->bwd_coll != COLL_OP_COUNT)
      plan_b_coll(b, PLAN_PH_BWD, i, x->bwd_coll, PLAN_GRP_TP, x->bwd_why, x->bwd_bytes, TRUE,
                  pending);
    if (s->units) plan_units_bwd_layer_done(b, s->units, c, i, pending);
    else if (sync_grads) plan_grad_layer(b, &g, c, l, i, x, pending);
  }
  if (sync_grads) sp_norm_grads(b, s, pending);
  if (s->units) plan_units_bwd_end(b, s->units, c, pending);
  else if (sync_grads) plan_grad_flush(b, &g, c, s->l0, pending);
  if (s->prev >= 0)
    boundary_send(b, s, PLAN_PH_BWD, s->l0, s->prev, mb * s->V + s->tag_prev, s->l0 - 1, pending);
}

/* The optimizer step: waits for the last collective (the stream is in order). Per parameter:
 * SGD-momentum reads w, g, m and writes w, m (3 FLOP); Adam reads w, g, m, v and writes w, m, v
 * (about 10 FLOP); mixed precision also reads and writes the fp32 master copy. */
static void optimizer_step(plan_builder *b, plan_rank *p, const wl_model *m, const cfg_run *c) {
  int last_comm = -1;
  for (guint i = b->ops->len; i-- > 0 && last_comm < 0;) {
    const plan_op *op = &g_array_index(b->ops, plan_op, i);
    if (op->stream == PLAN_STREAM_COMM && op->record_event >= 0) last_comm = op->record_event;
  }
  const gboolean adam = m->optimizer == WL_OPT_ADAM;
  /* Megatron's mixed precision: the step also writes the 16-bit model copy (autocast has none) */
  const gboolean mixed = (c->precision == GPU_FP16 || c->precision == GPU_BF16) && !c->autocast;
  const double bytes_pp = (adam ? 7 : 5) * 4 + (mixed ? 2 * 2 : 0);
  /* with ZeRO or FSDP the step updates this rank's shard of its parameters */
  const int N = plan_shard_degree(c);
  const int64_t n = (p->local_params + N - 1) / N; /* shards padded to equal sizes, as FSDP pads */
  plan_op *op = plan_b_kernel(b, PLAN_PH_OPT, -1, adam ? "adam.step" : "sgd.step", FALSE,
                              (double)n * (adam ? 10 : 3), (double)n * bytes_pp, 0, 1, &last_comm);
  op->params = n;
  /* sharded parameters are gathered from what the step wrote */
  if (c->zero || c->fsdp != CFG_FSDP_NONE) op->record_event = p->step_event = b->n_events++;
}

/* The stage's layers [l0, l1) of the partition; DL_ERR_INPUT when a layer reads across more
 * than one stage boundary. */
static gboolean stage_layers(const wl_model *m, const cfg_run *c, const int *stage_first,
                             int pp_i, int *l0, int *l1, GError **err) {
  *l0 = stage_first[pp_i], *l1 = stage_first[pp_i + 1];
  /* every input of the stage comes from inside it, or from the previous stage's last layer */
  for (int i = *l0; i < *l1; i++)
    for (int k = 0; k < m->layers[i].n_inputs; k++) {
      int src = m->layers[i].inputs[k];
      if (src >= *l0 || (src == *l0 - 1 && *l0 > 0) || (src < 0 && *l0 == 0)) continue;
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--pp %d: layer '%s' (stage %d) reads '%s' from an earlier stage; only the "
                  "previous stage's output crosses a stage boundary", c->pp, m->layers[i].name,
                  pp_i, src < 0 ? "input" : m->layers[src].name);
      return FALSE;
    }
  return TRUE;
}

/* Whether layer `l` reads the output of layer `j`. */
static gboolean layer_reads(const wl_layer *l, int j) {
  for (int k = 0; k < l->n_inputs; k++)
    if (l->inputs[k] == j) return TRUE;
  return FALSE;
}

/* What plan_mark_warm asks of a kernel name (NAME_*), remembered by the name's pointer for the
 * names seen lately: an op list repeats a few interned names (and literals) over and over. */
enum { NAME_FWD = 1, NAME_BWD = 2, NAME_CAST = 4 };
typedef struct {
  const char *name[16];
  int flags[16];
} name_memo;

static int name_flags(name_memo *nm, const char *kn) {
  const guint h = (guint)(((uintptr_t)kn >> 3) ^ ((uintptr_t)kn >> 9)) & 15;
  if (nm->name[h] != kn) {
    nm->name[h] = kn;
    nm->flags[h] = (g_str_has_suffix(kn, ".fwd") ? NAME_FWD : 0) |
                   (g_str_has_suffix(kn, ".bwd") ? NAME_BWD : 0) |
                   (g_str_has_prefix(kn, "cast.") ? NAME_CAST : 0);
  }
  return nm->flags[h];
}

/* Marks the kernels whose input the previous kernel of the compute stream has just written:
 * a forward after the forward of the layer it reads, a backward after the backward of a layer
 * that reads it (the gradient of its output), autocast's casts in between or not. Layers split
 * over ranks (their channels, or their tokens: seq) are left out: their tensors are not whole on
 * the rank. What the kernel gains from it is the database's to say (ktime_kernel_s). */
static void plan_mark_warm(plan_rank *p, const wl_model *m, const cfg_run *c) {
  if (c->domain_conv) return; /* images split by rows: no layer's tensors are whole */
  const double dt = gpu_precision_bytes(c->precision);
  const plan_op *q = NULL;
  int qf = 0; /* q's name_flags */
  name_memo nm = {{NULL}, {0}};
  for (int i = 0; i < p->n_ops; i++) {
    plan_op *op = &p->ops[i];
    if (op->stream != PLAN_STREAM_COMPUTE) continue;
    const int f = name_flags(&nm, op->kname);
    if (op->kind == PLAN_KERNEL && q && q->kind == PLAN_KERNEL && op->layer >= 0 &&
        q->layer >= 0 && op->split == 1 && q->split == 1 && !op->seq && !q->seq &&
        q->microbatch == op->microbatch) {
      const wl_layer *l = &m->layers[op->layer];
      const gboolean fwd = f & NAME_FWD, qfwd = qf & NAME_FWD;
      const double n = (double)op->samples;
      if (fwd && qfwd && layer_reads(l, q->layer)) {
        op->warm_bytes = (double)m->layers[q->layer].out_elems * n * dt;
        op->out_bytes = (double)l->out_elems * n * dt;
      } else if (!fwd && !qfwd && (f & NAME_BWD) &&
                 layer_reads(&m->layers[q->layer], op->layer)) {
        op->warm_bytes = (double)l->out_elems * n * dt;
        op->out_bytes = (double)l->in.c * l->in.h * l->in.w * n * dt;
      }
    }
    /* autocast's weight casts do not count: small next to the activations they sit between */
    if (!(f & NAME_CAST)) q = op, qf = f;
  }
}

/* plan_build, or with !ops plan_build_memory. */
static plan_rank *build(const wl_model *m, const cfg_run *c, const double *layer_time_s, int rank,
                        gboolean ops, GError **err) {
  if (rank < 0 || rank >= c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "plan_build: rank %d out of range", rank);
    return NULL;
  }
  if (!plan_shard_check(m, c, err)) return NULL;
  int dp_i, tp_i, pp_i;
  plan_coords(c, rank, &dp_i, &tp_i, &pp_i);
  const int V = MAX(1, c->virtual_stages), nv = c->pp * V; /* chunks per rank, virtual stages */
  int *stage_first = g_new(int, nv + 1);
  plan_shard *role = g_new(plan_shard, m->n_layers);
  stage_ctx *chunk = g_new(stage_ctx, V); /* chunk v: virtual stage v·pp + pp_i */
  gboolean ok = plan_partition(m, c, layer_time_s, stage_first, err) &&
                plan_shard_plan(m, c, tp_i, dp_i % c->ep, role, err);
  const int prev = plan_rank_of(c, dp_i, tp_i, (pp_i + c->pp - 1) % c->pp);
  const int next = plan_rank_of(c, dp_i, tp_i, (pp_i + 1) % c->pp);
  for (int v = 0; v < V && ok; v++) {
    const int j = v * c->pp + pp_i;
    stage_ctx *s = &chunk[v];
    *s = (stage_ctx){m, c, role, rank, dp_i % c->ep, 0, 0, j > 0 ? prev : -1,
                     j < nv - 1 ? next : -1, gpu_precision_bytes(c->precision), NULL, V,
                     (j - 1) / c->pp, v};
    ok = stage_layers(m, c, stage_first, j, &s->l0, &s->l1, err);
  }
  if (!ok) {
    g_free(stage_first);
    g_free(role);
    g_free(chunk);
    return NULL;
  }
  int span = 0; /* the rank's layers */
  for (int v = 0; v < V; v++) span += chunk[v].l1 - chunk[v].l0;

  /* a few ops per layer and micro-batch: grown once or twice, not copied over and over */
  plan_builder b = {g_array_sized_new(FALSE, FALSE, sizeof(plan_op),
                                      ops ? (guint)MIN(1u << 24, 8u * (guint)(span + 1) *
                                                                     (guint)c->microbatches + 64)
                                          : 0),
                    0, -1, {NULL}};
  plan_rank *p = g_new0(plan_rank, 1);
  p->pool = g_ptr_array_new_with_free_func(g_free);
  p->step_event = -1;
  p->stage = pp_i;
  p->first_layer = chunk[0].l0;
  p->end_layer = chunk[0].l1;
  p->stage_first = stage_first;
  p->n_chunks = V;
  p->chunk_stride = c->pp;
  int pending = -1;
  int in_all = 0; /* micro-batch chunks whose activations are kept */
  if (ops && plan_sharded_units(c))
    chunk[0].units = plan_units_new(m, c, role, chunk[0].l0, chunk[0].l1);
  for (int v = 0; v < V && ops; v++)
    plan_zero_gathers(&b, m, c, role, chunk[v].l0, chunk[v].l1, &pending);
  /* Beside a pipeline the gradients are reduced after the schedule, chunk by chunk, layers in
   * reverse order (Megatron's finalize_model_grads): queued on the communication stream during
   * a stage's last backward they would hold the pipeline's sends and receives behind them, which
   * Megatron runs on their own communicator (and stream) whether it overlaps the reduction or
   * not. (ZeRO 2 and 3 and FSDP, which reduce as they go, do not run beside a pipeline: fsdp.c.) */
  const gboolean grads_after = c->pp > 1;
  const int nsteps = 2 * c->microbatches * V;
  plan_step *steps = g_new(plan_step, nsteps);
  plan_schedule(c, pp_i, steps);
  for (int st = 0; st < nsteps; st++) {
    b.mb = steps[st].mb;
    stage_ctx *s = &chunk[steps[st].chunk];
    if (steps[st].fwd) {
      in_all++;
      p->max_stash = MAX(p->max_stash, in_all);
      if (ops) forward_step(&b, p, s, steps[st].mb, &pending);
    } else {
      in_all--;
      /* ZeRO 2 reduces the gradients of every micro-batch: only shards are accumulated */
      if (ops)
        backward_step(&b, p, s, steps[st].mb,
                      c->zero == 2 || (!grads_after && plan_schedule_last_backward(c, steps[st])),
                      &pending);
    }
  }
  b.mb = -1; /* what follows belongs to the iteration, not to a micro-batch */
  for (int v = 0; v < V && ops && grads_after; v++) grad_sync_after(&b, &chunk[v], &pending);
  if (ops) plan_grad_tied(&b, p, m, c, role, &pending);
  plan_units_free(chunk[0].units);
  g_free(chunk);
  plan_memory_fill(p, m, c, role, steps);
  g_free(steps);
  plan_sharded_memory(p, m, c, role);
  if (ops) optimizer_step(&b, p, m, c);
  p->n_ops = (int)b.ops->len;
  p->ops = (plan_op *)g_array_free(b.ops, FALSE);
  p->n_events = b.n_events;
  g_free(role);
  if (ops) plan_mark_warm(p, m, c);
  return p;
}

plan_rank *plan_build(const wl_model *m, const cfg_run *c, const double *layer_time_s, int rank,
                      GError **err) {
  return build(m, c, layer_time_s, rank, TRUE, err);
}

plan_rank *plan_build_memory(const wl_model *m, const cfg_run *c, const double *layer_time_s,
                             int rank, GError **err) {
  return build(m, c, layer_time_s, rank, FALSE, err);
}
