/* layer.c — one rank's layers and their buffers: construction with the initial weights, free,
 * and where a layer's input, output gradient and parameters live (layer.h, model.h). */
#include "exec/real/layer.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "exec/real/context.h"

/* ---- parameters ---------------------------------------------------------------------------- */

/* Parameter layout of a layer that owns parameters: weight floats, bias floats, init bound of
 * each; FALSE when the kind's layout is unknown here. */
static gboolean param_layout(const wl_layer *l, int64_t *nw, int64_t *nb, double *bound) {
  switch (l->kind) {
  case WL_CONV2D: {
    int64_t fan_in = l->in.c / l->groups * l->kh * l->kw;
    *nw = l->out.c * fan_in;
    *nb = l->bias ? l->out.c : 0;
    *bound = 1.0 / sqrt((double)fan_in); /* PyTorch's default for Conv2d and Linear */
    return TRUE;
  }
  case WL_LINEAR:
    *nw = l->out.c * l->in.c;
    *nb = l->bias ? l->out.c : 0;
    *bound = 1.0 / sqrt((double)l->in.c);
    return TRUE;
  case WL_BATCHNORM:
  case WL_LAYERNORM:
    *nw = *nb = l->in.c;
    *bound = 0;
    return TRUE;
  case WL_RMSNORM:
    *nw = l->in.c;
    *nb = 0;
    *bound = 0;
    return TRUE;
  case WL_EMBEDDING:
    *nw = l->vocab * l->out.c;
    *nb = 0;
    *bound = 0.02 * sqrt(3.0); /* uniform with std 0.02, as GPT-2's normal init */
    return TRUE;
  case WL_MOE: /* router, then w1, b1, w2, b2 of every expert (real_shard.h); bounds by part */
    *nw = l->params;
    *nb = 0;
    *bound = 0;
    return TRUE;
  default:
    return FALSE;
  }
}

/* Initial value of element `e` of the serial parameter block of layer `t` (index `t_index`). */
static float init_value(const wl_layer *t, int t_index, int64_t e) {
  int64_t nw, nb;
  double bound;
  if (t->kind == WL_MOE) { /* router and w1, b1 read C features; w2, b2 read F */
    const int64_t E = t->experts, C = t->in.c, F = t->ffn;
    const int64_t w2 = C * E + (t->bias ? E : 0) + E * F * C + E * F;
    bound = 1.0 / sqrt((double)(e < w2 ? C : F));
  } else {
    param_layout(t, &nw, &nb, &bound);
    if (t->kind == WL_BATCHNORM || t->kind == WL_LAYERNORM || t->kind == WL_RMSNORM)
      return e < nw ? 1.0f : 0.0f;
  }
  const uint64_t h = real_model_hash4(REAL_MODEL_SEED_WEIGHTS, (uint64_t)t_index, (uint64_t)e, 0);
  return (float)((2.0 * real_model_unit(h) - 1.0) * bound);
}

/* Local bias floats of a layer whose parameters are its own (0 without a bias). */
static int64_t local_bias(const wl_layer *l, const real_shard_layer *s) {
  if (!l->bias || (l->kind != WL_CONV2D && l->kind != WL_LINEAR)) return 0;
  switch (s->kind) {
  case PLAN_SPLIT_ROWS:
  case PLAN_SPLIT_COL: return s->cn;
  case PLAN_SPLIT_QKV: return 3 * s->cn;
  default: return l->out.c;
  }
}

float *real_model_bias_of(const real_model_layer *y, float *base) {
  const int64_t nb = local_bias(y->l, y->s);
  return base && nb > 0 && y->l->tied_to < 0 ? base + y->n_params - nb : NULL;
}

/* Parameters of layer y: own, or the tied target's (here: borrowed; elsewhere: a copy of its
 * slice), initialised from the serial layout's seeds. FALSE (err set) when the layer's kind has
 * no known layout. */
