/* trace.c — the Chrome trace-event timeline of a run's records (rec_trace, record.h).
 *
 * One process per rank, one thread per stream. Times are whole nanoseconds: every span's start
 * and end are rounded once, and `ts` and `dur` are printed from those integers (µs with three
 * decimals), so a slice that ended before the next began still does in the file: slices of a
 * track never overlap, as Perfetto requires.
 *
 * Flow events (ph s/f, bound to the enclosing slice) join each point-to-point send to its
 * receive, and each collective's start on its slowest rank (the last to arrive, whom the others
 * wait for) to the same call on every other member. Counters per rank: "memory" (weights,
 * gradients and optimizer state, plus the activations of the micro-batches in flight, each
 * holding the plan's peak activations divided by the most micro-batches stashed at once) and
 * "comm in flight" (bytes of the communication ops running).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "out/record.h"

typedef struct {
  int rank, stream, iter, op; /* rank: recs[rank] (every rank is recorded, in order) */
  gint64 start_ns, end_ns;
} span_ns;

static gint64 to_ns(double s) { return (gint64)llround(s * 1e9); }

/* "12.345" µs from 12345 ns, exactly. */
static void put_us(GString *t, const char *key, gint64 ns) {
  g_string_append_printf(t, ",\"%s\":%" G_GINT64_FORMAT ".%03d", key, ns / 1000,
                         (int)(ns % 1000));
}

static void slice(GString *t, const rec_rank *rr, const span_ns *x) {
  const plan_op *op = &rr->plan->ops[x->op];
  char name[64];
  if (op->kind == PLAN_KERNEL) g_strlcpy(name, op->kname, sizeof name);
  else if (op->kind == PLAN_COLL)
    g_snprintf(name, sizeof name, "%s %s", coll_op_name(op->coll), plan_group_name(op->group));
  else
    g_snprintf(name, sizeof name, "%s %d", op->kind == PLAN_SEND ? "send to" : "recv from",
               plan_op_peer(rr->plan, op));
  g_string_append_printf(t, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d",
                         name, plan_phase_name(op->phase), x->rank, x->stream);
  put_us(t, "ts", x->start_ns);
  put_us(t, "dur", x->end_ns - x->start_ns);
  g_string_append_printf(t, ",\"args\":{\"iter\":%d,\"stage\":%d,\"microbatch\":%d,\"layer\":%d",
                         x->iter, rr->plan->stage, op->microbatch, op->layer);
  if (op->kind == PLAN_KERNEL) {
    g_string_append_printf(t, ",\"flops\":%.0f", op->flops);
  } else {
    g_string_append_printf(t, ",\"bytes\":%.0f,\"group\":\"%s\",\"purpose\":\"%s\"", op->bytes,
                           plan_group_name(op->group), plan_purpose_name(op->purpose));
    if (op->peer >= 0) g_string_append_printf(t, ",\"peer\":%d", plan_op_peer(rr->plan, op));
  }
  g_string_append(t, "}}");
}

static void flow(GString *t, char ph, int id, const char *cat, const span_ns *x, gint64 ts) {
  g_string_append_printf(t, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%c\",\"id\":%d,"
                         "\"pid\":%d,\"tid\":%d",
                         cat, cat, ph, id, x->rank, x->stream);
  put_us(t, "ts", ts);
  if (ph == 'f') g_string_append(t, ",\"bp\":\"e\"");
  g_string_append(t, "}");
}

/* ---- flows ----------------------------------------------------------------------------------- */

typedef struct {
  gint64 key[4];   /* what identifies the event across ranks */
  const span_ns *x;
} keyed;

static int key_cmp(const void *a, const void *b) {
  const keyed *p = a, *q = b;
  for (int i = 0; i < 4; i++)
    if (p->key[i] != q->key[i]) return p->key[i] < q->key[i] ? -1 : 1;
  return 0;
}

static int keyed_cmp(const void *a, const void *b) {
  int k = key_cmp(a, b);
  if (k) return k;
  const keyed *p = a, *q = b;
  return (p->x->rank > q->x->rank) - (p->x->rank < q->x->rank);
}

