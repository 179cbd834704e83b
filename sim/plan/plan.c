/* plan.c — per-rank op lists: data parallelism (DDP buckets), Gholami et al.'s integrated
 * model × batch grid (1.5D algorithm), Megatron-style tensor parallelism, and pipelines (GPipe,
 * 1F1B) combined with any of them. Strategies that have not landed are refused by name.
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
 *
 * Megatron tensor parallelism (Shoeybi et al. 2019, §3; tp with --tp-style megatron): a linear
 * layer marked "column" keeps 1/tp of its output features, one marked "row" 1/tp of its input
 * features; the layers between a pair (attention heads, GELU) work on 1/tp. Forward: one
 * all-reduce of the row layer's output (g); backward: one all-reduce of the column layer's input
 * gradient (f). The token embedding is vocabulary-parallel (forward all-reduce of its output) and
 * an output layer tied to it column-parallel over the vocabulary; the loss after it works on
 * 1/tp of the vocabulary and needs two small all-reduces of the rows' statistics (Megatron's
 * parallel cross-entropy: the max of the logits, then Σ exp and the target's logit); other
 * layers are replicated.
 *
 * Pipelines (pp > 1): the layers are cut into pp contiguous stages (pl_partition) and every
 * micro-batch's activations (forward) and their gradients (backward) move between neighbouring
 * stages as point-to-point messages. GPipe runs all m forwards, then all backwards (in reverse
 * micro-batch order, as torchgpipe); 1F1B (PipeDream-Flush, Narayanan et al. 2021) runs
 * pp − stage − 1 warm-up forwards, then alternates one forward and one backward, then drains.
 * Gradients are synchronised during the last micro-batch's backward. With m > 1 and pp = 1 the
 * micro-batches are gradient accumulation: each one's backward follows its forward.
 *
 * Mixture of experts (GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022): an MoE layer is a
 * router kernel, an all-to-all dispatch of the routed tokens to the ranks holding their experts
 * (ep consecutive data-parallel ranks hold E/ep experts each), the experts' kernel, and an
 * all-to-all combine; backward mirrors it. --routing decides how many tokens each expert gets
 * per micro-batch (uniform, zipf:S with a seeded choice of the hot experts per layer and
 * micro-batch, or weights from a file); an expert takes at most capacity = factor · k · tokens / E
 * and drops the rest; the busiest expert sets the pace. Expert gradients are all-reduced among the
 * dp/ep replicas of the same experts, the router's with the rest over dp. Under Megatron tp the
 * layer's tokens are split across the tp group and all-gathered after it (sequence parallel).
 *
 * Domain parallelism (--domain conv with a grid; Gholami et al. 2018, Eq. 7 and 9): in the
 * convolutional part (the layers before the first linear layer) the Pr group splits every image
 * along its height: rank i of the group holds output rows [⌊i·H/Pr⌋, ⌊(i+1)·H/Pr⌋) of each layer
 * (uneven splits and strides handled exactly), weights are replicated and their gradients
 * all-reduced over all P. A windowed layer (convolution or pooling) first exchanges with its two
 * neighbours the input rows its windows reach across the boundary (halo, nonblocking) and
 * computes its interior rows meanwhile, then the boundary rows; backward exchanges the rows of the
 * output gradient likewise. Batch norm sums its statistics over the group (2·C floats each way).
 * The part ends with an all-gather of the activations in the Pr group (or, after a global
 * pooling, an all-reduce of its partial sums); the linear layers then run on the grid.
 */
#include "plan/plan.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"

#define PL_NAME(e, s) s,
static const char *const op_kind_names[] = {PL_OP_KINDS(PL_NAME)};
static const char *const phase_names[] = {PL_PHASES(PL_NAME)};
static const char *const group_names[] = {PL_GROUPS(PL_NAME)};
static const char *const purpose_names[] = {PL_PURPOSES(PL_NAME)};
static const char *const part_names[] = {PL_PARTS(PL_NAME)};
#undef PL_NAME

const char *pl_op_kind_name(pl_op_kind k) { return op_kind_names[k]; }
const char *pl_phase_name(pl_phase p) { return phase_names[p]; }
const char *pl_group_name(pl_group g) { return group_names[g]; }
const char *pl_purpose_name(pl_purpose p) { return purpose_names[p]; }
const char *pl_part_name(pl_part p) { return part_names[p]; }

#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0) /* torch.distributed _DEFAULT_FIRST_BUCKET_BYTES */

void pl_coords(const cfg_run *c, int rank, int *dp_i, int *tp_i, int *pp_i) {
  *tp_i = rank % c->tp;
  *dp_i = (rank / c->tp) % c->dp;
  *pp_i = rank / (c->tp * c->dp);
}

int pl_rank_of(const cfg_run *c, int dp_i, int tp_i, int pp_i) {
  return (pp_i * c->dp + dp_i) * c->tp + tp_i;
}

int pl_group_members(const cfg_run *c, pl_group g, int rank, int *members) {
  int dp_i, tp_i, pp_i, n = 0;
  pl_coords(c, rank, &dp_i, &tp_i, &pp_i);
  switch (g) {
  case PL_GRP_WORLD:
    for (int r = 0; r < c->gpus; r++) members[n++] = r;
    break;
  case PL_GRP_EP: /* ep consecutive data-parallel ranks: together they hold every expert */
    for (int i = 0; i < c->ep; i++) members[n++] = pl_rank_of(c, dp_i / c->ep * c->ep + i, tp_i, pp_i);
    break;
  case PL_GRP_EDP: /* the data-parallel ranks holding the same experts */
    for (int i = dp_i % c->ep; i < c->dp; i += c->ep) members[n++] = pl_rank_of(c, i, tp_i, pp_i);
    break;
  case PL_GRP_DP:
    for (int i = 0; i < c->dp; i++) members[n++] = pl_rank_of(c, i, tp_i, pp_i);
    break;
  case PL_GRP_TP:
    for (int i = 0; i < c->tp; i++) members[n++] = pl_rank_of(c, dp_i, i, pp_i);
    break;
  case PL_GRP_PP:
    for (int i = 0; i < c->pp; i++) members[n++] = pl_rank_of(c, dp_i, tp_i, i);
    break;
  case PL_GRP_EMBED: /* first and last stage of the rank's pipeline (tied embeddings) */
    members[n++] = pl_rank_of(c, dp_i, tp_i, 0);
    if (c->pp > 1) members[n++] = pl_rank_of(c, dp_i, tp_i, c->pp - 1);
    break;
  case PL_N_GROUPS:
    break;
  }
  return n;
}