static gboolean layer_params(real_model_rank *r, real_model_layer *y, GError **err) {
  const wl_model *m = r->m;
  const wl_layer *l = y->l;
  const int t = l->tied_to;
  if (t >= 0 && real_model_holds(r, t)) {
    const real_model_layer *ty = REAL_MODEL_LAY(r, t);
    y->w = ty->w, y->g = ty->g, y->n_params = ty->n_params;
    return TRUE;
  }
  if (l->params <= 0 && t < 0) return TRUE;
  const int ti = t >= 0 ? t : y->index;
  const wl_layer *tl = &m->layers[ti];
  int64_t nw, nb;
  double bound;
  if (!param_layout(tl, &nw, &nb, &bound) || nw + nb != tl->params) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: layer '%s' (%s): its %"
                G_GINT64_FORMAT " parameters have no known layout", m->path, tl->name,
                wl_layer_kind_name(tl->kind), tl->params);
    return FALSE;
  }
  y->own = TRUE;
  y->n_params = real_shard_param_index(tl, &r->rs[ti], NULL);
  const size_t bytes = sizeof(float) * (size_t)y->n_params;
  int64_t *idx = g_new(int64_t, y->n_params + 1);
  real_shard_param_index(tl, &r->rs[ti], idx);
  float *w = g_new(float, y->n_params + 1);
  for (int64_t e = 0; e < y->n_params; e++) w[e] = init_value(tl, ti, idx[e]);
  y->w = real_model_dev(r, bytes);
  y->g = real_model_dev(r, bytes);
  y->m1 = real_model_dev(r, bytes);
  if (m->optimizer == WL_OPT_ADAM) y->m2 = real_model_dev(r, bytes);
  if (y->w) r->k->upload(y->w, w, bytes);
  g_free(w);
  g_free(idx);
  return TRUE;
}

/* ---- construction ------------------------------------------------------------------------- */


void *real_model_dev(real_model_rank *r, size_t bytes) {
  void *p = r->k->alloc(bytes ? bytes : 1); /* zeroed */
  r->dev_bytes += (double)bytes;
  if (!p) r->dev_failed = TRUE; /* real_model_new refuses the rank */
  return p;
}

void real_model_dev_free(const real_model_rank *r, void *p) {
  if (p) r->k->release(p);
}

float **real_model_per_mb(real_model_rank *r, int nmb, size_t floats) {
  float **v = g_new(float *, nmb);
  for (int k = 0; k < nmb; k++) v[k] = real_model_dev(r, sizeof(float) * floats);
  return v;
}

void real_model_per_mb_free(const real_model_rank *r, void **v, int nmb) {
  if (!v) return;
  for (int k = 0; k < nmb; k++) real_model_dev_free(r, v[k]);
  g_free(v);
}

/* Layer y's activation buffers: outputs, output gradient, the tensor-parallel gathers and
 * partial input gradients, the domain halos. TRUE when the layer reads the model input: then
 * r->S_in and r->sub_in are its samples and *scratch grows to its input's floats. */
