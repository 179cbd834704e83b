/* validate.c — `dlsim validate`: run a fixed set of configurations in the real flavour
 * (median of repeats) and in the simulated flavour (calibrated platform, measured kernel
 * database), print the error per configuration with its split (compare.h), the mean and max
 * absolute error, and write validate.csv and validate.json into the output directory.
 *
 * Steps (progress on stderr): 1. the platform: --platform, else `dlsim platform --calibrate`
 * into DIR/platform.xml; 2. the reference runs: `dlsim run --mode real` R times per
 * configuration; 3. the kernel database: --kernels, else `dlsim kbench` for each configuration,
 * merged into DIR/kernels.json; 4. `dlsim run --mode sim` once per configuration; 5. the table.
 * Every step is this executable run as a child (/proc/self/exe), so each is also a command a
 * user can repeat by hand; the result files stay in DIR/runs/.
 */
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "study/compare.h"
#include "core/child.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"
#include "study/validate.h"

typedef struct {
  const char *workload; /* a name under workloads/ */
  int gpus;             /* data-parallel ranks */
  long batch;           /* global batch */
  gboolean quick;       /* also in --quick */
} val_config;

/* Data parallel on 1, 2 and 4 ranks over two models and a few batches (the item 4).
 * cnn-small has batch normalization; under data parallelism each rank normalizes its own
 * samples in both flavours, so the timings compare like for like. */
static const val_config configs[] = {
    {"mlp-small", 1, 64, FALSE},   {"mlp-small", 1, 256, TRUE},   {"mlp-small", 1, 1024, FALSE},
    {"mlp-small", 2, 64, FALSE},   {"mlp-small", 2, 256, TRUE},   {"mlp-small", 2, 1024, FALSE},
    {"mlp-small", 4, 256, FALSE},  {"mlp-small", 4, 1024, FALSE},
    {"cnn-small", 1, 32, FALSE},   {"cnn-small", 1, 64, TRUE},    {"cnn-small", 1, 128, FALSE},
    {"cnn-small", 2, 32, FALSE},   {"cnn-small", 2, 64, TRUE},    {"cnn-small", 2, 128, FALSE},
    {"cnn-small", 4, 64, FALSE},   {"cnn-small", 4, 128, FALSE},
};

static char *config_name(const val_config *c) {
  return g_strdup_printf("dp%d-%s-b%ld", c->gpus, c->workload, c->batch);
}

/* Runs this executable with `args` (NULL-terminated). TRUE on exit 0. On failure *why gets the
 * last line of its standard error (newly allocated) and *status its exit status. */
static gboolean run_self(const char *exe, const char *const *args, int *status, char **why) {
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)exe);
  for (int i = 0; args[i]; i++) g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  char *err = NULL;
  int ws = 0;
  GError *e = NULL;
  gboolean ok = dl_child_run((const char *const *)argv->pdata, NULL, &err, &ws, &e);
  *status = 1;
  if (!ok) {
    *why = g_strdup(e->message);
    g_error_free(e);
  } else if (!g_spawn_check_wait_status(ws, NULL)) {
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
    *why = dl_last_line(err);
    ok = FALSE;
  } else {
    *status = 0;
  }
  g_free(err);
  g_ptr_array_free(argv, TRUE);
  return ok;
}

