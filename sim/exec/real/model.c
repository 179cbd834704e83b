/* real_model.c — one rank's layers, run for real with the CPU twins (see real_model.h). */
#include "exec/real/model.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "kernels.h"
#include "exec/real/moe.h"
#include "exec/real/shard.h"

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
  float *part;         /* PL_SPLIT_ROWS: the output block, cmax channels per row (all-gather input) */
  float *gath;         /* PL_SPLIT_ROWS: the all-gathered blocks, parts × part */
  float *dslice;       /* PL_SPLIT_ROWS: this rank's columns of the output gradient */
  float *dpart;        /* partial input gradient, summed over tp before it joins the input's */
  float *dred;         /* its all-reduced value */
  rm_moe *moe;         /* mixture of experts state (real_moe.h), NULL otherwise */
  /* PL_SPLIT_DOMAIN (--domain conv): rows of the image */
  int ilo, ihi;        /* the input rows this rank holds (its source's slab) */
  int hrows[2][2][2];  /* halo rows [fwd: input rows / bwd: output-gradient rows][recv/send]
                          [up (tp_i − 1) / down (tp_i + 1)], as plan.c's domain_roles */
  int64_t hrow_f[2];   /* floats of one halo row of one sample: [fwd] C_in·W, [bwd] C_out·W_out
                          (twice that for max pooling: the argmax rides along) */
  float **halo[2][2][2]; /* [m] halo message buffers (+ trailer), indexed as hrows */
  float **win;         /* [m] windowed layers: the input rows the output slab's windows read,
                          explicitly padded: S × C_in × fh × (W + 2·pad) */
  int fr0, fh;         /* first padded row of win (olo·stride − pad) and its rows */
  float *dext;         /* backward: output-gradient rows [blo, bhi) (own and halo) */
  float *dinx;         /* their input gradient on the padded rows */
  float *dwx;          /* convolution: weight gradient of that pass (discarded) */
  float *bnst;         /* batch norm: Σdy and Σdy·x̂ per channel, summed over the tp group */
} rm_layer;

struct rm_rank {
  const wl_model *m;   /* borrowed */
  const cfg_run *c;    /* borrowed */
  int l0, l1;          /* the stage's layers [l0, l1) */
  int nmb;             /* micro-batches m */
  int dp_i, tp_i;      /* data-parallel and tensor-parallel index */
  int rank;            /* this rank (halo neighbours are rank ± 1) */
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
  case PL_SPLIT_ROWS:
  case PL_SPLIT_COL: return s->cn;
  case PL_SPLIT_QKV: return 3 * s->cn;
  default: return l->out.c;
  }
}

/* The input channels, output channels and heads a layer computes with on this rank. */
static int64_t local_in_c(const rm_layer *y) {
  return y->s->kind == PL_SPLIT_ROW || y->s->kind == PL_SPLIT_LOCAL ? y->l->in.c / y->s->parts : y->l->in.c;
}

/* PL_SPLIT_DOMAIN buffers: the halo rows of a windowed layer (plan.c's domain_roles), its padded
 * window, and the backward's staging. */
