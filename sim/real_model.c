/* real_model.c — one rank's layers, run for real with the CPU twins (see real_model.h). */
#include "real_model.h"

#include <math.h>
#include <string.h>

#include "dl_common.h"
#include "kernels.h"
#include "real_moe.h"
#include "real_shard.h"
#include "realrun.h"

enum { SEED_WEIGHTS = 1, SEED_INPUT = 2, SEED_TOKENS = 3, SEED_LABELS = 4, SEED_DROPOUT = 5 };
#define DROPOUT_P 0.5f /* the loader does not keep a layer's p; every shipped workload uses 0.5 */

/* SGD with momentum and Adam hyper-parameters (fixed, see real_model.h). */
#define SGD_LR 0.01f
#define SGD_MOMENTUM 0.9f
#define ADAM_LR 1e-3f
#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.999f
#define ADAM_EPS 1e-8f

/* LRN constants of Krizhevsky et al. 2012, §3.3 (k = 2, n = 5, α = 1e-4, β = 0.75). */
#define LRN_ALPHA 1e-4f
#define LRN_BETA 0.75f
#define LRN_K 2.0f

typedef struct {
  const wl_layer *l;   /* the workload layer (borrowed) */
  int index;           /* its index in the model */
  float *w, *g;        /* parameters and their gradient (n_params floats); borrowed from the
                          target when the layer is tied to a layer of this stage; NULL: none */
  float *m1, *m2;      /* optimizer state: momentum, or Adam's two moments (owned) */
  int64_t n_params;    /* floats in w and g */
  gboolean own;        /* this layer's w/g/m1/m2 are its own storage (the optimizer steps it) */
  float **out;         /* [m] outputs, S·out_elems floats (+ trailer) each */
  float *dout;         /* gradient of the output, S·out_elems floats, reused by micro-batches */
  float **saved;       /* [m] floats kept for backward (norm statistics, probabilities, LRN
                          scale), NULL when the kind keeps none beyond in/out */
  int **argmax;        /* [m] maxpool argmax, S·out_elems ints; NULL otherwise */
  const rs_layer *s;   /* the rank's slice of the layer (real_shard.h) */
  int64_t S;           /* samples of one micro-batch (s->S) */
  float **redist;      /* [m] the tp group's all-gather of the input (s->redist), else NULL */
  float *part;         /* RS_ROWS: the output block, cmax channels per row (all-gather input) */
  float *gath;         /* RS_ROWS: the all-gathered blocks, parts × part */
  float *dslice;       /* RS_ROWS: this rank's columns of the output gradient */
  float *dpart;        /* partial input gradient, summed over tp before it joins the input's */
  float *dred;         /* its all-reduced value */
  rm_moe *moe;         /* mixture of experts state (real_moe.h), NULL otherwise */
} rm_layer;

struct rm_rank {
  const wl_model *m;   /* borrowed */
  const cfg_run *c;    /* borrowed */
  int l0, l1;          /* the stage's layers [l0, l1) */
  int nmb;             /* micro-batches m */
  int dp_i, tp_i;      /* data-parallel and tensor-parallel index */
  rs_layer *rs;        /* [n_layers] the rank's slice of every layer (owned) */
  int64_t S_in, sub_in;/* samples of the model input per micro-batch and their first (rs) */
  rm_layer *L;         /* l1 - l0 layers */
  float **x;           /* [m] model input (features or pixels), NULL when unused here */
  int **tok;           /* [m] token ids, NULL when unused here */
  int **lab;           /* [m] loss targets, NULL when the loss is elsewhere */
  float **act_in;      /* [m] activation from the previous stage (+ trailer), NULL: first */
  float **grad_out;    /* [m] gradient of that activation, sent back (+ trailer) */
  float **grad_in;     /* [m] gradient of the stage's output from the next stage, NULL: last */
  float *ws;           /* conv and attention workspace */
  float *scratch;      /* gradient sink for inputs that need none (the model input) */
  double *loss_sum;    /* [iters] Σ over micro-batches of the mean loss */
};

/* ---- seeded values ------------------------------------------------------------------------- */

static uint64_t mix(uint64_t z) { /* SplitMix64 (Steele, Lea & Flood 2014) */
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

static double unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

/* ---- shapes ------------------------------------------------------------------------------- */

static int64_t positions(const wl_shape *s) { return s->h * s->w; }
static int64_t shape_elems(const wl_shape *s) { return s->c * s->h * s->w; }

static kn_conv conv_shape(const wl_layer *l, int64_t S) {
  kn_conv s = {(int)S, (int)l->in.c, (int)l->in.h, (int)l->in.w, (int)l->out.c, l->kh, l->kw,
               l->stride, l->pad, l->groups};
  return s;
}

static kn_pool pool_shape(const wl_layer *l, int64_t S) {
  kn_pool s = {(int)S, (int)l->in.c, (int)l->in.h, (int)l->in.w, l->kh, l->kw, l->stride, l->pad};
  return s;
}

/* An embedding of the positions (the table is indexed by the position, not the token). */
static gboolean position_table(const wl_model *m, const wl_layer *l) {
  return l->vocab != m->vocab && l->vocab == positions(&l->in);
}

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
    if (t->kind == WL_BATCHNORM || t->kind == WL_LAYERNORM) return e < nw ? 1.0f : 0.0f;
  }
  return (float)((2.0 * unit(hash4(SEED_WEIGHTS, (uint64_t)t_index, (uint64_t)e, 0)) - 1.0) *
                 bound);
}

