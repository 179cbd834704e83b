/* trace.c — the Chrome trace-event timeline of a run's records (rec_trace, record.h). */
#include "out/record.h"

GString *rec_trace(const rec_rank *recs, int P) {
  GString *t = g_string_new("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  for (int k = 0; k < P; k++) {
    const int r = recs[k].rank;
    g_string_append_printf(
        t, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
        k ? ",\n" : "", r, r);
    for (int s = 0; s < PLAN_N_STREAMS; s++)
      g_string_append_printf(t,
                             ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                             "\"args\":{\"name\":\"%s\"}}",
                             r, s, s == PLAN_STREAM_COMPUTE ? "compute" : "comm");
    for (int s = 0; s < PLAN_N_STREAMS; s++) {
      const GArray *sp = recs[k].spans[s];
      for (guint i = 0; i < sp->len; i++) {
        const rec_span *x = &g_array_index(sp, rec_span, i);
        const plan_op *op = &recs[k].plan->ops[x->op];
        char name[64];
        if (op->kind == PLAN_KERNEL) g_strlcpy(name, op->kname, sizeof name);
        else
          g_snprintf(name, sizeof name, "%s %s", coll_op_name(op->coll),
                     plan_group_name(op->group));
        g_string_append_printf(
            t,
            ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"iter\":%d,\"layer\":%d",
            name, plan_phase_name(op->phase), r, s, x->start * 1e6, (x->end - x->start) * 1e6,
            x->iter, op->layer);
        if (op->kind == PLAN_COLL) g_string_append_printf(t, ",\"bytes\":%.0f", op->bytes);
        g_string_append(t, "}}");
      }
    }
  }
  g_string_append(t, "\n]}\n");
  return t;
}
