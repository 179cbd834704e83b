/* real_shard.c — the rank's slice of every layer (see real_shard.h). */
#include "exec/real/shard.h"

#include "core/dl_common.h"
#include "plan/plan.h"

/* Slice `idx` of `dim` cut into `parts`: [idx·dim/parts, (idx+1)·dim/parts). */
static void slice(rs_layer *s, int64_t dim, int parts, int idx) {
  s->parts = parts;
  s->dim = dim;
  s->c0 = idx * dim / parts;
  s->cn = (idx + 1) * dim / parts - s->c0;
  s->cmax = (dim + parts - 1) / parts;
}

static gboolean refuse(GError **err, const wl_model *m, const wl_layer *l, const char *opt,
                       const char *what) {
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: %s: layer '%s' (%s): %s", opt,
              m->path, l->name, wl_layer_kind_name(l->kind), what);
  return FALSE;
}

gboolean rs_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, rs_layer *out,
                 GError **err) {
  const int tp = c->tp, n = m->n_layers;
  const gboolean megatron = tp > 1 && c->tp_style == CFG_TP_MEGATRON;
  const gboolean grid = !megatron && (tp > 1 || c->grid_pr > 0);
  int first_grid = 0;
  if (grid && c->grid_fc_only) {
    first_grid = n;
    for (int i = 0; i < n; i++)
      if (m->layers[i].kind == WL_LINEAR) {
        first_grid = i;
        break;
      }
    if (c->pp > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --grid-layers fc with --pp %d is "
                  "not run for real; leave out --pp", c->pp);
      return FALSE;
    }
  }
  const int64_t row_S = c->batch / c->dp / c->microbatches;
  const int dom_end = grid && c->domain_conv && tp > 1 ? pl_domain_end(m) : 0;
  if (dom_end > 0 && c->pp > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --domain conv with --pp %d is not run "
                "for real; leave out --pp", c->pp);
    return FALSE;
  }
  gboolean in_pair = FALSE;
  for (int i = 0; i < n; i++) {
    const wl_layer *l = &m->layers[i];
    rs_layer *s = &out[i];
    *s = (rs_layer){RS_FULL, 1, 0, 0, 0, 0, row_S, 0, FALSE, FALSE, l->out_elems};
    if (i < dom_end) { /* rows of the image (plan.c: domain parallelism) */
      const wl_layer_kind k = l->kind;
      if (k != WL_CONV2D && k != WL_MAXPOOL && k != WL_AVGPOOL && k != WL_BATCHNORM &&
          k != WL_RELU && k != WL_GELU && k != WL_ADD)
        return refuse(err, m, l, "--domain conv", "only convolution, pooling, batch norm, ReLU, "
                      "GELU and add are split by rows for real");
      if (l->out.h <= 1)
        return refuse(err, m, l, "--domain conv", "a global pooling at the end of the domain "
                      "part is not run for real");
      s->kind = RS_DOMAIN;
      s->parts = tp;
      s->dim = l->out.h;
      int lo, hi;
      pl_domain_slab((int)l->out.h, tp, tp_i, &lo, &hi);
      s->c0 = lo;
      s->cn = hi - lo;
      s->cmax = (l->out.h + tp - 1) / tp;
      s->out_per = l->out.c * s->cn * l->out.w;
      continue;
    }
    if (i == dom_end && dom_end > 0) s->redist = s->redist_rows = TRUE;
    if (l->kind == WL_MOE && (tp > 1 || c->grid_pr > 0))
      return refuse(err, m, l, "--tp", "mixture of experts with tensor parallelism");
    if (l->kind == WL_MOE && c->ep > 1) {
      s->kind = RS_EXPERTS;
      slice(s, l->experts, c->ep, ep_i);
      continue;
    }
    if (grid) {
      if (i < first_grid) { /* batch-parallel over all P before an fc-only grid */
        s->S = c->batch / c->gpus / c->microbatches;
        s->sub = tp_i * s->S;
        continue;
      }
      s->redist = s->redist || (i == first_grid && first_grid > 0 && tp > 1);
      if (tp > 1 && (l->kind == WL_CONV2D || l->kind == WL_LINEAR)) {
        if (l->kind == WL_CONV2D && l->groups != 1)
          return refuse(err, m, l, "--grid", "grouped convolutions are not split for real");
        s->kind = RS_ROWS;
        slice(s, l->out.c, tp, tp_i);
      }
      continue;
    }
    if (!megatron) continue;
    const gboolean vocab_out = l->kind == WL_LINEAR &&
                               (l->tied_to >= 0 || (m->vocab > 0 && l->out.c == m->vocab));
    if (l->kind == WL_LINEAR && (l->tp_role == WL_TP_COLUMN || vocab_out)) {
      const gboolean qkv = i + 1 < n && m->layers[i + 1].kind == WL_ATTENTION &&
                           m->layers[i + 1].inputs[0] == i;
      s->kind = qkv ? RS_QKV : RS_COL;
      slice(s, qkv ? l->out.c / 3 : l->out.c, tp, tp_i);
      if (s->dim % tp || (qkv && l->out.c % 3))
        return refuse(err, m, l, "--tp", "its output features do not split evenly");
      s->out_per = l->out_elems / tp;
      in_pair = l->tp_role == WL_TP_COLUMN;
    } else if (l->kind == WL_LINEAR && l->tp_role == WL_TP_ROW) {
      s->kind = RS_ROW;
      slice(s, l->in.c, tp, tp_i);
      if (l->in.c % tp) return refuse(err, m, l, "--tp", "its input features do not split evenly");
      in_pair = FALSE;
    } else if (in_pair) {
      if (l->kind != WL_ATTENTION && l->kind != WL_GELU && l->kind != WL_RELU)
        return refuse(err, m, l, "--tp", "only attention, GELU and ReLU run between a column "
                      "and a row linear");
      if (l->kind == WL_ATTENTION && l->heads % tp)
        return refuse(err, m, l, "--tp", "its heads do not split evenly");
      s->kind = RS_LOCAL;
      slice(s, l->out.c, tp, tp_i);
      s->out_per = l->out_elems / tp;
    } else if (l->kind == WL_EMBEDDING && l->vocab > 0 && l->vocab == m->vocab) {
      if (l->vocab % tp) return refuse(err, m, l, "--tp", "its vocabulary does not split evenly");
      s->kind = RS_VOCAB;
      slice(s, l->vocab, tp, tp_i);
    } else if (l->kind == WL_SOFTMAX_CE && i > 0 && l->inputs[0] == i - 1 &&
               (out[i - 1].kind == RS_COL)) {
      s->kind = RS_CE;
      slice(s, l->in.c, tp, tp_i);
    }
  }
  return TRUE;
}