/* A send and its receive share (iteration, sender, receiver, tag). */
static void p2p_flows(GString *t, const rec_rank *recs, const GArray *spans, int *id) {
  GArray *sends = g_array_new(FALSE, FALSE, sizeof(keyed)),
         *recvs = g_array_new(FALSE, FALSE, sizeof(keyed));
  for (guint i = 0; i < spans->len; i++) {
    const span_ns *x = &g_array_index(spans, span_ns, i);
    const plan_op *op = &recs[x->rank].plan->ops[x->op];
    if (op->kind != PLAN_SEND && op->kind != PLAN_RECV) continue;
    gboolean send = op->kind == PLAN_SEND;
    const int peer = plan_op_peer(recs[x->rank].plan, op);
    keyed k = {{x->iter, send ? x->rank : peer, send ? peer : x->rank, op->tag}, x};
    g_array_append_val(send ? sends : recvs, k);
  }
  g_array_sort(sends, key_cmp); /* one send per key */
  for (guint i = 0; i < recvs->len; i++) {
    const keyed *r = &g_array_index(recvs, keyed, i);
    const keyed *s = bsearch(r, sends->data, sends->len, sizeof(keyed), key_cmp);
    if (!s) continue;
    ++*id;
    flow(t, 's', *id, "p2p", s->x, s->x->start_ns);
    flow(t, 'f', *id, "p2p", r->x, r->x->start_ns);
  }
  g_array_free(sends, TRUE);
  g_array_free(recvs, TRUE);
}

/* The n-th collective a rank calls on a communicator is the n-th of every member (MPI's ordering
 * of collectives on a communicator): (iteration, communicator kind or explicit index, its lowest
 * rank, n). */
static void coll_flows(GString *t, const rec_rank *recs, int P, const cfg_run *c,
                       const GArray *spans, int *id) {
  gint64 **ordinal = g_new0(gint64 *, P); /* (communicator slot << 32) | its call count */
  int **first = g_new0(int *, P);
  int *members = g_new(int, c->gpus > 0 ? c->gpus : 1);
  for (int k = 0; k < P; k++) {
    const plan_rank *p = recs[k].plan;
    const int slots = plan_n_slots(p);
    int *count = g_new0(int, slots);
    ordinal[k] = g_new(gint64, p->n_ops);
    first[k] = g_new(int, p->n_ops);
    for (int i = 0; i < p->n_ops; i++) {
      const plan_op *op = &p->ops[i];
      ordinal[k][i] = first[k][i] = -1;
      if (op->kind != PLAN_COLL) continue;
      const int slot = plan_op_slot(op);
      ordinal[k][i] = ((gint64)slot << 32) | count[slot]++;
      plan_op_members(p, c, op, recs[k].rank, members); /* at least the rank itself */
      first[k][i] = members[0];
    }
    g_free(count);
  }
  GArray *calls = g_array_new(FALSE, FALSE, sizeof(keyed));
  for (guint i = 0; i < spans->len; i++) {
    const span_ns *x = &g_array_index(spans, span_ns, i);
    const plan_op *op = &recs[x->rank].plan->ops[x->op];
    if (op->kind != PLAN_COLL) continue;
    keyed k = {{x->iter, ordinal[x->rank][x->op] >> 32, first[x->rank][x->op],
                ordinal[x->rank][x->op] & 0xffffffff}, x};
    g_array_append_val(calls, k);
  }
  g_array_sort(calls, keyed_cmp);
  for (guint a = 0; a < calls->len;) {
    guint b = a;
    const span_ns *last = NULL;
    while (b < calls->len &&
           key_cmp(&g_array_index(calls, keyed, b), &g_array_index(calls, keyed, a)) == 0) {
      const span_ns *x = g_array_index(calls, keyed, b).x;
      if (!last || x->start_ns > last->start_ns) last = x;
      b++;
    }
    if (b - a > 1) {
      ++*id;
      flow(t, 's', *id, "collective", last, last->start_ns);
      for (guint j = a; j < b; j++) {
        const span_ns *x = g_array_index(calls, keyed, j).x;
        if (x == last) continue;
        gint64 ts = CLAMP(last->start_ns, x->start_ns, x->end_ns);
        flow(t, 'f', *id, "collective", x, ts);
      }
    }
    a = b;
  }
  g_array_free(calls, TRUE);
  for (int k = 0; k < P; k++) g_free(ordinal[k]), g_free(first[k]);
  g_free(ordinal);
  g_free(members);
  g_free(first);
}

/* ---- counters -------------------------------------------------------------------------------- */

typedef struct {
  gint64 ns;
  double delta;
} step;

static int step_cmp(const void *a, const void *b) {
  const step *p = a, *q = b;
  if (p->ns != q->ns) return p->ns < q->ns ? -1 : 1;
  return (p->delta > q->delta) - (p->delta < q->delta); /* frees before allocations */
}