static void domain_alloc(rm_rank *r, rm_layer *y, int tp_i) {
  const wl_layer *l = y->l;
  const int P = y->s->parts;
  const int64_t S = y->S;
  pl_domain_slab((int)l->in.h, P, tp_i, &y->ilo, &y->ihi);
  if (l->kind == WL_BATCHNORM) y->bnst = g_new0(float, 2 * (size_t)l->in.c);
  if (l->kind != WL_CONV2D && l->kind != WL_MAXPOOL && l->kind != WL_AVGPOOL) return;
  const int st = MAX(l->stride, 1);
  const int64_t Wp = l->in.w + 2 * l->pad;
  y->fr0 = (int)y->s->c0 * st - l->pad;
  y->fh = ((int)y->s->cn - 1) * st + l->kh;
  y->win = per_mb(r->nmb, (size_t)(S * l->in.c * y->fh * Wp));
  y->hrow_f[0] = l->in.c * l->in.w;
  y->hrow_f[1] = l->out.c * l->out.w * (l->kind == WL_MAXPOOL ? 2 : 1);
  for (int dir = 0; dir < 2 && pl_domain_windowed(l); dir++) {
    const int rows = dir ? (int)l->out.h : (int)l->in.h;
    int own_lo, own_hi, nlo, nhi;
    pl_domain_slab(rows, P, tp_i, &own_lo, &own_hi);
    pl_domain_needs(l, P, tp_i, dir, &nlo, &nhi);
    int (*h)[2] = y->hrows[dir];
    h[0][0] = tp_i > 0 ? MAX(0, own_lo - nlo) : 0;
    h[0][1] = tp_i < P - 1 ? MAX(0, nhi - own_hi) : 0;
    if (tp_i > 0) { /* what the rank above needs from below its slab */
      pl_domain_needs(l, P, tp_i - 1, dir, &nlo, &nhi);
      h[1][0] = MAX(0, nhi - own_lo);
    }
    if (tp_i < P - 1) {
      pl_domain_needs(l, P, tp_i + 1, dir, &nlo, &nhi);
      h[1][1] = MAX(0, own_hi - nlo);
    }
    for (int a = 0; a < 4; a++)
      if (h[a / 2][a % 2])
        y->halo[dir][a / 2][a % 2] =
            per_mb(r->nmb, (size_t)(S * y->hrow_f[dir] * h[a / 2][a % 2]) + RM_P2P_TRAILER_FLOATS);
  }
  y->dext = g_new0(float, (size_t)(S * l->out.c * l->out.h * l->out.w) + 1);
  y->dinx = g_new0(float, (size_t)(S * l->in.c * (l->in.h + 2 * l->pad + l->kh) * Wp) + 1);
  if (l->kind == WL_CONV2D) y->dwx = g_new0(float, (size_t)l->params + 1);
}

