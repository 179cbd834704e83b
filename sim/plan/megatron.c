/* megatron.c — Megatron tensor parallelism as a strategy of the split table (Shoeybi et al.
 * 2019, §3; --tp with --tp-style megatron, the default for transformers).
 *
 * A linear layer marked "column" keeps 1/tp of its output features, one marked "row" 1/tp of
 * its input features; the layers between a pair (attention heads, GELU) work on 1/tp. Forward:
 * one all-reduce of the row layer's output (g); backward: one all-reduce of the column layer's
 * input gradient (f). The token embedding is vocabulary-parallel (forward all-reduce of its
 * output) and an output layer tied to it column-parallel over the vocabulary; the loss after it
 * works on 1/tp of the vocabulary and needs two small all-reduces of the rows' statistics
 * (Megatron's parallel cross-entropy: the max of the logits, then Σ exp and the target's
 * logit); other layers are replicated. Under tp an MoE layer's tokens are split across the tp
 * group and all-gathered after it (sequence parallel).
 *
 * --sequence-parallel (Korthikanti et al. 2022, §4.2.2): the layers outside the pairs (norms,
 * dropout, residual adds, the embedding's output) hold 1/tp of the sequence (seq_parts = tp), so
 * their work and stash divide by tp and their parameters stay whole. A column linear all-gathers
 * its input first (g) and reduce-scatters its input gradient (ḡ) instead of all-reducing it; a
 * row linear, and the vocabulary-parallel embedding, reduce-scatter their output instead of
 * all-reducing it and all-gather its gradient before their backward. The column linear keeps
 * only its 1/tp of the input and all-gathers it again in backward for its weight gradient, as
 * Megatron-LM does. The norms' weight gradients, from 1/tp of the tokens each, are all-reduced
 * over tp once per iteration (the build does that).
 */
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/strategy.h"

static gboolean applies(const cfg_run *c) {
  return c->tp > 1 && c->tp_style == CFG_TP_MEGATRON;
}

static gboolean check(const wl_model *m, const cfg_run *c, GError **err) {
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (c->sequence_parallel && l->kind == WL_MOE) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--sequence-parallel: %s: layer '%s' is a mixture "
                  "of experts, whose tokens tp already splits; leave out --sequence-parallel",
                  m->path, l->name);
      return FALSE;
    }
    if ((l->kind == WL_ATTENTION || l->kind == WL_ROPE) && l->heads % c->tp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' has %d attention heads; Megatron splits whole heads, "
                  "so tp must divide them", c->tp, m->path, l->name, l->heads);
      return FALSE;
    }
    if ((l->kind == WL_ATTENTION || l->kind == WL_ROPE) && l->kv_heads % c->tp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' has %d key/value heads; Megatron splits whole query "
                  "groups, so tp must divide them", c->tp, m->path, l->name, l->kv_heads);
      return FALSE;
    }
    if (l->kind == WL_LINEAR && l->tp_role != WL_TP_NONE &&
        (l->tp_role == WL_TP_COLUMN ? l->out.c : l->in.c) % c->tp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp %d: %s: layer '%s' has %ld %s features; tp must divide them", c->tp,
                  m->path, l->name, (long)(l->tp_role == WL_TP_COLUMN ? l->out.c : l->in.c),
                  l->tp_role == WL_TP_COLUMN ? "output" : "input");
      return FALSE;
    }
    if (l->kind == WL_CONV2D) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--tp-style megatron: %s: layer '%s' (%s) has no Megatron split; use --tp-style "
                  "gholami (or --grid) for convolutional networks", m->path, l->name,
                  wl_layer_kind_name(l->kind));
      return FALSE;
    }
  }
  return TRUE;
}

/* Sets a forward (or backward) collective of layer x. */
static void after(plan_shard *x, gboolean fwd, coll_op op, plan_purpose why, double bytes) {
  if (fwd) x->fwd_coll = op, x->fwd_why = why, x->fwd_bytes = bytes;
  else x->bwd_coll = op, x->bwd_why = why, x->bwd_bytes = bytes;
}

/* Sets the collective before layer x's backward kernel. */
static void before_bwd(plan_shard *x, coll_op op, plan_purpose why, double bytes) {
  x->bwd_pre_coll = op, x->bwd_pre_why = why, x->bwd_pre_bytes = bytes;
}

/* A layer whose tp ranks hold partial sums of its output: all-reduced, or under sequence
 * parallelism reduce-scattered along the sequence, and its output gradient all-gathered before
 * its backward. */
static void sum_output(plan_shard *x, gboolean sp, double bytes) {
  if (!sp) {
    after(x, TRUE, COLL_ALLREDUCE, PLAN_WHY_FWD_REDUCE, bytes);
    return;
  }
  after(x, TRUE, COLL_REDUCESCATTER, PLAN_WHY_FWD_REDUCE, bytes);
  before_bwd(x, COLL_ALLGATHER, PLAN_WHY_BWD_DY_GATHER, bytes);
}

