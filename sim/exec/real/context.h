/* context.h — attention under context parallelism in the real executor (context.c). */
#ifndef DL_REAL_CONTEXT_H
#define DL_REAL_CONTEXT_H

#include "exec/real/layer.h"

/* The state of attention layer y under --cp (its buffers in the rank's backend memory). */
real_cp *real_cp_new(real_model_rank *r, const real_model_layer *y);
void real_cp_free(const real_model_rank *r, real_cp *s);

/* Per op of `plan` (g_free it): which of its layer's kernels, messages or collectives of its kind,
 * micro-batch and pass (forward, recomputed forward, backward) it is, from 0; -1 for iteration-
 * level ops. */
int *real_cp_steps(const plan_rank *plan);

/* Step j's kernel of attention layer y for op's micro-batch: forward (ring: the block of chunk j
 * merged into the output; ulysses: the attention of what the all-to-all brought) or backward
 * (ring: the Q gradient added to din). */
void real_cp_forward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j);
void real_cp_backward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                      float *din);
/* Whether step j's forward merges into the output the steps before it wrote (a recomputation
 * must not clear it then). */
gboolean real_cp_keeps_output(const real_model_layer *y, int j);

/* Ring message j (op a send or a receive of layer y): its buffer and *n floats of payload, with
 * REAL_MODEL_P2P_TRAILER_FLOATS after them; a send's payload is packed on the call.
 * real_cp_p2p_done, once a receive is in: the backward's last message (the gradients of the
 * rank's own K and V) joins the input's gradient. */
float *real_cp_p2p_buf(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                       int64_t *n);
void real_cp_p2p_done(real_model_rank *r, real_model_layer *y, const plan_op *op, int j);

/* Ulysses' all-to-all `op`, its j-th of the pass (model.h's real_model_coll_begin); FALSE when it
 * is not one of layer y's. real_cp_xfer_end unpacks what arrived. */
gboolean real_cp_xfer_begin(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                            real_model_xfer *x);
void real_cp_xfer_end(real_model_rank *r, real_model_layer *y, const plan_op *op, int j);

#endif
