/* exchange.h — what an executor (SMPI or real) measured, and how it reaches the driver.
 *
 * Every executor records, per rank, the spans of its ops on both streams (seconds on its own
 * clock: simulated time in SMPI, g_get_monotonic_time in the real flavour) and per-collective
 * rows. xc_out_finish() turns them into per-iteration figures the same way for both executors:
 * steady state excludes the first iteration (when there is more than one), an iteration ends
 * with the last op of either stream, compute and communication are the sums of the spans, and
 * overlapped communication is the intersection of the two streams' spans.
 *
 * Rank 0 writes the exchange file (xc_write): a JSON object with, for the slowest rank,
 * iteration_time_s, compute_s, comm_s, overlapped_comm_s, bubble_s, phase_s {phase: s},
 * slowest_rank, kernels (count per iteration), colls [{op, group, purpose, algo, calls, bytes,
 * wire_bytes, time_s}] per iteration, ranks [{rank, iteration_time_s, compute_s, comm_s}], and
 * (real executor) loss [mean training loss per iteration]. With a trace path, it also writes the
 * Chrome trace-event timeline of every rank (one process per rank, one thread per stream).
 * The driver reads the exchange file back into a res_result (xc_read).
 *
 * This module needs no MPI: the real executor moves each rank's xc_out to rank 0 as bytes
 * (xc_out_pack / xc_out_unpack).
 */
#ifndef DL_EXCHANGE_H
#define DL_EXCHANGE_H

#include <glib.h>

#include "config.h"
#include "plan.h"
#include "result.h"

typedef struct {
  double start, end; /* s, on the executor's clock */
  int op;            /* index in the rank's plan */
  int iter;          /* iteration, from 0 */
} xc_span;

typedef struct {
  coll_op op;        /* collective (or PL_SEND/PL_RECV traffic as "p2p") */
  pl_group group;    /* communicator */
  pl_purpose purpose;/* why it exists */
  const char *algo;  /* algorithm name (static or interned string) */
  double calls;      /* calls over the steady-state iterations */
  double bytes;      /* Σ buffer sizes, bytes */
  double wire_bytes; /* Σ bytes this rank sent, bytes */
  double time_s;     /* Σ durations, s */
} xc_coll;

typedef struct {
  double iteration_time_s, compute_s, comm_s, overlap_s; /* per steady-state iteration, s */
  double phase_s[PL_N_PHASES]; /* compute per phase per steady-state iteration, s */
  int kernels;                 /* kernel ops per iteration */
  double host_s;               /* host work outside the plan over the steady-state iterations
                                  (the real flavour's synthetic data), left out of the time */
  GArray *colls;               /* xc_coll rows, steady state only (owned) */
  GArray *spans[PL_N_STREAMS]; /* xc_span per stream, every iteration, in time order (owned) */
  const pl_rank_plan *plan;    /* the rank's plan (borrowed; names the ops in the trace) */
} xc_out;

/* Empty record for a rank running `plan` (borrowed). Release with xc_out_release. */
void xc_out_init(xc_out *o, const pl_rank_plan *plan);
void xc_out_release(xc_out *o);

/* Appends a span [start, end] of op `op` in iteration `iter` on `stream`. */
void xc_add_span(xc_out *o, int stream, double start, double end, int op, int iter);

/* Adds one call of `op` (a PL_COLL, or p2p traffic) that took `t` s and sent `wire` bytes to
 * the row of (op, group, purpose, algo). Callers add steady-state calls only. */
void xc_add_coll(xc_out *o, const pl_op *op, const char *algo, double t, double wire);

/* Computes the per-iteration figures from the spans; `t_start` is when the first iteration
 * started (used when there is a single iteration). */
void xc_out_finish(xc_out *o, int iters, double t_start);

/* Serialises the figures, rows and spans (not the plan) into `buf`; xc_out_unpack rebuilds a
 * record (xc_out_init'ed with the rank's plan) from such bytes. FALSE when `data` is malformed. */
void xc_out_pack(const xc_out *o, GByteArray *buf);
gboolean xc_out_unpack(xc_out *o, const guint8 *data, gsize len);

/* Rank 0: writes the exchange file for ranks outs[0..P-1] (atomically) and, when `trace_path`
 * is not NULL or "-", the Chrome trace. `loss` (may be NULL) holds n_loss per-iteration losses.
 * `iters` is the number of iterations run. Returns NULL, or a newly allocated one-line message
 * naming the file that could not be written. */
char *xc_write(const xc_out *outs, int P, int iters, const double *loss, int n_loss,
               const char *result_path, const char *trace_path);

/* Driver side: fills the times, collectives, per-rank rows and losses of `r` from the exchange
 * file at `path`; the memory rows already in `r` (the planner's, in rank order) are kept.
 * DL_ERR_INTERNAL when the file is unreadable. */
gboolean xc_read(const char *path, const cfg_run *cfg, res_result *r, GError **err);

#endif
