/* compare.c — loading result documents and attributing their difference (compare.h). */
#include "study/compare.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/config.h"
#include "core/dl_common.h"

static const char *const phase_names[] = {
#define COMPARE_X(e, key) key,
    COMPARE_PHASE_LIST(COMPARE_X)
#undef COMPARE_X
};

void compare_doc_free(compare_doc *d) {
  if (!d) return;
  if (d->colls) {
    for (guint i = 0; i < d->colls->len; i++) g_free(g_array_index(d->colls, compare_coll, i).key);
    g_array_free(d->colls, TRUE);
  }
  if (d->rank_iter_s) g_array_free(d->rank_iter_s, TRUE);
  if (d->rank_compute_s) g_array_free(d->rank_compute_s, TRUE);
  g_free(d->path);
  g_free(d->mode);
  g_free(d->workload);
  g_free(d);
}

/* Number at `key` of object `o` (JSON path `where`); FALSE with a message when absent or not a
 * non-negative finite number, unless `optional` (then *out keeps its value). */
static gboolean get_num(const cJSON *o, const char *key, const char *path, const char *where,
                        gboolean optional, double *out, GError **err) {
  const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  if (!v && optional) return TRUE;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s%s%s: expected a number >= 0%s", path,
                where ? where : "", where ? "." : "", key, v ? "" : ", got nothing");
    return FALSE;
  }
  *out = v->valuedouble;
  return TRUE;
}

static const char *get_str(const cJSON *o, const char *key) {
  const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

compare_doc *compare_doc_parse(const char *path, const char *text, GError **err) {
  compare_doc *d = g_new0(compare_doc, 1);
  d->path = g_strdup(path);
  d->colls = g_array_new(FALSE, FALSE, sizeof(compare_coll));
  d->rank_iter_s = g_array_new(FALSE, FALSE, sizeof(double));
  d->rank_compute_s = g_array_new(FALSE, FALSE, sizeof(double));
  cJSON *root = dl_json_parse(path, text, strlen(text), err);
  gboolean ok = FALSE;
  if (!root) goto out;
  if (!cJSON_IsObject(root)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected a JSON object (a dlsim result)", path);
    goto out;
  }
  const char *mode = get_str(root, "mode");
  cfg_mode known;
  if (!mode || !cfg_mode_parse(mode, &known)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: mode: expected sim, analytic or real (a dlsim "
                "result), got %s", path, mode ? mode : "nothing");
    goto out;
  }
  d->mode = g_strdup(mode);
  const cJSON *cf = cJSON_GetObjectItemCaseSensitive(root, "config");
  if (!cJSON_IsObject(cf)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config: expected an object (a dlsim result)",
                path);
    goto out;
  }
  const char *wl = get_str(cf, "workload");
  if (!wl) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.workload: expected a string", path);
    goto out;
  }
  d->workload = g_strdup(wl);
  double gpus = 0, dp = 1, tp = 1, pp = 1;
  if (!get_num(cf, "gpus", path, "config", FALSE, &gpus, err) ||
      !get_num(cf, "batch", path, "config", FALSE, &d->batch, err) ||
      !get_num(cf, "dp", path, "config", TRUE, &dp, err) ||
      !get_num(cf, "tp", path, "config", TRUE, &tp, err) ||
      !get_num(cf, "pp", path, "config", TRUE, &pp, err) ||
      !get_num(root, "iteration_time_s", path, NULL, FALSE, &d->iteration_time_s, err))
    goto out;
  if (!(d->iteration_time_s > 0 && d->iteration_time_s <= 1e9)) { /* a run's own results */
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: iteration_time_s: expected a time in (0, 1e9] "
                "s, got %g", path, d->iteration_time_s);
    goto out;
  }
  d->gpus = (int)gpus;
  d->dp = (int)dp;
  d->tp = (int)tp;
  d->pp = (int)pp;
  const cJSON *bd = cJSON_GetObjectItemCaseSensitive(root, "breakdown_s");
  if (!cJSON_IsObject(bd)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: breakdown_s: expected an object", path);
    goto out;
  }
  for (int p = 0; p < COMPARE_N_PHASES; p++)
    if (!get_num(bd, phase_names[p], path, "breakdown_s", FALSE, &d->phase_s[p], err)) goto out;
  d->comm_s = d->phase_s[COMPARE_EXPOSED_COMM] + d->phase_s[COMPARE_OVERLAPPED_COMM];
  if (!get_num(root, "comm_s", path, NULL, TRUE, &d->comm_s, err)) goto out;

  const cJSON *co = cJSON_GetObjectItemCaseSensitive(root, "collectives");
  if (co && !cJSON_IsArray(co)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: collectives: expected an array", path);
    goto out;
  }
  int i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, co) {
    char where[64];
    g_snprintf(where, sizeof where, "collectives[%d]", i++);
    const char *op = get_str(x, "op"), *group = get_str(x, "group"),
               *purpose = get_str(x, "purpose");
    if (!op || !group || !purpose) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s.%s: expected a string", path, where,
                  !op ? "op" : !group ? "group" : "purpose");
      goto out;
    }
    double t = 0, calls = 0;
    if (!get_num(x, "time_s", path, where, FALSE, &t, err) ||
        !get_num(x, "calls", path, where, TRUE, &calls, err))
      goto out;
    char *key = g_strdup_printf("%s/%s/%s", op, group, purpose);
    compare_coll *hit = NULL;
    for (guint k = 0; k < d->colls->len && !hit; k++)
      if (strcmp(g_array_index(d->colls, compare_coll, k).key, key) == 0)
        hit = &g_array_index(d->colls, compare_coll, k);
    if (hit) {
      hit->time_s += t;
      hit->calls += (int)calls;
      g_free(key);
    } else {
      compare_coll c = {key, (int)calls, t};
      g_array_append_val(d->colls, c);
    }
  }
  const cJSON *rk = cJSON_GetObjectItemCaseSensitive(root, "ranks");
  if (!cJSON_IsArray(rk)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: ranks: expected an array (a dlsim result), "
                "got %s", path, rk ? "another value" : "nothing");
    goto out;
  }
  i = 0;
  cJSON_ArrayForEach(x, rk) {
    char where[64];
    g_snprintf(where, sizeof where, "ranks[%d]", i++);
    double t = 0, c = 0;
    if (!get_num(x, "iteration_time_s", path, where, FALSE, &t, err) ||
        !get_num(x, "compute_s", path, where, FALSE, &c, err))
      goto out;
    g_array_append_val(d->rank_iter_s, t);
    g_array_append_val(d->rank_compute_s, c);
  }
  ok = TRUE;
