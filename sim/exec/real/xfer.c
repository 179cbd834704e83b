/* xfer.c — the buffers the real executor's communication thread moves (model.h): activations
 * and gradients between stages, gradients for their synchronisation, and the tensor-parallel,
 * domain and expert collectives' buffers with their unpacking. */
#include "exec/real/layer.h"

#include <string.h>

#include "core/dl_common.h"
#include "exec/real/context.h"

/* ---- point to point ------------------------------------------------------------------------ */

/* Floats of layer `layer`'s output for one micro-batch on this rank. */
static int64_t act_floats(const real_model_rank *r, int layer) {
  return r->rs[layer].S * r->rs[layer].out_per;
}

float *real_model_act_out(real_model_rank *r, int layer, int mb, int64_t *n) {
  if (!real_model_sends(r, layer)) return NULL;
  *n = act_floats(r, layer);
  return REAL_MODEL_LAY(r, layer)->out[mb];
}

float *real_model_act_in(real_model_rank *r, int layer, int mb, int64_t *n) {
  const int v = real_model_chunk_of(r, layer);
  if (v < 0 || !r->act_in[v]) return NULL;
  *n = act_floats(r, r->cl0[v] - 1);
  return r->act_in[v][mb];
}

float *real_model_grad_out(real_model_rank *r, int layer, int mb, int64_t *n) {
  const int v = real_model_chunk_of(r, layer);
  if (v < 0 || !r->grad_out[v]) return NULL;
  *n = act_floats(r, r->cl0[v] - 1);
  return r->grad_out[v][mb];
}

float *real_model_grad_in(real_model_rank *r, int layer, int mb, int64_t *n) {
  const int v = real_model_chunk_of(r, layer);
  if (v < 0 || !r->grad_in[v]) return NULL;
  *n = act_floats(r, r->cl1[v] - 1);
  return r->grad_in[v][mb];
}

float *real_model_cp_buf(real_model_rank *r, const plan_op *op, int64_t *n) {
  real_model_layer *y = REAL_MODEL_LAY(r, op->layer);
  return real_cp_p2p_buf(r, y, op, real_model_cp_step(r, op), n);
}

void real_model_p2p_done(real_model_rank *r, const plan_op *op) {
  if (op->purpose != PLAN_WHY_CP_KV) return;
  real_cp_p2p_done(r, REAL_MODEL_LAY(r, op->layer), op, real_model_cp_step(r, op));
}

/* ---- gradients ----------------------------------------------------------------------------- */

float *real_model_layer_grad(real_model_rank *r, int layer, real_model_grad_part part, int64_t *n) {
  if (!real_model_holds(r, layer) || !REAL_MODEL_LAY(r, layer)->g) return NULL;
  real_model_layer *y = REAL_MODEL_LAY(r, layer);
  if (y->l->kind != WL_MOE || part == REAL_MODEL_GRAD_ALL) {
    *n = y->n_params;
    return y->g;
  }
  const int64_t router = y->l->in.c * y->l->experts + (y->l->bias ? y->l->experts : 0);
  *n = part == REAL_MODEL_GRAD_DENSE ? router : y->n_params - router;
  return part == REAL_MODEL_GRAD_DENSE ? y->g : y->g + router;
}

/* ---- collectives --------------------------------------------------------------------------- */

void real_model_seq_blocks(const real_model_rank *r, float *dst, const float *src, int64_t S,
                           int parts, int64_t chunk, gboolean to_whole) {
  const size_t bytes = sizeof(float) * (size_t)chunk;
  for (int j = 0; j < parts; j++)
    for (int64_t s = 0; s < S; s++) {
      const int64_t whole = (s * parts + j) * chunk, block = (j * S + s) * chunk;
      if (to_whole) r->k->copy(dst + whole, src + block, bytes);
      else r->k->copy(dst + block, src + whole, bytes);
    }
}

/* PLAN_WHY_REDIST: the batch-parallel samples of the tp group, in sample order; after the domain
 * part the slabs, cmax rows each; under sequence parallelism (and PLAN_WHY_SP_REGATHER) the
 * sequence's chunks, member-major. FALSE when layer y's input is not redistributed. */
