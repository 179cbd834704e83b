/* moe.h — a mixture-of-experts layer in the real executor, whole or expert-parallel.
 *
 * Whole (ep = 1): the router kernel op runs kn_moe_fwd (kernels.h, the specification) and the
 * experts' backward op kn_moe_bwd; the other two kernel ops of the plan do nothing.
 *
 * Expert parallel (ep > 1, PLAN_SPLIT_EXPERTS): the plan's four steps on real data (GShard,
 * Lepikhin et al. 2021, §2.2): the router kernel computes the probabilities and every token's top-k
 * experts; the dispatch all-to-all first all-gathers the (expert, choice) counts of the EP group,
 * so every member takes the same capacity decisions as kn_moe_fwd would over the group's tokens in
 * group order (every token's first choice in token order, then every second choice, ...; capacity
 * ceil(factor·top_k·tokens/E) over the group's tokens), then moves the kept tokens to the ranks
 * holding their experts (uneven blocks); the experts kernel runs the rank's experts; the combine
 * all-to-all brings the outputs back and sums them weighted by the router probabilities. Backward
 * mirrors it. Routing comes from the data: --routing (the planner's byte counts) does not apply to
 * real runs. With dp = ep and one micro-batch the group is the whole batch, so the decisions are
 * the serial run's.
 *
 * Parameters (local order, real_shard.h): router weights (E, C), router bias (E) when the layer
 * has one, then w1 (E', F, C), b1 (E', F), w2 (E', C, F), b2 (E', C) of the rank's E' experts.
 */
#ifndef DL_REAL_MOE_H
#define DL_REAL_MOE_H

#include <glib.h>
#include <stdint.h>

#include "core/config.h"
#include "exec/real/model.h"
#include "exec/real/shard.h"
#include "kernels.h"
#include "model/workload.h"

typedef struct real_moe real_moe;

/* State of layer `l` with `M` tokens per micro-batch on this rank, `nmb` micro-batches; its
 * kernels run through `k` (the rank's backend, borrowed: it must outlive the result) with GEMM
 * arithmetic `math`. The whole layer (ep 1) keeps its state in k's memory; the expert-parallel
 * one rearranges tokens on the host and needs a host backend. */
real_moe *real_moe_new(const wl_layer *l, const real_shard_layer *s, const cfg_run *c, int64_t M,
                       int nmb, const kn_backend *k, kn_math math);
void real_moe_free(real_moe *x);
/* TRUE when an allocation of real_moe_new in the backend's memory failed. */
gboolean real_moe_failed(const real_moe *x);
/* Floats of the shared kernel workspace the layer needs. */
size_t real_moe_ws_floats(const real_moe *x);

/* Kernel ops: `experts` FALSE for the router op, TRUE for the experts op. `w`, `g` the layer's
 * local parameters and gradients; `ws` the rank's workspace (real_moe_ws_floats). */
void real_moe_forward(real_moe *x, gboolean experts, float *out, const float *in, const float *w,
                      int mb);
void real_moe_backward(real_moe *x, gboolean experts, float *din, float *g, float *ws,
                   const float *dout, const float *in, const float *w, int mb);

/* The all-to-alls (real_model_coll_begin/real_model_coll_end): forward or backward, dispatch or
 * combine. `in` is the layer's input (read by the forward dispatch), `dout` its output gradient
 * (read by the backward combine), `out` its output (written by the forward combine). The forward
 * dispatch is asked twice: first the count exchange (REAL_MODEL_X_COUNTS), then the tokens. */
gboolean real_moe_xfer(real_moe *x, gboolean fwd, gboolean dispatch, int mb, const float *in,
                   const float *dout, real_model_xfer *t);
void real_moe_xfer_done(real_moe *x, gboolean fwd, gboolean dispatch, int mb, float *out);

#endif
