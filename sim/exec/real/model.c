/* model.c — one rank's layers, run for real (see model.h): the iteration's data, forward and
 * backward of every layer kind, the optimizer step. The state is built in layer.c (layer.h), the
 * domain-parallel layers run in domain.c and the communication thread's buffers are in xfer.c.
 * Every kernel runs through the rank's backend r->k (kernels/kernels.h); the grid's row blocks
 * (rows_pack, rows_slice) are packed on the host and run only on a host backend (layer.h). */
#include "exec/real/layer.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "exec/real/context.h"

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

/* RMSNorm's epsilon: Llama 3's norm_eps (1e-5, the model's params.json). */
#define RMSNORM_EPS 1e-5f

/* ---- shapes ------------------------------------------------------------------------------- */

/* A rope layer's head width: its channels over the query heads and two per key/value group. */
static int rope_hs(const wl_layer *l) {
  return (int)(l->in.c / (l->heads + 2 * wl_kv_heads(l)));
}

static kn_pool pool_shape(const wl_layer *l, int64_t S) {
  kn_pool s = {(int)S, (int)l->in.c, (int)l->in.h, (int)l->in.w, l->kh, l->kw, l->stride, l->pad};
  return s;
}

/* The input channels and output channels a layer computes with on this rank (heads:
 * real_model_attn_heads). */
static int64_t local_in_c(const real_model_layer *y) {
  return y->s->kind == PLAN_SPLIT_ROW || y->s->kind == PLAN_SPLIT_LOCAL ? y->l->in.c / y->s->parts
                                                                    : y->l->in.c;
}

static int64_t local_out_c(const real_model_layer *y) {
  const real_shard_layer *sh = y->s;
  return sh->kind == PLAN_SPLIT_ROWS || sh->kind == PLAN_SPLIT_COL ? sh->cn
         : sh->kind == PLAN_SPLIT_QKV                           ? 3 * sh->cn
                                                              : y->l->out.c;
}

/* ---- data ---------------------------------------------------------------------------------- */

/* Global index of sample `sub + s` of micro-batch mb of the rank's data-parallel row, within
 * iteration `iter`'s data (`sub`: the rank's first sample of the row's micro-batch, rs.h). */
static uint64_t sample_id(const real_model_rank *r, int iter, int mb, int64_t sub, int64_t s) {
  const uint64_t row = (uint64_t)(r->c->batch / r->c->dp);
  uint64_t g =
      (uint64_t)r->dp_i * row + (uint64_t)mb * (row / (uint64_t)r->nmb) + (uint64_t)sub + s;
  return (uint64_t)iter * (uint64_t)r->c->batch + g;
}

/* One value per position of layer `sh`'s positions for its samples of micro-batch mb: hashed
 * from the seed, the sample and the position in the sequence, modulo `mod`, into `out` (S rows
 * of npos). Returns the number of values. */
static int64_t seq_values(const real_model_rank *r, const real_shard_layer *sh, int iter, int mb,
                          uint64_t seed, uint64_t mod, int *out) {
  int64_t start[2], at[2], len[2];
  const int runs = real_shard_runs(sh, start, at, len);
  for (int64_t s = 0; s < sh->S; s++) {
    const uint64_t g = sample_id(r, iter, mb, sh->sub, s);
    for (int j = 0; j < runs; j++)
      for (int64_t t = 0; t < len[j]; t++)
        out[s * sh->npos + at[j] + t] =
            (int)(real_model_hash4(seed, g, (uint64_t)(start[j] + t), 0) % mod);
  }
  return sh->S * sh->npos;
}

