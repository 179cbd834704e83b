/* record.h — what one rank did during a run, recorded the same way by every executor (closed
 * form, SMPI, real), and the one set of rules that turns P such records into a result.
 *
 * An executor records, per rank, the span of every op on its stream (seconds on its own clock:
 * closed-form time, simulated time, host wall-clock), one row per (collective, group, purpose,
 * algorithm) with its calls, bytes and time, and where each kernel time came from. Only calls of
 * the steady-state iterations are added to the rows and kernel counts: every iteration but the
 * first when there are several.
 *
 * rec_finish() turns the spans into per-iteration figures:
 *   iteration   the last op of either stream of the last iteration minus that of the first (one
 *               iteration: minus the start), per steady iteration, without host work the op
 *               list does not describe (rec_rank.host_s);
 *   compute     Σ compute spans; comm Σ communication spans;
 *   overlapped  the time both streams are busy; exposed = union of communication − overlapped.
 * rec_result() combines P finished records:
 *   the slowest rank (among ranks that finish together, the busiest one) gives the iteration
 *   time, breakdown, collective rows and kernel counts; compute + exposed + bubble + idle =
 *   iteration, where the rest is bubble with a pipeline (the compute stream waits for other
 *   stages) and idle otherwise; memory is the plan's of the rank with the largest peak.
 *
 * A point-to-point transfer is recorded from when both sides were there: the wait for the sender
 * to get there is no communication (with a pipeline, it is bubble). rec_recv_span() holds that
 * rule.
 *
 * No MPI here: the real executor moves records between processes as bytes (rec_pack, rec_unpack).
 */
#ifndef DL_RECORD_H
#define DL_RECORD_H

#include <glib.h>

#include "core/config.h"
#include "kdb/kdb.h"
#include "plan/plan.h"
#include "out/result.h"

typedef struct {
  double start, end; /* s, on the executor's clock */
  int op;            /* index in the rank's plan */
  int iter;          /* iteration, from 0 */
} rec_span;

typedef struct {
  int rank;                    /* the rank recorded */
  const plan_rank *plan;    /* its plan (borrowed: names ops, gives memory) */
  int iters;                   /* iterations run */
  GArray *spans[PLAN_N_STREAMS]; /* rec_span per stream, every iteration, in time order (owned) */
  GArray *colls;               /* res_coll rows, steady-state iterations summed (owned) */
  int kernels[KDB_N_ORIGINS];  /* kernel ops by origin of their time, steady state summed */
  double kernel_s[KDB_N_ORIGINS]; /* their durations by origin, s, steady state summed */
  double host_s;               /* host work outside the plan over the steady-state iterations
                                  (the real flavour's synthetic data), left out of the time */
  /* per steady-state iteration, after rec_finish */
  double iteration_time_s, compute_s, comm_s, overlap_s, exposed_s;
  double gemm_s;                 /* compute of its compute-bound (GEMM-like) kernels */
  double phase_s[PLAN_N_PHASES]; /* compute per phase */
} rec_rank;

/* An empty record for rank `rank` running `plan` (borrowed) for `iters` iterations. Release
 * with rec_release. */
void rec_init(rec_rank *r, int rank, const plan_rank *plan, int iters);
void rec_release(rec_rank *r);

/* TRUE when iteration `iter` counts in the steady state. */
gboolean rec_steady(const rec_rank *r, int iter);

/* Appends the span [start, end] of op `op` in iteration `iter` on its stream (nothing for an
 * empty span). */
void rec_span_add(rec_rank *r, int op, int iter, double start, double end);

/* A kernel op ran from `start` to `end`; `origin` says where its time came from. */
void rec_kernel(rec_rank *r, int op, int iter, double start, double end, kdb_origin origin);

/* A collective op (PLAN_COLL) ran from `start` to `end` with algorithm `algo` (static or
 * interned string), this rank sending `wire` bytes. */
void rec_coll(rec_rank *r, int op, int iter, double start, double end, const char *algo,
              double wire);

/* A send op (PLAN_SEND) was posted at `posted`: the message counts on the send side, its time on
 * the receive side; the send is a zero-length span (the timeline shows where it left). */
void rec_send(rec_rank *r, int op, int iter, double posted);

/* A receive op (PLAN_RECV) started waiting at `start`, its message was posted by the sender at
 * `posted` (on the same clock) and it completed at `end`: the transfer is communication from
 * max(start, posted) (never after `end`); the wait for the sender before is not. */
void rec_recv(rec_rank *r, int op, int iter, double start, double posted, double end);

/* Computes the per-iteration figures; `t_start` is when the first iteration started (used when
 * there is a single iteration). */
void rec_finish(rec_rank *r, double t_start);

/* Fills the times, breakdown, collective rows, kernel counts, per-rank rows, memory and MoE
 * figures of `res` (res_init'ed) from finished records recs[0..P-1] of configuration `c`;
 * `gpu_mem_bytes` decides fits_in_memory. */
void rec_result(const rec_rank *recs, int P, const cfg_run *c, double gpu_mem_bytes,
                res_result *res);

/* Serialises the spans, rows and counts (not the plan) into `buf`; rec_unpack rebuilds a record
 * (rec_init'ed with the rank's plan) from such bytes. FALSE when `data` is malformed. */
void rec_pack(const rec_rank *r, GByteArray *buf);
gboolean rec_unpack(rec_rank *r, const guint8 *data, gsize len);

/* The Chrome trace-event timeline of records recs[0..P-1] of configuration `c` (recs[r] is rank
 * r): one process per rank, one thread per stream, slices in whole nanoseconds that never
 * overlap on a track, flow events from each send to its receive and from each collective's
 * slowest rank to the other members, memory and bytes-in-flight counters (trace.c). Newly
 * allocated. */
GString *rec_trace(const rec_rank *recs, int P, const cfg_run *c);

#endif
