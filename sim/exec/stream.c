/* stream.c — the two-stream loop of the rank-side executors (see stream.h). */
#include "exec/stream.h"

#include <stdio.h>

/* Runs the compute ops from `i` on as one batch with the backend's kernel_time/run_for: up to
 * the first that records an event, or before the next that waits for one (nothing outside the
 * stream can see a point in between). Records each kernel's span from the durations. Returns
 * the index after the batch. */
static int compute_batch(const exec_stream *s, int i, int it, double *host) {
  const exec_stream_ops *o = s->ops;
  const plan_rank *p = s->plan;
  const double t0 = o->now(s->be);
  double t = t0;
  int last = i;
  for (int j = i; j < p->n_ops; j++) {
    const plan_op *op = &p->ops[j];
    if (op->stream != PLAN_STREAM_COMPUTE) continue;
    if (j > i && op->wait_event >= 0) break;
    if (s->debug)
      fprintf(stderr, "dlsim: rank %d compute iter %d op %d %s: waits %d records %d\n",
              s->rec->rank, it, j, op->kname, op->wait_event, op->record_event);
    kdb_origin origin;
    const double d = o->kernel_time(s->be, op, it, &origin);
    if (o->host_time) { /* launched by the host: not before it has been */
      *host += o->host_time(s->be, op, it);
      if (*host > t) t = *host;
    }
    rec_kernel(s->rec, j, it, t, t + d, origin);
    t += d;
    last = j;
    if (op->record_event >= 0) break;
  }
  o->run_for(s->be, t - t0);
  if (p->ops[last].record_event >= 0) o->ev_record(s->be, it, p->ops[last].record_event);
  return last + 1;
}

void exec_stream_compute(const exec_stream *s) {
  const exec_stream_ops *o = s->ops;
  const plan_rank *p = s->plan;
  for (int it = 0; it < s->iters; it++) {
    if (o->iter_begin) {
      double h0 = o->now(s->be);
      o->iter_begin(s->be, it);
      if (rec_steady(s->rec, it)) s->rec->host_s += o->now(s->be) - h0;
    }
    double host = o->now(s->be); /* the host starts launching the iteration */
    for (int i = 0; i < p->n_ops;) {
      const plan_op *op = &p->ops[i];
      if (op->stream != PLAN_STREAM_COMPUTE) {
        i++;
        continue;
      }
      if (op->wait_event >= 0) o->ev_wait(s->be, it, op->wait_event);
      if (o->kernel_time) {
        i = compute_batch(s, i, it, &host);
        continue;
      }
      if (s->debug)
        fprintf(stderr, "dlsim: rank %d compute iter %d op %d %s: waits %d records %d\n",
                s->rec->rank, it, i, op->kname, op->wait_event, op->record_event);
      double t0 = o->now(s->be);
      kdb_origin origin = o->kernel(s->be, op, it);
      rec_kernel(s->rec, i, it, t0, o->now(s->be), origin);
      if (op->record_event >= 0) o->ev_record(s->be, it, op->record_event);
      i++;
    }
  }
}

void exec_stream_comm(const exec_stream *s) {
  const exec_stream_ops *o = s->ops;
  const plan_rank *p = s->plan;
  for (int it = 0; it < s->iters; it++) {
    for (int i = 0; i < p->n_ops && o->recv_post; i++)
      if (p->ops[i].kind == PLAN_RECV) o->recv_post(s->be, &p->ops[i], it);
    /* gathers of parameters that the previous iteration's optimizer step updated */
    if (it > 0 && p->step_event >= 0) o->ev_wait(s->be, it - 1, p->step_event);
    for (int i = 0; i < p->n_ops; i++) {
      const plan_op *op = &p->ops[i];
      if (op->stream != PLAN_STREAM_COMM) continue;
      if (s->debug)
        fprintf(stderr, "dlsim: rank %d comm iter %d op %d %s %s %s peer %d tag %d bytes %.0f: "
                "waits %d\n", s->rec->rank, it, i, plan_op_kind_name(op->kind),
                plan_group_name(op->group), plan_purpose_name(op->purpose), plan_op_peer(p, op),
                op->tag, op->bytes, op->wait_event);
      if (op->wait_event >= 0) o->ev_wait(s->be, it, op->wait_event);
      if (o->comm_delay && op->kind != PLAN_RECV) o->comm_delay(s->be, op, i, it);
      double t0 = o->now(s->be);
      if (op->kind == PLAN_SEND) {
        o->send(s->be, op, it);
        rec_send(s->rec, i, it, t0);
      } else if (op->kind == PLAN_RECV) {
        double posted = o->recv_wait(s->be, op, it);
        rec_recv(s->rec, i, it, t0, posted, o->now(s->be));
      } else if (op->kind == PLAN_COLL) {
        double wire = 0;
        const char *algo = o->coll(s->be, op, it, &wire);
        rec_coll(s->rec, i, it, t0, o->now(s->be), algo, wire);
      }
      if (op->record_event >= 0) o->ev_record(s->be, it, op->record_event);
    }
    o->sends_wait(s->be, it);
  }
}