/* The iteration's data is made on the host (r->hbuf) and uploaded to the backend's buffers. */
void real_model_iter_begin(real_model_rank *r, int iter) {
  const kn_backend *k = r->k;
  for (int i = r->l0; i < r->l1; i++) {
    real_model_layer *y = REAL_MODEL_LAY(r, i);
    if (y->own) k->zero(y->g, sizeof(float) * (size_t)y->n_params);
    for (int mb = 0; y->gmb && mb < r->nmb; mb++)
      k->zero(y->gmb[mb], sizeof(float) * (size_t)y->n_params);
  }
  const int64_t per = real_model_shape_elems(&r->m->input);
  float *hx = r->hbuf;
  int *hi = r->hbuf;
  for (int mb = 0; mb < r->nmb; mb++) {
    for (int64_t s = 0; s < r->S_in && r->x; s++) {
      const uint64_t g = sample_id(r, iter, mb, r->sub_in, s);
      for (int64_t e = 0; e < per; e++)
        hx[s * per + e] = (float)(2.0 * real_model_unit(real_model_hash4(REAL_MODEL_SEED_INPUT, g,
                                                                         (uint64_t)e, 0)) -
                                  1.0);
    }
    if (r->x) k->upload(r->x[mb], hx, sizeof(float) * (size_t)(r->S_in * per));
    if (r->tok && r->rs_in) { /* one token per position: those of the rank's share */
      const int64_t n = seq_values(r, r->rs_in, iter, mb, REAL_MODEL_SEED_TOKENS,
                                   (uint64_t)r->m->vocab, hi);
      k->upload(r->tok[mb], hi, sizeof(int) * (size_t)n);
    }
    if (r->lab) {
      const int li = r->m->n_layers - 1;
      const int64_t n = seq_values(r, &r->rs[li], iter, mb, REAL_MODEL_SEED_LABELS,
                                   (uint64_t)r->m->layers[li].in.c, hi);
      k->upload(r->lab[mb], hi, sizeof(int) * (size_t)n);
    }
  }
}

/* ---- forward ------------------------------------------------------------------------------- */

/* The parallel cross-entropy's max: the row maxima of layer y's logits `out` (M rows of this
 * rank's oc words) into the saved floats of the PLAN_SPLIT_CE layer that follows it. */
static void ce_row_max(real_model_rank *r, const real_model_layer *y, int mb, const float *out,
                       int64_t M, int64_t oc) {
  r->k->row_max(REAL_MODEL_LAY(r, y->index + 1)->saved[mb] + M * oc, out, (int)M, (int)oc);
}

/* PLAN_SPLIT_CE cross-entropy of M rows of logits `in`: Σ exp(z − max) and the target's logit over
 * this rank's words, into the saved floats after the maxima. */
static void softmax_ce_split_fwd(real_model_rank *r, real_model_layer *y, const float *in, int mb,
                                 int64_t M) {
  const int64_t V = y->s->cn;
  float *mx = y->saved[mb] + M * V, *sum = mx + M, *zt = mx + 2 * M;
  r->k->softmax_ce_slice_fwd(sum, zt, in, mx, r->lab[mb], (int)M, (int)V, (int)y->s->c0);
}

/* PLAN_SPLIT_ROWS: packs the output block (y->dslice), cmax channels per row, for the all-gather.
 */
static void rows_pack(real_model_layer *y) {
  const real_shard_layer *sh = y->s;
  int64_t rows, u;
  real_model_rows_geom(y, &rows, &u);
  for (int64_t row = 0; row < rows; row++)
    memcpy(y->part + row * sh->cmax * u, y->dslice + row * sh->cn * u,
           sizeof(float) * (size_t)(sh->cn * u));
}

/* A token or position table over layer y's positions (real_shard_runs): forward into `out`, or
 * (out NULL) backward from `dout` into its gradient. A position table is read at the positions;
 * r->tok holds the tokens of the rank's positions. */
