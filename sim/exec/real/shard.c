/* shard.c — the rank's slice of every layer for the real executor (see shard.h). */
#include "exec/real/shard.h"

#include "core/dl_common.h"
#include "plan/plan.h"

static gboolean refuse(GError **err, const wl_model *m, const wl_layer *l, const char *opt,
                       const char *what) {
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: %s: layer '%s' (%s): %s", opt,
              m->path, l->name, wl_layer_kind_name(l->kind), what);
  return FALSE;
}

/* What the real executor does not split, layer by layer (the split table's entry `s`). */
static gboolean check_layer(const wl_model *m, const cfg_run *c, int i, const plan_shard *s,
                            GError **err) {
  if (m->layers[i].kind == WL_MOE && (m->layers[i].gated || m->layers[i].shared))
    return refuse(err, m, &m->layers[i], "--workload", "SwiGLU and shared experts are not run for "
                  "real yet");
  const wl_layer *l = &m->layers[i];
  const int tp = c->tp;
  if (c->sequence_parallel && (l->in.h * l->in.w) % tp)
    return refuse(err, m, l, "--sequence-parallel", "its sequence does not split evenly over tp");
  if (c->cp > 1 && (l->in.h * l->in.w) % (c->cp_style == CFG_CP_RING ? 2 * c->cp : c->cp))
    return refuse(err, m, l, "--cp", "its positions do not split into the ranks' chunks");
  if (s->seq_parts > 1 && l->kind == WL_DROPOUT)
    return refuse(err, m, l, c->cp > 1 ? "--cp" : "--sequence-parallel", "dropout masks on "
                  "part of the sequence are not run for real yet");
  if (s->seq_parts > c->cp && l->kind == WL_EMBEDDING && l->vocab != l->in.h * l->in.w)
    return refuse(err, m, l, "--sequence-parallel", "token tables on part of the sequence are "
                  "not run for real yet");
  switch (s->kind) {
  case PLAN_SPLIT_DOMAIN:
    if (l->kind != WL_CONV2D && l->kind != WL_MAXPOOL && l->kind != WL_AVGPOOL &&
        l->kind != WL_BATCHNORM && l->kind != WL_RELU && l->kind != WL_GELU && l->kind != WL_ADD)
      return refuse(err, m, l, "--domain conv", "only convolution, pooling, batch norm, ReLU, "
                    "GELU and add are split by rows for real");
    if (l->out.h <= 1)
      return refuse(err, m, l, "--domain conv", "a global pooling at the end of the domain "
                    "part is not run for real");
    return TRUE;
  case PLAN_SPLIT_ROWS:
    if (l->kind == WL_CONV2D && l->groups != 1)
      return refuse(err, m, l, "--grid", "grouped convolutions are not split for real");
    return TRUE;
  case PLAN_SPLIT_COL:
  case PLAN_SPLIT_QKV:
    if (s->dim % tp || (s->kind == PLAN_SPLIT_QKV && l->out.c % 3))
      return refuse(err, m, l, "--tp", "its output features do not split evenly");
    return TRUE;
  case PLAN_SPLIT_ROW:
    if (l->in.c % tp) return refuse(err, m, l, "--tp", "its input features do not split evenly");
    return TRUE;
  case PLAN_SPLIT_LOCAL:
    if (l->kind != WL_ATTENTION && l->kind != WL_GELU && l->kind != WL_RELU &&
        l->kind != WL_SWIGLU && l->kind != WL_ROPE)
      return refuse(err, m, l, "--tp", "only attention, rope, GELU, SwiGLU and ReLU run between "
                    "a column and a row linear");
    if ((l->kind == WL_ATTENTION || l->kind == WL_ROPE) && (l->heads % tp || l->kv_heads % tp))
      return refuse(err, m, l, "--tp", "its heads do not split evenly");
    return TRUE;
  case PLAN_SPLIT_VOCAB:
    if (l->vocab % tp) return refuse(err, m, l, "--tp", "its vocabulary does not split evenly");
    return TRUE;
  default:
    if (l->kind == WL_MOE && (tp > 1 || c->grid_pr > 0))
      return refuse(err, m, l, "--tp", "mixture of experts with tensor parallelism");
    return TRUE;
  }
}

