/* domain.c — domain parallelism as a strategy of the split table (--domain conv with a grid;
 * Gholami et al. 2018, Eq. 7 and 9), its geometry, and its halo messages.
 *
 * In the convolutional part (the layers before the first linear layer) the Pr group splits
 * every image along its height: rank i of the group holds output rows [⌊i·H/Pr⌋, ⌊(i+1)·H/Pr⌋)
 * of each layer (uneven splits and strides handled exactly), weights are replicated and their
 * gradients all-reduced over all P. A windowed layer (convolution or pooling) first exchanges
 * with its two neighbours the input rows its windows reach across the boundary (halo,
 * nonblocking) and computes its interior rows meanwhile, then the boundary rows; backward
 * exchanges the rows of the output gradient likewise. Batch norm sums its statistics over the
 * group (2·C floats each way). The part ends with an all-gather of the activations in the Pr
 * group (or, after a global pooling, an all-reduce of its partial sums); the linear layers then
 * run on the grid.
 */
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/build.h"
#include "plan/strategy.h"

void plan_domain_slab(int n, int parts, int i, int *lo, int *hi) {
  *lo = (int)((int64_t)i * n / parts);
  *hi = (int)((int64_t)(i + 1) * n / parts);
}

/* Input rows a windowed layer's output slab i needs, [lo, hi), clipped to the image. */
static void needs_fwd(const wl_layer *l, int parts, int i, int *lo, int *hi) {
  int olo, ohi;
  plan_domain_slab((int)l->out.h, parts, i, &olo, &ohi);
  int s = MAX(l->stride, 1);
  *lo = MAX(0, olo * s - l->pad);
  *hi = MIN((int)l->in.h, (ohi - 1) * s - l->pad + l->kh);
}

/* Output-gradient rows slab i needs for the input gradient of its input rows, [lo, hi). */
static void needs_bwd(const wl_layer *l, int parts, int i, int *lo, int *hi) {
  int ilo, ihi, s = MAX(l->stride, 1);
  plan_domain_slab((int)l->in.h, parts, i, &ilo, &ihi);
  int a = ilo + l->pad - l->kh + 1, b = ihi - 1 + l->pad;
  *lo = MAX(0, a <= 0 ? 0 : (a + s - 1) / s);
  *hi = MIN((int)l->out.h, b / s + 1);
}

void plan_domain_needs(const wl_layer *l, int parts, int i, int dir, int *lo, int *hi) {
  (dir ? needs_bwd : needs_fwd)(l, parts, i, lo, hi);
}

gboolean plan_domain_windowed(const wl_layer *l) {
  return (l->kind == WL_CONV2D || l->kind == WL_MAXPOOL || l->kind == WL_AVGPOOL) &&
         (l->kh > 1 || l->stride > 1) && l->out.h > 1;
}

int plan_domain_end(const wl_model *m) {
  int end = 0;
  while (
      end < m->n_layers && m->layers[end].kind != WL_LINEAR &&
      (m->layers[end].out.h > 1 || (m->layers[end].in.h > 1 && m->layers[end].kind == WL_AVGPOOL)))
    end++;
  return end;
}

static gboolean applies(const cfg_run *c) { return c->domain_conv; }

/* A halo message's tag: layer, direction, which neighbour receives it (its up = our down),
 * micro-batch; below COLL_TAG_BASE (coll.h) for models of up to DOMAIN_MAX_LAYERS layers. */
static int halo_tag(int layer, int dir, int up, int mb) {
  return 16384 + ((layer * 2 + dir) * 2 + up) * 64 + mb % 64;
}
#define DOMAIN_MAX_LAYERS ((COLL_TAG_BASE - 16384) / 256)

static gboolean check(const wl_model *m, const cfg_run *c, GError **err) {
  if (m->n_layers > DOMAIN_MAX_LAYERS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--domain conv: the workload has %d layers; halo messages are tagged per layer, "
                "for up to %d", m->n_layers, DOMAIN_MAX_LAYERS);
    return FALSE;
  }
  if (c->tp_style == CFG_TP_MEGATRON || c->grid_fc_only) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--domain conv: splits the convolutions' images over Pr, so it combines with "
                "--grid (all layers), not with %s", c->grid_fc_only ? "--grid-layers fc"
                                                                   : "--tp-style megatron");
    return FALSE;
  }
  return TRUE;
}

/* The halo rows of windowed layer `l` for rank tp_i of Pr in direction `dir`. FALSE when they
 * reach beyond a neighbour's slab. */
static gboolean halo_rows(const wl_layer *l, int Pr, int tp_i, int dir, plan_shard *x) {
  const int rows = dir ? (int)l->out.h : (int)l->in.h;
  int own_lo, own_hi, nlo, nhi;
  plan_domain_slab(rows, Pr, tp_i, &own_lo, &own_hi);
  plan_domain_needs(l, Pr, tp_i, dir, &nlo, &nhi);
  x->halo[dir][0][0] = tp_i > 0 ? MAX(0, own_lo - nlo) : 0;
  x->halo[dir][0][1] = tp_i < Pr - 1 ? MAX(0, nhi - own_hi) : 0;
  if (tp_i > 0) { /* what the rank above needs from below its slab */
    int alo, ahi, blo, bhi;
    plan_domain_slab(rows, Pr, tp_i - 1, &alo, &ahi);
    plan_domain_needs(l, Pr, tp_i - 1, dir, &blo, &bhi);
    x->halo[dir][1][0] = MAX(0, bhi - ahi);
  }
  if (tp_i < Pr - 1) {
    int alo, ahi, blo, bhi;
    plan_domain_slab(rows, Pr, tp_i + 1, &alo, &ahi);
    plan_domain_needs(l, Pr, tp_i + 1, dir, &blo, &bhi);
    x->halo[dir][1][1] = MAX(0, alo - blo);
  }
  for (int k = 0; k < 2; k++)
    if (x->halo[dir][0][k] > own_hi - own_lo || x->halo[dir][1][k] > own_hi - own_lo) return FALSE;
  return TRUE;
}