static void embedding_runs(real_model_rank *r, real_model_layer *y, float *out, const float *dout,
                           int mb) {
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  const int C = (int)l->out.c;
  const gboolean pt = real_model_position_table(r->m, l);
  int64_t start[2], at[2], len[2];
  const int runs = real_shard_runs(sh, start, at, len);
  /* one call over the samples when the rank's positions are one run */
  const int64_t n_s = runs == 1 ? 1 : y->S, S = runs == 1 ? y->S : 1;
  for (int64_t s = 0; s < n_s; s++)
    for (int j = 0; j < runs; j++) {
      const int64_t row = s * sh->npos + at[j];
      const int *tok = pt ? NULL : r->tok[mb] + row;
      const int64_t w = pt ? start[j] * C : 0;
      if (out) r->k->embedding_fwd(out + row * C, tok, y->w + w, NULL, (int)S, (int)len[j], C);
      else r->k->embedding_bwd(y->g + w, NULL, dout + row * C, tok, (int)S, (int)len[j], C);
    }
}

/* Rotary embedding of layer y's positions, run by run at their places in the sequence: forward
 * `in` into `out`, or backward (fwd FALSE) `in` = dout added into `out` = din. */
static void rope_runs(real_model_rank *r, real_model_layer *y, float *out, const float *in,
                      gboolean fwd) {
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  const int NH = real_model_attn_heads(y), KVH = real_model_attn_kv(y), hs = rope_hs(l);
  const int64_t row = kn_qkv_width(NH * hs, NH, KVH);
  int64_t start[2], at[2], len[2];
  const int runs = real_shard_runs(sh, start, at, len);
  const int64_t n_s = runs == 1 ? 1 : y->S, S = runs == 1 ? y->S : 1;
  for (int64_t s = 0; s < n_s; s++)
    for (int j = 0; j < runs; j++) {
      const int64_t e = (s * sh->npos + at[j]) * row;
      if (fwd)
        r->k->rope_fwd(out + e, in + e, (int)S, (int)len[j], hs, NH, KVH, (float)l->rope_theta,
                       (int)start[j]);
      else
        r->k->rope_bwd(out + e, in + e, (int)S, (int)len[j], hs, NH, KVH, (float)l->rope_theta,
                       (int)start[j]);
    }
}

/* The kernel of layer y's kind, forward, for micro-batch mb of iteration iter (a PLAN_SPLIT_ROWS
 * conv/linear writes this rank's channels to y->dslice, the others y->out[mb]). */