static gboolean layer_buffers(real_model_rank *r, real_model_layer *y, size_t *scratch) {
  const wl_layer *l = y->l;
  const real_shard_layer *rs = r->rs;
  const int i = y->index;
  const int64_t S = y->S;
  const size_t out_n = (size_t)(S * rs[i].out_per);
  gboolean reads_input = FALSE;
  y->out = real_model_per_mb(r, r->nmb, out_n + REAL_MODEL_P2P_TRAILER_FLOATS);
  y->dout = real_model_dev(r, sizeof(float) * (out_n + 1));
  for (int k = 0; k < l->n_inputs; k++)
    if (l->inputs[k] == -1) {
      reads_input = TRUE;
      r->S_in = S;
      r->sub_in = rs[i].sub;
      if (!real_model_position_table(r->m, l)) r->rs_in = &rs[i];
      *scratch = MAX(*scratch, (size_t)(S * real_model_shape_elems(&l->in)));
    }
  const size_t in_n = (size_t)(S * real_model_shape_elems(&l->in));
  if (rs[i].redist) {
    y->redist = real_model_per_mb(r, r->nmb, in_n + 1);
    y->dpart = real_model_dev(r, sizeof(float) * (in_n + 1));
    y->dred = real_model_dev(r, sizeof(float) * (in_n + 1));
  }
  if (rs[i].kind == PLAN_SPLIT_ROWS) {
    const int64_t u = l->kind == WL_CONV2D ? real_model_positions(&l->out) : 1;
    const int64_t rows = l->kind == WL_CONV2D ? S : S * real_model_positions(&l->in);
    y->part = real_model_dev(r, sizeof(float) * ((size_t)(rows * rs[i].cmax * u) + 1));
    y->gath =
        real_model_dev(r, sizeof(float) * ((size_t)(rows * rs[i].cmax * u * rs[i].parts) + 1));
    y->dslice = real_model_dev(r, sizeof(float) * ((size_t)(rows * rs[i].cmax * u) + 1));
  }
  if (rs[i].redist_rows) { /* the domain slabs of the input, cmax rows each, all-gathered */
    const size_t blk = (size_t)(S * l->in.c * rs[i - 1].cmax * l->in.w);
    y->part = real_model_dev(r, sizeof(float) * (blk + 1));
    y->gath = real_model_dev(r, sizeof(float) * (blk * (size_t)rs[i - 1].parts + 1));
  }
  if (rs[i].kind == PLAN_SPLIT_DOMAIN) real_model_domain_alloc(r, y, r->tp_i);
  if (rs[i].sp_sum) {
    y->spfull = real_model_dev(r, sizeof(float) * ((size_t)(S * l->out_elems) + 1));
    y->spdy = real_model_dev(r, sizeof(float) * ((size_t)(S * l->out_elems) + 1));
  }
  if (rs[i].sp_sum || rs[i].sp_gather)
    y->spbuf = real_model_dev(r, sizeof(float) * (MAX(in_n, (size_t)(S * l->out_elems)) + 1));
  if (rs[i].kind == PLAN_SPLIT_ROWS || rs[i].kind == PLAN_SPLIT_COL ||
      rs[i].kind == PLAN_SPLIT_QKV) {
    if (!y->dpart) y->dpart = real_model_dev(r, sizeof(float) * (in_n + 1));
    if (!y->dred) y->dred = real_model_dev(r, sizeof(float) * (in_n + 1));
  }
  return reads_input;
}

/* FALSE (err set) when the stage ends between layer i, a column linear, and the
 * vocabulary-parallel cross-entropy that reads its logits. */
static gboolean stage_keeps_ce(const real_model_rank *r, int i, GError **err) {
  const real_shard_layer *rs = r->rs;
  if (rs[i].kind == PLAN_SPLIT_COL && i + 1 < r->m->n_layers && rs[i + 1].kind == PLAN_SPLIT_CE &&
      real_model_sends(r, i)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --pp %d: the stage boundary after "
                "'%s' splits the vocabulary-parallel cross-entropy from its logits; use another "
                "--pp or --pp-balance", r->c->pp, r->m->layers[i].name);
    return FALSE;
  }
  return TRUE;
}

/* What forward keeps of layer y for backward, beyond the input and output (norm statistics,
 * probabilities, LRN scale, maxpool argmax, MoE state), and the loss targets when y is the
 * loss; grows *ws to the workspace floats its kernels need. */