int pl_group_degree(const cfg_run *c, pl_group g) {
  switch (g) {
  case PL_GRP_WORLD: return c->gpus;
  case PL_GRP_DP: return c->dp;
  case PL_GRP_TP: return c->tp;
  case PL_GRP_PP: return c->pp;
  case PL_GRP_EP: return c->ep;
  case PL_GRP_EMBED: return c->pp > 1 ? 2 : 1;
  case PL_GRP_EDP: return c->ep > 1 ? c->dp / c->ep : 1;
  case PL_N_GROUPS: break;
  }
  return 1;
}

int pl_grad_bytes(const cfg_run *c) {
  /* Mixed precision keeps fp16/bf16 weights and gradients (fp32 master copy in the optimizer);
   * fp32 and tf32 keep everything in fp32. */
  return gs_precision_bytes(c->precision);
}

gboolean pl_layer_has_grads(const wl_layer *l) { return l->weighted && l->params > 0; }

int pl_bucket_layers(const wl_model *m, const pl_op *op, int *layers) {
  int n = 0;
  for (int i = op->bucket.end_layer - 1; i >= op->bucket.first_layer; i--)
    if (op->purpose == PL_WHY_TIED || pl_layer_has_grads(&m->layers[i])) layers[n++] = i;
  return n;
}

/* ---- op list building ------------------------------------------------------------------ */

typedef struct {
  GArray *ops;
  int n_events;
  int mb;       /* micro-batch of the step being built, -1 after the schedule */
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
  op.microbatch = b->mb;
  g_array_append_val(b->ops, op);
  return &g_array_index(b->ops, pl_op, b->ops->len - 1);
}

/* The event recorded when the last compute op completes (created if needed). */
static int last_compute_event(builder *b) {
  for (guint i = b->ops->len; i-- > 0;) {
    pl_op *op = &g_array_index(b->ops, pl_op, i);
    if (op->stream != PL_STREAM_COMPUTE) continue;
    if (op->record_event < 0) op->record_event = b->n_events++;
    return op->record_event;
  }
  return -1;
}

static pl_op *kernel(builder *b, pl_phase phase, int layer, const char *kname, gboolean gemm_like,
                     double flops, double mem_bytes, int64_t samples, int split, int *pending) {
  pl_op *op = push(b, PL_KERNEL, PL_STREAM_COMPUTE, phase, layer);
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

/* A collective on the communication stream once the last compute op is done. If `blocking`, the
 * next compute op waits for it (activations the next layer needs); otherwise it overlaps. */
static pl_op *coll(builder *b, pl_phase phase, int layer, coll_op cop, pl_group g,
                   pl_purpose why, double bytes, gboolean blocking, int *pending) {
  int ev = last_compute_event(b);
  pl_op *op = push(b, PL_COLL, PL_STREAM_COMM, phase, layer);
  op->wait_event = ev;
  op->coll = cop;
  op->group = g;
  op->purpose = why;
  op->bytes = bytes;
  op->record_event = b->n_events++;
  if (blocking) *pending = op->record_event;
  return op;
}

/* Point-to-point: a send leaves once the last compute op is done and never blocks compute; the
 * next compute op waits for a receive. */
static void p2p(builder *b, pl_op_kind kind, pl_phase phase, int layer, int peer, int mb, int grad,
                double bytes, int *pending) {
  int ev = kind == PL_SEND ? last_compute_event(b) : -1;
  pl_op *op = push(b, kind, PL_STREAM_COMM, phase, layer);
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
}


static int64_t in_elems(const wl_layer *l) { return l->in.c * l->in.h * l->in.w; }

/* How one layer is split and which collectives it needs, for this configuration. */
typedef struct {
  int split;            /* compute and weights divided this many ways */
  int64_t samples;      /* samples of one micro-batch on this rank */
  pl_group grad_group;  /* gradient all-reduce group (dp, or world before an fc-only grid) */
  int grad_degree;      /* its size */
  coll_op fwd_coll;     /* collective after the forward kernel, or COLL_OP_COUNT for none */
  pl_purpose fwd_why;
  double fwd_bytes;
  coll_op bwd_coll;     /* collective after the backward kernel, or COLL_OP_COUNT */
  pl_purpose bwd_why;
  double bwd_bytes;
  gboolean redistribute;/* Eq. 6 all-gather before the layer */
  double redist_bytes;
  gboolean replicated_stash; /* its saved input is the whole (replicated) activation */
  /* domain parallelism */
  gboolean domain;      /* this layer's rows are split across the Pr group */
  double row_share;     /* fraction of the layer's output rows (and work) on this rank */
  int halo[2][2][2];    /* [fwd=0/bwd=1][recv=0/send=1][up=0/down=1]: rows exchanged */
  double halo_row_bytes[2]; /* bytes of one row: [0] input row (forward), [1] output row */
  int boundary_rows;    /* output rows that need halo rows */
  int out_rows;         /* output rows on this rank */
} layer_role;

static void roles(const wl_model *m, const cfg_run *c, layer_role *r) {
  const int P = c->gpus, Pr = c->tp, Pc = c->dp, mb = c->microbatches;
  const gboolean megatron = c->tp > 1 && c->tp_style == CFG_TP_MEGATRON;
  const gboolean grid = !megatron && (c->tp > 1 || c->grid_pr > 0);
  const double dt = gs_precision_bytes(c->precision);
  int first_grid = 0;
  if (grid && c->grid_fc_only) {
    first_grid = m->n_layers;
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].kind == WL_LINEAR) {
        first_grid = i;
        break;
      }
  }
  const int64_t mbs = c->batch / Pc / mb;
  gboolean in_pair = FALSE; /* between a Megatron column layer and its row partner */
  gboolean ce_next = FALSE; /* the loss reads logits split over the vocabulary */
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    layer_role *x = &r[i];
    memset(x, 0, sizeof *x);
    x->split = 1;
    x->samples = mbs;
    x->grad_group = PL_GRP_DP;
    x->grad_degree = Pc;
    x->fwd_coll = x->bwd_coll = COLL_OP_COUNT;
    if (grid) {
      gboolean on_grid = i >= first_grid;
      if (!on_grid) {
        x->samples = c->batch / P / mb;
        x->grad_group = PL_GRP_WORLD;
        x->grad_degree = P;
        continue;
      }
      x->split = Pr;
      if (i == first_grid && first_grid > 0 && Pr > 1) {
        x->redistribute = TRUE;
        x->redist_bytes = (double)in_elems(l) * mbs * dt;
      }
      if (Pr > 1 && (l->kind == WL_CONV2D || l->kind == WL_LINEAR)) {
        x->fwd_coll = COLL_ALLGATHER;
        x->fwd_why = PL_WHY_FWD_GATHER;
        x->fwd_bytes = (double)l->out_elems * mbs * dt;
        x->replicated_stash = TRUE;
        if (l->inputs[0] >= 0 || l->n_inputs > 1) {
          x->bwd_coll = COLL_ALLREDUCE;
          x->bwd_why = PL_WHY_BWD_DX;
          x->bwd_bytes = (double)in_elems(l) * mbs * dt;
        }
      }
    } else if (megatron) {
      gboolean vocab_out = l->kind == WL_LINEAR && (l->tied_to >= 0 || (m->vocab > 0 && l->out.c == m->vocab));
      if (l->kind == WL_LINEAR && (l->tp_role == WL_TP_COLUMN || vocab_out)) {
        x->split = Pr;
        x->replicated_stash = TRUE;
        x->bwd_coll = COLL_ALLREDUCE; /* f: sum the partial input gradients */
        x->bwd_why = PL_WHY_BWD_DX;
        x->bwd_bytes = (double)in_elems(l) * mbs * dt;
        in_pair = l->tp_role == WL_TP_COLUMN;
        if (i + 1 < m->n_layers && m->layers[i + 1].kind == WL_SOFTMAX_CE &&
            m->layers[i + 1].inputs[0] == i) {
          /* vocabulary-parallel cross-entropy (Megatron's): the logits' row maxima are
           * all-reduced (max) here, Σ exp(z − max) and the target logit (sum) after the loss */
          x->fwd_coll = COLL_ALLREDUCE;
          x->fwd_why = PL_WHY_FWD_REDUCE;
          x->fwd_bytes = (double)mbs * l->in.h * l->in.w * dt;
          ce_next = TRUE;
        }
      } else if (l->kind == WL_SOFTMAX_CE && ce_next) {
        x->split = Pr; /* its 1/tp of the vocabulary */
        x->fwd_coll = COLL_ALLREDUCE;
        x->fwd_why = PL_WHY_FWD_REDUCE;
        x->fwd_bytes = 2.0 * mbs * l->in.h * l->in.w * dt;
      } else if (l->kind == WL_LINEAR && l->tp_role == WL_TP_ROW) {
        x->split = Pr;
        x->fwd_coll = COLL_ALLREDUCE; /* g: sum the partial outputs */
        x->fwd_why = PL_WHY_FWD_REDUCE;
        x->fwd_bytes = (double)l->out_elems * mbs * dt;
        in_pair = FALSE;
      } else if (in_pair) {
        x->split = Pr; /* attention heads, GELU, dropout of the pair's hidden part */
      } else if (l->kind == WL_MOE) {
        x->split = Pr; /* tokens split across tp, gathered after the layer */
        x->fwd_coll = COLL_ALLGATHER;
        x->fwd_why = PL_WHY_FWD_GATHER;
        x->fwd_bytes = (double)l->out_elems * mbs * dt;
        x->bwd_coll = COLL_ALLGATHER;
        x->bwd_why = PL_WHY_BWD_DX;
        x->bwd_bytes = (double)in_elems(l) * mbs * dt;
      } else if (l->kind == WL_EMBEDDING && l->vocab > 0 && l->vocab == m->vocab) {
        x->split = Pr; /* vocabulary-parallel rows; the partial lookups are summed */
        x->fwd_coll = COLL_ALLREDUCE;
        x->fwd_why = PL_WHY_FWD_REDUCE;
        x->fwd_bytes = (double)l->out_elems * mbs * dt;
      }
    }
  }
}

