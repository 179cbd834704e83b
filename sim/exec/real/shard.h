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
   * works on (all of the rank's share of the sequence unless it is split along it); sp_sum: a row linear or a
   * vocabulary-parallel embedding whose partial output is reduce-scattered along the sequence
   * and whose output gradient is all-gathered before its backward; sp_gather: a column linear
   * whose input is all-gathered along the sequence (before its forward and its backward) and
   * whose input gradient is reduce-scattered */
  int64_t pos0, npos;
  gboolean seq_split, sp_sum, sp_gather;
  /* context parallelism (--cp): rank cp_i of cp holds 1/cp of every sequence of P positions,
   * and [pos0, pos0 + npos) index that share, not the sequence: ring attention's share is the
   * two mirrored chunks cp_i and 2·cp − 1 − cp_i of 2·cp (Megatron-Core's causal load
   * balance), Ulysses' the chunk cp_i of cp. cp = 1: the share is the whole sequence */
  int cp, cp_i;
  gboolean cp_ring;
  int64_t P;
} real_shard_layer;

/* The sequence positions of layer `s`'s local positions [0, npos), as at most two runs: run j
 * holds the positions [start[j], start[j] + len[j]) at local positions [at[j], at[j] + len[j]).
 * Returns the number of runs (1 or 2). */
int real_shard_runs(const real_shard_layer *s, int64_t start[2], int64_t at[2], int64_t len[2]);

/* Fills `out` (m->n_layers entries) for the rank with tensor-parallel index tp_i, expert index
 * ep_i and context-parallel index cp_i. DL_ERR_INPUT (one line naming the option and the layer)
 * for what the real executor does not split: grouped convolutions on the grid, Megatron splits
 * that do not divide, layers other than attention, GELU and ReLU between a column and a row
 * linear, mixture of experts with tp, --grid-layers fc with --pp, --domain conv with --pp or with
 * layers other than convolution, pooling, batch norm, ReLU, GELU and add in the domain part, or
 * ending in a global pooling; dropout on part of the sequence (--sequence-parallel, --cp). */
gboolean real_shard_plan(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, int cp_i,
                         real_shard_layer *out, GError **err);

/* Serial-layout index of each of the rank's parameters of layer `layer` (weights then bias; for
 * MoE router weights, router bias, w1, b1, w2, b2 of all experts) into `idx` (may be NULL), in
 * the rank's local order; returns how many. `s` is the layer's entry of real_shard_plan. */
int64_t real_shard_param_index(const wl_layer *l, const real_shard_layer *s, int64_t *idx);

#endif