/* ---- construction ------------------------------------------------------------------------- */

#define LAY(r, i) (&(r)->L[(i) - (r)->l0])

static float **per_mb(int nmb, size_t floats) {
  float **v = g_new(float *, nmb);
  for (int k = 0; k < nmb; k++) v[k] = g_new0(float, floats);
  return v;
}

static void free_per_mb(void **v, int nmb) {
  if (!v) return;
  for (int k = 0; k < nmb; k++) g_free(v[k]);
  g_free(v);
}

/* Local bias floats of a layer whose parameters are its own (0 without a bias). */
static int64_t local_bias(const wl_layer *l, const rs_layer *s) {
  if (!l->bias || (l->kind != WL_CONV2D && l->kind != WL_LINEAR)) return 0;
  switch (s->kind) {
  case RS_ROWS:
  case RS_COL: return s->cn;
  case RS_QKV: return 3 * s->cn;
  default: return l->out.c;
  }
}

/* The input channels, output channels and heads a layer computes with on this rank. */
static int64_t local_in_c(const rm_layer *y) {
  return y->s->kind == RS_ROW || y->s->kind == RS_LOCAL ? y->l->in.c / y->s->parts : y->l->in.c;
}

rm_rank *rm_new(const wl_model *m, const cfg_run *c, const pl_rank_plan *plan, int rank,
                GError **err) {
  if (!rr_check(m, c, err)) return NULL;
  int dp_i, tp_i, pp_i;
  pl_coords(c, rank, &dp_i, &tp_i, &pp_i);
  rs_layer *rs = g_new(rs_layer, m->n_layers);
  if (!rs_plan(m, c, tp_i, dp_i % c->ep, rs, err)) {
    g_free(rs);
    return NULL;
  }
  rm_rank *r = g_new0(rm_rank, 1);
  r->m = m;
  r->c = c;
  r->rs = rs;
  r->l0 = plan->first_layer;
  r->l1 = plan->end_layer;
  r->nmb = c->microbatches;
  r->dp_i = dp_i;
  r->tp_i = tp_i;
  r->L = g_new0(rm_layer, r->l1 - r->l0);
  r->loss_sum = g_new0(double, c->iters);
  const size_t trailer = RM_P2P_TRAILER_FLOATS;
  size_t ws = 1, scratch = 1;
  gboolean reads_input = FALSE;
  for (int i = r->l0; i < r->l1; i++) {
    const wl_layer *l = &m->layers[i];
    rm_layer *y = LAY(r, i);
    y->l = l;
    y->index = i;
    y->s = &rs[i];
    const int64_t S = y->S = rs[i].S;
    const size_t out_n = (size_t)(S * rs[i].out_per);
    y->out = per_mb(r->nmb, out_n + trailer);
    y->dout = g_new0(float, out_n + 1);
    for (int k = 0; k < l->n_inputs; k++)
      if (l->inputs[k] == -1) {
        reads_input = TRUE;
        r->S_in = S;
        r->sub_in = rs[i].sub;
        scratch = MAX(scratch, (size_t)(S * shape_elems(&l->in)));
      }
    const size_t in_n = (size_t)(S * shape_elems(&l->in));
    if (rs[i].redist) {
      y->redist = per_mb(r->nmb, in_n + 1);
      y->dpart = g_new0(float, in_n + 1);
      y->dred = g_new0(float, in_n + 1);
    }
    if (rs[i].kind == RS_ROWS) {
      const int64_t u = l->kind == WL_CONV2D ? positions(&l->out) : 1;
      const int64_t rows = l->kind == WL_CONV2D ? S : S * positions(&l->in);
      y->part = g_new0(float, (size_t)(rows * rs[i].cmax * u) + 1);
      y->gath = g_new0(float, (size_t)(rows * rs[i].cmax * u * rs[i].parts) + 1);
      y->dslice = g_new0(float, (size_t)(rows * rs[i].cmax * u) + 1);
    }
    if (rs[i].kind == RS_ROWS || rs[i].kind == RS_COL || rs[i].kind == RS_QKV) {
      if (!y->dpart) y->dpart = g_new0(float, in_n + 1);
      if (!y->dred) y->dred = g_new0(float, in_n + 1);
    }
    if (rs[i].kind == RS_COL && i + 1 < m->n_layers && rs[i + 1].kind == RS_CE && i + 1 >= r->l1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --pp %d: the stage boundary after "
                  "'%s' splits the vocabulary-parallel cross-entropy from its logits; use another "
                  "--pp or --pp-balance", c->pp, l->name);
      rm_free(r);
      return NULL;
    }
    /* parameters: own, or the tied target's (here: borrowed; elsewhere: a copy of its slice) */
    const int t = l->tied_to;
    if (t >= 0 && t >= r->l0 && t < r->l1) {
      const rm_layer *ty = LAY(r, t);
      y->w = ty->w, y->g = ty->g, y->n_params = ty->n_params;
    } else if (l->params > 0 || t >= 0) {
      const int ti = t >= 0 ? t : i;
      const wl_layer *tl = &m->layers[ti];
      int64_t nw, nb;
      double bound;
      if (!param_layout(tl, &nw, &nb, &bound) || nw + nb != tl->params) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: layer '%s' (%s): its %"
                    G_GINT64_FORMAT " parameters have no known layout", m->path, tl->name,
                    wl_layer_kind_name(tl->kind), tl->params);
        rm_free(r);
        return NULL;
      }
      y->own = TRUE;
      y->n_params = rs_param_index(tl, &rs[ti], NULL);
      int64_t *idx = g_new(int64_t, y->n_params + 1);
      rs_param_index(tl, &rs[ti], idx);
      y->w = g_new(float, y->n_params);
      y->g = g_new0(float, y->n_params);
      y->m1 = g_new0(float, y->n_params);
      if (m->optimizer == WL_OPT_ADAM) y->m2 = g_new0(float, y->n_params);
      for (int64_t e = 0; e < y->n_params; e++) y->w[e] = init_value(tl, ti, idx[e]);
      g_free(idx);
    }
    /* what forward keeps for backward, beyond the input and output */
    size_t saved = 0;
    const int64_t M = S * positions(&l->in);
    const int heads = rs[i].kind == RS_LOCAL ? l->heads / rs[i].parts : l->heads;
    switch (l->kind) {
    case WL_BATCHNORM: saved = 2 * (size_t)l->in.c; break;
    case WL_LAYERNORM: saved = 2 * (size_t)M; break;
    case WL_SOFTMAX_CE:
      saved = rs[i].kind == RS_CE ? (size_t)(M * rs[i].cn + 3 * M) : (size_t)(M * l->in.c);
      break;
    case WL_LRN: saved = out_n; break;
    case WL_ATTENTION: {
      const int C = (int)(rs[i].kind == RS_LOCAL ? rs[i].cn : l->out.c);
      saved = (size_t)(S * heads * positions(&l->in) * positions(&l->in));
      ws = MAX(ws, kn_attention_ws_floats((int)S, (int)positions(&l->in), C, heads, 1));
      break;
    }
    case WL_CONV2D: {
      kn_conv s = conv_shape(l, S);
      ws = MAX(ws, kn_conv_ws_floats(&s));
      break;
    }
    case WL_MAXPOOL:
      y->argmax = g_new(int *, r->nmb);
      for (int k = 0; k < r->nmb; k++) y->argmax[k] = g_new0(int, out_n + 1);
      break;
    case WL_MOE:
      y->moe = rmoe_new(l, &rs[i], c, M, r->nmb);
      ws = MAX(ws, rmoe_ws_floats(y->moe));
      break;
    default: break;
    }
    if (saved) y->saved = per_mb(r->nmb, saved);
    if (l->kind == WL_SOFTMAX_CE) {
      r->lab = g_new(int *, r->nmb);
      for (int k = 0; k < r->nmb; k++) r->lab[k] = g_new0(int, M);
    }
  }
  if (reads_input) {
    const size_t n = (size_t)(r->S_in * shape_elems(&m->input));
    if (m->vocab > 0) {
      r->tok = g_new(int *, r->nmb);
      for (int k = 0; k < r->nmb; k++) r->tok[k] = g_new0(int, n);
    } else {
      r->x = per_mb(r->nmb, n);
    }
  }
  if (r->l0 > 0) {
    const rs_layer *p = &rs[r->l0 - 1];
    const size_t n = (size_t)(p->S * p->out_per) + trailer;
    r->act_in = per_mb(r->nmb, n);
    r->grad_out = per_mb(r->nmb, n);
  }
  if (r->l1 < m->n_layers) {
    const rs_layer *p = &rs[r->l1 - 1];
    r->grad_in = per_mb(r->nmb, (size_t)(p->S * p->out_per) + trailer);
  }
  r->ws = g_new0(float, ws);
  r->scratch = g_new0(float, scratch);
  return r;
}