gboolean real_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, int cp_i,
                         real_shard_layer *out, GError **err) {
  const int tp = c->tp, n = m->n_layers;
  const gboolean grid = !(tp > 1 && c->tp_style == CFG_TP_MEGATRON) && (tp > 1 || c->grid_pr > 0);
  if (grid && c->grid_fc_only && c->pp > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --grid-layers fc with --pp %d is "
                "not run for real; leave out --pp", c->pp);
    return FALSE;
  }
  if (grid && c->domain_conv && tp > 1 && plan_domain_end(m) > 0 && c->pp > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --domain conv with --pp %d is not run "
                "for real; leave out --pp", c->pp);
    return FALSE;
  }
  plan_shard *sh = g_new(plan_shard, n);
  gboolean ok = plan_shard_plan(m, c, tp_i, ep_i, sh, err);
  for (int i = 0; i < n && ok; i++) {
    const wl_layer *l = &m->layers[i];
    const plan_shard *s = &sh[i];
    if (!(ok = check_layer(m, c, i, s, err))) break;
    real_shard_layer *r = &out[i];
    *r = (real_shard_layer){.kind = s->kind, .parts = s->parts, .dim = s->dim, .c0 = s->c0,
                            .cn = s->cn, .cmax = s->cmax, .S = s->samples, .sub = s->sub,
                            .redist = s->redistribute, .redist_rows = s->redist_rows,
                            .out_per = l->out_elems};
    /* floats per sample of the output buffer: the rank's part where the output stays split */
    if (s->kind == PLAN_SPLIT_DOMAIN) r->out_per = l->out.c * s->cn * l->out.w;
    else if (s->kind == PLAN_SPLIT_COL || s->kind == PLAN_SPLIT_QKV || s->kind == PLAN_SPLIT_LOCAL)
      r->out_per = l->out_elems / tp;
    const int64_t P = l->in.h * l->in.w;
    r->cp = c->cp, r->cp_i = cp_i, r->cp_ring = c->cp_style == CFG_CP_RING, r->P = P;
    r->pos0 = 0, r->npos = P / c->cp;
    r->seq_split = s->seq_parts > c->cp; /* split along the sequence beyond cp's share: sp */
    r->sp_sum = c->sequence_parallel && (s->kind == PLAN_SPLIT_ROW || s->kind == PLAN_SPLIT_VOCAB);
    r->sp_gather = c->sequence_parallel && s->redistribute;
    if (r->seq_split) r->npos = P / s->seq_parts, r->pos0 = tp_i * r->npos;
    if (r->seq_split || r->sp_sum) r->out_per = l->out_elems / tp;
    r->out_per /= c->cp;
  }
  g_free(sh);
  return ok;
}

int real_shard_runs(const real_shard_layer *s, int64_t start[2], int64_t at[2], int64_t len[2]) {
  const int64_t share = s->P / s->cp;
  if (s->cp <= 1 || !s->cp_ring) {
    start[0] = s->cp_i * share + s->pos0, at[0] = 0, len[0] = s->npos;
    return 1;
  }
  const int64_t half = share / 2, lo = s->pos0, hi = s->pos0 + s->npos;
  const int64_t chunk[2] = {s->cp_i, 2 * (int64_t)s->cp - 1 - s->cp_i};
  int n = 0;
  for (int h = 0; h < 2; h++) {
    const int64_t a = MAX(lo, h * half), b = MIN(hi, (h + 1) * half);
    if (a >= b) continue;
    start[n] = chunk[h] * half + a - h * half, at[n] = a - lo, len[n] = b - a;
    n++;
  }
  return n;
}

int64_t real_shard_param_index(const wl_layer *l, const real_shard_layer *s, int64_t *idx) {
  int64_t n = 0;
#define PUT(v) do { if (idx) idx[n] = (v); n++; } while (0)
  switch (s->kind) {
  case PLAN_SPLIT_ROWS:
  case PLAN_SPLIT_COL:
  case PLAN_SPLIT_QKV:
  case PLAN_SPLIT_VOCAB: {
    /* rows of a (rows, fan) weight (conv filters, linear rows, embedding rows), then bias */
    const int64_t rows = l->kind == WL_EMBEDDING ? l->vocab : l->out.c;
    const int64_t fan = l->kind == WL_EMBEDDING ? l->out.c
                        : l->kind == WL_LINEAR  ? l->in.c
                                                : l->in.c / l->groups * l->kh * l->kw;
    const int blocks = s->kind == PLAN_SPLIT_QKV ? 3 : 1;
    for (int q = 0; q < blocks; q++)
      for (int64_t o = s->c0; o < s->c0 + s->cn; o++)
        for (int64_t f = 0; f < fan; f++) PUT((q * s->dim + o) * fan + f);
    if (l->bias && l->kind != WL_EMBEDDING)
      for (int q = 0; q < blocks; q++)
        for (int64_t o = s->c0; o < s->c0 + s->cn; o++) PUT(rows * fan + q * s->dim + o);
    break;
  }
  case PLAN_SPLIT_ROW: { /* columns of (OC, IC); the bias whole */
    const int64_t oc = l->out.c, ic = l->in.c;
    for (int64_t o = 0; o < oc; o++)
      for (int64_t j = s->c0; j < s->c0 + s->cn; j++) PUT(o * ic + j);
    if (l->bias)
      for (int64_t o = 0; o < oc; o++) PUT(oc * ic + o);
    break;
  }
  case PLAN_SPLIT_EXPERTS: { /* router whole, then this rank's experts' w1, b1, w2, b2 */
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