static gboolean redist_begin(real_model_rank *r, real_model_layer *y, int mb, real_model_xfer *x) {
  if (!y->redist) return FALSE;
  const int src = y->l->inputs[0];
  x->how = REAL_MODEL_X_ALLGATHER;
  if (y->s->sp_gather) {
    x->send = real_model_in_ptr(r, src, mb);
    x->recv = y->spbuf;
    x->n = (size_t)act_floats(r, src);
    return TRUE;
  }
  if (y->s->redist_rows) {
    x->n = (size_t)real_model_domain_pack_slabs(r, y, mb);
    x->send = y->part;
    x->recv = y->gath;
    return TRUE;
  }
  x->send = real_model_in_ptr(r, src, mb);
  x->recv = y->redist[mb];
  x->n = (size_t)act_floats(r, src);
  return TRUE;
}

/* PLAN_WHY_FWD_REDUCE: the partial outputs of a row-split linear or a vocabulary-split embedding,
 * the logits' row maxima of a column linear before the parallel cross-entropy, or that
 * cross-entropy's Σ exp(z − max) and target logits. FALSE when layer y has none. */
static gboolean fwd_reduce_begin(real_model_rank *r, real_model_layer *y, int mb,
                                 real_model_xfer *x) {
  const real_shard_layer *sh = y->s;
  const int i = y->index;
  const int64_t M = y->S * sh->npos;
  x->how = REAL_MODEL_X_ALLREDUCE_SUM;
  if (sh->sp_sum) { /* reduce-scattered along the sequence */
    real_model_seq_blocks(r, y->spbuf, y->spfull, y->S, sh->parts, sh->out_per, FALSE);
    x->how = REAL_MODEL_X_REDUCESCATTER;
    x->send = y->spbuf;
    x->recv = y->out[mb];
    x->n = (size_t)act_floats(r, i);
  } else if (sh->kind == PLAN_SPLIT_ROW || sh->kind == PLAN_SPLIT_VOCAB) { /* partial outputs */
    x->send = x->recv = y->out[mb];
    x->n = (size_t)act_floats(r, i);
  } else if (sh->kind == PLAN_SPLIT_COL && real_model_holds(r, i + 1) &&
             r->rs[i + 1].kind == PLAN_SPLIT_CE) {
    x->how = REAL_MODEL_X_ALLREDUCE_MAX; /* the logits' row maxima */
    x->send = x->recv = REAL_MODEL_LAY(r, i + 1)->saved[mb] + M * sh->cn;
    x->n = (size_t)M;
  } else if (sh->kind == PLAN_SPLIT_CE) { /* Σ exp(z − max) and the target logit */
    x->send = x->recv = y->saved[mb] + M * sh->cn + M;
    x->n = (size_t)(2 * M);
  } else {
    return FALSE;
  }
  return TRUE;
}

gboolean real_model_coll_begin(real_model_rank *r, const plan_op *op, int mb, real_model_xfer *x) {
  memset(x, 0, sizeof *x);
  if (!real_model_holds(r, op->layer)) return FALSE;
  real_model_layer *y = REAL_MODEL_LAY(r, op->layer);
  const wl_layer *l = y->l;
  const real_shard_layer *sh = y->s;
  switch (op->purpose) {
  case PLAN_WHY_FWD_GATHER: { /* the output blocks of a grid layer */
    if (sh->kind != PLAN_SPLIT_ROWS) return FALSE;
    int64_t rows, u;
    real_model_rows_geom(y, &rows, &u);
    x->how = REAL_MODEL_X_ALLGATHER;
    x->send = y->part;
    x->recv = y->gath;
    x->n = (size_t)(rows * sh->cmax * u);
    return TRUE;
  }
  case PLAN_WHY_REDIST:
  case PLAN_WHY_SP_REGATHER: return redist_begin(r, y, mb, x);
  case PLAN_WHY_BWD_DY_GATHER: /* sp: the output gradient's chunks */
    if (!sh->sp_sum) return FALSE;
    x->how = REAL_MODEL_X_ALLGATHER;
    x->send = real_model_din_ptr(r, op->layer, mb); /* the next stage's, for a stage's last */
    x->recv = y->spbuf;
    x->n = (size_t)act_floats(r, op->layer);
    return TRUE;
  case PLAN_WHY_BWD_DX: /* partial input gradients of a split conv/linear */
    if (!y->dpart || l->inputs[0] == -1) return FALSE;
    if (sh->sp_gather) { /* reduce-scattered along the sequence */
      const int64_t chunk = r->rs[l->inputs[0]].out_per;
      real_model_seq_blocks(r, y->spbuf, y->dpart, y->S, sh->parts, chunk, FALSE);
      x->how = REAL_MODEL_X_REDUCESCATTER;
      x->send = y->spbuf;
      x->recv = y->dred;
      x->n = (size_t)(y->S * chunk);
      return TRUE;
    }
    x->how = REAL_MODEL_X_ALLREDUCE_SUM;
    x->send = y->dpart;
    x->recv = y->dred;
    x->n = (size_t)(y->S * real_model_shape_elems(&l->in));
    return TRUE;
  case PLAN_WHY_BN_STATS: /* forward Σx, Σx²; backward Σdy, Σdy·x̂, per channel */
    if (sh->kind != PLAN_SPLIT_DOMAIN || l->kind != WL_BATCHNORM) return FALSE;
    x->how = REAL_MODEL_X_ALLREDUCE_SUM;
    x->send = x->recv = op->phase == PLAN_PH_FWD ? y->saved[mb] + 2 * l->in.c : y->bnst;
    x->n = 2 * (size_t)l->in.c;
    return TRUE;
  case PLAN_WHY_FWD_REDUCE: return fwd_reduce_begin(r, y, mb, x);
  case PLAN_WHY_CP_ALLTOALL: return real_cp_xfer_begin(r, y, op, real_model_cp_step(r, op), x);
  case PLAN_WHY_MOE_DISPATCH:
  case PLAN_WHY_MOE_COMBINE:
    return y->moe ? real_moe_xfer(
                        y->moe, op->phase == PLAN_PH_FWD, op->purpose == PLAN_WHY_MOE_DISPATCH, mb,
                        real_model_layer_in(r, y, 0, mb), real_model_din_ptr(r, op->layer, mb), x)
                  : FALSE;
  default:
    return FALSE;
  }
}

