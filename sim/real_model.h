/* real_model.h — the numbers of the real executor: one rank's layers with real weights,
 * gradients, optimizer state and activations, and the kernel ops of the plan run on them with
 * the CPU twins (kernels/kernels.h). No MPI here: real_exec.c moves the buffers.
 *
 * Rank independence (what makes a parallel run comparable with the serial one):
 *   weights   element e of layer i's parameter block is drawn from a hash of (i, e) only (a
 *             tied copy uses its target layer's i), uniform in ±1/√fan_in for conv and linear
 *             weights and biases (PyTorch's default bound), ±0.02·√3 for embeddings (std 0.02,
 *             GPT-2), γ = 1 and β = 0 for batch norm and layer norm;
 *   data      sample g of iteration k (g = dp_i·B/dp + mb·S + s for data-parallel rank dp_i,
 *             micro-batch mb of S samples) has inputs, tokens and labels hashed from (k, g, ·)
 *             only: inputs uniform in [-1, 1), tokens and labels uniform over the vocabulary or
 *             the classes;
 *   dropout   one mask per sample, seeded by (layer, k, g); p = 0.5 (the loader does not keep
 *             a layer's p and every shipped workload uses 0.5).
 * The loss layer's backward gives the gradient of its micro-batch's mean loss; the optimizer
 * step multiplies the accumulated (and all-reduced) gradients by 1/(dp·m), so the update is the
 * one of the mean loss over the global batch, as in the serial run.
 * Batch norm normalises each micro-batch with its own statistics (training mode, no running
 * statistics): with dp > 1 or m > 1 that is a different function of the batch than the serial
 * run's (as in PyTorch DDP without SyncBatchNorm).
 *
 * Optimizer (fixed hyper-parameters): SGD with momentum lr 0.01, momentum 0.9, no weight decay;
 * Adam (AdamW form, no weight decay) lr 1e-3, β1 0.9, β2 0.999, ε 1e-8, bias-corrected at step
 * k + 1.
 *
 * Threads: rm_iter_begin, rm_kernel run on the compute thread; the buffers handed out below are
 * read or written by the communication thread only between the events the plan orders them by.
 */
#ifndef DL_REAL_MODEL_H
#define DL_REAL_MODEL_H

#include <glib.h>
#include <stdint.h>

#include "config.h"
#include "plan.h"
#include "workload.h"

/* Floats of slack after every point-to-point buffer: the sender's post time rides there. */
#define RM_P2P_TRAILER_FLOATS 2

typedef struct rm_rank rm_rank;

/* The layers of `plan` (stage [first_layer, end_layer)) for data-parallel index `dp_i`, with
 * weights initialised. `m`, `c`, `plan` are borrowed and must outlive the result. DL_ERR_INPUT
 * when rr_check refuses the configuration (realrun.h). */
rm_rank *rm_new(const wl_model *m, const cfg_run *c, const pl_rank_plan *plan, int dp_i,
                GError **err);
void rm_free(rm_rank *r);

/* Start of iteration `iter`: zeroes the gradients, makes the iteration's inputs and labels. */
void rm_iter_begin(rm_rank *r, int iter);

/* Runs kernel op `op` (forward or backward of its layer for its micro-batch, or the optimizer
 * step) of iteration `iter`. */
void rm_kernel(rm_rank *r, const pl_op *op, int iter);

/* Point-to-point buffers of micro-batch `mb`, each with RM_P2P_TRAILER_FLOATS floats of slack
 * after *n floats of payload: the activation this stage sends forward (its last layer's
 * output), the one it receives (the previous stage's output), the gradient it sends back (of
 * its input) and the one it receives (of its output). NULL when the stage has no such neighbour. */
float *rm_act_out(rm_rank *r, int mb, int64_t *n);
float *rm_act_in(rm_rank *r, int mb, int64_t *n);
float *rm_grad_out(rm_rank *r, int mb, int64_t *n);
float *rm_grad_in(rm_rank *r, int mb, int64_t *n);

/* The gradient of layer `layer`'s parameters on this rank (for a tied layer whose target is on
 * another stage: the gradient of its copy; for a tied layer whose target is here: the target's)
 * and its length in floats; NULL when the layer is elsewhere or has no parameters. */
float *rm_layer_grad(rm_rank *r, int layer, int64_t *n);

/* The parameters a layer owns (not tied copies), serial layout (weights then bias; γ then β),
 * NULL when it owns none or is not on this rank. */
const float *rm_layer_params(const rm_rank *r, int layer, int64_t *n);

/* Σ over micro-batches of the mean loss of iteration `iter` (0 on ranks without the loss). */
double rm_loss_sum(const rm_rank *r, int iter);

#endif