out:
  cJSON_Delete(root);
  if (!ok) {
    compare_doc_free(d);
    d = NULL;
  }
  return d;
}

compare_doc *compare_doc_load(const char *path, GError **err) {
  char *text = dl_read_file(path, NULL, err);
  if (!text) return NULL;
  compare_doc *d = compare_doc_parse(path, text, err);
  g_free(text);
  return d;
}

gboolean compare_check_match(const compare_doc *a, const compare_doc *b, GError **err) {
  if (strcmp(a->workload, b->workload) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.workload: expected %s (as in %s), got %s",
                b->path, a->workload, a->path, b->workload);
    return FALSE;
  }
  const struct { const char *key; double va, vb; } f[] = {
      {"gpus", a->gpus, b->gpus}, {"batch", a->batch, b->batch}, {"dp", a->dp, b->dp},
      {"tp", a->tp, b->tp},       {"pp", a->pp, b->pp},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(f); i++)
    if (f[i].va != f[i].vb) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.%s: expected %g (as in %s), got %g",
                  b->path, f[i].key, f[i].va, a->path, f[i].vb);
      return FALSE;
    }
  return TRUE;
}

void compare_split_error(const compare_doc *a, const compare_doc *b, compare_split *out) {
  memset(out, 0, sizeof *out);
  double T = a->iteration_time_s;
  if (!(T > 0)) return;
  out->total = (b->iteration_time_s - T) / T;
  out->compute = (b->phase_s[COMPARE_COMPUTE] - a->phase_s[COMPARE_COMPUTE]) / T;
  out->comm = (b->comm_s - a->comm_s) / T;
  out->overlap = -(b->phase_s[COMPARE_OVERLAPPED_COMM] - a->phase_s[COMPARE_OVERLAPPED_COMM]) / T;
  out->skew = out->total - out->compute - out->comm - out->overlap;
  /* + 0.0 turns a negative zero into zero, so tables never print "-0" */
  out->total += 0.0;
  out->compute += 0.0;
  out->comm += 0.0;
  out->overlap += 0.0;
  out->skew += 0.0;
}