static void forward_kind(real_model_rank *r, real_model_layer *y, int mb, int iter,
                         gboolean experts) {
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  const int64_t S = y->S, M = S * sh->npos, n = S * sh->out_per;
  const float *in = real_model_layer_in(r, y, 0, mb);
  float *out = sh->sp_sum ? y->spfull : y->out[mb]; /* the whole partial, reduce-scattered */
  const kn_backend *k = r->k;
  const float *bias = real_model_bias_of(y, y->w);
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = real_model_conv_shape(l, S);
    if (sh->kind == PLAN_SPLIT_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_fwd(sh->kind == PLAN_SPLIT_ROWS ? y->dslice : out, r->ws, in, y->w, bias, &s,
                  r->math);
    break;
  }
  case WL_LINEAR: {
    const int64_t oc = local_out_c(y), ic = local_in_c(y);
    if (sh->kind == PLAN_SPLIT_ROW && r->tp_i != 0) bias = NULL; /* added once before the sum */
    k->linear_fwd(sh->kind == PLAN_SPLIT_ROWS ? y->dslice : out, in, y->w, bias, (int)M, (int)ic,
                  (int)oc, r->math);
    if (real_model_holds(r, y->index + 1) && r->rs[y->index + 1].kind == PLAN_SPLIT_CE)
      ce_row_max(r, y, mb, out, M, oc);
    break;
  }
  case WL_BATCHNORM:
    k->batchnorm_fwd(out, y->saved[mb], y->saved[mb] + l->in.c, in, y->w, y->w + l->in.c, (int)S,
                     (int)l->in.c, (int)real_model_positions(&l->in));
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
  case WL_ADD: k->add_fwd(out, in, real_model_layer_in(r, y, 1, mb), (long)n); break;
  case WL_FLATTEN: k->copy(out, in, sizeof(float) * (size_t)n); break;
  case WL_EMBEDDING:
    if (sh->kind == PLAN_SPLIT_VOCAB) /* this rank's rows; the all-reduce sums the others' in */
      k->embedding_slice_fwd(out, r->tok[mb], y->w, (int)M, (int)l->out.c, (int)sh->c0,
                             (int)sh->cn);
    else
      embedding_runs(r, y, out, NULL, mb);
    break;
  case WL_ATTENTION:
    if (y->cp) { /* ring: one block; ulysses: the whole sequence of the all-to-all's heads */
      real_cp_forward(r, y, r->op, real_model_cp_step(r, r->op));
      break;
    }
    k->attention_fwd(out, l->flash ? NULL : y->saved[mb], r->ws, in, (int)S,
                     (int)real_model_positions(&l->in), real_model_attn_width(y),
                     real_model_attn_heads(y), real_model_attn_kv(y), r->math);
    break;
  case WL_RMSNORM:
    k->rmsnorm_fwd(out, y->saved[mb], in, y->w, (int)M, (int)l->in.c, RMSNORM_EPS);
    break;
  case WL_SWIGLU: k->swiglu_fwd(out, in, (long)n); break;
  case WL_ROPE: rope_runs(r, y, out, in, TRUE); break;
  case WL_SOFTMAX_CE:
    if (sh->kind == PLAN_SPLIT_CE) {
      softmax_ce_split_fwd(r, y, in, mb, M);
    } else {
      double loss = k->softmax_ce_fwd(y->saved[mb], in, r->lab[mb], (int)M, (int)l->in.c);
      /* the tp group computes it alike; a recomputed forward counts it once more */
      if (r->tp_i == 0 && !r->recomputing) r->loss_sum[iter] += loss;
    }
    break;
  case WL_LRN:
    k->lrn_fwd(out, y->saved[mb], in, (int)S, (int)l->in.c, (int)real_model_positions(&l->in),
               l->kh, LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_fwd(out + s * per, in + s * per, (long)per, DROPOUT_P,
                     real_model_hash4(REAL_MODEL_SEED_DROPOUT, (uint64_t)y->index,
                              sample_id(r, iter, mb, sh->sub, s), 0));
    break;
  }
  case WL_MOE:
    real_moe_forward(y->moe, experts, out, in, y->w, mb);
    break;
  case WL_N_LAYER_KINDS: break;
  }
}

/* Forward op of layer i for micro-batch mb of iteration iter (`experts`: an MoE layer's experts
 * op, else its router op). */