static gboolean roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                      GError **err) {
  (void)ep_i, (void)err;
  const int Pr = c->tp, n = m->n_layers;
  const double dt = gpu_precision_bytes(c->precision);
  const int64_t mbs = plan_row_samples(c);
  gboolean in_pair = FALSE; /* between a column layer and its row partner */
  gboolean ce_next = FALSE; /* the loss reads logits split over the vocabulary */
  const gboolean sp = c->sequence_parallel;
  for (int i = 0; i < n; i++) {
    const wl_layer *l = &m->layers[i];
    plan_shard *x = &out[i];
    const gboolean vocab_out =
        l->kind == WL_LINEAR && (l->tied_to >= 0 || (m->vocab > 0 && l->out.c == m->vocab));
    if (l->kind == WL_LINEAR && (l->tp_role == WL_TP_COLUMN || vocab_out)) {
      /* a column linear feeding attention in the packed Q|K|V layout holds whole heads of each
       * of Q, K and V; in the grouped layout (grouped-query attention, rope) its contiguous
       * slice holds whole query groups */
      const gboolean qkv = i + 1 < n && m->layers[i + 1].kind == WL_ATTENTION &&
                           m->layers[i + 1].kv_heads == 0 && m->layers[i + 1].inputs[0] == i;
      plan_shard_slice(x, qkv ? PLAN_SPLIT_QKV : PLAN_SPLIT_COL, qkv ? l->out.c / 3 : l->out.c, Pr,
                     tp_i);
      x->split = Pr;
      const double in_bytes = (double)plan_in_elems(l) * mbs * dt;
      if (sp) { /* g: gather the sequence; ḡ: scatter the input gradient; the input again */
        x->redistribute = TRUE;
        x->redist_bytes = in_bytes;
        after(x, FALSE, COLL_REDUCESCATTER, PLAN_WHY_BWD_DX, in_bytes);
        before_bwd(x, COLL_ALLGATHER, PLAN_WHY_SP_REGATHER, in_bytes);
      } else {
        x->replicated_stash = TRUE;
        after(x, FALSE, COLL_ALLREDUCE, PLAN_WHY_BWD_DX, in_bytes); /* f */
      }
      in_pair = l->tp_role == WL_TP_COLUMN;
      if (i + 1 < n && m->layers[i + 1].kind == WL_SOFTMAX_CE && m->layers[i + 1].inputs[0] == i) {
        /* vocabulary-parallel cross-entropy: the logits' row maxima are all-reduced (max)
         * here, Σ exp(z − max) and the target logit (sum) after the loss */
        after(x, TRUE, COLL_ALLREDUCE, PLAN_WHY_FWD_REDUCE, (double)mbs * l->in.h * l->in.w * dt);
        ce_next = TRUE;
      }
    } else if (l->kind == WL_SOFTMAX_CE && ce_next) {
      plan_shard_slice(x, PLAN_SPLIT_CE, l->in.c, Pr, tp_i); /* its 1/tp of the vocabulary */
      x->split = Pr;
      after(x, TRUE, COLL_ALLREDUCE, PLAN_WHY_FWD_REDUCE, 2.0 * mbs * l->in.h * l->in.w * dt);
    } else if (l->kind == WL_LINEAR && l->tp_role == WL_TP_ROW) {
      plan_shard_slice(x, PLAN_SPLIT_ROW, l->in.c, Pr, tp_i);
      x->split = Pr;
      sum_output(x, sp, (double)l->out_elems * mbs * dt); /* g, or ḡ under sp */
      in_pair = FALSE;
    } else if (in_pair) { /* attention heads, rope, GELU, SwiGLU, dropout of the pair's hidden
                           * part */
      plan_shard_slice(x, PLAN_SPLIT_LOCAL, l->out.c, Pr, tp_i);
      x->split = Pr;
    } else if (l->kind == WL_MOE) { /* tokens split across tp, gathered after the layer */
      x->split = Pr;
      after(x, TRUE, COLL_ALLGATHER, PLAN_WHY_FWD_GATHER, (double)l->out_elems * mbs * dt);
      after(x, FALSE, COLL_ALLGATHER, PLAN_WHY_BWD_DX, (double)plan_in_elems(l) * mbs * dt);
    } else if (l->kind == WL_EMBEDDING && l->vocab > 0 && l->vocab == m->vocab) {
      /* vocabulary-parallel rows; the partial lookups are summed */
      plan_shard_slice(x, PLAN_SPLIT_VOCAB, l->vocab, Pr, tp_i);
      x->split = Pr;
      sum_output(x, sp, (double)l->out_elems * mbs * dt);
    } else if (sp && l->kind != WL_SOFTMAX_CE) { /* norms, dropout, adds: 1/tp of the tokens */
      x->seq_parts = Pr;
    }
  }
  return TRUE;
}

const plan_strategy plan_megatron = {"megatron", applies, check, roles};