int64_t rs_param_index(const wl_layer *l, const rs_layer *s, int64_t *idx) {
  int64_t n = 0;
#define PUT(v) do { if (idx) idx[n] = (v); n++; } while (0)
  switch (s->kind) {
  case RS_ROWS:
  case RS_COL:
  case RS_QKV:
  case RS_VOCAB: {
    /* rows of a (rows, fan) weight (conv filters, linear rows, embedding rows), then bias */
    const int64_t rows = l->kind == WL_EMBEDDING ? l->vocab : l->out.c;
    const int64_t fan = l->kind == WL_EMBEDDING ? l->out.c
                        : l->kind == WL_LINEAR  ? l->in.c
                                                : l->in.c / l->groups * l->kh * l->kw;
    const int blocks = s->kind == RS_QKV ? 3 : 1;
    for (int q = 0; q < blocks; q++)
      for (int64_t o = s->c0; o < s->c0 + s->cn; o++)
        for (int64_t f = 0; f < fan; f++) PUT((q * s->dim + o) * fan + f);
    if (l->bias && l->kind != WL_EMBEDDING)
      for (int q = 0; q < blocks; q++)
        for (int64_t o = s->c0; o < s->c0 + s->cn; o++) PUT(rows * fan + q * s->dim + o);
    break;
  }
  case RS_ROW: { /* columns of (OC, IC); the bias whole */
    const int64_t oc = l->out.c, ic = l->in.c;
    for (int64_t o = 0; o < oc; o++)
      for (int64_t j = s->c0; j < s->c0 + s->cn; j++) PUT(o * ic + j);
    if (l->bias)
      for (int64_t o = 0; o < oc; o++) PUT(oc * ic + o);
    break;
  }
  case RS_EXPERTS: { /* router whole, then this rank's experts' w1, b1, w2, b2 */
    const int64_t E = l->experts, C = l->in.c, F = l->ffn;
    const int64_t router = C * E + (l->bias ? E : 0);
    for (int64_t e = 0; e < router; e++) PUT(e);
    const int64_t w1 = router, b1 = w1 + E * F * C, w2 = b1 + E * F, b2 = w2 + E * C * F;
    for (int64_t e = s->c0 * F * C; e < (s->c0 + s->cn) * F * C; e++) PUT(w1 + e);
    for (int64_t e = s->c0 * F; e < (s->c0 + s->cn) * F; e++) PUT(b1 + e);
    for (int64_t e = s->c0 * C * F; e < (s->c0 + s->cn) * C * F; e++) PUT(w2 + e);
    for (int64_t e = s->c0 * C; e < (s->c0 + s->cn) * C; e++) PUT(b2 + e);
    break;
  }
  default:
    for (int64_t e = 0; e < l->params; e++) PUT(e);
    break;
  }
#undef PUT
  return n;
}
