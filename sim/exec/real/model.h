/* model.h — the numbers of the real executor: one rank's layers with real weights,
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
 * The loss layer's backward gives the gradient of its micro-batch's mean loss (over the rank's
 * share of the positions under context parallelism); the optimizer step multiplies the
 * accumulated (and all-reduced, over dp·cp) gradients by 1/(dp·cp·m), so the update is the one
 * of the mean loss over the global batch, as in the serial run.
 * Batch norm normalises each micro-batch with its own statistics (training mode, no running
 * statistics): with dp > 1 or m > 1 that is a different function of the batch than the serial
 * run's (as in PyTorch DDP without SyncBatchNorm).
 *
 * Optimizer (fixed hyper-parameters): SGD with momentum lr 0.01, momentum 0.9, no weight decay;
 * Adam (AdamW form, no weight decay) lr 1e-3, β1 0.9, β2 0.999, ε 1e-8, bias-corrected at step
 * k + 1.
 *
 * Threads: real_model_iter_begin, real_model_kernel run on the compute thread; the buffers handed
 * out below are read or written by the communication thread only between the events the plan orders
 * them by.
 */
#ifndef DL_REAL_MODEL_H
#define DL_REAL_MODEL_H

#include <glib.h>
#include <stdint.h>

#include "core/config.h"
#include "kernels.h"
#include "plan/plan.h"
#include "model/workload.h"

/* Floats of slack after every point-to-point buffer: the sender's post time rides there. */
#define REAL_MODEL_P2P_TRAILER_FLOATS 2

typedef struct real_model_rank real_model_rank;

/* The layers of `plan` (stage [first_layer, end_layer)) of rank `rank`, each the rank's slice
 * (real_shard.h), with weights initialised, every tensor in the memory of backend `k` (&kn_cpu,
 * the CUDA backend, or kn_cpu_guarded). `m`, `c`, `plan`, `k` are borrowed and must outlive the
 * result. DL_ERR_INPUT when real_shard_plan (real_shard.h) refuses the configuration, when a
 * device backend is asked for tensor, grid or expert parallelism (their rearrangements run on
 * the host), or when the tensors do not fit in the backend's memory; the executor table's real
 * check (exec.h) has passed. */
real_model_rank *real_model_new(const wl_model *m, const cfg_run *c, const plan_rank *plan,
                                int rank, const kn_backend *k, GError **err);
void real_model_free(real_model_rank *r);

/* Start of iteration `iter`: zeroes the gradients, makes the iteration's inputs and labels. */
void real_model_iter_begin(real_model_rank *r, int iter);

/* Runs kernel op `op` (forward or backward of its layer for its micro-batch, or the optimizer
 * step) of iteration `iter`. */
void real_model_kernel(real_model_rank *r, const plan_op *op, int iter);

/* The backend whose memory holds the tensors, and whether that is host memory (MPI may read it;
 * otherwise the buffers below are moved through a host copy with its upload and download). */
const kn_backend *real_model_backend(const real_model_rank *r);
gboolean real_model_on_host(const real_model_rank *r);

/* Point-to-point buffers of micro-batch `mb` (backend memory) of the model chunk that holds
 * layer `layer` (the op's layer), each with REAL_MODEL_P2P_TRAILER_FLOATS floats of slack after
 * *n floats of payload: the activation the chunk sends forward (its last layer's output), the
 * one it receives (the previous stage's output), the gradient it sends back (of its input) and
 * the one it receives (of its output). NULL when the chunk has no such neighbour. */
float *real_model_act_out(real_model_rank *r, int layer, int mb, int64_t *n);
float *real_model_act_in(real_model_rank *r, int layer, int mb, int64_t *n);
float *real_model_grad_out(real_model_rank *r, int layer, int mb, int64_t *n);
float *real_model_grad_in(real_model_rank *r, int layer, int mb, int64_t *n);

/* The buffer of halo op `op` (PLAN_SEND/PLAN_RECV with purpose PLAN_WHY_HALO, --domain conv) to
 * or from rank `peer`, with REAL_MODEL_P2P_TRAILER_FLOATS floats of slack after *n floats of
 * payload; a send's rows are packed into it on the call (call it when the op runs). Forward: the
 * input rows the neighbour's windows read; backward: the output-gradient rows whose windows reach
 * the neighbour's input rows, for max pooling followed by their argmax (as floats, exact below
 * 2^24). */
float *real_model_halo_buf(real_model_rank *r, const plan_op *op, int peer, int64_t *n);

/* The buffer of ring attention's message `op` (PLAN_SEND/PLAN_RECV with purpose
 * PLAN_WHY_CP_KV, --cp) with REAL_MODEL_P2P_TRAILER_FLOATS floats of slack after *n floats of
 * payload; a send's payload is packed into it on the call (call it when the op runs). */
float *real_model_cp_buf(real_model_rank *r, const plan_op *op, int64_t *n);
/* After a receive `op` is in the backend's buffer: what arrived joins the tensors it is for
 * (ring attention's last backward message: the gradients of the rank's K and V). */
void real_model_p2p_done(real_model_rank *r, const plan_op *op);

/* Which gradients of a layer: all, those synchronised with the dense layers (an MoE layer's
 * router), or an MoE layer's experts (synchronised over "expert_dp"). */