void rm_free(rm_rank *r) {
  if (!r) return;
  for (int i = r->l0; i < r->l1; i++) {
    rm_layer *y = LAY(r, i);
    if (y->own) {
      g_free(y->w);
      g_free(y->g);
      g_free(y->m1);
      g_free(y->m2);
    }
    free_per_mb((void **)y->out, r->nmb);
    free_per_mb((void **)y->saved, r->nmb);
    free_per_mb((void **)y->argmax, r->nmb);
    g_free(y->dout);
    free_per_mb((void **)y->redist, r->nmb);
    g_free(y->part);
    g_free(y->gath);
    g_free(y->dslice);
    g_free(y->dpart);
    g_free(y->dred);
    rmoe_free(y->moe);
  }
  g_free(r->L);
  g_free(r->rs);
  free_per_mb((void **)r->x, r->nmb);
  free_per_mb((void **)r->tok, r->nmb);
  free_per_mb((void **)r->lab, r->nmb);
  free_per_mb((void **)r->act_in, r->nmb);
  free_per_mb((void **)r->grad_out, r->nmb);
  free_per_mb((void **)r->grad_in, r->nmb);
  g_free(r->ws);
  g_free(r->scratch);
  g_free(r->loss_sum);
  g_free(r);
}

/* ---- data ---------------------------------------------------------------------------------- */

