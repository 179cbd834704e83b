/* stream.h — one rank's op list on two streams, the loop both rank-side executors share.
 *
 * Like a CUDA device with NCCL: the compute stream runs the kernel ops in order; the
 * communication stream runs the collectives, sends and receives in order; an op that waits for
 * an event blocks until the op that records it has completed (cudaStreamWaitEvent). Every
 * receive of an iteration is posted when the communication stream starts the iteration, so a
 * message moves as soon as its sender posts it; sends never block the stream and are completed
 * at the end of the iteration.
 *
 * An executor supplies a backend (exec_stream_ops: its clock, kernels, messages, collectives and
 * events) and runs exec_stream_compute() in its compute thread or actor and exec_stream_comm()
 * in the rank itself (the only one that calls MPI). The loops record every op in the rank's
 * record (record.h), so the SMPI and real executors measure the same way.
 * No MPI and no SimGrid here: the backend holds them (ASTRA-sim's network API idea).
 */
#ifndef DL_STREAM_H
#define DL_STREAM_H

#include "kdb/kdb.h"
#include "plan/plan.h"
#include "out/record.h"

typedef struct {
  double (*now)(void *be);        /* the executor's clock, s */
  /* host work of iteration `iter` before its kernels that the op list does not describe (the
   * real flavour's synthetic batch); NULL when there is none. Timed and left out. */
  void (*iter_begin)(void *be, int iter);
  /* runs kernel op `op` to completion; returns where its duration came from */
  kdb_origin (*kernel)(void *be, const plan_op *op, int iter);
  /* optional (NULL: one `kernel` call per op): the duration in seconds `op` will take, and its
   * origin, without running it; then `run_for` runs a batch of such kernels in one go. A
   * simulated GPU does this: consecutive kernels that no other stream waits for between them
   * are one activity, with the same timeline. */
  double (*kernel_time)(void *be, const plan_op *op, int iter, kdb_origin *origin);
  void (*run_for)(void *be, double seconds);
  /* optional, with kernel_time (NULL: none): the host time to launch kernel op `op`. The host
   * launches the compute ops in order from the start of each iteration, each taking its host
   * time; a kernel starts when the stream is free and the host has launched it. */
  double (*host_time)(void *be, const plan_op *op, int iter);
  void (*recv_post)(void *be, const plan_op *op, int iter);  /* posts the receive of a PLAN_RECV
                                                              (NULL: nothing to post) */
  /* waits for a posted receive; returns when its sender posted the message (same clock) */
  double (*recv_wait)(void *be, const plan_op *op, int iter);
  void (*send)(void *be, const plan_op *op, int iter);       /* posts a PLAN_SEND, never blocks */
  void (*sends_wait)(void *be, int iter);                  /* completes the iteration's sends */
  /* runs collective op `op`; returns its algorithm's name (static or interned) and the bytes
   * this rank sent */
  const char *(*coll)(void *be, const plan_op *op, int iter, double *wire_bytes);
  /* optional (NULL: none): holds the communication stream before send or collective op `op`
   * (index `op_index` in the plan) of `iter` for the run's network jitter
   * (run_ctx_comm_delay); the hold is neither communication nor its wait */
  void (*comm_delay)(void *be, const plan_op *op, int op_index, int iter);
  void (*ev_wait)(void *be, int iter, int ev);    /* blocks until event `ev` of `iter` is set */
  void (*ev_record)(void *be, int iter, int ev);  /* sets it (ev >= 0) */
} exec_stream_ops;

typedef struct {
  const exec_stream_ops *ops;
  void *be;                 /* the backend's state (borrowed) */
  const plan_rank *plan; /* the rank's op list (borrowed) */
  rec_rank *rec;            /* where the ops are recorded (borrowed; rec_init'ed) */
  int iters;                /* iterations to run */
  gboolean debug;           /* print every op as the rank reaches it (DLSIM_DEBUG_OPS) */
} exec_stream;

/* The compute stream of every iteration. */
void exec_stream_compute(const exec_stream *s);

/* The communication stream of every iteration. */
void exec_stream_comm(const exec_stream *s);

#endif