static int compare_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Merges the kernel databases at `paths` into one file `out` (the first one's provenance). */
static gboolean merge_kdbs(GPtrArray *paths, const char *out, GError **err) {
  kdb *db = kdb_load(g_ptr_array_index(paths, 0), err);
  if (!db) return FALSE;
  for (guint i = 1; i < paths->len; i++) {
    kdb *more = kdb_load(g_ptr_array_index(paths, i), err);
    if (!more) {
      kdb_free(db);
      return FALSE;
    }
    for (int k = 0; k < kdb_n_entries(more); k++) kdb_add(db, kdb_entry_at(more, k));
    kdb_free(more);
  }
  char *json = kdb_to_json(db);
  gboolean ok = dl_write_file_atomic(out, json, strlen(json), err);
  g_free(json);
  kdb_free(db);
  return ok;
}

static char *rows_json(const compare_row *rows, int n, const val_opts *o, const char *platform,
                       const char *kernels) {
  GString *s = g_string_new("{\n");
  double mean, mx;
  int used;
  compare_table_stats(rows, n, &mean, &mx, &used);
  g_string_append_printf(s, "  \"dlsim_version\": \"%s\",\n  \"reference\": \"%s\",\n"
                            "  \"platform\": \"%s\",\n  \"kernels\": \"%s\",\n"
                            "  \"repeats\": %d,\n  \"iters\": %d,\n  \"cores\": %d,\n"
                            "  \"mean_abs_error\": %.6g,\n  \"max_abs_error\": %.6g,\n"
                            "  \"configurations_used\": %d,\n  \"rows\": [\n",
                         DL_VERSION, o->reference, platform, kernels ? kernels : "roofline",
                         o->repeats, o->iters, (int)g_get_num_processors(), mean, mx, used);
  for (int i = 0; i < n; i++) {
    const compare_row *r = &rows[i];
    g_string_append_printf(s,
        "    {\"config\": \"%s\", \"gpus\": %d, \"repeats\": %d, \"real_s\": %.9g, "
        "\"real_min_s\": %.9g, \"real_max_s\": %.9g, \"sim_s\": %.9g, \"error\": %.6g, "
        "\"err_compute\": %.6g, \"err_comm\": %.6g, \"err_overlap\": %.6g, \"err_skew\": %.6g, "
        "\"note\": \"%s\"}%s\n",
        r->config, r->gpus, r->repeats, r->real_s, r->real_min_s, r->real_max_s, r->sim_s,
        r->split.total, r->split.compute, r->split.comm, r->split.overlap, r->split.skew,
        r->note ? r->note : "", i + 1 < n ? "," : "");
  }
  g_string_append(s, "  ]\n}\n");
  return g_string_free(s, FALSE);
}

/* One validation under way. */
typedef struct {
  const val_opts *o;
  char *exe;          /* this executable: every step runs it as a child */
  char *runs;         /* DIR/runs */
  char *platform;     /* the platform the simulations run on */
  char *kernels;      /* the kernel database they use, NULL for the roofline */
  GPtrArray *sel;     /* const val_config *: the configurations of this run */
  GArray *rows;       /* compare_row, one per selected configuration */
  int cores;
} val_state;

/* "--gpus" and "--batch" values of a configuration. */
typedef struct {
  char gpus[16], batch[24];
} val_args;

static val_args args_of(const val_config *c) {
  val_args a;
  g_snprintf(a.gpus, sizeof a.gpus, "%d", c->gpus);
  g_snprintf(a.batch, sizeof a.batch, "%ld", c->batch);
  return a;
}

/* 1. The platform: given, or calibrated on this machine. */
static gboolean step_platform(val_state *v, GError **err) {
  if (v->o->platform) {
    v->platform = g_strdup(v->o->platform);
    return TRUE;
  }
  v->platform = g_build_filename(v->o->out, "platform.xml", NULL);
  fprintf(stderr, "validate: calibrating the network into %s\n", v->platform);
  /* as many hosts as the largest configuration has ranks */
  const char *args[] = {"platform", "--calibrate", "--ranks", "4", "--out", v->platform,
                        v->o->quick ? "--quick" : NULL, NULL};
  int st;
  char *why = NULL;
  if (run_self(v->exe, args, &st, &why)) return TRUE;
  g_set_error(err, DL_ERROR, st == 2 ? DL_ERR_INPUT : DL_ERR_IO,
              "validate: calibration failed: %s", why);
  g_free(why);
  return FALSE;
}

/* The reference runs of one configuration into row `r`: the lower median of the repeats. */
static gboolean reference_runs(val_state *v, const val_config *c, compare_row *r, GError **err) {
  const val_opts *o = v->o;
  double *t = g_new0(double, o->repeats);
  int got = 0, st;
  char iters[16], *why = NULL;
  g_snprintf(iters, sizeof iters, "%d", o->iters);
  val_args a = args_of(c);
  gboolean ok = TRUE;
  for (int k = 0; k < o->repeats && ok; k++) {
    fprintf(stderr, "validate: %s: %s run %d/%d\n", r->config, o->reference, k + 1, o->repeats);
    char *file = g_strdup_printf("%s/%s.%s%d.json", v->runs, r->config, o->reference, k);
    const char *args[] = {"run", "--mode", o->reference, "--platform", v->platform, "--workload",
                          c->workload, "--gpus", a.gpus, "--batch", a.batch, "--iters", iters,
                          "--out", file, NULL};
    if (!run_self(v->exe, args, &st, &why)) {
      if (got == 0 && st == 2 && strstr(why, "--mode")) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                    "validate: the real flavour is not available in this build (dlsim run "
                    "--mode %s said: %s)", o->reference, why);
        ok = FALSE;
      } else {
        g_free(r->note);
        r->note = g_strdup_printf("%s run failed: %s", o->reference, why);
      }
      g_free(why);
    } else {
      compare_doc *d = compare_doc_load(file, err);
      if (d) t[got++] = d->iteration_time_s;
      else ok = FALSE;
      compare_doc_free(d);
    }
    g_free(file);
  }
  if (ok && got > 0) {
    qsort(t, (size_t)got, sizeof *t, compare_dbl);
    r->repeats = got;
    r->real_s = t[(got - 1) / 2]; /* lower median: the time of an actual run */
    r->real_min_s = t[0];
    r->real_max_s = t[got - 1];
  }
  g_free(t);
  return ok;
}

