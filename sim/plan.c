/* plan.c — per-rank op lists for data parallelism (DDP buckets) and Gholami et al.'s integrated
 * model × batch grid (1.5D algorithm). Strategies that have not landed are refused by name.
 *
 * Data parallel (tp = pp = 1, no --grid): forward kernels; backward kernels in reverse layer
 * order; each weighted layer's gradient joins the current bucket; a bucket that reaches its cap
 * is all-reduced over dp on the communication stream while backward continues (PyTorch DDP: the
 * first bucket is capped at 1 MiB, the others at --bucket-mb); the optimizer step waits for the
 * last bucket.
 *
 * Grid Pr×Pc (Gholami et al. 2018, §3 and Fig. 5; tp = Pr, dp = Pc): every conv/linear layer in
 * the model-parallel set keeps 1/Pr of its output channels/rows and 1/Pc of the batch.
 *   forward   Y_i block (d_i/Pr × B/Pc), then all-gather inside the Pr group -> d_i × B/Pc
 *   backward  ΔX_i partials all-reduced inside the Pr group: d_{i-1} × B/Pc (the paper charges
 *             d_i·B/Pc, Eq. 3/8; the true size is the layer's input, and the first layer needs no
 *             ΔX at all) — both are reported, see analytic.c;
 *             ΔW_i block (|W_i|/Pr) all-reduced inside the Pc group, overlapping later backward.
 * Layers without weights work on their 1/Pr channel slice. With --grid-layers fc, layers before
 * the first linear layer are batch-parallel over all P (gradients all-reduced over all P per
 * layer) and the activations are redistributed to the grid before it (Eq. 6: an all-gather of
 * d × B/Pc inside the Pr group).
 */
#include "plan.h"

#include <string.h>

#include "dl_common.h"

#define PL_NAME(e, s) s,
static const char *const op_kind_names[] = {PL_OP_KINDS(PL_NAME)};
static const char *const phase_names[] = {PL_PHASES(PL_NAME)};
static const char *const group_names[] = {PL_GROUPS(PL_NAME)};
static const char *const purpose_names[] = {PL_PURPOSES(PL_NAME)};
#undef PL_NAME

const char *pl_op_kind_name(pl_op_kind k) { return op_kind_names[k]; }
const char *pl_phase_name(pl_phase p) { return phase_names[p]; }
const char *pl_group_name(pl_group g) { return group_names[g]; }
const char *pl_purpose_name(pl_purpose p) { return purpose_names[p]; }

#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0) /* torch.distributed _DEFAULT_FIRST_BUCKET_BYTES */

void pl_coords(const cfg_run *c, int rank, int *dp_i, int *tp_i, int *pp_i) {
  *tp_i = rank % c->tp;
  *dp_i = (rank / c->tp) % c->dp;
  *pp_i = rank / (c->tp * c->dp);
}

static int rank_of(const cfg_run *c, int dp_i, int tp_i, int pp_i) {
  return (pp_i * c->dp + dp_i) * c->tp + tp_i;
}

int pl_group_members(const cfg_run *c, pl_group g, int rank, int *members) {
  int dp_i, tp_i, pp_i, n = 0;
  pl_coords(c, rank, &dp_i, &tp_i, &pp_i);
  switch (g) {
  case PL_GRP_WORLD:
  case PL_GRP_EP: /* expert parallelism has not landed: its group is the world for now */
    for (int r = 0; r < c->gpus; r++) members[n++] = r;
    break;
  case PL_GRP_DP:
    for (int i = 0; i < c->dp; i++) members[n++] = rank_of(c, i, tp_i, pp_i);
    break;
  case PL_GRP_TP:
    for (int i = 0; i < c->tp; i++) members[n++] = rank_of(c, dp_i, i, pp_i);
    break;
  case PL_GRP_PP:
    for (int i = 0; i < c->pp; i++) members[n++] = rank_of(c, dp_i, tp_i, i);
    break;
  case PL_N_GROUPS:
    break;
  }
  return n;
}