static double spread(const GArray *v) {
  if (!v || v->len < 2) return 0;
  double lo = INFINITY, hi = -INFINITY;
  for (guint i = 0; i < v->len; i++) {
    double x = g_array_index(v, double, i);
    lo = MIN(lo, x);
    hi = MAX(hi, x);
  }
  return hi - lo;
}

double compare_rank_spread_s(const compare_doc *d) { return spread(d->rank_iter_s); }

static void row(FILE *out, const char *name, double a, double b, double dT) {
  fprintf(out, "  %-34s %12.4f %12.4f %+12.4f", name, a * 1e3, b * 1e3, (b - a) * 1e3);
  if (dT != 0) fprintf(out, " %+8.1f%%\n", 100 * (b - a) / dT);
  else fprintf(out, " %9s\n", "-");
}

static double coll_time(const compare_doc *d, const char *key) {
  for (guint i = 0; i < d->colls->len; i++)
    if (strcmp(g_array_index(d->colls, compare_coll, i).key, key) == 0)
      return g_array_index(d->colls, compare_coll, i).time_s;
  return 0;
}

void compare_print(const compare_doc *a, const compare_doc *b, FILE *out) {
  double dT = b->iteration_time_s - a->iteration_time_s;
  fprintf(out, "A: %s (%s)\nB: %s (%s)\n%s, %d GPUs, batch %g, dp %d tp %d pp %d\n", a->path,
          a->mode, b->path, b->mode, a->workload, a->gpus, a->batch, a->dp, a->tp, a->pp);
  fprintf(out, "\n  %-34s %12s %12s %12s %9s\n", "per iteration", "A (ms)", "B (ms)", "B-A (ms)",
          "share");
  row(out, "iteration time", a->iteration_time_s, b->iteration_time_s, dT);
  for (int p = 0; p < COMPARE_N_PHASES; p++) {
    if (p == COMPARE_OVERLAPPED_COMM) continue;
    row(out, phase_names[p], a->phase_s[p], b->phase_s[p], dT);
  }
  row(out, "overlapped_comm (hidden, not in sum)", a->phase_s[COMPARE_OVERLAPPED_COMM],
      b->phase_s[COMPARE_OVERLAPPED_COMM], dT);
  row(out, "all communication", a->comm_s, b->comm_s, dT);

  compare_split s;
  compare_split_error(a, b, &s);
  fprintf(out, "\n  difference B vs A: %+.1f%% of A's iteration = compute %+.1f%%, "
               "communication %+.1f%%, overlap %+.1f%%, skew %+.1f%%\n",
          100 * s.total, 100 * s.compute, 100 * s.comm, 100 * s.overlap, 100 * s.skew);

  if (a->colls->len || b->colls->len) {
    fprintf(out, "\n  %-34s %12s %12s %12s %9s\n", "collective (op/group/purpose)", "A (ms)",
            "B (ms)", "B-A (ms)", "share");
    for (guint i = 0; i < a->colls->len; i++) {
      const compare_coll *c = &g_array_index(a->colls, compare_coll, i);
      row(out, c->key, c->time_s, coll_time(b, c->key), dT);
    }
    for (guint i = 0; i < b->colls->len; i++) {
      const compare_coll *c = &g_array_index(b->colls, compare_coll, i);
      gboolean in_a = FALSE;
      for (guint k = 0; k < a->colls->len; k++)
        if (strcmp(g_array_index(a->colls, compare_coll, k).key, c->key) == 0) in_a = TRUE;
      if (!in_a) row(out, c->key, 0, c->time_s, dT);
    }
  }
  fprintf(out, "\n  %-34s %12s %12s %12s %9s\n", "per-rank skew (max - min)", "A (ms)", "B (ms)",
          "B-A (ms)", "share");
  row(out, "iteration time", spread(a->rank_iter_s), spread(b->rank_iter_s), dT);
  row(out, "compute", spread(a->rank_compute_s), spread(b->rank_compute_s), dT);
}

/* ---- validation table -------------------------------------------------------------------------
 */

void compare_row_release(compare_row *r) {
  g_free(r->config);
  g_free(r->note);
  r->config = r->note = NULL;
}

static gboolean row_usable(const compare_row *r) {
  return r->repeats > 0 && r->real_s > 0 && r->sim_s >= 0;
}