/* Global index of sample `sub + s` of micro-batch mb of the rank's data-parallel row, within
 * iteration `iter`'s data (`sub`: the rank's first sample of the row's micro-batch, rs.h). */
static uint64_t sample_id(const rm_rank *r, int iter, int mb, int64_t sub, int64_t s) {
  const uint64_t row = (uint64_t)(r->c->batch / r->c->dp);
  uint64_t g = (uint64_t)r->dp_i * row + (uint64_t)mb * (row / (uint64_t)r->nmb) + (uint64_t)sub + s;
  return (uint64_t)iter * (uint64_t)r->c->batch + g;
}

void rm_iter_begin(rm_rank *r, int iter) {
  for (int i = r->l0; i < r->l1; i++) {
    rm_layer *y = LAY(r, i);
    if (y->own) memset(y->g, 0, sizeof(float) * (size_t)y->n_params);
  }
  const int64_t per = shape_elems(&r->m->input);
  for (int mb = 0; mb < r->nmb; mb++) {
    for (int64_t s = 0; s < r->S_in; s++) {
      const uint64_t g = sample_id(r, iter, mb, r->sub_in, s);
      for (int64_t e = 0; r->x && e < per; e++)
        r->x[mb][s * per + e] = (float)(2.0 * unit(hash4(SEED_INPUT, g, (uint64_t)e, 0)) - 1.0);
      for (int64_t e = 0; r->tok && e < per; e++)
        r->tok[mb][s * per + e] = (int)(hash4(SEED_TOKENS, g, (uint64_t)e, 0) % (uint64_t)r->m->vocab);
    }
    if (r->lab) {
      const int li = r->m->n_layers - 1;
      const wl_layer *l = &r->m->layers[li];
      const int64_t rows = positions(&l->in);
      for (int64_t s = 0; s < r->rs[li].S; s++) {
        const uint64_t g = sample_id(r, iter, mb, r->rs[li].sub, s);
        for (int64_t p = 0; p < rows; p++)
          r->lab[mb][s * rows + p] = (int)(hash4(SEED_LABELS, g, (uint64_t)p, 0) % (uint64_t)l->in.c);
      }
    }
  }
}

/* ---- kernels ------------------------------------------------------------------------------- */

static const float *in_ptr(rm_rank *r, int src, int mb) {
  if (src == -1) return r->x ? r->x[mb] : NULL;
  if (src < r->l0) return r->act_in[mb];
  return LAY(r, src)->out[mb];
}

/* Input k of layer y: the tp group's all-gather of it for the first layer of an fc-only grid. */
static const float *layer_in(rm_rank *r, const rm_layer *y, int k, int mb) {
  return k == 0 && y->redist ? y->redist[mb] : in_ptr(r, y->l->inputs[k], mb);
}

/* Where the gradient of layer `src`'s output accumulates (the scratch sink for the model input). */
static float *din_ptr(rm_rank *r, int src, int mb) {
  if (src == -1) return r->scratch;
  if (src < r->l0) return r->grad_out[mb];
  if (src == r->l1 - 1 && r->grad_in) return r->grad_in[mb];
  return LAY(r, src)->dout;
}

/* RS_ROWS geometry: `rows` blocks of `u` floats per channel (conv: images × H·W; linear: rows ×
 * 1), `d` channels in all. */
static void rows_geom(const rm_layer *y, int64_t *rows, int64_t *u) {
  const gboolean conv = y->l->kind == WL_CONV2D;
  *rows = conv ? y->S : y->S * positions(&y->l->in);
  *u = conv ? positions(&y->l->out) : 1;
}

/* The bias of a layer that owns its parameters, NULL when it has none. */
static float *bias_of(const rm_layer *y, float *base) {
  const int64_t nb = local_bias(y->l, y->s);
  return base && nb > 0 && y->l->tied_to < 0 ? base + y->n_params - nb : NULL;
}