/* Rows [lo, hi) of slab i when n rows are split into parts. */
static void slab(int n, int parts, int i, int *lo, int *hi) {
  *lo = (int)((int64_t)i * n / parts);
  *hi = (int)((int64_t)(i + 1) * n / parts);
}

/* Input rows a windowed layer's output slab i needs, [lo, hi), clipped to the image. */
static void needs_fwd(const wl_layer *l, int parts, int i, int *lo, int *hi) {
  int olo, ohi;
  slab((int)l->out.h, parts, i, &olo, &ohi);
  int s = MAX(l->stride, 1);
  *lo = MAX(0, olo * s - l->pad);
  *hi = MIN((int)l->in.h, (ohi - 1) * s - l->pad + l->kh);
}

/* Output-gradient rows slab i needs for the input gradient of its input rows, [lo, hi). */
static void needs_bwd(const wl_layer *l, int parts, int i, int *lo, int *hi) {
  int ilo, ihi, s = MAX(l->stride, 1);
  slab((int)l->in.h, parts, i, &ilo, &ihi);
  int a = ilo + l->pad - l->kh + 1, b = ihi - 1 + l->pad;
  *lo = MAX(0, a <= 0 ? 0 : (a + s - 1) / s);
  *hi = MIN((int)l->out.h, b / s + 1);
}

static gboolean windowed(const wl_layer *l) {
  return (l->kind == WL_CONV2D || l->kind == WL_MAXPOOL || l->kind == WL_AVGPOOL) &&
         (l->kh > 1 || l->stride > 1) && l->out.h > 1;
}

static int domain_end(const wl_model *m) {
  int end = 0;
  while (end < m->n_layers && m->layers[end].kind != WL_LINEAR &&
         (m->layers[end].out.h > 1 || (m->layers[end].in.h > 1 && m->layers[end].kind == WL_AVGPOOL)))
    end++;
  return end;
}

int pl_domain_end(const wl_model *m) { return domain_end(m); }
void pl_domain_slab(int n, int parts, int i, int *lo, int *hi) { slab(n, parts, i, lo, hi); }
void pl_domain_needs(const wl_layer *l, int parts, int i, int dir, int *lo, int *hi) {
  (dir ? needs_bwd : needs_fwd)(l, parts, i, lo, hi);
}
gboolean pl_domain_windowed(const wl_layer *l) { return windowed(l); }

/* The domain-parallel roles of layers [0, end) for rank tp_i of the Pr group; returns the index
 * of the first layer after the domain part, or -1 with DL_ERR_INPUT. */