static void layer_saved(real_model_rank *r, real_model_layer *y, size_t *ws) {
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  const int64_t S = y->S;
  const size_t out_n = (size_t)(S * sh->out_per);
  size_t saved = 0;
  const int64_t M = S * real_model_positions(&l->in);
  switch (l->kind) {
  case WL_BATCHNORM: saved = 4 * (size_t)l->in.c; break; /* mean, rstd (, Σx, Σx²) */
  case WL_LAYERNORM: saved = 2 * (size_t)M; break;
  case WL_RMSNORM: saved = (size_t)M; break;
  case WL_SOFTMAX_CE:
    saved = sh->kind == PLAN_SPLIT_CE ? (size_t)(M * sh->cn + 3 * M) : (size_t)(M * l->in.c);
    break;
  case WL_LRN: saved = out_n; break;
  case WL_ATTENTION: {
    /* under cp, ring attention's blocks keep only their log-sum-exp (context.c); Ulysses runs
     * the whole sequence of 1/cp of the heads */
    const int cp = sh->cp > 1 && !sh->cp_ring ? sh->cp : 1;
    const int heads = real_model_attn_heads(y) / cp;
    const int64_t P = real_model_positions(&l->in);
    if (sh->cp > 1) y->cp = real_cp_new(r, y);
    if (sh->cp > 1 && sh->cp_ring) break;
    /* flash-style: nothing kept, backward computes the probabilities again */
    if (!l->flash) saved = (size_t)(S * heads * P * P);
    *ws = MAX(*ws, kn_attention_ws_floats((int)S, (int)P, real_model_attn_width(y) / cp, heads, 1,
                                          l->flash));
    break;
  }
  case WL_CONV2D: {
    kn_conv s = real_model_conv_shape(l, S);
    *ws = MAX(*ws, kn_conv_ws_floats(&s));
    break;
  }
  case WL_MAXPOOL:
    y->argmax = (int **)real_model_per_mb(r, r->nmb, out_n + 1); /* ints, as wide as floats */
    break;
  case WL_MOE:
    y->moe = real_moe_new(l, sh, r->c, M, r->nmb, r->k, r->math);
    if (real_moe_failed(y->moe)) r->dev_failed = TRUE;
    *ws = MAX(*ws, real_moe_ws_floats(y->moe));
    break;
  default: break;
  }
  if (saved) y->saved = real_model_per_mb(r, r->nmb, saved);
  if (l->kind == WL_SOFTMAX_CE) {
    r->lab = (int **)real_model_per_mb(r, r->nmb, (size_t)M);
    r->hbuf_bytes = MAX(r->hbuf_bytes, sizeof(int) * (size_t)M);
  }
}

/* The rank's own buffers: the model input (features or tokens) when a layer here reads it, the
 * point-to-point activations and gradients to and from the neighbouring stages, the kernels'
 * workspace (ws floats) and the gradient sink (scratch floats). */
static void rank_buffers(real_model_rank *r, gboolean reads_input, size_t ws, size_t scratch) {
  const wl_model *m = r->m;
  const size_t trailer = REAL_MODEL_P2P_TRAILER_FLOATS;
  if (reads_input) {
    const size_t n = (size_t)(r->S_in * real_model_shape_elems(&m->input));
    if (m->vocab > 0) r->tok = (int **)real_model_per_mb(r, r->nmb, n);
    else r->x = real_model_per_mb(r, r->nmb, n);
    r->hbuf_bytes = MAX(r->hbuf_bytes, sizeof(float) * n);
  }
  r->act_in = g_new0(float **, r->nch);
  r->grad_out = g_new0(float **, r->nch);
  r->grad_in = g_new0(float **, r->nch);
  for (int v = 0; v < r->nch; v++) {
    if (r->cl0[v] > 0) {
      const real_shard_layer *p = &r->rs[r->cl0[v] - 1];
      const size_t n = (size_t)(p->S * p->out_per) + trailer;
      r->act_in[v] = real_model_per_mb(r, r->nmb, n);
      r->grad_out[v] = real_model_per_mb(r, r->nmb, n);
    }
    if (r->cl1[v] < m->n_layers) {
      const real_shard_layer *p = &r->rs[r->cl1[v] - 1];
      r->grad_in[v] = real_model_per_mb(r, r->nmb, (size_t)(p->S * p->out_per) + trailer);
    }
  }
  r->ws = real_model_dev(r, sizeof(float) * ws);
  r->scratch = real_model_dev(r, sizeof(float) * scratch);
  r->hbuf = g_malloc(r->hbuf_bytes + sizeof(float));
}

/* Sharded data parallelism, from the plan's gradient ops (model.h, real_model_sharded): every
 * layer of a reduced bucket gets its shard gradient, and a gradient per micro-batch where its
 * bucket is reduced in more than one. */
