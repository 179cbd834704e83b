/* exchange.c — per-rank measurements, the exchange file and the trace (see exchange.h). */
#include "exchange.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "dl_common.h"

void xc_out_init(xc_out *o, const pl_rank_plan *plan) {
  memset(o, 0, sizeof *o);
  o->plan = plan;
  o->colls = g_array_new(FALSE, FALSE, sizeof(xc_coll));
  for (int s = 0; s < PL_N_STREAMS; s++) o->spans[s] = g_array_new(FALSE, FALSE, sizeof(xc_span));
}

void xc_out_release(xc_out *o) {
  if (o->colls) g_array_free(o->colls, TRUE);
  for (int s = 0; s < PL_N_STREAMS; s++)
    if (o->spans[s]) g_array_free(o->spans[s], TRUE);
  memset(o, 0, sizeof *o);
}

void xc_add_span(xc_out *o, int stream, double start, double end, int op, int iter) {
  xc_span s = {start, end, op, iter};
  g_array_append_val(o->spans[stream], s);
}

void xc_add_coll(xc_out *o, const pl_op *op, const char *algo, double t, double wire) {
  /* a receive adds its transfer time to the row of the messages; the send counts the message */
  const gboolean recv = op->kind == PL_RECV;
  for (guint i = 0; i < o->colls->len; i++) {
    xc_coll *x = &g_array_index(o->colls, xc_coll, i);
    if (x->op == op->coll && x->group == op->group && x->purpose == op->purpose &&
        strcmp(x->algo, algo) == 0) {
      if (recv) {
        x->time_s += t;
        return;
      }
      x->calls++;
      x->bytes += op->bytes;
      x->wire_bytes += wire;
      x->time_s += t;
      return;
    }
  }
  xc_coll x = {op->coll, op->group, op->purpose, algo, recv ? 0 : 1, recv ? 0 : op->bytes, wire, t};
  g_array_append_val(o->colls, x);
}

/* Length of the intersection of two sorted lists of disjoint spans from iterations >= it0. */
static double overlap_s(const GArray *a, const GArray *b, int it0) {
  double tot = 0;
  guint i = 0, j = 0;
  while (i < a->len && j < b->len) {
    const xc_span *x = &g_array_index(a, xc_span, i), *y = &g_array_index(b, xc_span, j);
    if (x->iter < it0) { i++; continue; }
    if (y->iter < it0) { j++; continue; }
    double lo = MAX(x->start, y->start), hi = MIN(x->end, y->end);
    if (hi > lo) tot += hi - lo;
    if (x->end < y->end) i++;
    else j++;
  }
  return tot;
}

void xc_out_finish(xc_out *o, int iters, double t_start) {
  const pl_rank_plan *plan = o->plan;
  const int it0 = iters > 1 ? 1 : 0, steady = iters - it0;
  /* per-iteration end = the last op of the iteration on either stream */
  double *end = g_new0(double, iters);
  o->compute_s = o->comm_s = 0;
  memset(o->phase_s, 0, sizeof o->phase_s);
  for (int s = 0; s < PL_N_STREAMS; s++)
    for (guint i = 0; i < o->spans[s]->len; i++) {
      const xc_span *x = &g_array_index(o->spans[s], xc_span, i);
      if (x->end > end[x->iter]) end[x->iter] = x->end;
      if (x->iter < it0) continue;
      if (s == PL_STREAM_COMPUTE) {
        o->compute_s += x->end - x->start;
        o->phase_s[plan->ops[x->op].phase] += (x->end - x->start) / steady;
      } else {
        o->comm_s += x->end - x->start;
      }
    }
  o->iteration_time_s =
      (it0 ? end[iters - 1] - end[0] : end[0] - t_start) / steady - o->host_s / steady;
  o->compute_s /= steady;
  o->comm_s /= steady;
  o->overlap_s = overlap_s(o->spans[PL_STREAM_COMPUTE], o->spans[PL_STREAM_COMM], it0) / steady;
  o->kernels = 0;
  for (int i = 0; i < plan->n_ops; i++) o->kernels += plan->ops[i].kind == PL_KERNEL;
  g_free(end);
}

/* ---- bytes between processes -------------------------------------------------------------- */