static int domain_roles(const wl_model *m, const cfg_run *c, int tp_i, layer_role *r,
                        GError **err) {
  const int Pr = c->tp;
  const double dt = gs_precision_bytes(c->precision);
  const int end = domain_end(m);
  for (int i = 0; i < end; i++) {
    const wl_layer *l = &m->layers[i];
    layer_role *x = &r[i];
    int lo, hi;
    slab((int)l->out.h, Pr, tp_i, &lo, &hi);
    if (hi <= lo && l->out.h > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain conv: layer '%s' has %ld output rows, "
                  "fewer than Pr = %d ranks; use a smaller Pr", l->name, (long)l->out.h, Pr);
      return -1;
    }
    x->domain = TRUE;
    x->split = 1;
    x->out_rows = l->out.h > 1 ? hi - lo : 1;
    x->row_share = l->out.h > 1 ? (double)(hi - lo) / (double)l->out.h : 1.0 / Pr;
    x->grad_group = PL_GRP_WORLD; /* weights replicated over all P (Eq. 7, 9) */
    x->grad_degree = c->gpus;
    x->fwd_coll = x->bwd_coll = COLL_OP_COUNT;
    x->halo_row_bytes[0] = (double)l->in.w * l->in.c * x->samples * dt;
    x->halo_row_bytes[1] = (double)l->out.w * l->out.c * x->samples * dt;
    if (l->kind == WL_BATCHNORM && Pr > 1) { /* per-channel sums over the whole image */
      x->fwd_coll = x->bwd_coll = COLL_ALLREDUCE;
      x->fwd_why = x->bwd_why = PL_WHY_BN_STATS;
      x->fwd_bytes = x->bwd_bytes = 2.0 * l->out.c * 4;
    }
    if (l->kind == WL_AVGPOOL && l->out.h == 1 && Pr > 1) { /* global pool: partial sums */
      x->fwd_coll = COLL_ALLREDUCE;
      x->fwd_why = PL_WHY_REDIST;
      x->fwd_bytes = (double)l->out_elems * x->samples * dt;
    }
    if (!windowed(l) || Pr == 1) continue;
    for (int dir = 0; dir < 2; dir++) {
      void (*need)(const wl_layer *, int, int, int *, int *) = dir ? needs_bwd : needs_fwd;
      int rows = dir ? (int)l->out.h : (int)l->in.h;
      int own_lo, own_hi, nlo, nhi;
      slab(rows, Pr, tp_i, &own_lo, &own_hi);
      need(l, Pr, tp_i, &nlo, &nhi);
      x->halo[dir][0][0] = tp_i > 0 ? MAX(0, own_lo - nlo) : 0;
      x->halo[dir][0][1] = tp_i < Pr - 1 ? MAX(0, nhi - own_hi) : 0;
      if (tp_i > 0) { /* what the rank above needs from below its slab */
        int alo, ahi, blo, bhi;
        slab(rows, Pr, tp_i - 1, &alo, &ahi);
        need(l, Pr, tp_i - 1, &blo, &bhi);
        x->halo[dir][1][0] = MAX(0, bhi - ahi);
      }
      if (tp_i < Pr - 1) {
        int alo, ahi, blo, bhi;
        slab(rows, Pr, tp_i + 1, &alo, &ahi);
        need(l, Pr, tp_i + 1, &blo, &bhi);
        x->halo[dir][1][1] = MAX(0, alo - blo);
      }
      for (int k = 0; k < 2; k++)
        if (x->halo[dir][0][k] > own_hi - own_lo || x->halo[dir][1][k] > own_hi - own_lo) {
          g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain conv: layer '%s' needs more halo "
                      "rows than a neighbour holds; use a smaller Pr", l->name);
          return -1;
        }
    }
    int s = MAX(l->stride, 1);
    x->boundary_rows = MIN(x->out_rows, (x->halo[0][0][0] + s - 1) / s + (x->halo[0][0][1] + s - 1) / s);
  }
  if (end < m->n_layers && Pr > 1 &&
      !(end > 0 && m->layers[end - 1].kind == WL_AVGPOOL && m->layers[end - 1].out.h == 1)) {
    /* the activations leave the domain split: gather them in the Pr group */
    r[end].redistribute = TRUE;
    r[end].redist_bytes = (double)in_elems(&m->layers[end]) * r[end].samples * dt;
  }
  return end;
}

/* Halo messages of one layer: sends to and receives from the neighbours above and below. */
static void halo(builder *b, int rank, const layer_role *x, int layer, int mb,
                 int dir, int *pending) {
  for (int k = 0; k < 2; k++) { /* sends first: they never block */
    int rows = x->halo[dir][1][k];
    if (!rows) continue;
    int peer = k == 0 ? rank - 1 : rank + 1;
    p2p(b, PL_SEND, dir ? PL_PH_BWD : PL_PH_FWD, layer, peer, mb, 0,
        rows * x->halo_row_bytes[dir], pending);
    pl_op *op = &g_array_index(b->ops, pl_op, b->ops->len - 1);
    op->group = PL_GRP_TP;
    op->purpose = PL_WHY_HALO;
    /* tag: layer, direction, which neighbour receives it (its up = our down), micro-batch */
    op->tag = 16384 + ((layer * 2 + dir) * 2 + (1 - k)) * 64 + mb % 64;
  }
  for (int k = 0; k < 2; k++) {
    int rows = x->halo[dir][0][k];
    if (!rows) continue;
    int peer = k == 0 ? rank - 1 : rank + 1;
    p2p(b, PL_RECV, dir ? PL_PH_BWD : PL_PH_FWD, layer, peer, mb, 0,
        rows * x->halo_row_bytes[dir], pending);
    pl_op *op = &g_array_index(b->ops, pl_op, b->ops->len - 1);
    op->group = PL_GRP_TP;
    op->purpose = PL_WHY_HALO;
    op->tag = 16384 + ((layer * 2 + dir) * 2 + k) * 64 + mb % 64;
  }
}

static gboolean refuse(const cfg_run *c, const wl_model *m, GError **err) {
  if (c->domain_conv && (c->tp_style == CFG_TP_MEGATRON || c->grid_fc_only)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--domain conv: splits the convolutions' images over Pr, so it combines with "
                "--grid (all layers), not with %s", c->grid_fc_only ? "--grid-layers fc"
                                                                   : "--tp-style megatron");
    return TRUE;
  }
  const gboolean megatron = c->tp > 1 && c->tp_style == CFG_TP_MEGATRON;
  for (int i = 0; i < m->n_layers && c->tp > 1; i++) {
    wl_layer_kind k = m->layers[i].kind;
    if (!megatron && (k == WL_ATTENTION || k == WL_MOE || k == WL_EMBEDDING)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' (%s) cannot be split Gholami-style; use --tp-style "
                  "megatron for transformers", c->tp, m->path, m->layers[i].name,
                  wl_layer_kind_name(k));
      return TRUE;
    }
    if (megatron && k == WL_ATTENTION && m->layers[i].heads % c->tp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' has %d attention heads; Megatron splits whole heads, "
                  "so tp must divide them", c->tp, m->path, m->layers[i].name,
                  m->layers[i].heads);
      return TRUE;
    }
    if (megatron && k == WL_LINEAR && m->layers[i].tp_role != WL_TP_NONE &&
        (m->layers[i].tp_role == WL_TP_COLUMN ? m->layers[i].out.c : m->layers[i].in.c) % c->tp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' has %ld %s features; tp must divide them", c->tp,
                  m->path, m->layers[i].name,
                  (long)(m->layers[i].tp_role == WL_TP_COLUMN ? m->layers[i].out.c
                                                               : m->layers[i].in.c),
                  m->layers[i].tp_role == WL_TP_COLUMN ? "output" : "input");
      return TRUE;
    }
    if (megatron && k == WL_CONV2D) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp-style megatron: %s: layer '%s' (%s) has no Megatron split; use --tp-style "
                  "gholami (or --grid) for convolutional networks", m->path, m->layers[i].name,
                  wl_layer_kind_name(k));
      return TRUE;
    }
  }
  if (c->ep > 1 && c->dp % c->ep) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: experts are spread over data-parallel "
                "ranks: ep must divide dp = %d", c->ep, c->dp);
    return TRUE;
  }
  for (int i = 0; i < m->n_layers && c->ep > 1; i++)
    if (m->layers[i].kind == WL_MOE && m->layers[i].experts % c->ep) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: layer '%s' has %d experts; ep must "
                  "divide them", c->ep, m->layers[i].name, m->layers[i].experts);
      return TRUE;
    }
  if (c->grid_fc_only && c->batch % c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--batch %ld: --grid-layers fc runs the convolutions batch-parallel over all "
                "%d GPUs; use a multiple of %d", c->batch, c->gpus, c->gpus);
    return TRUE;
  }
  if (c->grid_fc_only && c->batch % ((long)c->gpus * c->microbatches)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--microbatches %d: --grid-layers fc needs --batch divisible by GPUs x "
                "micro-batches", c->microbatches);
    return TRUE;
  }
  return FALSE;
}

