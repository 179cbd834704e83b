/* real_model.c — one rank's layers, run for real with the CPU twins (see real_model.h). */
#include "real_model.h"

#include <math.h>
#include <string.h>

#include "dl_common.h"
#include "kernels.h"
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
} rm_layer;

struct rm_rank {
  const wl_model *m;   /* borrowed */
  const cfg_run *c;    /* borrowed */
  int l0, l1;          /* the stage's layers [l0, l1) */
  int nmb;             /* micro-batches m */
  int dp_i;            /* data-parallel index */
  int64_t S;           /* samples per micro-batch */
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
  default:
    return FALSE;
  }
}

static void init_params(float *w, const wl_layer *t, int t_index) {
  int64_t nw, nb;
  double bound;
  param_layout(t, &nw, &nb, &bound);
  if (t->kind == WL_BATCHNORM || t->kind == WL_LAYERNORM) {
    for (int64_t e = 0; e < nw; e++) w[e] = 1.0f;
    for (int64_t e = 0; e < nb; e++) w[nw + e] = 0.0f;
    return;
  }
  for (int64_t e = 0; e < nw + nb; e++)
    w[e] = (float)((2.0 * unit(hash4(SEED_WEIGHTS, (uint64_t)t_index, (uint64_t)e, 0)) - 1.0) *
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

rm_rank *rm_new(const wl_model *m, const cfg_run *c, const pl_rank_plan *plan, int dp_i,
                GError **err) {
  if (!rr_check(m, c, err)) return NULL;
  rm_rank *r = g_new0(rm_rank, 1);
  r->m = m;
  r->c = c;
  r->l0 = plan->first_layer;
  r->l1 = plan->end_layer;
  r->nmb = c->microbatches;
  r->dp_i = dp_i;
  r->S = c->batch / c->dp / c->microbatches;
  r->L = g_new0(rm_layer, r->l1 - r->l0);
  r->loss_sum = g_new0(double, c->iters);
  const int64_t S = r->S;
  const size_t trailer = RM_P2P_TRAILER_FLOATS;
  size_t ws = 1, scratch = 1;
  gboolean reads_input = FALSE;
  for (int i = r->l0; i < r->l1; i++) {
    const wl_layer *l = &m->layers[i];
    rm_layer *y = LAY(r, i);
    y->l = l;
    y->index = i;
    const size_t out_n = (size_t)(S * l->out_elems);
    y->out = per_mb(r->nmb, out_n + trailer);
    y->dout = g_new0(float, out_n + 1);
    for (int k = 0; k < l->n_inputs; k++) reads_input |= l->inputs[k] == -1;
    if (l->inputs[0] == -1 || (l->n_inputs > 1 && l->inputs[1] == -1))
      scratch = MAX(scratch, (size_t)(S * shape_elems(&l->in)));
    /* parameters: own, or the tied target's (here: borrowed; elsewhere: a copy of its own) */
    const int t = l->tied_to;
    if (t >= 0 && t >= r->l0 && t < r->l1) {
      const rm_layer *ty = LAY(r, t);
      y->w = ty->w, y->g = ty->g, y->n_params = ty->n_params;
    } else if (l->params > 0 || t >= 0) {
      const wl_layer *tl = t >= 0 ? &m->layers[t] : l;
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
      y->n_params = nw + nb;
      y->w = g_new(float, y->n_params);
      y->g = g_new0(float, y->n_params);
      y->m1 = g_new0(float, y->n_params);
      if (m->optimizer == WL_OPT_ADAM) y->m2 = g_new0(float, y->n_params);
      init_params(y->w, tl, t >= 0 ? t : i);
    }
    /* what forward keeps for backward, beyond the input and output */
    size_t saved = 0;
    const int64_t M = S * positions(&l->in);
    switch (l->kind) {
    case WL_BATCHNORM: saved = 2 * (size_t)l->in.c; break;
    case WL_LAYERNORM: saved = 2 * (size_t)M; break;
    case WL_SOFTMAX_CE: saved = (size_t)(M * l->in.c); break;
    case WL_LRN: saved = out_n; break;
    case WL_ATTENTION:
      saved = (size_t)(S * l->heads * positions(&l->in) * positions(&l->in));
      ws = MAX(ws, kn_attention_ws_floats((int)S, (int)positions(&l->in), (int)l->out.c,
                                          l->heads, 1));
      break;
    case WL_CONV2D: {
      kn_conv s = conv_shape(l, S);
      ws = MAX(ws, kn_conv_ws_floats(&s));
      break;
    }
    case WL_MAXPOOL:
      y->argmax = g_new(int *, r->nmb);
      for (int k = 0; k < r->nmb; k++) y->argmax[k] = g_new0(int, out_n + 1);
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
    const size_t n = (size_t)(S * shape_elems(&m->input));
    if (m->vocab > 0) {
      r->tok = g_new(int *, r->nmb);
      for (int k = 0; k < r->nmb; k++) r->tok[k] = g_new0(int, n);
    } else {
      r->x = per_mb(r->nmb, n);
    }
  }
  if (r->l0 > 0) {
    const size_t n = (size_t)(S * m->layers[r->l0 - 1].out_elems) + trailer;
    r->act_in = per_mb(r->nmb, n);
    r->grad_out = per_mb(r->nmb, n);
  }
  if (r->l1 < m->n_layers)
    r->grad_in = per_mb(r->nmb, (size_t)(S * m->layers[r->l1 - 1].out_elems) + trailer);
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
  }
  g_free(r->L);
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

/* Global index of sample s of micro-batch mb, within iteration `iter`'s data. */
static uint64_t sample_id(const rm_rank *r, int iter, int mb, int64_t s) {
  uint64_t g = (uint64_t)r->dp_i * (uint64_t)(r->c->batch / r->c->dp) + (uint64_t)mb * r->S + s;
  return (uint64_t)iter * (uint64_t)r->c->batch + g;
}

void rm_iter_begin(rm_rank *r, int iter) {
  for (int i = r->l0; i < r->l1; i++) {
    rm_layer *y = LAY(r, i);
    if (y->own) memset(y->g, 0, sizeof(float) * (size_t)y->n_params);
  }
  const int64_t per = shape_elems(&r->m->input);
  for (int mb = 0; mb < r->nmb; mb++)
    for (int64_t s = 0; s < r->S; s++) {
      const uint64_t g = sample_id(r, iter, mb, s);
      for (int64_t e = 0; r->x && e < per; e++)
        r->x[mb][s * per + e] = (float)(2.0 * unit(hash4(SEED_INPUT, g, (uint64_t)e, 0)) - 1.0);
      for (int64_t e = 0; r->tok && e < per; e++)
        r->tok[mb][s * per + e] = (int)(hash4(SEED_TOKENS, g, (uint64_t)e, 0) % (uint64_t)r->m->vocab);
      if (r->lab) {
        const wl_layer *l = &r->m->layers[r->m->n_layers - 1];
        const int64_t rows = positions(&l->in);
        for (int64_t p = 0; p < rows; p++)
          r->lab[mb][s * rows + p] = (int)(hash4(SEED_LABELS, g, (uint64_t)p, 0) % (uint64_t)l->in.c);
      }
    }
}

/* ---- kernels ------------------------------------------------------------------------------- */

static const float *in_ptr(rm_rank *r, int src, int mb) {
  if (src == -1) return r->x ? r->x[mb] : NULL;
  if (src < r->l0) return r->act_in[mb];
  return LAY(r, src)->out[mb];
}

/* Where the gradient of layer `src`'s output accumulates (the scratch sink for the model input). */
static float *din_ptr(rm_rank *r, int src, int mb) {
  if (src == -1) return r->scratch;
  if (src < r->l0) return r->grad_out[mb];
  if (src == r->l1 - 1 && r->grad_in) return r->grad_in[mb];
  return LAY(r, src)->dout;
}

static void forward(rm_rank *r, int i, int mb, int iter) {
  rm_layer *y = LAY(r, i);
  const wl_layer *l = y->l;
  const int64_t S = r->S, M = S * positions(&l->in), n = S * l->out_elems;
  const float *in = in_ptr(r, l->inputs[0], mb);
  float *out = y->out[mb];
  const kn_backend *k = &kn_cpu;
  int64_t nw, nb;
  double bound;
  const float *bias = NULL;
  if (y->w && l->tied_to < 0 && param_layout(l, &nw, &nb, &bound) && nb > 0) bias = y->w + nw;
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = conv_shape(l, S);
    k->conv2d_fwd(out, r->ws, in, y->w, bias, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR:
    k->linear_fwd(out, in, y->w, bias, (int)M, (int)l->in.c, (int)l->out.c, KN_MATH_FP32);
    break;
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
  case WL_ADD: k->add_fwd(out, in, in_ptr(r, l->inputs[1], mb), (long)n); break;
  case WL_FLATTEN: memcpy(out, in, sizeof(float) * (size_t)n); break;
  case WL_EMBEDDING:
    k->embedding_fwd(out, position_table(r->m, l) ? NULL : r->tok[mb], y->w, NULL, (int)S,
                     (int)positions(&l->in), (int)l->out.c);
    break;
  case WL_ATTENTION:
    k->attention_fwd(out, y->saved[mb], r->ws, in, (int)S, (int)positions(&l->in), (int)l->out.c,
                     l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    r->loss_sum[iter] += k->softmax_ce_fwd(y->saved[mb], in, r->lab[mb], (int)M, (int)l->in.c);
    break;
  case WL_LRN:
    k->lrn_fwd(out, y->saved[mb], in, (int)S, (int)l->in.c, (int)positions(&l->in), l->kh,
               LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_fwd(out + s * per, in + s * per, (long)per, DROPOUT_P,
                     hash4(SEED_DROPOUT, (uint64_t)i, sample_id(r, iter, mb, s), 0));
    break;
  }
  case WL_MOE:
  case WL_N_LAYER_KINDS: break; /* refused by rm_new */
  }
}

static void backward(rm_rank *r, int i, int mb, int iter) {
  rm_layer *y = LAY(r, i);
  const wl_layer *l = y->l;
  const int64_t S = r->S, M = S * positions(&l->in), n = S * l->out_elems;
  if (i == r->l1 - 1) { /* the micro-batch's first backward op: fresh output gradients */
    for (int j = r->l0; j < r->l1; j++)
      memset(LAY(r, j)->dout, 0, sizeof(float) * (size_t)(S * LAY(r, j)->l->out_elems));
    if (r->grad_out)
      memset(r->grad_out[mb], 0, sizeof(float) * (size_t)(S * r->m->layers[r->l0 - 1].out_elems));
  }
  const float *in = in_ptr(r, l->inputs[0], mb);
  const float *dout = din_ptr(r, i, mb);
  /* the first layer of the model needs no input gradient (conv and linear skip it) */
  float *din = l->inputs[0] == -1 ? NULL : din_ptr(r, l->inputs[0], mb);
  float *din_any = din ? din : r->scratch;
  const kn_backend *k = &kn_cpu;
  int64_t nw, nb;
  double bound;
  float *dbias = NULL;
  if (y->g && l->tied_to < 0 && param_layout(l, &nw, &nb, &bound) && nb > 0) dbias = y->g + nw;
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = conv_shape(l, S);
    k->conv2d_bwd(din, y->g, dbias, r->ws, dout, in, y->w, &s, KN_MATH_FP32);
    break;
  }
  case WL_LINEAR:
    k->linear_bwd(din, y->g, dbias, dout, in, y->w, (int)M, (int)l->in.c, (int)l->out.c,
                  KN_MATH_FP32);
    break;
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
    k->embedding_bwd(y->g, NULL, dout, position_table(r->m, l) ? NULL : r->tok[mb], (int)S,
                     (int)positions(&l->in), (int)l->out.c);
    break;
  case WL_ATTENTION:
    k->attention_bwd(din_any, r->ws, dout, in, y->saved[mb], (int)S, (int)positions(&l->in),
                     (int)l->out.c, l->heads, KN_MATH_FP32);
    break;
  case WL_SOFTMAX_CE:
    k->softmax_ce_bwd(din_any, y->saved[mb], r->lab[mb], (int)M, (int)l->in.c);
    break;
  case WL_LRN:
    k->lrn_bwd(din_any, dout, in, y->out[mb], y->saved[mb], (int)S, (int)l->in.c,
               (int)positions(&l->in), l->kh, LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_bwd(din_any + s * per, dout + s * per, (long)per, DROPOUT_P,
                     hash4(SEED_DROPOUT, (uint64_t)i, sample_id(r, iter, mb, s), 0));
    break;
  }
  case WL_MOE:
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
  else if (op->phase == PL_PH_FWD) forward(r, op->layer, op->microbatch, iter);
  else backward(r, op->layer, op->microbatch, iter);
}

/* ---- buffers for the communication thread ------------------------------------------------- */

float *rm_act_out(rm_rank *r, int mb, int64_t *n) {
  if (r->l1 >= r->m->n_layers) return NULL;
  *n = r->S * r->m->layers[r->l1 - 1].out_elems;
  return LAY(r, r->l1 - 1)->out[mb];
}

float *rm_act_in(rm_rank *r, int mb, int64_t *n) {
  if (!r->act_in) return NULL;
  *n = r->S * r->m->layers[r->l0 - 1].out_elems;
  return r->act_in[mb];
}

float *rm_grad_out(rm_rank *r, int mb, int64_t *n) {
  if (!r->grad_out) return NULL;
  *n = r->S * r->m->layers[r->l0 - 1].out_elems;
  return r->grad_out[mb];
}

float *rm_grad_in(rm_rank *r, int mb, int64_t *n) {
  if (!r->grad_in) return NULL;
  *n = r->S * r->m->layers[r->l1 - 1].out_elems;
  return r->grad_in[mb];
}

float *rm_layer_grad(rm_rank *r, int layer, int64_t *n) {
  if (layer < r->l0 || layer >= r->l1 || !LAY(r, layer)->g) return NULL;
  *n = LAY(r, layer)->n_params;
  return LAY(r, layer)->g;
}

const float *rm_layer_params(const rm_rank *r, int layer, int64_t *n) {
  if (layer < r->l0 || layer >= r->l1) return NULL;
  const rm_layer *y = &r->L[layer - r->l0];
  if (!y->own || y->l->tied_to >= 0) return NULL;
  *n = y->n_params;
  return y->w;
}

double rm_loss_sum(const rm_rank *r, int iter) { return r->loss_sum[iter]; }
