/* real_shard.h — which part of every layer one rank of the real executor holds: the slice of a
 * tensor-parallel or expert-parallel layer's parameters (and where each local parameter sits in
 * the serial layout), the shape of the layer's activations on the rank, and its samples.
 *
 * The splits follow the planner (plan.c's file comment and roles()):
 *   Gholami grid Pr×Pc (--grid, --tp with --tp-style gholami; tp = Pr, dp = Pc)
 *     RS_ROWS   conv/linear on the grid with Pr > 1: rank tp_i keeps output channels/rows
 *               [tp_i·d/Pr, (tp_i+1)·d/Pr) (uneven splits allowed); its output block is
 *               all-gathered inside the tp group, so every other layer sees whole activations
 *               and runs replicated on them (the planner counts 1/Pr of their work: the real
 *               executor does all of it, with identical bits on every member);
 *     layers before the first linear under --grid-layers fc are batch-parallel over all P
 *               (B/P samples, `sub` = tp_i·B/P/m), and the first linear reads the tp group's
 *               all-gather of their output (`redist`).
 *   Megatron tp (Shoeybi et al. 2019, §3)
 *     RS_COL    column linear: output features [tp_i·d/tp, …); output stays local;
 *     RS_QKV    a column linear feeding attention (fused q|k|v of width 3h): rows
 *               [tp_i·h/tp, …) of each of Q, K and V, so every head stays whole on one rank;
 *     RS_ROW    row linear: input features [tp_i·d/tp, …); the bias is whole on every rank and
 *               added by tp_i = 0 only (the forward all-reduce sums the partial outputs);
 *     RS_LOCAL  attention heads, GELU, ReLU between a column and a row linear: 1/tp of the
 *               features (heads/tp heads);
 *     RS_VOCAB  token embedding, rows [tp_i·V/tp, …) of the table (vocabulary parallel);
 *     RS_CE     softmax cross-entropy after an output linear split over the vocabulary
 *               (Megatron's parallel cross-entropy: max and sum all-reduced over tp).
 *   Domain parallelism (--domain conv with a grid, Pr > 1)
 *     RS_DOMAIN  a layer before the first linear (plan.c's pl_domain_end): whole parameters,
 *               output rows [c0, c0 + cn) of its dim = out.h rows (pl_domain_slab); the first
 *               layer after the part reads the tp group's all-gather of the rows (`redist` with
 *               `redist_rows`).
 *   Experts (--ep)
 *     RS_EXPERTS an MoE layer: the router whole, experts [ep_i·E/ep, …) with ep_i = dp_i % ep.
 * Everything else is RS_FULL: whole parameters, whole activations.
 */
#ifndef DL_REAL_SHARD_H
#define DL_REAL_SHARD_H

#include <glib.h>
#include <stdint.h>

#include "core/config.h"
#include "model/workload.h"

#define RS_KINDS(X) X(RS_FULL, "full") X(RS_ROWS, "rows") X(RS_COL, "column") X(RS_QKV, "qkv") \
  X(RS_ROW, "row") X(RS_LOCAL, "local") X(RS_VOCAB, "vocab") X(RS_CE, "vocab_ce")             \
  X(RS_EXPERTS, "experts") X(RS_DOMAIN, "domain")
#define RS_ENUM(e, s) e,
typedef enum { RS_KINDS(RS_ENUM) RS_N_KINDS } rs_kind;
#undef RS_ENUM

typedef struct {
  rs_kind kind;
  int parts;         /* ways the split dimension is cut (tp, or ep for experts); 1 for RS_FULL */
  int64_t dim;       /* the split dimension's full size (channels, features, vocabulary, experts;
                        for RS_QKV the width h of each of q, k, v) */
  int64_t c0, cn;    /* this rank's slice [c0, c0 + cn) of it */
  int64_t cmax;      /* the largest slice of any member (all-gather block) */
  int64_t S;         /* samples of one micro-batch on this rank */
  int64_t sub;       /* first of them within its data-parallel row's micro-batch */
  gboolean redist;   /* the layer's input is all-gathered over tp first (--grid-layers fc, or
                        after the domain part) */
  gboolean redist_rows; /* that input arrives as RS_DOMAIN row slabs (--domain conv) */
  int64_t out_per;   /* floats per sample of the layer's output buffer on this rank */
} rs_layer;

/* Fills `out` (m->n_layers entries) for the rank with tensor-parallel index tp_i and expert
 * index ep_i. DL_ERR_INPUT (one line naming the option and the layer) for what the real
 * executor does not split: grouped convolutions on the grid, Megatron splits that do not divide,
 * layers other than attention, GELU and ReLU between a column and a row linear, mixture of
 * experts with tp, --grid-layers fc with --pp, --domain conv with --pp or with layers other than
 * convolution, pooling, batch norm, ReLU, GELU and add in the domain part, or ending in a global
 * pooling. */
gboolean rs_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, rs_layer *out,
                 GError **err);

/* Serial-layout index of each of the rank's parameters of layer `layer` (weights then bias; for
 * MoE router weights, router bias, w1, b1, w2, b2 of all experts) into `idx` (may be NULL), in
 * the rank's local order; returns how many. `s` is the layer's entry of rs_plan. */
int64_t rs_param_index(const wl_layer *l, const rs_layer *s, int64_t *idx);

#endif
