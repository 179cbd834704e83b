/* shard.h — which part of every layer one rank of the real executor holds: the planner's split
 * table (plan/shard.h: the split kinds, slices and samples) as the real build's buffers see it,
 * the size of each layer's output buffer on the rank, and where each local parameter sits in the
 * serial layout.
 *
 * On Gholami's grid the layers between the conv/linear layers run whole on identical data in
 * every member of the tp group (the planner counts 1/Pr of their work): every other layer sees
 * whole activations because each conv/linear's output block is all-gathered. Under --grid-layers
 * fc the layers before the first linear are batch-parallel over all P (`sub` = tp_i·B/P/m).
 * Experts: the router whole, experts [ep_i·E/ep, …) with ep_i = dp_i % ep.
 */
#ifndef DL_REAL_SHARD_H
#define DL_REAL_SHARD_H

#include <glib.h>
#include <stdint.h>

#include "core/config.h"
#include "model/workload.h"
#include "plan/shard.h"

typedef struct {
  plan_split kind;     /* the split table's kind (plan/shard.h) */
  int parts;         /* ways the split dimension is cut (tp, or ep for experts); 1 when whole */
  int64_t dim;       /* the split dimension's full size (channels, features, vocabulary, experts;
                        for PLAN_SPLIT_QKV the width h of each of q, k, v) */
  int64_t c0, cn;    /* this rank's slice [c0, c0 + cn) of it */
  int64_t cmax;      /* the largest slice of any member (all-gather block) */
  int64_t S;         /* samples of one micro-batch on this rank */
  int64_t sub;       /* first of them within its data-parallel row's micro-batch */
  gboolean redist;   /* the layer's input is all-gathered over tp first (--grid-layers fc, or
                        after the domain part) */
  gboolean redist_rows; /* that input arrives as PLAN_SPLIT_DOMAIN row slabs (--domain conv) */
  int64_t out_per;   /* floats per sample of the layer's output buffer on this rank */
  /* Megatron's sequence parallelism: the positions [pos0, pos0 + npos) of each sample the layer
   * works on (all of them unless it is split along the sequence); sp_sum: a row linear or a
   * vocabulary-parallel embedding whose partial output is reduce-scattered along the sequence
   * and whose output gradient is all-gathered before its backward; sp_gather: a column linear
   * whose input is all-gathered along the sequence (before its forward and its backward) and
   * whose input gradient is reduce-scattered */
  int64_t pos0, npos;
  gboolean seq_split, sp_sum, sp_gather;
} real_shard_layer;

/* Fills `out` (m->n_layers entries) for the rank with tensor-parallel index tp_i and expert
 * index ep_i. DL_ERR_INPUT (one line naming the option and the layer) for what the real
 * executor does not split: grouped convolutions on the grid, Megatron splits that do not divide,
 * layers other than attention, GELU and ReLU between a column and a row linear, mixture of
 * experts with tp, --grid-layers fc with --pp, --domain conv with --pp or with layers other than
 * convolution, pooling, batch norm, ReLU, GELU and add in the domain part, or ending in a global
 * pooling. */
gboolean real_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i,
                         real_shard_layer *out, GError **err);

/* Serial-layout index of each of the rank's parameters of layer `layer` (weights then bias; for
 * MoE router weights, router bias, w1, b1, w2, b2 of all experts) into `idx` (may be NULL), in
 * the rank's local order; returns how many. `s` is the layer's entry of real_shard_plan. */
int64_t real_shard_param_index(const wl_layer *l, const real_shard_layer *s, int64_t *idx);

#endif