int pl_grad_bytes(const cfg_run *c) {
  /* Mixed precision keeps fp16/bf16 weights and gradients (fp32 master copy in the optimizer);
   * fp32 and tf32 keep everything in fp32. */
  return gs_precision_bytes(c->precision);
}

/* ---- op list building ------------------------------------------------------------------ */

typedef struct {
  GArray *ops;
  int n_events;
} builder;

static pl_op *push(builder *b, pl_op_kind kind, int stream, pl_phase phase, int layer) {
  pl_op op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.stream = stream;
  op.phase = phase;
  op.layer = layer;
  op.wait_event = -1;
  op.record_event = -1;
  op.peer = -1;
  g_array_append_val(b->ops, op);
  return &g_array_index(b->ops, pl_op, b->ops->len - 1);
}

static pl_op *kernel(builder *b, pl_phase phase, int layer, const char *kname, gboolean gemm_like,
                     double flops, double mem_bytes, int64_t samples, int split) {
  pl_op *op = push(b, PL_KERNEL, PL_STREAM_COMPUTE, phase, layer);
  g_strlcpy(op->kname, kname, sizeof op->kname);
  op->gemm_like = gemm_like;
  op->flops = flops;
  op->mem_bytes = mem_bytes;
  op->samples = samples;
  op->split = split;
  return op;
}

/* A collective on the communication stream after the last compute op. If `blocking`, the next
 * compute op waits for it (activations the next layer needs); otherwise it overlaps. */
static void coll(builder *b, pl_phase phase, int layer, coll_op cop, pl_group g,
                 pl_purpose why, double bytes, gboolean blocking, int *pending_wait) {
  int ev = b->n_events++;
  /* the compute op just pushed records `ev` when it completes */
  pl_op *last = &g_array_index(b->ops, pl_op, b->ops->len - 1);
  if (last->stream == PL_STREAM_COMPUTE && last->record_event < 0) {
    last->record_event = ev;
  } else {
    b->n_events--;
    ev = last->record_event;
  }
  pl_op *op = push(b, PL_COLL, PL_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = cop;
  op->group = g;
  op->purpose = why;
  op->bytes = bytes;
  op->record_event = b->n_events++;
  if (blocking) *pending_wait = op->record_event;
}

static gboolean gemm_like_kind(wl_layer_kind k) {
  return k == WL_CONV2D || k == WL_LINEAR || k == WL_ATTENTION || k == WL_MOE;
}

static int64_t in_elems(const wl_layer *l) { return l->in.c * l->in.h * l->in.w; }

static gboolean refuse(const cfg_run *c, const wl_model *m, GError **err) {
  const char *what = NULL;
  if (c->pp > 1) what = "--pp (pipeline parallelism)";
  else if (c->ep > 1) what = "--ep (expert parallelism)";
  else if (c->domain_conv) what = "--domain conv (domain parallelism)";
  else if (c->tp > 1 && c->tp_style == CFG_TP_MEGATRON) what = "--tp-style megatron";
  if (what) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: not built yet; this version plans data "
                "parallelism and Gholami's Pr x Pc grid (--grid or --tp with --tp-style gholami)",
                what);
    return TRUE;
  }
  for (int i = 0; i < m->n_layers && c->tp > 1; i++) {
    wl_layer_kind k = m->layers[i].kind;
    if (k == WL_ATTENTION || k == WL_MOE || k == WL_EMBEDDING) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' (%s) cannot be split Gholami-style; use --tp-style "
                  "megatron for transformers", c->tp, m->path, m->layers[i].name,
                  wl_layer_kind_name(k));
      return TRUE;
    }
  }
  return FALSE;
}