static void forward(real_model_rank *r, int i, int mb, int iter, gboolean experts) {
  real_model_layer *y = REAL_MODEL_LAY(r, i);
  if (real_model_domain_layer(y)) {
    real_model_domain_forward(r, y, mb);
    return;
  }
  forward_kind(r, y, mb, iter, experts);
  if (y->s->kind == PLAN_SPLIT_ROWS) rows_pack(y);
  /* sp: the gathered input is not kept (Megatron gathers it again for backward): NaN, so that
   * the backward must have its gather */
  if (y->s->sp_gather && !r->recomputing) /* a recomputation's backward follows at once */
    r->k->scale(y->redist[mb], (long)(y->S * real_model_shape_elems(&y->l->in)), NAN);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* The micro-batch's first backward op on chunk v: fresh output gradients of the chunk's layers
 * and of the activation it sends back. */
static void fresh_grads(real_model_rank *r, int v, int mb) {
  for (int j = r->cl0[v]; j < r->cl1[v]; j++) {
    real_model_layer *y = REAL_MODEL_LAY(r, j);
    r->k->zero(y->dout, sizeof(float) * (size_t)(y->S * y->s->out_per));
  }
  if (r->grad_out[v]) {
    const real_shard_layer *p = &r->rs[r->cl0[v] - 1];
    r->k->zero(r->grad_out[v][mb], sizeof(float) * (size_t)(p->S * p->out_per));
  }
}

/* Where layer y's input gradient goes for micro-batch mb: the gradient of its source's output;
 * NULL for the first layer of the model, which needs none (conv and linear skip it); a split
 * conv/linear writes its partial input gradient aside (y->dpart, zeroed here): the tp
 * all-reduce adds it. */
static float *input_grad(real_model_rank *r, real_model_layer *y, int mb) {
  const wl_layer *l = y->l;
  float *din = l->inputs[0] == -1 ? NULL : real_model_din_ptr(r, l->inputs[0], mb);
  if (din && y->dpart) {
    r->k->zero(y->dpart, sizeof(float) * (size_t)(y->S * real_model_shape_elems(&l->in)));
    din = y->dpart;
  }
  return din;
}

/* PLAN_SPLIT_ROWS: this rank's channels of the (replicated) output gradient, in y->dslice. */
static const float *rows_slice(real_model_layer *y, const float *dout) {
  const real_shard_layer *sh = y->s;
  int64_t rows, u;
  real_model_rows_geom(y, &rows, &u);
  for (int64_t row = 0; row < rows; row++)
    memcpy(y->dslice + row * sh->cn * u, dout + (row * sh->dim + sh->c0) * u,
           sizeof(float) * (size_t)(sh->cn * u));
  return y->dslice;
}

/* PLAN_SPLIT_CE cross-entropy backward: the probabilities of this rank's words from the global max
 * and sum, their gradient added to din (M rows); the loss of iteration iter on tp_i = 0. */
static void softmax_ce_split_bwd(real_model_rank *r, real_model_layer *y, float *din,
                                 const float *in, int mb, int iter, int64_t M) {
  const int64_t V = y->s->cn;
  const float *mx = y->saved[mb] + M * V, *sum = mx + M, *zt = mx + 2 * M;
  const float loss = r->k->softmax_ce_slice_bwd(din, in, mx, sum, zt, r->lab[mb], (int)M, (int)V,
                                                (int)y->s->c0);
  if (r->tp_i == 0) r->loss_sum[iter] += loss;
}

/* The kernel of layer y's kind, backward, for micro-batch mb of iteration iter: parameter
 * gradients into y->g, the input gradient added to din (input_grad; NULL: the scratch sink for
 * the kinds that always write one). */
static void backward_kind(real_model_rank *r, real_model_layer *y, float *din, int mb, int iter,
                          gboolean experts) {
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  const int64_t S = y->S, M = S * sh->npos, n = S * sh->out_per;
  const float *in = real_model_layer_in(r, y, 0, mb);
  /* sp: a summed output's gradient, all-gathered along the sequence */
  const float *dout = sh->sp_sum ? y->spdy : real_model_din_ptr(r, y->index, mb);
  if (sh->kind == PLAN_SPLIT_ROWS) dout = rows_slice(y, dout);
  float *din_any = din ? din : r->scratch;
  const kn_backend *k = r->k;
  float *dbias = real_model_bias_of(y, y->g);
  switch (l->kind) {
  case WL_CONV2D: {
    kn_conv s = real_model_conv_shape(l, S);
    if (sh->kind == PLAN_SPLIT_ROWS) s.C_out = (int)sh->cn;
    k->conv2d_bwd(din, y->g, dbias, r->ws, dout, in, y->w, &s, r->math);
    break;
  }
  case WL_LINEAR:
    k->linear_bwd(din, y->g, dbias, dout, in, y->w, (int)M, (int)local_in_c(y),
                  (int)local_out_c(y), r->math);
    break;
  case WL_BATCHNORM:
    k->batchnorm_bwd(din_any, y->g, y->g + l->in.c, dout, in, y->saved[mb],
                     y->saved[mb] + l->in.c, y->w, (int)S, (int)l->in.c,
                     (int)real_model_positions(&l->in));
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
    float *d2 = l->inputs[1] == -1 ? r->scratch : real_model_din_ptr(r, l->inputs[1], mb);
    k->add_bwd(din_any, d2, dout, (long)n);
    break;
  }
  case WL_FLATTEN: k->axpy(din_any, dout, (long)n, 1.0f); break;
  case WL_EMBEDDING:
    if (sh->kind == PLAN_SPLIT_VOCAB)
      k->embedding_slice_bwd(y->g, dout, r->tok[mb], (int)M, (int)l->out.c, (int)sh->c0,
                             (int)sh->cn);
    else
      embedding_runs(r, y, NULL, dout, mb);
    break;
  case WL_ATTENTION:
    if (y->cp) { /* ring: one block; ulysses: between the all-to-alls of dout and dQKV */
      real_cp_backward(r, y, r->op, real_model_cp_step(r, r->op), din_any);
      break;
    }
    k->attention_bwd(din_any, r->ws, dout, in, l->flash ? NULL : y->saved[mb], (int)S,
                     (int)real_model_positions(&l->in), real_model_attn_width(y),
                     real_model_attn_heads(y), real_model_attn_kv(y), r->math);
    break;
  case WL_RMSNORM:
    k->rmsnorm_bwd(din_any, y->g, dout, in, y->w, y->saved[mb], (int)M, (int)l->in.c);
    break;
  case WL_SWIGLU: k->swiglu_bwd(din_any, dout, in, (long)n); break;
  case WL_ROPE: rope_runs(r, y, din_any, dout, FALSE); break;
  case WL_SOFTMAX_CE:
    if (sh->kind == PLAN_SPLIT_CE)
      softmax_ce_split_bwd(r, y, din_any, in, mb, iter, M);
    else
      k->softmax_ce_bwd(din_any, y->saved[mb], r->lab[mb], (int)M, (int)l->in.c);
    break;
  case WL_LRN:
    k->lrn_bwd(din_any, dout, in, y->out[mb], y->saved[mb], (int)S, (int)l->in.c,
               (int)real_model_positions(&l->in), l->kh, LRN_ALPHA, LRN_BETA, LRN_K);
    break;
  case WL_DROPOUT: {
    const int64_t per = l->out_elems;
    for (int64_t s = 0; s < S; s++)
      k->dropout_bwd(din_any + s * per, dout + s * per, (long)per, DROPOUT_P,
                     real_model_hash4(REAL_MODEL_SEED_DROPOUT, (uint64_t)y->index,
                              sample_id(r, iter, mb, sh->sub, s), 0));
    break;
  }
  case WL_MOE:
    real_moe_backward(y->moe, experts, din_any, y->g, r->ws, dout, in, y->w, mb);
    break;
  case WL_N_LAYER_KINDS: break;
  }
}

