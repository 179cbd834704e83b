/* xfer.c — the buffers the real executor's communication thread moves (model.h): activations
 * and gradients between stages, gradients for their synchronisation, and the tensor-parallel,
 * domain and expert collectives' buffers with their unpacking. */
#include "exec/real/layer.h"

#include <string.h>

#include "core/dl_common.h"

/* ---- point to point ------------------------------------------------------------------------ */

/* Floats of layer `layer`'s output for one micro-batch on this rank. */
static int64_t act_floats(const rm_rank *r, int layer) {
  return r->rs[layer].S * r->rs[layer].out_per;
}

float *rm_act_out(rm_rank *r, int mb, int64_t *n) {
  if (r->l1 >= r->m->n_layers) return NULL;
  *n = act_floats(r, r->l1 - 1);
  return RM_LAY(r, r->l1 - 1)->out[mb];
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

/* ---- gradients ----------------------------------------------------------------------------- */

float *rm_layer_grad(rm_rank *r, int layer, rm_grad_part part, int64_t *n) {
  if (layer < r->l0 || layer >= r->l1 || !RM_LAY(r, layer)->g) return NULL;
  rm_layer *y = RM_LAY(r, layer);
  if (y->l->kind != WL_MOE || part == RM_GRAD_ALL) {
    *n = y->n_params;
    return y->g;
  }
  const int64_t router = y->l->in.c * y->l->experts + (y->l->bias ? y->l->experts : 0);
  *n = part == RM_GRAD_DENSE ? router : y->n_params - router;
  return part == RM_GRAD_DENSE ? y->g : y->g + router;
}

/* ---- collectives --------------------------------------------------------------------------- */

/* PL_WHY_REDIST: the batch-parallel samples of the tp group, in sample order; after the domain
 * part the slabs, cmax rows each. FALSE when layer y's input is not redistributed. */
static gboolean redist_begin(rm_rank *r, rm_layer *y, int mb, rm_xfer *x) {
  if (!y->redist) return FALSE;
  const int src = y->l->inputs[0];
  x->how = RM_X_ALLGATHER;
  if (y->s->redist_rows) {
    x->n = (size_t)rm_domain_pack_slabs(r, y, mb);
    x->send = y->part;
    x->recv = y->gath;
    return TRUE;
  }
  x->send = rm_in_ptr(r, src, mb);
  x->recv = y->redist[mb];
  x->n = (size_t)act_floats(r, src);
  return TRUE;
}

/* PL_WHY_FWD_REDUCE: the partial outputs of a row-split linear or a vocabulary-split embedding,
 * the logits' row maxima of a column linear before the parallel cross-entropy, or that
 * cross-entropy's Σ exp(z − max) and target logits. FALSE when layer y has none. */
static gboolean fwd_reduce_begin(rm_rank *r, rm_layer *y, int mb, rm_xfer *x) {
  const rs_layer *sh = y->s;
  const int i = y->index;
  const int64_t M = y->S * rm_positions(&y->l->in);
  x->how = RM_X_ALLREDUCE_SUM;
  if (sh->kind == PL_SPLIT_ROW || sh->kind == PL_SPLIT_VOCAB) { /* partial outputs */
    x->send = x->recv = y->out[mb];
    x->n = (size_t)act_floats(r, i);
  } else if (sh->kind == PL_SPLIT_COL && i + 1 < r->l1 && r->rs[i + 1].kind == PL_SPLIT_CE) {
    x->how = RM_X_ALLREDUCE_MAX; /* the logits' row maxima */
    x->send = x->recv = RM_LAY(r, i + 1)->saved[mb] + M * sh->cn;
    x->n = (size_t)M;
  } else if (sh->kind == PL_SPLIT_CE) { /* Σ exp(z − max) and the target logit */
    x->send = x->recv = y->saved[mb] + M * sh->cn + M;
    x->n = (size_t)(2 * M);
  } else {
    return FALSE;
  }
  return TRUE;
}

gboolean rm_coll_begin(rm_rank *r, const pl_op *op, int mb, rm_xfer *x) {
  memset(x, 0, sizeof *x);
  if (op->layer < r->l0 || op->layer >= r->l1) return FALSE;
  rm_layer *y = RM_LAY(r, op->layer);
  const wl_layer *l = y->l;
  const rs_layer *sh = y->s;
  switch (op->purpose) {
  case PL_WHY_FWD_GATHER: { /* the output blocks of a grid layer */
    if (sh->kind != PL_SPLIT_ROWS) return FALSE;
    int64_t rows, u;
    rm_rows_geom(y, &rows, &u);
    x->how = RM_X_ALLGATHER;
    x->send = y->part;
    x->recv = y->gath;
    x->n = (size_t)(rows * sh->cmax * u);
    return TRUE;
  }
  case PL_WHY_REDIST: return redist_begin(r, y, mb, x);
  case PL_WHY_BWD_DX: /* partial input gradients of a split conv/linear */
    if (!y->dpart || l->inputs[0] == -1) return FALSE;
    x->how = RM_X_ALLREDUCE_SUM;
    x->send = y->dpart;
    x->recv = y->dred;
    x->n = (size_t)(y->S * rm_shape_elems(&l->in));
    return TRUE;
  case PL_WHY_BN_STATS: /* forward Σx, Σx²; backward Σdy, Σdy·x̂, per channel */
    if (sh->kind != PL_SPLIT_DOMAIN || l->kind != WL_BATCHNORM) return FALSE;
    x->how = RM_X_ALLREDUCE_SUM;
    x->send = x->recv = op->phase == PL_PH_FWD ? y->saved[mb] + 2 * l->in.c : y->bnst;
    x->n = 2 * (size_t)l->in.c;
    return TRUE;
  case PL_WHY_FWD_REDUCE: return fwd_reduce_begin(r, y, mb, x);
  case PL_WHY_MOE_DISPATCH:
  case PL_WHY_MOE_COMBINE:
    return y->moe ? rmoe_xfer(y->moe, op->phase == PL_PH_FWD, op->purpose == PL_WHY_MOE_DISPATCH,
                              mb, rm_layer_in(r, y, 0, mb), rm_din_ptr(r, op->layer, mb), x)
                  : FALSE;
  default:
    return FALSE;
  }
}

void rm_coll_end(rm_rank *r, const pl_op *op, int mb) {
  rm_layer *y = RM_LAY(r, op->layer);
  const rs_layer *sh = y->s;
  if (op->purpose == PL_WHY_REDIST && sh->redist_rows) { /* slabs -> (S, C, H, W) */
    rm_domain_unpack_slabs(r, y, mb);
  } else if (op->purpose == PL_WHY_BN_STATS) {
    rm_domain_bn_done(r, y, op->phase == PL_PH_FWD, mb);
  } else if (op->purpose == PL_WHY_FWD_GATHER) { /* blocks (member, row, cmax·u) -> (row, d·u) */
    int64_t rows, u;
    rm_rows_geom(y, &rows, &u);
    float *out = y->out[mb];
    for (int t = 0; t < sh->parts; t++) {
      const int64_t c0 = t * sh->dim / sh->parts, cn = (t + 1) * sh->dim / sh->parts - c0;
      for (int64_t row = 0; row < rows; row++)
        memcpy(out + (row * sh->dim + c0) * u, y->gath + (t * rows + row) * sh->cmax * u,
               sizeof(float) * (size_t)(cn * u));
    }
  } else if (op->purpose == PL_WHY_BWD_DX) { /* the summed partials join the input's gradient */
    const int src = y->l->inputs[0];
    float *din = rm_din_ptr(r, src, mb);
    const int64_t n = act_floats(r, src);
    /* with --grid-layers fc the input was gathered: take this rank's samples back */
    const float *from = y->dred + (y->redist ? r->rs[src].sub * r->m->layers[src].out_elems : 0);
    if (sh->redist_rows)
      rm_domain_take_rows(y, din, y->dred, (int)r->rs[src].c0,
                          (int)(r->rs[src].c0 + r->rs[src].cn));
    else
      for (int64_t e = 0; e < n; e++) din[e] += from[e];
  } else if (op->purpose == PL_WHY_MOE_DISPATCH || op->purpose == PL_WHY_MOE_COMBINE) {
    rmoe_xfer_done(y->moe, op->phase == PL_PH_FWD, op->purpose == PL_WHY_MOE_DISPATCH, mb,
                   y->out[mb]);
  }
}