static gboolean roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *r,
                      GError **err) {
  (void)ep_i;
  const int Pr = c->tp;
  const double dt = gpu_precision_bytes(c->precision);
  const int end = plan_domain_end(m);
  for (int i = 0; i < end; i++) {
    const wl_layer *l = &m->layers[i];
    plan_shard *x = &r[i];
    int lo, hi;
    plan_domain_slab((int)l->out.h, Pr, tp_i, &lo, &hi);
    if (hi <= lo && l->out.h > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain conv: layer '%s' has %ld output rows, "
                  "fewer than Pr = %d ranks; use a smaller Pr", l->name, (long)l->out.h, Pr);
      return FALSE;
    }
    if (Pr > 1) { /* the rank holds rows of the image, whole parameters */
      plan_shard_slice(x, PLAN_SPLIT_DOMAIN, l->out.h, Pr, tp_i);
    } else {
      x->kind = PLAN_SPLIT_FULL;
      x->parts = 1;
    }
    x->domain = TRUE;
    x->split = 1;
    x->replicated_stash = FALSE;
    x->redistribute = FALSE;
    x->out_rows = l->out.h > 1 ? hi - lo : 1;
    x->row_share = l->out.h > 1 ? (double)(hi - lo) / (double)l->out.h : 1.0 / Pr;
    x->grad_group = PLAN_GRP_WORLD; /* weights replicated over all P (Eq. 7, 9) */
    x->grad_degree = c->gpus;
    x->fwd_coll = x->bwd_coll = COLL_OP_COUNT;
    x->halo_row_bytes[0] = (double)l->in.w * l->in.c * x->samples * dt;
    x->halo_row_bytes[1] = (double)l->out.w * l->out.c * x->samples * dt;
    if (l->kind == WL_BATCHNORM && Pr > 1) { /* per-channel sums over the whole image */
      x->fwd_coll = x->bwd_coll = COLL_ALLREDUCE;
      x->fwd_why = x->bwd_why = PLAN_WHY_BN_STATS;
      x->fwd_bytes = x->bwd_bytes = 2.0 * l->out.c * 4;
    }
    if (l->kind == WL_AVGPOOL && l->out.h == 1 && Pr > 1) { /* global pool: partial sums */
      x->fwd_coll = COLL_ALLREDUCE;
      x->fwd_why = PLAN_WHY_REDIST;
      x->fwd_bytes = (double)l->out_elems * x->samples * dt;
    }
    if (!plan_domain_windowed(l) || Pr == 1) continue;
    for (int dir = 0; dir < 2; dir++)
      if (!halo_rows(l, Pr, tp_i, dir, x)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain conv: layer '%s' needs more halo "
                    "rows than a neighbour holds; use a smaller Pr", l->name);
        return FALSE;
      }
    int s = MAX(l->stride, 1);
    x->boundary_rows =
        MIN(x->out_rows, (x->halo[0][0][0] + s - 1) / s + (x->halo[0][0][1] + s - 1) / s);
  }
  if (end < m->n_layers && Pr > 1 &&
      !(end > 0 && m->layers[end - 1].kind == WL_AVGPOOL && m->layers[end - 1].out.h == 1)) {
    /* the activations leave the domain split: gather the row slabs in the Pr group */
    r[end].redistribute = TRUE;
    r[end].redist_rows = TRUE;
    r[end].redist_bytes = (double)plan_in_elems(&m->layers[end]) * r[end].samples * dt;
  }
  return TRUE;
}

const plan_strategy plan_domain = {"domain", applies, check, roles};

void plan_domain_halo(plan_builder *b, int rank, const plan_shard *x, int layer, int mb, int dir,
                    int *pending) {
  for (int k = 0; k < 2; k++) { /* sends first: they never block */
    int rows = x->halo[dir][1][k];
    if (!rows) continue;
    int peer = k == 0 ? rank - 1 : rank + 1;
    plan_op *op = plan_b_p2p(b, PLAN_SEND, dir ? PLAN_PH_BWD : PLAN_PH_FWD, layer, peer, mb, 0,
                         rows * x->halo_row_bytes[dir], pending);
    op->group = PLAN_GRP_TP;
    op->purpose = PLAN_WHY_HALO;
    op->tag = halo_tag(layer, dir, 1 - k, mb);
  }
  for (int k = 0; k < 2; k++) {
    int rows = x->halo[dir][0][k];
    if (!rows) continue;
    int peer = k == 0 ? rank - 1 : rank + 1;
    plan_op *op = plan_b_p2p(b, PLAN_RECV, dir ? PLAN_PH_BWD : PLAN_PH_FWD, layer, peer, mb, 0,
                         rows * x->halo_row_bytes[dir], pending);
    op->group = PLAN_GRP_TP;
    op->purpose = PLAN_WHY_HALO;
    op->tag = halo_tag(layer, dir, k, mb);
  }
}