static void shard_setup(real_model_rank *r, const plan_rank *plan) {
  const wl_model *m = r->m;
  for (int i = 0; i < plan->n_ops && !r->sharded; i++) {
    const plan_op *op = &plan->ops[i];
    r->sharded = op->kind == PLAN_COLL && op->purpose == PLAN_WHY_GRAD &&
                 (op->coll == COLL_REDUCESCATTER || op->group == PLAN_GRP_REPL);
  }
  if (!r->sharded) return;
  const int n = r->l1 - r->l0;
  int *first_mb = g_new(int, n), *layers = g_new(int, m->n_layers + 1);
  gboolean *multi = g_new0(gboolean, n), *reduced = g_new0(gboolean, n);
  for (int i = 0; i < n; i++) first_mb[i] = -2;
  for (int i = 0; i < plan->n_ops; i++) {
    const plan_op *op = &plan->ops[i];
    if (op->kind != PLAN_COLL || op->purpose != PLAN_WHY_GRAD) continue;
    const int nl = plan_bucket_layers(m, op, layers);
    for (int j = 0; j < nl; j++) {
      const int y = layers[j] - r->l0;
      if (y < 0 || y >= n) continue;
      reduced[y] = TRUE;
      if (first_mb[y] == -2) first_mb[y] = op->microbatch;
      else if (first_mb[y] != op->microbatch) multi[y] = TRUE;
    }
  }
  for (int i = 0; i < n; i++) {
    real_model_layer *y = &r->L[i];
    if (!reduced[i] || !y->own) continue;
    const size_t floats = (size_t)y->n_params;
    y->gacc = real_model_dev(r, sizeof(float) * floats);
    if (!multi[i]) continue;
    y->gmb = real_model_per_mb(r, r->nmb, floats);
    real_model_dev_free(r, y->g); /* g points into gmb from now on */
    y->g = y->gmb[0];
  }
  for (int i = 0; i < n; i++) { /* a tied layer here writes its target's */
    const int t = r->L[i].l ? r->L[i].l->tied_to : -1;
    if (t >= 0 && real_model_holds(r, t)) r->L[i].g = REAL_MODEL_LAY(r, t)->g;
  }
  g_free(first_mb);
  g_free(layers);
  g_free(multi);
  g_free(reduced);
}

real_model_rank *real_model_new(const wl_model *m, const cfg_run *c, const plan_rank *plan,
                                int rank, const kn_backend *k, GError **err) {
  int dp_i, tp_i, pp_i;
  plan_coords(c, rank, &dp_i, &tp_i, &pp_i);
  real_shard_layer *rs = g_new(real_shard_layer, m->n_layers);
  if (!real_shard_plan(m, c, tp_i, dp_i % c->ep, dp_i % c->cp, rs, err)) {
    g_free(rs);
    return NULL;
  }
  for (int i = 0; i < m->n_layers && k != &kn_cpu; i++) /* host-only splits: see layer.h */
    if (rs[i].kind == PLAN_SPLIT_ROWS || rs[i].kind == PLAN_SPLIT_EXPERTS ||
        rs[i].kind == PLAN_SPLIT_DOMAIN || (rs[i].redist && !rs[i].sp_gather) ||
        rs[i].redist_rows) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: the %s backend: layer '%s' (%s "
                  "split): grid, domain, expert and Gholami-style tensor parallelism run for real "
                  "only on --device cpu", k->name, m->layers[i].name, plan_split_name(rs[i].kind));
      g_free(rs);
      return NULL;
    }
  real_model_rank *r = g_new0(real_model_rank, 1);
  r->m = m;
  r->c = c;
  r->k = k;
  r->host = k == &kn_cpu;
  r->math = KN_MATH_FP32; /* the CPU twins compute in fp32; a GPU in --precision's arithmetic */
  if (!r->host) kn_math_parse(gpu_precision_name(c->precision), &r->math);
  r->rs = rs;
  r->nch = plan->n_chunks;
  r->cl0 = g_new(int, r->nch);
  r->cl1 = g_new(int, r->nch);
  for (int v = 0; v < r->nch; v++) plan_chunk_layers(plan, v, &r->cl0[v], &r->cl1[v]);
  r->l0 = r->cl0[0];
  r->l1 = r->cl1[r->nch - 1];
  r->nmb = c->microbatches;
  r->dp_i = dp_i / c->cp; /* the replica; dp_i % cp is its place in the sequence */
  r->tp_i = tp_i;
  r->rank = rank;
  r->L = g_new0(real_model_layer, r->l1 - r->l0);
  if (c->cp > 1) r->ops = plan->ops, r->cp_step = real_cp_steps(plan);
  r->loss_sum = g_new0(double, c->iters);
  size_t ws = 1, scratch = 1;
  gboolean reads_input = FALSE;
  for (int i = r->l0; i < r->l1; i++) {
    real_model_layer *y = REAL_MODEL_LAY(r, i);
    if (!real_model_holds(r, i)) continue; /* another rank's chunk */
    y->l = &m->layers[i];
    y->index = i;
    y->s = &rs[i];
    y->S = rs[i].S;
    if (layer_buffers(r, y, &scratch)) reads_input = TRUE;
    if (!stage_keeps_ce(r, i, err) || !layer_params(r, y, err)) {
      real_model_free(r);
      return NULL;
    }
    layer_saved(r, y, &ws);
  }
  rank_buffers(r, reads_input, ws, scratch);
  shard_setup(r, plan);
  if (r->dev_failed) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --workload %s: rank %d's tensors "
                "(%.2f GiB) do not fit in the %s backend's memory; use a smaller --batch or more "
                "--pp stages", m->path, rank, r->dev_bytes / (1024.0 * 1024 * 1024), k->name);
    real_model_free(r);
    return NULL;
  }
  return r;
}