/* Layout: 4 + PL_N_PHASES doubles, kernels, n_colls, n_spans[stream] (int32 each), then each
 * row as {op, group, purpose (int32), calls, bytes, wire_bytes, time_s (double), algo name
 * (NUL-terminated)}, then the spans as raw xc_span records. */
typedef struct {
  double fig[4 + PL_N_PHASES];
  gint32 kernels, n_colls, n_spans[PL_N_STREAMS];
} packed_head;

typedef struct {
  gint32 op, group, purpose;
  double calls, bytes, wire_bytes, time_s;
} packed_row;

void xc_out_pack(const xc_out *o, GByteArray *buf) {
  packed_head h;
  memset(&h, 0, sizeof h);
  h.fig[0] = o->iteration_time_s, h.fig[1] = o->compute_s, h.fig[2] = o->comm_s;
  h.fig[3] = o->overlap_s;
  for (int i = 0; i < PL_N_PHASES; i++) h.fig[4 + i] = o->phase_s[i];
  h.kernels = o->kernels;
  h.n_colls = (gint32)o->colls->len;
  for (int s = 0; s < PL_N_STREAMS; s++) h.n_spans[s] = (gint32)o->spans[s]->len;
  g_byte_array_append(buf, (const guint8 *)&h, sizeof h);
  for (guint i = 0; i < o->colls->len; i++) {
    const xc_coll *x = &g_array_index(o->colls, xc_coll, i);
    packed_row r;
    memset(&r, 0, sizeof r);
    r.op = x->op, r.group = x->group, r.purpose = x->purpose;
    r.calls = x->calls, r.bytes = x->bytes, r.wire_bytes = x->wire_bytes, r.time_s = x->time_s;
    g_byte_array_append(buf, (const guint8 *)&r, sizeof r);
    g_byte_array_append(buf, (const guint8 *)x->algo, (guint)strlen(x->algo) + 1);
  }
  for (int s = 0; s < PL_N_STREAMS; s++)
    g_byte_array_append(buf, (const guint8 *)o->spans[s]->data,
                        o->spans[s]->len * (guint)sizeof(xc_span));
}