void compare_table_stats(const compare_row *rows, int n, double *mean_abs, double *max_abs,
                         int *n_used) {
  double sum = 0, mx = 0;
  int used = 0;
  for (int i = 0; i < n; i++) {
    if (!row_usable(&rows[i])) continue;
    double e = fabs(rows[i].split.total);
    sum += e;
    mx = MAX(mx, e);
    used++;
  }
  if (mean_abs) *mean_abs = used ? sum / used : 0;
  if (max_abs) *max_abs = mx;
  if (n_used) *n_used = used;
}

void compare_table_print(const compare_row *rows, int n, FILE *out) {
  fprintf(out, "%-24s %4s %11s %11s %8s %8s %8s %8s %8s\n", "config", "reps", "real (ms)",
          "sim (ms)", "error", "compute", "comm", "overlap", "skew");
  double part_sum[4] = {0};
  for (int i = 0; i < n; i++) {
    const compare_row *r = &rows[i];
    fprintf(out, "%-24s %4d ", r->config, r->repeats);
    if (r->repeats > 0) fprintf(out, "%11.3f ", r->real_s * 1e3);
    else fprintf(out, "%11s ", "-");
    if (r->sim_s >= 0) fprintf(out, "%11.3f ", r->sim_s * 1e3);
    else fprintf(out, "%11s ", "-");
    if (row_usable(r)) {
      const compare_split *s = &r->split;
      fprintf(out, "%+7.1f%% %+7.1f%% %+7.1f%% %+7.1f%% %+7.1f%%", 100 * s->total,
              100 * s->compute, 100 * s->comm, 100 * s->overlap, 100 * s->skew);
      part_sum[0] += fabs(s->compute);
      part_sum[1] += fabs(s->comm);
      part_sum[2] += fabs(s->overlap);
      part_sum[3] += fabs(s->skew);
    }
    if (r->note) fprintf(out, "%s(%s)", row_usable(r) ? "  " : "", r->note);
    fputc('\n', out);
  }
  double mean = 0, mx = 0;
  int used = 0;
  compare_table_stats(rows, n, &mean, &mx, &used);
  if (!used) {
    fprintf(out, "no configuration has both times: no error figure\n");
    return;
  }
  static const char *const part[] = {"compute", "communication", "overlap", "skew"};
  int top = 0;
  for (int k = 1; k < 4; k++)
    if (part_sum[k] > part_sum[top]) top = k;
  fprintf(out, "mean absolute error %.1f%%, max %.1f%% (%d configurations); largest part: %s "
               "(mean |%.1f%%|)\n",
          100 * mean, 100 * mx, used, part[top], 100 * part_sum[top] / used);
}

static void csv_num(GString *s, gboolean have, double v) {
  g_string_append_c(s, ',');
  if (!have) return;
  char num[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append(s, g_ascii_formatd(num, sizeof num, "%.9g", v));
}

char *compare_table_csv(const compare_row *rows, int n) {
  GString *s = g_string_new("config,gpus,repeats,real_s,real_min_s,real_max_s,sim_s,error,"
                            "err_compute,err_comm,err_overlap,err_skew,note\n");
  for (int i = 0; i < n; i++) {
    const compare_row *r = &rows[i];
    gboolean real = r->repeats > 0, sim = r->sim_s >= 0, both = row_usable(r);
    g_string_append_printf(s, "%s,%d,%d", r->config, r->gpus, r->repeats);
    csv_num(s, real, r->real_s);
    csv_num(s, real, r->real_min_s);
    csv_num(s, real, r->real_max_s);
    csv_num(s, sim, r->sim_s);
    csv_num(s, both, r->split.total);
    csv_num(s, both, r->split.compute);
    csv_num(s, both, r->split.comm);
    csv_num(s, both, r->split.overlap);
    csv_num(s, both, r->split.skew);
    g_string_append_c(s, ',');
    if (r->note) {
      /* RFC 4180 quoting */
      g_string_append_c(s, '"');
      for (const char *p = r->note; *p; p++) {
        if (*p == '"') g_string_append_c(s, '"');
        g_string_append_c(s, *p == '\n' ? ' ' : *p);
      }
      g_string_append_c(s, '"');
    }
    g_string_append_c(s, '\n');
  }
  return g_string_free(s, FALSE);
}