/* Frees what layer y owns (its buffers for nmb micro-batches; parameters when its own). */
static void layer_free(const real_model_rank *r, real_model_layer *y, int nmb) {
  if (y->own) {
    real_model_dev_free(r, y->w);
    if (!y->gmb) real_model_dev_free(r, y->g);
    real_model_dev_free(r, y->m1);
    real_model_dev_free(r, y->m2);
    real_model_dev_free(r, y->gacc);
    real_model_per_mb_free(r, (void **)y->gmb, nmb);
  }
  real_model_per_mb_free(r, (void **)y->out, nmb);
  real_model_per_mb_free(r, (void **)y->saved, nmb);
  real_model_per_mb_free(r, (void **)y->argmax, nmb);
  real_model_dev_free(r, y->dout);
  real_model_per_mb_free(r, (void **)y->redist, nmb);
  real_model_dev_free(r, y->part);
  real_model_dev_free(r, y->gath);
  real_model_dev_free(r, y->dslice);
  real_model_dev_free(r, y->dpart);
  real_model_dev_free(r, y->dred);
  real_model_dev_free(r, y->spfull);
  real_model_dev_free(r, y->spdy);
  real_model_dev_free(r, y->spbuf);
  real_moe_free(y->moe);
  real_cp_free(r, y->cp);
  for (int a = 0; a < 8; a++) real_model_per_mb_free(r, (void **)y->halo[a / 4][a / 2 % 2][a % 2], nmb);
  real_model_per_mb_free(r, (void **)y->win, nmb);
  g_free(y->dext);
  g_free(y->dinx);
  g_free(y->dwx);
  g_free(y->bnst);
}

void real_model_free(real_model_rank *r) {
  if (!r) return;
  for (int i = r->l0; i < r->l1; i++)
    if (REAL_MODEL_LAY(r, i)->l) layer_free(r, REAL_MODEL_LAY(r, i), r->nmb);
  g_free(r->L);
  g_free(r->rs);
  g_free(r->cp_step);
  real_model_per_mb_free(r, (void **)r->x, r->nmb);
  real_model_per_mb_free(r, (void **)r->tok, r->nmb);
  real_model_per_mb_free(r, (void **)r->lab, r->nmb);
  for (int v = 0; v < r->nch && r->act_in; v++) {
    real_model_per_mb_free(r, (void **)r->act_in[v], r->nmb);
    real_model_per_mb_free(r, (void **)r->grad_out[v], r->nmb);
    real_model_per_mb_free(r, (void **)r->grad_in[v], r->nmb);
  }
  g_free(r->act_in);
  g_free(r->grad_out);
  g_free(r->grad_in);
  g_free(r->cl0);
  g_free(r->cl1);
  real_model_dev_free(r, r->ws);
  real_model_dev_free(r, r->scratch);
  g_free(r->hbuf);
  g_free(r->loss_sum);
  g_free(r);
}

/* ---- where things live --------------------------------------------------------------------- */