gboolean xc_out_unpack(xc_out *o, const guint8 *data, gsize len) {
  packed_head h;
  gsize at = sizeof h;
  if (len < sizeof h) return FALSE;
  memcpy(&h, data, sizeof h);
  o->iteration_time_s = h.fig[0], o->compute_s = h.fig[1], o->comm_s = h.fig[2];
  o->overlap_s = h.fig[3];
  for (int i = 0; i < PL_N_PHASES; i++) o->phase_s[i] = h.fig[4 + i];
  o->kernels = h.kernels;
  for (gint32 i = 0; i < h.n_colls; i++) {
    packed_row r;
    if (at + sizeof r > len) return FALSE;
    memcpy(&r, data + at, sizeof r);
    at += sizeof r;
    const guint8 *nul = memchr(data + at, '\0', len - at);
    if (!nul || r.op < 0 || r.op >= COLL_OP_COUNT || r.group < 0 || r.group >= PL_N_GROUPS ||
        r.purpose < 0 || r.purpose >= PL_N_PURPOSES)
      return FALSE;
    xc_coll x = {(coll_op)r.op, (pl_group)r.group, (pl_purpose)r.purpose,
                 g_intern_string((const char *)data + at), r.calls, r.bytes, r.wire_bytes,
                 r.time_s};
    g_array_append_val(o->colls, x);
    at = (gsize)(nul - data) + 1;
  }
  for (int s = 0; s < PL_N_STREAMS; s++) {
    gsize n = (gsize)h.n_spans[s] * sizeof(xc_span);
    if (h.n_spans[s] < 0 || at + n > len) return FALSE;
    g_array_append_vals(o->spans[s], data + at, (guint)h.n_spans[s]);
    at += n;
  }
  return at == len;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Chrome trace-event format: one process per rank, one thread per stream, times in us. */
static GString *trace_text(const xc_out *outs, int P) {
  GString *t = g_string_new("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  for (int r = 0; r < P; r++) {
    g_string_append_printf(t, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                           r ? ",\n" : "", r, r);
    for (int s = 0; s < PL_N_STREAMS; s++)
      g_string_append_printf(t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                             r, s, s == PL_STREAM_COMPUTE ? "compute" : "comm");
    for (int s = 0; s < PL_N_STREAMS; s++) {
      const GArray *sp = outs[r].spans[s];
      for (guint i = 0; i < sp->len; i++) {
        const xc_span *x = &g_array_index(sp, xc_span, i);
        const pl_op *op = &outs[r].plan->ops[x->op];
        char name[64];
        if (op->kind == PL_KERNEL) g_strlcpy(name, op->kname, sizeof name);
        else g_snprintf(name, sizeof name, "%s %s", coll_op_name(op->coll), pl_group_name(op->group));
        g_string_append_printf(t, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"iter\":%d,\"layer\":%d",
                               name, pl_phase_name(op->phase), r, s, x->start * 1e6,
                               (x->end - x->start) * 1e6, x->iter, op->layer);
        if (op->kind == PL_COLL) g_string_append_printf(t, ",\"bytes\":%.0f", op->bytes);
        g_string_append(t, "}}");
      }
    }
  }
  g_string_append(t, "\n]}\n");
  return t;
}

char *xc_write(const xc_out *outs, int P, int iters, const double *loss, int n_loss,
               const char *result_path, const char *trace_path) {
  int slow = 0;
  for (int r = 1; r < P; r++) {
    /* the slowest rank; among ranks that finish together, the busiest one */
    double t = outs[r].iteration_time_s, w = outs[slow].iteration_time_s;
    gboolean tie = fabs(t - w) <= 1e-9 * w;
    if ((!tie && t > w) || (tie && outs[r].compute_s > outs[slow].compute_s)) slow = r;
  }
  const xc_out *o = &outs[slow];
  int steady = iters > 1 ? iters - 1 : 1;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "iteration_time_s", o->iteration_time_s);
  cJSON_AddNumberToObject(root, "compute_s", o->compute_s);
  cJSON_AddNumberToObject(root, "comm_s", o->comm_s);
  cJSON_AddNumberToObject(root, "overlapped_comm_s", o->overlap_s);
  cJSON_AddNumberToObject(root, "bubble_s", 0);
  cJSON *ph = cJSON_AddObjectToObject(root, "phase_s");
  for (int i = 0; i < PL_N_PHASES; i++)
    cJSON_AddNumberToObject(ph, pl_phase_name((pl_phase)i), o->phase_s[i]);
  cJSON_AddNumberToObject(root, "slowest_rank", slow);
  cJSON_AddNumberToObject(root, "kernels", o->kernels);
  cJSON *cs = cJSON_AddArrayToObject(root, "colls");
  for (guint i = 0; i < o->colls->len; i++) {
    const xc_coll *x = &g_array_index(o->colls, xc_coll, i);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "op", coll_op_name(x->op));
    cJSON_AddStringToObject(j, "group", pl_group_name(x->group));
    cJSON_AddStringToObject(j, "purpose", pl_purpose_name(x->purpose));
    cJSON_AddStringToObject(j, "algo", x->algo);
    cJSON_AddNumberToObject(j, "calls", x->calls / steady);
    cJSON_AddNumberToObject(j, "bytes", x->bytes / steady);
    cJSON_AddNumberToObject(j, "wire_bytes", x->wire_bytes / steady);
    cJSON_AddNumberToObject(j, "time_s", x->time_s / steady);
    cJSON_AddItemToArray(cs, j);
  }
  cJSON *rs = cJSON_AddArrayToObject(root, "ranks");
  for (int r = 0; r < P; r++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "rank", r);
    cJSON_AddNumberToObject(j, "iteration_time_s", outs[r].iteration_time_s);
    cJSON_AddNumberToObject(j, "compute_s", outs[r].compute_s);
    cJSON_AddNumberToObject(j, "comm_s", outs[r].comm_s);
    cJSON_AddItemToArray(rs, j);
  }
  if (loss) {
    cJSON *ls = cJSON_AddArrayToObject(root, "loss");
    for (int i = 0; i < n_loss; i++) cJSON_AddItemToArray(ls, cJSON_CreateNumber(loss[i]));
  }
  char *txt = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  GError *e = NULL;
  char *err = NULL;
  if (!dl_write_file_atomic(result_path, txt, strlen(txt), &e)) {
    err = g_strdup(e->message);
    g_clear_error(&e);
  }
  cJSON_free(txt);
  if (!err && trace_path && strcmp(trace_path, "-") != 0) {
    GString *t = trace_text(outs, P);
    if (!dl_write_file_atomic(trace_path, t->str, t->len, &e)) {
      err = g_strdup(e->message);
      g_clear_error(&e);
    }
    g_string_free(t, TRUE);
  }
  return err;
}