static void counter(GString *t, int rank, const char *name, double base, GArray *steps) {
  g_array_sort(steps, step_cmp);
  double v = base;
  for (guint i = 0; i < steps->len;) {
    gint64 ns = g_array_index(steps, step, i).ns;
    while (i < steps->len && g_array_index(steps, step, i).ns == ns)
      v += g_array_index(steps, step, i++).delta;
    if (fabs(v) < 0.5) v = 0; /* sums of shares: no -0.0000001 bytes */
    g_string_append_printf(t, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d", name, rank);
    put_us(t, "ts", ns);
    g_string_append_printf(t, ",\"args\":{\"bytes\":%.0f}}", v);
  }
}

static void counters(GString *t, const rec_rank *rr, const GArray *spans, guint from, guint to) {
  const plan_rank *p = rr->plan;
  GArray *mem = g_array_new(FALSE, FALSE, sizeof(step)), *comm = g_array_new(FALSE, FALSE,
                                                                              sizeof(step));
  const double share = p->mem.activations / (p->max_stash > 0 ? p->max_stash : 1);
  /* a micro-batch's activations: from its first forward kernel to its last backward one */
  GHashTable *live = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  for (guint i = from; i < to; i++) {
    const span_ns *x = &g_array_index(spans, span_ns, i);
    const plan_op *op = &p->ops[x->op];
    if (op->kind != PLAN_KERNEL) {
      step a = {x->start_ns, op->bytes}, b = {x->end_ns, -op->bytes};
      g_array_append_val(comm, a);
      g_array_append_val(comm, b);
      continue;
    }
    if (op->microbatch < 0 || op->phase == PLAN_PH_OPT) continue;
    gint64 key = (gint64)x->iter * 1000000 + op->microbatch;
    gint64 *range = g_hash_table_lookup(live, &key);
    if (!range) {
      range = g_new(gint64, 2);
      range[0] = G_MAXINT64, range[1] = G_MININT64;
      g_hash_table_insert(live, g_memdup2(&key, sizeof key), range);
    }
    if (op->phase == PLAN_PH_FWD && !op->recompute) range[0] = MIN(range[0], x->start_ns);
    if (op->phase == PLAN_PH_BWD) range[1] = MAX(range[1], x->end_ns);
  }
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init(&it, live);
  while (g_hash_table_iter_next(&it, &k, &v)) {
    const gint64 *range = v;
    if (range[0] == G_MAXINT64) continue;
    step a = {range[0], share}, b = {range[1] == G_MININT64 ? range[0] : range[1], -share};
    g_array_append_val(mem, a);
    g_array_append_val(mem, b);
  }
  g_hash_table_destroy(live);
  counter(t, rr->rank, "memory",
          p->mem.params + p->mem.grads + p->mem.optimizer + p->mem.gathered, mem);
  counter(t, rr->rank, "comm in flight", 0, comm);
  g_array_free(mem, TRUE);
  g_array_free(comm, TRUE);
}

/* ---- the document ---------------------------------------------------------------------------- */

GString *rec_trace(const rec_rank *recs, int P, const cfg_run *c) {
  GString *t = g_string_new("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  GArray *spans = g_array_new(FALSE, FALSE, sizeof(span_ns));
  guint *first = g_new(guint, P + 1);
  for (int k = 0; k < P; k++) {
    first[k] = spans->len;
    for (int s = 0; s < PLAN_N_STREAMS; s++) {
      const GArray *sp = recs[k].spans[s];
      for (guint i = 0; i < sp->len; i++) {
        const rec_span *x = &g_array_index(sp, rec_span, i);
        span_ns n = {k, s, x->iter, x->op, to_ns(x->start), to_ns(x->end)};
        if (n.end_ns < n.start_ns) n.end_ns = n.start_ns;
        g_array_append_val(spans, n);
      }
    }
  }
  first[P] = spans->len;
  for (int k = 0; k < P; k++) {
    const int r = recs[k].rank;
    g_string_append_printf(
        t, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
        k ? ",\n" : "", r, r);
    g_string_append_printf(t, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                           "\"args\":{\"sort_index\":%d}}", r, r);
    for (int s = 0; s < PLAN_N_STREAMS; s++)
      g_string_append_printf(t,
                             ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                             "\"args\":{\"name\":\"%s\"}}",
                             r, s, s == PLAN_STREAM_COMPUTE ? "compute" : "comm");
    for (guint i = first[k]; i < first[k + 1]; i++)
      slice(t, &recs[k], &g_array_index(spans, span_ns, i));
    counters(t, &recs[k], spans, first[k], first[k + 1]);
  }
  int id = 0;
  p2p_flows(t, recs, spans, &id);
  coll_flows(t, recs, P, c, spans, &id);
  g_string_append(t, "\n]}\n");
  g_array_free(spans, TRUE);
  g_free(first);
  return t;
}