const float *real_model_in_ptr(real_model_rank *r, int src, int mb) {
  if (src == -1) return r->x ? r->x[mb] : NULL;
  /* not here: the last layer of the previous stage, before the consumer's chunk */
  if (!real_model_holds(r, src)) return r->act_in[real_model_chunk_of(r, src + 1)][mb];
  return REAL_MODEL_LAY(r, src)->out[mb];
}

const float *real_model_layer_in(real_model_rank *r, const real_model_layer *y, int k, int mb) {
  return k == 0 && y->redist ? y->redist[mb] : real_model_in_ptr(r, y->l->inputs[k], mb);
}

float *real_model_din_ptr(real_model_rank *r, int src, int mb) {
  if (src == -1) return r->scratch;
  if (!real_model_holds(r, src)) return r->grad_out[real_model_chunk_of(r, src + 1)][mb];
  if (real_model_sends(r, src)) return r->grad_in[real_model_chunk_of(r, src)][mb];
  return REAL_MODEL_LAY(r, src)->dout;
}

void real_model_rows_geom(const real_model_layer *y, int64_t *rows, int64_t *u) {
  const gboolean conv = y->l->kind == WL_CONV2D;
  *rows = conv ? y->S : y->S * real_model_positions(&y->l->in);
  *u = conv ? real_model_positions(&y->l->out) : 1;
}

float *real_model_layer_params(const real_model_rank *r, int layer, int64_t *n) {
  if (!real_model_holds(r, layer)) return NULL;
  const real_model_layer *y = &r->L[layer - r->l0];
  if (!y->own || y->l->tied_to >= 0) return NULL;
  *n = y->n_params;
  float *w = g_new(float, y->n_params + 1);
  r->k->download(w, y->w, sizeof(float) * (size_t)y->n_params);
  return w;
}

const kn_backend *real_model_backend(const real_model_rank *r) { return r->k; }

gboolean real_model_sharded(const real_model_rank *r) { return r->sharded; }

int real_model_chunk_end(const real_model_rank *r, int layer) {
  const int v = real_model_chunk_of(r, layer);
  return v < 0 ? layer : r->cl1[v];
}

gboolean real_model_seq_split(const real_model_rank *r, int layer) {
  return real_model_holds(r, layer) && r->rs[layer].seq_split;
}

float *real_model_layer_weights(real_model_rank *r, int layer, int64_t *n) {
  if (!real_model_holds(r, layer)) return NULL;
  real_model_layer *y = REAL_MODEL_LAY(r, layer);
  if (!y->own) return NULL;
  *n = y->n_params;
  return y->w;
}

float *real_model_layer_grad_mb(real_model_rank *r, int layer, int mb, int64_t *n) {
  if (!real_model_holds(r, layer)) return NULL;
  real_model_layer *y = REAL_MODEL_LAY(r, layer);
  if (!y->gmb || mb < 0) return real_model_layer_grad(r, layer, REAL_MODEL_GRAD_ALL, n);
  *n = y->n_params;
  return y->gmb[mb];
}

void real_model_shard_own(real_model_rank *r, int layer, int64_t lo, int64_t hi) {
  real_model_layer *y = REAL_MODEL_LAY(r, layer);
  y->sh_lo = lo, y->sh_hi = hi;
}

gboolean real_model_shard_range(const real_model_rank *r, int layer, int64_t *lo, int64_t *hi) {
  if (!real_model_holds(r, layer)) return FALSE;
  const real_model_layer *y = &r->L[layer - r->l0];
  *lo = y->sh_lo, *hi = y->sh_hi;
  return y->gacc != NULL;
}

void real_model_shard_add(real_model_rank *r, int layer, int64_t lo, const float *v, int64_t n) {
  real_model_layer *y = REAL_MODEL_LAY(r, layer);
  if (n <= 0 || !y->gacc) return;
  float *acc = g_new(float, n);
  r->k->download(acc, y->gacc + lo, sizeof(float) * (size_t)n);
  for (int64_t e = 0; e < n; e++) acc[e] += v[e];
  r->k->upload(y->gacc + lo, acc, sizeof(float) * (size_t)n);
  g_free(acc);
}

gboolean real_model_on_host(const real_model_rank *r) { return r->host; }