/* 2. The reference runs of every configuration (those with more ranks than cores are skipped
 * unless asked for: oversubscribed timings say nothing). */
static gboolean step_references(val_state *v, GError **err) {
  for (guint i = 0; i < v->sel->len; i++) {
    const val_config *c = g_ptr_array_index(v->sel, i);
    compare_row r = {0};
    r.config = config_name(c);
    r.gpus = c->gpus;
    r.sim_s = -1;
    if (c->gpus > v->cores && !v->o->all_ranks) {
      r.note = g_strdup_printf("skipped: %d ranks on %d cores would be oversubscribed "
                               "(--all-ranks to time it anyway)", c->gpus, v->cores);
    } else if (!reference_runs(v, c, &r, err)) {
      compare_row_release(&r);
      return FALSE;
    }
    g_array_append_val(v->rows, r);
  }
  return TRUE;
}

/* 3. The kernel database: given, none, or measured for the configurations that ran. */
static gboolean step_kernels(val_state *v, GError **err) {
  const val_opts *o = v->o;
  if (o->kernels) {
    v->kernels = strcmp(o->kernels, "roofline") != 0 ? g_strdup(o->kernels) : NULL;
    return TRUE;
  }
  GPtrArray *dbs = g_ptr_array_new_with_free_func(g_free);
  char reps[16];
  g_snprintf(reps, sizeof reps, "%d", o->quick ? 15 : 50);
  gboolean ok = TRUE;
  for (guint i = 0; i < v->sel->len && ok; i++) {
    const val_config *c = g_ptr_array_index(v->sel, i);
    const compare_row *r = &g_array_index(v->rows, compare_row, i);
    if (r->repeats == 0) continue;
    val_args a = args_of(c);
    char *file = g_strdup_printf("%s/kbench-%s.json", v->runs, r->config);
    fprintf(stderr, "validate: measuring the kernels of %s\n", r->config);
    const char *args[] = {"kbench", "--workload", c->workload, "--gpus", a.gpus, "--batch",
                          a.batch, "--repeats", reps, "--out", file, NULL};
    int st;
    char *why = NULL;
    if (!run_self(v->exe, args, &st, &why)) {
      g_set_error(err, DL_ERROR, st == 2 ? DL_ERR_INPUT : DL_ERR_IO,
                  "validate: kbench for %s failed: %s", r->config, why);
      g_free(why);
      g_free(file);
      ok = FALSE;
    } else {
      g_ptr_array_add(dbs, file);
    }
  }
  if (ok && dbs->len) {
    v->kernels = g_build_filename(o->out, "kernels.json", NULL);
    ok = merge_kdbs(dbs, v->kernels, err);
  }
  g_ptr_array_free(dbs, TRUE);
  return ok;
}

/* The reference run whose time is the row's median, NULL if none. */
static compare_doc *median_reference(const val_state *v, const compare_row *r) {
  for (int k = 0; k < v->o->repeats; k++) {
    char *f = g_strdup_printf("%s/%s.%s%d.json", v->runs, r->config, v->o->reference, k);
    compare_doc *d = g_file_test(f, G_FILE_TEST_EXISTS) ? compare_doc_load(f, NULL) : NULL;
    g_free(f);
    if (d && d->iteration_time_s == r->real_s) return d;
    compare_doc_free(d);
  }
  return NULL;
}