pl_rank_plan *pl_build(const wl_model *m, const cfg_run *c, int rank, GError **err) {
  if (rank < 0 || rank >= c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "pl_build: rank %d out of range", rank);
    return NULL;
  }
  if (refuse(c, m, err)) return NULL;

  const int P = c->gpus, Pr = c->tp, Pc = c->dp;
  const gboolean grid = c->tp > 1 || c->grid_pr > 0; /* Gholami per-layer collectives */
  const double dt = gs_precision_bytes(c->precision);
  const double gb = pl_grad_bytes(c);
  const int64_t b_grid = c->batch / Pc; /* samples per grid column */
  /* first layer on the grid: with --grid-layers fc, the first linear layer; else layer 0 */
  int first_grid = 0;
  if (grid && c->grid_fc_only) {
    first_grid = m->n_layers;
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].kind == WL_LINEAR) {
        first_grid = i;
        break;
      }
    if (c->batch % P) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--batch %ld: --grid-layers fc runs the convolutions batch-parallel over all "
                  "%d GPUs; use a multiple of %d", c->batch, P, P);
      return NULL;
    }
  }

  builder b = {g_array_new(FALSE, FALSE, sizeof(pl_op)), 0};
  pl_rank_plan *p = g_new0(pl_rank_plan, 1);
  int pending = -1; /* event the next compute op must wait for */
  double act_bytes = 0;
  int64_t local_params = 0;

  /* ---- forward ---- */
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    gboolean on_grid = grid && i >= first_grid;
    int64_t samples = on_grid ? b_grid : (grid ? c->batch / P : c->batch / Pc);
    double split = (on_grid && Pr > 1) ? Pr : 1.0;
    if (on_grid && i == first_grid && first_grid > 0 && Pr > 1) {
      /* Eq. 6: batch-parallel activations -> grid layout (all-gather of the layer input). */
      coll(&b, PL_PH_FWD, i, COLL_ALLGATHER, PL_GRP_TP, PL_WHY_REDIST,
           (double)in_elems(l) * b_grid * dt, TRUE, &pending);
    }
    char kn[40];
    g_snprintf(kn, sizeof kn, "%s.fwd", wl_layer_kind_name(l->kind));
    double mem = ((double)in_elems(l) * samples + (double)l->out_elems * samples / split +
                  (double)l->params / split) * dt;
    pl_op *k = kernel(&b, PL_PH_FWD, i, kn, gemm_like_kind(l->kind),
                      l->fwd_flops * samples / split, mem, samples, (int)split);
    k->wait_event = pending;
    pending = -1;
    gboolean split_weights = on_grid && Pr > 1 && (l->kind == WL_CONV2D || l->kind == WL_LINEAR);
    if (split_weights)
      coll(&b, PL_PH_FWD, i, COLL_ALLGATHER, PL_GRP_TP, PL_WHY_FWD_GATHER,
           (double)l->out_elems * b_grid * dt, TRUE, &pending);
    local_params += (int64_t)(l->params / split);
    double saved = (double)l->saved_elems * samples;
    /* inputs of split conv/linear layers are replicated in the Pr group; other stashes split */
    act_bytes += (split_weights ? saved : saved / split) * dt;
  }

  /* ---- backward ---- */
  const double first_cap = DDP_FIRST_BUCKET_BYTES;
  double bucket = 0, cap = first_cap;
  for (int i = m->n_layers - 1; i >= 0; i--) {
    const wl_layer *l = &m->layers[i];
    gboolean on_grid = grid && i >= first_grid;
    int64_t samples = on_grid ? b_grid : (grid ? c->batch / P : c->batch / Pc);
    double split = (on_grid && Pr > 1) ? Pr : 1.0;
    char kn[40];
    g_snprintf(kn, sizeof kn, "%s.bwd", wl_layer_kind_name(l->kind));
    double flops = l->bwd_flops * samples / split;
    if (c->recompute) flops += l->fwd_flops * samples / split; /* re-run forward */
    double mem = 2.0 * ((double)in_elems(l) * samples + (double)l->out_elems * samples / split +
                        (double)l->params / split) * dt;
    pl_op *k = kernel(&b, PL_PH_BWD, i, kn, gemm_like_kind(l->kind), flops, mem, samples,
                      (int)split);
    k->wait_event = pending;
    pending = -1;
    gboolean split_weights = on_grid && Pr > 1 && (l->kind == WL_CONV2D || l->kind == WL_LINEAR);
    gboolean needs_dx = l->inputs[0] >= 0 || l->n_inputs > 1;
    if (split_weights && needs_dx)
      coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, PL_GRP_TP, PL_WHY_BWD_DX,
           (double)in_elems(l) * b_grid * dt, TRUE, &pending);
    if (!l->weighted || l->params == 0) continue;
    double gbytes = (double)l->params / split * gb;
    if (grid) {
      /* one all-reduce per layer (Gholami Eq. 4/8): over Pc on the grid, over all P before it */
      pl_group g = on_grid ? PL_GRP_DP : PL_GRP_WORLD;
      if ((g == PL_GRP_DP && Pc > 1) || (g == PL_GRP_WORLD && P > 1))
        coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, g, PL_WHY_GRAD, gbytes, FALSE, &pending);
    } else if (Pc > 1) {
      bucket += gbytes;
      if (bucket >= cap) {
        coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, PL_GRP_DP, PL_WHY_GRAD, bucket, FALSE, &pending);
        bucket = 0;
        cap = c->bucket_bytes;
      }
    }
  }
  if (!grid && Pc > 1 && bucket > 0)
    coll(&b, PL_PH_BWD, -1, COLL_ALLREDUCE, PL_GRP_DP, PL_WHY_GRAD, bucket, FALSE, &pending);

  /* ---- optimizer step: waits for the last gradient collective (the stream is in order) ---- */
  int last_comm = -1;
  for (guint i = 0; i < b.ops->len; i++) {
    pl_op *op = &g_array_index(b.ops, pl_op, i);
    if (op->stream == PL_STREAM_COMM) last_comm = op->record_event;
  }
  gboolean adam = m->optimizer == WL_OPT_ADAM;
  gboolean mixed = c->precision == GS_FP16 || c->precision == GS_BF16;
  /* per parameter: SGD-momentum reads w, g, m and writes w, m (3 FLOP); Adam reads w, g, m, v and
   * writes w, m, v (about 10 FLOP); mixed precision also reads/writes the fp32 master copy. */
  double words = adam ? 7 : 5;
  double bytes_pp = words * 4 + (mixed ? 2 * 2 : 0);
  pl_op *opt = kernel(&b, PL_PH_OPT, -1, adam ? "adam.step" : "sgd.step", FALSE,
                      (double)local_params * (adam ? 10 : 3), (double)local_params * bytes_pp, 0, 1);
  opt->wait_event = last_comm;

  p->n_ops = (int)b.ops->len;
  p->ops = (pl_op *)g_array_free(b.ops, FALSE);
  p->n_events = b.n_events;
  p->local_params = local_params;
  p->mem.params = (double)local_params * dt;
  p->mem.grads = (double)local_params * gb;
  /* optimizer state: momentum (SGD) or two moments (Adam) in fp32, plus an fp32 master copy of
   * the weights in mixed precision (Micikevicius et al. 2018; ZeRO's 16 bytes/param for Adam). */
  p->mem.optimizer = (double)local_params * ((adam ? 8 : 4) + (mixed ? 4 : 0));
  p->mem.activations = act_bytes;
  if (c->recompute) {
    /* full checkpointing: keep each block's input, recompute one block at a time */
    double keep = 0, worst = 0, cur = 0;
    int blk = -2;
    for (int i = 0; i < m->n_layers; i++) {
      const wl_layer *l = &m->layers[i];
      int64_t samples = (grid && i >= first_grid) ? b_grid : c->batch / (grid ? P : Pc);
      if (l->block < 0 || l->block != blk) {
        keep += (double)in_elems(l) * samples * dt;
        cur = 0;
        blk = l->block < 0 ? -2 - i : l->block;
      }
      cur += (double)l->saved_elems * samples * dt;
      if (cur > worst) worst = cur;
    }
    p->mem.activations = keep + worst;
  }
  return p;
}

void pl_rank_plan_free(pl_rank_plan *p) {
  if (!p) return;
  g_free(p->ops);
  g_free(p);
}
