/* record.c — per-rank records and the rules that make a result of them (see record.h). */
#include "out/record.h"

#include <math.h>
#include <string.h>

void rec_init(rec_rank *r, int rank, const plan_rank *plan, int iters) {
  memset(r, 0, sizeof *r);
  r->rank = rank;
  r->plan = plan;
  r->iters = iters;
  r->colls = g_array_new(FALSE, FALSE, sizeof(res_coll));
  /* room for a span per op and iteration, so that no array grows by doubling (at 10,000 ranks
   * the slack would be gigabytes) */
  guint n[PLAN_N_STREAMS] = {0};
  for (int i = 0; i < plan->n_ops; i++) n[plan->ops[i].stream]++;
  for (int s = 0; s < PLAN_N_STREAMS; s++)
    r->spans[s] = g_array_sized_new(FALSE, FALSE, sizeof(rec_span), n[s] * (guint)iters);
}

void rec_release(rec_rank *r) {
  if (r->colls) g_array_free(r->colls, TRUE);
  for (int s = 0; s < PLAN_N_STREAMS; s++)
    if (r->spans[s]) g_array_free(r->spans[s], TRUE);
  memset(r, 0, sizeof *r);
}

/* The first steady-state iteration: the second when there are several. */
static int first_steady(const rec_rank *r) { return r->iters > 1 ? 1 : 0; }

gboolean rec_steady(const rec_rank *r, int iter) { return iter >= first_steady(r); }

void rec_span_add(rec_rank *r, int op, int iter, double start, double end) {
  if (!(end > start)) return;
  rec_span s = {start, end, op, iter};
  g_array_append_val(r->spans[r->plan->ops[op].stream], s);
}

/* A zero-length span: an op that happens at an instant (a send is posted). */
static void rec_span_add_instant(rec_rank *r, int op, int iter, double t) {
  rec_span s = {t, t, op, iter};
  g_array_append_val(r->spans[r->plan->ops[op].stream], s);
}

/* Adds one call of op `op` that took `t` s and sent `wire` bytes to the row of (op, group,
 * purpose, algo). A receive adds its time to the row of its messages; the send counts them. */
static void add_row(rec_rank *r, const plan_op *op, const char *algo, double t, double wire) {
  const gboolean recv = op->kind == PLAN_RECV;
  for (guint i = 0; i < r->colls->len; i++) {
    res_coll *x = &g_array_index(r->colls, res_coll, i);
    if (x->op != op->coll || x->group != op->group || x->purpose != op->purpose ||
        strcmp(x->algo, algo) != 0)
      continue;
    x->time_s += t;
    if (!recv) {
      x->calls++;
      x->bytes += op->bytes;
      x->wire_bytes += wire;
    }
    return;
  }
  res_coll x = {op->coll, op->group, op->purpose, algo, recv ? 0 : 1, recv ? 0 : op->bytes, wire,
                t};
  g_array_append_val(r->colls, x);
}

void rec_kernel(rec_rank *r, int op, int iter, double start, double end, kdb_origin origin) {
  rec_span_add(r, op, iter, start, end);
  if (rec_steady(r, iter)) {
    r->kernels[origin]++;
    r->kernel_s[origin] += end - start;
  }
}

void rec_coll(rec_rank *r, int op, int iter, double start, double end, const char *algo,
              double wire) {
  rec_span_add(r, op, iter, start, end);
  if (rec_steady(r, iter)) add_row(r, &r->plan->ops[op], algo, end - start, wire);
}

void rec_send(rec_rank *r, int op, int iter, double posted) {
  const plan_op *o = &r->plan->ops[op];
  /* an instant on the timeline (a trace's flow starts there); no time of its own */
  rec_span_add_instant(r, op, iter, posted);
  if (rec_steady(r, iter)) add_row(r, o, "p2p", 0, o->bytes);
}