/* Backward op of layer i for micro-batch mb of iteration iter (`experts` as for forward). */
static void backward(real_model_rank *r, int i, int mb, int iter, gboolean experts) {
  real_model_layer *y = REAL_MODEL_LAY(r, i);
  const real_shard_layer *sh = y->s;
  const int v = real_model_chunk_of(r, i);
  /* the layer's first backward op (ring attention runs one per step) */
  if (i == r->cl1[v] - 1 && real_model_cp_step(r, r->op) == 0) fresh_grads(r, v, mb);
  /* the micro-batch's own gradient where it has one (a tied layer here: its target's) */
  const int t = y->l->tied_to;
  const real_model_layer *o = t >= 0 && real_model_holds(r, t) ? REAL_MODEL_LAY(r, t) : y;
  if (o->gmb) y->g = o->gmb[mb];
  float *din = input_grad(r, y, mb);
  if (real_model_domain_layer(y)) {
    real_model_domain_backward(r, y, mb, din);
    return;
  }
  backward_kind(r, y, din, mb, iter, experts);
  /* after the domain part: the rank's rows of the whole gradient */
  if (sh->redist_rows && sh->kind != PLAN_SPLIT_ROWS && din) {
    const real_shard_layer *src = &r->rs[y->l->inputs[0]];
    real_model_domain_take_rows(y, real_model_din_ptr(r, y->l->inputs[0], mb), din, (int)src->c0,
                        (int)(src->c0 + src->cn));
  }
}