void real_model_coll_end(real_model_rank *r, const plan_op *op, int mb) {
  real_model_layer *y = REAL_MODEL_LAY(r, op->layer);
  const real_shard_layer *sh = y->s;
  if (op->purpose == PLAN_WHY_REDIST && sh->redist_rows) { /* slabs -> (S, C, H, W) */
    real_model_domain_unpack_slabs(r, y, mb);
  } else if ((op->purpose == PLAN_WHY_REDIST || op->purpose == PLAN_WHY_SP_REGATHER) &&
             sh->sp_gather) { /* the sequence's chunks -> whole sequences */
    real_model_seq_blocks(r, y->redist[mb], y->spbuf, y->S, sh->parts,
                          r->rs[y->l->inputs[0]].out_per, TRUE);
  } else if (op->purpose == PLAN_WHY_BWD_DY_GATHER && sh->sp_sum) {
    real_model_seq_blocks(r, y->spdy, y->spbuf, y->S, sh->parts, sh->out_per, TRUE);
  } else if (op->purpose == PLAN_WHY_BN_STATS) {
    real_model_domain_bn_done(r, y, op->phase == PLAN_PH_FWD, mb);
  } else if (op->purpose == PLAN_WHY_FWD_GATHER) { /* blocks (member, row, cmax·u) -> (row, d·u) */
    int64_t rows, u;
    real_model_rows_geom(y, &rows, &u);
    float *out = y->out[mb];
    for (int t = 0; t < sh->parts; t++) {
      const int64_t c0 = t * sh->dim / sh->parts, cn = (t + 1) * sh->dim / sh->parts - c0;
      for (int64_t row = 0; row < rows; row++)
        memcpy(out + (row * sh->dim + c0) * u, y->gath + (t * rows + row) * sh->cmax * u,
               sizeof(float) * (size_t)(cn * u));
    }
  } else if (op->purpose == PLAN_WHY_BWD_DX) { /* the summed partials join the input's gradient */
    const int src = y->l->inputs[0];
    float *din = real_model_din_ptr(r, src, mb);
    const int64_t n = act_floats(r, src);
    /* with --grid-layers fc the input was gathered: take this rank's samples back */
    const float *from = y->dred + (y->redist ? r->rs[src].sub * r->m->layers[src].out_elems : 0);
    if (sh->redist_rows)
      real_model_domain_take_rows(y, din, y->dred, (int)r->rs[src].c0,
                          (int)(r->rs[src].c0 + r->rs[src].cn));
    else
      r->k->axpy(din, from, (long)n, 1.0f);
  } else if (op->purpose == PLAN_WHY_CP_ALLTOALL) {
    real_cp_xfer_end(r, y, op, real_model_cp_step(r, op));
  } else if (op->purpose == PLAN_WHY_MOE_DISPATCH || op->purpose == PLAN_WHY_MOE_COMBINE) {
    real_moe_xfer_done(y->moe, op->phase == PLAN_PH_FWD, op->purpose == PLAN_WHY_MOE_DISPATCH, mb,
                   y->out[mb]);
  }
}
