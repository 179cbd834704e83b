/* cmd_validate.c — `dlsim validate`: run a fixed set of configurations in the real flavour
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

#include "cli/cmds.h"
#include "study/compare.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"

typedef struct {
  const char *workload; /* a name under workloads/ */
  int gpus;             /* data-parallel ranks */
  long batch;           /* global batch */
  gboolean quick;       /* also in --quick */
} val_config;

/* Data parallel on 1, 2 and 4 ranks over two models and a few batches (the issue's item 4).
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

typedef struct {
  gboolean quick, all_ranks, list;
  int repeats, iters;
  char *platform, *kernels, *out, *reference;
} val_opts;

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
  char *out = NULL, *err = NULL;
  int ws = 0;
  GError *e = NULL;
  gboolean ok = g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             &err, &ws, &e);
  *status = 1;
  if (!ok) {
    *why = g_strdup(e->message);
    g_error_free(e);
  } else if (!g_spawn_check_wait_status(ws, NULL)) {
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
    char **lines = g_strsplit(err ? err : "", "\n", -1);
    char *last = NULL;
    for (int i = 0; lines[i]; i++)
      if (*g_strstrip(lines[i])) last = lines[i];
    *why = g_strdup(last ? last : "(no message)");
    g_strfreev(lines);
    ok = FALSE;
  } else {
    *status = 0;
  }
  g_free(out);
  g_free(err);
  g_ptr_array_free(argv, TRUE);
  return ok;
}

static int cmp_dbl(const void *a, const void *b) {
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

static char *rows_json(const cmp_row *rows, int n, const val_opts *o, const char *platform,
                       const char *kernels) {
  GString *s = g_string_new("{\n");
  double mean, mx;
  int used;
  cmp_table_stats(rows, n, &mean, &mx, &used);
  g_string_append_printf(s, "  \"dlsim_version\": \"%s\",\n  \"reference\": \"%s\",\n"
                            "  \"platform\": \"%s\",\n  \"kernels\": \"%s\",\n"
                            "  \"repeats\": %d,\n  \"iters\": %d,\n  \"cores\": %d,\n"
                            "  \"mean_abs_error\": %.6g,\n  \"max_abs_error\": %.6g,\n"
                            "  \"configurations_used\": %d,\n  \"rows\": [\n",
                         DL_VERSION, o->reference, platform, kernels ? kernels : "roofline",
                         o->repeats, o->iters, (int)g_get_num_processors(), mean, mx, used);
  for (int i = 0; i < n; i++) {
    const cmp_row *r = &rows[i];
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

int cmd_validate(int argc, char **argv) {
  val_opts o = {FALSE, FALSE, FALSE, 3, 5, NULL, NULL, NULL, NULL};
  GError *err = NULL;
  int status = 2;
  char *exe = NULL, *platform = NULL, *kernels = NULL, *runs = NULL;
  GArray *rows = g_array_new(FALSE, TRUE, sizeof(cmp_row));
  GPtrArray *sel = g_ptr_array_new(); /* const val_config * */
  GOptionEntry entries[] = {
      {"quick", 0, 0, G_OPTION_ARG_NONE, &o.quick,
       "A subset (4 configurations) and quick calibration and kernel measurements", NULL},
      {"repeats", 0, 0, G_OPTION_ARG_INT, &o.repeats, "Real runs per configuration (median; 3)",
       "R"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &o.iters,
       "Iterations per run (the first is warm-up; default 5)", "K"},
      {"platform", 0, 0, G_OPTION_ARG_FILENAME, &o.platform,
       "Platform for the simulation (default: calibrate into DIR/platform.xml)", "FILE"},
      {"kernels", 0, 0, G_OPTION_ARG_FILENAME, &o.kernels,
       "Kernel database (default: kbench into DIR/kernels.json; 'roofline' for none)", "FILE"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &o.out, "Output directory (default validation-out)",
       "DIR"},
      {"all-ranks", 0, 0, G_OPTION_ARG_NONE, &o.all_ranks,
       "Also time configurations with more ranks than cores (oversubscribed)", NULL},
      {"reference", 0, 0, G_OPTION_ARG_STRING, &o.reference,
       "Flavour taken as measured: real (default), or analytic to try the pipeline", "MODE"},
      {"list", 0, 0, G_OPTION_ARG_NONE, &o.list, "Print the configurations and exit", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  GOptionContext *ctx = g_option_context_new("- real against simulated runs: the error table");
  g_option_context_set_summary(ctx,
      "Runs data parallel on 1, 2 and 4 ranks over mlp-small and cnn-small at several batches\n"
      "in the real flavour (median of --repeats runs) and in the simulated flavour (calibrated\n"
      "platform, measured kernel database), and prints per configuration: real and simulated\n"
      "iteration time, the error and its split into compute, communication, overlap and skew\n"
      "(dlsim compare), then the mean and max absolute error. Writes DIR/validate.csv,\n"
      "DIR/validate.json and every result under DIR/runs/. Progress goes to stderr.");
  g_option_context_add_main_entries(ctx, entries, NULL);
  if (!g_option_context_parse(ctx, &argc, &argv, &err)) {
    g_prefix_error(&err, "validate: ");
    goto out;
  }
  if (argc > 1) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "validate: unexpected argument '%s'", argv[1]);
    goto out;
  }
  if (!o.reference) o.reference = g_strdup("real");
  if (strcmp(o.reference, "real") != 0 && strcmp(o.reference, "analytic") != 0) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--reference: expected real or analytic, got '%s'",
                o.reference);
    goto out;
  }
  if (o.repeats < 1 || o.repeats > 100) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--repeats: expected 1..100, got %d", o.repeats);
    goto out;
  }
  if (o.iters < 2 || o.iters > 1000) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--iters: expected 2..1000, got %d", o.iters);
    goto out;
  }
  const int cores = (int)g_get_num_processors();
  for (size_t i = 0; i < G_N_ELEMENTS(configs); i++)
    if (!o.quick || configs[i].quick) g_ptr_array_add(sel, (gpointer)&configs[i]);
  if (o.list) {
    for (guint i = 0; i < sel->len; i++) {
      const val_config *c = g_ptr_array_index(sel, i);
      char *name = config_name(c);
      printf("%s%s\n", name,
             c->gpus > cores && !o.all_ranks ? "  (skipped: more ranks than cores)" : "");
      g_free(name);
    }
    status = 0;
    goto out;
  }
  if (!o.out) o.out = g_strdup("validation-out");
  runs = g_build_filename(o.out, "runs", NULL);
  if (g_mkdir_with_parents(runs, 0755) != 0) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--out %s: cannot create the directory", o.out);
    goto out;
  }
  exe = g_file_read_link("/proc/self/exe", NULL);
  if (!exe) {
    g_set_error(&err, DL_ERROR, DL_ERR_IO, "validate: cannot find this executable");
    goto out;
  }
  char iters[16], reps_s[16];
  g_snprintf(iters, sizeof iters, "%d", o.iters);
  int st;
  char *why = NULL;

  /* 1. the platform */
  if (o.platform) {
    platform = g_strdup(o.platform);
  } else {
    platform = g_build_filename(o.out, "platform.xml", NULL);
    fprintf(stderr, "validate: calibrating the network into %s\n", platform);
    /* as many hosts as the largest configuration has ranks */
    const char *args[] = {"platform", "--calibrate", "--ranks", "4", "--out", platform,
                          o.quick ? "--quick" : NULL, NULL};
    if (!run_self(exe, args, &st, &why)) {
      g_set_error(&err, DL_ERROR, st == 2 ? DL_ERR_INPUT : DL_ERR_IO,
                  "validate: calibration failed: %s", why);
      g_free(why);
      goto out;
    }
  }

  /* 2. the reference runs */
  for (guint i = 0; i < sel->len; i++) {
    const val_config *c = g_ptr_array_index(sel, i);
    cmp_row r = {0};
    r.config = config_name(c);
    r.gpus = c->gpus;
    r.sim_s = -1;
    if (c->gpus > cores && !o.all_ranks) {
      r.note = g_strdup_printf("skipped: %d ranks on %d cores would be oversubscribed "
                               "(--all-ranks to time it anyway)", c->gpus, cores);
      g_array_append_val(rows, r);
      continue;
    }
    double *t = g_new0(double, o.repeats);
    int got = 0;
    char gpus[16], batch[24];
    g_snprintf(gpus, sizeof gpus, "%d", c->gpus);
    g_snprintf(batch, sizeof batch, "%ld", c->batch);
    for (int k = 0; k < o.repeats; k++) {
      fprintf(stderr, "validate: %s: %s run %d/%d\n", r.config, o.reference, k + 1, o.repeats);
      char *file = g_strdup_printf("%s/%s.%s%d.json", runs, r.config, o.reference, k);
      const char *args[] = {"run", "--mode", o.reference, "--platform", platform, "--workload",
                            c->workload, "--gpus", gpus, "--batch", batch, "--iters", iters,
                            "--out", file, NULL};
      if (!run_self(exe, args, &st, &why)) {
        g_free(file);
        if (got == 0 && st == 2 && strstr(why, "--mode")) {
          g_set_error(&err, DL_ERROR, DL_ERR_INPUT,
                      "validate: the real flavour is not available in this build (dlsim run "
                      "--mode %s said: %s)", o.reference, why);
          g_free(why);
          g_free(t);
          cmp_row_release(&r);
          goto out;
        }
        g_free(r.note);
        r.note = g_strdup_printf("%s run failed: %s", o.reference, why);
        g_free(why);
        continue;
      }
      cmp_doc *d = cmp_doc_load(file, &err);
      g_free(file);
      if (!d) goto out;
      t[got++] = d->iteration_time_s;
      cmp_doc_free(d);
    }
    if (got > 0) {
      qsort(t, (size_t)got, sizeof *t, cmp_dbl);
      r.repeats = got;
      r.real_s = t[(got - 1) / 2]; /* lower median: the time of an actual run */
      r.real_min_s = t[0];
      r.real_max_s = t[got - 1];
    }
    g_free(t);
    g_array_append_val(rows, r);
  }

  /* 3. the kernel database */
  if (o.kernels && strcmp(o.kernels, "roofline") != 0) {
    kernels = g_strdup(o.kernels);
  } else if (!o.kernels) {
    GPtrArray *dbs = g_ptr_array_new_with_free_func(g_free);
    g_snprintf(reps_s, sizeof reps_s, "%d", o.quick ? 15 : 50);
    for (guint i = 0; i < sel->len; i++) {
      const val_config *c = g_ptr_array_index(sel, i);
      if (g_array_index(rows, cmp_row, i).repeats == 0) continue;
      char gpus[16], batch[24];
      g_snprintf(gpus, sizeof gpus, "%d", c->gpus);
      g_snprintf(batch, sizeof batch, "%ld", c->batch);
      char *file = g_strdup_printf("%s/kbench-%s.json", runs, g_array_index(rows, cmp_row, i).config);
      fprintf(stderr, "validate: measuring the kernels of %s\n",
              g_array_index(rows, cmp_row, i).config);
      const char *args[] = {"kbench", "--workload", c->workload, "--gpus", gpus, "--batch", batch,
                            "--repeats", reps_s, "--out", file, NULL};
      if (!run_self(exe, args, &st, &why)) {
        g_set_error(&err, DL_ERROR, st == 2 ? DL_ERR_INPUT : DL_ERR_IO,
                    "validate: kbench for %s failed: %s", g_array_index(rows, cmp_row, i).config,
                    why);
        g_free(why);
        g_free(file);
        g_ptr_array_free(dbs, TRUE);
        goto out;
      }
      g_ptr_array_add(dbs, file);
    }
    if (dbs->len) {
      kernels = g_build_filename(o.out, "kernels.json", NULL);
      if (!merge_kdbs(dbs, kernels, &err)) {
        g_ptr_array_free(dbs, TRUE);
        goto out;
      }
    }
    g_ptr_array_free(dbs, TRUE);
  }

  /* 4. the simulations */
  for (guint i = 0; i < sel->len; i++) {
    const val_config *c = g_ptr_array_index(sel, i);
    cmp_row *r = &g_array_index(rows, cmp_row, i);
    if (r->repeats == 0) continue;
    char gpus[16], batch[24];
    g_snprintf(gpus, sizeof gpus, "%d", c->gpus);
    g_snprintf(batch, sizeof batch, "%ld", c->batch);
    char *file = g_strdup_printf("%s/%s.sim.json", runs, r->config);
    fprintf(stderr, "validate: %s: simulating\n", r->config);
    const char *args[] = {"run", "--mode", "sim", "--platform", platform, "--workload",
                          c->workload, "--gpus", gpus, "--batch", batch, "--iters", iters,
                          "--out", file, kernels ? "--kernels" : NULL, kernels, NULL};
    if (!run_self(exe, args, &st, &why)) {
      g_free(r->note);
      r->note = g_strdup_printf("simulation failed: %s", why);
      g_free(why);
      g_free(file);
      continue;
    }
    /* the split compares the simulation with the median reference run */
    cmp_doc *sim = cmp_doc_load(file, &err), *ref = NULL;
    g_free(file);
    if (!sim) goto out;
    for (int k = 0; k < o.repeats && !ref; k++) {
      char *f = g_strdup_printf("%s/%s.%s%d.json", runs, r->config, o.reference, k);
      cmp_doc *d = g_file_test(f, G_FILE_TEST_EXISTS) ? cmp_doc_load(f, NULL) : NULL;
      g_free(f);
      if (d && d->iteration_time_s == r->real_s) ref = d;
      else cmp_doc_free(d);
    }
    r->sim_s = sim->iteration_time_s;
    if (ref) cmp_split_error(ref, sim, &r->split);
    cmp_doc_free(ref);
    cmp_doc_free(sim);
  }

  /* 5. the table */
  fprintf(stdout, "dlsim validate: %s (median of %d) against sim on %s, kernels %s; %d cores\n",
          o.reference, o.repeats, platform, kernels ? kernels : "roofline", cores);
  cmp_table_print((cmp_row *)rows->data, (int)rows->len, stdout);
  char *csv = cmp_table_csv((cmp_row *)rows->data, (int)rows->len);
  char *csv_path = g_build_filename(o.out, "validate.csv", NULL);
  char *json = rows_json((cmp_row *)rows->data, (int)rows->len, &o, platform, kernels);
  char *json_path = g_build_filename(o.out, "validate.json", NULL);
  gboolean w = dl_write_file_atomic(csv_path, csv, strlen(csv), &err) &&
               dl_write_file_atomic(json_path, json, strlen(json), &err);
  if (w) fprintf(stdout, "written: %s, %s\n", csv_path, json_path);
  g_free(csv);
  g_free(csv_path);
  g_free(json);
  g_free(json_path);
  if (!w) goto out;
  int used = 0;
  cmp_table_stats((cmp_row *)rows->data, (int)rows->len, NULL, NULL, &used);
  status = used > 0 ? 0 : 1;
out:
  if (err) {
    fprintf(stderr, "dlsim: %s\n", err->message);
    status = err->code == DL_ERR_INPUT ? 2 : 1;
    g_error_free(err);
  }
  for (guint i = 0; i < rows->len; i++) cmp_row_release(&g_array_index(rows, cmp_row, i));
  g_array_free(rows, TRUE);
  g_ptr_array_free(sel, TRUE);
  g_option_context_free(ctx);
  g_free(exe);
  g_free(platform);
  g_free(kernels);
  g_free(runs);
  g_free(o.platform);
  g_free(o.kernels);
  g_free(o.out);
  g_free(o.reference);
  return status;
}