/* ---- pipeline partition ------------------------------------------------------------------- */

gboolean pl_partition(const wl_model *m, const cfg_run *c, const double *layer_time_s,
                      int *stage_first, GError **err) {
  const int n = m->n_layers, pp = c->pp;
  /* units: maximal runs of one residual block, or single layers outside blocks */
  int *unit_first = g_new(int, n + 1), nu = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || m->layers[i].block < 0 || m->layers[i].block != m->layers[i - 1].block)
      unit_first[nu++] = i;
  unit_first[nu] = n;
  gboolean ok = TRUE;
  if (c->n_pp_balance) {
    int at = 0;
    for (int s = 0; s < pp; s++) {
      stage_first[s] = at;
      at += c->pp_balance[s];
    }
    stage_first[pp] = n;
    if (at != n) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: the stage sizes add up to %d "
                  "layers; %s has %d", at, m->name, n);
      ok = FALSE;
    }
    for (int s = 1; s < pp && ok; s++) {
      int f = stage_first[s];
      if (f < n && m->layers[f].block >= 0 && m->layers[f].block == m->layers[f - 1].block) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: stage %d would start inside "
                    "residual block '%s' (at layer '%s'); blocks stay whole", s,
                    m->block_names[m->layers[f].block], m->layers[f].name);
        ok = FALSE;
      }
    }
    g_free(unit_first);
    return ok;
  }
  if (nu < pp) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp %d: %s has only %d pipeline units (residual "
                "blocks and layers outside blocks); use --pp %d or less", pp, m->name, nu, nu);
    g_free(unit_first);
    return FALSE;
  }
  double *pre = g_new0(double, nu + 1); /* prefix sums of unit costs */
  for (int u = 0; u < nu; u++) {
    double cost = 0;
    for (int i = unit_first[u]; i < unit_first[u + 1]; i++)
      cost += layer_time_s ? layer_time_s[i] : m->layers[i].fwd_flops + m->layers[i].bwd_flops;
    pre[u + 1] = pre[u] + cost;
  }
  /* best[s][u]: smallest possible largest stage cost cutting units [0, u) into s stages */
  double *best = g_new(double, (size_t)(pp + 1) * (nu + 1));
  int *cut = g_new(int, (size_t)(pp + 1) * (nu + 1));
#define B(s, u) best[(size_t)(s) * (nu + 1) + (u)]
#define C(s, u) cut[(size_t)(s) * (nu + 1) + (u)]
  for (int u = 0; u <= nu; u++) B(1, u) = pre[u], C(1, u) = 0;
  for (int s = 2; s <= pp; s++)
    for (int u = s; u <= nu; u++) {
      B(s, u) = INFINITY;
      for (int k = s - 1; k < u; k++) {
        double v = MAX(B(s - 1, k), pre[u] - pre[k]);
        if (v < B(s, u) * (1 - 1e-12)) B(s, u) = v, C(s, u) = k;
      }
    }
  int u = nu;
  for (int s = pp; s >= 1; s--) {
    int k = s > 1 ? C(s, u) : 0;
    stage_first[s - 1] = unit_first[k];
    u = k;
  }
  stage_first[pp] = n;
#undef B
#undef C
  g_free(best);
  g_free(cut);
  g_free(pre);
  g_free(unit_first);
  return TRUE;
}

/* ---- mixture of experts -------------------------------------------------------------------- */