/* 4. One simulation per configuration that ran, and its error split against the median run. */
static gboolean step_simulations(val_state *v, GError **err) {
  char iters[16];
  g_snprintf(iters, sizeof iters, "%d", v->o->iters);
  for (guint i = 0; i < v->sel->len; i++) {
    const val_config *c = g_ptr_array_index(v->sel, i);
    compare_row *r = &g_array_index(v->rows, compare_row, i);
    if (r->repeats == 0) continue;
    val_args a = args_of(c);
    char *file = g_strdup_printf("%s/%s.sim.json", v->runs, r->config);
    fprintf(stderr, "validate: %s: simulating\n", r->config);
    const char *args[] = {"run", "--mode", "sim", "--platform", v->platform, "--workload",
                          c->workload, "--gpus", a.gpus, "--batch", a.batch, "--iters", iters,
                          "--out", file, "--kernels", v->kernels ? v->kernels : "roofline",
                          NULL}; /* no --kernels would pick the GPU's default database */
    int st;
    char *why = NULL;
    if (!run_self(v->exe, args, &st, &why)) {
      g_free(r->note);
      r->note = g_strdup_printf("simulation failed: %s", why);
      g_free(why);
      g_free(file);
      continue;
    }
    compare_doc *sim = compare_doc_load(file, err);
    g_free(file);
    if (!sim) return FALSE;
    compare_doc *ref = median_reference(v, r);
    r->sim_s = sim->iteration_time_s;
    if (ref) compare_split_error(ref, sim, &r->split);
    compare_doc_free(ref);
    compare_doc_free(sim);
  }
  return TRUE;
}

/* 5. The table, and DIR/validate.csv and DIR/validate.json. */
static gboolean step_report(val_state *v, GError **err) {
  const compare_row *rows = (const compare_row *)v->rows->data;
  const int n = (int)v->rows->len;
  fprintf(stdout, "dlsim validate: %s (median of %d) against sim on %s, kernels %s; %d cores\n",
          v->o->reference, v->o->repeats, v->platform, v->kernels ? v->kernels : "roofline",
          v->cores);
  compare_table_print(rows, n, stdout);
  char *csv = compare_table_csv(rows, n);
  char *csv_path = g_build_filename(v->o->out, "validate.csv", NULL);
  char *json = rows_json(rows, n, v->o, v->platform, v->kernels);
  char *json_path = g_build_filename(v->o->out, "validate.json", NULL);
  gboolean w = dl_write_file_atomic(csv_path, csv, strlen(csv), err) &&
               dl_write_file_atomic(json_path, json, strlen(json), err);
  if (w) fprintf(stdout, "written: %s, %s\n", csv_path, json_path);
  g_free(csv);
  g_free(csv_path);
  g_free(json);
  g_free(json_path);
  return w;
}

int validate_run(const val_opts *o, GError **err) {
  val_state v = {o, NULL, NULL, NULL, NULL, g_ptr_array_new(),
                 g_array_new(FALSE, TRUE, sizeof(compare_row)), (int)g_get_num_processors()};
  int status = 1;
  for (size_t i = 0; i < G_N_ELEMENTS(configs); i++)
    if (!o->quick || configs[i].quick) g_ptr_array_add(v.sel, (gpointer)&configs[i]);
  if (o->list) {
    for (guint i = 0; i < v.sel->len; i++) {
      const val_config *c = g_ptr_array_index(v.sel, i);
      char *name = config_name(c);
      printf("%s%s\n", name,
             c->gpus > v.cores && !o->all_ranks ? "  (skipped: more ranks than cores)" : "");
      g_free(name);
    }
    status = 0;
    goto out;
  }
  v.runs = g_build_filename(o->out, "runs", NULL);
  if (g_mkdir_with_parents(v.runs, 0755) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out %s: cannot create the directory", o->out);
    goto out;
  }
  if (!(v.exe = g_file_read_link("/proc/self/exe", NULL))) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "validate: cannot find this executable");
    goto out;
  }
  if (!step_platform(&v, err) || !step_references(&v, err) || !step_kernels(&v, err) ||
      !step_simulations(&v, err) || !step_report(&v, err))
    goto out;
  int used = 0;
  compare_table_stats((const compare_row *)v.rows->data, (int)v.rows->len, NULL, NULL, &used);
  status = used > 0 ? 0 : 1;
out:
  for (guint i = 0; i < v.rows->len; i++)
    compare_row_release(&g_array_index(v.rows, compare_row, i));
  g_array_free(v.rows, TRUE);
  g_ptr_array_free(v.sel, TRUE);
  g_free(v.exe);
  g_free(v.platform);
  g_free(v.kernels);
  g_free(v.runs);
  return status;
}