/* ---- optimizer step ------------------------------------------------------------------------ */

/* The step of iteration iter on every layer that owns its parameters. */
static void step(real_model_rank *r, int iter) {
  /* mean over the global batch: every micro-batch gradient is already a mean over its samples
   * (over the rank's share of their positions with context parallelism, whose ranks' gradients
   * the data-parallel sum adds too) */
  const float scale = 1.0f / (float)(r->c->dp * r->c->cp * r->nmb);
  for (int i = r->l0; i < r->l1; i++) {
    real_model_layer *y = REAL_MODEL_LAY(r, i);
    if (!y->own) continue;
    /* sharded: the rank's shard from its reduced gradient; the rest is another rank's */
    const int64_t lo = y->gacc ? y->sh_lo : 0, hi = y->gacc ? y->sh_hi : y->n_params;
    const long n = (long)(hi - lo);
    float *g = y->gacc ? y->gacc + lo : y->g;
    if (n > 0) {
      if (scale != 1.0f) r->k->scale(g, n, scale);
      if (r->m->optimizer == WL_OPT_ADAM)
        r->k->adam_step(y->w + lo, y->m1 + lo, y->m2 + lo, g, n, ADAM_LR, ADAM_BETA1, ADAM_BETA2,
                        ADAM_EPS, 0.0f, iter + 1);
      else
        r->k->sgd_momentum_step(y->w + lo, y->m1 + lo, g, n, SGD_LR, SGD_MOMENTUM, 0.0f);
    }
    if (!y->gacc) continue;
    if (n > 0) r->k->zero(g, sizeof(float) * (size_t)n);
    /* the other shards' parameters are stale here until they are gathered: NaN, so that a
     * gather the plan left out cannot go unseen */
    if (lo > 0) r->k->scale(y->w, (long)lo, NAN);
    if (hi < y->n_params) r->k->scale(y->w + hi, (long)(y->n_params - hi), NAN);
  }
}

void real_model_kernel(real_model_rank *r, const plan_op *op, int iter) {
  /* a windowed domain layer's boundary op computes the whole slab once the halo rows are in;
   * its interior op (timed apart in simulation) has nothing left to do here */
  if (op->part == PLAN_PART_INTERIOR) return;
  const gboolean experts = op->part == PLAN_PART_EXPERTS;
  r->op = op;
  /* recomputation, selective or full: the layer's forward again, before its backward. The
   * executor keeps every activation, so the layer's own output is NaN first (but the stage's
   * last one, which may still be on its way to the next stage): whatever its backward reads of
   * it must come from the recomputation */
  if (op->recompute) {
    real_model_layer *y = REAL_MODEL_LAY(r, op->layer);
    if (!real_model_sends(r, op->layer) &&
        !(y->cp && real_cp_keeps_output(y, real_model_cp_step(r, op))))
      r->k->scale(y->out[op->microbatch], (long)(y->S * y->s->out_per), NAN);
    r->recomputing = TRUE;
    forward(r, op->layer, op->microbatch, iter, experts);
    r->recomputing = FALSE;
  } else if (op->phase == PLAN_PH_OPT) step(r, iter);
  else if (op->phase == PLAN_PH_FWD) forward(r, op->layer, op->microbatch, iter, experts);
  else backward(r, op->layer, op->microbatch, iter, experts);
}

double real_model_loss_sum(const real_model_rank *r, int iter) { return r->loss_sum[iter]; }