static void forward(rm_rank *r, int i, int mb, int iter, gboolean experts) {
  rm_layer *y = LAY(r, i);
  const wl_layer *l = y->l;
  const rs_layer *sh = y->s;
  const int64_t S = y->S, M = S * positions(&l->in), n = S * sh->out_per;
  const float *in = layer_in(r, y, 0, mb);
  float *out = y->out[mb];
  const kn_backend *k = &kn_cpu;
  const float *bias = bias_of(y, y->w);
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = conv_shape(l, S);
    if (sh->kind == RS_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_fwd(sh->kind == RS_ROWS ? y->dslice : out, r->ws, in, y->w, bias, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR: {
    const int64_t oc = sh->kind == RS_ROWS || sh->kind == RS_COL ? sh->cn
                       : sh->kind == RS_QKV                     ? 3 * sh->cn
                                                                : l->out.c;
    const int64_t ic = local_in_c(y);
    if (sh->kind == RS_ROW && r->tp_i != 0) bias = NULL; /* added once before the sum */
    k->linear_fwd(sh->kind == RS_ROWS ? y->dslice : out, in, y->w, bias, (int)M, (int)ic, (int)oc,
                  KN_MATH_FP32);
    if (i + 1 < r->l1 && r->rs[i + 1].kind == RS_CE) { /* the parallel cross-entropy's max */
      float *mx = LAY(r, i + 1)->saved[mb] + M * oc;
      for (int64_t row = 0; row < M; row++) {
        const float *z = out + row * oc;
        float v = z[0];
        for (int64_t j = 1; j < oc; j++) v = z[j] > v ? z[j] : v;
        mx[row] = v;
      }
    }
    break;
  }
  case WL_BATCHNORM:
    k->batchnorm_fwd(out, y->saved[mb], y->saved[mb] + l->in.c, in, y->w, y->w + l->in.c, (int)S,
                     (int)l->in.c, (int)positions(&l->in));
    break;
  case WL_LAYERNORM:
    k->layernorm_fwd(out, y->saved[mb], y->saved[mb] + M, in, y->w, y->w + l->in.c, (int)M,
                     (int)l->in.c);
    break;
  case WL_RELU: k->relu_fwd(out, in, (long)n); break;
  case WL_GELU: k->gelu_fwd(out, in, (long)n); break;
  case WL_MAXPOOL: {
    kn_pool s = pool_shape(l, S);
    k->maxpool_fwd(out, y->argmax[mb], in, &s);
    break;
  }
  case WL_AVGPOOL: {
    kn_pool s = pool_shape(l, S);
    k->avgpool_fwd(out, in, &s);
    break;
  }
  case WL_ADD: k->add_fwd(out, in, layer_in(r, y, 1, mb), (long)n); break;
  case WL_FLATTEN: memcpy(out, in, sizeof(float) * (size_t)n); break;
  case WL_EMBEDDING:
    if (sh->kind == RS_VOCAB) { /* this rank's rows; the others' are summed in by the all-reduce */
      const int64_t C = l->out.c;
      memset(out, 0, sizeof(float) * (size_t)n);
      for (int64_t t = 0; t < M; t++) {
        const int64_t id = r->tok[mb][t] - sh->c0;
        if (id >= 0 && id < sh->cn) memcpy(out + t * C, y->w + id * C, sizeof(float) * (size_t)C);
      }
    } else {
      k->embedding_fwd(out, position_table(r->m, l) ? NULL : r->tok[mb], y->w, NULL, (int)S,
                       (int)positions(&l->in), (int)l->out.c);
    }
    break;
  case WL_ATTENTION:
    k->attention_fwd(out, y->saved[mb], r->ws, in, (int)S, (int)positions(&l->in),
                     (int)(sh->kind == RS_LOCAL ? sh->cn : l->out.c),
                     sh->kind == RS_LOCAL ? l->heads / sh->parts : l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    if (sh->kind == RS_CE) { /* Σ exp(z − max) and the target's logit over this rank's words */
      const int64_t V = sh->cn;
      const float *z = in;
      float *st = y->saved[mb] + M * V, *mx = st, *sum = st + M, *zt = st + 2 * M;
      for (int64_t row = 0; row < M; row++) {
        double acc = 0;
        for (int64_t j = 0; j < V; j++) acc += expf(z[row * V + j] - mx[row]);
        sum[row] = (float)acc;
        const int64_t t = r->lab[mb][row] - sh->c0;
        zt[row] = t >= 0 && t < V ? z[row * V + t] : 0.0f;
      }
    } else {
      double loss = k->softmax_ce_fwd(y->saved[mb], in, r->lab[mb], (int)M, (int)l->in.c);
      if (r->tp_i == 0) r->loss_sum[iter] += loss; /* the tp group computes it alike */
    }
    break;
  case WL_LRN:
    k->lrn_fwd(out, y->saved[mb], in, (int)S, (int)l->in.c, (int)positions(&l->in), l->kh,
               LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_fwd(out + s * per, in + s * per, (long)per, DROPOUT_P,
                     hash4(SEED_DROPOUT, (uint64_t)i, sample_id(r, iter, mb, sh->sub, s), 0));
    break;
  }
  case WL_MOE:
    rmoe_forward(y->moe, experts, out, in, y->w, mb);
    break;
  case WL_N_LAYER_KINDS: break;
  }
  if (sh->kind == RS_ROWS) { /* pack the block, cmax channels per row, for the all-gather */
    int64_t rows, u;
    rows_geom(y, &rows, &u);
    for (int64_t row = 0; row < rows; row++)
      memcpy(y->part + row * sh->cmax * u, y->dslice + row * sh->cn * u,
             sizeof(float) * (size_t)(sh->cn * u));
  }
}

static void backward(rm_rank *r, int i, int mb, int iter, gboolean experts) {
  rm_layer *y = LAY(r, i);
  const wl_layer *l = y->l;
  const rs_layer *sh = y->s;
  const int64_t S = y->S, M = S * positions(&l->in), n = S * sh->out_per;
  if (i == r->l1 - 1) { /* the micro-batch's first backward op: fresh output gradients */
    for (int j = r->l0; j < r->l1; j++)
      memset(LAY(r, j)->dout, 0, sizeof(float) * (size_t)(LAY(r, j)->S * LAY(r, j)->s->out_per));
    if (r->grad_out) {
      const rs_layer *p = &r->rs[r->l0 - 1];
      memset(r->grad_out[mb], 0, sizeof(float) * (size_t)(p->S * p->out_per));
    }
  }
  const float *in = layer_in(r, y, 0, mb);
  const float *dout = din_ptr(r, i, mb);
  /* the first layer of the model needs no input gradient (conv and linear skip it) */
  float *din = l->inputs[0] == -1 ? NULL : din_ptr(r, l->inputs[0], mb);
  /* a split conv/linear writes its partial input gradient aside: the tp all-reduce adds it */
  if (din && y->dpart) {
    memset(y->dpart, 0, sizeof(float) * (size_t)(S * shape_elems(&l->in)));
    din = y->dpart;
  }
  float *din_any = din ? din : r->scratch;
  const kn_backend *k = &kn_cpu;
  float *dbias = bias_of(y, y->g);
  if (sh->kind == RS_ROWS) { /* this rank's channels of the (replicated) output gradient */
    int64_t rows, u;
    rows_geom(y, &rows, &u);
    for (int64_t row = 0; row < rows; row++)
      memcpy(y->dslice + row * sh->cn * u, dout + (row * sh->dim + sh->c0) * u,
             sizeof(float) * (size_t)(sh->cn * u));
    dout = y->dslice;
  }
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = conv_shape(l, S);
    if (sh->kind == RS_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_bwd(din, y->g, dbias, r->ws, dout, in, y->w, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR: {
    const int64_t oc = sh->kind == RS_ROWS || sh->kind == RS_COL ? sh->cn
                       : sh->kind == RS_QKV                     ? 3 * sh->cn
                                                                : l->out.c;
    k->linear_bwd(din, y->g, dbias, dout, in, y->w, (int)M, (int)local_in_c(y), (int)oc,
                  KN_MATH_FP32);
    break;
  }
  case WL_BATCHNORM:
    k->batchnorm_bwd(din_any, y->g, y->g + l->in.c, dout, in, y->saved[mb],
                     y->saved[mb] + l->in.c, y->w, (int)S, (int)l->in.c, (int)positions(&l->in));
    break;
  case WL_LAYERNORM:
    k->layernorm_bwd(din_any, y->g, y->g + l->in.c, dout, in, y->w, y->saved[mb],
                     y->saved[mb] + M, (int)M, (int)l->in.c);
    break;
  case WL_RELU: k->relu_bwd(din_any, dout, y->out[mb], (long)n); break;
  case WL_GELU: k->gelu_bwd(din_any, dout, in, (long)n); break;
  case WL_MAXPOOL: {
    kn_pool s = pool_shape(l, S);
    k->maxpool_bwd(din_any, dout, y->argmax[mb], &s);
    break;
  }
  case WL_AVGPOOL: {
    kn_pool s = pool_shape(l, S);
    k->avgpool_bwd(din_any, dout, &s);
    break;
  }
  case WL_ADD: {
    float *d2 = l->inputs[1] == -1 ? r->scratch : din_ptr(r, l->inputs[1], mb);
    k->add_bwd(din_any, d2, dout, (long)n);
    break;
  }
  case WL_FLATTEN:
    for (int64_t e = 0; e < n; e++) din_any[e] += dout[e];
    break;
  case WL_EMBEDDING:
    if (sh->kind == RS_VOCAB) {
      const int64_t C = l->out.c;
      for (int64_t t = 0; t < M; t++) {
        const int64_t id = r->tok[mb][t] - sh->c0;
        if (id < 0 || id >= sh->cn) continue;
        for (int64_t j = 0; j < C; j++) y->g[id * C + j] += dout[t * C + j];
      }
    } else {
      k->embedding_bwd(y->g, NULL, dout, position_table(r->m, l) ? NULL : r->tok[mb], (int)S,
                       (int)positions(&l->in), (int)l->out.c);
    }
    break;
  case WL_ATTENTION:
    k->attention_bwd(din_any, r->ws, dout, in, y->saved[mb], (int)S, (int)positions(&l->in),
                     (int)(sh->kind == RS_LOCAL ? sh->cn : l->out.c),
                     sh->kind == RS_LOCAL ? l->heads / sh->parts : l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    if (sh->kind == RS_CE) { /* probabilities of this rank's words from the global max and sum */
      const int64_t V = sh->cn;
      const float *z = in, *st = y->saved[mb] + M * V, *mx = st, *sum = st + M, *zt = st + 2 * M;
      const float inv = 1.0f / (float)M;
      double loss = 0;
      for (int64_t row = 0; row < M; row++) {
        const int64_t t = r->lab[mb][row] - sh->c0;
        for (int64_t j = 0; j < V; j++) {
          float p = (float)(expf(z[row * V + j] - mx[row]) / (double)sum[row]);
          din_any[row * V + j] += (p - (j == t ? 1.0f : 0.0f)) * inv;
        }
        loss += -(zt[row] - mx[row] - log((double)sum[row]));
      }
      if (r->tp_i == 0) r->loss_sum[iter] += (float)(loss / (double)M);
    } else {
      k->softmax_ce_bwd(din_any, y->saved[mb], r->lab[mb], (int)M, (int)l->in.c);
    }
    break;
  case WL_LRN:
    k->lrn_bwd(din_any, dout, in, y->out[mb], y->saved[mb], (int)S, (int)l->in.c,
               (int)positions(&l->in), l->kh, LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_bwd(din_any + s * per, dout + s * per, (long)per, DROPOUT_P,
                     hash4(SEED_DROPOUT, (uint64_t)i, sample_id(r, iter, mb, sh->sub, s), 0));
    break;
  }
  case WL_MOE:
    rmoe_backward(y->moe, experts, din_any, y->g, r->ws, dout, in, y->w, mb);
    break;
  case WL_N_LAYER_KINDS: break;
  }
}

static void step(rm_rank *r, int iter) {
  /* mean over the global batch: every micro-batch gradient is already a mean over its samples */
  const float scale = 1.0f / (float)(r->c->dp * r->nmb);
  for (int i = r->l0; i < r->l1; i++) {
    rm_layer *y = LAY(r, i);
    if (!y->own) continue;
    const long n = (long)y->n_params;
    if (scale != 1.0f)
      for (long e = 0; e < n; e++) y->g[e] *= scale;
    if (r->m->optimizer == WL_OPT_ADAM)
      kn_cpu.adam_step(y->w, y->m1, y->m2, y->g, n, ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS,
                       0.0f, iter + 1);
    else
      kn_cpu.sgd_momentum_step(y->w, y->m1, y->g, n, SGD_LR, SGD_MOMENTUM, 0.0f);
  }
}

void rm_kernel(rm_rank *r, const pl_op *op, int iter) {
  if (op->phase == PL_PH_OPT) step(r, iter);
  else if (op->phase == PL_PH_FWD)
    forward(r, op->layer, op->microbatch, iter, strstr(op->kname, "experts") != NULL);
  else backward(r, op->layer, op->microbatch, iter, strstr(op->kname, "experts") != NULL);
}

/* ---- buffers for the communication thread ------------------------------------------------- */

static int64_t act_floats(const rm_rank *r, int layer) {
  return r->rs[layer].S * r->rs[layer].out_per;
}

float *rm_act_out(rm_rank *r, int mb, int64_t *n) {
  if (r->l1 >= r->m->n_layers) return NULL;
  *n = act_floats(r, r->l1 - 1);
  return LAY(r, r->l1 - 1)->out[mb];
}

float *rm_act_in(rm_rank *r, int mb, int64_t *n) {
  if (!r->act_in) return NULL;
  *n = act_floats(r, r->l0 - 1);
  return r->act_in[mb];
}

float *rm_grad_out(rm_rank *r, int mb, int64_t *n) {
  if (!r->grad_out) return NULL;
  *n = act_floats(r, r->l0 - 1);
  return r->grad_out[mb];
}

float *rm_grad_in(rm_rank *r, int mb, int64_t *n) {
  if (!r->grad_in) return NULL;
  *n = act_floats(r, r->l1 - 1);
  return r->grad_in[mb];
}

float *rm_layer_grad(rm_rank *r, int layer, rm_grad_part part, int64_t *n) {
  if (layer < r->l0 || layer >= r->l1 || !LAY(r, layer)->g) return NULL;
  rm_layer *y = LAY(r, layer);
  if (y->l->kind != WL_MOE || part == RM_GRAD_ALL) {
    *n = y->n_params;
    return y->g;
  }
  const int64_t router = y->l->in.c * y->l->experts + (y->l->bias ? y->l->experts : 0);
  *n = part == RM_GRAD_DENSE ? router : y->n_params - router;
  return part == RM_GRAD_DENSE ? y->g : y->g + router;
}

const float *rm_layer_params(const rm_rank *r, int layer, int64_t *n) {
  if (layer < r->l0 || layer >= r->l1) return NULL;
  const rm_layer *y = &r->L[layer - r->l0];
  if (!y->own || y->l->tied_to >= 0) return NULL;
  *n = y->n_params;
  return y->w;
}

double rm_loss_sum(const rm_rank *r, int iter) { return r->loss_sum[iter]; }

gboolean rm_coll_begin(rm_rank *r, const pl_op *op, int mb, rm_xfer *x) {
  memset(x, 0, sizeof *x);
  if (op->layer < r->l0 || op->layer >= r->l1) return FALSE;
  rm_layer *y = LAY(r, op->layer);
  const wl_layer *l = y->l;
  const rs_layer *sh = y->s;
  const int64_t M = y->S * positions(&l->in);
  switch (op->purpose) {
  case PL_WHY_FWD_GATHER: { /* the output blocks of a grid layer */
    if (sh->kind != RS_ROWS) return FALSE;
    int64_t rows, u;
    rows_geom(y, &rows, &u);
    x->how = RM_X_ALLGATHER;
    x->send = y->part;
    x->recv = y->gath;
    x->n = (size_t)(rows * sh->cmax * u);
    return TRUE;
  }
  case PL_WHY_REDIST: { /* the batch-parallel samples of the tp group, in sample order */
    if (!y->redist) return FALSE;
    const int src = l->inputs[0];
    x->how = RM_X_ALLGATHER;
    x->send = in_ptr(r, src, mb);
    x->recv = y->redist[mb];
    x->n = (size_t)act_floats(r, src);
    return TRUE;
  }
  case PL_WHY_BWD_DX: /* partial input gradients of a split conv/linear */
    if (!y->dpart || l->inputs[0] == -1) return FALSE;
    x->how = RM_X_ALLREDUCE_SUM;
    x->send = y->dpart;
    x->recv = y->dred;
    x->n = (size_t)(y->S * shape_elems(&l->in));
    return TRUE;
  case PL_WHY_FWD_REDUCE:
    x->how = RM_X_ALLREDUCE_SUM;
    if (sh->kind == RS_ROW || sh->kind == RS_VOCAB) { /* partial outputs */
      x->send = x->recv = y->out[mb];
      x->n = (size_t)act_floats(r, op->layer);
    } else if (sh->kind == RS_COL && op->layer + 1 < r->l1 && r->rs[op->layer + 1].kind == RS_CE) {
      x->how = RM_X_ALLREDUCE_MAX; /* the logits' row maxima */
      x->send = x->recv = LAY(r, op->layer + 1)->saved[mb] + M * sh->cn;
      x->n = (size_t)M;
    } else if (sh->kind == RS_CE) { /* Σ exp(z − max) and the target logit */
      x->send = x->recv = y->saved[mb] + M * sh->cn + M;
      x->n = (size_t)(2 * M);
    } else {
      return FALSE;
    }
    return TRUE;
  case PL_WHY_MOE_DISPATCH:
  case PL_WHY_MOE_COMBINE:
    return y->moe ? rmoe_xfer(y->moe, op->phase == PL_PH_FWD, op->purpose == PL_WHY_MOE_DISPATCH,
                              mb, layer_in(r, y, 0, mb), din_ptr(r, op->layer, mb), x)
                  : FALSE;
  default:
    return FALSE;
  }
}

void rm_coll_end(rm_rank *r, const pl_op *op, int mb) {
  rm_layer *y = LAY(r, op->layer);
  const rs_layer *sh = y->s;
  if (op->purpose == PL_WHY_FWD_GATHER) { /* blocks (member, row, cmax·u) -> (row, d·u) */
    int64_t rows, u;
    rows_geom(y, &rows, &u);
    float *out = y->out[mb];
    for (int t = 0; t < sh->parts; t++) {
      const int64_t c0 = t * sh->dim / sh->parts, cn = (t + 1) * sh->dim / sh->parts - c0;
      for (int64_t row = 0; row < rows; row++)
        memcpy(out + (row * sh->dim + c0) * u, y->gath + (t * rows + row) * sh->cmax * u,
               sizeof(float) * (size_t)(cn * u));
    }
  } else if (op->purpose == PL_WHY_BWD_DX) { /* the summed partials join the input's gradient */
    const int src = y->l->inputs[0];
    float *din = din_ptr(r, src, mb);
    const int64_t n = act_floats(r, src);
    /* with --grid-layers fc the input was gathered: take this rank's samples back */
    const float *from = y->dred + (y->redist ? r->rs[src].sub * r->m->layers[src].out_elems : 0);
    for (int64_t e = 0; e < n; e++) din[e] += from[e];
  } else if (op->purpose == PL_WHY_MOE_DISPATCH || op->purpose == PL_WHY_MOE_COMBINE) {
    rmoe_xfer_done(y->moe, op->phase == PL_PH_FWD, op->purpose == PL_WHY_MOE_DISPATCH, mb,
                   y->out[mb]);
  }
}