rm_rank *rm_new(const wl_model *m, const cfg_run *c, const pl_rank_plan *plan, int rank,
                GError **err) {
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
  r->rank = rank;
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
    if (rs[i].kind == PL_SPLIT_ROWS) {
      const int64_t u = l->kind == WL_CONV2D ? positions(&l->out) : 1;
      const int64_t rows = l->kind == WL_CONV2D ? S : S * positions(&l->in);
      y->part = g_new0(float, (size_t)(rows * rs[i].cmax * u) + 1);
      y->gath = g_new0(float, (size_t)(rows * rs[i].cmax * u * rs[i].parts) + 1);
      y->dslice = g_new0(float, (size_t)(rows * rs[i].cmax * u) + 1);
    }
    if (rs[i].redist_rows) { /* the domain slabs of the input, cmax rows each, all-gathered */
      const size_t blk = (size_t)(S * l->in.c * rs[i - 1].cmax * l->in.w);
      y->part = g_new0(float, blk + 1);
      y->gath = g_new0(float, blk * (size_t)rs[i - 1].parts + 1);
    }
    if (rs[i].kind == PL_SPLIT_DOMAIN) domain_alloc(r, y, tp_i);
    if (rs[i].kind == PL_SPLIT_ROWS || rs[i].kind == PL_SPLIT_COL || rs[i].kind == PL_SPLIT_QKV) {
      if (!y->dpart) y->dpart = g_new0(float, in_n + 1);
      if (!y->dred) y->dred = g_new0(float, in_n + 1);
    }
    if (rs[i].kind == PL_SPLIT_COL && i + 1 < m->n_layers && rs[i + 1].kind == PL_SPLIT_CE && i + 1 >= r->l1) {
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
    const int heads = rs[i].kind == PL_SPLIT_LOCAL ? l->heads / rs[i].parts : l->heads;
    switch (l->kind) {
    case WL_BATCHNORM: saved = 4 * (size_t)l->in.c; break; /* mean, rstd (, Σx, Σx²) */
    case WL_LAYERNORM: saved = 2 * (size_t)M; break;
    case WL_SOFTMAX_CE:
      saved = rs[i].kind == PL_SPLIT_CE ? (size_t)(M * rs[i].cn + 3 * M) : (size_t)(M * l->in.c);
      break;
    case WL_LRN: saved = out_n; break;
    case WL_ATTENTION: {
      const int C = (int)(rs[i].kind == PL_SPLIT_LOCAL ? rs[i].cn : l->out.c);
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
    for (int a = 0; a < 8; a++) free_per_mb((void **)y->halo[a / 4][a / 2 % 2][a % 2], r->nmb);
    free_per_mb((void **)y->win, r->nmb);
    g_free(y->dext);
    g_free(y->dinx);
    g_free(y->dwx);
    g_free(y->bnst);
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

/* PL_SPLIT_ROWS geometry: `rows` blocks of `u` floats per channel (conv: images × H·W; linear: rows ×
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

/* ---- domain parallelism (PL_SPLIT_DOMAIN) --------------------------------------------------------- */

#define BN_EPS 1e-5 /* kernels/cpu/norm.c's ε */

/* Row g (global) of channel c of sample s of a domain layer's input: from the model input, the
 * source's slab or a halo received in direction `dir` 0 (forward). */
static const float *domain_in_row(rm_rank *r, const rm_layer *y, int mb, int64_t s, int64_t c,
                                  int g) {
  const wl_layer *l = y->l;
  const int64_t C = l->in.c, W = l->in.w;
  if (l->inputs[0] == -1) return r->x[mb] + ((s * C + c) * l->in.h + g) * W;
  if (g >= y->ilo && g < y->ihi)
    return in_ptr(r, l->inputs[0], mb) + ((s * C + c) * (y->ihi - y->ilo) + g - y->ilo) * W;
  const int up = g < y->ilo, n = y->hrows[0][0][up ? 0 : 1];
  const int row = up ? g - (y->ilo - n) : g - y->ihi;
  return y->halo[0][0][up ? 0 : 1][mb] + ((s * C + c) * n + row) * W;
}

/* The padded window input of a windowed domain layer: rows [fr0, fr0 + fh) and W + 2·pad columns,
 * zero outside the image (−FLT_MAX for max pooling, which never picks it). */
static void domain_window(rm_rank *r, rm_layer *y, int mb) {
  const wl_layer *l = y->l;
  const int64_t C = l->in.c, W = l->in.w, Wp = W + 2 * l->pad;
  const float fill = l->kind == WL_MAXPOOL ? -FLT_MAX : 0.0f;
  float *win = y->win[mb];
  for (int64_t s = 0; s < y->S; s++)
    for (int64_t c = 0; c < C; c++)
      for (int pr = 0; pr < y->fh; pr++) {
        float *dst = win + ((s * C + c) * y->fh + pr) * Wp;
        const int g = y->fr0 + pr;
        for (int64_t x = 0; x < Wp; x++) dst[x] = fill;
        if (g >= 0 && g < l->in.h)
          memcpy(dst + l->pad, domain_in_row(r, y, mb, s, c, g), sizeof(float) * (size_t)W);
      }
}

static void domain_forward(rm_rank *r, rm_layer *y, int mb) {
  const wl_layer *l = y->l;
  const kn_backend *k = &kn_cpu;
  const int64_t S = y->S, Wp = l->in.w + 2 * l->pad, HW = y->s->cn * l->out.w;
  float *out = y->out[mb];
  if (l->kind == WL_BATCHNORM) { /* local Σx, Σx²; rm_coll_end normalises with the group's */
    float *sum = y->saved[mb] + 2 * l->in.c;
    for (int64_t c = 0; c < l->in.c; c++) {
      double s1 = 0, s2 = 0;
      for (int64_t n = 0; n < S; n++) {
        const float *x = in_ptr(r, l->inputs[0], mb) + (n * l->in.c + c) * HW;
        for (int64_t p = 0; p < HW; p++) s1 += x[p], s2 += (double)x[p] * x[p];
      }
      sum[c] = (float)s1;
      sum[l->in.c + c] = (float)s2;
    }
    return;
  }
  domain_window(r, y, mb);
  if (l->kind == WL_CONV2D) {
    kn_conv s = {(int)S, (int)l->in.c, y->fh, (int)Wp, (int)l->out.c, l->kh, l->kw, l->stride, 0,
                 l->groups};
    k->conv2d_fwd(out, r->ws, y->win[mb], y->w, bias_of(y, y->w), &s, KN_MATH_FP32);
    return;
  }
  kn_pool s = {(int)S, (int)l->in.c, y->fh, (int)Wp, l->kh, l->kw, l->stride, 0};
  if (l->kind == WL_AVGPOOL) {
    k->avgpool_fwd(out, y->win[mb], &s);
    return;
  }
  int *am = y->argmax[mb];
  k->maxpool_fwd(out, am, y->win[mb], &s);
  for (int64_t e = 0; e < S * y->s->out_per; e++) { /* padded plane -> the image's (H, W) */
    if (am[e] < 0) continue;
    const int64_t gy = y->fr0 + am[e] / Wp, gx = am[e] % Wp - l->pad;
    am[e] = gy >= 0 && gy < l->in.h && gx >= 0 && gx < l->in.w ? (int)(gy * l->in.w + gx) : -1;
  }
}

/* Adds rows [ilo, ihi) of a whole-image gradient (S × C × H × W) into this rank's slab. */
static void domain_take_rows(const rm_layer *y, float *slab, const float *full, int ilo, int ihi) {
  const int64_t C = y->l->in.c, H = y->l->in.h, W = y->l->in.w, n = ihi - ilo;
  for (int64_t s = 0; s < y->S; s++)
    for (int64_t c = 0; c < C; c++) {
      const float *f = full + ((s * C + c) * H + ilo) * W;
      float *d = slab + (s * C + c) * n * W;
      for (int64_t e = 0; e < n * W; e++) d[e] += f[e];
    }
}

/* Backward of a windowed domain layer. The weight gradient comes from the rank's output rows;
 * the input gradient of its input rows from the output-gradient rows [blo, bhi) whose windows
 * reach them (its own and the neighbours' halo rows, Gholami et al. 2018's ΔY halo): the
 * convolution's transpose and the pooling backward run on them and the rank's rows are kept. */
static void domain_backward(rm_rank *r, rm_layer *y, int mb, float *din) {
  const wl_layer *l = y->l;
  const kn_backend *k = &kn_cpu;
  const int64_t S = y->S, Co = l->out.c, Wo = l->out.w, Ci = l->in.c, W = l->in.w;
  const int64_t Wp = W + 2 * l->pad, c0 = y->s->c0, cn = y->s->cn;
  const int st = MAX(l->stride, 1);
  const float *dout = din_ptr(r, y->index, mb);
  if (l->kind == WL_CONV2D) {
    kn_conv s = {(int)S, (int)Ci, y->fh, (int)Wp, (int)Co, l->kh, l->kw, l->stride, 0, l->groups};
    k->conv2d_bwd(NULL, y->g, bias_of(y, y->g), r->ws, dout, y->win[mb], y->w, &s, KN_MATH_FP32);
  }
  if (!din) return;
  int blo = (int)c0, bhi = (int)(c0 + cn);
  if (pl_domain_windowed(l)) pl_domain_needs(l, y->s->parts, r->tp_i, 1, &blo, &bhi);
  const int nb = bhi - blo, up = y->hrows[1][0][0], dn = y->hrows[1][0][1];
  if (nb <= 0) return;
  const gboolean mx = l->kind == WL_MAXPOOL;
  const int64_t rowf = Co * Wo; /* one row of every channel of one sample, in a halo buffer */
  for (int64_t s = 0; s < S; s++) /* ΔY rows [blo, bhi) (and for max pooling their argmax) */
    for (int64_t c = 0; c < Co; c++)
      for (int g = blo; g < bhi; g++) {
        float *d = y->dext + ((s * Co + c) * nb + g - blo) * Wo;
        const float *from;
        const int *am = NULL;
        const float *amf = NULL;
        if (g >= c0 && g < c0 + cn) {
          from = dout + ((s * Co + c) * cn + g - c0) * Wo;
          if (mx) am = y->argmax[mb] + ((s * Co + c) * cn + g - c0) * Wo;
        } else {
          const int u = g < c0, n = u ? up : dn;
          const float *h = y->halo[1][0][u ? 0 : 1][mb];
          from = h + ((s * Co + c) * n + (u ? g - (c0 - n) : g - (c0 + cn))) * Wo;
          if (mx) amf = from + S * rowf * n;
        }
        if (!mx) {
          memcpy(d, from, sizeof(float) * (size_t)Wo);
          continue;
        }
        for (int64_t x = 0; x < Wo; x++) { /* max pooling: scatter to the rank's input rows */
          const int a = am ? am[x] : (int)amf[x];
          if (a < 0 || a / W < y->ilo || a / W >= y->ihi) continue;
          din[((s * Ci + c) * (y->ihi - y->ilo) + a / W - y->ilo) * W + a % W] += from[x];
        }
      }
  if (mx) return;
  const int br0 = blo * st - l->pad, bh = (nb - 1) * st + l->kh;
  memset(y->dinx, 0, sizeof(float) * (size_t)(S * Ci * bh * Wp));
  if (l->kind == WL_CONV2D) { /* ΔX = Wᵀ·ΔY; the pass's weight gradient is discarded (the input
                                 it reads is the zeroed ΔX itself) */
    kn_conv s = {(int)S, (int)Ci, bh, (int)Wp, (int)Co, l->kh, l->kw, l->stride, 0, l->groups};
    k->conv2d_bwd(y->dinx, y->dwx, NULL, r->ws, y->dext, y->dinx, y->w, &s, KN_MATH_FP32);
  } else {
    kn_pool s = {(int)S, (int)Ci, bh, (int)Wp, l->kh, l->kw, l->stride, 0};
    k->avgpool_bwd(y->dinx, y->dext, &s);
  }
  const int lo = MAX(y->ilo, br0), hi = MIN(y->ihi, br0 + bh);
  for (int64_t s = 0; s < S; s++)
    for (int64_t c = 0; c < Ci; c++)
      for (int g = lo; g < hi; g++) {
        const float *f = y->dinx + ((s * Ci + c) * bh + g - br0) * Wp + l->pad;
        float *d = din + ((s * Ci + c) * (y->ihi - y->ilo) + g - y->ilo) * W;
        for (int64_t x = 0; x < W; x++) d[x] += f[x];
      }
}

float *rm_halo_buf(rm_rank *r, const pl_op *op, int64_t *n) {
  rm_layer *y = LAY(r, op->layer);
  const wl_layer *l = y->l;
  const int dir = op->phase == PL_PH_BWD, send = op->kind == PL_SEND, k = op->peer > r->rank;
  const int rows = y->hrows[dir][send][k], mb = op->microbatch;
  float *buf = y->halo[dir][send][k][mb];
  const int64_t S = y->S, rowf = y->hrow_f[dir];
  *n = S * rowf * rows;
  if (!send) return buf;
  if (dir == 0) { /* input rows next to the boundary: the top ones up, the bottom ones down */
    const int g0 = k ? y->ihi - rows : y->ilo;
    for (int64_t s = 0; s < S; s++)
      for (int64_t c = 0; c < l->in.c; c++)
        for (int g = g0; g < g0 + rows; g++)
          memcpy(buf + ((s * l->in.c + c) * rows + g - g0) * l->in.w,
                 domain_in_row(r, y, mb, s, c, g), sizeof(float) * (size_t)l->in.w);
    return buf;
  }
  /* output-gradient rows (and for max pooling their argmax after them) */
  const int64_t Co = l->out.c, Wo = l->out.w, cn = y->s->cn, r0 = k ? cn - rows : 0;
  const float *dout = din_ptr(r, y->index, mb);
  const int64_t half = S * Co * Wo * rows;
  for (int64_t s = 0; s < S; s++)
    for (int64_t c = 0; c < Co; c++)
      for (int64_t g = 0; g < rows; g++) {
        const int64_t src = ((s * Co + c) * cn + r0 + g) * Wo, dst = ((s * Co + c) * rows + g) * Wo;
        memcpy(buf + dst, dout + src, sizeof(float) * (size_t)Wo);
        if (l->kind == WL_MAXPOOL)
          for (int64_t x = 0; x < Wo; x++) buf[half + dst + x] = (float)y->argmax[mb][src + x];
      }
  return buf;
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
  if (sh->kind == PL_SPLIT_DOMAIN && (l->kind == WL_CONV2D || l->kind == WL_MAXPOOL ||
                                l->kind == WL_AVGPOOL || l->kind == WL_BATCHNORM)) {
    domain_forward(r, y, mb);
    return;
  }
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = conv_shape(l, S);
    if (sh->kind == PL_SPLIT_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_fwd(sh->kind == PL_SPLIT_ROWS ? y->dslice : out, r->ws, in, y->w, bias, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR: {
    const int64_t oc = sh->kind == PL_SPLIT_ROWS || sh->kind == PL_SPLIT_COL ? sh->cn
                       : sh->kind == PL_SPLIT_QKV                     ? 3 * sh->cn
                                                                : l->out.c;
    const int64_t ic = local_in_c(y);
    if (sh->kind == PL_SPLIT_ROW && r->tp_i != 0) bias = NULL; /* added once before the sum */
    k->linear_fwd(sh->kind == PL_SPLIT_ROWS ? y->dslice : out, in, y->w, bias, (int)M, (int)ic, (int)oc,
                  KN_MATH_FP32);
    if (i + 1 < r->l1 && r->rs[i + 1].kind == PL_SPLIT_CE) { /* the parallel cross-entropy's max */
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
    if (sh->kind == PL_SPLIT_VOCAB) { /* this rank's rows; the others' are summed in by the all-reduce */
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
                     (int)(sh->kind == PL_SPLIT_LOCAL ? sh->cn : l->out.c),
                     sh->kind == PL_SPLIT_LOCAL ? l->heads / sh->parts : l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    if (sh->kind == PL_SPLIT_CE) { /* Σ exp(z − max) and the target's logit over this rank's words */
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
  if (sh->kind == PL_SPLIT_ROWS) { /* pack the block, cmax channels per row, for the all-gather */
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
  if (sh->kind == PL_SPLIT_DOMAIN && l->kind == WL_BATCHNORM) { /* local sums; rm_coll_end: ΔX */
    const int64_t C = l->in.c, HW = sh->cn * l->out.w;
    const float *mean = y->saved[mb], *rstd = mean + C;
    for (int64_t c = 0; c < C; c++) {
      double sdy = 0, sdyx = 0;
      for (int64_t s = 0; s < S; s++) {
        const float *x = in + (s * C + c) * HW, *dy = dout + (s * C + c) * HW;
        for (int64_t p = 0; p < HW; p++) {
          sdy += dy[p];
          sdyx += dy[p] * ((x[p] - mean[c]) * rstd[c]);
        }
      }
      y->g[c] += (float)sdyx;
      y->g[C + c] += (float)sdy;
      y->bnst[c] = (float)sdy;
      y->bnst[C + c] = (float)sdyx;
    }
    return;
  }
  if (sh->kind == PL_SPLIT_DOMAIN && (l->kind == WL_CONV2D || l->kind == WL_MAXPOOL ||
                                l->kind == WL_AVGPOOL)) {
    domain_backward(r, y, mb, din);
    return;
  }
  if (sh->kind == PL_SPLIT_ROWS) { /* this rank's channels of the (replicated) output gradient */
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
    if (sh->kind == PL_SPLIT_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_bwd(din, y->g, dbias, r->ws, dout, in, y->w, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR: {
    const int64_t oc = sh->kind == PL_SPLIT_ROWS || sh->kind == PL_SPLIT_COL ? sh->cn
                       : sh->kind == PL_SPLIT_QKV                     ? 3 * sh->cn
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
    if (sh->kind == PL_SPLIT_VOCAB) {
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
                     (int)(sh->kind == PL_SPLIT_LOCAL ? sh->cn : l->out.c),
                     sh->kind == PL_SPLIT_LOCAL ? l->heads / sh->parts : l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    if (sh->kind == PL_SPLIT_CE) { /* probabilities of this rank's words from the global max and sum */
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
  if (sh->redist_rows && sh->kind != PL_SPLIT_ROWS && din) { /* the rank's rows of the whole gradient */
    const rs_layer *src = &r->rs[l->inputs[0]];
    domain_take_rows(y, din_ptr(r, l->inputs[0], mb), din, (int)src->c0, (int)(src->c0 + src->cn));
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
  /* a windowed domain layer's boundary op computes the whole slab once the halo rows are in;
   * its interior op (timed apart in simulation) has nothing left to do here */
  if (op->part == PL_PART_INTERIOR) return;
  const gboolean experts = op->part == PL_PART_EXPERTS;
  if (op->phase == PL_PH_OPT) step(r, iter);
  else if (op->phase == PL_PH_FWD) forward(r, op->layer, op->microbatch, iter, experts);
  else backward(r, op->layer, op->microbatch, iter, experts);
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
    if (sh->kind != PL_SPLIT_ROWS) return FALSE;
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
    if (sh->redist_rows) { /* the domain slabs, cmax rows each */
      const rs_layer *ss = &r->rs[src];
      const int64_t C = l->in.c, W = l->in.w;
      const float *from = in_ptr(r, src, mb);
      for (int64_t e = 0; e < y->S * C; e++)
        memcpy(y->part + e * ss->cmax * W, from + e * ss->cn * W, sizeof(float) * (size_t)(ss->cn * W));
      x->how = RM_X_ALLGATHER;
      x->send = y->part;
      x->recv = y->gath;
      x->n = (size_t)(y->S * C * ss->cmax * W);
      return TRUE;
    }
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
  case PL_WHY_BN_STATS: /* forward Σx, Σx²; backward Σdy, Σdy·x̂, per channel */
    if (sh->kind != PL_SPLIT_DOMAIN || l->kind != WL_BATCHNORM) return FALSE;
    x->how = RM_X_ALLREDUCE_SUM;
    x->send = x->recv = op->phase == PL_PH_FWD ? y->saved[mb] + 2 * l->in.c : y->bnst;
    x->n = 2 * (size_t)l->in.c;
    return TRUE;
  case PL_WHY_FWD_REDUCE:
    x->how = RM_X_ALLREDUCE_SUM;
    if (sh->kind == PL_SPLIT_ROW || sh->kind == PL_SPLIT_VOCAB) { /* partial outputs */
      x->send = x->recv = y->out[mb];
      x->n = (size_t)act_floats(r, op->layer);
    } else if (sh->kind == PL_SPLIT_COL && op->layer + 1 < r->l1 && r->rs[op->layer + 1].kind == PL_SPLIT_CE) {
      x->how = RM_X_ALLREDUCE_MAX; /* the logits' row maxima */
      x->send = x->recv = LAY(r, op->layer + 1)->saved[mb] + M * sh->cn;
      x->n = (size_t)M;
    } else if (sh->kind == PL_SPLIT_CE) { /* Σ exp(z − max) and the target logit */
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
  const wl_layer *l = y->l;
  if (op->purpose == PL_WHY_REDIST && sh->redist_rows) { /* slabs -> (S, C, H, W) */
    const rs_layer *ss = &r->rs[l->inputs[0]];
    const int64_t C = l->in.c, H = l->in.h, W = l->in.w, cmax = ss->cmax;
    for (int t = 0; t < ss->parts; t++) {
      int lo, hi;
      pl_domain_slab((int)H, ss->parts, t, &lo, &hi);
      const float *blk = y->gath + (size_t)t * y->S * C * cmax * W;
      for (int64_t e = 0; e < y->S * C; e++)
        memcpy(y->redist[mb] + (e * H + lo) * W, blk + e * cmax * W,
               sizeof(float) * (size_t)((hi - lo) * W));
    }
  } else if (op->purpose == PL_WHY_BN_STATS) { /* Ioffe & Szegedy 2015 with the group's sums */
    const int64_t C = l->in.c, HW = sh->cn * l->out.w, S = y->S;
    const double cnt = (double)S * l->out.h * l->out.w;
    const float *in = layer_in(r, y, 0, mb);
    float *mean = y->saved[mb], *rstd = mean + C;
    if (op->phase == PL_PH_FWD) {
      const float *sum = mean + 2 * C;
      for (int64_t c = 0; c < C; c++) {
        const double mu = sum[c] / cnt, var = MAX(0.0, sum[C + c] / cnt - mu * mu);
        const double rs = 1.0 / sqrt(var + BN_EPS);
        mean[c] = (float)mu;
        rstd[c] = (float)rs;
        for (int64_t s = 0; s < S; s++) {
          const float *x = in + (s * C + c) * HW;
          float *o = y->out[mb] + (s * C + c) * HW;
          for (int64_t p = 0; p < HW; p++) o[p] = (float)((x[p] - mu) * rs) * y->w[c] + y->w[C + c];
        }
      }
    } else if (l->inputs[0] != -1) {
      const float *dout = din_ptr(r, op->layer, mb);
      float *din = din_ptr(r, l->inputs[0], mb);
      for (int64_t c = 0; c < C; c++) {
        const double sdy = y->bnst[c], sdyx = y->bnst[C + c];
        for (int64_t s = 0; s < S; s++) {
          const float *x = in + (s * C + c) * HW, *dy = dout + (s * C + c) * HW;
          float *dx = din + (s * C + c) * HW;
          for (int64_t p = 0; p < HW; p++) {
            const double xh = (x[p] - mean[c]) * rstd[c];
            dx[p] += (float)(y->w[c] * rstd[c] * (dy[p] - sdy / cnt - xh * sdyx / cnt));
          }
        }
      }
    }
  } else if (op->purpose == PL_WHY_FWD_GATHER) { /* blocks (member, row, cmax·u) -> (row, d·u) */
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
    if (sh->redist_rows)
      domain_take_rows(y, din, y->dred, (int)r->rs[src].c0, (int)(r->rs[src].c0 + r->rs[src].cn));
    else
      for (int64_t e = 0; e < n; e++) din[e] += from[e];
  } else if (op->purpose == PL_WHY_MOE_DISPATCH || op->purpose == PL_WHY_MOE_COMBINE) {
    rmoe_xfer_done(y->moe, op->phase == PL_PH_FWD, op->purpose == PL_WHY_MOE_DISPATCH, mb,
                   y->out[mb]);
  }
}