static guint64 splitmix64(guint64 *s) {
  guint64 z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void pl_moe_loads(const cfg_run *c, int layer, int mb, int E, double assignments, double *load) {
  double *w = g_new(double, E), total = 0;
  int *rank_of_expert = g_new(int, E);
  for (int e = 0; e < E; e++) rank_of_expert[e] = e;
  if (c->routing_zipf_s > 0) {
    /* which experts are hot: a seeded permutation per layer and micro-batch (Fisher-Yates) */
    guint64 st = ((guint64)c->seed << 32) ^ ((guint64)layer << 16) ^ (guint64)mb;
    for (int e = E - 1; e > 0; e--) {
      int j = (int)(splitmix64(&st) % (guint64)(e + 1));
      int t = rank_of_expert[e];
      rank_of_expert[e] = rank_of_expert[j];
      rank_of_expert[j] = t;
    }
  }
  for (int e = 0; e < E; e++) {
    if (c->routing_zipf_s > 0) w[e] = pow(rank_of_expert[e] + 1.0, -c->routing_zipf_s);
    else if (c->n_routing_weights) w[e] = c->routing_weights[e % c->n_routing_weights];
    else w[e] = 1.0;
    total += w[e];
  }
  /* whole token copies, largest remainder first (ties to the lower expert): deterministic */
  double given = 0;
  double *frac = g_new(double, E);
  for (int e = 0; e < E; e++) {
    double exact = assignments * w[e] / total;
    load[e] = floor(exact);
    frac[e] = exact - load[e];
    given += load[e];
  }
  for (double left = round(assignments - given); left > 0; left--) {
    int best = 0;
    for (int e = 1; e < E; e++)
      if (frac[e] > frac[best]) best = e;
    load[best] += 1;
    frac[best] = -1;
  }
  g_free(frac);
  g_free(w);
  g_free(rank_of_expert);
}

/* Kernels and all-to-alls of one MoE layer for one micro-batch, forward or backward; a
 * recomputed forward (`recompute`) runs in the backward phase and leaves the plan's routing
 * statistics alone. */
static void moe_layer(builder *b, GPtrArray *pool, const cfg_run *c, const wl_layer *l, int li,
                      int mb, gboolean fwd, gboolean recompute, int64_t samples, int split,
                      int ep_index, double dt, pl_rank_plan *p, int *pending) {
  const pl_phase ph = fwd && !recompute ? PL_PH_FWD : PL_PH_BWD;
  const int E = l->experts, ep = c->ep, per = E / ep;
  const double h = (double)l->in.c, ffn = (double)l->ffn;
  const double tokens = (double)samples * l->in.h * l->in.w / split; /* this rank's tokens */
  const double assign = tokens * ep * l->top_k;                        /* the EP group's copies */
  const double cf = c->capacity_factor >= 0 ? c->capacity_factor : l->capacity_factor;
  const double cap = cf > 0 ? ceil(cf * assign / E) : INFINITY;
  double *load = g_new(double, E);
  pl_moe_loads(c, li, mb, E, assign, load);
  double maxl = 0, dropped = 0, mine = 0;
  double *send = g_new0(double, ep), *recv = g_new0(double, ep);
  gboolean even = TRUE;
  for (int e = 0; e < E; e++) {
    double kept = MIN(load[e], cap);
    maxl = MAX(maxl, load[e]);
    dropped += load[e] - kept;
    send[e / per] += kept / ep * h * dt; /* this rank's share of expert e's tokens */
    if (e / per == ep_index) mine += kept;
  }
  for (int j = 0; j < ep; j++) {
    recv[j] = send[ep_index];
    even = even && fabs(send[j] - send[0]) <= 1e-9 * send[0];
  }
  if (fwd && !recompute) {
    double mean = assign / E;
    if (mean > 0 && maxl / mean > p->moe_max_over_mean) p->moe_max_over_mean = maxl / mean;
    p->moe_dropped_tokens += dropped / ep;
    p->moe_routed_tokens += assign / ep;
  }
  const double expert_params = (double)per * (double)wl_moe_expert_params(l);
  const double router_flops = tokens * 2 * h * E, expert_flops = mine * (4 * h * ffn + ffn + h);
  const double router_bytes = tokens * (h + E) * dt + h * E * dt;
  const double expert_bytes = mine * 2 * (h + ffn) * dt + expert_params * dt;
  const char *dir = fwd ? "fwd" : "bwd";
  const double k = fwd ? 1 : 2; /* backward: input and weight gradients */
  char kn[40];
  /* one all-to-all in each direction, tokens to experts then back */
  for (int step = 0; step < 4; step++) {
    /* forward: router, dispatch (to experts), experts, combine; backward: combine's gradient
     * (to experts), experts, dispatch's gradient (back to the tokens), router */
    gboolean to_experts = fwd ? step == 1 : step == 0;
    if ((fwd && step == 0) || (!fwd && step == 3)) { /* router */
      g_snprintf(kn, sizeof kn, "moe.router.%s", dir);
      pl_op *op = kernel(b, ph, li, kn, TRUE, k * router_flops, k * router_bytes, samples, split,
                         pending);
      op->part = PL_PART_ROUTER;
      op->recompute = recompute;
    } else if ((fwd && step == 2) || (!fwd && step == 1)) { /* experts */
      g_snprintf(kn, sizeof kn, "moe.experts.%s", dir);
      pl_op *op = kernel(b, ph, li, kn, TRUE, k * expert_flops, k * expert_bytes, samples, split,
                         pending);
      op->part = PL_PART_EXPERTS;
      op->recompute = recompute;
    } else if (ep > 1) { /* all-to-all */
      gboolean dispatch = fwd ? step == 1 : step == 2;
      double total = 0;
      for (int j = 0; j < ep; j++) total += send[j];
      pl_op *op = coll(b, ph, li, COLL_ALLTOALL, PL_GRP_EP,
                       dispatch ? PL_WHY_MOE_DISPATCH : PL_WHY_MOE_COMBINE, total, TRUE, pending);
      if (!even) {
        double *s = g_memdup2(to_experts ? send : recv, sizeof(double) * ep);
        double *r = g_memdup2(to_experts ? recv : send, sizeof(double) * ep);
        g_ptr_array_add(pool, s);
        g_ptr_array_add(pool, r);
        op->peer_send_bytes = s;
        op->peer_recv_bytes = r;
        op->bytes = 0;
        for (int j = 0; j < ep; j++) op->bytes += s[j];
      }
    }
  }
  g_free(send);
  g_free(recv);
  g_free(load);
}

/* ---- one layer's kernels -------------------------------------------------------------------- */

/* The kernel of one layer in one direction (dir 0 forward, 1 backward) for the whole layer's
 * `flops`/`mem` (divided by the tp split already). Domain-parallel layers run their share of the
 * rows; a windowed one exchanges halo rows while it computes its interior rows, then computes the
 * rows next to the boundary. */
static void layer_kernels(builder *b, int rank, const layer_role *x, int layer,
                          int mb, int dir, const char *kn, gboolean gemm_like, double flops,
                          double mem, int *pending) {
  const pl_phase ph = dir ? PL_PH_BWD : PL_PH_FWD;
  double share = x->domain ? x->row_share : 1.0;
  gboolean halos = x->domain && (x->halo[dir][0][0] || x->halo[dir][0][1] || x->halo[dir][1][0] ||
                                 x->halo[dir][1][1]);
  if (!halos) {
    kernel(b, ph, layer, kn, gemm_like, flops * share, mem * share, x->samples, x->split, pending);
    return;
  }
  int before = *pending; /* what the layer waited for anyway */
  *pending = -1;
  halo(b, rank, x, layer, mb, dir, pending);
  int halo_ev = *pending; /* the last receive (the stream completes them in order) */
  double edge = x->out_rows > 0 ? (double)MIN(x->boundary_rows, x->out_rows) / x->out_rows : 0;
  *pending = before;
  pl_op *k = kernel(b, ph, layer, kn, gemm_like, flops * share * (1 - edge),
                    mem * share * (1 - edge), x->samples, x->split, pending);
  k->part = PL_PART_INTERIOR;
  *pending = halo_ev;
  k = kernel(b, ph, layer, kn, gemm_like, flops * share * edge, mem * share * edge, x->samples,
             x->split, pending);
  k->part = PL_PART_BOUNDARY;
}

/* ---- the schedule of one stage -------------------------------------------------------------- */

typedef struct {
  gboolean fwd;
  int mb;
} step;

/* Writes the stage's sequence of forward/backward micro-batch steps (2m entries). */
static void schedule(const cfg_run *c, int stage, step *out) {
  const int m = c->microbatches, pp = c->pp;
  int n = 0;
  if (pp == 1) { /* gradient accumulation: each micro-batch's backward right after its forward */
    for (int k = 0; k < m; k++) {
      out[n++] = (step){TRUE, k};
      out[n++] = (step){FALSE, k};
    }
  } else if (c->schedule == CFG_SCHED_1F1B) {
    int warm = MIN(pp - stage - 1, m), f = 0, b = 0;
    for (; f < warm; f++) out[n++] = (step){TRUE, f};
    while (f < m) {
      out[n++] = (step){TRUE, f++};
      out[n++] = (step){FALSE, b++};
    }
    while (b < m) out[n++] = (step){FALSE, b++};
  } else {
    for (int f = 0; f < m; f++) out[n++] = (step){TRUE, f};
    for (int b = m - 1; b >= 0; b--) out[n++] = (step){FALSE, b};
  }
}

pl_rank_plan *pl_build(const wl_model *m, const cfg_run *c, const double *layer_time_s, int rank,
                       GError **err) {
  if (rank < 0 || rank >= c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "pl_build: rank %d out of range", rank);
    return NULL;
  }
  if (refuse(c, m, err)) return NULL;
  int dp_i, tp_i, pp_i;
  pl_coords(c, rank, &dp_i, &tp_i, &pp_i);
  int *stage_first = g_new(int, c->pp + 1);
  if (!pl_partition(m, c, layer_time_s, stage_first, err)) {
    g_free(stage_first);
    return NULL;
  }
  const int l0 = stage_first[pp_i], l1 = stage_first[pp_i + 1];
  /* every input of the stage comes from inside it, or from the previous stage's last layer */
  for (int i = l0; i < l1; i++)
    for (int k = 0; k < m->layers[i].n_inputs; k++) {
      int src = m->layers[i].inputs[k];
      if (src >= l0 || (src == l0 - 1 && l0 > 0) || (src < 0 && l0 == 0)) continue;
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--pp %d: layer '%s' (stage %d) reads '%s' from an earlier stage; only the "
                  "previous stage's output crosses a stage boundary", c->pp, m->layers[i].name,
                  pp_i, src < 0 ? "input" : m->layers[src].name);
      g_free(stage_first);
      return NULL;
    }

  const double dt = gs_precision_bytes(c->precision);
  const double gb = pl_grad_bytes(c);
  const gboolean bucketed = !(c->tp > 1 && c->tp_style == CFG_TP_GHOLAMI) && c->grid_pr == 0;
  layer_role *role = g_new(layer_role, m->n_layers);
  roles(m, c, role);
  if (c->domain_conv && domain_roles(m, c, tp_i, role, err) < 0) {
    g_free(role);
    g_free(stage_first);
    return NULL;
  }
  const int prev = pp_i > 0 ? rank - c->tp * c->dp : -1;
  const int next = pp_i < c->pp - 1 ? rank + c->tp * c->dp : -1;

  builder b = {g_array_new(FALSE, FALSE, sizeof(pl_op)), 0, -1};
  pl_rank_plan *p = g_new0(pl_rank_plan, 1);
  GPtrArray *pool = p->pool = g_ptr_array_new_with_free_func(g_free);
  p->stage = pp_i;
  p->first_layer = l0;
  p->end_layer = l1;
  p->stage_first = stage_first;
  int pending = -1;
  const int nsteps = 2 * c->microbatches;
  step *steps = g_new(step, nsteps);
  schedule(c, pp_i, steps);
  int inflight = 0;
  for (int st = 0; st < nsteps; st++) {
    const int mb = b.mb = steps[st].mb;
    /* the last backward of the schedule: GPipe runs backwards in reverse micro-batch order */
    const gboolean last_mb = steps[st].fwd ? FALSE : (c->schedule == CFG_SCHED_GPIPE && c->pp > 1
                                                          ? mb == 0
                                                          : mb == c->microbatches - 1);
    if (steps[st].fwd) {
      inflight++;
      if (inflight > p->max_stash) p->max_stash = inflight;
      if (prev >= 0) {
        const wl_layer *in = &m->layers[l0 - 1];
        p2p(&b, PL_RECV, PL_PH_FWD, l0, prev, mb, 0,
            (double)in->out_elems * role[l0 - 1].samples * dt, &pending);
      }
      for (int i = l0; i < l1; i++) {
        const wl_layer *l = &m->layers[i];
        const layer_role *x = &role[i];
        if (x->redistribute)
          coll(&b, PL_PH_FWD, i, COLL_ALLGATHER, PL_GRP_TP, PL_WHY_REDIST, x->redist_bytes, TRUE,
               &pending);
        if (l->kind == WL_MOE) {
          moe_layer(&b, pool, c, l, i, mb, TRUE, FALSE, x->samples, x->split, dp_i % c->ep, dt, p,
                    &pending);
        } else {
          char kn[40];
          g_snprintf(kn, sizeof kn, "%s.fwd", wl_layer_kind_name(l->kind));
          double mem = ((double)in_elems(l) * x->samples +
                        (double)l->out_elems * x->samples / x->split + (double)l->params / x->split) * dt;
          layer_kernels(&b, rank, x, i, mb, 0, kn, wl_kind_gemm_like(l->kind),
                        l->fwd_flops * x->samples / x->split, mem, &pending);
        }
        if (x->fwd_coll != COLL_OP_COUNT)
          coll(&b, PL_PH_FWD, i, x->fwd_coll, PL_GRP_TP, x->fwd_why, x->fwd_bytes, TRUE, &pending);
      }
      if (next >= 0)
        p2p(&b, PL_SEND, PL_PH_FWD, l1 - 1, next, mb, 0,
            (double)m->layers[l1 - 1].out_elems * role[l1 - 1].samples * dt, &pending);
      continue;
    }
    inflight--;
    if (next >= 0)
      p2p(&b, PL_RECV, PL_PH_BWD, l1 - 1, next, mb, 1,
          (double)m->layers[l1 - 1].out_elems * role[l1 - 1].samples * dt, &pending);
    double bucket = 0, cap = DDP_FIRST_BUCKET_BYTES;
    int bucket_end = l1; /* the open bucket holds the weighted layers of [i, bucket_end) */
    for (int i = l1 - 1; i >= l0; i--) {
      const wl_layer *l = &m->layers[i];
      const layer_role *x = &role[i];
      if (l->kind == WL_MOE) {
        if (c->recompute)
          moe_layer(&b, pool, c, l, i, mb, TRUE, TRUE, x->samples, x->split, dp_i % c->ep, dt,
                    p, &pending);
        moe_layer(&b, pool, c, l, i, mb, FALSE, FALSE, x->samples, x->split, dp_i % c->ep, dt,
                  p, &pending);
      } else {
        char kn[40];
        const double fwd_mem = ((double)in_elems(l) * x->samples +
                                (double)l->out_elems * x->samples / x->split +
                                (double)l->params / x->split) * dt;
        if (c->recompute) { /* the forward again, from the stashed block input */
          g_snprintf(kn, sizeof kn, "%s.fwd", wl_layer_kind_name(l->kind));
          const double share = x->domain ? x->row_share : 1.0;
          pl_op *k = kernel(&b, PL_PH_BWD, i, kn, wl_kind_gemm_like(l->kind),
                            l->fwd_flops * x->samples / x->split * share, fwd_mem * share,
                            x->samples, x->split, &pending);
          k->recompute = TRUE;
        }
        g_snprintf(kn, sizeof kn, "%s.bwd", wl_layer_kind_name(l->kind));
        layer_kernels(&b, rank, x, i, mb, 1, kn, wl_kind_gemm_like(l->kind),
                      l->bwd_flops * x->samples / x->split, 2.0 * fwd_mem, &pending);
      }
      if (x->bwd_coll != COLL_OP_COUNT)
        coll(&b, PL_PH_BWD, i, x->bwd_coll, PL_GRP_TP, x->bwd_why, x->bwd_bytes, TRUE, &pending);
      if (!last_mb || !pl_layer_has_grads(l)) continue;
      double gbytes = (double)l->params / x->split * gb;
      if (l->kind == WL_MOE) {
        /* experts: among the replicas of the same experts; the router joins the bucket below */
        double expert = (double)l->experts / c->ep * (double)wl_moe_expert_params(l) * gb;
        if (c->dp / c->ep > 1) {
          /* with ep = 1 every rank holds every expert: the replicas are the dp group */
          pl_op *op = coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, c->ep > 1 ? PL_GRP_EDP : PL_GRP_DP,
                           PL_WHY_EXPERT_GRAD, expert, FALSE, &pending);
          op->bucket = (pl_bucket){i, i + 1};
        }
        gbytes = (double)wl_moe_router_params(l) * gb;
      }
      if (x->grad_degree <= 1) continue;
      if (!bucketed) {
        pl_op *op = coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, x->grad_group, PL_WHY_GRAD, gbytes,
                         FALSE, &pending);
        op->bucket = (pl_bucket){i, i + 1};
        continue;
      }
      bucket += gbytes;
      if (bucket >= cap) {
        pl_op *op = coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, x->grad_group, PL_WHY_GRAD, bucket,
                         FALSE, &pending);
        op->bucket = (pl_bucket){i, bucket_end};
        bucket_end = i;
        bucket = 0;
        cap = c->bucket_bytes;
      }
    }
    if (last_mb && bucketed && bucket > 0) {
      pl_op *op = coll(&b, PL_PH_BWD, -1, COLL_ALLREDUCE, PL_GRP_DP, PL_WHY_GRAD, bucket, FALSE,
                       &pending);
      op->bucket = (pl_bucket){l0, bucket_end};
    }
    if (prev >= 0)
      p2p(&b, PL_SEND, PL_PH_BWD, l0, prev, mb, 1,
          (double)m->layers[l0 - 1].out_elems * role[l0 - 1].samples * dt, &pending);
  }
  g_free(steps);
  b.mb = -1; /* what follows belongs to the iteration, not to a micro-batch */

  /* tied weights whose layers sit on different stages: sum their gradients (first <-> last) */
  int64_t local_params = 0;
  for (int i = l0; i < l1; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->kind == WL_MOE) { /* the router, and E/ep experts */
      local_params += wl_moe_router_params(l) + l->experts / c->ep * wl_moe_expert_params(l);
    } else {
      local_params += l->params / role[i].split;
    }
  }
  for (int i = 0; i < m->n_layers; i++) {
    int t = m->layers[i].tied_to;
    if (t < 0 || c->pp == 1) continue;
    gboolean here_i = i >= l0 && i < l1, here_t = t >= l0 && t < l1;
    if (here_i == here_t) continue; /* both here, or neither */
    double bytes = (double)m->layers[t].params / role[t].split * gb;
    if (here_i) {
      local_params += m->layers[t].params / role[t].split; /* a copy of the weights */
      /* the copy is in no bucket: its data-parallel sum first (Megatron does the same) */
      if (c->dp > 1)
        coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, PL_GRP_DP, PL_WHY_TIED, bytes, FALSE, &pending)
            ->bucket = (pl_bucket){i, i + 1};
    }
    coll(&b, PL_PH_BWD, i, COLL_ALLREDUCE, PL_GRP_EMBED, PL_WHY_TIED, bytes, FALSE, &pending)
        ->bucket = (pl_bucket){i, i + 1};
  }

  /* ---- optimizer step: waits for the last collective (the stream is in order) ---- */
  int last_comm = -1;
  for (guint i = 0; i < b.ops->len; i++) {
    pl_op *op = &g_array_index(b.ops, pl_op, i);
    if (op->stream == PL_STREAM_COMM && op->record_event >= 0) last_comm = op->record_event;
  }
  gboolean adam = m->optimizer == WL_OPT_ADAM;
  gboolean mixed = c->precision == GS_FP16 || c->precision == GS_BF16;
  /* per parameter: SGD-momentum reads w, g, m and writes w, m (3 FLOP); Adam reads w, g, m, v and
   * writes w, m, v (about 10 FLOP); mixed precision also reads/writes the fp32 master copy. */
  double words = adam ? 7 : 5;
  double bytes_pp = words * 4 + (mixed ? 2 * 2 : 0);
  pending = last_comm;
  kernel(&b, PL_PH_OPT, -1, adam ? "adam.step" : "sgd.step", FALSE,
         (double)local_params * (adam ? 10 : 3), (double)local_params * bytes_pp, 0, 1, &pending)
      ->params = local_params;

  p->n_ops = (int)b.ops->len;
  p->ops = (pl_op *)g_array_free(b.ops, FALSE);
  p->n_events = b.n_events;
  p->local_params = local_params;
  p->mem.params = (double)local_params * dt;
  p->mem.grads = (double)local_params * gb;
  /* optimizer state: momentum (SGD) or two moments (Adam) in fp32, plus an fp32 master copy of
   * the weights in mixed precision (Micikevicius et al. 2018; ZeRO's 16 bytes/param for Adam). */
  p->mem.optimizer = (double)local_params * ((adam ? 8 : 4) + (mixed ? 4 : 0));
  /* activations: what the stage keeps per micro-batch, times the micro-batches in flight */
  double per_mb = 0, keep = 0, worst = 0, cur = 0;
  int blk = -2;
  for (int i = l0; i < l1; i++) {
    const wl_layer *l = &m->layers[i];
    const layer_role *x = &role[i];
    double saved = (double)l->saved_elems * x->samples * dt * (x->domain ? x->row_share : 1.0);
    per_mb += x->replicated_stash ? saved : saved / x->split;
    if (l->block < 0 || l->block != blk) { /* recomputation keeps each block's input */
      keep += (double)in_elems(l) * x->samples * dt;
      cur = 0;
      blk = l->block < 0 ? -2 - i : l->block;
    }
    cur += x->replicated_stash ? saved : saved / x->split;
    if (cur > worst) worst = cur;
  }
  p->mem.activations = c->recompute ? keep * p->max_stash + worst : per_mb * p->max_stash;
  g_free(role);
  return p;
}

void pl_rank_plan_free(pl_rank_plan *p) {
  if (!p) return;
  if (p->pool) g_ptr_array_free(p->pool, TRUE);
  g_free(p->stage_first);
  g_free(p->ops);
  g_free(p);
}