/* ---- reading (driver side) ---------------------------------------------------------------- */

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *intern_algo(const char *name) {
  /* result rows borrow static strings: keep one copy per algorithm name */
  return g_intern_string(name ? name : "?");
}

gboolean xc_read(const char *path, const cfg_run *cfg, res_result *r, GError **err) {
  gsize len;
  char *txt = dl_read_file(path, &len, err);
  if (!txt) return FALSE;
  cJSON *root = cJSON_Parse(txt);
  g_free(txt);
  if (!root) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "%s: unreadable executor result", path);
    return FALSE;
  }
  r->iteration_time_s = num(root, "iteration_time_s");
  r->compute_s = num(root, "compute_s");
  r->comm_s = num(root, "comm_s");
  r->overlapped_comm_s = num(root, "overlapped_comm_s");
  r->bubble_s = num(root, "bubble_s");
  r->exposed_comm_s = r->comm_s - r->overlapped_comm_s;
  double rest = r->iteration_time_s - r->compute_s - r->exposed_comm_s;
  if (rest < 0) rest = 0; /* rounding */
  /* with a pipeline, the compute stream's waits for other stages are the bubble */
  r->bubble_s = cfg->pp > 1 ? rest : 0;
  r->idle_s = cfg->pp > 1 ? 0 : rest;
  r->slowest_rank = (int)num(root, "slowest_rank");
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(root, "phase_s");
  for (int i = 0; i < PL_N_PHASES; i++) r->phase_compute_s[i] = num(ph, pl_phase_name((pl_phase)i));
  r->kdb_estimated = (int)num(root, "kernels");
  g_array_set_size(r->colls, 0);
  /* memory per rank stays the planner's (kept from the closed form's rows, in rank order) */
  GArray *mem_rows = r->rank_rows;
  r->rank_rows = g_array_new(FALSE, FALSE, sizeof(res_rank));
  r->comm_bytes_per_gpu = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "colls")) {
    res_coll c;
    memset(&c, 0, sizeof c);
    int op = coll_op_parse(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "op")));
    c.op = op < 0 ? COLL_ALLREDUCE : (coll_op)op;
    const char *g = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "group"));
    const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "purpose"));
    for (int i = 0; i < PL_N_GROUPS; i++)
      if (g && strcmp(g, pl_group_name((pl_group)i)) == 0) c.group = (pl_group)i;
    for (int i = 0; i < PL_N_PURPOSES; i++)
      if (p && strcmp(p, pl_purpose_name((pl_purpose)i)) == 0) c.purpose = (pl_purpose)i;
    c.algo = intern_algo(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "algo")));
    c.calls = (int)(num(x, "calls") + 0.5);
    c.bytes = num(x, "bytes");
    c.wire_bytes = num(x, "wire_bytes");
    c.time_s = num(x, "time_s");
    r->comm_bytes_per_gpu += c.wire_bytes;
    g_array_append_val(r->colls, c);
  }
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "ranks")) {
    res_rank rr = {(int)num(x, "rank"), num(x, "iteration_time_s"), num(x, "compute_s"),
                   num(x, "comm_s"), 0, 0};
    if (rr.rank >= 0 && (guint)rr.rank < mem_rows->len) {
      const res_rank *mr = &g_array_index(mem_rows, res_rank, rr.rank);
      rr.peak_mem_bytes = mr->peak_mem_bytes;
      rr.activation_bytes = mr->activation_bytes;
    }
    g_array_append_val(r->rank_rows, rr);
  }
  g_array_free(mem_rows, TRUE);
  g_array_set_size(r->loss, 0);
  cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(root, "loss")) {
    double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    g_array_append_val(r->loss, v);
  }
  cJSON_Delete(root);
  return TRUE;
}