typedef enum {
  REAL_MODEL_GRAD_ALL,
  REAL_MODEL_GRAD_DENSE,
  REAL_MODEL_GRAD_EXPERTS
} real_model_grad_part;

/* The gradient (backend memory) of layer `layer`'s parameters on this rank (its slice; for a tied layer whose
 * target is on another stage: the gradient of its copy; for a tied layer whose target is here:
 * the target's) and its length in floats; NULL when the layer is elsewhere or has no
 * parameters. The parts of an MoE layer are contiguous (router first). */
float *real_model_layer_grad(real_model_rank *r, int layer, real_model_grad_part part, int64_t *n);

/* Sharded data parallelism (--zero, --fsdp), as the plan's gradient ops say: it is on when a
 * gradient op is a reduce-scatter or HYBRID_SHARD's all-reduce over replicas. Then each bucket's
 * (or unit's) reduced gradient goes to real_model_shard_add instead of back into the layers, and
 * the step updates only the rank's shard of each layer (real_model_shard_own), leaving the rest
 * of its parameters NaN until a parameter gather writes them (real_model_layer_weights). */
gboolean real_model_sharded(const real_model_rank *r);
/* The gradient micro-batch mb's backward wrote into layer `layer` (real_model_layer_grad's, the
 * one accumulated over the micro-batches, where the plan reduces the layer once an iteration). */
float *real_model_layer_grad_mb(real_model_rank *r, int layer, int mb, int64_t *n);
/* The parameters (backend memory, *n floats) a layer owns on this rank; NULL otherwise. */
float *real_model_layer_weights(real_model_rank *r, int layer, int64_t *n);
/* Layer `layer`'s parameters [lo, hi) are this rank's shard. */
void real_model_shard_own(real_model_rank *r, int layer, int64_t lo, int64_t hi);
/* The rank's shard of the layer's parameters: [*lo, *hi); FALSE when the layer is not sharded. */
gboolean real_model_shard_range(const real_model_rank *r, int layer, int64_t *lo, int64_t *hi);
/* Adds n host floats of a reduced gradient to the layer's shard gradient from element lo. */
void real_model_shard_add(real_model_rank *r, int layer, int64_t lo, const float *v, int64_t n);

/* Whether layer `layer` works on part of each sequence (sequence parallelism): its weights'
 * gradients are partial sums over tp. */
gboolean real_model_seq_split(const real_model_rank *r, int layer);
/* The end (one past the last layer) of the model chunk that holds `layer`; `layer` when none. */
int real_model_chunk_end(const real_model_rank *r, int layer);

/* A host copy (g_free it) of the parameters a layer owns (not tied copies) on this rank, in the
 * local order of real_shard_param_index (the serial layout when the layer is whole), NULL when it
 * owns none or is not on this rank. */
float *real_model_layer_params(const real_model_rank *r, int layer, int64_t *n);

/* Σ over micro-batches of the mean loss of iteration `iter` (0 on ranks without the loss, and
 * on tensor-parallel ranks other than tp_i = 0, which compute the same loss). */
double real_model_loss_sum(const real_model_rank *r, int iter);

/* A tensor- or expert-parallel collective on real buffers: what the communication thread moves.
 *   REAL_MODEL_X_ALLREDUCE_SUM/MAX  n floats of `send` reduced into `recv` (they may be the same
 * buffer) REAL_MODEL_X_ALLGATHER          n floats of `send` from each member, `recv` gets them in
 * member order REAL_MODEL_X_REDUCESCATTER     n floats per member of `send` (member-major) summed,
 * member r's block into `recv` REAL_MODEL_X_COUNTS  n ints of `isend` all-gathered into `irecv`; then
 * ask again REAL_MODEL_X_ALLTOALLV          send_n[j] floats of `send` to member j (packed in
 * member order), recv_n[j] floats from member j into `recv` */
typedef enum {
  REAL_MODEL_X_ALLREDUCE_SUM,
  REAL_MODEL_X_ALLREDUCE_MAX,
  REAL_MODEL_X_ALLGATHER,
  REAL_MODEL_X_COUNTS,
  REAL_MODEL_X_ALLTOALLV,
  REAL_MODEL_X_REDUCESCATTER
} real_model_xfer_kind;
typedef struct {
  real_model_xfer_kind how;
  const float *send;     /* borrowed */
  float *recv;           /* borrowed */
  size_t n;              /* floats (ints for REAL_MODEL_X_COUNTS), see above */
  const int *isend;      /* REAL_MODEL_X_COUNTS */
  int *irecv;
  const double *send_n;  /* REAL_MODEL_X_ALLTOALLV: floats per member (group order) */
  const double *recv_n;
} real_model_xfer;

/* The buffers of collective `op` (a tensor-parallel or MoE collective of micro-batch `mb`);
 * FALSE when the op moves no tensor of this module (gradients: see real_model_layer_grad). Between
 * real_model_coll_begin and real_model_coll_end the caller owns the buffers; real_model_coll_end
 * unpacks the result. */
gboolean real_model_coll_begin(real_model_rank *r, const plan_op *op, int mb, real_model_xfer *x);
void real_model_coll_end(real_model_rank *r, const plan_op *op, int mb);

#endif