void rec_recv(rec_rank *r, int op, int iter, double start, double posted, double end) {
  double from = posted > start ? MIN(posted, end) : start;
  if (end > from) rec_span_add(r, op, iter, from, end);
  else rec_span_add_instant(r, op, iter, end); /* the message was there: it arrives at once */
  if (rec_steady(r, iter)) add_row(r, &r->plan->ops[op], "p2p", end > from ? end - from : 0, 0);
}

static int span_cmp(gconstpointer a, gconstpointer b) {
  const rec_span *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

/* The steady-state spans of `a`, sorted and merged where they overlap or touch. */
static GArray *steady_union(const GArray *a, int it0) {
  GArray *u = g_array_new(FALSE, FALSE, sizeof(rec_span));
  gboolean sorted = TRUE; /* a stream's spans mostly come in time order already */
  for (guint i = 0; i < a->len; i++)
    if (g_array_index(a, rec_span, i).iter >= it0) {
      if (u->len && span_cmp(&g_array_index(a, rec_span, i),
                             &g_array_index(u, rec_span, u->len - 1)) < 0)
        sorted = FALSE;
      g_array_append_val(u, g_array_index(a, rec_span, i));
    }
  if (!sorted) g_array_sort(u, span_cmp); /* stable: equal starts keep their order either way */
  guint n = 0;
  for (guint i = 0; i < u->len; i++) {
    rec_span x = g_array_index(u, rec_span, i);
    if (n && x.start <= g_array_index(u, rec_span, n - 1).end) {
      rec_span *last = &g_array_index(u, rec_span, n - 1);
      if (x.end > last->end) last->end = x.end;
    } else {
      g_array_index(u, rec_span, n++) = x;
    }
  }
  g_array_set_size(u, n);
  return u;
}

/* Length of the intersection of the steady-state spans of `a` (disjoint, in time order) with
 * the disjoint sorted spans `b`. */
static double overlap_s(const GArray *a, const GArray *b, int it0) {
  double tot = 0;
  guint i = 0, j = 0;
  while (i < a->len && j < b->len) {
    const rec_span *x = &g_array_index(a, rec_span, i), *y = &g_array_index(b, rec_span, j);
    if (x->iter < it0) {
      i++;
      continue;
    }
    double lo = MAX(x->start, y->start), hi = MIN(x->end, y->end);
    if (hi > lo) tot += hi - lo;
    if (x->end < y->end) i++;
    else j++;
  }
  return tot;
}

void rec_finish(rec_rank *r, double t_start) {
  const plan_rank *plan = r->plan;
  const int iters = r->iters, it0 = first_steady(r), steady = iters - it0;
  /* per-iteration end = the last op of the iteration on either stream */
  double *end = g_new0(double, iters);
  r->compute_s = r->comm_s = r->gemm_s = 0;
  memset(r->phase_s, 0, sizeof r->phase_s);
  for (int s = 0; s < PLAN_N_STREAMS; s++)
    for (guint i = 0; i < r->spans[s]->len; i++) {
      const rec_span *x = &g_array_index(r->spans[s], rec_span, i);
      if (x->end > end[x->iter]) end[x->iter] = x->end;
      if (x->iter < it0) continue;
      if (s == PLAN_STREAM_COMPUTE) {
        r->compute_s += x->end - x->start;
        r->phase_s[plan->ops[x->op].phase] += (x->end - x->start) / steady;
        if (plan->ops[x->op].kind == PLAN_KERNEL && plan->ops[x->op].gemm_like)
          r->gemm_s += (x->end - x->start) / steady;
      } else {
        r->comm_s += x->end - x->start;
      }
    }
  r->iteration_time_s =
      (it0 ? end[iters - 1] - end[0] : end[0] - t_start) / steady - r->host_s / steady;
  r->compute_s /= steady;
  r->comm_s /= steady;
  GArray *comm = steady_union(r->spans[PLAN_STREAM_COMM], it0);
  double busy = 0;
  for (guint i = 0; i < comm->len; i++)
    busy += g_array_index(comm, rec_span, i).end - g_array_index(comm, rec_span, i).start;
  r->overlap_s = overlap_s(r->spans[PLAN_STREAM_COMPUTE], comm, it0) / steady;
  r->exposed_s = busy / steady - r->overlap_s;
  g_array_free(comm, TRUE);
  for (guint i = 0; i < r->colls->len; i++) {
    res_coll *x = &g_array_index(r->colls, res_coll, i);
    x->calls /= steady;
    x->bytes /= steady;
    x->wire_bytes /= steady;
    x->time_s /= steady;
  }
  for (int o = 0; o < KDB_N_ORIGINS; o++) r->kernels[o] /= steady, r->kernel_s[o] /= steady;
  g_free(end);
}


void rec_result(const rec_rank *recs, int P, const cfg_run *c, double gpu_mem_bytes,
                res_result *res) {
  int slow = 0, big = 0;
  for (int k = 0; k < P; k++) {
    const rec_rank *x = &recs[k];
    const plan_rank *p = x->plan;
    res_rank row = {x->rank, x->iteration_time_s, x->compute_s, x->comm_s, plan_memory_peak(&p->mem),
                    p->mem.activations, 0, 0, x->gemm_s, 0};
    for (int i = 0; i < p->n_ops; i++) /* every kernel of the plan runs once an iteration */
      if (p->ops[i].kind == PLAN_KERNEL) {
        row.kernel_flops += p->ops[i].flops;
        row.kernel_mem_bytes += p->ops[i].mem_bytes;
        if (!p->ops[i].gemm_like) row.elementwise_mem_bytes += p->ops[i].mem_bytes;
      }
    g_array_append_val(res->rank_rows, row);
    if (plan_memory_peak(&p->mem) > plan_memory_peak(&recs[big].plan->mem)) big = k;
    res->moe_max_over_mean = MAX(res->moe_max_over_mean, p->moe_max_over_mean);
    res->moe_dropped_tokens += p->moe_dropped_tokens;
    res->moe_routed_tokens += p->moe_routed_tokens;
    if (k == 0) continue;
    /* the slowest rank; among ranks that finish together, the busiest one; among ranks as
     * busy, the first (sums of the same kernels in another order differ in their last bits,
     * which must not choose: every mode describes the same rank) */
    double t = x->iteration_time_s, w = recs[slow].iteration_time_s;
    gboolean tie = fabs(t - w) <= 1e-9 * w;
    gboolean busier = x->compute_s > recs[slow].compute_s * (1 + 1e-9);
    if ((!tie && t > w) || (tie && busier)) slow = k;
  }
  const rec_rank *w = &recs[slow];
  res->slowest_rank = w->rank;
  res->iteration_time_s = w->iteration_time_s;
  res->compute_s = w->compute_s;
  res->comm_s = w->comm_s;
  memcpy(res->phase_compute_s, w->phase_s, sizeof w->phase_s);
  res->overlapped_comm_s = w->overlap_s;
  res->exposed_comm_s = w->exposed_s;
  double rest = w->iteration_time_s - w->compute_s - w->exposed_s;
  if (rest < 0) rest = 0; /* rounding */
  /* with a pipeline, the compute stream's waits for other stages are the bubble */
  res->bubble_s = c->pp > 1 ? rest : 0;
  res->idle_s = c->pp > 1 ? 0 : rest;
  g_array_set_size(res->colls, 0);
  g_array_append_vals(res->colls, w->colls->data, w->colls->len);
  res->comm_bytes_per_gpu = 0;
  for (guint i = 0; i < w->colls->len; i++)
    res->comm_bytes_per_gpu += g_array_index(w->colls, res_coll, i).wire_bytes;
  memcpy(res->kdb.count, w->kernels, sizeof res->kdb.count);
  res_kdb_set_shares(&res->kdb, w->kernel_s);
  res->mem = recs[big].plan->mem;
  res->peak_mem_bytes = plan_memory_peak(&res->mem);
  res->gpu_mem_bytes = gpu_mem_bytes;
  res->fits_in_memory = res->peak_mem_bytes <= gpu_mem_bytes;
  res->ranks = P;
}

/* ---- bytes between processes ---------------------------------------------------------------- */

/* Layout: a head (counts), then each row as {op, group, purpose, calls (int32), bytes,
 * wire_bytes, time_s (double), algo name (NUL-terminated)}, then the spans as raw records. */
typedef struct {
  double host_s, kernel_s[KDB_N_ORIGINS];
  gint32 kernels[KDB_N_ORIGINS], n_colls, n_spans[PLAN_N_STREAMS];
} packed_head;

typedef struct {
  gint32 op, group, purpose, calls;
  double bytes, wire_bytes, time_s;
} packed_row;

void rec_pack(const rec_rank *r, GByteArray *buf) {
  packed_head h;
  memset(&h, 0, sizeof h);
  h.host_s = r->host_s;
  for (int o = 0; o < KDB_N_ORIGINS; o++) {
    h.kernels[o] = r->kernels[o];
    h.kernel_s[o] = r->kernel_s[o];
  }
  h.n_colls = (gint32)r->colls->len;
  for (int s = 0; s < PLAN_N_STREAMS; s++) h.n_spans[s] = (gint32)r->spans[s]->len;
  g_byte_array_append(buf, (const guint8 *)&h, sizeof h);
  for (guint i = 0; i < r->colls->len; i++) {
    const res_coll *x = &g_array_index(r->colls, res_coll, i);
    packed_row p;
    memset(&p, 0, sizeof p);
    p.op = x->op, p.group = x->group, p.purpose = x->purpose, p.calls = x->calls;
    p.bytes = x->bytes, p.wire_bytes = x->wire_bytes, p.time_s = x->time_s;
    g_byte_array_append(buf, (const guint8 *)&p, sizeof p);
    g_byte_array_append(buf, (const guint8 *)x->algo, (guint)strlen(x->algo) + 1);
  }
  for (int s = 0; s < PLAN_N_STREAMS; s++)
    g_byte_array_append(buf, (const guint8 *)r->spans[s]->data,
                        r->spans[s]->len * (guint)sizeof(rec_span));
}

gboolean rec_unpack(rec_rank *r, const guint8 *data, gsize len) {
  packed_head h;
  gsize at = sizeof h;
  if (len < sizeof h) return FALSE;
  memcpy(&h, data, sizeof h);
  r->host_s = h.host_s;
  for (int o = 0; o < KDB_N_ORIGINS; o++) {
    r->kernels[o] = h.kernels[o];
    r->kernel_s[o] = h.kernel_s[o];
  }
  for (gint32 i = 0; i < h.n_colls; i++) {
    packed_row p;
    if (at + sizeof p > len) return FALSE;
    memcpy(&p, data + at, sizeof p);
    at += sizeof p;
    const guint8 *nul = memchr(data + at, '\0', len - at);
    if (!nul || p.op < 0 || p.op >= COLL_OP_COUNT || p.group < 0 || p.group >= PLAN_N_GROUPS ||
        p.purpose < 0 || p.purpose >= PLAN_N_PURPOSES)
      return FALSE;
    res_coll x = {(coll_op)p.op, (plan_group)p.group, (plan_purpose)p.purpose,
                  g_intern_string((const char *)data + at), p.calls, p.bytes, p.wire_bytes,
                  p.time_s};
    g_array_append_val(r->colls, x);
    at = (gsize)(nul - data) + 1;
  }
  for (int s = 0; s < PLAN_N_STREAMS; s++) {
    gsize n = (gsize)h.n_spans[s] * sizeof(rec_span);
    if (h.n_spans[s] < 0 || at + n > len) return FALSE;
    g_array_append_vals(r->spans[s], data + at, (guint)h.n_spans[s]);
    for (gint32 i = 0; i < h.n_spans[s]; i++) {
      const rec_span *x = &g_array_index(r->spans[s], rec_span, r->spans[s]->len - 1 - i);
      if (x->op < 0 || x->op >= r->plan->n_ops || x->iter < 0 || x->iter >= r->iters) return FALSE;
    }
    at += n;
  }
  return at == len;
}
