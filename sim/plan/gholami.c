/* gholami.c — Gholami et al.'s integrated model × batch grid as a strategy of the split table
 * (Gholami, Azad, Jin, Keutzer, Buluç 2018, §3 and Fig. 5; --grid PrxPc, or --tp with
 * --tp-style gholami: tp = Pr, dp = Pc).
 *
 * Every conv/linear layer on the grid keeps 1/Pr of its output channels/rows and 1/Pc of the
 * batch:
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
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/strategy.h"

static gboolean applies(const cfg_run *c) {
  const gboolean megatron = c->tp > 1 && c->tp_style == CFG_TP_MEGATRON;
  return !megatron && (c->tp > 1 || c->grid_pr > 0);
}

static gboolean check(const wl_model *m, const cfg_run *c, GError **err) {
  if (c->sequence_parallel) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--sequence-parallel: %s has no Megatron column/row "
                "pairs to split the sequence around; it goes with --tp-style megatron", m->path);
    return FALSE;
  }
  for (int i = 0; i < m->n_layers && c->tp > 1; i++) {
    wl_layer_kind k = m->layers[i].kind;
    if (k == WL_ATTENTION || k == WL_MOE || k == WL_EMBEDDING || k == WL_ROPE || k == WL_SWIGLU) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' (%s) cannot be split Gholami-style; use --tp-style "
                  "megatron for transformers", c->tp, m->path, m->layers[i].name,
                  wl_layer_kind_name(k));
      return FALSE;
    }
  }
  if (c->grid_fc_only && c->batch % c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--batch %ld: --grid-layers fc runs the convolutions batch-parallel over all "
                "%d GPUs; use a multiple of %d", c->batch, c->gpus, c->gpus);
    return FALSE;
  }
  if (c->grid_fc_only && c->batch % ((long)c->gpus * c->microbatches)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--microbatches %d: --grid-layers fc needs --batch divisible by GPUs x "
                "micro-batches", c->microbatches);
    return FALSE;
  }
  return TRUE;
}

static gboolean roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                      GError **err) {
  (void)ep_i, (void)err;
  const int P = c->gpus, Pr = c->tp;
  const double dt = gpu_precision_bytes(c->precision);
  const int64_t mbs = plan_row_samples(c);
  int first_grid = 0; /* the first layer on the grid */
  if (c->grid_fc_only) {
    first_grid = m->n_layers;
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].kind == WL_LINEAR) {
        first_grid = i;
        break;
      }
  }
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    plan_shard *x = &out[i];
    if (i < first_grid) { /* batch-parallel over all P */
      x->samples = c->batch / P / c->microbatches;
      x->sub = tp_i * x->samples;
      x->grad_group = PLAN_GRP_WORLD;
      x->grad_degree = P;
      continue;
    }
    x->split = Pr;
    if (i == first_grid && first_grid > 0 && Pr > 1) {
      x->redistribute = TRUE;
      x->redist_bytes = (double)plan_in_elems(l) * mbs * dt;
    }
    if (Pr > 1 && (l->kind == WL_CONV2D || l->kind == WL_LINEAR)) {
      plan_shard_slice(x, PLAN_SPLIT_ROWS, l->out.c, Pr, tp_i);
      x->fwd_coll = COLL_ALLGATHER;
      x->fwd_why = PLAN_WHY_FWD_GATHER;
      x->fwd_bytes = (double)l->out_elems * mbs * dt;
      x->replicated_stash = TRUE;
      if (l->inputs[0] >= 0 || l->n_inputs > 1) {
        x->bwd_coll = COLL_ALLREDUCE;
        x->bwd_why = PLAN_WHY_BWD_DX;
        x->bwd_bytes = (double)plan_in_elems(l) * mbs * dt;
      }
    }
  }
  return TRUE;
}

const plan_strategy plan_gholami = {"gholami", applies, check, roles};
